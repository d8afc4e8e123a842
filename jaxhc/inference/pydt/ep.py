"""Probit observations (section 5.4): expectation propagation on the probit factors of the
leaves (`ep_e_step`; `jaxhc.inference.pydt.em` describes the EP bound)."""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr

from ...models.pydt_math import FREE, ordered_sum, time_order
from .estep import EMHyper, e_step_diag
from .messages import marginals_diag
from .state import PYDTPriors

__all__ = ["EPConfig", "EPSites", "ep_e_step", "prior_sites", "run_ep_e_step"]


class EPSites(NamedTuple):
    """Gaussian EP sites ``exp(-tau x^2 / 2 + nu x)`` standing in for ``Phi(s x_leaf)`` (``s =
    2 y - 1``), one per (leaf, dim), in natural parameters.

    Attributes:
      tau: ``[N, D]`` site precisions (in ``(0, 1]`` for the probit factor).
      nu: ``[N, D]`` precision times site mean.
    """

    tau: jax.Array
    nu: jax.Array

    @property
    def mean(self):
        """Site means ``nu / tau``: the pseudo-observations of the leaves."""
        return self.nu / self.tau

    @property
    def var(self):
        """Site variances ``1 / tau``: the pseudo-observation noise."""
        return 1.0 / self.tau


class EPConfig(NamedTuple):
    """EP settings (static): at most ``max_sweeps`` parallel sweeps, stopping when no site
    parameter moves by more than ``tol``; new sites are ``damping * new + (1 - damping) * old``
    (natural parameters)."""

    max_sweeps: int = 100
    tol: float = 1e-7
    damping: float = 0.5


_TAU_MIN = 1e-10  # site precision floor (defensive: the probit site precision is > 0)
_LOG_SQRT_2PI = 0.5 * float(np.log(2 * np.pi))


def _probit_site(S, mu_c, v_c):
    """Moment matching of ``N(x; mu_c, v_c) Phi(S x)``: returns ``(log Zhat, tau, nu)`` of the
    site that reproduces the tilted mean and variance (``z = S mu_c / sqrt(1 + v_c)``, ``r =
    N(z) / Phi(z)``; site precision ``kappa / (1 - v_c kappa)`` with ``kappa = r (z + r) /
    (1 + v_c)``; ``nu = S r / sqrt(1 + v_c) + mean_hat tau``)."""
    sq = jnp.sqrt(1.0 + v_c)
    z = S * mu_c / sq
    logZ = log_ndtr(z)
    r = jnp.exp(-0.5 * z * z - _LOG_SQRT_2PI - logZ)
    kappa = r * (z + r) / (1.0 + v_c)
    tau = kappa / (1.0 - v_c * kappa)
    mu_hat = mu_c + S * v_c * r / sq
    nu = S * r / sq + mu_hat * tau
    return logZ, tau, nu


@jax.jit
def prior_sites(S, sigma2):
    """Sites matched against the prior leaf marginal ``N(0, sigma2)`` (an EP start)."""
    _, tau, nu = _probit_site(S, jnp.zeros_like(S), jnp.full_like(S, sigma2))
    return EPSites(jnp.maximum(tau, _TAU_MIN), nu)


def _cavity(mean, var, sites):
    """Cavity ``(mu_c, v_c)`` of each leaf from its marginal ``N(mean, var)`` and its site."""
    tau_c = jnp.maximum(1.0 / var - sites.tau, _TAU_MIN)
    nu_c = mean / var - sites.nu
    return nu_c / tau_c, 1.0 / tau_c


def _ep(parent, times, active, S, sites, sigma2, order, conf: EPConfig):
    """Parallel damped EP sweeps on a fixed tree from ``sites`` (warm start). Returns the
    sites and the number of sweeps. Rows of leaves outside the tree (the padding of
    `jaxhc.inference.pydt.padding`) keep their sites and do not count in the convergence test."""
    N = S.shape[0]
    damp = conf.damping
    real = active[:N, None]

    def cond(st):
        _, delta, i = st
        return (i < conf.max_sweeps) & (delta > conf.tol)

    def body(st):
        sites, _, i = st
        mean, var, _, _, _ = marginals_diag(parent, times, active, sites.mean, sites.var, sigma2, order)
        mu_c, v_c = _cavity(mean[:N], var[:N], sites)
        _, tau, nu = _probit_site(S, mu_c, v_c)
        tau = jnp.where(real, (1.0 - damp) * sites.tau + damp * jnp.maximum(tau, _TAU_MIN), sites.tau)
        nu = jnp.where(real, (1.0 - damp) * sites.nu + damp * nu, sites.nu)
        delta = jnp.maximum(jnp.max(jnp.abs(tau - sites.tau)), jnp.max(jnp.abs(nu - sites.nu)))
        return EPSites(tau, nu), delta, i + 1

    f = S.dtype
    sites, _, n = jax.lax.while_loop(cond, body, (sites, jnp.asarray(jnp.inf, f), jnp.int32(0)))
    return sites, n


def run_ep_e_step(parent, times, S, sites, hyper, priors, learn, conf: EPConfig):
    """EP to convergence (warm-started from ``sites``), then the `EStep` of the surrogate
    Gaussian model with ``log_lik = log Z_EP`` and the bound built on it."""
    N, D = S.shape
    active = parent != FREE
    order = time_order(parent, times, active)
    sites, _ = _ep(parent, times, active, S, sites, hyper.sigma2, order, conf)
    M, V = sites.mean, sites.var
    est = e_step_diag(parent, times, M, V, hyper, priors, learn, False, order)
    # log Z_EP = log N(M; 0, K + diag V) + sum_i [log Zhat_i - log N(M_i; mu_c, v_c + V_i)]
    mu_c, v_c = _cavity(est.mean[:N], est.var[:N], sites)
    logZhat, _, _ = _probit_site(S, mu_c, v_c)
    s2 = v_c + V
    terms = logZhat + 0.5 * (2.0 * _LOG_SQRT_2PI + jnp.log(s2) + (M - mu_c) ** 2 / s2)
    # leaves outside the tree (padding) add nothing; `ordered_sum`: the same value at any padding
    corr = ordered_sum(ordered_sum(jnp.where(active[:N, None], terms, 0.0)))
    return est._replace(log_lik=est.log_lik + corr, bound=est.bound + corr), sites


@functools.partial(jax.jit, static_argnames=("learn", "conf"))
def ep_e_step(
    parent,
    times,
    Y,
    hyper: EMHyper,
    sites: Optional[EPSites] = None,
    priors: PYDTPriors = PYDTPriors(),
    learn: bool = True,
    conf: EPConfig = EPConfig(),
):
    """The probit E-step: EP on the probit factors, then the Gaussian marginals of the
    surrogate model and the EP bound.

    Each ``Phi(s_nd x_nd)`` (``s = 2 y - 1``, ``P(y = 1 | x) = Phi(x)`` per dimension of a leaf
    location) is replaced by a Gaussian site; parallel damped sweeps (`EPConfig`) match the
    moments of the tilted leaf marginals (Minka, 2001). The likelihood term of the bound is the
    EP evidence ``log Z_EP = log N(M; 0, K + diag V) + sum_nd [log Zhat_nd - log N(M_nd;
    mu_c, v_c + V_nd)]`` (``M, V`` site means / variances, ``mu_c, v_c`` cavities,
    ``K = sigma2 t_lca``), an approximation of ``log p(Y | T, t)``, not a bound.

    Args:
      parent, times: the tree (fixed-capacity, as `e_step`).
      Y: ``[N, D]`` bits (0 / 1).
      hyper: `EMHyper` (``sigma2`` fixed).
      sites: `EPSites` to start from (default: matched against the prior leaf marginals).
      priors, learn: as `e_step` (``learn``: ``q(c)`` Gamma; ``1/sigma2`` is never learned).
      conf: `EPConfig`.

    Returns:
      ``(EStep, EPSites)``: per-dim ``var``, ``cross`` ``[m, D]``, leaves with their
      surrogate posterior marginals, ``log_lik = log Z_EP``.
    """
    S = 2.0 * Y - 1.0
    if sites is None:
        sites = prior_sites(S, hyper.sigma2)
    return run_ep_e_step(parent, times, S, sites, hyper, priors, learn, conf)
