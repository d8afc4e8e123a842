import jax

jax.config.update("jax_enable_x64", True)

"""PYDT model (Knowles & Ghahramani): message passing against the dense Gaussian, Eq. 9 + 11
against an independent sequential evaluation of the generative process (any order of the
points, multifurcations), the paper's N = 4 example, Lemma 1 and 2, normalisation over
structures and times, the prior sampler's statistics, the NumPyro program's density, and
input validation."""
from math import exp, lgamma, log

import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special, stats

from jaxhc import ParentTree
from jaxhc.models import pydt as P

HYPERS = [(1.0, 0.0, 0.0), (0.7, 1.5, 0.0), (2.0, 0.5, 0.3), (1.3, -0.4, 0.2), (0.9, 2.0, 0.6)]


def _tree(seed, N, c=1.0, alpha=1.5, beta=0.2):
    return P.sample_prior(jax.random.PRNGKey(seed), N, 2, c=c, alpha=alpha, beta=beta).tree


def _ancestors(parent, k):
    out = []
    while k >= 0:
        out.append(k)
        k = parent[k]
    return out


def _leaves_under(parent, N):
    return [set(i for i in range(N) if k in _ancestors(parent, i)) for k in range(len(parent))]


# ---------------------------------------------------------------------------------------
# an independent evaluation: the sequential generative process of section 1
# ---------------------------------------------------------------------------------------
def _sequential_log_density(parent, times, order, c, alpha, beta):
    """log density of (structure, times) adding the points in ``order`` one by one, with
    Eq. 1 (divergence rate), Eq. 6 (no divergence), Eq. 2 and Eq. 3 (branch choices)."""
    parent = np.asarray(parent)
    times = np.asarray(times, float)
    m = len(parent)
    N = int(np.sum([not np.any(parent == k) for k in range(m)]))
    under = _leaves_under(parent, N)
    kids = [list(np.flatnonzero(parent == k)) for k in range(m)]
    root = int(np.flatnonzero(parent == -1)[0])
    A = lambda t: -c * log(1 - t)  # noqa: E731
    w = lambda mm: exp(lgamma(mm - beta) - lgamma(mm + 1 + alpha))  # noqa: E731
    total = 0.0
    for r, i in enumerate(order):
        if r == 0:
            continue
        prev = set(order[:r])
        v, s = root, 0.0
        while True:
            ci = next(k for k in kids[v] if i in under[k])
            n = {k: len(prev & under[k]) for k in kids[v]}
            K = sum(1 for k in kids[v] if n[k] > 0)
            mm = len(prev & under[v])
            if K >= 2:  # v is a branch point of the tree of the earlier points
                total += (A(s) - A(times[v])) * w(mm)
                if n[ci] > 0:
                    total += log((n[ci] - beta) / (mm + alpha))
                    v, s = ci, times[v]
                    continue
                num = alpha + beta * K
                total += log(num / (mm + alpha)) if num > 0 else -np.inf
                break
            if n[ci] > 0:  # v not yet a branch point: the path goes on along the same edge
                v = ci
                continue
            # point i creates branch point v on the edge of the earlier points
            total += (A(s) - A(times[v])) * w(mm) + log(c / (1 - times[v]) * w(mm))
            break
    return total


def _relabel(parent, times, perm):
    """Node ``perm[k]`` of the result is node ``k`` of the input."""
    parent = np.asarray(parent)
    new_par = np.empty_like(parent)
    new_t = np.empty_like(np.asarray(times, float))
    for k in range(len(parent)):
        new_par[perm[k]] = -1 if parent[k] < 0 else perm[parent[k]]
        new_t[perm[k]] = times[k]
    return new_par, new_t


# ---------------------------------------------------------------------------------------
# Eq. 9 + 11
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("c,alpha,beta", HYPERS)
def test_structure_equals_sequential_process_any_order(c, alpha, beta):
    rng = np.random.default_rng(0)
    multi = 0
    for seed in range(3):
        tree = _tree(seed, 7, alpha=1.5, beta=0.2)  # multifurcating trees
        par, t = np.asarray(tree.parent), np.asarray(tree.heights)
        multi += int(np.any(np.bincount(par[par >= 0]) >= 3))
        got = float(P.log_structure_times(par, t, c, alpha, beta))
        for _ in range(3):
            order = list(rng.permutation(7))
            want = _sequential_log_density(par, t, order, c, alpha, beta)
            if np.isinf(want):
                assert got == want
            else:
                np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    assert multi >= 1


def test_paper_figure1_example():
    """The N = 4 expression below Eq. 6: branch point a (children: b, 2, 4), b (1, 3)."""
    c, alpha, beta = 1.3, 0.8, 0.25
    ta, tb = 0.3, 0.65
    A = lambda t: -c * np.log(1 - t)  # noqa: E731
    a = lambda t: c / (1 - t)  # noqa: E731
    g = lambda x: special.gamma(x)  # noqa: E731
    w1, w2, w3 = g(1 - beta) / g(2 + alpha), g(2 - beta) / g(3 + alpha), g(3 - beta) / g(4 + alpha)
    expr = (
        np.exp(-A(ta) * w1)
        * a(ta)
        * w1
        * np.exp(-A(ta) * w2)
        * (1 - beta)
        / (2 + alpha)
        * np.exp((A(ta) - A(tb)) * w1)
        * a(tb)
        * w1
        * np.exp(-A(ta) * w3)
        * (alpha + 2 * beta)
        / (3 + alpha)
    )
    # leaves 0..3 = x1..x4, node 4 = a, node 5 = b
    parent = np.array([5, 4, 5, 4, -1, 4])
    times = np.array([1, 1, 1, 1, ta, tb])
    np.testing.assert_allclose(float(P.log_structure_times(parent, times, c, alpha, beta)), np.log(expr), rtol=1e-12)
    tree = ParentTree(parent, 4, times)
    np.testing.assert_allclose(float(P.log_structure_times(tree, None, c, alpha, beta)), np.log(expr), rtol=1e-12)


@pytest.mark.parametrize("c,alpha,beta", HYPERS[1:3])
def test_exchangeable_leaf_and_node_relabelling(c, alpha, beta):
    """Lemma 1: invariant to relabelling the leaves and the branch points."""
    rng = np.random.default_rng(1)
    tree = _tree(5, 8)
    par, t = np.asarray(tree.parent), np.asarray(tree.heights)
    N, m = 8, len(par)
    ref = float(P.log_structure_times(par, t, c, alpha, beta))
    for _ in range(4):
        perm = np.concatenate([rng.permutation(N), N + rng.permutation(m - N)])
        p2, t2 = _relabel(par, t, perm)
        np.testing.assert_allclose(float(P.log_structure_times(p2, t2, c, alpha, beta)), ref, rtol=1e-12)


def test_free_slots_are_ignored():
    tree = _tree(3, 6)
    par, t = np.asarray(tree.parent), np.asarray(tree.heights)
    pad = 2 * 6 - 1 - len(par) + 2
    par2 = np.concatenate([par, np.full(pad, P.FREE)])
    t2 = np.concatenate([t, np.zeros(pad)])
    X = np.random.default_rng(0).normal(size=(6, 3))
    np.testing.assert_allclose(
        float(P.log_structure_times(par2, t2, 1.2, 0.7, 0.1)),
        float(P.log_structure_times(par, t, 1.2, 0.7, 0.1)),
        rtol=1e-12,
    )
    np.testing.assert_allclose(
        float(P.log_marginal_likelihood(par2, t2, X, 0.8)), float(P.log_marginal_likelihood(par, t, X, 0.8)), rtol=1e-12
    )


def _ddt_log_density(parent, times, c):
    """Neal's DDT for binary trees: a(t_b) (l-1)! (r-1)! / (m-1)! exp[(A(t_a) - A(t_b)) H_{m-1}]
    per branch point, H the ordinary harmonic numbers."""
    parent = np.asarray(parent)
    N = int(np.sum([not np.any(parent == k) for k in range(len(parent))]))
    under = _leaves_under(parent, N)
    A = lambda t: -c * np.log(1 - t)  # noqa: E731
    H = lambda n: sum(1.0 / i for i in range(1, n + 1))  # noqa: E731
    total = 0.0
    for b in range(N, len(parent)):
        l, r = [len(under[k]) for k in np.flatnonzero(parent == b)]
        mm = l + r
        ta = 0.0 if parent[b] < 0 else times[parent[b]]
        total += np.log(c / (1 - times[b])) + lgamma(l) + lgamma(r) - lgamma(mm) + (A(ta) - A(times[b])) * H(mm - 1)
    return total


def test_lemma2_ddt():
    """alpha = beta = 0: binary trees get the DDT density, multifurcations probability 0,
    H^{0,0} the harmonic numbers, the divergence rate a(t) / m."""
    c = 0.8
    for seed in range(3):
        tree = _tree(seed, 7, alpha=0.0, beta=0.0)
        par, t = np.asarray(tree.parent), np.asarray(tree.heights)
        assert np.all(np.bincount(par[par >= 0])[7:] == 2)
        np.testing.assert_allclose(
            float(P.log_structure_times(par, t, c, 0.0, 0.0)), _ddt_log_density(par, t, c), rtol=1e-12
        )
    multi = _tree(0, 7, alpha=1.5)
    mp = np.asarray(multi.parent)
    assert np.any(np.bincount(mp[mp >= 0]) >= 3)
    assert float(P.log_structure_times(multi, None, c, 0.0, 0.0)) == -np.inf
    n = np.arange(0, 40)
    np.testing.assert_allclose(
        np.asarray(P.harmonic(n, 0.0, 0.0)), [sum(1.0 / i for i in range(1, k + 1)) for k in n], rtol=1e-13, atol=1e-15
    )
    mm = np.arange(1.0, 10.0)
    np.testing.assert_allclose(np.exp(special.gammaln(mm) - special.gammaln(mm + 1)), 1.0 / mm, rtol=1e-13)


@pytest.mark.parametrize(
    "alpha,beta",
    [(0.0, 0.0), (1.0, 0.3), (-0.6, 0.3), (-0.3, 0.3), (-0.3 + 1e-6, 0.3), (0.5, 0.99), (30.0, 0.0), (-1.8, 0.9)],
)
def test_harmonic_closed_form(alpha, beta):
    n = np.arange(0, 60)
    direct = [
        np.sum(np.exp(special.gammaln(np.arange(1, k + 1) - beta) - special.gammaln(np.arange(1, k + 1) + 1 + alpha)))
        for k in n
    ]
    np.testing.assert_allclose(np.asarray(P.harmonic(n, alpha, beta)), direct, rtol=1e-11, atol=1e-300)
    # traced n and gradients
    g = _harmonic_grad(alpha, beta)
    np.testing.assert_allclose(
        float(g),
        (float(P.harmonic(5, alpha + 1e-6, beta)) - float(P.harmonic(5, alpha - 1e-6, beta))) / 2e-6,
        rtol=1e-5,
        atol=1e-12,
    )


@jax.jit
def _harmonic_grad(alpha, beta):
    return jax.grad(lambda a: P.harmonic(jnp.arange(6), a, beta)[-1])(alpha)


def test_branch_probabilities_sum_to_one():
    rng = np.random.default_rng(2)
    for _ in range(50):
        beta = rng.uniform(0, 0.99)
        alpha = rng.uniform(-2 * beta, 5)
        counts = rng.integers(1, 10, size=rng.integers(2, 7))
        m, K = counts.sum(), counts.size
        probs = np.concatenate([(counts - beta) / (m + alpha), [(alpha + beta * K) / (m + alpha)]])
        assert np.all(probs >= 0)
        np.testing.assert_allclose(probs.sum(), 1.0, rtol=1e-13)


# ---------------------------------------------------------------------------------------
# normalisation and the sampler
# ---------------------------------------------------------------------------------------
def _gl(n):
    x, w = np.polynomial.legendre.leggauss(n)
    return 0.5 * (x + 1), 0.5 * w


@pytest.mark.parametrize("c,alpha,beta", [(1.0, 0.0, 0.0), (2.0, 0.5, 0.3), (1.5, 1.2, 0.0)])
def test_normalised_n2(c, alpha, beta):
    u, w = _gl(200)
    # t = 1 - (1 - u)^2 smooths the density near t = 1 (Jacobian 2 (1 - u))
    t = 1 - (1 - u) ** 2
    f = jax.vmap(lambda tt: P._log_structure_times(jnp.array([2, 2, -1]), jnp.stack([1.0, 1.0, tt]), c, alpha, beta))
    total = np.sum(w * 2 * (1 - u) * np.exp(np.asarray(f(jnp.asarray(t)))))
    np.testing.assert_allclose(total, 1.0, rtol=1e-6)


def _n3_probabilities(c, alpha, beta, n=120):
    """Integrals of exp(Eq. 9 + 11) over the times of the four structures of 3 points:
    ((0, 1), 2), ((0, 2), 1), ((1, 2), 0) and the star."""
    u, w = _gl(n)
    t = 1 - (1 - u) ** 2
    jac = 2 * (1 - u)
    f = jax.jit(jax.vmap(lambda par, tt: P._log_structure_times(par, tt, c, alpha, beta), in_axes=(None, 0)))
    star = np.sum(w * jac * np.exp(np.asarray(f(jnp.array([3, 3, 3, -1]), jnp.stack([jnp.ones_like(t)] * 3 + [t], 1)))))
    # binary: root at t1, inner node at t2 = t1 + (1 - t1) v
    T1, V = np.meshgrid(t, t, indexing="ij")
    W = np.outer(w * jac, w * jac) * (1 - T1)
    T2 = T1 + (1 - T1) * V
    ones = np.ones(T1.size)
    binary = []
    for pair in [(0, 1), (0, 2), (1, 2)]:
        par = np.full(5, 3)
        par[3] = -1
        par[list(pair)] = 4
        tt = np.stack([ones, ones, ones, T1.ravel(), T2.ravel()], 1)
        binary.append(np.sum(W.ravel() * np.exp(np.asarray(f(jnp.asarray(par), jnp.asarray(tt))))))
    return np.array(binary), star


@pytest.mark.parametrize("c,alpha,beta", [(5.0, 0.5, 0.3), (4.0, 1.0, 0.0), (3.0, 0.0, 0.0)])
def test_normalised_n3_and_root_arity(c, alpha, beta):
    binary, star = _n3_probabilities(c, alpha, beta)
    np.testing.assert_allclose(binary.sum() + star, 1.0, rtol=2e-5)
    np.testing.assert_allclose(binary, binary.mean(), rtol=2e-5)  # exchangeable
    w1 = exp(lgamma(1 - beta) - lgamma(2 + alpha))
    w2 = exp(lgamma(2 - beta) - lgamma(3 + alpha))
    # the third point reaches the root (prob w1/(w1+w2)) and branches there (Eq. 3)
    np.testing.assert_allclose(star, w1 / (w1 + w2) * (alpha + 2 * beta) / (2 + alpha), rtol=2e-5, atol=1e-12)


@pytest.mark.parametrize("c,alpha,beta", [(1.0, 0.0, 0.0), (0.7, 1.5, 0.4)])
def test_sampler_first_divergence_time(c, alpha, beta):
    """N = 2: P(T > t) = (1 - t)^lam, lam = c Gamma(1 - beta) / Gamma(2 + alpha), so
    E[T] = 1 / (1 + lam); the empirical law matches it (KS test)."""
    draws = np.asarray(P.PYDTTree(2, c, alpha, beta).sample(jax.random.PRNGKey(0), (4000,)))
    T = draws[:, 1, 2]
    assert np.all(draws[:, 0, :2] == 2) and np.all(draws[:, 0, 2] == -1)
    lam = c * exp(lgamma(1 - beta) - lgamma(2 + alpha))
    np.testing.assert_allclose(T.mean(), 1 / (1 + lam), atol=4 * T.std() / np.sqrt(T.size))
    assert stats.kstest(T, lambda t: 1 - (1 - t) ** lam).pvalue > 1e-3


@pytest.mark.parametrize("c,alpha,beta", [(2.0, 1.0, 0.3), (1.0, 0.5, 0.0)])
def test_sampler_root_arity_n3(c, alpha, beta):
    draws = np.asarray(P.PYDTTree(3, c, alpha, beta).sample(jax.random.PRNGKey(1), (4000,)))
    par = draws[:, 0].astype(int)
    root = np.argmax(par == -1, axis=1)
    K = np.array([np.sum(p == r) for p, r in zip(par, root)])
    w1 = exp(lgamma(1 - beta) - lgamma(2 + alpha))
    w2 = exp(lgamma(2 - beta) - lgamma(3 + alpha))
    p3 = w1 / (w1 + w2) * (alpha + 2 * beta) / (2 + alpha)
    freq = np.mean(K == 3)
    assert abs(freq - p3) < 4 * np.sqrt(p3 * (1 - p3) / K.size)
    assert set(K.tolist()) <= {2, 3}
    # every draw is a valid tree whose density is finite
    for j in range(20):
        t = draws[j, 1]
        assert np.isfinite(float(P.log_structure_times(par[j], t, c, alpha, beta)))


def test_sample_prior_leaves_are_brownian():
    """Leaf locations: mean 0, Var = sigma2, Cov(x_i, x_j) = sigma2 t_lca (N = 2: E[T])."""
    c, alpha, beta, s2 = 1.0, 0.5, 0.2, 2.0
    X = np.stack([P.sample_prior(jax.random.PRNGKey(i), 2, 1, c, alpha, beta, s2).X[:, 0] for i in range(3000)])
    lam = c * exp(lgamma(1 - beta) - lgamma(2 + alpha))
    se = 4 * np.sqrt(2 * s2**2 / 3000)
    np.testing.assert_allclose(X.var(axis=0), s2, atol=se)
    np.testing.assert_allclose(np.mean(X[:, 0] * X[:, 1]), s2 / (1 + lam), atol=se)


# ---------------------------------------------------------------------------------------
# locations: Eq. 12 and message passing
# ---------------------------------------------------------------------------------------
def _dense_cov(parent, times, N, sigma2):
    anc = [_ancestors(parent, i) for i in range(N)]
    C = np.empty((N, N))
    for i in range(N):
        for j in range(N):
            common = set(anc[i]) & set(anc[j])
            C[i, j] = sigma2 * max(times[k] for k in common)
    return C


@pytest.mark.parametrize(
    "seed,N,c,alpha", [(0, 7, 2.0, 1.5), (1, 9, 10.0, 3.0), (2, 5, 1.0, 0.0), (3, 1, 1.0, 0.0), (4, 2, 1.0, 0.0)]
)
def test_message_passing_equals_dense_gaussian(seed, N, c, alpha):
    tree = _tree(seed, N, c=c, alpha=alpha)
    par, t = np.asarray(tree.parent), np.asarray(tree.heights)
    D, s2 = 3, 0.7
    X = np.random.default_rng(seed).normal(size=(N, D))
    C = _dense_cov(par, t, N, s2)
    want = sum(stats.multivariate_normal(np.zeros(N), C).logpdf(X[:, d]) for d in range(D))
    np.testing.assert_allclose(float(P.log_marginal_likelihood(tree, t, X, s2)), want, rtol=1e-10)
    np.testing.assert_allclose(float(P.log_marginal_likelihood(par, t, X, s2)), want, rtol=1e-10)
    # extra leaf noise (probit auxiliaries): the diagonal grows by noise_var
    want_n = sum(stats.multivariate_normal(np.zeros(N), C + 0.5 * np.eye(N)).logpdf(X[:, d]) for d in range(D))
    np.testing.assert_allclose(float(P.log_marginal_likelihood(par, t, X, s2, noise_var=0.5)), want_n, rtol=1e-10)


def test_message_passing_batches_and_gradients():
    tree = _tree(0, 6)
    par, t = jnp.asarray(tree.parent), jnp.asarray(tree.heights)
    Xb = jnp.asarray(np.random.default_rng(0).normal(size=(4, 6, 2)))
    batched = jax.jit(jax.vmap(P.log_marginal_likelihood, in_axes=(None, None, 0, None)))(par, t, Xb, 1.3)
    single = [float(P.log_marginal_likelihood(par, t, x, 1.3)) for x in Xb]
    np.testing.assert_allclose(np.asarray(batched), single, rtol=1e-12)
    g = jax.grad(
        lambda tt: P.log_marginal_likelihood(par, tt, Xb[0], 1.3) + P.log_structure_times(par, tt, 1.0, 0.5, 0.1)
    )(t)
    assert np.all(np.isfinite(np.asarray(g)))


def test_log_locations_eq12():
    s = P.sample_prior(jax.random.PRNGKey(7), 6, 2, c=1.0, alpha=1.0, beta=0.2, sigma2=0.5)
    par, t, loc = np.asarray(s.tree.parent), np.asarray(s.tree.heights), s.locations
    want = 0.0
    for k in range(len(par)):
        p = par[k]
        tp, xp = (t[p], loc[p]) if p >= 0 else (0.0, np.zeros(2))
        want += stats.norm(xp, np.sqrt(0.5 * (t[k] - tp))).logpdf(loc[k]).sum()
    np.testing.assert_allclose(float(P.log_locations(par, t, loc, 0.5)), want, rtol=1e-12)


def test_numpyro_program_density():
    from numpyro import handlers
    from numpyro.infer.util import log_density

    c, alpha, beta, s2 = 1.2, 1.0, 0.2, 0.6
    tr = handlers.trace(handlers.seed(P.pydt, 3)).get_trace(num_points=5, dim=2, c=c, alpha=alpha, beta=beta, sigma2=s2)
    tree = np.asarray(tr["tree"]["value"])
    par, t = tree[0].astype(int), tree[1]
    loc = np.asarray(tr["locations"]["value"]).copy()
    X = np.asarray(tr["X"]["value"])
    loc[:5] = X
    used = par != P.FREE
    want = float(P.log_structure_times(par, t, c, alpha, beta)) + float(
        P.log_locations(par[used], t[used], loc[used], s2)
    )
    params = {"tree": tree, "increments": tr["increments"]["value"]}
    got, _ = log_density(P.pydt, (), dict(num_points=5, dim=2, c=c, alpha=alpha, beta=beta, sigma2=s2, X=X), params)
    np.testing.assert_allclose(float(got), want, rtol=1e-10)
    # the leaves given the tree integrate to the message-passing marginal
    assert np.isfinite(float(P.log_marginal_likelihood(par, t, X, s2)))


def test_probit():
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(5, 4)) * 3
    Y = rng.integers(0, 2, size=(5, 4))
    np.testing.assert_allclose(
        float(P.probit_log_likelihood(Z, Y)), np.sum(stats.norm.logcdf((2 * Y - 1) * Z)), rtol=1e-12
    )
    assert np.isfinite(float(P.probit_log_likelihood(jnp.array([[-40.0]]), jnp.array([[1]]))))
    with pytest.raises(ValueError, match="binary"):
        P.probit_log_likelihood(Z, Y + 1)


# ---------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------
def test_bad_input():
    par = np.array([3, 3, 4, 4, -1])
    t = np.array([1.0, 1.0, 1.0, 0.6, 0.3])
    X = np.zeros((3, 2))
    assert np.isfinite(float(P.log_structure_times(par, t, 1.0, 0.5, 0.2)))
    with pytest.raises(ValueError, match="beta"):
        P.log_structure_times(par, t, 1.0, 0.5, 1.2)
    with pytest.raises(ValueError, match="beta"):
        P.log_structure_times(par, t, 1.0, 0.5, -0.1)
    with pytest.raises(ValueError, match="beta"):
        P.check_hyper(c=1.0, alpha=0.0, beta=1.0)
    with pytest.raises(ValueError, match="alpha"):
        P.log_structure_times(par, t, 1.0, -0.5, 0.2)
    P.check_hyper(c=1.0, alpha=-0.4, beta=0.2)  # alpha = -2 beta is allowed
    with pytest.raises(ValueError, match="c "):
        P.log_structure_times(par, t, 0.0, 0.5, 0.2)
    with pytest.raises(ValueError, match="sigma2"):
        P.log_marginal_likelihood(par, t, X, -1.0)
    with pytest.raises(ValueError, match="increase from parent to child"):
        P.log_structure_times(par, np.array([1.0, 1.0, 1.0, 0.2, 0.3]), 1.0, 0.5, 0.2)
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        P.log_structure_times(par, np.array([1.0, 1.0, 1.0, 0.6, 0.0]), 1.0, 0.5, 0.2)
    with pytest.raises(ValueError, match="leaf times"):
        P.log_structure_times(par, np.array([0.9, 1.0, 1.0, 0.6, 0.3]), 1.0, 0.5, 0.2)
    with pytest.raises(ValueError, match="X must be"):
        P.log_marginal_likelihood(par, t, [[0.0, 1.0], [1.0], [2.0, 3.0]], 1.0)
    with pytest.raises(ValueError, match="rows"):
        P.log_marginal_likelihood(par, t, np.zeros((4, 2)), 1.0)
    with pytest.raises(ValueError, match="exactly one root"):
        P.log_structure_times(np.array([3, 3, 4, -1, -1]), t, 1.0, 0.5, 0.2)
    with pytest.raises(ValueError, match="2 children"):
        P.log_structure_times(np.array([3, 3, 4, 4, 5, -1]), np.array([1, 1, 1, 0.6, 0.3, 0.1]), 1.0, 0.5, 0.2)
    with pytest.raises(ValueError, match="times must be given"):
        P.log_structure_times(par, None, 1.0, 0.5, 0.2)
    with pytest.raises(ValueError, match="sigma2"):
        P.sample_prior(jax.random.PRNGKey(0), 3, 2, sigma2=0.0)
    with pytest.raises(ValueError, match="num_points"):
        P.sample_prior(jax.random.PRNGKey(0), 0, 2)


def test_alpha_minus_two_beta_edge():
    """alpha = -2 beta: a third branch has probability 0, binary trees a finite density."""
    binary, star = _n3_probabilities(4.0, -0.4, 0.2)
    assert star == 0.0
    np.testing.assert_allclose(binary.sum(), 1.0, rtol=2e-5)
