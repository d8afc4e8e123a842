"""Initial BHMC states: prior draws (`prior_sample_state`), Algorithm 2's start (`bhmc_init`)
and starts cut from a hierarchy (`tree_init_state`, `state_from_level_labels`)."""

from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from ..._internal.buckets import pad_rows
from ...models.ncrp_hdp import (
    dp_child_log,
    normal_diag_logpdf,
)
from ...tree import Tree
from .moves import point_update
from .state import NEG_INF, BHMCConfig, BHMCState, point_mask, row_permutation
from .updates import update_theta, update_weights, update_weights_exact

__all__ = [
    "auto_starts",
    "bhmc_init",
    "level_sizes_from_gaps",
    "prior_sample_state",
    "start_level_labels",
    "state_from_level_labels",
    "tree_init_state",
]


# ------------------------------------------------------------------------------------------
# initial states
# ------------------------------------------------------------------------------------------
def _empty_state(N, D, L, M, K, hyper, dtype):
    alpha, gamma0, gamma, sigma2 = (jnp.asarray(h, dtype) for h in hyper)
    logb = jnp.full((M, K + 1), NEG_INF, dtype).at[:, K].set(0.0)
    return BHMCState(
        path=jnp.zeros((N, L + 1), jnp.int32),
        c=jnp.zeros(N, jnp.int32),
        parent=jnp.full(M, -1, jnp.int32),
        level=jnp.zeros(M, jnp.int32),
        count=jnp.zeros(M, jnp.int32),
        logb=logb,
        theta=jnp.zeros((K, D), dtype),
        alpha=alpha,
        gamma0=gamma0,
        gamma=gamma,
        sigma2=sigma2,
        overflow=jnp.int32(0),
    )


@functools.partial(jax.jit, static_argnames=("N", "D", "L", "M", "K"))
def _prior_sample(key, hyper, cfg, N, D, L, M, K):
    st = _empty_state(N, D, L, M, K, hyper, cfg.mu0.dtype)
    x0 = jnp.zeros((N, D), cfg.mu0.dtype)

    def body(n, carry):
        s, X = carry
        s, x, _ = point_update(jax.random.fold_in(key, n), s, n, X[n], cfg, mode="prior")
        return s, X.at[n].set(x)

    return jax.lax.fori_loop(0, N, body, (st, x0))


def prior_sample_state(
    key,
    num_points: int,
    dim: int,
    depth: int,
    cfg: BHMCConfig,
    *,
    alpha=1.0,
    gamma0=1.0,
    gamma=1.0,
    sigma2=1.0,
    max_nodes: Optional[int] = None,
    max_components: Optional[int] = None,
):
    """An exact draw ``(state, X)`` from the BHMC prior by the generative process (points
    inserted one by one; the root starts with no component and components are made on
    demand, so there is no truncation). Compiled; ``vmap``-able over ``key``."""
    N, D, L = int(num_points), int(dim), int(depth)
    M = int(max_nodes) if max_nodes is not None else N * L + 1
    K = int(max_components) if max_components is not None else 4 * N + 16  # revealed, untaken atoms too
    return _prior_sample(key, (alpha, gamma0, gamma, sigma2), cfg, N, D, L, M, K)


def bhmc_init(
    key,
    X,
    depth: int,
    cfg: BHMCConfig,
    *,
    alpha=0.5,
    gamma0=1.0,
    gamma=0.5,
    sigma2=1.0,
    epsilon=1e-6,
    max_nodes: int = 1024,
    max_components: int = 128,
) -> BHMCState:
    """The initial state of Algorithm 2: the root's sticks broken until ``beta* < epsilon``
    (line 1), their ``theta_k`` at distinct random data points, every point on one path of ``depth`` nodes (each node's
    ``beta ~ DP(gamma, beta_parent)``), ``c_n`` by Eq. 2 among those components with the root's
    weights, then ``B``
    and ``theta`` updated once (Eq. 3-5)."""
    hyper = (alpha, gamma0, gamma, sigma2)
    return chain_init(key, X, None, depth, cfg, hyper, epsilon, max_nodes, max_components)


def chain_init(key, X, num_points, depth, cfg, hyper, epsilon, max_nodes, max_components):
    """`bhmc_init` on ``X`` whose first ``num_points`` rows are the data (``None``: all); the
    padding rows get path 0 and component 0 and are masked out (`state.point_mask`)."""
    X = jnp.asarray(X)
    L, M, K = int(depth), int(max_nodes), int(max_components)
    if M < L + 1:
        raise ValueError(f"max_nodes must be >= depth + 1 = {L + 1}, got {M}")
    npts = None if num_points is None else np.int32(num_points)
    st, n_sticks = _init_jit(key, X, hyper, cfg, np.asarray(epsilon, X.dtype), L, M, K, npts)
    n_sticks = int(n_sticks)
    if n_sticks > K:
        raise ValueError(
            f"the initial root stick needs {n_sticks} components until beta* < epsilon={epsilon}, "
            f"more than max_components={K}; raise max_components or epsilon"
        )
    return st


@functools.partial(jax.jit, static_argnames=("L", "M", "K"))
def _init_jit(key, X, hyper, cfg, epsilon, L, M, K, num_points=None):
    N, D = X.shape
    n = N if num_points is None else num_points
    mask = point_mask(N, num_points)
    f = X.dtype
    st = _empty_state(N, D, L, M, K, hyper, f)
    ks, kt, kb, kc, kB, kT = jax.random.split(key, 6)
    # line 1: GEM(gamma0) sticks until beta* < epsilon
    u = jax.random.beta(ks, 1.0, st.gamma0, (K,), f)
    log_rem = jnp.cumsum(jnp.log1p(-u))  # remaining after k + 1 sticks
    n_sticks = jnp.argmax(log_rem < jnp.log(epsilon)) + 1
    n_sticks = jnp.where(jnp.any(log_rem < jnp.log(epsilon)), n_sticks, K + 1)
    use = jnp.arange(K) < n_sticks
    log_prev = jnp.concatenate([jnp.zeros(1, f), log_rem[:-1]])
    root = jnp.where(use, log_prev + jnp.log(u), NEG_INF)
    star = log_rem[jnp.minimum(n_sticks, K) - 1]
    logb = st.logb.at[0].set(jnp.concatenate([root, star[None]]))
    # theta: the instantiated components start at distinct random points (a data-driven start;
    # theta_k ~ H would leave one component holding every point), the other slots at H draws
    kt1, kt2 = jax.random.split(kt)
    pick = row_permutation(kt1, N, num_points)[jnp.arange(K) % n]
    theta = jnp.where(
        (jnp.arange(K) < n_sticks)[:, None],
        X[pick],
        cfg.mu0 + jnp.sqrt(cfg.prior_var) * jax.random.normal(kt2, (K, D), f),
    )
    # one chain of nodes 0..L
    logb = jax.lax.fori_loop(
        1, L + 1, lambda l, lb: lb.at[l].set(dp_child_log(jax.random.fold_in(kb, l), lb[l - 1], st.gamma)), logb
    )
    parent = st.parent.at[1 : L + 1].set(jnp.arange(L, dtype=jnp.int32))
    level = st.level.at[1 : L + 1].set(jnp.arange(1, L + 1, dtype=jnp.int32))
    count = st.count.at[: L + 1].set(n)
    path = jnp.broadcast_to(jnp.arange(L + 1, dtype=jnp.int32), (N, L + 1))
    path = path if mask is None else jnp.where(mask[:, None], path, 0)
    st = st._replace(logb=logb, theta=theta, parent=parent, level=level, count=count, path=path)
    # c_n among the instantiated components by Eq. 2 with the root's weights (the chain's
    # leaf weights, drawn from the sparse HDP, would put nearly every point in one component);
    # Eq. 3-4 then give every chain node weight on all the components in use
    ll = normal_diag_logpdf(X[:, None, :], theta[None], st.sigma2)
    logits = logb[0, :K][None] + ll
    c = jax.random.categorical(kc, logits, axis=1).astype(jnp.int32)
    st = st._replace(c=c if mask is None else jnp.where(mask, c, 0))
    st = update_weights(kB, st, mask)
    st = update_theta(kT, st, X, cfg, mask=mask)
    return st, n_sticks


# ------------------------------------------------------------------------------------------
# starting from a tree
# ------------------------------------------------------------------------------------------
def _linkage_of(tree, X):
    """A scipy linkage matrix (heights ascending) for ``init``: Ward's on ``X``, or a binary
    `Tree`'s merges ranked by its heights."""
    from scipy.cluster.hierarchy import linkage

    if isinstance(tree, str):
        return linkage(X, method="ward")
    Z = np.asarray(tree.to_linkage(), float)
    return Z


def level_sizes_from_gaps(heights, depth: int, max_clusters: int):
    """Nodes per level for cutting a hierarchy to ``depth`` levels: the ``depth`` cluster
    counts ``k`` in ``2 .. max_clusters`` where the merge heights jump most, by the ratio
    ``h(k -> k - 1) / h(k + 1 -> k)`` of the merge that would go below ``k`` clusters to the
    one before (the same rule that reads a dendrogram by its longest branches), sorted
    ascending; when there are fewer candidates than levels the finest count repeats (a
    level whose nodes have one child each).

    Args:
      heights: the ``N - 1`` merge heights, ascending (a linkage matrix's third column).
      depth: number of levels ``L``.
      max_clusters: the largest count considered.
    """
    h = np.asarray(heights, float)
    n = h.size + 1
    kmax = int(min(max_clusters, n - 1))
    if kmax < 2:
        return [min(n, 2 if n > 1 else 1)] * depth if n > 1 else [1] * depth
    top = max(float(np.max(h)), 1e-300)
    lh = np.log(np.maximum(h, 1e-12 * top))
    ks = np.arange(2, kmax + 1)
    gap = lh[n - ks] - lh[n - ks - 1]
    order = ks[np.lexsort((ks, -gap))]  # largest jump first, smaller k on ties
    chosen = sorted(order[:depth].tolist())
    while len(chosen) < depth:
        chosen.append(chosen[-1])
    return chosen


def _check_sizes(level_sizes, L, N):
    sizes = [int(v) for v in level_sizes]
    if len(sizes) != L or any(v < 1 or v > N for v in sizes) or sizes != sorted(sizes):
        raise ValueError(f"init_levels must be {L} non-decreasing cluster counts in 1..N={N}, got {level_sizes!r}")
    return sizes


def _cap(N, L, K):
    return max(min(int(2 * np.sqrt(N)), K), L + 1)


def start_level_labels(X, depth: int, init="ward", level_sizes=None, max_components: int = 128):
    """The nested partition a start is cut from: ``(level_labels [N, L], level_sizes)``.

    ``init``: ``"ward"`` (Ward's linkage of ``X``), a binary `Tree` (cut at the gaps of its own
    merge heights), ``"bhc"`` (BHC's tree, `jaxhc.bhc` with ``NormalInverseWishart.from_data``,
    cut at the sizes Ward's gaps give: its heights are merge ranks, not distances), or an int
    array ``[N, L]`` of level labels (returned as it is). ``level_sizes``: clusters per level
    (default `level_sizes_from_gaps` with at most ``max(2 sqrt(N), L + 1)`` clusters)."""
    from scipy.cluster.hierarchy import cut_tree

    X = np.asarray(X, float)
    N = X.shape[0]
    L = int(depth)
    if not isinstance(init, (str, Tree)):
        lab = np.asarray(init)
        if lab.shape != (N, L) or lab.dtype.kind not in "iu":
            raise ValueError(f"a level-label start must be an int array of shape {(N, L)}, got {lab.shape}")
        return lab.astype(np.int64), [int(np.unique(lab[:, : l + 1], axis=0).shape[0]) for l in range(L)]
    if N == 1:
        return np.zeros((1, L), np.int64), [1] * L
    cap = _cap(N, L, int(max_components))
    if isinstance(init, str) and init == "bhc":
        from ...components import NormalInverseWishart
        from ..bhc.greedy import bhc

        Zw = _linkage_of("ward", X)
        Z = np.asarray(bhc(X, NormalInverseWishart.from_data(X)).tree.to_linkage(), float)
        sizes = level_sizes_from_gaps(Zw[:, 2], L, cap) if level_sizes is None else _check_sizes(level_sizes, L, N)
    else:
        Z = _linkage_of(init, X)
        sizes = level_sizes_from_gaps(Z[:, 2], L, cap) if level_sizes is None else _check_sizes(level_sizes, L, N)
    return np.asarray(cut_tree(Z, n_clusters=sizes), np.int64).reshape(N, L), sizes


def auto_starts(X, depth: int, num: int, level_sizes=None, max_components: int = 128):
    """``num`` different starts for ``num`` chains, as ``(name, level_labels [N, L])``, in
    turn (then again from the first): Ward's tree at its gap sizes (`level_sizes_from_gaps`,
    or ``level_sizes``); BHC's tree at the same sizes; Ward's tree at the gap sizes of one
    level fewer with the deepest level repeated (a pass-through level: every node has one
    child); Ward's tree at the gap sizes of one level more without the coarsest (a finer
    start); Ward's at one level fewer with the top level repeated. Chains that share a start
    differ by their keys. BHC's start is skipped for ``N > 2000`` (its cost is quadratic)."""
    X = np.asarray(X, float)
    N = X.shape[0]
    L = int(depth)
    first, sizes = start_level_labels(X, L, "ward", level_sizes, max_components)
    out = [("ward", first)]
    if num == 1 or N < 3:
        return (out * num)[:num]
    Z = _linkage_of("ward", X)
    cap = _cap(N, L, int(max_components))
    specs = [("bhc", "bhc", sizes)] if N <= 2000 else []
    if L >= 2:
        fewer = level_sizes_from_gaps(Z[:, 2], L - 1, cap)
        specs.append(("ward-repeat-bottom", "ward", fewer + fewer[-1:]))
    more = level_sizes_from_gaps(Z[:, 2], L + 1, cap)[1:]
    specs.append(("ward-finer", "ward", more))
    if L >= 2:
        specs.append(("ward-repeat-top", "ward", fewer[:1] + fewer))
    for name, kind, sz in specs:
        if len(out) >= num:
            break
        out.append((name, start_level_labels(X, L, kind, sz, max_components)[0]))
    return [out[i % len(out)] for i in range(num)]


def tree_init_state(
    X,
    depth: int,
    cfg: BHMCConfig,
    *,
    key,
    init="ward",
    level_sizes=None,
    alpha=1.0,
    gamma0=1.0,
    gamma=0.5,
    sigma2=None,
    max_nodes: int = 1024,
    max_components: int = 128,
    sample_hyper: bool = True,
):
    """A start for the sampler cut from a hierarchy: Ward's linkage of ``X`` (``init="ward"``),
    a binary `Tree` (e.g. ``jaxhc.bhc(...).tree``), ``"bhc"`` or level labels, cut at
    ``level_sizes`` clusters per level (`start_level_labels`), then `state_from_level_labels`.

    Returns ``(state, level_sizes)``."""
    X = np.asarray(X, float)
    labels, sizes = start_level_labels(X, depth, init, level_sizes, max_components)
    st = state_from_level_labels(
        X,
        labels,
        cfg,
        key=key,
        alpha=alpha,
        gamma0=gamma0,
        gamma=gamma,
        sigma2=sigma2,
        max_nodes=max_nodes,
        max_components=max_components,
        sample_hyper=sample_hyper,
    )
    return st, sizes


def state_from_level_labels(
    X,
    level_labels,
    cfg: BHMCConfig,
    *,
    key,
    components=None,
    alpha=1.0,
    gamma0=1.0,
    gamma=0.5,
    sigma2=None,
    max_nodes: int = 1024,
    max_components: int = 128,
    sample_hyper: bool = True,
) -> BHMCState:
    """The state whose paths are the nested partition ``level_labels`` (``[N, L]``; column
    ``l`` labels level ``l + 1``; a cluster at level ``l + 1`` must lie inside one at level
    ``l``), with components ``components`` (default: one per leaf-level cluster), ``theta``
    the components' means, ``sigma2`` (when not given) the pooled within-component variance
    per feature (below ``sigma2_max`` when it is sampled), then ``B`` and ``theta`` drawn from
    their conditionals (`update_weights_exact`, Eq. 5). Used for starts, and to score a known
    labelling by the model (e.g. the truth against the sampler's best state)."""
    hyper = (alpha, gamma0, gamma, sigma2)
    return labels_state(X, level_labels, cfg, key, components, hyper, max_nodes, max_components, sample_hyper)


def labels_state(X, level_labels, cfg, key, components, hyper, max_nodes, max_components, sample_hyper, size=None):
    """`state_from_level_labels` with the points padded to ``size`` rows (path 0, component 0;
    masked out of the refresh), built on the host: one compiled program per ``size``."""
    alpha, gamma0, gamma, sigma2 = hyper
    X = np.asarray(X, float)
    N, D = X.shape
    lab = np.asarray(level_labels).reshape(N, -1)
    L, M, K = lab.shape[1], int(max_nodes), int(max_components)
    path = np.zeros((N, L + 1), np.int64)
    parent = np.full(M, -1, np.int64)
    level = np.zeros(M, np.int64)
    nxt = 1
    for l in range(1, L + 1):
        _, inv = np.unique(lab[:, :l], axis=0, return_inverse=True)  # prefixes: nested by construction
        inv = inv.reshape(-1)
        ids = nxt + inv
        nxt += int(inv.max()) + 1
        if nxt > M:
            raise ValueError(
                f"the initial tree needs {nxt} node slots, more than max_nodes={M}; "
                f"pass a larger max_nodes or smaller init_levels"
            )
        path[:, l] = ids
        parent[ids] = path[:, l - 1]
        level[ids] = l
    _, c = np.unique(path[:, L] if components is None else np.asarray(components), return_inverse=True)
    c = c.reshape(-1)
    kc = int(c.max()) + 1
    if kc > K:
        raise ValueError(
            f"the initial tree has {kc} components, more than max_components={K}; "
            f"pass a larger max_components or smaller init_levels"
        )
    counts = np.bincount(c, minlength=K).astype(float)
    theta = np.zeros((K, D))
    np.add.at(theta, c, X)
    theta[:kc] /= counts[:kc, None]
    if sigma2 is None:
        resid = float(np.mean((X - theta[c]) ** 2))
        sigma2 = resid if resid > 0 else 0.01 * float(cfg.sigma2_max)
        if sample_hyper:
            sigma2 = min(sigma2, 0.99 * float(cfg.sigma2_max))
    f = np.dtype(jnp.result_type(float))
    count = np.zeros(M, np.int64)
    np.add.at(count, path.reshape(-1), 1)
    logb = np.full((M, K + 1), -np.inf)
    logb[:, K] = 0.0
    logb[0, :kc] = np.log(counts[:kc] / (N + 1.0))
    logb[0, K] = np.log(1.0 / (N + 1.0))
    P = N if size is None else int(size)
    i32 = np.int32
    st = BHMCState(  # host arrays put on the device as they are (no per-shape eager programs)
        path=jnp.asarray(pad_rows(path.astype(i32), P)),
        c=jnp.asarray(pad_rows(c.astype(i32), P)),
        parent=jnp.asarray(parent.astype(i32)),
        level=jnp.asarray(level.astype(i32)),
        count=jnp.asarray(count.astype(i32)),
        logb=jnp.asarray(logb.astype(f)),
        theta=jnp.asarray(theta.astype(f)),
        alpha=jnp.asarray(np.asarray(alpha, f)),
        gamma0=jnp.asarray(np.asarray(gamma0, f)),
        gamma=jnp.asarray(np.asarray(gamma, f)),
        sigma2=jnp.asarray(np.asarray(sigma2, f)),
        overflow=jnp.asarray(np.int32(0)),
    )
    npts = None if size is None else np.int32(N)
    return _refresh_jit(key, st, jnp.asarray(pad_rows(X.astype(f), P)), cfg, npts)


@jax.jit
def _refresh_jit(key, st, X, cfg, num_points=None):
    kb, kt = jax.random.split(key)
    mask = point_mask(X.shape[0], num_points)
    return update_theta(kt, update_weights_exact(kb, st, mask=mask), X, cfg, mask=mask)


# ------------------------------------------------------------------------------------------
# the starts of `bhmc`'s chains
# ------------------------------------------------------------------------------------------
def check_init(init, N, L):
    if isinstance(init, str):
        if init not in ("auto", "ward", "bhc", "chain"):
            raise ValueError(
                f"init must be 'auto', 'ward', 'bhc', 'chain', a jaxhc Tree over the {N} points, "
                f"level labels [N, depth] or a list of these, got {init!r}"
            )
    elif isinstance(init, Tree):
        if init.n_leaves != N:
            raise ValueError(f"init tree has {init.n_leaves} leaves, expected N={N}")
    else:
        lab = np.asarray(init)
        if lab.shape != (N, L) or lab.dtype.kind not in "iu":
            raise ValueError(
                f"init must be 'auto', 'ward', 'bhc', 'chain', a jaxhc Tree over the {N} points, "
                f"level labels [N, depth] = {(N, L)} or a list of these, got {type(init).__name__} "
                f"of shape {getattr(lab, 'shape', None)}"
            )
        for l in range(1, L):  # nested: a level-(l + 1) cluster inside one level-l cluster
            _, inv = np.unique(lab[:, l], return_inverse=True)
            up = np.zeros(inv.max() + 1, np.int64) - 1
            for i, u in zip(inv.reshape(-1), lab[:, l - 1]):
                if up[i] >= 0 and up[i] != u:
                    raise ValueError(f"init level labels are not nested: level {l + 1} splits a level-{l} cluster")
                up[i] = u


def chain_starts(X, L, inits, num_chains, init_levels, K):
    """``(name, spec)`` for every chain: ``inits`` in turn (``"auto"`` expands to `auto_starts`,
    one per chain that takes it); ``spec`` is level labels ``[N, L]`` or ``"chain"``."""
    out = []
    auto = None
    for c in range(num_chains):
        one = inits[c % len(inits)]
        if isinstance(one, str) and one == "auto":
            if auto is None:
                n_auto = sum(
                    1
                    for i in range(num_chains)
                    if isinstance(inits[i % len(inits)], str) and inits[i % len(inits)] == "auto"
                )
                auto = iter(auto_starts(X, L, n_auto, init_levels, K))
            out.append(next(auto))
        elif isinstance(one, str) and one == "chain":
            out.append(("chain", "chain"))
        else:
            name = one if isinstance(one, str) else ("tree" if isinstance(one, Tree) else "labels")
            out.append((name, start_level_labels(X, L, one, init_levels, K)[0]))
    return out
