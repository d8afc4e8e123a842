"""Sparse cluster trellis seeded with hierarchies (Sec. 3 of the trellis paper).

The vertices are the clusters of the seed trees (simulator samples, beam-search trees,
exact samples, ...). A vertex ``S`` has as children every split ``(L, S \\ L)`` with both
``L`` and ``S \\ L`` vertices and ``L`` holding the lowest element of ``S`` (each split
counted once, as in the full trellis). Every seed tree is realised, and usually many more
hierarchies: all those whose clusters are all vertices. The dynamic programs of the full
trellis (Alg. 1, Prop. 1-2, Sec. 2.4) run unchanged on this DAG and give ``log Z``, the MAP
hierarchy and cluster marginals over the realised hierarchies only, so ``log Z`` is a lower
bound of the full trellis's and the MAP a lower bound of the exact MAP.

Clusters are packed bit sets (``uint64`` words), so ``N`` is not limited to 62; features are
computed with ``energy.subset_features`` on the vertices' membership rows only (no ``2**N``
tables). The DP is one jitted program over the splits with ``jax.ops.segment_*`` reductions
grouped by parent: sweep ``k = 2 .. N`` commits the vertices of size ``k`` (inside pass),
sweeps ``k = N-1 .. 1`` the outside values. Vertices and splits are padded to powers of two
so problems of similar size share one compilation.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._internal.dtypes import float_dtype as _float
from ..tree import Tree
from .energies import Energy
from .exact import tree_from_splits
from .sampling import SampledTrees

__all__ = ["SparseSolution", "sparse_solve", "seed_trees_from_beam", "double_factorial"]


def double_factorial(k: int) -> int:
    """``k!!`` as an exact Python int (``1`` for ``k <= 0``); ``(2N-3)!!`` trees over N leaves."""
    out = 1
    while k > 1:
        out *= k
        k -= 2
    return out


class SparseSolution(NamedTuple):
    """Output of `sparse_solve` over the hierarchies realised by the sparse trellis.

    Fields:
      log_z: log partition function over the realised hierarchies.
      map_log_phi: ``log phi`` of the best realised hierarchy.
      map_tree: that hierarchy as a `jaxhc.Tree`.
      log_marginals: ``[V]`` ``log P(S in H)`` of every vertex ``S`` under ``phi / Z`` restricted
        to the realised hierarchies, aligned with ``clusters`` (NaN when ``log_z = -inf``).
      clusters: ``[V]`` bitmask of every vertex (leaf ``i`` is bit ``i``), sorted by size then
        value: ``int64`` for ``N <= 62``, Python ints (``object``) above.
      log_z_table: ``[V]`` ``log Z(S)`` of the sub-trellis under every vertex.
      num_trees: number of hierarchies the sparse trellis realises (exact Python int).
      sparsity_index: ``num_trees / (2N-3)!!`` (a float in ``(0, 1]``).
      num_splits: number of edges (splits) of the sparse trellis.
      n_leaves: ``N``.
    """

    log_z: Any
    map_log_phi: Any
    map_tree: Tree
    log_marginals: Any
    clusters: Any
    log_z_table: Any
    num_trees: int
    sparsity_index: float
    num_splits: int
    n_leaves: int

    def log_marginal(self, cluster) -> float:
        """``log P(cluster in H)``; ``cluster`` is a bitmask (int) or an iterable of leaf ids.
        ``-inf`` for a cluster that is not a vertex."""
        mask = int(cluster) if isinstance(cluster, (int, np.integer)) else sum(1 << int(i) for i in cluster)
        for k, c in enumerate(self.clusters):
            if int(c) == mask:
                return float(self.log_marginals[k])
        return -np.inf


# ------------------------------------------------------------------------------------------
# building the sparse trellis on the host
# ------------------------------------------------------------------------------------------
def _pack(rows: np.ndarray) -> np.ndarray:
    """Boolean rows ``[V, N]`` -> ``uint64 [V, W]`` (element ``64 w + b`` is bit ``b`` of word ``w``)."""
    V, N = rows.shape
    W = max(1, -(-N // 64))
    by = np.packbits(rows, axis=1, bitorder="little")
    by = np.pad(by, ((0, 0), (0, 8 * W - by.shape[1])))
    return np.ascontiguousarray(by).view("<u8").reshape(V, W)


def _void(words: np.ndarray) -> np.ndarray:
    words = np.ascontiguousarray(words)
    return words.view(np.dtype((np.void, words.dtype.itemsize * words.shape[1]))).ravel()


def _as_seed_list(seed_trees):
    if isinstance(seed_trees, SampledTrees):
        return seed_trees.trees()
    if isinstance(seed_trees, Tree):
        return [seed_trees]
    from .search import SearchResult

    if isinstance(seed_trees, SearchResult):
        return list(seed_trees.trees)
    try:
        seeds = list(seed_trees)
    except TypeError:
        raise ValueError(
            f"seed_trees must be a Tree, a sequence of Trees or SampledTrees, got {type(seed_trees).__name__}"
        )
    return seeds


def _vertices(seeds, n):
    """Distinct clusters of the seeds as boolean rows, sorted by (size, bitmask bytes)."""
    rows = []
    for k, t in enumerate(seeds):
        if not isinstance(t, Tree):
            raise ValueError(f"seed_trees[{k}] must be a jaxhc.Tree, got {type(t).__name__}")
        if t.n_leaves != n:
            raise ValueError(f"seed_trees[{k}] has {t.n_leaves} leaves, the problem has N={n}")
        try:
            t.validate()
        except ValueError as e:
            raise ValueError(f"seed_trees[{k}] is not a valid tree: {e}") from None
        rows.append(t.leaf_sets())  # dense [2N-1, N]: a trellis problem has N <= ~24 leaves
    rows = np.concatenate(rows, 0)
    words = _pack(rows)
    _, first = np.unique(_void(words), return_index=True)
    rows = rows[first]
    sizes = rows.sum(1)
    order = np.lexsort((np.arange(len(rows)), sizes))
    return rows[order]


def _splits(rows: np.ndarray):
    """All splits ``(parent, left, right)`` (vertex indices) with ``left`` holding the lowest
    element of ``parent`` and ``left``, ``right`` both vertices."""
    V, N = rows.shape
    words = _pack(rows)
    keys = _void(words)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    sizes = rows.sum(1)
    low = np.argmax(rows, axis=1)
    out_p, out_l, out_r = [], [], []
    for e in np.unique(low):
        grp = np.flatnonzero(low == e)  # L subset of S containing low(S) => low(L) = low(S)
        big = grp[sizes[grp] >= 2]
        if big.size == 0:
            continue
        wg = words[grp]
        step = max(1, (1 << 22) // max(1, grp.size * words.shape[1]))
        for a in range(0, big.size, step):
            S = big[a : a + step]
            ws = words[S]
            sub = np.all((wg[None, :, :] & ~ws[:, None, :]) == 0, axis=2)  # [s, g]: L subset of S
            sub &= sizes[grp][None, :] < sizes[S][:, None]
            si, li = np.nonzero(sub)
            if si.size == 0:
                continue
            P, L = S[si], grp[li]
            R_words = words[P] ^ words[L]
            pos = np.searchsorted(sorted_keys, _void(R_words))
            pos = np.minimum(pos, V - 1)
            hit = sorted_keys[pos] == _void(R_words)
            out_p.append(P[hit])
            out_l.append(L[hit])
            out_r.append(order[pos[hit]])
    if not out_p:
        z = np.zeros(0, np.int64)
        return z, z, z
    return np.concatenate(out_p), np.concatenate(out_l), np.concatenate(out_r)


def _count_trees(V, sizes, sp, sl, sr) -> list:
    """Exact number of hierarchies under every vertex (Python ints), by size order."""
    cnt = [1 if s == 1 else 0 for s in sizes.tolist()]
    order = np.argsort(sizes[sp], kind="stable")
    for p, l, r in zip(sp[order].tolist(), sl[order].tolist(), sr[order].tolist()):
        cnt[p] += cnt[l] * cnt[r]
    return cnt


def _bucket(x: int, minimum: int) -> int:
    """Padded size: the next power of two, at least ``minimum`` (fewer recompilations)."""
    return max(minimum, 1 << int(x - 1).bit_length())


# ------------------------------------------------------------------------------------------
# the DP on the device
# ------------------------------------------------------------------------------------------
def _seg_logsumexp(x, seg, num):
    mx = jax.ops.segment_max(x, seg, num_segments=num)
    mx_safe = jnp.where(jnp.isfinite(mx), mx, 0.0)
    s = jax.ops.segment_sum(jnp.exp(x - mx_safe[seg]), seg, num_segments=num)
    return jnp.log(s) + mx_safe


@partial(jax.jit, static_argnames=("n",))
def _sparse_dp(energy, leaves, masks, sizes, sp, sl, sr, split_ok, root, n):
    """Inside (log Z, MAP with backpointers) and outside passes over the sparse DAG.

    ``masks [Vp, N]`` vertex memberships (padding rows: size 0), ``sp, sl, sr [Ep]`` split
    vertex indices (padding splits: ``split_ok`` False).
    """
    Vp = masks.shape[0]
    feats = energy.subset_features(leaves, masks)
    take = lambda idx: jax.tree_util.tree_map(lambda x: jnp.take(x, idx, axis=0), feats)
    lp = energy.log_psi(take(sp), take(sl), take(sr))
    lp = jnp.where(split_ok, lp, -jnp.inf)
    lp = jnp.where(jnp.isnan(lp), -jnp.inf, lp)
    dtype = lp.dtype
    init = jnp.where(sizes == 1, 0.0, -jnp.inf).astype(dtype)

    def inside(k, carry):
        log_z, best = carry
        z = _seg_logsumexp(lp + log_z[sl] + log_z[sr], sp, Vp)
        m = jax.ops.segment_max(lp + best[sl] + best[sr], sp, num_segments=Vp)
        at = sizes == k
        return jnp.where(at, z, log_z), jnp.where(at, m, best)

    log_z, best = jax.lax.fori_loop(2, n + 1, inside, (init, init))
    m = lp + best[sl] + best[sr]
    E = sp.shape[0]
    is_arg = (m == best[sp]) & split_ok
    arg = jax.ops.segment_min(jnp.where(is_arg, jnp.arange(E), E), sp, num_segments=Vp)
    bp = jnp.where(arg < E, sl[jnp.minimum(arg, E - 1)], -1)

    # outside: log O(C) = logsumexp over splits (P, C, D) of log O(P) + log psi + log Z(D)
    child = jnp.concatenate([sl, sr])
    par = jnp.concatenate([sp, sp])
    sib = jnp.concatenate([sr, sl])
    lp2 = jnp.concatenate([lp, lp])
    out0 = jnp.full((Vp,), -jnp.inf, dtype).at[root].set(0.0)

    def outside(t, log_o):
        k = n - 1 - t
        o = _seg_logsumexp(log_o[par] + lp2 + log_z[sib], child, Vp)
        return jnp.where(sizes == k, o, log_o)

    log_o = jax.lax.fori_loop(0, n - 1, outside, out0)
    log_m = log_o + log_z - log_z[root]
    log_m = jnp.where(log_z[root] == -jnp.inf, -jnp.inf, log_m)  # Z = 0: no cluster is possible
    return log_z, best, bp, log_m


def sparse_solve(energy: Energy, leaves, seed_trees) -> SparseSolution:
    """Partition function, MAP hierarchy and cluster marginals over a sparse trellis.

    Args:
      energy: a `jaxhc.trellis.Energy`.
      leaves: the problem's data, one row per element (``N`` elements, any ``N``).
      seed_trees: hierarchies over the ``N`` leaves whose clusters become the trellis
        vertices: a sequence of `jaxhc.Tree`, one `Tree`, a `SampledTrees` (from
        `jaxhc.trellis.sample`) or a `SearchResult` (its final beam).

    Vertices are padded to a power of two (at least 128) and splits to a power of two (at
    least 1024) with inert entries (a size-0 vertex, splits of potential ``-inf``), so
    problems of similar size reuse one compilation.

    Returns:
      `SparseSolution` (Sec. 3 of the trellis paper; the DPs of Alg. 1, Prop. 2 and Sec. 2.4
      restricted to the sparse trellis). ``log_z`` and ``map_log_phi`` are lower bounds of the
      full trellis's; with every hierarchy seeded they are equal.
    """
    if not isinstance(energy, Energy):
        raise TypeError(f"energy must be a jaxhc.trellis Energy, got {type(energy).__name__}")
    arr = energy.validate_leaves(leaves)
    n = energy.n_elements(arr)
    seeds = _as_seed_list(seed_trees)
    if len(seeds) == 0:
        raise ValueError("seed_trees must hold at least one tree")
    rows = _vertices(seeds, n)
    V = rows.shape[0]
    sizes = rows.sum(1).astype(np.int64)
    if n <= 62:
        clusters = (rows.astype(np.int64) << np.arange(n, dtype=np.int64)).sum(1)
    else:
        clusters = np.array(
            [int.from_bytes(np.packbits(r, bitorder="little").tobytes(), "little") for r in rows], dtype=object
        )
    sp, sl, sr = _splits(rows)
    E = len(sp)
    counts = _count_trees(V, sizes, sp, sl, sr)
    num_trees = counts[V - 1]
    total = double_factorial(2 * n - 3)
    if n == 1:
        t = Tree(np.zeros((0, 2), np.int64))
        z = jnp.zeros((), _float())
        return SparseSolution(z, z, t, jnp.zeros((1,), _float()), clusters, jnp.zeros((1,), _float()), 1, 1.0, 0, 1)

    Vp, Ep = _bucket(V + 1, 128), _bucket(max(E, 1), 1024)
    dt = _float()
    masks = np.zeros((Vp, n), np.float64)
    masks[:V] = rows
    sizes_p = np.zeros(Vp, np.int64)
    sizes_p[:V] = sizes
    pad = Vp - 1  # a padding vertex (size 0, never committed)
    sp_p, sl_p, sr_p = (np.full(Ep, pad, np.int64) for _ in range(3))
    sp_p[:E], sl_p[:E], sr_p[:E] = sp, sl, sr
    ok = np.zeros(Ep, bool)
    ok[:E] = True
    log_z, best, bp, log_m = _sparse_dp(
        energy,
        jnp.asarray(arr, dt),
        jnp.asarray(masks, dt),
        jnp.asarray(sizes_p, jnp.int32),
        jnp.asarray(sp_p, jnp.int32),
        jnp.asarray(sl_p, jnp.int32),
        jnp.asarray(sr_p, jnp.int32),
        jnp.asarray(ok),
        V - 1,
        n,
    )
    root = V - 1
    bp_h = np.asarray(bp)
    ints = [int(c) for c in clusters]
    index = {m: k for k, m in enumerate(ints)}
    splits, queue = [], [root]
    while queue:
        v = queue.pop(0)
        if sizes[v] == 1:
            continue
        lv = int(bp_h[v])
        rv = index[ints[v] ^ ints[lv]]
        splits.append((ints[v], ints[lv], ints[rv]))
        queue.extend([lv, rv])
    tree = tree_from_splits(splits, n)
    return SparseSolution(
        log_z[root],
        best[root],
        tree,
        log_m[:V],
        clusters,
        log_z[:V],
        int(num_trees),
        num_trees / total,
        E,
        n,
    )


def seed_trees_from_beam(energy: Energy, leaves, beam_size: int) -> list:
    """The final beam of `jaxhc.trellis.beam` (up to ``beam_size`` distinct hierarchies) as
    seeds for `sparse_solve` (the "beam search trellis" of Sec. 3.1 of the trellis paper)."""
    from .search import beam

    return list(beam(energy, leaves, beam_size).trees)
