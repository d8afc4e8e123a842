"""`trellis.SplittingEnergy` (the LO QCD splitting weight with a smooth infrared cutoff) and
`Energy.explain` (issue 23, part 5): brute force over all trees, the formula, symmetries,
finite log Z on physical jets, gradients in the parameters, and the reasons of impossible
splits."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp

from jaxhc import trellis
from jaxhc.models import ginkgo
from jaxhc.trellis import SplittingEnergy, log_phi_of_tree

from reference import all_binary_trees

jax.config.update("jax_enable_x64", True)


def _massless_jet(n, seed, spread=0.3):
    """``n`` massless particles around the z axis, energies 5..100 GeV."""
    rng = np.random.default_rng(seed)
    d = np.column_stack([rng.normal(0, spread, n), rng.normal(0, spread, n), np.ones(n)])
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    e = rng.uniform(5.0, 100.0, n)
    return np.column_stack([e, e[:, None] * d])


def _rotation(seed):
    q, r = np.linalg.qr(np.random.default_rng(seed).normal(size=(3, 3)))
    q = q * np.sign(np.diag(r))
    return q if np.linalg.det(q) > 0 else -q


@pytest.mark.parametrize("n", [3, 4, 5, 6])
def test_log_z_and_map_equal_brute_force(n):
    x = _massless_jet(n, seed=n)
    e = SplittingEnergy(alpha_s=0.2, cutoff=0.05)
    sol = trellis.solve(e, x)
    phis = np.array([float(log_phi_of_tree(e, x, t)) for t in all_binary_trees(n)])
    assert np.all(np.isfinite(phis))
    np.testing.assert_allclose(float(sol.log_z), logsumexp(phis), rtol=1e-12)
    np.testing.assert_allclose(float(sol.map_log_phi), phis.max(), rtol=1e-12)


def test_split_formula_by_hand():
    x = _massless_jet(3, seed=11)
    e = SplittingEnergy(alpha_s=0.118, cutoff=0.1)
    feats = e.subset_features(jnp.asarray(x), jnp.asarray([[1.0, 1, 0], [1, 0, 0], [0, 1, 0]]))
    P, L, R = (jax.tree_util.tree_map(lambda f: f[i], feats) for i in range(3))
    p = x[0] + x[1]
    t = p[0] ** 2 - p[1:] @ p[1:]
    jet = x.sum(0)
    mu2 = 0.1**2 * (jet[0] ** 2 - jet[1:] @ jet[1:])
    z = x[0, 0] / (x[0, 0] + x[1, 0])
    pgg = 3.0 * (z / (1 - z) + (1 - z) / z + z * (1 - z))
    want = np.log(0.118 / (2 * np.pi) * pgg * z * (1 - z) / (z * (1 - z) * t + mu2))
    np.testing.assert_allclose(float(e.log_psi(P, L, R)), want, rtol=1e-13)
    np.testing.assert_allclose(float(e.log_psi(P, R, L)), want, rtol=1e-13)  # left <-> right


def test_rotation_and_scale():
    """Rotations leave log Z unchanged; scaling every momentum by c moves log Z by
    -2 (N - 1) log c and leaves the cluster marginals unchanged (the cutoff is per jet)."""
    x = _massless_jet(6, seed=3)
    e = SplittingEnergy()
    a = trellis.solve(e, x, marginals=True)
    rot = x.copy()
    rot[:, 1:] = x[:, 1:] @ _rotation(1).T
    np.testing.assert_allclose(float(trellis.solve(e, rot).log_z), float(a.log_z), rtol=1e-11)
    b = trellis.solve(e, 7.0 * x, marginals=True)
    np.testing.assert_allclose(float(b.log_z), float(a.log_z) - 2 * 5 * np.log(7.0), rtol=1e-11)
    np.testing.assert_allclose(np.exp(np.asarray(b.log_marginals)), np.exp(np.asarray(a.log_marginals)), atol=1e-12)


def test_finite_on_physical_jets_massless_collinear_and_massive():
    e = SplittingEnergy()
    # massless leaves, two of them exactly collinear (t = 0 for their pair)
    x = _massless_jet(5, seed=8)
    x = np.concatenate([x, 0.5 * x[:1]])
    assert np.isfinite(float(trellis.solve(e, x).log_z))
    # Ginkgo's massive leaves: every tree is possible here, where Ginkgo's t_cut forbids many
    params = ginkgo.GinkgoParams(lam=2.0, t_cut=16.0)
    jets = ginkgo.simulate(jax.random.PRNGKey(1), params, 30, min_leaves=3, max_leaves=7)
    sol = trellis.solve_batch(e, jets.leaves, jets.n_leaves)
    assert np.all(np.isfinite(sol.log_z)) and np.all(np.isfinite(sol.map_log_phi))


def test_gradients_in_alpha_s_and_cutoff():
    x = _massless_jet(5, seed=2)

    def log_z(a, c):
        return trellis.log_partition(SplittingEnergy(a, c), jnp.asarray(x))

    ga, gc = jax.grad(log_z, argnums=(0, 1))(0.118, 0.1)
    np.testing.assert_allclose(float(ga), 4 / 0.118, rtol=1e-12)  # alpha_s^(N-1) on every tree
    h = 1e-6
    fd = (float(log_z(0.118, 0.1 + h)) - float(log_z(0.118, 0.1 - h))) / (2 * h)
    np.testing.assert_allclose(float(gc), fd, rtol=1e-6)
    assert float(gc) < 0  # a larger cutoff suppresses every split


def test_bad_parameters_and_leaves():
    with pytest.raises(ValueError, match="alpha_s must be a positive"):
        SplittingEnergy(alpha_s=0.0)
    with pytest.raises(ValueError, match="cutoff must be a positive"):
        SplittingEnergy(cutoff=np.nan)
    x = _massless_jet(4, seed=0)
    with pytest.raises(ValueError, match=r"\(E, px, py, pz\)"):
        trellis.solve(SplittingEnergy(), np.roll(x, -1, axis=1))  # FastJet's order


def test_explain_names_the_failed_constraints():
    """Ginkgo's likelihoods on trees of 5 leaves: exactly the -inf splits get a reason, the
    split log psi add up to log phi, and the reasons name the cut-off constraints."""
    params = ginkgo.GinkgoParams(lam=2.0, t_cut=16.0)
    jets = ginkgo.simulate(jax.random.PRNGKey(4), params, 4, min_leaves=5, max_leaves=5)
    seen = set()
    # jets drawn with t_cut = 16 scored with other cut-offs: leaves above a low cut-off,
    # parents below a high one
    for lik, t_cut in (("exact", 1.0), ("exact", 16.0), ("exact", 400.0), ("paper", 400.0)):
        e = trellis.GinkgoEnergy(2.0, t_cut, lik)
        for b in range(len(jets)):
            x = np.asarray(jets.jet(b))
            for t in list(all_binary_trees(5))[::3]:
                rep = e.explain(x, t)
                total = sum(r.log_psi for r in rep)
                np.testing.assert_allclose(total, float(log_phi_of_tree(e, x, t)), rtol=1e-12)
                for r in rep:
                    assert (r.reason is not None) == (r.log_psi == -np.inf)
                    if r.reason is not None:
                        seen.add(r.reason)
                assert len(rep) == 4 and rep[-1].leaves == (0, 1, 2, 3, 4)
    assert any("cannot split" in r for r in seen), seen
    assert any("leaves must lie below the cut-off" in r for r in seen), seen
    # the splitting energy has no impossible split
    assert all(r.reason is None for r in SplittingEnergy().explain(x, next(iter(all_binary_trees(5)))))


def test_n7_against_a_plain_recursion():
    """N = 7 (10395 trees): log Z and the MAP against the defining recursion over subsets,
    ``Z(S) = 1/2 sum_{L} psi(S, L, S - L) Z(L) Z(S - L)``, written out in Python (no trellis
    code: only the energy's features and log psi)."""
    n = 7
    x = _massless_jet(n, seed=17)
    e = SplittingEnergy(alpha_s=0.3, cutoff=0.07)
    feats = jax.tree_util.tree_map(np.asarray, e.features(jnp.asarray(x)))
    take = lambda s: jax.tree_util.tree_map(lambda f: f[s], feats)
    full = (1 << n) - 1
    log_z, best = {1 << i: 0.0 for i in range(n)}, {1 << i: 0.0 for i in range(n)}
    for S in sorted(range(1, full + 1), key=lambda s: bin(s).count("1")):
        if S & (S - 1) == 0:
            continue
        zs, bs = [], []
        L = (S - 1) & S
        while L:
            R = S ^ L
            lp = float(e.log_psi(take(S), take(L), take(R)))
            zs.append(lp + log_z[L] + log_z[R])
            bs.append(lp + best[L] + best[R])
            L = (L - 1) & S
        log_z[S] = logsumexp(zs) - np.log(2.0)  # each split counted as (L, R) and (R, L)
        best[S] = max(bs)
    sol = trellis.solve(e, x)
    np.testing.assert_allclose(float(sol.log_z), log_z[full], rtol=1e-12)
    np.testing.assert_allclose(float(sol.map_log_phi), best[full], rtol=1e-12)
