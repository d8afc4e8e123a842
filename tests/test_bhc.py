"""BHC against a plain NumPy reference, brute-force enumeration and closed forms."""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import jax.test_util  # noqa: F401  (check_grads)
import numpy as np
import pytest
from scipy.integrate import quad
from scipy.special import logsumexp

import jaxhc
from jaxhc.inference.bhc.greedy import bhc_from_stats, node_stats_of_tree, tree_node_terms

import reference as R


def _niw_ref(c):
    return R.make_log_marginal(
        "niw", m0=np.asarray(c.mean), kappa0=float(c.kappa), nu0=float(c.dof), S0=np.asarray(c.scale)
    )


def _clustered(rng, n, d, k=3, sep=3.0):
    return rng.normal(size=(n, d)) + rng.integers(0, k, size=(n, 1)) * sep


# ---------------------------------------------------------------------------------------
# the greedy search equals the obviously-correct reference
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
def test_bhc_equals_reference_niw(seed):
    rng = np.random.default_rng(seed)
    n, d = int(rng.integers(2, 31)), int(rng.integers(1, 4))
    X = _clustered(rng, n, d)
    c = jaxhc.NormalInverseWishart.from_data(X)
    alpha = float(rng.uniform(0.2, 5.0))
    res = jaxhc.bhc(X, c, alpha)
    ref = R.bhc_reference(X, _niw_ref(c), alpha)
    np.testing.assert_array_equal(np.asarray(res.tree.children), ref["children"])
    np.testing.assert_allclose(float(res.log_evidence), ref["log_evidence"], rtol=0, atol=1e-8)
    np.testing.assert_allclose(np.asarray(res.log_r), ref["log_r"], rtol=0, atol=1e-8)
    np.testing.assert_allclose(float(res.dpm_lower_bound), ref["dpm_lower_bound"], rtol=0, atol=1e-8)
    np.testing.assert_allclose(np.asarray(res.log_pT), ref["log_pT"], rtol=0, atol=1e-8)


@pytest.mark.parametrize("seed", range(3))
def test_bhc_equals_reference_other_components(seed):
    rng = np.random.default_rng(100 + seed)
    n = 25
    # Bernoulli data from 3 prototypes (continuous-valued hyperparameters avoid ties)
    protos = rng.uniform(size=(3, 6))
    B = (rng.uniform(size=(n, 6)) < protos[rng.integers(0, 3, n)]).astype(float)
    cb = jaxhc.BetaBernoulli(rng.uniform(0.5, 2, 6), rng.uniform(0.5, 2, 6))
    res = jaxhc.bhc(B, cb, 1.3)
    ref = R.bhc_reference(B, R.make_log_marginal("beta_bernoulli", a=np.asarray(cb.a), b=np.asarray(cb.b)), 1.3)
    np.testing.assert_allclose(float(res.log_evidence), ref["log_evidence"], atol=1e-8)
    np.testing.assert_array_equal(np.asarray(res.tree.children), ref["children"])
    # Normal with known covariance
    X = _clustered(rng, 20, 2)
    ck = jaxhc.NormalKnownCov.from_data(X)
    res = jaxhc.bhc(X, ck, 0.7)
    ref = R.bhc_reference(
        X,
        R.make_log_marginal(
            "normal_known_cov",
            m0=np.asarray(ck.mean),
            prior_cov=np.asarray(ck.prior_cov),
            noise_cov=np.asarray(ck.noise_cov),
        ),
        0.7,
    )
    np.testing.assert_allclose(float(res.log_evidence), ref["log_evidence"], atol=1e-8)
    np.testing.assert_array_equal(np.asarray(res.tree.children), ref["children"])


# ---------------------------------------------------------------------------------------
# Theorem 1 and its corollary by enumeration
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [3, 5, 8])
def test_evidence_equals_sum_over_tree_consistent_partitions(n):
    rng = np.random.default_rng(n)
    X = _clustered(rng, n, 2)
    c = jaxhc.NormalInverseWishart.from_data(X)
    res = jaxhc.bhc(X, c, 1.7)
    brute = R.tree_evidence_by_enumeration(res.tree, X, _niw_ref(c), 1.7)
    np.testing.assert_allclose(float(res.log_evidence), brute, atol=1e-9)


@pytest.mark.parametrize("n,alpha", [(4, 0.5), (6, 1.0), (8, 3.0)])
def test_dpm_lower_bound_below_exact_dpm_evidence(n, alpha):
    rng = np.random.default_rng(10 + n)
    X = _clustered(rng, n, 1)
    c = jaxhc.NormalInverseWishart.from_data(X)
    res = jaxhc.bhc(X, c, alpha)
    exact = R.dpm_log_evidence(X, _niw_ref(c), alpha)
    assert float(res.dpm_lower_bound) <= exact + 1e-10
    # and the bound is not vacuous: within a few nats on clustered data
    assert float(res.dpm_lower_bound) > exact - 10.0


def test_two_points_bound_is_exact():
    X = np.array([[0.1], [1.3]])
    c = jaxhc.NormalInverseWishart.from_data(X)
    res = jaxhc.bhc(X, c, 2.0)
    np.testing.assert_allclose(float(res.dpm_lower_bound), R.dpm_log_evidence(X, _niw_ref(c), 2.0), atol=1e-10)


# ---------------------------------------------------------------------------------------
# fixed-tree recursion, padding, recompilation
# ---------------------------------------------------------------------------------------
def test_fixed_tree_recursion_matches_greedy_and_reference():
    rng = np.random.default_rng(3)
    X = _clustered(rng, 12, 2)
    c = jaxhc.NormalInverseWishart.from_data(X)
    res = jaxhc.bhc(X, c, 1.0)
    terms = jaxhc.tree_log_evidence(X, res.tree, c, 1.0)
    np.testing.assert_allclose(float(terms.log_evidence), float(res.log_evidence), atol=1e-10)
    np.testing.assert_allclose(np.asarray(terms.log_1mr), np.asarray(res.log_1mr), atol=1e-10)
    # an arbitrary (non-greedy) tree against the reference recursion
    tree = jaxhc.Tree.from_nested(((0, (1, 2)), ((3, 4), (5, ((6, 7), (8, (9, (10, 11))))))))
    terms = jaxhc.tree_log_evidence(X, tree, c, 0.4)
    ref = R.tree_log_evidence(tree, X, _niw_ref(c), 0.4)
    np.testing.assert_allclose(float(terms.log_evidence), ref["log_evidence"], atol=1e-9)


def test_padding_does_not_change_result():
    rng = np.random.default_rng(4)
    X = _clustered(rng, 13, 3)
    c = jaxhc.NormalInverseWishart.from_data(X)
    full = jaxhc.bhc(X, c, 1.0)
    leaf = c.leaf_stats(jnp.asarray(np.concatenate([X, rng.normal(size=(19, 3))])))
    padded = bhc_from_stats(c, 1.0, leaf, n_valid=13)
    np.testing.assert_array_equal(np.asarray(padded.tree.children), np.asarray(full.tree.children))
    np.testing.assert_allclose(float(padded.log_evidence), float(full.log_evidence), atol=1e-10)


def test_no_recompilation_for_new_hyperparameters():
    from jaxhc.inference.bhc.greedy import bhc_core

    rng = np.random.default_rng(5)
    X = _clustered(rng, 17, 2)
    jaxhc.bhc(X, jaxhc.NormalInverseWishart.from_data(X), 1.0)
    before = bhc_core._cache_size()
    jaxhc.bhc(X + 1.0, jaxhc.NormalInverseWishart.from_data(X, kappa=0.3), 2.5)
    assert bhc_core._cache_size() == before


def test_permutation_invariance_of_hierarchy():
    rng = np.random.default_rng(6)
    X = _clustered(rng, 20, 2)
    c = jaxhc.NormalInverseWishart.from_data(X)
    res = jaxhc.bhc(X, c, 1.0)
    perm = rng.permutation(20)
    res_p = jaxhc.bhc(X[perm], c, 1.0)
    np.testing.assert_allclose(float(res_p.log_evidence), float(res.log_evidence), atol=1e-9)
    assert res_p.tree.relabel_leaves(perm).same_hierarchy(res.tree)


def test_separated_clusters_are_recovered_by_cut():
    rng = np.random.default_rng(7)
    y = np.repeat([0, 1, 2], 15)
    X = rng.normal(size=(45, 2)) * 0.5 + np.array([[0, 0], [10, 0], [0, 10]])[y]
    res = jaxhc.bhc(X, jaxhc.NormalInverseWishart.from_data(X), 1.0)
    assert jaxhc.metrics.adjusted_rand_index(y, res.cut(0.5)) == pytest.approx(1.0)
    assert res.n_clusters() == 3
    assert jaxhc.metrics.dendrogram_purity(res.tree, y) == pytest.approx(1.0)


def test_missing_values_with_bernoulli():
    rng = np.random.default_rng(8)
    B = (rng.uniform(size=(15, 5)) < 0.5).astype(float)
    B[rng.uniform(size=B.shape) < 0.2] = np.nan
    c = jaxhc.BetaBernoulli(1.5, 0.8)
    res = jaxhc.bhc(B, c, 1.0)
    ref = R.bhc_reference(B, R.make_log_marginal("beta_bernoulli", a=np.full(5, 1.5), b=np.full(5, 0.8)), 1.0)
    np.testing.assert_allclose(float(res.log_evidence), ref["log_evidence"], atol=1e-8)


# ---------------------------------------------------------------------------------------
# predictive
# ---------------------------------------------------------------------------------------
def test_predictive_integrates_to_one_1d_niw():
    rng = np.random.default_rng(9)
    X = np.concatenate([rng.normal(0, 1, (8, 1)), rng.normal(6, 0.5, (7, 1))])
    res = jaxhc.bhc(X, jaxhc.NormalInverseWishart.from_data(X), 1.0)
    np.testing.assert_allclose(np.exp(res.log_weights()).sum(), 1.0, atol=1e-12)
    f = lambda x: float(np.exp(jaxhc.bhc_predictive(res, np.array([[x]]))[0]))
    total = quad(f, -np.inf, 0.0, limit=200)[0] + quad(f, 0.0, 6.0, limit=200)[0] + quad(f, 6.0, np.inf, limit=200)[0]
    np.testing.assert_allclose(total, 1.0, atol=1e-6)


def test_predictive_equals_reference_mixture():
    rng = np.random.default_rng(10)
    X = _clustered(rng, 10, 2)
    c = jaxhc.NormalInverseWishart.from_data(X)
    res = jaxhc.bhc(X, c, 1.0)
    Xn = rng.normal(size=(4, 2)) * 3
    got = np.asarray(jaxhc.bhc_predictive(res, Xn))
    lm = _niw_ref(c)
    sets = res.tree.leaf_sets()
    lw = res.log_weights()
    want = [logsumexp([lw[k] + lm(np.vstack([X[sets[k]], x])) - lm(X[sets[k]]) for k in range(len(sets))]) for x in Xn]
    np.testing.assert_allclose(got, want, atol=1e-9)


# ---------------------------------------------------------------------------------------
# gradients and hyperparameter learning
# ---------------------------------------------------------------------------------------
def test_gradient_of_evidence_matches_finite_differences():
    rng = np.random.default_rng(11)
    X = _clustered(rng, 10, 2)
    c = jaxhc.NormalInverseWishart.from_data(X)
    res = jaxhc.bhc(X, c, 1.0)
    ch = jnp.asarray(res.tree.children)
    ns = node_stats_of_tree(c, c.leaf_stats(jnp.asarray(X)), ch)

    def f(log_alpha, log_kappa, log_dof_ex):
        u = dict(c.unconstrain(), log_kappa=log_kappa, log_dof_excess=log_dof_ex)
        return tree_node_terms(c.constrain(u), jnp.exp(log_alpha), ns, ch).log_evidence

    args = (jnp.log(1.3), jnp.log(0.2), jnp.log(2.5))
    jax.test_util.check_grads(f, args, order=1, modes=["rev"], eps=1e-5, atol=1e-5, rtol=1e-5)
    # and a direct central difference in alpha
    g = jax.grad(f)(*args)
    h = 1e-5
    fd = (f(args[0] + h, *args[1:]) - f(args[0] - h, *args[1:])) / (2 * h)
    np.testing.assert_allclose(float(g), float(fd), rtol=1e-6, atol=1e-7)


def test_learning_improves_evidence_on_dpm_data():
    X, _ = jaxhc.datasets.sample_dpm(jax.random.PRNGKey(3), 80, 1.0, component_kind="gaussian", dim=2)
    c0 = jaxhc.NormalInverseWishart(np.zeros(2), 1.0, 4.0, np.eye(2) * 20.0)  # a poor prior
    fit = jaxhc.learn_hyperparameters(X, c0, 0.3, steps=60, max_rounds=4)
    assert fit.trace[-1] >= fit.trace[0]
    assert float(fit.result.log_evidence) > fit.trace[0] + 1.0
    assert float(fit.result.log_evidence) == pytest.approx(max(fit.trace))
    for mt in fit.m_step_traces:  # each M-step raises the fixed-tree objective
        assert mt[-1] >= mt[0] - 1e-9


def test_learn_hyperparameters_subset_and_errors():
    rng = np.random.default_rng(12)
    X = _clustered(rng, 30, 2)
    c = jaxhc.NormalInverseWishart.from_data(X)
    fit = jaxhc.learn_hyperparameters(X, c, 1.0, learn=["log_alpha"], steps=20, max_rounds=2)
    np.testing.assert_allclose(np.asarray(fit.component.scale), np.asarray(c.scale), rtol=1e-12)
    with pytest.raises(ValueError, match="learn"):
        jaxhc.learn_hyperparameters(X, c, 1.0, learn=["nope"])
    with pytest.raises(ValueError, match="objective"):
        jaxhc.learn_hyperparameters(X, c, 1.0, objective="likelihood")


# ---------------------------------------------------------------------------------------
# randomized BHC
# ---------------------------------------------------------------------------------------
def test_rbhc_equals_bhc_when_one_leaf_block():
    rng = np.random.default_rng(13)
    X = _clustered(rng, 40, 2)
    c = jaxhc.NormalInverseWishart.from_data(X)
    r = jaxhc.rbhc(jax.random.PRNGKey(0), X, c, 1.0, subset_size=8, leaf_size=64)
    b = jaxhc.bhc(X, c, 1.0)
    assert r.tree.same_hierarchy(b.tree)
    np.testing.assert_allclose(float(r.log_evidence), float(b.log_evidence), atol=1e-9)


def test_rbhc_filtering_builds_valid_tree():
    rng = np.random.default_rng(14)
    y = rng.integers(0, 4, 300)
    X = rng.normal(size=(300, 3)) * 0.6 + rng.normal(0, 6, (4, 3))[y]
    c = jaxhc.NormalInverseWishart.from_data(X)
    key = jax.random.PRNGKey(1)
    r = jaxhc.rbhc(key, X, c, 1.0, subset_size=16, leaf_size=64)
    r.tree.validate()
    assert r.tree.n_leaves == 300
    # exact quantities of the final tree
    terms = jaxhc.tree_log_evidence(X, r.tree, c, 1.0)
    np.testing.assert_allclose(float(r.log_evidence), float(terms.log_evidence), atol=1e-8)
    assert jaxhc.metrics.dendrogram_purity(r.tree, y) > 0.95
    # same key, same tree; the result is close to BHC's evidence
    r2 = jaxhc.rbhc(key, X, c, 1.0, subset_size=16, leaf_size=64)
    np.testing.assert_array_equal(np.asarray(r.tree.children), np.asarray(r2.tree.children))
    b = jaxhc.bhc(X, c, 1.0)
    assert abs(float(r.log_evidence) - float(b.log_evidence)) < 0.02 * abs(float(b.log_evidence))


def test_rbhc_one_cluster_with_outliers():
    # one Gaussian cluster plus far outliers: the top split peels outliers off (Algorithm 2)
    # and RBHC keeps BHC's evidence; the balanced split (a speed knob) still gives a valid
    # tree whose quantities are exact
    rng = np.random.default_rng(15)
    X = np.concatenate([rng.normal(size=(400, 2)), rng.normal(0, 30, size=(4, 2))])
    c = jaxhc.NormalInverseWishart.from_data(X)
    b = jaxhc.bhc(X, c, 1.0)
    r = jaxhc.rbhc(jax.random.PRNGKey(2), X, c, 1.0, subset_size=16, leaf_size=64)
    assert abs(float(r.log_evidence) - float(b.log_evidence)) < 0.05 * abs(float(b.log_evidence))
    rb = jaxhc.rbhc(jax.random.PRNGKey(2), X, c, 1.0, subset_size=16, leaf_size=64, balance=0.2)
    rb.tree.validate()
    terms = jaxhc.tree_log_evidence(X, rb.tree, c, 1.0)
    np.testing.assert_allclose(float(rb.log_evidence), float(terms.log_evidence), atol=1e-8)
    with pytest.raises(ValueError, match="balance"):
        jaxhc.rbhc(jax.random.PRNGKey(0), X, c, balance=0.7)


def test_rbhc_bad_arguments():
    X = np.random.default_rng(0).normal(size=(20, 2))
    c = jaxhc.NormalInverseWishart.from_data(X)
    with pytest.raises(ValueError, match="subset_size"):
        jaxhc.rbhc(jax.random.PRNGKey(0), X, c, subset_size=1)
    with pytest.raises(ValueError, match="leaf_size"):
        jaxhc.rbhc(jax.random.PRNGKey(0), X, c, subset_size=16, leaf_size=8)


# ---------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------
def test_bad_inputs_raise_clear_errors():
    X = np.random.default_rng(0).normal(size=(10, 2))
    c = jaxhc.NormalInverseWishart.from_data(X)
    with pytest.raises(ValueError, match="non-empty"):
        jaxhc.bhc(np.zeros((0, 2)), c)
    with pytest.raises(ValueError, match="2-D"):
        jaxhc.bhc(X[:, 0], c)
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="missing"):
        jaxhc.bhc(bad, c)
    bad[3, 1] = np.inf
    with pytest.raises(ValueError, match="inf"):
        jaxhc.bhc(bad, c)
    for a in (0.0, -1.0, np.nan, np.inf):
        with pytest.raises(ValueError, match="alpha"):
            jaxhc.bhc(X, c, alpha=a)
    with pytest.raises(TypeError, match="alpha"):
        jaxhc.bhc(X, c, alpha="one")
    with pytest.raises(ValueError, match="columns"):
        jaxhc.bhc(np.ones((5, 3)), c)
    with pytest.raises(TypeError, match="component"):
        jaxhc.bhc(X, "niw")
    with pytest.raises(ValueError, match="kappa"):
        jaxhc.NormalInverseWishart(np.zeros(2), kappa=0.0)
    with pytest.raises(ValueError, match="binary"):
        jaxhc.bhc(np.full((4, 2), 2.0), jaxhc.BetaBernoulli())
    res = jaxhc.bhc(X, c)
    with pytest.raises(ValueError, match="labels"):
        jaxhc.metrics.dendrogram_purity(res.tree, np.zeros(7))
    with pytest.raises(ValueError, match="threshold"):
        res.cut(1.5)
    with pytest.raises(ValueError, match="X_new"):
        jaxhc.bhc_predictive(res, np.zeros(2))


def test_single_point():
    X = np.array([[0.3, 1.0]])
    c = jaxhc.NormalInverseWishart(np.zeros(2), 1.0, 3.0, np.eye(2))
    res = jaxhc.bhc(X, c, 1.0)
    assert res.tree.n_leaves == 1
    np.testing.assert_allclose(float(res.log_evidence), _niw_ref(c)(X), atol=1e-12)


def test_public_api_names():
    assert set(jaxhc.__all__) >= {
        "Tree",
        "ParentTree",
        "bhc",
        "bhc_predictive",
        "learn_hyperparameters",
        "rbhc",
        "BHCResult",
        "NormalInverseWishart",
        "NormalKnownCov",
        "BetaBernoulli",
        "BetaBinomial",
        "DirichletMultinomial",
        "bhcc",
        "rbhcc",
        "BHCCResult",
        "bhcc_predictive_row",
        "bhcc_predictive_column",
        "bhcc_predictive_cell",
        "dpm_gibbs",
        "cdpm_mcmc",
        "bhmc",
        "BHMCResult",
        "pydt_mcmc",
        "pydt_em",
        "PYDTEMResult",
        "pydt_predictive_logpdf",
    }
    for name in jaxhc.__all__:
        assert hasattr(jaxhc, name)


def _bundled(name, n_per_class=15):
    """A stratified subset of a scikit-learn data set (standardised columns for the real-valued
    ones; pixel counts 0..16 for digits)."""
    from sklearn import datasets

    if name == "digits":
        X, y = datasets.load_digits(return_X_y=True)
    else:
        X, y = getattr(datasets, f"load_{name}")(return_X_y=True)
    rng = np.random.default_rng(0)
    idx = np.concatenate([rng.choice(np.flatnonzero(y == k), n_per_class, replace=False) for k in np.unique(y)[:3]])
    X = X[idx].astype(float)
    if name != "digits":
        X = (X - X.mean(0)) / X.std(0)
    return X


def _family_on(family, name):
    X = _bundled(name)
    d = X.shape[1]
    if family == "NormalInverseWishart":
        return X, jaxhc.NormalInverseWishart.from_data(X)
    if family == "NormalKnownCov":  # the report: this start crashed on wine
        return X, jaxhc.NormalKnownCov(np.zeros(d), np.eye(d), 0.3 * np.eye(d))
    if family == "BetaBernoulli":
        B = (X >= 8).astype(float)
        return B, jaxhc.BetaBernoulli.from_data(B)
    if family == "BetaBinomial":
        return X, jaxhc.BetaBinomial.from_data(X, trials=16)
    keep = X.sum(0) > 0  # DirichletMultinomial: each row a count vector over the pixels
    return X[:, keep], jaxhc.DirichletMultinomial.from_data(X[:, keep])


@pytest.mark.parametrize(
    "family, name",
    [(f, n) for f in ("NormalInverseWishart", "NormalKnownCov") for n in ("iris", "wine", "breast_cancer")]
    + [(f, "digits") for f in ("BetaBernoulli", "BetaBinomial", "DirichletMultinomial")],
)
def test_learn_hyperparameters_on_bundled_data(family, name):
    """learn_hyperparameters finishes on every family x bundled data set, returns finite
    values, and the rebuilt tree's evidence never ends below its start."""
    X, comp = _family_on(family, name)
    fit = jaxhc.learn_hyperparameters(X, comp, 1.0, steps=20, max_rounds=2)
    assert np.isfinite(fit.alpha) and fit.alpha > 0
    assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree_util.tree_leaves(fit.component))
    assert np.all(np.isfinite(fit.trace))
    assert float(fit.result.log_evidence) >= fit.trace[0] - 1e-9
    assert float(fit.result.log_evidence) == pytest.approx(max(fit.trace), abs=1e-9)


def test_m_step_backtracks_instead_of_raising():
    """An optimiser whose steps leave the region of finite evidence (a huge learning rate)
    is backtracked: the fit finishes with finite values no worse than the start."""
    import optax

    X, comp = _family_on("NormalKnownCov", "wine")
    fit = jaxhc.learn_hyperparameters(X, comp, 1.0, optimizer=optax.sgd(1e6), steps=10, max_rounds=2)
    assert np.all(np.isfinite(fit.trace))
    assert float(fit.result.log_evidence) >= fit.trace[0] - 1e-9
    for t in fit.m_step_traces:
        assert np.all(np.isfinite(t))


# ------------------------------------------------------------------------------------------
# extreme scales: fail fast with the cause, never spin
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("scale", [1e10, 1e300])
def test_prior_data_scale_mismatch_raises_with_both_scales(scale):
    """Data 1e10 times the scale the NIW prior was fitted on used to hang the merge loop
    (NaN scores kept a stale row on top); it now raises a ValueError that names the prior,
    the two scales and the remedy."""
    from jaxhc.components import NormalInverseWishart

    X = np.random.default_rng(0).normal(size=(12, 3))
    with pytest.raises(ValueError, match=r"prior does not fit the data's scale.*from_data"):
        jaxhc.bhc(X * scale, NormalInverseWishart.from_data(X))


def test_prior_data_scale_mismatch_normal_gamma_still_exact():
    """The per-feature family has no cancellation: at 1e10 it still returns, with the same
    tree as the data at unit scale under a prior rescaled alike."""
    from jaxhc.components import NormalGamma

    X = np.random.default_rng(1).normal(size=(12, 3))
    res = jaxhc.bhc(X * 1e10, NormalGamma.from_data(X * 1e10))
    ref = jaxhc.bhc(X, NormalGamma.from_data(X))
    assert np.isfinite(float(res.log_evidence))
    np.testing.assert_array_equal(res.tree.children, ref.tree.children)
    # the evidence of rescaled data shifts by -n d log(1e10) (a change of variables)
    np.testing.assert_allclose(float(res.log_evidence), float(ref.log_evidence) - 36 * np.log(1e10), rtol=1e-9)


def test_merge_loop_terminates_on_nan_scores():
    """The lazy best-partner rescans are bounded: NaN initial pair scores give NaN merge
    log-odds after n - 1 merges, not an endless loop."""
    from jaxhc.components import NormalInverseWishart
    from jaxhc.inference.bhc.greedy import bhc_core

    X = np.random.default_rng(2).normal(size=(8, 2))
    comp = NormalInverseWishart.from_data(X)
    S0 = jnp.full((8, 8), jnp.nan)
    out = bhc_core(
        comp, jnp.log(jnp.asarray(1.0, jnp.float64)), comp.leaf_stats(jnp.asarray(X)), jnp.asarray(8, jnp.int32), S0=S0
    )
    assert out[0].shape == (7, 2)


def test_chunked_search_equals_the_one_call_search():
    """The host-driven chunked search (used for long runs: progress and Ctrl-C between
    chunks) runs the same compiled pieces: the same tree and bitwise the same scores, also
    with padding slots."""
    from jaxhc.components import NormalInverseWishart

    rng = np.random.default_rng(5)
    X = np.concatenate([rng.normal(size=(9, 2)), rng.normal(size=(9, 2)) + 3])
    comp = NormalInverseWishart.from_data(X)
    leaf = comp.leaf_stats(jnp.asarray(X))
    one = bhc_from_stats(comp, 0.7, leaf, chunked=False)
    pad = jax.tree_util.tree_map(lambda x: jnp.concatenate([x, x[:3]]), leaf)
    for res in (
        bhc_from_stats(comp, 0.7, leaf, chunked=True),
        bhc_from_stats(comp, 0.7, pad, n_valid=18, chunked=True),
    ):
        np.testing.assert_array_equal(res.tree.children, one.tree.children)
        np.testing.assert_array_equal(np.asarray(res.log_r), np.asarray(one.log_r))
        assert float(res.log_evidence) == float(one.log_evidence)


def test_cell_predictive_and_alpha_refuse_bad_values():
    """bhc_predictive_cell: a value outside the family's domain (2 for Bernoulli data) or NaN
    (it would be read as a missing cell) and fractional coordinates raise; alpha as a string
    raises; NIW.from_data names an overflowing variance."""
    from jaxhc.components import BetaBernoulli, NormalInverseWishart
    from jaxhc.inference.bhc.predictive import bhc_predictive_cell

    X = np.array([[0, 1, np.nan], [1, 1, 0], [0, 0, 1], [1, np.nan, 0]], float)
    res = jaxhc.bhc(X, BetaBernoulli(1.0, 1.0))
    ok = bhc_predictive_cell(res, [0, 3], [2, 1], [1.0, 0.0])
    assert np.all(np.isfinite(ok)) and np.all(ok < 0)
    with pytest.raises(ValueError, match="binary"):
        bhc_predictive_cell(res, [0], [2], [2.0])
    with pytest.raises(ValueError, match="values must be finite"):
        bhc_predictive_cell(res, [0], [2], [np.nan])
    with pytest.raises(ValueError, match="rows must be integer"):
        bhc_predictive_cell(res, [0.5], [2], [1.0])
    with pytest.raises(TypeError, match="alpha"):
        jaxhc.bhc(X, BetaBernoulli(1.0, 1.0), alpha="1")
    with pytest.raises(ValueError, match="variance overflows"):
        NormalInverseWishart.from_data(np.array([[1e300, 0.0], [-1e300, 1.0]]))
