"""Collapsed MCMC for the Pitman-Yor diffusion tree (Knowles & Ghahramani, section 5.1).

State: a tree over ``N`` leaves in fixed-capacity parent form (``m = 2N - 1`` slots; leaves
``0..N-1``, internal slots ``N..m-1``, ``parent = -1`` for the root branch point and ``-2``
for a free slot), the divergence times (leaves at 1), and the hyperparameters ``c``
(divergence function ``a(t) = c / (1 - t)``), ``alpha``, ``beta`` and ``sigma2``. Node
locations are integrated out by message passing (section 5).

One step:

* **detach / re-attach** (``num_moves`` times): pick a non-root node ``s`` uniformly, detach
  its subtree, and propose where it diverges from the remaining tree by the generative
  process of a new point (segment: a new branch point; branch point: a new branch),
  repeated until the divergence precedes ``t_s``. The acceptance ratio is the marginal
  likelihood ratio (section 5.1) times ``P(T') P(T_s-as-a-leaf) / (P(T) P(T'_s-as-a-leaf))``
  and the ratio of the numbers of detachable nodes. The prior factors cancel exactly when the
  subtree is one leaf (the paper's statement); for a larger subtree the points after the
  first follow the chosen path, which changes their non-divergence and branch factors, and
  including them keeps the move exact.
* **Gibbs** for ``c`` (Eq. 15, as the Gamma conditional implied by Eq. 14) and for
  ``1 / sigma2`` (Eq. 16, after backward sampling of the node locations);
* **slice sampling** of ``log alpha`` and ``logit beta`` on Eq. 9 + 11 and their priors.

Priors (section 4): ``alpha ~ G(2, .5)``, ``beta ~ Beta(1, 1)``, ``c ~ G(1, 1)``,
``1/sigma2 ~ G(1, 1)`` (shape, rate).
"""
from __future__ import annotations

import functools
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from numpyro.infer.mcmc import MCMCKernel

from ..._internal.validation import real_array
from ...tree import ParentTree
from ..mh import mh_accept

__all__ = ["PYDT", "PYDTPriors", "check_hyperparameters", "state_to_tree", "PYDTState", "PYDTInfo", "PYDTSamples", "pydt_mcmc", "pydt_mcmc_init", "pydt_mcmc_step",
           "log_prior_masked", "log_marginal_masked"]

FREE = -2


class PYDTPriors(NamedTuple):
    """Gamma (shape, rate) priors on ``alpha``, ``c``, ``1/sigma2`` and Beta on ``beta``
    (section 4 of the paper: ``G(2, .5)``, ``G(1, 1)``, ``G(1, 1)``, ``Beta(1, 1)``)."""

    alpha: tuple = (2.0, 0.5)
    c: tuple = (1.0, 1.0)
    precision: tuple = (1.0, 1.0)
    beta: tuple = (1.0, 1.0)


class PYDTState(NamedTuple):
    """State of the PYDT sampler.

    Attributes:
      parent: int32 ``[2N - 1]``; ``-1`` root branch point, ``-2`` free internal slot.
      times: float ``[2N - 1]`` divergence times (leaves 1.0; free slots 0.0).
      c, alpha, beta, sigma2: hyperparameters (scalars).
      log_lik: ``log p(X | tree, times, sigma2)`` (locations integrated out).
      log_prior: ``log`` of Eq. 9 and 11 (tree structure and times).
      latent: probit model only: the auxiliary Gaussian leaf values ``[N, D]`` (``y = 1`` iff
        positive; each is the leaf location plus ``N(0, 1)`` noise, so ``P(y = 1) =
        Phi(location)``); ``None`` for Gaussian data.
    """

    parent: jax.Array
    times: jax.Array
    c: jax.Array
    alpha: jax.Array
    beta: jax.Array
    sigma2: jax.Array
    log_lik: jax.Array
    log_prior: jax.Array
    latent: Any = None


class PYDTInfo(NamedTuple):
    """What a step did: ``accepted [num_moves]`` (bool), ``log_ratio [num_moves]``,
    ``retries [num_moves]`` (re-runs of the generative process until divergence preceded the
    subtree), ``num_branch_points``."""

    accepted: jax.Array
    log_ratio: jax.Array
    retries: jax.Array
    num_branch_points: jax.Array


# ------------------------------------------------------------------------------------------
# tree quantities on masked, fixed-capacity arrays
# ------------------------------------------------------------------------------------------
def _order(parent, times, active):
    """Node slots by decreasing time (children before parents), inactive ones last."""
    return jnp.argsort(jnp.where(active, -times, jnp.inf))


def _walk_up(parent, active, weight):
    """Leaf-to-root walks, all started at once: every active node with nonzero ``weight``
    sends a walker up its parent chain (stopping after the first inactive node, as `_up_counts`
    did). Returns ``(cnt, height)``: ``cnt[k]`` the total weight of the walkers passing
    ``k`` (itself included), ``height[k]`` the longest walk reaching ``k`` (0 at the starting
    nodes, ``-1`` where none arrives). One vectorised step per level of the tree, so the
    cost is ``O(depth x m)`` with depth (about log N for PYDT trees) instead of a loop over
    all ``m`` nodes, and the steps batch well under ``vmap``."""
    m = parent.shape[0]
    start = active & (weight != 0)
    cur0 = jnp.where(start, jnp.arange(m, dtype=parent.dtype), -1)
    w = jnp.where(start, weight, 0)

    def cond(c):  # at most m steps: a parent array with a cycle (never a valid tree) cannot hang
        return jnp.any(c[0] >= 0) & (c[1] < m)

    def body(c):
        cur, d, cnt, h = c
        ok = cur >= 0
        idx = jnp.where(ok, cur, m)
        cnt = cnt.at[idx].add(w, mode="drop")
        h = h.at[idx].max(d, mode="drop")
        safe = jnp.maximum(cur, 0)
        nxt = parent[safe]
        cur = jnp.where(ok & active[safe] & (nxt >= 0), nxt, -1).astype(cur0.dtype)
        return cur, d + 1, cnt, h

    init = (cur0, jnp.int32(0), jnp.zeros(m, weight.dtype), jnp.full(m, -1, jnp.int32))
    _, _, cnt, h = jax.lax.while_loop(cond, body, init)
    return cnt, h


def _up_counts(parent, order, active, weight):
    """``cnt[k]`` = total ``weight`` in the subtree of ``k`` (over active nodes); ``order`` is
    not needed (kept for callers that have it), see `_walk_up`."""
    del order
    return _walk_up(parent, active, weight)[0]


def _harmonic_table(n_max, alpha, beta):
    """``H[n] = sum_{i=1}^n Gamma(i - beta) / Gamma(i + 1 + alpha)``, ``n = 0..n_max``."""
    i = jnp.arange(1, n_max + 1, dtype=jnp.result_type(alpha, float))
    return jnp.concatenate([jnp.zeros(1, i.dtype), jnp.cumsum(jnp.exp(gammaln(i - beta) - gammaln(i + 1 + alpha)))])


def _log_branch_prod(K, alpha, beta):
    """``sum_{k=3}^{K} log(alpha + (k - 1) beta)`` (0 for ``K <= 2``)."""
    Kf = K.astype(jnp.result_type(alpha, float))
    bpos = beta > 0
    sb = jnp.where(bpos, beta, 1.0)
    with_beta = (Kf - 2) * jnp.log(sb) + gammaln(alpha / sb + Kf) - gammaln(alpha / sb + 2)
    no_beta = (Kf - 2) * jnp.log(jnp.where(alpha > 0, alpha, 1.0)) + jnp.where(alpha > 0, 0.0, -jnp.inf)
    return jnp.where(K > 2, jnp.where(bpos, with_beta, no_beta), 0.0)


class PriorTables(NamedTuple):
    """Per-count lookup tables of the prior for fixed ``alpha, beta`` (index ``n = 0..m``):
    ``H[n]`` (Eq. 11's harmonic sum), ``lg_mb[n] = log Gamma(n - beta)``, ``lg_pa[n] = log
    Gamma(n + alpha)``, ``lbp[K]`` = `_log_branch_prod` (``K`` children), ``lg_1mb = log
    Gamma(1 - beta)``. A move evaluates the prior three times; the tables are built once per
    sweep instead of ``O(m)`` log-gammas per evaluation."""

    H: jax.Array
    lg_mb: jax.Array
    lg_pa: jax.Array
    lbp: jax.Array
    lg_1mb: jax.Array


def prior_tables(m, alpha, beta, dtype=None) -> PriorTables:
    f = jnp.result_type(alpha, beta, float) if dtype is None else dtype
    n = jnp.arange(m + 1)
    nf = jnp.maximum(n, 1).astype(f)  # n = 0 never indexed by an active node
    return PriorTables(_harmonic_table(m, alpha, beta).astype(f), gammaln(nf - beta), gammaln(nf + alpha),
                       _log_branch_prod(n, alpha, beta).astype(f), gammaln(1.0 - beta).astype(f))


def log_prior_masked(parent, times, active, is_leaf, c, alpha, beta, tables: Optional[PriorTables] = None):
    """Eq. 9 (corrected, see below) + Eq. 11 of a tree given on masked arrays; equal to
    `jaxhc.models.pydt.log_structure_times`.

    Args:
      parent: int ``[m]`` (``-1`` root; entries of inactive nodes are ignored).
      times: float ``[m]``.
      active: bool ``[m]`` nodes present in the tree.
      is_leaf: bool ``[m]`` nodes that are leaves (data points, or a detached subtree
        standing in as one point).
      c, alpha, beta: PYDT hyperparameters.
      tables: `prior_tables(m, alpha, beta)` if already built (must match ``alpha, beta``).

    Returns:
      ``log P(structure, times)`` (scalar).
    """
    m = parent.shape[0]
    f = times.dtype
    T = prior_tables(m, alpha, beta, f) if tables is None else tables
    cnt = _walk_up(parent, active, is_leaf.astype(jnp.int32))[0]
    cnt = jnp.clip(cnt, 0, m)
    nonroot = active & (parent >= 0)
    pidx = jnp.where(nonroot, parent, m)
    nkids = jax.ops.segment_sum(nonroot.astype(jnp.int32), pidx, num_segments=m + 1)[:m]
    branch = active & ~is_leaf
    child_terms = jax.ops.segment_sum(jnp.where(nonroot, T.lg_mb[cnt], 0.0), pidx, num_segments=m + 1)[:m]
    tb = jnp.where(branch, times, 0.0)
    # Eq. 9 with the Gamma(1 - beta)^-(K_b - 1) that the printed equation drops (Appendix A's
    # products give Gamma(n_l - beta) / Gamma(1 - beta) for every branch but the first point's;
    # the N = 2 density is a(t) Gamma(1 - beta) / Gamma(2 + alpha) exp(...), not Gamma(1 - beta)^2)
    eq9 = (jnp.log(c) - jnp.log1p(-tb) + T.lbp[nkids] + child_terms
           - (nkids - 1).astype(f) * T.lg_1mb - T.lg_pa[cnt])
    tpar = jnp.where(parent >= 0, times[jnp.maximum(parent, 0)], 0.0)
    A = lambda t: -c * jnp.log1p(-t)  # noqa: E731
    eq11 = (A(tpar) - A(tb)) * T.H[jnp.clip(cnt - 1, 0, m)]
    return jnp.sum(jnp.where(branch, eq9 + eq11, 0.0))


def _messages(parent, times, active, X, sigma2, order=None, leaf_var=0.0):
    """Upward pass: per node the product of its children's messages ``N(x; mu, v I)``
    (``mu [m, D]``, ``v [m]``, ``has [m]``) and ``log p(X)``; the root's message is closed
    against the origin ``N(0, sigma2 t_root)``. ``leaf_var`` adds observation noise at the
    leaves (1 for the probit model's auxiliary variables). ``order`` is not needed (kept for
    callers that have it).

    Level-synchronous: nodes are grouped by height (`_walk_up`), and one vectorised step per
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
    _, height = _walk_up(parent, active, (is_leaf & active).astype(jnp.int32))

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
    logz = jnp.sum(jnp.where(send, edge_terms, 0.0)) + jnp.sum(jnp.where(branch, node_terms, 0.0))
    return mu, v, has, logz


def log_marginal_masked(parent, times, active, X, sigma2, leaf_var=0.0):
    """``log p(X | tree, times, sigma2)`` with internal locations integrated out (belief
    propagation, section 5); ``X [N, D]`` sits at leaves ``0..N-1`` (observed with extra
    variance ``leaf_var``)."""
    order = _order(parent, times, active)
    return _messages(parent, times, active, X, sigma2, order, leaf_var)[3]


def _sample_locations(key, parent, times, active, X, sigma2, leaf_var=0.0):
    """Backward sampling of all internal node locations given the data ``[m, D]`` (leaves hold
    ``X``)."""
    m = parent.shape[0]
    N, D = X.shape
    order = _order(parent, times, active)
    mu, v, _, _ = _messages(parent, times, active, X, sigma2, order, leaf_var)
    loc = jnp.zeros((m, D), X.dtype).at[:N].set(X)
    keys = jax.random.split(key, m)

    def body(i, loc):
        k = order[m - 1 - i]  # increasing time: parents first
        p = parent[k]
        tp = jnp.where(p >= 0, times[jnp.maximum(p, 0)], 0.0)
        prior_mu = jnp.where(p >= 0, loc[jnp.maximum(p, 0)], 0.0)
        pv = sigma2 * (times[k] - tp)
        post_v = pv * v[k] / (pv + v[k])
        post_mu = (prior_mu * v[k] + mu[k] * pv) / (pv + v[k])
        x = post_mu + jnp.sqrt(post_v) * jax.random.normal(keys[i], (D,), X.dtype)
        write = active[k] & (k >= N)
        return loc.at[jnp.where(write, k, m)].set(x, mode="drop")

    return jax.lax.fori_loop(0, m, body, loc)


def _subtree_mask(parent, times, active, s):
    """``[m]`` bool: nodes in the subtree of ``s`` (including ``s``): the active nodes whose
    chain of active ancestors reaches ``s`` (all chains walked at once, one step per level)."""
    del times
    m = parent.shape[0]
    cur0 = jnp.where(active, jnp.arange(m, dtype=parent.dtype), -1)

    def cond(c):  # at most m steps (see `_walk_up`)
        return jnp.any(c[0] >= 0) & (c[2] < m)

    def body(c):
        cur, hit, i = c
        hit = hit | (cur == s)
        safe = jnp.maximum(cur, 0)
        nxt = parent[safe]
        ok = (cur >= 0) & (cur != s) & (nxt >= 0)
        nxt_ok = ok & active[jnp.maximum(nxt, 0)]
        return jnp.where(nxt_ok, nxt, -1).astype(cur0.dtype), hit, i + 1

    _, hit, _ = jax.lax.while_loop(cond, body, (cur0, jnp.zeros(m, bool), jnp.int32(0)))
    return hit & active


# ------------------------------------------------------------------------------------------
# the generative process of one point on an existing tree
# ------------------------------------------------------------------------------------------
def _attach_point(key, parent, times, active, cnt, root, t_max, c, alpha, beta, max_tries=1000):
    """Where a new point diverges from the tree (section 1), redrawn until the divergence
    time is ``< t_max``. Returns ``(on_segment, node, time, tries)``: a new branch point at
    ``time`` on the edge into ``node`` (``on_segment``), or a new branch at branch point
    ``node``; ``tries`` paths were drawn (at most ``max_tries``; the last path is returned
    even if its time is not below ``t_max``).

    One flat ``while_loop`` over path steps (a redraw restarts at the root), two uniforms a
    step: the divergence time on the current segment by inverting the survival function of
    the rate ``a(t) Gamma(m - beta) / Gamma(m + 1 + alpha)``, and the branch at a branch
    point by inverting the cumulative weights (child ``k``: ``n_k - beta``, new branch:
    ``alpha + beta K``). Under ``vmap`` the loop runs the longest chain's steps."""
    m = parent.shape[0]
    f = times.dtype
    slots = jnp.arange(m)
    root = jnp.asarray(root, jnp.int32)

    def cond(s):  # the step cap only matters for an invalid (cyclic) parent array
        return ~s[3] & (s[2] < max_tries * m)

    def body(s):
        cur, t0, i, done, seg, node, t, tries = s
        u = jax.random.uniform(jax.random.fold_in(key, i), (2,), f, minval=jnp.finfo(f).tiny)
        mcur = cnt[cur].astype(f)
        rate = c * jnp.exp(gammaln(mcur - beta) - gammaln(mcur + 1 + alpha))
        td = 1.0 - (1.0 - t0) * u[0] ** (1.0 / rate)
        here = td < times[cur]
        kids = active & (parent == cur) & (slots != cur)
        w = jnp.where(kids, jnp.maximum(cnt.astype(f) - beta, 0.0), 0.0)
        cum = jnp.cumsum(w)
        w_new = jnp.maximum(alpha + beta * jnp.sum(kids), 0.0)
        x = u[1] * (cum[-1] + w_new)
        new_branch = x >= cum[-1]
        pick = jnp.argmax(cum > x).astype(jnp.int32)
        end = here | new_branch
        t_end = jnp.where(here, td, times[cur])
        finish = end & ((t_end < t_max) | (tries >= max_tries))
        restart = end & ~finish
        nxt = jnp.where(end, root, pick)
        t0_next = jnp.where(end, 0.0, times[cur])
        return (nxt, t0_next.astype(f), i + 1, finish, jnp.where(finish, here, seg), jnp.where(finish, cur, node),
                jnp.where(finish, t_end, t), tries + restart.astype(jnp.int32))

    init = (root, jnp.zeros((), f), jnp.int32(0), jnp.bool_(False), jnp.bool_(False), root, jnp.zeros((), f),
            jnp.int32(1))
    _, _, _, _, seg, node, t, tries = jax.lax.while_loop(cond, body, init)
    return seg, node, t, tries


# ------------------------------------------------------------------------------------------
# the detach / re-attach move
# ------------------------------------------------------------------------------------------
def _log_joint_terms(st, X, use_lik, leaf_var=0.0):
    active = st.parent != FREE
    N = X.shape[0]
    is_leaf = jnp.arange(st.parent.shape[0]) < N
    lp = log_prior_masked(st.parent, st.times, active, is_leaf, st.c, st.alpha, st.beta)
    ll = (log_marginal_masked(st.parent, st.times, active, X, st.sigma2, leaf_var) if use_lik
          else jnp.zeros((), X.dtype))
    return lp, ll


def _move(key, st: PYDTState, X, use_lik: bool, leaf_var=0.0, tables: Optional[PriorTables] = None):
    m = st.parent.shape[0]
    N = X.shape[0]
    f = st.times.dtype
    slots = jnp.arange(m)
    active = st.parent != FREE
    is_leaf = slots < N
    ks, ka, kacc = jax.random.split(key, 3)
    T = prior_tables(m, st.alpha, st.beta, f) if tables is None else tables
    # pick a non-root active node uniformly
    cand = active & (st.parent >= 0)
    n_cand = jnp.sum(cand)
    s = jax.random.categorical(ks, jnp.where(cand, 0.0, -jnp.inf)).astype(jnp.int32)
    p = st.parent[s]
    t_s = st.times[s]
    insub = _subtree_mask(st.parent, st.times, active, s)
    # the old tree with the subtree standing in as a single point
    act_leaf = active & (~insub | (slots == s))
    lp_old_leaf = log_prior_masked(st.parent, st.times, act_leaf, is_leaf | (slots == s), st.c, st.alpha, st.beta,
                                   T)
    # detach: remove s's subtree; a parent left with one child disappears
    nonroot = active & (st.parent >= 0)
    nkids_p = jnp.sum(nonroot & (st.parent == p))
    binary = nkids_p == 2
    other = jnp.argmax(nonroot & (st.parent == p) & (slots != s)).astype(jnp.int32)
    par_r = jnp.where(binary, st.parent.at[other].set(st.parent[p]).at[p].set(FREE), st.parent)
    act_r = (par_r != FREE) & ~insub
    root_r = jnp.argmax(act_r & (par_r == -1)).astype(jnp.int32)
    order_r = _order(par_r, st.times, act_r)
    cnt_r = _up_counts(par_r, order_r, act_r, is_leaf.astype(jnp.int32))
    seg, node, t_new, tries = _attach_point(ka, par_r, st.times, act_r, cnt_r, root_r, t_s, st.c, st.alpha,
                                            st.beta)
    ok = t_new < t_s
    # a free slot for the new branch point (p itself if it was removed)
    free_slot = jnp.where(binary, p, jnp.argmax((par_r == FREE) & (slots >= N)).astype(jnp.int32))
    # build the new tree
    par_seg = par_r.at[free_slot].set(par_r[node]).at[node].set(free_slot).at[s].set(free_slot)
    times_seg = st.times.at[free_slot].set(t_new)
    par_bp = par_r.at[s].set(node)
    # the subtree itself keeps its internal structure (its nodes' parents are unchanged)
    par_new = jnp.where(seg, par_seg, par_bp)
    times_new = jnp.where(seg, times_seg, st.times)
    act_new = par_new != FREE
    lp_new = log_prior_masked(par_new, times_new, act_new, is_leaf, st.c, st.alpha, st.beta, T)
    act_new_leaf = act_new & (~insub | (slots == s))
    lp_new_leaf = log_prior_masked(par_new, times_new, act_new_leaf, is_leaf | (slots == s), st.c, st.alpha,
                                   st.beta, T)
    ll_new = (log_marginal_masked(par_new, times_new, act_new, X, st.sigma2, leaf_var) if use_lik
              else jnp.zeros((), f))
    n_cand_new = jnp.sum(act_new & (par_new >= 0))
    log_ratio = ((ll_new - st.log_lik) + (lp_new - st.log_prior) - (lp_new_leaf - lp_old_leaf)
                 + jnp.log(n_cand.astype(f)) - jnp.log(n_cand_new.astype(f)))
    log_ratio = jnp.where(ok, log_ratio, -jnp.inf)
    acc = mh_accept(kacc, log_ratio)
    new_st = st._replace(parent=par_new.astype(jnp.int32), times=times_new, log_lik=ll_new, log_prior=lp_new)
    st = jax.tree_util.tree_map(lambda a, b: jnp.where(acc, a, b), new_st, st)
    return st, (acc, log_ratio, tries)


# ------------------------------------------------------------------------------------------
# hyperparameters
# ------------------------------------------------------------------------------------------
def _gibbs_c(key, st, N, priors):
    """Eq. 15: ``c | T ~ G(a_c + |I|, b_c - sum_i J_i log(1 - t_i))`` (Eq. 14's ``c``-terms)."""
    m = st.parent.shape[0]
    active = st.parent != FREE
    slots = jnp.arange(m)
    is_leaf = slots < N
    order = _order(st.parent, st.times, active)
    cnt = _up_counts(st.parent, order, active, is_leaf.astype(jnp.int32))
    H = _harmonic_table(m, st.alpha, st.beta)
    nonroot = active & (st.parent >= 0)
    kidsH = jax.ops.segment_sum(jnp.where(nonroot, H[jnp.maximum(cnt - 1, 0)], 0.0),
                                jnp.where(nonroot, st.parent, m), num_segments=m + 1)[:m]
    branch = active & ~is_leaf
    J = H[jnp.maximum(cnt - 1, 0)] - kidsH
    tb = jnp.where(branch, st.times, 0.0)
    shape = priors.c[0] + jnp.sum(branch)
    rate = priors.c[1] - jnp.sum(jnp.where(branch, J * jnp.log1p(-tb), 0.0))
    return jax.random.gamma(key, shape, dtype=st.times.dtype) / rate


def _gibbs_precision(key, st, X, priors):
    """Eq. 16: sample the locations backwards, then ``1/sigma2 ~ G(a + |E| D / 2, b + sum
    ||x_b - x_a||^2 / (2 (t_b - t_a)))`` over all edges (origin to root included)."""
    kl, kg = jax.random.split(key)
    N, D = X.shape
    active = st.parent != FREE
    loc = _sample_locations(kl, st.parent, st.times, active, X, st.sigma2)
    p = st.parent
    tp = jnp.where(p >= 0, st.times[jnp.maximum(p, 0)], 0.0)
    lp = jnp.where((p >= 0)[:, None], loc[jnp.maximum(p, 0)], 0.0)
    sq = jnp.sum((loc - lp) ** 2, axis=1) / (2.0 * jnp.maximum(st.times - tp, 1e-300))
    n_edges = jnp.sum(active)
    shape = priors.precision[0] + n_edges * D / 2.0
    rate = priors.precision[1] + jnp.sum(jnp.where(active, sq, 0.0))
    return rate / jax.random.gamma(kg, shape, dtype=X.dtype)


def _slice(key, x0, logp, w=1.0, max_steps=20):
    """One univariate slice-sampling update (stepping out, shrinkage; Neal 2003)."""
    k1, k2, k3 = jax.random.split(key, 3)
    f = x0.dtype
    ly = logp(x0) + jnp.log(jax.random.uniform(k1, (), f, minval=jnp.finfo(f).tiny))
    left = x0 - w * jax.random.uniform(k2, (), f)
    right = left + w

    def out_l(s):
        l, i = s
        return (logp(l) > ly) & (i < max_steps)

    left, _ = jax.lax.while_loop(out_l, lambda s: (s[0] - w, s[1] + 1), (left, 0))

    def out_r(s):
        r, i = s
        return (logp(r) > ly) & (i < max_steps)

    right, _ = jax.lax.while_loop(out_r, lambda s: (s[0] + w, s[1] + 1), (right, 0))

    def cond(s):
        return ~s[3]

    def body(s):
        l, r, i, _, x = s
        xn = l + (r - l) * jax.random.uniform(jax.random.fold_in(k3, i), (), f)
        good = logp(xn) > ly
        l = jnp.where(~good & (xn < x0), xn, l)
        r = jnp.where(~good & (xn >= x0), xn, r)
        return l, r, i + 1, good | (i > 200), jnp.where(good, xn, x0)

    _, _, _, _, x = jax.lax.while_loop(cond, body, (left, right, 0, jnp.bool_(False), x0))
    return x


def _slice_alpha_beta(key, st, N, priors, sample_alpha, sample_beta):
    active = st.parent != FREE
    is_leaf = jnp.arange(st.parent.shape[0]) < N
    ka, kb = jax.random.split(key)

    def lp_tree(alpha, beta):
        return log_prior_masked(st.parent, st.times, active, is_leaf, st.c, alpha, beta)

    alpha, beta = st.alpha, st.beta
    if sample_alpha:
        aa, ab = priors.alpha

        def logp_la(la):  # log alpha, with the Jacobian; alpha >= -2 beta holds for alpha > 0
            a = jnp.exp(la)
            return lp_tree(a, beta) + aa * la - ab * a

        alpha = jnp.exp(_slice(ka, jnp.log(alpha), logp_la))
    if sample_beta:
        ba, bb = priors.beta

        def logp_lb(lb):  # logit beta, with the Jacobian
            b = jax.nn.sigmoid(lb)
            return lp_tree(alpha, b) + ba * jnp.log(b) + bb * jnp.log1p(-b)

        b0 = jnp.clip(beta, 1e-12, 1 - 1e-12)
        beta = jax.nn.sigmoid(_slice(kb, jnp.log(b0) - jnp.log1p(-b0), logp_lb))
    return alpha, beta


# ------------------------------------------------------------------------------------------
# init / step
# ------------------------------------------------------------------------------------------
def _prior_tree(key, N, f, c, alpha, beta):
    """A tree drawn from the PYDT prior by the generative process (points one by one)."""
    m = 2 * N - 1
    slots = jnp.arange(m)
    parent = jnp.full(m, FREE, jnp.int32).at[0].set(-1)
    times = jnp.zeros(m, f).at[:N].set(1.0)
    is_leaf = slots < N

    def body(n, carry):
        parent, times = carry
        active = (parent != FREE) & ((slots < n) | (slots >= N))
        order = _order(parent, times, active)
        cnt = _up_counts(parent, order, active, is_leaf.astype(jnp.int32))
        root = jnp.argmax(active & (parent == -1)).astype(jnp.int32)
        seg, node, t, _ = _attach_point(jax.random.fold_in(key, n), parent, times, active, cnt, root,
                                        jnp.asarray(1.0, f), c, alpha, beta)
        slot = jnp.argmax((parent == FREE) & (slots >= N)).astype(jnp.int32)
        par_seg = parent.at[slot].set(parent[node]).at[node].set(slot).at[n].set(slot)
        par_bp = parent.at[n].set(node)
        parent = jnp.where(seg, par_seg, par_bp)
        times = jnp.where(seg, times.at[slot].set(t), times)
        return parent, times

    # leaf n is "free" until inserted: mark it by leaving its parent as FREE
    parent = parent.at[1:N].set(FREE)
    return jax.lax.fori_loop(1, N, body, (parent, times))


@functools.partial(jax.jit, static_argnames=("use_lik", "probit"))
def _init_jit(key, X, c, alpha, beta, sigma2, use_lik, probit):
    N = X.shape[0]
    f = X.dtype
    parent, times = _prior_tree(key, N, f, c, alpha, beta)
    latent = jnp.where(X > 0.5, 1.0, -1.0).astype(f) if probit else None
    st = PYDTState(parent, times, c, alpha, beta, sigma2, jnp.zeros((), f), jnp.zeros((), f), latent)
    lp, ll = _log_joint_terms(st, latent if probit else X, use_lik, 1.0 if probit else 0.0)
    return st._replace(log_prior=lp, log_lik=ll)


def pydt_mcmc_init(key, X, *, c=1.0, alpha=0.5, beta=0.2, sigma2=1.0, use_likelihood: bool = True,
                   likelihood: str = "gaussian") -> PYDTState:
    """Initial state: a tree drawn from the PYDT prior (points attached one by one); for the
    probit model the latent values start at ``+-1`` by the bits."""
    X = jnp.asarray(X)
    f = X.dtype
    return _init_jit(key, X, jnp.asarray(c, f), jnp.asarray(alpha, f), jnp.asarray(beta, f), jnp.asarray(sigma2, f),
                     bool(use_likelihood), likelihood == "probit")


def _probit_latent(key, st, Y):
    """Auxiliary variables of the probit model: sample the internal locations given the
    current latent leaf values (backward sampling), then each latent value from
    ``N(x_parent, sigma2 (1 - t_parent) + 1)`` truncated to the side its bit says."""
    k1, k2 = jax.random.split(key)
    N = Y.shape[0]
    active = st.parent != FREE
    loc = _sample_locations(k1, st.parent, st.times, active, st.latent, st.sigma2, 1.0)
    par = st.parent[:N]
    mean = loc[par]
    sd = jnp.sqrt(st.sigma2 * (1.0 - st.times[par]) + 1.0)[:, None]
    z0 = -mean / sd
    pos = Y > 0.5
    lower = jnp.where(pos, z0, -jnp.inf)
    upper = jnp.where(pos, jnp.inf, z0)
    z = jax.random.truncated_normal(k2, lower, upper, Y.shape, Y.dtype)
    return mean + sd * z


def _step(key, st, X, priors, num_moves, sample_c, sample_sigma2, sample_alpha, sample_beta, use_lik):
    N = X.shape[0]
    km, kc, ks, kab, kp = jax.random.split(key, 5)
    probit = st.latent is not None
    if probit:  # X holds the bits; the tree sees the latent values with unit leaf noise
        st = st._replace(latent=_probit_latent(kp, st, X))
        data, leaf_var = st.latent, 1.0
        st = st._replace(log_lik=_log_joint_terms(st, data, use_lik, leaf_var)[1])
    else:
        data, leaf_var = X, 0.0

    tables = prior_tables(st.parent.shape[0], st.alpha, st.beta, st.times.dtype)  # fixed during the moves

    def mv(s, k):
        s, info = _move(k, s, data, use_lik, leaf_var, tables)
        return s, info

    st, (acc, lr, tries) = jax.lax.scan(mv, st, jax.random.split(km, num_moves))
    changed = False
    if sample_c:
        st = st._replace(c=_gibbs_c(kc, st, N, priors))
        changed = True
    if sample_sigma2 and use_lik and not probit:
        st = st._replace(sigma2=_gibbs_precision(ks, st, X, priors))
        changed = True
    if sample_alpha or sample_beta:
        a, b = _slice_alpha_beta(kab, st, N, priors, sample_alpha, sample_beta)
        st = st._replace(alpha=a, beta=b)
        changed = True
    if changed:
        lp, ll = _log_joint_terms(st, data, use_lik, leaf_var)
        st = st._replace(log_prior=lp, log_lik=ll)
    nb = jnp.sum((st.parent != FREE) & (jnp.arange(st.parent.shape[0]) >= N))
    return st, PYDTInfo(acc, lr, tries, nb)


@functools.partial(jax.jit, static_argnames=("num_moves", "sample_c", "sample_sigma2", "sample_alpha",
                                             "sample_beta", "use_lik"))
def _step_jit(key, st, X, priors, num_moves, sample_c, sample_sigma2, sample_alpha, sample_beta, use_lik):
    return _step(key, st, X, priors, num_moves, sample_c, sample_sigma2, sample_alpha, sample_beta, use_lik)


@functools.partial(jax.jit, static_argnames=("num_moves", "sample_c", "sample_sigma2", "sample_alpha",
                                             "sample_beta", "use_lik"))
def _step_chains(keys, st, X, priors, num_moves, sample_c, sample_sigma2, sample_alpha, sample_beta, use_lik):
    return jax.vmap(lambda k, s: _step(k, s, X, priors, num_moves, sample_c, sample_sigma2, sample_alpha,
                                       sample_beta, use_lik))(keys, st)


def pydt_mcmc_step(key, state: PYDTState, X, *, priors: PYDTPriors = PYDTPriors(), num_moves: int = 1,
                   sample_c=True, sample_sigma2=True, sample_alpha=True, sample_beta=True, use_likelihood=True):
    """One sampler step: ``num_moves`` detach / re-attach moves, then the hyperparameter
    updates that are switched on. Returns ``(state, PYDTInfo)``."""
    pri = PYDTPriors(*(tuple(float(v) for v in p) for p in priors))
    return _step_jit(key, state, jnp.asarray(X), pri, int(num_moves), bool(sample_c), bool(sample_sigma2),
                     bool(sample_alpha), bool(sample_beta), bool(use_likelihood))


class PYDTSamples(NamedTuple):
    """Output of `pydt_mcmc`: per kept step ``parent [S, 2N-1]``, ``times [S, 2N-1]``,
    ``c, alpha, beta, sigma2, log_lik, log_prior [S]``, ``accept_rate`` (kept steps) and the
    final `PYDTState`."""

    parent: np.ndarray
    times: np.ndarray
    c: np.ndarray
    alpha: np.ndarray
    beta: np.ndarray
    sigma2: np.ndarray
    log_lik: np.ndarray
    log_prior: np.ndarray
    accept_rate: float
    state: PYDTState

    def tree(self, i: int = -1) -> ParentTree:
        """Sample ``i`` as a `ParentTree` (free slots dropped, internal nodes renumbered)."""
        return state_to_tree(self.parent[i], self.times[i])


def state_to_tree(parent, times) -> ParentTree:
    """A compact `ParentTree` (heights = divergence times) from fixed-capacity arrays."""
    parent = np.asarray(parent)
    times = np.asarray(times)
    m = parent.shape[0]
    N = (m + 1) // 2
    keep = np.flatnonzero(parent != FREE)
    new_id = np.full(m, -1)
    new_id[keep] = np.arange(keep.size)
    par = np.where(parent[keep] >= 0, new_id[np.maximum(parent[keep], 0)], -1)
    return ParentTree(par, N, times[keep])


def _check_X(X, name: str = "X"):
    X = real_array(X, name, "[N, D]")
    if X.ndim != 2 or X.shape[0] < 2 or X.shape[1] < 1:
        raise ValueError(f"{name} must be 2-D [N, D] with N >= 2, got shape {X.shape}")
    X = X.astype(jnp.result_type(float))
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{name} contains NaN or inf")
    check_squares(X, name)
    return X


def check_squares(X: np.ndarray, name: str = "X"):
    """Raises a ``ValueError`` when sums of squares of ``X`` overflow float64 (entries near
    1e150 and above), which would turn every Gaussian score into NaN or inf."""
    with np.errstate(over="ignore", invalid="ignore"):
        ok = np.isfinite(np.sum(np.square(X))) and np.isfinite(np.sum(np.square(X - np.mean(X, axis=0))))
    if not ok:
        raise ValueError(f"{name}: entries up to {float(np.max(np.abs(X))):.3g} are too large: their sums of squares "
                         f"overflow float64; rescale {name} (e.g. standardise its columns)")


def check_hyperparameters(c, alpha, beta, sigma2=1.0):
    """Raise a ValueError unless ``c > 0``, ``0 <= beta < 1``, ``alpha >= -2 beta``,
    ``sigma2 > 0`` (the sampler needs ``beta < 1``: ``Gamma(1 - beta)`` is infinite at 1)."""
    vals = {}
    for name, v in (("c", c), ("alpha", alpha), ("beta", beta), ("sigma2", sigma2)):
        try:
            vals[name] = float(v)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be a number, got {type(v).__name__}") from None
        if not np.isfinite(vals[name]):
            raise ValueError(f"{name} must be finite, got {v}")
    if vals["c"] <= 0:
        raise ValueError(f"c must be > 0, got {c}")
    if not 0 <= vals["beta"] < 1:
        raise ValueError(f"beta must be in [0, 1), got {beta}")
    if vals["alpha"] < -2 * vals["beta"]:
        raise ValueError(f"alpha must be >= -2 beta = {-2 * vals['beta']}, got {alpha}")
    if vals["sigma2"] <= 0:
        raise ValueError(f"sigma2 must be > 0, got {sigma2}")
    return vals["c"], vals["alpha"], vals["beta"], vals["sigma2"]


def _check_count(v, name: str, minimum: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {v!r}")
    return int(v)


def check_key(key, name: str = "key"):
    """``key`` as a typed PRNG key; a ``ValueError`` naming it otherwise."""
    from ..._internal.validation import check_key

    return check_key(key, name)


def check_priors(priors) -> PYDTPriors:
    """`PYDTPriors` with every (shape, rate) pair positive and finite."""
    try:
        pri = PYDTPriors(*(tuple(float(v) for v in p) for p in priors))
    except (TypeError, ValueError):
        raise TypeError(f"priors must be a PYDTPriors of (shape, rate) pairs, got {priors!r}") from None
    for name, p in zip(pri._fields, pri):
        if len(p) != 2 or not all(np.isfinite(v) and v > 0 for v in p):
            raise ValueError(f"priors.{name} must be two positive finite numbers, got {p}")
    return pri


def _check_likelihood(X, likelihood):
    if likelihood not in ("gaussian", "probit"):
        raise ValueError(f"likelihood must be 'gaussian' or 'probit', got {likelihood!r}")
    if likelihood == "probit" and not np.all((X == 0) | (X == 1)):
        raise ValueError("likelihood='probit' needs binary X (entries 0 or 1)")


def pydt_mcmc(key, X, num_samples: int = 1000, num_warmup: int = 0, *, c=1.0, alpha=0.5, beta=0.2, sigma2=1.0,
              likelihood: str = "gaussian", priors: PYDTPriors = PYDTPriors(), num_moves: Optional[int] = None,
              thin: int = 1, num_chains: int = 1, sample_c=True, sample_sigma2=True, sample_alpha=True,
              sample_beta=True, init_state: Optional[PYDTState] = None, chain_method: str = "vectorized",
              progress_bar: bool = True) -> PYDTSamples:
    """PYDT posterior samples by the section-5.1 sampler.

    Args:
      key: a ``jax.random`` key (the same key gives the same samples).
      X: ``[N, D]`` data: real values (``likelihood="gaussian"``, the leaves at time 1) or
        bits (``"probit"``: ``P(x = 1) = Phi(leaf location)``, by auxiliary variables).
      num_samples, num_warmup, thin: kept steps, burnt steps, thinning.
      c, alpha, beta, sigma2: initial hyperparameters (fixed when not sampled); ``alpha =
        beta = 0`` with ``sample_alpha = sample_beta = False`` is the Dirichlet diffusion tree.
      likelihood: ``"gaussian"`` or ``"probit"`` (``sigma2`` stays fixed under probit).
      priors: `PYDTPriors`.
      num_moves: detach / re-attach moves per step (default ``N``).
      num_chains: independent chains (outputs gain a leading axis).
      chain_method: how several chains run: ``"vectorized"`` (one program ``vmap``-ed over the
        chains: the choice for a GPU), ``"sequential"`` (one chain after the other within each
        step) or ``"parallel"`` (the chains' steps in a thread pool, one thread per CPU core:
        the choice on a multi-core CPU, where XLA's batched scatters make ``vmap`` slower
        than separate chains). All three give the same samples for the same key (chain ``i``
        uses the ``i``-th split of each step's key).
      sample_c, sample_sigma2, sample_alpha, sample_beta: which hyperparameters to update.
      init_state: continue from a state (``state`` of an earlier result).
      progress_bar: tqdm bar over steps.

    Returns:
      `PYDTSamples` (``[S, ...]`` arrays, or ``[num_chains, S, ...]``).
    """
    X = _check_X(X)
    _check_likelihood(X, likelihood)
    c, alpha, beta, sigma2 = check_hyperparameters(c, alpha, beta, sigma2)
    if sample_alpha and alpha <= 0:
        raise ValueError("sample_alpha=True needs alpha > 0 (it is sampled on the log scale)")
    if isinstance(num_chains, bool) or not isinstance(num_chains, (int, np.integer)) or num_chains < 1:
        raise ValueError(f"num_chains must be an int >= 1, got {num_chains!r}")
    if chain_method not in ("vectorized", "sequential", "parallel"):
        raise ValueError(f"chain_method must be 'vectorized', 'sequential' or 'parallel', got {chain_method!r}")
    N = X.shape[0]
    num_samples = _check_count(num_samples, "num_samples", 1)
    num_warmup = _check_count(num_warmup, "num_warmup", 0)
    thin = _check_count(thin, "thin", 1)
    num_moves = N if num_moves is None else _check_count(num_moves, "num_moves", 1)
    pri = check_priors(priors)
    check_key(key)
    k0, k1 = jax.random.split(key)
    Xj = jnp.asarray(X)
    f = Xj.dtype
    hyp = tuple(jnp.asarray(v, f) for v in (c, alpha, beta, sigma2))
    probit = likelihood == "probit"
    chains = num_chains > 1
    split = chains and chain_method != "vectorized"
    if init_state is not None:
        st = init_state
    elif chains:
        st = jax.vmap(lambda k: _init_jit(k, Xj, *hyp, True, probit))(jax.random.split(k0, num_chains))
    else:
        st = _init_jit(k0, Xj, *hyp, True, probit)
    pool = None
    if split:  # per-chain states
        sts = [jax.tree_util.tree_map(lambda a, i=i: None if a is None else a[i], st) for i in range(num_chains)]
        if chain_method == "parallel":
            import os
            from concurrent.futures import ThreadPoolExecutor
            pool = ThreadPoolExecutor(max_workers=max(1, min(num_chains, os.cpu_count() or 1)))
    flags = (num_moves, bool(sample_c), bool(sample_sigma2), bool(sample_alpha), bool(sample_beta), True)
    total = num_warmup + num_samples * thin
    rows, accs = [], []
    bar = None
    if progress_bar:
        from tqdm.auto import tqdm
        bar = tqdm(total=total, desc="pydt")
    try:
        for t in range(total):
            kt = jax.random.fold_in(k1, t)
            if split:
                ks = jax.random.split(kt, num_chains)

                def one(i):
                    return _step_jit(ks[i], sts[i], Xj, pri, *flags)

                outs = list(pool.map(one, range(num_chains))) if pool is not None else [one(i) for i in
                                                                                       range(num_chains)]
                sts = [o[0] for o in outs]
                infos = [o[1] for o in outs]
            elif chains:
                st, info = _step_chains(jax.random.split(kt, num_chains), st, Xj, pri, *flags)
            else:
                st, info = _step_jit(kt, st, Xj, pri, *flags)
            r = t + 1 - num_warmup
            if r > 0 and r % thin == 0:
                if split:  # per-chain states are stacked only where they are read
                    st = _stack_states(sts)
                rows.append(jax.device_get((st.parent, st.times, st.c, st.alpha, st.beta, st.sigma2, st.log_lik,
                                            st.log_prior)))
                accs.append(np.stack([np.asarray(i.accepted) for i in infos]) if split else np.asarray(info.accepted))
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
        if pool is not None:
            pool.shutdown()
    if split:
        st = _stack_states(sts)
    ax = 1 if chains else 0
    cols = [np.stack([r[i] for r in rows], axis=ax) for i in range(8)]
    nan = [nm for nm, v in (("c", cols[2]), ("sigma2", cols[5]), ("log_lik", cols[6])) if np.any(np.isnan(v))]
    if nan:
        raise ValueError(
            f"pydt_mcmc: the sampled {', '.join(nan)} became NaN; X's entries reach {float(np.max(np.abs(X))):.3g}, "
            f"and data far from unit scale overflow the sampler's float64 arithmetic (it squares sigma2 and "
            f"its inverse): standardise X's columns")
    return PYDTSamples(*cols, float(np.mean(np.concatenate([a.reshape(-1) for a in accs]))), st)


def _stack_states(states):
    """Per-chain `PYDTState`s -> one state with a leading chain axis (``None`` fields kept)."""
    return jax.tree_util.tree_map(lambda *a: jnp.stack(a), *states)


class _KernelState(NamedTuple):
    sample: Any
    state: Any
    rng_key: jax.Array


class PYDT(MCMCKernel):
    """The section-5.1 sampler as a NumPyro kernel: ``MCMC(PYDT(X), num_warmup=...,
    num_samples=...).run(key)`` collects ``{"parent": [2N-1], "times": [2N-1]}`` per step
    (turn one into a tree with `state_to_tree`).

    Args:
      X, c, alpha, beta, sigma2, likelihood, priors, num_moves, sample_*: as in `pydt_mcmc`.
    """

    sample_field = "sample"

    def __init__(self, X, *, c=1.0, alpha=0.5, beta=0.2, sigma2=1.0, likelihood="gaussian",
                 priors: PYDTPriors = PYDTPriors(), num_moves=None, sample_c=True, sample_sigma2=True,
                 sample_alpha=True, sample_beta=True):
        X = _check_X(X)
        _check_likelihood(X, likelihood)
        self.hyp = check_hyperparameters(c, alpha, beta, sigma2)
        self.X = jnp.asarray(X)
        self.probit = likelihood == "probit"
        self.priors = PYDTPriors(*(tuple(float(v) for v in p) for p in priors))
        N = X.shape[0]
        self.flags = (N if num_moves is None else int(num_moves), bool(sample_c), bool(sample_sigma2),
                      bool(sample_alpha), bool(sample_beta), True)

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        k_init, k = jax.random.split(rng_key)
        f = self.X.dtype
        st = init_params if init_params is not None else _init_jit(
            k_init, self.X, *(jnp.asarray(v, f) for v in self.hyp), True, self.probit)
        return _KernelState({"parent": st.parent, "times": st.times}, st, k)

    def sample(self, state, model_args, model_kwargs):
        k, k_next = jax.random.split(state.rng_key)
        st, _ = _step(k, state.state, self.X, self.priors, *self.flags)
        return _KernelState({"parent": st.parent, "times": st.times}, st, k_next)
