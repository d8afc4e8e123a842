"""Batched row BHC over padded views (column index vectors): the DPM evidence of many
candidate views at once (`ViewSlots`), and the full row-BHC outputs of a batch (`views_full`)."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from ..._internal.buckets import bucket
from ..._internal.pool import pool_map
from ..bhc.greedy import bhc_core
from . import columns as _columns
from .columns import ColumnData


def view_width(m: int) -> int:
    """Padded view width: a power of 4 (>= 2), so few programs compile."""
    w = 2
    while w < m:
        w *= 4
    return w


def row_bhc(cd: ColumnData, cols, log_alpha):
    """BHC over the rows of one padded view; returns the raw per-merge outputs over the
    ``n_slots`` row slots (the first ``cd.I`` real, the rest never merged: merges ``I-1..``
    are unused rows, inner node ``n_slots + t`` is merge ``t``)."""
    comp, leaf = cd.view(cols)
    n = cd.n_slots
    if n == 1:  # an unpadded single row (padding off): no merges
        lh = comp.log_marginal(leaf)
        z = jnp.zeros((0,), lh.dtype)
        empty = jax.tree_util.tree_map(lambda y: y[:0], leaf)
        return comp, leaf, (jnp.zeros((0, 2), jnp.int32), empty, z, z, z, z, z, lh)
    return comp, leaf, bhc_core(comp, log_alpha, leaf, jnp.asarray(cd.I, jnp.int32), row_batch=n)


def root_terms(out, log_alpha, I):
    """``(log p(X | T), log d)`` of the root of a row BHC's outputs ``out`` (`row_bhc`) over
    ``I`` real rows (host int or traced): merge ``I - 2``, or the single leaf when ``I = 1``."""
    leaf = out[7][..., 0]
    if out[4].shape[-1] == 0:
        return leaf, jnp.broadcast_to(log_alpha, leaf.shape)
    k = jnp.maximum(jnp.asarray(I) - 2, 0)
    one = jnp.asarray(I) > 1
    return jnp.where(one, out[4][..., k], leaf), jnp.where(one, out[3][..., k], log_alpha)


def dpm_bound(out, log_alpha, I):
    alpha = jnp.exp(log_alpha)
    log_pT, log_d = root_terms(out, log_alpha, I)
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
    n, I = cd.n_slots, cd.I
    eye = jnp.eye(n, dtype=bool)
    alpha = jnp.exp(log_alpha)

    def body(q, out):
        c, a, b = cols[q], ia[q], ib[q]
        comp, leaf = cd.view(c)
        lv = L[a] + L[b]
        S0 = jnp.where(eye, -jnp.inf, P[a] + P[b] - lv[:, None] - lv[None, :] - log_alpha)
        log_pT, log_d = bhc_core(comp, log_alpha, leaf, jnp.asarray(I, jnp.int32), S0=S0, evidence_only=True)
        # a single row: its log marginal alone, as before the padding (the bound's terms
        # log alpha + log Gamma(alpha) - log Gamma(1 + alpha) cancel, up to rounding)
        return out.at[q].set(jnp.where(I > 1, log_pT + log_d + gammaln(alpha) - gammaln(I + alpha), log_pT))

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
    """Device-resident pair tables of the current column clusters: one slot each, then null
    columns that no view uses and an empty slot at the end (the last), ``bucket(m + 1)``
    slots in all (as `ColumnData`'s columns: one program for the tables of a bucket)."""

    def __init__(self, cd: ColumnData, col_ids):
        self.cd = cd
        ids = np.asarray(col_ids, np.int32)
        m = len(ids)
        mp = (bucket(m + 1) if _columns.PAD_TO_BUCKETS else m + 1) - 1
        ids = np.concatenate([ids, np.full(mp - m, cd.n_cols, np.int32)])
        self.P, self.L = _pair_tables(cd, jnp.asarray(ids))
        self.empty = int(self.P.shape[0]) - 1

    def merge(self, a: int, b: int):
        self.P, self.L = _merge_slots(self.P, self.L, jnp.int32(a), jnp.int32(b))

    def evidence(self, col_lists, ia, ib, log_alpha) -> np.ndarray:
        """``log p(X[:, view] | BHC)`` of the unions of slots ``ia[q]`` and ``ib[q]``."""
        cd = self.cd
        out = np.empty(len(col_lists))
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
