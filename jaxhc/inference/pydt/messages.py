"""Gaussian message passing on PYDT trees (section 5), shared by the sampler and the EM:
`upward_messages` (level-synchronous upward pass and ``log p(X | tree, times)``),
`log_marginal_masked`, `sample_locations` (backward sampling), `downward` / `marginals` (posterior
marginals and pairwise edge moments), and the per-dimension variants for leaf observations with
per-(leaf, dim) noise (`upward_messages_diag`, `marginals_diag`; the probit EP surrogate)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...models.pydt_math import node_sum, time_order, walk_up

__all__ = [
    "downward",
    "log_marginal_masked",
    "marginals",
    "marginals_diag",
    "sample_locations",
    "upward_messages",
    "upward_messages_diag",
]


def upward_messages(parent, times, active, X, sigma2, order=None, leaf_var=0.0):
    """Upward pass: per node the product of its children's messages ``N(x; mu, v I)``
    (``mu [m, D]``, ``v [m]``, ``has [m]``) and ``log p(X)``; the root's message is closed
    against the origin ``N(0, sigma2 t_root)``. ``leaf_var`` adds observation noise at the
    leaves (1 for the probit model's auxiliary variables). ``order`` is not needed (kept for
    callers that have it).

    Level-synchronous: nodes are grouped by height (`walk_up`), and one vectorised step per
    level sends every node of that level its message ``N(m_k, v_out_k)`` into its parent's
    natural parameters (``A += 1/v_out``, ``B += m/v_out``, a segment sum), so the cost is
    ``O(depth x m D)`` and batches well under ``vmap``. The normalisers are summed afterwards:
    every edge gives ``log N(m_k; mu*_p, v_out_k)`` (``mu*_p`` the parent's product mean, the
    origin for the root) and every branch point ``D/2 log(2 pi v*_b)``, the
    product-of-Gaussians identity ``prod_k N(m_k; x, v_k) = N(x; mu*, v*) prod_k N(m_k; mu*,
    v_k) (2 pi v*)^(D/2)``."""
    del order
    m = parent.shape[0]
    N, D = X.shape
    f = X.dtype
    slots = jnp.arange(m)
    is_leaf = slots < N
    pp = jnp.maximum(parent, 0)
    has_p = active & (parent >= 0) & active[pp]
    send = active & ((parent < 0) | active[pp])
    tp = jnp.where(parent >= 0, times[pp], 0.0)
    edge = sigma2 * (times - tp)
    pidx = jnp.where(has_p, parent, m)
    Xp = jnp.concatenate([X, jnp.zeros((m - N, D), f)])
    _, height = walk_up(parent, active, (is_leaf & active).astype(jnp.int32))

    def out_msg(A, Bm):
        a = jnp.where(is_leaf, 1.0, jnp.where(A[:m] > 0, A[:m], 1.0))
        mk = jnp.where(is_leaf[:, None], Xp, Bm[:m] / a[:, None])
        vk = jnp.where(is_leaf, leaf_var, 1.0 / a) + edge
        return mk, vk

    def body(L, carry):
        A, Bm = carry
        mk, vk = out_msg(A, Bm)
        sel = active & (height == L)
        to = jnp.where(sel, pidx, m)
        A = A + jax.ops.segment_sum(jnp.where(sel, 1.0 / vk, 0.0), to, num_segments=m + 1)
        Bm = Bm + jax.ops.segment_sum(jnp.where(sel[:, None], mk / vk[:, None], 0.0), to, num_segments=m + 1)
        return A, Bm

    A, Bm = jax.lax.fori_loop(0, jnp.max(height) + 1, body, (jnp.zeros(m + 1, f), jnp.zeros((m + 1, D), f)))
    mo, vo = out_msg(A, Bm)
    A, Bm = A[:m], Bm[:m]
    has = A > 0
    Asafe = jnp.where(has, A, 1.0)
    v = jnp.where(has, 1.0 / Asafe, jnp.inf)
    mu = jnp.where(has[:, None], Bm / Asafe[:, None], 0.0)
    target = jnp.where(has_p[:, None], mu[pp], 0.0)
    log2pi = jnp.log(2 * jnp.pi)
    edge_terms = -0.5 * (D * (log2pi + jnp.log(vo)) + jnp.sum((mo - target) ** 2, axis=1) / vo)
    branch = active & ~is_leaf & has
    node_terms = 0.5 * D * (log2pi - jnp.log(Asafe))
    logz = node_sum(jnp.where(send, edge_terms, 0.0)) + node_sum(jnp.where(branch, node_terms, 0.0))
    return mu, v, has, logz


def log_marginal_masked(parent, times, active, X, sigma2, leaf_var=0.0):
    """``log p(X | tree, times, sigma2)`` with internal locations integrated out (belief
    propagation, section 5); ``X [N, D]`` sits at leaves ``0..N-1`` (observed with extra
    variance ``leaf_var``)."""
    order = time_order(parent, times, active)
    return upward_messages(parent, times, active, X, sigma2, order, leaf_var)[3]


def sample_locations(key, parent, times, active, X, sigma2, leaf_var=0.0):
    """Backward sampling of all internal node locations given the data ``[m, D]`` (leaves hold
    ``X``). On a padded tree (inactive leaves, `jaxhc.inference.pydt.padding`) node ``k`` of the
    time order draws with the key the exact-size tree gives it (the ``j``-th latest node uses
    ``split(key, 2n - 1)[2n - 2 - j]``, ``n`` the active leaves), so the draws ignore the padding."""
    m = parent.shape[0]
    N, D = X.shape
    order = time_order(parent, times, active)
    mu, v, _, _ = upward_messages(parent, times, active, X, sigma2, order, leaf_var)
    loc = jnp.zeros((m, D), X.dtype).at[:N].set(X)
    keys = jax.random.split(key, m)
    shift = m - (2 * jnp.sum(active[:N]) - 1)  # 0 unless padded

    def body(i, loc):
        k = order[m - 1 - i]  # increasing time: parents first
        p = parent[k]
        tp = jnp.where(p >= 0, times[jnp.maximum(p, 0)], 0.0)
        prior_mu = jnp.where(p >= 0, loc[jnp.maximum(p, 0)], 0.0)
        pv = sigma2 * (times[k] - tp)
        post_v = pv * v[k] / (pv + v[k])
        post_mu = (prior_mu * v[k] + mu[k] * pv) / (pv + v[k])
        x = post_mu + jnp.sqrt(post_v) * jax.random.normal(keys[jnp.maximum(i - shift, 0)], (D,), X.dtype)
        write = active[k] & (k >= N)
        return loc.at[jnp.where(write, k, m)].set(x, mode="drop")

    return jax.lax.fori_loop(0, m, body, loc)


def downward(parent, times, active, order, mu, v, M, V, sigma2):
    """Downward pass after an upward one (``mu [m, D]``, ``v``: the upward messages), parents
    before children: posterior ``mean [m, D]``, ``var`` and ``cross`` (covariance with the
    parent), shaped like ``v``: ``[m]`` (isotropic, `marginals`) or ``[m, D]`` (per-dimension,
    `marginals_diag`). Leaf ``n`` is seen as ``N(M[n]; x_n, V[n])`` (``V [N]`` or ``[N, D]``;
    0: observed exactly)."""
    m = parent.shape[0]
    N, D = M.shape

    def body(i, carry):
        mean, var, cross = carry
        k = order[m - 1 - i]  # increasing time: parents first
        p = parent[k]
        has_p = p >= 0
        pp = jnp.maximum(p, 0)
        tp = jnp.where(has_p, times[pp], 0.0)
        mp = jnp.where(has_p, mean[pp], 0.0)
        Pp = jnp.where(has_p, var[pp], 0.0)
        pv = sigma2 * (times[k] - tp)
        leaf = k < N
        kl = jnp.minimum(k, N - 1)
        vk = jnp.where(leaf, V[kl], v[k])
        muk = jnp.where(leaf, M[kl], mu[k])
        a = vk / (vk + pv)  # x_k | x_p, data below = a x_p + (1 - a) mu_k + N(0, w)
        w = pv * vk / (vk + pv)
        idx = jnp.where(active[k], k, m)
        mean = mean.at[idx].set(a * mp + (1.0 - a) * muk, mode="drop")
        var = var.at[idx].set(a * a * Pp + w, mode="drop")
        cross = cross.at[idx].set(a * Pp, mode="drop")
        return mean, var, cross

    z = jnp.zeros(v.shape, M.dtype)
    return jax.lax.fori_loop(0, m, body, (jnp.zeros((m, D), M.dtype), z, z))


def marginals(parent, times, active, X, sigma2):
    """Upward pass (`upward_messages`) then downward pass: per node posterior mean / variance,
    covariance with the parent, ``b`` of the edge into it, and ``log p(X)``."""
    N, D = X.shape
    f = X.dtype
    order = time_order(parent, times, active)
    mu, v, _, loglik = upward_messages(parent, times, active, X, sigma2, order)
    mean, var, cross = downward(parent, times, active, order, mu, v, X, jnp.zeros(N, f), sigma2)
    has_p = (parent >= 0) & active
    pp = jnp.maximum(parent, 0)
    mp = jnp.where(has_p[:, None], mean[pp], 0.0)
    Pp = jnp.where(has_p, var[pp], 0.0)
    b = 0.5 * (jnp.sum((mean - mp) ** 2, axis=1) + D * (var + Pp - 2.0 * cross))
    b = jnp.where(active, b, 0.0)
    return mean, var, cross, b, loglik


def upward_messages_diag(parent, times, active, M, V, sigma2, order):
    """`upward_messages` with per-(leaf, dim) observation variances: leaf ``n`` is seen through
    ``N(M[n]; x_n, diag V[n])`` (``V = 0``: observed exactly). Natural parameters ``A, B [m, D]``
    and ``C [m]`` (summed over dims) are scatter-added into the parents, as in `upward_messages`.

    Returns ``mu [m, D]``, ``v [m, D]`` (the upward message of each internal node; leaves:
    ``inf``) and ``log N(M; 0, K + diag V)`` summed over dims (``K = sigma2 t_lca``)."""
    m = parent.shape[0]
    N, D = M.shape
    f = M.dtype
    log2pi = jnp.log(2 * jnp.pi)

    def body(i, carry):
        A, Bm, C, logz = carry
        k = order[i]
        p = parent[k]
        ok = active[k]
        tp = jnp.where(p >= 0, times[jnp.maximum(p, 0)], 0.0)
        edge = sigma2 * (times[k] - tp)
        is_leaf = k < N
        kl = jnp.minimum(k, N - 1)
        vstar = 1.0 / jnp.where(is_leaf, 1.0, A[k])
        mustar = Bm[k] * vstar
        lz_node = jnp.where(is_leaf, 0.0, 0.5 * (jnp.sum(log2pi + jnp.log(vstar) + mustar**2 / vstar) - C[k]))
        mk = jnp.where(is_leaf, M[kl], mustar)
        vk = jnp.where(is_leaf, V[kl], vstar) + edge
        to_parent = ok & (p >= 0)
        at_root = ok & (p < 0)
        terms = jnp.sum(log2pi + jnp.log(vk) + mk**2 / vk)
        idx = jnp.where(to_parent, p, m)
        A = A.at[idx].add(1.0 / vk, mode="drop")
        Bm = Bm.at[idx].add(mk / vk, mode="drop")
        C = C.at[idx].add(terms, mode="drop")
        logz = logz + jnp.where(ok, lz_node, 0.0) + jnp.where(at_root, -0.5 * terms, 0.0)
        return A, Bm, C, logz

    init = (jnp.zeros((m, D), f), jnp.zeros((m, D), f), jnp.zeros(m, f), jnp.zeros((), f))
    A, Bm, C, logz = jax.lax.fori_loop(0, m, body, init)
    has = A > 0
    v = jnp.where(has, 1.0 / jnp.where(has, A, 1.0), jnp.inf)
    mu = jnp.where(has, Bm / jnp.where(has, A, 1.0), 0.0)
    return mu, v, logz


def marginals_diag(parent, times, active, M, V, sigma2, order=None):
    """`marginals` for leaf observations ``N(M[n]; x_n, diag V[n])``: ``mean [m, D]``,
    ``var [m, D]``, ``cross [m, D]`` (covariance with the parent), ``b [m]`` and
    ``log N(M; 0, K + diag V)``. Leaves get their posterior marginals too (with ``V = 0``:
    ``M`` and 0, the Gaussian model)."""
    if order is None:
        order = time_order(parent, times, active)
    mu, v, loglik = upward_messages_diag(parent, times, active, M, V, sigma2, order)
    mean, var, cross = downward(parent, times, active, order, mu, v, M, V, sigma2)
    has_p = (parent >= 0) & active
    pp = jnp.maximum(parent, 0)
    mp = jnp.where(has_p[:, None], mean[pp], 0.0)
    Pp = jnp.where(has_p[:, None], var[pp], 0.0)
    b = 0.5 * jnp.sum((mean - mp) ** 2 + var + Pp - 2.0 * cross, axis=1)
    b = jnp.where(active, b, 0.0)
    return mean, var, cross, b, loglik
