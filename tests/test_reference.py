"""Checks of tests/reference.py against independent facts (closed forms, quadrature, counts)."""

import itertools
import os
import sys

import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import betaln, gammaln, logsumexp

_HERE = os.path.dirname(os.path.abspath(__file__))
# tests/ for `reference`; the repository root for `jaxhc` when it is not pip-installed
for _p in (os.path.dirname(_HERE), _HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from jaxhc.tree import Tree  # noqa: E402

import reference as ref  # noqa: E402


def _double_factorial(k):
    return int(np.prod(np.arange(k, 0, -2))) if k > 0 else 1


BELL = [1, 1, 2, 5, 15, 52, 203, 877, 4140, 21147]


# ---------------------------------------------------------------------------------------
# (a) NIW in 1-D against quadrature over (mu, sigma^2)
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("x", [[0.3], [0.3, -0.5], [0.3, -0.5, 1.2]])
def test_niw_1d_equals_quadrature(x):
    m0, kappa0, nu0, S0 = 0.2, 1.5, 3.0, 2.0
    x = np.asarray(x)

    a0, b0 = nu0 / 2.0, S0 / 2.0

    def integrand(mu, u):
        # sigma^2 = exp(u) ~ IW_1(nu0, S0) = InvGamma(nu0/2, S0/2); mu | sigma^2 ~ N(m0, sigma^2/kappa0)
        s2 = np.exp(u)
        lp = a0 * np.log(b0) - gammaln(a0) - (a0 + 1) * u - b0 / s2 + u  # InvGamma density x Jacobian
        lp += -0.5 * np.log(2 * np.pi * s2 / kappa0) - 0.5 * kappa0 * (mu - m0) ** 2 / s2
        lp += np.sum(-0.5 * np.log(2 * np.pi * s2) - 0.5 * (x - mu) ** 2 / s2)
        return np.exp(lp)

    # outer u = log sigma^2, inner mu over a window that widens with sigma
    lo, hi = min(x.min(), m0), max(x.max(), m0)
    width = lambda u: 12.0 * np.exp(u / 2) / min(1.0, np.sqrt(kappa0))
    val, err = integrate.dblquad(
        integrand, -20.0, 20.0, lambda u: lo - width(u), lambda u: hi + width(u), epsabs=0.0, epsrel=1e-9
    )
    got = ref.niw_log_marginal(x[:, None], [m0], kappa0, nu0, [[S0]])
    np.testing.assert_allclose(got, np.log(val), rtol=0, atol=1e-7)


# ---------------------------------------------------------------------------------------
# (b) chain rule of independent closed-form posterior predictives
# ---------------------------------------------------------------------------------------
def _niw_predictive_closed_form(x, Xc, m0, kappa0, nu0, S0):
    """Student-t: df nu_n - d + 1, loc m_n, shape S_n (kappa_n + 1) / (kappa_n (nu_n - d + 1))."""
    d = x.shape[0]
    n = Xc.shape[0]
    kn, nun = kappa0 + n, nu0 + n
    if n:
        xbar = Xc.mean(0)
        S = (Xc - xbar).T @ (Xc - xbar)
        mn = (kappa0 * m0 + n * xbar) / kn
        Sn = S0 + S + kappa0 * n / kn * np.outer(xbar - m0, xbar - m0)
    else:
        mn, Sn = m0, S0
    df = nun - d + 1
    return stats.multivariate_t.logpdf(x, loc=mn, shape=Sn * (kn + 1) / (kn * df), df=df)


def _nkc_predictive_closed_form(x, Xc, m0, P, N):
    """N(x | posterior mean, posterior cov + noise cov)."""
    n = Xc.shape[0]
    Pi, Ni = np.linalg.inv(P), np.linalg.inv(N)
    post_prec = Pi + n * Ni
    post_cov = np.linalg.inv(post_prec)
    post_mean = post_cov @ (Pi @ m0 + Ni @ Xc.sum(0))
    return stats.multivariate_normal.logpdf(x, post_mean, post_cov + N)


def _spd(rng, d, scale=1.0):
    A = rng.normal(size=(d, d))
    return scale * (A @ A.T / d + np.eye(d))


@pytest.mark.parametrize("d", [1, 2, 3])
def test_niw_chain_rule(d):
    rng = np.random.default_rng(d)
    X = rng.normal(size=(5, d))
    m0, kappa0, nu0, S0 = rng.normal(size=d), 0.7, d + 1.5, _spd(rng, d)
    chain = sum(_niw_predictive_closed_form(X[i], X[:i], m0, kappa0, nu0, S0) for i in range(5))
    np.testing.assert_allclose(ref.niw_log_marginal(X, m0, kappa0, nu0, S0), chain, rtol=1e-10, atol=1e-10)
    for i in range(5):
        np.testing.assert_allclose(
            ref.niw_log_predictive(X[i], X[:i], m0, kappa0, nu0, S0),
            _niw_predictive_closed_form(X[i], X[:i], m0, kappa0, nu0, S0),
            rtol=1e-10,
            atol=1e-10,
        )


@pytest.mark.parametrize("d", [1, 2, 3])
def test_normal_known_cov_chain_rule(d):
    rng = np.random.default_rng(10 + d)
    X = rng.normal(size=(5, d))
    m0, P, N = rng.normal(size=d), _spd(rng, d, 2.0), _spd(rng, d, 0.5)
    chain = sum(_nkc_predictive_closed_form(X[i], X[:i], m0, P, N) for i in range(5))
    np.testing.assert_allclose(ref.normal_known_cov_log_marginal(X, m0, P, N), chain, rtol=1e-10, atol=1e-10)
    for i in range(5):
        np.testing.assert_allclose(
            ref.normal_known_cov_log_predictive(X[i], X[:i], m0, P, N),
            _nkc_predictive_closed_form(X[i], X[:i], m0, P, N),
            rtol=1e-10,
            atol=1e-10,
        )


# ---------------------------------------------------------------------------------------
# (c) discrete families: formulas, integrals, normalisation, missing entries
# ---------------------------------------------------------------------------------------
def test_beta_bernoulli_explicit():
    rng = np.random.default_rng(0)
    X = (rng.random((6, 3)) < 0.4).astype(float)
    a, b = np.array([1.0, 0.5, 2.0]), np.array([1.0, 3.0, 0.7])
    expect = 0.0
    for j in range(3):
        m = X[:, j].sum()
        expect += betaln(a[j] + m, b[j] + 6 - m) - betaln(a[j], b[j])
        # and as an integral over theta
        f = lambda th: th**m * (1 - th) ** (6 - m) * stats.beta.pdf(th, a[j], b[j])
        val, _ = integrate.quad(f, 0, 1, epsabs=1e-14, epsrel=1e-12)
        np.testing.assert_allclose(betaln(a[j] + m, b[j] + 6 - m) - betaln(a[j], b[j]), np.log(val), rtol=1e-7)
    np.testing.assert_allclose(ref.beta_bernoulli_log_marginal(X, a, b), expect, rtol=1e-12)
    # chain rule with the predictive p(x=1 | m ones in c) = (a + m) / (a + b + c)
    chain = 0.0
    for i in range(6):
        m = X[:i].sum(0)
        p1 = (a + m) / (a + b + i)
        chain += np.sum(np.where(X[i] == 1, np.log(p1), np.log1p(-p1)))
    np.testing.assert_allclose(ref.beta_bernoulli_log_marginal(X, a, b), chain, rtol=1e-12)


def test_beta_bernoulli_sums_to_one_and_skips_nan():
    a, b = np.array([0.7, 2.0]), np.array([1.3, 0.4])
    tot = [
        ref.beta_bernoulli_log_marginal(np.array(bits, float).reshape(3, 2), a, b)
        for bits in itertools.product([0, 1], repeat=6)
    ]
    np.testing.assert_allclose(logsumexp(tot), 0.0, atol=1e-12)
    X = np.array([[1, 0], [np.nan, 1], [0, np.nan], [1, 1]], float)
    # a missing entry contributes nothing: same as that column without the entry
    expect = ref.beta_bernoulli_log_marginal(
        np.array([[1], [0], [1]], float), a[0], b[0]
    ) + ref.beta_bernoulli_log_marginal(np.array([[0], [1], [1]], float), a[1], b[1])
    np.testing.assert_allclose(ref.beta_bernoulli_log_marginal(X, a, b), expect, rtol=1e-12)
    # marginalising a cell out (sum over its values) equals marking it missing
    Y0, Y1 = X.copy(), X.copy()
    Y0[1, 0], Y1[1, 0] = 0, 1
    np.testing.assert_allclose(
        np.logaddexp(ref.beta_bernoulli_log_marginal(Y0, a, b), ref.beta_bernoulli_log_marginal(Y1, a, b)),
        ref.beta_bernoulli_log_marginal(X, a, b),
        rtol=1e-12,
    )


def test_beta_binomial_integral_normalisation_nan():
    a, b, T = np.array([1.5, 0.6]), np.array([0.8, 2.0]), np.array([3, 2])
    X = np.array([[2, 0], [3, 1], [0, 2]], float)
    for j in range(2):

        def f(th):
            return np.prod(stats.binom.pmf(X[:, j], T[j], th)) * stats.beta.pdf(th, a[j], b[j])

        val, _ = integrate.quad(f, 0, 1, epsabs=1e-14, epsrel=1e-12)
        np.testing.assert_allclose(ref.beta_binomial_log_marginal(X[:, [j]], a[j], b[j], T[j]), np.log(val), rtol=1e-7)
    tot = [
        ref.beta_binomial_log_marginal(np.array([[u, v], [w, z]], float), a, b, T)
        for u, w in itertools.product(range(4), repeat=2)
        for v, z in itertools.product(range(3), repeat=2)
    ]
    np.testing.assert_allclose(logsumexp(tot), 0.0, atol=1e-12)
    Xn = X.copy()
    Xn[1, 0] = np.nan
    summed = logsumexp([ref.beta_binomial_log_marginal(np.where(np.isnan(Xn), v, Xn), a, b, T) for v in range(4)])
    np.testing.assert_allclose(ref.beta_binomial_log_marginal(Xn, a, b, T), summed, rtol=1e-12)


def test_dirichlet_multinomial_normalisation_and_k2_is_beta_binomial():
    alpha = np.array([0.5, 1.2, 2.0])
    totals = [2, 3]
    comps = [[c for c in itertools.product(range(N + 1), repeat=3) if sum(c) == N] for N in totals]
    tot = [
        ref.dirichlet_multinomial_log_marginal(np.array([r0, r1], float), alpha) for r0 in comps[0] for r1 in comps[1]
    ]
    np.testing.assert_allclose(logsumexp(tot), 0.0, atol=1e-12)
    # K = 2 with a fixed total N per row is a Beta-Binomial(N) in the first count
    X = np.array([[1, 3], [4, 0], [2, 2]], float)
    np.testing.assert_allclose(
        ref.dirichlet_multinomial_log_marginal(X, [0.7, 1.9]),
        ref.beta_binomial_log_marginal(X[:, [0]], 0.7, 1.9, 4),
        rtol=1e-12,
    )
    # predictive = marginal difference; and make_log_marginal wraps the same function
    lm = ref.make_log_marginal("dirichlet_multinomial", alpha=alpha)
    Xc = np.array([[1, 0, 1], [0, 2, 0]], float)
    np.testing.assert_allclose(
        ref.dirichlet_multinomial_log_predictive(np.array([1, 1, 0.0]), Xc, alpha),
        lm(np.vstack([Xc, [1, 1, 0]])) - lm(Xc),
        rtol=1e-12,
    )


# ---------------------------------------------------------------------------------------
# (d), (e) enumerations
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", range(2, 8))
def test_all_binary_trees_count_and_distinct(n):
    trees = list(ref.all_binary_trees(n))
    assert len(trees) == _double_factorial(2 * n - 3)
    keys = {frozenset(t.clusters()) for t in trees}
    assert len(keys) == len(trees)
    for t in trees:
        t.validate()
        assert len(t.clusters()) == 2 * n - 1


@pytest.mark.parametrize("n", range(0, 10))
def test_set_partitions_bell(n):
    parts = list(ref.all_set_partitions(n))
    assert len(parts) == BELL[n]
    canon = set()
    for p in parts:
        assert sorted(i for blk in p for i in blk) == list(range(n))
        canon.add(frozenset(frozenset(b) for b in p))
    assert len(canon) == len(parts)


def test_tree_consistent_partitions_count():
    # f(leaf) = 1, f(k) = 1 + f(left) f(right); all blocks are clusters of the tree
    for t in ref.all_binary_trees(6):
        ch, n = np.asarray(t.children), t.n_leaves
        f = [1] * n
        for a, b in ch:
            f.append(1 + f[a] * f[b])
        parts = ref.tree_consistent_partitions(t)
        assert len(parts) == f[-1]
        clusters = t.clusters()
        for p in parts:
            assert all(blk in clusters for blk in p)
            assert sorted(i for blk in p for i in blk) == list(range(n))


# ---------------------------------------------------------------------------------------
# (f) BHC evidence against enumeration over tree-consistent partitions
# ---------------------------------------------------------------------------------------
def _niw_data(rng, n, d=2):
    centers = np.array([[0.0] * d, [4.0] * d])
    X = centers[rng.integers(0, 2, n)] + rng.normal(size=(n, d))
    lm = ref.make_log_marginal("niw", m0=X.mean(0), kappa0=0.5, nu0=d + 1.0, S0=np.eye(d))
    return X, lm


def _bb_data(rng, n, d=4):
    protos = np.array([[1, 1, 0, 0], [0, 0, 1, 1]])[:, :d]
    X = np.where(rng.random((n, d)) < 0.85, protos[rng.integers(0, 2, n)], 1 - protos[rng.integers(0, 2, n)])
    return X.astype(float), ref.make_log_marginal("beta_bernoulli", a=1.0, b=1.0)


@pytest.mark.parametrize("family", ["niw", "beta_bernoulli"])
@pytest.mark.parametrize("n", [2, 3, 5, 7])
@pytest.mark.parametrize("alpha", [0.5, 2.0])
def test_bhc_evidence_equals_enumeration(family, n, alpha):
    rng = np.random.default_rng(100 * n + int(10 * alpha))
    X, lm = (_niw_data if family == "niw" else _bb_data)(rng, n)
    res = ref.bhc_reference(X, lm, alpha)
    tree = Tree(res["children"]).validate()
    assert np.all(res["children"][:, 0] < res["children"][:, 1])
    enum = ref.tree_evidence_by_enumeration(tree, X, lm, alpha)
    np.testing.assert_allclose(res["log_evidence"], enum, rtol=0, atol=1e-10)
    # recursion on the fixed tree reproduces every per-node quantity of the greedy run
    fixed = ref.tree_log_evidence(tree, X, lm, alpha)
    for key in ["log_pT", "log_d", "log_h1", "log_r"]:
        np.testing.assert_allclose(res[key], fixed[key], rtol=0, atol=1e-10)
    assert np.all(res["log_r"] <= 1e-12)
    # the chosen first merge has the largest r among all pairs of leaves
    firsts = []
    for i, j in itertools.combinations(range(n), 2):
        firsts.append(ref.tree_log_evidence(Tree.from_nested((0, 1)), X[[i, j]], lm, alpha)["log_r"][0])
    np.testing.assert_allclose(res["log_r"][0], max(firsts), atol=1e-12)


def test_enumeration_on_every_tree_and_weights_sum_to_one():
    rng = np.random.default_rng(7)
    X, lm = _niw_data(rng, 5)
    zero = lambda Y: 0.0
    for t in ref.all_binary_trees(5):
        np.testing.assert_allclose(
            ref.tree_log_evidence(t, X, lm, 1.3)["log_evidence"],
            ref.tree_evidence_by_enumeration(t, X, lm, 1.3),
            atol=1e-10,
        )
        # Lemma weights alpha^m prod Gamma(n_l) / d_root sum to one
        np.testing.assert_allclose(ref.tree_evidence_by_enumeration(t, X, zero, 1.3), 0.0, atol=1e-12)
    # CRP weights over all partitions sum to one
    np.testing.assert_allclose(ref.dpm_log_evidence(X, zero, 1.3), 0.0, atol=1e-12)


def test_bhc_separated_clusters_cut_at_half():
    rng = np.random.default_rng(3)
    X = np.vstack([rng.normal(0, 0.3, (4, 2)), rng.normal(10, 0.3, (4, 2))])
    lm = ref.make_log_marginal("niw", m0=X.mean(0), kappa0=0.1, nu0=3.0, S0=np.eye(2))
    res = ref.bhc_reference(X, lm, 1.0)
    labels = Tree(res["children"]).cut(0.5, scores=np.exp(res["log_r"]))
    np.testing.assert_array_equal(labels, [0, 0, 0, 0, 1, 1, 1, 1])
    # permuting the rows gives the same hierarchy on the permuted leaves
    perm = rng.permutation(8)
    res_p = ref.bhc_reference(X[perm], lm, 1.0)
    assert Tree(res_p["children"]).relabel_leaves(perm).same_hierarchy(Tree(res["children"]))
    np.testing.assert_allclose(res_p["log_evidence"], res["log_evidence"], atol=1e-10)


# ---------------------------------------------------------------------------------------
# (g) the DPM lower bound
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", ["niw", "beta_bernoulli"])
@pytest.mark.parametrize("n", [2, 4, 7])
def test_dpm_lower_bound_bhc(family, n):
    rng = np.random.default_rng(n)
    X, lm = (_niw_data if family == "niw" else _bb_data)(rng, n)
    for alpha in [0.3, 1.0, 5.0]:
        res = ref.bhc_reference(X, lm, alpha)
        exact = ref.dpm_log_evidence(X, lm, alpha)
        assert res["dpm_lower_bound"] <= exact + 1e-10
        if n == 2:  # both partitions of two points are tree-consistent: equality
            np.testing.assert_allclose(res["dpm_lower_bound"], exact, atol=1e-10)


def test_dpm_lower_bound_every_tree():
    rng = np.random.default_rng(11)
    X, lm = _bb_data(rng, 5)
    exact = ref.dpm_log_evidence(X, lm, 0.8)
    bounds = [ref.tree_log_evidence(t, X, lm, 0.8)["dpm_lower_bound"] for t in ref.all_binary_trees(5)]
    assert max(bounds) <= exact + 1e-10
    # the bound is the CRP mass of the tree-consistent partitions: a direct sub-sum
    t = next(ref.all_binary_trees(5))
    sub = logsumexp(
        [
            gammaln(0.8) - gammaln(5.8) + sum(np.log(0.8) + gammaln(len(b)) + lm(X[sorted(b)]) for b in p)
            for p in ref.tree_consistent_partitions(t)
        ]
    )
    np.testing.assert_allclose(ref.tree_log_evidence(t, X, lm, 0.8)["dpm_lower_bound"], sub, atol=1e-10)


# ---------------------------------------------------------------------------------------
# dendrogram purity
# ---------------------------------------------------------------------------------------
def test_dendrogram_purity_hand_examples():
    labels = [0, 0, 1, 1]
    assert ref.dendrogram_purity_bruteforce(Tree.from_nested(((0, 1), (2, 3))), labels) == 1.0
    assert ref.dendrogram_purity_bruteforce(Tree.from_nested(((0, 2), (1, 3))), labels) == 0.5
    assert ref.dendrogram_purity_bruteforce(Tree.from_nested((((0, 1), 2), 3)), labels) == 0.75
    # labels [0, 0, 0, 1], caterpillar (((0, 3), 1), 2): pairs (0,1): 2/3, (0,2): 3/4, (1,2): 3/4
    got = ref.dendrogram_purity_bruteforce(Tree.from_nested((((0, 3), 1), 2)), [0, 0, 0, 1])
    np.testing.assert_allclose(got, (2 / 3 + 3 / 4 + 3 / 4) / 3)
