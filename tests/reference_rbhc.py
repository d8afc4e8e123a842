"""Randomized BHC as it was before issue 18 (the recursion with one BHC call per node and
the final quantities from `tree_node_terms`), kept as a reference: with ``balance=0`` the
scaled `jaxhc.rbhc` must build the same tree with the same quantities."""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxhc.components import Component
from jaxhc.inference.bhc.greedy import (
    BHCResult,
    bhc_from_stats,
    check_alpha,
    check_component,
    node_stats_of_tree,
    tree_node_terms,
)
from jaxhc.tree import Tree

__all__ = ["rbhc_reference"]


def _bucket(m: int, lo: int = 64) -> int:
    return max(lo, 1 << int(np.ceil(np.log2(max(m, 1)))))


def _pad_rows(tree_stats, size):
    # on the host (host arrays in, device arrays out): eager jnp ops would compile per shape
    def pad(x):
        extra = size - x.shape[0]
        return jnp.asarray(np.concatenate([x, np.zeros((extra,) + x.shape[1:], x.dtype)], axis=0) if extra else x)

    return jax.tree_util.tree_map(pad, tree_stats)


_CHUNK = 1024


@jax.jit
def _side_scores(comp, node_stats, log_wa, log_wb, Xr):
    """Per row of ``Xr [_CHUNK, d]``: ``log p(x | T_a)`` and ``log p(x | T_b)``."""
    cache = comp.predictive_cache(node_stats)

    def one(x):
        lp = comp.log_predictive_cached(x, cache)
        return jax.scipy.special.logsumexp(log_wa + lp), jax.scipy.special.logsumexp(log_wb + lp)

    return jax.lax.map(one, Xr, batch_size=64)


@jax.jit
def _split(key):
    return tuple(jax.random.split(key))


def _subtree_log_weights(res: BHCResult, top: int) -> np.ndarray:
    """Predictive weights of the subtree rooted at ``top`` (``-inf`` outside it)."""
    lw = res.log_weights()
    log_r = np.concatenate([np.zeros(res.tree.n_leaves), np.asarray(res.log_r)])
    inside = res.tree.leaf_sets()  # [2m-1, m]
    members = np.zeros(res.tree.n_nodes, bool)
    sets = inside[top]
    members[: res.tree.n_nodes] = np.all(~inside | sets[None, :], axis=1)
    out = np.where(members, lw - (lw[top] - log_r[top]), -np.inf)
    return out


def rbhc_reference(
    key,
    X,
    component: Component,
    alpha: float = 1.0,
    *,
    subset_size: int = 64,
    leaf_size: int = 256,
    balance: float = 0.0,
    progress_bar: Optional[bool] = None,
) -> BHCResult:
    """Randomized BHC: a full binary tree over the rows of ``X`` in ``O(n log n)``.

    Args:
      key: a `jax.random` key (the random subsets; the same key gives the same tree).
      X: data ``[n, d]`` in the component's domain.
      component: a conjugate component family (see `jaxhc.components`).
      alpha: DPM concentration (> 0).
      subset_size: points in the random subset clustered by BHC at each level (>= 2).
      leaf_size: sides with at most this many points are clustered by plain BHC
        (>= subset_size).
      balance: a speed knob. When the smaller top subtree of the subset's tree holds less
        than this fraction of the subset, split at the subtree closest to half its size
        instead (the rest scored by its cluster predictive), so peeled-off outliers cannot
        make the recursion deep. Default 0: always the top split (Algorithm 2), which keeps
        BHC's structure (a cluster with outliers peeled off) and its evidence; a positive
        value is faster on data with many small outlying groups but can split a cluster.
      progress_bar: tqdm bar over points placed (default: n >= 5000).

    Returns:
      `BHCResult` of the final tree, every quantity computed exactly on it.
    """
    check_component(component)
    alpha = check_alpha(alpha)
    Xh = component.validate_data(X)
    n = Xh.shape[0]
    if not (isinstance(subset_size, (int, np.integer)) and subset_size >= 2):
        raise ValueError(f"subset_size must be an integer >= 2, got {subset_size!r}")
    if not (0.0 <= float(balance) < 0.5):
        raise ValueError(f"balance must be in [0, 0.5), got {balance!r}")
    if not (isinstance(leaf_size, (int, np.integer)) and leaf_size >= subset_size):
        raise ValueError(f"leaf_size must be an integer >= subset_size={subset_size}, got {leaf_size!r}")
    from jaxhc._internal.validation import check_key

    key = check_key(key, "key")
    leaf_all = component.leaf_stats(jnp.asarray(Xh))
    leaf_np = jax.tree_util.tree_map(np.asarray, leaf_all)
    if progress_bar is None:
        progress_bar = n >= 5000
    bar = None
    if progress_bar:
        from tqdm.auto import tqdm

        bar = tqdm(total=n, desc="RBHC points placed", leave=False)

    children: list = []
    next_id = [n]

    def stats_of(idx, size):
        sub = jax.tree_util.tree_map(lambda x: x[idx], leaf_np)
        return _pad_rows(sub, size)

    def plain(idx):
        m = len(idx)
        if m == 1:
            return int(idx[0])
        res = bhc_from_stats(component, alpha, stats_of(idx, _bucket(m)), n_valid=m)
        ch = np.asarray(res.tree.children)
        ids = list(int(i) for i in idx)
        for a, b in ch:
            ids.append(next_id[0])
            children.append((ids[a], ids[b]))
            next_id[0] += 1
        if bar is not None:
            bar.update(m)
        return ids[-1]

    def rec(idx, key):
        m = len(idx)
        if m <= leaf_size:
            return plain(idx)
        # a host generator seeded by the key (jax.random.permutation would compile once per m)
        seed = np.asarray(jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key)
        rng = np.random.default_rng(seed.astype(np.uint32).ravel().tolist())
        perm = rng.permutation(m)
        sub, rest = idx[perm[:subset_size]], idx[perm[subset_size:]]
        res = bhc_from_stats(component, alpha, stats_of(sub, _bucket(subset_size)), n_valid=subset_size)
        sets = res.tree.leaf_sets()
        sizes = sets.sum(axis=1)
        top_a, top_b = np.asarray(res.tree.children)[-1]
        # the two sides are T_a (a subtree; predictive = its BHC mixture) and the rest of
        # the subset. Normally T_a and T_b are the root's children (Algorithm 2); when that
        # split is very unbalanced (an outlier peeled off) we take the subtree whose size is
        # closest to half the subset, and the rest's cluster predictive, so the recursion
        # stays O(log n) deep.
        if min(sizes[top_a], sizes[top_b]) >= balance * subset_size:
            side_a = top_a
            wb_nodes = _subtree_log_weights(res, top_b)
            wb_rest = -np.inf
        else:
            cand = np.arange(res.tree.n_nodes - 1)
            side_a = int(cand[np.argmin(np.abs(sizes[cand] - subset_size / 2))])
            wb_nodes = np.full(res.tree.n_nodes, -np.inf)
            wb_rest = 0.0
        in_a = sets[side_a]
        wa = np.append(_subtree_log_weights(res, side_a), -np.inf)
        wb = np.append(wb_nodes, wb_rest)
        rest_stats = component.stats(jnp.asarray(Xh[sub[~in_a]]))
        node_stats = jax.tree_util.tree_map(
            lambda x, y: jnp.concatenate([x, y[None]], axis=0), res.node_stats, rest_stats
        )
        na, nb = in_a.sum(), (~in_a).sum()
        la, lb = [], []
        for c0 in range(0, len(rest), _CHUNK):
            rows = rest[c0 : c0 + _CHUNK]
            Xr = np.concatenate([Xh[rows], np.repeat(Xh[rows[:1]], _CHUNK - len(rows), 0)])
            sa, sb = _side_scores(component, node_stats, jnp.asarray(wa), jnp.asarray(wb), jnp.asarray(Xr))
            la.append(np.asarray(sa)[: len(rows)])
            lb.append(np.asarray(sb)[: len(rows)])
        la, lb = np.concatenate(la), np.concatenate(lb)
        to_a = (np.log(na) + la) > (np.log(nb) + lb)
        idx_a = np.concatenate([sub[in_a], rest[to_a]])
        idx_b = np.concatenate([sub[~in_a], rest[~to_a]])
        ka, kb = _split(key)
        left = rec(np.sort(idx_a), ka)
        right = rec(np.sort(idx_b), kb)
        children.append((min(left, right), max(left, right)))
        next_id[0] += 1
        return next_id[0] - 1

    try:
        rec(np.arange(n), key)
    finally:
        if bar is not None:
            bar.close()

    ch = np.asarray(children, np.int64).reshape(-1, 2)
    tree = Tree(ch).validate()
    node_stats = node_stats_of_tree(component, leaf_all, jnp.asarray(ch))
    terms = tree_node_terms(component, jnp.asarray(alpha, dtype=jnp.result_type(float)), node_stats, jnp.asarray(ch))
    log_r = np.asarray(terms.log_r)[n:]
    tree = Tree(ch, heights=np.arange(1, n, dtype=float), values={"log_r": log_r})
    return BHCResult(
        tree,
        terms.log_evidence,
        jnp.asarray(log_r),
        terms.dpm_lower_bound,
        terms.log_d,
        terms.log_pT,
        terms.log_h1,
        terms.log_1mr,
        node_stats,
        component,
        jnp.asarray(alpha),
    )
