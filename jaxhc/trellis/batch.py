"""Exact trellis over batches of problems of different sizes: `solve_batch` (``log Z``, MAP
tree and optionally cluster marginals of every problem, one compiled program per batch
layout) and the differentiable ``log Z`` of many problems (`prepare_batch` once, then
`log_partition_prepared` per parameter value, or `log_partition_batch`): all splits of all
problems in fixed-size chunks under one ``lax.scan``; the same layout with a segment max /
first argmax gives `solve_batch` its MAP (``layout="flat"``). The dynamic program itself is
in `jaxhc.trellis.exact`."""

from __future__ import annotations

import warnings
from functools import lru_cache, partial
from typing import Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._internal.processes import process_local
from .._internal.validation import real_array
from .compact import children_from_backpointers, compact_result, compact_solution, gather_solutions, map_trees
from .energies import Energy
from .exact import TrellisSolution, check_num_leaves, num_splits, solve_impl
from .invalid import InvalidProblems, apply_policy, check_on_invalid
from .subsets import level_tables, take_rows

__all__ = [
    "solve_batch",
    "compact_solution",
    "compact_result",
    "gather_solutions",
    "PreparedBatch",
    "prepare_batch",
    "log_partition_prepared",
    "log_partition_batch",
    "map_trees",
]


# ------------------------------------------------------------------------------------------
# batches of problems of different sizes
# ------------------------------------------------------------------------------------------
@partial(jax.jit, static_argnames=("n_max", "marginals"))
def _batch_core(energy, leaves_padded, n_leaves, n_max, marginals):
    def one(lv, nv):
        root = (jnp.left_shift(1, nv) - 1).astype(jnp.int32)
        out = solve_impl(energy, lv, n_max, marginals, root)
        # subsets holding padding elements are not part of this problem: -inf / 0
        real = (jnp.arange(2**n_max, dtype=jnp.int32) & ~root) == 0
        mask = lambda x, fill: None if x is None else jnp.where(real, x, fill)
        log_z_tab, best_tab = mask(out[3], -jnp.inf), mask(out[4], -jnp.inf)
        return log_z_tab[root], best_tab[root], mask(out[2], -jnp.inf), log_z_tab, best_tab, mask(out[5], 0)

    return jax.vmap(one)(leaves_padded, n_leaves)


_WARNED_FLOAT32 = []


def _x64_enabled() -> bool:
    return bool(jax.config.jax_enable_x64)


def _warn_float32_once():
    """A batch path in a process without float64 (``jax_enable_x64`` off: a worker process
    that never enabled it) warns once: the DP then runs in float32."""
    if not _x64_enabled() and not _WARNED_FLOAT32:
        _WARNED_FLOAT32.append(True)
        warnings.warn(
            "jaxhc.trellis: jax_enable_x64 is off, so the trellis runs in float32 (log Z of Ginkgo jets "
            "moves by up to ~0.3 nats). Call jax.config.update('jax_enable_x64', True) at the start "
            "of every process (worker processes too) for float64.",
            RuntimeWarning,
            stacklevel=3,
        )


def _validate_batch(energy: Energy, leaves_padded, n_leaves):
    """`_check_batch` with ``on_invalid="raise"``: ``(lp, nl, n_max)``."""
    return _check_batch(energy, leaves_padded, n_leaves, "raise")[:3]


def _check_batch(energy: Energy, leaves_padded, n_leaves, on_invalid: str, stacklevel: int = 4):
    """Eager checks shared by `solve_batch` and `prepare_batch`.

    Returns ``(lp, nl, n_max, invalid)``: host float64 ``[B, N_max, ...]`` with every valid
    problem's padding rows replaced by `Energy.pad_leaves` (so no user padding value, NaN
    included, reaches a feature), host integer ``[B]`` sizes, ``N_max``, and the
    `InvalidProblems` report of the problems that fail `Energy.check_batch` (``on_invalid``:
    ``"raise"`` raises on any, ``"skip"`` warns and returns them for the caller to leave out,
    None returns them without either).
    """
    if on_invalid is not None:
        check_on_invalid(on_invalid)
    if not isinstance(energy, Energy):
        raise TypeError(f"energy must be a jaxhc.trellis Energy, got {type(energy).__name__}")
    if isinstance(leaves_padded, jax.core.Tracer) or isinstance(n_leaves, jax.core.Tracer):
        raise TypeError(
            "leaves_padded and n_leaves must be concrete arrays (validated on the host); "
            "inside jit, call prepare_batch outside and log_partition_prepared inside"
        )
    leaves_padded, n_leaves = awkward_or_padded(leaves_padded, n_leaves)
    _warn_float32_once()
    lp = real_array(leaves_padded, "leaves_padded", "[B, N_max, ...]").astype(np.float64)
    nl = np.asarray(n_leaves)
    if lp.ndim < 2 or lp.shape[0] == 0:
        raise ValueError(f"leaves_padded must be [B, N_max, ...] with B >= 1, got shape {lp.shape}")
    if nl.shape != (lp.shape[0],) or not np.issubdtype(nl.dtype, np.integer):
        raise ValueError(f"n_leaves must be an integer array [B={lp.shape[0]}], got {nl.shape} {nl.dtype}")
    n_max = lp.shape[1]
    if np.any(nl < 1) or np.any(nl > n_max):
        raise ValueError(f"n_leaves must be in [1, N_max={n_max}]")
    check_num_leaves(n_max, None, None)
    lp, reasons = energy.check_batch(lp, nl, "leaves_padded")
    invalid = InvalidProblems.from_reasons(reasons, lp.shape[0])
    if on_invalid is not None:
        apply_policy(invalid, on_invalid, stacklevel=stacklevel)
    return lp, nl, n_max, invalid


def awkward_or_padded(leaves_padded, n_leaves):
    """``(leaves_padded, n_leaves)`` as given, or from a jagged awkward array of jets
    (`jaxhc.jets.hep.jets_from_awkward`; ``n_leaves`` then optional, and checked against the
    array when given)."""
    from ..jets.hep import is_awkward, jets_from_awkward

    # a global jax.Array over several processes: this process's jets
    leaves_padded, n_leaves = process_local(leaves_padded, "leaves_padded"), process_local(n_leaves, "n_leaves")
    if is_awkward(leaves_padded):
        if n_leaves is not None and np.ndim(n_leaves) == 0:
            raise TypeError(
                f"n_leaves={n_leaves!r} is a scalar: with awkward jets leave n_leaves out (None) and pass the "
                "arguments after it by keyword"
            )
        lp, counts = jets_from_awkward(leaves_padded, "leaves_padded")
        if n_leaves is not None and not np.array_equal(np.asarray(n_leaves).reshape(-1), counts):
            raise ValueError("n_leaves disagrees with the jagged array's leaf counts (leave it out for awkward input)")
        return lp, counts
    if n_leaves is None:
        raise TypeError("n_leaves is required with a padded leaves_padded array (it is optional for awkward jets)")
    return leaves_padded, n_leaves


#: splits per program of `solve_batch`'s flat layout (larger batches run in blocks of about
#: this many; the layout holds 16 bytes of indices per split on the device)
_FLAT_BLOCK_PAIRS = 1 << 23


def solve_batch(
    energy: Energy,
    leaves_padded,
    n_leaves=None,
    *,
    marginals: bool = False,
    devices=None,
    group_by_size: bool = True,
    layout: Optional[str] = None,
    tables: Optional[bool] = None,
    on_invalid: str = "skip",
) -> TrellisSolution:
    """Solves many problems of different sizes at once (``vmap``; sharded over devices).

    Args:
      energy: the energy shared by all problems.
      leaves_padded: ``[B, N_max, ...]`` each problem's leaves in its first ``n_leaves[b]``
        rows; the padding rows are ignored (they never enter a subset of the real
        elements, whose masks are below ``2^n_leaves[b]``). Or jets as a jagged awkward
        array of four-vectors (`jaxhc.jets.hep`; the ``hep`` extra).
      n_leaves: ``[B]`` number of real elements of each problem (taken from the array for
        awkward input).
      marginals: also compute every cluster's marginal (tables over ``2^N_max``; in every
        table, subsets containing padding hold ``-inf`` (backpointer 0)).
      devices: devices to shard the batch over (default ``jax.local_devices()``: after
        `jax.distributed.initialize` every process solves its own jets on its own devices;
        one device: no sharding).
      group_by_size: solve each problem at its own ``N`` (far less work than padding
        everything to ``N_max``); ``False`` pads every problem to ``N_max`` (the subsets
        holding padding are evaluated too, then masked), for cross-checks.
      layout: how the DP runs. ``"flat"``: every split of every problem packed into
        fixed-size chunks (`prepare_batch`) and one ``lax.scan`` computes ``log Z`` (segment
        logsumexp) and the MAP (segment max; the backpointer is the first maximal split in
        the order of ``solve``'s DP, so ties are broken alike) of all problems at once: one
        compiled program whatever the sizes (about 1 s to compile), run on ``devices[0]``
        (not sharded); ``log Z`` / MAP only (``marginals=True`` raises ``ValueError``).
        ``"grouped"``: a vmapped level-unrolled DP, one compiled program per distinct size
        with ``group_by_size`` (seconds each for 8..10 leaves), sharded over ``devices``; the
        only layout with marginals. ``None`` (default): ``"flat"`` when
        ``marginals=False``, ``group_by_size=True`` and a single device is used, else
        ``"grouped"`` (for 1000 Ginkgo jets of 5..10 leaves on 2 CPU cores the first call
        took about 2 s flat against 17-20 s grouped, warm calls about 0.5 s in both). The
        flat layout holds every split's indices in memory (16 bytes each on the device,
        more while it is built on the host), so a batch of more than ``2^23`` splits runs
        in consecutive blocks of about that many, padded to a few shapes that share
        compiled programs.
        Both give the same values up to float rounding (features are computed in different
        programs; the backpointers can differ only between splits whose values tie to
        rounding).
      tables: keep the per-subset tables ``[B, 2^N_max]`` (``log_z_table``, ``map_table``,
        ``backpointer`` and, with ``marginals``, ``log_marginals``). ``False`` returns the
        compact per-problem answers instead: ``log_z``, ``map_log_phi``, the MAP trees as
        ``map_children [B, N_max - 1, 2]`` and, with ``marginals``, the marginals of the
        MAP trees' clusters ``map_log_marginals [B, N_max - 1]`` (tables fields ``None``;
        host NumPy arrays; `map_trees` and `jaxhc.jets.to_awkward` read either form).
        Default: ``True`` for a batch of one problem, ``False`` for more (2000 jets of 12
        leaves hold about 200 MB of tables against 0.4 MB of answers). On the flat layout
        the compact answers come from blocks of one problem size each, whose layout and
        compiled program are made once per size and reused by every later call (a long run
        over many batches compiles one program per distinct size).
      on_invalid: what to do with problems that fail the energy's checks (`Energy.check_batch`;
        for jets: NaN or inf, ``E <= 0``, ``m^2`` below ``-2^-20 E E_jet``, overflow).
        ``"skip"`` (default): solve the others, warn once with the count and the first
        reasons, and return the skipped ones with ``valid=False``, NaN ``log_z`` and
        ``map_log_phi`` (NaN tables) and no tree (``map_children`` rows ``-1``), the full
        report in ``invalid``; a run over a million jets is not stopped by one. ``"raise"``:
        raise `jaxhc.trellis.InvalidProblemsError` (a ``ValueError``) naming every bad
        problem and why.

    Returns:
      `TrellisSolution` with a leading batch axis on every array field and ``map_tree=None``
      (use `map_trees`); tables ``[B, 2^N_max]`` in both layouts, or the compact fields
      (``tables=False``); ``valid`` ``[B]`` and the ``invalid`` report. Not differentiable
      (validates on the host); for gradients of ``log Z`` use `log_partition_batch`.
    """
    if tables is not None and not isinstance(tables, (bool, np.bool_)):
        raise TypeError(f"tables must be True, False or None (the default), got {tables!r}")
    return _solve_batch(energy, leaves_padded, n_leaves, marginals, devices, group_by_size, layout, tables, on_invalid)


def _solve_batch(
    energy, leaves_padded, n_leaves, marginals, devices, group_by_size, layout, tables, on_invalid="raise"
):
    """`solve_batch` after its argument checks (``tables=None``: tables for one problem)."""
    if not (layout is None or (isinstance(layout, str) and layout in ("grouped", "flat"))):
        raise ValueError(f"layout must be 'grouped' or 'flat' (or None: the default), got {layout!r}")
    if layout == "flat" and marginals:
        raise ValueError(
            "layout='flat' computes log Z and the MAP only; marginals=True needs layout='grouped' (or None)"
        )
    lp, nl, n_max, invalid = _check_batch(energy, leaves_padded, n_leaves, on_invalid, stacklevel=5)
    devices = list(jax.local_devices()) if devices is None else list(devices)
    B = lp.shape[0]
    if layout is None:
        layout = "flat" if (not marginals and group_by_size and len(devices) == 1) else "grouped"
    if tables is None:
        tables = B == 1
    keep = np.ones(B, bool)
    keep[list(invalid.index)] = False
    if np.all(keep):
        sol = _solve_valid(energy, lp, nl, n_max, marginals, devices, group_by_size, layout, tables)
        return sol._replace(valid=np.ones(B, bool), invalid=invalid)
    if np.any(keep):
        part = _solve_valid(energy, lp[keep], nl[keep], n_max, marginals, devices, group_by_size, layout, tables)
    else:
        part = None
    return _with_skipped(part, keep, nl, n_max, marginals, tables, invalid)


def _with_skipped(part, keep, nl, n_max, marginals, tables, invalid) -> TrellisSolution:
    """The solution of the whole batch from ``part``, that of the problems ``keep`` (None
    when there is none): the others get NaN values, NaN tables (backpointer 0) and no
    tree (children ``-1``)."""
    B = len(keep)

    def full(x, fill, dtype, shape):
        out = np.full((B,) + tuple(shape), fill, dtype)
        if part is not None and x is not None:
            out[keep] = np.asarray(x)
        return out

    get = (lambda f: getattr(part, f)) if part is not None else (lambda f: None)
    if tables:
        T = 2**n_max
        lz = full(get("log_z"), np.nan, np.float64, ())
        mv = full(get("map_log_phi"), np.nan, np.float64, ())
        lm = full(get("log_marginals"), np.nan, np.float64, (T,)) if marginals else None
        tz, tb = full(get("log_z_table"), np.nan, np.float64, (T,)), full(get("map_table"), np.nan, np.float64, (T,))
        bp = full(get("backpointer"), 0, np.int32, (T,))
        j = lambda x: None if x is None else jnp.asarray(x)
        return TrellisSolution(
            j(lz), j(mv), None, j(lm), j(tz), j(tb), j(bp), jnp.asarray(nl), None, None, keep, invalid
        )
    m = max(n_max - 1, 0)
    lm = full(get("map_log_marginals"), np.nan, np.float64, (m,)) if marginals else None
    return compact_result(
        full(get("log_z"), np.nan, np.float64, ()),
        full(get("map_log_phi"), np.nan, np.float64, ()),
        nl,
        full(get("map_children"), -1, np.int32, (m, 2)),
        lm,
        keep,
        invalid,
    )


def _solve_valid(energy, lp, nl, n_max, marginals, devices, group_by_size, layout, tables) -> TrellisSolution:
    """`solve_batch` of problems that passed the checks."""
    B = lp.shape[0]
    if layout == "flat" and group_by_size and not tables:
        return _solve_batch_flat_by_size(energy, lp, nl, n_max, devices[0])
    if layout == "flat":
        log_z, map_v, tz, tb, bp = _solve_batch_flat(energy, lp, nl, n_max, group_by_size, devices[0])
        sol = TrellisSolution(log_z, map_v, None, None, tz, tb, bp, jnp.asarray(nl))
        return sol if tables else compact_solution(sol)
    if not group_by_size:
        out = _run_batch(energy, lp, nl, n_max, marginals, devices)
    else:
        # problems of the same size share one vmapped solve at their own N (the work of a
        # padded problem grows as 3^N_max); tables are padded back to 2^N_max
        size = 2**n_max
        fill = (-np.inf, -np.inf, -np.inf, -np.inf, -np.inf, 0)
        out = [None] * 6
        for n in np.unique(nl):
            idx = np.flatnonzero(nl == n)
            sub = np.stack([np.asarray(energy.crop_leaves(lp[b], int(n))) for b in idx])
            part = _run_batch(energy, sub, nl[idx], int(n), marginals, devices)
            for f, (val, pad) in enumerate(zip(part, fill)):
                if val is None:
                    continue
                val = np.asarray(val)
                if val.ndim == 2:  # per-subset table: subsets of the first n bits keep their index
                    val = np.concatenate([val, np.full((len(idx), size - val.shape[1]), pad, val.dtype)], 1)
                if out[f] is None:
                    out[f] = np.zeros((B,) + val.shape[1:], val.dtype)
                out[f][idx] = val
        out = tuple(None if o is None else jnp.asarray(o) for o in out)
    log_z, map_v, log_m, tz, tb, bp = out
    sol = TrellisSolution(log_z, map_v, None, log_m, tz, tb, bp, jnp.asarray(nl[:B]))
    return sol if tables else compact_solution(sol)


def _run_batch(energy, lp, nl, n_max, marginals, devices):
    """The vmapped solve of padded problems, sharded over ``devices`` when several."""
    B = lp.shape[0]
    if len(devices) > 1:
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        pad = (-B) % len(devices)
        if pad:
            lp = np.concatenate([lp, np.repeat(lp[:1], pad, 0)])
            nl = np.concatenate([nl, np.repeat(nl[:1], pad)])
        mesh = Mesh(np.array(devices), ("batch",))
        shard = NamedSharding(mesh, PartitionSpec("batch"))
        lpj = jax.device_put(jnp.asarray(lp), shard)
        nlj = jax.device_put(jnp.asarray(nl, jnp.int32), shard)
    else:
        lpj, nlj = jnp.asarray(lp), jnp.asarray(nl, jnp.int32)
    out = _batch_core(energy, lpj, nlj, n_max, marginals)
    return jax.tree_util.tree_map(lambda x: x[:B] if x is not None else None, out)


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
_MAX_CHUNK_PAIRS = 1 << 16


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
        lp, nl, n_max, invalid = _check_batch(energy, leaves_padded, n_leaves, on_invalid)
        return _layout_valid(lp, nl, n_max, invalid, group_by_size)


def _layout_valid(lp, nl, n_max, invalid: InvalidProblems, group_by_size: bool = True) -> PreparedBatch:
    """`_layout_batch` of the problems not in ``invalid``, with their positions and the
    report (`PreparedBatch.index`, ``invalid``) when some are left out."""
    if not invalid:
        return _layout_batch(lp, nl, n_max, group_by_size)
    keep = np.ones(len(nl), bool)
    keep[list(invalid.index)] = False
    if not np.any(keep):
        raise ValueError(invalid.summary() + ": no problem is left to lay out")
    core = _layout_batch(lp[keep], nl[keep], n_max, group_by_size)
    index = jnp.asarray(np.flatnonzero(keep).astype(np.int32))
    return PreparedBatch(*(getattr(core, f) for f in _CORE_FIELDS), index, len(nl), invalid)


def _bucket(x: int) -> int:
    """The smallest of ``4, 5, 6, 7 x 2^k`` (and of 1..4) at least ``x``: padding a shape to
    its bucket costs < 25% and lets blocks of a large batch share compiled programs."""
    if x <= 4:
        return max(int(x), 1)
    step = 1 << (int(x - 1).bit_length() - 3)
    return -(-int(x) // step) * step


def _layout_batch(lp, nl, n_max, group_by_size, bucket: bool = False, max_chunk: int = _MAX_CHUNK_PAIRS):
    """`prepare_batch` after `_validate_batch`. ``bucket``: chunks of `_MAX_CHUNK_PAIRS` pairs,
    the slot and chunk counts padded to `_bucket` (the blocks of `solve_batch`'s flat layout
    then mostly share one compiled program). ``max_chunk``: the most pairs per chunk (scan
    step) otherwise."""
    nl = nl.astype(np.int64)
    n_eff = nl if group_by_size else np.full(len(nl), n_max, np.int64)
    sizes = np.left_shift(1, n_eff)
    T_real = int(sizes.sum())
    T = _bucket(T_real) if bucket else T_real
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
        M = max(p_max, _MAX_CHUNK_PAIRS)
    C = sum(-(-len(S) // (M // L.shape[1])) for S, L, _, _ in levels)
    # one int32 array per column, the chunks of every level copied in; chunks that change
    # nothing (no level, or padding to the bucket): segment M, slot T (dropped)
    C_pad = max(_bucket(C) if bucket else C, 1)
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
        lp, nl, n_max, invalid = _check_batch(energy, leaves_padded, n_leaves, on_invalid)
        batch = _layout_valid(lp, nl, n_max, invalid, group_by_size)
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
def _solve_flat(energy, batch: PreparedBatch, gather):
    """`_flat_dp` with its per-subset tables gathered to ``[B, 2^N_max]`` by ``gather`` (slot
    of each problem's subset, ``T`` where the subset holds padding)."""
    log_z, best, bp = _flat_dp(energy, batch)
    table = lambda x, fill: jnp.concatenate([x, jnp.full((1,), fill, x.dtype)])[gather]
    return log_z[batch.roots], best[batch.roots], table(log_z, -jnp.inf), table(best, -jnp.inf), table(bp, 0)


@jax.jit
def _solve_flat_compact(energy, batch: PreparedBatch):
    """`_flat_dp`'s root values and the per-slot backpointers (no ``[B, 2^N_max]`` tables)."""
    log_z, best, bp = _flat_dp(energy, batch)
    return log_z[batch.roots], best[batch.roots], bp


#: the compact path's blocks hold jets of one size. On a CPU: at most this many splits per
#: block, at most this many jets (a power of two) and at most this many splits per scan step
#: (blocks that fit the caches; 2 cores reach their speed there) ...
_GROUP_CPU = (1 << 20, 1 << 10, _MAX_CHUNK_PAIRS)
#: ... and on an accelerator (GPU, TPU), where a scan step must hold enough independent work
#: to fill the device and each block costs a dispatch: 16x larger blocks and chunks
_GROUP_ACCEL = (1 << 24, 1 << 16, 1 << 20)


def _group_limits(device) -> tuple:
    """``(splits per block, jets per block, splits per scan step)`` of the compact path."""
    return _GROUP_CPU if getattr(device, "platform", "cpu") == "cpu" else _GROUP_ACCEL


def _group_block_jets(n: int, limits: tuple = _GROUP_CPU) -> int:
    """Jets of ``n`` leaves per block of the compact path: a power of two, at most
    ``limits[1]``, with at most ``limits[0]`` splits in all (at least one jet)."""
    fit = limits[0] // max(num_splits(int(n)), 1)
    return int(min(limits[1], 1 << max(int(fit).bit_length() - 1, 0)))


@lru_cache(maxsize=16)
def _group_template(n: int, jets: int, n_max: int, tail: tuple, device, max_chunk: int = _MAX_CHUNK_PAIRS):
    """The flat layout of ``jets`` problems of ``n`` elements each (their split indices depend
    on nothing else), on ``device``; ``tail`` the shape of one element's leaves. Cached: every
    block of that size, in this call or a later one, reuses it (and its compiled program). A
    template holds at most one block's splits (16 bytes each), so the cache stays under
    about 16 x 17 MB on a CPU (16 x 270 MB of device memory on an accelerator)."""
    lp = np.zeros((jets, n_max) + tail)
    return jax.device_put(
        _layout_batch(lp, np.full(jets, n, np.int64), n_max, True, False, max_chunk=max_chunk), device
    )


def _solve_batch_flat_by_size(energy, lp, nl, n_max, device) -> TrellisSolution:
    """`solve_batch(..., layout="flat", tables=False)`: the jets grouped by size, each group
    in blocks of `_group_block_jets` jets (the last one filled with copies of a jet of the
    group), so that every block of a size has the same layout (built once, `_group_template`)
    and the same compiled program: one program per distinct size over any number of calls.
    Each block returns per-slot backpointers (jet ``j`` of the block owns slots ``j 2^n ..
    (j + 1) 2^n``), from which the host reads the MAP trees; no ``[B, 2^N_max]`` table is
    formed."""
    nl = nl.astype(np.int64)
    B = len(nl)
    tail = tuple(lp.shape[2:])
    parts = []
    limits = _group_limits(device)
    for n in np.unique(nl):
        idx = np.flatnonzero(nl == n)
        k = _group_block_jets(int(n), limits)
        template = _group_template(int(n), k, int(n_max), tail, device, limits[2])
        for a in range(0, len(idx), k):
            rows = idx[a : a + k]
            fill = np.concatenate([rows, np.full(k - len(rows), rows[0])])
            batch = eqx.tree_at(lambda t: t.leaves, template, lp[fill])  # host leaves: moved by the call
            parts.append((int(n), rows, _solve_flat_compact(energy, batch)))  # asynchronous
    log_z, map_v = np.zeros(B), np.zeros(B)
    children = np.full((B, max(n_max - 1, 0), 2), -1, np.int32)
    for n, rows, (lz, mv, bp) in parts:
        m = len(rows)
        log_z[rows], map_v[rows] = np.asarray(lz)[:m], np.asarray(mv)[:m]
        if n > 1:
            bp = np.asarray(bp).reshape(-1, 1 << n)[:m]
            children[rows, : n - 1] = children_from_backpointers(bp, n)
    return compact_result(log_z, map_v, nl, children)


def _solve_batch_flat(energy, lp, nl, n_max, group_by_size, device):
    """`solve_batch` with ``layout="flat"`` after `_validate_batch`: one program for a batch of
    at most `_FLAT_BLOCK_PAIRS` splits; a larger one in consecutive blocks of about that many
    splits (the split indices of a block are what the layout holds in memory), each padded
    to bucketed shapes so that the blocks share a few compiled programs."""
    nl = nl.astype(np.int64)
    n_eff = nl if group_by_size else np.full(len(nl), n_max, np.int64)
    work = np.cumsum([num_splits(int(n)) for n in n_eff])
    if work[-1] <= _FLAT_BLOCK_PAIRS:
        return _solve_flat_block(energy, lp, nl, n_max, group_by_size, device, False)
    # block b: the problems whose cumulative splits fall in [b, b + 1) x the budget (a
    # problem above the budget alone is a block)
    starts = np.flatnonzero(np.diff(work // _FLAT_BLOCK_PAIRS, prepend=-1))
    bounds = list(starts) + [len(nl)]
    parts = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        # the batch padded to a power of two with one-element problems (two slots, no split)
        extra = (1 << int(b - a - 1).bit_length()) - (b - a)
        blp = np.concatenate([lp[a:b], np.repeat(lp[a : a + 1], extra, axis=0)])
        bnl = np.concatenate([nl[a:b], np.ones(extra, np.int64)])
        # dispatched asynchronously: the host lays out the next block meanwhile
        parts.append((b - a, _solve_flat_block(energy, blp, bnl, n_max, group_by_size, device, True)))
    return tuple(jnp.asarray(np.concatenate([np.asarray(p[i])[:m] for m, p in parts])) for i in range(5))


def _solve_flat_block(energy, lp, nl, n_max, group_by_size, device, bucket):
    batch = _layout_batch(lp, nl, n_max, group_by_size, bucket)
    n_eff = nl if group_by_size else np.full(len(nl), n_max, np.int64)
    offs = np.concatenate([[0], np.cumsum(np.left_shift(1, n_eff))[:-1]])
    s = np.arange(2**n_max, dtype=np.int64)
    real = (s[None, :] & ~(np.left_shift(1, nl) - 1)[:, None]) == 0
    gather = np.where(real, offs[:, None] + s[None, :], batch.num_slots).astype(np.int32)
    batch, gather = jax.device_put((batch, jnp.asarray(gather)), device)
    return _solve_flat(energy, batch, gather)
