"""The rows of greedy BHC's search (`jaxhc.inference.bhc.greedy`): the log marginals of one
cluster merged with every slot, tile by tile, and the argmax helpers of its lazy best-partner
bookkeeping. Kept apart so the search loop stays readable; every function here is traced
inside the search's compiled programs."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...components.base import staged_elimination

__all__ = ["argmax_first", "top2", "SLOT_TILE", "slot_log_marginals", "tiled_slots"]


def argmax_first(x):
    """First index of the maximum along the last axis (as ``jnp.argmax``; a max reduction
    and a min over indices, several times faster than XLA's argmax on CPU)."""
    io = jnp.arange(x.shape[-1])
    # a NaN maximum matches nothing: clip to a valid index, so loops driven by it terminate
    # (callers check the scores for NaN afterwards)
    i = jnp.min(jnp.where(x == jnp.max(x, axis=-1, keepdims=True), io, x.shape[-1]), axis=-1)
    return jnp.minimum(i, x.shape[-1] - 1)


def top2(x):
    """``(values [..., 2], indices [..., 2])`` of the two largest entries along the last axis,
    ties to the lower index (as ``lax.top_k(x, 2)``, without its sort)."""
    io = jnp.arange(x.shape[-1])
    i = argmax_first(x)
    y = jnp.where(io == i[..., None], -jnp.inf, x)
    j = argmax_first(y)
    v1 = jnp.max(x, axis=-1)
    v2 = jnp.max(y, axis=-1)
    return jnp.stack([v1, v2], -1), jnp.stack([i, j], -1)


#: the greedy loop's rows of slot log marginals run in tiles of at most this many slots
#: (from two tiles on): a tile's intermediates (the posterior entries and the
#: elimination's trailing entries, ~55 batch vectors at d = 10) stay in the core's cache.
#: Measured (benchmarks/bhc_tiles.py): NIW d = 10, n = 1000 0.70 -> 0.44 s, n = 2000 2.19 ->
#: 1.67 s, compile ~1 s shorter, n = 4000 unchanged in fresh processes (~7 s); 50 binary
#: columns, n = 2000: 11.4 -> 1.9 s
SLOT_TILE = 256


def slot_log_marginals(comp, cache, x, slots, dtype, active=None, empty=None):
    """``log p(D_x + D_s)`` ``[n]`` of the statistics ``x`` merged with each slot ``s`` of
    ``slots`` (leading axis ``n``), slot ``empty`` (an index, optional) read as the empty
    set: from ``2 * SLOT_TILE`` slots on, equal tiles of at most `SLOT_TILE` slots in a
    loop where ``n`` splits so (`tiled_slots`), tiles without an ``active`` slot skipped
    (-inf); else in one batch (staged: see `components.base.staged_elimination`). Values
    in ``dtype`` (given, so the family's log marginal is traced once, not again for its
    type: ~0.3 s of tracing at d = 10)."""
    n = jax.tree_util.tree_leaves(slots)[0].shape[0]

    def f(s, lo=0):
        if empty is not None:
            m = jax.tree_util.tree_leaves(s)[0].shape[0]
            at = jnp.arange(m) + lo == empty
            s = jax.tree_util.tree_map(
                lambda y: jnp.where(at.reshape((m,) + (1,) * (y.ndim - 1)), jnp.zeros((), y.dtype), y), s
            )
        return comp.merged_log_marginal(x, s, cache).astype(dtype)

    k = -(-n // SLOT_TILE)
    if n < 2 * SLOT_TILE or n % k:
        with staged_elimination():
            return f(slots)
    # k equal tiles (`tiled_slots` pads n so), each sliced (and its slot `empty` zeroed) where
    # it is read, so XLA copies only the live tiles, once (zeroing slot `empty` in all slots
    # first cost a copy of every slot: ~0.15 ms a merge at n = 4000, d = 10)
    T = n // k

    def tile(i):
        return f(jax.tree_util.tree_map(lambda a: jax.lax.dynamic_slice_in_dim(a, i * T, T), slots), i * T)

    if active is None:
        return jax.lax.map(tile, jnp.arange(k)).reshape(n)
    # merged clusters keep the smaller slot, so the high tiles empty first
    skip = lambda i: jnp.full((T,), -jnp.inf, dtype)
    live = jnp.any(active.reshape(k, T), axis=1)
    return jax.lax.map(lambda i: jax.lax.cond(live[i], tile, skip, i), jnp.arange(k)).reshape(n)


def tiled_slots(n: int) -> int:
    """The smallest slot count ``>= n`` that `slot_log_marginals` splits into equal tiles
    of at most `SLOT_TILE` (at most one slot per tile more than ``n``)."""
    if n < 2 * SLOT_TILE:
        return n
    k = -(-n // SLOT_TILE)
    return k * -(-n // k)
