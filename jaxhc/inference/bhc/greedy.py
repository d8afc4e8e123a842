"""Greedy Bayesian hierarchical clustering (Heller & Ghahramani 2005) under ``jit``.

The formulas (DESIGN.md, "Formulas"): leaves have ``d_i = alpha``, ``pi_i = 1`` and
``p(D_i|T_i) = p(D_i|H1)``; merging ``i, j`` into ``k`` with ``n_k`` points gives

    d_k = alpha Gamma(n_k) + d_i d_j,      pi_k = alpha Gamma(n_k) / d_k,
    p(D_k|T_k) = pi_k p(D_k|H1) + (1 - pi_k) p(D_i|T_i) p(D_j|T_j),
    r_k = pi_k p(D_k|H1) / p(D_k|T_k).

The greedy search merges the pair with the highest ``r_k``. We rank pairs by the log-odds
``log r_k - log(1 - r_k)``, which is monotone in ``r_k`` and never saturates in floating
point (``log r_k`` rounds to 0 for many well-separated pairs).

Implementation: clusters live in ``n`` slots; a merged cluster takes the smaller slot of its
two children. The pair scores are an ``[n, n]`` matrix, computed once row by row; after each
merge only the new cluster's row is computed (``O(n)`` vectorised work), and every row
caches its best partner, so finding the next merge is an ``O(n)`` argmax. Rows whose cached
partner disappeared are rescanned (a few per merge on average). Total ``O(n^2)`` work and
``O(n^2)`` memory for the score matrix.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple, Optional

import chex
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from ..._internal import exported
from ..._internal.validation import check_alpha, check_component
from ...components import Component, GaussianStats
from . import slots as slot_rows
from .gram import bhc_gram, use_gram
from .result import BHCResult, assemble_result
from .terms import (  # the fixed-tree functions are re-exported from here
    TreeTerms,
    check_finite_scores,
    merge_terms,
    node_stats_of_tree,
    padded_leaf_stats,
    take,
    tree_log_evidence,
    tree_node_terms,
)

__all__ = ["BHCResult", "bhc", "tree_log_evidence", "tree_node_terms", "node_stats_of_tree", "TreeTerms"]


# ------------------------------------------------------------------------------------------
# greedy search (jit)
# ------------------------------------------------------------------------------------------
class _State(NamedTuple):
    stats: Any  # per slot, leading axis n
    cnt: jax.Array  # [n] points per slot
    log_d: jax.Array  # [n]
    log_pT: jax.Array  # [n]
    node: jax.Array  # [n] tree node id held by the slot
    active: jax.Array  # [n] bool
    # [n, n] pair log-odds, -inf where invalid: a merge writes only its new cluster's row,
    # so a pair's score is in the row of the later-formed cluster of the two (`_row_of`)
    S: jax.Array
    best_val: jax.Array  # [n] best score of the row (an upper bound when stale)
    best_idx: jax.Array  # [n] its partner (meaningless when stale)
    second: jax.Array  # [n] upper bound on the row's scores other than best_idx
    stale: jax.Array  # [n] bool: best_val is only an upper bound; rescan before use
    # outputs, one row per merge
    children: jax.Array  # [n-1, 2]
    out_stats: Any  # [n-1, ...]
    out_log_h1: jax.Array
    out_log_d: jax.Array
    out_log_pT: jax.Array
    out_log_r: jax.Array
    out_log_1mr: jax.Array


def _leaf_lh(comp, leaf_stats, given):
    """The leaf log marginals: ``given`` (computed once by the caller) or computed here."""
    return comp.log_marginal(leaf_stats) if given is None else given


def _put(tree, i, val):
    """``x[i] = v`` for every leaf, as an in-place ``dynamic_update_slice`` (a scatter or a
    select over the leading axis can copy the whole array inside a loop)."""
    return jax.tree_util.tree_map(
        lambda x, v: jax.lax.dynamic_update_index_in_dim(x, jnp.asarray(v, x.dtype), i, 0), tree, val
    )


def _loop_parts(comp, log_alpha, n, dtype, keep_matrix, evidence_only, n_points=None):
    """The pieces of the greedy search over ``n`` slots: ``row(i, stats, cnt, log_d, log_pT,
    active)`` (the pair log-odds of slot ``i`` against every slot) and ``body(t, state)``
    (merge ``t``). Shared by the one-call search `bhc_core` and the chunked driver
    `_bhc_chunked`. ``n_points``: the points of the whole problem (node ids, count tables;
    default ``n``), more than ``n`` once the chunked driver has compacted the slots."""
    n_points = n if n_points is None else n_points
    idx = jnp.arange(n)
    neg_inf = jnp.array(-jnp.inf, dtype)
    cache = comp.count_cache(n_points)
    lgam = gammaln(jnp.arange(n_points + 1, dtype=dtype))

    def row(i, stats, cnt, log_d, log_pT, active):
        si = take(stats, i)
        lh = slot_rows.slot_log_marginals(comp, cache, si, stats, dtype, active)
        m = merge_terms(
            comp, log_alpha, si, cnt[i], log_d[i], log_pT[i], stats, cnt, log_d, log_pT, cache, lgam, log_h1=lh
        )
        ok = active & active[i] & (idx != i)
        return jnp.where(ok, m.logit, neg_inf)

    def exact_row(k, vals, bv, bi, sec, stl):
        t2, t2i = slot_rows.top2(vals)
        at_k = idx == k
        return (
            jnp.where(at_k, t2[0], bv),
            jnp.where(at_k, t2i[0].astype(bi.dtype), bi),
            jnp.where(at_k, t2[1], sec),
            stl & ~at_k,
        )

    def body(t, st: _State):
        # lazy selection: rescan stale rows while one of them is on top (bounds are upper
        # bounds, so the first exact row on top is the exact maximum). Each rescan makes one
        # stale row exact, so there are at most n of them; the counter makes that bound
        # explicit (NaN scores cannot make the loop spin).
        def cond(c):
            return c[3][slot_rows.argmax_first(c[0])] & (c[4] < n)

        def rescan(c):
            k = slot_rows.argmax_first(c[0])
            vals = _row_of(st, k) if keep_matrix else row(k, st.stats, st.cnt, st.log_d, st.log_pT, st.active)
            return (*exact_row(k, vals, *c[:4]), c[4] + 1)

        best_val, best_idx, second, stale, _ = jax.lax.while_loop(
            cond, rescan, (st.best_val, st.best_idx, st.second, st.stale, jnp.int32(0))
        )
        i = slot_rows.argmax_first(best_val)
        j = best_idx[i]
        a, b = jnp.minimum(i, j), jnp.maximum(i, j)
        sa, sb = take(st.stats, a), take(st.stats, b)
        merged = comp.merge(sa, sb)
        at_a, at_b = idx == a, idx == b
        # the merged statistics into slot a in place (a select over all slots rewrote the
        # whole [n, ...] array every merge: most of a merge's time at d = 10)
        stats = _put(st.stats, a, merged)
        # one batch of log marginals gives the new row and the merged node's own (slot a
        # read as the empty set). Measured at n = 4000, d = 10: a separate scalar log
        # marginal instead costs ~0.7 ms a merge (hundreds of tiny ops)
        lh = slot_rows.slot_log_marginals(comp, cache, merged, stats, dtype, st.active, empty=a)
        m = merge_terms(
            comp,
            log_alpha,
            sa,
            st.cnt[a],
            st.log_d[a],
            st.log_pT[a],
            sb,
            st.cnt[b],
            st.log_d[b],
            st.log_pT[b],
            cache,
            lgam,
            log_h1=lh[a],
        )
        na, nb = st.node[a], st.node[b]
        if evidence_only:
            children = st.children
        else:
            children = _put(st.children, t, jnp.stack([jnp.minimum(na, nb), jnp.maximum(na, nb)]))
        cnt = jnp.where(at_a, m.n, st.cnt)
        log_d = jnp.where(at_a, m.log_d, st.log_d)
        log_pT = jnp.where(at_a, m.log_pT, st.log_pT)
        node = jnp.where(at_a, n_points + t, st.node)
        active = st.active & ~at_b
        mr = merge_terms(comp, log_alpha, merged, m.n, m.log_d, m.log_pT, stats, cnt, log_d, log_pT, cache, lgam, lh)
        r = jnp.where(active & ~at_a, mr.logit, neg_inf)
        if keep_matrix:
            # the new row only, by dynamic_update_slice (in place; a scatter is much slower on
            # CPU); no column: writing one touches a cache line per slot (~0.1 ms a merge at
            # n = 4000), and `_row_of` reads the pair from the later cluster's row instead
            z = jnp.zeros((), jnp.int32)
            S = jax.lax.dynamic_update_slice(st.S, r[None, :], (a.astype(jnp.int32), z))
        else:
            S = st.S
        # update the row caches for the new scores r[k] = S[k, a]
        other = active & (idx != a)
        lost = ~stale & ((best_idx == a) | (best_idx == b))  # cached partner changed or died
        # rows that lost their partner: exact if r beats the bound on the rest, else stale
        lost_exact = other & lost & (r >= second)
        lost_stale = other & lost & ~(r >= second)
        # exact rows that kept their partner: r may become the new best
        keep = other & ~lost & ~stale
        keep_new = keep & (r > best_val)
        # stale rows: r above the bound is the exact new best
        stale_new = other & stale & (r > best_val)
        take_r = lost_exact | keep_new | stale_new
        second = jnp.where(keep_new | stale_new, best_val, second)
        second = jnp.where(keep & ~keep_new, jnp.maximum(second, r), second)
        best_val = jnp.where(take_r, r, jnp.where(lost_stale, second, best_val))
        best_idx = jnp.where(take_r, a.astype(best_idx.dtype), best_idx)
        stale = (stale & ~stale_new) | lost_stale
        best_val, best_idx, second, stale = exact_row(a, r, best_val, best_idx, second, stale)
        best_val = jnp.where(at_b, neg_inf, best_val)
        stale = stale & ~at_b
        if evidence_only:
            return _State(stats, cnt, log_d, log_pT, node, active, S, best_val, best_idx, second, stale, *st[11:])
        return _State(
            stats,
            cnt,
            log_d,
            log_pT,
            node,
            active,
            S,
            best_val,
            best_idx,
            second,
            stale,
            children,
            _put(st.out_stats, t, m.stats),
            *_put(tuple(st[13:]), t, (m.log_h1, m.log_d, m.log_pT, m.log_r, m.log_1mr)),
        )

    return row, body


def _row_of(st: _State, k):
    """The pair log-odds of slot ``k`` against every slot, read from ``st.S``: a pair's score
    is in the row of the cluster formed later (node ids grow with the merges), -inf for
    inactive slots and ``k`` itself."""
    idx = jnp.arange(st.S.shape[1])
    vals = jnp.where(st.node > st.node[k], st.S[:, k], st.S[k])
    return jnp.where(st.active & (idx != k), vals, jnp.array(-jnp.inf, st.S.dtype))


def _initial_state(comp, log_alpha, leaf_stats, n_valid, S, keep_matrix, evidence_only, leaf_lh=None) -> _State:
    """The search state before the first merge, from the pair log-odds ``S [n, n]`` (entries
    on the diagonal and of padding slots are ignored)."""
    n = jax.tree_util.tree_leaves(leaf_stats)[0].shape[0]
    dtype = jnp.result_type(log_alpha, jnp.float32)
    idx = jnp.arange(n)
    active = idx < n_valid
    neg_inf = jnp.array(-jnp.inf, dtype)
    ok = active[:, None] & active[None, :] & (idx[:, None] != idx[None, :])
    S = jnp.where(ok, S.astype(dtype), neg_inf)
    top2, top2_idx = slot_rows.top2(S) if n >= 2 else (jnp.full((n, 2), neg_inf), jnp.zeros((n, 2), jnp.int32))
    n_out = 0 if evidence_only else max(n - 1, 0)
    lh = _leaf_lh(comp, leaf_stats, leaf_lh)
    S = S if keep_matrix else jnp.zeros((0, n), dtype)
    return _assemble_state(jnp, leaf_stats, active, lh, log_alpha, S, top2, top2_idx, n_out, dtype)


def _assemble_state(xp, leaf_stats, active, leaf_lh, log_alpha, S, top_v, top_i, n_out: int, dtype) -> _State:
    """The state before the first merge from its parts (``xp``: ``jnp`` inside a program, or
    ``np`` on the host, `_host_start`): each row's two best ``top_v, top_i [n, 2]``, ``n_out``
    rows of per-merge outputs."""
    n = active.shape[0]
    zeros = xp.zeros((n_out,), dtype)
    return _State(
        leaf_stats,
        active.astype(dtype),
        xp.full((n,), log_alpha, dtype),
        xp.where(active, leaf_lh, 0.0).astype(dtype),
        xp.arange(n, dtype=jax.dtypes.canonicalize_dtype(np.int64)),
        active,
        S,
        top_v[:, 0],
        top_i[:, 0].astype(np.int32),
        top_v[:, 1],
        xp.zeros((n,), bool),
        xp.zeros((n_out, 2), np.int32),
        jax.tree_util.tree_map(lambda x: xp.zeros((n_out,) + x.shape[1:], x.dtype), leaf_stats),
        zeros,
        zeros,
        zeros,
        zeros,
        zeros,
    )


def _point_leaves(comp, leaf_stats):
    """``(w, cache, leaf log marginals)`` of slots of single points (`NormalInverseWishart`'s
    O(d) formulas), the values unchecked (callers check the leaves' own rows with
    ``point_log_marginal(..., w=w[rows])``)."""
    w = comp.point_coordinates(leaf_stats)
    cache = comp.count_cache(2)
    return w, cache, comp.point_log_marginal(leaf_stats, cache, w=w, check=False)


def _pair_rows(comp, log_alpha, leaf_stats, n_valid, rows, row_batch, points=False, leaf_lh=None, point_parts=None):
    """Pair log-odds of the slots ``rows`` against every slot, ``[len(rows), n]``.

    ``points``: every slot holds one point (or is padding) and the component has
    ``point_pair_log_marginal`` (e.g. `NormalInverseWishart`: ``O(d)`` a pair by the
    matrix determinant lemma instead of a ``d x d`` factorisation); ``point_parts``:
    `_point_leaves` (computed here when not given), whose leaf values serve when ``leaf_lh``
    is None."""
    n = jax.tree_util.tree_leaves(leaf_stats)[0].shape[0]
    dtype = jnp.result_type(log_alpha, jnp.float32)
    active = jnp.arange(n) < n_valid
    row, _ = _loop_parts(comp, log_alpha, n, dtype, True, False)
    cnt = active.astype(dtype)
    log_d = jnp.full((n,), log_alpha, dtype)
    if points:
        w, cache, point_lh = _point_leaves(comp, leaf_stats) if point_parts is None else point_parts
        leaf_lh = point_lh if leaf_lh is None else leaf_lh
    log_pT = jnp.where(active, _leaf_lh(comp, leaf_stats, leaf_lh), 0.0).astype(dtype)
    if not points:
        return jax.lax.map(lambda i: row(i, leaf_stats, cnt, log_d, log_pT, active), rows, batch_size=row_batch)
    idx = jnp.arange(n)
    lgam = gammaln(jnp.arange(3, dtype=dtype))

    def point_row(i):
        lh = comp.point_pair_log_marginal(w[i], w, cache).astype(dtype)
        m = merge_terms(
            comp,
            log_alpha,
            take(leaf_stats, i),
            cnt[i],
            log_d[i],
            log_pT[i],
            leaf_stats,
            cnt,
            log_d,
            log_pT,
            lgamma_table=lgam,
            log_h1=lh,
        )
        return jnp.where(active & active[i] & (idx != i), m.logit, jnp.array(-jnp.inf, dtype))

    return jax.lax.map(point_row, rows, batch_size=row_batch)


@partial(jax.jit, static_argnames=("row_batch", "keep_matrix", "evidence_only", "points"))
def bhc_core(
    comp,
    log_alpha,
    leaf_stats,
    n_valid,
    row_batch=1,
    S0=None,
    keep_matrix=True,
    evidence_only=False,
    points=False,
    leaf_log_h1=None,
):
    """The greedy search in one compiled call. ``S0`` optionally gives the initial pair
    log-odds ``[n, n]`` (-inf on the diagonal and for padding); with ``keep_matrix=False`` the
    score matrix is not kept: a row whose cached best partner is gone is recomputed instead of
    read (the same values; ``O(n)`` memory per step instead of ``O(n^2)``, but rescans cost
    ``O(n d)``). With ``evidence_only`` no per-merge outputs are recorded and the result is
    ``(log p(D|T), log d)`` of the root (slot 0 always holds the root: a merge keeps the
    smaller slot). Otherwise ``(children, out_stats, log_h1, log_d, log_pT, log_r, log_1mr,
    leaf_log_h1)`` per merge."""
    n = jax.tree_util.tree_leaves(leaf_stats)[0].shape[0]
    # trace-time invariants (no run-time cost): every statistic has one row per slot, and a
    # given score matrix is [n, n]. Inputs are validated by the public callers; a failure
    # here is a bug in jaxhc.
    chex.assert_tree_shape_prefix(leaf_stats, (n,))
    if S0 is not None:
        chex.assert_shape(S0, (n, n))
    dtype = jnp.result_type(log_alpha, jnp.float32)
    parts = None
    if points and leaf_log_h1 is None and hasattr(comp, "point_log_marginal"):
        # the leaves by the single-point formula, checked (the caller checks the output)
        parts = _point_leaves(comp, leaf_stats)
        leaf_log_h1 = comp.point_log_marginal(leaf_stats, parts[1], w=parts[0])
    if S0 is None:
        S = _pair_rows(comp, log_alpha, leaf_stats, n_valid, jnp.arange(n), row_batch, points, leaf_log_h1, parts)
    else:
        S = S0
    state = _initial_state(comp, log_alpha, leaf_stats, n_valid, S, keep_matrix, evidence_only, leaf_log_h1)
    _, body = _loop_parts(comp, log_alpha, n, dtype, keep_matrix, evidence_only)
    state = jax.lax.fori_loop(0, n_valid - 1, body, state)
    if evidence_only:
        return state.log_pT[0], state.log_d[0]
    leaf_log_h1 = jnp.where(jnp.arange(n) < n_valid, _leaf_lh(comp, leaf_stats, leaf_log_h1), 0.0)
    return (
        state.children,
        state.out_stats,
        state.out_log_h1,
        state.out_log_d,
        state.out_log_pT,
        state.out_log_r,
        state.out_log_1mr,
        leaf_log_h1,
    )


def _bhc_core_positional(comp, log_alpha, leaf_stats, n_valid, leaf_log_h1, *, row_batch, points):
    return bhc_core(comp, log_alpha, leaf_stats, n_valid, row_batch=row_batch, points=points, leaf_log_h1=leaf_log_h1)


#: the subpackages whose code BHC's programs run (the key of their serialized modules)
PROGRAM_SOURCES = ("inference/bhc", "components")


@partial(jax.jit, static_argnames=("row_batch", "points"))
def _rows_chunk(comp, log_alpha, leaf_stats, n_valid, rows, row_batch=1, points=False, leaf_lh=None):
    """Pair log-odds of ``rows`` against every slot, with each row's two best (`top2`) and
    the rows' own leaf log marginals (``leaf_lh`` None with ``points``: computed and checked
    here, so no program of their own is compiled: ~0.3 s of a first call)."""
    parts = None
    if leaf_lh is None and points:
        parts = _point_leaves(comp, leaf_stats)
        lh = comp.point_log_marginal(take(leaf_stats, rows), parts[1], w=parts[0][rows])
    else:
        lh = _leaf_lh(comp, take(leaf_stats, rows), None if leaf_lh is None else leaf_lh[rows])
    S = _pair_rows(comp, log_alpha, leaf_stats, n_valid, rows, row_batch, points, leaf_lh, parts)
    return S, *slot_rows.top2(S), lh


def _host_start(log_alpha, leaf_stats, n_valid: int, parts, leaf_lh) -> _State:
    """`_initial_state` (score matrix kept, per-merge outputs recorded) assembled on the
    host from `_rows_chunk`'s blocks: the same arrays, with no program of its own to compile
    (~0.3 s of a fresh process's first call at n = 4000)."""
    S = np.concatenate([np.asarray(p[0]) for p in parts])[:n_valid]
    top_v = np.concatenate([np.asarray(p[1]) for p in parts])[:n_valid]
    top_i = np.concatenate([np.asarray(p[2]) for p in parts])[:n_valid].astype(np.int32)
    n = S.shape[1]
    dtype = S.dtype
    if n > n_valid:  # padding slots: rows of -inf, as `_initial_state` masks them
        S = np.concatenate([S, np.full((n - n_valid, n), -np.inf, dtype)])
        top_v = np.concatenate([top_v, np.full((n - n_valid, 2), -np.inf, dtype)])
        top_i = np.concatenate([top_i, np.zeros((n - n_valid, 2), np.int32)])
    active = np.arange(n) < n_valid
    # copies of the leaf statistics: `_merges_chunk` donates the state
    stats = jax.tree_util.tree_map(np.array, leaf_stats)
    lh = np.asarray(leaf_lh)
    state = _assemble_state(np, stats, active, lh, np.asarray(log_alpha), S, top_v, top_i, n - 1, dtype)
    return jax.tree_util.tree_map(jnp.asarray, state)


@partial(jax.jit, donate_argnames=("state",))
def _merges_chunk(comp, log_alpha, state, n_valid, t0, t1):
    n = state.cnt.shape[0]
    # the slots may be fewer than the points (`_compact_slots`); the outputs have a row per merge
    _, body = _loop_parts(comp, log_alpha, n, state.cnt.dtype, True, False, n_points=state.children.shape[0] + 1)
    return jax.lax.fori_loop(t0, t1, body, state)


@partial(jax.jit, static_argnames=("m",))
def _compact_slots(state: _State, keep, m: int) -> _State:
    """The search state on ``m`` slots: the slots ``keep [m]`` (every active slot, in their
    order, then inactive ones as filler), so every later merge scores ``m`` slots instead
    of all. The order of the active slots is kept, so argmax ties and the merged node's
    slot (the smaller one) fall as before: the same merges, the same values."""
    n = state.cnt.shape[0]
    new_of = jnp.zeros((n,), jnp.int32).at[keep].set(jnp.arange(m, dtype=jnp.int32))
    per_slot = lambda x: x[keep]
    active = state.active[keep] & (jnp.arange(m) < jnp.sum(state.active))
    return state._replace(
        stats=jax.tree_util.tree_map(per_slot, state.stats),
        cnt=state.cnt[keep],
        log_d=state.log_d[keep],
        log_pT=state.log_pT[keep],
        node=state.node[keep],
        active=active,
        S=jnp.where(active[:, None] & active[None, :], state.S[keep][:, keep], -jnp.inf),
        best_val=jnp.where(active, state.best_val[keep], -jnp.inf),
        best_idx=new_of[state.best_idx[keep]],
        second=state.second[keep],
        stale=state.stale[keep] & active,
    )


#: the chunked search halves its slots when the active clusters fit in half of them, down to
#: this many slots, where the saving pays for compiling the smaller program (each slot
#: count compiles its merge program once: ~4 s at d = 10; the saving is about half a merge
#: for each remaining merge: at n = 4000 the first halving saves ~1.8 s, at n = 10 000 ~11 s)
_COMPACT_MIN_SLOTS = 1024
#: slot counts whose merge program this process has compiled, by problem structure ...
_COMPILED_SLOTS: set = set()
#: ... and the compile time measured for that structure (first chunk minus one merge)
_COMPILE_SECONDS: dict = {}
#: the compile time assumed before one was measured
_COMPILE_GUESS_S = 4.0


def _program_key(comp, state) -> tuple:
    """What, besides the slot count, decides `_merges_chunk`'s compiled program: the
    component's structure and the per-slot shapes and types of the state."""
    leaves, treedef = jax.tree_util.tree_flatten((comp, state))
    return (str(treedef),) + tuple((tuple(np.shape(x)[1:]), str(getattr(x, "dtype", type(x)))) for x in leaves)


def _bhc_chunked(
    comp,
    log_alpha,
    leaf_stats,
    n_valid: int,
    row_batch: int,
    progress_bar: bool,
    chunk_seconds: float = 1.0,
    points: bool = False,
    leaf_lh=None,
):
    """The same search as `bhc_core` (bitwise: the same compiled pieces), driven from the
    host in chunks of about ``chunk_seconds``: first the pair matrix, ``row_batch``-row
    blocks at a time, then the merges, the number per call adapted to the measured time.
    Between chunks Python runs, so Ctrl-C stops a long run within about a chunk's time, and
    a tqdm bar (``progress_bar``) shows real progress."""
    import time

    n = jax.tree_util.tree_leaves(leaf_stats)[0].shape[0]
    nv = jnp.asarray(n_valid, jnp.int32)
    if leaf_lh is None and not points:
        leaf_lh = _leaf_log_marginals(comp, leaf_stats)
    bar = None
    if progress_bar:
        from tqdm.auto import tqdm

        bar = tqdm(total=2 * n_valid - 1, desc="BHC", unit="step", leave=False)
    try:
        # the pair matrix, one block of rows per call (the last block padded with row 0)
        block = max(1, min(n_valid, row_batch))
        parts = []
        for lo in range(0, n_valid, block):
            rows = np.minimum(np.arange(lo, lo + block), n_valid - 1)
            parts.append(
                _rows_chunk(
                    comp,
                    log_alpha,
                    leaf_stats,
                    nv,
                    jnp.asarray(rows, jnp.int32),
                    row_batch=block,
                    points=points,
                    leaf_lh=leaf_lh,
                )
            )
            jax.block_until_ready(parts[-1])
            if bar is not None:
                bar.update(min(block, n_valid - lo))
        if leaf_lh is None:  # the leaves' own values came with their rows, checked there
            leaf_lh = np.zeros((n,), np.asarray(parts[0][3]).dtype)
            leaf_lh[:n_valid] = np.concatenate([np.asarray(p[3]) for p in parts])[:n_valid]
            check_finite_scores(comp, leaf_stats, n_valid, leaf_log_h1=leaf_lh[:n_valid])
        state = _host_start(log_alpha, leaf_stats, n_valid, parts, leaf_lh)
        del parts
        t, step = 0, 1
        key = _program_key(comp, state)
        first_s = per_merge = None
        front = state.cnt.shape[0]  # the slots that may hold active clusters
        while t < n_valid - 1:
            slots = state.cnt.shape[0]
            act = n_valid - t  # clusters active after t merges
            # in place: the active slots (in their order) to the front, so the tiles behind
            # them are skipped (`slots.slot_log_marginals`); the same program
            move = act <= front // 2 and front // 2 >= slot_rows.SLOT_TILE and slots >= 2 * slot_rows.SLOT_TILE
            m = slots
            if act <= slots // 2 and slots // 2 >= _COMPACT_MIN_SLOTS:
                # onto half the slots where that saves more than compiling the smaller
                # program costs (free once compiled in this process): each remaining merge
                # then moves about half the data
                half = slot_rows.tiled_slots(slots // 2)
                saving = act * (per_merge or 0.0) / 2
                if (half, key) in _COMPILED_SLOTS or saving > _COMPILE_SECONDS.get(key, _COMPILE_GUESS_S):
                    m = half
            if m < slots or move:
                active = np.asarray(state.active)
                keep = np.concatenate([np.flatnonzero(active), np.flatnonzero(~active)])[:m]
                state = _compact_slots(state, jnp.asarray(keep, jnp.int32), m)
                front = act
            t1 = min(n_valid - 1, t + step)
            slots = state.cnt.shape[0]
            for nxt in (
                slots // 2 if slots // 2 >= _COMPACT_MIN_SLOTS else 0,
                front // 2 if front // 2 >= slot_rows.SLOT_TILE and slots >= 2 * slot_rows.SLOT_TILE else 0,
            ):
                if nxt and t < n_valid - nxt:
                    t1 = min(t1, n_valid - nxt)  # stop where the next compaction applies
            tic = time.perf_counter()
            state = _merges_chunk(comp, log_alpha, state, nv, jnp.int32(t), jnp.int32(t1))
            jax.block_until_ready(state.best_val)
            el = time.perf_counter() - tic
            if first_s is None:
                first_s = el  # one merge, plus compiling the program unless it was compiled
            elif per_merge is None or state.cnt.shape[0] == slots:
                per_merge = el / max(t1 - t, 1)
                if (slots, key) not in _COMPILED_SLOTS and first_s - per_merge > 0.2:
                    _COMPILE_SECONDS[key] = first_s - per_merge  # measured compile time
            _COMPILED_SLOTS.add((state.cnt.shape[0], key))
            if bar is not None:
                bar.update(t1 - t)
            # aim at chunk_seconds a call (the first call includes compilation: grow slowly)
            rate = (t1 - t) / max(el, 1e-6)
            step = int(max(1, min(4 * step, rate * chunk_seconds)))
            t = t1
    finally:
        if bar is not None:
            bar.close()
    leaf_log_h1 = np.where(np.arange(n) < n_valid, np.asarray(leaf_lh), 0.0)
    return (
        state.children,
        state.out_stats,
        state.out_log_h1,
        state.out_log_d,
        state.out_log_pT,
        state.out_log_r,
        state.out_log_1mr,
        leaf_log_h1,
    )


def _leaves_are_points(comp, leaf_stats) -> bool:
    """Whether the initial pair scores can use the component's single-point formula
    (``point_pair_log_marginal``): every slot holds at most one point (host check)."""
    if not hasattr(comp, "point_pair_log_marginal") or not hasattr(leaf_stats, "n"):
        return False
    return bool(np.all(np.asarray(leaf_stats.n) <= 1))


def _row_batch(leaf_stats, n, points: bool = False):
    """Rows of the initial pair matrix per step: about ``2^22`` numbers of temporaries. A row
    of general statistics merges every slot's statistics (``n`` times their size); a row of
    single points (``points``, the O(d) pair formula) touches ``n`` coordinate vectors only,
    so far more rows fit (n = 4000, d = 10: 9 -> 94 rows a step, the pair matrix 1.2 -> 0.8 s)."""
    if points:
        per_row = (int(np.prod(leaf_stats.mean.shape[1:])) + 1) * n
    else:
        per_row = sum(int(np.prod(x.shape[1:])) for x in jax.tree_util.tree_leaves(leaf_stats)) * n
    return int(max(1, min(n, (1 << 22) // max(per_row, 1))))


# searches whose estimated work (`_work_estimate`) is above this run in host-driven chunks
# (interruptible, with a progress bar by default); smaller ones in one compiled call
_CHUNKED_WORK = 5e9


def _work_estimate(leaf_stats, n: int) -> float:
    """Rough floating-point work of a greedy search: ``n^2`` pair scores, each costing about
    ``s^1.5`` for ``s`` numbers of statistics per point (``d^3`` for a full-covariance
    Gaussian, ``d`` for per-feature families)."""
    s = sum(int(np.prod(x.shape[1:])) for x in jax.tree_util.tree_leaves(leaf_stats))
    return float(n) ** 2 * max(s, 1) ** 1.5


@eqx.filter_jit
def _leaf_log_marginals(comp, leaf_stats):
    # one compiled program per padded size (eagerly, every distinct number of real points
    # would compile each primitive of the log marginal again)
    return comp.log_marginal(leaf_stats)


def bhc_from_stats(
    comp, alpha, leaf_stats, n_valid: Optional[int] = None, progress_bar: bool = False, chunked: Optional[bool] = None
):
    """BHC on precomputed leaf statistics (leading axis ``n_max``), the first ``n_valid``
    of which are real points; the rest are padding and never merged. Node ids of the
    result refer to the ``n_valid`` real points. Returns a `BHCResult`.

    ``chunked`` runs the search from the host in chunks of about a second (Ctrl-C stops it
    between chunks; the progress bar counts real work); default: when ``progress_bar`` is
    on or the estimated work is large."""
    n_max = jax.tree_util.tree_leaves(leaf_stats)[0].shape[0]
    n = n_max if n_valid is None else int(n_valid)
    alpha = check_alpha(alpha)
    if n == 1:  # a single point: no merges
        leaf = jax.tree_util.tree_map(lambda y: y[:1], leaf_stats)
        empty = jax.tree_util.tree_map(lambda y: y[:0], leaf_stats)
        z = np.zeros(0)
        return assemble_result(
            comp, alpha, 1, leaf, comp.log_marginal(leaf), np.zeros((0, 2), np.int64), empty, z, z, z, z, z
        )
    if use_gram(comp, leaf_stats, n):
        return _bhc_gram_result(comp, alpha, leaf_stats, n, progress_bar)
    if slot_rows.tiled_slots(n_max) > n_max:  # filler slots (copies of point 0, never active)
        pad = slot_rows.tiled_slots(n_max) - n_max
        leaf_stats = jax.tree_util.tree_map(
            lambda y: jnp.concatenate([y, jnp.repeat(jnp.asarray(y)[:1], pad, axis=0)]), leaf_stats
        )
        n_max += pad
    points = _leaves_are_points(comp, leaf_stats)
    leaf_lh = None  # leaves of single points: computed (and checked) inside the search's programs
    if not (points and hasattr(comp, "point_log_marginal")):
        leaf_lh = _leaf_log_marginals(comp, leaf_stats)
        check_finite_scores(comp, leaf_stats, n, leaf_log_h1=np.asarray(leaf_lh)[:n])
    log_alpha = jnp.log(jnp.asarray(alpha, dtype=jnp.result_type(float)))
    if chunked is None:
        chunked = progress_bar or _work_estimate(leaf_stats, n) > _CHUNKED_WORK
    if chunked:
        out = _bhc_chunked(
            comp,
            log_alpha,
            leaf_stats,
            n,
            _row_batch(leaf_stats, n_max, points),
            bool(progress_bar),
            points=points,
            leaf_lh=leaf_lh,
        )
    else:
        # through a serialized module of the program when the compilation cache is on
        # (`jaxhc._internal.exported`: a fresh process skips tracing and lowering it)
        out = exported.call(
            "bhc_core",
            _bhc_core_positional,
            (comp, log_alpha, leaf_stats, jnp.asarray(n, jnp.int32), leaf_lh),
            dict(row_batch=_row_batch(leaf_stats, n_max, points), points=points),
            sources=PROGRAM_SOURCES,
        )
    children, out_stats, log_h1, log_d, log_pT, log_r, log_1mr, leaf_log_h1 = out
    check_finite_scores(comp, leaf_stats, n, leaf_log_h1=np.asarray(leaf_log_h1)[:n])
    k = n - 1
    check_finite_scores(
        comp, leaf_stats, n, merge_terms=(np.asarray(log_h1)[:k], np.asarray(log_pT)[:k], np.asarray(log_r)[:k])
    )
    ch = np.asarray(children)[:k].astype(np.int64)
    if n_max != n:  # remap padded node ids n_max + t -> n + t
        ch = np.where(ch >= n_max, ch - n_max + n, ch)
    take = lambda x: jax.tree_util.tree_map(lambda y: np.asarray(y)[:k], x)
    return assemble_result(
        comp,
        alpha,
        n,
        jax.tree_util.tree_map(lambda y: np.asarray(y)[:n], leaf_stats),
        np.asarray(leaf_log_h1)[:n],
        ch,
        take(out_stats),
        np.asarray(log_h1)[:k],
        np.asarray(log_d)[:k],
        np.asarray(log_pT)[:k],
        np.asarray(log_r)[:k],
        np.asarray(log_1mr)[:k],
    )


def _bhc_gram_result(comp, alpha, leaf_stats, n, progress_bar):
    """`bhc_from_stats` by the Gram-matrix search (`jaxhc.inference.bhc.gram`)."""
    X = np.asarray(leaf_stats.mean)[:n]
    children, node_stats, log_h1, log_d, log_pT, log_r, log_1mr, leaf_lh = bhc_gram(comp, alpha, X, progress_bar)
    check_finite_scores(comp, leaf_stats, n, leaf_log_h1=leaf_lh)
    check_finite_scores(comp, leaf_stats, n, merge_terms=(log_h1, log_pT, log_r))
    # node_stats stay NumPy arrays: at high d the [2n-1, d, d] scatters are gigabytes, and a
    # device copy would double the memory and the time (the leaves' zero rows are never
    # written, so their pages are not even mapped); jitted consumers take them as they are
    return assemble_result(
        comp, alpha, n, None, leaf_lh, children, None, log_h1, log_d, log_pT, log_r, log_1mr, node_stats=node_stats
    )


def bhc(X, component: Component, alpha: float = 1.0, *, progress_bar: Optional[bool] = None) -> BHCResult:
    """Greedy Bayesian hierarchical clustering of the rows of ``X``.

    Args:
      X: data ``[n, d]`` in the component's domain (NaN marks missing entries only for
        components with ``supports_missing``; otherwise it is an error).
      component: a `jaxhc.components.Component`, e.g. ``NormalInverseWishart.from_data(X)``.
      alpha: DPM concentration (> 0).
      progress_bar: show a tqdm bar of the pair scores and merges (default: for n >= 3000
        or a large estimated work, e.g. n = 50 at d = 500 under a full covariance). Such
        runs go from the host in chunks of about a second, so Ctrl-C stops them promptly.

    The rows are padded to the library's size grid (`jaxhc._internal.buckets.bucket`: steps
    of at most 1.25x) with inactive slots that are never merged, so every ``n`` of a bucket
    runs the same compiled program; the result is that of the unpadded search.

    Returns:
      `BHCResult` with ``tree``, ``log_evidence`` (log p(D|T)), ``log_r`` per merge,
      ``dpm_lower_bound`` and ``cut(0.5)``. (Heller & Ghahramani 2005, Alg. 1 and Eq. 1-2.)
    """
    check_component(component)
    alpha = check_alpha(alpha)
    Xh = component.validate_data(X)
    n = Xh.shape[0]
    if use_gram(component, None, n):
        # the Gram search reads the points only: host statistics, the [n, d, d] zero scatters
        # never written (their pages stay unmapped until the result is assembled)
        leaf = GaussianStats(np.ones(n), np.asarray(Xh, np.float64), np.zeros((n, Xh.shape[1], Xh.shape[1])))
        if progress_bar is None:
            progress_bar = n >= 3000
        return bhc_from_stats(component, alpha, leaf, progress_bar=progress_bar)
    leaf = padded_leaf_stats(component, Xh)
    if progress_bar is None:
        progress_bar = n >= 3000 or _work_estimate(leaf, n) > _CHUNKED_WORK
    return bhc_from_stats(component, alpha, leaf, n_valid=n, progress_bar=progress_bar)


# ------------------------------------------------------------------------------------------
# fixed-tree recursion (differentiable) and the predictive distribution
