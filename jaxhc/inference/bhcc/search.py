"""The column-tree searches: `bhcc` (Algorithm 1, then the refinement) and `rbhcc` (Algorithm 2,
randomized)."""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from ..._internal.validation import check_alpha, check_component
from ...components import Component
from .columns import ColumnData, column_model, validate_inputs
from .hostmath import host_gammaln as _sgammaln
from .merges import bhcc_core, merge_log, pair_affinity
from .moves import DEFAULT_PATIENCE, budget_rule, check_search, explorer, search_rng
from .predictive import node_queries
from .refine import SetEvidence, check_refine, greedy_split, refine_partition, tree_splits
from .result import BHCCResult, BHCCSearch, finish_result, search_record
from .views import dpm_bound, pad_views, row_bhc, view_width


def bhcc(
    X,
    component: Component,
    alpha: float = 1.0,
    *,
    refine: bool = True,
    refine_passes: int = 10,
    search: str = "stochastic",
    seed=0,
    search_rounds: int = 3,
    restarts: Optional[int] = None,
    patience: Optional[int] = DEFAULT_PATIENCE,
    search_budget="auto",
    progress_bar: Optional[bool] = None,
) -> BHCCResult:
    """Bayesian hierarchical cross-clustering of the columns of ``X`` (Algorithm 1), with the
    tree's column partition refined by a local search.

    The greedy merges can leave the model's optimum: a column merged early into the wrong
    view stays there. With ``refine`` (the default) the cut of the greedy tree at ``r < 0.5``
    is improved under the CDPM lower bound of one column partition ``u``, ``log CRP(u; alpha)
    + sum_v log p(X_v | BHC)`` (`BHCCResult.views_log_joint`; ``p(X_v | BHC)`` is the DPM
    lower bound of the view's row BHC, the greedy's ``p(X_v | H1)``, cached per column set;
    the greedy's ``p(X | T) d_root`` sums these terms over the tree-consistent partitions,
    Theorem 5.5). Each pass, in a fixed order: every column (in index order)
    moves to the other view, or a new view of its own, that raises the criterion most;
    the pair of views whose merge raises it most is merged, repeatedly; every view is split
    in two where that raises it, the split being the top split of Algorithm 1's tree over
    the view's own columns (for the cut's views, their subtrees). Only strict improvements
    are accepted, so the criterion never decreases; the search stops after a pass without
    change or after ``refine_passes`` passes.

    If the partition changed, the column tree is rebuilt so that its cut is the refined
    partition: every refined view is one hypothesis with ``r = 1`` (as a group truncated by
    `rbhcc`'s ``levels``: the binary tree below it is a comb of its columns whose nodes carry
    no hypothesis, ``log_h1`` NaN, zero predictive weight), and Algorithm 1 merges the views
    greedily above (Eq. 6-8 with ``d_v = alpha Gamma(|v|)``, ``p(X_v | T_v) = p(X_v | BHC)``).
    A merge of two views then has ``r >= 0.5`` exactly when merging them raises the
    criterion, which the search has ruled out; a higher node with ``r >= 0.5`` would mean its
    one view beats every tree-consistent split below it, so its cut is taken as the partition
    and the search goes on. All fields are then those of the rebuilt tree (``log_evidence``,
    ``cdpm_lower_bound`` and the predictives sum over its tree-consistent partitions); the
    within-view column hierarchy of the greedy tree is not kept. ``refine_gain`` holds the
    criterion's increase. If nothing improves, the result is the greedy tree's unchanged.

    The local search stops at a local optimum: a partition that no single-column move, merge
    or split improves, yet that a few moves through worse partitions would improve (a true
    view spread over three found views, say). The stochastic search (``search="stochastic"``,
    the default) then goes on from the local search's answer with moves that target
    ``exp(criterion / T)``: exact Gibbs reassignment of each column (to any view or a new one,
    from its exact conditional) and sequentially-allocated split-merge proposals of views
    (Dahl 2003) accepted by Metropolis-Hastings, ``search_rounds`` rounds (a Gibbs sweep and 8
    split-merge steps each) at ``T = 2`` then at ``T = 1``; the best partition by the
    criterion seen after any move is kept and polished by the local search. A split-merge
    proposal allocates the columns by their pair affinities (`merges.pair_affinity`: the
    evidence two columns gain by sharing a view, from the first table of Algorithm 1 above),
    so it evaluates only the views it makes; its acceptance ratio is exact. Then restarts
    from a perturbation of the best (a view split by a split proposal, a fifth of the columns
    moved at random, or two views merged, in turn): ``2`` rounds at ``T = 1`` whose Gibbs
    sweeps visit the columns the perturbation touched, and the local search, the best kept;
    at most ``restarts`` of them (default one per 8 columns, 2 to 12), and no more once
    ``patience`` restarts in a row found nothing better. Its cost is bounded by
    ``search_budget``, in columns of the sets it evaluates (each set a row BHC, whose cost
    grows with its columns; sizes summed): by default (``"auto"``) as much as the column tree
    and the local search evaluated before it, so it about doubles a call's cost at most; it
    stops between two moves when that is spent.
    The answer is never worse than ``search="local"``'s (the search starts from it and keeps
    the best), and the tree is rebuilt over it as above. All draws come from ``seed``: the
    same seed gives the same result (the budget counts sets, not seconds). `BHCCResult.search`
    says which search ran, its restarts, whether the budget or the patience stopped it, and
    the criterion's trace. ``search="local"`` is the deterministic local search alone.

    Padding: the rows of ``X`` are padded to ``bucket(I)`` and its columns to ``bucket(J +
    1)`` (the library's size grid) with missing entries that the row searches never merge, so
    one set of compiled programs serves every table of a bucket; the result is the unpadded
    one.

    Args:
      X: data ``[I, J]`` (rows = data points, columns = dimensions); NaN marks missing
        entries.
      component: a column-separable conjugate family: `BetaBernoulli`, `BetaBinomial`
        (scalar or per-column ``[J]`` parameters), `NormalKnownCov` with diagonal
        covariances, or `IndependentNormal`.
      alpha: concentration of both CRPs (columns into views, rows into clusters), > 0.
      refine: run the local search after the greedy tree (False: Algorithm 1 alone).
      refine_passes: most passes of the local search (>= 1). A pass evaluates ``O(J V)``
        column sets of ``V`` views (each a row BHC), fewer than the greedy tree's ``O(J^2)``.
      search: ``"stochastic"`` (the default: the local search above, then the Gibbs /
        split-merge search with restarts) or ``"local"`` (the local search alone). With
        ``refine`` only.
      seed: the stochastic search's seed, a non-negative integer or a `jax.random` key.
      search_rounds: rounds of the stochastic search's chain per temperature (>= 0).
      restarts: most restarts of the stochastic search from perturbed partitions (>= 0;
        None: one per 8 columns, 2 to 12).
      patience: stop the restarts after this many in a row found nothing better (None: run
        them all).
      search_budget: most work of the stochastic search, in columns of the sets it
        evaluates, summed: ``"auto"`` (as much as the tree and the local search before it),
        None (no limit) or an integer.
      progress_bar: tqdm bar over column merges (default: ``J >= 100``).

    Returns:
      `BHCCResult`: the column ``tree`` with ``log_r`` per merge (Eq. 8), ``log_evidence``
      (Eq. 6), ``cdpm_lower_bound`` (Corollary 5.6), ``views`` at ``r < 0.5`` with their row
      trees, ``cut(threshold)``, ``refine_gain``, ``search`` (`BHCCSearch`).
    """
    check_component(component)
    alpha = check_alpha(alpha)
    check_refine(refine, refine_passes)
    check_search(search, search_rounds, restarts, patience, search_budget)
    rng = search_rng(seed)
    Xh = validate_inputs(X, component)
    cd = column_model(component, Xh)
    J = Xh.shape[1]
    if progress_bar is None:
        progress_bar = J >= 100
    bar = None
    if progress_bar and J > 1:
        from tqdm.auto import tqdm

        bar = tqdm(total=J - 1, desc="BHCC column merges", leave=False)
    try:
        pairs = np.full((J, J), np.nan) if (search == "stochastic" and refine) else None
        meter = [0]
        children, h1, d, pT, l1, lr = bhcc_core(cd, alpha, range(J), None if bar is None else bar.update, pairs, meter)
    finally:
        if bar is not None:
            bar.close()
    gain = 0.0
    record = _no_search()
    if refine and J > 1:
        ev = SetEvidence(cd, alpha)
        explore = explorer(
            search,
            rng,
            search_rounds,
            restarts,
            None if pairs is None else pair_affinity(pairs, h1),
            patience,
            budget_rule(search_budget, meter),
        )
        trace: list = []
        out = refine_partition(
            ev,
            cd,
            Xh,
            alpha,
            children,
            h1,
            lr,
            refine_passes,
            greedy_split(ev, float(np.log(alpha)), tree_splits(children, J, h1)),
            explore=explore,
            trace=trace,
        )
        if out is not None:
            children, h1, d, pT, l1, lr, gain = out
        record = _record(search, trace, explore, alpha, J)
    return finish_result(children, J, h1, d, pT, l1, lr, Xh, component, alpha, refine_gain=gain, search=record)


def _no_search() -> BHCCSearch:
    return BHCCSearch("none", np.zeros(0))


def _record(search: str, trace: list, explore, alpha: float, J: int) -> BHCCSearch:
    return search_record(
        search,
        trace,
        None if explore is None else explore.stats,
        float(_sgammaln(alpha) - _sgammaln(J + alpha)),
    )


@jax.jit
def _direct_evidence(cd: ColumnData, cols, log_alpha):
    """``log p(X[:, cols] | BHC)`` of one padded view (no pair tables: for wide views)."""
    return dpm_bound(row_bhc(cd, cols, log_alpha)[2], log_alpha, cd.n_rows)


def _group_evidence(cd: ColumnData, cols, log_alpha) -> float:
    return float(
        _direct_evidence(cd, jnp.asarray(pad_views([list(cols)], view_width(len(cols)), cd.n_cols, 1)[0]), log_alpha)
    )


def _subtree_weights(children, log_r, log_1mr, sizes, top) -> np.ndarray:
    """Size-weighted ``log omega`` of the nodes of the subtree rooted at ``top`` (-inf
    elsewhere): Eq. 11's weights of a new column under ``T_top``."""
    m = len(children) + 1
    N = 2 * m - 1
    par = np.full(N, -1)
    for t, (a, b) in enumerate(children):
        par[a] = par[b] = m + t
    lw = np.full(N, -np.inf)
    lw[top] = 0.0
    for k in range(N - 1, -1, -1):  # parents have larger ids than their children
        if k != top and par[k] >= 0 and np.isfinite(lw[par[k]]):
            p = par[k]
            lw[k] = lw[p] + log_1mr[p] + np.log(sizes[k] / sizes[p])
    out = np.full(N, -np.inf)
    inside = np.isfinite(lw)
    out[inside] = lw[inside] + log_r[inside]
    return out


def _filter_split(cd: ColumnData, Xh: np.ndarray, alpha: float, cols: np.ndarray, rng, subset_size: int, meter=None):
    """One filtering level of Algorithm 2: BHCC on a random subset ``V0`` of ``subset_size``
    columns of ``cols``; the root of its tree splits ``V0`` in two and every other column goes
    to the side with the larger CRP-weighted new-column predictive (Eq. 11-12). Returns the
    two sides (column arrays, unsorted)."""
    m = len(cols)
    perm = rng.permutation(m)
    sub, rest = cols[perm[:subset_size]], cols[perm[subset_size:]]
    ch, h1, d, pT, l1, lr = bhcc_core(cd, alpha, sub, meter=meter)
    s = len(sub)
    sizes = np.concatenate([np.ones(s), np.zeros(s - 1)])
    for t, (a, b) in enumerate(ch):
        sizes[s + t] = sizes[a] + sizes[b]
    top_a, top_b = ch[-1]
    sets = np.zeros((2 * s - 1, s), bool)
    sets[np.arange(s), np.arange(s)] = True
    for t, (a, b) in enumerate(ch):
        sets[s + t] = sets[a] | sets[b]
    col_lists = [list(sub[sets[k]]) for k in range(2 * s - 1)]
    wa = _subtree_weights(ch, lr, l1, sizes, top_a)
    wb = _subtree_weights(ch, lr, l1, sizes, top_b)
    nodes = np.flatnonzero(np.isfinite(wa) | np.isfinite(wb))
    Y = Xh[:, rest].T
    outs = node_queries(cd, [col_lists[k] for k in nodes], alpha, "column", [(Y, rest.astype(np.int32)) for _ in nodes])
    la_, lb_ = np.full(len(rest), -np.inf), np.full(len(rest), -np.inf)
    for k, o in zip(nodes, outs):
        if np.isfinite(wa[k]):
            la_ = np.logaddexp(la_, wa[k] + o)
        if np.isfinite(wb[k]):
            lb_ = np.logaddexp(lb_, wb[k] + o)
    to_a = np.log(sizes[top_a]) + la_ > np.log(sizes[top_b]) + lb_
    return np.concatenate([sub[sets[top_a]], rest[to_a]]), np.concatenate([sub[sets[top_b]], rest[~to_a]])


def rbhcc(
    key,
    X,
    component: Component,
    alpha: float = 1.0,
    *,
    subset_size: int = 16,
    threshold: int = 32,
    levels: Optional[int] = None,
    refine: bool = True,
    refine_passes: int = 10,
    search: str = "stochastic",
    search_rounds: int = 3,
    restarts: Optional[int] = None,
    patience: Optional[int] = DEFAULT_PATIENCE,
    search_budget="auto",
    progress_bar: Optional[bool] = None,
) -> BHCCResult:
    """Randomized BHCC (Algorithm 2): a column tree in ``O(J log J)`` column comparisons.

    At each level: if fewer than ``threshold`` columns remain, plain BHCC (Algorithm 1)
    builds the subtree. Otherwise BHCC runs on a random subset ``V0`` of ``subset_size``
    columns; the root of its tree splits ``V0`` into ``L(T_a)`` and ``L(T_b)``, and every
    other column ``y`` goes to the side with the larger ``pi_a p(y | T_a)`` vs ``pi_b p(y |
    T_b)``, where ``p(y | T)`` is the new-column predictive of Eq. 11-12 under that subtree
    and ``pi`` the side's share of ``V0`` (the CRP's prior for a new column joining it). Both
    sides recurse; their union becomes node ``c`` with ``r_c`` from Eq. 6-8 and ``p(X_c | H1)``
    from one BHC over all of its columns.

    ``levels`` truncates the hierarchy (the paper's linear-time variant): a group reached
    at depth ``levels`` (the root is depth 0) is not split further; it becomes one view
    (``r = 1``, ``pi = 1``: its only tree-consistent column partition is itself), and the
    binary tree below it is an arbitrary comb whose nodes carry no hypothesis (``log_h1``
    NaN, zero predictive weight). The CDPM bound stays a valid lower bound.

    With ``refine`` (the default) the cut's column partition is then improved by the local
    search of `bhcc` (same criterion, moves, acceptance and tree rebuild), with two changes
    that keep a pass at ``O(V)`` row-BHC runs (``V`` views) when ``J >= threshold``:
    single-column moves are screened as RBHCC places columns: with every view's row tree
    fixed, a column's gain from joining view ``B`` is estimated by its new-column predictive
    under ``B`` (Eq. 11-12), from leaving its view ``A`` by its leave-one-out predictive
    under ``A``, and per pass only the best moves of the ``subset_size`` columns with the
    highest estimates are evaluated exactly (and accepted only if they improve exactly); and
    a view of ``threshold`` columns or more that is not a node of the tree is
    split by one filtering level (as above, same key stream) instead of a BHCC tree over its
    columns. Below ``threshold`` the refinement is `bhcc`'s. ``search="stochastic"`` (the
    default) adds `bhcc`'s stochastic search (its local searches screened as above; its Gibbs
    sweeps are exact, ``O(J V)`` column sets each), its draws from ``key`` (a stream of its
    own), its cost bounded by ``search_budget`` as in `bhcc` (on wide tables the budget, not
    the restarts, ends it: see `BHCCResult.search`). Its split-merge proposals are allocated
    by the criterion (two column sets per allocated column): `bhcc`'s pair affinities come
    from Algorithm 1 over all column pairs, which RBHCC never forms.

    Padding as in `bhcc` (rows and columns to the size grid; every group's column set to
    ``bucket(m + 1)`` slots): the random subsets are drawn on the host at the real sizes, so
    the same key gives the same tree whatever the padding.

    Args:
      key: a `jax.random` key (the random subsets; the same key gives the same tree).
      X, component, alpha: as in `bhcc`.
      subset_size: ``|V0|`` (>= 2). The defaults (16, 32) build 100 x 2000 with ``levels=6`` in
        about 30 s on a 2-core CPU; larger subsets decide the top splits on more columns.
      threshold: groups with fewer columns are clustered by plain BHCC (>= subset_size).
      levels: number of filtering levels kept (None: no truncation).
      refine, refine_passes: the local search after the tree (see `bhcc`).
      search, search_rounds, restarts, patience, search_budget: the stochastic search after
        it (see `bhcc`; ``"auto"`` counts the sets of the filtering levels' BHCC trees and of
        the screened local search).
      progress_bar: tqdm bar over columns placed (default ``J >= 500``).

    Returns:
      `BHCCResult` (as `bhcc`).
    """
    check_component(component)
    alpha = check_alpha(alpha)
    Xh = validate_inputs(X, component)
    I, J = Xh.shape
    if not (isinstance(subset_size, (int, np.integer)) and subset_size >= 2):
        raise ValueError(f"subset_size must be an integer >= 2, got {subset_size!r}")
    if not (isinstance(threshold, (int, np.integer)) and threshold >= subset_size):
        raise ValueError(f"threshold must be an integer >= subset_size={subset_size}, got {threshold!r}")
    if levels is not None and not (isinstance(levels, (int, np.integer)) and levels >= 0):
        raise ValueError(f"levels must be None or a non-negative integer, got {levels!r}")
    check_refine(refine, refine_passes)
    check_search(search, search_rounds, restarts, patience, search_budget)
    from ..._internal.validation import check_key, numpy_rng

    key = check_key(key, "key")
    rng = numpy_rng(key)
    cd = column_model(component, Xh)
    la = float(np.log(alpha))
    log_alpha = jnp.log(jnp.asarray(alpha, jnp.result_type(float)))
    N = 2 * J - 1
    node_h1, node_d, node_pT = np.full(N, np.nan), np.full(N, la), np.zeros(N)
    node_1mr, node_r = np.full(N, -np.inf), np.zeros(N)
    children: list = []
    if progress_bar is None:
        progress_bar = J >= 500
    bar = None
    if progress_bar:
        from tqdm.auto import tqdm

        bar = tqdm(total=J, desc="RBHCC columns placed", leave=False)

    def new_node(a, b):
        children.append((min(a, b), max(a, b)))
        return J + len(children) - 1

    meter = [0]  # column sets evaluated by the tree's searches (the stochastic search's budget)

    def plain(cols):
        ch, h1, d, pT, l1, lr = bhcc_core(cd, alpha, cols, meter=meter)
        ids = list(int(c) for c in cols)
        node_h1[ids], node_d[ids], node_pT[ids] = h1[: len(ids)], d[: len(ids)], pT[: len(ids)]
        for t, (a, b) in enumerate(ch):
            k = new_node(ids[a], ids[b])
            ids.append(k)
            src = len(cols) + t
            node_h1[k], node_d[k], node_pT[k], node_1mr[k], node_r[k] = h1[src], d[src], pT[src], l1[src], lr[src]
        if bar is not None:
            bar.update(len(cols))
        return ids[-1]

    def truncated(cols):
        h = _group_evidence(cd, cols, log_alpha)
        k = int(cols[0])
        for c in cols[1:]:
            k = new_node(k, int(c))
        if len(cols) > 1:
            node_h1[k], node_d[k] = h, la + float(_sgammaln(len(cols)))
        else:
            node_h1[k] = h
        node_pT[k] = h
        if bar is not None:
            bar.update(len(cols))
        return k

    def rec(cols, depth):
        m = len(cols)
        if m < threshold:
            return plain(cols)
        if levels is not None and depth >= levels:
            return truncated(cols)
        side_a, side_b = _filter_split(cd, Xh, alpha, cols, rng, subset_size, meter)
        ka = rec(np.sort(side_a), depth + 1)
        kb = rec(np.sort(side_b), depth + 1)
        h = _group_evidence(cd, cols, log_alpha)
        ld, lp, lr_, l1_, _ = merge_log(
            la, len(side_a), len(side_b), node_d[ka], node_d[kb], node_pT[ka], node_pT[kb], h
        )
        k = new_node(ka, kb)
        node_h1[k], node_d[k], node_pT[k], node_1mr[k], node_r[k] = h, ld, lp, l1_, lr_
        return k

    try:
        root = rec(np.arange(J), 0)
    finally:
        if bar is not None:
            bar.close()
    assert root == N - 1
    children = np.asarray(children, np.int64).reshape(-1, 2)
    gain = 0.0
    record = _no_search()
    if refine and J > 1:
        ev = SetEvidence(cd, alpha)
        small = greedy_split(ev, la, tree_splits(children, J, node_h1))

        def propose(view):
            key = frozenset(view)
            if len(view) < threshold or key in small.cache:
                return small(view)
            a, b = _filter_split(cd, Xh, alpha, np.asarray(view), rng, subset_size, meter)
            small.cache[key] = (tuple(sorted(a.tolist())), tuple(sorted(b.tolist())))
            return small.cache[key]

        explore = explorer(
            search,
            numpy_rng(jax.random.fold_in(key, 1)),
            search_rounds,
            restarts,
            None,
            patience,
            budget_rule(search_budget, meter),
        )
        trace: list = []
        out = refine_partition(
            ev,
            cd,
            Xh,
            alpha,
            children,
            node_h1,
            node_r,
            refine_passes,
            propose,
            screen=subset_size if J >= threshold else None,
            explore=explore,
            trace=trace,
        )
        if out is not None:
            children, node_h1, node_d, node_pT, node_1mr, node_r, gain = out
        record = _record(search, trace, explore, alpha, J)
    return finish_result(
        children, J, node_h1, node_d, node_pT, node_1mr, node_r, Xh, component, alpha, refine_gain=gain, search=record
    )
