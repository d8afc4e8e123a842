"""Predictive distributions under a BHC tree (Heller & Ghahramani 2005, section 4): the
mixture over the tree's nodes, weighted by each node's posterior probability of being a
cluster, of the component's posterior predictive; for new rows and for single cells."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..._internal.buckets import bucket, pad_rows
from ...components import CountStats
from . import terms
from .greedy import BHCResult


def _padded_nodes(log_w, node_stats):
    """``(log_w, node_stats)`` of ``2n - 1`` nodes padded to ``2 bucket(n) - 1`` (host): the
    padded nodes copy node 0's statistics and weigh ``-inf``, so they add exact zeros to the
    mixture and one program serves every ``n`` of a bucket."""
    m = len(log_w)
    size = 2 * bucket((m + 1) // 2) - 1 if terms.PAD_TO_BUCKETS else m
    lw = pad_rows(np.asarray(log_w, dtype=float), size, -np.inf)
    return jnp.asarray(lw), jax.tree_util.tree_map(lambda x: jnp.asarray(pad_rows(x, size, "first")), node_stats)


@jax.jit
def _predictive_core(comp, log_w, node_stats, Xn):
    def one(x):
        lp = comp.log_predictive(x, node_stats)
        return jax.scipy.special.logsumexp(log_w + lp)

    return jax.lax.map(one, Xn, batch_size=16)


def bhc_predictive(result: BHCResult, X_new) -> jax.Array:
    """``log p(x | D)`` for each row of ``X_new [m, d]`` under a BHC tree.

    ``p(x|D) = sum_k w_k p(x | D_k)`` over all nodes, ``w_k = r_k prod_{i in path(root ..
    parent(k))} (1 - r_i) n_{c(i)} / n_i`` (Heller & Ghahramani 2005, Sec. 4, with the
    DPM's size-proportional split so the weights sum to 1; see `BHCResult.log_weights`);
    for NIW components each ``p(x | D_k)`` is a multivariate Student-t. Returns ``[m]``.

    The nodes and the rows of ``X_new`` are padded to the library's size grid (padded nodes
    weigh zero, padded rows are dropped), so one compiled program serves every size of a
    bucket.
    """
    if not isinstance(result, BHCResult):
        raise TypeError(f"result must be a BHCResult from jaxhc.bhc, got {type(result).__name__}")
    comp = result.component
    Xn = np.asarray(X_new)
    if Xn.ndim == 1:
        raise ValueError(f"X_new must be 2-D [m, d]; got a vector of shape {Xn.shape} (use X_new[None])")
    Xn = comp.validate_data(Xn, "X_new")
    log_w, node_stats = _padded_nodes(result.log_weights(), result.node_stats)
    m = Xn.shape[0]
    rows = bucket(m) if terms.PAD_TO_BUCKETS else m
    out = np.asarray(_predictive_core(comp, log_w, node_stats, jnp.asarray(pad_rows(Xn, rows, "first"))))[:m]
    bad = ~np.isfinite(out) & ~(out == -np.inf)
    if np.any(bad):
        scale = comp.prior_scale()
        hint = (
            ""
            if scale is None
            else f" against a prior within-cluster scale of {float(np.min(scale)):.3g} to {float(np.max(scale)):.3g}"
        )
        raise ValueError(
            f"bhc_predictive: the predictive of {int(bad.sum())} rows of X_new is not finite: X_new's scale "
            f"(entries up to {float(np.nanmax(np.abs(Xn))):.3g}){hint} leaves no precision. Rescale X_new as the "
            f"training data were (the same units, the same standardisation)."
        )
    return jnp.asarray(out)


@jax.jit
def _pair_table_full(comp, node_stats, Xq):
    """``log p(Xq[u] | D_m) [U, 2n-1]`` (rows of ``Xq`` NaN but for one cell)."""
    return jax.lax.map(lambda x: comp.log_predictive(x, node_stats), Xq, batch_size=16)


@jax.jit
def _pair_table_columns(comps, col_stats, v):
    """``log p(v[u] | D_m) [U, 2n-1]`` under the one-column components ``comps`` (batched
    over ``u``) with the node statistics of each pair's column ``col_stats [U, 2n-1, ...]``."""
    return jax.vmap(lambda c, s, x: c.log_predictive(x[None], s))(comps, col_stats, v)


def _pair_table(comp, node_stats, pcols, pvals, d):
    """``log p(X_j = v | D_m)`` for each distinct (column, value) pair and every node.

    Column-separable count families read only the pair's column (its ``n``, successes and
    failures; the summed log binomial coefficients cancel in the predictive and are set to
    0); other families evaluate the full row with NaN elsewhere. Padded to a power of two
    (at least 64) pairs, beyond 1024 to a multiple of 1024, so few programs compile."""
    U = len(pcols)
    P = max(64, 1 << int(np.ceil(np.log2(max(U, 1))))) if U <= 1024 else -(-U // 1024) * 1024
    pc = np.concatenate([pcols, np.repeat(pcols[:1], P - U)])
    pv = np.concatenate([pvals, np.repeat(pvals[:1], P - U)])
    if isinstance(node_stats, CountStats):
        sub = comp.restrict_columns(pc)
        comps = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (P,)) if jnp.ndim(x) == 0 else x, sub)
        col_stats = CountStats(
            *(jnp.asarray(np.asarray(x)[:, pc].T[..., None]) for x in node_stats[:3]),
            jnp.zeros((P, np.shape(node_stats.logc)[0]), np.asarray(node_stats.logc).dtype),
        )
        out = _pair_table_columns(comps, col_stats, jnp.asarray(pv, np.asarray(node_stats.n).dtype))
    else:
        Xq = np.full((P, d), np.nan)
        Xq[np.arange(P), pc] = pv
        out = _pair_table_full(comp, node_stats, jnp.asarray(Xq))
    return np.asarray(out)[:U]


def _integer_indices(x, name) -> np.ndarray:
    """``x`` as int64 ``[Q]``; a TypeError / ValueError for non-numeric or fractional entries."""
    try:
        a = np.asarray(x)
    except Exception:  # pragma: no cover - exotic inputs
        raise TypeError(f"{name} must be integer indices, got {x!r}") from None
    if a.dtype == object or not (np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)):
        raise TypeError(f"{name} must be integer indices, got dtype {a.dtype}")
    if np.issubdtype(a.dtype, np.floating) and not np.all(np.isfinite(a) & (a == np.round(a))):
        raise ValueError(f"{name} must be integer indices, got {a.reshape(-1)[:5]}")
    return a.astype(np.int64).reshape(-1)


def bhc_predictive_cell(result: BHCResult, rows, cols, values) -> np.ndarray:
    """``log p(X_ij = v | D, T)`` of cells of existing rows under a BHC tree (the DPM
    baseline of the cross-clustering paper's missing-value study).

    Row ``i``'s cluster is one of the nodes on the path from the root to leaf ``i``: node
    ``m`` with weight ``r_m prod_{above m} (1 - r)`` (these sum to one since ``r = 1`` at the
    leaf), and ``p(v | D_m)`` is the component's predictive of column ``j`` given the data of
    node ``m`` (which includes row ``i``'s observed entries; the cell itself should be
    missing, NaN, in the data the tree was built on). Needs a component with missing-value
    support (the Beta families).

    Args:
      rows, cols: int ``[Q]`` cell coordinates; values: ``[Q]`` or ``[Q, K]`` candidates.
    Returns ``log p`` with the shape of ``values``.
    """
    if not isinstance(result, BHCResult):
        raise TypeError(f"result must be a BHCResult from jaxhc.bhc, got {type(result).__name__}")
    comp = result.component
    if not comp.supports_missing:
        raise TypeError(f"{type(comp).__name__} does not support missing entries; cell prediction needs one that does")
    rows = _integer_indices(rows, "rows")
    cols = _integer_indices(cols, "cols")
    try:
        vals = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"values must be real numbers [Q] or [Q, K], got {values!r}") from None
    v2 = vals[:, None] if vals.ndim == 1 else vals
    n, d = result.tree.n_leaves, int(np.shape(jax.tree_util.tree_leaves(result.node_stats)[0])[-1])
    if not np.all(np.isfinite(vals)):
        raise ValueError("values must be finite (a NaN value would be read as a missing cell)")
    if rows.shape != cols.shape or v2.ndim != 2 or v2.shape[0] != rows.shape[0]:
        raise ValueError(
            f"rows, cols must be [Q] and values [Q] or [Q, K]; got {rows.shape}, {cols.shape}, {vals.shape}"
        )
    if np.any((rows < 0) | (rows >= n)) or np.any((cols < 0) | (cols >= d)):
        raise ValueError(f"cell coordinates out of range for {n} rows x {d} columns")
    par = result.tree.parents()
    log_r = np.concatenate([np.zeros(n), np.asarray(result.log_r)])
    l1 = np.asarray(result.log_1mr)
    above = np.zeros(2 * n - 1)  # sum of log(1 - r) over the strict ancestors
    for k in range(2 * n - 3, -1, -1):
        above[k] = above[par[k]] + l1[par[k]]
    node_w = log_r + above
    Q, K = v2.shape
    # the nodes on each queried row's path from its leaf to the root, padded with -inf weights
    urows, rinv = np.unique(rows, return_inverse=True)
    paths = []
    for i in urows:
        p, k = [], int(i)
        while k >= 0:
            p.append(k)
            k = int(par[k])
        paths.append(p)
    D = max(len(p) for p in paths)
    path = np.zeros((len(urows), D), np.int64)
    path_w = np.full((len(urows), D), -np.inf)
    for r, p in enumerate(paths):
        path[r, : len(p)] = p
        path_w[r, : len(p)] = node_w[p]
    # one predictive per distinct (column, value) pair, read from that column only; then
    # each cell mixes its pair's row over the nodes on its row's path
    vu, vinv = np.unique(v2.reshape(-1), return_inverse=True)
    key = np.repeat(cols, K) * len(vu) + vinv.reshape(-1)
    ukey, inv = np.unique(key, return_inverse=True)
    Xu = np.full((len(ukey), d), np.nan)  # each distinct (column, value) in its column's domain
    Xu[np.arange(len(ukey)), ukey // len(vu)] = vu[ukey % len(vu)]
    comp._check_domain(Xu, "values")
    # the nodes padded to the size grid (the padded columns of the table are never read)
    stats = _padded_nodes(np.zeros(2 * n - 1), result.node_stats)[1]
    table = _pair_table(comp, stats, ukey // len(vu), vu[ukey % len(vu)], d)
    qr = np.repeat(rinv.reshape(-1), K)
    terms = path_w[qr] + table[inv.reshape(-1)[:, None], path[qr]]  # [Q K, D]
    top = np.max(terms, axis=1, keepdims=True)  # finite: the path's weights sum to one
    out = (top[:, 0] + np.log(np.sum(np.exp(terms - top), axis=1))).reshape(Q, K)
    return out[:, 0] if vals.ndim == 1 else out
