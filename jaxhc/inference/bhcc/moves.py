"""Stochastic moves over the column partition under the CDPM criterion of `Partition` (see
`jaxhc.bhcc`, ``search="stochastic"``): exact Gibbs reassignment of one column, a
sequentially-allocated split-merge of views (Dahl 2003, after Jain & Neal 2004) and a search
driver that runs them, tempered and then at unit temperature, keeps the best partition seen,
polishes it by the deterministic local search and restarts from perturbed partitions.

Every move targets ``pi(u) ∝ exp(S(u) / T)``, ``S`` the criterion `Partition.score` (the
CRP(alpha) prior of the column partition without its constant plus every view's row-BHC DPM
lower bound) at temperature ``T``; at ``T = 1`` the moves leave ``exp(S)`` normalised over the
partitions invariant. The views' terms come from `SetEvidence` (cached per column set), so
the moves see exactly the criterion the local search and the result report. All randomness
comes from an explicit ``numpy.random.Generator``: the same generator state gives the same
moves.

Cost: the sets a move needs are evaluated in batches of up to `VIEW_CHUNK` (one program call
costs about the same for 1 or `VIEW_CHUNK` sets): a Gibbs sweep batches the sets of the next
columns of its order; a split's sequential allocation evaluates, ahead of its draws, the
sets of the next few allocations under both outcomes; a merge's replay evaluates all of its
sets at once."""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Sequence, Union

import numpy as np

from .refine import Partition, union_cols
from .views import VIEW_CHUNK


# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------
def _key(s) -> frozenset:
    return frozenset(int(c) for c in s)


def _fetch(P: Partition, required, speculative=()) -> None:
    """Evaluates the ``required`` sets not yet cached, together with speculative ones (in
    order) while the batch stays within `VIEW_CHUNK` new sets beyond the required ones."""
    cache = P.ev.cache
    new: dict = {}
    for s in required:
        if len(s) and _key(s) not in cache:
            new.setdefault(_key(s), s)
    if not new:
        return
    room = -len(new) % VIEW_CHUNK
    for s in speculative:
        if room <= 0:
            break
        k = _key(s)
        if len(s) and k not in cache and k not in new:
            new[k] = s
            room -= 1
    if new:
        P.ev(list(new.values()))


def _draw(rng: np.random.Generator, logw: np.ndarray) -> int:
    """Index drawn with probabilities ``softmax(logw)`` (one uniform, inverse CDF)."""
    p = np.exp(logw - np.max(logw))
    cdf = np.cumsum(p)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(p) - 1))


def _log_softmax(logw: np.ndarray) -> np.ndarray:
    m = np.max(logw)
    return logw - (m + np.log(np.sum(np.exp(logw - m))))


def _check_temperature(temperature: float) -> float:
    t = float(temperature)
    if not (t > 0 and np.isfinite(t)):
        raise ValueError(f"temperature must be a positive number, got {temperature!r}")
    return t


# ------------------------------------------------------------------------------------------
# Gibbs reassignment of one column
# ------------------------------------------------------------------------------------------
def _gibbs_sets(P: Partition, c: int) -> list:
    """The sets the conditional of column ``c`` needs (views themselves are cached terms)."""
    a = P.where[c]
    A = P.views[a]
    out = [(c,)]
    if len(A) > 1:
        out.append(tuple(x for x in A if x != c))
    out += [union_cols(B, (c,)) for b, B in enumerate(P.views) if b != a]
    out += list(P.views)
    return out


def gibbs_conditional(P: Partition, c: int, temperature: float = 1.0):
    """The exact conditional of column ``c``'s view given the others, ``p(c -> b | rest) ∝
    exp(S(u_b) / T)`` with ``u_b`` the partition with ``c`` moved to ``b``.

    Returns ``(targets, log_p)``: ``targets`` a list of view indices into ``P.views`` (the
    view now holding ``c`` is the choice to stay) and ``-1`` for a new view of its own (when
    ``c`` is alone, staying alone is ``-1``: its view is not listed twice); ``log_p`` the
    normalised log probabilities. The weights differ from ``S(u_b) / T`` by a constant (the
    terms of the views ``c`` does not touch): joining ``B`` adds ``t(B + c) - t(B)``, a new
    view ``t({c})``, ``t`` the per-view terms of `Partition.terms`."""
    T = _check_temperature(temperature)
    a = P.where[c]
    A = P.views[a]
    targets, sets = [], []
    for b, B in enumerate(P.views):
        if b == a:
            if len(A) == 1:
                continue
            targets.append(b)
            sets += [A, tuple(x for x in A if x != c)]
        else:
            targets.append(b)
            sets += [union_cols(B, (c,)), B]
    targets.append(-1)
    sets += [(c,), ()]
    t = P.terms(sets)
    logw = (t[0::2] - t[1::2]) / T
    return targets, _log_softmax(logw)


def _moved(views: Sequence[tuple], c: int, target: int) -> list:
    """``views`` with column ``c`` moved to view index ``target`` (``-1``: a view of its own)."""
    out = []
    for b, v in enumerate(views):
        v = tuple(x for x in v if x != c)
        if b == target:
            v = union_cols(v, (c,))
        out.append(v)
    if target < 0:
        out.append((c,))
    return out


def gibbs_step(P: Partition, c: int, rng: np.random.Generator, temperature: float = 1.0) -> bool:
    """Draws column ``c``'s view from `gibbs_conditional` and moves it (``P`` changed in
    place). Returns whether the partition changed."""
    targets, log_p = gibbs_conditional(P, c, temperature)
    b = targets[_draw(rng, log_p)]
    a = P.where[c]
    if b == a or (b < 0 and len(P.views[a]) == 1):
        return False
    P.set(_moved(P.views, c, b))
    return True


def gibbs_sweep(
    P: Partition,
    rng: np.random.Generator,
    temperature: float = 1.0,
    on_move: Optional[Callable[[Partition], None]] = None,
    columns: Optional[Sequence[int]] = None,
    stop: Optional[Callable[[], bool]] = None,
) -> int:
    """One Gibbs sweep: every column (or every column of ``columns``), in an order drawn from
    ``rng``, is redrawn from its exact conditional (`gibbs_step`); each update leaves
    ``exp(S / T)`` invariant, whichever columns are swept. The sets of the next columns of the
    order are evaluated in one batch (as far as `VIEW_CHUNK` goes); after a move only the sets
    not cached yet are new. ``on_move(P)`` is called after every change; the sweep ends early
    when ``stop()`` (checked before each column) is true. Returns the number of columns
    moved."""
    cols = np.arange(len(P.where)) if columns is None else np.asarray(sorted(int(c) for c in columns), np.int64)
    order = [int(c) for c in cols[rng.permutation(len(cols))]]
    moved = 0
    for i, c in enumerate(order):
        if stop is not None and stop():
            break
        spec = (s for c2 in order[i + 1 : i + 1 + 4 * VIEW_CHUNK] for s in _gibbs_sets(P, c2))
        _fetch(P, _gibbs_sets(P, c), spec)
        if gibbs_step(P, c, rng, temperature):
            moved += 1
            if on_move is not None:
                on_move(P)
    return moved


# ------------------------------------------------------------------------------------------
# sequentially-allocated split-merge of views
# ------------------------------------------------------------------------------------------
def _allocate(P: Partition, i: int, j: int, order, T: float, rng=None, side_i=None, affinity=None):
    """Sequential allocation of the columns ``order`` to two views started by the anchors
    ``i`` and ``j``: column ``k`` joins side ``A`` (with ``i``) with probability ``∝ exp((t(A +
    k) - t(A)) / T)`` and side ``B`` with ``∝ exp((t(B + k) - t(B)) / T)`` (the conditional of
    the criterion given the partial sets; the other view's term is common). With an
    ``affinity`` matrix ``[J, J]`` the weights are instead the mean affinity of ``k`` to each
    side's columns so far over ``T``, and no set is evaluated. With ``rng`` the sides are
    drawn; with ``side_i`` (the set that must end with ``i``) the allocation is replayed.
    Returns ``(A, B, log q)``, ``log q`` the log probability of the allocation."""
    A, B = (i,), (j,)
    logq = 0.0
    order = [int(k) for k in order]
    if affinity is not None:
        target = None if side_i is None else _key(side_i)
        for k in order:
            lw = _log_softmax(np.array([np.mean(affinity[k, list(A)]), np.mean(affinity[k, list(B)])]) / T)
            to_a = (rng.random() < np.exp(lw[0])) if target is None else (k in target)
            logq += float(lw[0] if to_a else lw[1])
            A, B = (union_cols(A, (k,)), B) if to_a else (A, union_cols(B, (k,)))
        return A, B, logq
    if side_i is not None:  # replay: every set is known in advance
        target = _key(side_i)
        req, a, b = [], A, B
        for k in order:
            req += [union_cols(a, (k,)), union_cols(b, (k,))]
            a, b = (union_cols(a, (k,)), b) if k in target else (a, union_cols(b, (k,)))
        _fetch(P, req + [A, B])
    for n, k in enumerate(order):
        if side_i is None:
            # the sets of the next allocations under every outcome, as far as a batch goes
            states, spec = [(A, B)], []
            for k2 in order[n + 1 : n + 4]:
                nxt = []
                for a, b in states:
                    ak, bk = union_cols(a, (k2,)), union_cols(b, (k2,))
                    nxt += [(ak, b), (a, bk)]
                states = nxt
                spec += [s for st in states for s in st]
            _fetch(P, [A, B, union_cols(A, (k,)), union_cols(B, (k,))], spec)
        t = P.terms([union_cols(A, (k,)), A, union_cols(B, (k,)), B])
        lw = _log_softmax(np.array([t[0] - t[1], t[2] - t[3]]) / T)
        if side_i is None:
            to_a = rng.random() < np.exp(lw[0])
        else:
            to_a = k in target
        logq += float(lw[0] if to_a else lw[1])
        if to_a:
            A = union_cols(A, (k,))
        else:
            B = union_cols(B, (k,))
    return A, B, logq


class SplitMerge(NamedTuple):
    """A split-merge proposal: the proposed ``views``, ``log_ratio`` (the log MH acceptance
    ratio ``[S(new) - S(old)] / T + log q(reverse) - log q(forward)``; NaN for a merge that
    `split_merge_step` rejected before computing it), ``kind`` (``"split"`` or ``"merge"``),
    the ``anchors`` and the allocation ``order`` of the other columns."""

    views: list
    log_ratio: float
    kind: str
    anchors: tuple
    order: tuple


def split_merge_proposal(
    P: Partition,
    rng: np.random.Generator,
    temperature: float = 1.0,
    anchors: Optional[tuple] = None,
    order: Optional[Sequence[int]] = None,
    affinity: Optional[np.ndarray] = None,
) -> SplitMerge:
    """A sequentially-allocated split-merge proposal (SAMS, Dahl 2003; Jain & Neal 2004).

    Two distinct columns ``i, j`` are drawn uniformly (or given as ``anchors``), and the other
    columns of their view(s) are put in a uniformly random order (or ``order``). If ``i`` and
    ``j`` share view ``S``, a split is proposed: ``i`` and ``j`` start two views and the other
    columns of ``S`` join one of them in turn, with the probabilities of `_allocate`; ``log
    q(forward)`` is the log probability of the allocation, the reverse (the merge) is
    deterministic. Otherwise the merge of their two views is proposed, and ``log q(reverse)``
    is the probability that the split, with the same anchors and order, allocates the two
    views as they are (the allocation replayed). The anchors and the order are drawn from
    distributions that do not depend on the partition, so the ratio conditional on them is
    a valid MH ratio (the pair and order probabilities cancel). With ``affinity`` (a fixed
    ``[J, J]`` matrix, e.g. `pair_affinity`) the allocation follows the columns' mean
    affinities instead of the criterion (`_allocate`): the ratio is as exact, and a proposal
    evaluates only the sets ``A``, ``B`` and their union instead of two per allocated column.

    Returns a `SplitMerge` (``P`` is not changed)."""
    return _proposal(P, rng, _check_temperature(temperature), anchors, order, None, affinity)


def _proposal(P, rng, T, anchors, order, log_u, affinity=None):
    J = len(P.where)
    if J < 2:
        raise ValueError("a split-merge proposal needs at least two columns")
    if anchors is None:
        i, j = (int(x) for x in rng.choice(J, 2, replace=False))
    else:
        i, j = (int(x) for x in anchors)
        if i == j:
            raise ValueError(f"anchors must be two distinct columns, got {anchors!r}")
    a, b = P.where[i], P.where[j]
    others = [v for n, v in enumerate(P.views) if n not in (a, b)]
    S = P.views[a] if a == b else union_cols(P.views[a], P.views[b])
    rest = [k for k in S if k not in (i, j)]
    if order is None:
        order = [rest[n] for n in rng.permutation(len(rest))]
    else:
        order = [int(k) for k in order]
        if sorted(order) != rest:
            raise ValueError(f"order must be a permutation of the other columns {rest}, got {order!r}")
    if log_u is not None:
        log_u = log_u()
    if a == b:
        A, B, logq = _allocate(P, i, j, order, T, rng=rng, affinity=affinity)
        t = P.terms([A, B, S])
        return SplitMerge(others + [A, B], float((t[0] + t[1] - t[2]) / T - logq), "split", (i, j), tuple(order))
    A0, B0 = P.views[a], P.views[b]
    t = P.terms([S, A0, B0])
    gain = float((t[0] - t[1] - t[2]) / T)
    if log_u is not None and log_u >= gain:  # log q(reverse) <= 0: rejected whatever the replay
        return SplitMerge(others + [S], float("nan"), "merge", (i, j), tuple(order))
    _, _, logq = _allocate(P, i, j, order, T, side_i=A0, affinity=affinity)
    return SplitMerge(others + [S], gain + logq, "merge", (i, j), tuple(order))


def split_merge_step(P: Partition, rng: np.random.Generator, temperature: float = 1.0, affinity=None):
    """One Metropolis-Hastings split-merge step: a `split_merge_proposal` accepted when ``log
    u < log_ratio`` (``u`` uniform, drawn after the anchors and the order); ``P`` changed in
    place when accepted. A merge whose ``[S(new) - S(old)] / T`` is already at most ``log u``
    is rejected before its replay (``log q(reverse) <= 0`` can only lower the ratio; the
    decision is the same), its ``log_ratio`` then NaN. Returns ``(proposal, accepted)``."""
    box = []

    def log_u():
        box.append(float(np.log(rng.random())))
        return box[0]

    prop = _proposal(P, rng, _check_temperature(temperature), None, None, log_u, affinity)
    accepted = bool(box[0] < prop.log_ratio)  # False for NaN
    if accepted:
        P.set(prop.views)
    return prop, accepted


# ------------------------------------------------------------------------------------------
# the search driver
# ------------------------------------------------------------------------------------------
class SearchStats(NamedTuple):
    """Counts of a `stochastic_search`: columns moved by Gibbs, split / merge proposals made
    and accepted, restarts run, and the criterion's gain over the starting partition."""

    gibbs_moves: int
    splits_proposed: int
    splits_accepted: int
    merges_proposed: int
    merges_accepted: int
    restarts: int
    gain: float
    #: the best criterion (`Partition.score`) after the tempered chain and its polish, then
    #: after each restart
    trace: tuple = ()
    #: the restarts allowed (``restarts``), and whether they stopped before it because
    #: ``patience`` restarts in a row found nothing better
    restarts_budget: int = 0
    stopped_early: bool = False
    #: column sets the search evaluated (each a row BHC); their work (sizes summed) and the
    #: most it was allowed (``budget``; None: no limit); whether it stopped because that
    #: was spent
    evaluations: int = 0
    work: int = 0
    budget: Optional[int] = None
    out_of_budget: bool = False


def default_restarts(J: int) -> int:
    """The stochastic search's restart budget for ``J`` columns: one per 8 columns, at least
    2 and at most 12 (a restart costs about one Gibbs sweep over the columns it perturbs plus
    a local search; wide tables have more views to split and merge). With the default
    ``patience`` the restarts stop earlier once the criterion has stopped moving."""
    return int(min(12, max(2, -(-int(J) // 8))))


#: restarts in a row without a better partition after which the search stops
DEFAULT_PATIENCE = 2


def perturb(P: Partition, rng: np.random.Generator, kind: int, fraction: float = 0.2, affinity=None) -> list:
    """A random perturbation of ``P``'s partition (returned; ``P`` unchanged), of one of three
    kinds: ``0``: a view of two or more columns (drawn uniformly) split by a split proposal
    (`split_merge_proposal`, two anchors drawn from the view; taken whatever its ratio);
    ``1``: ``ceil(fraction J)`` columns drawn uniformly, each moved to a uniformly drawn view
    or a new one; ``2``: two views drawn uniformly merged (kind ``0`` when there is one view,
    kind ``1`` when every view is one column). ``affinity``: that of the split proposal."""
    return _perturb(P, rng, kind, fraction, affinity)[0]


def _perturb(P: Partition, rng: np.random.Generator, kind: int, fraction: float, affinity):
    """`perturb`, and the columns it touched: those of the split or merged view(s), or the
    moved columns."""
    views = list(P.views)
    big = [n for n, v in enumerate(views) if len(v) > 1]
    if kind == 2 and len(views) < 2:
        kind = 0
    if kind == 0 and not big:
        kind = 1
    if kind == 0:
        v = views[big[int(rng.integers(len(big)))]]
        i, j = (v[int(x)] for x in rng.choice(len(v), 2, replace=False))
        return split_merge_proposal(P, rng, anchors=(i, j), affinity=affinity).views, list(v)
    if kind == 2:
        a, b = (int(x) for x in rng.choice(len(views), 2, replace=False))
        merged = union_cols(views[a], views[b])
        return [v for n, v in enumerate(views) if n not in (a, b)] + [merged], list(merged)
    J = len(P.where)
    moved = [int(c) for c in rng.choice(J, int(np.ceil(fraction * J)), replace=False)]
    for c in moved:
        views = [tuple(x for x in v if x != c) for v in views]
        views = [v for v in views if len(v)]
        b = int(rng.integers(len(views) + 1))
        if b == len(views):
            views.append((c,))
        else:
            views[b] = union_cols(views[b], (c,))
    return views, moved


def stochastic_search(
    P: Partition,
    rng: np.random.Generator,
    local: Callable[[Partition], object],
    *,
    rounds: int = 3,
    temperatures: Sequence[float] = (2.0, 1.0),
    split_merges: Optional[int] = None,
    restarts: int = 2,
    restart_rounds: int = 2,
    fraction: float = 0.2,
    affinity: Optional[np.ndarray] = None,
    patience: Optional[int] = None,
    budget: Optional[int] = None,
) -> SearchStats:
    """A stochastic search of the column partition from ``P`` (changed in place to the best
    partition found; never worse than the start).

    The chain: for each temperature of ``temperatures`` in turn, ``rounds`` rounds of one
    Gibbs sweep (`gibbs_sweep`) then ``split_merges`` split-merge steps (`split_merge_step`,
    with ``affinity`` when given; default 8 with an affinity, 4 without: a proposal allocated
    by the criterion evaluates two sets per column of the views it touches), all at that
    temperature; the best partition by the criterion seen after any move is kept, and
    ``local(P)`` (the deterministic local search) polishes it. Then ``restarts`` times: from
    `perturb` of the best (``fraction`` of the columns moved), ``restart_rounds`` rounds at
    unit temperature whose Gibbs sweeps visit the columns the perturbation touched (those of
    the split or merged views, or the moved columns), and ``local``; the best is kept. With
    ``patience = k`` the restarts stop after ``k`` in a row that found no better partition
    (None: all ``restarts`` run). With ``budget = m`` the search stops (between two moves,
    then polishes the best) once the column sets it evaluated (not cached before; each a
    row BHC, what the search's time is made of) hold ``m`` columns in all, so its cost is
    bounded whatever the table. Returns `SearchStats`."""
    J = len(P.where)
    sm = (8 if affinity is not None else 4) if split_merges is None else int(split_merges)
    best = [list(P.views), P.score()]
    start = best[1]
    counts = dict(gm=0, sp=0, sa=0, mp=0, ma=0)
    ev0, work0 = P.ev.n_evaluated, P.ev.work

    def spent() -> bool:
        return budget is not None and P.ev.work - work0 >= budget

    def see(Q):
        s = Q.score()
        if s > best[1]:
            best[0], best[1] = list(Q.views), s

    def chain(temps, n_rounds, columns=None):
        for T in temps:
            for _ in range(n_rounds):
                if spent():
                    return
                counts["gm"] += gibbs_sweep(P, rng, T, on_move=see, columns=columns, stop=spent)
                if J < 2:
                    continue
                for _ in range(sm):
                    if spent():
                        return
                    prop, acc = split_merge_step(P, rng, T, affinity)
                    k = "s" if prop.kind == "split" else "m"
                    counts[k + "p"] += 1
                    if acc:
                        counts[k + "a"] += 1
                        see(P)

    def polish():
        P.set(best[0])
        local(P)
        see(P)

    chain(temperatures, rounds)
    polish()
    trace = [best[1]]
    n_restarts = idle = 0
    stopped = False
    for _ in range(int(restarts)):
        if J < 2:
            break
        if (patience is not None and idle >= int(patience)) or spent():
            stopped = not spent()
            break
        before = best[1]
        P.set(best[0])
        views, touched = _perturb(P, rng, n_restarts % 3, fraction, affinity)
        P.set(views)
        see(P)
        chain((1.0,), restart_rounds, touched)
        polish()
        n_restarts += 1
        trace.append(best[1])
        idle = idle + 1 if best[1] <= before else 0
    P.set(best[0])
    return SearchStats(
        counts["gm"],
        counts["sp"],
        counts["sa"],
        counts["mp"],
        counts["ma"],
        n_restarts,
        best[1] - start,
        tuple(float(x) for x in trace),
        int(restarts),
        stopped,
        int(P.ev.n_evaluated - ev0),
        int(P.ev.work - work0),
        None if budget is None else int(budget),
        spent(),
    )


# ------------------------------------------------------------------------------------------
# the public options (`bhcc`, `rbhcc`)
# ------------------------------------------------------------------------------------------
SEARCHES = ("local", "stochastic")


def check_search(search, search_rounds, restarts, patience=None, search_budget="auto") -> None:
    if not isinstance(search, str) or search not in SEARCHES:
        raise ValueError(f"search must be one of {SEARCHES}, got {search!r}")
    for name, v, none_ok in (
        ("search_rounds", search_rounds, False),
        ("restarts", restarts, True),
        ("patience", patience, True),
    ):
        if v is None and none_ok:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"{name} must be a non-negative integer{' or None' if none_ok else ''}, got {v!r}")
    if not (
        search_budget is None
        or (isinstance(search_budget, str) and search_budget == "auto")
        or (isinstance(search_budget, (int, np.integer)) and not isinstance(search_budget, bool) and search_budget >= 0)
    ):
        raise ValueError(f"search_budget must be 'auto', None or a non-negative integer, got {search_budget!r}")


def budget_rule(search_budget, meter: list):
    """The stochastic search's budget (`explorer`'s ``budget``: columns of the sets it
    evaluates, summed) from the public ``search_budget``: ``"auto"``: the work the column
    tree (``meter[0]``, counted by `bhcc_core` and RBHCC's filtering) and the local search
    (the partition's `SetEvidence`) did before it, so the search at most about doubles the
    call's row-BHC work; None: no limit; an integer: that many."""
    if isinstance(search_budget, str):
        return lambda P: int(meter[0] + P.ev.work)
    return search_budget


def search_rng(seed) -> np.random.Generator:
    """The search's generator: from a non-negative integer ``seed``, or from the bits of a JAX
    PRNG key."""
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        if seed < 0:
            raise ValueError(f"seed must be a non-negative integer or a JAX PRNG key, got {seed!r}")
        return np.random.default_rng(int(seed))
    from ..._internal.validation import check_key, numpy_rng

    return numpy_rng(check_key(seed, "seed"))


def explorer(
    search: str,
    rng: np.random.Generator,
    search_rounds: int,
    restarts: Optional[int],
    affinity=None,
    patience: Optional[int] = DEFAULT_PATIENCE,
    budget: Union[None, int, Callable[[Partition], int]] = None,
):
    """``explore(P, local)`` for `refine_partition`: `stochastic_search` with these budgets
    (``restarts`` None: `default_restarts` of the table's columns; ``budget``: column sets,
    or a function of the starting partition giving them) and ``affinity`` (``None`` for
    ``search="local"``). The last search's `SearchStats` is kept in ``explore.stats``."""
    if search == "local":
        return None

    def explore(P, local):
        n_restarts = default_restarts(len(P.where)) if restarts is None else int(restarts)
        sets = budget(P) if callable(budget) else budget
        explore.stats = stochastic_search(
            P,
            rng,
            local,
            rounds=int(search_rounds),
            restarts=n_restarts,
            affinity=affinity,
            patience=patience,
            budget=sets,
        )

    explore.stats = None
    return explore
