"""Evaluation metrics for hierarchical and flat clusterings.

* `dendrogram_purity` - exact dendrogram purity (Heller & Ghahramani, 2005) of a `Tree`
  or `ParentTree` against class labels, from per-node class counts in ``O(n C)``.
* Flat scores comparing two labelings, all from one (sparse) contingency table:
  `adjusted_rand_index`, `normalized_mutual_info` (arithmetic-mean normalisation, as
  scikit-learn's default), `f_measure` (clustering F-measure) and `purity`.
* `levelwise_scores` - the flat scores at every level of a fixed-depth hierarchy (nested CRP),
  after `extend_paths` (BHMC paper, Sec. 5 "Amazon": a path shorter than the compared
  depth repeats its last label); `tree_level_labels` gives such per-level labels for a
  `Tree` or `ParentTree` (Ward linkage, BHC, PYDT), so they compare level by level.
* `predictive_log_likelihood_summary` - mean and standard error of held-out log predictive
  values.

All functions are pure, run on host numpy arrays and raise ``ValueError`` (``TypeError`` for
a wrong kind of object) naming the offending argument for bad input (wrong shape or
length, empty input, NaN).
"""

from __future__ import annotations

import math
from typing import Dict, Tuple

import numpy as np

from jaxhc.tree import ParentTree, Tree

__all__ = [
    "dendrogram_purity",
    "adjusted_rand_index",
    "normalized_mutual_info",
    "f_measure",
    "purity",
    "levelwise_scores",
    "extend_paths",
    "tree_level_labels",
    "predictive_log_likelihood_summary",
]


# ---------------------------------------------------------------------------------------
# input checks
# ---------------------------------------------------------------------------------------
def _has_nan(x: np.ndarray) -> bool:
    if x.dtype.kind in "fc":
        return bool(np.isnan(x).any())
    if x.dtype.kind == "O":
        return any(v != v for v in x.ravel())  # NaN is the only value unequal to itself
    return False


def _check_labels(labels, name: str, n: int | None = None) -> np.ndarray:
    """1-D label array, checked; returns integer codes ``[n]`` in ``0 .. C-1``."""
    x = np.asarray(labels)
    if x.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {x.shape}")
    if x.size == 0:
        raise ValueError(f"{name} must not be empty")
    if _has_nan(x):
        raise ValueError(f"{name} contains NaN")
    if n is not None and x.shape[0] != n:
        raise ValueError(f"{name} must have length {n} (number of tree leaves), got {x.shape[0]}")
    _, codes = np.unique(x, return_inverse=True)
    return codes.reshape(-1).astype(np.int64)


# ---------------------------------------------------------------------------------------
# dendrogram purity
# ---------------------------------------------------------------------------------------
_CHUNK_ELEMS = 1 << 20  # at most this many entries per [nodes, classes] block (8 MB)


def _leaf_ranges(tree):
    """Parent ``[m]``, n_leaves, and the leaf interval ``[lo_k, hi_k)`` of every node.

    Leaves are numbered by their position in a depth-first order, so the leaves under any
    node ``k`` are exactly the positions ``lo_k <= p < hi_k``. Also returns ``leaf_at``
    ``[n]``, the leaf at each position.
    """
    if isinstance(tree, Tree):
        # vectorised (list ranking of the Euler tour), O(n) memory without Python objects
        tree.validate()
        order, lo, hi = tree.leaf_ranges()
        return tree.parents(), tree.n_leaves, lo, hi, order
    if isinstance(tree, ParentTree):
        par = np.asarray(tree.parent)
        if par.ndim != 1 or par.size == 0:
            raise ValueError(f"tree.parent must be a non-empty 1-D array, got shape {par.shape}")
        if par.dtype.kind not in "iu":
            raise ValueError(f"tree.parent must hold integers, got dtype {par.dtype}")
        par = par.astype(np.int64)
        m, n = par.shape[0], tree.n_leaves
        if n < 1 or n > m:
            raise ValueError(f"tree.n_leaves must be in [1, {m}], got {n}")
        if np.any((par < -1) | (par >= m)):
            raise ValueError("tree.parent: parent ids out of range")
        roots = np.flatnonzero(par < 0)
        if roots.size != 1:
            raise ValueError(f"tree.parent: need exactly one root, found {roots.size}")
        if np.any(par[par >= 0] < n):
            raise ValueError(f"tree.parent: leaves 0..{n - 1} must have no children")
        root = int(roots[0])
        kids = [[] for _ in range(m)]
        for k, p in enumerate(par.tolist()):
            if p >= 0:
                kids[p].append(k)
    else:
        raise TypeError(f"tree must be a jaxhc Tree or ParentTree, got {type(tree).__name__}")

    m = par.shape[0]
    lo, hi = [0] * m, [0] * m
    leaf_at = [0] * n
    pos, visited, stack = 0, 0, [root]
    while stack:  # iterative DFS; ~k marks the exit from node k
        k = stack.pop()
        if k >= 0:
            visited += 1
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
    if visited != m or pos != n:
        raise ValueError("tree.parent: some nodes do not reach the root (cycle or detached part)")
    return par, n, np.asarray(lo), np.asarray(hi), np.asarray(leaf_at)


def dendrogram_purity(tree, labels) -> float:
    """Exact dendrogram purity of ``tree`` with respect to class ``labels``.

    Dendrogram purity (Heller & Ghahramani, 2005): draw uniformly a pair of distinct leaves
    of the same class, take the leaves under their lowest common ancestor (LCA), and record
    the fraction of them in that class; purity is the expectation.

    Computed exactly from per-node class counts ``N[k, c]`` (built for all nodes at once
    from class cumulative sums along a depth-first leaf order). For a binary inner node
    ``k`` with children ``a, b`` the same-class pairs with LCA ``k`` number
    ``N[a, c] N[b, c]``, each contributing ``N[k, c] / size_k``. For a `ParentTree` the
    pairs with LCA ``k`` are ``P[k, c] - sum_children P[child, c]`` with
    ``P = N (N - 1) / 2``, which telescopes to ``sum_k P[k, c] (f[k, c] - f[parent(k), c])``
    with ``f = N / size``. Classes with a single member are dropped and the classes are
    processed in blocks, so memory stays bounded; time is ``O(n C)``.

    Args:
      tree: a `Tree` (binary, ``n`` leaves) or `ParentTree` (any arity; leaves are nodes
        ``0 .. n_leaves-1``).
      labels: ``[n]`` class label of every leaf (any comparable values).

    Returns:
      Dendrogram purity, a float in ``(0, 1]``.
    """
    par, n, lo, hi, leaf_at = _leaf_ranges(tree)
    codes = _check_labels(labels, "labels", n)
    class_sizes = np.bincount(codes)
    keep = class_sizes >= 2
    if not keep.any():
        raise ValueError("labels: no class has two members, so dendrogram purity is undefined")
    remap = np.full(class_sizes.shape[0], -1, np.int64)
    C = int(np.count_nonzero(keep))
    remap[keep] = np.arange(C)
    c_at = remap[codes[leaf_at]]  # class (or -1) of the leaf at each DFS position
    m = par.shape[0]
    size = (hi - lo).astype(np.float64)
    binary = isinstance(tree, Tree)
    if binary:
        ch = np.asarray(tree.children, np.int64)
        a, b, inner = ch[:, 0], ch[:, 1], np.arange(n, m)
        inv_size = 1.0 / size[inner]
    else:
        inv_size = np.divide(1.0, size, out=np.zeros(m), where=size > 0)
        nonroot = par >= 0

    total = 0.0
    width = max(1, min(C, _CHUNK_ELEMS // m))
    for c0 in range(0, C, width):
        w = min(width, C - c0)
        sel = np.flatnonzero((c_at >= c0) & (c_at < c0 + w))
        cum = np.zeros((n + 1, w))
        cum[sel + 1, c_at[sel] - c0] = 1.0
        np.cumsum(cum, axis=0, out=cum)
        N = cum[hi] - cum[lo]  # [m, w] class counts under every node
        if binary:
            total += float(np.sum(N[a] * N[b] * N[inner] * inv_size[:, None]))
        else:
            f = N * inv_size[:, None]
            f_par = np.zeros_like(f)
            f_par[nonroot] = f[par[nonroot]]
            total += float(np.sum(0.5 * N * (N - 1.0) * (f - f_par)))
    n_pairs = float(np.sum(class_sizes[keep] * (class_sizes[keep] - 1.0)) / 2.0)
    return total / n_pairs


# ---------------------------------------------------------------------------------------
# flat clustering scores
# ---------------------------------------------------------------------------------------
class _Contingency:
    """Sparse contingency table of two labelings: nonzero cells ``(row, col, count)``."""

    def __init__(self, labels_true, labels_pred):
        t = np.asarray(labels_true)
        p = np.asarray(labels_pred)
        a = _check_labels(t, "labels_true")
        b = _check_labels(p, "labels_pred")
        if a.shape[0] != b.shape[0]:
            raise ValueError(
                f"labels_true and labels_pred must have the same length, got {a.shape[0]} and {b.shape[0]}"
            )
        self.n = a.shape[0]
        self.row_sums = np.bincount(a)  # class sizes  [C]
        self.col_sums = np.bincount(b)  # cluster sizes [K]
        K = self.col_sums.shape[0]
        cells, nij = np.unique(a * K + b, return_counts=True)
        self.rows, self.cols, self.nij = cells // K, cells % K, nij


def _ari(ct: _Contingency) -> float:
    n = ct.n
    sum_sq = int(np.sum(ct.nij.astype(np.int64) ** 2))
    tp = sum_sq - n
    fp = int(np.sum(ct.col_sums.astype(np.int64) ** 2)) - sum_sq
    fn = int(np.sum(ct.row_sums.astype(np.int64) ** 2)) - sum_sq
    tn = n * n - fp - fn - sum_sq
    if fn == 0 and fp == 0:
        return 1.0
    return 2.0 * (tp * tn - fn * fp) / ((tp + fn) * (fn + tn) + (tp + fp) * (fp + tn))


def _entropy(counts: np.ndarray, n: int) -> float:
    p = counts[counts > 0] / n
    return float(-np.sum(p * np.log(p)))


def _nmi(ct: _Contingency) -> float:
    C, K = ct.row_sums.shape[0], ct.col_sums.shape[0]
    if C == K == 1:
        return 1.0
    if C == 1 or K == 1:
        return 0.0
    n = ct.n
    nij = ct.nij.astype(np.float64)
    outer = ct.row_sums[ct.rows].astype(np.float64) * ct.col_sums[ct.cols].astype(np.float64)
    mi = np.sum(nij / n * (np.log(nij) + math.log(n) - np.log(outer)))
    mi = max(float(mi), 0.0)
    if mi <= np.finfo(np.float64).eps:
        return 0.0
    norm = 0.5 * (_entropy(ct.row_sums, n) + _entropy(ct.col_sums, n))
    return float(mi / max(norm, np.finfo(np.float64).eps))


def _f_measure(ct: _Contingency) -> float:
    f1 = 2.0 * ct.nij / (ct.row_sums[ct.rows] + ct.col_sums[ct.cols])
    best = np.zeros(ct.row_sums.shape[0])
    np.maximum.at(best, ct.rows, f1)
    return float(np.sum(ct.row_sums * best) / ct.n)


def _purity(ct: _Contingency) -> float:
    best = np.zeros(ct.col_sums.shape[0], dtype=np.int64)
    np.maximum.at(best, ct.cols, ct.nij)
    return float(best.sum() / ct.n)


def adjusted_rand_index(labels_true, labels_pred) -> float:
    """Adjusted Rand index of two flat labelings (equals sklearn's ``adjusted_rand_score``).

    Args:
      labels_true: ``[n]`` reference class labels.
      labels_pred: ``[n]`` predicted cluster labels.

    Returns:
      ARI, a float in ``[-0.5, 1]``; 1 for identical partitions.
    """
    return _ari(_Contingency(labels_true, labels_pred))


def normalized_mutual_info(labels_true, labels_pred) -> float:
    """Normalised mutual information, ``MI / mean(H_true, H_pred)`` (sklearn's default).

    Args:
      labels_true: ``[n]`` reference class labels.
      labels_pred: ``[n]`` predicted cluster labels.

    Returns:
      NMI, a float in ``[0, 1]`` (1 when both labelings are a single cluster).
    """
    return _nmi(_Contingency(labels_true, labels_pred))


def f_measure(labels_true, labels_pred) -> float:
    """Clustering F-measure: class-size-weighted mean over classes of the best cluster F1.

    ``F = sum_c (n_c / n) max_k 2 n_ck / (n_c + n_k)``.

    Args:
      labels_true: ``[n]`` reference class labels.
      labels_pred: ``[n]`` predicted cluster labels.

    Returns:
      F-measure, a float in ``(0, 1]``.
    """
    return _f_measure(_Contingency(labels_true, labels_pred))


def purity(labels_true, labels_pred) -> float:
    """Flat purity: ``sum_k max_c n_ck / n`` (each cluster counted as its majority class).

    Args:
      labels_true: ``[n]`` reference class labels.
      labels_pred: ``[n]`` predicted cluster labels.

    Returns:
      Purity, a float in ``(0, 1]``.
    """
    return _purity(_Contingency(labels_true, labels_pred))


# ---------------------------------------------------------------------------------------
# fixed-depth hierarchies
# ---------------------------------------------------------------------------------------
def _check_depth(depth, name: str = "depth") -> int:
    if isinstance(depth, (bool, np.bool_)) or not isinstance(depth, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(depth).__name__}")
    if depth < 1:
        raise ValueError(f"{name} must be >= 1, got {depth}")
    return int(depth)


def _check_level_labels(level_labels, name: str) -> np.ndarray:
    """2-D integer label matrix ``[N, L]``, checked; returns it as int64."""
    x = np.asarray(level_labels)
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D [N, L], got shape {x.shape}")
    if x.size == 0:
        raise ValueError(f"{name} must not be empty, got shape {x.shape}")
    kind = x.dtype.kind
    if kind == "f":
        if np.isnan(x).any():
            raise ValueError(f"{name} contains NaN")
        if not np.isfinite(x).all() or np.any(x != np.round(x)):
            raise ValueError(f"{name} must hold integer labels, got non-integer values")
    elif kind == "O" and _has_nan(x):
        raise ValueError(f"{name} contains NaN")
    elif kind not in "biu":
        raise TypeError(f"{name} must hold integer labels (-1 for padding), got dtype {x.dtype}")
    try:
        return x.astype(np.int64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must hold integer labels (-1 for padding), got dtype {x.dtype}") from None


def _renumber(keys: np.ndarray) -> np.ndarray:
    """Codes ``0 .. k-1`` of the rows of ``keys [N, w]``, in order of first appearance."""
    if keys.shape[1] == 1:  # one column: a plain sort (the row-wise unique is much slower)
        _, first, inv = np.unique(keys[:, 0], return_index=True, return_inverse=True)
    else:
        _, first, inv = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    rank = np.empty(first.shape[0], np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.shape[0])
    return rank[inv.reshape(-1)]


def _extend(x: np.ndarray, depth, name: str) -> np.ndarray:
    """`extend_paths` of an already checked int64 ``[N, L]`` matrix."""
    N, L = x.shape
    D = L if depth is None else _check_depth(depth)
    valid = x >= 0
    if not valid[:, 0].all():
        i = int(np.flatnonzero(~valid[:, 0])[0])
        raise ValueError(f"{name}: row {i} has no valid label (its level-0 entry is negative)")
    gaps = valid[:, 1:] & ~valid[:, :-1]  # a valid entry right after a negative one
    if gaps.any():
        i = int(np.flatnonzero(gaps.any(axis=1))[0])
        raise ValueError(f"{name}: row {i} has a valid label after a negative (padding) entry")
    out = np.empty((N, D), np.int64)
    code = np.zeros(N, np.int64)  # the root: one common prefix
    for l in range(D):
        # a stopped path (and every path below level L-1) adds the marker -1 to its prefix,
        # so it stays apart from the paths that go on but keeps the partition of level l-1
        step = np.where(valid[:, l], x[:, l], -1) if l < L else np.full(N, -1, np.int64)
        code = _renumber(np.column_stack([code, step]))
        out[:, l] = code
    return out


def extend_paths(level_labels, depth=None) -> np.ndarray:
    """Per-level labels with short paths extended and labels made prefix-consistent.

    Level ``l`` of a row is identified with its whole prefix (the labels of levels
    ``0 .. l``), so two rows share a level-``l`` label iff they share the prefix; labels that
    are local to their parent (e.g. child indices) therefore become global. A row whose
    path ends above the compared depth repeats its last node below it ("extended to level 6
    by assigning the same cluster label as that in their last level", Sec. 5 "Amazon" of
    the BHMC paper), so at deeper levels it is a cluster of its own (with the rows ending
    at the same node), apart from the rows that go on.

    Args:
      level_labels: int ``[N, L]``; column ``l`` holds the labels at level ``l``; a negative
        entry (``-1``) means the path ended above that level. Every row needs a valid
        level-0 entry, and no valid entry may follow a negative one. Integer-valued floats
        are accepted.
      depth: compared number of levels ``D >= 1`` (default ``L``). ``D < L`` keeps the top
        ``D`` levels; ``D > L`` extends every row by repeating its last level.

    Returns:
      int ``[N, D]``; column ``l`` numbered ``0 .. k_l - 1`` in order of first appearance.
    """
    return _extend(_check_level_labels(level_labels, "level_labels"), depth, "level_labels")


def levelwise_scores(level_labels_true, level_labels_pred, depth=None) -> Dict[str, np.ndarray]:
    """Flat scores at every level of a fixed-depth hierarchy (e.g. a nested-CRP path).

    Both label matrices go through `extend_paths` to the same depth first (the evaluation of
    the BHMC paper, Sec. 5 "Amazon", after Kuang & Park): short paths repeat their last
    level, and level ``l`` labels are identified with the prefix of levels ``0 .. l`` (for a
    proper hierarchy whose labels are global node ids this changes nothing).

    Args:
      level_labels_true: int ``[N, L_true]``; column ``l`` holds the reference cluster labels
        at level ``l``, ``-1`` below the end of a shorter path.
      level_labels_pred: int ``[N, L_pred]``; predicted labels at each level, same padding
        (e.g. `tree_level_labels` of a tree, or BHMC's ``level_labels``).
      depth: number of compared levels ``D >= 1``; defaults to ``L_true``. Either matrix is
        extended (last level repeated) or truncated to it.

    Returns:
      ``{"purity", "nmi", "ari", "f_measure"}``, each a float array ``[D]`` (entry ``l`` is
      the score at level ``l``).
    """
    T = _check_level_labels(level_labels_true, "level_labels_true")
    P = _check_level_labels(level_labels_pred, "level_labels_pred")
    if T.shape[0] != P.shape[0]:
        raise ValueError(
            "level_labels_true and level_labels_pred must have the same number of rows N, "
            f"got {T.shape[0]} and {P.shape[0]}"
        )
    D = T.shape[1] if depth is None else _check_depth(depth)
    T = _extend(T, D, "level_labels_true")
    P = _extend(P, D, "level_labels_pred")
    out = {k: np.zeros(D) for k in ("purity", "nmi", "ari", "f_measure")}
    for l in range(D):
        ct = _Contingency(T[:, l], P[:, l])
        out["purity"][l] = _purity(ct)
        out["nmi"][l] = _nmi(ct)
        out["ari"][l] = _ari(ct)
        out["f_measure"][l] = _f_measure(ct)
    return out


def tree_level_labels(tree, depth) -> np.ndarray:
    """Per-level cluster labels ``[n, depth]`` of the leaves of a tree, cut at fixed depths.

    Column ``l - 1`` (``l = 1 .. depth``) labels every leaf by the node at depth
    ``min(l, depth(leaf))`` on its root-to-leaf path (the root has depth 0 and is left
    out): the subtrees hanging at depth ``l``, and a leaf reached at depth ``d <= l`` a
    singleton from level ``d`` on. This is the convention of `extend_paths`, so a Ward
    linkage or BHC tree compares level by level with BHMC's ``level_labels`` in
    `levelwise_scores`.

    Args:
      tree: a `Tree` (binary, ``n`` leaves) or `ParentTree` (any arity; leaves are nodes
        ``0 .. n_leaves-1``).
      depth: number of levels ``>= 1``.

    Returns:
      int ``[n, depth]``; column ``l`` numbered ``0 .. k_l - 1`` in order of first
      appearance among leaves ``0 .. n-1``.
    """
    if not isinstance(tree, (Tree, ParentTree)):
        raise TypeError(f"tree must be a jaxhc Tree or ParentTree, got {type(tree).__name__}")
    D = _check_depth(depth)
    par, n, lo, hi, order = _leaf_ranges(tree)  # validates the tree
    if isinstance(tree, Tree):
        cur, d = _clamped_ancestors(tree, D, lo, hi, order)
    else:
        cur, d = _clamped_ancestors_parent(par, n, D)
    out = np.empty((n, D), np.int64)
    for l in range(D, 0, -1):
        up = d[cur] > l
        cur = np.where(up, par[cur], cur)
        out[:, l - 1] = _renumber(cur[:, None])
    return out


def _clamped_ancestors(tree: Tree, D: int, lo, hi, order):
    """Per leaf the node at depth ``min(depth(leaf), D)`` on its root path ``[n]``, and the
    depth of every node, in ``O(n)`` memory: the nodes at depth ``D`` have disjoint leaf
    ranges, and a deeper leaf lies in exactly one of them."""
    n = tree.n_leaves
    d = tree.depths()
    at_d = np.flatnonzero(d == D)
    mark = np.zeros(n + 1, np.int64)
    mark[lo[at_d]] += at_d + 1
    mark[hi[at_d]] -= at_d + 1
    cover = np.cumsum(mark[:n])  # 1 + the depth-D node over each position, or 0
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n)
    leaves = np.arange(n)
    return np.where(d[:n] > D, cover[pos] - 1, leaves), d


def _clamped_ancestors_parent(par, n: int, D: int):
    """`_clamped_ancestors` of a `ParentTree` (parents ``par``), by a top-down pass."""
    par_list = par.tolist()
    m = len(par_list)
    kids = [[] for _ in range(m)]
    root = -1
    for k, p in enumerate(par_list):
        if p >= 0:
            kids[p].append(k)
        else:
            root = k
    # top-down pass: node depth, and the ancestor-or-self at depth min(depth(k), D)
    d = [0] * m
    clamp = [0] * m
    clamp[root] = root
    stack = [root]
    while stack:
        k = stack.pop()
        for c in kids[k]:
            d[c] = d[k] + 1
            clamp[c] = c if d[c] <= D else clamp[k]
            stack.append(c)
    d = np.asarray(d, np.int64)
    return np.asarray(clamp, np.int64)[:n], d  # node at depth min(depth(leaf), D), per leaf


# ---------------------------------------------------------------------------------------
# held-out likelihood
# ---------------------------------------------------------------------------------------
def predictive_log_likelihood_summary(log_probs) -> Tuple[float, float]:
    """Mean and standard error of per-point held-out log predictive values.

    Args:
      log_probs: float ``[n]``, ``log p(x_i | training data)`` of each held-out point
        (``-inf`` is allowed and propagates).

    Returns:
      ``(mean, stderr)`` with ``stderr = std(ddof=1) / sqrt(n)``; ``stderr`` is NaN for
      ``n = 1``.
    """
    x = np.asarray(log_probs, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"log_probs must be 1-D [n], got shape {x.shape}")
    if x.size == 0:
        raise ValueError("log_probs must not be empty")
    if np.isnan(x).any():
        raise ValueError("log_probs contains NaN")
    mean = float(np.mean(x))
    if x.size == 1:
        return mean, float("nan")
    with np.errstate(invalid="ignore"):
        se = float(np.std(x, ddof=1) / math.sqrt(x.size))
    return mean, se
