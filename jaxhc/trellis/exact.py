"""Exact inference over all binary hierarchies with the full cluster trellis.

A vectorised bitmask dynamic program (Greenberg, Macaluso et al.): every subset ``S`` of
the ``N`` elements is a trellis vertex indexed by its bitmask. Subsets are processed level
by level (by size); for every subset of a level all its splits ``(L, S \\ L)`` with ``L``
holding the lowest element of ``S`` (so each split is counted once, Prop. 1) are enumerated
arithmetically: split ``j`` of ``S`` puts the ``b``-th other element of ``S`` into ``L``
when bit ``b`` of ``j`` is set. A level is evaluated in fixed-size chunks of
``[parents, splits]`` under ``lax.map`` -- no Python loop over subsets or splits at run
time, ``(3^N + 1) / 2 - 2^N`` split evaluations in all.

- ``log Z(S) = logsumexp_L [log psi(S, L, R) + log Z(L) + log Z(R)]`` (Alg. 1, Prop. 1);
- ``log phi*(S) = max_L [...]`` with backpointers (Prop. 2) for the MAP tree;
- the marginal ``P(S in H) = out(S) Z(S) / Z`` of every cluster at once from a top-down
  outside pass (``out(S)`` pulls from every superset, gathers only; it equals the
  gradient of ``log Z`` with respect to a per-cluster log weight, which the tests check);
  the size-class programs push each split's probability to both children instead (linear
  space, half the split evaluations), and pull where a cluster is below ``e^-PUSH_FLOOR``;
- exact samples top-down with ``p(L | S) = psi(S, L, R) Z(L) Z(R) / Z(S)`` (Alg. 2, Eq. 3;
  `jaxhc.trellis.sampling`, from this module's ``log Z`` table);
- ``log Z`` of many problems of mixed sizes, differentiable in the energy's parameters
  (`log_partition_batch`; `prepare_batch` once + `log_partition_prepared` per parameter
  value): all splits of all problems in fixed-size chunks under one ``lax.scan``; the same
  layout with a segment max / first argmax gives `solve_batch` its MAP (``layout="flat"``).

`solve`, `cluster_marginals`, `sample` and a concrete `log_partition` run one compiled program
per *size class* (``N <= 8``, ``9..12``, ``13..16``, ``17..20``; `size_class`), not per ``N``:
the leaves are padded to the class bound, the tables span ``2^bound`` subsets (the first
``2^N`` used), and the levels are one ``fori_loop`` over chunks of rows (a row: 16
consecutive splits of one parent, its left sides built from the parent's bits) scheduled
by host tables passed as arguments; a parent's rows combine by segment reductions within a
chunk and by ``logaddexp`` / max across chunks. Traced or differentiated ``log Z``,
`run_dp`, the batches and ``N > 20`` use the level-unrolled per-``N`` programs.

Batches of problems of mixed sizes (`solve_batch`, `prepare_batch`, `log_partition_prepared`,
`log_partition_batch`, `map_trees`) are in `jaxhc.trellis.batch`.
"""

from __future__ import annotations

import math
from functools import lru_cache, partial
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from .._internal import vmath
from ..tree import Tree
from .energies import Energy

__all__ = [
    "TrellisSolution",
    "solve",
    "log_partition",
    "cluster_marginals",
    "subtree_log_marginal",
    "memory_required",
    "num_splits",
    "MAX_EXACT_LEAVES",
]

#: Above this many leaves the full trellis is refused (the bitmask indices are int32 and
#: the work grows as 3^N); use `jaxhc.trellis.sparse_solve`.
MAX_EXACT_LEAVES = 24
_CHUNK_PAIRS = 1 << 14


def num_splits(n: int) -> int:
    """Split evaluations of the full trellis: ``(3^n + 1) / 2 - 2^n``."""
    return (3**n + 1) // 2 - 2**n


def memory_required(n: int, feature_floats: int = 5, dtype_bytes: int = 8) -> int:
    """Approximate peak bytes of `solve` for ``n`` leaves: per-subset tables (features,
    log Z, MAP value, backpointer, marginal cotangents) plus one chunk of splits."""
    per_subset = (feature_floats + 4) * dtype_bytes + 4
    chunk = min(_CHUNK_PAIRS, max(1, num_splits(n))) * (2 * feature_floats + 8) * dtype_bytes
    return int(2**n * per_subset * 2 + chunk * 3)


def check_num_leaves(n: int, max_leaves: Optional[int], max_bytes: Optional[int]):
    limit = MAX_EXACT_LEAVES if max_leaves is None else max_leaves
    if n > limit:
        raise ValueError(
            f"leaves: N={n} is above the exact trellis limit of {limit} leaves "
            f"({num_splits(n):.3e} split evaluations, about {memory_required(n) / 2**30:.1f} GiB); "
            "use jaxhc.trellis.sparse_solve with seed trees (beam search, samples) instead"
        )
    if max_bytes is not None and memory_required(n) > max_bytes:
        raise ValueError(
            f"leaves: N={n} needs about {memory_required(n) / 2**30:.2f} GiB, above max_bytes="
            f"{max_bytes / 2**30:.2f} GiB; use jaxhc.trellis.sparse_solve"
        )


@lru_cache(maxsize=None)
def level_tables(n: int, k: int):
    """Subsets of size k of n elements and the positions of their set bits (host arrays)."""
    combos = np.array(list(__import__("itertools").combinations(range(n), k)), dtype=np.int32)
    masks = np.sum(np.left_shift(np.int64(1), combos.astype(np.int64)), axis=1).astype(np.int32)
    return masks, combos


def _chunking(count: int, per: int):
    c = max(1, min(count, _CHUNK_PAIRS // max(per, 1)))
    n_chunks = -(-count // c)
    return c, n_chunks


def take_rows(tree, idx):
    return jax.tree_util.tree_map(lambda x: jnp.take(x, idx, axis=0), tree)


def splits_of(S_pos, k):
    """Left masks ``[c, 2^(k-1) - 1]`` of every split of the parents with bit positions
    ``S_pos [c, k]``; the left side holds the lowest element."""
    P = 2 ** (k - 1) - 1
    j = jnp.arange(P, dtype=jnp.int32)[None, :]
    L = jnp.left_shift(jnp.int32(1), S_pos[:, :1])
    for b in range(k - 1):
        L = L | (((j >> b) & 1) << S_pos[:, b + 1 : b + 2])
    return L


def _logsumexp_rows(a):
    """``logsumexp`` over the last axis whose derivatives (reverse and forward) stay finite
    when a whole row is ``-inf`` (an impossible subset): such rows are summed as zeros and
    their output reset to ``-inf``, so no ``0 / 0`` reaches the parameters' gradient."""
    live = jnp.isfinite(jnp.max(a, axis=-1, keepdims=True))
    out = jax.scipy.special.logsumexp(jnp.where(live, a, 0.0), axis=-1)
    return jnp.where(live[..., 0], out, -jnp.inf)


def run_dp(energy: Energy, feats, n: int, u=None, with_map: bool = True):
    """Runs the trellis DP over all subsets of ``n`` elements.

    Returns ``(log_z [2^n], map_val [2^n], backptr [2^n])`` (the last two ``None`` without
    ``with_map``). ``u`` adds a log weight per cluster (leaves and root included).
    """
    dtype = jax.tree_util.tree_leaves(feats)[0].dtype
    size = 2**n
    zero_u = u is None
    u = jnp.zeros((size,), dtype) if zero_u else u
    singles = jnp.left_shift(1, jnp.arange(n, dtype=jnp.int32))
    log_z = jnp.full((size,), -jnp.inf, dtype).at[singles].set(u[singles])
    best = jnp.full((size,), -jnp.inf, dtype).at[singles].set(0.0) if with_map else None
    bp = jnp.zeros((size,), jnp.int32) if with_map else None
    for k in range(2, n + 1):
        masks_np, pos_np = level_tables(n, k)
        count, P = len(masks_np), 2 ** (k - 1) - 1
        c, n_chunks = _chunking(count, P)
        padn = c * n_chunks - count
        masks_p = np.concatenate([masks_np, np.repeat(masks_np[:1], padn)]).reshape(n_chunks, c)
        pos_p = np.concatenate([pos_np, np.repeat(pos_np[:1], padn, 0)]).reshape(n_chunks, c, k)

        def chunk(args, log_z=log_z, best=best, k=k):
            S, pos = args
            L = splits_of(pos, k)
            R = S[:, None] ^ L
            fP = jax.tree_util.tree_map(lambda x: x[:, None], take_rows(feats, S))
            lp = energy.log_psi(fP, take_rows(feats, L), take_rows(feats, R))
            z = _logsumexp_rows(lp + log_z[L] + log_z[R])
            if best is None:
                return z, None, None
            m = lp + best[L] + best[R]
            arg = jnp.argmax(m, axis=1)
            return z, jnp.max(m, axis=1), jnp.take_along_axis(L, arg[:, None], axis=1)[:, 0]

        if n_chunks == 1:
            # one chunk: no loop (a while loop per level costs compile time, most under grad)
            z, mv, mb = jax.tree_util.tree_map(
                lambda x: x[None], chunk((jnp.asarray(masks_p[0]), jnp.asarray(pos_p[0])))
            )
        else:
            z, mv, mb = jax.lax.map(jax.checkpoint(chunk), (jnp.asarray(masks_p), jnp.asarray(pos_p)))
        S_all = jnp.asarray(masks_p.reshape(-1))
        log_z = log_z.at[S_all].set(z.reshape(-1) + u[S_all])
        if with_map:
            best = best.at[S_all].set(mv.reshape(-1))
            bp = bp.at[S_all].set(mb.reshape(-1))
    return log_z, best, bp


class TrellisSolution(NamedTuple):
    """Output of `solve` (one problem of ``N`` elements; subsets indexed by bitmask).

    Fields:
      log_z: log partition function over all ``(2N-3)!!`` hierarchies.
      map_log_phi: ``log phi`` of the MAP hierarchy.
      map_tree: the MAP hierarchy as a `jaxhc.Tree` (None inside `solve_batch`).
      log_marginals: ``[2^N]`` ``log P(S in H)`` for every cluster ``S`` (``-inf`` for the
        empty set); None when not requested.
      log_z_table: ``[2^N]`` ``log Z(S)`` of every subset (sub-trellis partition functions).
      map_table: ``[2^N]`` ``log phi*(S)``; backpointer: ``[2^N]`` left child of the MAP split.
      n_leaves: ``N``.
      map_children: compact batches only (`solve_batch` with ``tables=False``): ``[B, N_max
        - 1, 2]`` int32, the MAP tree of every problem as `jaxhc.Tree` children (leaves
        ``0..N-1``, inner node ``N + t`` is row ``t``; rows past ``N - 1`` are ``-1``).
      map_log_marginals: compact batches with ``marginals=True`` only: ``[B, N_max - 1]``
        ``log P(S in H)`` of the cluster ``S`` of every inner node of the MAP tree (row
        order of ``map_children``; NaN past ``N - 1``).
    """

    log_z: Any
    map_log_phi: Any
    map_tree: Optional[Tree]
    log_marginals: Any
    log_z_table: Any
    map_table: Any
    backpointer: Any
    n_leaves: Any
    map_children: Any = None
    map_log_marginals: Any = None


def tree_from_backpointers(bp: np.ndarray, n: int, root: Optional[int] = None) -> Tree:
    """Builds the MAP `Tree` by following backpointers from the root mask."""
    bp = np.asarray(bp)
    root = (1 << n) - 1 if root is None else root
    splits = []  # (S, L, R) in BFS order
    queue = [root]
    while queue:
        S = queue.pop(0)
        if S & (S - 1) == 0:
            continue
        L = int(bp[S])
        R = S ^ L
        splits.append((S, L, R))
        queue.extend([L, R])
    return tree_from_splits(splits, n)


def tree_from_splits(splits, n: int) -> Tree:
    """`Tree` from a list of ``(S, L, R)`` bitmask splits in top-down (BFS) order."""
    ids = {1 << i: i for i in range(n)}
    m = len(splits)
    children = np.zeros((m, 2), np.int64)
    for t in range(m - 1, -1, -1):
        S, L, R = splits[t]
        node = n + (m - 1 - t)
        a, b = ids[int(L)], ids[int(R)]
        children[m - 1 - t] = (min(a, b), max(a, b))
        ids[int(S)] = node
    return Tree(children).validate() if n > 1 else Tree(np.zeros((0, 2), np.int64))


def prepare_leaves(energy, leaves, max_leaves, max_bytes):
    """Checks ``energy`` and ``leaves`` (one awkward jet converted) and the size limits:
    ``(leaves as a JAX array, N)``."""
    if not isinstance(energy, Energy):
        raise TypeError(f"energy must be a jaxhc.trellis Energy, got {type(energy).__name__}")
    if any(c.__module__.split(".")[0] == "awkward" for c in type(leaves).__mro__):  # one jet
        from ..jets.hep import jet_from_awkward

        leaves = jet_from_awkward(leaves)
    arr = energy.validate_leaves(leaves)
    n = energy.n_elements(arr)
    check_num_leaves(n, max_leaves, max_bytes)
    return jnp.asarray(arr), n


@lru_cache(maxsize=None)
def _complement_positions(n: int, k: int):
    """Bit positions not in each size-k subset (same order as `level_tables`)."""
    _, combos = level_tables(n, k)
    allpos = np.arange(n)
    return np.array([np.setdiff1d(allpos, c) for c in combos], dtype=np.int32).reshape(len(combos), n - k)


def _select(cond, a, b):
    """Elementwise ``where`` on feature pytrees whose leaves may have trailing axes."""

    def sel(x, y):
        c = cond.reshape(cond.shape + (1,) * (max(x.ndim, y.ndim) - cond.ndim))
        return jnp.where(c, x, y)

    return jax.tree_util.tree_map(sel, a, b)


def _outside(energy: Energy, feats, n: int, log_z, root=None):
    """Top-down outside pass: ``log_out(S) = log sum over trees of the potential of
    everything outside S`` (the root has 0), computed by pulling from every superset
    ``P = S | T`` with ``T`` a non-empty subset of the complement (gathers only)."""
    dtype = log_z.dtype
    root = 2**n - 1 if root is None else root
    out = jnp.full((2**n,), -jnp.inf, dtype).at[root].set(0.0)
    for k in range(n - 1, 0, -1):
        masks_np, _ = level_tables(n, k)
        cpos_np = _complement_positions(n, k)
        count, Q = len(masks_np), 2 ** (n - k) - 1
        c, n_chunks = _chunking(count, Q)
        padn = c * n_chunks - count
        masks_p = np.concatenate([masks_np, np.repeat(masks_np[:1], padn)]).reshape(n_chunks, c)
        cpos_p = np.concatenate([cpos_np, np.repeat(cpos_np[:1], padn, 0)]).reshape(n_chunks, c, n - k)

        def chunk(args, out=out, k=k, Q=Q):
            S, cpos = args
            j = jnp.arange(1, Q + 1, dtype=jnp.int32)[None, :]
            T = jnp.zeros((S.shape[0], Q), jnp.int32)
            for b in range(n - k):
                T = T | (((j >> b) & 1) << cpos[:, b : b + 1])
            Sb = jnp.broadcast_to(S[:, None], T.shape)
            P = Sb | T
            low = P & (-P)
            s_left = (Sb & low) != 0  # the split of P is (S, T) if S holds P's lowest element
            fS, fT = take_rows(feats, Sb), take_rows(feats, T)
            lp = energy.log_psi(take_rows(feats, P), _select(s_left, fS, fT), _select(s_left, fT, fS))
            return jax.scipy.special.logsumexp(out[P] + lp + log_z[T], axis=1)

        o = jax.lax.map(chunk, (jnp.asarray(masks_p), jnp.asarray(cpos_p)))
        S_all = jnp.asarray(masks_p.reshape(-1))
        out = out.at[S_all].set(jnp.where(S_all == root, 0.0, o.reshape(-1)))
    return out


def solve_impl(energy, leaves, n, marginals=True, root=None):
    feats = energy.features(leaves)
    root = 2**n - 1 if root is None else root
    log_z, best, bp = run_dp(energy, feats, n)
    log_m = None
    if marginals:
        # P(S in H) = outside(S) Z(S) / Z (Sec. 2.4 / App. A.4.2 of the trellis paper)
        log_m = _outside(energy, feats, n, log_z, root) + log_z - log_z[root]
        # Z = 0 (every hierarchy impossible, e.g. jets below the cut): no cluster has
        # positive probability; -inf rather than the NaN of -inf - (-inf)
        log_m = jnp.where(log_z[root] == -jnp.inf, -jnp.inf, log_m)
        log_m = log_m.at[0].set(-jnp.inf)
    return log_z[root], best[root], log_m, log_z, best, bp


_solve_core = jax.jit(solve_impl, static_argnames=("n", "marginals"))


# ------------------------------------------------------------------------------------------
# one compiled program per size class (levels as a loop over chunks of host-built tables)
# ------------------------------------------------------------------------------------------
#: size classes: a problem of ``n`` leaves runs in the program of the smallest bound
#: ``>= n`` (its leaves padded with `Energy.pad_leaves`, its tables over ``2^bound``
#: subsets of which it uses the first ``2^n``); above the last bound, one program per ``n``
_SIZE_CLASSES = (8, 12, 16, 20)
#: ``(rows per chunk, row bits)`` of each class: a row holds ``2^bits`` consecutive splits
#: of one parent, a chunk ``rows x 2^bits`` split evaluations. Wider rows halve the per-row
#: work (parent gathers, segment reductions, scatters); narrower ones waste fewer slots on
#: the small levels (a parent of ``k`` elements has ``2^(k-1) - 1`` splits), which weigh
#: more at small ``n`` (benchmarks/README.md, "Rows of 32 splits")
_CLASS_SHAPE = {8: (1 << 5, 4), 12: (1 << 7, 5), 16: (1 << 10, 5), 20: (1 << 10, 5)}


def size_class(n: int) -> Optional[int]:
    """The bound of the size class of ``n`` leaves (None: above every class)."""
    return next((c for c in _SIZE_CLASSES if n <= c), None)


def _level_rows(count: int, sbits: int, row_bits: int) -> tuple:
    """``(rows, shift)`` of a level of ``count`` parents with ``2^sbits`` split slots each
    (``2^shift`` rows of ``2^row_bits`` splits per parent)."""
    sh = max(0, sbits - row_bits)
    return count << sh, sh


@lru_cache(maxsize=64)
def _class_tables(n: int, bound: int):
    """Host tables of ``n`` leaves in the class of ``bound``: the masks in level order
    (``[2^bound]``, level ``k`` from ``offset[k]``, ``count[k]`` of them, in `level_tables`
    order), and the chunk schedules ``[C, 2]`` (level, first row) of the inside pass (levels
    2..n) and of the outside pass (levels n-1..1), padded to the class's largest ``C``."""
    R, row_bits = _CLASS_SHAPE[bound]
    order = np.zeros(2**bound, np.int32)
    offset = np.zeros(bound + 2, np.int32)
    count = np.zeros(bound + 2, np.int32)
    pos = 0
    for k in range(1, n + 1):
        masks, _ = level_tables(n, k)
        order[pos : pos + len(masks)] = masks
        offset[k], count[k] = pos, len(masks)
        pos += len(masks)

    def schedule(m, levels, sbits):
        rows = [(k, _level_rows(math.comb(m, k), sbits(m, k), row_bits)[0]) for k in levels(m)]
        return [(k, r0) for k, nr in rows for r0 in range(0, nr, R)]

    inside = lambda m: range(2, m + 1)
    outside = lambda m: range(m - 1, 0, -1)
    s_in = lambda m, k: k - 1
    s_out = lambda m, k: m - k
    tabs = []
    for levels, sbits in ((inside, s_in), (outside, s_out)):
        sched = schedule(n, levels, sbits)
        size = max(1, len(schedule(bound, levels, sbits)))
        arr = np.zeros((size, 2), np.int32)
        if sched:
            arr[: len(sched)] = np.asarray(sched, np.int32)
        tabs.append((arr, len(sched)))
    return order, offset, count, tabs[0], tabs[1]


def _row_bits(S, nbits: int):
    """``[nbits][R]`` the successive lowest set bits of ``S`` (as masks; 0 once exhausted)."""
    out = []
    for _ in range(nbits):
        low = S & (-S)
        out.append(low)
        S = S ^ low
    return out


def _segment_rows(ms, s, seg, R):
    """``(m, t)`` of each of the ``R`` segments (``seg``: local parent of each row) with
    ``m + log t`` the ``logsumexp`` of its rows (a row's is ``ms + log s``, `_row_lse`)."""
    mr = jnp.where(s > 0, ms, -jnp.inf)
    m = jax.ops.segment_max(mr, seg, num_segments=R)
    m = jnp.where(jnp.isfinite(m), m, 0.0)
    return m, jax.ops.segment_sum(s * jnp.exp(mr - m[seg]), seg, num_segments=R)


def _add_log(old, m, t):
    """``log(e^old + t e^m)`` (``t >= 0``): linear space and one vectorised ``log``, where
    a ``logaddexp`` (and a ``log`` per row) would run as scalar libm calls."""
    mm = jnp.maximum(old, jnp.where(t > 0, m, -jnp.inf))
    mm = jnp.where(jnp.isfinite(mm), mm, 0.0)
    tot = t * jnp.exp(jnp.where(t > 0, m, mm) - mm) + jnp.exp(old - mm)
    return jnp.where(tot > 0, vmath.log(jnp.where(tot > 0, tot, 1.0)) + mm, -jnp.inf)


def _segment_max_first(mr, lr, seg, R):
    """Max of ``mr`` over the rows of each segment, with the ``lr`` of its first row."""
    bm = jax.ops.segment_max(mr, seg, num_segments=R)
    rows = jnp.arange(R, dtype=jnp.int32)
    first = jax.ops.segment_min(jnp.where(mr == bm[seg], rows, R), seg, num_segments=R)
    return bm, lr[jnp.clip(first, 0, R - 1)]


def _tree_reduce_cols(a, op):
    """Reduces the last axis (a power of two) by halving with an elementwise ``op`` (fuses
    and vectorises across rows, unlike a reduction over a short row)."""
    while a.shape[-1] > 1:
        h = a.shape[-1] // 2
        a = op(a[..., :h], a[..., h:])
    return a[..., 0]


def _row_lse(a):
    """``logsumexp`` over the last axis as ``(ms, s)``, the row's finite max (0 for an all
    ``-inf`` row) and ``sum e^(a - ms)``: ``logsumexp = ms + log s`` (``-inf`` at ``s = 0``)."""
    m = _tree_reduce_cols(a, jnp.maximum)
    ms = jnp.where(jnp.isfinite(m), m, 0.0)
    return ms, _tree_reduce_cols(jnp.exp(a - ms[..., None]), jnp.add)


def _peel_shift(z, S, bits):
    """``max_i log Z(S \\ {i})`` over the elements ``i`` of ``S`` (``bits``: their masks, 0
    once exhausted; 0 if none is finite): the shift of the rows of ``S`` in the linear-space
    inside pass. ``log Z(S) = log Z(S \\ {i}) + log psi(S, S \\ {i}, {i}) + log(1 + the other
    splits)``, so for the benchmark jets and affinity problems ``log Z(S)`` lies 2-11 (Ginkgo)
    or 0-103 (Dasgupta, N <= 14) below the shift, well inside float64's ``e^+-700``; a parent
    outside that range is found and its rows recomputed with their own max (`_class_pass`)."""
    m = jnp.full(S.shape, -jnp.inf, z.dtype)
    for b in bits:
        m = jnp.maximum(m, jnp.where(b != 0, z[S ^ b], -jnp.inf))
    return jnp.where(jnp.isfinite(m), m, 0.0)


def _linear_floor(dtype) -> tuple:
    """``(tiny, floor)`` of the linear-space inside pass: a possible split's term is raised
    to at least ``tiny`` (the smallest normal number), so a parent whose sum is 0 has no
    possible split; with fewer than 2^19 splits per parent the raised terms add less than
    ``eps / 32`` of any sum from ``floor`` up, which is therefore exact to rounding."""
    fi = jnp.finfo(dtype)
    return float(fi.tiny), float(fi.tiny) * 2.0 ** (fi.nmant + 24)


def _row_max_first(v, L):
    """Max over the last axis and the ``L`` of its first maximal entry (``jnp.argmax`` order:
    a NaN is the maximum, the first one wins): the smallest ``L``, as ``L`` grows along a row."""
    m = _tree_reduce_cols(v, jnp.maximum)
    hit = jnp.where(jnp.isnan(m)[..., None], jnp.isnan(v), v == m[..., None])
    return m, _tree_reduce_cols(jnp.where(hit, L, jnp.iinfo(L.dtype).max), jnp.minimum)


#: smallest ``-log P(S in H)`` the float64 outside pass takes from the linear-space push
#: (see `_class_core`); clusters less likely than ``e^-PUSH_FLOOR`` are computed by the pull
PUSH_FLOOR = 500.0


def _push_floor(dtype) -> float:
    """`PUSH_FLOOR`, or less where ``dtype`` is narrower: a split probability flushes below
    the dtype's ``tiny``, so with fewer than e^21 splits a cluster loses less than e^21 tiny,
    to stay below ``eps e^-floor`` with a margin of e^5 (float32: 45)."""
    fi = jnp.finfo(dtype)
    return min(PUSH_FLOOR, -math.log(float(fi.tiny)) + math.log(float(fi.eps)) - 26.0)


def _class_pass(energy, feats, n, tabs, sched, num, bound, log_z, best, bp, out, kind):
    """One pass over the chunk schedule ``sched[:num]``:

    - ``kind="in"``: the inside pass (log Z, with the MAP when ``best`` is given);
    - ``kind="push"``: the outside pass as split probabilities ``P(S -> L, R in H)`` pushed
      from every split to both children, the inside schedule run backwards (top-down), each
      split evaluated once; ``out`` holds ``P(S in H)`` in linear space, scatter-added;
    - ``kind="out"``: the outside pass pulled from every superset (``out`` holds ``log
      out(S)``, log space throughout; each split is evaluated once from each child).
    """
    order, offset, count = tabs
    R, row_bits = _CLASS_SHAPE[bound]
    W = 1 << row_bits
    t = jnp.arange(W, dtype=jnp.int32)
    tbits = [((t >> b) & 1).astype(bool) for b in range(row_bits)]
    rows = jnp.arange(R, dtype=jnp.int32)
    full = (jnp.left_shift(1, n) - 1).astype(jnp.int32)
    drop = jnp.int32(2**bound)

    def per_row(free, base, j0, z=None):
        # the parent's bits and the high part of L: in the split loop XLA would recompute
        # them for each of the row's splits, a cond's results are computed once; with the
        # table ``z``, also the row's shift `_peel_shift`
        bms = _row_bits(free, bound - 1)
        hi = base
        for b in range(row_bits, bound - 1):
            hi = hi | jnp.where(((j0 >> b) & 1) == 1, bms[b], 0)
        if z is None:
            return (hi, *bms[:row_bits])
        return (hi, *bms[:row_bits], _peel_shift(z, free | base, [base, *bms]))

    def body(i, carry):
        log_z, best, bp, out = carry
        c = num - 1 - i if kind == "push" else i
        k, r0 = sched[c, 0], sched[c, 1]
        sbits = n - k if kind == "out" else k - 1
        sh = jnp.maximum(0, sbits - row_bits)
        r = r0 + rows
        p = r >> sh
        live_row = p < count[k]
        S = order[offset[k] + jnp.minimum(p, count[k] - 1)]
        j0 = (r & (jnp.left_shift(1, sh) - 1)) << row_bits
        if kind == "out":
            base = jnp.zeros_like(S)
            free = full & ~S
        else:
            base = S & (-S)
            free = S ^ base
        if kind == "push":  # k >= 0 always holds (XLA cannot know it)
            zeros = lambda *a: (jnp.zeros_like(free),) * (1 + row_bits)
            hi, *bms = jax.lax.cond(k >= 0, per_row, zeros, free, base, j0)
        elif kind == "in" and not stacked:
            hi, *bms, shift = per_row(free, base, j0, log_z)
        else:
            hi, *bms = per_row(free, base, j0)
        Sb = S[:, None]
        seg = p - p[0]  # the row's parent within the chunk
        j = lambda: j0[:, None] + t[None, :]  # built where used: a cond's operand is materialised

        def row_splits():  # the rows' left sides L (and, inside, the splits (L, Rm) of S)
            L = hi[:, None]
            for b in range(row_bits):
                L = L | jnp.where(tbits[b][None, :], bms[b][:, None], 0)
            if kind == "out":
                return (L,)
            valid = live_row[:, None] & (j() < (jnp.left_shift(1, k - 1) - 1))
            Rm = Sb ^ L
            fP = jax.tree_util.tree_map(lambda x: x[:, None], take_rows(feats, S))
            return L, Rm, valid, energy.log_psi(fP, take_rows(feats, L), take_rows(feats, Rm))

        if kind == "out":
            (L,) = row_splits()
        else:
            L, Rm, valid, lp = row_splits()
        if kind == "push":
            mS, zS = out[S], log_z[S]  # log P(S in H) - log Z(S) = log out(S) - log Z
            oS = jnp.where((mS > 0) & (zS > -jnp.inf), jnp.log(jnp.where(mS > 0, mS, 1.0)) - zS, -jnp.inf)
            pr = jnp.exp(jnp.where(valid, oS[:, None] + lp + log_z[L] + log_z[Rm], -jnp.inf))
            return log_z, best, bp, out.at[L].add(pr).at[Rm].add(pr)
        if kind == "in" and stacked:  # log Z and MAP value from one gather of the stacked table
            v = jnp.where(valid[..., None], lp[..., None] + log_z[L] + log_z[Rm], -jnp.inf)
            # written to a buffer once and read by the four row reductions (XLA would
            # otherwise recompute the split for each); the index is 0, unknown to XLA
            best = jax.lax.dynamic_update_slice(best, v, ((k < 0).astype(jnp.int32), jnp.int32(0), jnp.int32(0)))
            v = best[:R]
            zr = _row_lse(v[..., 0])
            mr, lr = _row_max_first(v[..., 1], L)
        elif kind == "in":
            # the terms e^(log psi + log Z(L) + log Z(R) - shift) summed in linear space with
            # the parent's shift (`_peel_shift`), each possible one at least ``tiny``: the
            # exp joins the split loop (a reduction XLA fuses with it, a halving tree not)
            a = jnp.where(valid, lp + log_z[L] + log_z[Rm] - shift[:, None], -jnp.inf)
            sr = jnp.sum(jnp.where(a == -jnp.inf, 0.0, jnp.maximum(jnp.exp(a), tiny)), axis=-1)
            # each parent's sum over the chunk: 0 (no split possible) or in [floor, inf),
            # else its rows are computed again, shifted by their own max
            ss = jax.ops.segment_sum(sr, seg, num_segments=R)
            doubt = jnp.any(~((ss == 0) | ((ss >= floor) & (ss < jnp.inf))))

            def shifted(_):  # the splits evaluated again here, not kept from the loop above
                L, Rm, valid, lp = row_splits()
                return _segment_rows(*_row_lse(jnp.where(valid, lp + log_z[L] + log_z[Rm], -jnp.inf)), seg, R)

            zs = jax.lax.cond(doubt, shifted, lambda _: (jax.ops.segment_max(shift, seg, num_segments=R), ss), None)
        else:
            valid = live_row[:, None] & (j() >= 1) & (j() < jnp.left_shift(1, sbits))
            T = L
            P = Sb | T
            low = P & (-P)
            s_left = (Sb & low) != 0
            Sbb = jnp.broadcast_to(Sb, T.shape)
            fS, fT = take_rows(feats, Sbb), take_rows(feats, T)
            lp = energy.log_psi(take_rows(feats, P), _select(s_left, fS, fT), _select(s_left, fT, fS))
            a = jnp.where(valid, out[P] + lp + log_z[T], -jnp.inf)
            zr = _row_lse(a)
        sp = p[0] + rows
        seg_live = (sp < count[k]) & (rows <= seg[-1])
        seg_S = order[offset[k] + jnp.minimum(sp, count[k] - 1)]
        idx = jnp.where(seg_live, seg_S, drop)
        if kind == "in" and stacked:
            old = log_z[jnp.minimum(idx, drop - 1)]
            bm, bl = _segment_max_first(mr, lr, seg, R)
            first = (sp << sh) >= r0  # this chunk holds the parent's first row
            take = first | (bm > old[:, 1])
            new = jnp.stack([_add_log(old[:, 0], *_segment_rows(*zr, seg, R)), jnp.where(take, bm, old[:, 1])], axis=1)
            log_z = log_z.at[idx].set(new, mode="drop")
            bp = bp.at[idx].set(jnp.where(take, bl, bp[jnp.minimum(idx, drop - 1)]), mode="drop")
        elif kind == "in":
            old = log_z[jnp.minimum(idx, drop - 1)]
            log_z = log_z.at[idx].set(_add_log(old, *zs), mode="drop")
        else:
            old = out[jnp.minimum(idx, drop - 1)]
            out = out.at[idx].set(_add_log(old, *_segment_rows(*zr, seg, R)), mode="drop")
        return log_z, best, bp, out

    stacked = best is not None
    tiny, floor = _linear_floor(log_z.dtype)
    if stacked:  # one [2^bound, 2] table: log Z and the MAP value of every subset
        log_z = jnp.stack([log_z, best], axis=1)
    buf = jnp.zeros((R + 1, W, 2), log_z.dtype) if stacked else None
    log_z, _, bp, out = jax.lax.fori_loop(0, num, body, (log_z, buf, bp, out))
    if stacked:
        return log_z[:, 0], log_z[:, 1], bp, out
    return log_z, best, bp, out


@partial(jax.jit, static_argnames=("bound", "with_map", "marginals"))
def _class_core(energy, leaves, n, tabs, sched_in, num_in, sched_out, num_out, bound, with_map, marginals):
    """`solve_impl` for every ``n`` of one size class (``leaves`` padded to ``bound``;
    tables over ``2^bound`` subsets, those of the first ``n`` elements used)."""
    feats = energy.features(leaves)
    dtype = jax.tree_util.tree_leaves(feats)[0].dtype
    size = 2**bound
    singles = jnp.left_shift(1, jnp.arange(bound, dtype=jnp.int32))
    real_single = jnp.arange(bound) < n
    sidx = jnp.where(real_single, singles, size)
    log_z = jnp.full((size,), -jnp.inf, dtype).at[sidx].set(0.0, mode="drop")
    best = jnp.full((size,), -jnp.inf, dtype).at[sidx].set(0.0, mode="drop") if with_map else None
    bp = jnp.zeros((size,), jnp.int32) if with_map else None
    log_z, best, bp, _ = _class_pass(energy, feats, n, tabs, sched_in, num_in, bound, log_z, best, bp, None, "in")
    root = (jnp.left_shift(1, n) - 1).astype(jnp.int32)
    log_m = None
    if marginals:
        prob = jnp.zeros((size,), dtype).at[root].set(1.0)
        prob = _class_pass(energy, feats, n, tabs, sched_in, num_in, bound, log_z, None, None, prob, "push")[3]

        def pull(_):
            out = jnp.full((size,), -jnp.inf, dtype).at[root].set(0.0)
            out = _class_pass(energy, feats, n, tabs, sched_out, num_out, bound, log_z, None, None, out, "out")[3]
            return out + log_z - log_z[root]

        # A split probability below ~e^-708 flushes to (or toward) zero; with fewer than e^21
        # splits, no cluster loses more than e^-687 of its probability, so the pushed values
        # from e^-PUSH_FLOOR up are exact to rounding (float64). A buildable cluster below
        # that (or a NaN) sends the whole pass to the log-space pull instead.
        doubt = ((log_z > -jnp.inf) & ~(prob >= math.exp(-_push_floor(dtype)))) | ~(prob <= 1.5)
        pushed = lambda p: jnp.where(p > 0, jnp.log(jnp.where(p > 0, p, 1.0)), -jnp.inf)
        log_m = jax.lax.cond(jnp.any(doubt) & (log_z[root] > -jnp.inf), pull, pushed, prob)
        log_m = jnp.where(log_z[root] == -jnp.inf, -jnp.inf, log_m)
        log_m = log_m.at[0].set(-jnp.inf)
    return log_z[root], None if best is None else best[root], log_m, log_z, best, bp


def _class_args(energy, leaves, n, bound):
    """The positional arguments of `_class_core` for ``n`` leaves run in the class of ``bound``."""
    order, offset, count, (s_in, c_in), (s_out, c_out) = _class_tables(n, bound)
    lp = energy.pad_leaves(jnp.asarray(leaves), bound)
    return energy, lp, jnp.int32(n), (order, offset, count), s_in, jnp.int32(c_in), s_out, jnp.int32(c_out)


def class_call(energy, leaves, n, with_map, marginals, tables=True):
    """Runs `_class_core` for ``n`` leaves (``leaves [n, ...]``); tables of ``2^n`` subsets
    (cut on the host; ``tables=False``: ``log Z`` alone, traceable). None when ``n`` is
    above every size class."""
    bound = size_class(n)
    if bound is None:
        return None
    res = _class_core(*_class_args(energy, leaves, n, bound), bound=bound, with_map=with_map, marginals=marginals)
    if not tables:
        return res[0]
    size = 2**n
    cut = lambda x: None if x is None else jnp.asarray(np.asarray(x)[:size])
    log_z, map_v, log_m, tz, tb, bp = res
    return log_z, map_v, cut(log_m), cut(tz), cut(tb), cut(bp)


def solve(
    energy: Energy, leaves, *, marginals: bool = True, max_leaves: Optional[int] = None, max_bytes: Optional[int] = None
) -> TrellisSolution:
    """Exact partition function, MAP hierarchy and all cluster marginals.

    Args:
      energy: a `jaxhc.trellis.Energy` (e.g. ``GinkgoEnergy(lam=2.0, t_cut=16.0)``).
      leaves: the problem's data, one row per element (four-momenta ``[N, 4]`` for Ginkgo,
        a symmetric affinity matrix ``[N, N]`` for Dasgupta / correlation clustering).
      marginals: also compute ``log P(S in H)`` for every cluster (an outside pass).
      max_leaves: refuse larger ``N`` (default `MAX_EXACT_LEAVES`).
      max_bytes: refuse ``N`` whose `memory_required` exceeds this.

    Returns:
      `TrellisSolution`. (Alg. 1 / Prop. 1, Prop. 2 and Sec. 2.4 of the trellis paper.)
    """
    leaves, n = prepare_leaves(energy, leaves, max_leaves, max_bytes)
    res = class_call(energy, leaves, n, True, marginals)
    if res is None:
        res = _solve_core(energy, leaves, n, marginals=marginals)
    log_z, map_v, log_m, tz, tb, bp = res
    _check_log_z(log_z)
    tree = tree_from_backpointers(np.asarray(bp), n)
    return TrellisSolution(log_z, map_v, tree, log_m, tz, tb, bp, n)


def _check_log_z(log_z):
    if float(log_z) == np.inf or np.isnan(float(log_z)):
        msg = "the energy's log potentials of these leaves overflow float64; rescale the leaves or the energy's"
        raise ValueError(f"log Z is {float(log_z)}: {msg} parameters (e.g. beta)")


def log_partition(energy: Energy, leaves) -> jax.Array:
    """``log Z`` alone; differentiable in the energy's parameters (e.g. ``jax.grad`` w.r.t.
    Ginkgo's ``lam`` or an inverse temperature) and usable inside ``numpyro.factor``.

    Shapes are checked eagerly only when ``leaves`` is concrete.
    """
    if not isinstance(energy, Energy):
        raise TypeError(f"energy must be a jaxhc.trellis Energy, got {type(energy).__name__}")
    n = energy.n_elements(leaves)
    if not isinstance(leaves, jax.core.Tracer):
        leaves, n = prepare_leaves(energy, leaves, None, None)
        if not any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(energy)):
            # concrete: the size class's program (not differentiable: a loop over chunks)
            res = class_call(energy, leaves, n, False, False, tables=False)
            if res is not None:
                return res
    return _log_partition_core(energy, jnp.asarray(leaves), n)


@partial(jax.jit, static_argnames=("n",))
def _log_partition_core(energy, leaves, n):
    feats = energy.features(leaves)
    return run_dp(energy, feats, n, with_map=False)[0][2**n - 1]


def cluster_marginals(energy: Energy, leaves) -> jax.Array:
    """``[2^N]`` probabilities ``P(S in H)`` of every cluster (they sum to ``2N - 1``): those
    of `solve`, from log Z and the outside pass alone (no MAP) for ``N`` in a size class."""
    leaves, n = prepare_leaves(energy, leaves, None, None)
    res = class_call(energy, leaves, n, False, True)
    if res is None:
        res = _solve_core(energy, leaves, n, marginals=True)
    _check_log_z(res[0])
    return jnp.exp(res[2])


def subtree_log_marginal(solution: TrellisSolution, energy: Energy, leaves, subtree: Tree, leaf_ids) -> jax.Array:
    """``log P(H_i)``: probability that the hierarchy contains the given sub-hierarchy.

    ``subtree`` is a `Tree` over ``len(leaf_ids)`` leaves; its leaf ``a`` is element
    ``leaf_ids[a]``. ``P(H_i) = P(X_i in H) phi(H_i) / Z(X_i)`` (Sec. 2.4 of the paper).
    """
    from .energies import log_phi_of_tree

    if solution.log_marginals is None:
        raise ValueError("solution has no marginals; call solve(..., marginals=True)")
    leaf_ids = np.asarray(leaf_ids, np.int64)
    if len(set(leaf_ids.tolist())) != len(leaf_ids) or subtree.n_leaves != len(leaf_ids):
        raise ValueError("leaf_ids must be distinct and one per leaf of subtree")
    mask = int(np.sum(np.left_shift(1, leaf_ids)))
    lv = (
        jnp.asarray(leaves)[jnp.asarray(leaf_ids)]
        if not isinstance(energy, _affinity_types())
        else jnp.asarray(leaves)[jnp.ix_(leaf_ids, leaf_ids)]
    )
    log_phi = log_phi_of_tree(energy, lv, subtree)
    lm = solution.log_marginals[mask]
    return jnp.where(lm == -jnp.inf, -jnp.inf, lm + log_phi - solution.log_z_table[mask])


def _affinity_types():
    from .energies import AffinityEnergy

    return (AffinityEnergy,)
