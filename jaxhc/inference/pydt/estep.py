"""The E-step of the PYDT EM (Gaussian observations; `jaxhc.inference.pydt.em` describes the
bound): the hyperparameter state `EMHyper`, the `EStep`, the bound's terms, `e_step` and its
variant for leaf observations with per-(leaf, dim) noise (`e_step_diag`, used by EP)."""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import digamma, gammaln

from ...models.pydt_math import FREE, log_prior_from_counts, time_order, up_counts
from .messages import marginals, marginals_diag
from .state import PYDTPriors

__all__ = ["EMHyper", "EStep", "bound_extra", "bound_terms", "e_step", "e_step_diag", "leaf_counts", "pydt_em_bound"]


class EMHyper(NamedTuple):
    """Hyperparameter state of the EM.

    Attributes:
      c_shape, c_rate: ``q(c) = G(shape, rate)`` (a point mass at ``c_shape`` with
        ``c_rate = 1`` when hyperparameters are not learned).
      prec_shape, prec_rate: ``q(1/sigma2) = G(shape, rate)`` (a point mass at
        ``prec_shape`` with ``prec_rate = 1`` when not learned).
      alpha, beta: Pitman-Yor parameters (point estimates).
    """

    c_shape: jax.Array
    c_rate: jax.Array
    prec_shape: jax.Array
    prec_rate: jax.Array
    alpha: jax.Array
    beta: jax.Array

    @property
    def c_mean(self):
        return self.c_shape / self.c_rate

    @property
    def sigma2(self):
        """``1 / <1/sigma2>``, the noise variance the E-step uses."""
        return self.prec_rate / self.prec_shape


class EStep(NamedTuple):
    """Output of `e_step`.

    Attributes:
      mean: ``[m, D]`` posterior means of node locations (leaves: ``X``; free slots 0).
      var: ``[m]`` posterior variance per dimension (isotropic; leaves 0). Probit
        (`ep_e_step`): ``[m, D]``, leaves included.
      cross: ``[m]`` posterior covariance per dimension between node ``k`` and its parent
        (0 at the root, whose parent is the fixed origin); probit ``[m, D]``.
      b: ``[m]`` ``b_[pk] = 1/2 sum_d E[(x_dk - x_dp)^2]`` for the edge into ``k``.
      counts: int ``[m]`` leaves below each node.
      log_lik: ``log p(X | T, t, sigma2)`` (probit: ``log Z_EP``).
      bound: the EM bound ``L`` (module docstring) at these times and hyperparameters.
    """

    mean: jax.Array
    var: jax.Array
    cross: jax.Array
    b: jax.Array
    counts: jax.Array
    log_lik: jax.Array
    bound: jax.Array


def leaf_counts(parent, times, active, N):
    m = parent.shape[0]
    is_leaf = jnp.arange(m) < N
    order = time_order(parent, times, active)
    return up_counts(parent, order, active, is_leaf.astype(jnp.int32))


def _kl_gamma(a, b, a0, b0):
    """``KL(G(a, b) || G(a0, b0))`` (shape, rate)."""
    return (a - a0) * digamma(a) - gammaln(a) + gammaln(a0) + a0 * (jnp.log(b) - jnp.log(b0)) + a * (b0 - b) / b


def bound_extra(n_edges, n_int, D, hyper, priors, learn, learn_sigma2=True):
    """The terms of ``L`` beyond ``log p(X | T, t) + log P(T, t)`` (module docstring): with Gamma
    ``q(1/sigma2)``, ``q(c)`` the ``<log>`` - ``log <>`` corrections (``n_edges`` edges, origin ->
    root included; ``n_int`` branch points) and the KL terms; 0 with point masses."""
    c = hyper.c_mean
    out = jnp.zeros((), hyper.c_shape.dtype)
    if learn:
        elog_c = digamma(hyper.c_shape) - jnp.log(hyper.c_rate)
        out = out + n_int * (elog_c - jnp.log(c)) - _kl_gamma(hyper.c_shape, hyper.c_rate, priors.c[0], priors.c[1])
    if learn and learn_sigma2:  # probit: 1/sigma2 a fixed point mass
        elog_lam = digamma(hyper.prec_shape) - jnp.log(hyper.prec_rate)
        out = (
            out
            + 0.5 * D * n_edges * (elog_lam - jnp.log(hyper.prec_shape / hyper.prec_rate))
            - _kl_gamma(hyper.prec_shape, hyper.prec_rate, priors.precision[0], priors.precision[1])
        )
    return out


def bound_terms(parent, times, active, N, D, cnt, loglik, hyper, priors, learn, learn_sigma2=True):
    lp = log_prior_from_counts(parent, times, active, cnt, N, hyper.c_mean, hyper.alpha, hyper.beta)
    n_edges = jnp.sum(active)
    n_int = jnp.sum(active & (jnp.arange(parent.shape[0]) >= N))
    return loglik + lp + bound_extra(n_edges, n_int, D, hyper, priors, learn, learn_sigma2)


@functools.partial(jax.jit, static_argnames=("learn",))
def e_step(parent, times, X, hyper: EMHyper, priors: PYDTPriors = PYDTPriors(), learn: bool = True) -> EStep:
    """The E-step (Gaussian observations; probit: `ep_e_step`): Gaussian marginals of all node
    locations and the EM bound.

    Args:
      parent: int ``[2N - 1]`` fixed-capacity parents (``-2`` free slots).
      times: float ``[2N - 1]`` divergence times (leaves 1).
      X: float ``[N, D]``.
      hyper: `EMHyper`; the E-step uses ``sigma2 = 1 / <1/sigma2>``.
      priors: Gamma priors on ``c`` and ``1/sigma2`` (section 4).
      learn: whether ``q(c), q(1/sigma2)`` are Gamma (True) or point masses.

    Returns:
      `EStep`: marginals, ``b_[pi]`` of Eq. 17 and the bound (module docstring).
    """
    N, D = X.shape
    active = parent != FREE
    mean, var, cross, b, loglik = marginals(parent, times, active, X, hyper.sigma2)
    cnt = leaf_counts(parent, times, active, N)
    L = bound_terms(parent, times, active, N, D, cnt, loglik, hyper, priors, learn)
    return EStep(mean, var, cross, b, cnt, loglik, L)


def pydt_em_bound(parent, times, X, hyper: EMHyper, priors: PYDTPriors = PYDTPriors(), learn: bool = True):
    """The EM bound ``L`` of a tree (``e_step(...).bound``)."""
    return e_step(parent, times, X, hyper, priors, learn).bound


def e_step_diag(parent, times, M, V, hyper, priors, learn, learn_sigma2, order=None):
    """`e_step` for leaf observations ``N(M[n]; x_n, diag V[n])`` (per-dim variances in the
    `EStep`); the bound uses ``log N(M; 0, K + diag V)`` as the likelihood term."""
    N, D = M.shape
    active = parent != FREE
    if order is None:
        order = time_order(parent, times, active)
    mean, var, cross, b, loglik = marginals_diag(parent, times, active, M, V, hyper.sigma2, order)
    cnt = up_counts(parent, order, active, (jnp.arange(parent.shape[0]) < N).astype(jnp.int32))
    L = bound_terms(parent, times, active, N, D, cnt, loglik, hyper, priors, learn, learn_sigma2)
    return EStep(mean, var, cross, b, cnt, loglik, L)
