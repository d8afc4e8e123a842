"""Probit PYDT EM (sections 5.2, 5.4): EP on a fixed tree against the exact probit posterior
(tensor Gauss-Hermite and the orthant probability), the EP fixed point, the per-dim message
passing in its Gaussian limit, the M-step on the EP surrogate, search on two binary clusters,
the predictive over bit vectors, input errors."""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from scipy.special import log_ndtr  # noqa: E402
from scipy.stats import multivariate_normal  # noqa: E402

from jaxhc.inference.pydt import em as E  # noqa: E402
from jaxhc.inference.pydt import ep as EP  # noqa: E402
from jaxhc.inference.pydt import estep as ES  # noqa: E402
from jaxhc.inference.pydt import moves as MV  # noqa: E402
from jaxhc.inference.pydt.state import PYDTPriors  # noqa: E402
from jaxhc.metrics import dendrogram_purity  # noqa: E402
from jaxhc.models.pydt_math import FREE, sample_prior_tree  # noqa: E402

_e_step_diag = jax.jit(ES.e_step_diag, static_argnums=(6, 7))


@jax.jit
def _site_fixed_point(est, sites, S):
    N = S.shape[0]
    mu_c, v_c = EP._cavity(est.mean[:N], est.var[:N], sites)
    _, tau, nu = EP._probit_site(S, mu_c, v_c)
    return tau, nu


@jax.jit
def _attach_scores(parent, times, X, sigma2, hyper, V):
    """Re-attachment scores of the first internal non-root subtree, isotropic and per-dim."""
    N = X.shape[0]
    m = parent.shape[0]
    active = parent != FREE
    s = jnp.argmax(active & (parent >= 0) & (jnp.arange(m) >= N)).astype(jnp.int32)
    cnt = ES.leaf_counts(parent, times, active, N)
    par_r, act_r, insub, slot = MV._detach(parent, times, s)
    cnt_sub = jnp.where(insub, cnt, 0)
    mu_g, v_g = MV._subtree_message(parent, times, active, X, sigma2, s)
    mu_d, v_d = MV._subtree_message(parent, times, active, X, sigma2, s, V)
    sc_g, _ = MV._attach(par_r, times, act_r, insub, cnt_sub, s, mu_g, v_g, slot, X, hyper, True)
    sc_d, _ = MV._attach(par_r, times, act_r, insub, cnt_sub, s, mu_d, v_d, slot, X, hyper, True, V)
    return (mu_g, v_g, sc_g), (mu_d, v_d, sc_d)


def _tree(seed, N):
    return sample_prior_tree(jax.random.PRNGKey(seed), N, jnp.float64, 1.0, 0.5, 0.2)


def _leaf_cov(parent, times, N, sigma2):
    """Prior covariance of the leaf locations (per dim): ``sigma2 t_lca``."""
    parent, t = np.asarray(parent), np.asarray(times)

    def path(k):
        out = [k]
        while parent[out[-1]] >= 0:
            out.append(parent[out[-1]])
        return set(out)

    return np.array([[sigma2 * max(t[x] for x in path(a) & path(b)) for b in range(N)] for a in range(N)])


def _exact_probit(K, s, n=24):
    """``log Z``, posterior means and variances of ``x ~ N(0, K)`` times ``prod Phi(s_i x_i)`` by
    tensor Gauss-Hermite quadrature in the whitened coordinates (smooth integrand)."""
    g, w = np.polynomial.hermite_e.hermegauss(n)
    w = w / np.sqrt(2 * np.pi)
    N = K.shape[0]
    Z = np.stack(np.meshgrid(*[g] * N, indexing="ij"), -1).reshape(-1, N)
    W = np.prod(np.stack(np.meshgrid(*[w] * N, indexing="ij"), -1).reshape(-1, N), axis=1)
    X = Z @ np.linalg.cholesky(K).T
    p = W * np.exp(np.sum(log_ndtr(s * X), axis=1))
    Zt = p.sum()
    mean = p @ X / Zt
    return np.log(Zt), mean, p @ X**2 / Zt - mean**2


@pytest.mark.parametrize("seed", [0, 3])
def test_ep_matches_exact_probit_posterior(seed):
    N, D, sigma2 = 4, 2, 2.0
    parent, times = _tree(seed, N)
    Y = (
        np.array([[1, 0], [1, 1], [0, 1], [1, 0]], float)
        if seed == 0
        else np.array([[0, 1], [1, 1], [0, 0], [1, 1]], float)
    )
    hyper = E.em_init_hyper(Y, 1.0, 0.5, 0.2, sigma2)
    est, sites = E.ep_e_step(parent, times, jnp.asarray(Y), hyper)
    K = _leaf_cov(parent, times, N, sigma2)
    log_z = 0.0
    for d in range(D):
        s = 2 * Y[:, d] - 1
        lz, mean, var = _exact_probit(K, s)
        # the quadrature against the orthant probability P(s_i (x_i + eps_i) > 0 for all i)
        # (scipy's randomised quasi-Monte Carlo: accurate to ~1e-5 relative)
        orth = multivariate_normal(
            np.zeros(N), (K + np.eye(N)) * np.outer(s, s), abseps=1e-7, releps=1e-7, maxpts=10**6
        ).cdf(np.zeros(N))
        np.testing.assert_allclose(lz, np.log(orth), atol=5e-4)
        log_z += lz
        # EP marginals of the leaves (observed: |mean err| <~ 1e-3, |var err| <~ 1e-2)
        np.testing.assert_allclose(np.asarray(est.mean)[:N, d], mean, atol=5e-3)
        np.testing.assert_allclose(np.asarray(est.var)[:N, d], var, atol=3e-2)
    # log Z_EP vs the exact log p(Y | T, t) (observed |diff| <~ 1e-3); the Gaussian part alone
    # (no site corrections) is far off
    assert abs(float(est.log_lik) - log_z) < 1e-2
    gauss_only = _e_step_diag(parent, times, sites.mean, sites.var, hyper, PYDTPriors(), True, False).log_lik
    assert abs(float(gauss_only) - log_z) > 0.5
    # fixed point: the tilted moments of every leaf equal its marginal, so the sites do not move
    tau, nu = _site_fixed_point(est, sites, jnp.asarray(2 * Y - 1))
    np.testing.assert_allclose(np.asarray(tau), np.asarray(sites.tau), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.asarray(nu), np.asarray(sites.nu), rtol=1e-5, atol=1e-7)
    assert np.all(np.asarray(sites.tau) > 0) and np.all(np.asarray(sites.tau) <= 1)


def test_tilted_moments_by_quadrature():
    """``_probit_site`` against 1-D quadrature of ``N(x; mu, v) Phi(s x)``, including a far tail."""
    g, w = np.polynomial.hermite_e.hermegauss(200)
    w = w / np.sqrt(2 * np.pi)
    for s, mu, v in [(1.0, 0.3, 2.0), (-1.0, 0.3, 0.5), (1.0, -6.0, 0.2), (-1.0, 2.5, 4.0)]:
        x = mu + np.sqrt(v) * g
        p = w * np.exp(log_ndtr(s * x))
        Z = p.sum()
        m = p @ x / Z
        var = p @ x**2 / Z - m**2
        logZ, tau, nu = EP._probit_site(jnp.asarray(s), jnp.asarray(mu), jnp.asarray(v))
        np.testing.assert_allclose(float(logZ), np.log(Z), rtol=1e-8)
        np.testing.assert_allclose(1.0 / v + float(tau), 1.0 / var, rtol=1e-6)  # tilted precision
        np.testing.assert_allclose((mu / v + float(nu)) / (1.0 / v + float(tau)), m, rtol=1e-6, atol=1e-9)


def test_diag_message_passing_gaussian_limit():
    """With zero leaf noise the per-dim E-step and attachment scores equal the Gaussian ones."""
    N, D, sigma2 = 8, 3, 0.7
    parent, times = _tree(1, N)
    X = jax.random.normal(jax.random.PRNGKey(11), (N, D))
    hyper = E.em_init_hyper(X, 1.0, 0.5, 0.2, sigma2)
    ref = E.e_step(parent, times, X, hyper)
    est = _e_step_diag(parent, times, X, jnp.zeros((N, D)), hyper, PYDTPriors(), True, True)
    np.testing.assert_allclose(np.asarray(est.mean), np.asarray(ref.mean), atol=1e-12)
    np.testing.assert_allclose(
        np.asarray(est.var), np.broadcast_to(np.asarray(ref.var)[:, None], (2 * N - 1, D)), atol=1e-12
    )
    np.testing.assert_allclose(
        np.asarray(est.cross), np.broadcast_to(np.asarray(ref.cross)[:, None], (2 * N - 1, D)), atol=1e-12
    )
    np.testing.assert_allclose(np.asarray(est.b), np.asarray(ref.b), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(float(est.log_lik), float(ref.log_lik), rtol=1e-12)
    np.testing.assert_allclose(float(est.bound), float(ref.bound), rtol=1e-12)
    # re-attachment scores of a detached subtree
    (mu_g, v_g, sc_g), (mu_d, v_d, sc_d) = _attach_scores(parent, times, X, sigma2, hyper, jnp.zeros((N, D)))
    np.testing.assert_allclose(np.asarray(mu_d), np.asarray(mu_g), atol=1e-12)
    np.testing.assert_allclose(np.asarray(v_d), float(v_g), rtol=1e-12)
    sc_g, sc_d = np.asarray(sc_g), np.asarray(sc_d)
    assert np.isfinite(sc_g).sum() > 3
    np.testing.assert_array_equal(np.isfinite(sc_d), np.isfinite(sc_g))
    np.testing.assert_allclose(sc_d[np.isfinite(sc_g)], sc_g[np.isfinite(sc_g)], rtol=1e-11)


def test_m_step_does_not_lower_ep_surrogate_bound():
    """With the EP sites fixed the M-step is EM on a Gaussian model with pseudo-observations:
    the surrogate bound does not decrease; ``sigma2`` stays fixed, ``q(c)`` moves."""
    N = 4  # the shapes of the EP test: compiled once
    Y = np.array([[1, 0], [1, 1], [0, 1], [0, 0]], float)
    S = jnp.asarray(2 * Y - 1)
    pri = PYDTPriors()
    for seed in range(2):
        parent, times = _tree(30 + seed, N)
        hyper = E.em_init_hyper(Y, 1.0, 0.5, 0.2, 1.0)
        sites = None
        bounds = []
        for _ in range(3):
            est, sites = E.ep_e_step(parent, times, jnp.asarray(Y), hyper, sites)
            before = _e_step_diag(parent, times, sites.mean, sites.var, hyper, pri, True, False)
            np.testing.assert_allclose(np.asarray(before.b), np.asarray(est.b), rtol=1e-12)
            t2, h2 = E.m_step(parent, times, S, est, hyper, learn=True, learn_sigma2=False)
            after = _e_step_diag(parent, t2, sites.mean, sites.var, h2, pri, True, False)
            assert float(after.bound) >= float(before.bound) - 1e-9 * abs(float(before.bound))
            assert float(h2.sigma2) == 1.0 and float(h2.c_rate) != 1.0
            bounds.append(float(est.bound))
            times, hyper = t2, h2
        assert bounds[-1] > bounds[0]


def _two_clusters(seed=0, N=12, D=20):
    rng = np.random.default_rng(seed)
    pattern = rng.random((2, D)) < 0.5
    lab = np.repeat([0, 1], N // 2)
    Y = (rng.random((N, D)) < np.where(pattern[lab], 0.9, 0.1)).astype(float)
    return Y, lab, pattern


@pytest.fixture(scope="module")
def two_cluster_fit():
    Y, lab, pattern = _two_clusters()
    res = E.pydt_em(jax.random.PRNGKey(0), Y, likelihood="probit", num_iters=1, max_em=5, progress_bar=False)
    return Y, lab, pattern, res


def test_probit_em_recovers_two_binary_clusters(two_cluster_fit):
    Y, lab, _, res = two_cluster_fit
    N, D = Y.shape
    assert dendrogram_purity(res.tree, lab) >= 0.9
    par = np.asarray(res.tree.parent)
    root = int(np.flatnonzero(par == -1)[0])
    sets = {k: set() for k in range(par.size)}
    for k in range(N):
        p = k
        while p >= 0:
            sets[p].add(k)
            p = par[p]
    kids = np.flatnonzero(par == root)
    assert sorted(map(sorted, (sets[k] for k in kids))) == [list(range(6)), list(range(6, 12))]
    assert res.likelihood == "probit" and res.sigma2 == 1.0 and res.q_precision is None
    assert np.all(np.diff(res.trace) >= 0) and np.isfinite(res.log_evidence)
    assert len(res.k_best_sites) == len(res.k_best)
    tau = np.asarray(res.k_best_sites[0].tau)
    assert tau.shape == (N, D) and np.all(tau > 0)


def test_probit_predictive(two_cluster_fit):
    Y, lab, pattern, res = two_cluster_fit
    bits = pattern.astype(float)
    lp = E.pydt_predictive_logpdf(res, np.stack([bits[0], bits[1], 1.0 - bits[0]]))
    assert lp.shape == (3,) and np.all(np.isfinite(lp))
    assert lp[0] > lp[2] + 5 and lp[1] > lp[2] + 5  # a cluster's pattern vs its complement
    # on a fixed tree (EP run there) the predictive is a distribution over {0, 1}^D
    N = 4  # the shapes of the EP test
    parent, times = _tree(7, N)
    Ys = np.asarray(jax.random.bernoulli(jax.random.PRNGKey(7), 0.5, (N, 2)), float)
    grid = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], float)
    for alpha, beta in [(0.5, 0.2), (0.0, 0.0)]:
        if alpha == 0.0:
            parent, times = sample_prior_tree(jax.random.PRNGKey(7), N, jnp.float64, 1.0, 0.0, 0.0)
        p = E.pydt_predictive_logpdf(
            (parent, times), grid, Ys, c=1.0, alpha=alpha, beta=beta, sigma2=1.5, likelihood="probit"
        )
        np.testing.assert_allclose(np.exp(p).sum(), 1.0, atol=1e-12)


@pytest.mark.parametrize(
    "kwargs, X",
    [
        ({"likelihood": "foo"}, None),
        ({"likelihood": "probit"}, np.array([[0.0, 1.0], [1.0, 0.5], [0.0, 0.0], [1.0, 1.0]])),
        ({"likelihood": "probit"}, np.array([[0.0, 1.0], [1.0, -1.0], [0.0, 0.0], [1.0, 1.0]])),
        ({"likelihood": "probit", "ep": E.EPConfig(damping=0.0)}, None),
    ],
)
def test_bad_input(kwargs, X):
    if X is None:
        X = np.array([[0.0, 1.0], [1.0, 1.0], [0.0, 0.0], [1.0, 0.0]])
    with pytest.raises(ValueError, match="X|likelihood|ep"):
        E.pydt_em(jax.random.PRNGKey(0), X, num_iters=1, progress_bar=False, **kwargs)
    with pytest.raises(ValueError, match="likelihood"):
        E.pydt_predictive_logpdf(
            (np.zeros(7, np.int32), np.ones(7)), X[:1], X, c=1.0, alpha=0.5, beta=0.2, sigma2=1.0, likelihood="bits"
        )
