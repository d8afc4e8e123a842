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
from numpyro.infer.mcmc import MCMCKernel

from ..._internal.buckets import bucket, pad_rows
from ..._internal.chain import check_chains, map_chains, run_steps, stack_chains, unstack_chains
from ..._internal.validation import check_key
from ...models.pydt_math import (
    FREE,
    PriorTables,
    attach_point,
    check_X,
    harmonic_table,
    log_prior_masked,
    node_sum,
    prior_tables,
    sample_prior_tree,
    subtree_mask,
    time_order,
    up_counts,
)
from ..mh import mh_accept
from .checks import check_count, check_hyperparameters, check_likelihood, check_priors
from .messages import log_marginal_masked, sample_locations
from .padding import leaf_capacity, pad_tree, real_leaves, slot_categorical, unpad_tree
from .state import PYDTInfo, PYDTPriors, PYDTSamples, PYDTState

__all__ = [
    "PYDT",
    "PYDTInfo",
    "PYDTPriors",
    "PYDTSamples",
    "PYDTState",
    "program_sites",
    "pydt_mcmc",
    "pydt_mcmc_init",
    "pydt_mcmc_step",
]


# ------------------------------------------------------------------------------------------
# the detach / re-attach move
# ------------------------------------------------------------------------------------------
def _log_joint_terms(st, X, use_lik, leaf_var=0.0):
    active = st.parent != FREE
    N = X.shape[0]
    is_leaf = jnp.arange(st.parent.shape[0]) < N
    lp = log_prior_masked(st.parent, st.times, active, is_leaf, st.c, st.alpha, st.beta)
    ll = log_marginal_masked(st.parent, st.times, active, X, st.sigma2, leaf_var) if use_lik else jnp.zeros((), X.dtype)
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
    s = slot_categorical(ks, jnp.where(cand, 0.0, -jnp.inf), N, real_leaves(st.parent, N))
    p = st.parent[s]
    t_s = st.times[s]
    insub = subtree_mask(st.parent, st.times, active, s)
    # the old tree with the subtree standing in as a single point
    act_leaf = active & (~insub | (slots == s))
    lp_old_leaf = log_prior_masked(st.parent, st.times, act_leaf, is_leaf | (slots == s), st.c, st.alpha, st.beta, T)
    # detach: remove s's subtree; a parent left with one child disappears
    nonroot = active & (st.parent >= 0)
    nkids_p = jnp.sum(nonroot & (st.parent == p))
    binary = nkids_p == 2
    other = jnp.argmax(nonroot & (st.parent == p) & (slots != s)).astype(jnp.int32)
    par_r = jnp.where(binary, st.parent.at[other].set(st.parent[p]).at[p].set(FREE), st.parent)
    act_r = (par_r != FREE) & ~insub
    root_r = jnp.argmax(act_r & (par_r == -1)).astype(jnp.int32)
    order_r = time_order(par_r, st.times, act_r)
    cnt_r = up_counts(par_r, order_r, act_r, is_leaf.astype(jnp.int32))
    seg, node, t_new, tries = attach_point(ka, par_r, st.times, act_r, cnt_r, root_r, t_s, st.c, st.alpha, st.beta)
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
    lp_new_leaf = log_prior_masked(par_new, times_new, act_new_leaf, is_leaf | (slots == s), st.c, st.alpha, st.beta, T)
    ll_new = log_marginal_masked(par_new, times_new, act_new, X, st.sigma2, leaf_var) if use_lik else jnp.zeros((), f)
    n_cand_new = jnp.sum(act_new & (par_new >= 0))
    log_ratio = (
        (ll_new - st.log_lik)
        + (lp_new - st.log_prior)
        - (lp_new_leaf - lp_old_leaf)
        + jnp.log(n_cand.astype(f))
        - jnp.log(n_cand_new.astype(f))
    )
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
    order = time_order(st.parent, st.times, active)
    cnt = up_counts(st.parent, order, active, is_leaf.astype(jnp.int32))
    H = harmonic_table(m, st.alpha, st.beta)
    nonroot = active & (st.parent >= 0)
    kidsH = jax.ops.segment_sum(
        jnp.where(nonroot, H[jnp.maximum(cnt - 1, 0)], 0.0), jnp.where(nonroot, st.parent, m), num_segments=m + 1
    )[:m]
    branch = active & ~is_leaf
    J = H[jnp.maximum(cnt - 1, 0)] - kidsH
    tb = jnp.where(branch, st.times, 0.0)
    shape = priors.c[0] + jnp.sum(branch)
    rate = priors.c[1] - node_sum(jnp.where(branch, J * jnp.log1p(-tb), 0.0))
    return jax.random.gamma(key, shape, dtype=st.times.dtype) / rate


def _gibbs_precision(key, st, X, priors):
    """Eq. 16: sample the locations backwards, then ``1/sigma2 ~ G(a + |E| D / 2, b + sum
    ||x_b - x_a||^2 / (2 (t_b - t_a)))`` over all edges (origin to root included)."""
    kl, kg = jax.random.split(key)
    N, D = X.shape
    active = st.parent != FREE
    loc = sample_locations(kl, st.parent, st.times, active, X, st.sigma2)
    p = st.parent
    tp = jnp.where(p >= 0, st.times[jnp.maximum(p, 0)], 0.0)
    lp = jnp.where((p >= 0)[:, None], loc[jnp.maximum(p, 0)], 0.0)
    sq = jnp.sum((loc - lp) ** 2, axis=1) / (2.0 * jnp.maximum(st.times - tp, 1e-300))
    n_edges = jnp.sum(active)
    shape = priors.precision[0] + n_edges * D / 2.0
    rate = priors.precision[1] + node_sum(jnp.where(active, sq, 0.0))
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
@functools.partial(jax.jit, static_argnames=("use_lik", "probit"))
def _init_jit(key, X, c, alpha, beta, sigma2, use_lik, probit, n=None):
    """The initial state; ``n`` (traced): the real rows of a padded ``X`` (`padding`)."""
    N = X.shape[0]
    f = X.dtype
    parent, times = sample_prior_tree(key, N, f, c, alpha, beta, n)
    latent = jnp.where(X > 0.5, 1.0, -1.0).astype(f) if probit else None
    st = PYDTState(parent, times, c, alpha, beta, sigma2, jnp.zeros((), f), jnp.zeros((), f), latent)
    lp, ll = _log_joint_terms(st, latent if probit else X, use_lik, 1.0 if probit else 0.0)
    return st._replace(log_prior=lp, log_lik=ll)


def pydt_mcmc_init(
    key, X, *, c=1.0, alpha=0.5, beta=0.2, sigma2=1.0, use_likelihood: bool = True, likelihood: str = "gaussian"
) -> PYDTState:
    """Initial state: a tree drawn from the PYDT prior (points attached one by one); for the
    probit model the latent values start at ``+-1`` by the bits."""
    X = jnp.asarray(X)
    f = X.dtype
    return _init_jit(
        key,
        X,
        jnp.asarray(c, f),
        jnp.asarray(alpha, f),
        jnp.asarray(beta, f),
        jnp.asarray(sigma2, f),
        bool(use_likelihood),
        likelihood == "probit",
    )


def _probit_latent(key, st, Y):
    """Auxiliary variables of the probit model: sample the internal locations given the
    current latent leaf values (backward sampling), then each latent value from
    ``N(x_parent, sigma2 (1 - t_parent) + 1)`` truncated to the side its bit says."""
    k1, k2 = jax.random.split(key)
    N = Y.shape[0]
    active = st.parent != FREE
    loc = sample_locations(k1, st.parent, st.times, active, st.latent, st.sigma2, 1.0)
    par = st.parent[:N]
    mean = loc[par]
    sd = jnp.sqrt(st.sigma2 * (1.0 - st.times[par]) + 1.0)[:, None]
    z0 = -mean / sd
    pos = Y > 0.5
    lower = jnp.where(pos, z0, -jnp.inf)
    upper = jnp.where(pos, jnp.inf, z0)
    z = jax.random.truncated_normal(k2, lower, upper, Y.shape, Y.dtype)
    return jnp.where((par != FREE)[:, None], mean + sd * z, st.latent)  # padding rows (no parent) kept


def _step(key, st, X, priors, num_moves, sample_c, sample_sigma2, sample_alpha, sample_beta, use_lik, move_cap=None):
    """One step. ``num_moves`` moves: a static int, or (with the static ``move_cap``) a traced
    count ``<= move_cap``, so that one program serves every count up to ``move_cap`` (the moves'
    keys are the first ``num_moves`` of ``split(key, move_cap)``, those of ``split(key,
    num_moves)``; the info of the skipped moves is padding)."""
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

    if move_cap is None:
        st, (acc, lr, tries) = jax.lax.scan(mv, st, jax.random.split(km, num_moves))
    else:

        def mv_masked(s, ik):
            i, k = ik
            skip = (jnp.bool_(False), jnp.zeros((), s.times.dtype), jnp.int32(0))
            return jax.lax.cond(i < num_moves, lambda s: mv(s, k), lambda s: (s, skip), s)

        st, (acc, lr, tries) = jax.lax.scan(mv_masked, st, (jnp.arange(move_cap), jax.random.split(km, move_cap)))
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


_STATIC = ("sample_c", "sample_sigma2", "sample_alpha", "sample_beta", "use_lik", "move_cap")


def _step_vmapped(
    keys, st, X, priors, num_moves, sample_c, sample_sigma2, sample_alpha, sample_beta, use_lik, move_cap=None
):
    def one(k, s):
        return _step(k, s, X, priors, num_moves, sample_c, sample_sigma2, sample_alpha, sample_beta, use_lik, move_cap)

    return jax.vmap(one)(keys, st)


# exact shapes, ``num_moves`` static (`pydt_mcmc_step`, ``pydt_mcmc(..., _bucket=False)``)
_step_jit = jax.jit(_step, static_argnames=_STATIC + ("num_moves",))
_step_chains = jax.jit(_step_vmapped, static_argnames=_STATIC + ("num_moves",))
# padded states (`padding`), ``num_moves`` traced up to the static ``move_cap``: `pydt_mcmc`
_step_padded = jax.jit(_step, static_argnames=_STATIC)
_step_chains_padded = jax.jit(_step_vmapped, static_argnames=_STATIC)


def pydt_mcmc_step(
    key,
    state: PYDTState,
    X,
    *,
    priors: PYDTPriors = PYDTPriors(),
    num_moves: int = 1,
    sample_c=True,
    sample_sigma2=True,
    sample_alpha=True,
    sample_beta=True,
    use_likelihood=True,
):
    """One sampler step: ``num_moves`` detach / re-attach moves, then the hyperparameter
    updates that are switched on. Returns ``(state, PYDTInfo)``."""
    pri = PYDTPriors(*(tuple(float(v) for v in p) for p in priors))
    return _step_jit(
        key,
        state,
        jnp.asarray(X),
        pri,
        int(num_moves),
        bool(sample_c),
        bool(sample_sigma2),
        bool(sample_alpha),
        bool(sample_beta),
        bool(use_likelihood),
    )


# ------------------------------------------------------------------------------------------
# the sampler
# ------------------------------------------------------------------------------------------
def pydt_mcmc(
    key,
    X,
    *,
    num_samples: int = 1000,
    num_warmup: int = 0,
    c=1.0,
    alpha=0.5,
    beta=0.2,
    sigma2=1.0,
    likelihood: str = "gaussian",
    priors: PYDTPriors = PYDTPriors(),
    num_moves: Optional[int] = None,
    thin: int = 1,
    num_chains: int = 1,
    sample_c=True,
    sample_sigma2=True,
    sample_alpha=True,
    sample_beta=True,
    init_state: Optional[PYDTState] = None,
    chain_method: str = "vectorized",
    progress_bar: bool = True,
    _bucket: bool = True,
) -> PYDTSamples:
    """PYDT posterior samples by the section-5.1 sampler.

    Args:
      key: a ``jax.random`` key (the same key gives the same samples).
      X: ``[N, D]`` data: real values (``likelihood="gaussian"``, the leaves at time 1) or
        bits (``"probit"``: ``P(x = 1) = Phi(leaf location)``, by auxiliary variables).
      num_samples, num_warmup, thin: kept steps, burnt steps, thinning (keyword-only, as every
        run-length argument).
      c, alpha, beta, sigma2: initial hyperparameters (fixed when not sampled); ``alpha =
        beta = 0`` with ``sample_alpha = sample_beta = False`` is the Dirichlet diffusion tree.
      likelihood: ``"gaussian"`` or ``"probit"`` (``sigma2`` stays fixed under probit).
      priors: `PYDTPriors`.
      num_moves: detach / re-attach moves per step (default ``N``).
      num_chains: independent chains (outputs gain a leading axis).
      chain_method: how several chains run: ``"vectorized"`` (one program ``vmap``-ed over the
        chains: the choice for a GPU), ``"sequential"`` (one chain after the other within each
        step) or ``"parallel"`` (the chains' steps in jaxhc's shared thread pool, one thread per core:
        the choice on a multi-core CPU, where XLA's batched scatters make ``vmap`` slower
        than separate chains). All three give the same samples for the same key (chain ``i``
        uses the ``i``-th split of each step's key).
      sample_c, sample_sigma2, sample_alpha, sample_beta: which hyperparameters to update.
      init_state: continue from a state (``state`` of an earlier result).
      progress_bar: tqdm bar over steps (``"pydt warmup"`` / ``"pydt sample"``; `jaxhc._internal.chain`).

    Returns:
      `PYDTSamples` (``[S, ...]`` arrays, or ``[num_chains, S, ...]``).

    Shape buckets: the compiled step runs on ``bucket(N)`` leaf slots (`jaxhc._internal.buckets`;
    zero data rows, padding leaves that never join the tree, internal slots shifted; see
    `jaxhc.inference.pydt.padding`) and ``bucket(num_moves)`` move slots (the extra ones
    skipped), so every ``N`` of a bucket reuses one program; the outputs are the exact-size
    arrays, and the samples those of the unpadded sampler (same key, same draws).
    """
    X = check_X(X)
    check_likelihood(X, likelihood)
    c, alpha, beta, sigma2 = check_hyperparameters(c, alpha, beta, sigma2)
    if sample_alpha and alpha <= 0:
        raise ValueError("sample_alpha=True needs alpha > 0 (it is sampled on the log scale)")
    num_chains = check_chains(num_chains, chain_method)
    N = X.shape[0]
    num_samples = check_count(num_samples, "num_samples", 1)
    num_warmup = check_count(num_warmup, "num_warmup", 0)
    thin = check_count(thin, "thin", 1)
    num_moves = N if num_moves is None else check_count(num_moves, "num_moves", 1)
    pri = check_priors(priors)
    check_key(key)
    Nb = leaf_capacity(N, _bucket)
    k0, k1 = jax.random.split(key)
    Xj = jnp.asarray(pad_rows(X, Nb))
    f = Xj.dtype
    hyp = tuple(jnp.asarray(v, f) for v in (c, alpha, beta, sigma2))
    probit = likelihood == "probit"
    chains = num_chains > 1
    split = chains and chain_method != "vectorized"
    n_arg = N if _bucket else None  # traced: the real rows of the padded X
    if init_state is not None:
        st = _pad_state(init_state, N, Nb)
    elif chains:
        st = jax.vmap(lambda k: _init_jit(k, Xj, *hyp, True, probit, n_arg))(jax.random.split(k0, num_chains))
    else:
        st = _init_jit(k0, Xj, *hyp, True, probit, n_arg)
    sample = (bool(sample_c), bool(sample_sigma2), bool(sample_alpha), bool(sample_beta), True)
    if _bucket:  # num_moves traced (one program for every count up to its bucket)
        flags = (np.int32(num_moves),) + sample + (bucket(num_moves),)
        one, vec = _step_padded, _step_chains_padded
    else:
        flags = (num_moves,) + sample
        one, vec = _step_jit, _step_chains

    def step(t, state):  # iteration t: key fold_in(k1, t); chain i gets its i-th split
        kt = jax.random.fold_in(k1, t)
        if split:
            outs = map_chains(
                lambda k, s: one(k, s, Xj, pri, *flags), jax.random.split(kt, num_chains), state, chain_method
            )
            return [o[0] for o in outs], [o[1] for o in outs]
        if chains:
            return vec(jax.random.split(kt, num_chains), state, Xj, pri, *flags)
        return one(kt, state, Xj, pri, *flags)

    def collect(t, state, info):  # per-chain states are stacked only where they are read
        s = stack_chains(state) if split else state
        acc = np.stack([np.asarray(i.accepted) for i in info]) if split else np.asarray(info.accepted)
        return jax.device_get((s.parent, s.times, s.c, s.alpha, s.beta, s.sigma2, s.log_lik, s.log_prior)), acc

    st, rows = run_steps(
        step,
        unstack_chains(st, num_chains) if split else st,
        num_warmup=num_warmup,
        num_samples=num_samples,
        thin=thin,
        collect=collect,
        progress_bar=progress_bar,
        name="pydt",
    )
    if split:
        st = stack_chains(st)
    accs = [r[1][..., :num_moves] for r in rows]  # the moves a step made (skipped slots dropped)
    rows = [r[0] for r in rows]
    ax = 1 if chains else 0
    cols = [np.stack([r[i] for r in rows], axis=ax) for i in range(8)]
    cols[0], cols[1] = unpad_tree(cols[0], cols[1], N, Nb)
    nan = [nm for nm, v in (("c", cols[2]), ("sigma2", cols[5]), ("log_lik", cols[6])) if np.any(np.isnan(v))]
    if nan:
        raise ValueError(
            f"pydt_mcmc: the sampled {', '.join(nan)} became NaN; X's entries reach {float(np.max(np.abs(X))):.3g}, "
            f"and data far from unit scale overflow the sampler's float64 arithmetic (it squares sigma2 and "
            f"its inverse): standardise X's columns"
        )
    acc_rate = float(np.mean(np.concatenate([a.reshape(-1) for a in accs])))
    return PYDTSamples(*cols, acc_rate, _unpad_state(st, N, Nb))


def _pad_state(st: PYDTState, n: int, nb: int) -> PYDTState:
    """An exact-size state (``[..., 2n - 1]``; chains lead) on the padded slots (`padding`)."""
    par, tim = pad_tree(st.parent, st.times, n, nb)
    lat = None if st.latent is None else jnp.asarray(pad_rows(np.asarray(st.latent), nb, axis=-2))
    return st._replace(parent=jnp.asarray(par, jnp.int32), times=jnp.asarray(tim), latent=lat)


def _unpad_state(st: PYDTState, n: int, nb: int) -> PYDTState:
    """The exact-size state of a padded one (host work; `padding`)."""
    if n == nb:
        return st
    par, tim = unpad_tree(jax.device_get(st.parent), jax.device_get(st.times), n, nb)
    lat = None if st.latent is None else jnp.asarray(np.asarray(st.latent)[..., :n, :])
    return st._replace(parent=jnp.asarray(par), times=jnp.asarray(tim), latent=lat)


class _KernelState(NamedTuple):
    sample: Any
    state: Any
    rng_key: jax.Array


class PYDT(MCMCKernel):
    """The section-5.1 sampler as a NumPyro kernel: ``MCMC(PYDT(X), num_warmup=...,
    num_samples=...).run(key)`` collects ``{"parent": [2N-1], "times": [2N-1], "c",
    "alpha", "beta", "sigma2"}`` per step (turn one into a tree with `state_to_tree`; the
    hyperparameters are constant where their ``sample_*`` flag is off). With the default
    `PYDTPriors` the draws are from the posterior of the `jaxhc.models.pydt.pydt` program under
    the priors ``alpha ~ Gamma(2, 0.5)``, ``beta ~ Beta(1, 1)``, ``c ~ Gamma(1, 1)``,
    ``1 / sigma2 ~ Gamma(1, 1)``, locations integrated out: `program_sites` turns the samples
    into that program's ``tree`` site for ``numpyro.infer.Predictive``.

    Args:
      X, c, alpha, beta, sigma2, likelihood, priors, num_moves: as in `pydt_mcmc`.
      sample_c, sample_sigma2, sample_alpha, sample_beta: as in `pydt_mcmc`.
    """

    sample_field = "sample"

    def __init__(
        self,
        X,
        *,
        c=1.0,
        alpha=0.5,
        beta=0.2,
        sigma2=1.0,
        likelihood="gaussian",
        priors: PYDTPriors = PYDTPriors(),
        num_moves=None,
        sample_c=True,
        sample_sigma2=True,
        sample_alpha=True,
        sample_beta=True,
    ):
        X = check_X(X)
        check_likelihood(X, likelihood)
        self.hyp = check_hyperparameters(c, alpha, beta, sigma2)
        self.X = jnp.asarray(X)
        self.probit = likelihood == "probit"
        self.priors = PYDTPriors(*(tuple(float(v) for v in p) for p in priors))
        N = X.shape[0]
        self.flags = (
            N if num_moves is None else int(num_moves),
            bool(sample_c),
            bool(sample_sigma2),
            bool(sample_alpha),
            bool(sample_beta),
            True,
        )

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        k_init, k = jax.random.split(rng_key)
        f = self.X.dtype
        st = (
            init_params
            if init_params is not None
            else _init_jit(k_init, self.X, *(jnp.asarray(v, f) for v in self.hyp), True, self.probit)
        )
        return _KernelState(_sample_dict(st), st, k)

    def sample(self, state, model_args, model_kwargs):
        k, k_next = jax.random.split(state.rng_key)
        st, _ = _step(k, state.state, self.X, self.priors, *self.flags)
        return _KernelState(_sample_dict(st), st, k_next)


def _sample_dict(st) -> dict:
    """What the `PYDT` kernel reports per step: the tree and the hyperparameters."""
    return {"parent": st.parent, "times": st.times, "c": st.c, "alpha": st.alpha, "beta": st.beta, "sigma2": st.sigma2}


def program_sites(samples) -> dict:
    """`PYDT` kernel samples as the sites of the `jaxhc.models.pydt.pydt` program.

    Args:
      samples: ``MCMC(PYDT(X), ...).get_samples()``, or any mapping with ``"parent"`` and
        ``"times"`` of shape ``[S, 2N - 1]``.

    Returns:
      ``{"tree": [S, 2, 2N - 1]}`` (the `PYDTTree` value: parent row as floats, times row),
      ready for ``Predictive(pydt, posterior_samples=...)``; the hyperparameters stay under
      their own keys in ``samples`` for a user model that samples them.
    """
    for name in ("parent", "times"):
        if name not in samples:
            raise ValueError(f"samples must hold {name!r} (from MCMC(PYDT(X), ...).get_samples())")
    parent, times = jnp.asarray(samples["parent"]), jnp.asarray(samples["times"])
    if parent.ndim != 2 or parent.shape != times.shape or parent.shape[1] % 2 != 1:
        raise ValueError(
            f"samples['parent'] and samples['times'] must both be [S, 2N - 1], got {parent.shape} and {times.shape}"
        )
    return {"tree": jnp.stack([parent.astype(times.dtype), times], axis=1)}
