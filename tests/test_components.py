"""Tests for jaxhc.components: every conjugate family against the raw-data reference
(tests/reference.py), the chain rule of its posterior predictives, merge algebra, closed
forms (quadrature, Student-t), count caches, gradients, validation and from_data defaults."""

import functools
import warnings
from typing import Callable, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads
from scipy import integrate, stats
from scipy.special import gammaln

from jaxhc.components import (
    BetaBernoulli,
    BetaBinomial,
    DirichletMultinomial,
    NormalGamma,
    NormalInverseWishart,
    NormalKnownCov,
)

import reference as ref

FAMILIES = [
    "NormalInverseWishart",
    "NormalKnownCov",
    "NormalGamma",
    "BetaBernoulli",
    "BetaBinomial",
    "DirichletMultinomial",
]
SEEDS = [0, 1]  # d = 1 (seed 0; scalar Beta priors on d = 2 columns) and d = 3 (seed 1)
N_POINTS = 5


# ---------------------------------------------------------------------------------------
# random cases
# ---------------------------------------------------------------------------------------
class Case(NamedTuple):
    comp: object
    X: np.ndarray
    ref: Callable  # X_subset -> float, the raw-data reference log marginal
    params: list  # (field name, index or None) of scalar hyperparameters to differentiate


def _spd(rng, d):
    A = rng.normal(size=(d, d))
    S = A @ A.T + 0.5 * np.eye(d)
    return 0.5 * (S + S.T)


def make_case(family, seed, n=N_POINTS) -> Case:
    rng = np.random.default_rng(1000 * FAMILIES.index(family) + seed)
    scalar = seed == 0
    d = (2 if family.startswith("Beta") else 1) if seed == 0 else 3
    if family == "NormalInverseWishart":
        m0 = rng.normal(size=d)
        kappa = rng.uniform(0.2, 3.0)
        dof = d - 1 + rng.uniform(0.5, 4.0)
        S0 = _spd(rng, d)
        X = rng.normal(size=(n, d)) * 1.5 + 0.3
        comp = NormalInverseWishart(m0, kappa, dof, S0)
        return Case(
            comp,
            X,
            lambda Y: ref.niw_log_marginal(Y, m0, kappa, dof, S0),
            [("kappa", None), ("dof", None), ("mean", (0,)), ("scale", (0, 0))],
        )
    if family == "NormalKnownCov":
        m0 = rng.normal(size=d)
        P, N = _spd(rng, d), _spd(rng, d)
        X = rng.normal(size=(n, d)) * 1.5 - 0.2
        comp = NormalKnownCov(m0, P, N)
        return Case(
            comp,
            X,
            lambda Y: ref.normal_known_cov_log_marginal(Y, m0, P, N),
            [("mean", (0,)), ("prior_cov", (0, 0)), ("noise_cov", (0, 0))],
        )
    if family == "NormalGamma":  # per feature a 1-D NIW with dof = 2 a and scale = 2 b_j
        m0 = rng.normal(size=d)
        kappa, a = rng.uniform(0.2, 3.0), rng.uniform(0.4, 3.0)
        b = rng.uniform(0.3, 2.0, d)
        X = rng.normal(size=(n, d)) * 1.3 + 0.4
        comp = NormalGamma(m0, kappa, a, b)
        return Case(
            comp,
            X,
            lambda Y: sum(
                ref.niw_log_marginal(np.asarray(Y)[:, j : j + 1], m0[j], kappa, 2 * a, [[2 * b[j]]]) for j in range(d)
            ),
            [("kappa", None), ("a", None), ("mean", (0,)), ("b", (d - 1,))],
        )
    if family == "BetaBernoulli":
        shape = () if scalar else (d,)
        a, b = rng.uniform(0.3, 3.0, shape), rng.uniform(0.3, 3.0, shape)
        X = rng.integers(0, 2, (n, d)).astype(float)
        comp = BetaBernoulli(a, b)
        idx = None if scalar else (0,)
        return Case(
            comp,
            X,
            lambda Y: ref.beta_bernoulli_log_marginal(Y, a, b),
            [("a", idx), ("b", None if scalar else (d - 1,))],
        )
    if family == "BetaBinomial":
        shape = () if scalar else (d,)
        a, b = rng.uniform(0.3, 3.0, shape), rng.uniform(0.3, 3.0, shape)
        trials = 4 if scalar else rng.integers(1, 6, d)
        X = rng.integers(0, np.asarray(trials) + 1, (n, d)).astype(float)
        comp = BetaBinomial(a, b, trials)
        idx = None if scalar else (0,)
        return Case(
            comp,
            X,
            lambda Y: ref.beta_binomial_log_marginal(Y, a, b, trials),
            [("a", idx), ("b", None if scalar else (d - 1,))],
        )
    if family == "DirichletMultinomial":
        alpha = rng.uniform(0.2, 3.0, d)
        X = rng.integers(0, 5, (n, d)).astype(float)
        comp = DirichletMultinomial(alpha)
        return Case(comp, X, lambda Y: ref.dirichlet_multinomial_log_marginal(Y, alpha), [("alpha", (0,))])
    raise ValueError(family)


def _assert_stats_close(s1, s2, rtol=1e-12, atol=1e-12):
    l1, t1 = jax.tree_util.tree_flatten(s1)
    l2, t2 = jax.tree_util.tree_flatten(s2)
    assert t1 == t2
    for u, v in zip(l1, l2):
        u, v = np.asarray(u), np.asarray(v)
        np.testing.assert_allclose(u, np.broadcast_to(v, u.shape) if v.size == 1 else v, rtol=rtol, atol=atol)


def _stack(stats_list):
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *stats_list)


# Compilation dominates the run time of these tiny problems (each new function or shape costs
# ~0.1-0.3 s of XLA time, each eager primitive ~20 ms), so the tests share a few jitted helpers
# that work on one batch shape per case: the statistics of every prefix ``X[:i]``, i = 0..n.
# They compile without LLVM optimisation (~30% less compile time; same arithmetic), while
# test_jit_matches_eager uses plain ``jax.jit`` and eager execution on unbatched statistics.
_jit = functools.partial(jax.jit, compiler_options={"xla_backend_optimization_level": 0})


@_jit
def _prefix_stats(comp, X):
    """Statistics of ``X[:i]`` for ``i = 0 .. n``, stacked ``[n+1, ...]``."""
    return _stack([comp.stats(X[:i]) for i in range(X.shape[0] + 1)])


@_jit
def _lm_and_grad(comp, s):
    """Log marginals of a batch of statistics, and the gradient of their sum w.r.t. the
    component (one compilation serves both)."""
    (_, lms), g = jax.value_and_grad(lambda m: (jnp.sum(m.log_marginal(s)), m.log_marginal(s)), has_aux=True)(comp)
    return lms, g


def _log_marginal(comp, s):
    return _lm_and_grad(comp, s)[0]


def _grad_total(comp, s):
    return _lm_and_grad(comp, s)[1]


_log_predictive = _jit(lambda comp, x, s: comp.log_predictive(x, s))
_log_predictive_cached = _jit(lambda comp, x, s: comp.log_predictive_cached(x, comp.predictive_cache(s)))


def _prefix_lms(comp, X) -> np.ndarray:
    """Log marginal of every prefix ``X[:i]``, ``i = 0 .. n`` (the last one is all of X)."""
    return np.asarray(_log_marginal(comp, _prefix_stats(comp, jnp.asarray(X))))


def _take(stats, i):
    return jax.tree_util.tree_map(lambda x: x[i], stats)


def _get(comp, name, idx):
    v = getattr(comp, name)
    return v if idx is None else v[idx]


def _perturb(comp, name, idx, h):
    v = getattr(comp, name)
    new = v + h if idx is None else v.at[idx].add(h)
    return eqx.tree_at(lambda c: getattr(c, name), comp, new)


case_params = pytest.mark.parametrize("family,seed", [(f, s) for f in FAMILIES for s in SEEDS])
# merge algebra: d = 3 for every family, plus scalar Beta priors (statistics wider than the prior)
merge_params = pytest.mark.parametrize(
    "family,seed", [(f, 1) for f in FAMILIES] + [("BetaBernoulli", 0), ("BetaBinomial", 0)]
)


# ---------------------------------------------------------------------------------------
# log marginal: reference, chain rule, merge algebra, empty set
# ---------------------------------------------------------------------------------------
@case_params
def test_log_marginal_matches_reference(family, seed):
    c = make_case(family, seed)
    got = _prefix_lms(c.comp, c.X)
    want = [c.ref(c.X[:i]) for i in range(c.X.shape[0] + 1)]
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
    # statistics do not depend on the row order
    perm = np.random.default_rng(seed).permutation(c.X.shape[0])
    np.testing.assert_allclose(_prefix_lms(c.comp, c.X[perm])[-1], want[-1], rtol=1e-9, atol=1e-9)


@case_params
def test_log_marginal_is_chain_rule_of_predictives(family, seed):
    """log p(X) = sum_i log p(x_i | x_1 .. x_{i-1}), every row given its predecessors at once."""
    c = make_case(family, seed)
    comp, X = c.comp, jnp.asarray(c.X)
    n = X.shape[0]
    prefix = _prefix_stats(comp, X)
    per_row = np.asarray(_log_predictive(comp, X, _take(prefix, slice(0, n))))
    assert per_row.shape == (n,)
    lms = np.asarray(_log_marginal(comp, prefix))
    np.testing.assert_allclose(per_row.sum(), lms[-1], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(per_row.sum(), c.ref(c.X), rtol=1e-9, atol=1e-9)


def test_niw_large_d_uses_cholesky_path():
    """d > 10 takes the Cholesky log-determinant instead of the unrolled elimination."""
    rng = np.random.default_rng(5)
    d = 12
    m0, S0 = rng.normal(size=d), _spd(rng, d)
    comp = NormalInverseWishart(m0, 0.8, d + 1.5, S0)
    X = rng.normal(size=(3, d))
    np.testing.assert_allclose(
        _prefix_lms(comp, X),
        [ref.niw_log_marginal(X[:i], m0, 0.8, d + 1.5, S0) for i in range(4)],
        rtol=1e-9,
        atol=1e-9,
    )


@_jit
def _merge_views(comp, X, perm):
    """Statistics of all rows computed in several ways (all should agree)."""
    A, B = perm[:2], perm[2:]
    sa, sb = comp.stats(X[A]), comp.stats(X[B])
    leaves = comp.leaf_stats(X)
    acc = _take(leaves, perm[0])
    for i in range(1, X.shape[0]):  # leaf statistics merged one at a time in random order
        acc = comp.merge(acc, _take(leaves, perm[i]))
    s, e0, e1 = comp.stats(X), comp.stats(X[:0]), comp.empty_stats()
    with_empty = [comp.merge(e0, s), comp.merge(s, e0), comp.merge(e1, s), comp.merge(s, e1)]
    return s, [comp.merge(sa, sb), comp.merge(sb, sa), acc], leaves, with_empty


@merge_params
def test_merge_equals_stats_of_union(family, seed):
    c = make_case(family, seed)
    comp, X = c.comp, jnp.asarray(c.X)
    perm = np.random.default_rng(seed).permutation(X.shape[0])
    full, merged, leaves, _ = _merge_views(comp, X, jnp.asarray(perm))
    for m in merged:
        _assert_stats_close(m, full)
    # a leaf's statistics are those of its row alone (prefix 1 of the permuted rows)
    _assert_stats_close(_take(leaves, int(perm[0])), _take(_prefix_stats(comp, X[perm]), 1))


@merge_params
def test_merged_log_marginal_equals_log_marginal_of_merge(family, seed):
    """``merged_log_marginal(s1, s2)`` (fused for the NIW) equals ``log_marginal(merge(s1,
    s2))``: one cluster against a batch of clusters, empty ones included, with and without
    the count cache, under jit (as BHC's merge rows call it)."""
    c = make_case(family, seed, n=8)
    comp, X = c.comp, jnp.asarray(c.X)
    x = comp.stats(X[:3])
    # a batch: leaves, a pair, a triple and the empty cluster
    parts = [X[i : i + 1] for i in range(3, 8)] + [X[3:5], X[5:8], X[:0]]
    batch = _stack([comp.stats(p) for p in parts])
    cache = comp.count_cache(X.shape[0])
    for cc in (None, cache):
        if cc is None:
            want = jax.jit(lambda a, b: comp.log_marginal(comp.merge(a, b)))
        else:
            want = jax.jit(lambda a, b: comp.log_marginal(comp.merge(a, b), cc))
        got = jax.jit(lambda a, b: comp.merged_log_marginal(a, b, cc))
        np.testing.assert_allclose(got(x, batch), want(x, batch), rtol=1e-13, atol=1e-12)
        np.testing.assert_allclose(got(batch, x), want(batch, x), rtol=1e-13, atol=1e-12)
    # the merged clusters' own reference values (raw data)
    lm = jax.jit(lambda a, b: comp.merged_log_marginal(a, b))(x, batch)
    for k, p in enumerate(parts):
        np.testing.assert_allclose(lm[k], c.ref(np.concatenate([c.X[:3], np.asarray(p)])), rtol=1e-9, atol=1e-9)


def test_niw_merged_log_marginal_large_d_and_d10():
    """The NIW's fused form at d = 10 (the largest unrolled size) and its fallback at d = 12
    equal the log marginal of the merged statistics and the raw-data reference."""
    for d in (10, 12):
        rng = np.random.default_rng(d)
        m0, S0 = rng.normal(size=d), _spd(rng, d)
        comp = NormalInverseWishart(m0, 0.8, d + 1.5, S0)
        X = rng.normal(size=(9, d))
        x = comp.stats(jnp.asarray(X[:4]))
        batch = _stack([comp.stats(jnp.asarray(X[4:6])), comp.stats(jnp.asarray(X[6:9])), comp.empty_stats()])
        got = np.asarray(jax.jit(lambda a, b: comp.merged_log_marginal(a, b))(x, batch))
        np.testing.assert_allclose(got, jax.jit(lambda a, b: comp.log_marginal(comp.merge(a, b)))(x, batch), rtol=1e-13)
        for k, rows in enumerate([X[:6], np.concatenate([X[:4], X[6:9]]), X[:4]]):
            np.testing.assert_allclose(got[k], ref.niw_log_marginal(rows, m0, 0.8, d + 1.5, S0), rtol=1e-9)


_FOLD_SCRIPT = """
import jax, numpy as np
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import jaxhc
rng = np.random.default_rng(1)
X = jnp.asarray(rng.normal(size=(5, 3)))
comp = jaxhc.NormalInverseWishart.from_data(np.asarray(X))
perm = jnp.asarray([4, 0, 1, 2, 3])
take = lambda s, i: jax.tree_util.tree_map(lambda x: x[i], s)

def fold(X, perm):
    leaves = comp.leaf_stats(X)
    acc = take(leaves, perm[0])
    for i in range(1, X.shape[0]):
        acc = comp.merge(acc, take(leaves, perm[i]))
    return acc, comp.stats(X[perm[0]][None])  # an extra output that does not feed the fold

acc, _ = jax.jit(fold)(X, perm)
full = comp.stats(X)
for a, b in zip(acc, full):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-10)
print("FOLD-OK")
"""


def test_merge_fold_under_jit_with_unrelated_output_and_xla_workaround():
    """jax/jaxlib 0.10.2 on CPU miscompiles this fold when the jitted function has an extra,
    unrelated output (the fused fold changes by O(1)); ``--xla_cpu_use_fusion_emitters=false``
    avoids it. This checks the documented workaround gives the exact statistics (run in a
    fresh interpreter, since XLA flags are read at start-up)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_use_fusion_emitters=false").strip()
    proc = subprocess.run([sys.executable, "-c", _FOLD_SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "FOLD-OK" in proc.stdout, proc.stderr


@merge_params
def test_empty_stats_have_zero_log_marginal(family, seed):
    c = make_case(family, seed)
    comp, X = c.comp, jnp.asarray(c.X)
    # stats(X[:0]) is prefix 0, checked against the reference (0) in test_log_marginal_matches_reference
    batch = comp.empty_stats((X.shape[0] + 1,))
    np.testing.assert_allclose(np.asarray(_log_marginal(comp, batch)), 0.0, rtol=0, atol=1e-12)
    # the empty set is the identity of merge
    full, _, _, with_empty = _merge_views(comp, X, jnp.arange(X.shape[0]))
    for m in with_empty:
        _assert_stats_close(m, full)


# ---------------------------------------------------------------------------------------
# NIW closed forms
# ---------------------------------------------------------------------------------------
def test_niw_1d_log_marginal_equals_quadrature():
    """Log marginal of 2 and 3 points against a 2-D integral over (mu, log sigma^2)."""
    m0, kappa0, nu0, S0 = -0.1, 0.7, 2.5, 1.3
    data = np.array([0.3, -0.5, 1.2])
    comp = NormalInverseWishart([m0], kappa0, nu0, [[S0]])
    lms = _prefix_lms(comp, data[:, None])  # prefixes of 0 .. 3 points
    a0, b0 = nu0 / 2.0, S0 / 2.0
    for k in (2, 3):
        x = data[:k]

        def integrand(mu, u):
            # sigma^2 = exp(u) ~ InvGamma(nu0/2, S0/2) (the 1-D inverse Wishart); mu | sigma^2 ~ N(m0, sigma^2/kappa0)
            s2 = np.exp(u)
            lp = a0 * np.log(b0) - gammaln(a0) - (a0 + 1) * u - b0 / s2 + u
            lp += -0.5 * np.log(2 * np.pi * s2 / kappa0) - 0.5 * kappa0 * (mu - m0) ** 2 / s2
            lp += np.sum(-0.5 * np.log(2 * np.pi * s2) - 0.5 * (x - mu) ** 2 / s2)
            return np.exp(lp)

        lo, hi = min(x.min(), m0), max(x.max(), m0)
        width = lambda u: 12.0 * np.exp(u / 2) / min(1.0, np.sqrt(kappa0))  # noqa: E731
        val, _ = integrate.dblquad(
            integrand, -20.0, 20.0, lambda u: lo - width(u), lambda u: hi + width(u), epsabs=0.0, epsrel=1e-9
        )
        np.testing.assert_allclose(lms[k], np.log(val), rtol=0, atol=1e-6)


@pytest.mark.parametrize("seed", SEEDS)
def test_niw_predictive_is_student_t(seed):
    """log_predictive (unbatched) and log_predictive_cached equal scipy's multivariate t."""
    c = make_case("NormalInverseWishart", seed)
    comp = c.comp
    rng = np.random.default_rng(seed + 7)
    prefix = _prefix_stats(comp, jnp.asarray(c.X))
    xs = rng.normal(size=(prefix.n.shape[0], comp.dim)) * 2
    cached = np.asarray(_log_predictive_cached(comp, jnp.asarray(xs), prefix))
    for n_obs in (0, 1, 4):
        s = _take(prefix, n_obs)
        df, loc, shape = comp.predictive_student_t(s)
        t = stats.multivariate_t(loc=np.asarray(loc), shape=np.asarray(shape), df=float(df))
        x = xs[n_obs]
        np.testing.assert_allclose(float(_log_predictive(comp, jnp.asarray(x), s)), t.logpdf(x), rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(cached[n_obs], t.logpdf(x), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("family", ["NormalKnownCov", "BetaBinomial"])
def test_predictive_cache_matches_log_predictive(family):
    """The default predictive cache (NIW's own is checked against scipy above)."""
    c = make_case(family, 1)
    comp, X = c.comp, jnp.asarray(c.X)
    prefix = _prefix_stats(comp, X)
    prev = _take(prefix, slice(0, X.shape[0]))
    got = _log_predictive_cached(comp, X, prev)
    np.testing.assert_allclose(np.asarray(got), np.asarray(_log_predictive(comp, X, prev)), rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------------------------------
# count caches
# ---------------------------------------------------------------------------------------
def _cache_cases():
    out = []
    for family in ("NormalInverseWishart", "NormalGamma", "BetaBernoulli", "BetaBinomial"):
        for seed in SEEDS:  # seed 0: scalar (a, b, trials); seed 1: per-column
            c = make_case(family, seed)
            out.append((f"{family}-{seed}", c.comp, c.X))
    c = make_case("BetaBernoulli", 1)
    X = c.X.copy()
    X[np.random.default_rng(3).random(X.shape) < 0.3] = np.nan
    out.append(("BetaBernoulli-nan", c.comp, X))
    c = make_case("BetaBinomial", 1)  # scalar a, b with per-column trials
    out.append(("BetaBinomial-scalar-ab", BetaBinomial(0.8, 1.3, c.comp.trials), c.X))
    return out


@functools.partial(_jit, static_argnums=2)
def _cached_views(comp, batch, n):
    cache = comp.count_cache(n)  # built inside jit from a traced component, as inference code does
    batch2d = jax.tree_util.tree_map(lambda x: x.reshape((2, 3) + x.shape[1:]), batch)
    return [comp.log_marginal(t, cache) for t in (_take(batch, -1), batch, batch2d)]


@pytest.mark.parametrize("name,comp,X", _cache_cases(), ids=[c[0] for c in _cache_cases()])
def test_count_cache_matches_direct(name, comp, X):
    n = X.shape[0]
    assert n + 1 == 6
    assert comp.count_cache(n) is not None
    prefix = _prefix_stats(comp, jnp.asarray(X))  # [n+1] = [6], also viewed as [2, 3]
    got = _cached_views(comp, prefix, n)
    want = np.asarray(_log_marginal(comp, prefix))
    for g, w in zip(got, [want[-1], want, want.reshape(2, 3)]):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-10, atol=1e-10)


_grad_cache_inside = functools.partial(_jit, static_argnums=2)(
    lambda comp, s, n: jax.grad(lambda m: jnp.sum(m.log_marginal(s, m.count_cache(n))))(comp)
)


@pytest.mark.parametrize("family", ["NormalInverseWishart", "BetaBinomial"])
def test_count_cache_is_differentiable(family):
    """The tables are documented as differentiable in the hyperparameters."""
    c = make_case(family, 1)
    prefix = _prefix_stats(c.comp, jnp.asarray(c.X))
    g1 = _grad_cache_inside(c.comp, prefix, c.X.shape[0])
    g0 = _grad_total(c.comp, prefix)
    for u, v in zip(jax.tree_util.tree_leaves(g1), jax.tree_util.tree_leaves(g0)):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-9, atol=1e-10)


def test_count_cache_none_for_families_without_one():
    assert NormalKnownCov(np.zeros(2)).count_cache(5) is None
    assert DirichletMultinomial(np.ones(3)).count_cache(5) is None


# ---------------------------------------------------------------------------------------
# gradients and the unconstrained parametrisation
# ---------------------------------------------------------------------------------------
@case_params
def test_grad_matches_finite_differences(family, seed):
    """d/dtheta of sum_i log p(X[:i]) for scalar hyperparameters theta, against central differences."""
    c = make_case(family, seed)
    comp = c.comp
    prefix = _prefix_stats(comp, jnp.asarray(c.X))
    g = _grad_total(comp, prefix)
    assert type(g) is type(comp)
    f = lambda m: float(jnp.sum(_log_marginal(m, prefix)))  # noqa: E731
    for name, idx in c.params:
        h = 1e-5 * max(1.0, abs(float(_get(comp, name, idx))))
        fd = (f(_perturb(comp, name, idx, h)) - f(_perturb(comp, name, idx, -h))) / (2 * h)
        np.testing.assert_allclose(float(_get(g, name, idx)), fd, rtol=1e-6, atol=1e-7, err_msg=name)


def test_filter_grad_and_check_grads():
    """equinox.filter_grad agrees with jax.grad; jax.test_util.check_grads (eager, 2nd order)."""
    b = make_case("BetaBinomial", 1)
    prefix = _prefix_stats(b.comp, jnp.asarray(b.X))
    s = _take(prefix, -1)
    g1 = eqx.filter_grad(lambda m: m.log_marginal(s))(b.comp)
    g0 = jax.grad(lambda m: m.log_marginal(s))(b.comp)
    for u, v in zip(jax.tree_util.tree_leaves(g1), jax.tree_util.tree_leaves(g0)):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-12, atol=1e-12)
    check_grads(lambda a: eqx.tree_at(lambda m: m.a, b.comp, a).log_marginal(s), (b.comp.a,), order=2, modes=["rev"])


@case_params
def test_constrain_unconstrain_roundtrip(family, seed):
    c = make_case(family, seed)
    comp = c.comp
    u = comp.unconstrain()
    assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree_util.tree_leaves(u))
    back = comp.constrain(u)
    assert type(back) is type(comp)
    l1, t1 = jax.tree_util.tree_flatten(comp)
    l2, t2 = jax.tree_util.tree_flatten(back)
    assert t1 == t2
    for x, y in zip(l1, l2):
        assert np.shape(x) == np.shape(y)
        np.testing.assert_allclose(np.asarray(y), np.asarray(x), rtol=1e-12, atol=1e-12)


_constrained_value_and_grad = _jit(jax.value_and_grad(lambda u, comp, s: jnp.sum(comp.constrain(u).log_marginal(s))))


@pytest.mark.parametrize("family", ["NormalInverseWishart", "BetaBinomial"])
def test_grad_through_unconstrained_parameters(family):
    """Directional derivative of u -> log_marginal(constrain(u)) against central differences."""
    c = make_case(family, 1)
    comp = c.comp
    prefix = _prefix_stats(comp, jnp.asarray(c.X))
    u = comp.unconstrain()
    _, g = _constrained_value_and_grad(u, comp, prefix)
    leaves, treedef = jax.tree_util.tree_flatten(u)
    rng = np.random.default_rng(1)
    v = jax.tree_util.tree_unflatten(treedef, [jnp.asarray(rng.normal(size=np.shape(x))) for x in leaves])
    h = 1e-5
    shift = lambda t: jax.tree_util.tree_map(lambda a, b: a + t * b, u, v)  # noqa: E731
    f = lambda t: float(_constrained_value_and_grad(shift(t), comp, prefix)[0])  # noqa: E731
    fd = (f(h) - f(-h)) / (2 * h)
    dot = sum(float(jnp.sum(a * b)) for a, b in zip(jax.tree_util.tree_leaves(g), jax.tree_util.tree_leaves(v)))
    np.testing.assert_allclose(dot, fd, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------
# missing data
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", ["BetaBernoulli", "BetaBinomial"])
@pytest.mark.parametrize("seed", SEEDS)
def test_missing_entries_are_skipped(family, seed):
    c = make_case(family, seed)
    comp = c.comp
    rng = np.random.default_rng(seed + 11)
    X = c.X.copy()
    X[rng.random(X.shape) < 0.35] = np.nan
    X[0, :] = np.nan  # one row fully missing
    out = comp.validate_data(X)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(X))
    Xj = jnp.asarray(X)
    # prefixes against the reference (the fully missing row 0 alone has log marginal 0)
    prefix = _prefix_stats(comp, Xj)
    lms = np.asarray(_log_marginal(comp, prefix))
    np.testing.assert_allclose(lms, [c.ref(X[:i]) for i in range(X.shape[0] + 1)], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(lms[1], 0.0, atol=1e-12)
    # the chain rule still holds (batched predictive: every row given its predecessors)
    per_row = np.asarray(_log_predictive(comp, Xj, _take(prefix, slice(0, X.shape[0]))))
    np.testing.assert_allclose(per_row[0], 0.0, atol=1e-12)
    np.testing.assert_allclose(per_row.sum(), lms[-1], rtol=1e-10, atol=1e-10)
    # merge algebra with missing entries
    full, merged, _, with_empty = _merge_views(comp, Xj, jnp.asarray(rng.permutation(X.shape[0])))
    for m in merged + with_empty:
        _assert_stats_close(m, full)


@pytest.mark.parametrize("family", ["NormalInverseWishart", "NormalKnownCov", "DirichletMultinomial"])
def test_missing_data_rejected_where_unsupported(family):
    c = make_case(family, 1)
    X = c.X.copy()
    X[1, 0] = np.nan
    with pytest.raises(ValueError, match="missing data"):
        c.comp.validate_data(X)


# ---------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------
BAD_HYPERPARAMETERS = [
    ("kappa", lambda: NormalInverseWishart(np.zeros(2), kappa=0.0)),
    ("kappa", lambda: NormalInverseWishart(np.zeros(2), kappa=-1.0)),
    ("kappa", lambda: NormalInverseWishart(np.zeros(2), kappa=np.inf)),
    ("dof", lambda: NormalInverseWishart(np.zeros(2), dof=1.0)),
    ("dof", lambda: NormalInverseWishart(np.zeros(3), dof=1.5)),
    ("dof", lambda: NormalInverseWishart(np.zeros(1), dof=0.0)),
    ("scale", lambda: NormalInverseWishart(np.zeros(2), scale=np.array([[1.0, 2.0], [2.0, 1.0]]))),
    ("scale", lambda: NormalInverseWishart(np.zeros(2), scale=np.array([[1.0, 0.5], [0.0, 1.0]]))),
    ("scale", lambda: NormalInverseWishart(np.zeros(2), scale=-1.0)),
    ("scale", lambda: NormalInverseWishart(np.zeros(2), scale=np.ones((3, 3)))),
    ("mean", lambda: NormalInverseWishart(np.zeros((2, 2)))),
    ("mean", lambda: NormalInverseWishart(0.0)),
    ("mean", lambda: NormalInverseWishart(np.array([0.0, np.nan]))),
    ("mean", lambda: NormalKnownCov(np.zeros((1, 2)))),
    ("prior_cov", lambda: NormalKnownCov(np.zeros(2), prior_cov=-1.0)),
    ("prior_cov", lambda: NormalKnownCov(np.zeros(2), prior_cov=[1.0, 0.0])),
    ("noise_cov", lambda: NormalKnownCov(np.zeros(2), noise_cov=np.array([[1.0, 2.0], [2.0, 1.0]]))),
    ("a", lambda: BetaBernoulli(a=0.0)),
    ("a", lambda: BetaBernoulli(a=[1.0, -0.5])),
    ("a", lambda: BetaBernoulli(a=np.ones((2, 2)))),
    ("b", lambda: BetaBernoulli(b=-1.0)),
    ("b", lambda: BetaBernoulli(b=np.nan)),
    ("a", lambda: BetaBinomial(a=0.0, trials=3)),
    ("trials", lambda: BetaBinomial(trials=0)),
    ("trials", lambda: BetaBinomial(trials=2.5)),
    ("trials", lambda: BetaBinomial(a=[1.0, 1.0], trials=[3, -1])),
    ("kappa", lambda: NormalGamma(np.zeros(2), kappa=0.0)),
    ("a", lambda: NormalGamma(np.zeros(2), a=-1.0)),
    ("b", lambda: NormalGamma(np.zeros(2), b=[1.0, 0.0])),
    ("b", lambda: NormalGamma(np.zeros(2), b=[1.0, 1.0, 1.0])),
    ("mean", lambda: NormalGamma(np.zeros((2, 2)))),
    ("alpha", lambda: DirichletMultinomial([1.0, -1.0])),
    ("alpha", lambda: DirichletMultinomial([1.0, 0.0])),
    ("alpha", lambda: DirichletMultinomial(1.0)),
]


@pytest.mark.parametrize(
    "arg,make", BAD_HYPERPARAMETERS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(BAD_HYPERPARAMETERS)]
)
def test_invalid_hyperparameters_raise(arg, make):
    with pytest.raises(ValueError, match=rf"\b{arg}\b"):
        make()


@case_params
def test_validate_data_rejects_bad_shapes_and_values(family, seed):
    c = make_case(family, seed)
    comp, X = c.comp, c.X
    d = X.shape[1]
    out = comp.validate_data(X)
    np.testing.assert_array_equal(out, X)
    with pytest.raises(ValueError):
        comp.validate_data(X[0])  # 1-D
    with pytest.raises(ValueError):
        comp.validate_data(X[None])  # 3-D
    with pytest.raises(ValueError):
        comp.validate_data(np.zeros((0, d)))  # empty
    if not (family.startswith("Beta") and seed == 0):  # scalar Beta priors fit any number of columns
        with pytest.raises(ValueError, match="columns"):
            comp.validate_data(np.concatenate([X, X[:, :1]], axis=1))
    for bad in (np.inf, -np.inf):
        Y = X.copy()
        Y[1, 0] = bad
        with pytest.raises(ValueError, match="inf"):
            comp.validate_data(Y)
    with pytest.raises(TypeError):
        comp.validate_data("abc")
    with pytest.raises(TypeError):
        comp.validate_data(np.array([["a"] * d, ["b"] * d]))


@pytest.mark.parametrize("bad", [0.5, 2.0, -1.0])
def test_validate_data_bernoulli_domain(bad):
    comp = BetaBernoulli([1.0, 2.0], [1.0, 1.0])
    X = np.array([[0.0, 1.0], [1.0, np.nan]])
    comp.validate_data(X)
    comp.validate_data(np.array([[True, False]]))  # booleans are fine
    X[0, 1] = bad
    with pytest.raises(ValueError, match="binary"):
        comp.validate_data(X)


@pytest.mark.parametrize("bad", [4.0, 1.5, -1.0])
def test_validate_data_binomial_domain(bad):
    comp = BetaBinomial(1.0, 1.0, trials=[3, 5])
    X = np.array([[0.0, 5.0], [3.0, np.nan]])
    comp.validate_data(X)
    X[0, 0] = bad  # column 0 has 3 trials
    with pytest.raises(ValueError, match="trials"):
        comp.validate_data(X)


@pytest.mark.parametrize("bad", [-1.0, 0.5])
def test_validate_data_multinomial_domain(bad):
    comp = DirichletMultinomial([1.0, 2.0, 0.5])
    X = np.array([[0.0, 5.0, 1.0], [3.0, 0.0, 0.0]])
    comp.validate_data(X)
    X[1, 2] = bad
    with pytest.raises(ValueError, match="counts"):
        comp.validate_data(X)


# ---------------------------------------------------------------------------------------
# from_data
# ---------------------------------------------------------------------------------------
@case_params
def test_from_data_gives_valid_component(family, seed):
    c = make_case(family, seed)
    X = c.X
    cls = type(c.comp)
    comp = cls.from_data(X, trials=c.comp.trials) if family == "BetaBinomial" else cls.from_data(X)
    assert type(comp) is cls
    comp.validate_data(X)
    assert np.all(np.isfinite(_prefix_lms(comp, X)))
    d = X.shape[1]
    if family == "NormalInverseWishart":
        np.testing.assert_allclose(comp.mean, X.mean(0), rtol=1e-12)
        # prior expected covariance E[Sigma] = scale / (dof - d - 1) = 0.1 diag(var X)
        np.testing.assert_allclose(comp.scale / (comp.dof - d - 1), 0.1 * np.diag(X.var(0)), rtol=1e-10)
    if family == "NormalKnownCov":
        np.testing.assert_allclose(comp.mean, X.mean(0), rtol=1e-12)
        np.testing.assert_allclose(comp.prior_cov, np.diag(X.var(0)), rtol=1e-10)
    if family == "DirichletMultinomial":
        np.testing.assert_allclose(float(jnp.sum(comp.alpha)), d, rtol=1e-12)
        assert np.all(np.asarray(comp.alpha) > 0)


def test_from_data_single_row_and_constant_columns():
    X = make_case("NormalInverseWishart", 1).X.copy()  # d = 3
    X[:, 1] = 2.0  # a constant column
    for cls in (NormalInverseWishart, NormalKnownCov):
        assert np.all(np.isfinite(_prefix_lms(cls.from_data(X), X)))
        comp = cls.from_data(X[:1])  # one row: no variance estimate, falls back to 1
        assert all(np.all(np.isfinite(np.asarray(v))) for v in jax.tree_util.tree_leaves(comp))


def test_beta_bernoulli_from_data_mean_matching():
    X = np.array(
        [
            [0.0, 1.0, 1.0, 0.0, np.nan],
            [0.0, 1.0, 0.0, 1.0, np.nan],
            [0.0, 1.0, 0.0, np.nan, np.nan],
            [0.0, 1.0, 1.0, 1.0, np.nan],
        ]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # nanmean of the all-NaN column
        comp = BetaBernoulli.from_data(X)
    m = np.array([0.05, 0.95, 0.5, 2 / 3, 0.5])  # clipped to [0.05, 0.95]; NaN ignored; all-NaN -> 0.5
    np.testing.assert_allclose(comp.a, 2 * m, rtol=1e-12)
    np.testing.assert_allclose(comp.b, 2 * (1 - m), rtol=1e-12)
    comp = BetaBernoulli.from_data(X[:, :4], strength=5.0, eps=0.1)
    m = np.array([0.1, 0.9, 0.5, 2 / 3])
    np.testing.assert_allclose(comp.a, 5 * m, rtol=1e-12)
    np.testing.assert_allclose(comp.b, 5 * (1 - m), rtol=1e-12)


def test_beta_binomial_from_data_mean_matching():
    T = np.array([4, 2])
    X = np.array([[1.0, 0.0], [3.0, 0.0], [2.0, 0.0]])
    comp = BetaBinomial.from_data(X, T)
    m = np.array([0.5, 0.05])
    np.testing.assert_allclose(comp.a, 2 * m, rtol=1e-12)
    np.testing.assert_allclose(comp.b, 2 * (1 - m), rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(comp.trials), T)


# ---------------------------------------------------------------------------------------
# jit / vmap
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
def test_jit_matches_eager(family):
    """Unbatched statistics: eager and jax.jit give the same value, equal to the reference."""
    c = make_case(family, 1)
    comp, X = c.comp, jnp.asarray(c.X)
    prefix = _prefix_stats(comp, X)
    s = _take(prefix, -1)  # stats(X)
    eager = comp.log_marginal(s)
    jitted = jax.jit(lambda m, s: m.log_marginal(s))(comp, s)
    assert np.shape(eager) == () and np.shape(jitted) == ()
    np.testing.assert_allclose(float(jitted), float(eager), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(float(eager), c.ref(c.X), rtol=1e-9, atol=1e-9)
    # vmap over a batch of statistics equals the broadcast batch
    if family in ("NormalInverseWishart", "BetaBinomial"):
        np.testing.assert_allclose(
            np.asarray(jax.jit(jax.vmap(comp.log_marginal))(prefix)),
            np.asarray(_log_marginal(comp, prefix)),
            rtol=1e-12,
            atol=1e-12,
        )


@pytest.mark.parametrize("d", [3, 12, 30])
def test_logdet_paths_agree_with_numpy(d):
    """The log-determinant used by the NIW marginal (unrolled elimination for d <= 10, LAPACK
    Cholesky above) and the LAPACK-free elimination loop used on jaxlib 0.10 agree with
    numpy's slogdet, also inside a compiled loop."""
    from jaxhc.components.base import logdet_elimination_loop, logdet_pd

    rng = np.random.default_rng(d)
    B = rng.normal(size=(7, d, d))
    A = B @ np.swapaxes(B, -1, -2) + 0.5 * np.eye(d)
    want = np.linalg.slogdet(A)[1]
    np.testing.assert_allclose(logdet_pd(jnp.asarray(A)), want, rtol=1e-10)
    np.testing.assert_allclose(logdet_elimination_loop(jnp.asarray(A))[0], want, rtol=1e-10)

    @jax.jit
    def in_loop(A):
        return jax.lax.fori_loop(
            0, 3, lambda i, acc: acc + logdet_elimination_loop(A + i * jnp.eye(d))[0], jnp.zeros(A.shape[0])
        )

    want3 = sum(np.linalg.slogdet(A + i * np.eye(d))[1] for i in range(3))
    np.testing.assert_allclose(in_loop(jnp.asarray(A)), want3, rtol=1e-10)


@pytest.mark.parametrize("d", [3, 12])
def test_logdet_is_nan_where_precision_is_lost(d):
    """A matrix whose small eigenvalues are below eps times its diagonal (a rank-one 1e20
    scatter plus a unit prior scale: the unit part rounds away) gets NaN on every path,
    never a finite value made of rounding error; a condition number of 1e10 stays exact."""
    from jaxhc.components.base import logdet_elimination_loop, logdet_pd

    rng = np.random.default_rng(d)
    u = rng.normal(size=d)
    for big, lost in ((1e20, True), (1e10, False)):
        A = np.eye(d) + big * np.outer(u, u) / (u @ u)
        got = [float(logdet_pd(jnp.asarray(A)))]
        out, piv = logdet_elimination_loop(jnp.asarray(A))
        got.append(float(jnp.where(jnp.any(~(piv > 4 * np.finfo(float).eps * np.diag(A))), jnp.nan, out)))
        if lost:
            assert all(np.isnan(g) for g in got), got
        else:
            np.testing.assert_allclose(got, np.log1p(big), rtol=1e-6)


@pytest.mark.parametrize("family", FAMILIES)
def test_constrain_is_total(family):
    """Any unconstrained vector, however extreme, maps to a valid component (the
    constructor's checks pass) with a finite log marginal."""
    c = make_case(family, 1)
    comp = c.comp
    s = comp.stats(jnp.asarray(c.X))
    leaves, treedef = jax.tree_util.tree_flatten(comp.unconstrain())
    rng = np.random.default_rng(3)
    for scale in (1.0, 30.0, 1e3, 1e6):
        for _ in range(3):
            u = jax.tree_util.tree_unflatten(treedef, [scale * rng.normal(size=np.shape(x)) for x in leaves])
            back = comp.constrain(u)  # raises if a check fails
            assert type(back) is type(comp)
            assert np.isfinite(float(back.log_marginal(s)))
    # ill-conditioned matrices: the smallest eigenvalues are raised to the documented floor
    if family == "NormalInverseWishart":
        d = comp.dim
        U = np.zeros((d, d))
        U[np.tril_indices(d, -1)] = 1e8
        A = np.asarray(comp.constrain(dict(comp.unconstrain(), scale_chol=jnp.asarray(U))).scale)
        assert np.linalg.eigvalsh(A).min() > 0


def test_normal_gamma_in_bhc_equals_niw_per_feature():
    """BHC with `NormalGamma` on one feature is BHC with the 1-D NIW of ``dof = 2 a``,
    ``scale = 2 b`` (same tree, same evidence); on several features the evidence is the
    diagonal model's (checked against the reference through the chain of merges)."""
    import jaxhc

    X = np.random.default_rng(5).normal(size=(12, 1)) * 2.0
    ng = NormalGamma(X.mean(0), 0.3, 1.7, [0.8])
    niw = NormalInverseWishart(X.mean(0), 0.3, 3.4, [[1.6]])
    r1, r2 = jaxhc.bhc(X, ng, progress_bar=False), jaxhc.bhc(X, niw, progress_bar=False)
    assert r1.tree.same_hierarchy(r2.tree)
    np.testing.assert_allclose(float(r1.log_evidence), float(r2.log_evidence), rtol=1e-10)
    X3 = np.random.default_rng(6).normal(size=(10, 3))
    res = jaxhc.bhc(X3, NormalGamma.from_data(X3), progress_bar=False)
    assert np.isfinite(float(res.log_evidence)) and res.tree.n_leaves == 10


def test_extreme_counts_exact_or_refused():
    """Count families at extreme sizes: a BetaBinomial with 1e12 trials builds no lookup
    table (it used to allocate n * trials entries and fail with an XLA out-of-memory error)
    and agrees with the closed form; counts beyond the dtype's exact integers are refused."""
    from scipy.special import betaln

    import jaxhc
    from jaxhc.components import BetaBinomial, DirichletMultinomial

    T = 10**12
    comp = BetaBinomial(2.0, 3.0, trials=T)
    assert comp.count_cache(8) is None
    X = np.array([[3.0, T - 5.0], [T / 2, 7.0]])
    s = comp.stats(jnp.asarray(X))
    want = sum(betaln(2.0 + X[:, j].sum(), 3.0 + 2 * T - X[:, j].sum()) - betaln(2.0, 3.0) for j in range(2))
    got = float(comp.log_marginal(s)) - float(jnp.sum(s.logc))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    with pytest.raises(ValueError, match="trials must be at most 2\\^53"):
        BetaBinomial(1.0, 1.0, trials=2**60)
    with pytest.raises(ValueError, match="row totals must be at most 2\\^53"):
        jaxhc.bhc(np.full((4, 3), 1e300), DirichletMultinomial(np.ones(3)))


# ---------------------------------------------------------------------------------------
# column splitting (BHCC, the CDPM): one interface on the families, one error type
# ---------------------------------------------------------------------------------------
def test_column_split_refusals_are_one_error():
    """Families whose columns are not independent given the cluster refuse every
    column-splitting method with `ColumnSplitError`, which is both a TypeError and a
    ValueError; the message names the algorithm, the separable families and the family."""
    from jaxhc.components import ColumnSplitError

    full = NormalKnownCov(jnp.zeros(2), jnp.array([[1.0, 0.5], [0.5, 1.0]]))
    for comp in (NormalInverseWishart(jnp.zeros(2)), NormalGamma(jnp.zeros(2)), DirichletMultinomial(jnp.ones(2))):
        name = type(comp).__name__
        assert comp.column_parameters() is None
        for call in (
            lambda: comp.check_column_split("ALG"),
            lambda: comp.restrict_columns([0], name="ALG"),
            lambda: comp.column_components(2, "ALG"),
        ):
            with pytest.raises(ColumnSplitError) as err:
                call()
            assert isinstance(err.value, TypeError) and isinstance(err.value, ValueError)
            assert str(err.value) == (
                "ALG splits columns into views, which needs a column-separable component (columns independent given "
                "the cluster: BetaBernoulli, BetaBinomial, IndependentNormal, NormalKnownCov with diagonal "
                f"covariances); got {name}"
            )
    for call in (lambda: full.check_column_split("ALG"), lambda: full.column_components(2, "ALG")):
        with pytest.raises(
            ColumnSplitError,
            match="ALG needs a column-separable component; component.prior_cov of NormalKnownCov must be diagonal",
        ):
            call()


def test_restrict_columns_and_column_components():
    """`restrict_columns` slices per-column parameters (scalars stay scalars; NormalKnownCov
    takes sub-matrices, also of full covariances); `column_components` stacks one component per
    column whose log marginals are those of `restrict_columns`."""
    from jaxhc.components import IndependentNormal

    bb = BetaBinomial(jnp.array([1.0, 2.0, 3.0]), 2.0, (3, 4, 5))
    r = bb.restrict_columns([2, 0])
    np.testing.assert_array_equal(np.asarray(r.a), [3.0, 1.0])
    assert np.ndim(r.b) == 0 and r.trials == (5, 3)
    with pytest.raises(ValueError, match="ALG needs the same number of trials"):
        bb.column_components(3, "ALG")
    full = NormalKnownCov(jnp.array([0.0, 1.0, 2.0]), jnp.array([[1.0, 0.5, 0.0], [0.5, 2.0, 0.1], [0.0, 0.1, 3.0]]))
    r = full.restrict_columns([2, 1])
    np.testing.assert_array_equal(np.asarray(r.prior_cov), [[3.0, 0.1], [0.1, 2.0]])
    np.testing.assert_array_equal(np.asarray(r.mean), [2.0, 1.0])
    ind = IndependentNormal(jnp.array([0.0, 1.0, 2.0]), 2.0, jnp.array([0.5, 1.0, 1.5]))
    r = ind.restrict_columns([1])
    assert np.ndim(r.prior_var) == 0 and np.asarray(r.noise_var).tolist() == [1.0]
    assert ind.column_parameters().kind == "normal" and bb.column_parameters().kind == "beta"
    np.testing.assert_array_equal(np.asarray(full.column_parameters().p2), [1.0, 2.0, 3.0])

    X = np.array([[0.0, 1.0, 3.0], [1.0, 4.0, 2.0], [2.0, 0.0, 1.0]])
    diag = NormalKnownCov(jnp.array([0.0, 1.0, 2.0]), jnp.array([1.0, 2.0, 3.0]), jnp.array([0.5, 1.0, 1.5]))
    for comp in (BetaBinomial(jnp.array([1.0, 2.0, 3.0]), 2.0, 4), BetaBernoulli(0.5, 2.0), diag, ind):
        Xc = (X > 1.0).astype(float) if isinstance(comp, BetaBernoulli) else X
        stacked = comp.column_components(3)
        for j in range(3):
            one = jax.tree_util.tree_map(lambda x: x[j], stacked)
            want = comp.restrict_columns([j]).log_marginal(comp.restrict_columns([j]).stats(Xc[:, [j]]))
            np.testing.assert_allclose(float(one.log_marginal(one.stats(Xc[:, [j]]))), float(want), rtol=1e-12)


def test_new_family_needs_only_its_own_methods():
    """A column-separable family defined elsewhere gets `column_components` from the base
    class once it implements `check_column_split` and `restrict_columns`."""

    class _Cols(NormalGamma):
        def check_column_split(self, name):
            pass

        def restrict_columns(self, cols, *, name="restrict_columns"):
            cols = np.asarray(cols)
            return _Cols(self.mean[cols], self.kappa, self.a, self.b[cols])

    comp = _Cols(jnp.array([0.0, 1.0]), 1.0, 2.0, jnp.array([1.0, 2.0]))
    stacked = comp.column_components(2)
    assert stacked.mean.shape == (2, 1) and stacked.b.shape == (2, 1)
