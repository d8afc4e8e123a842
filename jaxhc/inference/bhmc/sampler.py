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
from jax.scipy.special import gammaln, logsumexp

from ..._internal.validation import real_array
from ...models.ncrp_hdp import (
    _log_dirichlet_density,
    _normal_diag_logpdf,
    beta_log,
    dirichlet_log,
    dp_child_log,
    joint_log_density,
    ncrp_log_prob,
)
from numpyro.infer.mcmc import MCMCKernel

from ...tree import ParentTree, Tree
from ..mh import mh_accept

__all__ = [
    "BHMC",
    "BHMCConfig",
    "BHMCResult",
    "BHMCState",
    "bhmc",
    "bhmc_init",
    "bhmc_step",
    "complete_data_log_likelihood",
    "prior_sample_state",
]

_NEG = -jnp.inf
OVERFLOW_NODES = 1
OVERFLOW_COMPONENTS = 2


class BHMCState(NamedTuple):
    """State of the BHMC sampler.

    Attributes:
      path: int32 ``[N, L + 1]`` node slot of every point at every level (column 0: root 0).
      c: int32 ``[N]`` component slot of every point.
      parent: int32 ``[M]`` parent slot of every node (``-1`` for the root and unused slots).
      level: int32 ``[M]`` depth of every node.
      count: int32 ``[M]`` points through every node (0 = free slot).
      logb: float ``[M, K + 1]`` log mixture weights ``beta_z`` (last column ``beta*_z``;
        ``-inf`` for a component that does not exist).
      theta: float ``[K, D]`` component means.
      alpha, gamma0, gamma, sigma2: hyperparameters (scalars).
      overflow: int32 bit flags (1: out of node slots, 2: out of component slots).
    """

    path: jax.Array
    c: jax.Array
    parent: jax.Array
    level: jax.Array
    count: jax.Array
    logb: jax.Array
    theta: jax.Array
    alpha: jax.Array
    gamma0: jax.Array
    gamma: jax.Array
    sigma2: jax.Array
    overflow: jax.Array


class BHMCConfig(NamedTuple):
    """Fixed parts of the model and sampler (arrays; `bhmc` builds it).

    Attributes:
      mu0, prior_var: ``H = N(mu0, diag(prior_var))``, each ``[D]``.
      sigma2_max: upper end ``s`` of the ``Unif(0, s)`` prior on ``sigma2``.
      step: ``[4]`` log-scale random-walk step sizes for ``(alpha, gamma0, gamma, sigma2)``.
      gamma_max: upper end of the ``Unif(0, gamma_max)`` prior on ``gamma`` (1.5).
    """

    mu0: jax.Array
    prior_var: jax.Array
    sigma2_max: jax.Array
    step: jax.Array
    gamma_max: jax.Array


# ------------------------------------------------------------------------------------------
# pieces of a sweep
# ------------------------------------------------------------------------------------------
def _comp_loglik(x, theta, sigma2, cfg):
    """``log N(x; theta_k, sigma2 I)`` for every slot ``[K]`` and ``log f*(x)``."""
    ll = _normal_diag_logpdf(x[None, :], theta, sigma2)
    lfs = _normal_diag_logpdf(x, cfg.mu0, cfg.prior_var + sigma2)
    return ll, lfs


def _mix_terms(lb, ll, lfs):
    return jnp.concatenate([lb[:-1] + ll, lb[-1:] + lfs])


def _categorical(key, logits):
    """One draw from ``softmax(logits)`` by inverting the CDF with one uniform (``O(len)``,
    one random number, unlike the Gumbel trick)."""
    m = jnp.max(logits)
    p = jnp.exp(logits - m)
    cdf = jnp.cumsum(p)
    u = jax.random.uniform(key, dtype=cdf.dtype) * cdf[-1]
    idx = jnp.searchsorted(cdf, u, side="right")
    return jnp.minimum(idx, logits.shape[0] - 1).astype(jnp.int32)


def _break_stick(key, st: BHMCState, logb, slot):
    """Section 4.1: every node breaks one more stick for component ``slot``, parents first
    (root: ``u ~ Beta(1, gamma0)``; child of ``z``: ``u ~ Beta(gamma beta_z,slot, gamma
    beta*_z)``; ``beta_slot = u beta*``, ``beta* <- (1 - u) beta*``)."""
    K = logb.shape[1] - 1
    L = st.path.shape[1] - 1
    par = jnp.maximum(st.parent, 0)
    lu, l1 = beta_log(jax.random.fold_in(key, 0), 1.0, st.gamma0)
    logb = logb.at[0, slot].set(logb[0, K] + lu).at[0, K].add(l1)

    def level_body(l, logb):  # a loop, not unrolled: one Beta sampler in the compiled program
        sel = (st.level == l) & (st.count > 0) & (st.parent >= 0)
        a = st.gamma * jnp.exp(logb[par, slot])
        b = st.gamma * jnp.exp(logb[par, K])
        lu, l1 = beta_log(jax.random.fold_in(key, l), a, b)
        newk = jnp.where(sel, logb[:, K] + lu, logb[:, slot])
        newstar = jnp.where(sel, logb[:, K] + l1, logb[:, K])
        return logb.at[:, slot].set(newk).at[:, K].set(newstar)

    return jax.lax.fori_loop(1, L + 1, level_body, logb)


def _new_component(key, st: BHMCState, x, leaf, cfg, use_x, need=True):
    """Eq. 2's "new k" at node ``leaf``: instantiate the atom of the leaf's remaining stick
    that the draw selected.

    Atoms of the rest are instantiated one at a time by section 4.1's stick-breaking step
    (which visits them in the root's size-biased order), each taken with probability its
    share ``u_leaf`` of the leaf's remaining stick; the ones not taken hold no point and are
    folded back into every node's rest afterwards (Dirichlet aggregation; exact). Breaking a single stick and
    always taking it, as section 4.1 reads literally, would give the new atom the leaf weight
    of an unselected atom: e.g. with ``L = 1`` two points at one leaf would share a component
    with probability ``1 / (1 + gamma0)`` instead of the HDP's ``(1 + gamma / (1 + gamma0)) /
    (1 + gamma)``. The taken atom's ``theta`` is drawn from its posterior given ``x``
    (``use_x``) or from ``H``. With ``need`` False nothing happens (the loop runs zero times;
    a ``while_loop`` rather than a ``cond`` so the state is updated in place)."""
    K = st.logb.shape[1] - 1
    kt, kloop = jax.random.split(key)

    def cond(c):  # each untaken try fills a dead slot: at most K + 1 tries (capped explicitly)
        return need & ~c[1] & ~c[3] & (c[2] <= K)

    def body(c):
        logb, taken, i, full, slot, theta = c
        dead = ~jnp.isfinite(logb[0, :K])
        full = ~jnp.any(dead)
        slot = jnp.argmax(dead).astype(jnp.int32)
        kb, ku, kh = jax.random.split(jax.random.fold_in(kloop, i), 3)
        new = _break_stick(kb, st, logb, slot)
        share = new[leaf, slot] - logb[leaf, K]  # log u at the leaf
        take = jnp.log(jax.random.uniform(ku, (), logb.dtype)) < share
        th = cfg.mu0 + jnp.sqrt(cfg.prior_var) * jax.random.normal(kh, cfg.mu0.shape, cfg.mu0.dtype)
        logb = jnp.where(full, logb, new)
        theta = jnp.where(full, theta, theta.at[slot].set(th))
        return logb, take & ~full, i + 1, full, slot, theta

    init = (st.logb, jnp.bool_(False), jnp.int32(0), jnp.bool_(False), jnp.int32(0), st.theta)
    logb, _, _, full, slot, theta = jax.lax.while_loop(cond, body, init)
    # atoms revealed and not taken hold no point: fold them back into every node's rest (exact:
    # Dirichlet aggregation, as the weight update does for components without points)
    untaken = ~jnp.isfinite(st.logb[0, :K]) & jnp.isfinite(logb[0, :K]) & (jnp.arange(K) != slot)
    rest = jnp.logaddexp(logb[:, K], logsumexp(jnp.where(untaken[None, :], logb[:, :K], _NEG), axis=1))
    logb = jnp.where(untaken[None, :], _NEG, logb[:, :K])
    logb = jnp.concatenate([logb, rest[:, None]], axis=1)
    if use_x:
        var = 1.0 / (1.0 / cfg.prior_var + 1.0 / st.sigma2)
        mean = var * (cfg.mu0 / cfg.prior_var + x / st.sigma2)
        theta = theta.at[slot].set(jnp.where(need, mean + jnp.sqrt(var) * jax.random.normal(kt, mean.shape, mean.dtype),
                                             theta[slot]))
    st = st._replace(logb=logb, theta=theta, overflow=st.overflow | jnp.where(full, OVERFLOW_COMPONENTS, 0))
    return st, slot


def _write_path(st: BHMCState, n, path_n, write, newlb, count_minus):
    """Puts point ``n`` on ``path_n`` (``[L + 1]``): the levels with ``write`` set (``[L]``,
    levels 1..L) are new nodes in free slots, which get their parent, level and weights
    ``newlb [L, K + 1]``; counts are ``count_minus`` plus the new path. A new node without a
    slot (index ``M``) sets the node overflow flag."""
    M = st.parent.shape[0]
    L = path_n.shape[0] - 1
    idx = jnp.where(write, path_n[1:], M)
    parent = st.parent.at[idx].set(path_n[:-1], mode="drop")
    level = st.level.at[idx].set(jnp.arange(1, L + 1, dtype=st.level.dtype), mode="drop")
    logb = st.logb.at[idx].set(newlb, mode="drop")
    count = count_minus.at[path_n].add(1)
    over = jnp.any(write & (path_n[1:] >= M))
    return st._replace(path=st.path.at[n].set(path_n), parent=parent, level=level, count=count, logb=logb,
                       overflow=st.overflow | jnp.where(over, OVERFLOW_NODES, 0))


def _point_update(key, st: BHMCState, n, x, cfg, *, mode: str):
    """Moves point ``n`` (``mode="mcmc"``: Algorithm 2's path MH and Eq. 2 Gibbs for
    ``c_n``) or inserts it by the generative process (``mode="prior"``: the point is absent,
    its path and ``c_n`` are drawn from the prior and ``x_n`` from ``N(theta_c, sigma2 I)``).
    Returns ``(state, x_n, accepted)``."""
    M, K1 = st.logb.shape
    K = K1 - 1
    L = st.path.shape[1] - 1
    kp, kb, ka, kc, kn, kx = jax.random.split(key, 6)
    mcmc = mode == "mcmc"
    old = st.path[n]
    count_minus = st.count.at[old].add(-1) if mcmc else st.count
    slots = jnp.arange(M)
    free = jnp.nonzero((st.count == 0) & (slots > 0), size=L, fill_value=M)[0].astype(jnp.int32)
    log_alpha = jnp.log(st.alpha)
    logcnt = jnp.log(jnp.maximum(count_minus, 1).astype(st.logb.dtype))

    # propose a path by the nCRP on the other points
    pkeys = jax.random.split(kp, L)
    cur = jnp.int32(0)
    isnew = jnp.bool_(False)
    nodes, news = [cur], [isnew]
    for l in range(1, L + 1):
        mask = (st.parent == cur) & (count_minus > 0) & (slots > 0)
        logits = jnp.concatenate([jnp.where(mask, logcnt, _NEG), log_alpha[None]])
        pick = _categorical(pkeys[l - 1], logits)
        isnew = isnew | (pick == M)
        cur = jnp.where(isnew, free[l - 1], pick).astype(jnp.int32)
        nodes.append(cur)
        news.append(isnew)
    prop = jnp.stack(nodes)
    new = jnp.stack(news)

    def draw_new(_):
        def body(prev, l):  # level l's draw given its parent (a new node's, or an existing one)
            par_lb = jnp.where((l > 1) & new[l - 1], prev, st.logb[prop[l - 1]])
            d = dp_child_log(jax.random.fold_in(kb, l), par_lb, st.gamma)
            return d, d

        return jax.lax.scan(body, st.logb[0], jnp.arange(1, L + 1))[1]

    newlb = jax.lax.cond(new[L], draw_new, lambda _: jnp.zeros((L, K1), st.logb.dtype), None)
    lb_prop = jnp.where(new[L], newlb[L - 1], st.logb[prop[L]])
    ll, lfs = _comp_loglik(x, st.theta, st.sigma2, cfg)
    if mcmc:
        lp_new = logsumexp(_mix_terms(lb_prop, ll, lfs))
        lp_old = logsumexp(_mix_terms(st.logb[old[L]], ll, lfs))
        acc = mh_accept(ka, lp_new - lp_old)
    else:
        acc = jnp.bool_(True)
    path_n = jnp.where(acc, prop, old)
    st = _write_path(st, n, path_n, acc & new[1:], newlb, count_minus)

    # c_n by Eq. 2 (prior mode: Cat(beta_leaf))
    lb_leaf = st.logb[path_n[L]]
    logits = _mix_terms(lb_leaf, ll, lfs) if mcmc else lb_leaf
    cn = _categorical(kc, logits)
    need = cn == K
    st, slot = _new_component(kn, st, x, path_n[L], cfg, mcmc, need)
    cn = jnp.where(need, slot, cn)
    st = st._replace(c=st.c.at[n].set(cn))
    if not mcmc:
        x = st.theta[cn] + jnp.sqrt(st.sigma2) * jax.random.normal(kx, x.shape, x.dtype)
    return st, x, acc


def _path_conditional(st: BHMCState, n, x, cfg, likelihood: bool = True):
    """Log weights of every place point ``n`` can go, given the other points, ``B`` and
    ``theta`` (the exact nested-CRP Gibbs conditional with ``c_n`` summed out).

    With ``m_z`` the number of other points through node ``z``, ``pa(z)`` its parent and
    ``p(x | beta) = sum_k beta_k N(x; theta_k, sigma2 I) + beta* f*(x)`` (Eq. 1),

    * an existing leaf ``z`` (level ``L``, ``m_z > 0``) has weight
      ``R(z) p(x_n | beta_z)`` with ``R(z) = prod_{y on root->z, y != root}
      m_y / (m_{pa(y)} + alpha)``, the nCRP probability of walking to ``z``;
    * a new branch under an existing node ``z`` at level ``l < L`` (a new child of ``z`` and
      new nodes below it down to level ``L``) has weight ``R(z) alpha / (m_z + alpha)
      p(x_n | beta_z)``: the new nodes' weights ``beta ~ DP(gamma, beta_parent)`` enter the
      likelihood linearly and ``E[beta_child | beta_parent] = beta_parent``, so integrating
      them out leaves the weights of ``z``, the deepest existing node (section 4's identity).

    Returns ``(leaf_logits [M], branch_logits [M], node_loglik [M], count_minus [M], ll [K],
    lfs)``; entries of slots that are not such places are ``-inf``.
    """
    M, K1 = st.logb.shape
    L = st.path.shape[1] - 1
    f = st.logb.dtype
    count_minus = st.count.at[st.path[n]].add(-1)
    slots = jnp.arange(M)
    act = (count_minus > 0) | (slots == 0)
    ll, lfs = _comp_loglik(x, st.theta, st.sigma2, cfg)
    if not likelihood:
        ll, lfs = jnp.zeros_like(ll), jnp.zeros_like(lfs)
    node_ll = logsumexp(st.logb + _mix_terms(jnp.zeros(K1, f), ll, lfs)[None, :], axis=1)
    par = jnp.maximum(st.parent, 0)
    cm = count_minus.astype(f)
    log_stop = jnp.log(cm + st.alpha)  # the CRP's normaliser at each node
    step = jnp.log(jnp.maximum(cm, 1.0)) - log_stop[par]
    reach = jnp.zeros(M, f)
    for l in range(1, L + 1):  # R(z), parents first
        reach = jnp.where(st.level == l, reach[par] + step, reach)
    ok = act & (st.parent >= 0)
    reach = jnp.where(ok | (slots == 0), reach, _NEG)
    leaf = jnp.where(ok & (st.level == L), reach + node_ll, _NEG)
    branch = jnp.where(act & (st.level < L) & ((st.parent >= 0) | (slots == 0)),
                       reach + jnp.log(st.alpha) - log_stop + node_ll, _NEG)
    return leaf, branch, node_ll, count_minus, ll, lfs


def _gibbs_point_update(key, st: BHMCState, n, x, cfg, likelihood: bool = True):
    """Block Gibbs update of point ``n``'s path, its component ``c_n`` and the weights of any
    nodes it creates, given everything else (`_path_conditional`):

    1. draw the place (an existing leaf, or a new branch under an existing node ``z``) from its
       exact conditional with ``c_n`` and the new nodes' weights summed out;
    2. draw ``c_n`` from ``p(c_n = k) ∝ beta_{z,k} N(x_n; theta_k, sigma2 I)`` (``beta*_z
       f*(x_n)`` for a new component), ``z`` the place's deepest existing node (Eq. 2);
    3. draw the new nodes' weights top-down from their conditional given ``c_n``:
       ``beta_child | beta_parent, c_n ~ Dir(gamma beta_parent + e_{c_n})`` (the posterior of
       ``DP(gamma, beta_parent)`` after one draw ``c_n`` at or below the child);
    4. a new component (``c_n = *``) is instantiated by `_new_component`, its ``theta`` drawn
       from its posterior given ``x_n``.

    Nodes only ``n`` went through are dropped when it leaves them (their weights go with them:
    the block includes them). Returns ``(state, x_n, moved)``."""
    M, K1 = st.logb.shape
    K = K1 - 1
    L = st.path.shape[1] - 1
    kp, kc, kb, kn = jax.random.split(key, 4)
    old = st.path[n]
    leaf_lg, branch_lg, _, count_minus, ll, lfs = _path_conditional(st, n, x, cfg, likelihood)
    pick = _categorical(kp, jnp.concatenate([leaf_lg, branch_lg]))
    anchor = jnp.where(pick < M, pick, pick - M).astype(jnp.int32)
    l0 = jnp.where(pick < M, L, st.level[anchor])  # deepest existing level on the new path
    anc = jnp.zeros(L + 1, jnp.int32)
    cur = anchor
    for _ in range(L + 1):  # the anchor's ancestors (the root is written last, repeatedly)
        anc = anc.at[st.level[cur]].set(cur)
        cur = jnp.maximum(st.parent[cur], 0)
    slots = jnp.arange(M)
    free = jnp.nonzero((count_minus == 0) & (slots > 0), size=L, fill_value=M)[0].astype(jnp.int32)
    lv = jnp.arange(L + 1)
    new = lv > l0
    path_n = jnp.where(new, free[jnp.clip(lv - l0 - 1, 0, L - 1)], anc)
    # c_n given the place (new nodes' weights still summed out)
    cn = _categorical(kc, _mix_terms(st.logb[anchor], ll, lfs))
    onehot = jnp.where(jnp.arange(K1) == cn, 0.0, _NEG)
    lg = jnp.log(st.gamma)

    def draw_new(_):
        def body(prev, l):
            d = dirichlet_log(jax.random.fold_in(kb, l), jnp.logaddexp(lg + prev, onehot))
            d = jnp.where(l > l0, d, prev)  # levels at or above the anchor keep its weights
            return d, d

        return jax.lax.scan(body, st.logb[anchor], jnp.arange(1, L + 1))[1]

    newlb = jax.lax.cond(l0 < L, draw_new, lambda _: jnp.zeros((L, K1), st.logb.dtype), None)
    moved = jnp.any(path_n != old)
    st = _write_path(st, n, path_n, new[1:], newlb, count_minus)
    need = cn == K
    st, slot = _new_component(kn, st, x, path_n[L], cfg, likelihood, need)
    st = st._replace(c=st.c.at[n].set(jnp.where(need, slot, cn)))
    return st, x, moved


def _node_comp_counts(st: BHMCState):
    """``N_zk``: points through node ``z`` with ``c = k`` ``[M, K]``."""
    M, K1 = st.logb.shape
    N, L1 = st.path.shape
    f = st.logb.dtype
    flat = (st.path * (K1 - 1) + st.c[:, None]).reshape(-1)
    return jax.ops.segment_sum(jnp.ones(N * L1, f), flat, num_segments=M * (K1 - 1)).reshape(M, K1 - 1)


def _num_tables(key, counts, log_conc, capacity: int):
    """Antoniak draws: the number of tables ``m`` that ``n`` customers occupy in a CRP with
    concentration ``a``, elementwise over ``counts`` (``n``) and ``log_conc`` (``log a``);
    ``m = sum_{i < n} Bernoulli(a / (a + i))``. The customers of all entries together must
    be at most ``capacity`` (one uniform per customer: ``O(capacity)`` work, not
    ``O(entries * max n)``)."""
    shape = counts.shape
    n = counts.reshape(-1)
    la = log_conc.reshape(-1)
    cs = jnp.cumsum(n)
    j = jnp.arange(capacity)
    g = jnp.minimum(jnp.searchsorted(cs, j, side="right"), n.shape[0] - 1)
    valid = j < cs[-1]
    rank = (j - (cs[g] - n[g])).astype(log_conc.dtype)
    # log p = log a - log(a + rank); the first customer always opens a table
    lp = jnp.where(rank > 0, la[g] - jnp.logaddexp(la[g], jnp.log(jnp.maximum(rank, 1.0))), 0.0)
    u = jax.random.uniform(key, (capacity,), log_conc.dtype)
    new = valid & (jnp.log(u) < lp)
    return jax.ops.segment_sum(new.astype(n.dtype), g, num_segments=n.shape[0]).reshape(shape)


def update_weights_exact(key, st: BHMCState, cfg: Optional[BHMCConfig] = None, num_hyper_steps: int = 0):
    """``B | V, c`` exactly, by the multilevel HDP's table counts (the direct-assignment
    sampler of the hierarchical DP, level by level).

    With the weights below a node integrated out, the ``n_zk`` customers of component ``k``
    at node ``z`` (points at a leaf; the tables of its children at an internal node) sit at
    ``m_zk ~ Antoniak(n_zk, gamma beta_{pa(z),k})`` tables, and those tables are the parent's
    customers. Bottom-up, every level's tables are drawn given the current weights of the
    level above; then top-down ``beta_root ~ Dir(n_root,1..K, gamma0)`` and ``beta_z ~
    Dir(gamma beta_pa(z) + n_z)``. (The paper's Eq. 3-4, `update_weights`, give every node its
    point counts instead of its children's tables, which is not the model's conditional: they
    make the sampler drift from the prior; `tests/test_bhmc.py` checks this update leaves it
    invariant.) Components without points get weight 0 everywhere.

    With ``cfg`` and ``num_hyper_steps > 0`` the concentrations are updated in between, with
    every weight integrated out (far better mixing than given the explicit weights, whose tiny
    entries pin ``gamma`` down): ``gamma`` by MH on ``sum_z [m_z log gamma + log Gamma(gamma)
    - log Gamma(gamma + n_z)]`` over the non-root nodes (``n_z`` customers, ``m_z`` tables in
    total) under ``Unif(0, gamma_max)``, and ``gamma0`` on ``K log gamma0 + log Gamma(gamma0) -
    log Gamma(gamma0 + n_root)`` (``K`` components in use) under ``Ga(3.5, 1)``."""
    M, K1 = st.logb.shape
    K = K1 - 1
    N, L1 = st.path.shape
    L = L1 - 1
    f = st.logb.dtype
    active = st.count > 0
    par = jnp.maximum(st.parent, 0)
    nonroot = active & (st.parent >= 0)
    leaf_cnt = jax.ops.segment_sum(jnp.ones(N, jnp.int32), st.path[:, L] * K + st.c,
                                   num_segments=M * K).reshape(M, K)
    lg = jnp.log(st.gamma)
    keys = jax.random.split(key, L + 2)
    cust = jnp.where(((st.level == L) & nonroot)[:, None], leaf_cnt, 0)
    n_tot = jnp.zeros(M, f)
    m_tot = jnp.zeros(M, f)
    for l in range(L, 0, -1):  # customers at level l -> tables -> customers at level l - 1
        sel = (st.level == l) & nonroot
        m = _num_tables(keys[l], jnp.where(sel[:, None], cust, 0), lg + st.logb[par, :K], N)
        n_tot = jnp.where(sel, jnp.sum(cust, 1).astype(f), n_tot)
        m_tot = jnp.where(sel, jnp.sum(m, 1).astype(f), m_tot)
        up = jax.ops.segment_sum(jnp.where(sel[:, None], m, 0), jnp.where(sel, par, M), num_segments=M + 1)[:M]
        lvl = (st.level == l - 1) & (active | (jnp.arange(M) == 0))
        cust = jnp.where(lvl[:, None], up, cust)
    n_root = cust[0].astype(f)
    if cfg is not None and num_hyper_steps > 0:
        kg, kg0 = jax.random.split(jax.random.fold_in(key, 7))

        def t_gamma(g):
            v = jnp.sum(jnp.where(nonroot, m_tot * jnp.log(g) + gammaln(g) - gammaln(g + n_tot), 0.0))
            return jnp.where(g < cfg.gamma_max, v, _NEG)

        k_used = jnp.sum(n_root > 0).astype(f)
        n0 = jnp.sum(n_root)

        def t_gamma0(g0):
            return k_used * jnp.log(g0) + gammaln(g0) - gammaln(g0 + n0) + _gamma_logpdf(g0, 3.5, 1.0)

        st = st._replace(gamma=_log_rw_mh(kg, t_gamma, st.gamma, cfg.step[2], num_hyper_steps),
                         gamma0=_log_rw_mh(kg0, t_gamma0, st.gamma0, cfg.step[1], num_hyper_steps))
        lg = jnp.log(st.gamma)
    root_conc = jnp.concatenate([jnp.log(n_root), jnp.log(st.gamma0)[None]])
    logb = st.logb.at[0].set(dirichlet_log(keys[0], root_conc))
    return st._replace(logb=_children_top_down(keys[L + 1], st, logb, jnp.log(cust.astype(f)), lg))


def _children_top_down(key, st: BHMCState, logb, log_n, lg):
    """Every active non-root node's weights ``Dir(gamma beta_parent + n_z)`` (``log_n [M, K]``:
    its customers), level by level from the top, given the root's row of ``logb``."""
    L = st.path.shape[1] - 1
    par = jnp.maximum(st.parent, 0)
    nonroot = (st.count > 0) & (st.parent >= 0)

    def level_body(l, logb):
        sel = (st.level == l) & nonroot
        lp = logb[par]
        conc = jnp.concatenate([jnp.logaddexp(log_n, lg + lp[:, :-1]), lg + lp[:, -1:]], axis=1)
        draw = dirichlet_log(jax.random.fold_in(key, l), conc)
        return jnp.where(sel[:, None], draw, logb)

    return jax.lax.fori_loop(1, L + 1, level_body, logb)


def update_weights(key, st: BHMCState):
    """``B | V, c``: Eq. 3 at the root, then Eq. 4 level by level (parents first).
    Components no point uses get weight 0 everywhere (their slots become free)."""
    nk = _node_comp_counts(st)
    root_conc = jnp.concatenate([jnp.log(nk[0]), jnp.log(st.gamma0)[None]])
    logb = st.logb.at[0].set(dirichlet_log(jax.random.fold_in(key, 0), root_conc))
    return st._replace(logb=_children_top_down(key, st, logb, jnp.log(nk), jnp.log(st.gamma)))


def update_theta(key, st: BHMCState, X, cfg, likelihood: bool = True):
    """Eq. 5: ``theta_k | X, c ~ N(mu_k, Sigma_k)`` with ``Sigma_k = (Sigma0^-1 + N_k
    Sigma^-1)^-1``, ``mu_k = Sigma_k (Sigma0^-1 mu0 + Sigma^-1 sum_{c_n = k} x_n)``
    (``likelihood=False``: the prior ``H``)."""
    K = st.theta.shape[0]
    w = jnp.ones(X.shape[0], X.dtype) if likelihood else jnp.zeros(X.shape[0], X.dtype)
    nk = jax.ops.segment_sum(w, st.c, num_segments=K)
    sk = jax.ops.segment_sum(X * w[:, None], st.c, num_segments=K)
    var = 1.0 / (1.0 / cfg.prior_var[None, :] + nk[:, None] / st.sigma2)
    mean = var * (cfg.mu0 / cfg.prior_var + sk / st.sigma2)
    return st._replace(theta=mean + jnp.sqrt(var) * jax.random.normal(key, mean.shape, mean.dtype))


def _gamma_logpdf(x, a, rate):
    return (a - 1.0) * jnp.log(x) - rate * x


def _hyper_targets(st: BHMCState, X, cfg):
    """Log conditional densities (up to constants) of each hyperparameter given the rest,
    including its hyperprior: ``alpha ~ Ga(3, 1)``, ``gamma0 ~ Ga(3.5, 1)``, ``gamma ~
    Unif(0, 1.5)``, ``sigma2 ~ Unif(0, s)``."""
    L = st.path.shape[1] - 1
    K = st.theta.shape[0]
    active = st.count > 0
    nonroot = active & (st.parent >= 0)
    par = jnp.maximum(st.parent, 0)
    live = jnp.isfinite(st.logb[0, :K])
    n_live = jnp.sum(live).astype(X.dtype)
    star0 = st.logb[0, K]
    sq = jnp.sum((X - st.theta[st.c]) ** 2)
    ND = X.shape[0] * X.shape[1]

    def t_alpha(a):
        return ncrp_log_prob(st.parent, st.level, st.count, a, L) + _gamma_logpdf(a, 3.0, 1.0)

    def t_gamma0(g0):
        return n_live * jnp.log(g0) + (g0 - 1.0) * star0 + _gamma_logpdf(g0, 3.5, 1.0)

    def t_gamma(g):
        d = jax.vmap(_log_dirichlet_density)(st.logb, jnp.log(g) + st.logb[par])
        return jnp.where(g < cfg.gamma_max, jnp.sum(jnp.where(nonroot, d, 0.0)), _NEG)

    def t_sigma2(s2):
        return jnp.where(s2 < cfg.sigma2_max, -0.5 * ND * jnp.log(s2) - 0.5 * sq / s2, _NEG)

    return t_alpha, t_gamma0, t_gamma, t_sigma2


def _log_rw_mh(key, t, v, step, num_steps):
    """``num_steps`` log-scale random-walk MH proposals for a positive scalar with log target
    ``t`` (the log-normal proposal's Jacobian is in the ratio)."""
    def body(j, carry):
        v, lp = carry
        k1, k2 = jax.random.split(jax.random.fold_in(key, j))
        v2 = v * jnp.exp(step * jax.random.normal(k1, (), v.dtype))
        lp2 = t(v2)
        ok = mh_accept(k2, lp2 - lp + jnp.log(v2) - jnp.log(v))
        return jnp.where(ok, v2, v), jnp.where(ok, lp2, lp)

    return jax.lax.fori_loop(0, num_steps, body, (v, t(v)))[0]


def update_hyper(key, st: BHMCState, X, cfg, num_steps: int = 5, which=(True, True, True, True)):
    """Log-scale random-walk MH for each of ``(alpha, gamma0, gamma, sigma2)`` in turn (those
    with ``which`` set), ``num_steps`` proposals each, given the explicit state."""
    targets = _hyper_targets(st, X, cfg)
    vals = [st.alpha, st.gamma0, st.gamma, st.sigma2]
    keys = jax.random.split(key, 4)
    out = [_log_rw_mh(keys[i], t, v, cfg.step[i], num_steps) if w else v
           for i, (t, v, w) in enumerate(zip(targets, vals, which))]
    return st._replace(alpha=out[0], gamma0=out[1], gamma=out[2], sigma2=out[3])


def complete_data_log_likelihood(st: BHMCState, X):
    """``log p(X, c, V | B, theta)``: ``sum_n [log beta_{leaf(n), c_n} + log N(x_n;
    theta_{c_n}, sigma2 I)] + log p(V | alpha)``, the paper's criterion for the reported
    tree."""
    L = st.path.shape[1] - 1
    leaf = st.path[:, L]
    lc = jnp.sum(st.logb[leaf, st.c])
    lx = jnp.sum(_normal_diag_logpdf(X, st.theta[st.c], st.sigma2))
    return lc + lx + ncrp_log_prob(st.parent, st.level, st.count, st.alpha, L)


def _sweep(key, st: BHMCState, X, cfg, sample_hyper: bool, num_hyper_steps: int, path_update: str = "gibbs",
           likelihood: bool = True):
    N = X.shape[0]
    kperm, kpts, kh, kb, kt = jax.random.split(key, 5)
    perm = jax.random.permutation(kperm, N)

    def body(i, carry):
        s, nacc = carry
        n = perm[i]
        k = jax.random.fold_in(kpts, i)
        if path_update == "gibbs":
            s, _, acc = _gibbs_point_update(k, s, n, X[n], cfg, likelihood)
        else:
            s, _, acc = _point_update(k, s, n, X[n], cfg, mode="mcmc")
        return s, nacc + acc.astype(jnp.int32)

    st, nacc = jax.lax.fori_loop(0, N, body, (st, jnp.int32(0)))
    if path_update == "gibbs":  # alpha, sigma2 given the state; gamma0, gamma with the weights integrated out
        if sample_hyper:  # (without the likelihood sigma2 keeps its value: its target would be the flat prior)
            st = update_hyper(kh, st, X, cfg, num_hyper_steps, (True, False, False, likelihood))
        st = update_weights_exact(kb, st, cfg, num_hyper_steps if sample_hyper else 0)
    else:
        if sample_hyper:
            st = update_hyper(kh, st, X, cfg, num_hyper_steps)
        st = update_weights(kb, st)
    st = update_theta(kt, st, X, cfg, likelihood)
    K = st.theta.shape[0]
    info = {
        "log_likelihood": complete_data_log_likelihood(st, X),
        "accept_rate": nacc.astype(X.dtype) / N,
        "num_nodes": jnp.sum(st.count > 0),
        "num_components": jnp.sum(jnp.isfinite(st.logb[0, :K])),
        "alpha": st.alpha, "gamma0": st.gamma0, "gamma": st.gamma, "sigma2": st.sigma2,
    }
    return st, info


@functools.partial(jax.jit, static_argnames=("sample_hyper", "num_hyper_steps", "path_update", "likelihood"))
def _sweep_jit(key, st, X, cfg, sample_hyper, num_hyper_steps, path_update="gibbs", likelihood=True):
    return _sweep(key, st, X, cfg, sample_hyper, num_hyper_steps, path_update, likelihood)


def bhmc_step(key, state: BHMCState, X, cfg: BHMCConfig, *, sample_hyper: bool = False, num_hyper_steps: int = 5,
              path_update: str = "gibbs", likelihood: bool = True):
    """One sweep (compiled once per shape): every point's path and ``c_n`` in a random order
    (``path_update="gibbs"``: the exact block Gibbs step `_gibbs_point_update`; ``"mh"``:
    Algorithm 2's nCRP-proposal MH and Eq. 2), then (optionally) hyperparameter MH, ``B``
    and ``theta``. ``likelihood=False`` targets the prior (the data are ignored; for
    checking that the moves leave the prior invariant). Returns ``(state, info)``; ``info``
    holds the complete-data log likelihood, the
    fraction of points that moved (Gibbs) or whose proposal was accepted (MH), node and
    component counts and the hyperparameters."""
    if path_update not in ("gibbs", "mh"):
        raise ValueError(f"path_update must be 'gibbs' or 'mh', got {path_update!r}")
    return _sweep_jit(key, state, jnp.asarray(X), cfg, bool(sample_hyper), int(num_hyper_steps), path_update,
                      bool(likelihood))


# ------------------------------------------------------------------------------------------
# initial states
# ------------------------------------------------------------------------------------------
def _empty_state(N, D, L, M, K, hyper, dtype):
    alpha, gamma0, gamma, sigma2 = (jnp.asarray(h, dtype) for h in hyper)
    logb = jnp.full((M, K + 1), _NEG, dtype).at[:, K].set(0.0)
    return BHMCState(
        path=jnp.zeros((N, L + 1), jnp.int32), c=jnp.zeros(N, jnp.int32),
        parent=jnp.full(M, -1, jnp.int32), level=jnp.zeros(M, jnp.int32), count=jnp.zeros(M, jnp.int32),
        logb=logb, theta=jnp.zeros((K, D), dtype), alpha=alpha, gamma0=gamma0, gamma=gamma, sigma2=sigma2,
        overflow=jnp.int32(0))


@functools.partial(jax.jit, static_argnames=("N", "D", "L", "M", "K"))
def _prior_sample(key, hyper, cfg, N, D, L, M, K):
    st = _empty_state(N, D, L, M, K, hyper, cfg.mu0.dtype)
    x0 = jnp.zeros((N, D), cfg.mu0.dtype)

    def body(n, carry):
        s, X = carry
        s, x, _ = _point_update(jax.random.fold_in(key, n), s, n, X[n], cfg, mode="prior")
        return s, X.at[n].set(x)

    return jax.lax.fori_loop(0, N, body, (st, x0))


def prior_sample_state(key, num_points: int, dim: int, depth: int, cfg: BHMCConfig, *, alpha=1.0, gamma0=1.0,
                       gamma=1.0, sigma2=1.0, max_nodes: Optional[int] = None, max_components: Optional[int] = None):
    """An exact draw ``(state, X)`` from the BHMC prior by the generative process (points
    inserted one by one; the root starts with no component and components are made on
    demand, so there is no truncation). Compiled; ``vmap``-able over ``key``."""
    N, D, L = int(num_points), int(dim), int(depth)
    M = int(max_nodes) if max_nodes is not None else N * L + 1
    K = int(max_components) if max_components is not None else 4 * N + 16  # revealed, untaken atoms too
    return _prior_sample(key, (alpha, gamma0, gamma, sigma2), cfg, N, D, L, M, K)


def bhmc_init(key, X, depth: int, cfg: BHMCConfig, *, alpha=0.5, gamma0=1.0, gamma=0.5, sigma2=1.0, epsilon=1e-6,
              max_nodes: int = 1024, max_components: int = 128) -> BHMCState:
    """The initial state of Algorithm 2: the root's sticks broken until ``beta* < epsilon``
    (line 1), their ``theta_k`` at distinct random data points, every point on one path of ``depth`` nodes (each node's
    ``beta ~ DP(gamma, beta_parent)``), ``c_n`` by Eq. 2 among those components with the root's
    weights, then ``B``
    and ``theta`` updated once (Eq. 3-5)."""
    X = jnp.asarray(X)
    N, D = X.shape
    L, M, K = int(depth), int(max_nodes), int(max_components)
    if M < L + 1:
        raise ValueError(f"max_nodes must be >= depth + 1 = {L + 1}, got {M}")
    st, n_sticks = _init_jit(key, X, (alpha, gamma0, gamma, sigma2), cfg, jnp.asarray(epsilon, X.dtype), L, M, K)
    n_sticks = int(n_sticks)
    if n_sticks > K:
        raise ValueError(f"the initial root stick needs {n_sticks} components until beta* < epsilon={epsilon}, "
                         f"more than max_components={K}; raise max_components or epsilon")
    return st


@functools.partial(jax.jit, static_argnames=("L", "M", "K"))
def _init_jit(key, X, hyper, cfg, epsilon, L, M, K):
    N, D = X.shape
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
    root = jnp.where(use, log_prev + jnp.log(u), _NEG)
    star = log_rem[jnp.minimum(n_sticks, K) - 1]
    logb = st.logb.at[0].set(jnp.concatenate([root, star[None]]))
    # theta: the instantiated components start at distinct random points (a data-driven start;
    # theta_k ~ H would leave one component holding every point), the other slots at H draws
    kt1, kt2 = jax.random.split(kt)
    pick = jax.random.permutation(kt1, N)[jnp.arange(K) % N]
    theta = jnp.where((jnp.arange(K) < n_sticks)[:, None], X[pick],
                      cfg.mu0 + jnp.sqrt(cfg.prior_var) * jax.random.normal(kt2, (K, D), f))
    # one chain of nodes 0..L
    logb = jax.lax.fori_loop(1, L + 1, lambda l, lb: lb.at[l].set(
        dp_child_log(jax.random.fold_in(kb, l), lb[l - 1], st.gamma)), logb)
    parent = st.parent.at[1:L + 1].set(jnp.arange(L, dtype=jnp.int32))
    level = st.level.at[1:L + 1].set(jnp.arange(1, L + 1, dtype=jnp.int32))
    count = st.count.at[:L + 1].set(N)
    path = jnp.broadcast_to(jnp.arange(L + 1, dtype=jnp.int32), (N, L + 1))
    st = st._replace(logb=logb, theta=theta, parent=parent, level=level, count=count, path=path)
    # c_n among the instantiated components by Eq. 2 with the root's weights (the chain's
    # leaf weights, drawn from the sparse HDP, would put nearly every point in one component);
    # Eq. 3-4 then give every chain node weight on all the components in use
    ll = _normal_diag_logpdf(X[:, None, :], theta[None], st.sigma2)
    logits = logb[0, :K][None] + ll
    c = jax.random.categorical(kc, logits, axis=1).astype(jnp.int32)
    st = st._replace(c=c)
    st = update_weights(kB, st)
    st = update_theta(kT, st, X, cfg)
    return st, n_sticks


# ------------------------------------------------------------------------------------------
# results
# ------------------------------------------------------------------------------------------
class BHMCResult(NamedTuple):
    """Output of `bhmc`.

    Attributes:
      tree: `ParentTree` of the reported state (the one with the greatest complete-data
        likelihood among the kept sweeps): leaves ``0..N-1`` are the points, each under its
        level-``L`` node; internal nodes follow (``heights`` = their depth, points at ``L+1``).
      level_labels: int ``[N, L]``; column ``l - 1`` is every point's node at level ``l``,
        renumbered ``0..`` per level.
      paths: int ``[N, L + 1]`` node slots of the reported state.
      labels: int ``[N]`` component of every point in the reported state.
      log_likelihood: its complete-data log likelihood.
      trace: dict of ``[num_warmup + num_samples]`` arrays, one entry per sweep
        (``log_likelihood``, ``accept_rate``, ``num_nodes``, ``num_components``, ``alpha``,
        ``gamma0``, ``gamma``, ``sigma2``).
      state: the last `BHMCState` (continue with `bhmc_step`).
      best_state: the reported `BHMCState`.
      config: the `BHMCConfig` used.
      best_sweep: the sweep that gave it (``-1``: the start, when no kept sweep reached its
        complete-data likelihood).
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
# validation and the driver
# ------------------------------------------------------------------------------------------
def _check_X(X):
    X = real_array(X, "X", "[N, D]")
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D [N, D], got shape {X.shape}")
    if X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(f"X must not be empty, got shape {X.shape}")
    X = X.astype(jnp.result_type(float))
    if not np.all(np.isfinite(X)):
        raise ValueError("X contains NaN or inf; BHMC needs complete, finite data")
    with np.errstate(over="ignore", invalid="ignore"):
        ok = np.isfinite(np.sum(np.square(X))) and np.isfinite(np.sum(np.var(X, axis=0)))
    if not ok:
        raise ValueError(f"X: entries up to {float(np.max(np.abs(X))):.3g} are too large: their sums of squares "
                         f"overflow float64; rescale X (e.g. standardise its columns)")
    return X


def _check_positive(v, name, upper=None):
    try:
        v = float(v)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, got {type(v).__name__}") from None
    if not np.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {v}")
    if upper is not None and v >= upper:
        raise ValueError(f"{name} must be < {upper} (the support of its hyperprior), got {v}")
    return v


def _check_int(v, name, minimum):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v}")
    return int(v)


def _check_key(key):
    if not (isinstance(key, jax.Array) and (jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
                                            or (key.dtype == jnp.uint32 and key.shape == (2,)))):
        raise TypeError("key must be a jax.random key (jax.random.key(0) or PRNGKey(0))")


def _data_scale(X):
    """Mean per-feature variance of ``X`` (1 for a single point or constant data)."""
    v = float(np.mean(np.var(X, axis=0))) if X.shape[0] > 1 else 0.0
    return v if v > 0 and np.isfinite(v) else 1.0


def make_config(X, *, mu0=None, prior_var=None, sigma2_max=None, step=(0.3, 0.3, 0.3, 0.1), gamma_max=1.5):
    """The `BHMCConfig` for data ``X``.

    Defaults come from the data, so the model moves with it under ``X -> a X + b``: ``mu0``
    the per-feature mean, ``prior_var`` the per-feature variance (the spread of the component
    means is at most the data's; a constant feature gets ``1e-6`` of the mean variance),
    ``sigma2_max`` the mean per-feature variance (the noise cannot exceed the data's spread)."""
    X = np.asarray(X, float)
    D = X.shape[1]
    scale = _data_scale(X)
    if mu0 is None:
        mu0 = np.mean(X, axis=0)
    if prior_var is None:
        prior_var = np.maximum(np.var(X, axis=0), 1e-6 * scale) if X.shape[0] > 1 else np.full(D, scale)
    try:
        mu0 = np.broadcast_to(np.asarray(mu0, float), (D,))
        pv = np.broadcast_to(np.asarray(prior_var, float), (D,))
    except (TypeError, ValueError):
        raise ValueError(f"mu0 and prior_var must be scalars or length-{D} vectors") from None
    if not np.all(np.isfinite(mu0)):
        raise ValueError("mu0 must be finite")
    if not np.all(np.isfinite(pv)) or np.any(pv <= 0):
        raise ValueError(f"prior_var must be finite and > 0, got {prior_var}")
    if sigma2_max is None:
        sigma2_max = scale
    sigma2_max = _check_positive(sigma2_max, "sigma2_max")
    f = jnp.result_type(float)
    return BHMCConfig(jnp.asarray(mu0, f), jnp.asarray(pv, f), jnp.asarray(sigma2_max, f),
                      jnp.asarray(step, f), jnp.asarray(gamma_max, f))


def _raise_overflow(flag, M, K, where):
    if flag & OVERFLOW_NODES:
        raise ValueError(f"BHMC ran out of node slots (max_nodes={M}) {where}; pass a larger max_nodes")
    if flag & OVERFLOW_COMPONENTS:
        raise ValueError(f"BHMC ran out of component slots (max_components={K}) {where}; "
                         f"pass a larger max_components")


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


def tree_init_state(X, depth: int, cfg: BHMCConfig, *, key, init="ward", level_sizes=None, alpha=1.0,
                    gamma0=1.0, gamma=0.5, sigma2=None, max_nodes: int = 1024, max_components: int = 128,
                    sample_hyper: bool = True):
    """A start for the sampler cut from a hierarchy: Ward's linkage of ``X`` (``init="ward"``)
    or a binary `Tree` (e.g. ``jaxhc.bhc(...).tree``) cut at ``level_sizes`` clusters per level
    (nested cuts; default `level_sizes_from_gaps` with at most ``max(2 sqrt(N), L + 1)``
    clusters), then `state_from_level_labels`.

    Returns ``(state, level_sizes)``."""
    from scipy.cluster.hierarchy import cut_tree

    X = np.asarray(X, float)
    N = X.shape[0]
    L, K = int(depth), int(max_components)
    if N == 1:
        sizes = [1] * L
        labels = np.zeros((1, L), np.int64)
    else:
        Z = _linkage_of(init, X)
        if level_sizes is None:
            cap = max(min(int(2 * np.sqrt(N)), K), L + 1)
            sizes = level_sizes_from_gaps(Z[:, 2], L, cap)
        else:
            sizes = [int(s) for s in level_sizes]
            if len(sizes) != L or any(s < 1 or s > N for s in sizes) or sizes != sorted(sizes):
                raise ValueError(f"init_levels must be {L} non-decreasing cluster counts in 1..N={N}, "
                                 f"got {level_sizes!r}")
        labels = np.asarray(cut_tree(Z, n_clusters=sizes), np.int64).reshape(N, L)
    st = state_from_level_labels(X, labels, cfg, key=key, alpha=alpha, gamma0=gamma0, gamma=gamma, sigma2=sigma2,
                                 max_nodes=max_nodes, max_components=max_components, sample_hyper=sample_hyper)
    return st, sizes


def state_from_level_labels(X, level_labels, cfg: BHMCConfig, *, key, components=None, alpha=1.0, gamma0=1.0,
                            gamma=0.5, sigma2=None, max_nodes: int = 1024, max_components: int = 128,
                            sample_hyper: bool = True) -> BHMCState:
    """The state whose paths are the nested partition ``level_labels`` (``[N, L]``; column
    ``l`` labels level ``l + 1``; a cluster at level ``l + 1`` must lie inside one at level
    ``l``), with components ``components`` (default: one per leaf-level cluster), ``theta``
    the components' means, ``sigma2`` (when not given) the pooled within-component variance
    per feature (below ``sigma2_max`` when it is sampled), then ``B`` and ``theta`` drawn from
    their conditionals (`update_weights_exact`, Eq. 5). Used for starts, and to score a known
    labelling by the model (e.g. the truth against the sampler's best state)."""
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
            raise ValueError(f"the initial tree needs {nxt} node slots, more than max_nodes={M}; "
                             f"pass a larger max_nodes or smaller init_levels")
        path[:, l] = ids
        parent[ids] = path[:, l - 1]
        level[ids] = l
    _, c = np.unique(path[:, L] if components is None else np.asarray(components), return_inverse=True)
    c = c.reshape(-1)
    kc = int(c.max()) + 1
    if kc > K:
        raise ValueError(f"the initial tree has {kc} components, more than max_components={K}; "
                         f"pass a larger max_components or smaller init_levels")
    counts = np.bincount(c, minlength=K).astype(float)
    theta = np.zeros((K, D))
    np.add.at(theta, c, X)
    theta[:kc] /= counts[:kc, None]
    if sigma2 is None:
        resid = float(np.mean((X - theta[c]) ** 2))
        sigma2 = resid if resid > 0 else 0.01 * float(cfg.sigma2_max)
        if sample_hyper:
            sigma2 = min(sigma2, 0.99 * float(cfg.sigma2_max))
    f = jnp.result_type(float)
    st = _empty_state(N, D, L, M, K, (alpha, gamma0, gamma, sigma2), f)
    count = np.zeros(M, np.int64)
    np.add.at(count, path.reshape(-1), 1)
    logb = np.full((M, K + 1), -np.inf)
    logb[:, K] = 0.0
    logb[0, :kc] = np.log(counts[:kc] / (N + 1.0))
    logb[0, K] = np.log(1.0 / (N + 1.0))
    st = st._replace(path=jnp.asarray(path, jnp.int32), c=jnp.asarray(c, jnp.int32),
                     parent=jnp.asarray(parent, jnp.int32), level=jnp.asarray(level, jnp.int32),
                     count=jnp.asarray(count, jnp.int32), logb=jnp.asarray(logb, f), theta=jnp.asarray(theta, f))
    return _refresh_jit(key, st, jnp.asarray(X, f), cfg)


@jax.jit
def _refresh_jit(key, st, X, cfg):
    kb, kt = jax.random.split(key)
    return update_theta(kt, update_weights_exact(kb, st), X, cfg)


def _grow_state(st: BHMCState, M2: int, K2: int) -> BHMCState:
    """``st`` (or a stack of chains) padded to ``M2`` node and ``K2`` component slots."""
    M, K1 = st.logb.shape[-2:]
    K = K1 - 1
    lead = st.logb.shape[:-2]
    f = st.logb.dtype
    logb = jnp.full(lead + (M2, K2 + 1), _NEG, f).at[..., :, K2].set(0.0)
    logb = logb.at[..., :M, :K].set(st.logb[..., :K]).at[..., :M, K2].set(st.logb[..., K])
    theta = jnp.zeros(lead + (K2, st.theta.shape[-1]), f).at[..., :K, :].set(st.theta)

    def pad(a, fill):
        return jnp.full(lead + (M2,), fill, a.dtype).at[..., :M].set(a)

    return st._replace(logb=logb, theta=theta, parent=pad(st.parent, -1), level=pad(st.level, 0),
                       count=pad(st.count, 0), overflow=jnp.zeros_like(st.overflow))


def _check_chains(num_chains, chain_method):
    if isinstance(num_chains, bool) or not isinstance(num_chains, (int, np.integer)) or num_chains < 1:
        raise ValueError(f"num_chains must be an int >= 1, got {num_chains!r}")
    if chain_method not in ("vectorized", "sequential"):
        raise ValueError(f"chain_method must be 'vectorized' or 'sequential', got {chain_method!r}")


@functools.partial(jax.jit, static_argnames=("sample_hyper", "num_hyper_steps", "path_update", "likelihood"))
def _sweep_chains_jit(keys, st, X, cfg, sample_hyper, num_hyper_steps, path_update="gibbs", likelihood=True):
    return jax.vmap(lambda k, s: _sweep(k, s, X, cfg, sample_hyper, num_hyper_steps, path_update, likelihood))(keys, st)


def bhmc(key, X, depth: int = 4, *, alpha=1.0, gamma0=1.0, gamma=0.5, sigma2=None, mu0=None, prior_var=None,
         num_samples: int = 200, num_warmup: int = 100, sample_hyper: bool = True, sigma2_max=None,
         epsilon=1e-6, max_nodes: Optional[int] = None, max_components: Optional[int] = None,
         num_hyper_steps: int = 5, init="ward", init_levels=None, path_update: str = "gibbs", num_chains: int = 1,
         chain_method: str = "vectorized", init_state: Optional[BHMCState] = None, progress_bar: bool = True) -> BHMCResult:
    """Bayesian Hierarchical Mixture Clustering (Huang et al.): ``num_warmup + num_samples``
    sweeps of the exact block Gibbs sampler (or Algorithm 2's MH); reports the state with the
    greatest complete-data likelihood ``p(X, c, V | B, theta)`` among the start and the kept
    sweeps of all chains (the paper's criterion; ``best_sweep`` says which).

    Defaults work on any data's location and scale: the base measure ``H`` is centred on the
    data's mean with its per-feature variance, ``sigma2`` starts at the pooled within-cluster
    variance of the initial tree and is sampled with ``(alpha, gamma0, gamma)`` under the
    paper's hyperpriors, and the start is Ward's tree cut to ``depth`` levels where its merge
    heights jump (`level_sizes_from_gaps`). The same key gives the same labels for ``X`` and
    ``a X + b``.

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
      max_nodes, max_components: slot capacities. Left at their defaults (``min(N L + L + 1,
        1024)``, enough for every point on its own path while one more is proposed, and 128)
        they double when a sweep runs out (the sweep is redone; one more compilation), up to
        ``N L + L + 1`` nodes and 4096 components; given explicitly, running out raises a
        ValueError that names the one to raise.
      num_hyper_steps: MH proposals per hyperparameter per sweep.
      init: ``"ward"`` (default; `tree_init_state`), a binary `Tree` over the points (e.g. a
        BHC tree) cut the same way, or ``"chain"`` (the paper's start: every point on one path,
        components from the root's sticks at random points).
      init_levels: clusters per level for a tree start (``L`` non-decreasing ints; default
        `level_sizes_from_gaps`).
      path_update: ``"gibbs"`` (exact conditional over every existing path and new-branch
        position, `_gibbs_point_update`) or ``"mh"`` (Algorithm 2's nCRP-proposal MH).
      num_chains: independent chains (different keys, same start); the best state over all of
        them is reported.
      chain_method: ``"vectorized"`` (one program ``vmap``-ed over chains) or
        ``"sequential"``.
      init_state: continue from this state (e.g. ``result.state``) instead of initialising
        (one chain).
      progress_bar: show a tqdm bar over sweeps.

    Returns:
      `BHMCResult` (``tree``, ``level_labels [N, L]``, ``trace``, ...; with several chains
      ``trace`` entries are ``[num_chains, sweeps]`` and ``state`` holds every chain).
    """
    _check_key(key)
    X = _check_X(X)
    N, D = X.shape
    L = _check_int(depth, "depth", 1)
    alpha = _check_positive(alpha, "alpha")
    gamma0 = _check_positive(gamma0, "gamma0")
    gamma = _check_positive(gamma, "gamma", 1.5 if sample_hyper else None)
    if sigma2 is not None:
        sigma2 = _check_positive(sigma2, "sigma2")
    epsilon = _check_positive(epsilon, "epsilon")
    num_samples = _check_int(num_samples, "num_samples", 1)
    num_warmup = _check_int(num_warmup, "num_warmup", 0)
    num_hyper_steps = _check_int(num_hyper_steps, "num_hyper_steps", 1)
    M = _check_int(max_nodes if max_nodes is not None else min(N * L + L + 1, 1024), "max_nodes", L + 1)
    K = _check_int(max_components if max_components is not None else 128, "max_components", 1)
    if path_update not in ("gibbs", "mh"):
        raise ValueError(f"path_update must be 'gibbs' or 'mh', got {path_update!r}")
    _check_chains(num_chains, chain_method)
    if not (isinstance(init, str) and init in ("ward", "chain")) and not isinstance(init, Tree):
        raise ValueError(f"init must be 'ward', 'chain' or a jaxhc Tree over the {N} points, got {init!r}")
    if isinstance(init, Tree) and init.n_leaves != N:
        raise ValueError(f"init tree has {init.n_leaves} leaves, expected N={N}")
    cfg = make_config(X, mu0=mu0, prior_var=prior_var, sigma2_max=sigma2_max)
    if sample_hyper and sigma2 is not None and sigma2 >= float(cfg.sigma2_max):
        if sigma2_max is not None:  # both given by the user: they contradict each other
            raise ValueError(f"sigma2={sigma2} must be < sigma2_max={float(cfg.sigma2_max)} when sample_hyper=True "
                             f"(leave sigma2=None to start from the data)")
        # sigma2 = 1 on standardised data sits on the default prior's upper end (the data's
        # own variance): start just inside the prior's support instead of refusing
        import warnings

        start = 0.99 * float(cfg.sigma2_max)
        warnings.warn(f"bhmc: sigma2={sigma2} is not below the default sigma2_max={float(cfg.sigma2_max):.4g} "
                      f"(the data's mean per-feature variance, the upper end of sigma2's prior when "
                      f"sample_hyper=True); starting from sigma2={start:.4g}. Pass sigma2_max to widen the prior.",
                      UserWarning, stacklevel=2)
        sigma2 = start
    Xj = jnp.asarray(X)
    k_init, k_run = jax.random.split(key)
    hyper = dict(alpha=alpha, gamma0=gamma0, gamma=gamma)
    if init_state is not None:
        st = init_state
        if tuple(st.path.shape) != (N, L + 1):
            raise ValueError(f"init_state.path has shape {tuple(st.path.shape)}, expected {(N, L + 1)}")
        M, K = st.parent.shape[0], st.theta.shape[0]
        num_chains = 1
    elif init == "chain":
        s2 = sigma2 if sigma2 is not None else 0.25 * float(cfg.sigma2_max)
        st = bhmc_init(k_init, Xj, L, cfg, sigma2=s2, epsilon=epsilon, max_nodes=M, max_components=K, **hyper)
    else:
        st, _ = tree_init_state(X, L, cfg, key=k_init, init=init, level_sizes=init_levels, sigma2=sigma2,
                                max_nodes=M, max_components=K, sample_hyper=sample_hyper, **hyper)
    chains = num_chains > 1
    vec = chains and chain_method == "vectorized"
    if vec:
        st = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (num_chains,) + a.shape), st)
    sts = [st] * num_chains if chains and not vec else None
    total = num_warmup + num_samples
    rows = []
    bar = None
    if progress_bar:
        from tqdm.auto import tqdm
        bar = tqdm(total=total, desc="bhmc" + (f" ({num_chains} chains)" if chains else ""))
    args = (Xj, cfg, bool(sample_hyper), num_hyper_steps, path_update, True)
    best_sweep = -1  # the start is a candidate too (the sampler may only find worse states)
    best = jax.tree_util.tree_map(lambda a: a[0], st) if vec else (sts[0] if sts is not None else st)
    best_val = float(complete_data_log_likelihood(best, Xj))
    auto_M, auto_K = max_nodes is None, max_components is None
    M_full = N * L + L + 1
    try:
        t = 0
        while t < total:
            kt = jax.random.fold_in(k_run, t)
            prev = (st, sts)
            if vec:
                st, info = _sweep_chains_jit(jax.random.split(kt, num_chains), st, *args)
                cand = None  # a chain is sliced out of the stack only when it becomes the best
            elif chains:
                ks = jax.random.split(kt, num_chains)
                outs = [_sweep_jit(ks[i], sts[i], *args) for i in range(num_chains)]
                sts = [o[0] for o in outs]
                info = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *[o[1] for o in outs])
                cand = sts
            else:
                st, info = _sweep_jit(kt, st, *args)
                cand = [st]
            info = jax.device_get(info)
            flag = int(np.bitwise_or.reduce(np.atleast_1d(np.asarray(
                [c.overflow for c in cand] if not vec else st.overflow))))
            if flag:
                grow_M = bool(flag & OVERFLOW_NODES) and auto_M and M < M_full
                grow_K = bool(flag & OVERFLOW_COMPONENTS) and auto_K and K < 4096
                if (bool(flag & OVERFLOW_NODES) and not grow_M) or (bool(flag & OVERFLOW_COMPONENTS) and not grow_K):
                    _raise_overflow(flag, M, K, f"in sweep {t}")
                # default capacities grow (one recompilation) and the sweep is redone from its start
                M = min(2 * M, M_full) if grow_M else M
                K = 2 * K if grow_K else K
                st, sts = prev
                st = _grow_state(st, M, K)
                sts = None if sts is None else [_grow_state(x, M, K) for x in sts]
                continue
            rows.append(info)
            if t >= num_warmup:
                vals = np.atleast_1d(np.asarray(info["log_likelihood"], float))
                i = int(np.argmax(vals))
                if vals[i] > best_val:
                    best = jax.tree_util.tree_map(lambda a: a[i], st) if vec else cand[i]
                    best_val, best_sweep = float(vals[i]), t
            if bar is not None:
                bar.update(1)
                if t % 10 == 0:
                    ll = np.max(np.atleast_1d(info["log_likelihood"]))
                    bar.set_postfix(loglik=f"{float(ll):.1f}", nodes=int(np.max(np.atleast_1d(info["num_nodes"]))))
            t += 1
    finally:
        if bar is not None:
            bar.close()
    trace = {k: np.asarray([r[k] for r in rows]) for k in rows[0]}
    if chains:
        trace = {k: np.moveaxis(v, 0, 1) for k, v in trace.items()}
        if not vec:
            st = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *sts)
    best = jax.device_get(best)
    tree, level_labels = state_to_tree(best)
    best_ll = float(complete_data_log_likelihood(best, Xj))
    return BHMCResult(tree, level_labels, np.asarray(best.path), np.asarray(best.c), best_ll, trace, st, best, cfg,
                      best_sweep)


__all__ += ["make_config", "update_weights_exact", "level_sizes_from_gaps", "tree_init_state", "state_from_level_labels", "state_to_tree", "update_hyper", "update_theta", "update_weights", "joint_log_density"]


class _KernelState(NamedTuple):
    sample: Any
    state: Any
    rng_key: jax.Array


class BHMC(MCMCKernel):
    """BHMC's sampler as a NumPyro kernel: ``MCMC(BHMC(X, depth=4), num_warmup=...,
    num_samples=...).run(key)`` collects ``{"paths": [N, L + 1], "c": [N]}`` of every kept
    sweep (node and component slots; only the partitions they induce matter).

    Args:
      X, depth, alpha, gamma0, gamma, sigma2, mu0, prior_var, epsilon, max_nodes,
      max_components, sample_hyper, num_hyper_steps, init, path_update: as in `bhmc` (the
      same data-adaptive defaults; ``init`` is ``"ward"`` or ``"chain"``).
    """

    sample_field = "sample"

    def __init__(self, X, depth: int = 4, *, alpha=1.0, gamma0=1.0, gamma=0.5, sigma2=None, mu0=None, prior_var=None,
                 epsilon=1e-6, max_nodes=None, max_components=128, sample_hyper=True, num_hyper_steps=5,
                 init="ward", path_update="gibbs"):
        X = _check_X(X)
        self.X = jnp.asarray(X)
        N = X.shape[0]
        self.depth = _check_int(depth, "depth", 1)
        self.sample_hyper = bool(sample_hyper)
        self.hyper = dict(alpha=_check_positive(alpha, "alpha"), gamma0=_check_positive(gamma0, "gamma0"),
                          gamma=_check_positive(gamma, "gamma", 1.5 if self.sample_hyper else None))
        self.sigma2 = None if sigma2 is None else _check_positive(sigma2, "sigma2")
        self.epsilon = _check_positive(epsilon, "epsilon")
        self.max_nodes = _check_int(max_nodes if max_nodes is not None else min(N * self.depth + self.depth + 1, 1024),
                                    "max_nodes", self.depth + 1)
        self.max_components = _check_int(max_components, "max_components", 1)
        self.cfg = make_config(X, mu0=mu0, prior_var=prior_var)
        self.num_hyper_steps = _check_int(num_hyper_steps, "num_hyper_steps", 1)
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
            st = bhmc_init(k_init, self.X, self.depth, self.cfg, sigma2=s2, epsilon=self.epsilon,
                           max_nodes=self.max_nodes, max_components=self.max_components, **self.hyper)
        else:
            st, _ = tree_init_state(np.asarray(self.X), self.depth, self.cfg, key=k_init, sigma2=self.sigma2,
                                    max_nodes=self.max_nodes, max_components=self.max_components,
                                    sample_hyper=self.sample_hyper, **self.hyper)
        return _KernelState({"paths": st.path, "c": st.c}, st, k)

    def sample(self, state, model_args, model_kwargs):
        k, k_next = jax.random.split(state.rng_key)
        st, _ = _sweep(k, state.state, self.X, self.cfg, self.sample_hyper, self.num_hyper_steps, self.path_update)
        return _KernelState({"paths": st.path, "c": st.c}, st, k_next)
