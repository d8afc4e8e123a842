"""Compile once, fit many: BHCC and RBHCC (and their predictives) with the table's rows and
columns padded to the library's size grid. The padded runs equal the exact-shape runs
(same trees, views, row trees; every number to 1e-10; the same key gives the same RBHCC
answer whatever the bucket), and tables of one bucket compile nothing after the first."""

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np
import pytest

import jaxhc
from jaxhc._internal.buckets import bucket
from jaxhc._internal.compiles import count_compilations
from jaxhc.inference.bhcc import columns


def _table(I, J, seed=0, family="bernoulli", missing=0.1):
    """An ``I x J`` table of two column views with three row clusters each, in ``family``'s
    domain, a fraction ``missing`` of its entries NaN; and the component."""
    rng = np.random.default_rng(seed)
    u = rng.integers(0, 2, J)
    z = rng.integers(0, 3, (2, I))
    th = rng.uniform(0.1, 0.9, (2, 3, J))
    p = th[u, z[u].T, np.arange(J)]  # [I, J]
    if family == "normal":
        X = rng.normal(4.0 * p, 0.5)
        comp = jaxhc.IndependentNormal(2.0, 4.0, 0.5)
    elif family == "binomial":  # per-column priors (the per-column table lookups)
        X = rng.binomial(3, p).astype(float)
        comp = jaxhc.BetaBinomial(np.linspace(0.5, 2.0, J), 1.5, 3)
    else:
        X = (rng.random((I, J)) < p).astype(float)
        comp = jaxhc.BetaBernoulli(1.0, 1.0)
    if missing and I * J > 4:
        X[rng.random(X.shape) < missing] = np.nan
        X[0] = np.where(np.isnan(X[0]), 1.0, X[0])  # row 0 observed (the predictive queries)
    return X, comp


@pytest.fixture
def exact_shapes(monkeypatch):
    """Runs the unpadded (exact-shape) path while active."""

    def run(f, *a, **kw):
        monkeypatch.setattr(columns, "PAD_TO_BUCKETS", False)
        try:
            return f(*a, **kw)
        finally:
            monkeypatch.setattr(columns, "PAD_TO_BUCKETS", True)

    return run


def _fit_and_predict(fit, X):
    res = fit()
    I, J = X.shape
    Xo = np.where(np.isnan(X), 0.0, X)
    preds = (
        jaxhc.bhcc_predictive_row(res, Xo[:2]),
        jaxhc.bhcc_predictive_column(res, Xo[:, :2].T),
    )
    if res.component.column_parameters().kind == "beta":
        # every value of the domain (a query shape that does not depend on the data drawn)
        top = int(np.max(np.asarray(getattr(res.component, "trials", 1))))
        vals = np.tile(np.arange(top + 1, dtype=float), (3, 1))
        preds += (jaxhc.bhcc_predictive_cell(res, [0, I - 1, I // 2], [0, J - 1, J // 2], vals),)
    return res, preds


def _same(a, b, tol=1e-10):
    (ra, pa), (rb, pb) = a, b
    assert np.array_equal(ra.tree.children, rb.tree.children)
    assert np.array_equal(ra.cut(0.5), rb.cut(0.5))
    for name in ("log_evidence", "cdpm_lower_bound", "refine_gain", "log_r", "log_h1", "log_d", "log_pT", "log_1mr"):
        np.testing.assert_allclose(np.asarray(getattr(ra, name)), np.asarray(getattr(rb, name)), rtol=0, atol=tol)
    assert len(ra.views) == len(rb.views)
    for va, vb in zip(ra.views, rb.views):
        assert np.array_equal(va.columns, vb.columns) and va.node == vb.node
        assert np.array_equal(va.rows.tree.children, vb.rows.tree.children)
        assert np.array_equal(va.cut(0.5), vb.cut(0.5))
        for name in ("log_evidence", "dpm_lower_bound", "log_r", "log_d", "log_pT", "log_h1", "log_1mr"):
            x, y = np.asarray(getattr(va.rows, name)), np.asarray(getattr(vb.rows, name))
            np.testing.assert_allclose(x, y, rtol=0, atol=tol)
        for x, y in zip(jax.tree_util.tree_leaves(va.rows.node_stats), jax.tree_util.tree_leaves(vb.rows.node_stats)):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    np.testing.assert_allclose(ra.views_log_joint(), rb.views_log_joint(), rtol=0, atol=tol)
    for x, y in zip(pa, pb):
        np.testing.assert_allclose(x, y, rtol=0, atol=tol)


# ---------------------------------------------------------------------------------------
# padded == exact shape, on both sides of a bucket edge (rows 8 | 9: buckets 8 | 10;
# columns J + 1 = 8 | 9: buckets 8 | 10), and the predictives (each exact shape compiles
# its own programs: few shapes keep the file fast)
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("I,J", [(8, 7), (9, 8)])
def test_bhcc_padded_equals_exact_shape_across_a_bucket_edge(I, J, exact_shapes):
    X, comp = _table(I, J, seed=I + J)
    fit = lambda: jaxhc.bhcc(X, comp, 0.8)
    _same(_fit_and_predict(fit, X), exact_shapes(_fit_and_predict, fit, X))
    # the stochastic search (host moves over the same evidence programs)
    fit = lambda: jaxhc.bhcc(X, comp, 1.0, search="stochastic", seed=2, search_rounds=1, restarts=1)
    _same((fit(), ()), (exact_shapes(fit), ()))


def test_rbhcc_same_key_same_answer_padded_or_not(exact_shapes):
    """RBHCC's random subsets are drawn on the host at the real sizes: the same key gives
    the same tree whatever the bucket (a filtering level, truncated groups, the screened
    refinement and the stochastic search)."""
    X, comp = _table(9, 8, seed=17)
    key = jax.random.key(7)
    kw = dict(subset_size=3, threshold=4, levels=1, search="stochastic", search_rounds=1, restarts=1)
    fit = lambda: jaxhc.rbhcc(key, X, comp, 1.0, **kw)
    _same(_fit_and_predict(fit, X), exact_shapes(_fit_and_predict, fit, X))


@pytest.mark.parametrize("family,I,J", [("normal", 5, 2), ("binomial", 1, 2)])
def test_other_families_padded_equal_exact_shape(family, I, J, exact_shapes):
    """The Normal family's statistics, the Beta-Binomial's per-column prior tables, and a
    single row (no merges: 7 padding rows)."""
    X, comp = _table(I, J, seed=4, family=family)
    fit = lambda: jaxhc.bhcc(X, comp, 0.8)
    _same(_fit_and_predict(fit, X), exact_shapes(_fit_and_predict, fit, X))


def test_padding_rows_and_columns_are_missing_entries():
    X, comp = _table(9, 8)
    cd = columns.column_model(comp, X)
    assert (cd.n_rows, cd.n_cols, cd.n_slots) == (9, 8, bucket(9))
    n_obs = np.asarray(cd.s[0])
    assert n_obs.shape == (bucket(9), bucket(9))  # rows bucket(9), columns bucket(8 + 1)
    assert np.all(n_obs[9:] == 0) and np.all(n_obs[:, 8:] == 0)
    assert np.array_equal(n_obs[:9, :8], ~np.isnan(X))
    assert all(np.all(np.asarray(f)[9:] == 0) and np.all(np.asarray(f)[:, 8:] == 0) for f in cd.s)


# ---------------------------------------------------------------------------------------
# compilations: none after the first table of a bucket
# ---------------------------------------------------------------------------------------
# rows 3..8 share bucket 8; columns 5..7 share bucket(J + 1) = 8
_SAME_BUCKET = [(3, 5), (4, 6), (5, 7), (6, 5), (7, 6), (8, 7), (2, 7), (8, 5)]
# the other families on one- and two-column tables (one view width: the programs of
# `test_other_families_padded_equal_exact_shape`)
_SAME_BUCKET_NARROW = [(1, 2), (2, 1), (3, 2), (5, 2), (6, 1), (8, 2), (7, 1)]


@pytest.mark.parametrize("family", ["bernoulli", "normal", "binomial"])
def test_bhcc_and_predictives_compile_nothing_within_a_bucket(family):
    def run(I, J, seed):
        X, comp = _table(I, J, seed=seed, family=family)
        _fit_and_predict(lambda: jaxhc.bhcc(X, comp, 1.0), X)

    sizes = _SAME_BUCKET if family == "bernoulli" else _SAME_BUCKET_NARROW
    # the first call of each path: one column (no column tree, no search) and more
    warm = [sizes[-1]] + ([(8, 2)] if family != "bernoulli" else [])
    for I, J in warm:
        run(I, J, 0)
    with count_compilations() as c:
        for I, J in sizes[:-1]:
            if (I, J) not in warm:
                run(I, J, I * J)
    assert c.compiled == 0, c


def test_rbhcc_compiles_nothing_within_a_bucket():
    key = jax.random.key(1)

    def run(I, J, seed):
        X, comp = _table(I, J, seed=seed)
        res = jaxhc.rbhcc(key, X, comp, 1.0, subset_size=3, threshold=4)
        assert res.n_columns == J and res.views[0].rows.n_points == I

    run(*_SAME_BUCKET[-1], 0)
    with count_compilations() as c:
        for I, J in _SAME_BUCKET[:-1]:
            run(I, J, I * J)
    assert c.compiled == 0, c


def test_a_sweep_compiles_once_per_bucket_touched():
    """Rows 5..12 of a two-column Bernoulli table (no other test of this file uses it): the
    programs of one call at the first table of each new row bucket, nothing at the others."""
    X, comp = _table(12, 2, seed=1)
    jaxhc.bhcc(X[:5], comp)  # bucket 8, and the programs that depend on no size
    counts = {}
    for I in (6, 8, 9, 10, 11, 12):
        with count_compilations() as c:
            jaxhc.bhcc(X[:I], comp)
        counts.setdefault(bucket(I), []).append(c.compiled)
    assert sorted(counts) == [8, 10, 12]
    assert all(v[1:] == [0] * (len(v) - 1) for v in counts.values()), counts
    assert counts[8][0] == 0, counts
    # a call's padded programs at one view width: the pair tables, their merge, the batched
    # evidence and the full row BHC
    firsts = [counts[10][0], counts[12][0]]
    assert max(firsts) <= 4 and min(firsts) >= 1, counts
