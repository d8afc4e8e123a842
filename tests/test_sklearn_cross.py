"""The cross-clustering (BHCC) and levels (BHMC) estimators of `jaxhc.sklearn`: the library's
answers in the conventions of `BayesianHierarchicalClustering` (tests/test_sklearn.py), and
scikit-learn's own checks: all of them for BHCC, the ones that need no fit for BHMC (below)."""

import jax

jax.config.update("jax_enable_x64", True)

import pickle

import numpy as np
import pytest
import scipy.sparse
from scipy.cluster import hierarchy as sch
from sklearn.base import clone
from sklearn.metrics import adjusted_rand_score
from sklearn.utils.estimator_checks import parametrize_with_checks

import jaxhc
from jaxhc.sklearn import BayesianCrossClustering, BayesianHierarchicalMixtureClustering


@pytest.fixture(scope="module")
def two_views():
    """30 rows, 6 columns: columns 0-2 split the rows in two groups, columns 3-5 in three."""
    rng = np.random.default_rng(0)
    g1, g2 = np.repeat([0, 1], 15), np.tile([0, 1, 2], 10)
    X = np.concatenate([rng.normal(size=(30, 3)) + 5 * g1[:, None], rng.normal(size=(30, 3)) + 5 * g2[:, None]], 1)
    return X, g1, g2


@pytest.fixture(scope="module")
def cross(two_views):
    X, _, _ = two_views
    return BayesianCrossClustering(search="local", random_state=0).fit(X)


def test_cross_clustering_finds_the_views_and_their_row_clusters(cross, two_views):
    X, g1, g2 = two_views
    assert cross.family_ == "normal" and cross.algorithm_ == "greedy"
    np.testing.assert_array_equal(cross.column_labels_, [0, 0, 0, 1, 1, 1])
    assert cross.n_views_ == 2 and cross.labels_.shape == (30, 2) and cross.labels_.dtype == np.int64
    assert adjusted_rand_score(g1, cross.labels_[:, 0]) == 1.0
    assert adjusted_rand_score(g2, cross.labels_[:, 1]) == 1.0
    np.testing.assert_array_equal(cross.n_clusters_, [2, 3])
    # the column tree: a valid monotone linkage; the views are its cut at r < 0.5
    Z = cross.linkage_matrix_
    assert sch.is_valid_linkage(Z) and sch.is_monotonic(Z) and Z.shape == (5, 4)
    assert adjusted_rand_score(cross.column_labels_, sch.fcluster(Z, -np.log(0.5), "distance")) == 1.0
    for Zv in cross.view_linkage_matrices_:
        assert sch.is_valid_linkage(Zv) and sch.is_monotonic(Zv) and Zv.shape == (29, 4)
    assert isinstance(cross.component_, jaxhc.IndependentNormal)


def test_cross_clustering_is_the_library_call(cross, two_views):
    X, _, _ = two_views
    res = jaxhc.bhcc(X, cross.component_, 1.0, search="local")
    assert cross.log_evidence_ == pytest.approx(float(res.log_evidence), rel=1e-12)
    assert cross.cdpm_lower_bound_ == pytest.approx(float(res.cdpm_lower_bound), rel=1e-12)
    assert cross.tree_.same_hierarchy(res.tree)
    np.testing.assert_allclose(np.sort(cross.merge_prob_), np.sort(np.exp(np.asarray(res.log_r))), rtol=1e-12)
    assert adjusted_rand_score(cross.column_labels_, res.cut(0.5)) == 1.0


def test_cross_clustering_round_trips_and_inputs(cross, two_views):
    pd = pytest.importorskip("pandas")
    X, _, _ = two_views
    again = pickle.loads(pickle.dumps(cross))
    np.testing.assert_array_equal(again.labels_, cross.labels_)
    np.testing.assert_array_equal(clone(cross).fit(X).labels_, cross.labels_)
    frame = pd.DataFrame(X, columns=[f"c{j}" for j in range(6)])
    named = BayesianCrossClustering(search="local", random_state=0).fit(frame)
    np.testing.assert_array_equal(named.feature_names_in_, frame.columns.to_numpy(dtype=object))
    newick = named.to_newick()
    assert all(f"c{j}" in newick for j in range(6)) and newick.count("(") == 5
    # missing entries are the families' to skip
    Xm = X.copy()
    Xm[3, 4] = np.nan
    assert BayesianCrossClustering(search="local", random_state=0).fit(Xm).n_views_ == 2
    with pytest.raises(TypeError, match=r"toarray\(\)"):
        BayesianCrossClustering().fit(scipy.sparse.csr_matrix(X))
    with pytest.raises(ValueError, match="family"):
        BayesianCrossClustering("niw").fit(X)
    with pytest.raises(ValueError, match="bernoulli"):
        BayesianCrossClustering("bernoulli").fit(X)


def test_levels_are_nested_and_labels_are_the_deepest(two_views):
    X, g1, _ = two_views
    kw = dict(depth=2, num_samples=20, num_warmup=20, random_state=0)
    est = BayesianHierarchicalMixtureClustering(**kw).fit(X[:, :3])
    L = est.level_labels_
    assert L.shape == (30, 2) and L.dtype == np.int64
    np.testing.assert_array_equal(est.labels_, L[:, -1])
    assert est.n_clusters_ == L[:, -1].max() + 1
    for l in range(L.shape[1]):
        assert set(L[:, l].tolist()) == set(range(est.n_level_clusters_[l]))
    # nested: every cluster of a deeper level sits inside one cluster of the level above
    assert all(len(set(L[L[:, 1] == c, 0].tolist())) == 1 for c in range(est.n_level_clusters_[1]))
    assert adjusted_rand_score(g1, est.labels_) == 1.0
    # the library call with the same key
    res = jaxhc.bhmc(jax.random.PRNGKey(0), X[:, :3], 2, num_samples=20, num_warmup=20, progress_bar=False)
    assert all(adjusted_rand_score(np.asarray(res.level_labels)[:, l], L[:, l]) == 1.0 for l in range(2))
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(again.level_labels_, est.level_labels_)
    assert est.to_newick().count(",") >= 29


def _expected_failed_checks(estimator):
    if isinstance(estimator, BayesianCrossClustering):
        # labels_ holds the rows' clusters in every view, [n, n_views_] (the issue's contract
        # for cross-clustering); the check wants one flat labelling [n]
        return {"check_clustering": "labels_ is [n_samples, n_views]: one row clustering per view"}
    return {}


# BHMC: only the checks that need no fit (the parameters, cloning, tags, refusals of unfitted
# use and of bad input before any work). The others pass (a full check_estimator run, by
# hand: every check passes) but fit about fifty data sets of a dozen shapes, each compiling
# the sampler anew (~30 s a shape on 2 cores): minutes, too long for the suite.
NO_FIT_CHECKS = {
    "check_estimator_cloneable",
    "check_estimator_tags_renamed",
    "check_valid_tag_types",
    "check_estimator_repr",
    "check_no_attributes_set_in_init",
    "check_mixin_order",
    "check_parameters_default_constructible",
    "check_get_params_invariance",
    "check_set_params",
    "check_do_not_raise_errors_in_init_or_set_params",
    "check_estimators_unfitted",
    "check_estimator_sparse_array",
    "check_estimator_sparse_matrix",
    "check_estimator_sparse_tag",
    "check_estimators_empty_data_messages",
    "check_fit1d",
    "check_fit2d_1sample",
    "check_complex_data",
}


def _name(check):
    return getattr(check, "func", check).__name__


@parametrize_with_checks(
    [
        # the cheap search (the stochastic one is the default; it adds restarts, not programs)
        BayesianCrossClustering(search="local", random_state=0),
        BayesianHierarchicalMixtureClustering(depth=2, num_samples=10, num_warmup=10, random_state=0),
    ],
    expected_failed_checks=_expected_failed_checks,
)
def test_sklearn_checks(estimator, check):
    if isinstance(estimator, BayesianHierarchicalMixtureClustering) and _name(check) not in NO_FIT_CHECKS:
        pytest.skip("fits the check's data sets: ~30 s of compilation per shape (passed by hand, not run here)")
    check(estimator)
