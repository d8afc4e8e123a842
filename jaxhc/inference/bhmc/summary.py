"""A posterior summary of BHMC's samples: per-level co-clustering (posterior similarity)
matrices over the kept sweeps and, per level, the partition that minimises an expected loss,
nested across levels (`posterior_summary`, `BHMCPosterior`).

The loss: the variation of information, through the lower bound on its expectation that the
co-clustering matrix ``P`` gives (Wade & Ghahramani 2018, Eq. 9; `expected_vi_bound`), as
``mcclust``'s ``minVI`` uses it. BHMC's posterior over the nodes of a level is diffuse: the
data enter only through the components, whose weights the nodes share, so a group of points
is spread over many nodes that differ little (on 3 x 2 groups of 25 points in d = 4, two
points of one subgroup share their leaf in ~20% of the sweeps and points of different
subgroups in ~2%). Binder's loss (equal costs; `expected_binder_loss`) puts two points
together only when ``p_ij > 1/2`` on balance, so there it returns near-singletons (150
clusters at the leaves); the VI bound weighs the contrast and returns the six subgroups
(Wade & Ghahramani show Binder's loss overestimating the number of clusters in the same way).
Binder's loss stays available (``loss="binder"``).

Candidates at level ``l`` (top-down): every distinct sampled partition of that level met with
(intersected with) the partition chosen at level ``l - 1``, and every cut of the average-linkage
tree of ``1 - P_l`` built within the level-``l - 1`` clusters (pairs in different clusters at
distance 2, so those merges come last and are never used); all cuts of that tree are scored in
one ``O(N^2)`` pass over its merges. Every candidate refines the level above, so the answer is
nested by construction.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ...tree import ParentTree

__all__ = [
    "BHMCPosterior",
    "coclustering",
    "consensus_partition",
    "expected_binder_loss",
    "expected_vi_bound",
    "level_expected_loss",
    "posterior_summary",
    "summarise_chains",
    "weight_similarity",
    "tree_from_level_labels",
]


class BHMCPosterior(NamedTuple):
    """BHMC's posterior summary (`posterior_summary`).

    Attributes:
      level_labels: int ``[N, L]`` consensus partition per level (column ``l - 1`` is level
        ``l``, numbered ``0..`` by first appearance); level ``l + 1`` refines level ``l``.
      labels: int ``[N]`` consensus partition of the components.
      tree: `ParentTree` of ``level_labels`` (leaves ``0..N-1`` under their level-``L``
        node; ``heights`` = depth, points at ``L + 1``), as `state_to_tree` builds it.
      psm: float ``[L, N, N]`` per-level co-clustering: the fraction of kept sweeps in which
        points ``i`` and ``j`` share their level-``l`` node.
      component_psm: float ``[N, N]`` the same for the components.
      expected_loss: float ``[L]`` expected loss of each level's consensus (the VI bound in
        bits, or Binder's loss per pair; ``0``: every sample agrees with it).
      num_samples: kept sweeps summarised (over the chains used).
      chains: int ``[C]`` the chains whose sweeps were summarised (all of them: no chain is
        dropped).
      weight_similarity: float ``[L, N, N]`` per-level posterior mean cosine of the component
        weights of the nodes of two points (1 when they share the node), when known.
      similarity: the matrix the consensus was cut from (``"nodes"``: ``psm``; ``"weights"``).
      chain_distance: float ``[C]`` (several chains) each chain's mean absolute difference
        between its co-clustering and the other chains' (over pairs and levels): near 0 when
        the chains sample the same posterior; `bhmc` warns above 0.1.
      loss: the loss the levels' consensus minimised (``"vi"`` or ``"binder"``;
        `level_expected_loss` scores any nested partition by it).
    """

    level_labels: np.ndarray
    labels: np.ndarray
    tree: ParentTree
    psm: np.ndarray
    component_psm: np.ndarray
    expected_loss: np.ndarray
    num_samples: int
    chains: np.ndarray
    weight_similarity: Optional[np.ndarray] = None
    similarity: str = "nodes"
    chain_distance: Optional[np.ndarray] = None
    loss: str = "vi"


# ------------------------------------------------------------------------------------------
# co-clustering
# ------------------------------------------------------------------------------------------
def _canonical(labels):
    """Rows of ``labels [S, N]`` renumbered by first appearance (equal partitions, equal rows)."""
    labels = np.asarray(labels)
    out = np.empty(labels.shape, np.int64)
    for s, row in enumerate(labels):
        _, first, inv = np.unique(row, return_index=True, return_inverse=True)
        rank = np.empty(first.size, np.int64)
        rank[np.argsort(first)] = np.arange(first.size)
        out[s] = rank[inv.reshape(-1)]
    return out


def _distinct(labels):
    """``(partitions [U, N], counts [U])``: the distinct partitions among the rows, most
    frequent first (ties: first seen first)."""
    can = _canonical(np.atleast_2d(labels))
    uniq, first, counts = np.unique(can, axis=0, return_index=True, return_counts=True)
    order = np.lexsort((first, -counts))
    return uniq[order], counts[order]


def _onehot(c):
    k = int(c.max()) + 1
    y = np.zeros((c.shape[0], k))
    y[np.arange(c.shape[0]), c] = 1.0
    return y


def coclustering(labels, counts=None) -> np.ndarray:
    """The co-clustering (posterior similarity) matrix ``[N, N]`` of partitions ``labels
    [S, N]``: entry ``(i, j)`` is the (``counts``-weighted) fraction of rows with ``labels[s,
    i] == labels[s, j]``."""
    labels = np.atleast_2d(np.asarray(labels))
    if counts is None:
        labels, counts = _distinct(labels)
    counts = np.asarray(counts, float)
    N = labels.shape[1]
    P = np.zeros((N, N))
    for c, w in zip(labels, counts):
        y = _onehot(np.asarray(c, np.int64))
        P += w * (y @ y.T)
    return P / counts.sum()


def expected_binder_loss(labels, psm) -> float:
    """Expected Binder loss (equal costs) of partition ``labels [N]`` under co-clustering
    ``psm``, per pair: ``sum_{i<j} |1(c_i = c_j) - p_ij| / (N (N - 1) / 2)`` (``0`` for
    ``N = 1``)."""
    P = np.asarray(psm, float)
    N = P.shape[0]
    if N < 2:
        return 0.0
    c = np.asarray(labels, np.int64)
    same = c[:, None] == c[None, :]
    return float((np.abs(same - P).sum() - np.abs(1.0 - np.diag(P)).sum()) / (N * (N - 1)))


def expected_vi_bound(labels, psm) -> float:
    """The lower bound on the expected variation of information (bits) of partition ``labels
    [N]`` under co-clustering ``psm`` (Wade & Ghahramani 2018, Eq. 9): ``mean_i [log2 |c_i| -
    2 log2 sum_{j in c_i} p_ij + log2 sum_j p_ij]`` (``0``: every sample agrees with it)."""
    P = np.asarray(psm, float)
    _, c = np.unique(np.asarray(labels), return_inverse=True)
    y = _onehot(c.reshape(-1))
    size = y.sum(0)[c.reshape(-1)]
    s = np.sum((P @ y) * y, 1)
    return float(np.mean(np.log2(size) - 2.0 * np.log2(s) + np.log2(P.sum(1))))


# ------------------------------------------------------------------------------------------
# consensus
# ------------------------------------------------------------------------------------------
def _meet(a, b):
    """The coarsest common refinement of partitions ``a`` and ``b`` ``[N]``."""
    _, m = np.unique(np.stack([np.asarray(a), np.asarray(b)], 1), axis=0, return_inverse=True)
    return m.reshape(-1)


def _linkage_cut(P, parent, loss):
    """The best cut (by ``loss``) of the average-linkage tree of ``1 - P`` built within the
    clusters of ``parent``: ``(loss value, labels)``. Every cut is scored in one pass over the
    merges, ``O(N^2)`` in all: a merge of ``A`` and ``B`` adds ``sum_{A x B} (1 - 2 p_ij)`` to
    Binder's loss, and ``sum_{j in B} p_ij`` to the within-cluster sums of the VI bound for
    ``i`` in ``A`` (and the other way round)."""
    from scipy.cluster.hierarchy import linkage
    from scipy.spatial.distance import squareform

    N = P.shape[0]
    D = 1.0 - P
    D[parent[:, None] != parent[None, :]] = 2.0
    np.fill_diagonal(D, 0.0)
    Z = linkage(squareform(np.clip(D, 0.0, 2.0), checks=False), method="average")
    members = [[i] for i in range(N)] + [None] * (N - 1)
    if loss == "binder":
        base = (P.sum() - np.trace(P)) / 2.0
        cur = base
    else:
        size = np.ones(N)
        s = np.diag(P).copy()
        terms = np.log2(size) - 2.0 * np.log2(s) + np.log2(P.sum(1))
        tot = float(terms.sum())
        cur = tot / N
    best_val, best_t = cur, 0  # t merges applied; 0: every point alone
    for t in range(N - 1):
        if Z[t, 2] > 1.0 + 1e-12:  # a merge across the level above: no longer a refinement
            break
        a, b = int(Z[t, 0]), int(Z[t, 1])
        A, Bm = members[a], members[b]
        block = P[np.ix_(A, Bm)]
        if loss == "binder":
            cur += float(len(A) * len(Bm) - 2.0 * block.sum())
        else:
            AB = A + Bm
            tot -= float(terms[AB].sum())
            s[A] += block.sum(1)
            s[Bm] += block.sum(0)
            size[AB] = len(AB)
            terms[AB] = np.log2(size[AB]) - 2.0 * np.log2(s[AB]) + np.log2(P[AB].sum(1))
            tot += float(terms[AB].sum())
            cur = tot / N
        members[N + t] = A + Bm
        members[a] = members[b] = None
        if cur < best_val - 1e-12:
            best_val, best_t = cur, t + 1
    lab = np.arange(N)
    for t in range(best_t):  # replay the chosen merges
        a, b = int(Z[t, 0]), int(Z[t, 1])
        lab[(lab == a) | (lab == b)] = N + t
    return best_val, lab


def _score(c, P, loss):
    """``loss`` of partition ``c``: the VI bound, or Binder's loss summed over pairs."""
    if loss == "binder":
        return expected_binder_loss(c, P) * (P.shape[0] * (P.shape[0] - 1) / 2.0)
    return expected_vi_bound(c, P)


def consensus_partition(samples, psm=None, parent=None, loss: str = "vi"):
    """The partition minimising the expected loss (``"vi"``: the lower bound on the expected
    variation of information, `expected_vi_bound`; ``"binder"``: Binder's) among the
    candidates: the distinct rows of ``samples [S, N]`` met with ``parent``, and the cuts of
    the average-linkage tree of ``1 - psm`` within ``parent``'s clusters. It refines ``parent
    [N]`` when given.

    Returns ``(labels [N] numbered by first appearance, expected loss)`` (VI bound in bits, or
    Binder's loss per pair)."""
    if loss not in ("vi", "binder"):
        raise ValueError(f"loss must be 'vi' or 'binder', got {loss!r}")
    uniq, counts = _distinct(samples)
    P = coclustering(uniq, counts) if psm is None else np.asarray(psm, float)
    N = P.shape[0]
    parent = np.zeros(N, np.int64) if parent is None else np.asarray(parent, np.int64)
    if N < 2:
        return np.zeros(N, np.int64), 0.0
    best_val, best = np.inf, None
    seen = set()
    for c in uniq:
        m = _meet(parent, c)
        key = _canonical(m[None])[0].tobytes()
        if key in seen:
            continue
        seen.add(key)
        v = _score(m, P, loss)
        if v < best_val - 1e-12:
            best_val, best = v, m
    v, lab = _linkage_cut(P, parent, loss)
    if v < best_val - 1e-12:
        best_val, best = v, lab
    if loss == "binder":
        best_val = best_val / (N * (N - 1) / 2.0)
    return _canonical(best[None])[0], float(best_val)


def tree_from_level_labels(level_labels):
    """The `ParentTree` of a nested partition ``level_labels [N, L]``: leaves ``0..N-1`` under
    their level-``L`` node, then the root and the nodes level by level (``heights``: depth,
    points at ``L + 1``), as `state_to_tree` numbers a state's nodes."""
    lab = np.asarray(level_labels).reshape(len(level_labels), -1)
    N, L = lab.shape
    ids = [np.zeros(N, np.int64)]  # node of every point at each level, numbered from N
    parents = [-1]
    heights = [0.0]
    nxt = N + 1
    for l in range(1, L + 1):
        _, first, inv = np.unique(lab[:, :l], axis=0, return_index=True, return_inverse=True)
        inv = inv.reshape(-1)
        order = np.argsort(first)  # nodes in order of first appearance
        rank = np.empty(order.size, np.int64)
        rank[order] = np.arange(order.size)
        node = nxt + rank[inv]
        par = np.empty(order.size, np.int64)
        par[rank[inv]] = ids[-1] if l > 1 else N
        parents.extend(par.tolist())
        heights.extend([float(l)] * order.size)
        ids.append(node)
        nxt += order.size
    ids[0] = np.full(N, N)
    parent = np.concatenate([ids[-1], np.asarray(parents, np.int64)])
    return ParentTree(parent, N, np.concatenate([np.full(N, L + 1.0), np.asarray(heights)]))


def posterior_summary(
    paths, components, chains=None, loss=None, weight_similarity=None, similarity: str = "nodes"
) -> BHMCPosterior:
    """The posterior summary of sampled states (module docstring): per-level co-clustering,
    the nested consensus partitions top-down, the components' consensus and the tree.

    Args:
      paths: int ``[S, N, L + 1]`` node slots of the kept sweeps (column 0 the root).
      components: int ``[S, N]`` their component slots.
      chains: int ``[C]`` the chains they come from (recorded only).
      loss: ``"vi"`` or ``"binder"`` (`consensus_partition`) for the levels; default ``"vi"``
        for ``similarity="nodes"``, ``"binder"`` for ``"weights"`` (the components' consensus
        always uses ``"vi"``).
      weight_similarity: float ``[L, N, N]`` the posterior mean weight similarity of the
        pairs at every level (`BHMCPosterior.weight_similarity`), when known.
      similarity: the matrix the consensus is cut from: ``"nodes"`` (co-clustering) or
        ``"weights"`` (needs ``weight_similarity``).
    """
    paths = np.asarray(paths)
    comps = np.asarray(components)
    S, N, L1 = paths.shape
    L = L1 - 1
    if similarity not in ("nodes", "weights") or (similarity == "weights" and weight_similarity is None):
        raise ValueError("similarity must be 'nodes', or 'weights' with weight_similarity given")
    if loss is None:
        loss = "vi" if similarity == "nodes" else "binder"
    psm = np.zeros((L, N, N))
    exp_loss = np.zeros(L)
    out = np.zeros((N, L), np.int64)
    parent = np.zeros(N, np.int64)
    for l in range(1, L + 1):
        uniq, counts = _distinct(paths[:, :, l])
        psm[l - 1] = coclustering(uniq, counts)
        sim = psm[l - 1] if similarity == "nodes" else np.clip(weight_similarity[l - 1], 0.0, 1.0)
        parent, exp_loss[l - 1] = consensus_partition(uniq, sim, parent, loss)
        out[:, l - 1] = parent
    uniq, counts = _distinct(comps)
    cpsm = coclustering(uniq, counts)
    labels, _ = consensus_partition(uniq, cpsm, None, "vi")
    return BHMCPosterior(
        out,
        labels,
        tree_from_level_labels(out),
        psm,
        cpsm,
        exp_loss,
        int(S),
        np.asarray([] if chains is None else chains, np.int64),
        None if weight_similarity is None else np.asarray(weight_similarity),
        similarity,
        loss=loss,
    )


def level_expected_loss(level_labels, posterior: BHMCPosterior) -> np.ndarray:
    """The posterior expected loss ``[L]`` of every level of a nested partition
    ``level_labels [N, L]`` (column ``l - 1`` is level ``l``; for example Ward's tree cut, or
    a start), by the loss and the similarity ``posterior``'s consensus minimised
    (`BHMCPosterior.loss`, `BHMCPosterior.similarity`), in the units of
    `BHMCPosterior.expected_loss` (so ``level_expected_loss(posterior.level_labels,
    posterior)`` equals it). Lower is better: a partition whose levels score below the
    consensus's is one the posterior prefers and the consensus's candidates missed."""
    lab = np.asarray(level_labels)
    L = posterior.psm.shape[0]
    N = posterior.psm.shape[1]
    if lab.ndim != 2 or lab.shape != (N, L):
        raise ValueError(
            f"level_labels must be [N, L] = [{N}, {L}] (the posterior's points and levels), got shape {lab.shape}"
        )
    if posterior.similarity == "weights":
        if posterior.weight_similarity is None:
            raise ValueError("posterior has similarity='weights' but no weight_similarity")
        sims = np.clip(np.asarray(posterior.weight_similarity, float), 0.0, 1.0)
    else:
        sims = np.asarray(posterior.psm, float)
    f = expected_binder_loss if posterior.loss == "binder" else expected_vi_bound
    return np.array([f(lab[:, l], sims[l]) for l in range(L)])


@jax.jit
def weight_similarity(path, logb):
    """``sum over chains`` of the per-level weight similarity of every pair of points ``[L, N,
    N]``: the cosine ``<beta_a, beta_b> / (|beta_a| |beta_b|)`` of the component weights of
    their nodes ``a, b`` at that level (1 in one node; ``path [C, N, L + 1]``, ``logb [C, M,
    K + 1]``)."""

    def one(p, lb):
        w = jnp.exp(lb[:, :-1])
        w = w / jnp.maximum(jnp.sqrt(jnp.sum(w * w, 1, keepdims=True)), 1e-300)
        G = w @ w.T
        return jnp.stack([G[p[:, l]][:, p[:, l]] for l in range(1, p.shape[1])])

    return jnp.sum(jax.vmap(one)(path, logb), 0)


def summarise_chains(paths, comps, wsim, similarity):
    """`posterior_summary` of every chain's kept sweeps (``paths [C, S, N, L + 1]``,
    ``comps [C, S, N]``, mean weight similarity ``wsim [L, N, N]``), with each chain's
    distance to the others (`BHMCPosterior.chain_distance`); a warning when chains disagree."""
    C, S = paths.shape[:2]
    post = posterior_summary(
        paths.reshape((C * S,) + paths.shape[2:]),
        comps.reshape(C * S, -1),
        np.arange(C),
        weight_similarity=wsim,
        similarity=similarity,
    )
    if C > 1:
        L = paths.shape[3] - 1
        per = np.stack([[coclustering(paths[c, :, :, l]) for l in range(1, L + 1)] for c in range(C)])
        total = per.sum(0)
        dist = np.array([np.mean(np.abs(per[c] - (total - per[c]) / (C - 1))) for c in range(C)])
        post = post._replace(chain_distance=dist)
        if dist.max() > 0.1:
            import warnings

            warnings.warn(
                f"bhmc: the chains disagree (mean |co-clustering difference| to the other chains up to "
                f"{dist.max():.2f}, chain {int(dist.argmax())}): they have not mixed; the summary pools "
                f"them all. Run more sweeps (num_warmup, num_samples).",
                UserWarning,
                stacklevel=3,
            )
    return post
