"""Refinement of the column partition after the tree: a bounded local search under the CDPM
criterion (single-column moves, merges and splits of views), then the tree rebuilt above the
refined views (see `jaxhc.bhcc`)."""

from __future__ import annotations

from typing import Callable, Optional

import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from ..._internal.buckets import pad_rows
from ..._internal.pool import pool_map
from ...tree import Tree
from .columns import ColumnData
from .hostmath import host_gammaln as _sgammaln
from .merges import greedy_merges
from .predictive import QUERY_CHUNK, views_column_predict
from .views import JOB_THREADS, VIEW_CHUNK, grouped_views, pad_views, views_full

_REFINE_TOL = 1e-8  # nats: criterion gains up to this are ties (numerical noise), not improvements


class SetEvidence:
    """``log p(X[:, S] | BHC)`` (BHC's DPM lower bound over the rows) of column sets ``S``,
    cached by ``frozenset``. Every set is evaluated by the program that gives a view its row
    BHC (`views_full` at `view_width`, `VIEW_CHUNK` sets per call, as `_view_rows`) and the
    bound is formed as `BHCResult.dpm_lower_bound` is, so the value of a set is bitwise the
    ``dpm_lower_bound`` of the view a result reports for it (ties among rows make a row BHC
    sensitive to rounding: another evaluation order could pick another row tree). Sets not
    yet cached are evaluated together, grouped by padded width, chunks on the thread pool."""

    def __init__(self, cd: ColumnData, alpha: float):
        self.cd = cd
        self.alpha = float(alpha)
        self.log_alpha = jnp.log(jnp.asarray(alpha, jnp.result_type(float)))
        self.cache: dict = {}
        self.n_evaluated = 0
        # the evaluated sets' sizes summed: a row BHC's work grows with its columns
        self.work = 0

    def __call__(self, sets) -> np.ndarray:
        keys = [s if isinstance(s, frozenset) else frozenset(int(c) for c in s) for s in sets]
        missing = [k for k in dict.fromkeys(keys) if k not in self.cache]
        if missing:
            self._evaluate(missing)
        return np.array([self.cache[k] for k in keys], float)

    def _evaluate(self, keys):
        cd, alpha, I = self.cd, self.alpha, self.cd.n_rows
        lists = [sorted(k) for k in keys]
        self.n_evaluated += len(keys)
        self.work += sum(len(k) for k in keys)
        const = gammaln(alpha), gammaln(I + alpha)  # as in `assemble_result` (bhc/greedy.py)
        jobs = []
        for idx, W in grouped_views(lists):
            for s0 in range(0, len(idx), VIEW_CHUNK):
                sub = idx[s0 : s0 + VIEW_CHUNK]
                jobs.append((sub, pad_views([lists[i] for i in sub], W, cd.n_cols, VIEW_CHUNK)))

        def run(job):
            sub, cols = job
            outs = views_full(cd, jnp.asarray(cols), self.log_alpha)
            if I > 1:
                # the root is merge I - 2 (the outputs have a row per padded row slot)
                lp, ld = np.asarray(outs[4])[: len(sub), I - 2], np.asarray(outs[3])[: len(sub), I - 2]
            else:
                lp, ld = np.asarray(outs[7])[: len(sub), 0], np.full(len(sub), np.log(alpha))
            return [float(p + d + const[0] - const[1]) for p, d in zip(lp, ld)]

        results = pool_map(run, jobs, max_workers=JOB_THREADS)
        for (sub, _), r in zip(jobs, results):
            for i, v in zip(sub, r):
                self.cache[keys[i]] = v


class Partition:
    """A partition of the columns into views, scored by the CDPM criterion without its
    constant: ``sum_v [log alpha + log Gamma(|v|) + log p(X_v | BHC)]`` (the CRP(alpha) prior
    of the column partition times the views' row-BHC evidences, up to ``Gamma(alpha) /
    Gamma(J + alpha)``). Views are kept sorted, in order of their first column."""

    def __init__(self, ev: SetEvidence, alpha: float, views):
        self.ev = ev
        self.la = float(np.log(alpha))
        self.set(views)

    def set(self, views):
        self.views = sorted((tuple(sorted(int(c) for c in v)) for v in views if len(v)), key=lambda v: v[0])
        self.where = {c: i for i, v in enumerate(self.views) for c in v}

    def terms(self, sets) -> np.ndarray:
        """``log alpha + log Gamma(|S|) + log p(X_S | BHC)`` per set (0 for an empty set)."""
        out = np.zeros(len(sets))
        nz = [i for i, s in enumerate(sets) if len(s)]
        if nz:
            h = self.ev([sets[i] for i in nz])
            out[nz] = self.la + _sgammaln(np.array([len(sets[i]) for i in nz], float)) + h
        return out

    def score(self) -> float:
        return float(np.sum(self.terms(self.views)))


def union_cols(a, b) -> tuple:
    return tuple(sorted(a + b))


def _move_columns(P: Partition, targets=None) -> bool:
    """One sweep of single-column moves, columns in index order: each column goes to the
    candidate (another view, or a new view of its own) with the largest gain, if that gain is
    positive (beyond `_REFINE_TOL`). ``targets`` restricts the candidates (screened mode):
    ``{column: r}`` tries only the view now holding column ``r`` (``-1``: a new view); columns
    absent from it are not tried. With ``targets=None`` every candidate is tried (exact mode).
    The sets every remaining column needs are evaluated in one batch at the start and again
    after each accepted move (only the new ones). Returns whether the partition changed."""
    J = len(P.where)

    def candidates(c):
        a = P.where[c]
        if targets is None:
            bs = [b for b in range(len(P.views)) if b != a]
            return bs + ([-1] if len(P.views[a]) > 1 else [])
        if c not in targets:
            return []
        r = targets[c]
        if r < 0:
            return [-1] if len(P.views[a]) > 1 else []
        b = P.where[r]
        return [b] if b != a else []

    def needed(c):
        a = P.where[c]
        A = P.views[a]
        out = [A, tuple(x for x in A if x != c)]
        for b in candidates(c):
            out += [(c,)] if b < 0 else [P.views[b], union_cols(P.views[b], (c,))]
        return [s for s in out if len(s)]

    changed, stale = False, True
    for c in range(J):
        if stale:
            P.ev([s for c2 in range(c, J) for s in needed(c2)])
            stale = False
        cand = candidates(c)
        if not cand:
            continue
        a = P.where[c]
        A = P.views[a]
        rest = tuple(x for x in A if x != c)
        base = P.terms([rest])[0] - P.terms([A])[0]
        gains = []
        for b in cand:
            if b < 0:
                gains.append(base + P.terms([(c,)])[0])
            else:
                B = P.views[b]
                t = P.terms([union_cols(B, (c,)), B])
                gains.append(base + t[0] - t[1])
        i = int(np.argmax(gains))
        if gains[i] > _REFINE_TOL:
            views = list(P.views)
            views[a] = rest
            if cand[i] < 0:
                views.append((c,))
            else:
                views[cand[i]] = union_cols(P.views[cand[i]], (c,))
            P.set(views)
            changed = stale = True
    return changed


def _merge_views(P: Partition) -> bool:
    """Merges the pair of views with the largest positive gain, repeatedly. Returns whether
    the partition changed."""
    changed = False
    while len(P.views) > 1:
        V = P.views
        pairs = [(a, b) for a in range(len(V)) for b in range(a + 1, len(V))]
        tv = P.terms(V)
        g = P.terms([union_cols(V[a], V[b]) for a, b in pairs]) - np.array([tv[a] + tv[b] for a, b in pairs])
        i = int(np.argmax(g))
        if g[i] <= _REFINE_TOL:
            break
        a, b = pairs[i]
        P.set([v for k, v in enumerate(V) if k not in (a, b)] + [union_cols(V[a], V[b])])
        changed = True
    return changed


def _split_views(P: Partition, propose) -> bool:
    """Splits every view whose proposed split ``propose(view) -> (left, right)`` (None: no
    proposal) has a positive gain. Returns whether the partition changed."""
    props = [(v, propose(v)) for v in P.views if len(v) > 1]
    props = [(v, s) for v, s in props if s is not None]
    if not props:
        return False
    P.ev([x for v, (l, r) in props for x in (v, l, r)])
    views, changed = [v for v in P.views if len(v) == 1], False
    for v, (l, r) in props:
        t = P.terms([l, r, v])
        if t[0] + t[1] - t[2] > _REFINE_TOL:
            views += [l, r]
            changed = True
        else:
            views.append(v)
    if changed:
        P.set(views)
    return changed


def _group_tree(ev: SetEvidence, la: float, groups):
    """Algorithm 1's greedy merges with the column sets ``groups`` as the starting subtrees,
    each a single hypothesis (``d = alpha Gamma(|g|)``, ``p(X_g | T_g) = p(X_g | BHC)``: its
    only tree-consistent partition is itself). Returns ``children [m-1, 2]`` (local ids) and
    the per-node ``log_h1, log_d, log_pT, log_1mr, log_r [2m-1]``."""
    m = len(groups)
    N = 2 * m - 1
    node_h1, node_d, node_pT = np.full(N, np.nan), np.zeros(N), np.zeros(N)
    node_1mr, node_r = np.full(N, -np.inf), np.zeros(N)
    sizes = np.array([len(g) for g in groups], float)
    h = ev(groups)
    node_h1[:m], node_d[:m], node_pT[:m] = h, la + _sgammaln(sizes), h
    if m == 1:
        return np.zeros((0, 2), np.int64), node_h1, node_d, node_pT, node_1mr, node_r
    children = greedy_merges(
        la, [list(g) for g in groups], sizes, node_h1, node_d, node_pT, node_1mr, node_r, lambda cl, ia, ib: ev(cl)
    )
    return children, node_h1, node_d, node_pT, node_1mr, node_r


def _tree_over_views(ev: SetEvidence, la: float, J: int, views):
    """A column tree whose cut at ``r < 0.5`` is ``views`` when no merge of views gains: every
    view is one hypothesis with ``r = 1`` (as a group truncated by RBHCC's ``levels``: a comb
    of its columns whose inner nodes carry no hypothesis, ``log_h1`` NaN), and the views are
    merged greedily by Algorithm 1 (`_group_tree`). Returns ``children [J-1, 2]`` and the
    per-node ``log_h1, log_d, log_pT, log_1mr, log_r [2J-1]``."""
    N = 2 * J - 1
    node_h1, node_d, node_pT = np.full(N, np.nan), np.full(N, la), np.zeros(N)
    node_1mr, node_r = np.full(N, -np.inf), np.zeros(N)
    children = []
    tops = []
    for v in views:
        k = v[0]
        for c in v[1:]:
            children.append((min(k, c), max(k, c)))
            k = J + len(children) - 1
        tops.append(k)
    ch, h1, d, pT, l1, lr = _group_tree(ev, la, views)
    m = len(views)
    node_h1[tops], node_d[tops], node_pT[tops] = h1[:m], d[:m], pT[:m]
    ids = list(tops)
    for t, (a, b) in enumerate(ch):
        a, b = ids[a], ids[b]
        children.append((min(a, b), max(a, b)))
        k = J + len(children) - 1
        ids.append(k)
        src = m + t
        node_h1[k], node_d[k], node_pT[k], node_1mr[k], node_r[k] = h1[src], d[src], pT[src], l1[src], lr[src]
    return np.asarray(children, np.int64).reshape(-1, 2), node_h1, node_d, node_pT, node_1mr, node_r


def _tree_views(children, J, node_r) -> list:
    """Column sets of the cut at ``r < 0.5`` of a column tree (views, in order of first column)."""
    tree = Tree(np.asarray(children, np.int64).reshape(-1, 2))
    labels = tree.cut(0.5, scores=np.exp(np.asarray(node_r)[J:]))
    return [tuple(np.flatnonzero(labels == g).tolist()) for g in range(int(labels.max()) + 1)]


def tree_splits(children, J, node_h1) -> dict:
    """``{frozenset(node's columns): (left columns, right columns)}`` of every inner node of a
    column tree whose children both carry a hypothesis (finite ``log_h1``)."""
    sets = [(c,) for c in range(J)]
    out = {}
    for t, (a, b) in enumerate(np.asarray(children).reshape(-1, 2)):
        sets.append(union_cols(sets[a], sets[b]))
        if np.isfinite(node_h1[a]) and np.isfinite(node_h1[b]):
            out[frozenset(sets[-1])] = (sets[a], sets[b])
    return out


def _column_estimates(cd: ColumnData, alpha: float, X: np.ndarray, views, budget: int) -> dict:
    """Screened single-column moves: every column's best candidate by a fixed-row-tree
    estimate of the gain (RBHCC's rule for placing a column, Eq. 11-12), for the ``budget``
    columns with the highest estimates (whatever their sign: the estimates rank moves, the
    exact criterion decides them), as ``{column: r}`` (the view holding column ``r``, or ``-1``
    for a new view of its own). With every view's row tree ``T_v`` fixed, joining view ``B``
    changes ``log p(X_B | BHC)`` by ``log p(x_c | T_B)`` (the view's new-column predictive),
    leaving view ``A`` by ``log p(X_{A - c} | T_A) - log p(X_A | T_A)``, and a view of its own
    is scored as ``x_c`` alone under ``T_A``; the CRP terms are exact. (A tree rebuilt
    without the column fits the rest better, so leaving is underestimated: hence a ranking,
    not a sign test.) Columns alone in their view are left to the merges."""
    J = cd.n_cols
    I = cd.n_rows
    la = float(np.log(alpha))
    log_alpha = jnp.log(jnp.asarray(alpha, jnp.result_type(float)))
    V = len(views)
    add = np.empty((V, J))
    loo, alone = np.zeros(J), np.zeros(J)
    Y = pad_rows(np.asarray(X, float).T, cd.n_slots, np.nan, axis=1)  # padding rows: missing
    Qc = QUERY_CHUNK["column"]
    Qp = -(-J // Qc) * Qc
    Yp = np.concatenate([Y, np.repeat(Y[:1], Qp - J, axis=0)])
    yc = np.concatenate([np.arange(J), np.zeros(Qp - J, np.int64)]).astype(np.int32)
    const = float(_sgammaln(alpha) - _sgammaln(I + alpha))
    for idx, W in grouped_views(views):
        for s0 in range(0, len(idx), VIEW_CHUNK):
            sub = idx[s0 : s0 + VIEW_CHUNK]
            cols = jnp.asarray(pad_views([views[i] for i in sub], W, J, VIEW_CHUNK))
            outs = views_full(cd, cols, log_alpha)
            log_d_root = np.asarray(outs[3])[:, I - 2] if I > 1 else np.full(VIEW_CHUNK, la)

            def pred(sign, base):
                return np.concatenate(
                    [
                        np.asarray(
                            views_column_predict(
                                cd,
                                cols,
                                outs,
                                log_alpha,
                                jnp.asarray(Yp[q : q + Qc]),
                                jnp.asarray(yc[q : q + Qc]),
                                sign,
                                base,
                            )
                        )
                        for q in range(0, Qp, Qc)
                    ],
                    axis=1,
                )[:, :J]

            p_add, p_loo, p_alone = pred(1.0, 1.0), pred(-1.0, 1.0), pred(1.0, 0.0)
            for r, i in enumerate(sub):
                own = np.asarray(views[i])
                add[i] = p_add[r]
                loo[own] = -p_loo[r, own]
                alone[own] = p_alone[r, own] + log_d_root[r] + const
    size = np.array([len(v) for v in views], float)
    where = np.empty(J, np.int64)
    for i, v in enumerate(views):
        where[list(v)] = i
    best = []
    for c in range(J):
        a = where[c]
        if size[a] == 1:
            continue
        g = add[:, c] - loo[c] + np.log(size) - np.log(size[a] - 1)
        g[a] = -np.inf
        g_new = la + alone[c] - np.log(size[a] - 1) - loo[c]
        b = int(np.argmax(g))
        best.append((g[b], c, int(views[b][0])) if g[b] >= g_new else (g_new, c, -1))
    best.sort(key=lambda t: (-t[0], t[1]))
    return {c: r for _, c, r in best[:budget]}


def _local_search(P: Partition, passes: int, propose, estimates=None) -> int:
    """Up to ``passes`` passes over ``P`` (changed in place), each: single-column moves
    (`_move_columns`, restricted to ``estimates(views)`` when given), merges of two views
    (`_merge_views`), splits of a view by ``propose`` (`_split_views`). Every accepted change
    strictly increases the criterion of `Partition`. Stops after the first pass that changes
    nothing. Returns the number of passes left."""
    left = int(passes)
    while left > 0:
        left -= 1
        targets = None if estimates is None else estimates(P.views)
        moved = _move_columns(P, targets) if (targets is None or targets) else False
        merged = _merge_views(P)
        split = _split_views(P, propose)
        if not (moved or merged or split):
            break
    return left


def refine_partition(
    ev: SetEvidence,
    cd: ColumnData,
    X: np.ndarray,
    alpha: float,
    children,
    node_h1,
    node_r,
    passes: int,
    propose,
    screen: Optional[int] = None,
    explore: Optional[Callable] = None,
    trace: Optional[list] = None,
):
    """Local search over the column partition from the cut of a column tree, then a tree for it.

    `_local_search` from the tree's cut; with ``screen = k`` its single-column moves are only
    the best moves of the ``k`` columns ranked highest by a fixed-row-tree estimate
    (`_column_estimates`). If the partition changed, the tree is rebuilt over it
    (`_tree_over_views`); should that tree's cut merge views (``r >= 0.5`` above them: the
    merged view scores at least as high), the cut is taken as the partition and the search
    goes on while passes remain.

    ``explore(P, local)`` (the stochastic search of `moves.stochastic_search`), when given,
    then starts from that answer's partition ``P`` and leaves in it the best partition it
    found (never worse), ``local(Q)`` being the same local search (``passes`` passes); if it
    changed the partition, the local search, the rebuild and the cut loop run again from it.

    ``trace``, when given, receives the criterion (`Partition.score`) of the input tree's cut,
    of the local search's answer, and of the final partition.

    Returns ``None`` (the tree's cut is already a local optimum, and ``explore`` found nothing
    better) or ``(children, node_h1, node_d, node_pT, node_1mr, node_r, gain)`` of the new
    tree, ``gain`` the criterion's increase from the input tree's cut to the new tree's cut
    (nats)."""
    J = X.shape[1]
    la = float(np.log(alpha))
    views0 = _tree_views(children, J, node_r)
    P = Partition(ev, alpha, views0)
    start = P.score()
    start_views = list(P.views)
    estimates = None if screen is None else (lambda views: _column_estimates(cd, alpha, X, views, screen))

    def settle(rebuilt):
        left = int(passes)
        first = True
        while True:
            left = _local_search(P, left, propose, estimates)
            if first and rebuilt is None and P.views == start_views:
                return None
            first = False
            rebuilt = _tree_over_views(ev, la, J, P.views)
            cut = _tree_views(rebuilt[0], J, rebuilt[5])
            if cut == P.views or left == 0:
                break
            P.set(cut)
        P.set(_tree_views(rebuilt[0], J, rebuilt[5]))
        return rebuilt

    rebuilt = settle(None)
    if trace is not None:
        trace += [start, P.score()]
    if explore is not None:
        before = list(P.views)
        explore(P, lambda Q: _local_search(Q, int(passes), propose, estimates))
        if P.views != before:
            rebuilt = settle(rebuilt)
    if trace is not None:
        trace.append(P.score())
    if rebuilt is None:
        return None
    return rebuilt + (P.score() - start,)


def greedy_split(ev: SetEvidence, la: float, cache: dict):
    """``propose(view)`` for `_split_views`: the top split of Algorithm 1's tree over the view's
    own columns (built once per view, with the splits of all its nodes added to ``cache``)."""

    def propose(view):
        key = frozenset(view)
        if key not in cache:
            ch, h1, *_ = _group_tree(ev, la, [(c,) for c in view])
            local = tree_splits(ch, len(view), h1)
            for k, (l, r) in local.items():
                cache.setdefault(frozenset(view[i] for i in k), (tuple(view[i] for i in l), tuple(view[i] for i in r)))
        return cache.get(key)

    propose.cache = cache
    return propose


def check_refine(refine, refine_passes):
    if not isinstance(refine, (bool, np.bool_)):
        raise ValueError(f"refine must be True or False, got {refine!r}")
    if isinstance(refine_passes, bool) or not isinstance(refine_passes, (int, np.integer)) or refine_passes < 1:
        raise ValueError(f"refine_passes must be a positive integer, got {refine_passes!r}")
