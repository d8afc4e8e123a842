"""The conditional updates of a BHMC sweep after the point moves: the mixture weights ``B``
(Eq. 3-4, or exactly by Chinese-restaurant table counts), the component means ``theta`` (Eq. 5)
and the hyperparameters (log-scale random-walk MH); and the complete-data log likelihood."""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
from jax.scipy.special import gammaln

from ...models.ncrp_hdp import (
    dirichlet_log,
    log_dirichlet_density,
    ncrp_log_prob,
    normal_diag_logpdf,
)
from ..mh import mh_accept
from .splitmerge import split_merge_level
from .state import NEG_INF, BHMCConfig, BHMCState

__all__ = [
    "complete_data_log_likelihood",
    "update_hyper",
    "update_theta",
    "update_weights",
    "update_weights_exact",
]


def _ones(N, mask, dtype):
    """``[N]`` weights of the points: 1, or 0 for a padding row (``mask``)."""
    return jnp.ones(N, dtype) if mask is None else mask.astype(dtype)


def _node_comp_counts(st: BHMCState, mask=None):
    """``N_zk``: points through node ``z`` with ``c = k`` ``[M, K]``."""
    M, K1 = st.logb.shape
    N, L1 = st.path.shape
    f = st.logb.dtype
    flat = (st.path * (K1 - 1) + st.c[:, None]).reshape(-1)
    w = jnp.broadcast_to(_ones(N, mask, f)[:, None], (N, L1)).reshape(-1)
    return jax.ops.segment_sum(w, flat, num_segments=M * (K1 - 1)).reshape(M, K1 - 1)


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


def update_weights_exact(
    key,
    st: BHMCState,
    cfg: Optional[BHMCConfig] = None,
    num_hyper_steps: int = 0,
    num_split_merge: int = 0,
    mask=None,
):
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
    log Gamma(gamma0 + n_root)`` (``K`` components in use) under ``Ga(3.5, 1)``.

    With ``num_split_merge > 0`` the bottom-up pass also makes that many split-merge proposals
    on every level's nodes before drawing its tables (`splitmerge.split_merge_level`: the
    level's weights and those below are integrated out at that point, and all of them are drawn
    afresh top-down afterwards); the tree's structure then changes too. ``mask``: the real
    points when the state is padded (`state.point_mask`)."""
    M, K1 = st.logb.shape
    K = K1 - 1
    N, L1 = st.path.shape
    L = L1 - 1
    f = st.logb.dtype
    active = st.count > 0
    par = jnp.maximum(st.parent, 0)
    nonroot = active & (st.parent >= 0)
    ones = _ones(N, mask, jnp.int32)
    leaf_cnt = jax.ops.segment_sum(ones, st.path[:, L] * K + st.c, num_segments=M * K).reshape(M, K)
    lg = jnp.log(st.gamma)
    keys = jax.random.split(key, L + 2)
    cust = jnp.where(((st.level == L) & nonroot)[:, None], leaf_cnt, 0)
    n_tot = jnp.zeros(M, f)
    m_tot = jnp.zeros(M, f)
    m_below = jnp.zeros((M, K), jnp.int32)  # tables of the level below (customers here)
    for l in range(L, 0, -1):  # customers at level l -> tables -> customers at level l - 1
        if num_split_merge > 0:  # level l's nodes split and merged, its weights integrated out
            st, _ = split_merge_level(jax.random.fold_in(key, 11 + l), st, l, m_below, num_split_merge, mask)
            active = st.count > 0
            par = jnp.maximum(st.parent, 0)
            nonroot = active & (st.parent >= 0)
            below = (st.level == l + 1) & nonroot
            if l == L:
                cnt = jax.ops.segment_sum(ones, st.path[:, L] * K + st.c, num_segments=M * K)
                here = cnt.reshape(M, K)
            else:
                here = jax.ops.segment_sum(
                    jnp.where(below[:, None], m_below, 0), jnp.where(below, par, M), num_segments=M + 1
                )[:M]
            cust = jnp.where(((st.level == l) & nonroot)[:, None], here, cust)
        sel = (st.level == l) & nonroot
        m = _num_tables(keys[l], jnp.where(sel[:, None], cust, 0), lg + st.logb[par, :K], N)
        n_tot = jnp.where(sel, jnp.sum(cust, 1).astype(f), n_tot)
        m_tot = jnp.where(sel, jnp.sum(m, 1).astype(f), m_tot)
        m_below = jnp.where(sel[:, None], m, 0)
        up = jax.ops.segment_sum(jnp.where(sel[:, None], m, 0), jnp.where(sel, par, M), num_segments=M + 1)[:M]
        lvl = (st.level == l - 1) & (active | (jnp.arange(M) == 0))
        cust = jnp.where(lvl[:, None], up, cust)
    n_root = cust[0].astype(f)
    if cfg is not None and num_hyper_steps > 0:
        kg, kg0 = jax.random.split(jax.random.fold_in(key, 7))

        def t_gamma(g):
            v = jnp.sum(jnp.where(nonroot, m_tot * jnp.log(g) + gammaln(g) - gammaln(g + n_tot), 0.0))
            return jnp.where(g < cfg.gamma_max, v, NEG_INF)

        k_used = jnp.sum(n_root > 0).astype(f)
        n0 = jnp.sum(n_root)

        def t_gamma0(g0):
            return k_used * jnp.log(g0) + gammaln(g0) - gammaln(g0 + n0) + _gamma_logpdf(g0, 3.5, 1.0)

        st = st._replace(
            gamma=_log_rw_mh(kg, t_gamma, st.gamma, cfg.step[2], num_hyper_steps),
            gamma0=_log_rw_mh(kg0, t_gamma0, st.gamma0, cfg.step[1], num_hyper_steps),
        )
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


def update_weights(key, st: BHMCState, mask=None):
    """``B | V, c``: Eq. 3 at the root, then Eq. 4 level by level (parents first).
    Components no point uses get weight 0 everywhere (their slots become free); ``mask``: the
    real points of a padded state."""
    nk = _node_comp_counts(st, mask)
    root_conc = jnp.concatenate([jnp.log(nk[0]), jnp.log(st.gamma0)[None]])
    logb = st.logb.at[0].set(dirichlet_log(jax.random.fold_in(key, 0), root_conc))
    return st._replace(logb=_children_top_down(key, st, logb, jnp.log(nk), jnp.log(st.gamma)))


def update_theta(key, st: BHMCState, X, cfg, likelihood: bool = True, mask=None):
    """Eq. 5: ``theta_k | X, c ~ N(mu_k, Sigma_k)`` with ``Sigma_k = (Sigma0^-1 + N_k
    Sigma^-1)^-1``, ``mu_k = Sigma_k (Sigma0^-1 mu0 + Sigma^-1 sum_{c_n = k} x_n)``
    (``likelihood=False``: the prior ``H``; ``mask``: the real rows of padded ``X``)."""
    K = st.theta.shape[0]
    w = _ones(X.shape[0], mask, X.dtype) if likelihood else jnp.zeros(X.shape[0], X.dtype)
    nk = jax.ops.segment_sum(w, st.c, num_segments=K)
    sk = jax.ops.segment_sum(X * w[:, None], st.c, num_segments=K)
    var = 1.0 / (1.0 / cfg.prior_var[None, :] + nk[:, None] / st.sigma2)
    mean = var * (cfg.mu0 / cfg.prior_var + sk / st.sigma2)
    return st._replace(theta=mean + jnp.sqrt(var) * jax.random.normal(key, mean.shape, mean.dtype))


def _gamma_logpdf(x, a, rate):
    return (a - 1.0) * jnp.log(x) - rate * x


def _hyper_targets(st: BHMCState, X, cfg, mask=None):
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
    sq = jnp.sum(_ones(X.shape[0], mask, X.dtype)[:, None] * (X - st.theta[st.c]) ** 2)
    ND = (X.shape[0] if mask is None else jnp.sum(mask).astype(X.dtype)) * X.shape[1]

    def t_alpha(a):
        return ncrp_log_prob(st.parent, st.level, st.count, a, L) + _gamma_logpdf(a, 3.0, 1.0)

    def t_gamma0(g0):
        return n_live * jnp.log(g0) + (g0 - 1.0) * star0 + _gamma_logpdf(g0, 3.5, 1.0)

    def t_gamma(g):
        d = jax.vmap(log_dirichlet_density)(st.logb, jnp.log(g) + st.logb[par])
        return jnp.where(g < cfg.gamma_max, jnp.sum(jnp.where(nonroot, d, 0.0)), NEG_INF)

    def t_sigma2(s2):
        return jnp.where(s2 < cfg.sigma2_max, -0.5 * ND * jnp.log(s2) - 0.5 * sq / s2, NEG_INF)

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


def update_hyper(key, st: BHMCState, X, cfg, num_steps: int = 5, which=(True, True, True, True), mask=None):
    """Log-scale random-walk MH for each of ``(alpha, gamma0, gamma, sigma2)`` in turn (those
    with ``which`` set), ``num_steps`` proposals each, given the explicit state (``mask``: the
    real rows of padded ``X``)."""
    targets = _hyper_targets(st, X, cfg, mask)
    vals = [st.alpha, st.gamma0, st.gamma, st.sigma2]
    keys = jax.random.split(key, 4)
    out = [
        _log_rw_mh(keys[i], t, v, cfg.step[i], num_steps) if w else v
        for i, (t, v, w) in enumerate(zip(targets, vals, which))
    ]
    return st._replace(alpha=out[0], gamma0=out[1], gamma=out[2], sigma2=out[3])


def complete_data_log_likelihood(st: BHMCState, X, mask=None):
    """``log p(X, c, V | B, theta)``: ``sum_n [log beta_{leaf(n), c_n} + log N(x_n;
    theta_{c_n}, sigma2 I)] + log p(V | alpha)``, the paper's criterion for the reported
    tree (``mask``: the real rows of a padded state and ``X``; the padding adds 0)."""
    L = st.path.shape[1] - 1
    leaf = st.path[:, L]
    real = jnp.ones(X.shape[0], bool) if mask is None else mask
    lc = jnp.sum(jnp.where(real, st.logb[leaf, st.c], 0.0))
    lx = jnp.sum(jnp.where(real, normal_diag_logpdf(X, st.theta[st.c], st.sigma2), 0.0))
    return lc + lx + ncrp_log_prob(st.parent, st.level, st.count, st.alpha, L)
