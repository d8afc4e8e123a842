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
    def parents(self) -> np.ndarray:
        """Parent id of every node ``[2n-1]`` (``-1`` for the root)."""
        ch = np.asarray(self.children)
        n = self.n_leaves
        par = np.full(2 * n - 1, -1, dtype=np.int64)
        par[ch[:, 0]] = n + np.arange(n - 1)
        par[ch[:, 1]] = n + np.arange(n - 1)
        return par

    def sizes(self) -> np.ndarray:
        """Number of leaves under every node ``[2n-1]``."""
        ch = np.asarray(self.children)
        n = self.n_leaves
        s = np.ones(2 * n - 1, dtype=np.int64)
        for t in range(n - 1):
            s[n + t] = s[ch[t, 0]] + s[ch[t, 1]]
        return s

    def leaf_sets(self) -> np.ndarray:
        """Boolean membership ``[2n-1, n]``: row ``k`` marks the leaves under node ``k``."""
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
            raise ValueError(f"bitmasks need n_leaves <= 62, got {n}; use leaf_sets()")
        ch = np.asarray(self.children)
        b = np.zeros(2 * n - 1, dtype=np.int64)
        b[:n] = np.left_shift(np.int64(1), np.arange(n, dtype=np.int64))
        for t in range(n - 1):
            b[n + t] = b[ch[t, 0]] | b[ch[t, 1]]
        return b

    def clusters(self) -> set:
        """The set of leaf sets (frozensets) of all nodes; equal for equal hierarchies."""
        return {frozenset(np.flatnonzero(row).tolist()) for row in self.leaf_sets()}

    def same_hierarchy(self, other: "Tree") -> bool:
        """Whether two trees have the same clusters (ignores child order and merge order)."""
        return self.n_leaves == other.n_leaves and self.clusters() == other.clusters()

    def leaf_order(self) -> np.ndarray:
        """Leaves in left-to-right drawing order."""
        ch = np.asarray(self.children)
        n = self.n_leaves
        out, stack = [], [self.root]
        while stack:
            k = stack.pop()
            if k < n:
                out.append(k)
            else:
                a, b = ch[k - n]
                stack.append(b)
                stack.append(a)
        return np.asarray(out, dtype=np.int64)

    def depths(self) -> np.ndarray:
        """Number of edges from the root to every node ``[2n-1]``."""
        par = self.parents()
        d = np.zeros(self.n_nodes, dtype=np.int64)
        for k in range(self.n_nodes - 2, -1, -1):
            d[k] = d[par[k]] + 1
        return d

    # ---- cuts -------------------------------------------------------------------------
    def cut(self, threshold: float, scores=None) -> np.ndarray:
        """Flat cluster labels ``[n]`` (0, 1, ... in order of first leaf) from a top-down cut.

        Starting at the root, an inner node is split into its children when its height is
        ``> threshold`` (with ``scores=None``) or, when per-inner-node ``scores [n-1]`` are
        given, when its score is ``< threshold`` (BHC: split where ``r_k < 0.5``); otherwise
        all its leaves form one cluster.
        """
        n = self.n_leaves
        ch = np.asarray(self.children)
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
        labels = np.full(n, -1, dtype=np.int64)
        stack, groups = [self.root], []
        while stack:
            k = stack.pop()
            if k >= n and split[k - n]:
                stack.extend([ch[k - n, 1], ch[k - n, 0]])
            else:
                groups.append(k)
        sets = self.leaf_sets()
        for g, k in enumerate(groups):
            labels[sets[k]] = g
        # relabel in order of first appearance
        _, first = np.unique(labels, return_index=True)
        order = np.argsort(np.argsort(first))
        return order[labels]

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
        ``r_k``: ``(a,b)0.97:0.1``).
        """
        n = self.n_leaves
        ch = np.asarray(self.children)
        names = [str(i) for i in range(n)] if labels is None else [_newick_name(l) for l in labels]
        if len(names) != n:
            raise ValueError(f"labels must have length n_leaves={n}, got {len(names)}")
        if inner_labels is not None:
            inner = [_newick_name(l) for l in inner_labels]
            if len(inner) != n - 1:
                raise ValueError(f"inner_labels must have length n_leaves - 1={n - 1}, got {len(inner)}")
            names = names + inner
        h = np.zeros(2 * n - 1)
        h[n:] = self.to_linkage()[:, 2]
        par = self.parents()

        def rec(k):
            if k < n:
                s = names[k]
            else:
                a, b = ch[k - n]
                s = f"({rec(a)},{rec(b)})" + (names[k] if inner_labels is not None else "")
            if branch_lengths and par[k] >= 0:
                s += f":{h[par[k]] - h[k]:.6g}"
            return s

        return _iterative_newick(rec, self.root, n) + ";"

    def to_dict(self) -> dict:
        """JSON-ready dict: ``{"n_leaves", "children", "heights"?, "values"?}``."""
        d = {"n_leaves": self.n_leaves, "children": np.asarray(self.children).tolist()}
        if self.heights is not None:
            d["heights"] = np.asarray(self.heights, float).tolist()
        if self.values:
            d["values"] = {k: np.asarray(v).tolist() for k, v in self.values.items()}
        return d

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **kw)

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


def _newick_name(x) -> str:
    s = str(x)
    if any(c in s for c in " ,;:()[]'\t\n"):
        s = "'" + s.replace("'", "''") + "'"
    return s


def _iterative_newick(rec, root, n):
    # recursion depth can reach n for caterpillar trees; raise the limit locally
    import sys

    old = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(max(old, 4 * n + 100))
        return rec(root)
    finally:
        sys.setrecursionlimit(old)


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
        par = np.asarray(self.parent)
        h = None if self.heights is None else np.asarray(self.heights, float)

        def rec(k):
            s = names[k] if k < n else "(" + ",".join(rec(c) for c in ch[k]) + ")"
            if branch_lengths and h is not None and par[k] >= 0:
                s += f":{h[k] - h[par[k]]:.6g}"
            return s

        return _iterative_newick(rec, self.root, self.n_nodes) + ";"

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
