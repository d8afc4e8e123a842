import jax

jax.config.update("jax_enable_x64", True)

"""PYDT collapsed MCMC (section 5.1): message passing against the dense Gaussian, the
detach / re-attach move against the prior (no data) and against the exact posterior over the
four tree structures of three points (numerical integration over divergence times), and the
hyperparameter updates against their conditionals."""
from collections import Counter

import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats

from jaxhc.inference.pydt import mcmc as P
from jaxhc.models.pydt_math import sample_prior_tree

FREE = P.FREE


def _clusters(parent, N):
    parent = np.asarray(parent)
    masks = {}
    for leaf in range(N):
        k = leaf
        while parent[k] >= 0:
            k = parent[k]
            masks[k] = masks.get(k, 0) | (1 << leaf)
    return frozenset(masks.values())


def _lca_time(parent, times, i, j):
    anc = []
    k = i
    while parent[k] >= 0:
        k = parent[k]
        anc.append(k)
    k = j
    while parent[k] >= 0:
        k = parent[k]
        if k in anc:
            return times[k]
    raise AssertionError("no common ancestor")


def test_message_passing_equals_dense_gaussian_on_masked_trees():
    N, s2 = 7, 0.7
    trees = jax.jit(jax.vmap(lambda k: sample_prior_tree(k, N, jnp.float64, 1.0, 1.0, 0.3)))(
        jax.random.split(jax.random.key(0), 4)
    )
    Xs = np.random.default_rng(0).normal(size=(4, N, 2))
    lml = jax.jit(jax.vmap(lambda p, t, x: P.log_marginal_masked(p, t, p != FREE, x, s2)))
    gots = np.asarray(lml(trees[0], trees[1], jnp.asarray(Xs)))
    assert any(np.sum(np.asarray(trees[0][i]) != FREE) < 2 * N - 1 for i in range(4))  # a multifurcation
    for trial in range(4):
        parent, times, X, got = np.asarray(trees[0][trial]), np.asarray(trees[1][trial]), Xs[trial], gots[trial]
        C = np.array([[1.0 if i == j else _lca_time(parent, times, i, j) for j in range(N)] for i in range(N)]) * s2
        want = sum(stats.multivariate_normal(np.zeros(N), C).logpdf(X[:, d]) for d in range(2))
        np.testing.assert_allclose(got, want, rtol=1e-10)


def test_masked_prior_equals_the_model_density():
    from jaxhc.models import pydt

    N = 7
    trees = jax.jit(jax.vmap(lambda k: sample_prior_tree(k, N, jnp.float64, 1.0, 1.0, 0.3)))(
        jax.random.split(jax.random.key(12), 3)
    )
    for i in range(3):
        par, tim = np.asarray(trees[0][i]), np.asarray(trees[1][i])
        for c, a, b in ((1.0, 0.5, 0.2), (2.0, 1.5, 0.6), (0.7, 0.0, 0.0)):
            if a == b == 0 and np.sum(par != FREE) < 2 * N - 1:
                continue  # the DDT gives multifurcations probability 0
            got = float(
                P.log_prior_masked(
                    jnp.asarray(par), jnp.asarray(tim), jnp.asarray(par != FREE), jnp.arange(2 * N - 1) < N, c, a, b
                )
            )
            want = float(pydt.log_structure_times(par, tim, c=c, alpha=a, beta=b))
            np.testing.assert_allclose(got, want, rtol=1e-10)


def _structure_freqs(draws, N):
    return Counter(_clusters(p, N) for p in draws)


@pytest.mark.parametrize("alpha,beta", [(0.5, 0.2), (0.0, 0.0)])
def test_moves_without_data_sample_the_prior(alpha, beta):
    N, c = 4, 1.0
    S = 20000
    draws = jax.jit(jax.vmap(lambda k: sample_prior_tree(k, N, jnp.float64, c, alpha, beta)))(
        jax.random.split(jax.random.key(1), S)
    )
    prior = _structure_freqs(np.asarray(draws[0]), N)
    X = jnp.zeros((N, 1))
    st = P.pydt_mcmc_init(jax.random.key(2), X, c=c, alpha=alpha, beta=beta, use_likelihood=False)
    T = 40000

    @jax.jit
    def run(key, st):
        def body(s, k):
            s, info = P._move(k, s, X, False)
            return s, (s.parent, s.times)

        return jax.lax.scan(body, st, jax.random.split(key, T))[1]

    par, tim = (np.asarray(a) for a in run(jax.random.key(3), st))
    chain = _structure_freqs(par, N)
    keys = set(prior) | set(chain)
    tv = 0.5 * sum(abs(prior[k] / S - chain[k] / T) for k in keys)
    assert tv < 0.035, tv
    if alpha == beta == 0:  # the DDT: binary trees only
        assert all(len(k) == N - 1 for k in chain)
    root_p = np.asarray(draws[1])[np.arange(S), np.argmax(np.asarray(draws[0]) == -1, axis=1)]
    root_c = tim[np.arange(T), np.argmax(par == -1, axis=1)]
    assert abs(root_p.mean() - root_c.mean()) < 0.02


def test_moves_sample_the_exact_posterior_over_structures_of_three_points():
    """p(structure | X) by integrating Eq. 9 + 11 times the message-passing likelihood over
    the divergence times (dblquad), against the sampler's visit frequencies."""
    c, alpha, beta, s2 = 1.0, 0.8, 0.3, 0.5
    X = np.array([[0.0], [0.3], [2.0]])
    f = jnp.float64

    @jax.jit
    def logjoint(parent, times):
        active = parent != FREE
        is_leaf = jnp.arange(5) < 3
        return P.log_prior_masked(parent, times, active, is_leaf, c, alpha, beta) + P.log_marginal_masked(
            parent, times, active, jnp.asarray(X), s2
        )

    post = {}
    for pair in ((0, 1), (0, 2), (1, 2)):
        other = 3 - sum(pair)
        par = np.array([0, 0, 0, -1, 3])
        par[list(pair)] = 4
        par[other] = 3
        parj = jnp.asarray(par)

        def dens(tp, tr):  # inner variable first
            return float(jnp.exp(logjoint(parj, jnp.asarray([1, 1, 1, tr, tp], f))))

        # epsrel 1e-4 (about 4000 integrand calls in all, not 18000): the normalised posterior
        # moves by < 1e-7 from epsrel 1e-7, far inside the 0.02 tolerance below
        val, _ = integrate.dblquad(dens, 0, 1, lambda tr: tr, lambda tr: 1, epsabs=1e-8, epsrel=1e-4)
        post[frozenset({(1 << pair[0]) | (1 << pair[1]), 7})] = val
    tri = jnp.asarray([3, 3, 3, -1, FREE])
    val, _ = integrate.quad(
        lambda t: float(jnp.exp(logjoint(tri, jnp.asarray([1, 1, 1, t, 0], f)))), 0, 1, epsabs=1e-12
    )
    post[frozenset({7})] = val
    Z = sum(post.values())
    st = P.pydt_mcmc_init(jax.random.key(4), X, c=c, alpha=alpha, beta=beta, sigma2=s2)
    T = 40000

    @jax.jit
    def run(key, st):
        def body(s, k):
            s, info = P._move(k, s, jnp.asarray(X), True)
            return s, s.parent

        return jax.lax.scan(body, st, jax.random.split(key, T))[1]

    chain = _structure_freqs(np.asarray(run(jax.random.key(5), st)), 3)
    for k, v in post.items():
        assert abs(chain[k] / T - v / Z) < 0.02, (sorted(k), chain[k] / T, v / Z)


def test_gibbs_c_and_precision_match_their_conditionals():
    N = 6
    X = np.random.default_rng(1).normal(size=(N, 2))
    st = P.pydt_mcmc_init(jax.random.key(6), X, c=1.3, alpha=0.7, beta=0.1, sigma2=0.8)
    pri = P.PYDTPriors()
    S = 4000
    cs = np.asarray(jax.vmap(lambda k: P._gibbs_c(k, st, N, pri))(jax.random.split(jax.random.key(7), S)))
    # the c-conditional is proportional to exp(log_prior(c)) * G(c; 1, 1): compare moments on a grid
    active = st.parent != FREE
    is_leaf = jnp.arange(st.parent.shape[0]) < N
    grid = np.linspace(1e-3, 15, 4000)
    lp = (
        np.asarray(
            jax.vmap(lambda cc: P.log_prior_masked(st.parent, st.times, active, is_leaf, cc, st.alpha, st.beta))(
                jnp.asarray(grid)
            )
        )
        - grid
    )
    w = np.exp(lp - lp.max())
    mean = np.sum(w * grid) / w.sum()
    sd = np.sqrt(np.sum(w * (grid - mean) ** 2) / w.sum())
    assert abs(cs.mean() - mean) < 4 * sd / np.sqrt(S)
    assert abs(cs.std() - sd) < 0.05 * sd
    # 1/sigma2: with locations integrated, p(sigma2 | X, T) ∝ p(X | T, sigma2) G(1/sigma2; 1, 1);
    # a Gibbs chain alternating locations and precision must have that marginal
    T = 4000

    @jax.jit
    def run(key):
        def body(s, k):
            s2 = P._gibbs_precision(k, s, jnp.asarray(X), pri)
            return s._replace(sigma2=s2), s2

        return jax.lax.scan(body, st, jax.random.split(key, T))[1]

    draws = np.asarray(run(jax.random.key(8)))[200:]
    # the grid must hold the whole posterior (its tail decays like sigma2^-(N D / 2 + 2))
    grid = np.linspace(0.02, 100, 8000)
    ll = np.asarray(
        jax.vmap(lambda v: P.log_marginal_masked(st.parent, st.times, active, jnp.asarray(X), v))(jnp.asarray(grid))
    )
    lam = 1 / grid
    lpost = ll + np.log(lam) * 0 - lam + 2 * np.log(lam)  # G(lam; 1, 1) density in sigma2: exp(-lam) lam^2
    w = np.exp(lpost - lpost.max())
    mean = np.sum(w * grid) / w.sum()
    sd = np.sqrt(np.sum(w * (grid - mean) ** 2) / w.sum())
    assert abs(draws.mean() - mean) < 0.1 * sd, (draws.mean(), mean, sd)


def test_driver_runs_samples_hyperparameters_and_validates():
    rng = np.random.default_rng(2)
    X = np.concatenate([rng.normal(-2, 0.3, (6, 2)), rng.normal(2, 0.3, (6, 2))])
    out = P.pydt_mcmc(jax.random.key(9), X, num_samples=20, num_warmup=20, progress_bar=False)
    assert out.parent.shape == (20, 23)
    assert np.all(out.alpha > 0) and np.all((out.beta >= 0) & (out.beta < 1)) and np.all(out.c > 0)
    tree = out.tree()
    tree.validate()
    assert tree.n_leaves == 12

    # the root splits the two groups in most samples (with 6 points a group and sigma2 learned
    # the posterior also gives a multifurcating root some mass: 0.7-0.9 of samples over keys)
    def root_split(par):
        kids = [frozenset(np.flatnonzero(_leaves_under(par, k, 12))) for k in _children(par, -1)]
        return set(kids) == {frozenset(range(6)), frozenset(range(6, 12))}

    assert np.mean([root_split(p) for p in out.parent]) >= 0.5
    again = P.pydt_mcmc(jax.random.key(9), X, num_samples=20, num_warmup=20, progress_bar=False)
    np.testing.assert_array_equal(again.parent, out.parent)
    for bad in (dict(c=0.0), dict(beta=1.0), dict(beta=-0.1), dict(alpha=-1.0, beta=0.2), dict(sigma2=-1.0)):
        with pytest.raises(ValueError):
            P.pydt_mcmc(jax.random.key(0), X, num_samples=1, progress_bar=False, **bad)
    with pytest.raises(ValueError, match="X"):
        P.pydt_mcmc(jax.random.key(0), X[:, 0], num_samples=1, progress_bar=False)
    with pytest.raises(ValueError, match="NaN"):
        P.pydt_mcmc(jax.random.key(0), np.full((3, 2), np.nan), num_samples=1, progress_bar=False)


def _children(parent, node):
    root = int(np.flatnonzero(parent == -1)[0])
    target = root if node == -1 else node
    return [k for k in range(len(parent)) if parent[k] == target]


def _leaves_under(parent, node, N):
    out = np.zeros(N, bool)
    for leaf in range(N):
        k = leaf
        while k >= 0:
            if k == node:
                out[leaf] = True
                break
            k = parent[k]
    return out


def test_probit_model_chains_and_numpyro_kernel():
    rng = np.random.default_rng(3)
    proto = rng.random((2, 8)) < 0.5
    Y = np.concatenate(
        [
            np.where(rng.random((5, 8)) < 0.9, proto[0], ~proto[0]),
            np.where(rng.random((5, 8)) < 0.9, proto[1], ~proto[1]),
        ]
    ).astype(float)
    out = P.pydt_mcmc(
        jax.random.key(10),
        Y,
        num_samples=4,
        num_warmup=6,
        likelihood="probit",
        num_chains=2,
        sigma2=4.0,
        num_moves=5,
        sample_alpha=False,
        sample_beta=False,
        progress_bar=False,
    )
    assert out.parent.shape == (2, 4, 19)
    lat = np.asarray(out.state.latent)
    assert lat.shape == (2, 10, 8)
    np.testing.assert_array_equal(lat > 0, np.broadcast_to(Y > 0.5, lat.shape))  # latent signs follow the bits
    assert np.all(np.isfinite(out.log_lik))
    with pytest.raises(ValueError, match="binary"):
        P.pydt_mcmc(jax.random.key(0), Y + 0.5, likelihood="probit", num_samples=1, progress_bar=False)
    from numpyro.infer import MCMC

    X = rng.normal(size=(6, 2))
    mcmc = MCMC(
        P.PYDT(X, num_moves=3, sample_alpha=False, sample_beta=False, sample_c=False),
        num_warmup=2,
        num_samples=3,
        progress_bar=False,
    )
    mcmc.run(jax.random.key(11))
    assert mcmc.get_samples()["parent"].shape == (3, 11)


def test_predictive_over_mcmc_samples_integrates_to_one():
    from jaxhc.inference.pydt.em import pydt_predictive_logpdf

    X = np.array([[-1.0], [-0.8], [1.0], [1.3]])
    out = P.pydt_mcmc(
        jax.random.key(13),
        X,
        num_samples=6,
        num_warmup=4,
        num_moves=4,
        sample_alpha=False,
        sample_beta=False,
        progress_bar=False,
    )
    grid = np.linspace(-12, 12, 4001)[:, None]
    lp = pydt_predictive_logpdf(out, grid, X, max_trees=3)
    mass = np.trapezoid(np.exp(lp), grid[:, 0])
    assert abs(mass - 1.0) < 1e-3, mass
    assert lp[np.argmin(abs(grid[:, 0] - 1.1))] > lp[np.argmin(abs(grid[:, 0] - 6.0))]
    with pytest.raises(ValueError, match="X"):
        pydt_predictive_logpdf(out, grid)
