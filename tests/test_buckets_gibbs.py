"""Shape buckets of the MCMC baselines (issue 53, "compile once, fit many"): `dpm_gibbs` pads
the rows, `cdpm_mcmc` the rows and the columns, to the library's bucket grid, with padding
that takes part in nothing. Facts checked: the padded runs equal the exact-shape runs
(same key, same labels, numbers to 1e-10) on both sides of a bucket edge, DPM Gibbs still
draws the samples it drew before padding existed, and every size of a bucket reuses the
bucket's compiled programs (counted with `count_compilations`)."""

import contextlib

import jax
import numpy as np
import pytest

from jaxhc._internal.buckets import bucket
from jaxhc._internal.compiles import count_compilations
from jaxhc.components import BetaBernoulli, NormalKnownCov
from jaxhc.inference import gibbs as G
from jaxhc.inference.gibbs import cdpm as C
from jaxhc.inference.gibbs import common
from jaxhc.inference.gibbs import dpm as D

BB = BetaBernoulli(1.0, 0.7)  # scalar parameters: one component for every number of columns
DPM_KW = dict(num_samples=3, num_warmup=2, thin=2, num_split_merge=1, num_restricted_scans=1, progress_bar=False)
CDPM_KW = dict(num_samples=3, num_warmup=2, heat=0.7, progress_bar=False)
ALPHA = 1.3


@contextlib.contextmanager
def exact_shapes():
    """Programs at the data's exact shape (no padding): the reference path."""
    old = common._BUCKETS
    common._BUCKETS = False
    try:
        yield
    finally:
        common._BUCKETS = old


def binary(n, d, seed=0):
    rng = np.random.default_rng(seed + 100 * n + d)
    X = (rng.random((n, d)) < np.where(np.arange(n)[:, None] % 3 == 0, 0.85, 0.2)).astype(float)
    X[1, 0] = np.nan  # a missing cell
    return X


def normal(n, d, seed=0):
    rng = np.random.default_rng(seed + 100 * n + d)
    return np.where(np.arange(n)[:, None] % 2 == 0, 2.0, -1.0) + 0.5 * rng.normal(size=(n, d))


def assert_same(a, b, what):
    """Equal integer leaves, float leaves to 1e-10, same shapes."""
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(la) == len(lb), what
    for x, y in zip(la, lb):
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape, (what, x.shape, y.shape)
        if np.issubdtype(x.dtype, np.floating):
            np.testing.assert_allclose(x, y, rtol=0, atol=1e-10, err_msg=what)
        else:
            np.testing.assert_array_equal(x, y, err_msg=what)


# ------------------------------------------------------------------------------------------
# padded == exact shape
# ------------------------------------------------------------------------------------------
def _dpm_all(X, comp):
    key = jax.random.key(7)
    res = G.dpm_gibbs(key, X, comp, ALPHA, **DPM_KW)
    st = G.dpm_gibbs_init(jax.random.key(3), X, comp, ALPHA)
    infos = []
    for k in jax.random.split(jax.random.key(4), 2):
        st, info = G.dpm_gibbs_step(k, st, X, comp, ALPHA, num_split_merge=1, num_restricted_scans=1)
        infos.append(info)
    n = X.shape[0]
    rows, cols = np.array([0, 1, n - 1]), np.array([0, 0, 2])
    cells = G.dpm_predict_cells(X, comp, res.labels, rows, cols, np.array([1.0, 0.0, 1.0]))
    return res, st, infos, cells


@pytest.mark.parametrize("n", [32, 33])  # bucket 32 holds 32 rows exactly; 33 rows pad to 40
def test_dpm_padded_equals_exact_shape(n):
    X = binary(n, 3)
    padded = _dpm_all(X, BB)
    with exact_shapes():
        exact = _dpm_all(X, BB)
    assert_same(padded, exact, f"dpm n={n}")
    res, st = padded[0], padded[1]
    assert res.labels.shape == (3, n) and st.labels.shape == (n,) and st.counts.shape == (n,)
    assert jax.tree_util.tree_leaves(res.state.stats)[0].shape[0] == n
    if n == 33:  # the samples drawn before padding existed (jaxhc at 7b755de), bit for bit
        want = [3, 2, 2, 1, 2, 2, 3, 2, 2, 4, 3, 3, 5, 2, 2, 8, 2, 2, 3, 2, 2, 3, 2, 2, 2, 2, 2, 3, 3, 2, 8, 2, 2]
        np.testing.assert_array_equal(np.asarray(res.labels[-1]), want)
        assert abs(float(res.log_joint[-1]) - -84.49131240816061) < 1e-10


def _cdpm_all(X, comp):
    res = G.cdpm_mcmc(jax.random.key(5), X, comp, ALPHA, **CDPM_KW)
    st = G.cdpm_mcmc_init(jax.random.key(8), X, comp, ALPHA)
    infos = []
    for k in jax.random.split(jax.random.key(9), 2):
        st, info = G.cdpm_mcmc_step(k, st, X, comp, ALPHA, heat=0.7)
        infos.append(info)
    n, J = X.shape
    rows, cols = np.array([0, 1, n - 1]), np.array([0, J - 1, 1])
    vals = np.array([1.0, 0.0, 1.0]) if isinstance(comp, BetaBernoulli) else np.array([0.3, -1.0, 2.0])
    cells = G.cdpm_predict_cells(X, comp, res.column_views, res.row_labels, rows, cols, vals)
    return res, st, infos, cells


@pytest.mark.parametrize(
    "n, J, family",
    [(16, 8, "beta"), (17, 9, "beta"), (17, 9, "normal")],  # (16, 8) unpadded; (17, 9) pads to (20, 10)
)
def test_cdpm_padded_equals_exact_shape(n, J, family):
    if family == "beta":
        X, comp = binary(n, J), BB
    else:
        X, comp = normal(n, J), NormalKnownCov(np.zeros(J), 4.0 * np.eye(J), 0.25 * np.eye(J))
    padded = _cdpm_all(X, comp)
    with exact_shapes():
        exact = _cdpm_all(X, comp)
    assert_same(padded, exact, f"cdpm {n}x{J} {family}")
    res, st = padded[0], padded[1]
    assert res.column_views.shape == (3, J) and res.row_labels.shape == (3, n, J)
    assert st.row_labels.shape == (2, n, J) and st.row_counts.shape == (2, J, n) and st.log_marginals.shape == (2, n, J)
    # the state after steps from a padded program is the state a recount gives
    fresh = G.cdpm_mcmc_init(None, X, comp, ALPHA, column_views=st.column_views[0], row_labels=st.row_labels[0])
    assert abs(float(fresh.log_joint[0]) - float(st.log_joint[0])) < 1e-9


# ------------------------------------------------------------------------------------------
# compilations: one set of programs a bucket
# ------------------------------------------------------------------------------------------
def _dpm_calls(n, d=3):
    X = binary(n, d)
    res = G.dpm_gibbs(jax.random.key(n), X, BB, ALPHA, **DPM_KW)
    st = G.dpm_gibbs_init(jax.random.key(1), X, BB, ALPHA)
    G.dpm_gibbs_step(jax.random.key(2), st, X, BB, ALPHA, num_split_merge=1, num_restricted_scans=1)
    G.dpm_predict_cells(X, BB, res.labels, [0, n - 1], [0, 1], [1.0, 0.0])
    return res


def _cdpm_calls(n, J):
    X = binary(n, J)
    res = G.cdpm_mcmc(jax.random.key(n + J), X, BB, ALPHA, **CDPM_KW)
    st = G.cdpm_mcmc_init(jax.random.key(1), X, BB, ALPHA)
    G.cdpm_mcmc_step(jax.random.key(2), st, X, BB, ALPHA, heat=0.7)
    G.cdpm_predict_cells(X, BB, res.column_views, res.row_labels, [0, n - 1], [0, J - 1], [1.0, 0.0])
    return res


def test_sizes_of_one_bucket_compile_nothing_new():
    """After one call at 33 rows (bucket 40), 34..40 rows compile no program; after one at
    17 x 9 (bucket 20 x 10) the CDPM compiles none for six other shapes of that bucket (init,
    single steps and cell predictives included)."""
    _dpm_calls(33)
    with count_compilations() as c:
        for n in range(34, 41):
            assert _dpm_calls(n).labels.shape == (3, n)
    assert c.compiled == 0, c
    _cdpm_calls(17, 9)
    shapes = [(18, 9), (19, 10), (20, 10), (17, 10), (20, 9), (18, 10)]
    assert {(bucket(n), bucket(J)) for n, J in shapes} == {(20, 10)}
    with count_compilations() as c:
        for n, J in shapes:
            assert _cdpm_calls(n, J).row_labels.shape == (3, n, J)
    assert c.compiled == 0, c


def _cache_sizes(fns):
    return np.array([f._cache_size() for f in fns])


@pytest.mark.parametrize("system", ["dpm", "cdpm"])
def test_sweep_compiles_once_per_bucket(system):
    """A sweep over sizes of two buckets: each jitted entry point gains at most one program per
    bucket, a call in a bucket seen before compiles nothing, and a bucket's first call
    compiles no more than the sweep's first call did when that one was fresh."""
    if system == "dpm":
        sizes, key, call = [29, 30, 34, 31, 39, 32, 40], bucket, _dpm_calls
        fns = (D._dpm_chunk, D._dpm_init_jit, common.crp_draw_jit)
    else:
        sizes, call = [(15, 7), (17, 9), (16, 5), (19, 10), (15, 8)], lambda s: _cdpm_calls(*s)
        key = lambda s: (bucket(s[0]), bucket(s[1]))  # noqa: E731
        fns = (C._cdpm_chunk, C._cdpm_init_jit, common.crp_draw_jit)
    assert len({key(s) for s in sizes}) == 2
    seen, first = set(), None
    for s in sizes:
        before = _cache_sizes(fns)
        with count_compilations() as c:
            call(s)
        grown = _cache_sizes(fns) - before
        if key(s) in seen:
            assert c.compiled == 0 and not grown.any(), (s, c, grown)
            continue
        seen.add(key(s))
        assert grown.max() <= (2 if system == "cdpm" else 1), (s, grown)  # crp_draw_jit: u [Jb] and Z [Nb, Jb]
        if first is None:
            first = c.compiled if grown[0] else None  # a fresh first bucket bounds the next ones
        else:
            assert c.compiled <= first, (s, c.compiled, first)
