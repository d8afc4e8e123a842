"""BHCC / RBHCC (Li & Shafto): Algorithm 1-2, Theorem 5.5, Corollary 5.6, section 6."""

import itertools

import jax
import numpy as np
import pytest
from scipy.special import gammaln, logsumexp
from sklearn.metrics import adjusted_rand_score

import jaxhc
from jaxhc.datasets import cross_cluster_table, cross_clustering_synthetic
from jaxhc.inference.bhcc import (
    IndependentNormal,
    bhcc,
    bhcc_predictive_cell,
    bhcc_predictive_column,
    bhcc_predictive_row,
    rbhcc,
)
from jaxhc.models.cdpm import cdpm_log_evidence_bruteforce, restrict_columns


def _two_view_table(seed, I=8, J=4, trials=6):
    rng = np.random.default_rng(seed)
    za, zb = rng.integers(0, 2, I), rng.integers(0, 2, I)
    th = rng.beta(0.5, 0.5, size=(2, 2, J))
    X = np.empty((I, J))
    for j in range(J):
        v = int(j >= J // 2)
        X[:, j] = rng.binomial(trials, th[v, (za, zb)[v], j])
    return X


def _ptns_sum(res):
    """log sum over the tree-consistent column partitions u of p(u|T) prod_v p(X_v|BHC)
    (Theorem 5.5), by enumerating Ptns(T) (Definition 5.1)."""
    J = res.n_columns
    ch = np.asarray(res.tree.children)
    sets = res.tree.leaf_sets()
    l1 = np.asarray(res.log_1mr)

    def ptns(k):
        if k < J or np.isneginf(l1[k]):  # a leaf, or a truncated group: only itself
            return [[k]]
        a, b = ch[k - J]
        return [[k]] + [pa + pb for pa in ptns(a) for pb in ptns(b)]

    la = np.log(res.alpha)
    terms = []
    for u in ptns(2 * J - 2):
        t = sum(la + gammaln(sets[k].sum()) + res.log_h1[k] for k in u)
        terms.append(t - res.log_d[-1])
    return logsumexp(terms)


# ------------------------------------------------------------------------------------------
# Algorithm 1 and its exactness properties
# ------------------------------------------------------------------------------------------
def test_one_column_is_bhc():
    X = _two_view_table(0, I=8, J=1)
    comp = jaxhc.BetaBinomial(0.5, 0.5, 6)
    res = bhcc(X, comp, 1.3)
    ref = jaxhc.bhc(X, comp, 1.3)
    np.testing.assert_allclose(res.log_evidence, float(ref.dpm_lower_bound), rtol=1e-12)
    # with one column the CDPM is the DPM: the bound of Cor. 5.6 is BHC's DPM bound
    np.testing.assert_allclose(res.cdpm_lower_bound, float(ref.dpm_lower_bound), rtol=1e-12)
    (view,) = res.views
    assert view.rows.tree.same_hierarchy(ref.tree)
    np.testing.assert_allclose(float(view.rows.log_evidence), float(ref.log_evidence), rtol=1e-12)
    # the new-row predictive of one view is BHC's predictive; so is the cell predictive
    Xn = np.array([[0.0], [3.0], [6.0]])
    np.testing.assert_allclose(bhcc_predictive_row(res, Xn), np.asarray(jaxhc.bhc_predictive(ref, Xn)), rtol=1e-9)
    vals = np.tile(np.arange(7.0), (2, 1))
    a = bhcc_predictive_cell(res, [1, 4], [0, 0], vals)
    np.testing.assert_allclose(a, jaxhc.bhc_predictive_cell(ref, [1, 4], [0, 0], vals), rtol=1e-9)
    np.testing.assert_allclose(np.exp(a).sum(axis=1), 1.0, rtol=1e-9)
    # the view's row result carries the user's family: BHC's own functions apply to it
    assert isinstance(view.rows.component, jaxhc.BetaBinomial)
    np.testing.assert_allclose(jaxhc.bhc_predictive_cell(view.rows, [1, 4], [0, 0], vals), a, rtol=1e-9)
    np.testing.assert_allclose(jaxhc.bhc_predictive(view.rows, Xn), jaxhc.bhc_predictive(ref, Xn), rtol=1e-9)


def test_view_evidence_matches_bhc_on_the_view():
    """Every node's log p(X_view | H1) is BHC's DPM bound on the view's columns."""
    X = _two_view_table(1, I=8, J=3)
    comp = jaxhc.BetaBinomial(0.5, 0.5, 6)
    res = bhcc(X, comp, 0.7)
    sets = res.tree.leaf_sets()
    for k in range(res.tree.n_nodes):
        cols = np.flatnonzero(sets[k])
        ref = jaxhc.bhc(X[:, cols], restrict_columns(comp, cols), 0.7)
        np.testing.assert_allclose(res.log_h1[k], float(ref.dpm_lower_bound), rtol=1e-10)


@pytest.mark.parametrize("seed", [0, 1])
def test_theorem_5_5_tree_consistent_sum(seed):
    X = _two_view_table(seed, I=8, J=5)
    res = bhcc(X, jaxhc.BetaBinomial(0.5, 0.5, 6), 1.0 + seed)
    np.testing.assert_allclose(_ptns_sum(res), res.log_evidence, rtol=1e-10)


@pytest.mark.parametrize(
    "comp,kind",
    [
        (jaxhc.BetaBernoulli(1.0, 1.0), "bern"),
        (jaxhc.BetaBinomial(0.5, 0.5, 4), "binom"),
        (jaxhc.NormalKnownCov(np.zeros(3), np.eye(3), 0.3 * np.eye(3)), "normal"),
    ],
)
def test_cdpm_lower_bound_below_exact_evidence(comp, kind):
    """Corollary 5.6 against the CDPM evidence summed over all column partitions and all
    row partitions of every view (4 rows x 3 columns)."""
    rng = np.random.default_rng(len(kind))
    for alpha in (0.5, 2.0):
        if kind == "bern":
            X = rng.integers(0, 2, size=(4, 3)).astype(float)
        elif kind == "binom":
            X = rng.integers(0, 5, size=(4, 3)).astype(float)
        else:
            X = rng.normal(size=(4, 3))
        res = bhcc(X, comp, alpha)
        exact = float(cdpm_log_evidence_bruteforce(X, comp, alpha))
        assert res.cdpm_lower_bound <= exact + 1e-9
        assert res.cdpm_lower_bound > exact - 5.0  # and not vacuous


def test_columns_from_one_dpm_form_one_view():
    rng = np.random.default_rng(3)
    z = np.repeat([0, 1, 2], 10)
    theta = rng.beta(0.5, 0.5, size=(3, 6))
    X = rng.binomial(20, theta[z]).astype(float)
    res = bhcc(X, jaxhc.BetaBinomial(0.5, 0.5, 20), 1.0)
    assert np.exp(res.log_r[-1]) > 0.5
    assert len(res.views) == 1
    assert adjusted_rand_score(z, res.views[0].cut()) > 0.9


def test_four_views_recovered():
    X, u, Z = cross_clustering_synthetic(0, n_rows=30, n_cols=24, n_views=4)
    res = bhcc(X, jaxhc.BetaBinomial(0.5, 0.5, 50), 1.0)
    assert adjusted_rand_score(u, res.cut(0.5)) >= 0.9
    for v in res.views:
        assert adjusted_rand_score(Z[:, u[v.columns[0]]], v.cut()) >= 0.9


def test_normal_known_cov_and_independent_normal_agree():
    rng = np.random.default_rng(4)
    X = np.concatenate([rng.normal(size=(8, 2)), rng.normal(size=(8, 1)) * 3], axis=1)
    a = bhcc(X, jaxhc.NormalKnownCov(np.zeros(3), np.eye(3), 0.5 * np.eye(3)), 1.0)
    b = bhcc(X, IndependentNormal(np.zeros(3), np.ones(3), 0.5 * np.ones(3)), 1.0)
    np.testing.assert_allclose(a.log_evidence, b.log_evidence, rtol=1e-12)
    # the new-column predictive too (its validation once built a singular NormalKnownCov from
    # the repeated column and raised "prior_cov must be positive definite")
    Y = rng.normal(size=(2, 8))
    np.testing.assert_allclose(bhcc_predictive_column(a, Y), bhcc_predictive_column(b, Y), rtol=1e-10)
    # one column: IndependentNormal's marginal is NormalKnownCov's
    c = IndependentNormal(0.3, 2.0, 0.5)
    s = c.stats(X[:, :1])
    ref = jaxhc.NormalKnownCov(np.array([0.3]), 2.0, 0.5)
    np.testing.assert_allclose(float(c.log_marginal(s)), float(ref.log_marginal(ref.stats(X[:, :1]))), rtol=1e-12)


def test_missing_entries_are_skipped():
    X = _two_view_table(5, I=8, J=3)
    Xm = X.copy()
    Xm[2, 1] = np.nan
    comp = jaxhc.BetaBinomial(0.5, 0.5, 6)
    res = bhcc(Xm, comp, 1.0)
    np.testing.assert_allclose(_ptns_sum(res), res.log_evidence, rtol=1e-10)
    # a fully missing column contributes nothing: it joins any view at no cost
    Xn = np.concatenate([X, np.full((8, 1), np.nan)], axis=1)
    r2 = bhcc(Xn, comp, 1.0)
    assert np.isfinite(r2.log_evidence)


# ------------------------------------------------------------------------------------------
# predictive distributions (section 6)
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_binary():
    rng = np.random.default_rng(6)
    X = rng.integers(0, 2, size=(5, 3)).astype(float)
    X[:, 2] = X[:, 0]
    return X, bhcc(X, jaxhc.BetaBernoulli(1.0, 1.0), 1.0)


def test_row_predictive_is_proper(small_binary):
    _, res = small_binary
    allx = np.array(list(itertools.product([0.0, 1.0], repeat=3)))
    np.testing.assert_allclose(np.exp(bhcc_predictive_row(res, allx)).sum(), 1.0, rtol=1e-9)


def test_column_predictive_is_proper(small_binary):
    _, res = small_binary
    ally = np.array(list(itertools.product([0.0, 1.0], repeat=5)))
    np.testing.assert_allclose(np.exp(bhcc_predictive_column(res, ally)).sum(), 1.0, rtol=1e-9)


def test_cell_predictive_is_proper_and_matches_path_formula():
    X = _two_view_table(7, I=8, J=4)
    X[3, 2] = np.nan
    comp = jaxhc.BetaBinomial(0.5, 0.5, 6)
    res = bhcc(X, comp, 1.0)
    vals = np.tile(np.arange(7.0), (3, 1))
    lp = bhcc_predictive_cell(res, [3, 0, 7], [2, 0, 3], vals)
    np.testing.assert_allclose(np.exp(lp).sum(axis=1), 1.0, rtol=1e-9)
    # Lemma A.7 by hand: column path weights x (row path weights x Beta-Binomial predictive)
    i, j = 3, 2
    lw = res.log_omega()
    par = res.tree.parents()
    sets = res.tree.leaf_sets()
    total = -np.inf
    k = j
    while k >= 0:
        cols = np.flatnonzero(sets[k])
        view = res.view_of(cols)
        rows = view.rows
        rl = np.concatenate([np.zeros(rows.tree.n_leaves), np.asarray(rows.log_r)])
        rpar = rows.tree.parents()
        pos = int(np.flatnonzero(cols == j)[0])
        one = restrict_columns(comp, [j])
        inner = -np.inf
        m = i
        path = []
        while m >= 0:
            path.append(m)
            m = rpar[m]
        for m in path:
            above = sum(float(rows.log_1mr[p]) for p in path if p > m)
            st = jax.tree_util.tree_map(lambda x: np.asarray(x)[m], rows.node_stats)
            s1 = type(st)(st.n[pos : pos + 1], st.succ[pos : pos + 1], st.fail[pos : pos + 1], 0.0)
            lpred = float(one.log_predictive(np.array([[5.0]]), s1)[0])
            inner = np.logaddexp(inner, rl[m] + above + lpred)
        total = np.logaddexp(total, lw[k] + inner)
        k = par[k]
    np.testing.assert_allclose(lp[0, 5], total, rtol=1e-9)


# ------------------------------------------------------------------------------------------
# RBHCC (Algorithm 2)
# ------------------------------------------------------------------------------------------
def test_rbhcc_below_threshold_is_bhcc():
    X = _two_view_table(8, I=8, J=5)
    comp = jaxhc.BetaBinomial(0.5, 0.5, 6)
    a = bhcc(X, comp, 1.0)
    b = rbhcc(jax.random.key(0), X, comp, 1.0, subset_size=4, threshold=8)
    assert a.tree.same_hierarchy(b.tree)
    np.testing.assert_allclose(a.log_evidence, b.log_evidence, rtol=1e-12)


def test_rbhcc_bounds_and_theorem():
    X = _two_view_table(9, I=4, J=4, trials=3)
    comp = jaxhc.BetaBinomial(0.5, 0.5, 3)
    exact = float(cdpm_log_evidence_bruteforce(X, comp, 1.0))
    for levels, refine in itertools.product((None, 1, 0), (False, True)):
        res = rbhcc(jax.random.key(1), X, comp, 1.0, subset_size=2, threshold=2, levels=levels, refine=refine)
        np.testing.assert_allclose(_ptns_sum(res), res.log_evidence, rtol=1e-10)
        assert res.cdpm_lower_bound <= exact + 1e-9
        if levels == 0 and not refine:  # one truncated group (the refinement may split it)
            assert len(res.views) == 1 and res.log_r[-1] == 0.0


def test_rbhcc_recovers_views_and_is_reproducible():
    X, u, _ = cross_clustering_synthetic(1, n_rows=30, n_cols=48, n_views=3)
    comp = jaxhc.BetaBinomial(0.5, 0.5, 50)
    a = rbhcc(jax.random.key(2), X, comp, 1.0, subset_size=8, threshold=12)
    b = rbhcc(jax.random.key(2), X, comp, 1.0, subset_size=8, threshold=12)
    assert a.tree.same_hierarchy(b.tree) and a.log_evidence == b.log_evidence
    assert adjusted_rand_score(u, a.cut(0.5)) >= 0.9


# ------------------------------------------------------------------------------------------
# refinement of the column partition after the tree
# ------------------------------------------------------------------------------------------
_BERN = jaxhc.BetaBernoulli(0.3, 0.3)


def _views_table(seed, view_sizes=(3, 4, 5)):
    return cross_cluster_table(seed, view_sizes=view_sizes, n_rows=24, n_clusters=3)


def _groups(labels):
    return [tuple(np.flatnonzero(labels == g)) for g in range(int(labels.max()) + 1)]


@pytest.fixture(scope="module")
def refined_pair():
    """A table whose greedy tree misplaces a column (column 1 joins the wrong view)."""
    X, u, _ = _views_table(7)
    return X, bhcc(X, _BERN, 1.0, refine=False), bhcc(X, _BERN, 1.0)


def test_refine_false_is_algorithm_1(refined_pair):
    """refine=False reproduces the tree of Algorithm 1 (recorded before the refinement existed)."""
    _, off, _ = refined_pair
    np.testing.assert_array_equal(
        np.asarray(off.tree.children),
        [[4, 5], [3, 12], [9, 11], [7, 14], [10, 15], [8, 13], [0, 2], [6, 18], [1, 16], [17, 20], [19, 21]],
    )
    np.testing.assert_allclose(off.log_evidence, -190.6492146621448, rtol=1e-10)
    assert off.refine_gain == 0.0


def test_refinement_raises_the_criterion_and_the_result_is_consistent(refined_pair):
    X, off, on = refined_pair
    assert on.refine_gain > 0.1
    # the gain (from the search's evaluations) is the change of the criterion recomputed from
    # the views' row BHC results
    np.testing.assert_allclose(on.views_log_joint() - off.views_log_joint(), on.refine_gain, rtol=1e-8)
    J = X.shape[1]
    crp = len(on.views) * np.log(1.0) + sum(gammaln(len(v.columns)) for v in on.views) + gammaln(1.0) - gammaln(J + 1.0)
    np.testing.assert_allclose(on.views_log_joint(), crp + sum(on.log_h1[v.node] for v in on.views), rtol=1e-10)
    # the tree's cut is the refined views: each view one hypothesis (r = 1), split above it
    assert [tuple(v.columns) for v in on.views] == _groups(on.cut(0.5))
    assert _groups(on.cut(0.5)) != _groups(off.cut(0.5))
    lr = on.node_log_r()
    par = on.tree.parents()
    for v in on.views:
        assert lr[v.node] == 0.0
        k = par[v.node]
        while k >= 0:
            assert lr[k] < np.log(0.5)
            k = par[k]
    # a view's hypothesis is plain BHC's bound on its columns (the view that gained a column)
    moved = next(v for v in on.views if tuple(v.columns) not in _groups(off.cut(0.5)))
    ref = jaxhc.bhc(X[:, moved.columns], restrict_columns(_BERN, moved.columns), 1.0)
    np.testing.assert_allclose(on.log_h1[moved.node], float(ref.dpm_lower_bound), rtol=1e-10)
    # Theorem 5.5 on the rebuilt tree; the CDPM bound sums over its partitions
    np.testing.assert_allclose(_ptns_sum(on), on.log_evidence, rtol=1e-10)
    assert on.cdpm_lower_bound >= on.views_log_joint() - 1e-9
    # the predictives run on the rebuilt tree (comb nodes without hypotheses) and are proper
    lp = bhcc_predictive_cell(on, [0, 5, 23], [1, 4, 11], np.tile([0.0, 1.0], (3, 1)))
    np.testing.assert_allclose(np.exp(lp).sum(axis=1), 1.0, rtol=1e-9)
    allx = np.array(list(itertools.product([0.0, 1.0], repeat=J)))
    np.testing.assert_allclose(np.exp(bhcc_predictive_row(on, allx)).sum(), 1.0, rtol=1e-8)


def test_refinement_keeps_a_locally_optimal_tree_and_is_deterministic():
    X, _, _ = _views_table(1)
    a = bhcc(X, _BERN, 1.0)
    b = bhcc(X, _BERN, 1.0, refine=False)
    c = bhcc(X, _BERN, 1.0)
    assert a.refine_gain == 0.0  # nothing improves: the greedy result unchanged
    assert a.tree.same_hierarchy(b.tree) and a.log_evidence == b.log_evidence
    assert c.tree.same_hierarchy(a.tree) and c.log_evidence == a.log_evidence


def _partitions(items):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for p in _partitions(rest):
        yield [(first,)] + p
        for i in range(len(p)):
            yield p[:i] + [tuple(sorted((first,) + p[i]))] + p[i + 1 :]


def test_local_search_reaches_local_optima_brute_force():
    """On 8 columns (4140 partitions): from several starts the search ends where no move of
    one column and no merge of two views raises the criterion, never below its start nor
    above the best partition found by enumeration."""
    from jaxhc.inference.bhcc.columns import column_model
    from jaxhc.inference.bhcc.refine import Partition, SetEvidence, _local_search, greedy_split

    X, u, _ = _views_table(2, view_sizes=(2, 3, 3))
    J = X.shape[1]
    ev = SetEvidence(column_model(_BERN, X), 1.0)
    ev([s for k in range(1, J + 1) for s in itertools.combinations(range(J), k)])
    scores = {}
    for p in _partitions(list(range(J))):
        P = Partition(ev, 1.0, p)
        scores[tuple(P.views)] = P.score()
    best = max(scores.values())
    starts = [[tuple(range(J))], [(c,) for c in range(J)], [(0, 3, 6), (1, 4, 7), (2, 5)], _groups(u)]
    ends = []
    for start in starts:
        P = Partition(ev, 1.0, start)
        s0 = P.score()
        assert _local_search(P, 20, greedy_split(ev, 0.0, {})) > 0  # converged within the passes
        s1 = P.score()
        assert s0 - 1e-12 <= s1 <= best + 1e-12
        V = P.views
        for c in range(J):  # no single-column move improves
            a = P.where[c]
            rest = [tuple(x for x in V[a] if x != c)]
            for b in range(len(V)):
                if b != a:
                    q = [v for i, v in enumerate(V) if i not in (a, b)] + rest + [tuple(sorted(V[b] + (c,)))]
                    assert Partition(ev, 1.0, q).score() <= s1 + 1e-8
            q = [v for i, v in enumerate(V) if i != a] + rest + [(c,)]
            assert Partition(ev, 1.0, q).score() <= s1 + 1e-8
        for a, b in itertools.combinations(range(len(V)), 2):  # no merge improves
            q = [v for i, v in enumerate(V) if i not in (a, b)] + [tuple(sorted(V[a] + V[b]))]
            assert Partition(ev, 1.0, q).score() <= s1 + 1e-8
        ends.append(s1)
    # here every start reaches the enumerated optimum, as does bhcc (greedy tree + refinement)
    np.testing.assert_allclose(ends, best, rtol=1e-12)
    res = bhcc(X, _BERN, 1.0)
    np.testing.assert_allclose(res.views_log_joint() - (gammaln(1.0) - gammaln(J + 1.0)), best, rtol=1e-9)


def test_rbhcc_screened_refinement():
    """Above the threshold RBHCC screens single-column moves and splits large views by a
    filtering level. From one view (``levels=0``) the criterion only rises, the result is
    consistent and reproducible."""
    X, u, _ = _views_table(7, view_sizes=(6, 6))
    kw = dict(subset_size=4, threshold=8, levels=0)
    off = rbhcc(jax.random.key(3), X, _BERN, 1.0, refine=False, **kw)
    on = rbhcc(jax.random.key(3), X, _BERN, 1.0, **kw)
    again = rbhcc(jax.random.key(3), X, _BERN, 1.0, **kw)
    assert len(off.views) == 1 and len(on.views) > 1 and on.refine_gain > 10.0
    np.testing.assert_allclose(on.views_log_joint() - off.views_log_joint(), on.refine_gain, rtol=1e-8)
    assert [tuple(v.columns) for v in on.views] == _groups(on.cut(0.5))
    np.testing.assert_allclose(_ptns_sum(on), on.log_evidence, rtol=1e-10)
    assert again.tree.same_hierarchy(on.tree) and again.log_evidence == on.log_evidence


# ------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------
def test_bad_input():
    comp = jaxhc.BetaBernoulli(1.0, 1.0)
    with pytest.raises(ValueError, match="ragged"):
        bhcc([[0, 1], [1]], comp)
    with pytest.raises(ValueError, match="at least one"):
        bhcc(np.zeros((0, 3)), comp)
    with pytest.raises(ValueError, match="2-D"):
        bhcc(np.zeros(3), comp)
    with pytest.raises(ValueError, match="binary"):
        bhcc(np.array([[0.0, 2.0], [1.0, 0.0]]), comp)
    with pytest.raises(TypeError, match="column-separable"):
        bhcc(np.zeros((3, 2)), jaxhc.NormalInverseWishart(np.zeros(2)))
    with pytest.raises(TypeError, match="diagonal"):
        bhcc(np.zeros((3, 2)), jaxhc.NormalKnownCov(np.zeros(2), np.array([[1.0, 0.5], [0.5, 1.0]]), 1.0))
    with pytest.raises(ValueError, match="alpha"):
        bhcc(np.zeros((3, 2)), comp, alpha=-1.0)
    with pytest.raises(TypeError, match="Component"):
        bhcc(np.zeros((3, 2)), "beta")
    with pytest.raises(ValueError, match="subset_size"):
        rbhcc(jax.random.key(0), np.zeros((3, 2)), comp, subset_size=1)
    with pytest.raises(ValueError, match="levels"):
        rbhcc(jax.random.key(0), np.zeros((3, 2)), comp, levels=-1)
    with pytest.raises(ValueError, match="key"):
        rbhcc("key", np.zeros((3, 2)), comp)
    with pytest.raises(ValueError, match="refine"):
        bhcc(np.zeros((3, 2)), comp, refine="yes")
    with pytest.raises(ValueError, match="refine_passes"):
        bhcc(np.zeros((3, 2)), comp, refine_passes=0)
    with pytest.raises(ValueError, match="refine_passes"):
        rbhcc(jax.random.key(0), np.zeros((3, 2)), comp, refine_passes=1.5)
    res = bhcc(np.zeros((3, 2)), comp)
    with pytest.raises(ValueError, match="out of range"):
        bhcc_predictive_cell(res, [5], [0], [1.0])
    with pytest.raises(ValueError, match="shape"):
        bhcc_predictive_row(res, np.zeros((1, 3)))
    with pytest.raises(ValueError, match="threshold"):
        res.cut(1.5)


def test_column_split_errors_agree_across_algorithms():
    """BHCC, rbhcc, the CDPM's restrict_columns and CDPM MCMC refuse a family that cannot be
    split by column with the same `ColumnSplitError` (a TypeError and a ValueError) and the same
    message after the algorithm's name; a non-diagonal NormalKnownCov likewise."""
    from jaxhc.components import ColumnSplitError

    X = np.zeros((3, 2))
    full = jaxhc.NormalKnownCov(np.zeros(2), np.array([[1.0, 0.5], [0.5, 1.0]]), 1.0)
    for comp in (jaxhc.NormalInverseWishart(np.zeros(2)), full):
        calls = {
            "BHCC": lambda: bhcc(X, comp),
            "rbhcc": lambda: rbhcc(jax.random.key(0), X, comp),
            "CDPM MCMC": lambda: jaxhc.cdpm_mcmc(jax.random.key(0), X, comp, 1.0, num_samples=2, progress_bar=False),
        }
        if comp is not full:  # the CDPM's restrict_columns takes sub-matrices of full covariances
            calls["the CDPM"] = lambda: restrict_columns(comp, [0])
        tails = set()
        for name, call in calls.items():
            with pytest.raises(ColumnSplitError) as err:
                call()
            assert isinstance(err.value, TypeError) and isinstance(err.value, ValueError)
            msg = str(err.value)
            assert msg.startswith("BHCC " if name == "rbhcc" else name + " "), msg
            tails.add(msg.split(" ", 2 if name in ("CDPM MCMC", "the CDPM") else 1)[-1])
        assert len(tails) == 1, tails
