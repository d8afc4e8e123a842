"""Compile once, fit many: the library's size grid, and BHC (greedy, randomized, the
hyperparameter learning, the predictives) padded to it. The padded runs equal the
exact-shape runs, and sizes of one bucket compile nothing after the first."""

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np
import pytest

import jaxhc
from jaxhc._internal.buckets import GRID_STEPS, MIN_BUCKET, bucket, bucket_grid, buckets_of, pad_rows
from jaxhc._internal.compiles import count_compilations
from jaxhc.inference.bhc import terms


def _data(n, d=3, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    return rng.normal(size=(n, d)) + 4.0 * np.eye(d)[y]


@pytest.fixture
def exact_shapes(monkeypatch):
    """Runs the unpadded (exact-shape) path while active."""

    def run(f, *a, **kw):
        monkeypatch.setattr(terms, "PAD_TO_BUCKETS", False)
        try:
            return f(*a, **kw)
        finally:
            monkeypatch.setattr(terms, "PAD_TO_BUCKETS", True)

    return run


# ---------------------------------------------------------------------------------------
# the grid
# ---------------------------------------------------------------------------------------
def test_the_grid_steps_by_at_most_a_quarter_and_covers_every_size():
    sizes = np.arange(1, 5000)
    b = np.array([bucket(int(n)) for n in sizes])
    assert np.all(b >= sizes) and np.all(b >= MIN_BUCKET)
    assert np.all(np.diff(b) >= 0)
    grid = sorted(set(b.tolist()))
    assert grid[:9] == [8, 10, 12, 14, 16, 20, 24, 28, 32]
    assert max(hi / lo for lo, hi in zip(grid, grid[1:])) <= 1.25
    for g in grid:  # every grid size is q * 2^e and its own bucket
        assert bucket(g) == g
        e = int(np.log2(g)) - 2
        assert g % (1 << e) == 0 and g >> e in GRID_STEPS
    # a padded size carries at most 25% padding (above the minimum)
    assert np.all((b - sizes)[sizes > MIN_BUCKET] < 0.25 * sizes[sizes > MIN_BUCKET])
    assert bucket_grid(20, 2000) == buckets_of(range(20, 2001)) and len(bucket_grid(20, 2000)) == 28
    assert bucket(100) == 112 and bucket(113) == 128 and bucket(3, minimum=64) == 64


def test_pad_rows():
    x = np.arange(6.0).reshape(3, 2)
    p = pad_rows(x, 5, fill=-1)
    assert p.shape == (5, 2) and np.array_equal(p[:3], x) and np.all(p[3:] == -1)
    assert pad_rows(x, 3) is x or np.array_equal(pad_rows(x, 3), x)
    q = pad_rows(x, 4, "first", axis=1)
    assert q.shape == (3, 4) and np.array_equal(q[:, :2], x) and np.array_equal(q[:, 2:], x[:, :1].repeat(2, 1))
    with pytest.raises(ValueError):
        pad_rows(x, 2)
    with pytest.raises(ValueError):
        pad_rows(x, 5, "last")


# ---------------------------------------------------------------------------------------
# padded == exact shape, on both sides of bucket edges
# ---------------------------------------------------------------------------------------
def _same_result(a, b, tol=1e-10):
    assert np.array_equal(a.tree.children, b.tree.children)
    for name in ("log_evidence", "dpm_lower_bound", "log_r", "log_d", "log_pT", "log_h1", "log_1mr"):
        np.testing.assert_allclose(np.asarray(getattr(a, name)), np.asarray(getattr(b, name)), rtol=0, atol=tol)
    assert np.array_equal(a.cut(0.5), b.cut(0.5))


@pytest.mark.parametrize(
    "family,n",
    [("niw", 2), ("niw", 16), ("niw", 17), ("niw", 21), ("normalgamma", 16), ("normalgamma", 17)]
    + [("bernoulli_missing", 20), ("bernoulli_missing", 21)],
)
def test_bhc_padded_equals_exact_shape(n, family, exact_shapes):
    if family == "bernoulli_missing":
        rng = np.random.default_rng(n)
        X = (rng.random((n, 5)) < np.where(rng.random((n, 1)) < 0.5, 0.2, 0.8)).astype(float)
        X[rng.random(X.shape) < 0.1] = np.nan
        comp = jaxhc.BetaBernoulli.from_data(X)
    else:
        X = _data(n)
        comp = jaxhc.components.NormalGamma.from_data(X) if family == "normalgamma" else None
        comp = comp or jaxhc.NormalInverseWishart.from_data(X)
    a = jaxhc.bhc(X, comp, 0.7)
    b = exact_shapes(jaxhc.bhc, X, comp, 0.7)
    _same_result(a, b)
    # the fixed-tree recursion of the found tree too
    ta = jaxhc.tree_log_evidence(X, a.tree, comp, 0.7)
    tb = exact_shapes(jaxhc.tree_log_evidence, X, b.tree, comp, 0.7)
    for x, y in zip(ta, tb):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=0, atol=1e-10)
    np.testing.assert_allclose(float(ta.log_evidence), float(a.log_evidence), rtol=0, atol=1e-9)
    # the predictives too (nodes and query rows padded)
    pa = np.asarray(jaxhc.bhc_predictive(a, X[:3]))
    pb = np.asarray(exact_shapes(jaxhc.bhc_predictive, b, X[:3]))
    np.testing.assert_allclose(pa, pb, rtol=0, atol=1e-10)


@pytest.mark.parametrize("n", [20, 21])
def test_learned_hyperparameters_padded_equal_exact_shape(n, exact_shapes):
    X = _data(n, seed=3)
    comp = jaxhc.NormalInverseWishart.from_data(X)
    kw = dict(objective="dpm_lower_bound", steps=20, max_rounds=2)
    a = jaxhc.learn_hyperparameters(X, comp, 1.0, **kw)
    b = exact_shapes(jaxhc.learn_hyperparameters, X, comp, 1.0, **kw)
    _same_result(a.result, b.result)
    np.testing.assert_allclose(a.trace, b.trace, rtol=0, atol=1e-10)
    np.testing.assert_allclose(a.alpha, b.alpha, rtol=1e-10)
    for x, y in zip(jax.tree_util.tree_leaves(a.component), jax.tree_util.tree_leaves(b.component)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-10, atol=1e-12)
    for x, y in zip(a.m_step_traces, b.m_step_traces):
        np.testing.assert_allclose(x, y, rtol=0, atol=1e-9)


def test_predictive_cell_padded_equals_exact_shape(exact_shapes):
    rng = np.random.default_rng(0)
    X = (rng.random((13, 4)) < 0.5).astype(float)
    X[0, 1] = X[5, 2] = np.nan
    res = jaxhc.bhc(X, jaxhc.BetaBernoulli.from_data(X))
    a = jaxhc.bhc_predictive_cell(res, [0, 5], [1, 2], [[0.0, 1.0], [0.0, 1.0]])
    b = exact_shapes(jaxhc.bhc_predictive_cell, res, [0, 5], [1, 2], [[0.0, 1.0], [0.0, 1.0]])
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.exp(a).sum(axis=1), 1.0, atol=1e-10)


# ---------------------------------------------------------------------------------------
# compilations: none after the first size of a bucket
# ---------------------------------------------------------------------------------------
def test_bhc_compiles_nothing_within_a_bucket():
    comp = jaxhc.NormalInverseWishart.from_data(_data(60))
    jaxhc.bhc_predictive(jaxhc.bhc(_data(41), comp), _data(3))  # bucket 48; 3 rows: bucket 8
    with count_compilations() as c:
        for n in range(42, 49):
            res = jaxhc.bhc(_data(n, seed=n), comp)
            jaxhc.bhc_predictive(res, _data(n - 40, seed=1))  # 2..8 rows: bucket 8
    assert c.compiled == 0, c


def test_fit_bhc_compiles_nothing_within_a_bucket():
    jaxhc.fit_bhc(_data(33))  # bucket 40
    with count_compilations() as c:
        for n in (35, 38, 40):
            fit = jaxhc.fit_bhc(_data(n, seed=n))
            assert fit.result.n_points == n
    assert c.compiled == 0, c


def test_rbhc_compiles_nothing_for_new_sizes():
    comp = jaxhc.NormalInverseWishart.from_data(_data(200))
    key = jax.random.key(0)
    jaxhc.rbhc(key, _data(150), comp, subset_size=16, leaf_size=32)
    with count_compilations() as c:
        for n in (152, 156, 160):  # bucket 160, as 150
            res = jaxhc.rbhc(key, _data(n, seed=n), comp, subset_size=16, leaf_size=32)
            assert res.n_points == n
    assert c.compiled == 0, c


def test_a_sweep_compiles_once_per_bucket_touched():
    d = 7  # a width no other test of this file uses: every bucket's programs are new here
    comp = jaxhc.components.NormalGamma.from_data(_data(100, d))
    jaxhc.bhc(_data(10, d), comp)  # the programs that do not depend on n
    counts = {}
    for n in (21, 23, 24, 25, 27, 28, 29, 31, 33, 39):
        with count_compilations() as c:
            jaxhc.bhc(_data(n, d, seed=n), comp)
        counts.setdefault(bucket(n), []).append(c.compiled)
    assert sorted(counts) == [24, 28, 32, 40]
    firsts = [v[0] for v in counts.values()]
    assert all(v[1:] == [0] * (len(v) - 1) for v in counts.values()), counts
    assert max(firsts) <= 3 and min(firsts) >= 1, counts  # the search's programs, once a bucket
