"""Compact batch results: the per-problem answers of `jaxhc.trellis.solve_batch` (``log Z``,
MAP ``log phi``, the MAP trees as child arrays and optionally their clusters' marginals)
without the ``[B, 2^N_max]`` per-subset tables, and the MAP trees read from backpointer
tables many problems at a time (`children_from_backpointers`: NumPy over the problems, one
step per tree node, instead of one Python walk per problem)."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ..tree import Tree
from .exact import TrellisSolution, tree_from_backpointers

__all__ = [
    "compact_solution",
    "compact_result",
    "gather_solutions",
    "map_trees",
    "children_from_backpointers",
    "children_from_queue",
    "map_queue_device",
    "tree_of_children",
]


def children_from_backpointers(bp, n: int, problems=None) -> np.ndarray:
    """The MAP trees of ``k`` problems of ``n`` elements each, as ``[k, n - 1, 2]`` int32 child
    arrays, from their backpointer tables ``bp [k, 2^n]`` (the left child's bitmask of every
    subset's best split; only the entries on each tree's path are read).

    Row for row the same trees as `jaxhc.trellis.exact.tree_from_backpointers` (internal nodes
    numbered in reverse breadth-first order of the splits, the root last; each pair sorted),
    computed for all problems at once: a breadth-first queue per problem, advanced one entry
    per step for ``2n - 1`` steps.

    Raises:
      ValueError: a backpointer on a tree's path is not a proper non-empty subset of its set;
        the message names the first such problem by its entry of ``problems [k]`` (default:
        its row).
    """
    bp = np.asarray(bp)
    if bp.ndim != 2 or bp.shape[1] != 1 << n:
        raise ValueError(f"bp must have shape [k, 2^n] = [k, {1 << n}], got {bp.shape}")
    k = bp.shape[0]
    m = n - 1
    if m <= 0 or k == 0:
        return np.zeros((k, max(m, 0), 2), np.int32)
    width = 2 * n - 1  # every tree has 2n - 1 nodes: the queue's length
    Q = np.zeros((k, width), np.int64)
    Q[:, 0] = (1 << n) - 1
    child_at = np.zeros((k, width), np.int64)  # queue position of each entry's left child
    tail = np.ones(k, np.int64)
    for p in range(width):
        S = Q[:, p]
        inner = np.flatnonzero(S & (S - 1))
        if len(inner) == 0:
            continue
        s = S[inner]
        L = bp[inner, s].astype(np.int64)
        wrong = (L == 0) | (L == s) | (L & ~s != 0)
        if np.any(wrong):
            _raise_corrupt(inner[np.flatnonzero(wrong)[0]], problems)
        t = tail[inner]
        Q[inner, t] = L
        Q[inner, t + 1] = s ^ L
        child_at[inner, p] = t
        tail[inner] = t + 2
    return children_from_queue(Q, child_at, n)


def _raise_corrupt(row: int, problems=None) -> None:
    """The ValueError of a corrupt table at ``row``, named by ``problems[row]`` if given."""
    problem = row if problems is None else np.asarray(problems)[row]
    raise ValueError(f"bp: problem {int(problem)} has no valid split on its MAP path (backpointer table corrupt)")


def children_from_queue(Q, child_at, n: int, bad=None, problems=None) -> np.ndarray:
    """`children_from_backpointers` from each tree's breadth-first queue of subsets ``Q [k, 2n
    - 1]`` (the root first) and the queue position of each entry's left child ``child_at [k,
    2n - 1]`` (0 for a leaf), as `children_from_backpointers` or `map_queue_device` build
    them. ``bad [k]`` (`map_queue_device`'s flags) raises the ValueError of a corrupt table,
    naming the first flagged problem by its entry of ``problems [k]`` (default: its row)."""
    if bad is not None and np.any(bad):
        _raise_corrupt(int(np.flatnonzero(np.asarray(bad))[0]), problems)
    Q, child_at = np.asarray(Q, np.int64), np.asarray(child_at, np.int64)
    k, m = Q.shape[0], n - 1
    rows = np.arange(k)
    inner = (Q & (Q - 1)) != 0
    split = np.cumsum(inner, axis=1) - 1  # index of each internal entry among the splits (BFS)
    node = np.where(inner, n + (m - 1 - split), np.log2(np.maximum(Q, 1)).astype(np.int64))
    # each row holds exactly m internal entries, in queue order
    pos = np.nonzero(inner)[1].reshape(k, m)
    cl = child_at[rows[:, None], pos]
    a, b = node[rows[:, None], cl], node[rows[:, None], cl + 1]
    out = np.empty((k, m, 2), np.int32)
    # split t (BFS) is child row m - 1 - t
    out[:, ::-1, 0] = np.minimum(a, b)
    out[:, ::-1, 1] = np.maximum(a, b)
    return out


def compact_result(
    log_z, map_log_phi, n_leaves, map_children, map_log_marginals=None, valid=None, invalid=None
) -> TrellisSolution:
    """A compact `TrellisSolution` (the per-subset table fields ``None``) from per-problem
    host arrays: ``log_z``, ``map_log_phi`` ``[B]``, ``n_leaves`` ``[B]``, ``map_children``
    ``[B, N_max - 1, 2]``, optionally ``map_log_marginals`` ``[B, N_max - 1]``, and the
    ``valid`` flags ``[B]`` (default: every finite-input problem) and ``invalid`` report."""
    if valid is None:
        valid = np.ones(np.shape(log_z), bool)
    return TrellisSolution(
        np.asarray(log_z, np.float64),
        np.asarray(map_log_phi, np.float64),
        None,
        None,
        None,
        None,
        None,
        np.asarray(n_leaves),
        map_children,
        map_log_marginals,
        np.asarray(valid, bool),
        invalid,
    )


def compact_solution(sol: TrellisSolution) -> TrellisSolution:
    """The per-problem answers of a `solve_batch` result with tables (see its ``tables``
    argument): ``log_z``, ``map_log_phi``, ``n_leaves``, ``map_children`` and, when the
    result has marginals, ``map_log_marginals``; the table fields ``None``. Host arrays."""
    if sol.backpointer is None:
        if sol.map_children is None:
            raise ValueError("sol holds neither tables nor compact MAP trees (not a solve_batch result)")
        return sol
    bp = np.asarray(sol.backpointer)
    nl = np.asarray(sol.n_leaves).astype(np.int64).reshape(-1)
    B = len(nl)
    n_max = int(bp.shape[-1]).bit_length() - 1
    children = np.full((B, max(n_max - 1, 0), 2), -1, np.int32)
    with_m = sol.log_marginals is not None
    lm_tab = np.asarray(sol.log_marginals) if with_m else None
    lm = np.full((B, max(n_max - 1, 0)), np.nan) if with_m else None
    valid = np.ones(B, bool) if sol.valid is None else np.asarray(sol.valid, bool)
    for n in np.unique(nl):
        n = int(n)
        if n < 2:
            continue
        idx = np.flatnonzero((nl == n) & valid)  # skipped problems: no tree
        ch = children_from_backpointers(bp[idx, : 1 << n], n)
        children[idx, : n - 1] = ch
        if with_m:
            masks = _cluster_masks(ch, n)
            lm[idx, : n - 1] = np.take_along_axis(lm_tab[idx], masks, axis=1)
    return compact_result(sol.log_z, sol.map_log_phi, nl, children, lm, sol.valid, sol.invalid)


def gather_solutions(sol: TrellisSolution) -> TrellisSolution:
    """The compact answers of every process's jets, on every process: after
    ``jax.distributed.initialize`` with several processes, each holding the `solve_batch`
    result of its own jets, the rows of process 0, then process 1, ... (as `compact_solution`:
    host arrays, MAP trees as child arrays padded to the largest jet of any process). Every
    process must call it. One process: `compact_solution` of ``sol``."""
    import jax

    c = compact_solution(sol)
    if jax.process_count() == 1:
        return c
    from jax.experimental import multihost_utils

    B, m = len(c.log_z), int(np.asarray(c.map_children).shape[1])
    with_m = c.map_log_marginals is not None
    shapes = np.asarray(multihost_utils.process_allgather(np.array([B, m, with_m], np.int64))).reshape(-1, 3)
    if len(set(shapes[:, 2].tolist())) > 1:
        raise ValueError("sol: some processes' results have marginals and others not")
    b_max, m_max = int(shapes[:, 0].max()), int(shapes[:, 1].max())

    def padded(x, fill, dtype):
        x = np.asarray(x, dtype)
        out = np.full((b_max,) + ((m_max,) + x.shape[2:] if x.ndim > 1 else ()), fill, dtype)
        out[tuple(slice(0, k) for k in x.shape)] = x
        return out

    fields = [
        padded(c.log_z, np.nan, np.float64),
        padded(c.map_log_phi, np.nan, np.float64),
        padded(c.n_leaves, 0, np.int64),
        padded(c.map_children, -1, np.int32),
        padded(c.valid, False, bool),
    ]
    if with_m:
        fields.append(padded(c.map_log_marginals, np.nan, np.float64))
    got = [np.asarray(multihost_utils.process_allgather(f)) for f in fields]
    rows = [np.concatenate([g[p, : shapes[p, 0]] for p in range(len(shapes))]) for g in got]
    # the skipped problems' indices, in the gathered order (their reasons stay on their process)
    from .invalid import InvalidProblems

    bad = np.flatnonzero(~rows[4])
    why = "failed its process's checks (that process's report names why)"
    invalid = InvalidProblems(tuple(int(i) for i in bad), tuple(f"problem {int(i)} {why}" for i in bad), len(rows[4]))
    return compact_result(*rows[:4], rows[5] if with_m else None, rows[4], invalid)


def _cluster_masks(children, n: int) -> np.ndarray:
    """``[k, n - 1]`` bitmask of every internal node's cluster from child arrays ``[k, n - 1, 2]``
    (children are numbered before their parents)."""
    k = children.shape[0]
    masks = np.zeros((k, 2 * n - 1), np.int64)
    masks[:, :n] = np.left_shift(np.int64(1), np.arange(n, dtype=np.int64))
    rows = np.arange(k)
    for i in range(n - 1):
        masks[:, n + i] = masks[rows, children[:, i, 0]] | masks[rows, children[:, i, 1]]
    return masks[:, n:]


def map_trees(batch: TrellisSolution) -> list:
    """The MAP `Tree` of every problem of a `solve_batch` result (with tables or compact);
    None for a problem skipped by ``on_invalid="skip"`` (``valid`` False)."""
    nl = np.asarray(batch.n_leaves)
    valid = np.ones(len(nl), bool) if batch.valid is None else np.asarray(batch.valid, bool)
    if batch.backpointer is None and batch.map_children is not None:
        ch = np.asarray(batch.map_children)
        one = lambda b: tree_of_children(ch[b, : int(nl[b]) - 1])
    else:
        bp = np.asarray(batch.backpointer)
        one = lambda b: tree_from_backpointers(bp[b], int(nl[b]))
    return [one(b) if valid[b] else None for b in range(len(nl))]


def tree_of_children(children) -> Tree:
    """`Tree` of a child array ``[n - 1, 2]`` (one leaf for an empty array)."""
    ch = np.asarray(children, np.int64).reshape(-1, 2)
    return Tree(ch).validate() if len(ch) else Tree(np.zeros((0, 2), np.int64))


@partial(jax.jit, static_argnames=("n",))
def map_queue_device(bp, n: int):
    """The breadth-first queues of the MAP trees of ``k`` problems of ``n`` elements, read on
    the device from their backpointer tables ``bp`` (``[k 2^n]`` or ``[k, 2^n]``: problem
    ``j`` owns entries ``j 2^n .. (j + 1) 2^n``), so that only ``2 (2n - 1)`` integers per
    problem come back to the host instead of its ``2^n`` backpointers.

    Returns ``(Q, child_at, bad)``: the queues and left-child positions of
    `children_from_queue`, and ``bad [k]``, true where a backpointer on the tree's path is not
    a proper non-empty subset of its set (a corrupt table; the host raises)."""
    bp = jnp.asarray(bp).reshape(-1, 1 << n)
    k = bp.shape[0]
    width = 2 * n - 1
    rows = jnp.arange(k)
    Q = jnp.zeros((k, width), bp.dtype).at[:, 0].set((1 << n) - 1)

    def step(p, c):
        Q, child_at, tail, bad = c
        S = jax.lax.dynamic_index_in_dim(Q, p, axis=1, keepdims=False)
        inner = (S & (S - 1)) != 0
        L = jnp.take_along_axis(bp, jnp.where(inner, S, 0)[:, None], axis=1)[:, 0]
        bad = bad | (inner & ((L == 0) | (L == S) | ((L & ~S) != 0)))
        t = jnp.where(inner, tail, width + 1)  # out of range: dropped
        Q = Q.at[rows, t].set(L, mode="drop").at[rows, t + 1].set(S ^ L, mode="drop")
        child_at = jax.lax.dynamic_update_index_in_dim(child_at, jnp.where(inner, tail, 0), p, axis=1)
        return Q, child_at, tail + 2 * inner, bad

    init = (Q, jnp.zeros((k, width), jnp.int32), jnp.ones(k, jnp.int32), jnp.zeros(k, bool))
    Q, child_at, _, bad = jax.lax.fori_loop(0, width, step, init)
    return Q, child_at, bad
