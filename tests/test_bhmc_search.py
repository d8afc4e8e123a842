import jax

jax.config.update("jax_enable_x64", True)

"""BHMC's posterior against brute force and its search over trees: the sampler's posterior of
nodes per level and components against an exact enumeration (five points, depth 2), the
level split-merge moves against the prior, the posterior summary (co-clustering, consensus
levels) and the robustness of the answer to a depth one too large."""
import itertools
import math

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import gammaln

import jaxhc
from jaxhc.inference import bhmc as B
from jaxhc.inference.bhmc import sampler as BS
from jaxhc.metrics import levelwise_scores, normalized_mutual_info, tree_level_labels


# ------------------------------------------------------------------------------------------
# the exact posterior of a tiny problem
# ------------------------------------------------------------------------------------------
def _set_partitions(n):
    """Every set partition of ``n`` points as a restricted growth string."""
    out = []

    def rec(prefix, m):
        if len(prefix) == n:
            out.append(tuple(prefix))
            return
        for v in range(m + 1):
            rec(prefix + [v], max(m, v + 1))

    rec([0], 1)
    return out


def _stirling1(nmax):
    s = np.zeros((nmax + 1, nmax + 1))
    s[0, 0] = 1
    for i in range(1, nmax + 1):
        for k in range(1, i + 1):
            s[i, k] = s[i - 1, k - 1] + (i - 1) * s[i - 1, k]
    return s


def _log_crp(sizes, a):
    return len(sizes) * math.log(a) + gammaln(a) - gammaln(a + sum(sizes)) + sum(gammaln(s) for s in sizes)


def _log_p_c_given_tree(p1, p2, c, g, g0, S):
    """``log p(c | V)`` of the depth-2 multilevel HDP (root GEM(g0), level-1 nodes DP(g, root),
    leaves DP(g, level-1 node)), every weight integrated out: the Chinese restaurant franchise
    summed over the table counts of every leaf and level-1 node (``p(n, m | beta) = Gamma(g) /
    Gamma(g + n.) prod_k s(n_k, m_k) (g beta_k)^m_k``; at the root ``g0^K Gamma(g0) /
    Gamma(g0 + r.) prod_k Gamma(r_k)``)."""
    N, K = len(c), max(c) + 1
    leaves, ys = sorted(set(p2)), sorted(set(p1))
    n = {z: [sum(1 for i in range(N) if p2[i] == z and c[i] == k) for k in range(K)] for z in leaves}
    par = {z: p1[p2.index(z)] for z in leaves}
    cells = [(z, k) for z in leaves for k in range(K) if n[z][k] > 0]
    lg, lg0 = math.log(g), math.log(g0)
    tot = -np.inf
    for ms in itertools.product(*[range(1, n[z][k] + 1) for z, k in cells]):
        lw = sum(gammaln(g) - gammaln(g + sum(n[z])) for z in leaves)
        lw += sum(math.log(S[n[z][k], m]) + m * lg for (z, k), m in zip(cells, ms))
        ny = {y: [0] * K for y in ys}
        for (z, k), m in zip(cells, ms):
            ny[par[z]][k] += m
        ycells = [(y, k) for y in ys for k in range(K) if ny[y][k] > 0]
        lw += sum(gammaln(g) - gammaln(g + sum(ny[y])) for y in ys)
        for m2 in itertools.product(*[range(1, ny[y][k] + 1) for y, k in ycells]):
            r = [0] * K
            for (y, k), m in zip(ycells, m2):
                r[k] += m
            lw2 = lw + sum(math.log(S[ny[y][k], m]) + m * lg for (y, k), m in zip(ycells, m2))
            lw2 += K * lg0 + gammaln(g0) - gammaln(g0 + sum(r)) + sum(gammaln(x) for x in r)
            tot = np.logaddexp(tot, lw2)
    return tot


def _log_marginal_gauss(X, c, s2, v0):
    """``log p(X | c)``, every component's mean integrated under ``N(0, v0)`` per feature."""
    lp = 0.0
    for k in set(c):
        x = X[np.asarray(c) == k]
        m = x.shape[0]
        prec = 1 / v0 + m / s2
        lp += np.sum(
            -0.5 * m * np.log(2 * np.pi * s2)
            - 0.5 * np.sum(x**2, 0) / s2
            + 0.5 * (x.sum(0) / s2) ** 2 / prec
            - 0.5 * np.log(v0 * prec)
        )
    return lp


def _exact_depth2_posterior(X, a, g, g0, s2, v0):
    """``(stats [R, 3], weights [R])`` over every (depth-2 tree, component partition) pair:
    level-1 nodes, level-2 nodes and components of each, and its posterior probability."""
    N = X.shape[0]
    P = _set_partitions(N)
    S = _stirling1(N + 1)
    trees = [
        (p1, p2) for p1 in P for p2 in P if all(len({p1[i] for i in range(N) if p2[i] == z}) == 1 for z in set(p2))
    ]
    lik = {c: _log_marginal_gauss(X, c, s2, v0) for c in P}
    rows = []
    for p1, p2 in trees:
        lv = _log_crp([p1.count(y) for y in set(p1)], a)
        for y in set(p1):
            lv += _log_crp([p2.count(z) for z in set(p2[i] for i in range(N) if p1[i] == y)], a)
        for c in P:
            rows.append(
                (len(set(p1)), len(set(p2)), len(set(c)), lv + _log_p_c_given_tree(p1, p2, c, g, g0, S) + lik[c])
            )
    r = np.array(rows)
    return r[:, :3], np.exp(r[:, 3] - np.logaddexp.reduce(r[:, 3]))


def _tree_stats(st):
    act = st.count > 0
    used = jnp.any(jax.nn.one_hot(st.c, st.theta.shape[0]) > 0, 0)
    return jnp.stack([jnp.sum(act & (st.level == 1)), jnp.sum(act & (st.level == 2)), jnp.sum(used)]).astype(float)


def test_gibbs_posterior_of_nodes_and_components_matches_enumeration():
    """Five points in two groups, depth 2, hyperparameters and ``sigma2`` held: the exact
    posterior means of level-1 nodes, level-2 nodes and components (every tree, component
    partition and table count enumerated; weights and means integrated) against the Gibbs
    sampler's. Before a point's own singleton component was folded into the rest for its
    update (`moves._fold_own_component`) the sampler gave 2.74 components against the exact
    2.65 (z = 25 at 32 x 2900 sweeps), and 9 standard errors too many nodes."""
    N, L = 5, 2
    a, g0, g, s2, v0 = 1.0, 1.0, 0.7, 0.2, 4.0
    X = np.array([[-1.5], [-1.2], [1.4], [1.7], [0.1]])
    stats, w = _exact_depth2_posterior(X, a, g, g0, s2, v0)
    exact = (w[:, None] * stats).sum(0)
    cfg = B.make_config(X, mu0=0.0, prior_var=v0, sigma2_max=5.0)
    C, T, burn = 16, 700, 50
    M, K = N * L + L + 1, 4 * N + 16
    st0, _ = jax.jit(
        jax.vmap(
            lambda k: B.prior_sample_state(
                k, N, 1, L, cfg, alpha=a, gamma0=g0, gamma=g, sigma2=s2, max_nodes=M, max_components=K
            )
        )
    )(jax.random.split(jax.random.key(7), C))
    Xj = jnp.asarray(X)

    @jax.jit
    def chains(keys, st):
        def chain(key, s):
            def body(s, k):
                s, _ = BS._sweep(k, s, Xj, cfg, False, 1, "gibbs", True)
                return s, _tree_stats(s)

            return jax.lax.scan(body, s, jax.random.split(key, T))

        return jax.lax.map(lambda t: chain(*t), (keys, st))

    fin, tr = chains(jax.random.split(jax.random.key(8), C), st0)
    assert int(jnp.max(fin.overflow)) == 0
    per_chain = np.asarray(tr)[:, burn:].mean(1)
    mean, se = per_chain.mean(0), per_chain.std(0, ddof=1) / np.sqrt(C)
    z = (mean - exact) / se
    assert np.all(np.abs(z) < 4.5), (mean, exact, se)


# ------------------------------------------------------------------------------------------
# split-merge moves
# ------------------------------------------------------------------------------------------
def _map(f):
    """``f`` over the leading axis, one element after another, compiled (as in test_bhmc)."""
    return jax.jit(lambda *a: jax.lax.map(lambda t: f(*t), a))


def test_split_merge_keeps_the_prior_invariant():
    """Exact prior draws (depth 3, so levels with a parent and children and the leaves are
    all moved), then only the weight update with split-merge proposals (no point moves: the
    tree changes by splits and merges alone, ~90% of the draws end with another tree). The
    nodes per level, the chance that two points share their node at each level and the leaf
    weight of a point's component keep the prior's law (z-scores of the paired differences).
    Dropping the ``alpha`` of a new child from the ratio gives |z| up to 10, the
    ``Gamma(alpha + n)`` terms of an internal node 37, a wrong allocation probability 14, and
    ``DM`` with a wrong normaliser 13 (two levels, S = 2000)."""
    N, D, L = 6, 1, 3
    cfg = B.make_config(np.zeros((2, 1)), prior_var=1.0, sigma2_max=2.0)
    S = 1500

    def draw(k):
        return B.prior_sample_state(
            k,
            N,
            D,
            L,
            cfg,
            alpha=1.3,
            gamma0=1.2,
            gamma=0.6,
            sigma2=0.5,
            max_nodes=N * L + L + 1,
            max_components=8 * N + 32,
        )

    st, _ = _map(draw)(jax.random.split(jax.random.key(20), S))

    def stats(s):
        cnt, lev = np.asarray(s.count), np.asarray(s.level)
        out = [((cnt > 0) & (lev == l)).sum(1) for l in range(1, L + 1)]
        out += [np.asarray(s.path[:, 0, l] == s.path[:, 1, l]) for l in range(1, L + 1)]
        lb = np.asarray(s.logb)[np.arange(S), np.asarray(s.path[:, 0, L]), np.asarray(s.c[:, 0])]
        return np.stack(out + [np.exp(lb)], 1).astype(float)

    start = stats(st)
    step = _map(lambda k, s: B.update_weights_exact(k, s, None, 0, 4))
    moved = st
    for r in range(3):
        moved = step(jax.random.split(jax.random.key(30 + r), S), moved)
    assert int(jnp.max(moved.overflow)) == 0
    after = stats(moved)
    d = after - start
    z = d.mean(0) / (d.std(0) / np.sqrt(S))
    assert np.all(np.abs(z) < 4.5), z
    assert np.mean(np.any(after[:, :L] != start[:, :L], 1)) > 0.5
    # the structure stays consistent: counts are the points through each node, parents chain
    path, count, parent = np.asarray(moved.path), np.asarray(moved.count), np.asarray(moved.parent)
    for s in range(20):
        np.testing.assert_array_equal(np.bincount(path[s].reshape(-1), minlength=count.shape[1]), count[s])
        for l in range(1, L + 1):
            np.testing.assert_array_equal(parent[s][path[s, :, l]], path[s, :, l - 1])


# ------------------------------------------------------------------------------------------
# the posterior summary
# ------------------------------------------------------------------------------------------
def test_summary_losses_and_consensus_against_brute_force():
    """The co-clustering matrix, the two expected losses against their definitions over the
    samples, and the consensus against every partition of six points (the search's candidates
    include the optimum here); the consensus refines the partition it is given."""
    from jaxhc.inference.bhmc import summary as SM

    rng = np.random.default_rng(0)
    base = np.array([0, 0, 0, 1, 1, 2])
    samples = np.array([np.where(rng.random(6) < 0.2, rng.integers(0, 4, 6), base) for _ in range(40)])
    P = SM.coclustering(samples)
    want = np.mean([s[:, None] == s[None, :] for s in samples], 0)
    np.testing.assert_allclose(P, want, atol=1e-12)
    iu = np.triu_indices(6, 1)
    for c in (base, np.arange(6), np.zeros(6, int), samples[3]):
        same = (c[:, None] == c[None, :])[iu]
        binder = np.mean([np.mean(same != (s[:, None] == s[None, :])[iu]) for s in samples])
        np.testing.assert_allclose(SM.expected_binder_loss(c, P), binder, atol=1e-12)
        size = (c[:, None] == c[None, :]).sum(1)
        vi = np.mean(np.log2(size) - 2 * np.log2(((c[:, None] == c[None, :]) * P).sum(1)) + np.log2(P.sum(1)))
        np.testing.assert_allclose(SM.expected_vi_bound(c, P), vi, atol=1e-12)
    parts = [np.array(p) for p in _set_partitions(6)]
    for loss, f in (("vi", SM.expected_vi_bound), ("binder", SM.expected_binder_loss)):
        c, v = SM.consensus_partition(samples, P, loss=loss)
        np.testing.assert_allclose(v, f(c, P), atol=1e-12)
        assert v <= min(f(p, P) for p in parts) + 1e-12, loss
        parent = np.array([0, 0, 1, 1, 1, 1])
        c2, _ = SM.consensus_partition(samples, P, parent, loss)
        for k in np.unique(c2):  # every cluster inside one parent cluster
            assert np.unique(parent[c2 == k]).size == 1
    # a nested answer becomes a tree whose depth cuts give it back
    lab = np.array([[0, 0], [0, 0], [0, 1], [1, 2], [1, 2], [2, 3]])
    tree = SM.tree_from_level_labels(lab)
    tree.validate()
    np.testing.assert_array_equal(tree_level_labels(tree, 2), lab)


def _hier(seed, n=8):
    return jaxhc.datasets.hierarchical_gaussian(
        seed, branching=(3, 2), n_per_leaf=n, dim=3, scales=(8.0, 2.5), noise=0.4
    )


def _ward_levels(X, depth):
    from scipy.cluster.hierarchy import linkage

    return tree_level_labels(jaxhc.Tree.from_linkage(linkage(X, "ward")), depth)


def test_posterior_summary_recovers_the_subgroups_nested_and_reproducible():
    """3 x 2 well-separated groups of 8 points at depth 2: the summary's level 2 is the six
    subgroups (the components), level 1 a coarsening of it at least as good as Ward's tree
    cut at depth 1, the tree is the summary's; the same key gives the same answer, and the
    paper's answer is the best state's."""
    from jaxhc.inference.bhmc import summary as SM

    X, y = _hier(0)
    kw = dict(depth=2, num_warmup=30, num_samples=60, progress_bar=False)
    res = jaxhc.bhmc(jax.random.key(3), X, **kw)
    post = res.posterior
    np.testing.assert_array_equal(res.level_labels, post.level_labels)
    s = levelwise_scores(y, res.level_labels)["nmi"]
    ward = levelwise_scores(y, _ward_levels(X, 2))["nmi"]
    assert s[1] > 0.95 and s[0] >= ward[0] - 1e-12, (s, ward)
    assert normalized_mutual_info(y[:, 1], res.labels) > 0.95  # the components' consensus
    for k in np.unique(res.level_labels[:, 1]):  # nested
        assert np.unique(res.level_labels[res.level_labels[:, 1] == k, 0]).size == 1
    np.testing.assert_array_equal(tree_level_labels(res.tree, 2), res.level_labels)
    assert post.psm.shape == (2, 48, 48) and np.allclose(np.diagonal(post.psm, 0, 1, 2), 1.0)
    assert post.num_samples == 60 and post.similarity == "weights" and post.loss == "binder"
    # the posterior's expected loss of any nested partition, in the consensus's own units:
    # the consensus's levels give back its recorded losses; by the definition over the
    # clipped weight similarity for Ward's cut; a shape other than [N, L] is refused
    np.testing.assert_allclose(B.level_expected_loss(res.level_labels, post), post.expected_loss, atol=1e-12)
    ward_levels = _ward_levels(X, 2)
    want = [SM.expected_binder_loss(ward_levels[:, l], np.clip(post.weight_similarity[l], 0, 1)) for l in range(2)]
    np.testing.assert_allclose(B.level_expected_loss(ward_levels, post), want, atol=1e-12)
    with pytest.raises(ValueError, match="level_labels"):
        B.level_expected_loss(ward_levels[:, :1], post)
    vi_post = SM.posterior_summary(np.stack([np.c_[np.zeros(48, int), ward_levels]] * 3), np.zeros((3, 48), int))
    assert vi_post.loss == "vi"
    np.testing.assert_allclose(B.level_expected_loss(ward_levels, vi_post), 0.0, atol=1e-12)  # every sample agrees
    again = jaxhc.bhmc(jax.random.key(3), X, **kw)
    np.testing.assert_array_equal(again.level_labels, res.level_labels)
    np.testing.assert_array_equal(again.labels, res.labels)
    np.testing.assert_allclose(again.posterior.weight_similarity, post.weight_similarity, atol=1e-12)
    best_tree, best_levels = B.state_to_tree(res.best_state)
    np.testing.assert_array_equal(best_levels, B.state_to_tree(res.best_state)[1])
    assert res.summary == "posterior" and res.best_sweep >= -1


def test_depth_one_too_many_with_different_starts():
    """Depth 3 on a 2-level hierarchy, two chains from different starts (Ward's tree at its
    gaps, BHC's tree) with split-merge moves: the levels the data have are found (level 2:
    the subgroups), and level 1 is at least as good as Ward's tree cut to the same depth
    (not the three groups: which subgroups share a level-1 node the posterior cannot tell,
    the component means being exchangeable under the tree)."""
    X, y = _hier(1)
    res = jaxhc.bhmc(jax.random.key(5), X, depth=3, num_chains=2, num_warmup=40, num_samples=60, progress_bar=False)
    assert res.starts == ("ward", "bhc")
    s = levelwise_scores(y, res.level_labels, depth=2)["nmi"]
    ward = levelwise_scores(y, _ward_levels(X, 3), depth=2)["nmi"]
    assert s[1] >= 0.9 and np.all(s >= ward - 1e-12), (s, ward)
