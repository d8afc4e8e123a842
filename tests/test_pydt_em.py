"""Greedy Bayesian EM for the PYDT (section 5.2): E-step against the dense Gaussian, monotone
bound, M-step, attachment scores against the exact log joint, the regraft / collapse moves,
restarts, start trees, search on the paper's four-cluster set, predictive normalisation, input
errors."""

import functools

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from jaxhc.inference.pydt import em as E  # noqa: E402
from jaxhc.inference.pydt import estep as ES  # noqa: E402
from jaxhc.inference.pydt import moves as MV  # noqa: E402
from jaxhc.inference.pydt import mstep as MS  # noqa: E402
from jaxhc.inference.pydt.messages import log_marginal_masked  # noqa: E402
from jaxhc.inference.pydt.state import PYDTPriors  # noqa: E402
from jaxhc.models.pydt_math import FREE, log_prior_masked, sample_prior_tree  # noqa: E402


def _random_tree(seed, N, alpha=0.5, beta=0.2):
    return sample_prior_tree(jax.random.PRNGKey(seed), N, jnp.float64, 1.0, alpha, beta)


def _dense_posterior(parent, times, X, sigma2):
    """Condition the joint Gaussian of all node locations (Cov = sigma2 t_lca) on the leaves."""
    parent, t, X = np.asarray(parent), np.asarray(times), np.asarray(X)
    N = X.shape[0]
    nodes = np.flatnonzero(parent != FREE)

    def path(k):
        out = [k]
        while parent[out[-1]] >= 0:
            out.append(parent[out[-1]])
        return set(out)

    C = np.array([[sigma2 * max(t[x] for x in path(a) & path(b)) for b in nodes] for a in nodes])
    L = nodes < N
    Cll, Cil, Cii = C[np.ix_(L, L)], C[np.ix_(~L, L)], C[np.ix_(~L, ~L)]
    mean = Cil @ np.linalg.solve(Cll, X[nodes[L]])
    cov = Cii - Cil @ np.linalg.solve(Cll, Cil.T)
    return nodes[~L], mean, cov, nodes, C


@pytest.mark.parametrize("seed", [0, 1])
def test_e_step_matches_dense_gaussian(seed):
    N, D, sigma2 = 8, 3, 0.7
    parent, times = _random_tree(seed, N)
    X = jax.random.normal(jax.random.PRNGKey(10 + seed), (N, D))
    hyper = E.em_init_hyper(X, 1.0, 0.5, 0.2, sigma2)
    est = E.e_step(parent, times, X, hyper)
    internal, mean, cov, nodes, _ = _dense_posterior(parent, times, X, sigma2)
    np.testing.assert_allclose(np.asarray(est.mean)[internal], mean, atol=1e-10)
    np.testing.assert_allclose(np.asarray(est.var)[internal], np.diag(cov), atol=1e-10)
    # pairwise moments along edges: b_[pk] = 1/2 sum_d E[(x_k - x_p)^2]
    par = np.asarray(parent)
    pos = {k: i for i, k in enumerate(internal)}
    Xn = np.asarray(X)
    for k in nodes:
        p = par[k]
        mk = Xn[k] if k < N else mean[pos[k]]
        vk = 0.0 if k < N else cov[pos[k], pos[k]]
        if p < 0:
            want = 0.5 * (np.sum(mk**2) + D * vk)
        else:
            cpk = 0.0 if k < N else cov[pos[k], pos[p]]
            want = 0.5 * (np.sum((mk - mean[pos[p]]) ** 2) + D * (vk + cov[pos[p], pos[p]] - 2 * cpk))
        np.testing.assert_allclose(float(est.b[k]), want, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(
        float(est.log_lik), float(log_marginal_masked(parent, times, parent != FREE, X, sigma2)), rtol=1e-12
    )
    # with point-mass hyperparameters the bound is the joint log density
    lp = log_prior_masked(parent, times, parent != FREE, jnp.arange(2 * N - 1) < N, 1.0, 0.5, 0.2)
    L = E.e_step(parent, times, X, hyper, learn=False).bound
    np.testing.assert_allclose(float(L), float(est.log_lik + lp), rtol=1e-12)


def test_eq17_time_terms_equal_log_prior():
    """Eq. 17's ``(c J - 1) log(1 - t)`` carries all the time dependence of Eq. 9 + 11."""
    N = 7
    parent, times = _random_tree(3, N)
    active = parent != FREE
    internal = active & (jnp.arange(2 * N - 1) >= N)
    cnt = ES.leaf_counts(parent, times, active, N)
    J = MS._J(parent, active, cnt, N, 0.5, 0.2)
    c = 1.3
    t2 = jnp.where(internal, 1.0 - (1.0 - times) * 0.7, times)  # keeps the ordering
    lp = lambda t: log_prior_masked(parent, t, active, jnp.arange(2 * N - 1) < N, c, 0.5, 0.2)  # noqa: E731
    f = lambda t: jnp.sum(jnp.where(internal, (c * J - 1) * jnp.log1p(-t), 0.0))  # noqa: E731
    np.testing.assert_allclose(float(lp(t2) - lp(times)), float(f(t2) - f(times)), rtol=1e-10)


@pytest.mark.parametrize("learn", [True, False])
def test_bound_never_decreases(learn):
    N, D = 8, 3
    for seed in range(2):
        parent, times = _random_tree(20 + seed, N)
        X = jax.random.normal(jax.random.PRNGKey(seed), (N, D))
        hyper = E.em_init_hyper(X, 1.0, 0.5, 0.2, 0.5)
        bounds = []
        for _ in range(5):
            est = E.e_step(parent, times, X, hyper, learn=learn)
            bounds.append(float(est.bound))
            old = times
            times, hyper = E.m_step(parent, times, X, est, hyper, learn=learn)
            # ordering stays valid
            act = np.asarray(parent != FREE)
            p = np.asarray(parent)
            tp = np.where(p >= 0, np.asarray(times)[np.maximum(p, 0)], 0.0)
            assert np.all((np.asarray(times) - tp)[act] > 0)
        assert np.all(np.diff(bounds) >= -1e-8 * np.abs(bounds[:-1])), bounds
        assert bounds[-1] > bounds[0]
        del old


def test_m_step_time_optimum_not_below_start():
    N, D = 8, 3
    parent, times = _random_tree(5, N)  # same shapes as above: m_step compiled once
    X = jax.random.normal(jax.random.PRNGKey(5), (N, D))
    hyper = E.em_init_hyper(X, 1.0, 0.5, 0.2, 0.5)
    est = E.e_step(parent, times, X, hyper, learn=False)
    active = parent != FREE
    J = MS._J(parent, active, est.counts, N, 0.5, 0.2)
    G = lambda t: MS.time_objective(t, parent, active, est.b, 1 / hyper.sigma2, hyper.c_mean, J, N, D)  # noqa: E731
    t_new, _ = E.m_step(parent, times, X, est, hyper, learn=False)
    assert float(G(t_new)) >= float(G(times))
    # at the optimum the gradient in logit t vanishes
    s = lambda t: jnp.log(t) - jnp.log1p(-t)  # noqa: E731
    internal = np.asarray(active & (jnp.arange(2 * N - 1) >= N))
    g = jax.grad(lambda sv: G(t_new.at[N:].set(jnp.where(internal[N:], jax.nn.sigmoid(sv), t_new[N:]))))(
        jnp.where(internal[N:], s(jnp.clip(t_new[N:], 1e-9, 1 - 1e-9)), 0.0)
    )
    assert float(jnp.max(jnp.abs(g))) < 1e-4
    assert float(E.e_step(parent, t_new, X, hyper, learn=False).bound) >= float(est.bound)


def _four_clusters(n, seed=0):
    rng = np.random.default_rng(seed)
    centers = np.array([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]])
    lab = np.repeat(np.arange(4), n // 4)
    return centers[lab] + rng.normal(size=(lab.size, 2)) * np.sqrt(1 / 8), lab


def _leaf_sets(tree):
    par = np.asarray(tree.parent)
    N = tree.n_leaves
    sets = {k: {k} if k < N else set() for k in range(par.size)}
    for k in range(N):
        p = par[k]
        while p >= 0:
            sets[p].add(k)
            p = par[p]
    return par, sets


def test_four_clusters_pydt_multifurcates_ddt_binary():
    X, lab = _four_clusters(24)
    res = E.pydt_em(
        jax.random.PRNGKey(0), X, alpha=1.0, beta=0.2, num_iters=10, learn_alpha_beta=False, progress_bar=False
    )
    par, sets = _leaf_sets(res.tree)
    clusters = [set(np.flatnonzero(lab == c)) for c in range(4)]
    assert all(cl in sets.values() for cl in clusters)
    root = int(np.flatnonzero(par == -1)[0])
    assert np.sum(par == root) == 4
    assert np.all(np.diff(res.trace) >= 0) and np.isclose(res.trace[-1], res.log_evidence)
    assert len(res.k_best) <= 10 and res.k_best[0][0] == res.log_evidence
    ddt = E.pydt_em(jax.random.PRNGKey(0), X, alpha=0.0, beta=0.0, num_iters=10, progress_bar=False)
    par, sets = _leaf_sets(ddt.tree)
    kids = np.bincount(par[par >= 0], minlength=par.size)[X.shape[0] :]
    assert np.all(kids == 2) and ddt.alpha == 0.0 and ddt.beta == 0.0
    assert sum(cl in sets.values() for cl in clusters) >= 3


def _check_tree(parent, times, N):
    """The invariants of a fixed-capacity PYDT tree: leaves 0..N-1 at t = 1, one root, parents
    are active internal slots, every internal node has >= 2 children, times increase from
    parent to child and stay below 1 inside, every leaf reaches the root."""
    par, t = np.asarray(parent), np.asarray(times)
    m = 2 * N - 1
    assert par.shape == (m,) and t.shape == (m,)
    act = par != FREE
    assert np.all(act[:N]) and np.sum(par[act] == -1) == 1
    nonroot = act & (par >= 0)
    assert np.all(par[nonroot] >= N) and np.all(act[par[nonroot]])
    kids = np.bincount(par[nonroot], minlength=m)
    assert np.all(kids[N:][act[N:]] >= 2) and np.all(kids[~act] == 0)
    np.testing.assert_array_equal(t[:N], 1.0)
    tp = np.where(par >= 0, t[np.maximum(par, 0)], 0.0)
    assert np.all((t - tp)[act] > 0) and np.all(t[N:][act[N:]] < 1)
    for k in range(N):
        p, steps = k, 0
        while par[p] >= 0:
            p, steps = par[p], steps + 1
            assert steps < m


@jax.jit
@functools.partial(jax.vmap, in_axes=(None, None, None, None, 0))
def _attach_scores_and_truth(parent, times, X, hyper, s):
    """`_attach` scores of re-attaching subtree ``s`` (vmapped over ``s``) and the exact log joint
    of each candidate."""
    N = X.shape[0]
    m = parent.shape[0]
    active = parent != FREE
    cnt = ES.leaf_counts(parent, times, active, N)
    mu_s, v_s = MV._subtree_message(parent, times, active, X, hyper.sigma2, s)
    par_r, act_r, insub, slot = MV._detach(parent, times, s)
    sc, build = MV._attach(par_r, times, act_r, insub, jnp.where(insub, cnt, 0), s, mu_s, v_s, slot, X, hyper, True)

    def exact(j):
        p2, t2 = build(j)
        a2 = p2 != FREE
        return log_marginal_masked(p2, t2, a2, X, hyper.sigma2) + log_prior_masked(
            p2, t2, a2, jnp.arange(m) < N, hyper.c_mean, hyper.alpha, hyper.beta
        )

    return sc, jax.vmap(lambda j: jnp.where(jnp.isfinite(sc[j]), exact(j), 0.0))(jnp.arange(2 * m))


def test_attach_scores_are_exact_log_joints():
    """Every re-attachment score (of every subtree) is ``log p(X | T, t) + log P(T, t)`` of the
    candidate tree it builds."""
    N, D = 7, 2
    for seed in range(2):
        parent, times = _random_tree(40 + seed, N)
        X = jax.random.normal(jax.random.PRNGKey(seed), (N, D))
        hyper = E.em_init_hyper(X, 1.3, 0.5, 0.2, 0.7)
        subtrees = np.flatnonzero((np.asarray(parent) != FREE) & (np.asarray(parent) >= 0))
        sc, want = _attach_scores_and_truth(parent, times, X, hyper, jnp.arange(2 * N - 1, dtype=jnp.int32))
        sc, want = np.asarray(sc)[subtrees], np.asarray(want)[subtrees]
        ok = np.isfinite(sc)
        assert ok.sum() > 3 * subtrees.size
        np.testing.assert_allclose(sc[ok], want[ok], rtol=1e-10, atol=1e-10)


def test_regraft_and_collapse_propose_valid_trees_scored_by_their_bound():
    N, D = 8, 2
    parent, times = _random_tree(31, N, alpha=1.0, beta=0.3)  # has multifurcations and binary nodes
    X = jax.random.normal(jax.random.PRNGKey(3), (N, D))
    hyper = E.em_init_hyper(X, 1.0, 1.0, 0.3, 0.5)
    # Gamma factors that are not point masses: the bound has all its terms
    hyper = hyper._replace(
        c_shape=jnp.asarray(3.0), c_rate=jnp.asarray(2.0), prec_shape=jnp.asarray(5.0), prec_rate=jnp.asarray(2.0)
    )
    learn = True
    pri = PYDTPriors()
    src = E._signature(parent, N)
    n_int = int(np.sum(np.asarray(parent)[N:] != FREE))
    for move in ("collapse", "regraft"):
        if move == "collapse":
            pars, tims, sc = MV.propose_collapse(parent, times, hyper, X, None, pri, learn, True, 3)
        else:
            pars, tims, sc = MV.propose_regraft(parent, times, hyper, X, None, pri, learn, True, True, 3)
        sc = np.asarray(sc)
        assert np.all(np.isfinite(sc)) and np.all(np.diff(sc) <= 0)
        for j in range(3):
            _check_tree(pars[j], tims[j], N)
            sig = E._signature(pars[j], N)
            assert sig != src
            bound = float(E.e_step(pars[j], tims[j], X, hyper, pri, learn).bound)
            np.testing.assert_allclose(sc[j], bound, rtol=1e-10)
            if move == "collapse":  # one branch point fewer, every other leaf set kept
                assert sig < src and len(src - sig) == 1
                assert int(np.sum(np.asarray(pars[j])[N:] != FREE)) == n_int - 1
                np.testing.assert_array_equal(tims[j], times)


def test_search_moves_raise_the_bound():
    """Each iteration's best bound never falls; a regraft or collapse is kept only when it
    raises the bound; the trees are valid."""
    X, _ = _four_clusters(24, seed=2)
    res = E.pydt_em(
        jax.random.PRNGKey(2), X, alpha=1.0, beta=0.2, num_iters=6, learn_alpha_beta=False, progress_bar=False
    )
    assert len(res.move_trace) == len(res.trace) - 1 == 6
    assert np.all(np.diff(res.trace) >= 0)
    for i, (move, before, after) in enumerate(res.move_trace):
        assert move in ("reattach", "regraft", "collapse")
        assert before == res.trace[i] and after == res.trace[i + 1]
        if move != "reattach":
            assert after == before or after > before + 1e-4
    assert [mv for mv, _, _ in res.move_trace][:3] == ["reattach", "regraft", "collapse"]
    assert any(mv != "reattach" and after > before for mv, before, after in res.move_trace)
    for _, par, tim in res.k_best:
        _check_tree(par, tim, 24)
    # greedy moves alone stop at a local optimum: then neither move improves the best tree
    greedy = E.pydt_em(
        jax.random.PRNGKey(2),
        X,
        alpha=1.0,
        beta=0.2,
        num_iters=30,
        learn_alpha_beta=False,
        moves=("regraft", "collapse"),
        progress_bar=False,
    )
    mt = greedy.move_trace
    assert len(mt) < 30 and all(after == before or after > before + 1e-4 for _, before, after in mt)
    assert any(after > before for _, before, after in mt)
    assert [after == before for _, before, after in mt[-2:]] == [True, True]
    assert {mv for mv, _, _ in mt[-2:]} == {"regraft", "collapse"}
    _check_tree(greedy.parent, greedy.times, 24)


def test_restarts_return_the_best_restart():
    X, _ = _four_clusters(24, seed=3)
    kw = dict(alpha=1.0, beta=0.2, num_iters=2, learn_alpha_beta=False, progress_bar=False)
    res = E.pydt_em(jax.random.PRNGKey(3), X, num_restarts=3, **kw)
    assert res.restart_bounds.shape == (3,) and len(set(res.restart_bounds.tolist())) > 1
    assert res.log_evidence == np.max(res.restart_bounds) == res.k_best[0][0]
    assert res.trace[-1] == res.log_evidence
    assert len(res.k_best) <= 10 and all(a[0] >= b[0] for a, b in zip(res.k_best, res.k_best[1:]))
    # restart 0 is the single search with the same key
    single = E.pydt_em(jax.random.PRNGKey(3), X, **kw)
    assert single.log_evidence == res.restart_bounds[0]
    # same key, same result
    again = E.pydt_em(jax.random.PRNGKey(3), X, num_restarts=3, **kw)
    np.testing.assert_array_equal(again.restart_bounds, res.restart_bounds)
    np.testing.assert_array_equal(again.parent, res.parent)
    np.testing.assert_array_equal(again.times, res.times)
    assert again.move_trace == res.move_trace


def test_init_tree_is_refit_not_searched():
    X, _ = _four_clusters(24, seed=1)
    res = E.pydt_em(
        jax.random.PRNGKey(1), X, alpha=1.0, beta=0.2, num_iters=1, learn_alpha_beta=False, progress_bar=False
    )
    kw = dict(alpha=1.0, beta=0.2, num_iters=0, progress_bar=False)
    fixed = E.pydt_em(jax.random.PRNGKey(5), X, init=(res.parent, res.times), **kw)
    compact = E.pydt_em(jax.random.PRNGKey(6), X, init=(res.tree.parent, res.tree.heights), **kw)
    assert E._signature(fixed.parent, 24) == E._signature(res.parent, 24) == E._signature(compact.parent, 24)
    np.testing.assert_allclose(compact.log_evidence, fixed.log_evidence, rtol=1e-8)
    assert fixed.trace.shape == (1,) and np.isfinite(fixed.log_evidence)
    par, tim = np.asarray(res.parent), np.asarray(res.times)
    root = int(np.flatnonzero(par == -1)[0])
    child = int(np.flatnonzero(par == root)[0])
    bad_time = tim.copy()
    bad_time[root] = tim[child] + 1e-3 if child >= 24 else 1.0
    cycle = par.copy()
    cycle[root] = child if child >= 24 else 24
    for init, msg in [
        ((par[:10], tim[:10]), "length"),
        ((par, bad_time), "time"),
        ((cycle, tim), "root"),
        ((par.astype(float), tim), "integers"),
    ]:
        with pytest.raises(ValueError):
            E.pydt_em(jax.random.PRNGKey(0), X, init=init, **kw)


def test_predictive_integrates_to_one_1d():
    N = 5
    parent, times = _random_tree(7, N)
    X = np.asarray(jax.random.normal(jax.random.PRNGKey(7), (N, 1)))
    grid = np.linspace(-12, 12, 6001)[:, None]
    for alpha, beta in [(0.5, 0.2), (0.0, 0.0)]:
        if alpha == 0.0:  # a binary tree for the DDT
            parent, times = sample_prior_tree(jax.random.PRNGKey(7), N, jnp.float64, 1.0, 0.0, 0.0)
        lp = E.pydt_predictive_logpdf((parent, times), grid, X, c=1.0, alpha=alpha, beta=beta, sigma2=0.8)
        total = np.trapezoid(np.exp(lp), grid[:, 0])
        np.testing.assert_allclose(total, 1.0, atol=1e-6)


def test_predictive_from_result_averages_k_best():
    X, _ = _four_clusters(24, seed=1)
    res = E.pydt_em(
        jax.random.PRNGKey(1), X, alpha=1.0, beta=0.2, num_iters=3, learn_alpha_beta=False, progress_bar=False
    )
    lp = E.pydt_predictive_logpdf(res, np.array([[1.0, 1.0], [0.0, 0.0], [5.0, 5.0]]))
    assert lp.shape == (3,) and np.all(np.isfinite(lp))
    assert lp[0] > lp[1] > lp[2]
    # same key, same result (K-best list included)
    again = E.pydt_em(
        jax.random.PRNGKey(1), X, alpha=1.0, beta=0.2, num_iters=3, learn_alpha_beta=False, progress_bar=False
    )
    np.testing.assert_array_equal(again.parent, res.parent)
    np.testing.assert_array_equal(again.times, res.times)
    assert again.log_evidence == res.log_evidence
    assert [k[0] for k in again.k_best] == [k[0] for k in res.k_best]


@pytest.mark.parametrize(
    "kwargs, X, err",
    [
        ({}, np.zeros(5), ValueError),
        ({}, np.array([[0.0, np.nan], [1.0, 2.0], [3.0, 4.0]]), ValueError),
        ({"beta": 1.0}, None, ValueError),
        ({"beta": -0.1}, None, ValueError),
        ({"alpha": -0.5, "beta": 0.1}, None, ValueError),
        ({"c": 0.0}, None, ValueError),
        ({"sigma2": -1.0}, None, ValueError),
        ({"num_restarts": 0}, None, ValueError),
        ({"moves": ()}, None, ValueError),
        ({"moves": ("reattach", "swap")}, None, ValueError),
    ],
)
def test_bad_input(kwargs, X, err):
    if X is None:
        X = np.random.default_rng(0).normal(size=(5, 2))
    with pytest.raises(err):
        E.pydt_em(jax.random.PRNGKey(0), X, num_iters=1, progress_bar=False, **kwargs)
