"""Operations on a result at 10^4 .. 10^6 leaves (issue 59, part 1): time and traced memory.

Usage::

    python benchmarks/tree_ops.py [--sizes 10000,100000,1000000] [--shapes coalescent,caterpillar]
                                  [--baseline-max 10000] [--out PATH]

Trees are built directly with NumPy (no clustering run): ``coalescent`` merges two uniformly
chosen clusters at every step (depth ~ log n, the shape of a BHC tree on unstructured
data), ``caterpillar`` adds one leaf per merge (depth n - 1, the worst case for anything
recursive). Each tree gets random ``r_k`` in a `BHCResult` (only the tree-level fields are
filled) and 10 random classes. Every operation runs once untimed-for-memory (wall time), then
once under ``tracemalloc`` (peak traced bytes above the tree itself, which is allocated
before tracing starts; tracemalloc slows the operations that make many Python strings,
Newick and JSON, so their time is the untraced call's). Operations: ``res.cut(0.5)``,
``res.n_clusters(0.5)``, ``res.log_weights()`` (the predictive weights), ``to_linkage``,
``to_newick``, ``to_json``, ``dendrogram_purity``, ``tree_level_labels`` (5 levels).

Baseline, where its dense ``[2n-1, n]`` membership matrix fits (``--baseline-max``, 10^4:
200 MB): the implementations before issue 59, in this file (``leaf_sets`` cuts, Python loops
over the nodes for sizes and weights, the recursive Newick writer, the Python-list leaf
ranges of dendrogram purity; JSON through the dict of Python lists, as ``to_json`` with
keyword arguments still does). Targets at 10^6 leaves: every operation <= 5 s and <= 200 MB
above the tree. JSON: benchmarks/results/tree_ops.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import tracemalloc

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _harness import result_doc, write_json  # noqa: E402

DEFAULT_OUT = os.path.join(HERE, "results", "tree_ops.json")


# ---------------------------------------------------------------------------------------
# trees
# ---------------------------------------------------------------------------------------
def coalescent(n, rng) -> np.ndarray:
    active = np.arange(n)
    size = n
    rows = np.empty((n - 1, 2), np.int64)
    picks = rng.random((n - 1, 2))
    for t in range(n - 1):  # swap-remove two uniform picks; the merge takes the second slot
        i = int(picks[t, 0] * size)
        a = active[i]
        size -= 1
        active[i] = active[size]
        j = int(picks[t, 1] * size)
        rows[t] = (a, active[j])
        active[j] = n + t
    return rows


def caterpillar(n) -> np.ndarray:
    return np.column_stack([np.r_[0, np.arange(n, 2 * n - 2)], np.arange(1, n)]).astype(np.int64)


def make_result(ch, rng):
    from jaxhc.inference.bhc.result import BHCResult
    from jaxhc.tree import Tree

    n = ch.shape[0] + 1
    r = rng.uniform(0.0, 1.0, n - 1)
    log_r = np.log(r)
    tree = Tree(ch, np.arange(1, n, dtype=float), {"log_r": log_r})
    log_1mr = np.concatenate([np.full(n, -np.inf), np.log1p(-r)])
    return BHCResult(tree, 0.0, log_r, 0.0, None, None, None, log_1mr, None, None, 1.0)


# ---------------------------------------------------------------------------------------
# the implementations before issue 59 (dense leaf sets, Python loops, recursion)
# ---------------------------------------------------------------------------------------
def old_sizes(tree):
    ch, n = np.asarray(tree.children), tree.n_leaves
    s = np.ones(2 * n - 1, dtype=np.int64)
    for t in range(n - 1):
        s[n + t] = s[ch[t, 0]] + s[ch[t, 1]]
    return s


def old_cut(tree, threshold, scores):
    n, ch = tree.n_leaves, np.asarray(tree.children)
    split = np.asarray(scores) < threshold
    labels = np.full(n, -1, dtype=np.int64)
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


def old_log_weights(res):
    tree = res.tree
    n, par = tree.n_leaves, tree.parents()
    size = old_sizes(tree).astype(float)
    log_r = np.concatenate([np.zeros(n), np.asarray(res.log_r)])
    l1 = np.asarray(res.log_1mr)
    acc = np.zeros(2 * n - 1)
    for k in range(2 * n - 3, -1, -1):
        p = par[k]
        acc[k] = acc[p] + l1[p] + np.log(size[k] / size[p])
    return log_r + acc


def old_to_linkage(tree):
    n = tree.n_leaves
    h = np.maximum.accumulate(np.asarray(tree.heights, float))
    return np.column_stack([np.asarray(tree.children, float), h, old_sizes(tree)[n:].astype(float)])


def old_to_newick(tree):
    n, ch = tree.n_leaves, np.asarray(tree.children)
    names = [str(i) for i in range(n)]

    def rec(k):
        if k < n:
            return names[k]
        a, b = ch[k - n]
        return f"({rec(a)},{rec(b)})"

    old = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(max(old, 4 * n + 100))
        return rec(tree.root) + ";"
    finally:
        sys.setrecursionlimit(old)


def old_dendrogram_purity(tree, labels):
    """The purity formula of jaxhc.metrics with the leaf ranges built in Python lists."""
    n = tree.n_leaves
    ch = np.asarray(tree.children, np.int64)
    kids = [()] * n + [tuple(r) for r in ch.tolist()]
    m = 2 * n - 1
    lo, hi, leaf_at = [0] * m, [0] * m, [0] * n
    pos, stack = 0, [tree.root]
    while stack:
        k = stack.pop()
        if k >= 0:
            lo[k] = pos
            if k < n:
                leaf_at[pos] = k
                pos += 1
                hi[k] = pos
            else:
                stack.append(~k)
                stack.extend(reversed(kids[k]))
        else:
            hi[~k] = pos
    lo, hi, leaf_at = np.asarray(lo), np.asarray(hi), np.asarray(leaf_at)
    _, codes = np.unique(labels, return_inverse=True)
    class_sizes = np.bincount(codes)
    c_at = codes[leaf_at]
    size = (hi - lo).astype(float)
    a, b, inner = ch[:, 0], ch[:, 1], np.arange(n, m)
    total = 0.0
    for c in range(class_sizes.shape[0]):
        cum = np.concatenate([[0.0], np.cumsum(c_at == c)])
        N = cum[hi] - cum[lo]
        total += float(np.sum(N[a] * N[b] * N[inner] / size[inner]))
    return total / float(np.sum(class_sizes * (class_sizes - 1.0)) / 2.0)


# ---------------------------------------------------------------------------------------
# measurement
# ---------------------------------------------------------------------------------------
def measure(fn):
    """``(seconds of an untraced call, peak traced MB of a second call, result)``."""
    t = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t
    del out
    tracemalloc.start()
    try:
        out = fn()
        peak = tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()
    return dt, peak, out


def run_tree(shape: str, n: int, baseline_max: int) -> list:
    """The rows of one tree: every operation, and the old implementation beside it."""
    from jaxhc.metrics import dendrogram_purity, tree_level_labels

    rng = np.random.default_rng(n)
    ch = coalescent(n, rng) if shape == "coalescent" else caterpillar(n)
    res = make_result(ch, rng)
    tree = res.tree
    labels = rng.integers(0, 10, n)
    scores = np.exp(np.asarray(res.log_r))
    tree_mb = (ch.nbytes + np.asarray(tree.heights).nbytes + 2 * np.asarray(res.log_r).nbytes) / 1e6
    ops = {
        "cut": (lambda: res.cut(0.5), lambda: old_cut(tree, 0.5, scores)),
        "n_clusters": (lambda: res.n_clusters(0.5), lambda: int(old_cut(tree, 0.5, scores).max()) + 1),
        "log_weights": (res.log_weights, lambda: old_log_weights(res)),
        "to_linkage": (tree.to_linkage, lambda: old_to_linkage(tree)),
        "to_newick": (tree.to_newick, lambda: old_to_newick(tree)),
        "to_json": (tree.to_json, lambda: json.dumps(tree.to_dict())),
        "dendrogram_purity": (lambda: dendrogram_purity(tree, labels), lambda: old_dendrogram_purity(tree, labels)),
        "level_labels_5": (lambda: tree_level_labels(tree, 5), None),
    }
    rows = []
    for name, (new_fn, old_fn) in ops.items():
        dt, peak, got = measure(new_fn)
        row = {"shape": shape, "n": n, "operation": name, "seconds": dt, "peak_mb": peak, "tree_mb": tree_mb}
        old_txt = ""
        if old_fn is not None and n <= baseline_max:
            odt, opeak, want = measure(old_fn)
            if isinstance(got, np.ndarray):
                exact = got.shape == np.shape(want) and bool(np.array_equal(got, want))
                same = exact or bool(np.allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True))
            elif isinstance(got, float):
                exact, same = got == want, bool(abs(got - want) <= 1e-12 * abs(want))
            else:
                exact = same = got == want
            row.update(old_seconds=odt, old_peak_mb=opeak, same=same, identical=exact)
            old_txt = f"{odt:>8.2f}{opeak:>8.0f}  {'exact' if exact else ('1e-12' if same else 'DIFF')}"
        rows.append(row)
        print(f"{shape:<12}{n:>9}  {name:<18}{dt:>8.2f}{peak:>9.1f}{old_txt}", flush=True)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--shapes", default="coalescent,caterpillar")
    ap.add_argument("--baseline-max", type=int, default=10_000)
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    hdr = f"{'shape':<12}{'n':>9}  {'operation':<18}{'time s':>8}{'peak MB':>9}{'old s':>8}{'old MB':>8}  same"
    print(hdr)
    print("-" * len(hdr))
    rows = []
    for shape in args.shapes.split(","):
        for n in (int(x) for x in args.sizes.split(",")):
            rows += run_tree(shape, n, args.baseline_max)
    doc = result_doc("tree_ops", __doc__, load_1min=os.getloadavg()[0], rows=rows)
    write_json(args.out, doc)


if __name__ == "__main__":
    main()
