"""Algorithm 1: the greedy merges of the column tree (Eq. 6-8)."""

from __future__ import annotations

from typing import Sequence

import jax.numpy as jnp
import numpy as np

from ..bhc.terms import merge_log  # noqa: F401  (re-exported: BHCC's searches call it from here)
from .columns import ColumnData
from .views import ViewSlots


def greedy_merges(
    la: float,
    cols_of: list,
    cnt,
    node_h1,
    node_d,
    node_pT,
    node_1mr,
    node_r,
    evaluate,
    on_merge=None,
    progress=None,
    pairs=None,
) -> np.ndarray:
    """The merge loop of Algorithm 1 over ``m`` starting subtrees (slots ``0..m-1``, tree nodes
    ``0..m-1``, columns ``cols_of[s]``, column counts ``cnt [m]``), filling the per-node arrays
    ``[2m-1]`` in place (entries ``0..m-1`` must hold the starting subtrees' ``log d``,
    ``log p(X|T)``). ``evaluate(col_lists, ia, ib)`` returns ``log p(X[:, cols] | BHC)`` of the
    union of slots ``ia[q]`` and ``ib[q]``; ``on_merge(a, b)`` is told that slot ``b`` joined
    slot ``a``. ``pairs``, an ``[m, m]`` array when given, receives the first table: ``log
    p(X | BHC)`` of every pair of starting subtrees' union. Returns ``children [m-1, 2]``
    (node ``m + t`` is merge ``t``)."""
    m = len(cols_of)
    cols_of = [list(c) for c in cols_of]
    node_of = np.arange(m)
    cnt = np.asarray(cnt, float).copy()
    active = np.ones(m, bool)
    H = np.full((m, m), -np.inf)  # log p(X_ab | BHC) of the current slots' union
    S = np.full((m, m), -np.inf)  # merge log-odds
    iu, ju = np.triu_indices(m, 1)
    h = evaluate([cols_of[a] + cols_of[b] for a, b in zip(iu, ju)], iu, ju)
    H[iu, ju] = H[ju, iu] = h
    if pairs is not None:
        pairs[...] = H
    *_, lo = merge_log(la, cnt[iu], cnt[ju], node_d[iu], node_d[ju], node_pT[iu], node_pT[ju], h)
    S[iu, ju] = S[ju, iu] = lo
    children = np.zeros((m - 1, 2), np.int64)
    for t in range(m - 1):
        a, b = np.unravel_index(int(np.argmax(S)), S.shape)
        a, b = min(a, b), max(a, b)
        na, nb = node_of[a], node_of[b]
        k = m + t
        ld, lp, lr, l1, _ = merge_log(la, cnt[a], cnt[b], node_d[na], node_d[nb], node_pT[na], node_pT[nb], H[a, b])
        children[t] = (min(na, nb), max(na, nb))
        node_h1[k], node_d[k], node_pT[k], node_r[k], node_1mr[k] = H[a, b], ld, lp, lr, l1
        node_of[a], cols_of[a], cnt[a] = k, cols_of[a] + cols_of[b], cnt[a] + cnt[b]
        active[b] = False
        if on_merge is not None:
            on_merge(a, b)
        S[b, :] = S[:, b] = -np.inf
        S[a, :] = S[:, a] = -np.inf
        others = np.flatnonzero(active & (np.arange(m) != a))
        if len(others):
            h = evaluate([cols_of[a] + cols_of[o] for o in others], np.full(len(others), a), others)
            H[a, others] = H[others, a] = h
            nd_o = node_of[others]
            *_, lo = merge_log(la, cnt[a], cnt[others], ld, node_d[nd_o], lp, node_pT[nd_o], h)
            S[a, others] = S[others, a] = lo
        if progress is not None:
            progress(1)
    return children


def bhcc_core(cd: ColumnData, alpha: float, col_ids: Sequence[int], progress=None, pairs=None, meter=None):
    """Algorithm 1 over the columns ``col_ids`` of ``cd``. Returns ``children`` (node ids
    local: leaves ``0..m-1`` = ``col_ids``), and per-node ``log_h1, log_d, log_pT, log_1mr,
    log_r``. ``pairs`` (``[m, m]``, optional) receives ``log p(X | BHC)`` of every pair of
    columns (the first table of the merges; see `pair_affinity`). ``meter`` (a one-item
    list, optional) is increased by the work of the column sets evaluated (each a row BHC):
    their sizes summed."""
    col_ids = [int(c) for c in col_ids]
    m = len(col_ids)
    la = float(np.log(alpha))
    log_alpha = jnp.log(jnp.asarray(alpha, jnp.result_type(float)))
    slots = ViewSlots(cd, col_ids)

    def evidence(cl, ia, ib):
        if meter is not None:
            meter[0] += sum(len(c) for c in cl)
        return slots.evidence(cl, ia, ib, log_alpha)

    h1_leaf = evidence([[c] for c in col_ids], np.arange(m), np.full(m, slots.empty))
    N = 2 * m - 1
    node_h1 = np.full(N, np.nan)
    node_d = np.zeros(N)
    node_pT = np.zeros(N)
    node_1mr = np.full(N, -np.inf)
    node_r = np.zeros(N)
    node_h1[:m], node_d[:m], node_pT[:m] = h1_leaf, la, h1_leaf
    if m == 1:
        return np.zeros((0, 2), np.int64), node_h1, node_d, node_pT, node_1mr, node_r
    children = greedy_merges(
        la,
        [[c] for c in col_ids],
        np.ones(m),
        node_h1,
        node_d,
        node_pT,
        node_1mr,
        node_r,
        evidence,
        slots.merge,
        progress,
        pairs,
    )
    return children, node_h1, node_d, node_pT, node_1mr, node_r


def pair_affinity(pairs: np.ndarray, node_h1: np.ndarray) -> np.ndarray:
    """``[m, m]`` affinity of two columns: ``log p(X_ab | BHC) - log p(X_a | BHC) - log p(X_b |
    BHC)`` from `bhcc_core`'s ``pairs`` and the leaves' ``log_h1`` (0 on the diagonal): how
    many nats the two columns gain by sharing a view's row partition. The split-merge
    proposals of the stochastic search allocate columns by it."""
    m = pairs.shape[0]
    h = np.asarray(node_h1[:m], float)
    out = np.asarray(pairs, float) - h[:, None] - h[None, :]
    np.fill_diagonal(out, 0.0)
    return out
