"""Hierarchies: the one tree type family of jaxhc.

`Tree` is a binary hierarchy over ``n`` leaves stored like a scipy linkage: merge ``t``
(``0 <= t < n - 1``) joins ``children[t, 0]`` and ``children[t, 1]`` into node ``n + t``;
leaves are nodes ``0 .. n-1``, the root is node ``2n - 2``. It is a JAX pytree, so it
crosses ``jit``/``vmap``; the conversions below run on concrete (host) arrays.

`ParentTree` is a general (possibly non-binary) rooted tree given by a parent array, used
by the Pitman-Yor diffusion tree and the nested CRP; it has the same conversions.
"""

from __future__ import annotations

import json
from typing import Any, Optional, Sequence

import jax
import numpy as np

__all__ = ["Tree", "ParentTree"]


def _as_host(x):
    return None if x is None else np.asarray(x)


def _int_array(x, name: str) -> np.ndarray:
    """``x`` as an int64 array after checking it holds integers (integral floats, as in a
    scipy linkage matrix, are accepted; fractions, NaN, strings are not)."""
    if isinstance(x, (str, bytes)):
        raise TypeError(f"{name} must hold integer ids, got {type(x).__name__}")
    try:
        arr = np.asarray(x)
    except ValueError as e:
        raise ValueError(f"{name} must be a rectangular array of integer ids: {e}") from None
    if arr.size == 0:
        return arr.astype(np.int64)
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise TypeError(f"{name} must hold integer ids, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr) & (arr == np.round(arr))):
        raise ValueError(
            f"{name} must hold integer ids, got non-integer values such as "
            f"{float(arr[~(np.isfinite(arr) & (arr == np.round(arr)))].ravel()[0])!r}"
        )
    return arr.astype(np.int64)


def _index_dtype(size: int):
    return np.int32 if size < 2**31 - 1 else np.int64


def _list_suffix_sums(nxt: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """Sums of ``vals`` from every element to the end of its linked list (itself included).

    ``nxt [E + 1]`` is the successor of every element; the last entry ``E`` is a sentinel
    with value 0 that is its own successor, and every list ends there. Pointer jumping
    (Wyllie's list ranking): ``ceil(log2(longest list))`` rounds of two gathers, so
    ``O(E log E)`` time without Python loops over the elements and ``O(E)`` memory (two
    buffers besides the inputs, which are overwritten)."""
    sentinel = nxt.shape[0] - 1
    buf_v = np.empty_like(vals)
    buf_n = np.empty_like(nxt)
    rounds = 0
    while not np.all(nxt == sentinel):
        if (1 << rounds) > sentinel:  # longer than all elements: a cycle (an invalid tree)
            raise ValueError("children: the tree has a cycle or a node used twice; call validate()")
        rounds += 1
        np.take(vals, nxt, out=buf_v)
        vals += buf_v
        np.take(nxt, nxt, out=buf_n)
        nxt, buf_n = buf_n, nxt
    return vals


@jax.tree_util.register_pytree_node_class
class Tree:
    """A binary hierarchy over ``n`` leaves (scipy-linkage layout).

    Args:
      children: int ``[n-1, 2]``; row ``t`` holds the two node ids merged into node ``n + t``.
        Every child id must be smaller than ``n + t`` (children are created before parents).
      heights: optional float ``[n-1]``, the height of each inner node (for drawing and
        height cuts). Defaults to the merge order ``1 .. n-1`` when needed.
      values: optional dict of per-inner-node arrays ``[n-1, ...]`` (e.g. BHC's ``log_r``).
    """

    def __init__(self, children, heights=None, values: Optional[dict] = None):
        self.children = children
        self.heights = heights
        self.values = dict(values) if values else {}

    # ---- pytree -----------------------------------------------------------------------
    def tree_flatten(self):
        keys = tuple(sorted(self.values))
        return (self.children, self.heights, tuple(self.values[k] for k in keys)), keys

    @classmethod
    def tree_unflatten(cls, keys, leaves):
        children, heights, vals = leaves
        return cls(children, heights, dict(zip(keys, vals)))

    # ---- basic properties ---------------------------------------------------------------
    @property
    def n_leaves(self) -> int:
        return int(np.shape(self.children)[0]) + 1

    @property
    def n_nodes(self) -> int:
        return 2 * self.n_leaves - 1

    @property
    def root(self) -> int:
        return self.n_nodes - 1

    def __repr__(self):
        return f"Tree(n_leaves={self.n_leaves})"

    def validate(self) -> "Tree":
        """Checks the linkage layout; returns self or raises ``ValueError``."""
        ch = np.asarray(self.children)
        if ch.size and (ch.dtype == bool or not np.issubdtype(ch.dtype, np.integer)):
            raise TypeError(f"children must hold integer node ids, got dtype {ch.dtype}")
        if ch.ndim != 2 or ch.shape[1] != 2:
            raise ValueError(f"children must have shape [n-1, 2], got {ch.shape}")
        n = ch.shape[0] + 1
        t = np.arange(n - 1)
        if np.any(ch < 0) or np.any(ch >= (n + t)[:, None]):
            raise ValueError("children: every child id must be in [0, n + t) for merge t")
        counts = np.bincount(ch.ravel(), minlength=2 * n - 1)
        if np.any(counts[: 2 * n - 2] != 1):
            raise ValueError("children: every node except the root must appear exactly once")
        if self.heights is not None and np.shape(self.heights) != (n - 1,):
            raise ValueError(f"heights must have shape [{n - 1}], got {np.shape(self.heights)}")
        if self.heights is not None:
            h = np.asarray(self.heights)
            if h.size and (h.dtype == object or np.iscomplexobj(h) or not np.issubdtype(h.dtype, np.number)):
                raise TypeError(f"heights must be real numbers, got dtype {h.dtype}")
            if np.any(np.isnan(h)):
                raise ValueError("heights must not be NaN")
        return self

    # ---- traversals -------------------------------------------------------------------
    # Everything below runs in O(n) memory and O(n log n) time or better, without Python
    # recursion or Python loops over the nodes (trees of 10^6 leaves, caterpillars
    # included); only `leaf_sets` (and `clusters`, whose answer is that big) are quadratic.
    def parents(self) -> np.ndarray:
        """Parent id of every node ``[2n-1]`` (``-1`` for the root)."""
        ch = np.asarray(self.children)
        n = self.n_leaves
        par = np.full(2 * n - 1, -1, dtype=np.int64)
        par[ch[:, 0]] = n + np.arange(n - 1)
        par[ch[:, 1]] = n + np.arange(n - 1)
        return par

    def _tour(self):
        """Successors ``[E + 1]`` of the events of the depth-first tour (left child first),
        ``E = 3n - 2``: event ``k < 2n - 1`` visits leaf ``k`` or enters inner node ``k``;
        event ``k + n - 1`` leaves inner node ``k``; event ``E`` is the end (a sentinel)."""
        ch = np.asarray(self.children, dtype=np.int64).reshape(-1, 2)
        n = self.n_leaves
        m, E = 2 * n - 1, 3 * n - 2
        idx = _index_dtype(E + 1)
        nxt = np.full(E + 1, E, dtype=idx)
        a, b = ch[:, 0], ch[:, 1]
        nxt[n:m] = a  # entering k: the left child's first event (its own id) follows
        nxt[np.where(a < n, a, a + (n - 1))] = b  # the left subtree done: the right child
        nxt[np.where(b < n, b, b + (n - 1))] = np.arange(m, E, dtype=idx)  # then k's exit
        nxt[m - 1 if n == 1 else E - 1] = E
        nxt[E] = E
        return nxt

    def leaf_ranges(self):
        """Leaves in depth-first order, and the range of that order under every node.

        Returns ``(order [n], start [2n-1], end [2n-1])`` (int64): ``order`` is
        `leaf_order`, and the leaves under node ``k`` are exactly ``order[start[k]:end[k]]``
        (so ``end - start`` are the `sizes`, and node ``j`` is below node ``k`` iff
        ``start[k] <= start[j] and end[j] <= end[k]``). ``O(n)`` memory, ``O(n log n)``
        time (list ranking of the Euler tour); the linear-memory replacement of `leaf_sets`.
        """
        n = self.n_leaves
        if n == 1:
            return np.zeros(1, np.int64), np.zeros(1, np.int64), np.ones(1, np.int64)
        m = 2 * n - 1
        nxt = self._tour()
        cnt = np.zeros(nxt.shape[0], dtype=nxt.dtype)
        cnt[:n] = 1  # leaf visits
        cnt = _list_suffix_sums(nxt, cnt)  # leaves at or after every event
        start = n - cnt[:m].astype(np.int64)
        end = np.empty(m, np.int64)
        end[:n] = start[:n] + 1
        end[n:] = n - cnt[m : 3 * n - 2]
        order = np.empty(n, np.int64)
        order[start[:n]] = np.arange(n)
        return order, start, end

    def sizes(self) -> np.ndarray:
        """Number of leaves under every node ``[2n-1]``."""
        _, start, end = self.leaf_ranges()
        return end - start

    def leaf_sets(self) -> np.ndarray:
        """Boolean membership ``[2n-1, n]``: row ``k`` marks the leaves under node ``k``.

        Dense: ``(2n - 1) * n`` bytes (20 GB at ``n = 10^5``), so only for small trees; the
        library's operations on results use `leaf_ranges` (``O(n)`` memory) instead.
        """
        ch = np.asarray(self.children)
        n = self.n_leaves
        m = np.zeros((2 * n - 1, n), dtype=bool)
        m[np.arange(n), np.arange(n)] = True
        for t in range(n - 1):
            m[n + t] = m[ch[t, 0]] | m[ch[t, 1]]
        return m

    def bitmasks(self) -> np.ndarray:
        """Leaf set of every node as an integer bitmask ``[2n-1]`` (leaf ``i`` is bit ``i``).

        Needs ``n <= 62`` so the masks fit in int64.
        """
        n = self.n_leaves
        if n > 62:
            raise ValueError(f"bitmasks need n_leaves <= 62, got {n}; use leaf_ranges() (or leaf_sets(), dense)")
        ch = np.asarray(self.children)
        b = np.zeros(2 * n - 1, dtype=np.int64)
        b[:n] = np.left_shift(np.int64(1), np.arange(n, dtype=np.int64))
        for t in range(n - 1):
            b[n + t] = b[ch[t, 0]] | b[ch[t, 1]]
        return b

    def clusters(self) -> set:
        """The set of leaf sets (frozensets) of all nodes; equal for equal hierarchies.

        Its size is the sum of the clusters' sizes (``O(n^2)`` for a caterpillar)."""
        order, start, end = self.leaf_ranges()
        return {frozenset(order[s:e].tolist()) for s, e in zip(start.tolist(), end.tolist())}

    def same_hierarchy(self, other: "Tree") -> bool:
        """Whether two trees have the same clusters (ignores child order and merge order).

        ``O(n)`` memory: every cluster of ``other`` must occupy one node's range of this
        tree's depth-first leaf order (both trees have ``2n - 1`` distinct clusters)."""
        n = self.n_leaves
        if n != other.n_leaves:
            return False
        order, start, end = self.leaf_ranges()
        pos = np.empty(n, np.int64)
        pos[order] = np.arange(n)
        # the first and last position of every node of `other`, children before parents
        lo, hi = pos.tolist() + [0] * (n - 1), pos.tolist() + [0] * (n - 1)
        ch = np.asarray(other.children, np.int64).reshape(-1, 2)
        for t0 in range(0, n - 1, 1 << 16):
            for k, (a, b) in enumerate(ch[t0 : t0 + (1 << 16)].tolist(), start=n + t0):
                lo[k] = lo[a] if lo[a] < lo[b] else lo[b]
                hi[k] = hi[a] if hi[a] > hi[b] else hi[b]
        lo_a, hi_a = np.asarray(lo, np.int64), np.asarray(hi, np.int64) + 1
        if not np.array_equal(hi_a - lo_a, other.sizes()):
            return False
        return bool(np.all(np.isin(lo_a * (n + 1) + hi_a, start * (n + 1) + end)))

    def leaf_order(self) -> np.ndarray:
        """Leaves in left-to-right drawing order (depth first, left child first)."""
        return self.leaf_ranges()[0]

    def path_sums(self, values) -> np.ndarray:
        """``[2n-1]``: for every node, the sum of ``values [2n-1]`` over the node and its
        ancestors (the root included). ``O(n)`` memory, ``O(n log depth)`` time (pointer
        jumping on the parents); equal to the sum in root-to-node order up to rounding."""
        vals = np.asarray(values)
        if vals.shape != (self.n_nodes,):
            raise ValueError(f"values must have shape [{self.n_nodes}], got {vals.shape}")
        par = self.parents()
        m = par.shape[0]
        nxt = np.where(par < 0, m, par).astype(_index_dtype(m + 1))
        nxt = np.append(nxt, nxt.dtype.type(m))
        acc = np.append(vals, np.zeros((), vals.dtype))
        return _list_suffix_sums(nxt, acc)[:m]

    def depths(self) -> np.ndarray:
        """Number of edges from the root to every node ``[2n-1]``."""
        ones = np.ones(self.n_nodes, np.int64)
        ones[-1] = 0
        return self.path_sums(ones)

    # ---- cuts -------------------------------------------------------------------------
    def cut(self, threshold: float, scores=None) -> np.ndarray:
        """Flat cluster labels ``[n]`` (0, 1, ... in order of first leaf) from a top-down cut.

        Starting at the root, an inner node is split into its children when its height is
        ``> threshold`` (with ``scores=None``) or, when per-inner-node ``scores [n-1]`` are
        given, when its score is ``< threshold`` (BHC: split where ``r_k < 0.5``); otherwise
        all its leaves form one cluster. ``O(n)`` memory, ``O(n log n)`` time.
        """
        n = self.n_leaves
        try:
            bad_threshold = np.ndim(threshold) != 0 or np.isnan(float(threshold))
        except (TypeError, ValueError):
            raise TypeError(f"threshold must be a number, got {threshold!r}") from None
        if bad_threshold:
            raise ValueError(f"threshold must be a number (not NaN), got {threshold!r}")
        if scores is None:
            h = np.asarray(self.heights) if self.heights is not None else np.arange(1, n, dtype=float)
            split = h > threshold
        else:
            scores = np.asarray(scores)
            if scores.shape != (n - 1,):
                raise ValueError(f"scores must have shape [{n - 1}], got {scores.shape}")
            split = scores < threshold
        order, start, end = self.leaf_ranges()
        # the clusters are the nodes that are not split but all of whose ancestors are: the
        # maximal ranges among the unsplit nodes (leaves included); in preorder (by start,
        # larger first) a range is maximal iff it starts at or after every earlier one's end
        keep = np.concatenate([np.ones(n, bool), ~np.asarray(split, bool)])
        cand = np.flatnonzero(keep)
        pre = cand[np.lexsort((-end[cand], start[cand]))]
        reach = np.maximum.accumulate(end[pre])
        top = np.ones(pre.shape[0], bool)
        top[1:] = start[pre[1:]] >= reach[:-1]
        groups = pre[top]  # ranges tiling 0 .. n-1 from left to right
        labels = np.empty(n, np.int64)
        labels[order] = np.repeat(np.arange(groups.shape[0]), end[groups] - start[groups])
        # relabel in order of first appearance
        _, first = np.unique(labels, return_index=True)
        rank = np.argsort(np.argsort(first))
        return rank[labels]

    # ---- conversions ------------------------------------------------------------------
    def to_linkage(self) -> np.ndarray:
        """scipy linkage matrix ``[n-1, 4]`` (children, height, size).

        Heights default to the merge order; they are made non-decreasing (running maximum)
        so ``scipy.cluster.hierarchy.dendrogram`` draws without crossings.
        """
        n = self.n_leaves
        ch = np.asarray(self.children, dtype=float)
        h = np.arange(1, n, dtype=float) if self.heights is None else np.asarray(self.heights, float)
        h = np.maximum.accumulate(h)
        s = self.sizes()[n:].astype(float)
        return np.column_stack([ch, h, s])

    @classmethod
    def from_linkage(cls, Z) -> "Tree":
        """Tree from a scipy linkage matrix ``[n-1, 4]`` (heights from column 2)."""
        Z = np.asarray(Z)
        if Z.dtype == object or np.iscomplexobj(Z) or not (np.issubdtype(Z.dtype, np.number) or Z.size == 0):
            raise TypeError(f"Z must be a real numeric linkage matrix [n-1, 4], got dtype {Z.dtype}")
        if Z.ndim != 2 or Z.shape[1] != 4:
            raise ValueError(f"Z must be a linkage matrix [n-1, 4], got shape {Z.shape}")
        if np.any(np.isnan(Z[:, 2])):
            raise ValueError("Z: the merge heights (column 2) must not be NaN")
        return cls(_int_array(Z[:, :2], "Z[:, :2] (the merged node ids)"), heights=Z[:, 2].astype(float)).validate()

    def to_newick(
        self,
        labels: Optional[Sequence[Any]] = None,
        branch_lengths: bool = False,
        inner_labels: Optional[Sequence[Any]] = None,
    ) -> str:
        """Newick string; leaf names from ``labels`` (default: leaf ids).

        With ``branch_lengths=True`` edges get the height difference parent - child
        (leaves at height 0). ``inner_labels`` (``[n-1]``, in merge order) names the inner
        nodes, written after their closing parenthesis as support values are (e.g. BHC's
        ``r_k``: ``(a,b)0.97:0.1``). Written along the depth-first tour without recursion,
        in ``O(n)`` memory besides the string and the names.
        """
        n = self.n_leaves
        names = None if labels is None else [_newick_name(l) for l in labels]
        if names is not None and len(names) != n:
            raise ValueError(f"labels must have length n_leaves={n}, got {len(names)}")
        inner = None
        if inner_labels is not None:
            inner = [_newick_name(l) for l in inner_labels]
            if len(inner) != n - 1:
                raise ValueError(f"inner_labels must have length n_leaves - 1={n - 1}, got {len(inner)}")
        if n == 1:
            return (str(0) if names is None else names[0]) + ";"
        m, E = 2 * n - 1, 3 * n - 2
        ch = np.asarray(self.children, dtype=np.int64)
        right = np.zeros(m, bool)
        right[ch[:, 1]] = True
        blen = None
        if branch_lengths:
            h = np.zeros(m)
            h[n:] = self.to_linkage()[:, 2]
            par = self.parents()
            blen = h[par[:-1]] - h[:-1]  # the root (last node) has no edge
        nxt = self._tour()
        ones = np.ones(E + 1, dtype=nxt.dtype)
        ones[E] = 0
        tour = np.empty(E, np.int64)
        tour[E - _list_suffix_sums(nxt, ones)[:E]] = np.arange(E)
        root = m - 1
        pieces = []
        for c0 in range(0, E, _NEWICK_CHUNK):
            ev = tour[c0 : c0 + _NEWICK_CHUNK]
            node = np.where(ev < m, ev, ev - (n - 1))
            comma = (right[node] & (ev < m)).tolist()
            if blen is not None:
                bl = [f":{x:.6g}" for x in blen[np.minimum(node, root - 1)].tolist()]
            out = []
            for i, (e, k) in enumerate(zip(ev.tolist(), node.tolist())):
                if e < n:  # a leaf
                    s = str(k) if names is None else names[k]
                    if comma[i]:
                        s = "," + s
                elif e < m:  # entering inner node k
                    out.append(",(" if comma[i] else "(")
                    continue
                else:  # leaving inner node k
                    s = ")" if inner is None else ")" + inner[k - n]
                if blen is not None and k != root:
                    s += bl[i]
                out.append(s)
            pieces.append("".join(out))
        return "".join(pieces) + ";"

    def to_dict(self) -> dict:
        """JSON-ready dict: ``{"n_leaves", "children", "heights"?, "values"?}``."""
        d = {"n_leaves": self.n_leaves, "children": np.asarray(self.children).tolist()}
        if self.heights is not None:
            d["heights"] = np.asarray(self.heights, float).tolist()
        if self.values:
            d["values"] = {k: np.asarray(v).tolist() for k, v in self.values.items()}
        return d

    def to_json(self, **kw) -> str:
        """``json.dumps(self.to_dict(), **kw)``; without ``kw`` the same text is written in
        chunks, without the dict's Python lists (``O(n)`` memory besides the string)."""
        if kw or not all(isinstance(k, str) for k in self.values):
            return json.dumps(self.to_dict(), **kw)
        parts = ['{"n_leaves": ', json.dumps(self.n_leaves), ', "children": ', _json_list(self.children)]
        if self.heights is not None:
            parts += [', "heights": ', _json_list(np.asarray(self.heights, float))]
        if self.values:
            vals = [json.dumps(k) + ": " + _json_list(v) for k, v in self.values.items()]
            parts += [', "values": {', ", ".join(vals), "}"]
        return "".join(parts) + "}"

    @classmethod
    def from_dict(cls, d: dict) -> "Tree":
        if not isinstance(d, dict) or "children" not in d:
            raise ValueError(
                f"a Tree dict needs a 'children' entry (rows [left, right]), got "
                f"{sorted(d) if isinstance(d, dict) else type(d).__name__}"
            )
        h = d.get("heights")
        vals = {k: np.asarray(v) for k, v in d.get("values", {}).items()}
        children = _int_array(d["children"], "children")
        if children.size == 0:
            children = children.reshape(0, 2)
        if children.ndim != 2 or children.shape[1] != 2:
            raise ValueError(f"children must have shape [n-1, 2], got {children.shape}")
        return cls(children, None if h is None else np.asarray(h, float), vals).validate()

    @classmethod
    def from_json(cls, s: str) -> "Tree":
        return cls.from_dict(json.loads(s))

    @classmethod
    def from_nested(cls, nested) -> "Tree":
        """Tree from nested pairs of leaf ids, e.g. ``((0, 1), (2, (3, 4)))``.

        Leaves must be exactly ``0 .. n-1``. Merges are numbered in post-order.
        """
        rows: list = []
        leaves: list = []

        def count(x):
            if isinstance(x, (tuple, list)):
                if len(x) != 2:
                    raise ValueError(f"from_nested: every inner node needs 2 children, got {x!r}")
                count(x[0])
                count(x[1])
            elif isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)):
                leaves.append(int(x))
            else:
                raise TypeError(f"from_nested: leaves must be integer ids, got {x!r}")

        count(nested)
        n = len(leaves)
        if sorted(leaves) != list(range(n)):
            raise ValueError(f"from_nested: leaves must be 0..{n - 1} once each, got {sorted(leaves)}")

        def build(x):
            if not isinstance(x, (tuple, list)):
                return int(x)
            a, b = build(x[0]), build(x[1])
            rows.append((a, b))
            return n + len(rows) - 1

        build(nested)
        if n == 1:
            return cls(np.zeros((0, 2), np.int64))
        return cls(np.asarray(rows, np.int64)).validate()

    def to_nested(self):
        """Nested tuples of leaf ids (inverse of ``from_nested``)."""
        n = self.n_leaves
        ch = np.asarray(self.children)
        memo = list(range(n)) + [None] * (n - 1)
        for t in range(n - 1):
            memo[n + t] = (memo[ch[t, 0]], memo[ch[t, 1]])
        return memo[self.root]

    def to_parent(self) -> "ParentTree":
        """The same hierarchy as a `ParentTree` (node ids unchanged; heights, if any, become
        times from the root at 0 to the leaves at 1)."""
        h = None
        if self.heights is not None:
            # ParentTree times grow from the root (0) to the leaves (1), as diffusion trees
            hh = np.concatenate([np.zeros(self.n_leaves), self.to_linkage()[:, 2]])
            top = hh.max()
            h = 1.0 - hh / top if top > 0 else np.ones_like(hh)
        return ParentTree(self.parents(), self.n_leaves, h)

    def relabel_leaves(self, perm) -> "Tree":
        """Tree whose leaf ``perm[i]`` plays the role of leaf ``i`` in this tree."""
        perm = _int_array(perm, "perm")
        n = self.n_leaves
        if sorted(perm.tolist()) != list(range(n)):
            raise ValueError("perm must be a permutation of 0..n-1")
        mapping = np.concatenate([perm, np.arange(n, 2 * n - 1)])
        return Tree(mapping[np.asarray(self.children)], self.heights, self.values)


_NEWICK_CHUNK = 1 << 16  # tour events written per chunk by `Tree.to_newick`
_JSON_CHUNK = 1 << 14  # rows per chunk of `Tree.to_json`


def _json_list(x) -> str:
    """``json.dumps(np.asarray(x).tolist())``, converted ``_JSON_CHUNK`` rows at a time."""
    arr = np.asarray(x)
    if arr.ndim == 0:
        return json.dumps(arr.tolist())
    body = [json.dumps(arr[i : i + _JSON_CHUNK].tolist())[1:-1] for i in range(0, arr.shape[0], _JSON_CHUNK)]
    return "[" + ", ".join(body) + "]"


def _newick_name(x) -> str:
    s = str(x)
    if any(c in s for c in " ,;:()[]'\t\n"):
        s = "'" + s.replace("'", "''") + "'"
    return s


@jax.tree_util.register_pytree_node_class
class ParentTree:
    """A rooted tree of any arity given by parents.

    Args:
      parent: int ``[m]``; ``parent[k]`` is the parent of node ``k``, ``-1`` for the root.
        Nodes ``0 .. n_leaves-1`` are the leaves (data points).
      n_leaves: number of leaves.
      heights: optional float ``[m]`` (e.g. PYDT divergence times; leaves at 1.0).
    """

    def __init__(self, parent, n_leaves: int, heights=None):
        self.parent = parent
        self.n_leaves = int(n_leaves)
        self.heights = heights

    def tree_flatten(self):
        return (self.parent, self.heights), self.n_leaves

    @classmethod
    def tree_unflatten(cls, n_leaves, leaves):
        return cls(leaves[0], n_leaves, leaves[1])

    def __repr__(self):
        return f"ParentTree(n_nodes={int(np.shape(self.parent)[0])}, n_leaves={self.n_leaves})"

    @property
    def n_nodes(self) -> int:
        return int(np.shape(self.parent)[0])

    @property
    def root(self) -> int:
        roots = np.flatnonzero(np.asarray(self.parent) < 0)
        if roots.size != 1:
            raise ValueError(f"a ParentTree needs exactly one root, found {roots.size}")
        return int(roots[0])

    def children_lists(self) -> list:
        par = np.asarray(self.parent)
        ch = [[] for _ in range(self.n_nodes)]
        for k, p in enumerate(par):
            if p >= 0:
                ch[p].append(k)
        return ch

    def validate(self) -> "ParentTree":
        par = np.asarray(self.parent)
        if par.dtype == bool or not np.issubdtype(par.dtype, np.integer):
            raise TypeError(f"parent must hold integer node ids, got dtype {par.dtype}")
        m = par.shape[0] if par.ndim else 0
        if par.ndim != 1:
            raise ValueError(f"parent must be 1-D, got shape {par.shape}")
        if self.n_leaves < 1 or self.n_leaves > m:
            raise ValueError(f"n_leaves must be in [1, {m}], got {self.n_leaves}")
        root = self.root
        if np.any((par < -1) | (par >= m)):
            raise ValueError("parent ids out of range")
        # every node reaches the root without cycles
        for k in range(m):
            seen, j = 0, k
            while j != root:
                j = par[j]
                seen += 1
                if j < 0 or seen > m:
                    raise ValueError(f"node {k} does not reach the root (cycle or second root)")
        ch = self.children_lists()
        if any(ch[k] for k in range(self.n_leaves)):
            raise ValueError("leaves 0..n_leaves-1 must have no children")
        empty = [k for k in range(self.n_leaves, m) if not ch[k]]
        if empty:
            raise ValueError(f"inner nodes must have children; nodes {empty[:5]} have none")
        return self

    def leaf_sets(self) -> np.ndarray:
        """Boolean membership ``[m, n_leaves]``."""
        par = np.asarray(self.parent)
        m, n = self.n_nodes, self.n_leaves
        out = np.zeros((m, n), dtype=bool)
        for i in range(n):
            j = i
            while j >= 0:
                out[j, i] = True
                j = par[j]
        return out

    def clusters(self) -> set:
        return {frozenset(np.flatnonzero(r).tolist()) for r in self.leaf_sets() if r.any()}

    def to_newick(self, labels: Optional[Sequence[Any]] = None, branch_lengths: bool = False) -> str:
        n = self.n_leaves
        names = [str(i) for i in range(n)] if labels is None else [_newick_name(l) for l in labels]
        if len(names) != n:
            raise ValueError(f"labels must have length n_leaves={n}, got {len(names)}")
        ch = self.children_lists()
        par = np.asarray(self.parent).tolist()
        h = None if self.heights is None else np.asarray(self.heights, float)
        out: list = []
        stack: list = [self.root]  # k: enter node k; ~k: leave it; None: a comma
        while stack:
            k = stack.pop()
            if k is None:
                out.append(",")
                continue
            if k >= 0 and k >= n:
                out.append("(")
                stack.append(~k)
                for i, c in enumerate(reversed(ch[k])):
                    stack.append(c)
                    if i < len(ch[k]) - 1:
                        stack.append(None)
                continue
            if k >= 0:
                out.append(names[k])
            else:
                k = ~k
                out.append(")")
            if branch_lengths and h is not None and par[k] >= 0:
                out.append(f":{h[k] - h[par[k]]:.6g}")
        return "".join(out) + ";"

    def to_dict(self) -> dict:
        d = {"n_leaves": self.n_leaves, "parent": np.asarray(self.parent).tolist()}
        if self.heights is not None:
            d["heights"] = np.asarray(self.heights, float).tolist()
        return d

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **kw)

    @classmethod
    def from_dict(cls, d: dict) -> "ParentTree":
        h = d.get("heights")
        return cls(
            np.asarray(d["parent"], np.int64), d["n_leaves"], None if h is None else np.asarray(h, float)
        ).validate()

    @classmethod
    def from_json(cls, s: str) -> "ParentTree":
        return cls.from_dict(json.loads(s))
