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
    segment_stats,
    select_rows,
    sub_stats,
    take_slots,
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
    Capacities: ``V = J`` view slots, ``K = N`` row-cluster slots per view.

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
    caches (or None) and the statistics of every cell (leaves ``[N, J, ...]``)."""

    comps: Any
    cache: Any
    cells: Any


def column_components(component, J):
    """The component restricted to each column, stacked (leading axis ``J``); a family whose
    columns cannot be split raises `jaxhc.components.ColumnSplitError` (a ``TypeError`` and a
    ``ValueError``; `Component.column_components`)."""
    return component.column_components(J, "CDPM MCMC")


def make_columns(X, comps):
    N = X.shape[0]
    cells = jax.vmap(lambda c, x: c.leaf_stats(x[:, None]), in_axes=(0, 1), out_axes=1)(comps, X)
    has_cache = jax.eval_shape(lambda c: c.count_cache(N), comps) is not None
    cache = jax.vmap(lambda c: c.count_cache(N))(comps) if has_cache else None
    return _Columns(comps, cache, cells)


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
    """`CDPMState` fields of one chain from its labels."""
    N, J = _stat_shape(cols.cells)
    V = J
    f = cols.cells.n.dtype
    ar_J = jnp.arange(J)
    zc = Z[:, u]  # [N, J] cluster of each cell in its column's view
    ids = (zc * J + ar_J[None, :]).reshape(-1)
    flat = _tmap(lambda a: a.reshape((N * J,) + a.shape[2:]), cols.cells)
    stats = segment_stats(flat, ids, N * J)
    stats = _tmap(lambda a: a.reshape((N, J) + a.shape[1:]), stats)
    counts = jax.vmap(lambda z: jax.ops.segment_sum(jnp.ones(N, f), z, num_segments=N), in_axes=1)(Z)
    sizes = jax.ops.segment_sum(jnp.ones(J, f), u, num_segments=V)
    occ = counts[u, :].T > 0  # [K, J]
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


def _row_sweep(key, st, cols, alpha, beta):
    """Collapsed Gibbs of every row's cluster in every view (conditionals ^ beta)."""
    u, Z, stats, counts, sizes, lms, lj = st
    N, V = Z.shape
    J = u.shape[0]
    K = N
    ar_J, ar_V, ar_K = jnp.arange(J), jnp.arange(V), jnp.arange(K)
    log_alpha = jnp.log(alpha)
    BK = min(_BLOCK, K)

    def body(carry, inp):
        Z, stats, counts, lms = carry
        i, k = inp
        cell = take_slots(cols.cells, i)  # [J, ...]
        zi = Z[i]
        c_col = zi[u]
        counts = counts.at[ar_V, zi].add(-1.0)
        alive = counts[u, c_col] > 0
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
            return jax.lax.dynamic_update_slice_in_dim(vd, jax.ops.segment_sum(d.T, u, num_segments=V), start, 1)

        view_delta = jax.lax.fori_loop(0, (k_hi + BK - 1) // BK, block, jnp.zeros((V, K), lms.dtype))
        prior = jnp.where(
            occ, jnp.log(jnp.where(occ, counts, 1.0)), jnp.where(ar_K[None, :] == e[:, None], log_alpha, -jnp.inf)
        )
        znew = jax.random.categorical(k, beta * (prior + view_delta), axis=-1).astype(jnp.int32)
        c_new = znew[u]
        s_new = _col_merge(cols, take_slots(stats, (c_new, ar_J)), cell, 0)
        stats = _tmap(lambda a, b: a.at[c_new, ar_J].set(b), stats, s_new)
        lms = lms.at[c_new, ar_J].set(_col_lm(cols, s_new, 0))
        counts = counts.at[ar_V, znew].add(1.0)
        return (Z.at[i].set(znew), stats, counts, lms), None

    (Z, stats, counts, lms), _ = jax.lax.scan(body, (Z, stats, counts, lms), (jnp.arange(N), jax.random.split(key, N)))
    return (u, Z, stats, counts, sizes, lms, lj)


def _column_sweep(key, st, cols, alpha, beta, num_aux):
    """Gibbs of every column's view with ``num_aux`` auxiliary views (Algorithm 8)."""
    u, Z, stats, counts, sizes, lms, lj = st
    N, V = Z.shape
    J = u.shape[0]
    K = N
    f = counts.dtype
    m = num_aux
    log_alpha = jnp.log(alpha)
    BV = min(_BLOCK, V)
    k_aux, k_cols = jax.random.split(key)
    aux_Z, aux_counts = crp_draw(k_aux, N, K, alpha, (J, m), f)  # [J, m, N], [J, m, K]

    def body(carry, inp):
        u, Z, stats, counts, sizes, lms = carry
        j, k, aZ, ac = inp
        v_old = u[j]
        sizes = sizes.at[v_old].add(-1.0)
        single = sizes[v_old] == 0
        aZ = aZ.at[0].set(jnp.where(single, Z[:, v_old], aZ[0]))
        ac = ac.at[0].set(jnp.where(single, counts[v_old], ac[0]))
        cell = take_slots(cols.cells, (slice(None), j))  # [N, ...]
        # view likelihoods sum_k G_j(X[Z_v = k, j]), only for blocks of BV view slots below
        # the highest occupied one (new views take the lowest free slot)
        v_hi = jnp.max(jnp.where(sizes > 0, jnp.arange(V), 0)) + 1
        rep = _tmap(lambda a: jnp.repeat(a, BV, axis=0), cell)

        def block(b, lv):
            start = jnp.minimum(b * BV, V - BV)
            Zb = jax.lax.dynamic_slice_in_dim(Z, start, BV, 1)
            S = segment_stats(rep, (Zb + jnp.arange(BV)[None, :] * K).reshape(-1), BV * K)
            S = _tmap(lambda a: a.reshape((BV, K) + a.shape[1:]), S)
            return jax.lax.dynamic_update_slice_in_dim(lv, jnp.sum(_col_lm_j(cols, j, S), -1), start, 0)

        lm_v = jax.lax.fori_loop(0, (v_hi + BV - 1) // BV, block, jnp.zeros(V, counts.dtype))
        rep_a = _tmap(lambda a: jnp.tile(a, (m,) + (1,) * (a.ndim - 1)), cell)
        ids_a = (aZ + jnp.arange(m)[:, None] * K).reshape(-1)
        S_a = _tmap(lambda a: a.reshape((m, K) + a.shape[1:]), segment_stats(rep_a, ids_a, m * K))
        lm_a = _col_lm_j(cols, j, S_a)  # [m, K]
        lv = jnp.where(sizes > 0, beta * (jnp.log(jnp.where(sizes > 0, sizes, 1.0)) + lm_v), -jnp.inf)
        la = beta * log_alpha - jnp.log(m) + (beta - 1.0) * crp_log_prob_counts(ac, alpha) + beta * jnp.sum(lm_a, -1)
        choice = jax.random.categorical(k, jnp.concatenate([lv, la]))
        is_aux = choice >= V
        a_idx = jnp.clip(choice - V, 0, m - 1)
        e = jnp.argmin(sizes > 0)
        v_new = jnp.where(is_aux, e, choice).astype(jnp.int32)
        Z = jnp.where(is_aux, Z.at[:, e].set(aZ[a_idx]), Z)
        counts = jnp.where(is_aux, counts.at[e].set(ac[a_idx]), counts)
        s_new = segment_stats(cell, Z[:, v_new], K)  # column j under its new view's partition
        lm_new = _col_lm_j(cols, j, s_new)
        occ_new = counts[v_new] > 0
        stats = _tmap(lambda a, b: a.at[:, j].set(b), stats, s_new)
        lms = lms.at[:, j].set(jnp.where(occ_new, lm_new, 0.0))
        return (u.at[j].set(v_new), Z, stats, counts, sizes.at[v_new].add(1.0), lms), None

    (u, Z, stats, counts, sizes, lms), _ = jax.lax.scan(
        body, (u, Z, stats, counts, sizes, lms), (jnp.arange(J), jax.random.split(k_cols, J), aux_Z, aux_counts)
    )
    return (u, Z, stats, counts, sizes, lms, lj)


def _cdpm_chain_step(key, st, cols, alpha, beta, num_aux):
    k_col, k_row = jax.random.split(key)
    st = _column_sweep(k_col, st, cols, alpha, beta, num_aux)
    st = _row_sweep(k_row, st, cols, alpha, beta)
    u, Z, stats, counts, sizes, lms, _ = st
    return (u, Z, stats, counts, sizes, lms, _cdpm_log_joint(u, counts, sizes, lms, alpha))


def _cdpm_step(key, state, cols, alpha, heat, num_aux):
    k_chains, k_swap = jax.random.split(key)
    betas = jnp.stack([jnp.ones((), heat.dtype), heat])
    st = jax.vmap(_cdpm_chain_step, in_axes=(0, 0, None, None, 0, None))(
        jax.random.split(k_chains, 2), tuple(state), cols, alpha, betas, num_aux
    )
    state = CDPMState(*st)
    log_ratio = (1.0 - heat) * (state.log_joint[1] - state.log_joint[0])
    acc = mh_accept(k_swap, log_ratio)
    swapped = _tmap(lambda a: a[::-1], state)
    state = tree_select(acc, swapped, state)
    return state, CDPMInfo(acc, log_ratio, jnp.sum(state.view_sizes[0] > 0))


def _cdpm_validate(X, component, alpha, heat=None, num_aux=1):
    Xa, alpha = validate(X, component, alpha)
    comps = column_components(component, Xa.shape[1])
    if heat is not None:
        heat = check_heat(heat)
    num_aux = check_int(num_aux, "num_aux", 1)
    return Xa, alpha, comps, heat, num_aux


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
    Xa, alpha, comps, _, _ = _cdpm_validate(X, component, alpha)
    N, J = Xa.shape
    f = Xa.dtype
    if (column_views is None or row_labels is None) and key is None:
        raise ValueError("key is required unless column_views and row_labels are both given")
    k_u, k_z = jax.random.split(key) if key is not None else (None, None)
    if column_views is None:
        u = crp_draw_jit(k_u, J, J, jnp.asarray(alpha, f), (), f)[0]
        u_orig = None
    else:
        u = check_labels(column_views, J, "column_views")
        u_orig = None if isinstance(column_views, jax.core.Tracer) else np.asarray(column_views)
    if row_labels is None:
        Z = crp_draw_jit(k_z, N, N, jnp.asarray(alpha, f), (J,), f)[0].T
    elif isinstance(row_labels, jax.core.Tracer):
        Z = row_labels.astype(jnp.int32)
        Z = jnp.broadcast_to(Z[:, None], (N, J)) if Z.ndim == 1 else Z
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
            Zc += [jnp.zeros(N, jnp.int32)] * (J - len(Zc))
        Z = jnp.stack(Zc, axis=1)
    return _cdpm_init_jit(u, Z, Xa, comps, jnp.asarray(alpha, f))


@jax.jit
def _cdpm_init_jit(u, Z, X, comps, alpha):
    one = (u,) + (Z,) + _cdpm_chain_state(u, Z, make_columns(X, comps), alpha)
    return CDPMState(*_tmap(lambda x: jnp.stack([x, x]), one))


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


def _cdpm_size(X):
    N, J = X.shape
    return chunk_size(4 * J * (N + 1) + 2 * X.dtype.itemsize + 5)


@functools.partial(jax.jit, static_argnames=("num_aux", "size", "progress"))
def _cdpm_chunk(key, state, X, comps, alpha, heat, num_warmup, num_kept, thin, num_aux, size, progress, token):
    """`collect_chunk` over CDPM steps; counts and ``heat`` are traced (one program per data shape,
    component family and ``num_aux``)."""
    cols = make_columns(X, comps)

    def step(k, s):
        return _cdpm_step(k, s, cols, alpha, heat, num_aux)

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
    Xa, alpha, comps, heat, num_aux = _cdpm_validate(X, component, alpha, heat, num_aux)
    f = Xa.dtype
    state, (_, _, _, info) = _cdpm_chunk(
        key, state, Xa, comps, jnp.asarray(alpha, f), jnp.asarray(heat, f), 0, 1, 1, num_aux, _cdpm_size(Xa), False, 0
    )
    return state, _tmap(lambda a: a[0], info)


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
    Xa, alpha, comps, heat, num_aux = _cdpm_validate(X, component, alpha, heat, num_aux)
    num_samples, num_warmup, thin = check_run(num_samples, num_warmup, thin)
    check_key(key, "key")
    check_leaf_scores(component, Xa, "cdpm_mcmc")
    f = Xa.dtype
    k_init, k_run = jax.random.split(key)
    state = cdpm_mcmc_init(k_init, Xa, component, alpha, init_column_views, init_row_labels)
    a, h = jnp.asarray(alpha, f), jnp.asarray(heat, f)
    size = _cdpm_size(Xa)

    def chunk(c, st, warm, n, token):  # chunk c uses fold_in(k_run, c), its step t fold_in(that, t)
        return _cdpm_chunk(
            jax.random.fold_in(k_run, c), st, Xa, comps, a, h, warm, n, thin, num_aux, size, bool(token), token
        )

    state, (u, Z, lj, info) = run_chunks(
        chunk,
        state,
        num_warmup=num_warmup,
        num_samples=num_samples,
        thin=thin,
        size=size,
        progress_bar=progress_bar,
        name="CDPM MCMC",
        device_ticks=True,
    )
    check_no_nan(lj, "cdpm_mcmc", Xa)
    return CDPMSamples(u, Z, lj, info.num_views, jnp.mean(info.swap_accepted), state)


class CDPMGibbs(MCMCKernel):
    """Metropolis-coupled CDPM MCMC as a NumPyro kernel; each kept sample is the cold
    chain's ``{"column_views": [J], "row_labels": [N, J]}``.

    Args:
      X, component, alpha: the CDPM (see `cdpm_mcmc_init`).
      heat, num_aux: see `cdpm_mcmc_step`.
    """

    sample_field = "sample"

    def __init__(self, X, component, alpha=1.0, *, heat=0.8, num_aux=1):
        self.X, self.alpha, self.comps, self.heat, self.num_aux = _cdpm_validate(X, component, alpha, heat, num_aux)
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
        st, _ = _cdpm_step(
            k, state.state, self._cols, jnp.asarray(self.alpha, f), jnp.asarray(self.heat, f), self.num_aux
        )
        return KernelState({"column_views": st.column_views[0], "row_labels": st.row_labels[0]}, st, k_next)
