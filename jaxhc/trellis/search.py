"""Greedy and beam-search agglomeration under a trellis energy (the baselines of the trellis
paper, Sec. 4.2).

Both start from the ``N`` singletons and merge two current clusters at a time. A merge of
``A`` and ``B`` adds ``log psi(A u B, A, B)`` to the accumulated ``log phi`` of the forest;
after ``N - 1`` merges the forest is one hierarchy ``H`` with ``log phi(H)`` (Eq. 1 of the
paper). Greedy takes the best merge at every step; beam search keeps the ``beam_size`` best
partial agglomerations, ranking every child of every state by its new accumulated value (the
paper's "one step ahead").

Clusters are boolean membership rows, never ``2**N`` tables, so ``N`` of a few hundred works.
Cluster ``i`` lives in slot ``i`` of an ``[N, N]`` membership matrix; merging slots ``i < j``
keeps the union in slot ``i``, so slot ``i`` always holds the cluster whose lowest element is
``i`` and that cluster is the ``left`` argument of ``log_psi`` (as in `jaxhc.trellis.solve`).
Only the scores of pairs involving the merged slot are recomputed after a merge (one jitted,
vectorised call per step for the whole beam).
"""

from __future__ import annotations

from typing import Any, List, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._internal.dtypes import float_dtype as _float
from ..tree import Tree
from .energies import Energy

__all__ = ["SearchResult", "greedy", "beam"]


class SearchResult(NamedTuple):
    """Output of `greedy` and `beam`.

    Fields:
      tree: the best hierarchy found (a `jaxhc.Tree`).
      log_phi: its ``log phi`` (sum of ``log psi`` over its inner nodes), a Python float.
      trees: the final beam, best first (``[tree]`` for `greedy`); distinct hierarchies.
      log_phis: ``[len(trees)]`` float64 ``log phi`` of each tree of the final beam.
    """

    tree: Tree
    log_phi: float
    trees: List[Tree]
    log_phis: Any


def _tree_map(f, *xs):
    return jax.tree_util.tree_map(f, *xs)


@jax.jit
def _merge_scores(energy, leaves, M, i):
    """``log psi`` of merging slot ``i[b]`` with every slot ``k`` of state ``b``.

    Args:
      M: ``[B, K, N]`` float 0/1 slot memberships (empty rows for inactive slots).
      i: ``[B]`` int slot index.
    Returns:
      ``[B, K]``: ``log psi(C_i u C_k, C_min(i,k), C_max(i,k))`` (garbage where ``k == i`` or
      slot ``k`` is inactive; the caller masks those).
    """
    B, K, N = M.shape
    Ci = M[jnp.arange(B), i]  # [B, N]
    U = jnp.maximum(M, Ci[:, None, :])
    unflat = lambda x: x.reshape((B, K) + x.shape[1:])
    fU = _tree_map(unflat, energy.subset_features(leaves, U.reshape(B * K, N)))
    fK = _tree_map(unflat, energy.subset_features(leaves, M.reshape(B * K, N)))
    fI = _tree_map(lambda x: jnp.broadcast_to(x[:, None], (B, K) + x.shape[1:]), energy.subset_features(leaves, Ci))
    k_left = jnp.arange(K)[None, :] < i[:, None]  # slot k is the left (lower) cluster

    def pick(a, b, first):
        c = first.reshape(first.shape + (1,) * (a.ndim - 2))
        return jnp.where(c, a, b)

    fL = _tree_map(lambda a, b: pick(a, b, k_left), fK, fI)
    fR = _tree_map(lambda a, b: pick(b, a, k_left), fK, fI)
    return energy.log_psi(fU, fL, fR)


def _validate(energy, leaves):
    if not isinstance(energy, Energy):
        raise TypeError(f"energy must be a jaxhc.trellis Energy, got {type(energy).__name__}")
    arr = energy.validate_leaves(leaves)
    n = energy.n_elements(arr)
    return jnp.asarray(arr, dtype=_float()), n


def _check_beam_size(beam_size):
    if isinstance(beam_size, (bool, np.bool_)) or not isinstance(beam_size, (int, np.integer)) or beam_size < 1:
        raise ValueError(f"beam_size must be a positive integer, got {beam_size!r}")
    return int(beam_size)


class _State:
    __slots__ = ("M", "active", "scores", "acc", "merges", "key", "ints")

    def __init__(self, M, active, scores, acc, merges, key, ints):
        self.M, self.active, self.scores, self.acc = M, active, scores, acc
        self.merges, self.key, self.ints = merges, key, ints


def _tree_of(merges, n) -> Tree:
    node = list(range(n))
    ch = np.zeros((n - 1, 2), np.int64)
    for t, (i, j) in enumerate(merges):
        a, b = node[i], node[j]
        ch[t] = (min(a, b), max(a, b))
        node[i] = n + t
    return Tree(ch).validate()


def _search(energy, leaves, n, beam_size):
    if n == 1:
        t = Tree(np.zeros((0, 2), np.int64))
        return SearchResult(t, 0.0, [t], np.zeros(1))
    triu = np.triu(np.ones((n, n), bool), k=1)
    eye = np.eye(n, dtype=bool)
    dtype = leaves.dtype
    # the jitted batch is padded to Bp states (one compilation per (energy, N, Bp))
    Bp = max(8, 1 << (beam_size - 1).bit_length())
    # all pairs of singletons: slot i merged with every slot, Bp slots per call
    eye_f = np.eye(n)
    s0 = np.zeros((n, n))
    for a in range(0, n, Bp):
        idx = np.minimum(np.arange(a, a + Bp), n - 1)
        M0 = jnp.broadcast_to(jnp.asarray(eye_f, dtype), (Bp, n, n))
        rows = np.asarray(_merge_scores(energy, leaves, M0, jnp.asarray(idx)), np.float64)
        s0[a : a + Bp] = rows[: min(Bp, n - a)]
    s0 = np.where(np.isnan(s0), -np.inf, s0)
    beam_states = [_State(eye.copy(), np.ones(n, bool), s0, 0.0, (), frozenset(), [1 << e for e in range(n)])]
    for _ in range(n - 1):
        # every valid pair merge of every state, ranked by its new accumulated value
        vals, owners, pairs = [], [], []
        for b, st in enumerate(beam_states):
            ok = triu & st.active[:, None] & st.active[None, :]
            ii, jj = np.nonzero(ok)
            vals.append(st.acc + st.scores[ii, jj])
            owners.append(np.full(ii.shape, b))
            pairs.append(np.stack([ii, jj], 1))
        vals, owners, pairs = np.concatenate(vals), np.concatenate(owners), np.concatenate(pairs)
        # a child forest can be reached from at most one merge per parent state, so the top
        # beam_size * (beam_size + 1) candidates hold at least beam_size distinct children
        top = min(len(vals), beam_size * (beam_size + 1))
        if top < len(vals):
            cand = np.argpartition(-vals, top - 1)[:top]
            cand = cand[np.lexsort((cand, -vals[cand]))]
        else:
            cand = np.lexsort((np.arange(len(vals)), -vals))
        chosen, seen = [], set()
        for c in cand:
            st = beam_states[owners[c]]
            i, j = pairs[c]
            new = st.ints[i] | st.ints[j]
            key = st.key | {new}
            if key in seen:
                continue
            seen.add(key)
            chosen.append((c, key, new))
            if len(chosen) == beam_size:
                break
        children = []
        for c, key, new in chosen:
            st = beam_states[owners[c]]
            i, j = int(pairs[c][0]), int(pairs[c][1])
            M = st.M.copy()
            M[i] |= M[j]
            M[j] = False
            active = st.active.copy()
            active[j] = False
            ints = list(st.ints)
            ints[i], ints[j] = new, 0
            children.append(_State(M, active, st.scores.copy(), float(vals[c]), st.merges + ((i, j),), key, ints))
        # recompute the scores of the merged slot, for all children in one padded call
        Ms = np.stack([ch.M for ch in children] + [children[0].M] * (Bp - len(children)))
        idx = np.array([ch.merges[-1][0] for ch in children] + [0] * (Bp - len(children)))
        rows = np.asarray(_merge_scores(energy, leaves, jnp.asarray(Ms, dtype), jnp.asarray(idx)), np.float64)
        rows = np.where(np.isnan(rows), -np.inf, rows)
        for ch, row, i in zip(children, rows, idx):  # zip stops at the real children
            ch.scores[i, :] = row
            ch.scores[:, i] = row
        beam_states = children
    log_phis = np.array([st.acc for st in beam_states], np.float64)
    trees = [_tree_of(st.merges, n) for st in beam_states]
    return SearchResult(trees[0], float(log_phis[0]), trees, log_phis)


def greedy(energy: Energy, leaves) -> SearchResult:
    """Greedy agglomerative clustering: merge the pair with the highest ``log psi`` each step.

    At every one of the ``N - 1`` steps, among all pairs ``(A, B)`` of current clusters the one
    maximising ``log psi(A u B, A, B)`` is merged (ties: the lowest slot pair). Works for large
    ``N`` (boolean memberships, ``O(N^2)`` pair scores per step, no ``2**N`` tables).

    Args:
      energy: a `jaxhc.trellis.Energy`.
      leaves: the problem's data, one row per element (see `jaxhc.trellis.solve`).

    Returns:
      `SearchResult` with ``log_phi`` the sum of the chosen ``log psi`` values (the greedy
      baseline of Sec. 4.2 of the trellis paper).
    """
    leaves, n = _validate(energy, leaves)
    return _search(energy, leaves, n, 1)


def beam(energy: Energy, leaves, beam_size: int) -> SearchResult:
    """Beam search over partial agglomerations (Sec. 4.2 of the trellis paper).

    A state is a forest (the clusters merged so far) with its accumulated ``log phi``. Every
    state of the beam is expanded by every pair merge of its current clusters; a child's
    score is the parent's accumulated ``log phi`` plus the merge's ``log psi`` (one step of
    look-ahead). Children that are the same forest reached in a different merge order are
    duplicates (the paper keeps only one); the ``beam_size`` best distinct children form the
    next beam. After ``N - 1`` steps every state is a complete hierarchy.

    Args:
      energy: a `jaxhc.trellis.Energy`.
      leaves: the problem's data, one row per element.
      beam_size: number of states kept per step (``>= 1``; 1 is `greedy`).

    Returns:
      `SearchResult`: the best hierarchy, its ``log phi``, and the final beam (``trees``,
      ``log_phis``, best first, at most ``beam_size`` distinct hierarchies).
    """
    beam_size = _check_beam_size(beam_size)
    leaves, n = _validate(energy, leaves)
    return _search(energy, leaves, n, beam_size)
