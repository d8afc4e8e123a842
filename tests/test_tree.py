"""Tests for jaxhc.tree: the binary `Tree` (scipy-linkage layout) and the general `ParentTree`:
conversions (nested, linkage, Newick, JSON, parent form) checked by round trips and against
scipy; traversals checked against each other; cuts against scipy's fcluster; validation;
pytree behaviour under jit / vmap."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.cluster import hierarchy as sch

from jaxhc.tree import ParentTree, Tree


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------
def random_tree(n, rng, monotone=True, values=False) -> Tree:
    """Random binary Tree: each merge joins two uniformly chosen active nodes (in random
    order); heights increasing in the merge order when ``monotone``, else random."""
    active = list(range(n))
    rows = []
    for t in range(n - 1):
        i, j = rng.choice(len(active), size=2, replace=False)
        a, b = active[i], active[j]
        rows.append((a, b))
        active = [k for k in active if k not in (a, b)] + [n + t]
    children = np.asarray(rows, np.int64).reshape(n - 1, 2)
    h = rng.uniform(0.1, 10.0, n - 1)
    heights = np.sort(h) if monotone else h
    vals = {"log_r": rng.normal(size=n - 1), "count": rng.integers(0, 5, n - 1)} if values else None
    return Tree(children, heights, vals).validate()


def canonical(labels) -> tuple:
    """Flat labels relabelled by first appearance (partition identity)."""
    first = {}
    return tuple(first.setdefault(x, len(first)) for x in np.asarray(labels).tolist())


def parse_newick(s):
    """Tiny Newick parser: returns ``(tree, length)`` pairs where ``tree`` is a leaf name
    (str, quotes removed) or a list of children; ``length`` is a float or None."""
    pos = 0

    def name():
        nonlocal pos
        if pos < len(s) and s[pos] == "'":
            pos += 1
            out = []
            while True:
                if s[pos] == "'":
                    if pos + 1 < len(s) and s[pos + 1] == "'":
                        out.append("'")
                        pos += 2
                        continue
                    pos += 1
                    return "".join(out)
                out.append(s[pos])
                pos += 1
        start = pos
        while pos < len(s) and s[pos] not in ",():;":
            pos += 1
        return s[start:pos]

    def node():
        nonlocal pos
        if s[pos] == "(":
            pos += 1
            kids = [node()]
            while s[pos] == ",":
                pos += 1
                kids.append(node())
            assert s[pos] == ")", f"expected ')' at {pos} in {s!r}"
            pos += 1
            name()  # inner node label (unused)
            tree = kids
        else:
            tree = name()
        length = None
        if pos < len(s) and s[pos] == ":":
            pos += 1
            start = pos
            while pos < len(s) and s[pos] not in ",();":
                pos += 1
            length = float(s[start:pos])
        return tree, length

    out = node()
    assert s[pos:] == ";", f"trailing text {s[pos:]!r}"
    return out


def newick_clusters(parsed) -> set:
    """Set of frozensets of leaf names under every node."""
    out = set()

    def rec(node):
        tree, _ = node
        if isinstance(tree, str):
            leaves = frozenset([tree])
        else:
            leaves = frozenset().union(*[rec(c) for c in tree])
        out.add(leaves)
        return leaves

    rec(parsed)
    return out


def newick_root_to_leaf(parsed) -> dict:
    """Sum of branch lengths from the root to every leaf name."""
    out = {}

    def rec(node, acc):
        tree, length = node
        acc = acc + (length or 0.0)
        if isinstance(tree, str):
            out[tree] = acc
        else:
            for c in tree:
                rec(c, acc)

    rec(parsed, 0.0)
    return out


def newick_lengths(parsed) -> list:
    out = []

    def rec(node):
        tree, length = node
        if length is not None:
            out.append(length)
        if not isinstance(tree, str):
            for c in tree:
                rec(c)

    rec(parsed)
    return out


def named(clusters, names=None) -> set:
    return {frozenset(str(i) if names is None else names[i] for i in c) for c in clusters}


SIZES = [2, 3, 7, 16]


# ---------------------------------------------------------------------------------------
# nested form
# ---------------------------------------------------------------------------------------
def test_from_nested_layout():
    t = Tree.from_nested(((0, 1), (2, (3, 4))))
    # post-order numbering: 5 = (0, 1), 6 = (3, 4), 7 = (2, 6), 8 = (5, 7)
    np.testing.assert_array_equal(t.children, [[0, 1], [3, 4], [2, 6], [5, 7]])
    assert (t.n_leaves, t.n_nodes, t.root) == (5, 9, 8)
    assert t.to_nested() == ((0, 1), (2, (3, 4)))
    one = Tree.from_nested(0)
    assert one.n_leaves == 1 and one.to_nested() == 0


@pytest.mark.parametrize("n", SIZES)
def test_nested_roundtrip(n):
    rng = np.random.default_rng(n)
    t = random_tree(n, rng)
    nested = t.to_nested()
    t2 = Tree.from_nested(nested)
    assert t2.same_hierarchy(t)
    assert t2.to_nested() == nested
    assert Tree.from_nested(t2.to_nested()).to_nested() == nested
    # lists work as well as tuples
    as_lists = json.loads(json.dumps(nested))
    assert Tree.from_nested(as_lists).same_hierarchy(t)


@pytest.mark.parametrize("bad", [(0, 1, 2), ((0, 2), 3), ((0, 1), (1, 2)), ((0, 1), (2,))])
def test_from_nested_rejects_bad_input(bad):
    with pytest.raises(ValueError):
        Tree.from_nested(bad)


# ---------------------------------------------------------------------------------------
# scipy linkage
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("monotone", [True, False])
def test_to_linkage_is_valid_scipy_linkage(n, monotone):
    t = random_tree(n, np.random.default_rng(n + 100 * monotone), monotone=monotone)
    Z = t.to_linkage()
    assert Z.shape == (n - 1, 4)
    assert sch.is_valid_linkage(Z, throw=True)
    assert sch.is_monotonic(Z)  # heights made non-decreasing for drawing
    np.testing.assert_array_equal(Z[:, :2], t.children)
    np.testing.assert_array_equal(Z[:, 3], t.sizes()[n:])
    np.testing.assert_allclose(Z[:, 2], np.maximum.accumulate(t.heights))
    if monotone:
        np.testing.assert_array_equal(Z[:, 2], t.heights)
    # scipy draws it, with the same leaf order
    dn = sch.dendrogram(Z, no_plot=True)
    assert dn["ivl"] == [str(i) for i in t.leaf_order()]
    # and agrees on the hierarchy
    root = sch.to_tree(Z)
    sc = set()
    stack = [root]
    while stack:
        node = stack.pop()
        sc.add(frozenset(node.pre_order()))
        if not node.is_leaf():
            stack += [node.left, node.right]
    assert sc == t.clusters()


def test_to_linkage_default_heights_are_merge_order():
    t = Tree.from_nested(((0, 1), (2, (3, 4))))
    Z = t.to_linkage()
    np.testing.assert_array_equal(Z[:, 2], [1, 2, 3, 4])
    assert sch.is_valid_linkage(Z)


@pytest.mark.parametrize("n", SIZES)
def test_from_linkage_of_to_linkage(n):
    t = random_tree(n, np.random.default_rng(n))
    t2 = Tree.from_linkage(t.to_linkage())
    assert t2.same_hierarchy(t)
    np.testing.assert_array_equal(t2.children, t.children)
    np.testing.assert_allclose(t2.heights, t.heights)
    np.testing.assert_array_equal(t2.leaf_order(), t.leaf_order())


@pytest.mark.parametrize("method", ["single", "complete", "average", "ward"])
def test_scipy_linkage_roundtrip(method):
    X = np.random.default_rng(0).normal(size=(15, 3))
    Z = sch.linkage(X, method=method)
    t = Tree.from_linkage(Z)
    assert t.n_leaves == 15
    np.testing.assert_allclose(t.to_linkage(), Z, rtol=0, atol=0)
    assert t.leaf_order().tolist() == [int(s) for s in sch.dendrogram(Z, no_plot=True)["ivl"]]


def test_from_linkage_rejects_bad_matrix():
    with pytest.raises(ValueError):
        Tree.from_linkage(np.zeros((3, 3)))
    with pytest.raises(ValueError):
        Tree.from_linkage(np.array([[0, 1, 1.0, 2], [0, 2, 2.0, 2]]))  # leaf 0 used twice


# ---------------------------------------------------------------------------------------
# Newick
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1] + SIZES)
def test_newick_parses_back_to_same_clusters(n):
    t = random_tree(n, np.random.default_rng(n))
    s = t.to_newick()
    assert s.endswith(";")
    parsed = parse_newick(s)
    assert newick_clusters(parsed) == named(t.clusters())
    assert newick_lengths(parsed) == []
    # the Newick leaf order is the drawing order
    assert [x for x in s.replace("(", " ").replace(")", " ").replace(",", " ").replace(";", " ").split()] == [
        str(i) for i in t.leaf_order()
    ]


@pytest.mark.parametrize("n", SIZES)
def test_newick_branch_lengths(n):
    t = random_tree(n, np.random.default_rng(n), monotone=True)
    parsed = parse_newick(t.to_newick(branch_lengths=True))
    assert newick_clusters(parsed) == named(t.clusters())
    lengths = newick_lengths(parsed)
    assert len(lengths) == 2 * n - 2 and min(lengths) >= 0
    # ultrametric: every leaf is at the root height below the root (6 significant digits)
    depth = newick_root_to_leaf(parsed)
    np.testing.assert_allclose(list(depth.values()), t.heights[-1], rtol=1e-5)


def test_newick_quotes_special_labels():
    labels = ["plain", "a b", "x,y", "it's", "(p)", "c:d", "semi;colon", "[br]"]
    t = random_tree(len(labels), np.random.default_rng(1))
    s = t.to_newick(labels)
    for lab in labels[1:]:
        assert "'" + lab.replace("'", "''") + "'" in s
    assert "'plain'" not in s and "plain" in s
    parsed = parse_newick(s)
    assert newick_clusters(parsed) == named(t.clusters(), labels)
    with pytest.raises(ValueError):
        t.to_newick(labels[:-1])


def test_newick_inner_labels_follow_their_nodes():
    t = Tree.from_nested(((0, 1), (2, (3, 4))))  # merges in post-order: (0,1), (3,4), (2,(3,4)), root
    s = t.to_newick(inner_labels=["a", "b", "c d", "root"], branch_lengths=False)
    assert s == "((0,1)a,(2,(3,4)b)'c d')root;"
    parsed = parse_newick(t.to_newick(inner_labels=["0.9", "0.5", "1", "0.1"], branch_lengths=True))
    assert newick_clusters(parsed) == named(t.clusters())
    with pytest.raises(ValueError, match="inner_labels"):
        t.to_newick(inner_labels=["a"])


def test_newick_deep_caterpillar():
    n = 1500  # deeper than Python's default recursion limit
    rows = [(0, 1)] + [(n + t - 1, t + 1) for t in range(1, n - 1)]
    t = Tree(np.asarray(rows)).validate()
    s = t.to_newick()
    assert s.count("(") == n - 1 and s.count(",") == n - 1


# ---------------------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1] + SIZES)
@pytest.mark.parametrize("with_heights", [True, False])
def test_json_roundtrip(n, with_heights):
    t = random_tree(n, np.random.default_rng(n), values=True)
    if not with_heights:
        t = Tree(t.children, None, t.values)
    s = t.to_json()
    d = json.loads(s)
    assert d["n_leaves"] == n
    t2 = Tree.from_json(s)
    np.testing.assert_array_equal(t2.children, t.children)
    if with_heights:
        np.testing.assert_array_equal(t2.heights, t.heights)  # exact: JSON keeps float repr
    else:
        assert t2.heights is None and "heights" not in d
    assert set(t2.values) == set(t.values)
    for k in t.values:
        np.testing.assert_array_equal(t2.values[k], t.values[k])
    assert Tree.from_dict(t.to_dict()).to_json() == s


def test_json_accepts_jax_arrays():
    t = random_tree(6, np.random.default_rng(0), values=True)
    tj = Tree(jnp.asarray(t.children), jnp.asarray(t.heights), {k: jnp.asarray(v) for k, v in t.values.items()})
    assert Tree.from_json(tj.to_json()).same_hierarchy(t)


# ---------------------------------------------------------------------------------------
# traversals
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1] + SIZES + [62])
def test_traversals_consistent(n):
    rng = np.random.default_rng(n)
    t = Tree.from_nested(0) if n == 1 else random_tree(n, rng)
    m = 2 * n - 1
    sets = t.leaf_sets()
    assert sets.shape == (m, n) and sets.dtype == bool
    np.testing.assert_array_equal(sets[:n], np.eye(n, dtype=bool))
    assert sets[t.root].all()
    # bitmasks are the leaf sets as integers
    bits = t.bitmasks()
    assert bits.dtype == np.int64
    want = [sum(1 << int(i) for i in np.flatnonzero(r)) for r in sets]
    assert bits.tolist() == want
    # sizes
    np.testing.assert_array_equal(t.sizes(), sets.sum(1))
    # parents: a node's leaf set is the union of its children's (disjoint) sets
    par = t.parents()
    assert par.shape == (m,) and par[t.root] == -1 and np.all(par[: m - 1] > np.arange(m - 1))
    for k in range(n, m):
        kids = np.flatnonzero(par == k)
        np.testing.assert_array_equal(np.sort(kids), np.sort(t.children[k - n]))
        assert not np.any(sets[kids[0]] & sets[kids[1]])
        np.testing.assert_array_equal(sets[kids[0]] | sets[kids[1]], sets[k])
        assert bits[k] == bits[kids[0]] | bits[kids[1]]
    # depths = number of strict ancestors = number of clusters strictly containing the node's set
    dep = t.depths()
    assert dep[t.root] == 0
    for k in range(m):
        anc = [j for j in range(m) if j != k and sets[j][sets[k]].all() and sets[j].sum() > sets[k].sum()]
        assert dep[k] == len(anc)
        if k != t.root:
            assert dep[k] == dep[par[k]] + 1
    # leaf order: a permutation where every cluster is contiguous
    order = t.leaf_order()
    assert sorted(order.tolist()) == list(range(n))
    pos = np.empty(n, int)
    pos[order] = np.arange(n)
    for r in sets:
        p = np.sort(pos[r])
        assert p[-1] - p[0] == len(p) - 1
    assert len(t.clusters()) == m


def test_bitmasks_limit():
    rows = [(0, 1)] + [(63 + t - 1, t + 1) for t in range(1, 62)]
    t = Tree(np.asarray(rows)).validate()
    assert t.n_leaves == 63
    with pytest.raises(ValueError, match="62"):
        t.bitmasks()
    assert t.leaf_sets().shape == (125, 63)  # the alternative still works


def test_relabel_leaves():
    t = Tree.from_nested(((0, 1), (2, (3, 4))))
    perm = [4, 3, 2, 1, 0]
    assert t.relabel_leaves(perm).to_nested() == ((4, 3), (2, (1, 0)))
    with pytest.raises(ValueError):
        t.relabel_leaves([0, 0, 1, 2, 3])


# ---------------------------------------------------------------------------------------
# cuts
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", SIZES)
def test_cut_by_height_matches_fcluster(n):
    t = random_tree(n, np.random.default_rng(n), monotone=True)
    Z = t.to_linkage()
    h = np.sort(t.heights)
    thresholds = np.concatenate([[0.0, h[0] / 2], h, (h[:-1] + h[1:]) / 2, [h[-1] + 1]])
    for thr in thresholds:
        labels = t.cut(thr)
        assert labels.shape == (n,) and labels[0] == 0
        assert canonical(labels) == tuple(labels.tolist())  # numbered in order of first leaf
        assert canonical(labels) == canonical(sch.fcluster(Z, thr, criterion="distance")), thr
    assert len(set(t.cut(-1.0).tolist())) == n
    assert set(t.cut(h[-1]).tolist()) == {0}


def test_cut_default_heights_merge_order():
    t = Tree.from_nested(((0, 1), (2, (3, 4))))  # merges 1: {0,1}, 2: {3,4}, 3: {2,3,4}, 4: root
    assert t.cut(0.5).tolist() == [0, 1, 2, 3, 4]
    assert t.cut(1.0).tolist() == [0, 0, 1, 2, 3]
    assert t.cut(2.5).tolist() == [0, 0, 1, 2, 2]
    assert t.cut(3.0).tolist() == [0, 0, 1, 1, 1]
    assert t.cut(4.0).tolist() == [0, 0, 0, 0, 0]


def test_cut_by_scores_bhc_convention():
    # inner nodes: 5 = {0,1}, 6 = {3,4}, 7 = {2,3,4}, 8 = root
    t = Tree.from_nested(((0, 1), (2, (3, 4))))
    # split the root (r < 0.5), keep {0,1}; split 7, keep {3,4}
    assert t.cut(0.5, scores=[0.9, 0.8, 0.3, 0.1]).tolist() == [0, 0, 1, 2, 2]
    # top-down: a kept node is not looked into, whatever the scores below it
    assert t.cut(0.5, scores=[0.1, 0.1, 0.1, 0.9]).tolist() == [0, 0, 0, 0, 0]
    assert t.cut(0.5, scores=[0.1, 0.1, 0.1, 0.1]).tolist() == [0, 1, 2, 3, 4]
    # the threshold itself is kept (split only where score < threshold)
    assert t.cut(0.5, scores=[0.5, 0.5, 0.5, 0.4]).tolist() == [0, 0, 1, 1, 1]
    # labels follow the first leaf even when the left child is split last
    t2 = Tree.from_nested(((3, (1, 4)), (0, 2)))
    assert t2.cut(0.5, scores=[0.9, 0.2, 0.9, 0.1]).tolist() == [0, 1, 0, 2, 1]
    with pytest.raises(ValueError):
        t.cut(0.5, scores=[0.1, 0.2])


# ---------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "children",
    [
        np.zeros((3, 3), np.int64),  # wrong shape
        np.zeros((4,), np.int64),  # wrong ndim
        [[0, 1], [2, 5], [3, 6]],  # child 5 >= its node id 5 (merge 1 creates node 5)
        [[0, 4], [1, 2], [3, 5]],  # child 4 = the node created by merge 0
        [[0, 1], [0, 2], [3, 5]],  # leaf 0 used twice
        [[0, 1], [4, 4], [2, 3]],  # node 4 used twice, in one merge
        [[0, 1], [4, 2], [4, 3]],  # inner node 4 used twice
        [[-1, 1], [2, 3], [4, 5]],  # negative id
    ],
)
def test_validate_rejects_bad_children(children):
    with pytest.raises(ValueError, match="children"):
        Tree(np.asarray(children)).validate()


def test_validate_rejects_bad_heights_and_accepts_good_tree():
    t = Tree.from_nested(((0, 1), (2, 3)))
    assert t.validate() is t
    with pytest.raises(ValueError, match="heights"):
        Tree(t.children, heights=np.ones(2)).validate()


# ---------------------------------------------------------------------------------------
# pytree
# ---------------------------------------------------------------------------------------
def test_tree_is_a_pytree():
    t = random_tree(6, np.random.default_rng(0), values=True)
    leaves, treedef = jax.tree_util.tree_flatten(t)
    assert len(leaves) == 2 + len(t.values)
    t2 = jax.tree_util.tree_unflatten(treedef, leaves)
    assert isinstance(t2, Tree)
    np.testing.assert_array_equal(t2.children, t.children)
    np.testing.assert_array_equal(t2.heights, t.heights)
    for k in t.values:
        np.testing.assert_array_equal(t2.values[k], t.values[k])
    # without heights and values
    t3 = Tree(t.children)
    leaves, treedef = jax.tree_util.tree_flatten(t3)
    assert len(leaves) == 1
    assert jax.tree_util.tree_unflatten(treedef, leaves).heights is None
    # tree_map reaches the arrays
    doubled = jax.tree_util.tree_map(lambda x: 2 * x, t)
    np.testing.assert_array_equal(doubled.heights, 2 * t.heights)


def test_tree_through_jit_and_vmap():
    t = random_tree(6, np.random.default_rng(0), values=True)
    tj = Tree(jnp.asarray(t.children), jnp.asarray(t.heights), {k: jnp.asarray(v) for k, v in t.values.items()})
    out = jax.jit(lambda tree: tree.children + 0)(tj)
    np.testing.assert_array_equal(out, t.children)
    back = jax.jit(lambda tree: tree)(tj)
    assert isinstance(back, Tree) and back.n_leaves == 6
    assert back.same_hierarchy(t)
    np.testing.assert_array_equal(back.values["log_r"], t.values["log_r"])
    # a batch of trees (stacked arrays) through vmap
    u = random_tree(6, np.random.default_rng(1), values=True)
    batch = jax.tree_util.tree_map(lambda a, b: jnp.stack([jnp.asarray(a), jnp.asarray(b)]), t, u)
    roots = jax.vmap(lambda tree: tree.children[-1] + 0 * tree.n_leaves)(batch)
    np.testing.assert_array_equal(roots, [t.children[-1], u.children[-1]])


# ---------------------------------------------------------------------------------------
# ParentTree
# ---------------------------------------------------------------------------------------
def _example_parent_tree(permute=False):
    """Leaves 0..4; node 5 = {0, 1, 2} (ternary), node 6 = {3, 4}, root 7. Times grow toward
    the leaves (PYDT convention: root 0.0, leaves 1.0)."""
    parent = np.array([5, 5, 5, 6, 6, 7, 7, -1])
    heights = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 0.6, 0.25, 0.0])
    if permute:  # inner nodes in another order: root first
        perm = np.array([0, 1, 2, 3, 4, 7, 5, 6])  # new id k holds old node perm[k]
        inv = np.argsort(perm)
        parent = np.where(parent[perm] >= 0, inv[np.maximum(parent[perm], 0)], -1)
        heights = heights[perm]
    return ParentTree(parent, 5, heights).validate()


EXAMPLE_CLUSTERS = {frozenset([i]) for i in range(5)} | {frozenset([0, 1, 2]), frozenset([3, 4]), frozenset(range(5))}


@pytest.mark.parametrize("permute", [False, True])
def test_parent_tree_clusters_and_newick(permute):
    pt = _example_parent_tree(permute)
    assert pt.clusters() == EXAMPLE_CLUSTERS
    assert pt.n_nodes == 8
    parsed = parse_newick(pt.to_newick())
    assert newick_clusters(parsed) == named(EXAMPLE_CLUSTERS)
    parsed = parse_newick(pt.to_newick(branch_lengths=True))
    assert newick_clusters(parsed) == named(EXAMPLE_CLUSTERS)
    assert sorted(newick_lengths(parsed)) == pytest.approx(sorted([0.4] * 3 + [0.75] * 2 + [0.6, 0.25]))
    depth = newick_root_to_leaf(parsed)
    assert depth == pytest.approx({str(i): 1.0 for i in range(5)})
    labels = ["a", "b c", "d", "e:f", "g"]
    parsed = parse_newick(pt.to_newick(labels))
    assert newick_clusters(parsed) == named(EXAMPLE_CLUSTERS, labels)


@pytest.mark.parametrize("with_heights", [True, False])
def test_parent_tree_dict_json_roundtrip(with_heights):
    pt = _example_parent_tree(permute=True)
    if not with_heights:
        pt = ParentTree(pt.parent, pt.n_leaves)
    for back in (ParentTree.from_dict(pt.to_dict()), ParentTree.from_json(pt.to_json())):
        np.testing.assert_array_equal(back.parent, pt.parent)
        assert back.n_leaves == pt.n_leaves
        if with_heights:
            np.testing.assert_array_equal(back.heights, pt.heights)
        else:
            assert back.heights is None
        assert back.clusters() == pt.clusters()
    json.loads(pt.to_json())


@pytest.mark.parametrize(
    "parent,n_leaves,what",
    [
        ([2, 3, 3, 2, -1], 2, "cycle"),  # 2 <-> 3 cycle, 4 an isolated root
        ([2, 2, -1, -1], 2, "two roots"),
        ([2, 2, 3, 4, 2], 2, "no root"),
        ([3, 0, 3, -1], 3, "leaf with a child"),
        ([2, 9, -1], 2, "parent out of range"),
        ([2, 2, -1], 0, "no leaves"),
        ([2, 2, -1], 4, "more leaves than nodes"),
        ([2, 2, -1, 2], 2, "inner node 3 without children"),  # would print as '()' in Newick
    ],
)
def test_parent_tree_validate_rejects(parent, n_leaves, what):
    with pytest.raises(ValueError):  # what: the defect
        ParentTree(np.asarray(parent), n_leaves).validate()


@pytest.mark.parametrize("n", SIZES)
def test_tree_to_parent_same_clusters(n):
    t = random_tree(n, np.random.default_rng(n))
    pt = t.to_parent().validate()
    assert pt.n_leaves == n and pt.n_nodes == 2 * n - 1
    assert pt.clusters() == t.clusters()
    np.testing.assert_array_equal(pt.leaf_sets(), t.leaf_sets())
    assert newick_clusters(parse_newick(pt.to_newick())) == named(t.clusters())
    assert ParentTree.from_json(pt.to_json()).clusters() == t.clusters()


@pytest.mark.parametrize("n", SIZES)
def test_tree_to_parent_newick_branch_lengths(n):
    """The same hierarchy written through the parent form has the same topology and valid
    (non-negative, ultrametric) branch lengths."""
    t = random_tree(n, np.random.default_rng(n), monotone=True)
    parsed = parse_newick(t.to_parent().to_newick(branch_lengths=True))
    assert newick_clusters(parsed) == named(t.clusters())
    lengths = newick_lengths(parsed)
    assert len(lengths) == 2 * n - 2
    assert min(lengths) >= 0, f"negative branch lengths: {t.to_parent().to_newick(branch_lengths=True)}"
    depth = list(newick_root_to_leaf(parsed).values())
    np.testing.assert_allclose(depth, depth[0], rtol=1e-5)


def test_parent_tree_is_a_pytree():
    pt = _example_parent_tree()
    leaves, treedef = jax.tree_util.tree_flatten(pt)
    back = jax.tree_util.tree_unflatten(treedef, leaves)
    assert isinstance(back, ParentTree) and back.n_leaves == 5
    np.testing.assert_array_equal(back.parent, pt.parent)
    out = jax.jit(lambda p: p.parent + 0)(ParentTree(jnp.asarray(pt.parent), 5, jnp.asarray(pt.heights)))
    np.testing.assert_array_equal(out, pt.parent)
