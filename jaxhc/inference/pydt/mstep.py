"""The M-step of the PYDT EM (`jaxhc.inference.pydt.em` describes the bound): the divergence
times by L-BFGS on Eq. 17, ``q(1/sigma2)``, ``q(c)``, ``alpha`` and ``beta``; and EM on one tree
to convergence (`run_em`, Gaussian; `run_em_probit`, with the EP E-step)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.tree_utils as otu

from ...models.pydt_math import FREE, harmonic_table, log_prior_from_counts, node_sum
from .ep import run_ep_e_step
from .estep import EMHyper, EStep, e_step
from .messages import marginals
from .state import PYDTPriors

__all__ = ["m_step", "run_em", "run_em_probit", "time_objective"]


def _times_from_s(s, times0, internal, N):
    return times0.at[N:].set(jnp.where(internal[N:], jax.nn.sigmoid(s), times0[N:]))


def time_objective(t, parent, active, b, lam, cbar, J, N, D):
    """Eq. 17 summed over branches: ``sum_[pi] -D/2 log(t_i - t_p) - <lam> b_[pi] / (t_i - t_p)
    + sum_i (<c> J_i - 1) log(1 - t_i)``; ``-inf`` if an edge has non-positive length."""
    m = parent.shape[0]
    internal = active & (jnp.arange(m) >= N)
    has_p = parent >= 0
    tp = jnp.where(has_p, t[jnp.maximum(parent, 0)], 0.0)
    delta = t - tp
    ok_edge = delta > 0
    valid = jnp.all(jnp.where(active, ok_edge, True)) & jnp.all(jnp.where(internal, t < 1.0, True))
    dsafe = jnp.where(active & ok_edge, delta, 1.0)
    edge = -0.5 * D * jnp.log(dsafe) - lam * b / dsafe
    tsafe = jnp.where(internal & (t < 1.0), t, 0.5)
    G = node_sum(jnp.where(active, edge, 0.0)) + node_sum(
        jnp.where(internal, (cbar * J - 1.0) * jnp.log1p(-tsafe), 0.0)
    )
    return jnp.where(valid, G, -jnp.inf)


_CHUNK = 32  # L-BFGS parameter chunk (see `_lbfgs_times`)


def _chunks(v):
    """``v`` zero-padded to a multiple of `_CHUNK` and cut into a tuple of ``[_CHUNK]`` pieces."""
    pad = (-v.shape[0]) % _CHUNK
    v = jnp.concatenate([v, jnp.zeros(pad, v.dtype)]) if pad else v
    return tuple(v[i : i + _CHUNK] for i in range(0, v.shape[0], _CHUNK))


def _lbfgs_times(parent, times, active, b, lam, cbar, J, N, D, max_iter, tol):
    """L-BFGS on Eq. 17 over ``s = logit t`` of the internal slots. The parameters are a tuple of
    `_CHUNK`-long pieces: optax reduces a pytree leaf by leaf in order, so a padded tree (more
    trailing zero pieces, `jaxhc.inference.pydt.padding`) takes the same steps bit for bit."""
    m = parent.shape[0]
    internal = active & (jnp.arange(m) >= N)
    t_int = jnp.clip(times[N:], 1e-12, 1 - 1e-12)
    s0 = _chunks(jnp.where(internal[N:], jnp.log(t_int) - jnp.log1p(-t_int), 0.0))

    def to_times(s):
        return _times_from_s(jnp.concatenate(s)[: m - N], times, internal, N)

    def fun(s):
        return -time_objective(to_times(s), parent, active, b, lam, cbar, J, N, D)

    opt = optax.lbfgs()
    vg = optax.value_and_grad_from_state(fun)

    def step(carry):
        s, state = carry
        value, grad = vg(s, state=state)
        updates, state = opt.update(grad, state, s, value=value, grad=grad, value_fn=fun)
        return optax.apply_updates(s, updates), state

    def cont(carry):
        _, state = carry
        it = otu.tree_get(state, "count")
        err = otu.tree_norm(otu.tree_get(state, "grad"))
        return (it == 0) | ((it < max_iter) & (err >= tol))

    s, _ = jax.lax.while_loop(cont, step, (s0, opt.init(s0)))
    f0, f1 = fun(s0), fun(s)
    better = jnp.isfinite(f1) & (f1 <= f0)  # reject steps that leave the valid ordering
    return jnp.where(better, to_times(s), times)


def _golden(h, lo, hi, iters=40):
    """Golden-section search for the maximum of ``h`` on ``[lo, hi]``."""
    g = (np.sqrt(5.0) - 1.0) / 2.0

    def body(_, s):
        a, b, x1, x2, h1, h2 = s
        left = h1 >= h2  # the maximum lies in [a, x2]
        a_n = jnp.where(left, a, x1)
        b_n = jnp.where(left, x2, b)
        x1_n = jnp.where(left, b_n - g * (b_n - a_n), x2)
        x2_n = jnp.where(left, x1, a_n + g * (b_n - a_n))
        hn = h(jnp.where(left, x1_n, x2_n))
        h1_n = jnp.where(left, hn, h2)
        h2_n = jnp.where(left, h1, hn)
        return a_n, b_n, x1_n, x2_n, h1_n, h2_n

    x1 = hi - g * (hi - lo)
    x2 = lo + g * (hi - lo)
    a, b, x1, x2, h1, h2 = jax.lax.fori_loop(0, iters, body, (lo, hi, x1, x2, h(x1), h(x2)))
    return jnp.where(h1 >= h2, x1, x2), jnp.maximum(h1, h2)


def _J(parent, active, cnt, N, alpha, beta):
    """Eq. 14's ``J_b = H_{m(b)-1} - sum_k H_{n_k - 1}`` per node (0 off branch points)."""
    m = parent.shape[0]
    H = harmonic_table(m, alpha, beta)
    nonroot = active & (parent >= 0)
    Hn = H[jnp.clip(cnt - 1, 0, m)]
    kids = jax.ops.segment_sum(jnp.where(nonroot, Hn, 0.0), jnp.where(nonroot, parent, m), num_segments=m + 1)[:m]
    branch = active & (jnp.arange(m) >= N)
    return jnp.where(branch, Hn - kids, 0.0)


@functools.partial(jax.jit, static_argnames=("learn", "max_lbfgs", "learn_sigma2"))
def m_step(
    parent,
    times,
    X,
    est: EStep,
    hyper: EMHyper,
    priors: PYDTPriors = PYDTPriors(),
    learn: bool = True,
    learn_alpha_beta: bool = True,
    max_lbfgs: int = 100,
    tol: float = 1e-6,
    alpha_max: float = 20.0,
    sigma2_max=jnp.inf,
    learn_sigma2: bool = True,
):
    """The M-step: returns ``(times, hyper)`` that do not lower the bound.

    Times jointly by L-BFGS on Eq. 17 (``s = logit t``, ``q(x)`` from ``est`` fixed, steps that
    break the ordering rejected); then, if ``learn``, ``q(1/sigma2)`` (Eq. 16 with expectations,
    after re-running the marginals at the new times; skipped if ``learn_sigma2`` is False, as
    under probit, where ``X`` is then unused) and ``q(c)`` (Eq. 15); then, if
    ``learn_alpha_beta`` (a traced bool: one compiled program serves PYDT and DDT), golden-section search for ``alpha`` on ``[-2 beta, alpha_max]`` and
    ``beta`` on ``[max(0, -alpha/2), 0.99]`` on Eq. 9 + 11, kept only if not worse.
    """
    N, D = X.shape
    m = parent.shape[0]
    f = times.dtype
    active = parent != FREE
    internal = active & (jnp.arange(m) >= N)
    cnt = est.counts
    lam = 1.0 / hyper.sigma2
    J = _J(parent, active, cnt, N, hyper.alpha, hyper.beta)
    times = _lbfgs_times(parent, times, active, est.b, lam, hyper.c_mean, J, N, D, max_lbfgs, tol)
    if learn and learn_sigma2:
        _, _, _, b, _ = marginals(parent, times, active, X, hyper.sigma2)
        has_p = parent >= 0
        tp = jnp.where(has_p, times[jnp.maximum(parent, 0)], 0.0)
        delta = jnp.where(active, times - tp, 1.0)
        p_shape = priors.precision[0] + 0.5 * D * jnp.sum(active)
        p_rate = priors.precision[1] + node_sum(jnp.where(active, b / delta, 0.0))
        # the bound is unimodal in the rate at fixed shape: clipping 1/<lam> to
        # [0, sigma2_max] is the constrained coordinate maximum (see `pydt_em`)
        p_rate = jnp.minimum(p_rate, p_shape * sigma2_max)
        hyper = hyper._replace(prec_shape=jnp.asarray(p_shape, f), prec_rate=jnp.asarray(p_rate, f))
    if learn:
        tb = jnp.where(internal, times, 0.0)
        c_shape = priors.c[0] + jnp.sum(internal)
        c_rate = priors.c[1] - node_sum(jnp.where(internal, J * jnp.log1p(-tb), 0.0))
        hyper = hyper._replace(c_shape=jnp.asarray(c_shape, f), c_rate=jnp.asarray(c_rate, f))
    c = hyper.c_mean

    def h_ab(a, bt):
        v = log_prior_from_counts(parent, times, active, cnt, N, c, a, bt)
        return jnp.where(jnp.isnan(v), -jnp.inf, v)

    def golden_ab(h):
        cur = h_ab(h.alpha, h.beta)
        a_new, va = _golden(lambda a: h_ab(a, h.beta), -2.0 * h.beta + 1e-9, jnp.asarray(alpha_max, f))
        alpha = jnp.where(va > cur, a_new, h.alpha)
        cur = jnp.maximum(va, cur)
        b_new, vb = _golden(lambda bt: h_ab(alpha, bt), jnp.maximum(0.0, -alpha / 2.0), jnp.asarray(0.99, f))
        return alpha, jnp.where(vb > cur, b_new, h.beta)

    # ``learn_alpha_beta`` is traced (one program serves PYDT and DDT); a `cond` so that fixed
    # alpha, beta skip the two golden-section searches (about half an M-step's time)
    alpha, beta = jax.lax.cond(jnp.asarray(learn_alpha_beta), golden_ab, lambda h: (h.alpha, h.beta), hyper)
    hyper = hyper._replace(alpha=alpha, beta=beta)
    return times, hyper


def run_em(parent, times, hyper, X, priors, learn, learn_ab, max_em, tol_em, max_lbfgs, sigma2_max):
    """EM to convergence (bound change < ``tol_em``) or ``max_em`` iterations."""
    est = e_step(parent, times, X, hyper, priors, learn)

    def cond(s):
        _, _, _, L, Lprev, i = s
        return (i < max_em) & ((i == 0) | (L - Lprev > tol_em))

    def body(s):
        times, hyper, est, L, _, i = s
        times, hyper = m_step(parent, times, X, est, hyper, priors, learn, learn_ab, max_lbfgs, sigma2_max=sigma2_max)
        est = e_step(parent, times, X, hyper, priors, learn)
        return times, hyper, est, est.bound, L, i + 1

    times, hyper, est, L, _, _ = jax.lax.while_loop(cond, body, (times, hyper, est, est.bound, est.bound, jnp.int32(0)))
    return times, hyper, L


def run_em_probit(parent, times, hyper, S, sites, priors, learn, learn_ab, max_em, tol_em, max_lbfgs, conf):
    """EM with an EP E-step (warm-started sites): stops when the EP bound moves by less than
    ``tol_em`` (it need not increase: EP is re-run at the new times) or after ``max_em``
    iterations. Returns ``(times, hyper, sites, L)``."""
    est, sites = run_ep_e_step(parent, times, S, sites, hyper, priors, learn, conf)

    def cond(st):
        _, _, _, _, L, Lprev, i = st
        return (i < max_em) & ((i == 0) | (jnp.abs(L - Lprev) > tol_em))

    def body(st):
        times, hyper, sites, est, L, _, i = st
        times, hyper = m_step(parent, times, S, est, hyper, priors, learn, learn_ab, max_lbfgs, learn_sigma2=False)
        est, sites = run_ep_e_step(parent, times, S, sites, hyper, priors, learn, conf)
        return times, hyper, sites, est, est.bound, L, i + 1

    times, hyper, sites, est, L, _, _ = jax.lax.while_loop(
        cond, body, (times, hyper, sites, est, est.bound, est.bound, jnp.int32(0))
    )
    return times, hyper, sites, L
