"""Greedy / beam search and the sparse trellis against the exact trellis and brute force."""

import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

jax.config.update("jax_enable_x64", True)

from jaxhc.tree import Tree  # noqa: E402
from jaxhc.trellis.energies import (  # noqa: E402
    CorrelationEnergy,
    DasguptaEnergy,
    GinkgoEnergy,
    UnitEnergy,
    log_phi_of_tree,
)
from jaxhc.trellis.exact import solve  # noqa: E402
from jaxhc.trellis.sampling import sample  # noqa: E402
from jaxhc.trellis.search import beam, greedy  # noqa: E402
from jaxhc.trellis.sparse import double_factorial, seed_trees_from_beam, sparse_solve  # noqa: E402

from reference import all_binary_trees  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "data", "ginkgo_jets_reference.json")


def _jets(k=5):
    with open(DATA) as f:
        jets = json.load(f)
    # both sizes (4 and 5 leaves)
    pick = [jets[i] for i in (0, 3, 10, 14, 19)][:k]
    return [(GinkgoEnergy(j["lam"], j["t_cut"]), np.asarray(j["leaves"], np.float64)) for j in pick]


def _affinity(n, seed, signed):
    rng = np.random.default_rng(seed)
    W = rng.uniform(size=(n, n))
    W = (W + W.T) / 2
    np.fill_diagonal(W, 0.0)
    return 2 * W - 1 if signed else W


def _problems():
    out = []
    for n, seed in ((6, 0), (8, 1)):
        out.append((f"dasgupta-{n}", DasguptaEnergy(0.5), _affinity(n, seed, False)))
    for n, seed in ((6, 10), (7, 11)):
        out.append((f"correlation-{n}", CorrelationEnergy(1.0), _affinity(n, seed, True)))
    for k, (e, lv) in enumerate(_jets()):
        out.append((f"ginkgo-{k}", e, lv))
    return out


PROBLEMS = _problems()
IDS = [p[0] for p in PROBLEMS]


def _lphi(energy, leaves, tree):
    return float(log_phi_of_tree(energy, leaves, tree))


_features = jax.jit(lambda energy, leaves: energy.features(leaves))


@jax.jit
def _psi_of_splits(energy, feats, P, L):
    take = lambda idx: jax.tree_util.tree_map(lambda x: x[idx], feats)
    return energy.log_psi(take(P), take(L), take(P ^ L))


def _exact_map(energy, leaves):
    """Exact MAP ``log phi`` by a host DP over all subsets (independent of `solve`; its
    values are checked against `solve` in the sparse-trellis tests)."""
    n = leaves.shape[0]
    feats = _features(energy, jnp.asarray(leaves))
    P, L = [], []
    for S in range(1, 2**n):
        low = S & -S
        rest = S ^ low
        sub = rest
        while True:  # every L = low | subset of rest, L != S
            if sub != rest:
                P.append(S)
                L.append(low | sub)
            if sub == 0:
                break
            sub = (sub - 1) & rest
    lp = np.asarray(_psi_of_splits(energy, feats, jnp.asarray(P), jnp.asarray(L)), np.float64)
    P, L = np.asarray(P), np.asarray(L)
    best = np.full(2**n, -np.inf)
    best[[1 << i for i in range(n)]] = 0.0
    order = np.argsort([bin(p).count("1") for p in P], kind="stable")
    for e in order:
        p, l = P[e], L[e]
        best[p] = max(best[p], lp[e] + best[l] + best[p ^ l])
    return best[2**n - 1]


# ------------------------------------------------------------------------------------------
# greedy and beam search
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,energy,leaves", PROBLEMS, ids=IDS)
def test_search_never_beats_exact_map_and_reports_true_log_phi(name, energy, leaves):
    exact = _exact_map(energy, leaves)
    g = greedy(energy, leaves)
    b = beam(energy, leaves, 4)
    assert g.log_phi <= exact + 1e-9
    assert b.log_phi <= exact + 1e-9
    # the reported value is log phi of the returned tree
    np.testing.assert_allclose(g.log_phi, _lphi(energy, leaves, g.tree), rtol=1e-10, atol=1e-10)
    assert len(g.trees) == 1 and g.trees[0] is g.tree
    for t, v in zip(b.trees, b.log_phis):
        np.testing.assert_allclose(v, _lphi(energy, leaves, t), rtol=1e-10, atol=1e-10)
    # final beam: best first, distinct hierarchies, at most beam_size
    assert 1 <= len(b.trees) <= 4
    assert np.all(np.diff(b.log_phis) <= 1e-12)
    keys = {frozenset(t.clusters()) for t in b.trees}
    assert len(keys) == len(b.trees)


EXHAUSTIVE = [p for p in PROBLEMS if p[2].shape[0] <= 6]


@pytest.mark.parametrize("name,energy,leaves", EXHAUSTIVE, ids=[p[0] for p in EXHAUSTIVE])
def test_exhaustive_beam_finds_exact_map(name, energy, leaves):
    # a beam of (2N-3)!! holds every forest of every step (their number peaks at (2N-3)!!),
    # so beam search is exhaustive and returns the exact MAP and every hierarchy
    n = leaves.shape[0]
    total = double_factorial(2 * n - 3)
    exact = _exact_map(energy, leaves)
    b = beam(energy, leaves, total)
    np.testing.assert_allclose(b.log_phi, exact, rtol=1e-10)
    assert len(b.trees) == total
    assert len({frozenset(t.clusters()) for t in b.trees}) == total
    np.testing.assert_allclose(_lphi(energy, leaves, b.tree), exact, rtol=1e-10)


def test_beam_of_unit_energy_enumerates_all_trees():
    b = beam(UnitEnergy(), np.zeros((5, 1)), 105)
    assert len(b.trees) == 105
    brute = {frozenset(t.clusters()) for t in all_binary_trees(5)}
    assert {frozenset(t.clusters()) for t in b.trees} == brute
    np.testing.assert_array_equal(b.log_phis, 0.0)


@pytest.mark.parametrize("seed", range(4))
def test_dasgupta_greedy_cost_not_below_exact_optimum(seed):
    # the paper's Fig. 4 graph (greedy 44.08 vs trellis 40.08) is not published; instead:
    # Dasgupta's cost of the greedy tree >= the trellis's optimal cost, on random graphs
    n = 7
    W = _affinity(n, 100 + seed, False)
    rng = np.random.default_rng(seed)
    W = W * (rng.uniform(size=W.shape) < 0.6)
    W = np.triu(W, 1) + np.triu(W, 1).T
    e = DasguptaEnergy(1.0)
    opt_cost = -_exact_map(e, W)
    g_cost = -greedy(e, W).log_phi
    b_cost = -beam(e, W, 3).log_phi
    assert g_cost >= opt_cost - 1e-9
    assert b_cost >= opt_cost - 1e-9


def test_greedy_scales_without_powerset_tables():
    n = 100
    W = _affinity(n, 7, True)
    e = CorrelationEnergy(0.5)
    g = greedy(e, W)
    assert g.tree.n_leaves == n
    g.tree.validate()
    np.testing.assert_allclose(g.log_phi, _lphi(e, W, g.tree), rtol=1e-9)


@pytest.mark.parametrize("name,energy,leaves", [PROBLEMS[i] for i in (1, 3, 4)], ids=[IDS[i] for i in (1, 3, 4)])
def test_greedy_takes_the_best_merge_at_every_step(name, energy, leaves):
    # replay the greedy tree: every merge has the highest log psi among the current pairs
    n = leaves.shape[0]
    g = greedy(energy, leaves)
    sets = g.tree.leaf_sets().astype(np.float64)
    current = list(range(n))
    for t, (a, b) in enumerate(np.asarray(g.tree.children)):
        pairs = [(x, y) for i, x in enumerate(current) for y in current[i + 1 :]]
        lo = lambda k: np.argmax(sets[k])
        left = [x if lo(x) < lo(y) else y for x, y in pairs]
        right = [y if lo(x) < lo(y) else x for x, y in pairs]
        par = sets[left] + sets[right]
        f = lambda m: energy.subset_features(jnp.asarray(leaves), jnp.asarray(m))
        scores = np.asarray(energy.log_psi(f(par), f(sets[left]), f(sets[right])))
        chosen = next(k for k, pr in enumerate(pairs) if set(pr) == {a, b})
        assert scores[chosen] >= scores.max() - 1e-12
        current = [x for x in current if x not in (a, b)] + [n + t]


def test_search_tiny_problems():
    g = greedy(DasguptaEnergy(), np.zeros((1, 1)))
    assert g.tree.n_leaves == 1 and g.log_phi == 0.0
    W = np.array([[0.0, 2.0], [2.0, 0.0]])
    b = beam(DasguptaEnergy(1.0), W, 3)
    assert len(b.trees) == 1
    np.testing.assert_allclose(b.log_phi, -4.0)  # |S| * w = 2 * 2


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3", None])
def test_beam_rejects_bad_beam_size(bad):
    with pytest.raises(ValueError, match="beam_size"):
        beam(DasguptaEnergy(), _affinity(4, 0, False), bad)


def test_search_rejects_bad_inputs():
    with pytest.raises(TypeError, match="energy"):
        greedy(object(), _affinity(4, 0, False))
    with pytest.raises(ValueError, match="symmetric"):
        greedy(DasguptaEnergy(), np.arange(16.0).reshape(4, 4))
    with pytest.raises(ValueError, match="four-momenta"):
        beam(GinkgoEnergy(), np.ones((4, 3)), 2)
    with pytest.raises(ValueError, match="NaN"):
        greedy(DasguptaEnergy(), np.full((3, 3), np.nan))


# ------------------------------------------------------------------------------------------
# sparse trellis
# ------------------------------------------------------------------------------------------
# small problems (every full-trellis comparison uses one of the two, one compilation each)
SMALL = [p for p in PROBLEMS if p[0] in ("dasgupta-6", "ginkgo-2")]
ENUM = [p for p in PROBLEMS if p[0] in ("dasgupta-6", "correlation-6", "ginkgo-0", "ginkgo-2")]


@pytest.mark.parametrize("name,energy,leaves", SMALL, ids=[s[0] for s in SMALL])
def test_sparse_with_all_trees_equals_full_trellis(name, energy, leaves):
    n = leaves.shape[0]
    full = solve(energy, leaves)
    # the host reference used by the search tests agrees with the trellis
    np.testing.assert_allclose(_exact_map(energy, leaves), float(full.map_log_phi), rtol=1e-10)
    sp = sparse_solve(energy, leaves, list(all_binary_trees(n)))
    assert len(sp.clusters) == 2**n - 1
    assert sp.num_trees == double_factorial(2 * n - 3)
    assert sp.sparsity_index == 1.0
    np.testing.assert_allclose(float(sp.log_z), float(full.log_z), rtol=1e-10)
    np.testing.assert_allclose(float(sp.map_log_phi), float(full.map_log_phi), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(sp.log_z_table), np.asarray(full.log_z_table)[sp.clusters], rtol=1e-10)
    np.testing.assert_allclose(
        np.asarray(sp.log_marginals), np.asarray(full.log_marginals)[sp.clusters], rtol=1e-9, atol=1e-10
    )
    np.testing.assert_allclose(_lphi(energy, leaves, sp.map_tree), float(full.map_log_phi), rtol=1e-10)


@pytest.mark.parametrize("name,energy,leaves", ENUM, ids=[s[0] for s in ENUM])
def test_sparse_with_one_tree(name, energy, leaves):
    n = leaves.shape[0]
    tree = list(all_binary_trees(n))[7]
    sp = sparse_solve(energy, leaves, [tree, tree])  # duplicates add nothing
    assert sp.num_trees == 1
    assert len(sp.clusters) == 2 * n - 1
    lp = _lphi(energy, leaves, tree)
    if np.isfinite(lp):
        np.testing.assert_allclose(float(sp.log_z), lp, rtol=1e-10)
        np.testing.assert_allclose(float(sp.map_log_phi), lp, rtol=1e-10)
        np.testing.assert_allclose(np.asarray(sp.log_marginals), 0.0, atol=1e-10)
    else:
        assert float(sp.log_z) == -np.inf
    assert sp.map_tree.same_hierarchy(tree)
    np.testing.assert_allclose(sp.sparsity_index, 1.0 / double_factorial(2 * n - 3))


def _brute_sparse(energy, leaves, vertex_masks):
    """log Z, MAP, number of trees and marginals over the trees whose clusters are all vertices
    (the hierarchies the sparse trellis realises), by enumeration."""
    n = leaves.shape[0]
    vs = set(int(v) for v in vertex_masks)
    lps, kept = [], []
    for t in all_binary_trees(n):
        b = [int(x) for x in t.bitmasks()]
        if set(b) <= vs:
            kept.append(set(b))
            lps.append(_lphi(energy, leaves, t))
    lps = np.asarray(lps)
    log_z = np.logaddexp.reduce(lps)
    marg = {v: np.logaddexp.reduce([lp for lp, cl in zip(lps, kept) if v in cl] or [-np.inf]) - log_z for v in vs}
    return log_z, lps.max(), len(kept), marg


@pytest.mark.parametrize("name,energy,leaves", ENUM, ids=[s[0] for s in ENUM])
def test_sparse_matches_enumeration_of_realised_trees(name, energy, leaves):
    n = leaves.shape[0]
    allt = list(all_binary_trees(n))
    rng = np.random.default_rng(n)
    seeds = [allt[i] for i in rng.choice(len(allt), size=5, replace=False)]
    sp = sparse_solve(energy, leaves, seeds)
    log_z, mx, count, marg = _brute_sparse(energy, leaves, sp.clusters)
    assert sp.num_trees == count >= len(seeds)
    np.testing.assert_allclose(float(sp.log_z), log_z, rtol=1e-10)
    np.testing.assert_allclose(float(sp.map_log_phi), mx, rtol=1e-10)
    got = dict(zip([int(c) for c in sp.clusters], np.asarray(sp.log_marginals)))
    for v, m in marg.items():
        np.testing.assert_allclose(got[v], m, rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(sp.log_marginal(v), m, rtol=1e-9, atol=1e-10)
    # every tree has 2N - 1 clusters, all of them vertices
    np.testing.assert_allclose(np.sum(np.exp(np.asarray(sp.log_marginals))), 2 * n - 1, rtol=1e-10)


def test_sparse_grows_monotonically_towards_full_trellis():
    e, W = SMALL[0][1], SMALL[0][2]  # dasgupta-6
    full = solve(e, W)
    samples = sample(jax.random.PRNGKey(0), e, W, 24).trees()
    more = [[greedy(e, W).tree]] + [samples[a : a + 6] for a in range(0, 24, 6)] + [beam(e, W, 10).trees]
    seeds = []
    prev_z, prev_count, prev_map = -np.inf, 0, -np.inf
    for batch in more:
        seeds.extend(batch)
        sp = sparse_solve(e, W, seeds)
        z, m = float(sp.log_z), float(sp.map_log_phi)
        assert z >= prev_z - 1e-12 and sp.num_trees >= prev_count and m >= prev_map - 1e-12
        assert z <= float(full.log_z) + 1e-10 and m <= float(full.map_log_phi) + 1e-10
        assert 0.0 < sp.sparsity_index <= 1.0
        assert m >= max(_lphi(e, W, s) for s in seeds) - 1e-10
        prev_z, prev_count, prev_map = z, sp.num_trees, m
    assert prev_count >= len({frozenset(s.clusters()) for s in seeds})


def test_sparse_counts_trees_with_unit_energy():
    W = _affinity(7, 31, False)
    seeds = seed_trees_from_beam(DasguptaEnergy(1.0), W, 8)
    sp = sparse_solve(UnitEnergy(), W, seeds)
    np.testing.assert_allclose(float(sp.log_z), math.log(sp.num_trees), rtol=1e-12)
    np.testing.assert_allclose(sp.sparsity_index, sp.num_trees / 10395)


def test_sparse_accepts_samples_and_search_results():
    e, W = SMALL[0][1], SMALL[0][2]  # dasgupta-6, as above (one compilation of `sample`)
    s = sample(jax.random.PRNGKey(1), e, W, 24)
    a = sparse_solve(e, W, s)
    b = sparse_solve(e, W, s.trees())
    assert a.num_trees == b.num_trees
    np.testing.assert_allclose(float(a.log_z), float(b.log_z))
    res = beam(e, W, 5)
    c = sparse_solve(e, W, res)
    d = sparse_solve(e, W, res.trees)
    assert c.num_trees == d.num_trees >= 5
    np.testing.assert_allclose(float(c.map_log_phi), float(d.map_log_phi))
    assert float(c.map_log_phi) >= res.log_phi - 1e-10  # the beam's best tree is realised


@pytest.mark.parametrize("n", [40, 70])
def test_sparse_large_n_from_search_seeds(n):
    e = CorrelationEnergy(0.5)
    W = _affinity(n, 40, True)
    g = greedy(e, W)
    seeds = seed_trees_from_beam(e, W, 6) + [g.tree]
    sp = sparse_solve(e, W, seeds)
    assert sp.n_leaves == n and sp.num_trees >= len(seeds)
    assert 0.0 < sp.sparsity_index < 1e-20
    best_seed = max(_lphi(e, W, t) for t in seeds)
    m = float(sp.map_log_phi)
    assert m >= best_seed - 1e-8 and float(sp.log_z) >= m
    np.testing.assert_allclose(_lphi(e, W, sp.map_tree), m, rtol=1e-10)
    lm = np.asarray(sp.log_marginals)
    assert np.all(lm <= 1e-10)
    np.testing.assert_allclose(
        lm[np.asarray([int(c).bit_count() == 1 or int(c).bit_count() == n for c in sp.clusters])], 0.0, atol=1e-10
    )
    np.testing.assert_allclose(np.sum(np.exp(lm)), 2 * n - 1, rtol=1e-9)
    if n <= 62:
        assert sp.clusters.dtype == np.int64
    else:
        assert sp.clusters.dtype == object


def test_sparse_rejects_bad_seeds():
    e, W = DasguptaEnergy(), _affinity(5, 0, False)
    wrong = next(iter(all_binary_trees(4)))
    with pytest.raises(ValueError, match="leaves"):
        sparse_solve(e, W, [wrong])
    with pytest.raises(ValueError, match="at least one"):
        sparse_solve(e, W, [])
    with pytest.raises(ValueError, match="Tree"):
        sparse_solve(e, W, [np.zeros((4, 2))])
    broken = Tree(np.array([[0, 1], [0, 2], [3, 4], [5, 6]]))
    with pytest.raises(ValueError, match="valid"):
        sparse_solve(e, W, [broken])
    with pytest.raises(TypeError, match="energy"):
        sparse_solve("dasgupta", W, [next(iter(all_binary_trees(5)))])
    with pytest.raises(ValueError, match="beam_size"):
        seed_trees_from_beam(e, W, 0)
