"""One compiled program per size class for the exact trellis (`jaxhc.trellis.exact`).

A problem of ``n`` leaves runs in the program of the smallest class bound ``>= n`` (``N <=
8``, ``9..10``, ``11..12``, ``13..14``, ``15..16``, ``17..18``, ``19..20``; from 21 to 24
leaves a class of its own, bound ``n``; `size_class`): the leaves are padded to the bound,
the tables span ``2^bound`` subsets (the first ``2^n`` used), and the levels are one
``fori_loop`` over chunks of rows (a row: ``2^bits`` consecutive splits of one parent, its
left sides built from the parent's bits) scheduled by host tables passed as arguments; a
parent's rows combine by segment reductions within a chunk and in linear space across
chunks. `solve`, `cluster_marginals`, `sample` and a concrete `log_partition` use them.

- the inside pass with the MAP: each row's ``logsumexp`` shifted by its max, the MAP's
  maximum and first argmax from one buffer of the row's split values;
- the log-Z-only inside pass: each parent's terms ``x e^(b + log Z(L) + log Z(R))``
  (`Energy.log_psi_parts`) summed in linear space, shifted by its best peel (`_peel_shift`),
  no ``log`` per split; for a separable energy (`Energy.log_psi_separable`) the terms
  ``e^(a(S) + g(L) + g(R))`` from one table per level, shifted by the term of ``({low},
  rest)``; a chunk with a parent whose sum falls outside ``[floor, inf)`` is
  recomputed in log space (`_linear_floor`);
- the outside pass as a push of split probabilities to both children (linear space), with
  the log-space pull where a cluster is below ``e^-PUSH_FLOOR``.
"""

from __future__ import annotations

import math
from functools import lru_cache, partial
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from .._internal import vmath
from . import exported
from .energies import pad_on_host, separable_form
from .subsets import select_features, take_in_bounds, take_rows

__all__ = ["size_class", "class_call", "PUSH_FLOOR"]


#: size classes: a problem of ``n`` leaves runs in the program of the smallest bound
#: ``>= n`` (its leaves padded with `Energy.pad_leaves`, its tables over ``2^bound``
#: subsets of which it uses the first ``2^n``); above the last bound, one program per ``n``
_SIZE_CLASSES = (8, 10, 12, 14, 16, 18, 20)
#: above the last class and up to this many leaves (`jaxhc.trellis.MAX_EXACT_LEAVES`), a
#: class of one ``n`` (bound ``n``): one program per ``n``, whose compilation is nothing
#: beside the run (2^21 subsets and more), instead of the level-unrolled per-N programs
#: of `jaxhc.trellis.exact` (their ``lax.map`` of 2^14 splits a step)
_OWN_CLASS_MAX = 24
#: ``(rows per chunk, row bits)`` of each class: a row holds ``2^bits`` consecutive splits
#: of one parent, a chunk ``rows x 2^bits`` split evaluations. Wider rows halve the per-row
#: work (parent gathers, segment reductions, scatters); narrower ones waste fewer slots on
#: the small levels (a parent of ``k`` elements has ``2^(k-1) - 1`` splits), which weigh
#: more at small ``n`` (benchmarks/notes/trellis.md, "Linear-space log Z, rows of 32
#: splits"). The class of 10 exists for latency: 9 and 10 leaves (the most common Ginkgo
#: jets) in the class of 12 spent most of their time on the empty slots of its 4096-split
#: chunks (a warm 9-leaf kernel 1.10 ms there, 0.69 ms in chunks of 32 rows of 16 splits).
#: The two small classes take rows of 8 splits (class 10: 64 rows a chunk, class 8: 32):
#: their parents have few splits, and the kernels of 9 / 10 / 8 / 6 leaves take 0.61 / 1.45
#: / 0.29 / 0.14 ms against 0.69 / 1.58 / 0.33 / 0.17 ms with rows of 16
#: (benchmarks/notes/trellis.md, "Fresh-process latency"). The class of 14 keeps 13 and 14
#: leaves out of the 2^16 tables of the class of 16, whose per-level work (the separable
#: pass's table, the segment scatters) cost them 10-30% of log Z. From 13 leaves rows of 64
#: splits: 0-30% faster than rows of 32 for log Z, the MAP and the marginals of Dasgupta and
#: Ginkgo at N = 14, 16 and 17 (2026-12-06; in November, before the later kernel changes,
#: they were no faster). The class of 18 keeps 17 and 18 leaves out of the 2^20 tables of
#: the class of 20 (log Z at N = 17 / 18: Dasgupta 9-10%, Ginkgo exact 1-2% faster;
#: benchmarks/notes/trellis.md)
_CLASS_SHAPE = {
    8: (1 << 5, 3),
    10: (1 << 6, 3),
    12: (1 << 7, 5),
    14: (1 << 10, 6),
    16: (1 << 10, 6),
    18: (1 << 10, 6),
    20: (1 << 10, 6),
}
#: the shape of the classes of one ``n`` above the last class, on a CPU
_OWN_CLASS_SHAPE = (1 << 10, 6)
#: on an accelerator, the classes from this bound up take chunks of `_accelerator_rows` rows:
#: a GPU runs each of the chunk loop's ~40 operations as a kernel launch (microseconds), so
#: the CPU's chunks of 2^16 splits would leave it launch-bound (2.2 M chunks at N = 24);
#: 2^16 rows of 64 splits (2^22 splits, ~35 k chunks at N = 24) fill it. A plan from the
#: memory model, not yet timed on a device (benchmarks/notes/trellis.md, "Memory model")
_ACCELERATOR_FROM = 17


def _accelerator_rows(bound: int) -> int:
    """Rows per chunk on an accelerator for the classes from `_ACCELERATOR_FROM` up: ``2^(bound
    - 8)`` between ``2^10`` and ``2^16`` (the lowest levels' chunks, mostly empty slots,
    stay a small share of the work)."""
    return 1 << min(16, max(10, bound - 8))


def _on_accelerator() -> bool:
    """Whether the programs run on a GPU or TPU (the default backend)."""
    return jax.default_backend() != "cpu"


def _class_shape(bound: int) -> tuple:
    """``(rows per chunk, row bits)`` of the class of ``bound`` on the default backend."""
    R, row_bits = _CLASS_SHAPE.get(bound, _OWN_CLASS_SHAPE)
    if bound >= _ACCELERATOR_FROM and _on_accelerator():
        R = max(R, _accelerator_rows(bound))
    return R, row_bits


def size_class(n: int) -> Optional[int]:
    """The bound of the size class of ``n`` leaves (``n`` itself from the last class to
    `_OWN_CLASS_MAX`; None above)."""
    bound = next((c for c in _SIZE_CLASSES if n <= c), None)
    return n if bound is None and n <= _OWN_CLASS_MAX else bound


def _level_rows(count: int, sbits: int, row_bits: int) -> tuple:
    """``(rows, shift)`` of a level of ``count`` parents with ``2^sbits`` split slots each
    (``2^shift`` rows of ``2^row_bits`` splits per parent)."""
    sh = max(0, sbits - row_bits)
    return count << sh, sh


@lru_cache(maxsize=64)
def _class_tables(n: int, bound: int, shape: tuple):
    """Host tables of ``n`` leaves in the class of ``bound`` with chunks of ``shape`` (`_class_shape`):
    the masks in level order (``[2^bound]``, level ``k`` from ``offset[k]``, ``count[k]`` of
    them, increasing), and the chunk schedules ``[C, 2]`` (level, first row) of the inside
    pass (levels 2..n) and of the outside pass (levels n-1..1), padded to the class's largest
    ``C``."""
    R, row_bits = shape
    order = np.zeros(2**bound, np.int32)
    offset = np.zeros(bound + 2, np.int32)
    count = np.zeros(bound + 2, np.int32)
    # the non-empty subsets of n elements by size, in increasing mask order within a size
    # (the kernel needs a level's masks together, in any order): one stable sort by popcount,
    # ~20x faster at n = 20 than enumerating combinations (0.7 s there)
    masks = np.arange(1, 1 << n, dtype=np.int64)
    pc = _popcount(masks)
    order[: len(masks)] = masks[np.argsort(pc, kind="stable")]
    count[1 : n + 1] = np.bincount(pc, minlength=n + 1)[1:]
    offset[1 : n + 1] = np.concatenate([[0], np.cumsum(count[1:n])])

    def schedule(m, levels, sbits):  # [C, 2]: (level, first row) of every chunk
        parts = [np.zeros((0, 2), np.int64)]
        for k in levels(m):
            r0 = np.arange(0, _level_rows(math.comb(m, k), sbits(m, k), row_bits)[0], R, dtype=np.int64)
            parts.append(np.stack([np.full_like(r0, k), r0], axis=1))
        return np.concatenate(parts)

    inside = lambda m: range(2, m + 1)
    outside = lambda m: range(m - 1, 0, -1)
    s_in = lambda m, k: k - 1
    s_out = lambda m, k: m - k
    tabs = []
    for levels, sbits in ((inside, s_in), (outside, s_out)):
        sched = schedule(n, levels, sbits)
        size = max(1, len(schedule(bound, levels, sbits)))
        arr = np.zeros((size, 2), np.int32)
        arr[: len(sched)] = sched
        tabs.append((arr, len(sched)))
    return order, offset, count, tabs[0], tabs[1]


def _popcount(x):
    """Set bits of each entry of the non-negative int64 array ``x`` (below 2^32)."""
    table = np.array([bin(i).count("1") for i in range(256)], np.int64)
    return table[x & 255] + table[(x >> 8) & 255] + table[(x >> 16) & 255] + table[(x >> 24) & 255]


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
    """``(tiny, floor, x_range)`` of the linear-space inside pass. A possible split's term
    ``x e^a`` (`Energy.log_psi_parts`) is raised to at least ``tiny`` (the smallest normal
    number), so a parent whose sum is 0 has no possible split; with ``x`` in ``[1 /
    x_range, x_range]`` (else the term is NaN and the parent is summed in log space) a
    term's absolute error is below ``(x_range + 1) tiny``, and with fewer than 2^23 splits
    per parent (24 leaves) the errors add up to less than ``eps / 32`` of any sum from
    ``floor`` up, which is therefore exact to rounding. ``x_range`` is ``2^(mantissa
    bits)``: float64 ``2^53``, ``floor = 2^-888``; float32 ``2^24``, ``floor = 2^-50``."""
    fi = jnp.finfo(dtype)
    xb = fi.nmant + 1
    return float(fi.tiny), float(fi.tiny) * 2.0 ** (xb + 24 + fi.nmant + 5), 2.0**xb


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


#: classes up to this bound keep the inside pass's split values for the push (`_class_core`):
#: ``[chunks, rows, splits]`` float64, 0.25 / 2.6 / 24 MB for the classes of 10 / 12 / 14
_KEEP_SPLITS_MAX = 14


def _class_pass(energy, feats, n, tabs, sched, num, bound, log_z, best, bp, out, kind, kept=None):
    """One pass over the chunk schedule ``sched[:num]``:

    - ``kind="in"``: the inside pass (log Z, with the MAP when ``best`` is given);
    - ``kind="push"``: the outside pass as split probabilities ``P(S -> L, R in H)`` pushed
      from every split to both children, the inside schedule run backwards (top-down), each
      split evaluated once; ``out`` holds ``P(S in H)`` in linear space, scatter-added;
      ``kept`` (``[chunks, rows, splits]``, or None): the inside MAP pass writes each chunk's
      split values ``log psi + log Z(L) + log Z(R)`` there, and the push reads them;
    - ``kind="out"``: the outside pass pulled from every superset (``out`` holds ``log
      out(S)``, log space throughout; each split is evaluated once from each child).
    """
    order, offset, count = tabs
    R, row_bits = _class_shape(bound)
    W = 1 << row_bits
    t = jnp.arange(W, dtype=jnp.int32)
    tbits = [-((t >> b) & 1) for b in range(row_bits)]  # 0 or all bits set
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
        log_z, best, bp, out, aux, kept = carry
        c = num - 1 - i if kind == "push" else i
        k, r0 = sched[c, 0], sched[c, 1]
        if sep is not None:  # the children's table log Z + c h of this level, made at its
            # first chunk (the levels below are complete by then)
            g, gk = aux
            g = jax.lax.cond(gk != k, lambda z: z + sep[1][k] * sep[2], lambda z: g, log_z)
            aux = (g, k)
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
        Sb = S[:, None]
        seg = p - p[0]  # the row's parent within the chunk
        j = lambda: j0[:, None] + t[None, :]  # built where used: a cond's operand is materialised

        def lefts(hi, *bms):  # the rows' left sides
            L = hi[:, None]
            for b in range(row_bits):
                L = L | (bms[b][:, None] & tbits[b][None, :])
            return L

        if kind == "push":  # k >= 0 always holds (XLA cannot know it); a cond's results are
            # materialised once, where XLA would build the scatters' indices apart, slowly

            def sides(S, *row):  # a second cond: XLA would fuse per_row into each element
                L = lefts(*row)
                return L, S[:, None] ^ L

            zeros = lambda *a: (jnp.zeros_like(free),) * (1 + row_bits)
            row = jax.lax.cond(k >= 0, per_row, zeros, free, base, j0)
            zeros = lambda *a: (jnp.zeros((R, W), jnp.int32),) * 2
            L, Rm = jax.lax.cond(k >= 0, sides, zeros, S, *row)
        elif kind == "in" and sep is not None:
            # the shift: the term of the split ({low}, rest), one of the sum's own terms
            hi, *bms = per_row(free, base, j0)
            shift = take_in_bounds(sep[0], S) + take_in_bounds(g, base) + take_in_bounds(g, free)
        elif kind == "in" and not stacked:
            hi, *bms, shift = per_row(free, base, j0, log_z)
        else:
            hi, *bms = per_row(free, base, j0)

        def row_splits(parts=False, sides=None, psi=True):  # the splits (L, Rm) of S (``sides``: given)
            L, Rm = (lefts(hi, *bms), None) if sides is None else sides
            if kind == "out":
                return (L,)
            valid = live_row[:, None] & (j() < (jnp.left_shift(1, k - 1) - 1))
            Rm = Sb ^ L if Rm is None else Rm
            if not psi:
                return L, Rm, valid, None
            fP = jax.tree_util.tree_map(lambda x: x[:, None], take_rows(feats, S, True))
            f = energy.log_psi_parts if parts else energy.log_psi
            return L, Rm, valid, f(fP, take_rows(feats, L, True), take_rows(feats, Rm, True))

        if kind == "out":
            (L,) = row_splits()
        elif kind == "push" and kept is not None:  # the inside pass's split values
            L, Rm, valid, _ = row_splits(sides=(L, Rm), psi=False)
            lp = jax.lax.dynamic_index_in_dim(kept, c, keepdims=False)  # log psi + log Z(L) + log Z(R)
        elif kind == "push":
            L, Rm, valid, lp = row_splits(sides=(L, Rm))
        else:  # the log-Z-only inside pass takes log psi as (b, x), log psi = b + log x, or
            # reads it from the level's table (separable energies)
            L, Rm, valid, lp = row_splits(parts=not stacked, psi=sep is None)
        if kind == "push":
            mS, zS = out[S], log_z[S]  # log P(S in H) - log Z(S) = log out(S) - log Z
            oS = jnp.where((mS > 0) & (zS > -jnp.inf), vmath.log(jnp.where(mS > 0, mS, 1.0)) - zS, -jnp.inf)
            if kept is None:
                pr = jnp.exp(
                    jnp.where(valid, oS[:, None] + lp + take_in_bounds(log_z, L) + take_in_bounds(log_z, Rm), -jnp.inf)
                )
            else:
                pr = jnp.exp(jnp.where(valid, oS[:, None] + lp, -jnp.inf))
            pr, L, Rm = pr.reshape(-1), L.reshape(-1), Rm.reshape(-1)  # no layout copy
            return log_z, best, bp, out.at[L].add(pr).at[Rm].add(pr), aux, kept
        if kind == "in" and stacked:  # log Z and MAP value from one gather of the stacked table
            v = jnp.where(
                valid[..., None], lp[..., None] + take_in_bounds(log_z, L) + take_in_bounds(log_z, Rm), -jnp.inf
            )
            # written to a buffer once and read by the four row reductions (XLA would
            # otherwise recompute the split for each); the index is 0, unknown to XLA
            best = jax.lax.dynamic_update_slice(best, v, ((k < 0).astype(jnp.int32), jnp.int32(0), jnp.int32(0)))
            v = best[:R]
            if kept is not None:  # the split values, for the push
                kept = jax.lax.dynamic_update_index_in_dim(kept, v[..., 0], c, 0)
            zr = _row_lse(v[..., 0])
            mr, lr = _row_max_first(v[..., 1], L)
        elif kind == "in":
            # the terms x e^(b + log Z(L) + log Z(R) - shift) summed in linear space with the
            # parent's shift (`_peel_shift`), each possible one at least ``tiny`` (NaN for an
            # x out of range): no log, and the exp joins the split loop (a reduction XLA fuses
            # with it, a halving tree not). A separable energy's terms are e^(g(L) + g(R) +
            # a(S) - shift): two gathers and no log psi per split (`Energy.log_psi_separable`)
            if sep is None:
                b, x = lp
                a = jnp.where(
                    valid, b + take_in_bounds(log_z, L) + take_in_bounds(log_z, Rm) - shift[:, None], -jnp.inf
                )
                e = jnp.where((x >= 1.0 / x_range) & (x <= x_range), jnp.maximum(x * jnp.exp(a), tiny), jnp.nan)
            else:
                a = jnp.where(
                    valid,
                    take_in_bounds(g, L) + take_in_bounds(g, Rm) + (take_in_bounds(sep[0], S) - shift)[:, None],
                    -jnp.inf,
                )
                e = jnp.maximum(jnp.exp(a), tiny)
            sr = jnp.sum(jnp.where(a == -jnp.inf, 0.0, e), axis=-1)
            # each parent's sum over the chunk: 0 (no split possible) or in [floor, inf),
            # else its rows are computed again from log psi, shifted by their own max
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
            lp = energy.log_psi(take_rows(feats, P), select_features(s_left, fS, fT), select_features(s_left, fT, fS))
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
        return log_z, best, bp, out, aux, kept

    stacked = best is not None
    # (a, c, h) of a separable energy for the log-Z-only inside pass, which then carries the
    # table g = log Z + c[k] h of the level k it is at
    sep = separable_form(energy, feats, bound) if (kind == "in" and not stacked) else None
    aux = (log_z, jnp.int32(-1)) if sep is not None else None
    tiny, floor, x_range = _linear_floor(log_z.dtype)
    if stacked:  # one [2^bound, 2] table: log Z and the MAP value of every subset
        log_z = jnp.stack([log_z, best], axis=1)
    buf = jnp.zeros((R + 1, W, 2), log_z.dtype) if stacked else None
    log_z, _, bp, out, _, kept = jax.lax.fori_loop(0, num, body, (log_z, buf, bp, out, aux, kept))
    if stacked:
        return log_z[:, 0], log_z[:, 1], bp, out, kept
    return log_z, best, bp, out, kept


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
    # in the small classes the MAP pass keeps its split values log psi + log Z(L) + log Z(R)
    # (final: the levels below a parent are complete), and the push reads them instead of
    # evaluating log psi and gathering log Z again (9-leaf Ginkgo exact: 0.63 -> 0.56 ms;
    # 12 leaves: 9.4 -> 8.0 ms)
    kept = None
    if with_map and marginals and bound <= _KEEP_SPLITS_MAX:
        R, row_bits = _class_shape(bound)
        kept = jnp.zeros((sched_in.shape[0], R, 1 << row_bits), dtype)
    log_z, best, bp, _, kept = _class_pass(
        energy, feats, n, tabs, sched_in, num_in, bound, log_z, best, bp, None, "in", kept
    )
    root = (jnp.left_shift(1, n) - 1).astype(jnp.int32)
    log_m = None
    if marginals:
        prob = jnp.zeros((size,), dtype).at[root].set(1.0)
        prob = _class_pass(energy, feats, n, tabs, sched_in, num_in, bound, log_z, None, None, prob, "push", kept)[3]

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


#: the device copies of `_class_tables` (keyed by ``(n, bound)``, each with the host tuple it
#: was made from, so a cleared or patched `_class_tables` is followed)
_DEVICE_TABLES: dict = {}


def _device_tables(n: int, bound: int):
    """``(n, (order, offset, count), sched_in, num_in, sched_out, num_out)`` as device arrays,
    made once per ``(n, bound)``: a call then puts only the leaves on the device."""
    host = _class_tables(n, bound, _class_shape(bound))
    got = _DEVICE_TABLES.get((n, bound))
    if got is None or got[0] is not host:
        order, offset, count, (s_in, c_in), (s_out, c_out) = host
        dev = jax.device_put((np.int32(n), (order, offset, count), s_in, np.int32(c_in), s_out, np.int32(c_out)))
        got = _DEVICE_TABLES[(n, bound)] = (host, dev)
    return got[1]


def _class_args(energy, leaves, n, bound):
    """The positional arguments of `_class_core` for ``n`` leaves run in the class of ``bound``
    (a host ``leaves`` array is padded on the host, `pad_on_host`)."""
    nn, tabs, s_in, c_in, s_out, c_out = _device_tables(n, bound)
    if isinstance(leaves, np.ndarray):
        lp = pad_on_host(energy, leaves, bound)
    else:
        lp = energy.pad_leaves(jnp.asarray(leaves), bound)
    return energy, lp, nn, tabs, s_in, c_in, s_out, c_out


@partial(jax.jit, static_argnames=("size",))
def _cut_tables(tables, size: int):
    """The first ``size`` entries of each table (one dispatch for all of them)."""
    return jax.tree_util.tree_map(lambda x: x[:size], tables)


def class_call(energy, leaves, n, with_map, marginals, tables=True):
    """Runs `_class_core` for ``n`` leaves (``leaves [n, ...]``, a host or JAX array); tables
    of ``2^n`` subsets (``tables=False``: ``log Z`` alone, traceable). None when ``n`` is
    above every size class."""
    bound = size_class(n)
    if bound is None:
        return None
    static = dict(bound=bound, with_map=with_map, marginals=marginals)
    res = exported.call("class_core", _class_core, _class_args(energy, leaves, n, bound), static)
    if not tables:
        return res[0]
    log_z, map_v, log_m, tz, tb, bp = res
    if all(d.platform == "cpu" for d in log_z.devices()):
        # on the host: a slice of a host buffer costs a copy, and a jitted cut would compile
        # one small program per N (every N of a class otherwise shares its programs)
        cut = lambda x: None if x is None else jnp.asarray(np.asarray(x)[: 2**n])  # noqa: E731
        return (log_z, map_v, *(cut(x) for x in (log_m, tz, tb, bp)))
    return (log_z, map_v, *_cut_tables((log_m, tz, tb, bp), 2**n))
