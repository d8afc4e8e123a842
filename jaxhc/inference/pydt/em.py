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
iteration makes one move and runs EM on the (three) best trees it proposes. The paper's move
takes a tree from the K-best list, detaches a random subtree, scores every re-attachment
point and inserts the EM results into the list. The score of a re-attachment is the exact log
joint of the candidate at its times: ``log p(X_rest) + log Z_s + log N(mu_s; E[x_new | X_rest],
(Var[x_new | X_rest] + v_s + sigma2 (t_s - t_new)) I)`` (``mu_s, v_s`` the subtree's upward
message, ``Z_s`` its own normaliser, ``x_new`` the attachment location, whose marginal follows
from the E-step of the remaining tree, a Brownian bridge on a segment) plus Eq. 9 + 11 of the
candidate, computed for all candidates at once from the changes along the root path. Two
greedy moves act on the best tree and are kept only if EM raises the best bound: *regraft*
(every subtree's best re-attachment elsewhere; EM on the subtrees whose regraft scores
highest) and *collapse* (a branch point folded into its parent, so sibling branch points merge
into one multifurcation; scored by the exact bound at the current times). Restarts repeat the
search from other initial trees and keep the highest bound.

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
from typing import NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.tree_utils as otu
from jax.scipy.special import digamma, gammaln, log_ndtr

from .mcmc import (
    FREE,
    PYDTPriors,
    PYDTSamples,
    _check_count,
    _check_X,
    _harmonic_table,
    _log_branch_prod,
    _messages,
    _order,
    _subtree_mask,
    _up_counts,
    check_hyperparameters,
    check_key,
    check_priors,
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
      trace: ``[num_iters + 1]`` best bound after the initial tree and each iteration, of the
        returned restart (shorter if a search without ``"reattach"`` stopped early).
      X: the data (for `pydt_predictive_logpdf`; the bits under probit).
      likelihood: ``"gaussian"`` or ``"probit"``.
      k_best_sites: probit: the `EPSites` of each K-best tree (at its final times); else
        ``None``.
      restart_bounds: ``[num_restarts]`` the best bound each restart reached (``log_evidence``
        is their maximum).
      move_trace: the returned restart's moves, one ``(move, best bound before, best bound
        after)`` per iteration (``trace[i + 1]`` is iteration ``i``'s "after").
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
    restart_bounds: Optional[np.ndarray] = None
    move_trace: Optional[list] = None


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


def _bound_extra(n_edges, n_int, D, hyper, priors, learn, learn_sigma2=True):
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
        out = (out + 0.5 * D * n_edges * (elog_lam - jnp.log(hyper.prec_shape / hyper.prec_rate))
               - _kl_gamma(hyper.prec_shape, hyper.prec_rate, priors.precision[0], priors.precision[1]))
    return out


def _bound_terms(parent, times, active, N, D, cnt, loglik, hyper, priors, learn, learn_sigma2=True):
    lp = _prior_from_counts(parent, times, active, cnt, N, hyper.c_mean, hyper.alpha, hyper.beta)
    n_edges = jnp.sum(active)
    n_int = jnp.sum(active & (jnp.arange(parent.shape[0]) >= N))
    return loglik + lp + _bound_extra(n_edges, n_int, D, hyper, priors, learn, learn_sigma2)


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
    c = hyper.c_mean

    def h_ab(a, bt):
        v = _prior_from_counts(parent, times, active, cnt, N, c, a, bt)
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
    by one. Equals `_prior_from_counts` of each candidate (tested)."""
    m = par_r.shape[0]
    f = times.dtype
    slots = jnp.arange(m)
    is_leaf = slots < N
    n_s = cnt_sub[s]
    t_s = times[s]
    s_branch = s >= N
    H = _harmonic_table(m, alpha, beta)
    Hn = lambda n: H[jnp.clip(n - 1, 0, m)]  # noqa: E731
    g = lambda n: gammaln(jnp.maximum(n, 1).astype(f) - beta)  # noqa: E731
    r = lambda n: gammaln(jnp.maximum(n, 1).astype(f) + alpha)  # noqa: E731
    A = lambda t: -c * jnp.log1p(-t)  # noqa: E731
    lg1mb = gammaln(1.0 - beta)
    # the remaining tree and the subtree (as a second root), less Eq. 11 of the edge into s
    ts_safe = jnp.where(s_branch, t_s, 0.0)
    eq11_s_root = jnp.where(s_branch, -A(ts_safe) * Hn(n_s), 0.0)
    base = _prior_from_counts(par_r.at[s].set(-1), times, act_r | insub, jnp.where(insub, cnt_sub, cnt_r), N, c,
                              alpha, beta) - eq11_s_root
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
    bp = (S + d_anc + _log_branch_prod(K + 1, alpha, beta) - _log_branch_prod(K, alpha, beta) + g(n_s) - lg1mb
          + eq11_s_bp)
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
    order_r = _order(par_r, times, act_r)
    par_s = par_r.at[s].set(-1)  # the subtree alone (its root closed against the origin)
    if diag:
        mean, var, cross, _, ll_r = _marginals_diag(par_r, times, act_r, X, V, sigma2, order_r)
        ll_s = _messages_diag(par_s, times, insub, X, V, sigma2, _order(par_s, times, insub))[2]
        vroot = v_s + sigma2 * t_s
        ll_s = ll_s + 0.5 * jnp.sum(jnp.log(2 * jnp.pi * vroot) + mu_s ** 2 / vroot)
    else:
        mean, var, cross, _, ll_r = _marginals(par_r, times, act_r, X, sigma2)
        ll_s = _messages(par_s, times, insub, X, sigma2)[3]
        vroot = v_s + sigma2 * t_s
        ll_s = ll_s + 0.5 * (D * jnp.log(2 * jnp.pi * vroot) + jnp.sum(mu_s ** 2) / vroot)
    cnt_r = _counts(par_r, times, act_r, N)
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
    lp = _attach_prior(par_r, times, act_r, insub, cnt_sub, cnt_r, s, t_new, hyper.c_mean, hyper.alpha, hyper.beta,
                       N)
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
        mu, v, _ = _messages_diag(parent, times, active, X, V, sigma2, _order(parent, times, active))
        Vp = jnp.concatenate([V, jnp.ones((m - N, X.shape[1]), X.dtype)])
        return jnp.where(leaf[:, None], Xp, mu), jnp.where(leaf[:, None], Vp, v)
    mu, v, _, _ = _messages(parent, times, active, X, sigma2)
    return jnp.where(leaf[:, None], Xp, mu), jnp.where(leaf, 0.0, v)


# ------------------------------------------------------------------------------------------
# search moves: each proposes n_em candidate trees; `_em_batch` runs EM on them
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
def _propose_reattach(key, parent, times, hyper, X, sites, allow_bp, n_em):
    """The paper's move (section 5.2): detach a random subtree and re-attach it at the ``n_em``
    best-scoring places (`_attach`: the log joint at the candidate's times). Returns
    ``(parents, times, scores)`` as `_top_candidates`."""
    N = X.shape[0]
    active = parent != FREE
    cand = active & (parent >= 0)
    s = jax.random.categorical(key, jnp.where(cand, 0.0, -jnp.inf)).astype(jnp.int32)
    cnt = _counts(parent, times, active, N)
    M, V = _pseudo_data(X, sites)
    mu_s, v_s = _subtree_message(parent, times, active, M, hyper.sigma2, s, V)
    par_r, act_r, insub, slot = _detach(parent, times, s)
    scores, build = _attach(par_r, times, act_r, insub, jnp.where(insub, cnt, 0), s, mu_s, v_s, slot, M, hyper,
                            allow_bp, V)
    top_scores, top = jax.lax.top_k(scores, n_em)
    pars, tims = jax.vmap(build)(top)
    ok = jnp.isfinite(top_scores)
    return jnp.where(ok[:, None], pars, parent[None, :]), jnp.where(ok[:, None], tims, times[None, :]), top_scores


@functools.partial(jax.jit, static_argnames=("learn", "learn_sigma2", "n_em"))
def _propose_regraft(parent, times, hyper, X, sites, priors, learn, learn_sigma2, allow_bp, n_em):
    """Best regraft: for every subtree, its best re-attachment elsewhere (`_attach` scores plus
    the bound's count terms: the exact bound of the candidate at its times); the ``n_em``
    subtrees whose best regraft scores highest. Returns ``(parents, times, scores)`` as
    `_top_candidates` (``scores``: the bound of each candidate at its times)."""
    N, D = X.shape
    m = parent.shape[0]
    slots = jnp.arange(m)
    active = parent != FREE
    cnt = _counts(parent, times, active, N)
    M, V = _pseudo_data(X, sites)
    mu_all, v_all = _all_subtree_messages(parent, times, active, M, hyper.sigma2, V)
    nonroot = active & (parent >= 0)

    def best_for(s):
        par_r, act_r, insub, slot = _detach(parent, times, s)
        scores, build = _attach(par_r, times, act_r, insub, jnp.where(insub, cnt, 0), s, mu_all[s], v_all[s], slot,
                                M, hyper, allow_bp, V)
        p = parent[s]
        sib = nonroot & (parent == p) & (slots != s)
        binary = jnp.sum(sib) == 1
        same = jnp.where(binary, jnp.argmax(sib), m + p)  # the place s was taken from: no move
        scores = scores.at[same].set(-jnp.inf)
        act = act_r | insub
        n_act = jnp.sum(act)
        n_int = jnp.sum(act & (slots >= N))
        extra = jnp.concatenate([
            jnp.full(m, _bound_extra(n_act + 1, n_int + 1, D, hyper, priors, learn, learn_sigma2)),
            jnp.full(m, _bound_extra(n_act, n_int, D, hyper, priors, learn, learn_sigma2))])
        scores = scores + extra
        j = jnp.argmax(scores)
        par, tim = build(j)
        return jnp.where(nonroot[s], scores[j], -jnp.inf), par, tim

    best, pars, tims = jax.vmap(best_for)(slots)
    return _top_candidates(best, pars, tims, parent, times, n_em)


@functools.partial(jax.jit, static_argnames=("learn", "learn_sigma2", "n_em"))
def _propose_collapse(parent, times, hyper, X, sites, priors, learn, learn_sigma2, n_em):
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
            ll = _messages(par, times, act, M, hyper.sigma2)[3]
        else:
            ll = _messages_diag(par, times, act, M, V, hyper.sigma2, _order(par, times, act))[2]
        cnt = _counts(par, times, act, N)
        L = _bound_terms(par, times, act, N, D, cnt, ll, hyper, priors, learn, learn_sigma2)
        return jnp.where(cand[k] & ~jnp.isnan(L), L, -jnp.inf), par

    scores, pars = jax.vmap(collapse)(slots)
    return _top_candidates(scores, pars, jnp.broadcast_to(times, pars.shape), parent, times, n_em)


@functools.partial(jax.jit, static_argnames=("learn", "max_em", "max_lbfgs", "conf"))
def _em_batch(pars, tims, ok, hyper, X, sites, priors, learn, learn_ab, max_em, tol_em, max_lbfgs, sigma2_max,
              conf=None):
    """EM on each candidate tree (vmapped), all from the source tree's hyperparameters (and EP
    sites). Gaussian: ``X`` the data, ``sites=None``; probit: ``X`` the signs ``2 Y - 1``.
    Returns ``(times, hypers, sites or None, bounds)``; ``bounds`` is ``-inf`` where not ``ok``."""
    if sites is None:
        def run(par, tim):
            return _em(par, tim, hyper, X, priors, learn, learn_ab, max_em, tol_em, max_lbfgs, sigma2_max)

        tims, hypers, Ls = jax.vmap(run)(pars, tims)
        out_sites = None
    else:
        def run(par, tim):
            return _em_probit(par, tim, hyper, X, sites, priors, learn, learn_ab, max_em, tol_em, max_lbfgs, conf)

        tims, hypers, out_sites, Ls = jax.vmap(run)(pars, tims)
    return tims, hypers, out_sites, jnp.where(ok, Ls, -jnp.inf)


@jax.jit
def _initial_structure(key, X, hyper, allow_bp, sites=None):
    """Sequential attachment of the points (random order), each at its best-scoring place
    (times: segment midpoints). ``sites=None``: Gaussian ``X``; else probit (``X`` the signs,
    the points attached as the pseudo-observations of ``sites``). Returns ``(parent, times)``."""
    N = X.shape[0]
    m = 2 * N - 1
    f = X.dtype
    slots = jnp.arange(m)
    perm = jax.random.permutation(key, N)
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
        scores, build = _attach(parent, times, act, onehot, onehot.astype(jnp.int32), s, M[s], v_s,
                                slot, M, hyper, allow_bp, V)
        return build(jnp.argmax(scores))

    return jax.lax.fori_loop(2, N, body, (parent, times))


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


MOVES = ("reattach", "regraft", "collapse")


def _check_init(init, N):
    """``init = (parent, times)`` as fixed-capacity ``[2N - 1]`` arrays (a `PYDTEMResult`'s
    ``parent, times``) or compact ones (leaves ``0..N-1`` first, e.g. a `ParentTree`'s ``parent``
    and ``heights``), checked to be a PYDT tree; returns the fixed-capacity arrays."""
    try:
        parent, times = init
    except (TypeError, ValueError):
        raise ValueError("init must be a pair (parent, times)") from None
    parent = np.asarray(parent)
    times = np.asarray(times, dtype=jnp.result_type(float))
    m = 2 * N - 1
    if parent.ndim != 1 or times.shape != parent.shape or not N < parent.size + 1 <= m + 1:
        raise ValueError(f"init: parent and times must be 1-D of equal length in [N + 1, 2N - 1] = [{N + 1}, {m}], "
                         f"got shapes {parent.shape}, {times.shape}")
    if not np.issubdtype(parent.dtype, np.integer):
        raise ValueError("init: parent must hold integers")
    parent = np.concatenate([parent.astype(np.int32), np.full(m - parent.size, FREE, np.int32)])
    times = np.concatenate([times, np.zeros(m - times.size, times.dtype)])
    act = parent != FREE
    if not np.all(act[:N]):
        raise ValueError("init: every leaf 0..N-1 needs a parent")
    if np.sum(parent[act] == -1) != 1:
        raise ValueError("init: the tree needs exactly one root (parent -1)")
    bad = act & (parent >= 0) & ((parent >= m) | ~act[np.clip(parent, 0, m - 1)] | (parent < N))
    if np.any(bad) or np.any(parent[act] < -1):
        raise ValueError("init: parents must be active internal nodes (indices N..2N-2) or -1")
    if not np.allclose(times[:N], 1.0):
        raise ValueError("init: leaf times must be 1")
    kids = np.bincount(parent[act & (parent >= 0)], minlength=m)
    internal = act & (np.arange(m) >= N)
    if np.any(kids[internal] < 2):
        raise ValueError("init: every internal node needs at least two children")
    if not np.all((times[internal] > 0) & (times[internal] < 1)):
        raise ValueError("init: internal times must lie in (0, 1)")
    tp = np.where(parent >= 0, times[np.clip(parent, 0, m - 1)], 0.0)
    if not np.all(times[act] > tp[act]):
        raise ValueError("init: times must increase from parent to child")
    return parent, times


def pydt_em(key, X, *, c=1.0, alpha=0.5, beta=0.2, sigma2=None, likelihood: str = "gaussian", num_iters: int = 100,
            k_best: int = 10, learn_hyper: bool = True, learn_alpha_beta: Optional[bool] = None,
            priors: PYDTPriors = PYDTPriors(), num_em_candidates: int = 3, max_em: int = 20, tol_em: float = 1e-4,
            max_lbfgs: int = 100, sigma2_max: Optional[float] = None, ep: EPConfig = EPConfig(),
            moves: Sequence[str] = MOVES, num_restarts: int = 1, init=None,
            progress_bar: bool = True) -> PYDTEMResult:
    """Greedy Bayesian EM search over PYDT trees (section 5.2), Gaussian or probit observations.

    Each search starts from a tree built by sequential attachment of the points (random order,
    each at its best-scoring place) and runs ``num_iters`` iterations; each iteration makes one
    move and runs EM on the ``num_em_candidates`` best trees it proposes:

    * ``"reattach"`` (the paper's move): detach a random subtree of a random tree of the
      K-best list, re-attach it at the best-scoring places; all candidates enter the K-best
      list (which keeps the ``k_best`` highest bounds).
    * ``"regraft"``: on the best tree, every subtree's best re-attachment elsewhere (scored by
      the exact bound at the current times); the subtrees whose regraft scores highest.
    * ``"collapse"``: on the best tree, fold a branch point into its parent (its children join
      the parent's: sibling branch points merge into one multifurcation), scored by the exact
      bound at the current times.

    ``"regraft"`` and ``"collapse"`` are accepted only when EM takes a candidate above the best
    bound (by more than ``tol_em``). They are deterministic, so each runs once per best tree:
    iteration ``i`` tries the moves in the order of ``moves`` rotated by ``i`` and makes the
    first that is ``"reattach"`` or has not yet been tried on the current best tree. With
    ``"reattach"`` left out the search stops early once neither greedy move improves.

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
        are learned as in the Gaussian case. The search scores candidates with the site
        means / variances as the leaf data.
      num_iters: search iterations per restart (one move each).
      k_best: length of the K-best list.
      learn_hyper: learn ``q(c)``, ``q(1/sigma2)`` (variational Gamma; not under probit) and,
        unless DDT, ``alpha``, ``beta`` (golden-section search).
      learn_alpha_beta: override for ``alpha, beta`` alone (default: ``learn_hyper``; never
        for the DDT).
      priors: Gamma priors on ``c`` and ``1/sigma2``.
      num_em_candidates: candidate trees per iteration that get EM (the paper: 3).
      max_em, tol_em, max_lbfgs: EM iterations per tree, its stopping tolerance on the bound,
        L-BFGS iterations per M-step.
      sigma2_max: upper limit of the learned ``sigma2`` (Gaussian; default: the mean column
        variance of ``X``, the leaf variance the model implies for ``sigma2``). Without it the
        bound is unbounded when ``sigma2`` is learned: all times -> 1 with ``sigma2 (1 - t)``
        fixed gains ``sum_b (1 - <c> J_b) log(1/eps)`` from Eq. 14's singularity at ``t = 1``
        (``<c> J_b < 1``) and loses only ``D/2 log(1/eps)`` at the root edge, so MAP times
        collapse; the clip is the constrained coordinate maximum, so the bound stays monotone.
      ep: `EPConfig` (probit only): sweeps, tolerance, damping.
      moves: the moves the search makes, a non-empty subset of ``("reattach", "regraft",
        "collapse")`` (default: all; ``("reattach",)`` is the paper's search). The DDT never
        collapses (its trees are binary).
      num_restarts: independent searches, each from its own initial tree (restart 0 from
        ``key``, restart ``r`` from ``jax.random.fold_in(key, r)``), each of ``num_iters``
        iterations (the cost grows linearly); the result is the restart with the highest
        bound, its K-best list merged with the others'. Default 1: a single search, as in the
        paper.
      init: optional start tree ``(parent, times)`` for restart 0 instead of sequential
        attachment: fixed-capacity ``[2N - 1]`` arrays (a result's ``parent, times``) or compact
        ones with leaves ``0..N-1`` first (a `ParentTree`'s ``parent`` and ``heights``). EM runs
        on it first, so ``num_iters=0`` fits times and hyperparameters to a given structure.
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
    num_iters = _check_count(num_iters, "num_iters", 0)
    k_best = _check_count(k_best, "k_best", 1)
    num_restarts = _check_count(num_restarts, "num_restarts", 1)
    num_em_candidates = _check_count(num_em_candidates, "num_em_candidates", 1)
    max_em = _check_count(max_em, "max_em", 0)
    max_lbfgs = _check_count(max_lbfgs, "max_lbfgs", 0)
    for name, v in (("tol_em", tol_em),) + ((("sigma2_max", sigma2_max),) if sigma2_max is not None else ()):
        try:
            fv = float(v)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be a number, got {v!r}") from None
        if not np.isfinite(fv) or fv < 0 or (name == "sigma2_max" and fv == 0):
            raise ValueError(f"{name} must be a finite number {'> 0' if name == 'sigma2_max' else '>= 0'}, got {v!r}")
    check_key(key)
    if isinstance(moves, str):
        moves = (moves,)
    moves = tuple(moves)
    if not moves or any(mv not in MOVES for mv in moves) or len(set(moves)) != len(moves):
        raise ValueError(f"moves must be a non-empty subset of {MOVES}, got {moves}")
    init_tree = None if init is None else _check_init(init, N)
    conf = None
    if probit:
        conf = EPConfig(int(ep.max_sweeps), float(ep.tol), float(ep.damping))
        if conf.max_sweeps < 1 or not conf.tol >= 0 or not 0.0 < conf.damping <= 1.0:
            raise ValueError(f"ep needs max_sweeps >= 1, tol >= 0 and damping in (0, 1], got {ep}")
    ddt = alpha == 0.0 and beta == 0.0
    if ddt:
        moves = tuple(mv for mv in moves if mv != "collapse") or ("reattach",)
    learn = bool(learn_hyper)
    learn_ab = (learn if learn_alpha_beta is None else bool(learn_alpha_beta)) and not ddt
    allow_bp = not ddt
    pri = check_priors(priors)
    Xj = jnp.asarray(2.0 * X - 1.0) if probit else jnp.asarray(X)  # probit: the signs
    hyper0 = em_init_hyper(X, c, alpha, beta, sigma2)
    if probit:
        s2max = float(hyper0.sigma2)  # unused: sigma2 is fixed
    else:
        s2max = float(sigma2_max) if sigma2_max is not None else max(float(np.mean(np.var(X, axis=0))),
                                                                       float(hyper0.sigma2))
    n_em = int(num_em_candidates)
    em_args = (pri, learn, learn_ab, int(max_em), float(tol_em), int(max_lbfgs), s2max, conf)
    ctx = _SearchContext(Xj, N, n_em, k_best, float(tol_em), pri, learn, not probit, allow_bp, em_args)

    bar = None
    if progress_bar:
        from tqdm.auto import tqdm
        bar = tqdm(total=num_iters * num_restarts, desc="pydt_em")
    runs = []
    try:
        for r in range(num_restarts):
            kr = key if r == 0 else jax.random.fold_in(key, r)
            runs.append(_search(kr, ctx, hyper0, probit, moves, num_iters, init_tree if r == 0 else None, bar))
    finally:
        if bar is not None:
            bar.close()
    restart_bounds = np.array([max(e[0] for e in run["entries"].values()) for run in runs])
    best_run = runs[int(np.argmax(restart_bounds))]
    merged = dict(best_run["entries"])
    for run in runs:  # the K-best list over all restarts (highest bounds, one entry per structure)
        for sig, e in run["entries"].items():
            if sig not in merged or merged[sig][0] < e[0]:
                merged[sig] = e
    items = sorted(merged.values(), key=lambda e: -e[0])[:k_best]
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
        trace=np.asarray(best_run["trace"]), X=np.asarray(X), likelihood=likelihood,
        k_best_sites=[e[4] for e in items] if probit else None,
        restart_bounds=restart_bounds, move_trace=best_run["move_trace"])


class _SearchContext(NamedTuple):
    X: jax.Array  # the data (probit: the signs)
    N: int
    n_em: int
    k_best: int
    tol: float
    priors: PYDTPriors
    learn: bool
    learn_sigma2: bool
    allow_bp: bool
    em_args: tuple  # the static tail of `_em_batch`'s arguments


def _search(key, ctx: _SearchContext, hyper, probit, moves, num_iters, init_tree, bar):
    """One restart: initial tree, EM, then ``num_iters`` moves. Returns the K-best entries
    (``signature -> (L, parent, times, hyper, sites)``), the best-bound trace and the moves."""
    N, n_em = ctx.N, ctx.n_em
    jt = lambda t: jax.tree_util.tree_map(jnp.asarray, t)  # noqa: E731
    k_init, k_search = jax.random.split(key)
    sites = _ep_prior_sites(ctx.X, hyper.sigma2) if probit else None
    if init_tree is None:
        parent, times = _initial_structure(k_init, ctx.X, hyper, ctx.allow_bp, sites)
    else:
        parent, times = jnp.asarray(init_tree[0]), jnp.asarray(init_tree[1], ctx.X.dtype)
    # EM on the start tree: `_em_batch` on n_em copies (one compiled EM program for the search)
    pars = jnp.broadcast_to(parent, (n_em,) + parent.shape)
    tims = jnp.broadcast_to(times, (n_em,) + times.shape)
    ok = jnp.arange(n_em) == 0
    tims, hyps, sits, Ls = jax.device_get(_em_batch(pars, tims, ok, hyper, ctx.X, sites, *ctx.em_args))
    first = lambda a: a[0]  # noqa: E731
    entries = {}

    def insert(L, par, tim, hyp, sit):
        L = float(L)
        if not np.isfinite(L):
            return
        sig = _signature(par, N)
        if sig in entries and entries[sig][0] >= L:
            return
        entries[sig] = (L, np.asarray(par), np.asarray(tim), jax.device_get(hyp), jax.device_get(sit))
        if len(entries) > ctx.k_best:
            worst = min(entries, key=lambda k: entries[k][0])
            del entries[worst]

    def best_entry():
        return max(entries.values(), key=lambda e: e[0])

    insert(Ls[0], np.asarray(parent), tims[0], jax.tree_util.tree_map(first, hyps),
           None if sits is None else jax.tree_util.tree_map(first, sits))
    if not entries:
        raise ValueError(
            f"pydt_em: the EM bound of the start tree is not finite; X's entries reach "
            f"{float(np.max(np.abs(np.asarray(ctx.X)))):.3g}: data far from unit scale (or a sigma2 / sigma2_max "
            f"far from the data's variance) overflow the EM's float64 arithmetic: standardise X's columns")
    trace = [best_entry()[0]]
    move_trace = []
    k_search, k_pick = jax.random.split(k_search)
    rng = np.random.default_rng(int(jax.random.randint(k_pick, (), 0, 2 ** 31 - 1)))
    tried = set()  # greedy moves already made on the current best tree (deterministic: no retry)
    best_id = (_signature(best_entry()[1], N), best_entry()[0])
    for it in range(num_iters):
        rot = it % len(moves)
        order = moves[rot:] + moves[:rot]
        move = next((mv for mv in order if mv == "reattach" or mv not in tried), None)
        if move is None:  # greedy moves only, and none improves the best tree: a local optimum
            break
        before = trace[-1]
        if move == "reattach":
            items = sorted(entries.values(), key=lambda e: -e[0])
            _, par, tim, hyp, sit = items[int(rng.integers(len(items)))]
            sit = None if sit is None else jt(sit)
            pars, tims, scores = _propose_reattach(jax.random.fold_in(k_search, it), jnp.asarray(par), jnp.asarray(tim),
                                               jt(hyp), ctx.X, sit, ctx.allow_bp, n_em)
        else:
            _, par, tim, hyp, sit = best_entry()
            sit = None if sit is None else jt(sit)
            if move == "regraft":
                pars, tims, scores = _propose_regraft(jnp.asarray(par), jnp.asarray(tim), jt(hyp), ctx.X, sit, ctx.priors,
                                                  ctx.learn, ctx.learn_sigma2, ctx.allow_bp, n_em)
            else:
                pars, tims, scores = _propose_collapse(jnp.asarray(par), jnp.asarray(tim), jt(hyp), ctx.X, sit,
                                                   ctx.priors, ctx.learn, ctx.learn_sigma2, n_em)
        ok = jnp.isfinite(scores)
        if bool(jnp.any(ok)):
            tims, hyps, sits, Ls = jax.device_get(_em_batch(pars, tims, ok, jt(hyp), ctx.X, sit, *ctx.em_args))
            pars = np.asarray(pars)
            pick = lambda j: (lambda a: a[j])  # noqa: E731
            if move == "reattach":
                for j in range(len(Ls)):
                    insert(Ls[j], pars[j], tims[j], jax.tree_util.tree_map(pick(j), hyps),
                           None if sits is None else jax.tree_util.tree_map(pick(j), sits))
            else:
                j = int(np.argmax(Ls))
                if np.isfinite(Ls[j]) and Ls[j] > before + ctx.tol:
                    insert(Ls[j], pars[j], tims[j], jax.tree_util.tree_map(pick(j), hyps),
                           None if sits is None else jax.tree_util.tree_map(pick(j), sits))
        if move != "reattach":
            tried.add(move)
        trace.append(best_entry()[0])
        move_trace.append((move, float(before), float(trace[-1])))
        now = (_signature(best_entry()[1], N), best_entry()[0])
        if now != best_id:  # a new best tree: the greedy moves may improve it again
            best_id = now
            tried.clear()
        if bar is not None:
            bar.update(1)
            bar.set_postfix(bound=f"{trace[-1]:.2f}")
    return dict(entries=entries, trace=trace, move_trace=move_trace)


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
