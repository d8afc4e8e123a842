"""Exact trellis over batches of problems of different sizes: `solve_batch` (``log Z``, MAP
tree and optionally cluster marginals of every problem), on the flat layout of
`jaxhc.trellis.flat` (all splits of all problems in fixed-size chunks under one
``lax.scan``; also the differentiable ``log Z`` of `prepare_batch` /
`log_partition_prepared`) or a vmapped level-unrolled DP per size. The dynamic program
itself is in `jaxhc.trellis.exact`."""

from __future__ import annotations

from functools import lru_cache, partial
from typing import Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .checks import check_batch_inputs
from .compact import (
    children_from_backpointers,
    children_from_queue,
    compact_result,
    compact_solution,
    gather_solutions,
    map_queue_device,
    map_trees,
)
from .energies import Energy
from .exact import TrellisSolution, num_splits, solve_impl
from .flat import MAX_CHUNK_PAIRS, layout_batch, solve_flat, solve_flat_compact

__all__ = ["solve_batch", "compact_solution", "compact_result", "gather_solutions", "map_trees"]


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
    lp, nl, n_max, invalid = check_batch_inputs(energy, leaves_padded, n_leaves, on_invalid, stacklevel=5)
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


#: the compact path's blocks hold jets of one size. On a CPU: at most this many splits per
#: block, at most this many jets (a power of two) and at most this many splits per scan step
#: (blocks that fit the caches; 2 cores reach their speed there) ...
_GROUP_CPU = (1 << 20, 1 << 10, MAX_CHUNK_PAIRS)
#: ... and on an accelerator (GPU, TPU), where a scan step must hold enough independent work
#: to fill the device and each block costs a dispatch: 16x larger blocks and chunks
_GROUP_ACCEL = (1 << 24, 1 << 16, 1 << 20)


#: read the compact path's MAP trees on the device (None: on accelerators only)
_TREES_ON_DEVICE: Optional[bool] = None


def _group_limits(device) -> tuple:
    """``(splits per block, jets per block, splits per scan step)`` of the compact path."""
    return _GROUP_CPU if getattr(device, "platform", "cpu") == "cpu" else _GROUP_ACCEL


def _group_block_jets(n: int, limits: tuple = _GROUP_CPU) -> int:
    """Jets of ``n`` leaves per block of the compact path: a power of two, at most
    ``limits[1]``, with at most ``limits[0]`` splits in all (at least one jet)."""
    fit = limits[0] // max(num_splits(int(n)), 1)
    return int(min(limits[1], 1 << max(int(fit).bit_length() - 1, 0)))


@lru_cache(maxsize=16)
def _group_template(n: int, jets: int, n_max: int, tail: tuple, device, max_chunk: int = MAX_CHUNK_PAIRS):
    """The flat layout of ``jets`` problems of ``n`` elements each (their split indices depend
    on nothing else), on ``device``; ``tail`` the shape of one element's leaves. Cached: every
    block of that size, in this call or a later one, reuses it (and its compiled program). A
    template holds at most one block's splits (16 bytes each), so the cache stays under
    about 16 x 17 MB on a CPU (16 x 270 MB of device memory on an accelerator)."""
    lp = np.zeros((jets, n_max) + tail)
    return jax.device_put(layout_batch(lp, np.full(jets, n, np.int64), n_max, True, False, max_chunk=max_chunk), device)


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
    # MAP trees: on an accelerator read on the device (the host walk of 100 000 jets' 2^n
    # backpointer tables took 0.17 s of a 1.09 s GPU call, plus their transfer); on a CPU the
    # NumPy walk costs what the device loop would, without its compilation per size
    on_device = _TREES_ON_DEVICE if _TREES_ON_DEVICE is not None else getattr(device, "platform", "cpu") != "cpu"
    for n in np.unique(nl):
        idx = np.flatnonzero(nl == n)
        k = _group_block_jets(int(n), limits)
        template = _group_template(int(n), k, int(n_max), tail, device, limits[2])
        for a in range(0, len(idx), k):
            rows = idx[a : a + k]
            fill = np.concatenate([rows, np.full(k - len(rows), rows[0])])
            batch = eqx.tree_at(lambda t: t.leaves, template, lp[fill])  # host leaves: moved by the call
            lz, mv, bp = solve_flat_compact(energy, batch)  # asynchronous
            if n > 1 and on_device:  # the MAP trees read on the device (2 (2n - 1) integers a jet)
                bp = map_queue_device(bp, int(n))
            parts.append((int(n), rows, lz, mv, bp if n > 1 else None))
    log_z, map_v = np.zeros(B), np.zeros(B)
    children = np.full((B, max(n_max - 1, 0), 2), -1, np.int32)
    for n, rows, lz, mv, queue in parts:
        m = len(rows)
        log_z[rows], map_v[rows] = np.asarray(lz)[:m], np.asarray(mv)[:m]
        if queue is not None and on_device:
            Q, child_at, bad = (np.asarray(x)[:m] for x in queue)
            children[rows, : n - 1] = children_from_queue(Q, child_at, n, bad, rows)
        elif queue is not None:
            children[rows, : n - 1] = children_from_backpointers(np.asarray(queue).reshape(-1, 1 << n)[:m], n, rows)
    return compact_result(log_z, map_v, nl, children)


def _solve_batch_flat(energy, lp, nl, n_max, group_by_size, device):
    """`solve_batch` with ``layout="flat"`` after `validate_batch_inputs`: one program for a batch of
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
    batch = layout_batch(lp, nl, n_max, group_by_size, bucket)
    n_eff = nl if group_by_size else np.full(len(nl), n_max, np.int64)
    offs = np.concatenate([[0], np.cumsum(np.left_shift(1, n_eff))[:-1]])
    s = np.arange(2**n_max, dtype=np.int64)
    real = (s[None, :] & ~(np.left_shift(1, nl) - 1)[:, None]) == 0
    gather = np.where(real, offs[:, None] + s[None, :], batch.num_slots).astype(np.int32)
    batch, gather = jax.device_put((batch, jnp.asarray(gather)), device)
    return solve_flat(energy, batch, gather)
