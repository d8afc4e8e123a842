"""`jaxhc.sklearn.BayesianHierarchicalClustering` as scikit-learn, scipy and seaborn users hold
it: the library's answers in scikit-learn's conventions (labels, the tree as a scipy linkage
that fcluster / cut_tree / dendrogram read), re-cuts without refitting, predict and score by
BHC's predictive (order- and batch-invariant to the last bit), and the ecosystem (Pipeline,
GridSearchCV, clone, pickle, pandas, seaborn). scikit-learn's own checks are in
tests/test_sklearn_checks.py.

Sizes are small and few (2-feature blobs of 60 rows for most tests), so the compiled programs
are shared between tests."""

import jax

jax.config.update("jax_enable_x64", True)

import copy
import pickle
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse
from scipy.cluster import hierarchy as sch
from sklearn.base import clone
from sklearn.metrics import adjusted_rand_score
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

import jaxhc
from jaxhc.sklearn import BayesianHierarchicalClustering as BHC
from jaxhc.sklearn import bhc as bhc_module
from jaxhc.sklearn._common import monotone_linkage
from jaxhc.tree import Tree


def _blobs(n_per=20, sep=6.0, seed=0):
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [sep, 0.0], [0.0, sep]])
    X = np.concatenate([rng.normal(size=(n_per, 2)) + c for c in centres])
    y = np.repeat(np.arange(3), n_per)
    perm = rng.permutation(len(y))
    return X[perm], y[perm]


def _same_partition(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    pairs = set(zip(a.tolist(), b.tolist()))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


def _check_tree(est):
    """What every fitted estimator of this file must satisfy: a valid, monotone scipy
    linkage that agrees with children_, distances_ and tree_; labels 0..K-1 in int64."""
    Z = est.linkage_matrix_
    n = est.labels_.shape[0]
    assert sch.is_valid_linkage(Z) and sch.is_monotonic(Z)
    assert Z.shape == (n - 1, 4) and np.all(np.diff(est.distances_) > 0)
    np.testing.assert_array_equal(Z[:, :2], est.children_)
    np.testing.assert_array_equal(Z[:, 2], est.distances_)
    np.testing.assert_array_equal(Z[:, 3], est.tree_.sizes()[n:])
    np.testing.assert_array_equal(np.asarray(est.tree_.children), est.children_)
    assert est.labels_.dtype == np.int64 and est.children_.dtype == np.int64
    assert set(est.labels_.tolist()) == set(range(est.n_clusters_))
    assert est.merge_prob_.shape == (n - 1,) and np.all((est.merge_prob_ >= 0) & (est.merge_prob_ <= 1))
    for name in ("children_", "distances_", "linkage_matrix_", "merge_prob_", "labels_"):
        assert isinstance(getattr(est, name), np.ndarray), name
    for leaf in jax.tree_util.tree_leaves(est.component_):
        assert isinstance(leaf, np.ndarray)
    assert isinstance(est.log_evidence_, float) and isinstance(est.dpm_lower_bound_, float)
    assert np.isfinite(est.log_evidence_) and np.isfinite(est.dpm_lower_bound_)


@pytest.fixture(scope="module")
def blobs():
    return _blobs()


@pytest.fixture(scope="module")
def fitted(blobs):
    X, _ = blobs
    est = BHC("niw", learn=False).fit(X)
    _check_tree(est)
    return est


# three small data sets of different families (real, full and diagonal covariance; binary)
def _datasets():
    X1, _ = _blobs()
    rng = np.random.default_rng(3)
    X2 = np.concatenate([rng.normal(size=(15, 3)) * s + m for m, s in ((0, 1), (4, 0.5), (-3, 2))])
    protos = rng.uniform(size=(3, 6))
    X3 = (rng.uniform(size=(36, 6)) < protos[np.repeat(np.arange(3), 12)]).astype(float)
    return [("niw", X1), ("normalgamma", X2), ("bernoulli", X3)]


@pytest.fixture(scope="module")
def three_fits():
    return [BHC(fam, learn=False).fit(X) for fam, X in _datasets()]


# ---------------------------------------------------------------------------------------
# the fit is the library's
# ---------------------------------------------------------------------------------------
def test_defaults_are_fit_bhc(blobs):
    """The default estimator runs `jaxhc.fit_bhc` (family by evidence, alpha and prior
    learned) and reports its answers: the same evidence, bound, family, alpha and cut."""
    X, y = blobs
    est = BHC().fit(X)
    fit = jaxhc.fit_bhc(X)
    _check_tree(est)
    assert est.family_ == fit.family and est.algorithm_ == "greedy"
    assert est.alpha_ == pytest.approx(fit.alpha, rel=1e-12)
    assert est.log_evidence_ == pytest.approx(fit.log_evidence, rel=1e-12)
    assert est.dpm_lower_bound_ == pytest.approx(fit.dpm_lower_bound, rel=1e-12)
    assert _same_partition(est.labels_, fit.result.cut(0.5))
    assert est.tree_.same_hierarchy(fit.tree)
    # the merge probabilities are BHC's, renumbered
    np.testing.assert_allclose(np.sort(est.merge_prob_), np.sort(np.exp(np.asarray(fit.result.log_r))), rtol=1e-12)
    assert adjusted_rand_score(y, est.labels_) > 0.95
    # fit_predict is fit(...).labels_
    np.testing.assert_array_equal(clone(est).fit_predict(X), est.labels_)


def test_learning_off_keeps_the_data_prior_and_alpha(fitted, blobs):
    X, _ = blobs
    res = jaxhc.bhc(X, jaxhc.NormalInverseWishart.from_data(X), 1.0)
    assert fitted.family_ == "niw" and fitted.alpha_ == 1.0
    assert fitted.log_evidence_ == pytest.approx(float(res.log_evidence), rel=1e-12)
    assert fitted.tree_.same_hierarchy(res.tree)
    assert _same_partition(fitted.labels_, res.cut(0.5))


def test_randomized_is_rbhc_and_reproducible(blobs, monkeypatch):
    X, y = blobs
    kw = dict(family="niw", learn=False, subset_size=8, leaf_size=16, random_state=3)
    a = BHC(algorithm="randomized", **kw).fit(X)
    b = BHC(algorithm="randomized", **kw).fit(X)
    _check_tree(a)
    assert a.algorithm_ == "randomized"
    np.testing.assert_array_equal(a.children_, b.children_)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    res = jaxhc.rbhc(
        jax.random.split(jax.random.PRNGKey(3))[1],
        X,
        jaxhc.NormalInverseWishart.from_data(X),
        1.0,
        subset_size=8,
        leaf_size=16,
    )
    assert a.tree_.same_hierarchy(res.tree)
    assert a.log_evidence_ == pytest.approx(float(res.log_evidence), rel=1e-12)
    assert adjusted_rand_score(y, a.labels_) > 0.8  # subsets of 8 rows: a blob may split in two
    # "auto" switches to randomized BHC above RANDOMIZED_ABOVE samples
    monkeypatch.setattr(bhc_module, "RANDOMIZED_ABOVE", 40)
    c = BHC(**kw).fit(X)
    assert c.algorithm_ == "randomized"
    np.testing.assert_array_equal(c.children_, a.children_)
    assert BHC(**kw).fit(X[:40]).algorithm_ == "greedy"


def test_randomized_learns_on_a_subset(blobs):
    X, _ = blobs
    # 57 of the 60 rows: the size bucket of the 60 (compiled for test_defaults_are_fit_bhc)
    est = BHC(algorithm="randomized", learn_subset=57, subset_size=8, leaf_size=16, random_state=0).fit(X)
    _check_tree(est)
    assert est.family_ in ("niw", "normalgamma") and est.alpha_ != 1.0  # learned


# ---------------------------------------------------------------------------------------
# the tree in scipy's conventions
# ---------------------------------------------------------------------------------------
def test_fcluster_and_cut_tree_agree_with_cut_for_every_k(three_fits):
    for est in three_fits:
        _check_tree(est)
        Z = est.linkage_matrix_
        for k in range(1, 11):
            labels = est.cut(n_clusters=k)
            assert labels.max() + 1 == k
            assert _same_partition(labels, sch.fcluster(Z, k, criterion="maxclust")), (est.family, k)
            assert _same_partition(labels, sch.cut_tree(Z, n_clusters=k)[:, 0]), (est.family, k)


def test_fcluster_at_minus_log_threshold_is_bhc_cut(three_fits):
    for est in three_fits:
        Z = est.linkage_matrix_
        assert _same_partition(est.labels_, sch.fcluster(Z, -np.log(0.5), criterion="distance"))
        for t in (0.01, 0.2, 0.9, 0.999):
            assert _same_partition(est.cut(merge_threshold=t), sch.fcluster(Z, -np.log(t), criterion="distance"))
            assert _same_partition(est.cut(merge_threshold=t), est._result.cut(t))


def test_monotone_linkage_on_random_trees():
    """The transform on arbitrary trees and merge probabilities (ties, certain merges, r
    rising and falling along paths): valid, strictly increasing, the same hierarchy, and
    fcluster reproduces both cuts."""
    rng = np.random.default_rng(0)
    for trial in range(40):
        n = int(rng.integers(2, 40))
        active, rows = list(range(n)), []
        for t in range(n - 1):
            i, j = rng.choice(len(active), size=2, replace=False)
            rows.append(sorted((active[i], active[j])))
            active = [k for k in active if k not in rows[-1]] + [n + t]
        children = np.asarray(rows, np.int64).reshape(-1, 2)
        log_r = (
            np.log(rng.choice([1.0, 0.5, 0.3, 0.99, 1e-300], size=n - 1)) if trial % 2 else -rng.exponential(size=n - 1)
        )
        order, ch, h = monotone_linkage(children, log_r)
        Z = np.column_stack([ch, h, Tree(ch).sizes()[n:]]).astype(float)
        assert sch.is_valid_linkage(Z) and sch.is_monotonic(Z) and np.all(np.diff(h) > 0)
        t_orig, t_new = Tree(children), Tree(ch)
        assert t_new.same_hierarchy(t_orig)
        r_new = np.exp(log_r[order])
        for thr in (0.2, 0.4, 0.95):
            bhc_cut = t_new.cut(thr, scores=r_new)
            assert _same_partition(bhc_cut, t_orig.cut(thr, scores=np.exp(log_r)))
            assert _same_partition(bhc_cut, sch.fcluster(Z, -np.log(thr), criterion="distance"))
        for k in range(1, min(n, 8) + 1):
            assert len(set(sch.fcluster(Z, k, criterion="maxclust").tolist())) == k


def test_dendrogram_and_seaborn_clustermap(fitted, blobs):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pd = pytest.importorskip("pandas")  # the test extra installs it with seaborn
    sns = pytest.importorskip("seaborn")
    X, _ = blobs
    d = sch.dendrogram(fitted.linkage_matrix_, no_plot=True)
    assert sorted(d["leaves"]) == list(range(len(X)))
    assert d["leaves"] == fitted.tree_.leaf_order().tolist()
    # every drawn link sits at one of the merge heights (distinct, so each names its r_k)
    tops = np.asarray(d["dcoord"])[:, 1]
    rows = np.searchsorted(fitted.distances_, tops)
    np.testing.assert_array_equal(fitted.distances_[rows], tops)
    assert sorted(rows.tolist()) == list(range(len(X) - 1))
    frame = pd.DataFrame(X, columns=["a", "b"])
    g = sns.clustermap(frame, row_linkage=fitted.linkage_matrix_, col_cluster=False)
    assert g.dendrogram_row.reordered_ind == d["leaves"]
    plt.close("all")


def test_newick_has_every_sample_and_support_values(fitted):
    s = fitted.to_newick()
    n = fitted.labels_.shape[0]
    assert s.endswith(";") and s.count("(") == n - 1
    # each inner node's label follows its ")": r_k in children_ order of creation
    import re

    supports = [float(x) for x in re.findall(r"\)([0-9.]+):?", s)]
    assert sorted(supports) == sorted(np.round(fitted.merge_prob_, 3).tolist())
    leaves = re.findall(r"[(,]([^(),:;]+)", s)
    assert sorted(int(x) for x in leaves) == list(range(n))
    names = [f"row {i}" for i in range(n)]
    assert "'row 0'" in fitted.to_newick(names, support=False, branch_lengths=False)
    assert fitted.to_newick(support=False, branch_lengths=False) == fitted.tree_.to_newick()


# ---------------------------------------------------------------------------------------
# cut without refitting
# ---------------------------------------------------------------------------------------
def test_cut_does_not_refit_or_change_the_fit(fitted):
    before = copy.deepcopy(fitted.__dict__)
    assert fitted.cut(n_clusters=len(fitted.labels_)).tolist() == list(range(len(fitted.labels_)))
    assert fitted.cut(merge_threshold=0.0).tolist() == [0] * len(fitted.labels_)
    np.testing.assert_array_equal(fitted.cut(), fitted.labels_)
    np.testing.assert_array_equal(fitted.cut(merge_threshold=0.5), fitted.labels_)
    assert before.keys() == fitted.__dict__.keys()
    np.testing.assert_array_equal(before["labels_"], fitted.labels_)
    with pytest.raises(ValueError, match="merge_threshold and n_clusters"):
        fitted.cut(merge_threshold=0.5, n_clusters=3)
    with pytest.raises(ValueError, match="n_clusters"):
        fitted.cut(n_clusters=len(fitted.labels_) + 1)
    with pytest.raises(ValueError, match="merge_threshold"):
        fitted.cut(merge_threshold=1.5)


def test_n_clusters_param_and_both_cut_params(blobs, fitted):
    X, _ = blobs
    est = BHC("niw", learn=False, n_clusters=5).fit(X)
    assert est.n_clusters_ == 5
    np.testing.assert_array_equal(est.labels_, fitted.cut(n_clusters=5))
    np.testing.assert_array_equal(est.children_, fitted.children_)
    with pytest.raises(ValueError, match="merge_threshold and n_clusters"):
        BHC("niw", learn=False, n_clusters=3, merge_threshold=0.5).fit(X)


# ---------------------------------------------------------------------------------------
# predict and score
# ---------------------------------------------------------------------------------------
def test_predict_returns_the_training_labels(fitted, blobs):
    X, _ = blobs
    assert np.mean(fitted.predict(X) == fitted.labels_) >= 0.99


def test_predict_is_order_and_batch_invariant_to_the_bit(fitted, blobs):
    X, _ = blobs
    rng = np.random.default_rng(1)
    Xn = np.concatenate([X, rng.normal(size=(90, 2)) * 4])  # 150 rows: more than two program chunks
    labels, dens = fitted.predict(Xn), fitted.score_samples(Xn)
    perm = rng.permutation(len(Xn))
    np.testing.assert_array_equal(fitted.predict(Xn[perm]), labels[perm])
    np.testing.assert_array_equal(fitted.score_samples(Xn[perm]), dens[perm])
    for size in (1, 7, 64, 65):
        parts = [fitted.score_samples(Xn[i : i + size]) for i in range(0, len(Xn), size)]
        np.testing.assert_array_equal(np.concatenate(parts), dens)
        parts = [fitted.predict(Xn[i : i + size]) for i in range(0, len(Xn), size)]
        np.testing.assert_array_equal(np.concatenate(parts), labels)


def test_score_is_bhc_predictive(fitted, blobs):
    X, _ = blobs
    rng = np.random.default_rng(2)
    Xn = rng.normal(size=(25, 2)) * 3
    res = jaxhc.bhc(X, jaxhc.NormalInverseWishart.from_data(X), 1.0)
    want = np.asarray(jaxhc.bhc_predictive(res, Xn))
    np.testing.assert_allclose(fitted.score_samples(Xn), want, rtol=0, atol=1e-10)
    assert fitted.score(Xn) == pytest.approx(float(np.mean(want)), abs=1e-10)
    # far points are less likely than the data's own
    assert fitted.score(X) > fitted.score(X + 20.0)


def test_predict_mass_rule_by_hand(fitted, blobs):
    """predict's rule from the result's own pieces: the cluster whose nodes hold the most of
    the predictive mixture."""
    X, _ = blobs
    res = fitted._result
    x = np.array([[3.0, 3.0]])
    log_w = res.log_weights()
    lp = log_w + np.asarray(res.component.log_predictive(x[0], jax.tree_util.tree_map(np.asarray, res.node_stats)))
    sets = res.tree.leaf_sets()
    mass = [
        np.logaddexp.reduce(lp[[k for k in range(len(lp)) if np.all(fitted.labels_[sets[k]] == c)]])
        for c in range(fitted.n_clusters_)
    ]
    assert fitted.predict(x)[0] == int(np.argmax(mass))
    assert fitted.score_samples(x)[0] == pytest.approx(float(np.logaddexp.reduce(lp)), abs=1e-10)


def test_predict_errors(fitted):
    with pytest.raises(ValueError, match="features"):
        fitted.predict(np.zeros((3, 5)))
    with pytest.raises(ValueError, match="2D array"):
        fitted.predict(np.zeros(2))
    with pytest.raises(ValueError, match="NaN"):
        fitted.predict(np.array([[np.nan, 0.0]]))
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        BHC().predict(np.zeros((3, 2)))
    with pytest.raises(NotFittedError):
        BHC().cut(n_clusters=2)


# ---------------------------------------------------------------------------------------
# the ecosystem
# ---------------------------------------------------------------------------------------
def test_pipeline_with_standard_scaler(blobs):
    X, y = blobs
    Xs = X * np.array([100.0, 0.01]) + 7.0  # units the scaler removes
    pipe = Pipeline([("scale", StandardScaler()), ("bhc", BHC("niw", learn=False))])
    labels = pipe.fit_predict(Xs)
    direct = BHC("niw", learn=False).fit(StandardScaler().fit_transform(Xs))
    np.testing.assert_array_equal(labels, direct.labels_)
    np.testing.assert_array_equal(pipe.predict(Xs), direct.predict(StandardScaler().fit(Xs).transform(Xs)))
    assert adjusted_rand_score(y, labels) > 0.95
    assert np.isfinite(pipe.score(Xs))


def test_grid_search_over_alpha_by_held_out_likelihood(blobs):
    X, _ = blobs
    grid = GridSearchCV(BHC("niw", learn=False), {"alpha": [1e-3, 1.0, 1e3]}, cv=3)
    grid.fit(X)
    scores = grid.cv_results_["mean_test_score"]
    assert np.all(np.isfinite(scores)) and len(set(scores.tolist())) == 3
    assert grid.best_params_["alpha"] == [1e-3, 1.0, 1e3][int(np.argmax(scores))]
    # the refitted best estimator scores what a fresh fit scores
    best = BHC("niw", learn=False, alpha=grid.best_params_["alpha"]).fit(X)
    assert grid.best_estimator_.score(X) == best.score(X)


def test_clone_pickle_and_deepcopy_round_trips(fitted, blobs):
    X, _ = blobs
    again = pickle.loads(pickle.dumps(fitted))
    np.testing.assert_array_equal(again.labels_, fitted.labels_)
    np.testing.assert_array_equal(again.linkage_matrix_, fitted.linkage_matrix_)
    np.testing.assert_array_equal(again.predict(X), fitted.predict(X))
    np.testing.assert_array_equal(again.score_samples(X), fitted.score_samples(X))
    deep = copy.deepcopy(fitted)
    np.testing.assert_array_equal(deep.score_samples(X), fitted.score_samples(X))
    fresh = clone(fitted)
    assert not hasattr(fresh, "labels_") and fresh.get_params() == fitted.get_params()
    np.testing.assert_array_equal(fresh.fit(X).labels_, fitted.labels_)
    # nothing JAX in the instance's state: arrays are NumPy, no compiled functions
    for value in fitted.__dict__.values():
        for leaf in jax.tree_util.tree_leaves(value):
            assert not isinstance(leaf, jax.Array) and not callable(leaf)


def test_pandas_dataframe_keeps_feature_names(blobs, fitted):
    pd = pytest.importorskip("pandas")
    X, _ = blobs
    frame = pd.DataFrame(X, columns=["height", "weight"])
    est = BHC("niw", learn=False).fit(frame)
    np.testing.assert_array_equal(est.feature_names_in_, np.array(["height", "weight"], dtype=object))
    assert est.n_features_in_ == 2
    np.testing.assert_array_equal(est.labels_, fitted.labels_)
    np.testing.assert_array_equal(est.predict(frame), fitted.predict(X))
    with pytest.raises(ValueError, match="feature names"):
        est.predict(frame.set_axis(["height", "mass"], axis=1))
    with pytest.warns(UserWarning, match="feature names"):
        est.predict(X)


def test_sparse_input_is_refused_naming_the_dense_alternative(blobs, fitted):
    X, _ = blobs
    for sp in (scipy.sparse.csr_matrix(X), scipy.sparse.csr_array(X), scipy.sparse.coo_matrix(X)):
        with pytest.raises(TypeError, match=r"sparse.*toarray\(\)"):
            BHC().fit(sp)
        with pytest.raises(TypeError, match=r"toarray\(\)"):
            fitted.predict(sp)


def test_bad_parameters_name_the_argument(blobs):
    X, _ = blobs
    for params, name in [
        ({"alpha": -1.0}, "alpha"),
        ({"family": "gamma"}, "family"),
        ({"family": ("niw", "gamma")}, "family"),
        ({"merge_threshold": 2.0}, "merge_threshold"),
        ({"n_clusters": 0}, "n_clusters"),
        ({"algorithm": "fast"}, "algorithm"),
        ({"learn": "yes"}, "learn"),
        ({"subset_size": 1}, "subset_size"),
    ]:
        with pytest.raises(ValueError, match=name):
            BHC(**params).fit(X)
    with pytest.raises(ValueError, match="leaf_size"):
        BHC(algorithm="randomized", subset_size=32, leaf_size=16).fit(X)
    with pytest.raises(ValueError, match="n_clusters"):
        BHC("niw", learn=False, n_clusters=100).fit(X)
    with pytest.raises(ValueError, match="bernoulli"):
        BHC("bernoulli", learn=False).fit(X)
    with pytest.raises(ValueError, match="1 sample"):
        BHC().fit(X[:1])


def test_top_level_name_and_missing_extra():
    assert jaxhc.BayesianHierarchicalClustering is BHC
    assert "BayesianHierarchicalClustering" in jaxhc.__all__
    code = (
        "import sys; sys.modules['sklearn'] = None\n"
        "import jaxhc\n"
        "try:\n"
        "    jaxhc.BayesianHierarchicalClustering\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "jaxhc[sklearn]" in out.stdout and "scikit-learn" in out.stdout
