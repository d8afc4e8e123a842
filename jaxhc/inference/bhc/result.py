"""`BHCResult`, the output of greedy BHC (`jaxhc.bhc`) and randomized BHC (`jaxhc.rbhc`), and
its host-side assembly from a search's per-merge outputs (`assemble_result`)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import gammaln as _host_gammaln

from ...components import Component
from ...tree import Tree

__all__ = ["BHCResult", "assemble_result", "result_from_nodes"]


class BHCResult(NamedTuple):
    """The output of `bhc` (and `rbhc`).

    Fields (``n`` points, nodes ``0 .. 2n-2`` as in `jaxhc.tree.Tree`):
      tree: the hierarchy; ``tree.heights`` is the merge order, ``tree.values["log_r"]``.
      log_evidence: ``log p(D | T)`` at the root.
      log_r: ``[n-1]`` log posterior of the merged hypothesis of every inner node (merge order).
      dpm_lower_bound: ``log p(D|T) + log d_root + log Gamma(alpha) - log Gamma(n + alpha)``,
        a lower bound on the DPM log marginal likelihood (Corollary of Theorem 1).
      log_d, log_pT, log_h1, log_1mr: ``[2n-1]`` per node (leaves: ``log_r = 0``).
      node_stats: sufficient statistics of every node, leading axis ``2n-1`` (NumPy arrays
        when the search ran on the host: `NormalInverseWishart` at ``d >= GRAM_MIN_D``).
      component, alpha: the model the tree was built with.
    """

    tree: Tree
    log_evidence: jax.Array
    log_r: jax.Array
    dpm_lower_bound: jax.Array
    log_d: jax.Array
    log_pT: jax.Array
    log_h1: jax.Array
    log_1mr: jax.Array
    node_stats: Any
    component: Component
    alpha: jax.Array

    @property
    def n_points(self) -> int:
        return self.tree.n_leaves

    def cut(self, threshold: float = 0.5) -> np.ndarray:
        """Flat labels ``[n]``: descend from the root, splitting nodes with ``r_k < threshold``."""
        if not (0.0 <= float(threshold) <= 1.0):
            raise ValueError(f"threshold must be a probability in [0, 1], got {threshold}")
        return self.tree.cut(threshold, scores=np.exp(np.asarray(self.log_r)))

    def n_clusters(self, threshold: float = 0.5) -> int:
        return int(np.max(self.cut(threshold)) + 1)

    def log_weights(self) -> np.ndarray:
        """``log w_k [2n-1]``, the weights of the predictive mixture; they sum to 1.

        ``w_k = r_k prod_{i in path(root .. parent(k))} (1 - r_i) n_{c(i)} / n_i`` where
        ``c(i)`` is the child of ``i`` on the path: with probability ``1 - r_i`` the data of
        node ``i`` are split as in its subtrees, and a new point joins the side with
        ``n_c`` of the ``n_i`` points with probability ``n_c / n_i`` (the DPM's
        rich-get-richer rule). Without the ``n_c / n_i`` factors (the form printed in the
        paper) the weights sum to more than 1.
        """
        n = self.tree.n_leaves
        log_r = np.concatenate([np.zeros(n), np.asarray(self.log_r)])
        return log_r + path_log_weights(self.tree, np.asarray(self.log_1mr), size_weighted=True)


def path_log_weights(tree: Tree, log_1mr: np.ndarray, size_weighted: bool) -> np.ndarray:
    """``[2n-1]``: the sum over the strict ancestors ``i`` of every node of ``log(1 - r_i)``
    (plus ``log(n_c / n_i)``, ``c`` the child of ``i`` on the path, with ``size_weighted``);
    ``O(n)`` memory and ``O(n log depth)`` time (`Tree.path_sums`)."""
    par = tree.parents()[:-1]  # the root is the last node
    edge = np.zeros(tree.n_nodes)
    edge[:-1] = log_1mr[par]
    if size_weighted:
        size = tree.sizes().astype(float)
        edge[:-1] += np.log(size[:-1] / size[par])
    return tree.path_sums(edge)


def _gather_nodes_host(leaf, inner):
    # `_gather_nodes` on the host: eager jnp slicing and concatenation compile per shape
    return jax.tree_util.tree_map(
        lambda a, b: jnp.asarray(np.concatenate([np.asarray(a), np.asarray(b)], axis=0)), leaf, inner
    )


def assemble_result(
    comp, alpha, n, leaf_stats, leaf_log_h1, children, out_stats, log_h1, log_d, log_pT, log_r, log_1mr, node_stats=None
):
    """Host-side assembly of a BHCResult from per-merge outputs (ids in 0..2n-2);
    ``node_stats``, when given, are the statistics of all nodes (leaves first) and replace
    ``leaf_stats`` and ``out_stats``."""
    dtype = np.asarray(log_h1).dtype if n > 1 else np.float64
    log_alpha = np.log(alpha)
    node_log_h1 = np.concatenate([np.asarray(leaf_log_h1), np.asarray(log_h1)])
    node_log_d = np.concatenate([np.full(n, log_alpha), np.asarray(log_d)])
    node_log_pT = np.concatenate([np.asarray(leaf_log_h1), np.asarray(log_pT)])
    node_log_1mr = np.concatenate([np.full(n, -np.inf), np.asarray(log_1mr)])
    log_r = np.asarray(log_r, dtype=dtype)
    stats = _gather_nodes_host(leaf_stats, out_stats) if node_stats is None else node_stats
    return result_from_nodes(comp, alpha, children, log_r, node_log_h1, node_log_d, node_log_pT, node_log_1mr, stats)


def result_from_nodes(
    comp, alpha, children, log_r, node_log_h1, node_log_d, node_log_pT, node_log_1mr, node_stats, validate=False
):
    """A BHCResult from per-node arrays ``[2n-1]`` (leaves first), the inner nodes'
    ``log_r [n-1]`` and ``children [n-1, 2]`` in merge order (``validate``: check the tree)."""
    n = len(node_log_pT) // 2 + 1
    log_r = np.asarray(log_r)
    tree = Tree(
        np.asarray(children, np.int64).reshape(-1, 2), heights=np.arange(1, n, dtype=float), values={"log_r": log_r}
    )
    if validate:
        tree = tree.validate()
    log_ev = np.asarray(node_log_pT)[-1]
    # on the host (scipy): eagerly, three tiny XLA programs compile in a fresh process
    a = float(np.asarray(alpha))
    bound = log_ev + np.asarray(node_log_d)[-1] + _host_gammaln(a) - _host_gammaln(n + a)
    return BHCResult(
        tree,
        jnp.asarray(log_ev),
        jnp.asarray(log_r),
        jnp.asarray(bound),
        jnp.asarray(node_log_d),
        jnp.asarray(node_log_pT),
        jnp.asarray(node_log_h1),
        jnp.asarray(node_log_1mr),
        node_stats,
        comp,
        jnp.asarray(alpha),
    )
