"""Bitmask helpers shared by the trellis programs: subsets of a size, their splits, gathers
of feature pytrees."""

from __future__ import annotations

import itertools
from functools import lru_cache

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["level_tables", "take_rows", "take_in_bounds", "splits_of", "select_features"]


@lru_cache(maxsize=None)
def level_tables(n: int, k: int):
    """Subsets of size k of n elements and the positions of their set bits (host arrays)."""
    combos = np.array(list(itertools.combinations(range(n), k)), dtype=np.int32)
    masks = np.sum(np.left_shift(np.int64(1), combos.astype(np.int64)), axis=1).astype(np.int32)
    return masks, combos


def take_rows(tree, idx, in_bounds: bool = False):
    """Rows ``idx`` of every leaf of the feature pytree ``tree`` (``in_bounds``: the indices
    are known to lie in range, `take_in_bounds`)."""
    if in_bounds:
        return jax.tree_util.tree_map(lambda x: take_in_bounds(x, idx), tree)
    return jax.tree_util.tree_map(lambda x: jnp.take(x, idx, axis=0), tree)


def take_in_bounds(table, idx):
    """``table[idx]`` (rows of ``table`` along its first axis) for indices known to lie in
    ``[0, len(table))``: a gather with no index wrap, clamp or fill (2-20% of a split loop
    whose gathers are most of its work)."""
    dn = jax.lax.GatherDimensionNumbers(
        offset_dims=tuple(range(idx.ndim, idx.ndim + table.ndim - 1)), collapsed_slice_dims=(0,), start_index_map=(0,)
    )
    mode = jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS
    return jax.lax.gather(table, idx[..., None], dn, (1, *table.shape[1:]), mode=mode)


def splits_of(S_pos, k):
    """Left masks ``[c, 2^(k-1) - 1]`` of every split of the parents with bit positions
    ``S_pos [c, k]``; the left side holds the lowest element."""
    P = 2 ** (k - 1) - 1
    j = jnp.arange(P, dtype=jnp.int32)[None, :]
    L = jnp.left_shift(jnp.int32(1), S_pos[:, :1])
    for b in range(k - 1):
        L = L | (((j >> b) & 1) << S_pos[:, b + 1 : b + 2])
    return L


def select_features(cond, a, b):
    """Elementwise ``where`` on feature pytrees whose leaves may have trailing axes."""

    def sel(x, y):
        c = cond.reshape(cond.shape + (1,) * (max(x.ndim, y.ndim) - cond.ndim))
        return jnp.where(c, x, y)

    return jax.tree_util.tree_map(sel, a, b)
