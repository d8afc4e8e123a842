"""What the scikit-learn estimators share: input checks, the cut's parameters, the key from
``random_state``, and the tree in scikit-learn's and scipy's conventions (rows in order of
height, heights monotone)."""

from __future__ import annotations

from numbers import Integral, Real
from typing import Optional

import numpy as np

#: the cut when neither ``merge_threshold`` nor ``n_clusters`` is given: BHC's own rule
DEFAULT_MERGE_THRESHOLD = 0.5


def check_dense(X, name: str = "X"):
    """``TypeError`` for sparse input (scipy.sparse arrays and matrices, pandas' sparse
    frames): the conjugate families read dense rows, NaN for missing entries, not zeros."""
    import scipy.sparse

    sparse = scipy.sparse.issparse(X)
    if not sparse and hasattr(X, "sparse") and hasattr(X, "dtypes"):  # a pandas DataFrame of sparse columns
        try:
            sparse = any(str(t).startswith("Sparse") for t in X.dtypes)
        except TypeError:
            sparse = False
    if sparse:
        raise TypeError(
            f"{name}: sparse input is not supported (BHC's families read every entry of a row, "
            f"and a missing entry is NaN, not 0); pass a dense array instead: {name}.toarray() for a "
            f"scipy.sparse array, {name}.sparse.to_dense() for a pandas DataFrame"
        )


def resolve_cut(merge_threshold, n_clusters, where: str = "") -> tuple:
    """``("threshold", t)`` or ``("n_clusters", k)`` from the two cut parameters: at most one
    of them may be given (``ValueError`` naming both otherwise); neither means
    ``merge_threshold=0.5``."""
    if merge_threshold is not None and n_clusters is not None:
        raise ValueError(
            f"{where}merge_threshold and n_clusters: give one of them, not both (got merge_threshold="
            f"{merge_threshold!r} and n_clusters={n_clusters!r}); leave one None"
        )
    if n_clusters is not None:
        if isinstance(n_clusters, bool) or not isinstance(n_clusters, Integral) or n_clusters < 1:
            raise ValueError(f"{where}n_clusters must be an integer >= 1, got {n_clusters!r}")
        return ("n_clusters", int(n_clusters))
    if merge_threshold is None:
        return ("threshold", DEFAULT_MERGE_THRESHOLD)
    if isinstance(merge_threshold, bool) or not isinstance(merge_threshold, Real):
        raise TypeError(f"{where}merge_threshold must be a number in [0, 1], got {merge_threshold!r}")
    if not 0.0 <= float(merge_threshold) <= 1.0:
        raise ValueError(f"{where}merge_threshold must be a probability in [0, 1], got {merge_threshold!r}")
    return ("threshold", float(merge_threshold))


def key_from_random_state(random_state):
    """A JAX key from scikit-learn's ``random_state``: an int seeds it directly
    (``random_state=0`` is ``jax.random.PRNGKey(0)``); ``None`` or a ``RandomState`` draw
    the seed from NumPy's generator (a new tree each fit for ``None``)."""
    import jax
    from sklearn.utils import check_random_state

    if isinstance(random_state, Integral) and not isinstance(random_state, bool):
        seed = int(random_state)
    else:
        seed = int(check_random_state(random_state).randint(np.iinfo(np.int32).max))
    return jax.random.PRNGKey(seed)


def monotone_linkage(children, log_r) -> tuple:
    """A binary tree of merge probabilities as a monotone linkage: ``(order, children,
    heights)`` with the merges re-numbered in order of height.

    The height of merge ``k`` is ``-log r_k`` (nats; 0 for a certain merge), lowered to the
    smallest of the merge and its ancestors, ``h_k = min(-log r_k, h_parent(k))``, so that
    no merge is above its parent; equal heights are then separated by the fewest ulps that
    make them strictly increasing in the order (height, merge index). So ``fcluster(Z, -log
    t, "distance")`` (the merges above height ``-log t`` undone) is BHC's own top-down cut
    at ``r_k < t`` (a node is split when it and all its ancestors have ``r < t``), and
    ``fcluster(Z, k, "maxclust")`` finds exactly ``k`` clusters for every ``k``.

    Args:
      children: int ``[n-1, 2]`` in merge order (node ``n + t`` made by merge ``t``).
      log_r: ``[n-1]`` log merge probabilities in merge order.

    Returns:
      ``order [n-1]`` (row ``i`` of the new numbering is merge ``order[i]``), ``children
      [n-1, 2]`` in the new numbering (each row ascending), ``heights [n-1]`` strictly
      increasing.
    """
    children = np.asarray(children, dtype=np.int64).reshape(-1, 2)
    m = children.shape[0]
    n = m + 1
    s = np.maximum(-np.asarray(log_r, dtype=np.float64).reshape(-1), 0.0)
    parent = np.full(m, -1, dtype=np.int64)
    inner = children >= n
    parent[children[inner] - n] = np.nonzero(inner)[0]
    h = s.copy()
    for t in range(m - 2, -1, -1):  # parents are made after their children
        p = parent[t]
        if p >= 0 and h[p] < h[t]:
            h[t] = h[p]
    order = np.lexsort((np.arange(m), h))  # by height, then merge index (children first)
    heights = h[order]
    for i in range(1, m):
        if heights[i] <= heights[i - 1]:
            heights[i] = np.nextafter(heights[i - 1], np.inf)
    new_id = np.arange(2 * n - 1, dtype=np.int64)
    new_id[n + order] = n + np.arange(m)
    new_children = np.sort(new_id[children[order]], axis=1)
    return order, new_children, heights


def cut_n_clusters(tree, heights, k: int) -> np.ndarray:
    """Labels ``[n]`` of the ``k``-cluster cut of a tree whose rows are in order of strictly
    increasing ``heights``: the ``k - 1`` highest merges undone."""
    n = tree.n_leaves
    if k > n:
        raise ValueError(f"n_clusters must be at most the number of samples ({n}), got {k}")
    threshold = -np.inf if k == n else float(heights[n - k - 1])
    return tree.cut(threshold).astype(np.int64)


def node_clusters(children, labels) -> np.ndarray:
    """The cluster of every node ``[2n-1]``: a leaf's label; an inner node's when both its
    children are in the same cluster (the cluster's own node and those below it), else -1
    (the nodes above the cut)."""
    labels = np.asarray(labels, dtype=np.int64)
    n = labels.shape[0]
    g = np.full(2 * n - 1, -1, dtype=np.int64)
    g[:n] = labels
    for t, (a, b) in enumerate(np.asarray(children)):
        if g[a] == g[b]:
            g[n + t] = g[a]
    return g


def check_positive_int(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def family_tuple(family) -> Optional[tuple]:
    """``family`` (None, a name, or a sequence of names) as a tuple of names or None."""
    if family is None:
        return None
    if isinstance(family, str):
        return (family,)
    try:
        names = tuple(family)
    except TypeError:
        raise TypeError(f"family must be None, a family name or a sequence of names, got {family!r}") from None
    if not names or not all(isinstance(f, str) for f in names):
        raise TypeError(f"family must be None, a family name or a non-empty sequence of names, got {family!r}")
    return names
