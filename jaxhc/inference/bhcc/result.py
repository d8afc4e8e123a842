"""The result types of BHCC (`BHCCResult`, `BHCCView`) and their assembly from a column tree."""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import jax
import numpy as np

from ...components import Component, IndependentNormal
from ...tree import Tree
from ..bhc.greedy import BHCResult, assemble_result
from ..bhc.result import path_log_weights
from .columns import ColumnData, column_model
from .hostmath import host_gammaln as _sgammaln
from .views import views_full_batches


class BHCCView(NamedTuple):
    """One view of a BHCC cut: its ``columns`` (indices into ``X``), the column-tree
    ``node`` it is, its posterior ``log_r``, and ``rows``, the BHC result over the rows of
    ``X[:, columns]`` (its component restricted to those columns)."""

    columns: np.ndarray
    node: int
    log_r: float
    rows: BHCResult

    def cut(self, threshold: float = 0.5) -> np.ndarray:
        """Row cluster labels ``[I]`` of this view (BHC cut of its row tree)."""
        return self.rows.cut(threshold)


class BHCCSearch(NamedTuple):
    """What the column-partition search after the tree did (`BHCCResult.search`), so a user
    can see whether more search would help.

    Fields:
      method: ``"local"`` or ``"stochastic"`` (the ``search`` that ran), ``"none"`` when
        ``refine=False`` or the table has one column.
      criterion_trace: the criterion of `BHCCResult.views_log_joint` (nats) of the greedy
        tree's cut, of the local search's answer, then (stochastic) of the best partition
        after the tempered chain and after each restart, and last of the reported partition
        (equal to ``views_log_joint()``). Non-decreasing.
      restarts: restarts the stochastic search ran; restarts_budget: those it was allowed;
        stopped_early: whether it stopped before the budget because ``patience`` restarts in
        a row found nothing better (a sign that more restarts would not help either).
      gibbs_moves, splits_proposed, splits_accepted, merges_proposed, merges_accepted: the
        stochastic moves made (0 for the local search).
      evaluations: column sets (row BHCs) the stochastic search evaluated; work: their
        sizes summed (a row BHC's cost grows with its columns); budget: the most work it was
        allowed (``search_budget``; None: no limit); out_of_budget: whether it stopped
        because that was spent (then more search, a larger ``search_budget``, may help).
    """

    method: str
    criterion_trace: np.ndarray
    restarts: int = 0
    restarts_budget: int = 0
    stopped_early: bool = False
    gibbs_moves: int = 0
    splits_proposed: int = 0
    splits_accepted: int = 0
    merges_proposed: int = 0
    merges_accepted: int = 0
    evaluations: int = 0
    work: int = 0
    budget: Optional[int] = None
    out_of_budget: bool = False

    @property
    def gain(self) -> float:
        """How much the search raised the criterion over the greedy tree's cut (nats)."""
        t = np.asarray(self.criterion_trace)
        return float(t[-1] - t[0]) if t.size else 0.0

    @property
    def stochastic_gain(self) -> float:
        """How much the stochastic search raised the criterion over the local search's
        answer (nats; 0 for the local search)."""
        t = np.asarray(self.criterion_trace)
        return float(t[-1] - t[1]) if t.size > 1 else 0.0


def search_record(method: str, trace, stats, constant: float) -> BHCCSearch:
    """`BHCCSearch` from `refine_partition`'s ``trace`` (scores: start, local, final) and the
    stochastic search's `SearchStats` (or None), in `views_log_joint` units (``constant`` =
    ``log Gamma(alpha) - log Gamma(J + alpha)``)."""
    t = list(trace)
    if stats is not None and len(t) == 3:
        t = t[:2] + list(stats.trace) + t[2:]
    out = np.asarray(t, float) + constant
    if stats is None:
        return BHCCSearch(method, out)
    return BHCCSearch(
        method,
        out,
        int(stats.restarts),
        int(stats.restarts_budget),
        bool(stats.stopped_early),
        int(stats.gibbs_moves),
        int(stats.splits_proposed),
        int(stats.splits_accepted),
        int(stats.merges_proposed),
        int(stats.merges_accepted),
        int(stats.evaluations),
        int(stats.work),
        stats.budget,
        bool(stats.out_of_budget),
    )


class BHCCResult(NamedTuple):
    """The output of `bhcc` / `rbhcc` (``J`` columns; column-tree nodes ``0 .. 2J-2`` as in
    `jaxhc.tree.Tree`, leaves = columns).

    Fields:
      tree: binary tree over the columns; ``tree.values["log_r"]`` per merge.
      log_evidence: ``log p(X | T)`` at the root (Eq. 6).
      log_r: ``[J-1]`` log posterior of the one-view hypothesis of each inner node (Eq. 8).
      cdpm_lower_bound: ``log p(X|T) + log d_root + log Gamma(alpha) - log Gamma(J + alpha)``,
        a lower bound on the CDPM log marginal likelihood (Corollary 5.6).
      log_h1: ``[2J-1]`` ``log p(X[:, L(T_k)] | BHC)`` of each node's view (NaN for nodes
        below a truncated RBHCC level, which carry no hypothesis of their own).
      log_d, log_pT, log_1mr: ``[2J-1]`` per node (leaves: ``log_r = 0``, ``log_1mr = -inf``).
      views: the views of the cut at ``r < 0.5``, in order of their first column.
      component, alpha: the model; X: the data ``[I, J]`` (host array, NaN = missing).
      refine_gain: how much the refinement after the tree raised the criterion of the cut's
        column partition (`views_log_joint`), in nats; 0 when it changed nothing or was off.
      search: `BHCCSearch`: which search ran, its restarts and the criterion's trace.
    """

    tree: Tree
    log_evidence: float
    log_r: np.ndarray
    cdpm_lower_bound: float
    log_h1: np.ndarray
    log_d: np.ndarray
    log_pT: np.ndarray
    log_1mr: np.ndarray
    views: tuple
    component: Component
    alpha: float
    X: np.ndarray
    refine_gain: float = 0.0
    search: Optional[BHCCSearch] = None

    @property
    def n_columns(self) -> int:
        return self.tree.n_leaves

    def views_log_joint(self) -> float:
        """The criterion of the column partition ``u`` of `views`: ``log p(u) + sum_v log p(X_v
        | BHC)``, the CRP(alpha) prior of the partition (``K log alpha + sum_v log Gamma(|v|) +
        log Gamma(alpha) - log Gamma(J + alpha)``) plus every view's DPM lower bound from its
        row BHC (`BHCResult.dpm_lower_bound`): a lower bound on ``log p(u, X)`` under the CDPM,
        the quantity the refinement increases."""
        J, a = self.n_columns, self.alpha
        tot = float(_sgammaln(a) - _sgammaln(J + a))
        for v in self.views:
            tot += float(np.log(a) + _sgammaln(len(v.columns)) + float(v.rows.dpm_lower_bound))
        return tot

    def cut(self, threshold: float = 0.5) -> np.ndarray:
        """Column view labels ``[J]``: split every node with ``r_k < threshold``."""
        if not (0.0 <= float(threshold) <= 1.0):
            raise ValueError(f"threshold must be a probability in [0, 1], got {threshold}")
        return self.tree.cut(threshold, scores=np.exp(np.asarray(self.log_r)))

    def node_log_r(self) -> np.ndarray:
        """``log r_k [2J-1]`` of every node (0 at the leaves)."""
        return np.concatenate([np.zeros(self.n_columns), np.asarray(self.log_r)])

    def log_omega(self, size_weighted: bool = False) -> np.ndarray:
        """``log omega(T, k) [2J-1]`` (Definition A.4): ``r_k prod_{c above k} (1 - r_c)``.

        With ``size_weighted`` every step down from ``c`` to its child ``a`` also has the
        factor ``|L(T_a)| / |L(T_c)|`` (the CRP's probability that a new column joins that
        side), which makes the weights sum to one over all nodes; this is the normalised
        form of Eq. 11 used by `bhcc_predictive_column`."""
        return self.node_log_r() + path_log_weights(self.tree, np.asarray(self.log_1mr), size_weighted)

    def view_of(self, columns: Sequence[int]) -> BHCCView:
        """A `BHCCView` (row BHC) of any set of columns."""
        cols = np.asarray(columns, np.int64)
        (rows,) = _view_rows(column_model(self.component, self.X), [cols], self.alpha, self.component)
        node = node_of_leaves(self.tree.leaf_ranges(), cols)
        log_r = float(self.node_log_r()[node]) if node >= 0 else float("nan")
        return BHCCView(cols, node, log_r, rows)


def node_of_leaves(ranges, leaves) -> int:
    """The node whose leaf set is exactly ``leaves`` (ids outside ``0 .. n-1`` ignored), or
    ``-1``, from a tree's `Tree.leaf_ranges` ``(order, start, end)``: the positions of the
    leaves in the depth-first order must be one node's range. ``O(n)`` memory."""
    order, start, end = ranges
    n = order.shape[0]
    ids = np.asarray(leaves, np.int64).reshape(-1)
    ids = np.unique(ids[(ids >= 0) & (ids < n)])
    if ids.size == 0:
        return -1
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n)
    lo, hi = int(pos[ids].min()), int(pos[ids].max()) + 1
    if hi - lo != ids.size:
        return -1
    hit = np.flatnonzero((start == lo) & (end == hi))
    return int(hit[0]) if len(hit) else -1


def node_leaves(ranges, k: int) -> np.ndarray:
    """The leaves under node ``k``, sorted (``np.flatnonzero(tree.leaf_sets()[k])``), from
    the tree's `Tree.leaf_ranges` ``(order, start, end)``."""
    order, start, end = ranges
    return np.sort(order[start[k] : end[k]])


def _view_rows(cd: "ColumnData", col_lists, alpha, component: Component) -> list:
    """The row `BHCResult` of each view in ``col_lists``, run padded (programs shared with
    the predictive passes) and sliced on the host to the view's own columns and the real
    rows and merges (inner node ids ``n_slots + t`` renumbered ``I + t``). Its component is
    the user's ``component`` restricted to the view's columns (the Beta families run on
    `ColumnData`'s lookup-table form of the same marginals, with the same statistics), so
    the BHC functions (predictives, cuts) apply to it."""
    out = [None] * len(col_lists)
    I, n = cd.n_rows, cd.n_slots
    # host parameters: restricting the user's component slices NumPy arrays, not device ones
    # (an eager gather compiles per view width)
    host_comp = jax.tree_util.tree_map(np.asarray, component)
    for sub, _, outs in views_full_batches(cd, col_lists, alpha):
        outs = jax.tree_util.tree_map(np.asarray, outs)
        for r, i in enumerate(sub):
            cols = np.asarray(col_lists[i], np.int64)
            w, k = len(cols), I - 1
            leaf = cd.host_leaf(cols)
            if cd.beta:
                comp = host_comp.restrict_columns(cols)
            else:
                comp = IndependentNormal(*(np.asarray(x)[cols] for x in (cd.p1, cd.p2, cd.p3)))
            o = jax.tree_util.tree_map(lambda x: x[r], outs)
            children = o[0][:k]
            children = np.where(children >= n, children - n + I, children)
            out_stats = type(o[1])(*(x[:k, :w] if x.ndim == 2 else x[:k] for x in o[1]))
            rest = tuple(x[:k] for x in o[2:7])
            out[i] = _rows_result(comp, alpha, leaf, (children, out_stats) + rest + (o[7][:I],))
    return out


def _rows_result(comp, alpha, leaf, out) -> BHCResult:
    children, out_stats, log_h1, log_d, log_pT, log_r, log_1mr, leaf_log_h1 = out
    I = int(np.shape(leaf_log_h1)[0])
    return assemble_result(
        comp,
        float(alpha),
        I,
        leaf,
        np.asarray(leaf_log_h1),
        np.asarray(children).astype(np.int64),
        out_stats,
        np.asarray(log_h1),
        np.asarray(log_d),
        np.asarray(log_pT),
        np.asarray(log_r),
        np.asarray(log_1mr),
    )


def _views_of(X, component, alpha, tree, log_r_nodes) -> tuple:
    labels = tree.cut(0.5, scores=np.exp(log_r_nodes[tree.n_leaves :]))
    ranges = tree.leaf_ranges()
    groups = [np.flatnonzero(labels == g) for g in range(int(labels.max()) + 1)]
    rows = _view_rows(column_model(component, X), groups, alpha, component)
    views = []
    for cols, rr in zip(groups, rows):
        node = node_of_leaves(ranges, cols)  # a cut's clusters are nodes
        views.append(BHCCView(cols, node, float(log_r_nodes[node]), rr))
    return tuple(views)


def finish_result(
    children,
    J,
    node_h1,
    node_d,
    node_pT,
    node_1mr,
    node_log_r,
    X,
    component,
    alpha,
    *,
    heights=None,
    refine_gain=0.0,
    search: Optional[BHCCSearch] = None,
):
    log_r = node_log_r[J:]
    tree = Tree(
        np.asarray(children, np.int64).reshape(-1, 2),
        heights=np.arange(1, J, dtype=float) if heights is None else heights,
        values={"log_r": log_r},
    )
    log_ev = float(node_pT[-1])
    bound = log_ev + float(node_d[-1]) + float(_sgammaln(alpha) - _sgammaln(J + alpha))
    views = _views_of(X, component, alpha, tree, node_log_r)
    return BHCCResult(
        tree,
        log_ev,
        log_r,
        bound,
        node_h1,
        node_d,
        node_pT,
        node_1mr,
        views,
        component,
        float(alpha),
        X,
        float(refine_gain),
        search,
    )
