"""The point moves of a BHMC sweep: a point's path and component (Algorithm 2's nCRP-proposal MH,
`point_update`, and the exact block Gibbs step `gibbs_point_update`), with the stick
breaking and component creation they need."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp

from ...models.ncrp_hdp import (
    beta_log,
    dirichlet_log,
    dp_child_log,
    normal_diag_logpdf,
)
from ..mh import mh_accept
from .state import NEG_INF, OVERFLOW_COMPONENTS, OVERFLOW_NODES, BHMCState


# ------------------------------------------------------------------------------------------
# pieces of a sweep
# ------------------------------------------------------------------------------------------
def _comp_loglik(x, theta, sigma2, cfg):
    """``log N(x; theta_k, sigma2 I)`` for every slot ``[K]`` and ``log f*(x)``."""
    ll = normal_diag_logpdf(x[None, :], theta, sigma2)
    lfs = normal_diag_logpdf(x, cfg.mu0, cfg.prior_var + sigma2)
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


def _break_rest(key, st: BHMCState, rest):
    """Section 4.1: every node breaks one more stick off its rest ``rest [M]`` (log), parents
    first (root: ``u ~ Beta(1, gamma0)``; child of ``z``: ``u ~ Beta(gamma beta_z,new, gamma
    beta*_z)``). Returns the new atom's log weights and the rests after it, both ``[M]``."""
    M = rest.shape[0]
    L = st.path.shape[1] - 1
    par = jnp.maximum(st.parent, 0)
    lu, l1 = beta_log(jax.random.fold_in(key, 0), 1.0, st.gamma0)
    col = jnp.full(M, NEG_INF, rest.dtype).at[0].set(rest[0] + lu)
    rest = rest.at[0].add(l1)

    def level_body(l, c):  # a loop, not unrolled: one Beta sampler in the compiled program
        col, rest = c
        sel = (st.level == l) & (st.count > 0) & (st.parent >= 0)
        lu, l1 = beta_log(jax.random.fold_in(key, l), st.gamma * jnp.exp(col[par]), st.gamma * jnp.exp(rest[par]))
        return jnp.where(sel, rest + lu, col), jnp.where(sel, rest + l1, rest)

    return jax.lax.fori_loop(1, L + 1, level_body, (col, rest))


def _new_component(key, st: BHMCState, x, leaf, cfg, use_x, need=True, max_tries: int = 1024):
    """Eq. 2's "new k" at node ``leaf``: instantiate the atom of the leaf's remaining stick
    that the draw selected.

    Atoms of the rest are revealed one at a time by section 4.1's stick-breaking step
    (`_break_rest`, which visits them in the root's size-biased order), each taken with
    probability its share ``u_leaf`` of the leaf's remaining stick; the ones not taken hold no
    point and are folded back into every node's rest (Dirichlet aggregation; exact): only
    their summed weight is kept, so they take no component slot. Breaking a single stick and
    always taking it, as section 4.1 reads literally, would give the new atom the leaf weight
    of an unselected atom: e.g. with ``L = 1`` two points at one leaf would share a component
    with probability ``1 / (1 + gamma0)`` instead of the HDP's ``(1 + gamma / (1 + gamma0)) /
    (1 + gamma)``. The taken atom's ``theta`` is drawn from its posterior given ``x``
    (``use_x``) or from ``H``. With ``need`` False nothing happens (the loop runs zero times;
    a ``while_loop`` rather than a ``cond`` so the state is updated in place). After
    ``max_tries`` untaken atoms the next one is taken (the chance of getting there is about
    ``(1 - E u)^max_tries``; ``E u`` is the first atom's root share, ``1 / (1 + gamma0)``)."""
    K = st.logb.shape[1] - 1
    kt, kloop = jax.random.split(key)
    dead = ~jnp.isfinite(st.logb[0, :K])
    full = ~jnp.any(dead)
    slot = jnp.argmax(dead).astype(jnp.int32)
    rest0 = st.logb[:, K]
    f = rest0.dtype

    def cond(c):
        return need & ~full & ~c[3]

    def body(c):
        rest, untaken, _, _, i = c
        kb, ku = jax.random.split(jax.random.fold_in(kloop, i))
        col, rest_after = _break_rest(kb, st, rest)
        take = (jnp.log(jax.random.uniform(ku, (), f)) < col[leaf] - rest[leaf]) | (i >= max_tries)
        untaken = jnp.where(take, untaken, jnp.logaddexp(untaken, col))
        return rest_after, untaken, col, take, i + 1

    neg = jnp.full_like(rest0, NEG_INF)
    rest, untaken, col, _, _ = jax.lax.while_loop(cond, body, (rest0, neg, neg, jnp.bool_(False), jnp.int32(0)))
    do = need & ~full
    logb = st.logb.at[:, slot].set(jnp.where(do, col, st.logb[:, slot]))
    logb = logb.at[:, K].set(jnp.where(do, jnp.logaddexp(rest, untaken), rest0))
    if use_x:
        var = 1.0 / (1.0 / cfg.prior_var + 1.0 / st.sigma2)
        mean = var * (cfg.mu0 / cfg.prior_var + x / st.sigma2)
    else:
        var, mean = cfg.prior_var, cfg.mu0
    th = mean + jnp.sqrt(var) * jax.random.normal(kt, mean.shape, mean.dtype)
    theta = st.theta.at[slot].set(jnp.where(do, th, st.theta[slot]))
    st = st._replace(logb=logb, theta=theta, overflow=st.overflow | jnp.where(need & full, OVERFLOW_COMPONENTS, 0))
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
    return st._replace(
        path=st.path.at[n].set(path_n),
        parent=parent,
        level=level,
        count=count,
        logb=logb,
        overflow=st.overflow | jnp.where(over, OVERFLOW_NODES, 0),
    )


def _fold_own_component(st: BHMCState, n, mask=None):
    """Point ``n``'s component folded back into every node's rest ``beta*`` when ``n`` is its
    only member (its ``theta`` dropped; the slot becomes free).

    The point's update integrates out the ``theta`` of every atom the other points do not use
    (the rest, through ``f*``). An atom held by ``n`` alone is one of them: keeping it with its
    ``theta`` (drawn given ``x_n``) would condition the update on ``x_n`` twice and make
    singletons sticky (too many components: 2.74 against the exact 2.65 for five points at
    depth 2, measured by enumeration). Its weight joins the rest (Dirichlet aggregation); if
    the point goes back to the rest, `_new_component` instantiates an atom from it again.
    ``mask``: the real points (padding rows are no members)."""
    K = st.theta.shape[0]
    k = st.c[n]
    same = st.c == k
    alone = jnp.sum(same if mask is None else same & mask) == 1
    col = st.logb[:, k]
    rest = jnp.where(alone, jnp.logaddexp(st.logb[:, K], col), st.logb[:, K])
    logb = st.logb.at[:, k].set(jnp.where(alone, NEG_INF, col)).at[:, K].set(rest)
    return st._replace(logb=logb)


def point_update(key, st: BHMCState, n, x, cfg, *, mode: str, mask=None):
    """Moves point ``n`` (``mode="mcmc"``: Algorithm 2's path MH and Eq. 2 Gibbs for
    ``c_n``) or inserts it by the generative process (``mode="prior"``: the point is absent,
    its path and ``c_n`` are drawn from the prior and ``x_n`` from ``N(theta_c, sigma2 I)``).
    ``mask``: the real points when the state is padded (`state.point_mask`). Returns
    ``(state, x_n, accepted)``."""
    M, K1 = st.logb.shape
    K = K1 - 1
    L = st.path.shape[1] - 1
    kp, kb, ka, kc, kn, kx = jax.random.split(key, 6)
    mcmc = mode == "mcmc"
    if mcmc:
        st = _fold_own_component(st, n, mask)
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
        logits = jnp.concatenate([jnp.where(mask, logcnt, NEG_INF), log_alpha[None]])
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
    reach = jnp.where(ok | (slots == 0), reach, NEG_INF)
    leaf = jnp.where(ok & (st.level == L), reach + node_ll, NEG_INF)
    branch = jnp.where(
        act & (st.level < L) & ((st.parent >= 0) | (slots == 0)),
        reach + jnp.log(st.alpha) - log_stop + node_ll,
        NEG_INF,
    )
    return leaf, branch, node_ll, count_minus, ll, lfs


def gibbs_point_update(key, st: BHMCState, n, x, cfg, likelihood: bool = True, mask=None):
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
    the block includes them). ``mask``: the real points when the state is padded
    (`state.point_mask`). Returns ``(state, x_n, moved)``."""
    M, K1 = st.logb.shape
    K = K1 - 1
    L = st.path.shape[1] - 1
    kp, kc, kb, kn = jax.random.split(key, 4)
    st = _fold_own_component(st, n, mask)
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
    onehot = jnp.where(jnp.arange(K1) == cn, 0.0, NEG_INF)
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
