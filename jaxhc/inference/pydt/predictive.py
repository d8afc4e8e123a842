"""The PYDT predictive density (section 5.3) of an EM result, MCMC samples or a tree:
`pydt_predictive_logpdf`."""

from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr

from ..._internal.validation import real_array
from ...models.pydt_math import FREE, check_X, log_rate_factor, time_order
from .checks import check_hyperparameters, check_likelihood
from .ep import EPSites, ep_e_step
from .estep import EMHyper, leaf_counts
from .messages import marginals, marginals_diag
from .state import PYDTEMResult, PYDTSamples

__all__ = ["pydt_predictive_logpdf"]


@functools.partial(jax.jit, static_argnames=("num_time_samples",))
def _predictive_one(parent, times, X, Xnew, c, alpha, beta, sigma2, num_time_samples, V=None):
    """Gaussian: ``log p(x_new | X)``. Probit (``V`` given: ``X, V`` the EP site means /
    variances, ``Xnew`` bits): ``log P(y_new | Y)``, each mixture component's Gaussian of the new
    leaf location pushed through ``Phi(m / sqrt(1 + v))`` per dimension."""
    m = parent.shape[0]
    N, D = X.shape
    f = X.dtype
    slots = jnp.arange(m)
    active = parent != FREE
    if V is not None:
        mean, var, cross, _, _ = marginals_diag(parent, times, active, X, V, sigma2)
    else:
        mean, var, cross, _, _ = marginals(parent, times, active, X, sigma2)
    cnt = leaf_counts(parent, times, active, N)
    cntf = jnp.maximum(cnt, 1).astype(f)
    nonroot = active & (parent >= 0)
    nkids = jax.ops.segment_sum(nonroot.astype(jnp.int32), jnp.where(nonroot, parent, m), num_segments=m + 1)[:m]
    has_p = parent >= 0
    pp = jnp.maximum(parent, 0)
    tp = jnp.where(has_p, times[pp], 0.0)
    # per edge: hazard multiplier r(m) = Gamma(m - beta) / Gamma(m + 1 + alpha); survival to t_k
    r = jnp.exp(log_rate_factor(cntf, alpha, beta))
    log_surv = c * r * (jnp.log1p(-jnp.minimum(times, 1.0)) - jnp.log1p(-tp))
    surv = jnp.where(slots < N, 0.0, jnp.exp(log_surv))
    # probability of entering the edge into k
    pcnt = jnp.where(has_p, cntf[pp], 1.0)
    step = jnp.where(has_p, (cntf - beta) / (pcnt + alpha), 1.0)
    order = time_order(parent, times, active)

    def body(i, reach):
        k = order[m - 1 - i]
        p = parent[k]
        val = jnp.where(p >= 0, reach[jnp.maximum(p, 0)] * surv[jnp.maximum(p, 0)] * step[k], 1.0)
        return reach.at[jnp.where(active[k], k, m)].set(val, mode="drop")

    reach = jax.lax.fori_loop(0, m, body, jnp.zeros(m, f))
    # edge components at stratified quantiles of the divergence time
    u = (jnp.arange(num_time_samples, dtype=f) + 0.5) / num_time_samples
    one_m_t = (1.0 - tp)[:, None] * (1.0 - u[None, :] * (1.0 - surv[:, None])) ** (1.0 / (c * r[:, None]))
    t = 1.0 - one_m_t  # [m, S]
    dk = jnp.where(times - tp > 0, times - tp, 1.0)[:, None]
    w2 = (t - tp[:, None]) / dk
    w1 = 1.0 - w2
    mp = jnp.where(has_p[:, None], mean[pp], 0.0)
    M = w1[..., None] * mp[:, None, :] + w2[..., None] * mean[:, None, :]  # [m, S, D]
    if V is not None:  # per-dim variances [m, S, D]
        Pd = jnp.where(has_p[:, None], var[pp], 0.0)[:, None, :]
        Vc = (
            w1[..., None] ** 2 * Pd
            + w2[..., None] ** 2 * var[:, None, :]
            + 2 * w1[..., None] * w2[..., None] * cross[:, None, :]
            + (sigma2 * (t - tp[:, None]) * (times[:, None] - t) / dk + sigma2 * one_m_t)[..., None]
        )
        Vb = var + (sigma2 * (1.0 - times))[:, None]
    else:
        Pp = jnp.where(has_p, var[pp], 0.0)[:, None]
        Vc = (
            w1**2 * Pp
            + w2**2 * var[:, None]
            + 2 * w1 * w2 * cross[:, None]
            + sigma2 * (t - tp[:, None]) * (times[:, None] - t) / dk
        ) + sigma2 * one_m_t
        Vb = var + sigma2 * (1.0 - times)
    logw_e = jnp.log(reach * (1.0 - surv) / num_time_samples)[:, None] * jnp.ones_like(t)
    logw_e = jnp.where(active[:, None], logw_e, -jnp.inf)
    # new branch at a branch point
    branch = active & (slots >= N)
    wb = reach * surv * (alpha + beta * nkids) / (cntf + alpha)
    logw_b = jnp.where(branch & (wb > 0), jnp.log(jnp.where(wb > 0, wb, 1.0)), -jnp.inf)
    allw = jnp.concatenate([logw_e.reshape(-1), logw_b])
    allM = jnp.concatenate([M.reshape(-1, D), mean])
    if V is not None:
        ok = jnp.isfinite(allw)[:, None]
        allV = jnp.where(ok, jnp.concatenate([Vc.reshape(-1, D), Vb]), 1.0)
        allM = jnp.where(ok, allM, 0.0)
        sd = jnp.sqrt(1.0 + allV)

        def logp_bits(y):
            lg = jnp.sum(log_ndtr((2.0 * y - 1.0) * allM / sd), axis=1)
            return jax.scipy.special.logsumexp(allw + lg)

        return jax.vmap(logp_bits)(Xnew)
    allV = jnp.concatenate([Vc.reshape(-1), Vb])
    allV = jnp.where(jnp.isfinite(allw), allV, 1.0)

    def logpdf(x):
        lg = -0.5 * (D * jnp.log(2 * jnp.pi * allV) + jnp.sum((x - allM) ** 2, axis=1) / allV)
        return jax.scipy.special.logsumexp(allw + lg)

    return jax.vmap(logpdf)(Xnew)


def pydt_predictive_logpdf(
    result_or_tree,
    Xnew,
    X=None,
    *,
    c=None,
    alpha=None,
    beta=None,
    sigma2=None,
    num_time_samples: int = 3,
    use_k_best: bool = True,
    max_trees: int = 20,
    likelihood: Optional[str] = None,
):
    """``log p(x_new | X)`` per row of ``Xnew`` (section 5.3): a Gaussian mixture over where a
    new point diverges from the tree; under probit ``log P(y_new | Y)`` of a bit vector.

    For each edge ``[pk]`` the generative process gives the probability of reaching it and of
    diverging on it (``1 - ((1 - t_k)/(1 - t_p))^(c r_m)``, ``r_m = Gamma(m - beta) /
    Gamma(m + 1 + alpha)``); ``num_time_samples`` divergence times at stratified quantiles of the
    truncated divergence-time law; the location there from the posterior marginals (a
    Brownian bridge between the E-step marginals of ``p`` and ``k``) and Brownian motion to
    ``t = 1``. A new branch at a branch point has weight ``(alpha + beta K)/(m + alpha)``.
    Probit: the posterior marginals are those of the EP surrogate (the stored sites of a
    probit `PYDTEMResult`, else EP run on each tree), and each component's Gaussian
    ``N(mu, v)`` of the new leaf location gives ``P(y_d = 1) = Phi(mu_d / sqrt(1 + v_d))``,
    independently over dimensions within the component.

    Args:
      result_or_tree: a `PYDTEMResult` (averages over its K-best trees with equal weights,
        or uses only the best tree if ``use_k_best=False``), `PYDTSamples` from `pydt_mcmc`
        (averages over up to ``max_trees`` evenly spaced kept samples, each with its own
        hyperparameters; pass ``X``), or ``(parent, times)`` fixed-capacity arrays (then ``X``,
        ``c``, ``alpha``, ``beta``, ``sigma2`` are needed).
      Xnew: float ``[M, D]`` (bits under probit).
      likelihood: ``"gaussian"`` or ``"probit"``; default: the result's (a `PYDTEMResult`),
        else ``"gaussian"``.

    Returns:
      float ``[M]``.
    """
    if likelihood is None:
        likelihood = result_or_tree.likelihood if isinstance(result_or_tree, PYDTEMResult) else "gaussian"
    if likelihood not in ("gaussian", "probit"):
        raise ValueError(f"likelihood must be 'gaussian' or 'probit', got {likelihood!r}")
    probit = likelihood == "probit"
    if isinstance(result_or_tree, PYDTEMResult) and result_or_tree.likelihood != likelihood:
        raise ValueError(f"the result was fit with likelihood={result_or_tree.likelihood!r}, not {likelihood!r}")
    Xnew = check_X(np.atleast_2d(real_array(Xnew, "Xnew", "[M, D]")), "Xnew", min_rows=1)  # one point: [D]
    if probit:
        check_likelihood(Xnew, "probit")
    sites_list = None
    if isinstance(result_or_tree, PYDTSamples):  # MCMC: average over (up to max_trees) kept samples
        if X is None:
            raise ValueError("with PYDTSamples pass the data X the sampler ran on")
        Xd = jnp.asarray(check_X(X))
        smp = result_or_tree
        par = np.asarray(smp.parent).reshape(-1, smp.parent.shape[-1])
        tim = np.asarray(smp.times).reshape(-1, smp.times.shape[-1])
        hyp = [np.asarray(getattr(smp, k)).reshape(-1) for k in ("c", "alpha", "beta", "sigma2")]
        pick = np.unique(np.linspace(0, par.shape[0] - 1, min(int(max_trees), par.shape[0])).astype(int))
        trees = [(par[i], tim[i], dict(c=hyp[0][i], alpha=hyp[1][i], beta=hyp[2][i], sigma2=hyp[3][i])) for i in pick]
    elif isinstance(result_or_tree, PYDTEMResult):
        res = result_or_tree
        Xd = jnp.asarray(res.X)
        trees = [(e[1], e[2], h) for e, h in zip(res.k_best, res.k_best_hyper)]
        if probit:
            sites_list = list(res.k_best_sites)
        if not use_k_best:
            trees = trees[:1]
    else:
        if X is None or c is None or alpha is None or beta is None or sigma2 is None:
            raise ValueError("with (parent, times) pass X, c, alpha, beta and sigma2")
        Xd = jnp.asarray(check_X(X))
        check_hyperparameters(c, alpha, beta, sigma2)
        parent, times = result_or_tree
        trees = [(parent, times, dict(c=c, alpha=alpha, beta=beta, sigma2=sigma2))]
    if probit:
        check_likelihood(np.asarray(Xd), "probit")
    if Xnew.shape[1] != Xd.shape[1]:
        raise ValueError(f"Xnew has {Xnew.shape[1]} columns, the data {Xd.shape[1]}")
    f = Xd.dtype
    out = []
    for i, (parent, times, h) in enumerate(trees):
        parent, times = jnp.asarray(parent, jnp.int32), jnp.asarray(times, f)
        s2 = jnp.asarray(h["sigma2"], f)
        if probit:
            if sites_list is not None:
                sites = EPSites(*(jnp.asarray(a, f) for a in sites_list[i]))
            else:
                hyp0 = EMHyper(*(jnp.asarray(v, f) for v in (1.0, 1.0, 1.0 / s2, 1.0, 0.5, 0.2)))
                _, sites = ep_e_step(parent, times, Xd, hyp0)  # only sigma2 matters for the sites
            data, V = sites.mean, sites.var
        else:
            data, V = Xd, None
        out.append(
            _predictive_one(
                parent,
                times,
                data,
                jnp.asarray(Xnew, f),
                jnp.asarray(h["c"], f),
                jnp.asarray(h["alpha"], f),
                jnp.asarray(h["beta"], f),
                s2,
                int(num_time_samples),
                V,
            )
        )
    out = jnp.stack(out)
    return np.asarray(jax.scipy.special.logsumexp(out, axis=0) - jnp.log(out.shape[0]))
