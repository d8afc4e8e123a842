"""Jets as host arrays, shared by the jet studies: the eager checks of a jet's four-momenta,
of a list of jets and of a list of trees, and the momentum ranks of a jet's leaves
(`momentum_order`, `to_rank_tree`, `map_rank_trees`: the leaf ordering of the sparse
trellises of Fig. 7 of the trellis paper)."""

from __future__ import annotations

from typing import List

import numpy as np

from ..tree import Tree

__all__ = ["jet_array", "jet_list", "map_rank_trees", "momentum_order", "positive_int", "to_rank_tree", "tree_list"]


def jet_array(leaves, name: str = "leaves") -> np.ndarray:
    """Host float64 four-momenta ``[N, 4]`` with finite values (eager check)."""
    try:
        arr = np.asarray(leaves, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a numeric array of four-momenta [N, 4] (E, px, py, pz)") from None
    if arr.ndim != 2 or arr.shape[1] != 4 or arr.shape[0] == 0:
        raise ValueError(f"{name} must be four-momenta [N, 4] (E, px, py, pz) with N >= 1, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf values")
    return arr


def momentum_order(leaves) -> np.ndarray:
    """``[N]`` leaf indices by increasing 3-momentum norm ``|p|``: entry ``r`` is the leaf
    with the ``r``-th smallest ``|p|`` (ties keep the row order; a stable sort).

    This is the leaf ordering of the sparse trellises of Fig. 7 of the trellis paper ("leaves
    of the input trees ordered in increasing norm of their momentum vector").
    """
    arr = jet_array(leaves)
    return np.argsort(np.linalg.norm(arr[:, 1:], axis=1), kind="stable")


def to_rank_tree(tree: Tree, leaves) -> Tree:
    """``tree`` over a jet's leaves relabelled to momentum ranks: leaf ``r`` of the result is
    the leaf of ``leaves`` with the ``r``-th smallest ``|p|`` (a "rank tree", the form in
    which a sparse trellis is pre-built and then used on other jets by `map_rank_trees`).

    Args:
      tree: a `Tree` whose leaf ``i`` is row ``i`` of ``leaves``.
      leaves: the jet's four-momenta ``[N, 4]``.
    """
    if not isinstance(tree, Tree):
        raise TypeError(f"tree must be a jaxhc.Tree, got {type(tree).__name__}")
    order = momentum_order(leaves)
    if tree.n_leaves != len(order):
        raise ValueError(f"tree has {tree.n_leaves} leaves but leaves has {len(order)} rows")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return tree.relabel_leaves(rank)


def map_rank_trees(rank_trees, leaves) -> List[Tree]:
    """Seeds for one jet from rank trees: rank ``r`` becomes the jet's leaf with the ``r``-th
    smallest ``|p|`` (the inverse of `to_rank_tree` for that jet).

    Args:
      rank_trees: sequence of `Tree` over ``N`` leaves (from `simulator_seed_trees`,
        `beam_seed_trees` or `to_rank_tree`).
      leaves: the jet's four-momenta ``[N, 4]``.

    Returns:
      list of `Tree` over the jet's leaves (leaf ``i`` = row ``i``), in the same order, ready
      for `jaxhc.trellis.sparse_solve`.
    """
    order = momentum_order(leaves)
    out = []
    for k, t in enumerate(tree_list(rank_trees, "rank_trees")):
        if t.n_leaves != len(order):
            raise ValueError(f"rank_trees[{k}] has {t.n_leaves} leaves but leaves has {len(order)} rows")
        out.append(t.relabel_leaves(order))
    return out


def tree_list(trees, name: str) -> List[Tree]:
    if isinstance(trees, Tree):
        trees = [trees]
    try:
        trees = list(trees)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of jaxhc.Tree, got {type(trees).__name__}") from None
    for k, t in enumerate(trees):
        if not isinstance(t, Tree):
            raise TypeError(f"{name}[{k}] must be a jaxhc.Tree, got {type(t).__name__}")
    return trees


def positive_int(x, name: str, minimum: int = 1) -> int:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)) or x < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {x!r}")
    return int(x)


def jet_list(leaves_list, name: str) -> List[np.ndarray]:
    """A list of jets ``[N_b, 4]`` from a list/tuple of arrays or a `JetBatch`."""
    if hasattr(leaves_list, "jet") and hasattr(leaves_list, "n_leaves"):  # a JetBatch
        leaves_list = [leaves_list.jet(b) for b in range(len(leaves_list))]
    if isinstance(leaves_list, np.ndarray) and leaves_list.ndim == 2:
        raise ValueError(f"{name} must be a list of jets [N, 4] (or a JetBatch), not one jet")
    try:
        jets = list(leaves_list)
    except TypeError:
        raise TypeError(
            f"{name} must be a list of jets [N, 4] or a JetBatch, got {type(leaves_list).__name__}"
        ) from None
    if not jets:
        raise ValueError(f"{name} must hold at least one jet")
    return [jet_array(j, f"{name}[{b}]") for b, j in enumerate(jets)]
