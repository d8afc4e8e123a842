"""CDPM (CrossCat) MCMC with Metropolis-coupled chains (see `jaxhc.inference.gibbs`)."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer.mcmc import MCMCKernel

from ..._internal.chain import chunk_size, collect_chunk, run_chunks
from ..._internal.validation import check_key
from ...components import Component
from ..mh import mh_accept, tree_select
from .common import (
    KernelState,
    bucket_floor,
    check_heat,
    check_int,
    check_labels,
    check_leaf_scores,
    check_no_nan,
    check_run,
    crp_draw,
    crp_draw_jit,
    crp_log_prob_counts,
    int_dtype,
    log_marginal,
    pad_axis,
    padded_size,
    segment_stats,
    select_rows,
    sub_stats,
    take_front,
    take_slots,
    to_device,
    validate,
    zeros_stats,
)

_tmap = jax.tree_util.tree_map
_BLOCK = 8  # cluster / view slots evaluated together by the CDPM sweeps


# ==========================================================================================
# CDPM MCMC (column-wise statistics, Algorithm-8 view moves, Metropolis coupling)
# ==========================================================================================
class CDPMState(NamedTuple):
    """State of the CDPM sampler: every field has a leading chain axis ``[2]``, chain 0 the
    cold chain (target ``p(u, Z | X)``) and chain 1 the heated one (``p(u, Z | X)^heat``).
    Capacities: ``V = J`` view slots, ``K = N`` row-cluster slots per view. (Inside the
    compiled programs ``N`` and ``J`` are the padded sizes: padding rows are labelled ``K``
    in every view, padding columns sit in view 0 with zero statistics and no weight.)

    Attributes:
      column_views: int32 ``[2, J]``, the view slot ``u_j`` of every column.
      row_labels: int32 ``[2, N, V]``, ``Z[i, v]`` the cluster slot of row ``i`` in view
        slot ``v`` (slots no column uses hold a partition that is ignored).
      stats: per-column statistics, leaves ``[2, K, J, ...]``: entry ``[k, j]`` is the
        statistics of column ``j`` over the rows in cluster ``k`` of view ``u_j``.
      row_counts: ``[2, V, K]`` rows per cluster of every view slot.
      view_sizes: ``[2, V]`` columns per view slot.
      log_marginals: ``[2, K, J]`` ``log G_j(stats[k, j])`` (0 for empty clusters).
      log_joint: ``[2]`` the untempered ``log p(X, u, Z)`` (Eq. 1, 2, 5) of each chain.
    """

    column_views: jax.Array
    row_labels: jax.Array
    stats: Any
    row_counts: jax.Array
    view_sizes: jax.Array
    log_marginals: jax.Array
    log_joint: jax.Array


class CDPMInfo(NamedTuple):
    """What one `cdpm_mcmc_step` did: ``swap_accepted`` (bool), ``swap_log_ratio``, and the
    cold chain's ``num_views``."""

    swap_accepted: jax.Array
    swap_log_ratio: jax.Array
    num_views: jax.Array


class CDPMSamples(NamedTuple):
    """Output of `cdpm_mcmc` (cold chain): ``column_views [S, J]``, ``row_labels [S, N, V]``,
    ``log_joint [S]``, ``num_views [S]``, ``swap_rate`` and the final `CDPMState`."""

    column_views: jax.Array
    row_labels: jax.Array
    log_joint: jax.Array
    num_views: jax.Array
    swap_rate: jax.Array
    state: CDPMState


class _Columns(NamedTuple):
    """Per-column model: stacked one-column components (leading axis ``J``), their count
    caches (or None), the statistics of every cell (leaves ``[N, J, ...]``; zero in padding
    rows and columns) and the masks of the real rows ``[N]`` and columns ``[J]``."""

    comps: Any
    cache: Any
    cells: Any
    real_rows: Any
    real_cols: Any


def column_components(component, J, size=None, name="CDPM MCMC"):
    """The component restricted to each column, stacked (leading axis ``size``, default
    ``J``; columns ``J..size-1`` are copies of column 0, for padding). A family whose columns
    cannot be split raises `jaxhc.components.ColumnSplitError` (a ``TypeError`` and a
    ``ValueError``; `Component.column_components`).

    No program is compiled per ``J``: a family with its own (vectorised) ``column_components``
    runs it on its restriction to the padded column list (eager operations at ``size``, once a
    bucket); the others are restricted column by column on NumPy copies of the parameters and
    stacked by NumPy."""
    size = J if size is None else int(size)
    component.check_column_split(name)
    host = jax.tree_util.tree_map(np.asarray, component)
    if type(component).column_components is not Component.column_components:
        idx = np.concatenate([np.arange(J), np.zeros(size - J, np.int64)])
        try:
            return host.restrict_columns(idx, name=name).column_components(size, name)
        except (TypeError, ValueError):  # e.g. BetaBinomial's unequal trials: its own call below raises
            pass
    try:
        cols = [host.restrict_columns([j], name=name) for j in range(J)]
        stacked = _tmap(lambda *xs: np.stack([np.asarray(x) for x in xs]), *cols)
    except (TypeError, ValueError):  # columns that do not stack: the family's own call
        stacked = _tmap(np.asarray, component.column_components(J, name))
    return to_device(_tmap(lambda a: np.concatenate([a, np.repeat(a[:1], size - J, axis=0)]), stacked))


def make_columns(X, comps, n=None, nc=None):
    """`_Columns` of data ``X [N, J]`` whose first ``n`` rows and ``nc`` columns are real
    (None: all; may be traced)."""
    N, J = X.shape
    cells = jax.vmap(lambda c, x: c.leaf_stats(x[:, None]), in_axes=(0, 1), out_axes=1)(comps, X)
    rows = np.ones(N, bool) if n is None else jnp.arange(N) < n
    cols = np.ones(J, bool) if nc is None else jnp.arange(J) < nc
    if n is not None or nc is not None:
        cells = select_rows(rows[:, None] & cols[None, :], cells, zeros_stats(cells))
    one_cache = jax.vmap(lambda c: c.count_cache(N))
    cache = one_cache(comps) if jax.eval_shape(one_cache, comps) is not None else None
    return _Columns(comps, cache, cells, rows, cols)


def _col_lm(cols, s, axis):
    """``log G_j`` of per-column statistics whose column axis is ``axis`` (leaves ``[...,
    J, ...]``); returns ``[..., J]``."""

    def one(c, cache, sj):
        return log_marginal(c, sj, cache)

    return jax.vmap(one, in_axes=(0, 0 if cols.cache is not None else None, axis), out_axes=axis)(
        cols.comps, cols.cache, s
    )


def _col_merge(cols, s, t, axis):
    """Merge per-column statistics ``s`` (column axis ``axis``) with ``t [J, ...]``."""
    return jax.vmap(lambda c, a, b: c.merge(a, b), in_axes=(0, axis, 0), out_axes=axis)(cols.comps, s, t)


def _col_lm_j(cols, j, s):
    """``log G_j`` of statistics of column ``j`` (any batch shape)."""
    c = take_slots(cols.comps, j)
    cache = None if cols.cache is None else take_slots(cols.cache, j)
    return log_marginal(c, s, cache)


def _cdpm_chain_state(u, Z, cols, alpha):
    """`CDPMState` fields of one chain from its labels (padding rows, labelled ``K``, and
    padding columns count nowhere)."""
    N, J = _stat_shape(cols.cells)
    V = J
    f = cols.cells.n.dtype
    ar_J = jnp.arange(J)
    zc = Z[:, u]  # [N, J] cluster of each cell in its column's view
    ids = (zc * J + ar_J[None, :]).reshape(-1)  # padding rows: >= N * J, dropped
    flat = _tmap(lambda a: a.reshape((N * J,) + a.shape[2:]), cols.cells)
    stats = segment_stats(flat, ids, N * J)
    stats = _tmap(lambda a: a.reshape((N, J) + a.shape[1:]), stats)
    counts = jax.vmap(lambda z: jax.ops.segment_sum(jnp.ones(N, f), z, num_segments=N), in_axes=1)(Z)
    sizes = jax.ops.segment_sum(jnp.asarray(cols.real_cols, f), u, num_segments=V)
    occ = (counts[u, :].T > 0) & cols.real_cols[None, :]  # [K, J]
    stats = select_rows(occ, stats, zeros_stats(stats))
    lms = jnp.where(occ, _col_lm(cols, stats, 1), 0.0)
    return stats, counts, sizes, lms, _cdpm_log_joint(u, counts, sizes, lms, alpha)


def _stat_shape(cells):
    n = cells.n
    return n.shape[0], n.shape[1]


def _cdpm_log_joint(u, counts, sizes, lms, alpha):
    view_occ = sizes > 0
    return (
        crp_log_prob_counts(sizes, alpha)
        + jnp.sum(jnp.where(view_occ, crp_log_prob_counts(counts, alpha), 0.0))
        + jnp.sum(lms)
    )


def _row_sweep(key, st, cols, alpha, beta, n):
    """Collapsed Gibbs of every real row's cluster in every view (conditionals ^ beta). Row
    ``i`` uses the ``i``-th key of ``split(key, N)``, its view ``v`` the ``v``-th key of that
    one's ``split(., V)``: a draw over ``[K]`` logits, the same whatever the padding."""
    u, Z, stats, counts, sizes, lms, lj = st
    N, V = Z.shape
    J = u.shape[0]
    K = N
    ar_J, ar_V, ar_K = jnp.arange(J), jnp.arange(V), jnp.arange(K)
    log_alpha = jnp.log(alpha)
    BK = min(_BLOCK, K)
    real = cols.real_cols
    u_seg = jnp.where(real, u, V)  # padding columns enter no view's sum
    keys = jax.random.split(key, N)

    def body(i, carry):
        Z, stats, counts, lms = carry
        cell = take_slots(cols.cells, i)  # [J, ...]
        zi = Z[i]
        c_col = zi[u]
        counts = counts.at[ar_V, zi].add(-1.0)
        alive = (counts[u, c_col] > 0) & real
        s_m = sub_stats(take_slots(stats, (c_col, ar_J)), cell)
        s_m = select_rows(alive, s_m, zeros_stats(s_m))
        stats = _tmap(lambda a, b: a.at[c_col, ar_J].set(b), stats, s_m)
        lms = lms.at[c_col, ar_J].set(jnp.where(alive, _col_lm(cols, s_m, 0), 0.0))
        occ = counts > 0
        e = jnp.argmin(occ, axis=1)
        # candidates are the occupied slots and each view's first empty one, all below
        # k_hi (new clusters take the lowest free slot): only blocks of BK slots below k_hi
        # are evaluated (`fori_loop` with a dynamic trip count)
        k_hi = jnp.maximum(jnp.max(jnp.where(occ, ar_K[None, :], 0)), jnp.max(e)) + 1

        def block(b, vd):
            start = jnp.minimum(b * BK, K - BK)
            sb = _tmap(lambda a: jax.lax.dynamic_slice_in_dim(a, start, BK, 0), stats)
            lmm = _col_lm(cols, _col_merge(cols, sb, cell, 1), 1)  # [BK, J]
            d = lmm - jax.lax.dynamic_slice_in_dim(lms, start, BK, 0)
            return jax.lax.dynamic_update_slice_in_dim(vd, jax.ops.segment_sum(d.T, u_seg, num_segments=V), start, 1)

        view_delta = jax.lax.fori_loop(0, (k_hi + BK - 1) // BK, block, jnp.zeros((V, K), lms.dtype))
        prior = jnp.where(
            occ, jnp.log(jnp.where(occ, counts, 1.0)), jnp.where(ar_K[None, :] == e[:, None], log_alpha, -jnp.inf)
        )
        logits = beta * (prior + view_delta)
        znew = jax.vmap(jax.random.categorical)(jax.random.split(keys[i], V), logits).astype(jnp.int32)
        c_new = znew[u]
        s_new = _col_merge(cols, take_slots(stats, (c_new, ar_J)), cell, 0)
        stats = _tmap(lambda a, b: a.at[c_new, ar_J].set(b), stats, s_new)
        lms = lms.at[c_new, ar_J].set(jnp.where(real, _col_lm(cols, s_new, 0), 0.0))
        counts = counts.at[ar_V, znew].add(1.0)
        return (Z.at[i].set(znew), stats, counts, lms)

    Z, stats, counts, lms = jax.lax.fori_loop(0, n, body, (Z, stats, counts, lms))
    return (u, Z, stats, counts, sizes, lms, lj)


def _column_sweep(key, st, cols, alpha, beta, num_aux, n, nc):
    """Gibbs of every real column's view with ``num_aux`` auxiliary views (Algorithm 8).
    Column ``j`` uses the ``j``-th key of ``split(k_cols, J)`` and auxiliary partitions drawn
    with keys of its own (`crp_draw`), so the draws do not depend on the padding."""
    u, Z, stats, counts, sizes, lms, lj = st
    N, V = Z.shape
    J = u.shape[0]
    K = N
    f = counts.dtype
    m = num_aux
    log_alpha = jnp.log(alpha)
    BV = min(_BLOCK, V)
    rows = cols.real_rows
    k_aux, k_cols = jax.random.split(key)
    aux_Z, aux_counts = crp_draw(k_aux, n, N, K, alpha, (J, m), f)  # [J, m, N], [J, m, K]
    keys = jax.random.split(k_cols, J)

    def body(j, carry):
        u, Z, stats, counts, sizes, lms = carry
        k, aZ, ac = keys[j], aux_Z[j], aux_counts[j]
        v_old = u[j]
        sizes = sizes.at[v_old].add(-1.0)
        single = sizes[v_old] == 0
        aZ = aZ.at[0].set(jnp.where(single, Z[:, v_old], aZ[0]))
        ac = ac.at[0].set(jnp.where(single, counts[v_old], ac[0]))
        cell = take_slots(cols.cells, (slice(None), j))  # [N, ...]
        # view likelihoods sum_k G_j(X[Z_v = k, j]) over the occupied clusters, only for
        # blocks of BV view slots below the highest occupied one (new views take the lowest
        # free slot)
        v_hi = jnp.max(jnp.where(sizes > 0, jnp.arange(V), 0)) + 1
        rep = _tmap(lambda a: jnp.repeat(a, BV, axis=0), cell)

        def block(b, lv):
            start = jnp.minimum(b * BV, V - BV)
            Zb = jax.lax.dynamic_slice_in_dim(Z, start, BV, 1)
            ids = jnp.where(rows[:, None], Zb + jnp.arange(BV)[None, :] * K, BV * K).reshape(-1)
            S = _tmap(lambda a: a.reshape((BV, K) + a.shape[1:]), segment_stats(rep, ids, BV * K))
            occ = jax.lax.dynamic_slice_in_dim(counts, start, BV, 0) > 0
            lm = jnp.where(occ, _col_lm_j(cols, j, S), 0.0)
            return jax.lax.dynamic_update_slice_in_dim(lv, jnp.sum(lm, -1), start, 0)

        lm_v = jax.lax.fori_loop(0, (v_hi + BV - 1) // BV, block, jnp.zeros(V, counts.dtype))
        rep_a = _tmap(lambda a: jnp.tile(a, (m,) + (1,) * (a.ndim - 1)), cell)
        ids_a = jnp.where(rows[None, :], aZ + jnp.arange(m)[:, None] * K, m * K).reshape(-1)
        S_a = _tmap(lambda a: a.reshape((m, K) + a.shape[1:]), segment_stats(rep_a, ids_a, m * K))
        lm_a = jnp.where(ac > 0, _col_lm_j(cols, j, S_a), 0.0)  # [m, K]
        lv = jnp.where(sizes > 0, beta * (jnp.log(jnp.where(sizes > 0, sizes, 1.0)) + lm_v), -jnp.inf)
        la = beta * log_alpha - jnp.log(m) + (beta - 1.0) * crp_log_prob_counts(ac, alpha) + beta * jnp.sum(lm_a, -1)
        choice = jax.random.categorical(k, jnp.concatenate([la, lv]))  # auxiliary views first: fixed indices
        is_aux = choice < m
        a_idx = jnp.clip(choice, 0, m - 1)
        e = jnp.argmin(sizes > 0)
        v_new = jnp.where(is_aux, e, choice - m).astype(jnp.int32)
        Z = jnp.where(is_aux, Z.at[:, e].set(aZ[a_idx]), Z)
        counts = jnp.where(is_aux, counts.at[e].set(ac[a_idx]), counts)
        s_new = segment_stats(cell, Z[:, v_new], K)  # column j under its new view's partition
        lm_new = _col_lm_j(cols, j, s_new)
        occ_new = counts[v_new] > 0
        stats = _tmap(lambda a, b: a.at[:, j].set(b), stats, s_new)
        lms = lms.at[:, j].set(jnp.where(occ_new, lm_new, 0.0))
        return (u.at[j].set(v_new), Z, stats, counts, sizes.at[v_new].add(1.0), lms)

    u, Z, stats, counts, sizes, lms = jax.lax.fori_loop(0, nc, body, (u, Z, stats, counts, sizes, lms))
    return (u, Z, stats, counts, sizes, lms, lj)


def _cdpm_chain_step(key, st, cols, alpha, beta, num_aux, n, nc):
    k_col, k_row = jax.random.split(key)
    st = _column_sweep(k_col, st, cols, alpha, beta, num_aux, n, nc)
    st = _row_sweep(k_row, st, cols, alpha, beta, n)
    u, Z, stats, counts, sizes, lms, _ = st
    return (u, Z, stats, counts, sizes, lms, _cdpm_log_joint(u, counts, sizes, lms, alpha))


def _cdpm_step(key, state, cols, alpha, heat, num_aux, n, nc):
    k_chains, k_swap = jax.random.split(key)
    betas = jnp.stack([jnp.ones((), heat.dtype), heat])
    chain = functools.partial(_cdpm_chain_step, num_aux=num_aux, n=n, nc=nc)
    st = jax.vmap(chain, in_axes=(0, 0, None, None, 0))(jax.random.split(k_chains, 2), tuple(state), cols, alpha, betas)
    state = CDPMState(*st)
    log_ratio = (1.0 - heat) * (state.log_joint[1] - state.log_joint[0])
    acc = mh_accept(k_swap, log_ratio)
    swapped = _tmap(lambda a: a[::-1], state)
    state = tree_select(acc, swapped, state)
    return state, CDPMInfo(acc, log_ratio, jnp.sum(state.view_sizes[0] > 0))


class _Data(NamedTuple):
    """Validated CDPM data: host ``X [N, J]``, device ``X`` padded to ``[Nb, Jb]`` with zeros,
    column components padded to ``Jb``, and the checked options."""

    Xa: Any
    Xp: Any
    comps: Any
    alpha: float
    heat: Any
    num_aux: int
    N: int
    J: int


def _cdpm_prepare(X, component, alpha, heat=None, num_aux=1, pad=True):
    Xa, alpha = validate(X, component, alpha)
    N, J = Xa.shape
    Nb, Jb = (padded_size(N), padded_size(J)) if pad else (N, J)
    comps = column_components(component, J, Jb)
    if heat is not None:
        heat = check_heat(heat)
    num_aux = check_int(num_aux, "num_aux", 1)
    Xp = to_device(pad_axis(pad_axis(Xa, Jb, 0.0, axis=1), Nb, 0.0, axis=0))
    return _Data(Xa, Xp, comps, alpha, heat, num_aux, N, J)


def _initial_labels(key, D, column_views, row_labels):
    """Padded initial labels ``u [Jb]`` (padding columns in view 0) and ``Z [Nb, Jb]``
    (padding rows labelled ``Nb``; view slots no label names hold partitions of their own)."""
    N, J = D.N, D.J
    Nb, Jb = D.Xp.shape
    f = D.Xp.dtype
    if (column_views is None or row_labels is None) and key is None:
        raise ValueError("key is required unless column_views and row_labels are both given")
    k_u, k_z = jax.random.split(key) if key is not None else (None, None)
    a = jnp.asarray(D.alpha, f)
    if column_views is None:
        u = np.asarray(crp_draw_jit(k_u, J, Jb, Jb, a, (), f)[0])  # the real columns' draws: as at size J
        u_orig = None
    else:
        u = check_labels(column_views, J, "column_views")
        u_orig = None if isinstance(column_views, jax.core.Tracer) else np.asarray(column_views)
    if row_labels is None:
        Z = crp_draw_jit(k_z, N, Nb, Nb, a, (Jb,), f)[0].T  # view v with a key of its own
    elif isinstance(row_labels, jax.core.Tracer):
        Z = row_labels.astype(jnp.int32)
        Z = jnp.broadcast_to(Z[:, None], (N, J)) if Z.ndim == 1 else Z
        Z = pad_axis(pad_axis(Z, Jb, 0, axis=1), Nb, Nb, axis=0)
    else:
        arr = np.asarray(row_labels)
        if arr.ndim not in (1, 2) or arr.shape[0] != N:
            raise ValueError(f"row_labels must have shape [{N}] or [{N}, V], got {arr.shape}")
        if arr.ndim == 1:
            Zc = [check_labels(arr, N, "row_labels")] * J
        else:
            # view slot w (first-appearance order of column_views) takes the column of its
            # original label
            uo = np.asarray(u) if u_orig is None else u_orig.astype(np.int64)
            _, first = np.unique(uo, return_index=True)
            originals = uo[np.sort(first)]
            if originals.min() < 0 or originals.max() >= arr.shape[1]:
                raise ValueError(
                    f"row_labels has {arr.shape[1]} columns but column_views uses view labels "
                    f"{sorted(set(originals.tolist()))}"
                )
            Zc = [check_labels(arr[:, v], N, f"row_labels[:, {v}]") for v in originals]
            Zc += [np.zeros(N, np.int32)] * (J - len(Zc))
        Z = pad_axis(pad_axis(np.stack(Zc, axis=1), Jb, 0, axis=1), Nb, Nb, axis=0)
    if isinstance(u, jax.core.Tracer):
        u = jnp.where(jnp.arange(Jb) < J, pad_axis(u, Jb, 0), 0)
    else:
        u = pad_axis(np.asarray(u, np.int32)[:J], Jb, 0)
    return to_device(u), to_device(Z)


def _cdpm_init(key, D, column_views, row_labels):
    """The padded initial state and the rows' log marginals ``[Nb]`` (for `check_leaf_scores`)."""
    u, Z = _initial_labels(key, D, column_views, row_labels)
    return _cdpm_init_jit(u, Z, D.Xp, D.comps, jnp.asarray(D.alpha, D.Xp.dtype), D.N, D.J)


def _unpad_cdpm_state(st, N, J):
    """The public state: rows ``0..N-1``, columns and view slots ``0..J-1``, cluster slots
    ``0..N-1`` (real labels stay below these: new views and clusters take the lowest free
    slot)."""
    return CDPMState(
        to_device(take_front(st.column_views, (2, J))),
        to_device(take_front(st.row_labels, (2, N, J))),
        to_device(_tmap(lambda a: take_front(a, (2, N, J)), st.stats)),
        to_device(take_front(st.row_counts, (2, J, N))),
        to_device(take_front(st.view_sizes, (2, J))),
        to_device(take_front(st.log_marginals, (2, N, J))),
        st.log_joint,
    )


def _pad_cdpm_state(st, Nb, Jb):
    """A public state padded to ``Nb`` rows and ``Jb`` columns (padding views: every real row
    in cluster 0)."""
    N, J = st.row_labels.shape[1], st.column_views.shape[1]
    if (N, J) == (Nb, Jb):
        return st
    Z = pad_axis(pad_axis(st.row_labels, Jb, 0, axis=2), Nb, Nb, axis=1)
    counts = pad_axis(pad_axis(st.row_counts, Nb, 0, axis=2), Jb, 0, axis=1)
    first = (np.arange(Jb) >= J)[None, :, None] & (np.arange(Nb) == 0)[None, None, :]
    counts = counts + (first * N).astype(counts.dtype)
    pad2 = lambda a: pad_axis(pad_axis(a, Jb, 0, axis=2), Nb, 0, axis=1)  # noqa: E731
    return CDPMState(
        to_device(pad_axis(st.column_views, Jb, 0, axis=1)),
        to_device(Z),
        to_device(_tmap(pad2, st.stats)),
        to_device(counts),
        to_device(pad_axis(st.view_sizes, Jb, 0, axis=1)),
        to_device(pad2(st.log_marginals)),
        st.log_joint,
    )


def cdpm_mcmc_init(key, X, component: Component, alpha, column_views=None, row_labels=None) -> CDPMState:
    """Returns the initial `CDPMState` (both chains start from the same labels).

    Args:
      key: PRNG key; labels not given are drawn from the prior (``u ~ CRP(alpha)``, each
        view's ``Z[:, v] ~ CRP(alpha)``). May be None when both labels are given.
      X: data ``[N, J]`` (NaN = missing for the Beta families).
      component: `BetaBernoulli`, `BetaBinomial` (one number of trials), or `NormalKnownCov`
        with diagonal covariances.
      alpha: concentration of every CRP (> 0).
      column_views: optional ``[J]`` view labels (any integers).
      row_labels: optional ``[N, V']`` row labels; column ``v`` is used for view label ``v``
        (after relabelling ``column_views`` to ``0..`` in order of first appearance, with
        ``V' >= number of views``), or ``[N]`` for the same partition in every view.
    """
    D = _cdpm_prepare(X, component, alpha)
    return _unpad_cdpm_state(_cdpm_init(key, D, column_views, row_labels)[0], D.N, D.J)


@jax.jit
def _cdpm_init_jit(u, Z, X, comps, alpha, n, nc):
    cols = make_columns(X, comps, n, nc)
    one = (u,) + (Z,) + _cdpm_chain_state(u, Z, cols, alpha)
    row_lm = jnp.sum(jnp.where(cols.real_cols, _col_lm(cols, cols.cells, 1), 0.0), axis=1)
    return CDPMState(*_tmap(lambda x: jnp.stack([x, x]), one)), row_lm


def _cdpm_template(X):
    """One zero row of the kept-sample buffers: the cold chain's labels and log joint, and
    `CDPMInfo`."""
    N, J = X.shape
    z = jnp.zeros((), X.dtype)
    return (
        jnp.zeros(J, jnp.int32),
        jnp.zeros((N, J), jnp.int32),
        z,
        CDPMInfo(jnp.zeros((), bool), z, jnp.zeros((), int_dtype())),
    )


def _cdpm_sizes(D):
    """``(samples a chunk keeps, static buffer length)`` (see `jaxhc.inference.gibbs.dpm`'s
    `_dpm_sizes`): the first from ``(N, J)``, the second its largest value over the bucket."""
    Nb, Jb = D.Xp.shape
    row = lambda n, j: chunk_size(4 * j * (n + 1) + 2 * D.Xp.dtype.itemsize + 5)  # noqa: E731
    return row(D.N, D.J), row(bucket_floor(Nb, D.N), bucket_floor(Jb, D.J))


@functools.partial(jax.jit, static_argnames=("num_aux", "size", "progress"))
def _cdpm_chunk(key, state, X, comps, alpha, heat, num_warmup, num_kept, thin, n, nc, num_aux, size, progress, token):
    """`collect_chunk` over CDPM steps; counts, ``heat`` and the real sizes ``n``, ``nc`` are
    traced (one program per padded data shape, component family and ``num_aux``)."""
    cols = make_columns(X, comps, n, nc)

    def step(k, s):
        return _cdpm_step(k, s, cols, alpha, heat, num_aux, n, nc)

    def extract(s, info):
        return (s.column_views[0], s.row_labels[0], s.log_joint[0], info)

    return collect_chunk(
        step, extract, _cdpm_template(X), key, state, num_warmup, num_kept, thin, size, progress, token
    )


def cdpm_mcmc_step(key, state: CDPMState, X, component: Component, alpha, *, heat=0.8, num_aux: int = 1):
    """One step of CDPM MCMC: column-view Gibbs (Algorithm 8), row Gibbs in every view, both
    for the cold and the heated chain, then a swap proposal (see the module docstring).

    Args:
      key: PRNG key.
      state: current `CDPMState`.
      X, component, alpha: as in `cdpm_mcmc_init`.
      heat: power of the heated chain's posterior, in (0, 1] (paper: 0.8).
      num_aux: auxiliary views ``m`` per column update (default 1).

    Returns:
      ``(new_state, CDPMInfo)``.
    """
    D = _cdpm_prepare(X, component, alpha, heat, num_aux)
    f = D.Xp.dtype
    state, (_, _, _, info) = _cdpm_chunk(
        key,
        _pad_cdpm_state(state, *D.Xp.shape),
        D.Xp,
        D.comps,
        jnp.asarray(D.alpha, f),
        jnp.asarray(D.heat, f),
        0,
        1,
        1,
        D.N,
        D.J,
        D.num_aux,
        _cdpm_sizes(D)[1],
        False,
        0,
    )
    return _unpad_cdpm_state(state, D.N, D.J), to_device(_tmap(lambda a: np.asarray(a)[0], info))


def cdpm_mcmc(
    key,
    X,
    component: Component,
    alpha,
    *,
    num_samples: int,
    num_warmup: int = 0,
    thin: int = 1,
    heat=0.8,
    num_aux: int = 1,
    init_column_views=None,
    init_row_labels=None,
    progress_bar: bool = True,
) -> CDPMSamples:
    """Runs Metropolis-coupled CDPM MCMC and returns the cold chain's kept samples.

    The paper's baseline (Sec. 8.2) is ``num_warmup=50, num_samples=10, thin=5, heat=0.8``.

    Compilation: rows and columns are padded to the next sizes of the library's bucket grid
    (`jaxhc._internal.buckets`): padding rows in no cluster, padding columns in no view (zero
    statistics, never visited), so one compiled program serves every ``(N, J)`` of a bucket
    and the samples equal those of the unpadded computation (same key, same samples).

    Args:
      key: PRNG key.
      X: data ``[N, J]`` (NaN = missing for the Beta families).
      component, alpha: as in `cdpm_mcmc_init`.
      num_samples: samples kept; num_warmup: steps discarded first; thin: steps per sample.
      heat, num_aux: as in `cdpm_mcmc_step`.
      init_column_views, init_row_labels: initial labels (default: prior draws).
      progress_bar: show a tqdm bar (one tick per step).

    Returns:
      `CDPMSamples`: ``column_views [S, J]``, ``row_labels [S, N, J]`` (view slots) ...
    """
    D = _cdpm_prepare(X, component, alpha, heat, num_aux)
    num_samples, num_warmup, thin = check_run(num_samples, num_warmup, thin)
    check_key(key, "key")
    f = D.Xp.dtype
    k_init, k_run = jax.random.split(key)
    state, row_lm = _cdpm_init(k_init, D, init_column_views, init_row_labels)
    check_leaf_scores(component, D.Xa, "cdpm_mcmc", take_front(row_lm, (D.N,)))
    a, h = jnp.asarray(D.alpha, f), jnp.asarray(D.heat, f)
    per_chunk, size = _cdpm_sizes(D)

    def chunk(c, st, warm, n, token):  # chunk c uses fold_in(k_run, c), its step t fold_in(that, t)
        return _cdpm_chunk(
            jax.random.fold_in(k_run, c),
            st,
            D.Xp,
            D.comps,
            a,
            h,
            warm,
            n,
            thin,
            D.N,
            D.J,
            D.num_aux,
            size,
            bool(token),
            token,
        )

    state, (u, Z, lj, info) = run_chunks(
        chunk,
        state,
        num_warmup=num_warmup,
        num_samples=num_samples,
        thin=thin,
        size=per_chunk,
        progress_bar=progress_bar,
        name="CDPM MCMC",
        device_ticks=True,
    )
    check_no_nan(lj, "cdpm_mcmc", D.Xa)
    u = to_device(take_front(u, (num_samples, D.J)))
    Z = to_device(take_front(Z, (num_samples, D.N, D.J)))
    swap_rate = jnp.asarray(np.mean(np.asarray(info.swap_accepted)))
    return CDPMSamples(u, Z, lj, info.num_views, swap_rate, _unpad_cdpm_state(state, D.N, D.J))


class CDPMGibbs(MCMCKernel):
    """Metropolis-coupled CDPM MCMC as a NumPyro kernel; each kept sample is the cold
    chain's ``{"column_views": [J], "row_labels": [N, J]}`` (NumPyro's MCMC compiles its own
    programs: the data is not padded).

    Args:
      X, component, alpha: the CDPM (see `cdpm_mcmc_init`).
      heat, num_aux: see `cdpm_mcmc_step`.
    """

    sample_field = "sample"

    def __init__(self, X, component, alpha=1.0, *, heat=0.8, num_aux=1):
        D = _cdpm_prepare(X, component, alpha, heat, num_aux, pad=False)
        self.X, self.alpha, self.comps, self.heat, self.num_aux = D.Xp, D.alpha, D.comps, D.heat, D.num_aux
        self.component = component
        self._cols = make_columns(self.X, self.comps)

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        k_init, k = jax.random.split(rng_key)
        u, Z = (None, None) if init_params is None else (init_params["column_views"], init_params["row_labels"])
        st = cdpm_mcmc_init(k_init, self.X, self.component, self.alpha, u, Z)
        return KernelState({"column_views": st.column_views[0], "row_labels": st.row_labels[0]}, st, k)

    def sample(self, state, model_args, model_kwargs):
        k, k_next = jax.random.split(state.rng_key)
        f = self.X.dtype
        N, J = self.X.shape
        st, _ = _cdpm_step(
            k, state.state, self._cols, jnp.asarray(self.alpha, f), jnp.asarray(self.heat, f), self.num_aux, N, J
        )
        return KernelState({"column_views": st.column_views[0], "row_labels": st.row_labels[0]}, st, k_next)
