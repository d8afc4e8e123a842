"""Operations on a result in linear memory (issue 59, part 1): every `Tree` traversal, cut and
conversion, the predictive weights, the metrics, the plot's node colours and BHCC's views
give exactly the answers of the dense ``leaf_sets()`` formulas they replaced (recomputed
here from the dense matrix, on random, caterpillar and balanced trees), and a 200 000-leaf
tree is cut, counted, converted and scored under a memory bound that the dense matrix
(80 GB) would break."""

import json
import tracemalloc

import numpy as np
import pytest

from jaxhc.inference.bhc.randomized import _subtree_log_weights
from jaxhc.inference.bhc.result import BHCResult
from jaxhc.inference.bhcc.predictive import _on_path
from jaxhc.inference.bhcc.result import node_leaves, node_of_leaves
from jaxhc.metrics import dendrogram_purity, tree_level_labels
from jaxhc.plot import _node_clusters
from jaxhc.tree import ParentTree, Tree


# ---------------------------------------------------------------------------------------
# trees of several shapes, built with numpy (children before parents)
# ---------------------------------------------------------------------------------------
def random_merges(n, rng) -> np.ndarray:
    """Each merge joins two uniformly chosen active nodes, in random order."""
    active = list(range(n))
    rows = []
    for t in range(n - 1):
        i, j = rng.choice(len(active), size=2, replace=False)
        rows.append((active[i], active[j]))
        active = [k for k in active if k not in rows[-1]] + [n + t]
    return np.asarray(rows, np.int64).reshape(n - 1, 2)


def caterpillar(n, left=True) -> np.ndarray:
    """Every merge adds one leaf to the previous merge (depth n - 1)."""
    if n == 1:
        return np.zeros((0, 2), np.int64)
    prev = np.r_[0, np.arange(n, 2 * n - 2)]
    new = np.arange(1, n)
    return np.column_stack([prev, new] if left else [new, prev]).astype(np.int64)


def balanced(n, rng=None) -> np.ndarray:
    """Level by level, the current nodes (shuffled with ``rng``) are paired; an odd one
    waits for the next level."""
    cur = np.arange(n) if rng is None else rng.permutation(n)
    rows, nxt_id = [], n
    while cur.shape[0] > 1:
        k = cur.shape[0] // 2
        pairs = cur[: 2 * k].reshape(k, 2)
        rows.append(pairs)
        made = np.arange(nxt_id, nxt_id + k)
        nxt_id += k
        cur = np.concatenate([made, cur[2 * k :]])
        if rng is not None:
            cur = rng.permutation(cur)
    return np.concatenate(rows).astype(np.int64) if rows else np.zeros((0, 2), np.int64)


SHAPES = ["random", "caterpillar_left", "caterpillar_right", "balanced", "balanced_shuffled"]


def make_tree(shape, n, seed) -> Tree:
    rng = np.random.default_rng(seed)
    if shape == "random":
        ch = random_merges(n, rng)
    elif shape == "caterpillar_left":
        ch = caterpillar(n, True)
    elif shape == "caterpillar_right":
        ch = caterpillar(n, False)
    elif shape == "balanced":
        ch = balanced(n)
    else:
        ch = balanced(n, rng)
    heights = np.sort(rng.uniform(0.0, 10.0, n - 1)) if seed % 2 else None
    return Tree(ch, heights, {"log_r": rng.normal(size=n - 1)}).validate()


CASES = [(s, n) for s in SHAPES for n in (1, 2, 3, 7, 64, 301)]


# ---------------------------------------------------------------------------------------
# the dense formulas the library used before
# ---------------------------------------------------------------------------------------
def dense_leaf_order(tree):
    ch, n = np.asarray(tree.children), tree.n_leaves
    out, stack = [], [tree.root]
    while stack:
        k = stack.pop()
        if k < n:
            out.append(k)
        else:
            stack += [ch[k - n, 1], ch[k - n, 0]]
    return np.asarray(out, np.int64)


def dense_depths(tree):
    par = tree.parents()
    d = np.zeros(tree.n_nodes, np.int64)
    for k in range(tree.n_nodes - 2, -1, -1):
        d[k] = d[par[k]] + 1
    return d


def dense_cut(tree, threshold, scores=None):
    n, ch = tree.n_leaves, np.asarray(tree.children)
    if scores is None:
        h = np.asarray(tree.heights) if tree.heights is not None else np.arange(1, n, dtype=float)
        split = h > threshold
    else:
        split = np.asarray(scores) < threshold
    labels = np.full(n, -1, np.int64)
    stack, groups = [tree.root], []
    while stack:
        k = stack.pop()
        if k >= n and split[k - n]:
            stack.extend([ch[k - n, 1], ch[k - n, 0]])
        else:
            groups.append(k)
    sets = tree.leaf_sets()
    for g, k in enumerate(groups):
        labels[sets[k]] = g
    _, first = np.unique(labels, return_index=True)
    return np.argsort(np.argsort(first))[labels]


def dense_newick(tree, labels=None, branch_lengths=False, inner_labels=None):
    n, ch = tree.n_leaves, np.asarray(tree.children)
    names = [str(i) for i in range(n)] if labels is None else [str(x) for x in labels]
    if inner_labels is not None:
        names = names + [str(x) for x in inner_labels]
    h = np.zeros(2 * n - 1)
    h[n:] = tree.to_linkage()[:, 2]
    par = tree.parents()

    def rec(k):
        if k < n:
            s = names[k]
        else:
            a, b = ch[k - n]
            s = f"({rec(a)},{rec(b)})" + (names[k] if inner_labels is not None else "")
        if branch_lengths and par[k] >= 0:
            s += f":{h[par[k]] - h[k]:.6g}"
        return s

    return rec(tree.root) + ";"


def dense_log_weights(tree, log_r, log_1mr):
    n, par = tree.n_leaves, tree.parents()
    size = tree.leaf_sets().sum(1).astype(float)
    acc = np.zeros(2 * n - 1)
    for k in range(2 * n - 3, -1, -1):
        p = par[k]
        acc[k] = acc[p] + log_1mr[p] + np.log(size[k] / size[p])
    return np.concatenate([np.zeros(n), log_r]) + acc


def dense_purity(tree, labels):
    sets, n, ch = tree.leaf_sets(), tree.n_leaves, np.asarray(tree.children)
    num = den = 0.0
    for c in np.unique(labels):
        ind = labels == c
        counts = (sets & ind[None, :]).sum(1).astype(float)
        den += ind.sum() * (ind.sum() - 1) / 2
        for t in range(n - 1):
            k = n + t
            num += counts[ch[t, 0]] * counts[ch[t, 1]] * counts[k] / sets[k].sum()
    return num / den


def dense_parent_newick(pt, branch_lengths=False, labels=None):
    n = pt.n_leaves
    names = [str(i) for i in range(n)] if labels is None else list(labels)
    ch, par, h = pt.children_lists(), np.asarray(pt.parent), np.asarray(pt.heights, float)

    def rec(k):
        s = names[k] if k < n else "(" + ",".join(rec(c) for c in ch[k]) + ")"
        if branch_lengths and par[k] >= 0:
            s += f":{h[k] - h[par[k]]:.6g}"
        return s

    return rec(pt.root) + ";"


def tree_with_result(tree, seed):
    """A `BHCResult` around ``tree`` with random ``log r`` (only the tree-level fields)."""
    rng = np.random.default_rng(seed)
    n = tree.n_leaves
    r = rng.uniform(0.0, 1.0, n - 1)
    if n > 2:
        r[rng.integers(n - 1)] = 1.0  # log(1 - r) = -inf at one node
    with np.errstate(divide="ignore"):
        log_1mr = np.concatenate([np.full(n, -np.inf), np.log1p(-r)])
        log_r = np.log(r)
    nan = np.full(2 * n - 1, np.nan)
    return BHCResult(tree, 0.0, log_r, 0.0, nan, nan, nan, log_1mr, None, None, 1.0)


# ---------------------------------------------------------------------------------------
# equivalence with the dense formulas
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,n", CASES)
def test_traversals_match_dense(shape, n):
    t = make_tree(shape, n, seed=n)
    sets = t.leaf_sets()
    order, start, end = t.leaf_ranges()
    np.testing.assert_array_equal(order, dense_leaf_order(t))
    for k in range(t.n_nodes):
        np.testing.assert_array_equal(np.sort(order[start[k] : end[k]]), np.flatnonzero(sets[k]))
        np.testing.assert_array_equal(node_leaves((order, start, end), k), np.flatnonzero(sets[k]))
    np.testing.assert_array_equal(t.sizes(), sets.sum(1))
    np.testing.assert_array_equal(t.depths(), dense_depths(t))
    assert t.clusters() == {frozenset(np.flatnonzero(r).tolist()) for r in sets}
    for dt in (np.int64, np.float64):
        vals = np.random.default_rng(n).integers(-5, 6, t.n_nodes).astype(dt)
        anc = [sets[j][sets[k]].all() for k in range(t.n_nodes) for j in range(t.n_nodes)]
        anc = np.asarray(anc).reshape(t.n_nodes, t.n_nodes)  # anc[k, j]: j above or at k
        np.testing.assert_array_equal(t.path_sums(vals), anc.astype(dt) @ vals)


@pytest.mark.parametrize("shape,n", CASES)
def test_cuts_match_dense(shape, n):
    t = make_tree(shape, n, seed=n + 1)
    rng = np.random.default_rng(n)
    h = t.to_linkage()[:, 2] if n > 1 else np.zeros(0)
    for thr in [-1.0, 0.0, 2.5, 5.0, 20.0] + list(h[:: max(1, n // 5)]):
        np.testing.assert_array_equal(t.cut(thr), dense_cut(t, thr))
    scores = rng.uniform(size=n - 1)
    scores[rng.uniform(size=n - 1) < 0.1] = np.nan
    for thr in (0.0, 0.3, 0.5, 0.9, 1.0):
        np.testing.assert_array_equal(t.cut(thr, scores=scores), dense_cut(t, thr, scores))
    res = tree_with_result(t, n)
    assert res.n_clusters(0.5) == int(dense_cut(t, 0.5, np.exp(res.log_r)).max()) + 1


@pytest.mark.parametrize("shape,n", CASES)
def test_conversions_match_dense(shape, n):
    t = make_tree(shape, n, seed=n + 2)
    names = [f"x{i}" for i in range(n)]
    inner = [f"{v:.3f}" for v in np.exp(-np.abs(np.asarray(t.values["log_r"])))]
    assert t.to_newick() == dense_newick(t)
    assert t.to_newick(names, branch_lengths=True) == dense_newick(t, names, True)
    assert t.to_newick(names, True, inner) == dense_newick(t, names, True, inner)
    assert t.to_newick(inner_labels=inner) == dense_newick(t, None, False, inner)
    assert t.to_json() == json.dumps(t.to_dict())
    assert Tree(t.children).to_json() == json.dumps(Tree(t.children).to_dict())
    Z = t.to_linkage()
    np.testing.assert_array_equal(Z[:, 3], t.leaf_sets().sum(1)[n:])


def test_json_in_chunks(monkeypatch):
    import jaxhc.tree as tree_mod

    monkeypatch.setattr(tree_mod, "_JSON_CHUNK", 3)
    monkeypatch.setattr(tree_mod, "_NEWICK_CHUNK", 5)
    t = make_tree("random", 40, seed=3)
    t.values["two_d"] = np.arange(78.0).reshape(39, 2)
    assert t.to_json() == json.dumps(t.to_dict())
    assert t.to_newick(branch_lengths=True) == dense_newick(t, None, True)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # -inf - -inf below r = 1
@pytest.mark.parametrize("shape,n", [c for c in CASES if c[1] > 1])
def test_predictive_weights_match_dense(shape, n):
    t = make_tree(shape, n, seed=n + 3)
    res = tree_with_result(t, n)
    want = dense_log_weights(t, np.asarray(res.log_r), np.asarray(res.log_1mr))
    got = res.log_weights()
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    # randomized BHC's subtree weights: the nodes under `top` only
    sets = t.leaf_sets()
    ranges = t.leaf_ranges()
    log_r_nodes = np.concatenate([np.zeros(n), np.asarray(res.log_r)])
    for top in {t.root, int(t.children[-1][0]), int(t.children[-1][1]), n // 2}:
        members = np.all(~sets | sets[top][None, :], axis=1)
        want_sub = np.where(members, want - (want[top] - log_r_nodes[top]), -np.inf)
        got_sub = _subtree_log_weights(ranges, got, log_r_nodes, top)
        np.testing.assert_array_equal(np.isfinite(got_sub), np.isfinite(want_sub))
        np.testing.assert_allclose(got_sub, want_sub, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape,n", [c for c in CASES if c[1] > 1])
def test_metrics_and_plot_colours_match_dense(shape, n):
    t = make_tree(shape, n, seed=n + 4)
    rng = np.random.default_rng(n)
    labels = rng.integers(0, 3, n)
    if np.bincount(labels).max() >= 2:
        assert dendrogram_purity(t, labels) == pytest.approx(dense_purity(t, labels), rel=1e-12)
    # level labels: the ParentTree path is the top-down pass the Tree path replaced
    for depth in (1, 3, 8):
        np.testing.assert_array_equal(tree_level_labels(t, depth), tree_level_labels(t.to_parent(), depth))
    # plot_bhc's node colours: a node whose leaves share one flat cluster takes its colour
    flat = t.cut(float(np.median(t.to_linkage()[:, 2])))
    sets = t.leaf_sets()
    want = np.full(2 * n - 1, -1)
    for k in range(n, 2 * n - 1):
        members = flat[sets[k]]
        if np.all(members == members[0]):
            want[k] = members[0]
    np.testing.assert_array_equal(_node_clusters(t, flat), want)


@pytest.mark.parametrize("shape,n", [c for c in CASES if c[1] > 1])
def test_bhcc_node_lookups_match_dense(shape, n):
    t = make_tree(shape, n, seed=n + 5)
    sets = t.leaf_sets()
    ranges = t.leaf_ranges()
    rng = np.random.default_rng(n)
    for k in range(t.n_nodes):
        cols = np.flatnonzero(sets[k])
        assert node_of_leaves(ranges, rng.permutation(cols)) == k
    for _ in range(10):  # arbitrary column sets: the node if one has exactly these leaves
        cols = np.flatnonzero(rng.uniform(size=n) < 0.5)
        hit = np.flatnonzero(np.all(sets == np.isin(np.arange(n), cols)[None, :], axis=1))
        assert node_of_leaves(ranges, cols) == (int(hit[0]) if len(hit) else -1)
    assert node_of_leaves(ranges, []) == -1
    nodes = rng.choice(t.n_nodes, size=min(7, t.n_nodes), replace=False)
    cols = rng.integers(0, n, 11)
    np.testing.assert_array_equal(_on_path(ranges, nodes, cols), sets[nodes][:, cols])


def test_parent_tree_newick_without_recursion():
    """A general tree's Newick is written iteratively: the nested form of the recursive
    writer, even on a chain far deeper than Python's recursion limit."""
    pt = ParentTree(np.array([5, 5, 6, 6, 6, 7, 7, -1]), 5, np.array([1, 1, 1, 1, 1, 0.5, 0.25, 0.0]))
    assert pt.to_newick() == "((0,1),(2,3,4));"
    assert pt.to_newick(list("abcde"), branch_lengths=True) == "((a:0.5,b:0.5):0.5,(c:0.75,d:0.75,e:0.75):0.25);"
    for seed in range(5):  # the recursive writer it replaced
        rng = np.random.default_rng(seed)
        t = make_tree(SHAPES[seed], 50, seed=2 * seed + 1).to_parent()
        par = np.asarray(t.parent)
        # merge some inner nodes into their parents: arities above two
        for k in rng.choice(np.arange(50, 98), size=10, replace=False):
            par = np.where(par == k, par[k], par)
        keep = np.r_[np.arange(50), np.setdiff1d(np.unique(par[par >= 0]), np.arange(50))]
        new_id = np.full(par.shape[0], -1)
        new_id[keep] = np.arange(keep.shape[0])
        g = ParentTree(np.where(par[keep] >= 0, new_id[par[keep]], -1), 50, np.asarray(t.heights)[keep]).validate()
        assert g.to_newick(branch_lengths=True) == dense_parent_newick(g, True)
        assert g.to_newick([f"n{i}" for i in range(50)]) == dense_parent_newick(g, False, [f"n{i}" for i in range(50)])
    deep = Tree(caterpillar(20_000)).to_parent()
    s = deep.to_newick()
    assert s.count("(") == s.count(")") == 19_999 and s.startswith("(19999,(19998,") and "(0,1))" in s


# ---------------------------------------------------------------------------------------
# scale: memory and depth
# ---------------------------------------------------------------------------------------
def _peak_mb(fn):
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("shape", ["balanced_shuffled", "caterpillar_left"])
def test_operations_on_200k_leaves_in_linear_memory(shape):
    """A 200 000-leaf tree: its dense leaf_sets() would take 80 GB; cut, n_clusters, the
    predictive weights, to_linkage and dendrogram purity each peak under 100 MB of traced
    memory (benchmarks/tree_ops.py measures the Newick string and JSON too)."""
    n = 200_000
    rng = np.random.default_rng(0)
    ch = balanced(n, rng) if shape == "balanced_shuffled" else caterpillar(n)
    tree = Tree(ch, np.arange(1, n, dtype=float))
    res = tree_with_result(tree, 0)
    labels = rng.integers(0, 10, n)
    out = {}
    ops = {
        "cut": lambda: out.setdefault("cut", res.cut(0.5)),
        "n_clusters": lambda: out.setdefault("k", res.n_clusters(0.5)),
        "log_weights": lambda: out.setdefault("w", res.log_weights()),
        "to_linkage": lambda: out.setdefault("Z", tree.to_linkage()),
        "dendrogram_purity": lambda: out.setdefault("dp", dendrogram_purity(tree, labels)),
    }
    for name, fn in ops.items():
        peak = _peak_mb(fn)
        assert peak < 100, f"{name} peaked at {peak:.0f} MB"
    out["nw"] = tree.to_newick()  # (traced, slow: tracemalloc follows every Python string)
    assert out["k"] == out["cut"].max() + 1 and out["cut"].shape == (n,)
    assert np.all(np.diff(out["Z"][:, 2]) >= 0) and out["Z"][-1, 3] == n
    assert out["nw"].count("(") == n - 1 and 0 < out["dp"] <= 1
    assert out["w"].shape == (2 * n - 1,)


def test_invalid_tree_raises_instead_of_looping():
    """The list ranking stops after log2 of the element count: a cycle (a tree that skipped
    `validate`) is a ValueError, not an endless loop."""
    t = Tree(np.array([[0, 1], [2, 4]]))  # node 4 is its own child
    with pytest.raises(ValueError, match="children"):
        t.depths()
    with pytest.raises(ValueError):
        t.cut(0.5)


@pytest.mark.parametrize("shape,n", [c for c in CASES if c[1] > 1])
def test_dendrogram_layout_is_scipys(shape, n):
    """The plots' layout equals scipy's dendrogram (links, order, leaves) exactly."""
    from scipy.cluster.hierarchy import dendrogram

    from jaxhc.plot import _dendrogram_coords

    t = make_tree(shape, n, seed=n + 6)
    info = dendrogram(t.to_linkage(), no_plot=True, link_color_func=lambda i: str(int(i)))
    icoord, dcoord, nodes, leaves = _dendrogram_coords(t)
    np.testing.assert_array_equal(icoord, np.asarray(info["icoord"]))
    np.testing.assert_array_equal(dcoord, np.asarray(info["dcoord"]))
    assert nodes.tolist() == [int(c) for c in info["color_list"]]
    assert leaves.tolist() == info["leaves"]


def test_plots_of_a_deep_tree():
    """A 3000-leaf caterpillar (beyond scipy's recursive dendrogram) draws, as a plain tree
    and as a BHC result."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from jaxhc.plot import plot_bhc, plot_dendrogram

    t = Tree(caterpillar(3000))
    ax = plot_dendrogram(t, colors_by=np.arange(3000) % 3)
    assert len(ax.collections[0].get_segments()) == 2999
    plt.close(ax.figure)
    ax = plot_bhc(tree_with_result(t, 0))
    assert len([ln for ln in ax.lines if len(ln.get_xdata()) == 4]) == 2999
    plt.close(ax.figure)


@pytest.mark.parametrize("shape,n", CASES)
def test_same_hierarchy_matches_clusters(shape, n):
    """`same_hierarchy` (node ranges) agrees with comparing the sets of clusters: for the
    same hierarchy with children swapped and merges reordered, and for other trees."""
    t = make_tree(shape, n, seed=n + 7)
    rng = np.random.default_rng(n)
    ch = np.asarray(t.children).copy()
    swap = rng.uniform(size=n - 1) < 0.5
    ch[swap] = ch[swap][:, ::-1]
    assert t.same_hierarchy(Tree(ch)) and Tree(ch).same_hierarchy(t)
    # the same clusters built in another merge order: from the nested form (post-order)
    assert t.same_hierarchy(Tree.from_nested(t.to_nested()))
    for other in (make_tree(s, n, seed=n + 8) for s in SHAPES):
        assert t.same_hierarchy(other) == (t.clusters() == other.clusters())
    if n > 2:
        perm = rng.permutation(n)
        other = t.relabel_leaves(perm)
        assert t.same_hierarchy(other) == (t.clusters() == other.clusters())
