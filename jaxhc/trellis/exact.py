"""Exact inference over all binary hierarchies with the full cluster trellis.

A vectorised bitmask dynamic program (Greenberg, Macaluso et al.): every subset ``S`` of
the ``N`` elements is a trellis vertex indexed by its bitmask. Subsets are processed level
by level (by size); for every subset of a level all its splits ``(L, S \\ L)`` with ``L``
holding the lowest element of ``S`` (so each split is counted once, Prop. 1) are enumerated
arithmetically: split ``j`` of ``S`` puts the ``b``-th other element of ``S`` into ``L``
when bit ``b`` of ``j`` is set. A level is evaluated in fixed-size chunks of
``[parents, splits]`` under ``lax.map`` -- no Python loop over subsets or splits at run
time, ``(3^N + 1) / 2 - 2^N`` split evaluations in all.

- ``log Z(S) = logsumexp_L [log psi(S, L, R) + log Z(L) + log Z(R)]`` (Alg. 1, Prop. 1);
- ``log phi*(S) = max_L [...]`` with backpointers (Prop. 2) for the MAP tree;
- the marginal ``P(S in H) = out(S) Z(S) / Z`` of every cluster at once from a top-down
  outside pass (``out(S)`` pulls from every superset, gathers only; it equals the
  gradient of ``log Z`` with respect to a per-cluster log weight, which the tests check);
  the size-class programs push each split's probability to both children instead (linear
  space, half the split evaluations), and pull where a cluster is below ``e^-PUSH_FLOOR``;
- exact samples top-down with ``p(L | S) = psi(S, L, R) Z(L) Z(R) / Z(S)`` (Alg. 2, Eq. 3;
  `jaxhc.trellis.sampling`, from this module's ``log Z`` table);
- ``log Z`` of many problems of mixed sizes, differentiable in the energy's parameters
  (`log_partition_batch`; `prepare_batch` once + `log_partition_prepared` per parameter
  value): all splits of all problems in fixed-size chunks under one ``lax.scan``; the same
  layout with a segment max / first argmax gives `solve_batch` its MAP (``layout="flat"``).

`solve`, `cluster_marginals`, `sample` and a concrete `log_partition` run one compiled program
per *size class* (``N <= 8``, ``9..10``, ``11..12``, ``13..14``, ``15..16``, ``17..18``,
``19..20``, then one class per ``N`` up to 24), not per ``N``: rows of 8, 32 or 64 splits of
one parent in chunks under one ``fori_loop``, scheduled by host tables; the log-Z-only program
sums each parent's terms in linear space (`jaxhc.trellis.classes`).
Traced or differentiated ``log Z``, `run_dp` and the batches use the level-unrolled per-``N``
programs of this module.

Batches of problems of mixed sizes (`solve_batch`, `prepare_batch`, `log_partition_prepared`,
`log_partition_batch`, `map_trees`) are in `jaxhc.trellis.batch`.
"""

from __future__ import annotations

from functools import lru_cache, partial
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ..tree import Tree
from .classes import class_call
from .energies import Energy
from .ragged import host_rows
from .subsets import level_tables, select_features, splits_of, take_rows

__all__ = [
    "TrellisSolution",
    "solve",
    "log_partition",
    "cluster_marginals",
    "subtree_log_marginal",
    "memory_required",
    "num_splits",
    "MAX_EXACT_LEAVES",
]

#: Above this many leaves the full trellis is refused (the bitmask indices are int32 and
#: the work grows as 3^N); use `jaxhc.trellis.sparse_solve`.
MAX_EXACT_LEAVES = 24
_CHUNK_PAIRS = 1 << 14


def num_splits(n: int) -> int:
    """Split evaluations of the full trellis: ``(3^n + 1) / 2 - 2^n``."""
    return (3**n + 1) // 2 - 2**n


def memory_required(n: int, feature_floats: int = 5, dtype_bytes: int = 8) -> int:
    """Approximate peak bytes of `solve` for ``n`` leaves: per-subset tables (features,
    log Z, MAP value, backpointer, marginal cotangents) plus one chunk of splits."""
    per_subset = (feature_floats + 4) * dtype_bytes + 4
    chunk = min(_CHUNK_PAIRS, max(1, num_splits(n))) * (2 * feature_floats + 8) * dtype_bytes
    return int(2**n * per_subset * 2 + chunk * 3)


def check_num_leaves(n: int, max_leaves: Optional[int], max_bytes: Optional[int]):
    limit = MAX_EXACT_LEAVES if max_leaves is None else max_leaves
    if n > limit:
        raise ValueError(
            f"leaves: N={n} is above the exact trellis limit of {limit} leaves "
            f"({num_splits(n):.3e} split evaluations, about {memory_required(n) / 2**30:.1f} GiB); "
            "use jaxhc.trellis.sparse_solve with seed trees (beam search, samples) instead"
        )
    if max_bytes is not None and memory_required(n) > max_bytes:
        raise ValueError(
            f"leaves: N={n} needs about {memory_required(n) / 2**30:.2f} GiB, above max_bytes="
            f"{max_bytes / 2**30:.2f} GiB; use jaxhc.trellis.sparse_solve"
        )


def _chunking(count: int, per: int):
    c = max(1, min(count, _CHUNK_PAIRS // max(per, 1)))
    n_chunks = -(-count // c)
    return c, n_chunks


def _logsumexp_rows(a):
    """``logsumexp`` over the last axis whose derivatives (reverse and forward) stay finite
    when a whole row is ``-inf`` (an impossible subset): such rows are summed as zeros and
    their output reset to ``-inf``, so no ``0 / 0`` reaches the parameters' gradient."""
    live = jnp.isfinite(jnp.max(a, axis=-1, keepdims=True))
    out = jax.scipy.special.logsumexp(jnp.where(live, a, 0.0), axis=-1)
    return jnp.where(live[..., 0], out, -jnp.inf)


def run_dp(energy: Energy, feats, n: int, u=None, with_map: bool = True):
    """Runs the trellis DP over all subsets of ``n`` elements.

    Returns ``(log_z [2^n], map_val [2^n], backptr [2^n])`` (the last two ``None`` without
    ``with_map``). ``u`` adds a log weight per cluster (leaves and root included).
    """
    dtype = jax.tree_util.tree_leaves(feats)[0].dtype
    size = 2**n
    zero_u = u is None
    u = jnp.zeros((size,), dtype) if zero_u else u
    singles = jnp.left_shift(1, jnp.arange(n, dtype=jnp.int32))
    log_z = jnp.full((size,), -jnp.inf, dtype).at[singles].set(u[singles])
    best = jnp.full((size,), -jnp.inf, dtype).at[singles].set(0.0) if with_map else None
    bp = jnp.zeros((size,), jnp.int32) if with_map else None
    for k in range(2, n + 1):
        masks_np, pos_np = level_tables(n, k)
        count, P = len(masks_np), 2 ** (k - 1) - 1
        c, n_chunks = _chunking(count, P)
        padn = c * n_chunks - count
        masks_p = np.concatenate([masks_np, np.repeat(masks_np[:1], padn)]).reshape(n_chunks, c)
        pos_p = np.concatenate([pos_np, np.repeat(pos_np[:1], padn, 0)]).reshape(n_chunks, c, k)

        def chunk(args, log_z=log_z, best=best, k=k):
            S, pos = args
            L = splits_of(pos, k)
            R = S[:, None] ^ L
            fP = jax.tree_util.tree_map(lambda x: x[:, None], take_rows(feats, S))
            lp = energy.log_psi(fP, take_rows(feats, L), take_rows(feats, R))
            z = _logsumexp_rows(lp + log_z[L] + log_z[R])
            if best is None:
                return z, None, None
            m = lp + best[L] + best[R]
            arg = jnp.argmax(m, axis=1)
            return z, jnp.max(m, axis=1), jnp.take_along_axis(L, arg[:, None], axis=1)[:, 0]

        if n_chunks == 1:
            # one chunk: no loop (a while loop per level costs compile time, most under grad)
            z, mv, mb = jax.tree_util.tree_map(
                lambda x: x[None], chunk((jnp.asarray(masks_p[0]), jnp.asarray(pos_p[0])))
            )
        else:
            z, mv, mb = jax.lax.map(jax.checkpoint(chunk), (jnp.asarray(masks_p), jnp.asarray(pos_p)))
        S_all = jnp.asarray(masks_p.reshape(-1))
        log_z = log_z.at[S_all].set(z.reshape(-1) + u[S_all])
        if with_map:
            best = best.at[S_all].set(mv.reshape(-1))
            bp = bp.at[S_all].set(mb.reshape(-1))
    return log_z, best, bp


class TrellisSolution(NamedTuple):
    """Output of `solve` (one problem of ``N`` elements; subsets indexed by bitmask).

    Fields:
      log_z: log partition function over all ``(2N-3)!!`` hierarchies.
      map_log_phi: ``log phi`` of the MAP hierarchy.
      map_tree: the MAP hierarchy as a `jaxhc.Tree` (None inside `solve_batch`).
      log_marginals: ``[2^N]`` ``log P(S in H)`` for every cluster ``S`` (``-inf`` for the
        empty set); None when not requested.
      log_z_table: ``[2^N]`` ``log Z(S)`` of every subset (sub-trellis partition functions).
      map_table: ``[2^N]`` ``log phi*(S)``; backpointer: ``[2^N]`` left child of the MAP split.
      n_leaves: ``N``.
      map_children: compact batches only (`solve_batch` with ``tables=False``): ``[B, N_max
        - 1, 2]`` int32, the MAP tree of every problem as `jaxhc.Tree` children (leaves
        ``0..N-1``, inner node ``N + t`` is row ``t``; rows past ``N - 1`` are ``-1``).
      map_log_marginals: compact batches with ``marginals=True`` only: ``[B, N_max - 1]``
        ``log P(S in H)`` of the cluster ``S`` of every inner node of the MAP tree (row
        order of ``map_children``; NaN past ``N - 1``).
      valid: batches only: ``[B]`` bool, False for the problems that failed the checks and
        were skipped (``on_invalid="skip"``: their ``log_z`` and ``map_log_phi`` are NaN,
        their tables NaN, their ``map_children`` rows ``-1``).
      invalid: batches only: the `jaxhc.trellis.InvalidProblems` report of the skipped
        problems (empty when none was).
    """

    log_z: Any
    map_log_phi: Any
    map_tree: Optional[Tree]
    log_marginals: Any
    log_z_table: Any
    map_table: Any
    backpointer: Any
    n_leaves: Any
    map_children: Any = None
    map_log_marginals: Any = None
    valid: Any = None
    invalid: Any = None


def tree_from_backpointers(bp: np.ndarray, n: int, root: Optional[int] = None) -> Tree:
    """Builds the MAP `Tree` by following backpointers from the root mask."""
    bp = np.asarray(bp)
    root = (1 << n) - 1 if root is None else root
    bp = bp.tolist()  # Python ints: one conversion, not one NumPy scalar per split
    splits = []  # (S, L, R) in BFS order
    queue = [int(root)]
    for S in queue:  # the queue grows while it is read: breadth first
        if S & (S - 1) == 0:
            continue
        L = bp[S]
        R = S ^ L
        if L <= 0 or R <= 0 or L | R != S:
            raise ValueError(f"backpointer of subset {S:#x} is {L:#x}, not a split of it")
        splits.append((S, L, R))
        queue += (L, R)
    return tree_from_splits(splits, n)


def tree_from_splits(splits, n: int) -> Tree:
    """`Tree` from a list of ``(S, L, R)`` bitmask splits in top-down (BFS) order."""
    ids = {1 << i: i for i in range(n)}
    m = len(splits)
    children = np.zeros((m, 2), np.int64)
    for t in range(m - 1, -1, -1):
        S, L, R = splits[t]
        node = n + (m - 1 - t)
        a, b = ids[int(L)], ids[int(R)]
        children[m - 1 - t] = (min(a, b), max(a, b))
        ids[int(S)] = node
    # valid by construction from top-down splits of one root (each side a proper subset of
    # its parent, named before it): no `Tree.validate` (its host time)
    return Tree(children) if n > 1 else Tree(np.zeros((0, 2), np.int64))


def prepare_leaves(energy, leaves, max_leaves, max_bytes):
    """Checks ``energy`` and ``leaves`` (one awkward jet converted) and the size limits:
    ``(leaves as a host float64 array, N)``; the compiled program puts it on the device."""
    if not isinstance(energy, Energy):
        raise TypeError(f"energy must be a jaxhc.trellis Energy, got {type(energy).__name__}")
    leaves = host_rows(leaves)  # one awkward jet: its rows
    # methods called through the class: an equinox module builds a bound method on each
    # attribute access (~30 us on 2 cores), the host cost of a small solve
    cls = type(energy)
    arr = cls.validate_leaves(energy, leaves)
    n = cls.n_elements(energy, arr)
    check_num_leaves(n, max_leaves, max_bytes)
    return arr, n


@lru_cache(maxsize=None)
def _complement_positions(n: int, k: int):
    """Bit positions not in each size-k subset (same order as `level_tables`)."""
    _, combos = level_tables(n, k)
    allpos = np.arange(n)
    return np.array([np.setdiff1d(allpos, c) for c in combos], dtype=np.int32).reshape(len(combos), n - k)


def _outside(energy: Energy, feats, n: int, log_z, root=None):
    """Top-down outside pass: ``log_out(S) = log sum over trees of the potential of
    everything outside S`` (the root has 0), computed by pulling from every superset
    ``P = S | T`` with ``T`` a non-empty subset of the complement (gathers only)."""
    dtype = log_z.dtype
    root = 2**n - 1 if root is None else root
    out = jnp.full((2**n,), -jnp.inf, dtype).at[root].set(0.0)
    for k in range(n - 1, 0, -1):
        masks_np, _ = level_tables(n, k)
        cpos_np = _complement_positions(n, k)
        count, Q = len(masks_np), 2 ** (n - k) - 1
        c, n_chunks = _chunking(count, Q)
        padn = c * n_chunks - count
        masks_p = np.concatenate([masks_np, np.repeat(masks_np[:1], padn)]).reshape(n_chunks, c)
        cpos_p = np.concatenate([cpos_np, np.repeat(cpos_np[:1], padn, 0)]).reshape(n_chunks, c, n - k)

        def chunk(args, out=out, k=k, Q=Q):
            S, cpos = args
            j = jnp.arange(1, Q + 1, dtype=jnp.int32)[None, :]
            T = jnp.zeros((S.shape[0], Q), jnp.int32)
            for b in range(n - k):
                T = T | (((j >> b) & 1) << cpos[:, b : b + 1])
            Sb = jnp.broadcast_to(S[:, None], T.shape)
            P = Sb | T
            low = P & (-P)
            s_left = (Sb & low) != 0  # the split of P is (S, T) if S holds P's lowest element
            fS, fT = take_rows(feats, Sb), take_rows(feats, T)
            lp = energy.log_psi(take_rows(feats, P), select_features(s_left, fS, fT), select_features(s_left, fT, fS))
            return jax.scipy.special.logsumexp(out[P] + lp + log_z[T], axis=1)

        o = jax.lax.map(chunk, (jnp.asarray(masks_p), jnp.asarray(cpos_p)))
        S_all = jnp.asarray(masks_p.reshape(-1))
        out = out.at[S_all].set(jnp.where(S_all == root, 0.0, o.reshape(-1)))
    return out


def solve_impl(energy, leaves, n, marginals=True, root=None):
    feats = energy.features(leaves)
    root = 2**n - 1 if root is None else root
    log_z, best, bp = run_dp(energy, feats, n)
    log_m = None
    if marginals:
        # P(S in H) = outside(S) Z(S) / Z (Sec. 2.4 / App. A.4.2 of the trellis paper)
        log_m = _outside(energy, feats, n, log_z, root) + log_z - log_z[root]
        # Z = 0 (every hierarchy impossible, e.g. jets below the cut): no cluster has
        # positive probability; -inf rather than the NaN of -inf - (-inf)
        log_m = jnp.where(log_z[root] == -jnp.inf, -jnp.inf, log_m)
        log_m = log_m.at[0].set(-jnp.inf)
    return log_z[root], best[root], log_m, log_z, best, bp


_solve_core = jax.jit(solve_impl, static_argnames=("n", "marginals"))


def solve(
    energy: Energy, leaves, *, marginals: bool = True, max_leaves: Optional[int] = None, max_bytes: Optional[int] = None
) -> TrellisSolution:
    """Exact partition function, MAP hierarchy and all cluster marginals.

    Args:
      energy: a `jaxhc.trellis.Energy` (e.g. ``GinkgoEnergy(lam=2.0, t_cut=16.0)``).
      leaves: the problem's data, one row per element (four-momenta ``[N, 4]`` for Ginkgo,
        a symmetric affinity matrix ``[N, N]`` for Dasgupta / correlation clustering).
      marginals: also compute ``log P(S in H)`` for every cluster (an outside pass).
      max_leaves: refuse larger ``N`` (default `MAX_EXACT_LEAVES`).
      max_bytes: refuse ``N`` whose `memory_required` exceeds this.

    Returns:
      `TrellisSolution`. (Alg. 1 / Prop. 1, Prop. 2 and Sec. 2.4 of the trellis paper.)
    """
    leaves, n = prepare_leaves(energy, leaves, max_leaves, max_bytes)
    res = class_call(energy, leaves, n, True, marginals)
    if res is None:
        res = _solve_core(energy, leaves, n, marginals=marginals)
    log_z, map_v, log_m, tz, tb, bp = res
    host_z, host_bp = jax.device_get((log_z, bp))  # one transfer for both
    _check_log_z(host_z)
    tree = tree_from_backpointers(host_bp, n)
    return TrellisSolution(log_z, map_v, tree, log_m, tz, tb, bp, n)


def _check_log_z(log_z):
    v = float(log_z)
    if v == np.inf or v != v:
        msg = "the energy's log potentials of these leaves overflow float64; rescale the leaves or the energy's"
        raise ValueError(f"log Z is {v}: {msg} parameters (e.g. beta)")


def log_partition(energy: Energy, leaves) -> jax.Array:
    """``log Z`` alone; differentiable in the energy's parameters (e.g. ``jax.grad`` w.r.t.
    Ginkgo's ``lam`` or an inverse temperature) and usable inside ``numpyro.factor``.

    Shapes are checked eagerly only when ``leaves`` is concrete.
    """
    if not isinstance(energy, Energy):
        raise TypeError(f"energy must be a jaxhc.trellis Energy, got {type(energy).__name__}")
    n = type(energy).n_elements(energy, leaves)
    if not isinstance(leaves, jax.core.Tracer):
        leaves, n = prepare_leaves(energy, leaves, None, None)
        if not any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(energy)):
            # concrete: the size class's program (not differentiable: a loop over chunks)
            res = class_call(energy, leaves, n, False, False, tables=False)
            if res is not None:
                return res
    return _log_partition_core(energy, jnp.asarray(leaves), n)


@partial(jax.jit, static_argnames=("n",))
def _log_partition_core(energy, leaves, n):
    feats = energy.features(leaves)
    return run_dp(energy, feats, n, with_map=False)[0][2**n - 1]


def cluster_marginals(energy: Energy, leaves) -> jax.Array:
    """``[2^N]`` probabilities ``P(S in H)`` of every cluster (they sum to ``2N - 1``): those
    of `solve`, from log Z and the outside pass alone (no MAP) for ``N`` in a size class."""
    leaves, n = prepare_leaves(energy, leaves, None, None)
    res = class_call(energy, leaves, n, False, True)
    if res is None:
        res = _solve_core(energy, leaves, n, marginals=True)
    _check_log_z(res[0])
    return jnp.exp(res[2])


def subtree_log_marginal(solution: TrellisSolution, energy: Energy, leaves, subtree: Tree, leaf_ids) -> jax.Array:
    """``log P(H_i)``: probability that the hierarchy contains the given sub-hierarchy.

    ``subtree`` is a `Tree` over ``len(leaf_ids)`` leaves; its leaf ``a`` is element
    ``leaf_ids[a]``. ``P(H_i) = P(X_i in H) phi(H_i) / Z(X_i)`` (Sec. 2.4 of the paper).
    """
    from .energies import log_phi_of_tree

    if solution.log_marginals is None:
        raise ValueError("solution has no marginals; call solve(..., marginals=True)")
    leaf_ids = np.asarray(leaf_ids, np.int64)
    if len(set(leaf_ids.tolist())) != len(leaf_ids) or subtree.n_leaves != len(leaf_ids):
        raise ValueError("leaf_ids must be distinct and one per leaf of subtree")
    mask = int(np.sum(np.left_shift(1, leaf_ids)))
    lv = (
        jnp.asarray(leaves)[jnp.asarray(leaf_ids)]
        if not isinstance(energy, _affinity_types())
        else jnp.asarray(leaves)[jnp.ix_(leaf_ids, leaf_ids)]
    )
    log_phi = log_phi_of_tree(energy, lv, subtree)
    lm = solution.log_marginals[mask]
    return jnp.where(lm == -jnp.inf, -jnp.inf, lm + log_phi - solution.log_z_table[mask])


def _affinity_types():
    from .energies import AffinityEnergy

    return (AffinityEnergy,)
