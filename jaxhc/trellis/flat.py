"""The flat layout of a batch: every split of every problem packed into fixed-size chunks
and one ``lax.scan`` over them (`PreparedBatch`, `prepare_batch`). It gives the
differentiable ``log Z`` of many problems of different sizes (`log_partition_prepared`,
`log_partition_batch`) and, with a segment max / first argmax, the MAP of
`jaxhc.trellis.solve_batch`'s ``layout="flat"`` (`solve_flat`, `solve_flat_compact`)."""

from __future__ import annotations

from functools import lru_cache
from typing import Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .checks import check_batch_inputs
from .energies import Energy
from .invalid import InvalidProblems
from .subsets import level_tables, take_rows

__all__ = [
    "PreparedBatch",
    "prepare_batch",
    "log_partition_prepared",
    "log_partition_batch",
    "layout_batch",
    "layout_valid",
    "bucket_size",
    "solve_flat",
    "solve_flat_compact",
    "MAX_CHUNK_PAIRS",
]


class PreparedBatch(eqx.Module):
    """A host-validated batch laid out for `log_partition_prepared` (see `prepare_batch`).

    Every subset of every problem is one slot of a flat table (problem ``b`` owns the
    ``2^n_b`` slots from its offset, its subset with bitmask ``s`` at ``offset + s``). Every
    split ``(S, L, R)`` of every problem is one *pair*; the pairs are packed level by level
    (parents of 2, 3, ... elements) into chunks of ``chunk_size`` pairs, each parent's
    splits inside one chunk, and a ``lax.scan`` over the chunks runs the DP: one scan body,
    compiled once, whatever the sizes in the batch. A pytree (an ``eqx.Module``): the
    arrays are its leaves, the layout static, so it can be closed over or passed through
    ``jit``.

    Fields:
      leaves: ``[B, N_max, ...]`` the problems, padding rows from `Energy.pad_leaves`.
      subset_problem: ``[T]`` int32 problem of each slot; subset_mask: ``[T]`` int32 its
        bitmask within that problem (``T = sum_b 2^n_b``).
      singles: int32 slots of the one-element subsets.
      pairs: int32 ``(parent, left, right, segment)`` each ``[C, chunk_size]``: the slots of
        every split in chunk ``c`` and the index of its parent within the chunk (pairs that
        only fill a chunk copy its first pair and have segment ``chunk_size``: ignored).
      segment_slot: ``[C, chunk_size]`` int32 slot of each parent of a chunk (``T``: none).
      live: ``[C]`` bool; ``False`` for chunks of parents holding padding (only with
        ``group_by_size=False``): evaluated without gradient, never used.
      roots: ``[B]`` int32 slot of each problem's full set of real elements.
      num_slots: ``T``; chunk_size: pairs per chunk.
      index: ``[B_solved]`` int32 position of each laid-out problem in the caller's batch,
        when `prepare_batch` skipped problems that failed the checks (``on_invalid="skip"``);
        None when every problem is laid out.
      num_problems: the caller's batch size ``B`` (``-1``: as laid out).
      invalid: the `jaxhc.trellis.InvalidProblems` report of the skipped problems (None: none).

    ``batch_size`` counts the laid-out (valid) problems; `log_partition_prepared` returns
    ``[num_problems]`` values with NaN at the skipped ones, and `solved_part` the batch of
    the laid-out problems alone (its ``log Z`` has no NaN: sum it).
    """

    leaves: jax.Array
    subset_problem: jax.Array
    subset_mask: jax.Array
    singles: jax.Array
    pairs: tuple
    segment_slot: jax.Array
    live: jax.Array
    roots: jax.Array
    num_slots: int = eqx.field(static=True)
    chunk_size: int = eqx.field(static=True)
    index: Optional[jax.Array] = None
    num_problems: int = eqx.field(static=True, default=-1)
    invalid: Optional[InvalidProblems] = eqx.field(static=True, default=None)

    @property
    def batch_size(self) -> int:
        """Problems laid out (those that passed the checks)."""
        return int(self.roots.shape[0])

    def solved_part(self) -> "PreparedBatch":
        """The batch of the laid-out problems alone (no skipped ones, no report): what to
        sum ``log Z`` over."""
        if self.index is None and self.invalid is None:
            return self
        return PreparedBatch(*(getattr(self, f) for f in _CORE_FIELDS))


_CORE_FIELDS = (
    "leaves",
    "subset_problem",
    "subset_mask",
    "singles",
    "pairs",
    "segment_slot",
    "live",
    "roots",
    "num_slots",
    "chunk_size",
)

#: largest number of split evaluations per scan step of `log_partition_prepared`
MAX_CHUNK_PAIRS = 1 << 16


@lru_cache(maxsize=None)
def _host_splits(n: int, k: int):
    """Host ``(parent masks [C], left masks [C, 2^(k-1) - 1])`` of every split of the size-k
    subsets of n elements (the left side holds the lowest element; `splits_of` order)."""
    masks, pos = level_tables(n, k)
    j = np.arange(2 ** (k - 1) - 1, dtype=np.int64)[None, :]
    L = np.left_shift(np.int64(1), pos[:, :1].astype(np.int64))
    for b in range(k - 1):
        L = L | (((j >> b) & 1) << pos[:, b + 1 : b + 2].astype(np.int64))
    return masks.astype(np.int64), L


def prepare_batch(
    energy: Energy, leaves_padded, n_leaves=None, *, group_by_size: bool = True, on_invalid: str = "skip"
) -> PreparedBatch:
    """Validates a batch on the host once and lays it out for `log_partition_prepared`.

    Call it once, then evaluate the batch at many parameter values (optimisation loops,
    MCMC) without re-validating.

    Args:
      energy: the energy whose `Energy.check_batch` checks each problem (its parameter
        values do not matter; any instance of the same kind will do).
      leaves_padded: ``[B, N_max, ...]`` each problem's leaves in its first ``n_leaves[b]``
        rows; the remaining rows are never read (neither checked nor used).
      n_leaves: ``[B]`` integers in ``[1, N_max]``.
      group_by_size: lay each problem out at its own size (default: problem ``b`` costs
        ``(3^n_b + 1) / 2 - 2^n_b`` split evaluations); ``False``: every problem padded to
        ``N_max`` as in `solve_batch` (the subsets holding padding are evaluated too,
        ``3^N_max`` per problem, without gradient, and enter no real subset), for
        cross-checks.
      on_invalid: ``"skip"`` (default): problems that fail the checks are left out of the
        layout (warning once; `PreparedBatch.invalid` names them and why, and
        `log_partition_prepared` gives them NaN); ``"raise"``: raise
        `jaxhc.trellis.InvalidProblemsError` naming every one. A batch in which every
        problem fails raises either way (there is nothing to lay out).

    Returns:
      `PreparedBatch`.
    """
    # host work on concrete arrays even inside a traced function (under `jax.jit` of a
    # function of the energy's parameters, jnp ops on constants would otherwise be staged)
    with jax.ensure_compile_time_eval():
        lp, nl, n_max, invalid = check_batch_inputs(energy, leaves_padded, n_leaves, on_invalid)
        return layout_valid(lp, nl, n_max, invalid, group_by_size)


def layout_valid(lp, nl, n_max, invalid: InvalidProblems, group_by_size: bool = True) -> PreparedBatch:
    """`layout_batch` of the problems not in ``invalid``, with their positions and the
    report (`PreparedBatch.index`, ``invalid``) when some are left out."""
    if not invalid:
        return layout_batch(lp, nl, n_max, group_by_size)
    keep = np.ones(len(nl), bool)
    keep[list(invalid.index)] = False
    if not np.any(keep):
        raise ValueError(invalid.summary() + ": no problem is left to lay out")
    core = layout_batch(lp[keep], nl[keep], n_max, group_by_size)
    index = jnp.asarray(np.flatnonzero(keep).astype(np.int32))
    return PreparedBatch(*(getattr(core, f) for f in _CORE_FIELDS), index, len(nl), invalid)


def bucket_size(x: int) -> int:
    """The smallest of ``4, 5, 6, 7 x 2^k`` (and of 1..4) at least ``x``: padding a shape to
    its bucket costs < 25% and lets blocks of a large batch share compiled programs."""
    if x <= 4:
        return max(int(x), 1)
    step = 1 << (int(x - 1).bit_length() - 3)
    return -(-int(x) // step) * step


def layout_batch(lp, nl, n_max, group_by_size, bucket: bool = False, max_chunk: int = MAX_CHUNK_PAIRS):
    """`prepare_batch` after `validate_batch_inputs`. ``bucket``: chunks of `MAX_CHUNK_PAIRS` pairs,
    the slot and chunk counts padded to `bucket_size` (the blocks of `solve_batch`'s flat layout
    then mostly share one compiled program). ``max_chunk``: the most pairs per chunk (scan
    step) otherwise."""
    nl = nl.astype(np.int64)
    n_eff = nl if group_by_size else np.full(len(nl), n_max, np.int64)
    sizes = np.left_shift(1, n_eff)
    T_real = int(sizes.sum())
    T = bucket_size(T_real) if bucket else T_real
    if T >= 2**31 - 1:
        raise ValueError(f"leaves_padded: {T} subsets in all is above the int32 index range; split the batch")
    offs = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    sub_prob = np.concatenate([np.repeat(np.arange(len(nl)), sizes), np.zeros(T - T_real, np.int64)])
    sub_mask = np.concatenate([np.arange(s) for s in sizes] + [np.zeros(T - T_real, np.int64)])
    singles = np.concatenate([offs[b] + np.left_shift(1, np.arange(n_eff[b])) for b in range(len(nl))])
    if bucket:  # as many as slots (one shape fewer); past the table: dropped by the scatter
        singles = np.concatenate([singles, np.full(T - len(singles), T)])
    # every split of every problem, level by level; live: the parent holds real elements only
    levels = []
    for k in range(2, int(n_eff.max()) + 1):
        parts = {True: [], False: []}
        for n, m in sorted({(int(a), int(b)) for a, b in zip(n_eff, nl) if a >= k}):
            masks, L = _host_splits(n, k)
            off = offs[(n_eff == n) & (nl == m)][:, None]
            live = masks < (1 << m)
            for flag in (True, False):
                if np.any(live == flag):
                    s, l = masks[live == flag], L[live == flag]
                    parts[flag].append(
                        (off + s[None], off[:, :, None] + l[None], off[:, :, None] + (s[:, None] ^ l)[None])
                    )
        for flag in (True, False):
            if parts[flag]:
                S = np.concatenate([p[0].reshape(-1) for p in parts[flag]])
                P = 2 ** (k - 1) - 1
                levels.append(
                    (
                        S,
                        np.concatenate([p[1].reshape(-1, P) for p in parts[flag]]),
                        np.concatenate([p[2].reshape(-1, P) for p in parts[flag]]),
                        flag,
                    )
                )
    total = sum(L.size for _, L, _, _ in levels)
    p_max = max((L.shape[1] for _, L, _, _ in levels), default=1)
    target = total / (4 * max(len(levels), 1))  # about 4 chunks per level: little padding
    M = int(max(p_max, min(max_chunk, 1 << max(0, int(np.ceil(np.log2(max(target, 1))))))))
    if bucket:
        M = max(p_max, MAX_CHUNK_PAIRS)
    C = sum(-(-len(S) // (M // L.shape[1])) for S, L, _, _ in levels)
    # one int32 array per column, the chunks of every level copied in; chunks that change
    # nothing (no level, or padding to the bucket): segment M, slot T (dropped)
    C_pad = max(bucket_size(C) if bucket else C, 1)
    fills = (0, 0, 0, M, T)
    cols = [np.full((C_pad, M), f, np.int32) for f in fills]
    live = np.ones(C_pad, bool)
    at = 0
    for S, L, R, flag in levels:
        at = _fill_level(cols, live, at, S, L, R, flag, M)
    pairs = tuple(jnp.asarray(c) for c in cols[:4])
    roots = offs + np.left_shift(1, nl) - 1
    i32 = lambda x: jnp.asarray(np.asarray(x, np.int32))  # cast on the host (on the device it compiles)
    return PreparedBatch(
        jnp.asarray(lp),
        i32(sub_prob),
        i32(sub_mask),
        i32(singles),
        pairs,
        i32(cols[4]),
        jnp.asarray(live),
        i32(roots),
        T,
        M,
    )


def _fill_level(cols, live, at, S, L, R, flag, M):
    """Writes one level's splits into the chunk arrays ``cols`` (parent, left, right,
    segment, slot; ``[C, M]`` int32, preset to the fill values 0, 0, 0, ``M``, ``T``) from
    chunk ``at`` on, each parent's splits in one chunk (``M // P`` parents a chunk); returns
    the next free chunk. Pairs that only fill a chunk copy the chunk's first pair (segment
    ``M``); slots past the chunk's parents stay ``T``."""
    P = L.shape[1]
    rows = M // P
    n = len(S)
    c = -(-n // rows)
    full, rem = divmod(n, rows)
    first = np.arange(c) * rows  # each chunk's first parent
    for col, src in zip(cols[:3], (S[:, None], L, R)):
        view = col[at : at + c, : rows * P].reshape(c, rows, P)
        view[:full] = src[: full * rows].reshape(full, rows, src.shape[1])
        head = src[first, 0]
        if rem:
            view[full, :rem] = src[full * rows :]
            view[full, rem:] = head[-1]
        col[at : at + c, rows * P :] = head[:, None]
    seg = cols[3][at : at + c, : rows * P].reshape(c, rows, P)
    seg[:full] = np.arange(rows)[None, :, None]
    if rem:
        seg[full, :rem] = np.arange(rem)[:, None]
    slot = cols[4][at : at + c, :rows]
    slot[:full] = S[: full * rows].reshape(full, rows)
    if rem:
        slot[full, :rem] = S[full * rows :]
    live[at : at + c] = flag
    return at + c


def _flat_features(energy, batch: PreparedBatch):
    """Features of every slot: ``energy.subset_features`` of its problem, one mask row each."""
    n_max = batch.leaves.shape[1]
    dtype = jnp.result_type(batch.leaves, jnp.float32)
    bits = ((batch.subset_mask[:, None] >> jnp.arange(n_max, dtype=jnp.int32)) & 1).astype(dtype)

    def one(b, m):
        f = energy.subset_features(batch.leaves[b], m[None])
        return jax.tree_util.tree_map(lambda x: x[0], f)

    return jax.vmap(one)(batch.subset_problem, bits)


def _no_grad_unless(live, tree):
    """``tree`` whose inexact arrays carry gradient only where ``live`` (a scalar flag):
    ``where`` selects, so even a NaN partial of a dead chunk cannot leak."""
    f = lambda x: jnp.where(live, x, jax.lax.stop_gradient(x)) if eqx.is_inexact_array(x) else x
    return jax.tree_util.tree_map(f, tree)


def _segment_logsumexp(a, seg, M):
    """``[M]`` logsumexp of ``a [M]`` over each segment ``seg`` (segment ``M``: ignored);
    empty / impossible segments give ``-inf``, with finite derivatives."""
    m = jax.lax.stop_gradient(jax.ops.segment_max(a, seg, num_segments=M + 1))
    m = jnp.where(jnp.isfinite(m), m, 0.0)
    s = jax.ops.segment_sum(jnp.exp(a - m[seg]), seg, num_segments=M + 1)[:M]
    return jnp.where(s > 0, jnp.log(jnp.where(s > 0, s, 1.0)) + m[:M], -jnp.inf)


@jax.jit
def _log_partition_flat(energy, batch: PreparedBatch):
    feats = _flat_features(energy, batch)
    dtype = jax.tree_util.tree_leaves(feats)[0].dtype
    T, M = batch.num_slots, batch.chunk_size
    log_z = jnp.full((T,), -jnp.inf, dtype).at[batch.singles].set(0.0)

    def step(log_z, chunk):
        (S, L, R, seg), slot, live = chunk
        en, fe = _no_grad_unless(live, (energy, feats))
        lp = en.log_psi(take_rows(fe, S), take_rows(fe, L), take_rows(fe, R))
        z = _segment_logsumexp(lp + log_z[L] + log_z[R], seg, M)
        return log_z.at[slot].set(z, mode="drop"), None

    # checkpointed: reverse mode keeps only the table per chunk (about 20% faster here)
    log_z, _ = jax.lax.scan(jax.checkpoint(step), log_z, (batch.pairs, batch.segment_slot, batch.live))
    return log_z[batch.roots]


def log_partition_prepared(energy: Energy, batch: PreparedBatch) -> jax.Array:
    """``[B]`` exact ``log Z`` of every problem of a `prepare_batch` result, in batch order.

    Traceable and differentiable in the energy's parameters (``jax.grad``, ``jax.jvp``,
    ``eqx.filter_grad``; inside ``jit`` and NumPyro models): one jitted program for the
    whole batch with the energy as a traced argument, so new parameter values do not
    recompile. No host checks here (`prepare_batch` did them). Problems that `prepare_batch`
    skipped get NaN (sum ``log_partition_prepared(energy, batch.solved_part())`` instead).
    """
    if not isinstance(energy, Energy):
        raise TypeError(f"energy must be a jaxhc.trellis Energy, got {type(energy).__name__}")
    if not isinstance(batch, PreparedBatch):
        raise TypeError(f"batch must be a PreparedBatch from prepare_batch, got {type(batch).__name__}")
    log_z = _log_partition_flat(energy, batch.solved_part())
    if batch.index is None:
        return log_z
    return jnp.full((batch.num_problems,), jnp.nan, log_z.dtype).at[batch.index].set(log_z)


def log_partition_batch(
    energy: Energy, leaves_padded, n_leaves=None, *, group_by_size: bool = True, on_invalid: str = "skip"
) -> jax.Array:
    """``[B]`` exact ``log Z`` of many problems of different sizes, differentiable in the
    energy's parameters (unlike `solve_batch`, which leaves the device for its tables).

    Validates on the host like `solve_batch` (so ``leaves_padded`` and ``n_leaves`` must be
    concrete; the energy may be traced, e.g. ``jax.grad(lambda lam:
    log_partition_batch(GinkgoEnergy(lam, 16.0, "exact"), X, n).sum())(2.0)``). To evaluate
    one batch at many parameter values, call `prepare_batch` once and then
    `log_partition_prepared`.

    Args:
      energy: the energy shared by all problems.
      leaves_padded: ``[B, N_max, ...]`` each problem's leaves in its first ``n_leaves[b]``
        rows; the remaining rows are never used.
      n_leaves: ``[B]`` number of real elements of each problem.
      group_by_size: evaluate each problem at its own size (default; the problems of all
        sizes share one compiled program, see `PreparedBatch`), or ``False``: every problem
        padded to ``N_max``.
      on_invalid: ``"skip"`` (default: NaN for the problems that fail the checks, with a
        warning) or ``"raise"``, as in `prepare_batch`.

    Returns:
      ``[B]`` ``log Z`` (Alg. 1 / Prop. 1 of the trellis paper), in batch order.
    """
    with jax.ensure_compile_time_eval():
        lp, nl, n_max, invalid = check_batch_inputs(energy, leaves_padded, n_leaves, on_invalid)
        batch = layout_valid(lp, nl, n_max, invalid, group_by_size)
    return log_partition_prepared(energy, batch)


def _flat_dp(energy, batch: PreparedBatch):
    """log Z and max-product with backpointers over the flat layout of `prepare_batch`, in
    one ``lax.scan``: per-slot ``(log_z, best, bp) [T]`` (``bp``: the left child's bitmask
    within its problem)."""
    feats = _flat_features(energy, batch)
    dtype = jax.tree_util.tree_leaves(feats)[0].dtype
    T, M = batch.num_slots, batch.chunk_size
    init = jnp.full((T,), -jnp.inf, dtype).at[batch.singles].set(0.0)
    pos = jnp.arange(M, dtype=jnp.int32)

    def step(carry, chunk):
        log_z, best, bp = carry
        (S, L, R, seg), slot = chunk
        lp = energy.log_psi(take_rows(feats, S), take_rows(feats, L), take_rows(feats, R))
        z = _segment_logsumexp(lp + log_z[L] + log_z[R], seg, M)
        v = lp + best[L] + best[R]
        # max and first argmax over each parent's splits; a parent's pairs are contiguous and
        # in `splits_of` order, so this is `run_dp`'s ``jnp.argmax`` (NaN: the first NaN wins)
        nan = jnp.isnan(v)
        has_nan = jax.ops.segment_max(nan.astype(jnp.int32), seg, num_segments=M + 1) > 0
        vmax = jax.ops.segment_max(jnp.where(nan, -jnp.inf, v), seg, num_segments=M + 1)
        hit = jnp.where(has_nan[seg], nan, v == vmax[seg])
        first = jax.ops.segment_min(jnp.where(hit, pos, M), seg, num_segments=M + 1)[:M]
        vmax = jnp.where(has_nan, jnp.nan, vmax)[:M]
        left = batch.subset_mask[L[jnp.clip(first, 0, M - 1)]]
        return (
            log_z.at[slot].set(z, mode="drop"),
            best.at[slot].set(vmax, mode="drop"),
            bp.at[slot].set(left, mode="drop"),
        ), None

    carry = (init, init, jnp.zeros((T,), jnp.int32))
    (log_z, best, bp), _ = jax.lax.scan(step, carry, (batch.pairs, batch.segment_slot))
    return log_z, best, bp


@jax.jit
def solve_flat(energy, batch: PreparedBatch, gather):
    """`_flat_dp` with its per-subset tables gathered to ``[B, 2^N_max]`` by ``gather`` (slot
    of each problem's subset, ``T`` where the subset holds padding)."""
    log_z, best, bp = _flat_dp(energy, batch)
    table = lambda x, fill: jnp.concatenate([x, jnp.full((1,), fill, x.dtype)])[gather]
    return log_z[batch.roots], best[batch.roots], table(log_z, -jnp.inf), table(best, -jnp.inf), table(bp, 0)


@jax.jit
def solve_flat_compact(energy, batch: PreparedBatch):
    """`_flat_dp`'s root values and the per-slot backpointers (no ``[B, 2^N_max]`` tables)."""
    log_z, best, bp = _flat_dp(energy, batch)
    return log_z[batch.roots], best[batch.roots], bp
