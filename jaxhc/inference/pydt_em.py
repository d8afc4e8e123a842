"""Greedy Bayesian EM for the Pitman-Yor diffusion tree (Knowles & Ghahramani, section 5.2).

Gaussian observation model: leaves ``X [N, D]`` at time 1, Brownian motion from the origin
(location 0 at time 0), ``x_b ~ N(x_a, sigma2 (t_b - t_a) I)`` along each edge (Eq. 12).
Trees are the fixed-capacity parent arrays of `pydt_mcmc` (``m = 2N - 1`` slots, leaves
``0..N-1`` at time 1, internal slots ``N..m-1``, ``-1`` root, ``-2`` free).

The variational family is ``q(x) q(c) q(1/sigma2)`` with the divergence times a point
estimate: ``q(x)`` the exact Gaussian posterior of the internal locations given
``<1/sigma2>`` (message passing, `e_step`), ``q(c)`` and ``q(1/sigma2)`` Gamma (the forms of
the Gibbs conditionals Eq. 15 / 16 with expectations). With ``q(x)`` optimal the bound has the
closed form

    L = log p(X | T, t, sigma2 = 1/<lam>) + (D |E| / 2) (<log lam> - log <lam>)
        + log P(T, t | <c>, alpha, beta) + |I| (<log c> - log <c>)
        - KL(q(c) || p(c)) - KL(q(lam) || p(lam))

(``|E|`` edges including origin -> root, ``|I|`` branch points, ``log P`` = Eq. 9 + 11, linear
in ``c`` apart from the ``log c`` terms). With ``learn_hyper=False`` the Gamma factors are point
masses and ``L = log p(X, T, t | c, sigma2, alpha, beta)``, the joint at the current times.

`m_step` raises ``L`` by coordinate ascent: the times jointly by L-BFGS (optax, zoom line
search) on Eq. 17 in ``s = logit t`` with ``q(x)`` held fixed; then ``q(1/sigma2)``,
``q(c)``; then ``alpha`` and ``beta`` by golden-section search on Eq. 9 + 11 (maximum
likelihood on bounded intervals, no hyper-priors; a step is kept only if it does not lower
the bound). Every piece is an exact coordinate maximum or is guarded, so the bound never
decreases.

Search over structures (section 5.2): the initial tree attaches the data points one by one
(random order), each at the best of all branch midpoints and branch points; then each
iteration takes a tree from the K-best list, detaches a random subtree, scores every
re-attachment point, runs EM on the three best and inserts them into the list. The score of a
re-attachment is exact at the current times: the likelihood change is the local contribution
``log N(mu_s; E[x_new | X_rest], (Var[x_new | X_rest] + v_s + sigma2 (t_s - t_new)) I)``
(``mu_s, v_s`` the subtree's upward message, ``x_new`` the attachment location, whose marginal
follows from the E-step of the remaining tree, a Brownian bridge on a segment) plus the full
Eq. 9 + 11 of the candidate tree (exact counts along the root path).

Probit observations (section 5.4, ``likelihood="probit"``): bits ``Y [N, D]`` with ``P(y_nd = 1 |
x) = Phi(x_nd)`` at the leaf locations (as `pydt_mcmc`: a latent ``x + N(0, 1)`` thresholded at
0). The E-step runs expectation propagation (Minka, 2001) on the probit factors (`ep_e_step`):
each ``Phi(s_nd x_nd)`` (``s = 2 y - 1``) becomes a Gaussian site ``N(M_nd; x_nd, V_nd)`` in
natural parameters (`EPSites`), updated in parallel damped sweeps by moment matching against
the cavities, warm-started from the tree's previous sites. Given the sites the model is the
Gaussian one with pseudo-observations ``M`` and per-(leaf, dim) noise ``V``, so the message
passing runs per dimension (`_marginals_diag`), leaves get posterior marginals, and the EM's
likelihood term is the EP evidence

    log Z_EP = log N(M; 0, K + diag V) + sum_nd [log Zhat_nd - log N(M_nd; mu_c, v_c + V_nd)]

(``K = sigma2 t_lca`` per dimension, ``mu_c, v_c`` the cavities, ``Zhat`` the tilted
normalisers), an approximation of ``log p(Y | T, t)``: ``L`` is then no longer a strict bound.
The M-step is unchanged (Eq. 17 with ``b`` from the surrogate posterior, leaf edges included):
with the sites fixed it is exact EM on the surrogate Gaussian model, so it does not lower the
surrogate bound, but re-running EP at the new times can move ``L`` either way; EM stops when
``|Delta L| < tol_em``. ``sigma2`` is fixed (the unit probit noise sets the scale; as in
`pydt_mcmc`); ``q(c)``, ``alpha``, ``beta`` are learned. The search scores re-attachments with
the site means / variances as the leaf data (per-dim variances), the initial tree with sites
matched to the prior leaf marginals ``N(0, sigma2)``; each tree in the K-best list keeps its
sites.
"""
from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.tree_utils as otu
from jax.scipy.special import digamma, gammaln, log_ndtr

from .pydt_mcmc import (
    FREE,
    PYDTPriors,
    PYDTSamples,
    _check_X,
    _harmonic_table,
    _log_branch_prod,
    _messages,
    _order,
    _subtree_mask,
    _up_counts,
    check_hyperparameters,
    state_to_tree,
)

__all__ = ["EMHyper", "EStep", "PYDTEMResult", "e_step", "m_step", "em_init_hyper", "pydt_em",
           "pydt_predictive_logpdf", "pydt_em_bound", "EPSites", "EPConfig", "ep_e_step"]


# ------------------------------------------------------------------------------------------
# state
# ------------------------------------------------------------------------------------------
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


class PYDTEMResult(NamedTuple):
    """Output of `pydt_em`.

    Attributes:
      tree: the best tree as a compact `jaxhc.ParentTree` (heights = divergence times).
      parent, times: the best tree on fixed-capacity arrays ``[2N - 1]``.
      log_evidence: the EM bound of the best tree (approximate ``log p(X | T)``).
      k_best: list of ``(log_evidence, parent, times)``, best first.
      k_best_hyper: list of dicts ``c, alpha, beta, sigma2`` matching ``k_best``.
      c, alpha, beta, sigma2: hyperparameters of the best tree (``<c>``, ``1/<1/sigma2>``).
      q_c, q_precision: ``(shape, rate)`` of the Gamma posteriors (``None`` if not learned).
      trace: ``[num_iters + 1]`` best bound after the initial tree and each iteration.
      X: the data (for `pydt_predictive_logpdf`; the bits under probit).
      likelihood: ``"gaussian"`` or ``"probit"``.
      k_best_sites: probit: the `EPSites` of each K-best tree (at its final times); else
        ``None``.
    """

    tree: object
    parent: np.ndarray
    times: np.ndarray
    log_evidence: float
    k_best: list
    k_best_hyper: list
    c: float
    alpha: float
    beta: float
    sigma2: float
    q_c: Optional[tuple]
    q_precision: Optional[tuple]
    trace: np.ndarray
    X: np.ndarray
    likelihood: str = "gaussian"
    k_best_sites: Optional[list] = None


# ------------------------------------------------------------------------------------------
# message passing: marginals and pairwise edge moments
# ------------------------------------------------------------------------------------------
def _downward(parent, times, active, order, mu, v, M, V, sigma2):
    """Downward pass after an upward one (``mu [m, D]``, ``v``: the upward messages), parents
    before children: posterior ``mean [m, D]``, ``var`` and ``cross`` (covariance with the
    parent), shaped like ``v``: ``[m]`` (isotropic, `_marginals`) or ``[m, D]`` (per-dimension,
    `_marginals_diag`). Leaf ``n`` is seen as ``N(M[n]; x_n, V[n])`` (``V [N]`` or ``[N, D]``;
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


def _marginals(parent, times, active, X, sigma2):
    """Upward pass (`_messages`) then downward pass: per node posterior mean / variance,
    covariance with the parent, ``b`` of the edge into it, and ``log p(X)``."""
    N, D = X.shape
    f = X.dtype
    order = _order(parent, times, active)
    mu, v, _, loglik = _messages(parent, times, active, X, sigma2, order)
    mean, var, cross = _downward(parent, times, active, order, mu, v, X, jnp.zeros(N, f), sigma2)
    has_p = (parent >= 0) & active
    pp = jnp.maximum(parent, 0)
    mp = jnp.where(has_p[:, None], mean[pp], 0.0)
    Pp = jnp.where(has_p, var[pp], 0.0)
    b = 0.5 * (jnp.sum((mean - mp) ** 2, axis=1) + D * (var + Pp - 2.0 * cross))
    b = jnp.where(active, b, 0.0)
    return mean, var, cross, b, loglik


def _messages_diag(parent, times, active, M, V, sigma2, order):
    """`_messages` with per-(leaf, dim) observation variances: leaf ``n`` is seen through
    ``N(M[n]; x_n, diag V[n])`` (``V = 0``: observed exactly). Natural parameters ``A, B [m, D]``
    and ``C [m]`` (summed over dims) are scatter-added into the parents, as in `_messages`.

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
        lz_node = jnp.where(is_leaf, 0.0, 0.5 * (jnp.sum(log2pi + jnp.log(vstar) + mustar ** 2 / vstar) - C[k]))
        mk = jnp.where(is_leaf, M[kl], mustar)
        vk = jnp.where(is_leaf, V[kl], vstar) + edge
        to_parent = ok & (p >= 0)
        at_root = ok & (p < 0)
        terms = jnp.sum(log2pi + jnp.log(vk) + mk ** 2 / vk)
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


def _marginals_diag(parent, times, active, M, V, sigma2, order=None):
    """`_marginals` for leaf observations ``N(M[n]; x_n, diag V[n])``: ``mean [m, D]``,
    ``var [m, D]``, ``cross [m, D]`` (covariance with the parent), ``b [m]`` and
    ``log N(M; 0, K + diag V)``. Leaves get their posterior marginals too (with ``V = 0``:
    ``M`` and 0, the Gaussian model)."""
    if order is None:
        order = _order(parent, times, active)
    mu, v, loglik = _messages_diag(parent, times, active, M, V, sigma2, order)
    mean, var, cross = _downward(parent, times, active, order, mu, v, M, V, sigma2)
    has_p = (parent >= 0) & active
    pp = jnp.maximum(parent, 0)
    mp = jnp.where(has_p[:, None], mean[pp], 0.0)
    Pp = jnp.where(has_p[:, None], var[pp], 0.0)
    b = 0.5 * jnp.sum((mean - mp) ** 2 + var + Pp - 2.0 * cross, axis=1)
    b = jnp.where(active, b, 0.0)
    return mean, var, cross, b, loglik


def _counts(parent, times, active, N):
    m = parent.shape[0]
    is_leaf = jnp.arange(m) < N
    order = _order(parent, times, active)
    return _up_counts(parent, order, active, is_leaf.astype(jnp.int32))


def _prior_from_counts(parent, times, active, cnt, N, c, alpha, beta):
    """Eq. 9 + 11 given the leaf counts (equals `log_prior_masked`; no loops, vmappable)."""
    m = parent.shape[0]
    f = times.dtype
    is_leaf = jnp.arange(m) < N
    nonroot = active & (parent >= 0)
    pidx = jnp.where(nonroot, parent, m)
    nkids = jax.ops.segment_sum(nonroot.astype(jnp.int32), pidx, num_segments=m + 1)[:m]
    branch = active & ~is_leaf
    cntf = cnt.astype(f)
    child_terms = jax.ops.segment_sum(jnp.where(nonroot, gammaln(jnp.maximum(cntf, 1.0) - beta), 0.0), pidx,
                                      num_segments=m + 1)[:m]
    tb = jnp.where(branch, times, 0.0)
    # Eq. 9 with the Gamma(1 - beta)^-(K - 1) factor the printed equation drops (as
    # `log_prior_masked`)
    eq9 = (jnp.log(c) - jnp.log1p(-tb) + _log_branch_prod(nkids, alpha, beta) + child_terms
           - (nkids - 1).astype(f) * gammaln(1.0 - beta) - gammaln(jnp.maximum(cntf, 1.0) + alpha))
    H = _harmonic_table(m, alpha, beta)
    tpar = jnp.where(parent >= 0, times[jnp.maximum(parent, 0)], 0.0)
    A = lambda t: -c * jnp.log1p(-t)  # noqa: E731
    eq11 = (A(tpar) - A(tb)) * H[jnp.clip(cnt - 1, 0, m)]
    return jnp.sum(jnp.where(branch, eq9 + eq11, 0.0))


def _J(parent, active, cnt, N, alpha, beta):
    """Eq. 14's ``J_b = H_{m(b)-1} - sum_k H_{n_k - 1}`` per node (0 off branch points)."""
    m = parent.shape[0]
    H = _harmonic_table(m, alpha, beta)
    nonroot = active & (parent >= 0)
    Hn = H[jnp.clip(cnt - 1, 0, m)]
    kids = jax.ops.segment_sum(jnp.where(nonroot, Hn, 0.0), jnp.where(nonroot, parent, m), num_segments=m + 1)[:m]
    branch = active & (jnp.arange(m) >= N)
    return jnp.where(branch, Hn - kids, 0.0)


def _kl_gamma(a, b, a0, b0):
    """``KL(G(a, b) || G(a0, b0))`` (shape, rate)."""
    return ((a - a0) * digamma(a) - gammaln(a) + gammaln(a0) + a0 * (jnp.log(b) - jnp.log(b0))
            + a * (b0 - b) / b)


def _bound_terms(parent, times, active, N, D, cnt, loglik, hyper, priors, learn, learn_sigma2=True):
    c = hyper.c_mean
    lp = _prior_from_counts(parent, times, active, cnt, N, c, hyper.alpha, hyper.beta)
    L = loglik + lp
    if learn and learn_sigma2:
        n_edges = jnp.sum(active)
        n_int = jnp.sum(active & (jnp.arange(parent.shape[0]) >= N))
        elog_lam = digamma(hyper.prec_shape) - jnp.log(hyper.prec_rate)
        elog_c = digamma(hyper.c_shape) - jnp.log(hyper.c_rate)
        L = (L + 0.5 * D * n_edges * (elog_lam - jnp.log(hyper.prec_shape / hyper.prec_rate))
             + n_int * (elog_c - jnp.log(c))
             - _kl_gamma(hyper.c_shape, hyper.c_rate, priors.c[0], priors.c[1])
             - _kl_gamma(hyper.prec_shape, hyper.prec_rate, priors.precision[0], priors.precision[1]))
    elif learn:  # probit: q(c) Gamma, 1/sigma2 a fixed point mass
        n_int = jnp.sum(active & (jnp.arange(parent.shape[0]) >= N))
        elog_c = digamma(hyper.c_shape) - jnp.log(hyper.c_rate)
        L = L + n_int * (elog_c - jnp.log(c)) - _kl_gamma(hyper.c_shape, hyper.c_rate, priors.c[0], priors.c[1])
    return L


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
    mean, var, cross, b, loglik = _marginals(parent, times, active, X, hyper.sigma2)
    cnt = _counts(parent, times, active, N)
    L = _bound_terms(parent, times, active, N, D, cnt, loglik, hyper, priors, learn)
    return EStep(mean, var, cross, b, cnt, loglik, L)


def pydt_em_bound(parent, times, X, hyper: EMHyper, priors: PYDTPriors = PYDTPriors(), learn: bool = True):
    """The EM bound ``L`` of a tree (``e_step(...).bound``)."""
    return e_step(parent, times, X, hyper, priors, learn).bound


def _e_step_diag(parent, times, M, V, hyper, priors, learn, learn_sigma2, order=None):
    """`e_step` for leaf observations ``N(M[n]; x_n, diag V[n])`` (per-dim variances in the
    `EStep`); the bound uses ``log N(M; 0, K + diag V)`` as the likelihood term."""
    N, D = M.shape
    active = parent != FREE
    if order is None:
        order = _order(parent, times, active)
    mean, var, cross, b, loglik = _marginals_diag(parent, times, active, M, V, hyper.sigma2, order)
    cnt = _up_counts(parent, order, active, (jnp.arange(parent.shape[0]) < N).astype(jnp.int32))
    L = _bound_terms(parent, times, active, N, D, cnt, loglik, hyper, priors, learn, learn_sigma2)
    return EStep(mean, var, cross, b, cnt, loglik, L)


# ------------------------------------------------------------------------------------------
# probit observations: expectation propagation on the probit factors (section 5.4)
# ------------------------------------------------------------------------------------------
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


def _ep_prior_sites(S, sigma2):
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
    sites and the number of sweeps."""
    N = S.shape[0]
    damp = conf.damping

    def cond(st):
        _, delta, i = st
        return (i < conf.max_sweeps) & (delta > conf.tol)

    def body(st):
        sites, _, i = st
        mean, var, _, _, _ = _marginals_diag(parent, times, active, sites.mean, sites.var, sigma2, order)
        mu_c, v_c = _cavity(mean[:N], var[:N], sites)
        _, tau, nu = _probit_site(S, mu_c, v_c)
        tau = (1.0 - damp) * sites.tau + damp * jnp.maximum(tau, _TAU_MIN)
        nu = (1.0 - damp) * sites.nu + damp * nu
        delta = jnp.maximum(jnp.max(jnp.abs(tau - sites.tau)), jnp.max(jnp.abs(nu - sites.nu)))
        return EPSites(tau, nu), delta, i + 1

    f = S.dtype
    sites, _, n = jax.lax.while_loop(cond, body, (sites, jnp.asarray(jnp.inf, f), jnp.int32(0)))
    return sites, n


def _ep_e_step(parent, times, S, sites, hyper, priors, learn, conf: EPConfig):
    """EP to convergence (warm-started from ``sites``), then the `EStep` of the surrogate
    Gaussian model with ``log_lik = log Z_EP`` and the bound built on it."""
    N, D = S.shape
    active = parent != FREE
    order = _order(parent, times, active)
    sites, _ = _ep(parent, times, active, S, sites, hyper.sigma2, order, conf)
    M, V = sites.mean, sites.var
    est = _e_step_diag(parent, times, M, V, hyper, priors, learn, False, order)
    # log Z_EP = log N(M; 0, K + diag V) + sum_i [log Zhat_i - log N(M_i; mu_c, v_c + V_i)]
    mu_c, v_c = _cavity(est.mean[:N], est.var[:N], sites)
    logZhat, _, _ = _probit_site(S, mu_c, v_c)
    s2 = v_c + V
    corr = jnp.sum(logZhat + 0.5 * (2.0 * _LOG_SQRT_2PI + jnp.log(s2) + (M - mu_c) ** 2 / s2))
    return est._replace(log_lik=est.log_lik + corr, bound=est.bound + corr), sites


@functools.partial(jax.jit, static_argnames=("learn", "conf"))
def ep_e_step(parent, times, Y, hyper: EMHyper, sites: Optional[EPSites] = None, priors: PYDTPriors = PYDTPriors(),
              learn: bool = True, conf: EPConfig = EPConfig()):
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
        sites = _ep_prior_sites(S, hyper.sigma2)
    return _ep_e_step(parent, times, S, sites, hyper, priors, learn, conf)


# ------------------------------------------------------------------------------------------
# M-step
# ------------------------------------------------------------------------------------------
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
    G = jnp.sum(jnp.where(active, edge, 0.0)) + jnp.sum(jnp.where(internal, (cbar * J - 1.0) * jnp.log1p(-tsafe), 0.0))
    return jnp.where(valid, G, -jnp.inf)


def _lbfgs_times(parent, times, active, b, lam, cbar, J, N, D, max_iter, tol):
    m = parent.shape[0]
    internal = active & (jnp.arange(m) >= N)
    t_int = jnp.clip(times[N:], 1e-12, 1 - 1e-12)
    s0 = jnp.where(internal[N:], jnp.log(t_int) - jnp.log1p(-t_int), 0.0)

    def fun(s):
        return -time_objective(_times_from_s(s, times, internal, N), parent, active, b, lam, cbar, J, N, D)

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
    return jnp.where(better, _times_from_s(s, times, internal, N), times)


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


@functools.partial(jax.jit, static_argnames=("learn", "max_lbfgs", "learn_sigma2"))
def m_step(parent, times, X, est: EStep, hyper: EMHyper, priors: PYDTPriors = PYDTPriors(), learn: bool = True,
           learn_alpha_beta: bool = True, max_lbfgs: int = 100, tol: float = 1e-6, alpha_max: float = 20.0,
           sigma2_max=jnp.inf, learn_sigma2: bool = True):
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
        _, _, _, b, _ = _marginals(parent, times, active, X, hyper.sigma2)
        has_p = parent >= 0
        tp = jnp.where(has_p, times[jnp.maximum(parent, 0)], 0.0)
        delta = jnp.where(active, times - tp, 1.0)
        p_shape = priors.precision[0] + 0.5 * D * jnp.sum(active)
        p_rate = priors.precision[1] + jnp.sum(jnp.where(active, b / delta, 0.0))
        # the bound is unimodal in the rate at fixed shape: clipping 1/<lam> to
        # [0, sigma2_max] is the constrained coordinate maximum (see `pydt_em`)
        p_rate = jnp.minimum(p_rate, p_shape * sigma2_max)
        hyper = hyper._replace(prec_shape=jnp.asarray(p_shape, f), prec_rate=jnp.asarray(p_rate, f))
    if learn:
        tb = jnp.where(internal, times, 0.0)
        c_shape = priors.c[0] + jnp.sum(internal)
        c_rate = priors.c[1] - jnp.sum(jnp.where(internal, J * jnp.log1p(-tb), 0.0))
        hyper = hyper._replace(c_shape=jnp.asarray(c_shape, f), c_rate=jnp.asarray(c_rate, f))
    if True:  # computed always; ``learn_alpha_beta`` (traced) selects
        c = hyper.c_mean

        def h_ab(a, bt):
            v = _prior_from_counts(parent, times, active, cnt, N, c, a, bt)
            return jnp.where(jnp.isnan(v), -jnp.inf, v)

        cur = h_ab(hyper.alpha, hyper.beta)
        a_new, va = _golden(lambda a: h_ab(a, hyper.beta), -2.0 * hyper.beta + 1e-9, jnp.asarray(alpha_max, f))
        alpha = jnp.where((va > cur) & learn_alpha_beta, a_new, hyper.alpha)
        cur = jnp.maximum(va, cur)
        b_new, vb = _golden(lambda bt: h_ab(alpha, bt), jnp.maximum(0.0, -alpha / 2.0), jnp.asarray(0.99, f))
        beta = jnp.where((vb > cur) & learn_alpha_beta, b_new, hyper.beta)
        hyper = hyper._replace(alpha=alpha, beta=beta)
    return times, hyper


def _em(parent, times, hyper, X, priors, learn, learn_ab, max_em, tol_em, max_lbfgs, sigma2_max):
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

    times, hyper, est, L, _, _ = jax.lax.while_loop(cond, body, (times, hyper, est, est.bound, est.bound,
                                                                jnp.int32(0)))
    return times, hyper, L


def _em_probit(parent, times, hyper, S, sites, priors, learn, learn_ab, max_em, tol_em, max_lbfgs, conf):
    """EM with an EP E-step (warm-started sites): stops when the EP bound moves by less than
    ``tol_em`` (it need not increase: EP is re-run at the new times) or after ``max_em``
    iterations. Returns ``(times, hyper, sites, L)``."""
    est, sites = _ep_e_step(parent, times, S, sites, hyper, priors, learn, conf)

    def cond(st):
        _, _, _, _, L, Lprev, i = st
        return (i < max_em) & ((i == 0) | (jnp.abs(L - Lprev) > tol_em))

    def body(st):
        times, hyper, sites, est, L, _, i = st
        times, hyper = m_step(parent, times, S, est, hyper, priors, learn, learn_ab, max_lbfgs, learn_sigma2=False)
        est, sites = _ep_e_step(parent, times, S, sites, hyper, priors, learn, conf)
        return times, hyper, sites, est, est.bound, L, i + 1

    times, hyper, sites, est, L, _, _ = jax.lax.while_loop(
        cond, body, (times, hyper, sites, est, est.bound, est.bound, jnp.int32(0)))
    return times, hyper, sites, L


# ------------------------------------------------------------------------------------------
# scoring attachment points
# ------------------------------------------------------------------------------------------
def _ancestors(parent, times, active):
    """``anc[k, j]``: ``j`` is ``k`` or an ancestor of ``k`` (active nodes)."""
    m = parent.shape[0]
    order = _order(parent, times, active)
    eye = jnp.eye(m, dtype=bool)

    def body(i, anc):
        k = order[m - 1 - i]
        p = parent[k]
        row = jnp.where(p >= 0, anc[jnp.maximum(p, 0)], False) | eye[k]
        return anc.at[jnp.where(active[k], k, m)].set(row, mode="drop")

    return jax.lax.fori_loop(0, m, body, jnp.zeros((m, m), bool))


def _attach(par_r, times, act_r, insub, cnt_sub, s, mu_s, v_s, slot, X, hyper, allow_bp, V=None):
    """Scores of attaching the subtree rooted at ``s`` (upward message ``N(mu_s, v_s)``) to a
    remaining tree, at each segment (index ``k``: on the edge into ``k``) and each branch point
    (index ``m + k``). Returns ``(scores [2m], build)`` where ``build(j) -> (parent, times)``.
    With leaf noise variances ``V [N, D]`` (probit pseudo-observations ``X``) the variances are
    per dimension (``v_s [D]``)."""
    m = par_r.shape[0]
    N, D = X.shape
    slots = jnp.arange(m)
    sigma2 = hyper.sigma2
    c = hyper.c_mean
    t_s = times[s]
    n_s = cnt_sub[s]
    diag = V is not None
    ex = (lambda a: a[:, None]) if diag else (lambda a: a)  # noqa: E731  per-node -> per-node-dim
    if diag:
        mean, var, cross, _, _ = _marginals_diag(par_r, times, act_r, X, V, sigma2)
    else:
        mean, var, cross, _, _ = _marginals(par_r, times, act_r, X, sigma2)
    cnt_r = _counts(par_r, times, act_r, N)
    anc = _ancestors(par_r, times, act_r)
    has_p = par_r >= 0
    pp = jnp.maximum(par_r, 0)
    tp = jnp.where(has_p, times[pp], 0.0)
    mp = jnp.where(has_p[:, None], mean[pp], 0.0)
    Pp = jnp.where(ex(has_p), var[pp], 0.0)
    # segments: a new node at the middle of [t_p, min(t_k, t_s)]
    t_hi = jnp.minimum(times, t_s)
    t_new = 0.5 * (tp + t_hi)
    dk = jnp.where(times - tp > 0, times - tp, 1.0)
    w2 = (t_new - tp) / dk
    w1 = 1.0 - w2
    seg_mean = w1[:, None] * mp + w2[:, None] * mean
    seg_var = (ex(w1) ** 2 * Pp + ex(w2) ** 2 * var + 2 * ex(w1) * ex(w2) * cross
               + ex(sigma2 * (t_new - tp) * (times - t_new) / dk))
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

    def build(j):
        seg = j < m
        k = jnp.where(seg, j, j - m).astype(jnp.int32)
        par_seg = par_r.at[slot].set(par_r[k]).at[k].set(slot).at[s].set(slot)
        par_bp = par_r.at[s].set(k)
        par = jnp.where(seg, par_seg, par_bp)
        tim = jnp.where(seg, times.at[slot].set(att_t[j]), times)
        return par, tim

    def prior_of(j):
        seg = j < m
        k = jnp.where(seg, j, j - m)
        par, tim = build(j)
        act = par != FREE
        up = anc[k] & ~(seg & (slots == k))
        cnt = jnp.where(insub, cnt_sub, cnt_r + n_s * up.astype(cnt_r.dtype))
        cnt = jnp.where(seg, cnt.at[slot].set(cnt_r[k] + n_s), cnt)
        return _prior_from_counts(par, tim, act, cnt, N, c, hyper.alpha, hyper.beta)

    lp = jax.vmap(prior_of)(jnp.arange(2 * m))
    scores = jnp.where(ok, loc + lp, -jnp.inf)
    scores = jnp.where(jnp.isnan(scores), -jnp.inf, scores)
    return scores, build


def _detach(parent, times, s):
    """Remove the subtree of ``s``; a parent left with one child disappears (its slot freed).
    Returns ``(par_r, act_r, insub, slot)`` with ``slot`` the free slot for a new node."""
    m = parent.shape[0]
    slots = jnp.arange(m)
    active = parent != FREE
    N = (m + 1) // 2
    insub = _subtree_mask(parent, times, active, s)
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
    N = X.shape[0]
    order = _order(parent, times, active)
    leaf = s < N
    sl = jnp.minimum(s, N - 1)
    if V is not None:
        mu, v, _ = _messages_diag(parent, times, active, X, V, sigma2, order)
        return jnp.where(leaf, X[sl], mu[s]), jnp.where(leaf, V[sl], v[s])
    mu, v, _, _ = _messages(parent, times, active, X, sigma2, order)
    return jnp.where(leaf, X[sl], mu[s]), jnp.where(leaf, 0.0, v[s])


@functools.partial(jax.jit, static_argnames=("learn", "n_em", "max_em", "max_lbfgs", "conf"))
def _search_step(key, parent, times, hyper, X, priors, learn, learn_ab, allow_bp, n_em, max_em, tol_em, max_lbfgs,
                 sigma2_max, sites=None, conf=None):
    """One detach / re-attach step; EM on the ``n_em`` best re-attachments. Gaussian: ``X`` the
    data, ``sites=None``. Probit: ``X`` the signs ``2 Y - 1`` and ``sites`` the tree's EP sites,
    whose means / variances are the leaf data of the attachment scores (candidates' EP starts
    from them). Returns ``(parents, times, hypers, sites or None, bounds)`` over candidates."""
    N = X.shape[0]
    active = parent != FREE
    cand = active & (parent >= 0)
    s = jax.random.categorical(key, jnp.where(cand, 0.0, -jnp.inf)).astype(jnp.int32)
    cnt = _counts(parent, times, active, N)
    M, V = (X, None) if sites is None else (sites.mean, sites.var)
    mu_s, v_s = _subtree_message(parent, times, active, M, hyper.sigma2, s, V)
    par_r, act_r, insub, slot = _detach(parent, times, s)
    scores, build = _attach(par_r, times, act_r, insub, jnp.where(insub, cnt, 0), s, mu_s, v_s, slot, M, hyper,
                            allow_bp, V)
    top_scores, top = jax.lax.top_k(scores, n_em)
    pars, tims = jax.vmap(build)(top)
    # invalid re-attachments (score -inf, e.g. fewer than n_em valid places) can hold parent
    # cycles, on which the tree walks of `pydt_mcmc` never end: EM runs on the source tree
    # instead and the bound is discarded below
    valid = jnp.isfinite(top_scores)[:, None]
    pars = jnp.where(valid, pars, parent[None, :])
    tims = jnp.where(valid, tims, times[None, :])

    if sites is None:
        def run(par, tim):
            return _em(par, tim, hyper, X, priors, learn, learn_ab, max_em, tol_em, max_lbfgs, sigma2_max)

        tims, hypers, Ls = jax.vmap(run)(pars, tims)
        out_sites = None
    else:
        def run(par, tim):
            return _em_probit(par, tim, hyper, X, sites, priors, learn, learn_ab, max_em, tol_em, max_lbfgs, conf)

        tims, hypers, out_sites, Ls = jax.vmap(run)(pars, tims)
    Ls = jnp.where(jnp.isfinite(top_scores), Ls, -jnp.inf)
    return pars, tims, hypers, out_sites, Ls


@functools.partial(jax.jit, static_argnames=("learn", "max_em", "max_lbfgs", "conf"))
def _initial_tree(key, X, hyper, priors, learn, learn_ab, allow_bp, max_em, tol_em, max_lbfgs, sigma2_max, conf=None):
    """Sequential attachment of the points (random order) at the best-scoring place, then EM.
    ``conf=None``: Gaussian ``X``; else probit with ``X`` the signs ``2 Y - 1``: the points are
    attached as the pseudo-observations of EP sites matched to the prior leaf marginals.
    Returns ``(parent, times, hyper, sites or None, bound)``."""
    N = X.shape[0]
    m = 2 * N - 1
    f = X.dtype
    slots = jnp.arange(m)
    perm = jax.random.permutation(key, N)
    parent = jnp.full(m, FREE, jnp.int32).at[perm[0]].set(N).at[perm[1]].set(N).at[N].set(-1)
    times = jnp.zeros(m, f).at[:N].set(1.0).at[N].set(0.5)

    if conf is None:
        M, V, sites = X, None, None
    else:
        sites = _ep_prior_sites(X, hyper.sigma2)
        M, V = sites.mean, sites.var

    def body(i, carry):
        parent, times = carry
        s = perm[i]
        act = parent != FREE
        slot = jnp.argmax((parent == FREE) & (slots >= N)).astype(jnp.int32)
        onehot = slots == s
        v_s = jnp.zeros((), f) if V is None else V[s]
        scores, build = _attach(parent, times, act, onehot, onehot.astype(jnp.int32), s, M[s], v_s,
                                slot, M, hyper, allow_bp, V)
        return build(jnp.argmax(scores))

    parent, times = jax.lax.fori_loop(2, N, body, (parent, times))
    if conf is None:
        times, hyper, L = _em(parent, times, hyper, X, priors, learn, learn_ab, max_em, tol_em, max_lbfgs, sigma2_max)
    else:
        times, hyper, sites, L = _em_probit(parent, times, hyper, X, sites, priors, learn, learn_ab, max_em, tol_em,
                                            max_lbfgs, conf)
    return parent, times, hyper, sites, L


# ------------------------------------------------------------------------------------------
# driver
# ------------------------------------------------------------------------------------------
def _signature(parent, N):
    """Hashable tree structure: the set of leaf sets of internal nodes."""
    parent = np.asarray(parent)
    m = parent.shape[0]
    masks = [0] * m
    for k in range(N):
        masks[k] = 1 << k
    # children before parents: repeat relaxation by depth (parents have larger ids? not
    # guaranteed), so push leaf bits up their root paths
    for k in range(N):
        if parent[k] == FREE:
            continue
        p = parent[k]
        while p >= 0:
            masks[p] |= 1 << k
            p = parent[p]
    return frozenset(masks[k] for k in range(N, m) if parent[k] != FREE)


def em_init_hyper(X, c=1.0, alpha=0.5, beta=0.2, sigma2=None) -> EMHyper:
    """Initial `EMHyper`: point values as ``(shape = value, rate = 1)`` (``c`` and ``1/sigma2``);
    ``sigma2=None`` takes the mean per-column variance of ``X``."""
    X = np.asarray(X)
    if sigma2 is None:
        sigma2 = float(np.mean(np.var(X, axis=0)))
        sigma2 = sigma2 if sigma2 > 0 else 1.0
    f = jnp.asarray(X).dtype
    a = lambda v: jnp.asarray(v, f)  # noqa: E731
    return EMHyper(a(c), a(1.0), a(1.0 / sigma2), a(1.0), a(alpha), a(beta))


def _check_likelihood(X, likelihood):
    if likelihood not in ("gaussian", "probit"):
        raise ValueError(f"likelihood must be 'gaussian' or 'probit', got {likelihood!r}")
    if likelihood == "probit" and not np.all((X == 0) | (X == 1)):
        raise ValueError("likelihood='probit' needs binary X (entries 0 or 1)")


def pydt_em(key, X, *, c=1.0, alpha=0.5, beta=0.2, sigma2=None, likelihood: str = "gaussian", num_iters: int = 100,
            k_best: int = 10, learn_hyper: bool = True, learn_alpha_beta: Optional[bool] = None,
            priors: PYDTPriors = PYDTPriors(), num_em_candidates: int = 3, max_em: int = 20, tol_em: float = 1e-4,
            max_lbfgs: int = 100, sigma2_max: Optional[float] = None, ep: EPConfig = EPConfig(),
            progress_bar: bool = True) -> PYDTEMResult:
    """Greedy Bayesian EM search over PYDT trees (section 5.2), Gaussian or probit observations.

    Args:
      key: ``jax.random`` key (subtree choices and the order of the initial attachments).
      X: ``[N, D]``, ``N >= 3``: real data (``likelihood="gaussian"``) or bits 0 / 1
        (``"probit"``).
      c, alpha, beta: initial hyperparameters; ``alpha = beta = 0`` is the Dirichlet diffusion
        tree (binary trees; ``alpha, beta`` then stay fixed).
      sigma2: initial (or fixed) diffusion variance; ``None``: the mean column variance of ``X``
        (Gaussian), 1 (probit).
      likelihood: ``"gaussian"`` (leaves observed) or ``"probit"`` (section 5.4: ``P(x_nd = 1) =
        Phi(leaf location_nd)``, as `pydt_mcmc`). Probit runs EP on the probit factors in each
        E-step (`ep_e_step`; sites warm-started, kept per tree) and uses ``log Z_EP`` in place of
        ``log p(X | T, t)``, so the "bound" is an EP approximation of the log evidence, not a
        strict bound, and it may move either way between EM iterations (the M-step is exact EM
        on the surrogate Gaussian model of the EP sites). ``sigma2`` stays fixed (the scale
        of the latent locations is set by the unit probit noise); ``q(c)``, ``alpha``, ``beta``
        are learned as in the Gaussian case. The search scores re-attachments with the site
        means / variances as the leaf data.
      num_iters: detach / re-attach search iterations.
      k_best: length of the K-best list.
      learn_hyper: learn ``q(c)``, ``q(1/sigma2)`` (variational Gamma; not under probit) and,
        unless DDT, ``alpha``, ``beta`` (golden-section search).
      learn_alpha_beta: override for ``alpha, beta`` alone (default: ``learn_hyper``; never
        for the DDT).
      priors: Gamma priors on ``c`` and ``1/sigma2``.
      num_em_candidates: re-attachments per iteration that get EM (the paper: 3).
      max_em, tol_em, max_lbfgs: EM iterations per tree, its stopping tolerance on the bound,
        L-BFGS iterations per M-step.
      sigma2_max: upper limit of the learned ``sigma2`` (Gaussian; default: the mean column
        variance of ``X``, the leaf variance the model implies for ``sigma2``). Without it the
        bound is unbounded when ``sigma2`` is learned: all times -> 1 with ``sigma2 (1 - t)``
        fixed gains ``sum_b (1 - <c> J_b) log(1/eps)`` from Eq. 14's singularity at ``t = 1``
        (``<c> J_b < 1``) and loses only ``D/2 log(1/eps)`` at the root edge, so MAP times
        collapse; the clip is the constrained coordinate maximum, so the bound stays monotone.
      ep: `EPConfig` (probit only): sweeps, tolerance, damping.
      progress_bar: tqdm bar over iterations.

    Returns:
      `PYDTEMResult`. Arrays use fixed capacity ``2N - 1`` (see module docstring).
    """
    X = _check_X(X)
    _check_likelihood(X, likelihood)
    probit = likelihood == "probit"
    if probit and sigma2 is None:
        sigma2 = 1.0
    if sigma2 is not None:
        check_hyperparameters(c, alpha, beta, sigma2)
    c, alpha, beta, _ = check_hyperparameters(c, alpha, beta, 1.0)
    N, D = X.shape
    if N < 3:
        raise ValueError(f"pydt_em needs N >= 3 points, got {N}")
    num_iters, k_best = int(num_iters), int(k_best)
    if num_iters < 0 or k_best < 1:
        raise ValueError("num_iters must be >= 0 and k_best >= 1")
    conf = None
    if probit:
        conf = EPConfig(int(ep.max_sweeps), float(ep.tol), float(ep.damping))
        if conf.max_sweeps < 1 or not conf.tol >= 0 or not 0.0 < conf.damping <= 1.0:
            raise ValueError(f"ep needs max_sweeps >= 1, tol >= 0 and damping in (0, 1], got {ep}")
    ddt = alpha == 0.0 and beta == 0.0
    learn = bool(learn_hyper)
    learn_ab = (learn if learn_alpha_beta is None else bool(learn_alpha_beta)) and not ddt
    allow_bp = not ddt
    pri = PYDTPriors(*(tuple(float(v) for v in p) for p in priors))
    Xj = jnp.asarray(2.0 * X - 1.0) if probit else jnp.asarray(X)  # probit: the signs
    hyper = em_init_hyper(X, c, alpha, beta, sigma2)
    if probit:
        s2max = float(hyper.sigma2)  # unused: sigma2 is fixed
    else:
        s2max = float(sigma2_max) if sigma2_max is not None else max(float(np.mean(np.var(X, axis=0))),
                                                                       float(hyper.sigma2))
    k_init, k_search = jax.random.split(key)
    parent, times, hyper, sites, L = _initial_tree(k_init, Xj, hyper, pri, learn, learn_ab, allow_bp, int(max_em),
                                                   float(tol_em), int(max_lbfgs), s2max, conf)
    entries = {}  # signature -> (L, parent, times, hyper, sites)

    def insert(L, par, tim, hyp, sit):
        L = float(L)
        if not np.isfinite(L):
            return
        sig = _signature(par, N)
        if sig in entries and entries[sig][0] >= L:
            return
        entries[sig] = (L, np.asarray(par), np.asarray(tim), jax.device_get(hyp), jax.device_get(sit))
        if len(entries) > k_best:
            worst = min(entries, key=lambda k: entries[k][0])
            del entries[worst]

    insert(L, parent, times, hyper, sites)
    trace = [max(e[0] for e in entries.values())]
    k_search, k_pick = jax.random.split(k_search)
    rng = np.random.default_rng(int(jax.random.randint(k_pick, (), 0, 2 ** 31 - 1)))
    bar = None
    if progress_bar:
        from tqdm.auto import tqdm
        bar = tqdm(total=num_iters, desc="pydt_em")
    try:
        for it in range(num_iters):
            items = sorted(entries.values(), key=lambda e: -e[0])
            _, par, tim, hyp, sit = items[int(rng.integers(len(items)))]
            pars, tims, hyps, sits, Ls = _search_step(
                jax.random.fold_in(k_search, it), jnp.asarray(par), jnp.asarray(tim),
                jax.tree_util.tree_map(jnp.asarray, hyp), Xj, pri, learn, learn_ab, allow_bp, int(num_em_candidates),
                int(max_em), float(tol_em), int(max_lbfgs), s2max, jax.tree_util.tree_map(jnp.asarray, sit), conf)
            pars, tims, hyps, sits, Ls = jax.device_get((pars, tims, hyps, sits, Ls))
            for j in range(len(Ls)):
                pick = lambda a: a[j]  # noqa: E731
                insert(Ls[j], pars[j], tims[j], jax.tree_util.tree_map(pick, hyps), jax.tree_util.tree_map(pick, sits))
            trace.append(max(e[0] for e in entries.values()))
            if bar is not None:
                bar.update(1)
                bar.set_postfix(bound=f"{trace[-1]:.2f}")
    finally:
        if bar is not None:
            bar.close()
    items = sorted(entries.values(), key=lambda e: -e[0])
    Lb, par, tim, hyp, _ = items[0]

    def hdict(h):
        return dict(c=float(h.c_shape / h.c_rate), alpha=float(h.alpha), beta=float(h.beta),
                    sigma2=float(h.prec_rate / h.prec_shape))

    best = hdict(hyp)
    return PYDTEMResult(
        tree=state_to_tree(par, tim), parent=par, times=tim, log_evidence=float(Lb),
        k_best=[(float(e[0]), e[1], e[2]) for e in items], k_best_hyper=[hdict(e[3]) for e in items],
        c=best["c"], alpha=best["alpha"], beta=best["beta"], sigma2=best["sigma2"],
        q_c=(float(hyp.c_shape), float(hyp.c_rate)) if learn else None,
        q_precision=(float(hyp.prec_shape), float(hyp.prec_rate)) if learn and not probit else None,
        trace=np.asarray(trace), X=np.asarray(X), likelihood=likelihood,
        k_best_sites=[e[4] for e in items] if probit else None)


# ------------------------------------------------------------------------------------------
# predictive density (section 5.3)
# ------------------------------------------------------------------------------------------
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
        mean, var, cross, _, _ = _marginals_diag(parent, times, active, X, V, sigma2)
    else:
        mean, var, cross, _, _ = _marginals(parent, times, active, X, sigma2)
    cnt = _counts(parent, times, active, N)
    cntf = jnp.maximum(cnt, 1).astype(f)
    nonroot = active & (parent >= 0)
    nkids = jax.ops.segment_sum(nonroot.astype(jnp.int32), jnp.where(nonroot, parent, m), num_segments=m + 1)[:m]
    has_p = parent >= 0
    pp = jnp.maximum(parent, 0)
    tp = jnp.where(has_p, times[pp], 0.0)
    # per edge: hazard multiplier r(m) = Gamma(m - beta) / Gamma(m + 1 + alpha); survival to t_k
    r = jnp.exp(gammaln(cntf - beta) - gammaln(cntf + 1 + alpha))
    log_surv = c * r * (jnp.log1p(-jnp.minimum(times, 1.0)) - jnp.log1p(-tp))
    surv = jnp.where(slots < N, 0.0, jnp.exp(log_surv))
    # probability of entering the edge into k
    pcnt = jnp.where(has_p, cntf[pp], 1.0)
    step = jnp.where(has_p, (cntf - beta) / (pcnt + alpha), 1.0)
    order = _order(parent, times, active)

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
        Vc = (w1[..., None] ** 2 * Pd + w2[..., None] ** 2 * var[:, None, :]
              + 2 * w1[..., None] * w2[..., None] * cross[:, None, :]
              + (sigma2 * (t - tp[:, None]) * (times[:, None] - t) / dk + sigma2 * one_m_t)[..., None])
        Vb = var + (sigma2 * (1.0 - times))[:, None]
    else:
        Pp = jnp.where(has_p, var[pp], 0.0)[:, None]
        Vc = (w1 ** 2 * Pp + w2 ** 2 * var[:, None] + 2 * w1 * w2 * cross[:, None]
              + sigma2 * (t - tp[:, None]) * (times[:, None] - t) / dk) + sigma2 * one_m_t
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


def pydt_predictive_logpdf(result_or_tree, Xnew, X=None, *, c=None, alpha=None, beta=None, sigma2=None,
                           num_time_samples: int = 3, use_k_best: bool = True, max_trees: int = 20,
                           likelihood: Optional[str] = None):
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
    Xnew = _check_X(np.atleast_2d(Xnew)) if np.ndim(Xnew) == 2 and np.shape(Xnew)[0] >= 2 else np.atleast_2d(
        np.asarray(Xnew, dtype=jnp.result_type(float)))
    if probit:
        _check_likelihood(Xnew, "probit")
    sites_list = None
    if isinstance(result_or_tree, PYDTSamples):  # MCMC: average over (up to max_trees) kept samples
        if X is None:
            raise ValueError("with PYDTSamples pass the data X the sampler ran on")
        Xd = jnp.asarray(_check_X(X))
        smp = result_or_tree
        par = np.asarray(smp.parent).reshape(-1, smp.parent.shape[-1])
        tim = np.asarray(smp.times).reshape(-1, smp.times.shape[-1])
        hyp = [np.asarray(getattr(smp, k)).reshape(-1) for k in ("c", "alpha", "beta", "sigma2")]
        pick = np.unique(np.linspace(0, par.shape[0] - 1, min(int(max_trees), par.shape[0])).astype(int))
        trees = [(par[i], tim[i], dict(c=hyp[0][i], alpha=hyp[1][i], beta=hyp[2][i], sigma2=hyp[3][i]))
                 for i in pick]
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
        Xd = jnp.asarray(_check_X(X))
        check_hyperparameters(c, alpha, beta, sigma2)
        parent, times = result_or_tree
        trees = [(parent, times, dict(c=c, alpha=alpha, beta=beta, sigma2=sigma2))]
    if probit:
        _check_likelihood(np.asarray(Xd), "probit")
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
        out.append(_predictive_one(parent, times, data, jnp.asarray(Xnew, f), jnp.asarray(h["c"], f),
                                   jnp.asarray(h["alpha"], f), jnp.asarray(h["beta"], f), s2, int(num_time_samples), V))
    out = jnp.stack(out)
    return np.asarray(jax.scipy.special.logsumexp(out, axis=0) - jnp.log(out.shape[0]))
