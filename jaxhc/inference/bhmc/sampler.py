"""BHMC's Metropolis-Hastings sampler (Huang et al., Algorithm 2) as init / step kernels.

One step (a sweep) visits the points in a random order. For point ``n``: remove it from its
path (nodes left empty disappear), propose a path by the nCRP on the other points (new nodes
draw ``beta ~ DP(gamma, beta_parent)``), accept with the section-4.1 ratio, which after the
nCRP and HDP terms cancel is ``p(x_n | beta_leaf', theta) / p(x_n | beta_leaf, theta)`` with
``p(x | beta, theta) = sum_k beta_k N(x; theta_k, sigma2 I) + beta* f*(x)`` (Eq. 1, ``c_n``
collapsed), then Gibbs-sample ``c_n`` by Eq. 2 (a new component draws ``theta`` from its
posterior given ``x_n`` and every node breaks one more stick). After the sweep: optional MH
updates of ``(alpha, gamma0, gamma, sigma2)`` under the hyperpriors of section 5, the
size-biased Dirichlet updates of ``B`` (Eq. 3-4, top-down), and ``theta`` by Eq. 5.

State arrays have fixed capacities (``max_nodes`` node slots, ``max_components`` component
slots) so the sweep compiles once; a slot is free when its count is 0 (nodes) or its root
weight is 0 (components). Running out sets a flag that `bhmc` turns into a ``ValueError``
naming the capacity to raise; nothing is truncated silently.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer.mcmc import MCMCKernel

from ..._internal.buckets import bucket, pad_rows
from ..._internal.chain import check_chains, map_chains, run_steps
from ...tree import ParentTree
from .init import bhmc_init, chain_init, chain_starts, check_init, labels_state, tree_init_state
from .moves import gibbs_point_update, point_update
from .state import (
    OVERFLOW_COMPONENTS,
    OVERFLOW_NODES,
    BHMCConfig,
    BHMCState,
    check_int,
    check_key,
    check_positive,
    check_X,
    grow_state,
    make_config,
    pad_state,
    point_mask,
    raise_overflow,
    row_permutation,
    unpad_state,
)
from .summary import BHMCPosterior, summarise_chains, weight_similarity
from .updates import complete_data_log_likelihood, update_hyper, update_theta, update_weights, update_weights_exact

__all__ = [
    "BHMC",
    "BHMCResult",
    "BHMCSamples",
    "bhmc",
    "bhmc_step",
    "program_sites",
    "state_to_tree",
]


# ------------------------------------------------------------------------------------------
# the sweep
# ------------------------------------------------------------------------------------------
def _sweep(
    key,
    st: BHMCState,
    X,
    cfg,
    sample_hyper: bool,
    num_hyper_steps: int,
    path_update: str = "gibbs",
    likelihood: bool = True,
    num_split_merge: int = 0,
    num_points=None,
):
    """One sweep; ``num_points`` (a traced int; default all rows): ``X`` and ``st`` are padded
    and only their first ``num_points`` rows are points (`state.point_mask`)."""
    N = X.shape[0]
    n_pts = N if num_points is None else num_points
    mask = point_mask(N, num_points)
    kperm, kpts, kh, kb, kt = jax.random.split(key, 5)
    perm = row_permutation(kperm, N, num_points)  # = jax.random.permutation(kperm, n_pts), then the padding

    def body(i, carry):
        s, nacc = carry
        n = perm[i]
        k = jax.random.fold_in(kpts, i)
        if path_update == "gibbs":
            s, _, acc = gibbs_point_update(k, s, n, X[n], cfg, likelihood, mask)
        else:
            s, _, acc = point_update(k, s, n, X[n], cfg, mode="mcmc", mask=mask)
        return s, nacc + acc.astype(jnp.int32)

    st, nacc = jax.lax.fori_loop(0, n_pts, body, (st, jnp.int32(0)))
    if path_update == "gibbs":  # alpha, sigma2 given the state; gamma0, gamma with the weights integrated out
        if sample_hyper:  # (without the likelihood sigma2 keeps its value: its target would be the flat prior)
            st = update_hyper(kh, st, X, cfg, num_hyper_steps, (True, False, False, likelihood), mask)
        st = update_weights_exact(kb, st, cfg, num_hyper_steps if sample_hyper else 0, num_split_merge, mask)
    else:
        if sample_hyper:
            st = update_hyper(kh, st, X, cfg, num_hyper_steps, mask=mask)
        st = update_weights(kb, st, mask)
    st = update_theta(kt, st, X, cfg, likelihood, mask)
    K = st.theta.shape[0]
    info = {
        "log_likelihood": complete_data_log_likelihood(st, X, mask),
        "accept_rate": nacc.astype(X.dtype) / n_pts,
        "num_nodes": jnp.sum(st.count > 0),
        "num_components": jnp.sum(jnp.isfinite(st.logb[0, :K])),
        "alpha": st.alpha,
        "gamma0": st.gamma0,
        "gamma": st.gamma,
        "sigma2": st.sigma2,
    }
    return st, info


_STATIC = ("sample_hyper", "num_hyper_steps", "path_update", "likelihood", "num_split_merge")


@functools.partial(jax.jit, static_argnames=_STATIC)
def _sweep_jit(
    key, st, X, cfg, sample_hyper, num_hyper_steps, path_update="gibbs", likelihood=True, num_split_merge=0, npts=None
):
    return _sweep(key, st, X, cfg, sample_hyper, num_hyper_steps, path_update, likelihood, num_split_merge, npts)


def bhmc_step(
    key,
    state: BHMCState,
    X,
    cfg: BHMCConfig,
    *,
    sample_hyper: bool = False,
    num_hyper_steps: int = 5,
    path_update: str = "gibbs",
    likelihood: bool = True,
):
    """One sweep (compiled once per shape): every point's path and ``c_n`` in a random order
    (``path_update="gibbs"``: the exact block Gibbs step `gibbs_point_update`; ``"mh"``:
    Algorithm 2's nCRP-proposal MH and Eq. 2), then (optionally) hyperparameter MH, ``B``
    and ``theta``. ``likelihood=False`` targets the prior (the data are ignored; for
    checking that the moves leave the prior invariant). Returns ``(state, info)``; ``info``
    holds the complete-data log likelihood, the
    fraction of points that moved (Gibbs) or whose proposal was accepted (MH), node and
    component counts and the hyperparameters."""
    if path_update not in ("gibbs", "mh"):
        raise ValueError(f"path_update must be 'gibbs' or 'mh', got {path_update!r}")
    return _sweep_jit(
        key, state, jnp.asarray(X), cfg, bool(sample_hyper), int(num_hyper_steps), path_update, bool(likelihood)
    )


# ------------------------------------------------------------------------------------------
# results
# ------------------------------------------------------------------------------------------
class BHMCSamples(NamedTuple):
    """Output of `bhmc`.

    Attributes:
      tree: `ParentTree` of the reported answer (``summary="posterior"``: the posterior
        summary's nested partitions, `BHMCPosterior.tree`; ``"best_joint"``: the state with
        the greatest complete-data likelihood, ``state_to_tree(best_state)``): leaves
        ``0..N-1`` are the points, each under its level-``L`` node; internal nodes follow
        (``heights`` = their depth, points at ``L+1``).
      level_labels: int ``[N, L]``; column ``l - 1`` is every point's node at level ``l``,
        renumbered ``0..`` per level (nested: level ``l + 1`` refines level ``l``).
      paths: int ``[N, L + 1]`` node slots of ``best_state``.
      labels: int ``[N]`` components: the posterior consensus (``summary="posterior"``) or
        ``best_state``'s.
      log_likelihood: the complete-data log likelihood of ``best_state``.
      trace: dict of ``[num_warmup + num_samples]`` arrays, one entry per sweep
        (``log_likelihood``, ``accept_rate``, ``num_nodes``, ``num_components``, ``alpha``,
        ``gamma0``, ``gamma``, ``sigma2``).
      state: the last `BHMCState` (continue with `bhmc_step`).
      best_state: the `BHMCState` with the greatest complete-data likelihood among the starts
        and the kept sweeps of all chains (the paper's criterion).
      config: the `BHMCConfig` used.
      best_sweep: the sweep that gave it (``-1``: a start, when no kept sweep reached its
        complete-data likelihood).
      posterior: the `BHMCPosterior` of the kept sweeps of all chains (always computed).
      summary: which answer ``tree``, ``level_labels`` and ``labels`` hold.
      starts: the name of every chain's start (``"ward"``, ``"bhc"``, ``"ward-repeat-bottom"``,
        ``"ward-finer"``, ``"ward-repeat-top"``, ``"tree"``, ``"labels"``, ``"chain"`` or
        ``"init_state"``).
    """

    tree: ParentTree
    level_labels: np.ndarray
    paths: np.ndarray
    labels: np.ndarray
    log_likelihood: float
    trace: dict
    state: BHMCState
    best_state: BHMCState
    config: BHMCConfig
    best_sweep: int = -1
    posterior: Optional[BHMCPosterior] = None
    summary: str = "posterior"
    starts: tuple = ()


BHMCResult = BHMCSamples  # the former name (kept as an alias)


def state_to_tree(state: BHMCState):
    """``(ParentTree, level_labels [N, L])`` of a state (empty node slots dropped)."""
    path = np.asarray(state.path)
    N, L1 = path.shape
    L = L1 - 1
    count = np.asarray(state.count)
    parent = np.asarray(state.parent)
    level = np.asarray(state.level)
    active = np.flatnonzero(count > 0)
    order = active[np.lexsort((active, level[active]))]  # root first, then by level
    new_id = np.full(count.shape[0], -1)
    new_id[order] = N + np.arange(order.size)
    par = np.empty(N + order.size, np.int64)
    par[:N] = new_id[path[:, L]]
    par[N:] = np.where(parent[order] >= 0, new_id[np.maximum(parent[order], 0)], -1)
    heights = np.concatenate([np.full(N, L + 1.0), level[order].astype(float)])
    level_labels = np.zeros((N, L), np.int64)
    for l in range(1, L + 1):
        _, level_labels[:, l - 1] = np.unique(path[:, l], return_inverse=True)
    return ParentTree(par, N, heights), level_labels


# ------------------------------------------------------------------------------------------
# the driver
# ------------------------------------------------------------------------------------------
@functools.partial(jax.jit, static_argnames=_STATIC)
def _sweep_chains_jit(
    keys, st, X, cfg, sample_hyper, num_hyper_steps, path_update="gibbs", likelihood=True, num_split_merge=0, npts=None
):
    return jax.vmap(
        lambda k, s: _sweep(k, s, X, cfg, sample_hyper, num_hyper_steps, path_update, likelihood, num_split_merge, npts)
    )(keys, st)


@jax.jit
def _loglik_jit(st, X, num_points):
    return complete_data_log_likelihood(st, X, point_mask(X.shape[0], num_points))


def bhmc(
    key,
    X,
    depth: int = 4,
    *,
    alpha=1.0,
    gamma0=1.0,
    gamma=0.5,
    sigma2=None,
    mu0=None,
    prior_var=None,
    num_samples: int = 200,
    num_warmup: int = 100,
    sample_hyper: bool = True,
    sigma2_max=None,
    epsilon=1e-6,
    max_nodes: Optional[int] = None,
    max_components: Optional[int] = None,
    num_hyper_steps: int = 5,
    init="auto",
    init_levels=None,
    path_update: str = "gibbs",
    num_chains: int = 1,
    chain_method: str = "vectorized",
    init_state: Optional[BHMCState] = None,
    progress_bar: bool = True,
    summary: str = "posterior",
    split_merge: int = 4,
    similarity: str = "weights",
    _bucket: bool = True,
) -> BHMCSamples:
    """Bayesian Hierarchical Mixture Clustering (Huang et al.): ``num_warmup + num_samples``
    sweeps of the exact block Gibbs sampler (or Algorithm 2's MH) with split-merge moves on
    every level's nodes, then a posterior summary of the kept sweeps of all chains: per level,
    the partition that agrees best with the posterior similarity of the points, nested across
    levels (`jaxhc.inference.bhmc.summary`). ``summary="best_joint"`` reports instead the
    state with the greatest complete-data likelihood ``p(X, c, V | B, theta)`` among the starts
    and the kept sweeps (the paper's criterion; ``best_sweep`` says which): over a chain that is
    nearly always its start, not a summary of the posterior.

    What the levels can show: the component means are drawn from ``H`` whatever the tree, so
    the tree sees the data only through which components share nodes. Groups of points that
    are pure components are found (the leaves), but how such groups nest (which subgroups share
    a level-1 node) carries no information in the posterior (3 x 2 groups of 25 points: points
    of two subgroups of one group share a level-1 node as often as points of different groups),
    and nodes whose points hold the same components split and merge freely (the tree grows
    with ``alpha``'s hyperprior). The summary's default similarity (``"weights"``) therefore
    compares the nodes' mixtures rather than their identities. To ask whether the posterior
    prefers another nested partition (a start, Ward's cut, a known truth) to the summary,
    score it with `summary.level_expected_loss` (the summary's own loss; on the randomized
    suite every answer below its start is one the posterior ranks above the start).

    Defaults work on any data's location and scale: the base measure ``H`` is centred on the
    data's mean with its per-feature variance, ``sigma2`` starts at the pooled within-cluster
    variance of the initial tree and is sampled with ``(alpha, gamma0, gamma)`` under the
    paper's hyperpriors, and the start is Ward's tree cut to ``depth`` levels where its merge
    heights jump (`level_sizes_from_gaps`). The same key gives the same labels for ``X`` and
    ``a X + b``.

    Compiled once per bucket of ``N``: the points are padded to ``bucket(N)`` rows
    (`jaxhc._internal.buckets`) that no sweep visits and every sum over points masks out
    (`jaxhc.inference.bhmc.state`), with random draws made per real point, so the result
    equals the unpadded computation's; every output holds the ``N`` real points only.

    Args:
      key: a ``jax.random`` key (the same key gives the same result).
      X: float ``[N, D]`` data.
      depth: ``L`` >= 1, levels below the root.
      alpha, gamma0, gamma: nCRP and HDP concentrations (> 0; ``gamma < 1.5`` when sampled);
        starting values when ``sample_hyper``.
      sigma2: observation variance (``Sigma = sigma2 I``); default from the initial tree
        (``init="chain"``: a quarter of ``sigma2_max``).
      mu0, prior_var: base measure ``H = N(mu0, diag(prior_var))`` (scalars or ``[D]``;
        default the data's per-feature mean and variance).
      num_samples, num_warmup: sweeps kept / burnt.
      sample_hyper: MH updates of ``(alpha, gamma0, gamma, sigma2)`` after every sweep under
        ``Ga(3, 1)``, ``Ga(3.5, 1)``, ``Unif(0, 1.5)``, ``Unif(0, sigma2_max)`` (default on).
      sigma2_max: ``s`` of the ``sigma2`` prior (default: mean per-feature variance of X).
      epsilon: initial root stick truncation (``init="chain"``, Algorithm 2 line 1).
      max_nodes, max_components: slot capacities. Left at their defaults (``min(P L + L + 1,
        1024)`` with ``P = bucket(N)``, enough for every point on its own path while one more
        is proposed, and 128) they double when a sweep runs out (the sweep is redone; one more
        compilation), up to ``P L + L + 1`` nodes and 4096 components; given explicitly,
        running out raises a ValueError that names the one to raise. Unused slots change
        nothing (the same key gives the same result with more slots).
      num_hyper_steps: MH proposals per hyperparameter per sweep.
      init: the start of each chain: ``"auto"`` (default: chain ``i`` takes the ``i``-th of
        `auto_starts`: Ward's tree at its gap sizes, BHC's tree, Ward's with a repeated
        (pass-through) level, Ward's one level finer, ...; one chain: Ward's), ``"ward"``
        (every chain Ward's; `tree_init_state`), ``"bhc"``, a binary `Tree` over the points
        (e.g. a BHC tree) cut at its gaps, int level labels ``[N, L]`` (nested), ``"chain"``
        (the paper's start: every point on one path, components from the root's sticks at
        random points), or a list of these, one per chain (repeated in turn).
      init_levels: clusters per level for the ``"ward"``, ``"bhc"`` and tree starts and the
        first ``"auto"`` start (``L`` non-decreasing ints; default `level_sizes_from_gaps`).
      path_update: ``"gibbs"`` (exact conditional over every existing path and new-branch
        position, `gibbs_point_update`) or ``"mh"`` (Algorithm 2's nCRP-proposal MH).
      num_chains: independent chains (different keys; different starts under ``init="auto"``);
        the summary pools their kept sweeps (``best_state`` is the best over all of them).
        Each chain costs about one chain's time (``"vectorized"`` included).
      chain_method: ``"vectorized"`` (one program ``vmap``-ed over chains), ``"sequential"``
        or ``"parallel"`` (the chains' sweeps in the shared thread pool). Chain ``i`` uses the
        ``i``-th split of each sweep's key in all three: ``"sequential"`` and ``"parallel"``
        give identical results, ``"vectorized"`` the same up to floating-point rounding.
      init_state: continue from this state (e.g. ``result.state``) instead of initialising
        (one chain).
      progress_bar: show a tqdm bar over sweeps.
      summary: ``"posterior"`` (default) or ``"best_joint"``: where ``tree``, ``level_labels``
        and ``labels`` come from (both are computed; ``posterior`` always holds the summary).
      split_merge: split-merge proposals per level per sweep (`splitmerge.split_merge_level`;
        ``path_update="gibbs"`` only; 0 turns them off).
      similarity: what the summary cuts each level from: ``"weights"`` (default; the
        posterior mean cosine of the component weights of the two points' nodes, 1 in one
        node; consensus by Binder's loss: two points go together when that mean exceeds 1/2
        on balance) or ``"nodes"`` (co-clustering: the fraction of sweeps in which they share
        the node; consensus by the variation of information). Co-clustering is diffuse here
        (two points of one subgroup share a leaf in ~20% of the sweeps, since a node whose
        points hold one component splits at no cost); the weights are not.

    Returns:
      `BHMCSamples` (``tree``, ``level_labels [N, L]``, ``trace``, ...; with several chains
      ``trace`` entries are ``[num_chains, sweeps]`` and ``state`` holds every chain).
    """
    check_key(key)
    X = check_X(X)
    N, D = X.shape
    L = check_int(depth, "depth", 1)
    alpha = check_positive(alpha, "alpha")
    gamma0 = check_positive(gamma0, "gamma0")
    gamma = check_positive(gamma, "gamma", 1.5 if sample_hyper else None)
    if sigma2 is not None:
        sigma2 = check_positive(sigma2, "sigma2")
    epsilon = check_positive(epsilon, "epsilon")
    num_samples = check_int(num_samples, "num_samples", 1)
    num_warmup = check_int(num_warmup, "num_warmup", 0)
    num_hyper_steps = check_int(num_hyper_steps, "num_hyper_steps", 1)
    P = bucket(N) if _bucket else N  # rows of the compiled programs (the padding: module docstring of state)
    M = check_int(max_nodes if max_nodes is not None else min(P * L + L + 1, 1024), "max_nodes", L + 1)
    K = check_int(max_components if max_components is not None else 128, "max_components", 1)
    if path_update not in ("gibbs", "mh"):
        raise ValueError(f"path_update must be 'gibbs' or 'mh', got {path_update!r}")
    num_chains = check_chains(num_chains, chain_method)
    if summary not in ("posterior", "best_joint"):
        raise ValueError(f"summary must be 'posterior' or 'best_joint', got {summary!r}")
    split_merge = check_int(split_merge, "split_merge", 0)
    if similarity not in ("weights", "nodes"):
        raise ValueError(f"similarity must be 'weights' or 'nodes', got {similarity!r}")
    inits = list(init) if isinstance(init, (list, tuple)) else [init]
    if not inits:
        raise ValueError("init must not be an empty list")
    for one in inits:
        check_init(one, N, L)
    cfg = make_config(X, mu0=mu0, prior_var=prior_var, sigma2_max=sigma2_max)
    if sample_hyper and sigma2 is not None and sigma2 >= float(cfg.sigma2_max):
        if sigma2_max is not None:  # both given by the user: they contradict each other
            raise ValueError(
                f"sigma2={sigma2} must be < sigma2_max={float(cfg.sigma2_max)} when sample_hyper=True "
                f"(leave sigma2=None to start from the data)"
            )
        # sigma2 = 1 on standardised data sits on the default prior's upper end (the data's
        # own variance): start just inside the prior's support instead of refusing
        import warnings

        start = 0.99 * float(cfg.sigma2_max)
        warnings.warn(
            f"bhmc: sigma2={sigma2} is not below the default sigma2_max={float(cfg.sigma2_max):.4g} "
            f"(the data's mean per-feature variance, the upper end of sigma2's prior when "
            f"sample_hyper=True); starting from sigma2={start:.4g}. Pass sigma2_max to widen the prior.",
            UserWarning,
            stacklevel=2,
        )
        sigma2 = start
    Xj = jnp.asarray(pad_rows(X, P))
    npts = np.int32(N)
    k_init, k_run = jax.random.split(key)
    if init_state is not None:
        st = init_state
        if tuple(st.path.shape) != (N, L + 1):
            raise ValueError(f"init_state.path has shape {tuple(st.path.shape)}, expected {(N, L + 1)}")
        M, K = st.parent.shape[0], st.theta.shape[0]
        st = jax.device_put(pad_state(st, P))
        num_chains = 1
    else:
        starts = chain_starts(X, L, inits, num_chains, init_levels, K)
        kinit = jax.random.split(k_init, num_chains) if num_chains > 1 else [k_init]
        states = []
        for c, (_, spec) in enumerate(starts):
            if isinstance(spec, str) and spec == "chain":
                s2 = sigma2 if sigma2 is not None else 0.25 * float(cfg.sigma2_max)
                one = chain_init(kinit[c], Xj, N, L, cfg, (alpha, gamma0, gamma, s2), epsilon, M, K)
            else:
                hyper = (alpha, gamma0, gamma, sigma2)
                one = labels_state(X, spec, cfg, kinit[c], None, hyper, M, K, sample_hyper, size=P)
            states.append(one)
        st = states[0] if num_chains == 1 else jax.tree_util.tree_map(lambda *a: jnp.stack(a), *states)
    chains = num_chains > 1
    vec = chains and chain_method == "vectorized"
    sts = [jax.tree_util.tree_map(lambda a: a[i], st) for i in range(num_chains)] if chains and not vec else None
    args = (Xj, cfg, bool(sample_hyper), num_hyper_steps, path_update, True, split_merge, npts)
    best_sweep = -1  # the starts are candidates too (the sampler may only find worse states)
    firsts = [jax.tree_util.tree_map(lambda a: a[i], st) for i in range(num_chains)] if chains else [st]
    start_vals = [float(_loglik_jit(x, Xj, npts)) for x in firsts]
    best = firsts[int(np.argmax(start_vals))]
    best_val = max(start_vals)
    kept_paths, kept_c, wsim = [], [], [None]
    auto_M, auto_K = max_nodes is None, max_components is None
    M_full = P * L + L + 1

    def sweep(t, carry):
        """Sweep ``t`` of every chain (key ``fold_in(k_run, t)``, chain ``i`` its ``i``-th split).
        ``carry = (st, sts)``: the state (stacked over vectorized chains), or the per-chain states
        ``sts``. When a chain runs out of slots, the default capacities grow (one recompilation)
        and the sweep is redone from its start."""
        nonlocal M, K
        st, sts = carry
        kt = jax.random.fold_in(k_run, t)
        while True:
            if vec:
                new, info = _sweep_chains_jit(jax.random.split(kt, num_chains), st, *args)
                flags, carry = new.overflow, (new, sts)
            elif chains:
                outs = map_chains(
                    lambda k, s: _sweep_jit(k, s, *args), jax.random.split(kt, num_chains), sts, chain_method
                )
                info = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *[o[1] for o in outs])
                flags, carry = [o[0].overflow for o in outs], (st, [o[0] for o in outs])
            else:
                new, info = _sweep_jit(kt, st, *args)
                flags, carry = [new.overflow], (new, sts)
            flag = int(np.bitwise_or.reduce(np.atleast_1d(np.asarray(flags))))
            if not flag:
                return carry, info
            grow_M = bool(flag & OVERFLOW_NODES) and auto_M and M < M_full
            grow_K = bool(flag & OVERFLOW_COMPONENTS) and auto_K and K < 4096
            if (bool(flag & OVERFLOW_NODES) and not grow_M) or (bool(flag & OVERFLOW_COMPONENTS) and not grow_K):
                raise_overflow(flag, M, K, f"in sweep {t}")
            M = min(2 * M, M_full) if grow_M else M
            K = 2 * K if grow_K else K
            st = grow_state(st, M, K)
            sts = None if sts is None else [grow_state(x, M, K) for x in sts]

    def collect(t, carry, info):
        """Every sweep's ``info`` goes to the trace (copied to the host once, at the end); a
        kept sweep's best chain becomes the reported state when it beats the best so far."""
        nonlocal best, best_val, best_sweep
        if t >= num_warmup:
            st, sts = carry
            if chains and not vec:
                kp, kc = jnp.stack([x.path for x in sts]), jnp.stack([x.c for x in sts])
                kl = jnp.stack([x.logb for x in sts])
            else:
                kp, kc = (st.path, st.c) if vec else (st.path[None], st.c[None])
                kl = st.logb if vec else st.logb[None]
            kept_paths.append(kp)
            kept_c.append(kc)
            wsim[0] = weight_similarity(kp, kl) if wsim[0] is None else wsim[0] + weight_similarity(kp, kl)
            vals = np.atleast_1d(np.asarray(info["log_likelihood"], float))
            i = int(np.argmax(vals))
            if vals[i] > best_val:
                st, sts = carry
                best = jax.tree_util.tree_map(lambda a: a[i], st) if vec else (sts[i] if chains else st)
                best_val, best_sweep = float(vals[i]), t
        return info

    def postfix(t, carry, info):
        ll = np.max(np.atleast_1d(info["log_likelihood"]))
        return dict(loglik=f"{float(ll):.1f}", nodes=int(np.max(np.atleast_1d(info["num_nodes"]))))

    (st, sts), rows = run_steps(
        sweep,
        (st, sts),
        num_warmup=num_warmup,
        num_samples=num_samples,
        collect=collect,
        collect_warmup=True,
        progress_bar=progress_bar,
        postfix=postfix,
        name="bhmc" + (f" ({num_chains} chains)" if chains else ""),
    )
    rows = jax.device_get(rows)
    trace = {k: np.asarray([r[k] for r in rows]) for k in rows[0]}
    if chains:
        trace = {k: np.moveaxis(v, 0, 1) for k, v in trace.items()}
        if not vec:
            st = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *sts)
    best_ll = float(_loglik_jit(best, Xj, npts))
    best = unpad_state(best, N)  # the real points only (host arrays), as every output
    st = jax.device_put(unpad_state(st, N))
    paths = np.stack(jax.device_get(kept_paths), 1)[:, :, :N]  # [chains, kept sweeps, N, L + 1]
    comps = np.stack(jax.device_get(kept_c), 1)[:, :, :N]
    wsim = np.asarray(wsim[0])[:, :N, :N] / (paths.shape[0] * paths.shape[1])
    post = summarise_chains(paths, comps, wsim, similarity)
    if summary == "posterior":
        tree, level_labels, labels = post.tree, post.level_labels, post.labels
    else:
        tree, level_labels = state_to_tree(best)
        labels = np.asarray(best.c)
    names = tuple(name for name, _ in starts) if init_state is None else ("init_state",)
    return BHMCSamples(
        tree,
        level_labels,
        np.asarray(best.path),
        labels,
        best_ll,
        trace,
        st,
        best,
        cfg,
        best_sweep,
        post,
        summary,
        names,
    )


class _KernelState(NamedTuple):
    sample: Any
    state: Any
    rng_key: jax.Array


class BHMC(MCMCKernel):
    """BHMC's sampler as a NumPyro kernel: ``MCMC(BHMC(X, depth=4), num_warmup=...,
    num_samples=...).run(key)`` collects ``{"paths": [N, L + 1], "c": [N]}`` of every kept
    sweep (node and component slots; only the partitions they induce matter).

    The arguments (``X, depth, alpha, gamma0, gamma, sigma2, mu0, prior_var, epsilon,
    max_nodes, max_components, sample_hyper, num_hyper_steps, init, path_update``) are as in
    `bhmc`, with the same data-adaptive defaults; ``init`` is ``"ward"`` or ``"chain"``.
    """

    sample_field = "sample"

    def __init__(
        self,
        X,
        depth: int = 4,
        *,
        alpha=1.0,
        gamma0=1.0,
        gamma=0.5,
        sigma2=None,
        mu0=None,
        prior_var=None,
        epsilon=1e-6,
        max_nodes=None,
        max_components=128,
        sample_hyper=True,
        num_hyper_steps=5,
        init="ward",
        path_update="gibbs",
    ):
        X = check_X(X)
        self.X = jnp.asarray(X)
        N = X.shape[0]
        self.depth = check_int(depth, "depth", 1)
        self.sample_hyper = bool(sample_hyper)
        self.hyper = dict(
            alpha=check_positive(alpha, "alpha"),
            gamma0=check_positive(gamma0, "gamma0"),
            gamma=check_positive(gamma, "gamma", 1.5 if self.sample_hyper else None),
        )
        self.sigma2 = None if sigma2 is None else check_positive(sigma2, "sigma2")
        self.epsilon = check_positive(epsilon, "epsilon")
        self.max_nodes = check_int(
            max_nodes if max_nodes is not None else min(N * self.depth + self.depth + 1, 1024),
            "max_nodes",
            self.depth + 1,
        )
        self.max_components = check_int(max_components, "max_components", 1)
        self.cfg = make_config(X, mu0=mu0, prior_var=prior_var)
        self.num_hyper_steps = check_int(num_hyper_steps, "num_hyper_steps", 1)
        if init not in ("ward", "chain"):
            raise ValueError(f"init must be 'ward' or 'chain', got {init!r}")
        if path_update not in ("gibbs", "mh"):
            raise ValueError(f"path_update must be 'gibbs' or 'mh', got {path_update!r}")
        self.init_kind, self.path_update = init, path_update

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        k_init, k = jax.random.split(rng_key)
        if init_params is not None:
            st = init_params
        elif self.init_kind == "chain":
            s2 = self.sigma2 if self.sigma2 is not None else 0.25 * float(self.cfg.sigma2_max)
            st = bhmc_init(
                k_init,
                self.X,
                self.depth,
                self.cfg,
                sigma2=s2,
                epsilon=self.epsilon,
                max_nodes=self.max_nodes,
                max_components=self.max_components,
                **self.hyper,
            )
        else:
            st, _ = tree_init_state(
                np.asarray(self.X),
                self.depth,
                self.cfg,
                key=k_init,
                sigma2=self.sigma2,
                max_nodes=self.max_nodes,
                max_components=self.max_components,
                sample_hyper=self.sample_hyper,
                **self.hyper,
            )
        return _KernelState({"paths": st.path, "c": st.c}, st, k)

    def sample(self, state, model_args, model_kwargs):
        k, k_next = jax.random.split(state.rng_key)
        st, _ = _sweep(k, state.state, self.X, self.cfg, self.sample_hyper, self.num_hyper_steps, self.path_update)
        return _KernelState({"paths": st.path, "c": st.c}, st, k_next)


def program_sites(samples):
    """Turns `BHMC` kernel samples into site values of the truncated nCRP + HDP program
    (`jaxhc.models.ncrp_hdp.ncrp_hdp_truncated`), for ``numpyro.infer.Predictive(ncrp_hdp,
    posterior_samples=sites)``.

    Args:
      samples: ``{"paths": [S, N, L + 1], "c": [S, N]}`` as ``MCMC(BHMC(...)).get_samples()``
        returns (node and component slots).

    Returns:
      ``(sites, max_children, max_components)``: ``sites`` holds ``path_l [S, N]`` (each
      point's child index at level ``l`` among its parent's children, numbered in order of
      first appearance over the points, as the program's CRP creates them) and ``c [S, N]``
      (components relabelled by first appearance); pass ``max_children`` and
      ``max_components`` (the largest branching and number of components over the samples)
      to the program so every sample fits. The program then draws the weights and the
      component means from the model given this structure (the kernel's ``B`` and ``theta``
      are not part of its samples).
    """
    paths = np.asarray(samples["paths"])
    c = np.asarray(samples["c"])
    if paths.ndim != 3 or c.shape != paths.shape[:2]:
        raise ValueError(f"samples must hold paths [S, N, L + 1] and c [S, N], got {paths.shape} and {c.shape}")
    S, N, L1 = paths.shape
    sites = {f"path_{l}": np.zeros((S, N), np.int32) for l in range(1, L1)}
    comps = np.zeros((S, N), np.int32)
    max_children = max_components = 1
    for s in range(S):
        for l in range(1, L1):
            kids: dict = {}
            for n in range(N):
                d = kids.setdefault(int(paths[s, n, l - 1]), {})
                sites[f"path_{l}"][s, n] = d.setdefault(int(paths[s, n, l]), len(d))
            max_children = max(max_children, max(len(d) for d in kids.values()))
        first: dict = {}
        comps[s] = [first.setdefault(int(k), len(first)) for k in c[s]]
        max_components = max(max_components, len(first))
    sites["c"] = comps
    return sites, max_children, max_components
