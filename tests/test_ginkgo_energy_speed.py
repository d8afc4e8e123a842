"""`GinkgoEnergy.log_psi` against a frozen copy of its earlier, straightforward maths.

`GinkgoEnergy` moves every per-subset quantity into `subset_features` and evaluates few
transcendental functions per split (issue 17). `_reference_log_psi` below is the
implementation it replaced, kept verbatim as plain ``jnp`` on four-momenta: features of
every subset (summed momentum, mass squared, its square root and log, the leaf term) and
the paper's / the exact split likelihood evaluated on them elementwise. Both are evaluated
on every ordered pair of disjoint subsets of small jets -- three 6-leaf jets of the
authors' generator, two of them edited, and integer one-dimensional jets built to hit the
boundaries exactly (massless leaves and parents, ``t = t_cut``, children as heavy as their
parent, Kallen function 0, leaves above the cut, inner clusters below it) -- for both
likelihoods with and without ``lam_root``, ``ordered`` and ``phase_space``: equal to 1e-12 relative, ``-inf`` at the same splits, and
the same gradient in ``lam``.
"""

import json
import os

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxhc.trellis import GinkgoEnergy
from jaxhc.trellis.energies import all_subset_masks

N = 6  # 602 ordered pairs of disjoint non-empty subsets per jet
T_CUT = 16.0


# ------------------------------------------------------------------------------------------
# the reference: GinkgoEnergy's maths before issue 17, unchanged
# ------------------------------------------------------------------------------------------
def _kallen(a, b, c):
    return a * a + b * b + c * c - 2.0 * (a * b + a * c + b * c)


def _logaddexp_safe(a, b):
    m = jnp.maximum(a, b)
    ok = m > -jnp.inf
    a_s, b_s, m_s = (jnp.where(ok, x, 0.0) for x in (a, b, m))
    out = m_s + jnp.log(jnp.exp(a_s - m_s) + jnp.exp(b_s - m_s))
    return jnp.where(ok, out, -jnp.inf)


def _reference_features(e, leaves, masks):
    """(size, t, sqrt t, log t, leaf term, is_root) of the subsets ``masks``."""
    p = masks @ leaves
    t = jnp.maximum(p[..., 0] ** 2 - jnp.sum(p[..., 1:] ** 2, axis=-1), 0.0)
    pos = t > 0
    ts = jnp.where(pos, t, 1.0)
    size = jnp.sum(masks, axis=-1)
    is_root = size == jnp.sum(leaves[:, 0] > 0)
    lam = jnp.where(is_root, e.lam_root, e.lam) if e.separate_root else e.lam
    leaf_term = jnp.log(-jnp.expm1(-lam * e.t_cut / ts))
    return dict(size=size, t=t, sqrt_t=jnp.sqrt(t), log_t=jnp.where(pos, jnp.log(ts), 0.0), leaf_term=leaf_term,
                is_root=is_root)  # fmt: skip


def _reference_paper(e, P, L, R):
    lam = jnp.where(P["is_root"], e.lam_root, e.lam) if e.separate_root else e.lam
    tc = e.t_cut
    log_lam = jnp.log(lam)
    log_norm = -jnp.log(-jnp.expm1(-lam))
    tP, sP = P["t"], P["sqrt_t"]
    lin, rin = L["size"] > 1, R["size"] > 1
    tL, tR = jnp.where(lin, L["t"], 0.0), jnp.where(rin, R["t"], 0.0)
    l_is_max = tL >= tR
    tmax, tmin = jnp.where(l_is_max, tL, tR), jnp.where(l_is_max, tR, tL)
    smax = jnp.where(l_is_max, jnp.where(lin, L["sqrt_t"], 0.0), jnp.where(rin, R["sqrt_t"], 0.0))
    tPs = jnp.where(tP > 0, tP, 1.0)
    f1 = jnp.where(tmax > 0, log_lam - P["log_t"] - lam * tmax / tPs, P["leaf_term"])
    tP2 = (sP - smax) ** 2
    ok2 = tP2 > 0
    s2 = jnp.where(ok2, tP2, 1.0)
    f2 = jnp.where(tmin > 0, log_lam - jnp.log(s2) - lam * tmin / s2, jnp.log(-jnp.expm1(-lam * tc / s2)))
    out = 2.0 * log_norm + f1 + jnp.where(ok2, f2, -jnp.inf) - jnp.log(4 * jnp.pi)
    return jnp.where((tP < tc) | (tP <= 0), -jnp.inf, out)


def _reference_exact(e, P, L, R):
    lam = jnp.where(P["is_root"], e.lam_root, e.lam) if e.separate_root else e.lam
    tc = e.t_cut
    log_c = jnp.log(lam) - jnp.log(-jnp.expm1(-lam))
    tP, tL, tR = P["t"], L["t"], R["t"]
    okL = jnp.where(L["size"] == 1, tL <= tc, tL > tc)
    okR = jnp.where(R["size"] == 1, tR <= tc, tR > tc)
    tPs = jnp.where(tP > 0, tP, 1.0)

    def logf2(t, s):
        ok = (s > 0) & (t < s)
        s_safe = jnp.where(ok, s, 1.0)
        return jnp.where(ok, log_c - jnp.log(s_safe) - lam * t / s_safe, -jnp.inf)

    f1L = jnp.where(tL < tP, log_c - P["log_t"] - lam * tL / tPs, -jnp.inf)
    a = f1L + logf2(tR, (P["sqrt_t"] - L["sqrt_t"]) ** 2)
    if e.ordered:
        tot = a
    else:
        f1R = jnp.where(tR < tP, log_c - P["log_t"] - lam * tR / tPs, -jnp.inf)
        tot = _logaddexp_safe(a, f1R + logf2(tL, (P["sqrt_t"] - R["sqrt_t"]) ** 2))
    out = tot - jnp.log(4 * jnp.pi)
    K = _kallen(tP, tL, tR)
    if e.phase_space:
        out = out + jnp.log(8.0) + P["log_t"] - 0.5 * jnp.log(jnp.where(K > 0, K, 1.0))
    return jnp.where((tP > tc) & (K > 0) & okL & okR, out, -jnp.inf)


def _reference_log_psi(e, feats, P, L, R):
    take = lambda idx: {k: v[idx] for k, v in feats.items()}  # noqa: E731
    fn = _reference_paper if e.likelihood == "paper" else _reference_exact
    return fn(e, take(P), take(L), take(R))


# ------------------------------------------------------------------------------------------
# jets and splits
# ------------------------------------------------------------------------------------------
def _pairs(n):
    """Every ordered pair ``(L, R)`` of disjoint non-empty subsets of n elements."""
    s = np.arange(2**n)
    L, R = np.nonzero(((s[:, None] & s[None, :]) == 0) & (s[:, None] > 0) & (s[None, :] > 0))
    return L | R, L, R


def _axis_jet(rows):
    """Four-momenta ``(E, 0, 0, pz)`` from integer ``(E, pz)``: every subset's mass squared is
    an exact integer, so ties and boundaries are hit exactly."""
    rows = np.asarray(rows, np.float64)
    return np.stack([rows[:, 0], 0 * rows[:, 0], 0 * rows[:, 0], rows[:, 1]], axis=1)


def _jets():
    with open(os.path.join(os.path.dirname(__file__), "data", "ginkgo_generator_jets_6_7.json")) as f:
        random = [np.asarray(j["leaves"], np.float64) for j in json.load(f)["jets"] if len(j["leaves"]) == N]
    assert len(random) == 3  # jets of the authors' generator
    adversarial = [
        # massless leaves (t = 0), some collinear (massless and inner clusters of mass 0),
        # pairs with t = t_cut = 16 exactly (E, pz) = (5, +-3) -> 25 - 9
        _axis_jet([(1, 1), (2, 2), (5, 3), (5, -3), (3, -3), (4, 0)]),
        # identical massive leaves: Kallen function 0 at threshold (sqrt t_P = sqrt t_L + sqrt t_R),
        # children exactly as heavy as the parent with a massless sibling, leaves above t_cut
        _axis_jet([(5, 3), (5, 3), (5, 3), (1, 1), (10, 0), (3, 3)]),
        # everything massless and collinear except one leaf: parents with t_P <= 0
        _axis_jet([(1, 1), (2, 2), (3, 3), (4, 4), (6, -2), (7, 7)]),
    ]
    # a leaf with t = 16 = t_cut among random momenta; and a jet with a leaf far above the cut
    big = np.asarray(random[0]).copy()
    big[0] = [np.sqrt(16.0 + 9.0), 0.0, 0.0, 3.0]
    heavy = np.asarray(random[1]).copy()
    heavy[2, 0] = np.sqrt(np.sum(heavy[2, 1:] ** 2) + 400.0)
    return np.stack(random + adversarial + [big, heavy])


@jax.jit
def _values(e, X):
    """New and reference log psi ``[jets, pairs]`` and the gradients in ``lam`` of their
    per-jet sums over the finite splits (one compilation per configuration)."""
    P, L, R = _pairs(N)
    masks = all_subset_masks(N, X.dtype)

    def new(en, x):
        f = en.features(x)
        take = lambda idx: jax.tree_util.tree_map(lambda a: a[idx], f)  # noqa: E731
        return en.log_psi(take(P), take(L), take(R))

    def ref(en, x):
        return _reference_log_psi(en, _reference_features(en, x, masks), P, L, R)

    def finite_sum(lam, x, fn):
        lp = fn(eqx.tree_at(lambda m: m.lam, e, lam), x)
        return jnp.sum(jnp.where(jnp.isfinite(lp), lp, 0.0)), lp

    out = []
    for fn in (new, ref):
        (_, lp), g = jax.vmap(jax.value_and_grad(finite_sum, has_aux=True), (None, 0, None))(e.lam, X, fn)
        out += [lp, g]
    return out


ENERGIES = [
    GinkgoEnergy(2.0, T_CUT, "paper"),
    GinkgoEnergy(1.5, T_CUT, "paper", lam_root=3.0),
    GinkgoEnergy(2.0, T_CUT, "exact"),
    GinkgoEnergy(1.5, T_CUT, "exact", lam_root=3.0),
    GinkgoEnergy(2.0, T_CUT, "exact", ordered=True),
    GinkgoEnergy(2.0, T_CUT, "exact", phase_space=False),
    GinkgoEnergy(0.7, T_CUT, "exact", lam_root=2.5, ordered=True, phase_space=False),
]


@pytest.mark.parametrize(
    "e", ENERGIES, ids=lambda e: f"{e.likelihood}-root{e.separate_root}-ord{e.ordered}-ps{e.phase_space}"
)
def test_log_psi_equals_reference(e):
    new, g_new, ref, g_ref = (np.asarray(a) for a in _values(e, jnp.asarray(_jets())))
    assert new.shape == ref.shape == (len(_jets()), len(_pairs(N)[0]))
    assert not np.any(np.isnan(new))
    np.testing.assert_array_equal(np.isneginf(new), np.isneginf(ref))
    assert not np.any(np.isposinf(new))
    fin = np.isfinite(ref)
    # both -inf and finite splits in every configuration (the boundaries are exercised)
    assert 0.02 < fin.mean() < 0.98
    np.testing.assert_allclose(new[fin], ref[fin], rtol=1e-12, atol=1e-12)
    assert np.all(np.isfinite(g_new))
    np.testing.assert_allclose(g_new, g_ref, rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize(
    "e", ENERGIES, ids=lambda e: f"{e.likelihood}-root{e.separate_root}-ord{e.ordered}-ps{e.phase_space}"
)
def test_log_psi_parts_equal_log_psi_at_the_boundaries(e):
    # log_psi_parts (b, x) of the linear-space log Z pass on the same jets, boundary cases
    # included: b is -inf exactly where log psi is, x is positive and finite elsewhere, and
    # b + log x equals log psi
    P, L, R = _pairs(N)
    X = jnp.asarray(_jets())

    def both(x):
        f = e.features(x)
        take = lambda idx: jax.tree_util.tree_map(lambda a: a[idx], f)  # noqa: E731
        b, xp = e.log_psi_parts(take(P), take(L), take(R))
        return e.log_psi(take(P), take(L), take(R)), b, jnp.broadcast_to(xp, b.shape)

    lp, b, xp = (np.asarray(a) for a in jax.jit(jax.vmap(both))(X))
    np.testing.assert_array_equal(np.isneginf(b), np.isneginf(lp))
    fin = np.isfinite(lp)
    assert 0.02 < fin.mean() < 0.98
    assert np.all((xp[fin] > 0) & np.isfinite(xp[fin]))
    np.testing.assert_allclose(b[fin] + np.log(xp[fin]), lp[fin], rtol=1e-12, atol=1e-12)
