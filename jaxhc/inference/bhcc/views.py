"""Batched row BHC over padded views (column index vectors): the DPM evidence of many
candidate views at once (`ViewSlots`), and the full row-BHC outputs of a batch (`views_full`)."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from ..._internal.pool import pool_map
from ..bhc.greedy import bhc_core
from .columns import ColumnData


def view_width(m: int) -> int:
    """Padded view width: a power of 4 (>= 2), so few programs compile."""
    w = 2
    while w < m:
        w *= 4
    return w


def row_bhc(cd: ColumnData, cols, log_alpha):
    """BHC over the rows of one padded view; returns the raw per-merge outputs."""
    comp, leaf = cd.view(cols)
    I = cd.n_rows
    if I == 1:
        lh = comp.log_marginal(leaf)
        z = jnp.zeros((0,), lh.dtype)
        empty = jax.tree_util.tree_map(lambda y: y[:0], leaf)
        return comp, leaf, (jnp.zeros((0, 2), jnp.int32), empty, z, z, z, z, z, lh)
    return comp, leaf, bhc_core(comp, log_alpha, leaf, jnp.asarray(I, jnp.int32), row_batch=I)


def dpm_bound(out, log_alpha, I):
    alpha = jnp.exp(log_alpha)
    leaf_log_h1 = out[7]
    log_pT = out[4][-1] if I > 1 else leaf_log_h1[0]
    log_d = out[3][-1] if I > 1 else log_alpha
    return log_pT + log_d + gammaln(alpha) - gammaln(I + alpha)


@jax.jit
def _pair_tables(cd: ColumnData, cols):
    """Per column ``j`` of ``cols [m]``: the pair log marginals ``P_j [I, I]`` (rows ``i, i'``
    merged, column ``j`` only) and the leaf log marginals ``l_j [I]``; one extra all-zero
    slot is appended (the empty column set)."""

    def one(c):
        comp, leaf = cd.view(c[None])
        li = comp.log_marginal(leaf)
        pair = comp.log_marginal(
            comp.merge(
                jax.tree_util.tree_map(lambda x: x[:, None], leaf), jax.tree_util.tree_map(lambda x: x[None, :], leaf)
            )
        )
        return pair, li

    P, L = jax.lax.map(one, cols)
    return jnp.concatenate([P, jnp.zeros_like(P[:1])]), jnp.concatenate([L, jnp.zeros_like(L[:1])])


@partial(jax.jit, donate_argnums=(0, 1))
def _merge_slots(P, L, a, b):
    return P.at[a].add(P[b]), L.at[a].add(L[b])


_CHUNK_VIEWS = 32


@jax.jit
def _pairs_evidence(cd: ColumnData, cols, P, L, ia, ib, count, log_alpha):
    """``log p(X[:, view] | BHC)`` (BHC's DPM lower bound) of the first ``count`` padded
    views ``cols [B, W]``, view ``q`` being the union of the column sets of slots ``ia[q]``
    and ``ib[q]``. The initial pair log-odds of each row BHC are sums of the slots' pair
    tables (log marginals are additive over the columns of a view). Views run one after the
    other (a loop, not ``vmap``: the lazy best-pair search does a data-dependent number of
    row rescans per merge, which under ``vmap`` every view would pay for)."""
    I = cd.n_rows
    eye = jnp.eye(I, dtype=bool)
    alpha = jnp.exp(log_alpha)

    def body(q, out):
        c, a, b = cols[q], ia[q], ib[q]
        comp, leaf = cd.view(c)
        lv = L[a] + L[b]
        S0 = jnp.where(eye, -jnp.inf, P[a] + P[b] - lv[:, None] - lv[None, :] - log_alpha)
        log_pT, log_d = bhc_core(comp, log_alpha, leaf, jnp.asarray(I, jnp.int32), S0=S0, evidence_only=True)
        return out.at[q].set(log_pT + log_d + gammaln(alpha) - gammaln(I + alpha))

    return jax.lax.fori_loop(0, count, body, jnp.zeros(cols.shape[0], P.dtype))


# column jobs of one step run at most this many at a time in the library's shared thread pool
JOB_THREADS = 4


def pad_views(col_lists, W, J, B):
    arr = np.full((B, W), J, np.int32)
    for r, c in enumerate(col_lists):
        arr[r, : len(c)] = c
    for r in range(len(col_lists), B):  # pad the batch with copies of the first view
        arr[r] = arr[0]
    return arr


def grouped_views(col_lists):
    """Yields ``(indices, W)``: the views of each padded width."""
    widths = np.array([view_width(len(c)) for c in col_lists])
    for W in np.unique(widths):
        yield np.flatnonzero(widths == W), int(W)


class ViewSlots:
    """Device-resident pair tables of the current column clusters (one slot each, plus an
    empty slot at the end)."""

    def __init__(self, cd: ColumnData, col_ids):
        self.cd = cd
        self.P, self.L = _pair_tables(cd, jnp.asarray(np.asarray(col_ids, np.int32)))
        self.empty = int(self.P.shape[0]) - 1

    def merge(self, a: int, b: int):
        self.P, self.L = _merge_slots(self.P, self.L, jnp.int32(a), jnp.int32(b))

    def evidence(self, col_lists, ia, ib, log_alpha) -> np.ndarray:
        """``log p(X[:, view] | BHC)`` of the unions of slots ``ia[q]`` and ``ib[q]``."""
        cd = self.cd
        out = np.empty(len(col_lists))
        if cd.n_rows == 1:
            for q, c in enumerate(col_lists):
                comp, leaf = cd.view(jnp.asarray(np.asarray(c, np.int32)))
                out[q] = float(comp.log_marginal(leaf)[0])
            return out
        ia, ib = np.asarray(ia, np.int32), np.asarray(ib, np.int32)
        jobs = []
        for idx, W in grouped_views(col_lists):
            for s0 in range(0, len(idx), _CHUNK_VIEWS):
                sub = idx[s0 : s0 + _CHUNK_VIEWS]
                cols = pad_views([col_lists[i] for i in sub], W, cd.n_cols, _CHUNK_VIEWS)
                pa = np.zeros(_CHUNK_VIEWS, np.int32)
                pb = np.zeros(_CHUNK_VIEWS, np.int32)
                pa[: len(sub)], pb[: len(sub)] = ia[sub], ib[sub]
                jobs.append((sub, cols, pa, pb))

        def run(job):
            sub, cols, pa, pb = job
            res = _pairs_evidence(
                cd, jnp.asarray(cols), self.P, self.L, jnp.asarray(pa), jnp.asarray(pb), jnp.int32(len(sub)), log_alpha
            )
            return np.asarray(res)[: len(sub)]

        results = pool_map(run, jobs, max_workers=JOB_THREADS)
        for (sub, *_), r in zip(jobs, results):
            out[sub] = r
        return out


@jax.jit
def views_full(cd: ColumnData, cols, log_alpha):
    """Full row-BHC outputs of the padded views ``cols [B, W]`` (one view after the other,
    see `_pairs_evidence`)."""
    return jax.lax.map(lambda c: row_bhc(cd, c, log_alpha)[2], cols)


VIEW_CHUNK = 16


def views_full_batches(cd: ColumnData, col_lists, alpha):
    """Yields ``(sub, cols, outs)`` for the views ``col_lists`` (column ids of ``cd``): the
    indices ``sub`` of up to `VIEW_CHUNK` views of one padded width, their padded columns
    ``cols [VIEW_CHUNK, W]`` (host array) and `views_full`'s outputs for them."""
    log_alpha = jnp.log(jnp.asarray(alpha, jnp.result_type(float)))
    for idx, W in grouped_views(col_lists):
        for s0 in range(0, len(idx), VIEW_CHUNK):
            sub = idx[s0 : s0 + VIEW_CHUNK]
            cols = pad_views([col_lists[i] for i in sub], W, cd.n_cols, VIEW_CHUNK)
            yield sub, cols, views_full(cd, jnp.asarray(cols), log_alpha)
