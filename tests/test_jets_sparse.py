"""Tests for the sparse trellis on jets (`jaxhc.jets`: rank trees, simulator / beam-search
seeds, `sparse_vs_sparsity`, Fig. 7 of the trellis paper): the momentum-rank relabelling on
a hand-made jet; a sparse trellis never beats the exact MAP, never loses to the best of its
own seed trees and never gets worse with more seeds; seeded with every one of the
(2N-3)!! hierarchies it is the exact trellis; seeded with the true tree it contains that
tree; the same key gives the same seeds; bad input raises."""

import jax

jax.config.update("jax_enable_x64", True)

import math

import numpy as np
import pytest

from jaxhc import jets, trellis
from jaxhc.models import ginkgo
from jaxhc.tree import Tree

from reference import all_binary_trees

PARAMS = ginkgo.GinkgoParams()  # lam = 2, t_cut = 16, root mass 30, |p| = 400
PAPER = PARAMS.energy("paper")
EXACT = PARAMS.energy("exact")


def _p4(pnorm, mass=0.5, axis=(1.0, 2.0, 2.0)):
    """A four-momentum of 3-momentum norm ``pnorm`` along ``axis``."""
    u = np.asarray(axis) / np.linalg.norm(axis)
    return [math.sqrt(pnorm**2 + mass**2), *(pnorm * u)]


@pytest.fixture(scope="module")
def jets8():
    """Test jets (N = 8), training jets (N = 8) from other keys, and simulator rank trees."""
    test = ginkgo.simulate(jax.random.PRNGKey(1), PARAMS, 3, min_leaves=8, max_leaves=8)
    train = ginkgo.simulate(jax.random.PRNGKey(2), PARAMS, 3, min_leaves=8, max_leaves=8)
    sim = jets.simulator_seed_trees(jax.random.PRNGKey(3), PARAMS, 8, 40)
    return test, train, sim


def _best_log_phi(energy, leaves, trees):
    """Largest ``log phi`` of ``trees`` over one jet (one jitted scoring call)."""
    lp = np.repeat(leaves[None], len(trees), 0)
    return float(np.max(jets.studies._score_trees(energy, lp, np.full(len(trees), len(leaves)), trees)))


# ---------------------------------------------------------------------------------------
# rank trees
# ---------------------------------------------------------------------------------------
def test_rank_relabelling_hand_case():
    # |p| = 3, 1, 4, 2: leaf 1 is rank 0, leaf 3 rank 1, leaf 0 rank 2, leaf 2 rank 3
    jet = np.array([_p4(3.0), _p4(1.0, axis=(0, 0, 1)), _p4(4.0, axis=(1, 0, 0)), _p4(2.0, axis=(0, 1, 0))])
    np.testing.assert_array_equal(jets.momentum_order(jet), [1, 3, 0, 2])
    tree = Tree.from_nested(((0, 1), (2, 3)))
    rank = jets.to_rank_tree(tree, jet)
    assert rank.clusters() == Tree.from_nested(((2, 0), (3, 1))).clusters()
    # onto a jet with |p| = 5, 6, 7, 1: rank 0 -> leaf 3, 1 -> 0, 2 -> 1, 3 -> 2
    other = np.array([_p4(5.0), _p4(6.0), _p4(7.0), _p4(1.0)])
    (mapped,) = jets.map_rank_trees([rank], other)
    assert mapped.clusters() == Tree.from_nested(((1, 3), (2, 0))).clusters()
    # the round trip on the same jet gives the tree back
    (back,) = jets.map_rank_trees([rank], jet)
    assert back.same_hierarchy(tree)
    # ties keep the row order (stable)
    tied = np.array([_p4(2.0), _p4(1.0), _p4(2.0, axis=(0, 0, 1))])
    np.testing.assert_array_equal(jets.momentum_order(tied), [1, 0, 2])


def test_simulator_seed_trees_are_rank_relabelled_true_trees_and_reproducible():
    key = jax.random.PRNGKey(7)
    a = jets.simulator_seed_trees(key, PARAMS, 7, 12)
    b = jets.simulator_seed_trees(key, PARAMS, 7, 12)
    c = jets.simulator_seed_trees(jax.random.PRNGKey(8), PARAMS, 7, 12)
    assert len(a) == 12 and all(t.n_leaves == 7 for t in a)
    for s, t in zip(a, b):
        np.testing.assert_array_equal(np.asarray(s.children), np.asarray(t.children))
    assert any(not s.same_hierarchy(t) for s, t in zip(a, c))
    # the same draws as simulate with the same key, relabelled by |p| rank
    jb = ginkgo.simulate(key, PARAMS, 12, min_leaves=7, max_leaves=7)
    for i in range(12):
        lv = jb.jet(i)
        assert a[i].same_hierarchy(jets.to_rank_tree(jb.trees[i], lv))
        assert jets.map_rank_trees([a[i]], lv)[0].same_hierarchy(jb.trees[i])


def test_beam_seed_trees_interleaved_unique(jets8):
    _, train, _ = jets8
    seeds = jets.beam_seed_trees(PAPER, train, 5)
    again = jets.beam_seed_trees(PAPER, train, 5)
    assert len(again) == len(seeds) and all(s.same_hierarchy(t) for s, t in zip(seeds, again))
    assert 1 <= len(seeds) <= 5 * len(train)
    keys = {frozenset(int(m) for m in t.bitmasks()) for t in seeds}
    assert len(keys) == len(seeds)
    # the first seeds are the best beam tree of each training jet, in rank labels
    for b in range(len(train)):
        lv = train.jet(b)
        best = jets.to_rank_tree(trellis.beam(PAPER, lv, 5).tree, lv)
        assert any(best.same_hierarchy(s) for s in seeds[: len(train)])


# ---------------------------------------------------------------------------------------
# sparse trellis bounds
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("energy", [PAPER, EXACT], ids=["paper", "exact"])
def test_sparse_between_best_seed_and_exact(jets8, energy):
    test, train, sim = jets8
    bs = jets.beam_seed_trees(energy, train, 6)
    sizes = [1, 4, 40]
    study = jets.sparse_vs_sparsity(energy, test, {"sim": sim, "bs": bs, "own": jets.OWN_BEAM}, sizes=sizes)
    exact = study.exact_log_phi
    assert exact is not None and np.all(np.isfinite(exact))
    for (method, k), lp in study.sparse_log_phi.items():
        assert np.all(lp <= exact + 1e-9), (method, k)
    for method, seeds in (("sim", sim), ("bs", bs)):
        ks = sorted(k for m, k in study.sparse_log_phi if m == method)
        for b in range(len(test)):
            lv = test.jet(b)
            vals = [study.sparse_log_phi[(method, k)][b] for k in ks]
            # nested seed sets: the sparse trellis only grows
            assert all(v2 >= v1 - 1e-9 for v1, v2 in zip(vals, vals[1:])), (method, vals)
            for k in ks[:2]:
                mapped = jets.map_rank_trees(seeds[:k], lv)
                best_seed = _best_log_phi(energy, lv, mapped)
                assert study.sparse_log_phi[(method, k)][b] >= best_seed - 1e-9
    # own beam of size k contains beam search's best tree of size k; k = 1 is greedy
    for b in range(len(test)):
        lv = test.jet(b)
        for k in sizes:
            assert study.sparse_log_phi[("own", k)][b] >= trellis.beam(energy, lv, k).log_phi - 1e-9
        np.testing.assert_allclose(study.sparse_log_phi[("own", 1)][b], study.greedy_log_phi[b], rtol=1e-12)
    # rows: every (method, k), then exact, beam, greedy; sparsity indices in (0, 1]
    names = [(r.method, r.num_seeds) for r in study.rows]
    assert names[-3:] == [("exact", None), ("beam", None), ("greedy", None)]
    assert len(names) == 3 + len(study.sparse_log_phi)
    for r in study.rows[:-3]:
        assert 0 < r.mean_sparsity <= 1 and 0 < r.mean_vertex_fraction <= 1
        assert r.mean_vertices >= 2 * 8 - 1
    ex = study.rows[-3]
    assert ex.frac_exact == 1.0 and ex.mean_sparsity == 1.0 and ex.mean_splits == trellis.num_splits(8)
    np.testing.assert_allclose(ex.mean_delta, np.mean(exact - study.greedy_log_phi), rtol=1e-12)
    assert "| exact |" in jets.format_sparse_study(study)


def test_all_trees_as_seeds_is_the_exact_trellis():
    n = 6
    trees = list(all_binary_trees(n))
    assert len(trees) == trellis.double_factorial(2 * n - 3) == 945
    test = ginkgo.simulate(jax.random.PRNGKey(4), PARAMS, 2, min_leaves=n, max_leaves=n)
    for b in range(2):
        lv = test.jet(b)
        sol = trellis.sparse_solve(PAPER, lv, jets.map_rank_trees(trees, lv))
        full = trellis.solve(PAPER, lv, marginals=False)
        assert sol.num_trees == 945 and sol.sparsity_index == 1.0 and sol.num_splits == trellis.num_splits(n)
        np.testing.assert_allclose(float(sol.log_z), float(full.log_z), rtol=1e-12)
        np.testing.assert_allclose(float(sol.map_log_phi), float(full.map_log_phi), rtol=1e-12)
    study = jets.sparse_vs_sparsity(PAPER, test, {"all": trees}, sizes=[945])
    np.testing.assert_allclose(study.sparse_log_phi[("all", 945)], study.exact_log_phi, rtol=1e-12)
    assert study.rows[0].frac_exact == 1.0 and study.rows[0].mean_sparsity == 1.0
    assert study.rows[0].mean_vertex_fraction == 1.0


@pytest.mark.parametrize("likelihood", ["paper", "exact"])
def test_true_tree_seed_contains_true_tree(likelihood):
    energy = PARAMS.energy(likelihood)
    jb = ginkgo.simulate(jax.random.PRNGKey(5), PARAMS, 6, min_leaves=7, max_leaves=9)
    sim = jets.simulator_seed_trees(jax.random.PRNGKey(6), PARAMS, 8, 20)
    for b in range(len(jb)):
        lv, true = jb.jet(b), jb.trees[b]
        true_ll = float(ginkgo.tree_log_likelihood(true, lv, PARAMS, likelihood=likelihood))
        # a single tree is a laminar family: the trellis realises exactly that tree
        one = trellis.sparse_solve(energy, lv, [true])
        assert one.num_trees == 1
        np.testing.assert_allclose(float(one.map_log_phi), true_ll, rtol=1e-10)
        seeds = [true]
        if lv.shape[0] == 8:
            seeds += jets.map_rank_trees(sim, lv)
        sol = trellis.sparse_solve(energy, lv, seeds)
        clusters = {int(c) for c in sol.clusters}
        assert {int(m) for m in true.bitmasks()} <= clusters
        assert float(sol.map_log_phi) >= true_ll - 1e-9


# ---------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------
def test_bad_input(jets8):
    test, train, sim = jets8
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match="n_leaves"):
        jets.simulator_seed_trees(key, PARAMS, 1, 5)
    with pytest.raises(ValueError, match="num_trees"):
        jets.simulator_seed_trees(key, PARAMS, 7, 0)
    with pytest.raises(TypeError, match="params"):
        jets.simulator_seed_trees(key, {"lam": 2.0}, 7, 5)
    with pytest.raises(ValueError, match="leaves"):
        jets.map_rank_trees(sim[:2], test.jet(0)[:7])
    with pytest.raises(TypeError, match="rank_trees"):
        jets.map_rank_trees([np.zeros((7, 2))], test.jet(0))
    with pytest.raises(ValueError, match=r"\[N, 4\]"):
        jets.momentum_order(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="NaN"):
        jets.to_rank_tree(sim[0], np.full((8, 4), np.nan))
    with pytest.raises(ValueError, match="same number of leaves"):
        jets.beam_seed_trees(PAPER, [test.jet(0), test.jet(1)[:7]], 3)
    with pytest.raises(ValueError, match="beam_size"):
        jets.beam_seed_trees(PAPER, train, 0)
    with pytest.raises(TypeError, match="energy"):
        jets.beam_seed_trees("paper", train, 3)
    with pytest.raises(ValueError, match="one jet"):
        jets.sparse_vs_sparsity(PAPER, test.jet(0), {"sim": sim})
    with pytest.raises(ValueError, match="non-empty dict"):
        jets.sparse_vs_sparsity(PAPER, test, {})
    with pytest.raises(ValueError, match="increasing"):
        jets.sparse_vs_sparsity(PAPER, test, {"sim": sim}, sizes=[10, 3])
    with pytest.raises(ValueError, match="increasing"):
        jets.sparse_vs_sparsity(PAPER, test, {"sim": sim}, sizes=[0, 3])
    with pytest.raises(ValueError, match="names"):
        jets.sparse_vs_sparsity(PAPER, test, {"exact": sim})
    with pytest.raises(ValueError, match="only string value"):
        jets.sparse_vs_sparsity(PAPER, test, {"x": "beam"})
    with pytest.raises(ValueError, match="test jets have"):
        jets.sparse_vs_sparsity(PAPER, test, {"sim7": jets.simulator_seed_trees(key, PARAMS, 7, 3)})
    with pytest.raises(ValueError, match="do not have"):
        jets.sparse_vs_sparsity(PAPER, test, {"mixed": sim[:2] + jets.simulator_seed_trees(key, PARAMS, 7, 1)})
    with pytest.raises(TypeError, match="energy"):
        jets.sparse_vs_sparsity(None, test, {"sim": sim})
    with pytest.raises(ValueError, match="positive"):
        jets.sparse_vs_sparsity(PAPER, [np.abs(test.jet(0)) * [-1, 1, 1, 1]], {"sim": sim})
