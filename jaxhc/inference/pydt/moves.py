"""The structure search of the PYDT EM (section 5.2; `jaxhc.inference.pydt.em`): scores of
attaching a subtree anywhere on a tree (the exact log joint of each candidate at its times), the
moves that propose candidate trees (re-attach, regraft, collapse), EM on a batch of candidates,
and the initial tree by sequential attachment."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from ...models.pydt_math import FREE, harmonic_table, log_branch_prod, log_prior_from_counts, subtree_mask, time_order
from .estep import bound_extra, bound_terms, leaf_counts
from .messages import marginals, marginals_diag, upward_messages, upward_messages_diag
from .mstep import run_em, run_em_probit
from .padding import real_leaves, slot_categorical

__all__ = ["em_batch", "initial_structure", "propose_collapse", "propose_reattach", "propose_regraft"]


# ------------------------------------------------------------------------------------------
# scoring attachment points
# ------------------------------------------------------------------------------------------
def _path_sums(parent, active, d):
    """``sum of d[a]`` over the strict ancestors ``a`` of every node (pointer jumping:
    ``ceil(log2 m)`` vectorised rounds, no ``[m, m]`` ancestor matrix)."""
    m = parent.shape[0]
    jump = jnp.where(active & (parent >= 0), parent, -1)
    val = jnp.where(jump >= 0, d[jnp.maximum(jump, 0)], 0.0)
    for _ in range(max(1, int(np.ceil(np.log2(m))))):
        ok = jump >= 0
        js = jnp.maximum(jump, 0)
        val = val + jnp.where(ok, val[js], 0.0)
        jump = jnp.where(ok, jump[js], -1)
    return val


def _seg_times(par_r, times, t_s):
    """Attachment time on the edge into each node: the middle of ``[t_p, min(t_k, t_s)]``."""
    tp = jnp.where(par_r >= 0, times[jnp.maximum(par_r, 0)], 0.0)
    return 0.5 * (tp + jnp.minimum(times, t_s))


def _build(par_r, times, slot, s, j):
    """The tree with the subtree of ``s`` attached at candidate ``j`` of `_attach` (``j < m``: a
    new node in slot ``slot`` at the middle of the edge into ``j``; else a new child of branch
    point ``j - m``). Returns ``(parent, times)``."""
    m = par_r.shape[0]
    seg = j < m
    k = jnp.where(seg, j, j - m).astype(jnp.int32)
    t_new = _seg_times(par_r, times, times[s])[k]
    par_seg = par_r.at[slot].set(par_r[k]).at[k].set(slot).at[s].set(slot)
    par_bp = par_r.at[s].set(k)
    return jnp.where(seg, par_seg, par_bp), jnp.where(seg, times.at[slot].set(t_new), times)


def _attach_prior(par_r, times, act_r, insub, cnt_sub, cnt_r, s, t_seg, c, alpha, beta, N):
    """Eq. 9 + 11 of every candidate tree of `_attach` (``[2m]``), in ``O(m log m)``: the prior of
    the remaining tree and the subtree's inner terms (computed once), plus the change each
    attachment makes. Attaching ``n_s`` leaves below node ``a`` changes only ``a``'s terms and
    those of its ancestors (``Gamma(n + alpha)``, Eq. 11's harmonic sum, the ``Gamma(n - beta)``
    of the parent); at a segment a new binary node appears; at a branch point its ``K`` grows
    by one. Equals `log_prior_from_counts` of each candidate (tested)."""
    m = par_r.shape[0]
    f = times.dtype
    slots = jnp.arange(m)
    is_leaf = slots < N
    n_s = cnt_sub[s]
    t_s = times[s]
    s_branch = s >= N
    H = harmonic_table(m, alpha, beta)
    Hn = lambda n: H[jnp.clip(n - 1, 0, m)]  # noqa: E731
    g = lambda n: gammaln(jnp.maximum(n, 1).astype(f) - beta)  # noqa: E731
    r = lambda n: gammaln(jnp.maximum(n, 1).astype(f) + alpha)  # noqa: E731
    A = lambda t: -c * jnp.log1p(-t)  # noqa: E731
    lg1mb = gammaln(1.0 - beta)
    # the remaining tree and the subtree (as a second root), less Eq. 11 of the edge into s
    ts_safe = jnp.where(s_branch, t_s, 0.0)
    eq11_s_root = jnp.where(s_branch, -A(ts_safe) * Hn(n_s), 0.0)
    base = (
        log_prior_from_counts(
            par_r.at[s].set(-1), times, act_r | insub, jnp.where(insub, cnt_sub, cnt_r), N, c, alpha, beta
        )
        - eq11_s_root
    )
    branch = act_r & ~is_leaf
    has_p = act_r & (par_r >= 0)
    pp = jnp.maximum(par_r, 0)
    tpar = jnp.where(par_r >= 0, times[pp], 0.0)
    tb = jnp.where(branch, times, 0.0)
    n = cnt_r
    nu = n + n_s
    K = jax.ops.segment_sum(has_p.astype(jnp.int32), jnp.where(has_p, par_r, m), num_segments=m + 1)[:m]
    child = jnp.where(has_p, g(nu) - g(n), 0.0)  # the parent's Gamma(n - beta) of this child
    d_anc = jnp.where(branch, r(n) - r(nu) + (A(tpar) - A(tb)) * (Hn(nu) - Hn(n)) + child, 0.0)
    S = _path_sums(par_r, act_r, d_anc)
    # segment k: new node u at t_seg[k] with children k and s
    tu = jnp.where(act_r, t_seg, 0.0)
    eq9_u = jnp.log(c) - jnp.log1p(-tu) + g(n) + g(n_s) - lg1mb - r(nu)
    eq11_u = (A(tpar) - A(tu)) * Hn(nu)
    eq11_k = jnp.where(branch, (A(tu) - A(tpar)) * Hn(n), 0.0)
    eq11_s_seg = jnp.where(s_branch, (A(tu) - A(ts_safe)) * Hn(n_s), 0.0)
    seg = S + child + eq9_u + eq11_u + eq11_k + eq11_s_seg
    # branch point k: s becomes its (K + 1)-th child
    eq11_s_bp = jnp.where(s_branch, (A(tb) - A(ts_safe)) * Hn(n_s), 0.0)
    bp = S + d_anc + log_branch_prod(K + 1, alpha, beta) - log_branch_prod(K, alpha, beta) + g(n_s) - lg1mb + eq11_s_bp
    return base + jnp.concatenate([seg, bp])


def _attach(par_r, times, act_r, insub, cnt_sub, s, mu_s, v_s, slot, X, hyper, allow_bp, V=None):
    """Scores of attaching the subtree rooted at ``s`` (upward message ``N(mu_s, v_s)``) to a
    remaining tree, at each segment (index ``k``: a new node at the middle of the edge into
    ``k``) and each branch point (index ``m + k``). The score is the log joint ``log p(X | T, t)
    + log P(T, t)`` of the candidate tree at its times (``-inf`` where not allowed): ``log p(X_R)
    + log Z_s + log N(mu_s; E[x_a | X_R], (Var[x_a | X_R] + v_s + sigma2 (t_s - t_a)) I)`` (``X_R``
    the remaining data, ``Z_s`` the subtree's own normaliser, ``x_a`` the attachment location,
    a Brownian bridge on a segment) plus `_attach_prior`. Returns ``(scores [2m], build)`` with
    ``build(j) -> (parent, times)``. With leaf noise variances ``V [N, D]`` (probit
    pseudo-observations ``X``) the variances are per dimension (``v_s [D]``) and the likelihood
    is the surrogate ``log N(X; 0, K + diag V)``."""
    m = par_r.shape[0]
    N, D = X.shape
    slots = jnp.arange(m)
    sigma2 = hyper.sigma2
    t_s = times[s]
    diag = V is not None
    ex = (lambda a: a[:, None]) if diag else (lambda a: a)  # noqa: E731  per-node -> per-node-dim
    order_r = time_order(par_r, times, act_r)
    par_s = par_r.at[s].set(-1)  # the subtree alone (its root closed against the origin)
    if diag:
        mean, var, cross, _, ll_r = marginals_diag(par_r, times, act_r, X, V, sigma2, order_r)
        ll_s = upward_messages_diag(par_s, times, insub, X, V, sigma2, time_order(par_s, times, insub))[2]
        vroot = v_s + sigma2 * t_s
        ll_s = ll_s + 0.5 * jnp.sum(jnp.log(2 * jnp.pi * vroot) + mu_s**2 / vroot)
    else:
        mean, var, cross, _, ll_r = marginals(par_r, times, act_r, X, sigma2)
        ll_s = upward_messages(par_s, times, insub, X, sigma2)[3]
        vroot = v_s + sigma2 * t_s
        ll_s = ll_s + 0.5 * (D * jnp.log(2 * jnp.pi * vroot) + jnp.sum(mu_s**2) / vroot)
    cnt_r = leaf_counts(par_r, times, act_r, N)
    has_p = par_r >= 0
    pp = jnp.maximum(par_r, 0)
    tp = jnp.where(has_p, times[pp], 0.0)
    mp = jnp.where(has_p[:, None], mean[pp], 0.0)
    Pp = jnp.where(ex(has_p), var[pp], 0.0)
    t_new = _seg_times(par_r, times, t_s)
    dk = jnp.where(times - tp > 0, times - tp, 1.0)
    w2 = (t_new - tp) / dk
    w1 = 1.0 - w2
    seg_mean = w1[:, None] * mp + w2[:, None] * mean
    seg_var = (
        ex(w1) ** 2 * Pp
        + ex(w2) ** 2 * var
        + 2 * ex(w1) * ex(w2) * cross
        + ex(sigma2 * (t_new - tp) * (times - t_new) / dk)
    )
    seg_ok = act_r & (tp < t_s)
    bp_ok = act_r & (slots >= N) & (times < t_s) & allow_bp
    att_mean = jnp.concatenate([seg_mean, mean])
    att_var = jnp.concatenate([seg_var, var])
    att_t = jnp.concatenate([t_new, times])
    ok = jnp.concatenate([seg_ok, bp_ok])
    s2 = att_var + v_s + ex(sigma2 * jnp.maximum(t_s - att_t, 0.0))
    s2 = jnp.where(ex(ok), s2, 1.0)
    if diag:
        loc = -0.5 * jnp.sum(jnp.log(2 * jnp.pi * s2) + (mu_s - att_mean) ** 2 / s2, axis=1)
    else:
        loc = -0.5 * (D * jnp.log(2 * jnp.pi * s2) + jnp.sum((mu_s - att_mean) ** 2, axis=1) / s2)
    lp = _attach_prior(par_r, times, act_r, insub, cnt_sub, cnt_r, s, t_new, hyper.c_mean, hyper.alpha, hyper.beta, N)
    scores = jnp.where(ok, ll_r + ll_s + loc + lp, -jnp.inf)
    scores = jnp.where(jnp.isnan(scores), -jnp.inf, scores)
    return scores, functools.partial(_build, par_r, times, slot, s)


def _detach(parent, times, s):
    """Remove the subtree of ``s``; a parent left with one child disappears (its slot freed).
    Returns ``(par_r, act_r, insub, slot)`` with ``slot`` the free slot for a new node."""
    m = parent.shape[0]
    slots = jnp.arange(m)
    active = parent != FREE
    N = (m + 1) // 2
    insub = subtree_mask(parent, times, active, s)
    p = parent[s]
    nonroot = active & (parent >= 0)
    binary = jnp.sum(nonroot & (parent == p)) == 2
    other = jnp.argmax(nonroot & (parent == p) & (slots != s)).astype(jnp.int32)
    par_r = jnp.where(binary, parent.at[other].set(parent[p]).at[p].set(FREE), parent)
    act_r = (par_r != FREE) & ~insub
    slot = jnp.where(binary, p, jnp.argmax((par_r == FREE) & (slots >= N)).astype(jnp.int32))
    return par_r, act_r, insub, slot


def _subtree_message(parent, times, active, X, sigma2, s, V=None):
    """Upward message ``N(mu, v)`` of the subtree at ``s`` (a leaf: its observation); with leaf
    noise ``V [N, D]`` the variance is per dimension."""
    mu, v = _all_subtree_messages(parent, times, active, X, sigma2, V)
    return mu[s], v[s]


def _all_subtree_messages(parent, times, active, X, sigma2, V=None):
    """Upward messages ``N(mu [m, D], v)`` of every node's subtree (leaves: their observation,
    variance 0 or ``V``); ``v [m]`` isotropic or ``[m, D]`` with ``V``."""
    N = X.shape[0]
    m = parent.shape[0]
    leaf = jnp.arange(m) < N
    Xp = jnp.concatenate([X, jnp.zeros((m - N, X.shape[1]), X.dtype)])
    if V is not None:
        mu, v, _ = upward_messages_diag(parent, times, active, X, V, sigma2, time_order(parent, times, active))
        Vp = jnp.concatenate([V, jnp.ones((m - N, X.shape[1]), X.dtype)])
        return jnp.where(leaf[:, None], Xp, mu), jnp.where(leaf[:, None], Vp, v)
    mu, v, _, _ = upward_messages(parent, times, active, X, sigma2)
    return jnp.where(leaf[:, None], Xp, mu), jnp.where(leaf, 0.0, v)


# ------------------------------------------------------------------------------------------
# search moves: each proposes n_em candidate trees; `em_batch` runs EM on them
# ------------------------------------------------------------------------------------------
def _pseudo_data(X, sites):
    """Leaf data of the scores: ``X`` (Gaussian) or the EP site means / variances (probit)."""
    return (X, None) if sites is None else (sites.mean, sites.var)


def _top_candidates(scores, pars, tims, parent, times, n_em):
    """The ``n_em`` best-scoring candidates: ``(parents, times, scores)`` ``[n_em, m]``,
    ``[n_em]``. Where the score is ``-inf`` (fewer valid candidates) the rows hold the source
    tree: invalid candidates can hold parent cycles, on which the tree walks of `pydt_mcmc`
    never end."""
    top_scores, top = jax.lax.top_k(scores, n_em)
    ok = jnp.isfinite(top_scores)
    pars = jnp.where(ok[:, None], pars[top], parent[None, :])
    tims = jnp.where(ok[:, None], tims[top], times[None, :])
    return pars, tims, top_scores


@functools.partial(jax.jit, static_argnames=("n_em",))
def propose_reattach(key, parent, times, hyper, X, sites, allow_bp, n_em):
    """The paper's move (section 5.2): detach a random subtree and re-attach it at the ``n_em``
    best-scoring places (`_attach`: the log joint at the candidate's times). Returns
    ``(parents, times, scores)`` as `_top_candidates`."""
    N = X.shape[0]
    active = parent != FREE
    cand = active & (parent >= 0)
    s = slot_categorical(key, jnp.where(cand, 0.0, -jnp.inf), N, real_leaves(parent, N))
    cnt = leaf_counts(parent, times, active, N)
    M, V = _pseudo_data(X, sites)
    mu_s, v_s = _subtree_message(parent, times, active, M, hyper.sigma2, s, V)
    par_r, act_r, insub, slot = _detach(parent, times, s)
    scores, build = _attach(
        par_r, times, act_r, insub, jnp.where(insub, cnt, 0), s, mu_s, v_s, slot, M, hyper, allow_bp, V
    )
    top_scores, top = jax.lax.top_k(scores, n_em)
    pars, tims = jax.vmap(build)(top)
    ok = jnp.isfinite(top_scores)
    return jnp.where(ok[:, None], pars, parent[None, :]), jnp.where(ok[:, None], tims, times[None, :]), top_scores


@functools.partial(jax.jit, static_argnames=("learn", "learn_sigma2", "n_em"))
def propose_regraft(parent, times, hyper, X, sites, priors, learn, learn_sigma2, allow_bp, n_em):
    """Best regraft: for every subtree, its best re-attachment elsewhere (`_attach` scores plus
    the bound's count terms: the exact bound of the candidate at its times); the ``n_em``
    subtrees whose best regraft scores highest. Returns ``(parents, times, scores)`` as
    `_top_candidates` (``scores``: the bound of each candidate at its times)."""
    N, D = X.shape
    m = parent.shape[0]
    slots = jnp.arange(m)
    active = parent != FREE
    cnt = leaf_counts(parent, times, active, N)
    M, V = _pseudo_data(X, sites)
    mu_all, v_all = _all_subtree_messages(parent, times, active, M, hyper.sigma2, V)
    nonroot = active & (parent >= 0)

    def best_for(s):
        par_r, act_r, insub, slot = _detach(parent, times, s)
        scores, build = _attach(
            par_r, times, act_r, insub, jnp.where(insub, cnt, 0), s, mu_all[s], v_all[s], slot, M, hyper, allow_bp, V
        )
        p = parent[s]
        sib = nonroot & (parent == p) & (slots != s)
        binary = jnp.sum(sib) == 1
        same = jnp.where(binary, jnp.argmax(sib), m + p)  # the place s was taken from: no move
        scores = scores.at[same].set(-jnp.inf)
        act = act_r | insub
        n_act = jnp.sum(act)
        n_int = jnp.sum(act & (slots >= N))
        extra = jnp.concatenate(
            [
                jnp.full(m, bound_extra(n_act + 1, n_int + 1, D, hyper, priors, learn, learn_sigma2)),
                jnp.full(m, bound_extra(n_act, n_int, D, hyper, priors, learn, learn_sigma2)),
            ]
        )
        scores = scores + extra
        j = jnp.argmax(scores)
        par, tim = build(j)
        return jnp.where(nonroot[s], scores[j], -jnp.inf), par, tim

    best, pars, tims = jax.vmap(best_for)(slots)
    return _top_candidates(best, pars, tims, parent, times, n_em)


@functools.partial(jax.jit, static_argnames=("learn", "learn_sigma2", "n_em"))
def propose_collapse(parent, times, hyper, X, sites, priors, learn, learn_sigma2, n_em):
    """Multifurcation merge: every non-root branch point ``k`` folded into its parent ``p`` (the
    children of ``k`` become children of ``p``, ``t_p`` kept), scored by the exact bound at the
    current times; the ``n_em`` best. Returns ``(parents, times, scores)`` as `_top_candidates`
    (``scores``: the bound of each candidate at its times)."""
    N, D = X.shape
    m = parent.shape[0]
    slots = jnp.arange(m)
    active = parent != FREE
    cand = active & (parent >= 0) & (slots >= N)
    M, V = _pseudo_data(X, sites)

    def collapse(k):
        par = jnp.where(active & (parent == k), parent[k], parent).at[k].set(FREE)
        act = par != FREE
        if V is None:
            ll = upward_messages(par, times, act, M, hyper.sigma2)[3]
        else:
            ll = upward_messages_diag(par, times, act, M, V, hyper.sigma2, time_order(par, times, act))[2]
        cnt = leaf_counts(par, times, act, N)
        L = bound_terms(par, times, act, N, D, cnt, ll, hyper, priors, learn, learn_sigma2)
        return jnp.where(cand[k] & ~jnp.isnan(L), L, -jnp.inf), par

    scores, pars = jax.vmap(collapse)(slots)
    return _top_candidates(scores, pars, jnp.broadcast_to(times, pars.shape), parent, times, n_em)


@functools.partial(jax.jit, static_argnames=("learn", "max_em", "max_lbfgs", "conf"))
def em_batch(
    pars, tims, ok, hyper, X, sites, priors, learn, learn_ab, max_em, tol_em, max_lbfgs, sigma2_max, conf=None
):
    """EM on each candidate tree (vmapped), all from the source tree's hyperparameters (and EP
    sites). Gaussian: ``X`` the data, ``sites=None``; probit: ``X`` the signs ``2 Y - 1``.
    Returns ``(times, hypers, sites or None, bounds)``; ``bounds`` is ``-inf`` where not ``ok``."""
    if sites is None:

        def run(par, tim):
            return run_em(par, tim, hyper, X, priors, learn, learn_ab, max_em, tol_em, max_lbfgs, sigma2_max)

        tims, hypers, Ls = jax.vmap(run)(pars, tims)
        out_sites = None
    else:

        def run(par, tim):
            return run_em_probit(par, tim, hyper, X, sites, priors, learn, learn_ab, max_em, tol_em, max_lbfgs, conf)

        tims, hypers, out_sites, Ls = jax.vmap(run)(pars, tims)
    return tims, hypers, out_sites, jnp.where(ok, Ls, -jnp.inf)


def _permutation(key, n, N):
    """``jax.random.permutation(key, n)`` for a traced ``n <= N``, as the first ``n`` entries of
    an ``[N]`` array (the rest: ``n..N-1``). The same sort as JAX's (rounds of a stable sort of
    ``arange`` by random 32-bit keys, ``ceil(3 log n / log(2^32 - 1))`` rounds), the padding
    entries sorted last: the keys of the first ``n`` positions are those of an ``[n]`` draw."""
    u32max = np.iinfo(np.uint32).max
    rounds = int(np.ceil(3 * np.log(max(1, N)) / np.log(u32max)))
    rounds_n = jnp.ceil(3.0 * jnp.log(jnp.maximum(n, 1).astype(jnp.float32)) / np.float32(np.log(u32max)))
    pad = jnp.arange(N) >= n
    x = jnp.arange(N)
    for r in range(rounds):
        key, sub = jax.random.split(key)
        bits = jax.random.bits(sub, (N,), jnp.uint32)
        _, _, y = jax.lax.sort((pad, bits, x), num_keys=2, is_stable=True)
        x = jnp.where(r < rounds_n, y, x)
    return x


@jax.jit
def initial_structure(key, X, hyper, allow_bp, sites=None, n=None):
    """Sequential attachment of the points (random order), each at its best-scoring place
    (times: segment midpoints). ``sites=None``: Gaussian ``X``; else probit (``X`` the signs,
    the points attached as the pseudo-observations of ``sites``). Returns ``(parent, times)``.
    ``n`` (traced): attach only the first ``n`` rows (padded ``X``, `padding`); the tree is the
    one of ``X[:n]`` with its internal slots shifted by ``N - n``."""
    N = X.shape[0]
    m = 2 * N - 1
    f = X.dtype
    slots = jnp.arange(m)
    perm = jax.random.permutation(key, N) if n is None else _permutation(key, n, N)
    parent = jnp.full(m, FREE, jnp.int32).at[perm[0]].set(N).at[perm[1]].set(N).at[N].set(-1)
    times = jnp.zeros(m, f).at[:N].set(1.0).at[N].set(0.5)
    M, V = _pseudo_data(X, sites)

    def body(i, carry):
        parent, times = carry
        s = perm[i]
        act = parent != FREE
        slot = jnp.argmax((parent == FREE) & (slots >= N)).astype(jnp.int32)
        onehot = slots == s
        v_s = jnp.zeros((), f) if V is None else V[s]
        scores, build = _attach(
            parent, times, act, onehot, onehot.astype(jnp.int32), s, M[s], v_s, slot, M, hyper, allow_bp, V
        )
        return build(jnp.argmax(scores))

    return jax.lax.fori_loop(2, N if n is None else n, body, (parent, times))
