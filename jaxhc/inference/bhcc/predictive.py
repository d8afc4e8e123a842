"""Predictive distributions of BHCC (section 6): new rows (Eq. 10), new columns (Eq. 11-12)
and missing cells (Eq. 13, Lemma A.7)."""

from __future__ import annotations

from functools import partial
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln, logsumexp

from ..._internal.buckets import pad_rows
from ...components import CountStats, IndependentNormal, IndepNormalStats
from .columns import ColumnData, check_real_table, column_model, validate_inputs
from .result import BHCCResult, node_leaves
from .views import VIEW_CHUNK, grouped_views, pad_views, views_full, views_full_batches


def _real_nodes(n, I):
    """``[2n-1]`` mask of the real nodes of a row tree over ``n`` slots of which the first
    ``I`` are real rows: the leaves ``0..I-1`` and the inner nodes ``n .. n+I-2``."""
    idx = jnp.arange(2 * n - 1)
    return (idx < I) | ((idx >= n) & (idx < n + I - 1))


def _row_weights(children, log_r, log_1mr, n, I, size_weighted):
    """Per row-tree node ``log w_m [2n-1]`` (r_m times the (1 - r) of its ancestors; with
    ``size_weighted`` also the ``n_child / n_parent`` factors of `BHCResult.log_weights`;
    ``-inf`` at padding nodes) of a row tree over ``n`` slots (static) of which the first
    ``I`` (traced) are real: merges ``t >= I - 1`` are padding and change nothing. ``O(n)``
    memory: the node sizes are summed up the tree (no membership matrix)."""
    N = 2 * n - 1
    dt = log_r.dtype
    full_r = jnp.concatenate([jnp.zeros(n, dt), log_r])
    full_1 = jnp.concatenate([jnp.full(n, -jnp.inf, dt), log_1mr])
    size0 = jnp.concatenate([jnp.ones(n, jnp.int32), jnp.zeros(n - 1, jnp.int32)])

    def up(size, tc):
        t, (a, b) = tc
        k = n + t
        return size.at[k].set(jnp.where(t < I - 1, size[a] + size[b], size[k])), None

    size, _ = jax.lax.scan(up, size0, (jnp.arange(n - 1), children))
    size = size.astype(dt)

    def down(acc, tc):
        t, (a, b) = tc
        k = n + t
        base = acc[k] + full_1[k]
        ea = jnp.log(size[a] / size[k]) if size_weighted else 0.0
        eb = jnp.log(size[b] / size[k]) if size_weighted else 0.0
        real = t < I - 1
        acc = acc.at[a].set(jnp.where(real, base + ea, acc[a]))
        return acc.at[b].set(jnp.where(real, base + eb, acc[b])), None

    acc, _ = jax.lax.scan(down, jnp.zeros(N, dt), (jnp.arange(n - 1), children), reverse=True)
    return jnp.where(_real_nodes(n, I), full_r + acc, -jnp.inf)


def _node_stats(leaf, out_stats):
    return jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b], axis=0), leaf, out_stats)


@partial(jax.jit, static_argnames=("mode",))
def _views_predict(cd: ColumnData, cols, outs, log_alpha, q_view, q_a, q_b, mode: str):
    """Per query ``q`` (view ``q_view[q]`` of the batch ``cols [B, W]`` with row-BHC outputs
    ``outs`` from `views_full`): the BHC predictive ``log p(x | view)`` of padded rows
    ``q_a [Q, W]`` (``mode="row"``; ``q_b`` is unused). The row-tree weights of every view
    are computed once, then gathered per query. (Cells go through `_path_mix`.)
    """
    n, I = cd.n_slots, cd.I
    children, out_stats, log_h1, log_d, log_pT, log_r, log_1mr, leaf_h1 = outs
    lw = jax.vmap(lambda ch, lr, l1: _row_weights(ch, lr, l1, n, I, mode == "row"))(children, log_r, log_1mr)
    real = _real_nodes(n, I)

    def per_query(v, qa, qb):
        c = cols[v]
        comp, leaf = cd.view(c)
        ns = _node_stats(leaf, jax.tree_util.tree_map(lambda x: x[v], out_stats))
        sx = cd.stats_of(qa[None, :], c)
        lp = comp.log_marginal(comp.merge(ns, sx)) - comp.log_marginal(ns)
        return logsumexp(jnp.where(real, lw[v] + lp, -jnp.inf))

    return jax.vmap(per_query)(q_view, q_a, q_b)


@jax.jit
def views_column_predict(cd: ColumnData, cols, outs, log_alpha, Y, ycol, sign=1.0, base=1.0):
    """``log p(y | view's row tree)`` ``[B, Q]`` of new columns ``Y [Q, n_slots]`` (rows
    padded with NaN to ``cd.n_slots``; prior of column
    ``ycol [Q]``) for every view of ``cols [B, W]``: Eq. 12 summed over the row tree's
    consistent partitions, as the evidence ratio ``p(X_view, y | T_rows) / p(X_view | T_rows)``.
    The new column's statistics are aggregated up each row tree (``O(I Q)``) and the BHC
    recursion is redone with the per-node ``log p(H1)`` increased by the column's term.

    Generally the recursion runs on ``base * log p(X_view | H1) + sign * (column term)`` and
    returns its root minus ``base * log p(X_view | T_rows)``: ``sign=-1`` for a column of the
    view gives ``log p(X_{view - y} | T_rows) - log p(X_view | T_rows)``, ``base=0`` gives
    ``log p(y | T_rows)`` of the column alone (the refinement's screen, `_column_estimates`)."""
    n, I = cd.n_slots, cd.I  # row slots (static) and real rows (traced): Y's padding rows are NaN
    children, out_stats, log_h1, log_d, log_pT, log_r, log_1mr, leaf_h1 = outs
    ycomp = cd.comp(ycol)
    yleaf = ycomp.stats(Y.T[:, None, :])  # fields [n, Q]
    if cd.beta:  # per-column log binomial coefficients (CountStats sums them over columns)
        obs = ~jnp.isnan(Y.T)
        x = jnp.where(obs, Y.T, 0.0)
        tt = jnp.where(obs, cd.p3[ycol][None, :], 0.0)
        yleaf = yleaf._replace(logc=gammaln(tt + 1) - gammaln(x + 1) - gammaln(tt - x + 1))

    def one(ch, lh1_inner, ld_inner, lpT_inner, lh1_leaf):
        # merges t >= I - 1 are padding (children (0, 0)): they write only the padding nodes
        # n + t >= n + I - 1, which no real node reads
        pad = jax.tree_util.tree_map(lambda x: jnp.zeros((n - 1,) + x.shape[1:], x.dtype), yleaf)

        def agg(st, tc):
            t, (a, b) = tc
            m_ = jax.tree_util.tree_map(lambda x: x[a] + x[b], st)
            return jax.tree_util.tree_map(lambda x, u: x.at[n + t].set(u), st, m_), None

        yst, _ = jax.lax.scan(agg, _node_stats(yleaf, pad), (jnp.arange(n - 1), ch))
        col_terms = ycomp.column_log_marginal(yst)  # [2n-1, Q]
        h = base * jnp.concatenate([lh1_leaf, lh1_inner])[:, None] + sign * col_terms
        single = h[0] - base * lh1_leaf[0]  # one real row: the root is leaf 0
        if n == 1:
            return single
        ld = jnp.concatenate([jnp.full((n,), log_alpha), ld_inner])
        size = jnp.concatenate([jnp.ones(n), jnp.zeros(n - 1)])

        def up(c, tc):
            size, lp = c
            t, (a, b) = tc
            k = n + t
            nk = size[a] + size[b]
            lag = log_alpha + gammaln(nk)
            ldd = ld[a] + ld[b]
            val = jnp.logaddexp(lag - ld[k] + h[k], ldd - ld[k] + lp[a] + lp[b])
            return (size.at[k].set(nk), lp.at[k].set(val)), None

        lp0 = jnp.where((jnp.arange(2 * n - 1) < n)[:, None], h, 0.0)
        (_, lp), _ = jax.lax.scan(up, (size, lp0), (jnp.arange(n - 1), ch))
        r = jnp.maximum(I - 2, 0)  # the root is merge I - 2
        return jnp.where(I > 1, lp[n + r] - base * lpT_inner[r], single)

    return jax.vmap(one)(children, log_h1, log_d, log_pT, leaf_h1)


QUERY_CHUNK = {"row": 256, "column": 512}


def node_queries(cd: ColumnData, col_lists, alpha, mode, per_node_queries):
    """Runs `_views_predict` for the views ``col_lists`` (column ids of ``cd``);
    ``per_node_queries[n] = (q_a, q_b)`` arrays for view ``n``. Returns a list of result
    arrays, one per view. Views run in chunks of `VIEW_CHUNK`, queries in fixed-size
    chunks (padded), so one program compiles per view width and mode."""
    J = cd.n_cols
    log_alpha = jnp.log(jnp.asarray(alpha, jnp.result_type(float)))
    results = [None] * len(col_lists)
    B, Qc = VIEW_CHUNK, QUERY_CHUNK[mode]
    chunks = [(idx[s0 : s0 + B], W) for idx, W in grouped_views(col_lists) for s0 in range(0, len(idx), B)]
    for idx, W in chunks:
        cols = jnp.asarray(pad_views([col_lists[i] for i in idx], W, J, B))
        outs = views_full(cd, cols, log_alpha)
        if mode == "column":  # every view gets the same new columns
            Y, ycol = per_node_queries[idx[0]]
            if len(Y) == 0:
                for i in idx:
                    results[i] = np.zeros(0)
                continue
            Qc = QUERY_CHUNK["column"]
            Qp = -(-len(Y) // Qc) * Qc
            Y = pad_rows(np.asarray(Y, float), cd.n_slots, np.nan, axis=1)  # padding rows: missing
            Yp = np.concatenate([Y, np.repeat(Y[:1], Qp - len(Y), axis=0)])
            yc = np.concatenate([ycol, np.repeat(ycol[:1], Qp - len(Y))]).astype(np.int32)
            res = np.concatenate(
                [
                    np.asarray(
                        views_column_predict(
                            cd, cols, outs, log_alpha, jnp.asarray(Yp[s0 : s0 + Qc]), jnp.asarray(yc[s0 : s0 + Qc])
                        )
                    )
                    for s0 in range(0, Qp, Qc)
                ],
                axis=1,
            )
            for r, i in enumerate(idx):
                results[i] = res[r, : len(Y)]
            continue
        qv, qa, qb = [], [], []
        for r, i in enumerate(idx):
            a, b = per_node_queries[i]
            if mode == "row":
                a = _pad_rows_to(a, W)
            qv.append(np.full(len(a), r, np.int32))
            qa.append(a)
            qb.append(b)
        sizes = [len(x) for x in qv]
        Q = sum(sizes)
        if Q == 0:
            for i in idx:
                results[i] = np.zeros((0,) + np.shape(per_node_queries[i][1])[1:])
            continue
        qv, qa, qb = (np.concatenate(x) for x in (qv, qa, qb))
        Qp = -(-Q // Qc) * Qc
        padn = Qp - Q
        qv = np.concatenate([qv, np.zeros(padn, np.int32)])
        qa = np.concatenate([qa, np.repeat(qa[:1], padn, axis=0)])
        qb = np.concatenate([qb, np.repeat(qb[:1], padn, axis=0)])
        out = np.concatenate(
            [
                np.asarray(
                    _views_predict(
                        cd,
                        cols,
                        outs,
                        log_alpha,
                        jnp.asarray(qv[s0 : s0 + Qc]),
                        jnp.asarray(qa[s0 : s0 + Qc]),
                        jnp.asarray(qb[s0 : s0 + Qc]),
                        mode,
                    )
                )
                for s0 in range(0, Qp, Qc)
            ]
        )
        off = 0
        for r, i in enumerate(idx):
            results[i] = out[off : off + sizes[r]]
            off += sizes[r]
    return results


def _result_queries(res: "BHCCResult", nodes, mode, per_node_queries):
    cd = column_model(res.component, res.X)
    ranges = res.tree.leaf_ranges()
    return node_queries(cd, [list(node_leaves(ranges, k)) for k in nodes], res.alpha, mode, per_node_queries)


def _pad_rows_to(a, W):
    return np.concatenate([a, np.full((a.shape[0], W - a.shape[1]), np.nan)], axis=1)


def _check_result(result):
    if not isinstance(result, BHCCResult):
        raise TypeError(f"result must be a BHCCResult from jaxhc.bhcc or jaxhc.rbhcc, got {type(result).__name__}")


def _live_nodes(result: BHCCResult, log_w: np.ndarray) -> np.ndarray:
    return np.flatnonzero(np.isfinite(log_w) & ~np.isnan(result.log_h1))


def bhcc_predictive_row(result: BHCCResult, X_new) -> np.ndarray:
    """``log p(x | X, T)`` of new rows ``X_new [m, J]`` (Eq. 10; NaN entries are skipped).

    ``p(x | T_c) = r_c p(x | X_c, DPM) + (1 - r_c) p(x_a | T_a) p(x_b | T_b)`` with each
    view's DPM predictive the BHC predictive of its row tree (`jaxhc.bhc_predictive`).
    The row trees run padded as in `jaxhc.bhcc` (padding nodes weigh zero), queries in
    chunks of fixed size. Returns ``[m]``."""
    _check_result(result)
    Xn = check_real_table(X_new, "X_new")
    if Xn.ndim != 2 or Xn.shape[1] != result.n_columns:
        raise ValueError(f"X_new must have shape [m, {result.n_columns}], got {Xn.shape}")
    validate_inputs(np.concatenate([result.X[:1] * np.nan, Xn]), result.component, "X_new")
    J = result.n_columns
    lr = result.node_log_r()
    nodes = _live_nodes(result, lr)
    ranges = result.tree.leaf_ranges()
    qs = [(Xn[:, node_leaves(ranges, k)], np.zeros(len(Xn), np.int32)) for k in nodes]
    outs = _result_queries(result, nodes, "row", qs)
    dpm = {int(k): o for k, o in zip(nodes, outs)}
    ch = np.asarray(result.tree.children)
    val = {}
    zero = np.zeros(len(Xn))
    for k in range(2 * J - 1):
        if k < J:  # a leaf inside a group without hypotheses below it has zero weight
            val[k] = dpm.get(k, zero)
            continue
        a, b = ch[k - J]
        l1 = result.log_1mr[k]
        split = l1 + val[a] + val[b] if np.isfinite(l1) else np.full(len(Xn), -np.inf)
        val[k] = np.logaddexp(lr[k] + dpm[k], split) if k in dpm else split
    return val[2 * J - 2]


def bhcc_predictive_column(result: BHCCResult, Y, column: Optional[int] = None) -> np.ndarray:
    """``log p(y | X, T)`` of new columns ``Y [m, I]`` (Eq. 11-12, Lemma A.6).

    ``sum_k omega'(k) p(y | X[:, L(T_k)], DPM)`` over all column-tree nodes, where
    ``p(y | view)`` sums ``p(y | z)`` over the row partitions ``z`` of the view's BHC row
    tree, weighted by their posterior (the evidence ratio ``p(X_view, y | T_rows) /
    p(X_view | T_rows)``, Eq. 12 restricted to tree-consistent partitions), and
    ``omega'`` is `BHCCResult.log_omega` with ``size_weighted=True``: Eq. 11 adds the two
    subtrees' predictives, whose weights then sum to more than one; weighting each side by
    its share of the columns (the CRP's rule for a new column) makes the predictive proper.

    Args:
      Y: ``[m, I]`` new columns (NaN = missing).
      column: index of an existing column whose prior parameters the new column uses
        (default: the component's parameters of column 0; with scalar parameters all agree).
    Returns ``[m]``.

    The new columns are padded with missing entries to the row trees' padded rows (as in
    `jaxhc.bhcc`), so they add nothing there.
    """
    _check_result(result)
    Yn = check_real_table(Y, "Y")
    I = result.X.shape[0]
    if Yn.ndim != 2 or Yn.shape[1] != I:
        raise ValueError(f"Y must have shape [m, {I}] (one new column per row of Y), got {Yn.shape}")
    if column is not None and (isinstance(column, bool) or not isinstance(column, (int, np.integer))):
        raise TypeError(f"column must be None or an integer column index, got {column!r}")
    c = 0 if column is None else int(column)
    if not 0 <= c < result.n_columns:
        raise ValueError(f"column must be in [0, {result.n_columns}), got {column}")
    validate_inputs(
        np.concatenate([result.X[:, [c]], Yn.T], axis=1), _restrict(result.component, [c] * (len(Yn) + 1)), "Y"
    )
    lw = result.log_omega(size_weighted=True)
    nodes = _live_nodes(result, lw)
    qs = [(Yn, np.full(len(Yn), c, np.int32)) for _ in nodes]
    outs = _result_queries(result, nodes, "column", qs)
    terms = np.stack([lw[k] + o for k, o in zip(nodes, outs)])
    return _host_logsumexp(terms)


def _host_logsumexp(x):
    """``logsumexp`` over axis 0 on the host (eagerly, jnp's would compile per shape)."""
    top = np.max(x, axis=0)
    safe = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.where(np.isfinite(top), safe + np.log(np.sum(np.exp(x - safe), axis=0)), top)


def _restrict(component, cols):
    par = component.column_parameters()
    if par is not None and par.kind == "normal":
        # for NormalKnownCov (diagonal covariances, BHCC checks this) the columns' own variances,
        # so repeated columns (one per new column checked) do not make a singular covariance
        cols = np.asarray(cols)
        g = lambda x: x if np.ndim(x) == 0 else np.asarray(x)[cols]
        return IndependentNormal(g(par.p1), g(par.p2), g(par.p3))
    # host parameters: an eager gather of per-column [J] parameters compiles per J
    return jax.tree_util.tree_map(np.asarray, component).restrict_columns(cols)


def _index_array(x, name: str) -> np.ndarray:
    """``x`` as a flat int64 array after checking it holds integers (no silent truncation)."""
    arr = np.asarray(x)
    if arr.size and (arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer)):
        raise TypeError(f"{name} must hold integer cell indices, got dtype {arr.dtype}")
    return arr.astype(np.int64).reshape(-1)


def bhcc_predictive_cell(result: BHCCResult, rows, cols, values) -> np.ndarray:
    """``log p(X_ij = v | X, T)`` of cells ``(rows[q], cols[q])`` (Eq. 13, Lemma A.7).

    ``sum_{k in Path(T, j)} omega(T, k) p(X_ij | X[:, L(T_k)], DPM)`` with the view's DPM
    predictive of the cell itself a sum over the row-tree nodes on the path from the root
    to row ``i``, ``r_m prod_{above} (1 - r) p(v | data of node m in column j)`` (the same
    construction one level down). Both path weights sum to one, so the result is a proper
    distribution over ``v``. The cells are usually missing (NaN) in ``result.X``; an
    observed cell is predicted given itself.

    Args:
      rows, cols: int ``[Q]`` cell coordinates.
      values: ``[Q]`` or ``[Q, K]`` candidate values of each cell.
    Returns ``log p`` with the shape of ``values``.

    The row trees run padded as in `jaxhc.bhcc`; the paths are padded (``-inf`` weights) to a
    power of two of at least `CELL_MIN_DEPTH` nodes, and queries to chunks of fixed size.
    """
    _check_result(result)
    rows = _index_array(rows, "rows")
    cols = _index_array(cols, "cols")
    vals = check_real_table(values, "values")
    squeeze = vals.ndim == 1
    vals2 = vals[:, None] if squeeze else vals
    I, J = result.X.shape
    if rows.shape != cols.shape or vals2.ndim != 2 or vals2.shape[0] != rows.shape[0]:
        raise ValueError(
            f"rows, cols must be [Q] and values [Q] or [Q, K]; got {rows.shape}, {cols.shape}, {vals.shape}"
        )
    if np.any((rows < 0) | (rows >= I)) or np.any((cols < 0) | (cols >= J)):
        raise ValueError(f"cell coordinates out of range for X of shape {(I, J)}")
    if not np.all(np.isfinite(vals2)):
        raise ValueError("values must be finite (the candidate values of each cell)")
    Q, K = vals2.shape
    if Q * K:  # each distinct (column, candidate) in its column's domain (e.g. 0 / 1 for BetaBernoulli)
        pairs = np.unique(np.stack([np.repeat(cols, K).astype(float), vals2.reshape(-1)], axis=1), axis=0)
        Xq = np.full((len(pairs), J), np.nan)
        Xq[np.arange(len(pairs)), pairs[:, 0].astype(np.int64)] = pairs[:, 1]
        validate_inputs(Xq, result.component, "values")
    lw = result.log_omega()
    nodes = _live_nodes(result, lw)
    ranges = result.tree.leaf_ranges()
    if len(nodes) == 0 or Q * K == 0:
        acc = np.full(vals2.shape, -np.inf)
        return acc[:, 0] if squeeze else acc
    # Only column-tree nodes whose weight is within CELL_PRUNE_NATS of the heaviest on a
    # query's column path are computed first (each needs a row BHC of its view). The rest of
    # a path weighs omega_rest <= sum of its omegas and predicts each value with probability
    # <= 1 (discrete families), so a cell whose value has log p above
    # log(omega_rest) + CELL_CERTIFY_NATS is exact to exp(-CELL_CERTIFY_NATS) relative;
    # the others get the remaining nodes of their path in a second pass.
    on_path = _on_path(ranges, nodes, cols)  # [N, Q]
    lwn = lw[nodes]
    heaviest = np.max(np.where(on_path, lwn[:, None], -np.inf), axis=0)  # [Q]
    near = on_path & (lwn[:, None] >= heaviest[None, :] - CELL_PRUNE_NATS)
    discrete = result.component.column_parameters() is not None and result.component.column_parameters().kind == "beta"
    first = np.any(near, axis=1) if discrete else np.ones(len(nodes), bool)
    acc = _cell_pass(result, nodes[first], rows, cols, vals2, ranges, lw, np.ones(Q, bool))
    rest = on_path & ~first[:, None]
    if np.any(rest):
        rest_mass = np.logaddexp.reduce(np.where(rest, lwn[:, None], -np.inf), axis=0)  # [Q]
        redo = np.any(acc < rest_mass[:, None] + CELL_CERTIFY_NATS, axis=1) & np.isfinite(rest_mass)
        if np.any(redo):
            more = np.any(rest[:, redo], axis=1)
            extra = _cell_pass(result, nodes[more], rows, cols, vals2, ranges, lw, redo)
            acc = np.where(redo[:, None], np.logaddexp(acc, extra), acc)
    return acc[:, 0] if squeeze else acc


# bhcc_predictive_cell: nodes this many nats below the heaviest on a query's path are left
# out unless the certificate (values CELL_CERTIFY_NATS above their mass) fails
CELL_PRUNE_NATS = 150.0
CELL_CERTIFY_NATS = 35.0


def _on_path(ranges, nodes, cols) -> np.ndarray:
    """``[len(nodes), len(cols)]``: whether column ``cols[q]`` is under column-tree node
    ``nodes[i]`` (``tree.leaf_sets()[nodes][:, cols]``) from the tree's `Tree.leaf_ranges`."""
    order, start, end = ranges
    pos = np.empty(order.shape[0], np.int64)
    pos[order] = np.arange(order.shape[0])
    p = pos[np.asarray(cols, np.int64)][None, :]
    nodes = np.asarray(nodes, np.int64)
    return (start[nodes][:, None] <= p) & (p < end[nodes][:, None])


def _cell_pass(result, nodes, rows, cols, vals2, ranges, lw, active):
    """``log sum_{k in nodes on the path of cols[q]} omega_k p(X_{rows[q], cols[q]} = v | view k)``
    for the queries with ``active[q]`` (``-inf`` elsewhere).

    Each (view, cell) pair is one query: the row tree of view ``k`` (`_row_trees`), the
    nodes on the path from row ``i``'s leaf to the root with their weights ``r_m prod_{above}
    (1 - r)``, and the statistics of column ``j`` at those nodes, gathered on the host; one
    compiled program then evaluates every query's predictive at its path's nodes only
    (`_path_mix`)."""
    acc = np.full(vals2.shape, -np.inf)
    col_lists, sels = [], []
    under = _on_path(ranges, nodes, cols)
    for i, k in enumerate(nodes):
        sel = np.flatnonzero(under[i] & active)
        if len(sel):
            col_lists.append(node_leaves(ranges, k))
            sels.append((int(k), sel))
    if not sels:
        return acc
    cd = column_model(result.component, result.X)
    trees = _row_trees(cd, col_lists, result.alpha)
    q_node, q_col, q_w, q_stats = [], [], [], []
    for (k, sel), members, (paths, path_w, stats) in zip(sels, col_lists, trees):
        pos = np.searchsorted(members, cols[sel])
        p = paths[rows[sel]]  # [n, D] node ids (-1 past the root)
        q_w.append(path_w[rows[sel]])
        q_stats.append([f[np.maximum(p, 0), pos[:, None]] for f in stats])
        q_node.append(np.full(len(sel), k))
        q_col.append(cols[sel])
    # path lengths padded to a power of two of at least `CELL_MIN_DEPTH` (one program per
    # depth class, not per table size; rows of at most that many slots share one)
    D = max(max(w.shape[1] for w in q_w), CELL_MIN_DEPTH)
    D = 1 << int(np.ceil(np.log2(D)))
    padD = lambda a, fill: np.concatenate([a, np.full((a.shape[0], D - a.shape[1]), fill, a.dtype)], axis=1)
    w = np.concatenate([padD(x, -np.inf) for x in q_w])
    st = [np.concatenate([padD(x[f], 0.0) for x in q_stats]) for f in range(len(q_stats[0]))]
    qi = np.concatenate([s for _, s in sels])
    qc = np.concatenate(q_col).astype(np.int32)
    out = _mix_chunks(cd, qc, vals2[qi], st, w)
    node = np.concatenate(q_node)
    terms = lw[node][:, None] + out  # [n_queries, K]
    # log-sum the terms of each query cell (several views per cell)
    order = np.argsort(qi, kind="stable")
    qs, terms = qi[order], terms[order]
    starts = np.flatnonzero(np.r_[True, qs[1:] != qs[:-1]])
    top = np.maximum.reduceat(terms, starts, axis=0)
    safe = np.where(np.isfinite(top), top, 0.0)
    ssum = np.add.reduceat(np.exp(terms - np.repeat(safe, np.diff(np.r_[starts, len(qs)]), axis=0)), starts, axis=0)
    with np.errstate(divide="ignore"):
        acc[qs[starts]] = np.where(np.isfinite(top), safe + np.log(ssum), top)
    return acc


# cell queries per call of `_path_mix` (padded, so one program per path length D)
CELL_QUERY_CHUNK = 1024
# the least padded path length D of `_path_mix` (a row path has at most I nodes)
CELL_MIN_DEPTH = 16


def _mix_chunks(cd, qc, vals, stats, w):
    Q = len(qc)
    Qp = -(-Q // CELL_QUERY_CHUNK) * CELL_QUERY_CHUNK
    pad = lambda a: np.concatenate([a, np.repeat(a[:1], Qp - Q, axis=0)])
    qc, vals, w = pad(qc), pad(vals), pad(w)
    stats = [pad(f) for f in stats]
    outs = []
    for s0 in range(0, Qp, CELL_QUERY_CHUNK):
        sl = slice(s0, s0 + CELL_QUERY_CHUNK)
        outs.append(
            _path_mix(
                cd,
                jnp.asarray(qc[sl]),
                jnp.asarray(vals[sl]),
                tuple(jnp.asarray(f[sl]) for f in stats),
                jnp.asarray(w[sl]),
            )
        )
    return np.concatenate([np.asarray(o) for o in outs])[:Q]


@jax.jit
def _path_mix(cd: ColumnData, qc, vals, stats, w):
    """``log sum_d exp(w[q, d]) p(X_{., qc[q]} = vals[q, k] | stats[q, d])`` ``[Q, K]``: the
    cell predictive of each query mixed over the nodes of its row path (``w = -inf`` pads)."""
    ns = (CountStats if cd.beta else IndepNormalStats)(*(f[..., None, None] for f in stats))
    lp = cd.cell_log_predictive(qc[:, None, None], vals[:, None, :], ns, 0)  # [Q, D, K]
    return logsumexp(jnp.where(jnp.isfinite(w)[..., None], w[..., None] + lp, -jnp.inf), axis=1)


def _row_trees(cd: ColumnData, col_lists, alpha) -> list:
    """Per view (column ids of ``cd``): ``(paths [I, D], path_w [I, D], stats)``: the node ids
    on the path from each row's leaf up to the root of the view's row BHC tree (``-1`` past
    the root), their log weights ``r_m prod_{above m} (1 - r)`` (``-inf`` past the root), and
    each statistics field of the view's columns at every tree node ``[2I-1, W]`` (fields
    without a column axis: zeros)."""
    I, n = cd.n_rows, cd.n_slots
    out = [None] * len(col_lists)
    for sub, cols, outs in views_full_batches(cd, col_lists, alpha):
        children, out_stats, _, _, _, log_r, log_1mr, _ = outs
        # the real rows and merges only (the outputs have a row per padded slot); inner node
        # ids n + t -> I + t
        k = I - 1
        children = np.asarray(children)[:, :k]
        children = np.where(children >= n, children - n + I, children)
        log_r, log_1mr = np.asarray(log_r)[:, :k], np.asarray(log_1mr)[:, :k]
        full = []
        for lf, inner in zip(cd.s, out_stats):  # leaf fields [n, Jp]
            inner = np.asarray(inner)[:, :k]
            if inner.ndim == 3:  # [B, I-1, W]
                full.append(np.concatenate([np.moveaxis(np.asarray(lf)[:I][:, cols], 1, 0), inner], axis=1))
            else:
                full.append(np.zeros((len(cols), 2 * I - 1, cols.shape[1])))
        Bn = len(sub)
        par = np.full((Bn, 2 * I - 1), -1)
        for r in range(Bn):
            par[r, children[r].reshape(-1)] = np.repeat(np.arange(I, 2 * I - 1), 2)
        lr_full = np.concatenate([np.zeros((Bn, I)), log_r[:Bn]], axis=1)
        l1_full = np.concatenate([np.full((Bn, I), -np.inf), log_1mr[:Bn]], axis=1)
        above = np.zeros((Bn, 2 * I - 1))
        rb = np.arange(Bn)
        for k in range(2 * I - 3, -1, -1):  # parents have larger ids than their children
            pk = par[:, k]
            above[:, k] = above[rb, pk] + l1_full[rb, pk]
        node_w = lr_full + above
        depth = [np.arange(I)[None, :].repeat(Bn, 0)]
        while np.any(depth[-1] >= 0):
            cur = depth[-1]
            depth.append(np.where(cur >= 0, par[rb[:, None], np.maximum(cur, 0)], -1))
        paths = np.stack(depth[:-1], axis=-1)  # [Bn, I, D]
        pw = np.where(paths >= 0, node_w[rb[:, None, None], np.maximum(paths, 0)], -np.inf)
        for r, i in enumerate(sub):
            w = len(col_lists[i])
            out[i] = (paths[r], pw[r], [f[r][:, :w] for f in full])
    return out
