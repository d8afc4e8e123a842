"""Tests for jaxhc.metrics: dendrogram purity against a brute-force definition, flat scores
against scikit-learn / brute-force loops, level-wise scores and input validation."""

import itertools

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

from jaxhc.metrics import (
    adjusted_rand_index,
    dendrogram_purity,
    extend_paths,
    f_measure,
    levelwise_scores,
    normalized_mutual_info,
    predictive_log_likelihood_summary,
    purity,
    tree_level_labels,
)
from jaxhc.tree import ParentTree, Tree


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------
def random_tree(n, rng):
    """Binary Tree from a random merge order (two uniformly chosen active nodes each step)."""
    active = list(range(n))
    rows = np.zeros((n - 1, 2), np.int64)
    for t in range(n - 1):
        pair = []
        for _ in range(2):  # swap-remove a random active node
            i = int(rng.integers(len(active)))
            active[i], active[-1] = active[-1], active[i]
            pair.append(active.pop())
        rows[t] = pair
        active.append(n + t)
    return Tree(rows).validate()


def random_parent_tree(n, rng):
    """Non-binary ParentTree with shuffled inner-node ids and some unary nodes."""
    parent = {}
    active = list(range(n))
    next_id = n
    while len(active) > 1:
        k = int(rng.integers(2, min(4, len(active)) + 1))
        idx = rng.choice(len(active), size=k, replace=False)
        for i in idx:
            parent[active[i]] = next_id
        active = [a for i, a in enumerate(active) if i not in set(idx.tolist())]
        node = next_id
        next_id += 1
        if rng.random() < 0.2:  # a unary inner node above it
            parent[node] = next_id
            node = next_id
            next_id += 1
        active.append(node)
    m = next_id
    par = np.full(m, -1, np.int64)
    for c, p in parent.items():
        par[c] = p
    # shuffle the inner-node ids so ids are not in bottom-up order
    perm = np.arange(m)
    perm[n:] = n + rng.permutation(m - n)
    new_par = np.full(m, -1, np.int64)
    for k in range(m):
        new_par[perm[k]] = -1 if par[k] < 0 else perm[par[k]]
    return ParentTree(new_par, n).validate()


def brute_dendrogram_purity(parent, sets, labels):
    """Definition: average over same-class pairs of the class fraction under their LCA."""
    labels = np.asarray(labels)
    vals = []
    for i, j in itertools.combinations(range(len(labels)), 2):
        if labels[i] != labels[j]:
            continue
        anc_i, k = [], i
        while k >= 0:
            anc_i.append(k)
            k = parent[k]
        k = j
        while k not in anc_i:
            k = parent[k]
        under = sets[k]
        vals.append(np.mean(labels[under] == labels[i]))
    return float(np.mean(vals))


def brute_f_measure(t, p):
    t, p = np.asarray(t), np.asarray(p)
    total = 0.0
    for c in np.unique(t):
        best = 0.0
        for k in np.unique(p):
            nck = np.sum((t == c) & (p == k))
            best = max(best, 2.0 * nck / (np.sum(t == c) + np.sum(p == k)))
        total += np.sum(t == c) * best
    return total / len(t)


def brute_purity(t, p):
    t, p = np.asarray(t), np.asarray(p)
    return sum(max(np.sum((p == k) & (t == c)) for c in np.unique(t)) for k in np.unique(p)) / len(t)


# ---------------------------------------------------------------------------------------
# dendrogram purity
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(12))
def test_dendrogram_purity_matches_brute_force_tree(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 41))
    C = int(rng.integers(2, 6))
    labels = rng.integers(0, C, size=n)
    tree = random_tree(n, rng)
    expected = brute_dendrogram_purity(tree.parents(), tree.leaf_sets(), labels)
    assert dendrogram_purity(tree, labels) == pytest.approx(expected, rel=1e-12, abs=1e-12)
    # same hierarchy as a ParentTree
    assert dendrogram_purity(tree.to_parent(), labels) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("seed", range(12))
def test_dendrogram_purity_matches_brute_force_parent_tree(seed):
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(5, 41))
    C = int(rng.integers(2, 6))
    labels = rng.integers(0, C, size=n)
    pt = random_parent_tree(n, rng)
    expected = brute_dendrogram_purity(np.asarray(pt.parent), pt.leaf_sets(), labels)
    assert dendrogram_purity(pt, labels) == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_dendrogram_purity_string_labels_and_singleton_classes():
    rng = np.random.default_rng(7)
    tree = random_tree(15, rng)
    labels = np.array(list("aabbbccaxyzabcq"))  # x, y, z, q are singleton classes
    expected = brute_dendrogram_purity(tree.parents(), tree.leaf_sets(), labels)
    assert dendrogram_purity(tree, labels) == pytest.approx(expected, rel=1e-12)


def test_dendrogram_purity_is_one_for_pure_subtrees():
    tree = Tree.from_nested((((0, 1), 2), ((3, (4, 5)), (6, 7))))
    assert dendrogram_purity(tree, [0, 0, 0, 1, 1, 1, 2, 2]) == pytest.approx(1.0)
    # a non-binary tree whose classes are its subtrees
    pt = ParentTree(np.array([5, 5, 5, 6, 6, 7, 7, -1]), 5)
    assert dendrogram_purity(pt, ["a", "a", "a", "b", "b"]) == pytest.approx(1.0)


def test_dendrogram_purity_hand_computed():
    # ((0, (1, 2)), 3), classes a a b b:
    # pair (0, 1): LCA holds {0, 1, 2}, 2/3 in a; pair (2, 3): LCA is the root, 2/4 in b
    tree = Tree.from_nested(((0, (1, 2)), 3))
    assert dendrogram_purity(tree, [0, 0, 1, 1]) == pytest.approx((2 / 3 + 1 / 2) / 2)
    # ((0, 1), 2), classes 0 1 0: the only pair (0, 2) has the root as LCA, 2/3
    assert dendrogram_purity(Tree.from_nested(((0, 1), 2)), [0, 1, 0]) == pytest.approx(2 / 3)
    # star: every pair has the root as LCA
    star = ParentTree(np.array([4, 4, 4, 4, -1]), 4)
    assert dendrogram_purity(star, [0, 0, 0, 1]) == pytest.approx(3 / 4)


def test_dendrogram_purity_large_trees_agree_across_tree_types():
    rng = np.random.default_rng(0)
    n = 20000
    labels = rng.integers(0, 10, size=n)
    tree = random_tree(n, rng)
    caterpillar = Tree(np.column_stack([np.r_[0, n + np.arange(n - 2)], np.arange(1, n)]))
    for tr in (tree, caterpillar):
        for t in (tr, tr.to_parent()):
            v = dendrogram_purity(t, labels)
            assert 0.0 < v <= 1.0
    assert dendrogram_purity(tree, labels) == pytest.approx(dendrogram_purity(tree.to_parent(), labels), rel=1e-10)


# ---------------------------------------------------------------------------------------
# flat scores
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(10))
def test_flat_scores_match_reference(seed):
    rng = np.random.default_rng(200 + seed)
    n = int(rng.integers(2, 60))
    t = rng.integers(0, int(rng.integers(1, 6)), size=n)
    p = rng.integers(0, int(rng.integers(1, 8)), size=n)
    assert adjusted_rand_index(t, p) == pytest.approx(adjusted_rand_score(t, p), abs=1e-12)
    assert normalized_mutual_info(t, p) == pytest.approx(normalized_mutual_info_score(t, p), abs=1e-12)
    assert f_measure(t, p) == pytest.approx(brute_f_measure(t, p), abs=1e-12)
    assert purity(t, p) == pytest.approx(brute_purity(t, p), abs=1e-12)


def test_flat_scores_edge_cases():
    same = [0, 0, 1, 1, 2]
    relabelled = ["x", "x", "b", "b", "q"]
    for fn in (adjusted_rand_index, normalized_mutual_info, f_measure, purity):
        assert fn(same, relabelled) == pytest.approx(1.0)
    # single cluster vs split, and degenerate cases, as sklearn
    cases = [([0, 0, 0, 0], [0, 1, 2, 3]), ([0, 0, 0], [1, 1, 1]), ([0, 1, 2], [0, 1, 2]), ([0, 0, 1, 1], [0, 1, 0, 1])]
    for t, p in cases:
        assert adjusted_rand_index(t, p) == pytest.approx(adjusted_rand_score(t, p))
        assert normalized_mutual_info(t, p) == pytest.approx(normalized_mutual_info_score(t, p))
    assert purity([0, 0, 0, 0], [0, 1, 2, 3]) == 1.0
    assert f_measure([0, 0, 0, 0], [0, 1, 2, 3]) == pytest.approx(2 * 1 / 5)


# ---------------------------------------------------------------------------------------
# level-wise scores
# ---------------------------------------------------------------------------------------
def random_paths(N, L, rng, stop=0.2):
    """Random fixed-depth paths with parent-local child indices and -1 padding."""
    X = rng.integers(0, 3, size=(N, L))
    ends = np.where(rng.random(N) < stop, rng.integers(1, L + 1, size=N), L)
    X[np.arange(L)[None, :] >= ends[:, None]] = -1
    return X


def test_levelwise_scores_match_per_level_calls():
    rng = np.random.default_rng(5)
    N, L = 50, 3
    T = np.column_stack([rng.integers(0, 2 * (l + 1), size=N) for l in range(L)])
    P = np.column_stack([rng.integers(0, 3 * (l + 1), size=N) for l in range(L)])
    out = levelwise_scores(T, P)
    assert set(out) == {"purity", "nmi", "ari", "f_measure"}
    fns = {"purity": purity, "nmi": normalized_mutual_info, "ari": adjusted_rand_index, "f_measure": f_measure}
    Te, Pe = extend_paths(T), extend_paths(P)  # level l is identified with its prefix
    for key, fn in fns.items():
        assert out[key].shape == (L,)
        np.testing.assert_allclose(out[key], [fn(Te[:, l], Pe[:, l]) for l in range(L)], atol=1e-14)
    # for a proper hierarchy labelled by global node ids the columns are used as they are
    Tn = np.column_stack([T[:, 0], T[:, 0] * 10 + T[:, 1], (T[:, 0] * 10 + T[:, 1]) * 10 + T[:, 2]])
    Pn = np.column_stack([P[:, 0], P[:, 0] * 10 + P[:, 1], (P[:, 0] * 10 + P[:, 1]) * 10 + P[:, 2]])
    out = levelwise_scores(Tn, Pn)
    for key, fn in fns.items():
        np.testing.assert_allclose(out[key], [fn(Tn[:, l], Pn[:, l]) for l in range(L)], atol=1e-14)


def test_levelwise_scores_hand_computed():
    # truth: level 0 A A A B B B; level 1 (after extension) 0 0 1 2 2 3 (row 5 stops at level 0)
    T = np.array([[0, 0], [0, 0], [0, 1], [1, 2], [1, 2], [1, -1]])
    # pred: level-1 label 0 under both level-0 nodes -> level 1 is 0 0 0 1 2 2
    P = np.array([[0, 0], [0, 0], [0, 0], [0, 1], [1, 0], [1, 0]])
    out = levelwise_scores(T, P)
    np.testing.assert_allclose(out["purity"], [5 / 6, 4 / 6], atol=1e-14)
    # level 0: A best 2*3/(3+4), B best 2*2/(3+2); level 1: 2*4/5 + 1/2 + 2*2/3 + 2/3
    np.testing.assert_allclose(out["f_measure"], [(3 * 6 / 7 + 3 * 4 / 5) / 6, 41 / 60], atol=1e-14)
    levels = [([0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1]), ([0, 0, 1, 2, 2, 3], [0, 0, 0, 1, 2, 2])]
    for l, (t, p) in enumerate(levels):
        assert out["nmi"][l] == pytest.approx(normalized_mutual_info_score(t, p), abs=1e-12)
        assert out["ari"][l] == pytest.approx(adjusted_rand_score(t, p), abs=1e-12)
    # depth 3 repeats the last level
    out3 = levelwise_scores(T, P, depth=3)
    for key in out:
        np.testing.assert_allclose(out3[key], np.r_[out[key], out[key][-1]], atol=1e-14)
    # identical hierarchies, the prediction one level deeper than the truth
    out = levelwise_scores(T, np.array([[0, 0, 0], [0, 0, 1], [0, 1, 2], [1, 2, 3], [1, 2, 4], [1, -1, -1]]))
    for key in out:
        np.testing.assert_allclose(out[key], 1.0, atol=1e-14)


@pytest.mark.parametrize("seed", range(4))
def test_levelwise_scores_match_sklearn_after_extension(seed):
    rng = np.random.default_rng(300 + seed)
    N = int(rng.integers(10, 60))
    T = random_paths(N, 4, rng)
    P = random_paths(N, int(rng.integers(2, 7)), rng)  # a different depth, cut or extended to 4
    out = levelwise_scores(T, P)
    Te, Pe = extend_paths(T), extend_paths(P, 4)
    for l in range(4):
        assert out["nmi"][l] == pytest.approx(normalized_mutual_info_score(Te[:, l], Pe[:, l]), abs=1e-12)
        assert out["ari"][l] == pytest.approx(adjusted_rand_score(Te[:, l], Pe[:, l]), abs=1e-12)
        assert out["purity"][l] == pytest.approx(brute_purity(Te[:, l], Pe[:, l]), abs=1e-12)
        assert out["f_measure"][l] == pytest.approx(brute_f_measure(Te[:, l], Pe[:, l]), abs=1e-12)
    out2 = levelwise_scores(T, P, depth=2)
    for key in out:
        np.testing.assert_allclose(out2[key], out[key][:2], atol=1e-14)


def test_extend_paths_hand_example():
    X = np.array([[0, 5, 7], [0, 5, -1], [1, 5, 7], [0, -1, -1], [0, 5, 7]])
    expected = np.array([[0, 0, 0], [0, 0, 1], [1, 1, 2], [0, 2, 3], [0, 0, 0]])
    # rows 0 and 2 share the level-1 label 5 under different level-0 nodes: kept apart
    np.testing.assert_array_equal(extend_paths(X), expected)
    np.testing.assert_array_equal(extend_paths(X, depth=2), expected[:, :2])
    np.testing.assert_array_equal(extend_paths(X, depth=1), expected[:, :1])
    np.testing.assert_array_equal(extend_paths(X, depth=5), np.column_stack([expected] + [expected[:, 2]] * 2))
    # integer-valued floats, and idempotence
    np.testing.assert_array_equal(extend_paths(X.astype(float)), expected)
    np.testing.assert_array_equal(extend_paths(expected), expected)


def test_extend_paths_prefix_property():
    rng = np.random.default_rng(11)
    X = random_paths(40, 4, rng, stop=0.4)
    E = extend_paths(X)
    length = (X >= 0).sum(axis=1)
    for l in range(4):
        k = np.minimum(l + 1, length)
        prefix = [tuple(X[i, : k[i]]) for i in range(len(X))]
        for i in range(len(X)):
            for j in range(len(X)):
                assert (E[i, l] == E[j, l]) == (prefix[i] == prefix[j])


def test_extend_paths_bad_input():
    with pytest.raises(ValueError, match="level_labels.*2-D"):
        extend_paths([0, 1, 2])
    with pytest.raises(ValueError, match="empty"):
        extend_paths(np.zeros((3, 0), int))
    with pytest.raises(ValueError, match="NaN"):
        extend_paths([[0.0, np.nan]])
    with pytest.raises(ValueError, match="integer"):
        extend_paths([[0.0, 0.5]])
    with pytest.raises(TypeError, match="level_labels"):
        extend_paths([["a", "b"]])
    with pytest.raises(ValueError, match="row 1.*after a negative"):
        extend_paths([[0, 1, 2], [0, -1, 2]])
    with pytest.raises(ValueError, match="row 0.*no valid"):
        extend_paths([[-1, -1], [0, 1]])
    with pytest.raises(ValueError, match="depth"):
        extend_paths([[0, 1]], depth=0)
    with pytest.raises(TypeError, match="depth"):
        extend_paths([[0, 1]], depth=1.5)


def test_tree_level_labels_hand_examples():
    tree = Tree.from_nested(((0, 1), (2, (3, 4))))
    expected = np.array([[0, 0, 0, 0], [0, 1, 1, 1], [1, 2, 2, 2], [1, 3, 3, 3], [1, 3, 4, 4]])
    np.testing.assert_array_equal(tree_level_labels(tree, 4), expected)
    np.testing.assert_array_equal(tree_level_labels(tree.to_parent(), 4), expected)
    np.testing.assert_array_equal(tree_level_labels(tree, 1), expected[:, :1])
    # root 8 -> {9 -> leaves 0 1 2, 6 -> 7 (unary) -> leaves 3 4, leaf 5}
    pt = ParentTree(np.array([9, 9, 9, 7, 7, 8, 8, 6, -1, 8]), 6)
    expected = np.array([[0, 0, 0], [0, 1, 1], [0, 2, 2], [1, 3, 3], [1, 3, 4], [2, 4, 5]])
    np.testing.assert_array_equal(tree_level_labels(pt, 3), expected)
    # a single leaf: the root is its own cluster at every level
    np.testing.assert_array_equal(tree_level_labels(Tree(np.zeros((0, 2), np.int64)), 2), [[0, 0]])


def test_tree_level_labels_consistent_with_extend_paths():
    rng = np.random.default_rng(3)
    for tr in (random_tree(30, rng), random_parent_tree(30, rng)):
        lab = tree_level_labels(tr, 6)
        np.testing.assert_array_equal(extend_paths(lab), lab)  # already prefix-consistent
        out = levelwise_scores(lab, tree_level_labels(tr, 4))  # pred extended to depth 6
        np.testing.assert_allclose(out["nmi"][:4], 1.0, atol=1e-12)
    # a caterpillar is deep (n levels) but cut quickly
    n = 3000
    cat = Tree(np.column_stack([np.r_[0, n + np.arange(n - 2)], np.arange(1, n)]))
    lab = tree_level_labels(cat, 3)
    assert lab.shape == (n, 3)
    assert [len(np.unique(lab[:, l])) for l in range(3)] == [2, 3, 4]


def test_tree_level_labels_bad_input():
    tree = Tree.from_nested(((0, 1), 2))
    with pytest.raises(ValueError, match="depth"):
        tree_level_labels(tree, 0)
    with pytest.raises(TypeError, match="depth"):
        tree_level_labels(tree, 2.0)
    with pytest.raises(TypeError, match="tree"):
        tree_level_labels(np.zeros((2, 2), int), 2)
    with pytest.raises(ValueError, match="tree"):
        tree_level_labels(ParentTree(np.array([2, 2, 3, 2]), 2), 2)


def test_levelwise_scores_bad_input():
    with pytest.raises(ValueError, match="level_labels_true"):
        levelwise_scores(np.zeros(5, int), np.zeros((5, 1), int))
    with pytest.raises(ValueError, match="level_labels_true and level_labels_pred.*rows"):
        levelwise_scores(np.zeros((5, 2), int), np.zeros((4, 2), int))
    with pytest.raises(ValueError, match="level_labels_pred"):
        levelwise_scores(np.zeros((3, 1)), np.array([[0.0], [np.nan], [1.0]]))
    with pytest.raises(ValueError, match="empty"):
        levelwise_scores(np.zeros((0, 2), int), np.zeros((0, 2), int))
    with pytest.raises(ValueError, match="level_labels_pred.*after a negative"):
        levelwise_scores(np.zeros((2, 3), int), np.array([[0, 1, 2], [0, -1, 2]]))
    with pytest.raises(ValueError, match="depth"):
        levelwise_scores(np.zeros((2, 2), int), np.zeros((2, 2), int), depth=0)


# ---------------------------------------------------------------------------------------
# predictive log-likelihood summary
# ---------------------------------------------------------------------------------------
def test_predictive_log_likelihood_summary():
    x = np.array([-1.0, -2.0, -3.0, -6.0])
    mean, se = predictive_log_likelihood_summary(x)
    assert mean == pytest.approx(-3.0)
    assert se == pytest.approx(np.std(x, ddof=1) / 2.0)
    with pytest.raises(ValueError, match="log_probs"):
        predictive_log_likelihood_summary([-1.0, np.nan])
    with pytest.raises(ValueError, match="log_probs"):
        predictive_log_likelihood_summary([])
    with pytest.raises(ValueError, match="log_probs"):
        predictive_log_likelihood_summary(np.zeros((2, 2)))


# ---------------------------------------------------------------------------------------
# bad inputs
# ---------------------------------------------------------------------------------------
def test_dendrogram_purity_bad_input():
    tree = Tree.from_nested(((0, 1), (2, 3)))
    with pytest.raises(ValueError, match="labels"):
        dendrogram_purity(tree, [0, 0, 1])  # wrong length
    with pytest.raises(ValueError, match="labels"):
        dendrogram_purity(tree, np.zeros((4, 1), int))  # 2-D
    with pytest.raises(ValueError, match="labels"):
        dendrogram_purity(tree, [0, 1, 2, 3])  # no same-class pair
    with pytest.raises(ValueError, match="labels"):
        dendrogram_purity(tree, [0.0, 0.0, np.nan, 1.0])
    with pytest.raises(ValueError, match="labels"):
        dendrogram_purity(Tree(np.zeros((0, 2), np.int64)), [])
    with pytest.raises(ValueError, match="tree"):
        dendrogram_purity(ParentTree(np.array([2, 2, 3, 2]), 2), [0, 0])  # cycle, no root
    with pytest.raises(TypeError, match="tree"):
        dendrogram_purity(np.zeros((3, 2)), [0, 0, 1, 1])


def test_flat_scores_bad_input():
    for fn in (adjusted_rand_index, normalized_mutual_info, f_measure, purity):
        with pytest.raises(ValueError, match="same length"):
            fn([0, 1, 1], [0, 1])
        with pytest.raises(ValueError, match="labels_true"):
            fn(np.zeros((2, 2)), [0, 1, 0, 1])
        with pytest.raises(ValueError, match="labels_pred"):
            fn([0, 1], [0.0, np.nan])
        with pytest.raises(ValueError, match="labels_true"):
            fn([], [])
