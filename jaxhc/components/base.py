"""Conjugate component families: sufficient statistics, merge, log marginal, predictive.

Every family is an ``eqx.Module`` whose fields are its hyperparameters, so ``jax.grad``
reaches them. The common interface (all functions broadcast over leading batch axes):

- ``stats(X)``: sufficient statistics of the rows of ``X [..., m, d]`` (reduced over the
  row axis ``-2``); ``leaf_stats(X)`` gives one set of statistics per row ``[n, ...]``.
- ``merge(s1, s2)``: statistics of the union of two disjoint data sets.
- ``log_marginal(s)``: ``log p(D | H1) = log int prod_i p(x_i | theta) p(theta) dtheta``.
- ``log_predictive(x, s)``: ``log p(x | D)`` for a new row ``x [..., d]``.
- ``validate_data(X)``: eager check of a data matrix (shape, domain, NaN) with clear errors.
- ``unconstrain()`` / ``constrain(u)``: a bijection between hyperparameters and an
  unconstrained pytree of reals (used by gradient-based hyperparameter learning).
- ``from_data(X)``: the empirical defaults ("fit a single model to the whole data set",
  Heller & Ghahramani 2005, Sec. 4).

The statistics of the empty set have log marginal 0, so padding is harmless.
"""
from __future__ import annotations

import abc
from typing import Any, ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln, multigammaln

from ._internal.validation import real_array

__all__ = [
    "Component",
    "GaussianStats",
    "CountStats",
    "MultinomialStats",
    "NormalInverseWishart",
    "NormalKnownCov",
    "NormalGamma",
    "DiagGaussianStats",
    "BetaBernoulli",
    "BetaBinomial",
    "DirichletMultinomial",
]

_LOG_PI = float(np.log(np.pi))
_LOG_2PI = float(np.log(2 * np.pi))


def betaln(a, b):
    """``log B(a, b)`` as a sum of ``gammaln`` (``jax.scipy.special.betaln`` is off by up to
    ~2e-8 for arguments in the hundreds; this agrees with scipy to ~1e-14)."""
    return gammaln(a) + gammaln(b) - gammaln(a + b)


def _concrete(*xs) -> bool:
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(xs))


def _float_dtype():
    return jnp.zeros(()).dtype if not jax.config.jax_enable_x64 else jnp.float64


def _as_data(X, name="X") -> np.ndarray:
    """Host float array, 2-D, non-empty; raises clear errors."""
    arr = real_array(X, name, "[n, d]")
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D [n_points, n_features], got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name} must be non-empty, got shape {arr.shape}")
    return arr.astype(np.float64) if arr.dtype == bool else arr


def _data_variance(X, name="X") -> np.ndarray:
    """Per-column variance for the empirical priors (1 for constant columns or one row);
    a ValueError where it overflows (entries beyond ~1e154)."""
    with np.errstate(over="ignore", invalid="ignore"):
        var = X.var(axis=0) if X.shape[0] > 1 else np.ones(X.shape[1])
    if not np.all(np.isfinite(var)):
        raise ValueError(f"{name}'s per-column variance overflows float64 (entries up to {np.max(np.abs(X)):.3g}): "
                         f"rescale {name}, e.g. standardise its columns")
    return np.where(var > 0, var, 1.0)


def _check_finite(arr, name, allow_nan: bool):
    if allow_nan:
        if np.any(np.isinf(arr)):
            raise ValueError(f"{name} contains inf values")
    elif not np.all(np.isfinite(arr)):
        raise ValueError(
            f"{name} contains NaN or inf values; this component does not support missing data "
            "(use BetaBernoulli / BetaBinomial for data with missing entries, or impute)"
        )


class Component(eqx.Module):
    """Base class of the conjugate component families (see the module docstring)."""

    supports_missing: ClassVar[bool] = False

    # -- to be provided by subclasses ---------------------------------------------------
    @abc.abstractmethod
    def stats(self, X):
        """See the module docstring."""

    @abc.abstractmethod
    def merge(self, s1, s2):
        """See the module docstring."""

    @abc.abstractmethod
    def log_marginal(self, s):
        """See the module docstring."""

    @abc.abstractmethod
    def unconstrain(self):
        """See the module docstring."""

    @abc.abstractmethod
    def constrain(self, u) -> "Component":
        """Inverse of ``unconstrain``: a component of the same family."""

    @property
    @abc.abstractmethod
    def dim(self) -> int:
        """Number of data columns ``d``."""

    def _check_domain(self, arr, name):
        pass

    def prior_scale(self):
        """Typical within-cluster standard deviation of each feature under the prior (a host
        array ``[d]``), or ``None`` for families without one (counts). Used in error
        messages that compare the prior's scale with the data's."""
        return None

    def count_cache(self, n_max: int):
        """Optional lookup tables indexed by point counts ``0 .. n_max`` that make
        ``log_marginal(s, cache)`` cheaper (lgamma terms depend only on counts). ``None``
        when the family has none. The tables are differentiable in the hyperparameters."""
        return None

    # -- shared -------------------------------------------------------------------------
    def leaf_stats(self, X):
        """Statistics of every row on its own, leading axis ``n``."""
        return self.stats(jnp.asarray(X)[..., None, :])

    def empty_stats(self, batch_shape=()):
        """Statistics of the empty set (log marginal 0)."""
        X = jnp.zeros(tuple(batch_shape) + (0, self.dim), dtype=_float_dtype())
        return self.stats(X)

    def log_predictive(self, x, s):
        """``log p(x | D)`` of new rows ``x [..., d]`` given stats ``s`` of ``D`` (broadcast)."""
        sx = self.stats(jnp.asarray(x)[..., None, :])
        return self.log_marginal(self.merge(s, sx)) - self.log_marginal(s)

    def predictive_cache(self, s):
        """Precomputed per-cluster quantities for repeated predictive evaluation (default:
        the statistics themselves); used with `log_predictive_cached`."""
        return s

    def log_predictive_cached(self, x, cache):
        """``log p(x | D)`` from `predictive_cache` output (same value as `log_predictive`)."""
        return self.log_predictive(x, cache)

    def validate_data(self, X, name: str = "X") -> np.ndarray:
        """Checks ``X`` eagerly and returns it as a host float array ``[n, d]``."""
        arr = _as_data(X, name)
        if arr.shape[1] != self.dim:
            raise ValueError(
                f"{name} has {arr.shape[1]} columns but {type(self).__name__} was built for "
                f"{self.dim} dimensions"
            )
        _check_finite(arr, name, self.supports_missing)
        self._check_domain(arr, name)
        return arr


# ==========================================================================================
# Gaussian families
# ==========================================================================================
class GaussianStats(NamedTuple):
    """Sufficient statistics of Gaussian data: count ``n [...]``, mean ``[..., d]``,
    scatter about the mean ``[..., d, d]``."""

    n: jax.Array
    mean: jax.Array
    scatter: jax.Array


def _gauss_stats(X) -> GaussianStats:
    X = jnp.asarray(X, dtype=jnp.result_type(X, _float_dtype()))
    m = X.shape[-2]
    n = jnp.full(X.shape[:-2], m, dtype=X.dtype)
    mean = jnp.sum(X, axis=-2) / max(m, 1)
    c = X - mean[..., None, :]
    scatter = jnp.einsum("...mi,...mj->...ij", c, c)
    return GaussianStats(n, mean, scatter)


def _gauss_merge(s1: GaussianStats, s2: GaussianStats) -> GaussianStats:
    n = s1.n + s2.n
    safe = jnp.where(n > 0, n, 1.0)
    w1 = (s1.n / safe)[..., None]
    w2 = (s2.n / safe)[..., None]
    mean = w1 * s1.mean + w2 * s2.mean
    diff = s1.mean - s2.mean
    coef = (s1.n * s2.n / safe)[..., None, None]
    scatter = s1.scatter + s2.scatter + coef * diff[..., :, None] * diff[..., None, :]
    return GaussianStats(n, mean, scatter)


def _jaxlib_deadlocks() -> bool:
    """True for jaxlib 0.10.x, whose CPU runtime deadlocks at random when two batched LAPACK
    Cholesky calls of one program run at once (BHC's merge loop froze in about 1 of 4 fresh
    processes for NIW data with d > 10; ``benchmarks/deadlock_repro.py``).
    pyproject.toml excludes these releases; if one is installed anyway we warn and avoid
    LAPACK in `_logdet_pd`."""
    import jaxlib

    return str(getattr(jaxlib, "__version__", "")).startswith("0.10.")


_XLA_LOGDET = _jaxlib_deadlocks()
if _XLA_LOGDET:
    import warnings

    warnings.warn(
        "jaxlib 0.10.x deadlocks at random in batched LAPACK calls on CPU; jaxhc avoids LAPACK in its "
        "Gaussian log marginals on this version (slower for d > 10). Install a supported JAX: "
        "pip install 'jax!=0.10.*' 'jaxlib!=0.10.*'",
        RuntimeWarning,
        stacklevel=2,
    )


def _logdet_elimination_loop(A):
    """``(log-determinant, pivots)`` of positive definite ``[..., d, d]`` by Gaussian elimination in a
    ``fori_loop`` of XLA ops (no LAPACK call, so no jaxlib 0.10 deadlock; ~3x the time of a
    batched Cholesky at d = 30)."""
    d = A.shape[-1]
    io = jnp.arange(d)

    def body(k, carry):
        A, out, pivs = carry
        piv = A[..., k, k]
        col = jnp.where(io > k, A[..., :, k], 0.0)
        A = A - col[..., :, None] * (col[..., None, :] / piv[..., None, None])
        return A, out + jnp.log(piv), jnp.where(io == k, piv[..., None], pivs)

    _, out, piv = jax.lax.fori_loop(
        0, d, body, (A, jnp.zeros(A.shape[:-2], A.dtype), jnp.zeros(A.shape[:-1], A.dtype)))
    return out, piv


# `_logdet_pd` returns NaN where a pivot is below ``_PIVOT_TOL * eps`` times its diagonal entry
_PIVOT_TOL = 4.0


def _logdet_pd(A):
    """log-determinant of positive definite matrices ``[..., d, d]``.

    For ``d <= 10`` an unrolled elimination vectorised over the batch (faster than a
    batched LAPACK call on CPU); otherwise a Cholesky factorisation (an elimination loop
    on jaxlib 0.10, see `_jaxlib_deadlocks`)."""
    d = A.shape[-1]
    tol = _PIVOT_TOL * jnp.finfo(A.dtype).eps
    diag = jnp.diagonal(A, axis1=-2, axis2=-1)
    if d > 10 and _XLA_LOGDET:
        out, piv = _logdet_elimination_loop(A)
    elif d <= 10:
        out = jnp.zeros(A.shape[:-2], A.dtype)
        pivs = []
        for _ in range(d):
            piv = A[..., 0, 0]
            pivs.append(piv)
            out = out + jnp.log(piv)
            col = A[..., 1:, 0]
            A = A[..., 1:, 1:] - col[..., :, None] * (col[..., None, :] / piv[..., None, None])
        piv = jnp.stack(pivs, -1)
    else:
        L = jnp.linalg.cholesky(A)
        ld = jnp.diagonal(L, axis1=-2, axis2=-1)
        out, piv = 2.0 * jnp.sum(jnp.log(ld), axis=-1), ld * ld
    # a pivot below eps * its diagonal entry has lost every digit to cancellation (condition
    # number beyond ~1 / eps, e.g. data 1e8 times the prior's scale): NaN, never a finite
    # value made of rounding error (callers turn it into an error that names the cause)
    lost = jnp.any(~(piv > tol * diag), axis=-1)
    return jnp.where(lost, jnp.nan, out)


def _lookup(table, n):
    """``table[n]`` for integer-valued float counts ``n`` (any batch shape)."""
    return jnp.take(table, jnp.round(n).astype(jnp.int32), axis=0, mode="clip")


def _as_matrix(x, d, name):
    x = jnp.asarray(x, dtype=_float_dtype())
    if x.ndim == 0:
        return x * jnp.eye(d, dtype=x.dtype)
    if x.ndim == 1:
        if x.shape[0] != d:
            raise ValueError(f"{name}: expected {d} diagonal entries, got shape {x.shape}")
        return jnp.diag(x)
    if x.shape != (d, d):
        raise ValueError(f"{name}: expected shape [{d}, {d}], got {x.shape}")
    return x


def _check_pd(A, name):
    if _concrete(A):
        a = np.asarray(A)
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name} must be finite")
        if not np.allclose(a, a.T, rtol=1e-8, atol=1e-10 * max(1.0, np.abs(a).max())):
            raise ValueError(f"{name} must be symmetric")
        if np.linalg.eigvalsh(a).min() <= 0:
            raise ValueError(f"{name} must be positive definite")


# Unconstrained parameterisations (``unconstrain`` / ``constrain``) are total: every real
# vector maps to a valid component, so gradient steps can never produce a component whose
# constructor refuses it. Positive scalars are ``exp(u)`` with ``u`` clipped to
# [-_LOG_BOUND, _LOG_BOUND]; positive definite matrices are a log-Cholesky factor plus a
# relative floor on the spectrum, ``A = L L^T + _PD_FLOOR * tr(L L^T) / d * I``, so that A
# stays numerically positive definite (condition number below ~1 / _PD_FLOOR) whatever L is.
_LOG_BOUND = 30.0
_PD_FLOOR = 1e-8


def _pos(u):
    """``exp(u)`` with ``u`` clipped to ``[-_LOG_BOUND, _LOG_BOUND]``: always positive and finite."""
    return jnp.exp(jnp.clip(u, -_LOG_BOUND, _LOG_BOUND))


def _chol_params(A):
    """Inverse of `_chol_unparams`: the log-Cholesky factor of ``A - floor * I``. A matrix
    with a condition number beyond ~1 / _PD_FLOOR maps to one whose smallest eigenvalues are
    raised to the floor (the round trip is exact otherwise)."""
    d = A.shape[-1]
    floor = _PD_FLOOR * jnp.trace(A) / (d * (1.0 + _PD_FLOOR))
    lam_min = jnp.linalg.eigvalsh(A)[0]
    L = jnp.linalg.cholesky(A - jnp.minimum(floor, 0.5 * lam_min) * jnp.eye(d, dtype=A.dtype))
    diag = jnp.log(jnp.diagonal(L))
    return L * (1 - jnp.eye(d)) + jnp.diag(diag)


def _chol_unparams(U):
    """``L L^T + _PD_FLOOR tr(L L^T) / d I`` with ``L = tril(U, -1) + diag(exp(diag U))``
    (entries clipped so that nothing overflows): positive definite for every real ``U``."""
    d = U.shape[-1]
    big = float(np.exp(_LOG_BOUND))
    low = jnp.clip(jnp.tril(U, -1), -big, big)
    L = low + jnp.diag(_pos(jnp.diagonal(U)))
    A = L @ L.T
    floor = _PD_FLOOR * jnp.sum(L * L) / d
    return 0.5 * (A + A.T) + floor * jnp.eye(d, dtype=A.dtype)


class NormalInverseWishart(Component):
    """Multivariate Normal data with unknown mean and covariance under a NIW prior.

    ``Sigma ~ InvWishart(dof, scale)``, ``mu | Sigma ~ N(mean, Sigma / kappa)``.

    Args:
      mean: prior mean ``[d]``.
      kappa: prior pseudo-count of the mean (> 0).
      dof: degrees of freedom (> d - 1).
      scale: inverse-Wishart scale, ``[d, d]`` positive definite, ``[d]`` (diagonal) or a
        scalar (times the identity).
    """

    mean: jax.Array
    kappa: jax.Array
    dof: jax.Array
    scale: jax.Array

    def __init__(self, mean, kappa=1.0, dof=None, scale=1.0):
        mean = jnp.asarray(mean, dtype=_float_dtype())
        if mean.ndim != 1:
            raise ValueError(f"mean must be a vector [d], got shape {mean.shape}")
        d = mean.shape[0]
        self.mean = mean
        self.kappa = jnp.asarray(kappa, dtype=mean.dtype)
        self.dof = jnp.asarray(d + 1.0 if dof is None else dof, dtype=mean.dtype)
        self.scale = _as_matrix(scale, d, "scale")

    def __check_init__(self):
        d = self.mean.shape[0]
        if _concrete(self.kappa, self.dof):
            if not (np.ndim(self.kappa) == 0 and float(self.kappa) > 0 and np.isfinite(float(self.kappa))):
                raise ValueError(f"kappa must be a positive scalar, got {self.kappa}")
            if not (np.ndim(self.dof) == 0 and float(self.dof) > d - 1 and np.isfinite(float(self.dof))):
                raise ValueError(f"dof must be a scalar > d - 1 = {d - 1}, got {self.dof}")
        if _concrete(self.mean) and not np.all(np.isfinite(np.asarray(self.mean))):
            raise ValueError("mean must be finite")
        _check_pd(self.scale, "scale")

    @property
    def dim(self) -> int:
        return int(self.mean.shape[0])

    @classmethod
    def from_data(cls, X, kappa: float = 0.05, cov_fraction: float = 0.1, dof=None):
        """Empirical NIW: prior mean = data mean; the prior expected covariance
        ``E[Sigma] = cov_fraction * diag(var(X))`` (clusters narrower than the whole data);
        ``dof = d + 3`` by default."""
        X = _as_data(X)
        _check_finite(X, "X", False)
        d = X.shape[1]
        dof = d + 3.0 if dof is None else float(dof)
        var = _data_variance(X)
        scale = np.diag(cov_fraction * var * (dof - d - 1))
        return cls(X.mean(axis=0), kappa, dof, scale)

    def stats(self, X) -> GaussianStats:
        return _gauss_stats(X)

    def merge(self, s1, s2) -> GaussianStats:
        return _gauss_merge(s1, s2)

    def prior_scale(self):
        """``sqrt(diag(scale) / (dof - d - 1))`` (the prior mean of ``Sigma``; ``dof - d - 1``
        floored at 1 where that mean does not exist)."""
        d = self.dim
        return np.sqrt(np.diagonal(np.asarray(self.scale)) / max(float(self.dof) - d - 1.0, 1.0))

    def count_cache(self, n_max: int):
        m = jnp.arange(n_max + 1, dtype=self.mean.dtype)
        return {"mgl": multigammaln(0.5 * (self.dof + m), self.dim), "log_kn": jnp.log(self.kappa + m)}

    def log_marginal(self, s: GaussianStats, cache=None):
        """NIW log marginal likelihood (formula in DESIGN.md; Murphy 2007, Eq. 266)."""
        d = self.dim
        k0, nu0 = self.kappa, self.dof
        kn = k0 + s.n
        nun = nu0 + s.n
        if cache is None:
            mgl, log_kn = multigammaln(0.5 * nun, d), jnp.log(kn)
        else:
            mgl, log_kn = _lookup(cache["mgl"], s.n), _lookup(cache["log_kn"], s.n)
        diff = s.mean - self.mean
        Sn = self.scale + s.scatter + (k0 * s.n / kn)[..., None, None] * diff[..., :, None] * diff[..., None, :]
        return (
            -0.5 * s.n * d * _LOG_PI
            + mgl
            - multigammaln(0.5 * nu0, d)
            + 0.5 * nu0 * _logdet_pd(self.scale)
            - 0.5 * nun * _logdet_pd(Sn)
            + 0.5 * d * (jnp.log(k0) - log_kn)
        )

    def predictive_student_t(self, s: GaussianStats):
        """Posterior predictive as a multivariate Student-t: ``(df, loc, shape_matrix)``."""
        d = self.dim
        kn = self.kappa + s.n
        nun = self.dof + s.n
        diff = s.mean - self.mean
        Sn = self.scale + s.scatter + (self.kappa * s.n / kn)[..., None, None] * diff[..., :, None] * diff[..., None, :]
        loc = (self.kappa * self.mean + s.n[..., None] * s.mean) / kn[..., None]
        df = nun - d + 1
        shape = Sn * ((kn + 1) / (kn * df))[..., None, None]
        return df, loc, shape

    def predictive_cache(self, s):
        """Student-t parameters with the Cholesky factor of the shape matrix, so each new
        point costs ``O(d^2)``."""
        df, loc, shape = self.predictive_student_t(s)
        L = jnp.linalg.cholesky(shape)
        logdet = 2.0 * jnp.sum(jnp.log(jnp.diagonal(L, axis1=-2, axis2=-1)), axis=-1)
        return df, loc, L, logdet

    def log_predictive_cached(self, x, cache):
        df, loc, L, logdet = cache
        d = self.dim
        z = jax.scipy.linalg.solve_triangular(L, (x - loc)[..., None], lower=True)[..., 0]
        q = jnp.sum(z * z, axis=-1)
        return (
            gammaln(0.5 * (df + d)) - gammaln(0.5 * df) - 0.5 * d * jnp.log(df * np.pi)
            - 0.5 * logdet - 0.5 * (df + d) * jnp.log1p(q / df)
        )

    def unconstrain(self):
        d = self.dim
        return {
            "mean": self.mean,
            "log_kappa": jnp.log(self.kappa),
            "log_dof_excess": jnp.log(self.dof - (d - 1)),
            "scale_chol": _chol_params(self.scale),
        }

    def constrain(self, u) -> "NormalInverseWishart":
        d = self.dim
        return NormalInverseWishart(
            u["mean"], _pos(u["log_kappa"]), (d - 1) + jnp.maximum(_pos(u["log_dof_excess"]), 1e-6),
            _chol_unparams(u["scale_chol"]),
        )


class NormalKnownCov(Component):
    """Multivariate Normal data with known noise covariance and a Normal prior on the mean.

    ``mu ~ N(mean, prior_cov)``, ``x_i | mu ~ N(mu, noise_cov)``.

    Args:
      mean: prior mean ``[d]``.
      prior_cov: prior covariance of the mean (``[d, d]``, ``[d]`` diagonal, or scalar).
      noise_cov: covariance of the data around the mean (same forms).
    """

    mean: jax.Array
    prior_cov: jax.Array
    noise_cov: jax.Array

    def __init__(self, mean, prior_cov=1.0, noise_cov=1.0):
        mean = jnp.asarray(mean, dtype=_float_dtype())
        if mean.ndim != 1:
            raise ValueError(f"mean must be a vector [d], got shape {mean.shape}")
        d = mean.shape[0]
        self.mean = mean
        self.prior_cov = _as_matrix(prior_cov, d, "prior_cov")
        self.noise_cov = _as_matrix(noise_cov, d, "noise_cov")

    def __check_init__(self):
        if _concrete(self.mean) and not np.all(np.isfinite(np.asarray(self.mean))):
            raise ValueError("mean must be finite")
        _check_pd(self.prior_cov, "prior_cov")
        _check_pd(self.noise_cov, "noise_cov")

    @property
    def dim(self) -> int:
        return int(self.mean.shape[0])

    @classmethod
    def from_data(cls, X, noise_fraction: float = 0.1):
        """Empirical defaults: prior mean and covariance from the data; noise covariance
        ``noise_fraction * diag(var(X))``."""
        X = _as_data(X)
        _check_finite(X, "X", False)
        var = X.var(axis=0) if X.shape[0] > 1 else np.ones(X.shape[1])
        var = np.where(var > 0, var, 1.0)
        return cls(X.mean(axis=0), np.diag(var), np.diag(noise_fraction * var))

    def stats(self, X) -> GaussianStats:
        return _gauss_stats(X)

    def merge(self, s1, s2) -> GaussianStats:
        return _gauss_merge(s1, s2)

    def prior_scale(self):
        """``sqrt(diag(noise_cov))``, the within-cluster standard deviations."""
        return np.sqrt(np.diagonal(np.asarray(self.noise_cov)))

    def log_marginal(self, s: GaussianStats, cache=None):
        """``-nd/2 log 2pi - (n-1)/2 log|S| - d/2 log n - tr(S^-1 scatter)/2
        + log N(xbar | m0, S0 + S/n) + d/2 log 2pi`` (0 for the empty set)."""
        d = self.dim
        n = s.n
        safe_n = jnp.where(n > 0, n, 1.0)
        Ls = jnp.linalg.cholesky(self.noise_cov)
        logdet_s = 2.0 * jnp.sum(jnp.log(jnp.diagonal(Ls)))
        sinv = jax.scipy.linalg.cho_solve((Ls, True), jnp.eye(d, dtype=Ls.dtype))
        tr = jnp.einsum("ij,...ji->...", sinv, s.scatter)
        C = self.prior_cov + self.noise_cov / safe_n[..., None, None]
        Lc = jnp.linalg.cholesky(C)
        diff = s.mean - self.mean
        z = jax.scipy.linalg.solve_triangular(Lc, diff[..., None], lower=True)[..., 0]
        logdet_c = 2.0 * jnp.sum(jnp.log(jnp.diagonal(Lc, axis1=-2, axis2=-1)), axis=-1)
        out = (
            -0.5 * n * d * _LOG_2PI
            - 0.5 * (n - 1) * logdet_s
            - 0.5 * d * jnp.log(safe_n)
            - 0.5 * tr
            - 0.5 * logdet_c
            - 0.5 * jnp.sum(z * z, axis=-1)
        )
        return jnp.where(n > 0, out, 0.0)

    def unconstrain(self):
        return {"mean": self.mean, "prior_chol": _chol_params(self.prior_cov), "noise_chol": _chol_params(self.noise_cov)}

    def constrain(self, u) -> "NormalKnownCov":
        return NormalKnownCov(u["mean"], _chol_unparams(u["prior_chol"]), _chol_unparams(u["noise_chol"]))


class DiagGaussianStats(NamedTuple):
    """Per-column sufficient statistics: count ``n [...]``, column means ``[..., d]``, column
    sums of squares about the mean ``[..., d]``."""

    n: jax.Array
    mean: jax.Array
    ss: jax.Array


class NormalGamma(Component):
    """Independent Normal features with unknown means and variances (a Normal-Gamma prior per
    feature): ``tau_j ~ Gamma(a, b_j)`` (rate ``b_j``), ``mu_j | tau_j ~ N(mean_j, 1 / (kappa
    tau_j))``, ``x_ij | mu_j, tau_j ~ N(mu_j, 1 / tau_j)``.

    The diagonal counterpart of `NormalInverseWishart` (each feature is a one-dimensional NIW
    with ``dof = 2 a`` and ``scale = 2 b_j``): cheaper in high dimension, and the family to
    compare with it by evidence when features look uncorrelated within clusters.

    Args:
      mean: prior mean ``[d]``.
      kappa: prior pseudo-count of the means (> 0).
      a: Gamma shape of every precision (> 0).
      b: Gamma rates ``[d]`` or a scalar (> 0); ``E[1 / tau_j] = b_j / (a - 1)`` for ``a > 1``.
    """

    mean: jax.Array
    kappa: jax.Array
    a: jax.Array
    b: jax.Array

    def __init__(self, mean, kappa=1.0, a=2.0, b=1.0):
        mean = jnp.asarray(mean, dtype=_float_dtype())
        if mean.ndim != 1:
            raise ValueError(f"mean must be a vector [d], got shape {mean.shape}")
        self.mean = mean
        self.kappa = jnp.asarray(kappa, dtype=mean.dtype)
        self.a = jnp.asarray(a, dtype=mean.dtype)
        b = jnp.asarray(b, dtype=mean.dtype)
        if b.ndim not in (0, 1) or (b.ndim == 1 and b.shape[0] != mean.shape[0]):
            raise ValueError(f"b must be a scalar or [{mean.shape[0]}], got shape {b.shape}")
        self.b = jnp.broadcast_to(b, mean.shape)

    def __check_init__(self):
        for name in ("kappa", "a"):
            v = getattr(self, name)
            if _concrete(v) and not (np.ndim(v) == 0 and np.isfinite(float(v)) and float(v) > 0):
                raise ValueError(f"{name} must be a positive finite scalar, got {v}")
        if _concrete(self.b) and not (np.all(np.isfinite(np.asarray(self.b))) and np.all(np.asarray(self.b) > 0)):
            raise ValueError("b must be positive and finite")
        if _concrete(self.mean) and not np.all(np.isfinite(np.asarray(self.mean))):
            raise ValueError("mean must be finite")

    @property
    def dim(self) -> int:
        return int(self.mean.shape[0])

    @classmethod
    def from_data(cls, X, kappa: float = 0.05, var_fraction: float = 0.1, a: float = 2.0):
        """Empirical defaults, matching `NormalInverseWishart.from_data` feature by feature:
        prior mean = data mean, ``E[1 / tau_j] = var_fraction * var(X_j)`` (clusters narrower
        than the whole data), shape ``a = 2`` (the NIW default ``dof = d + 3`` at ``d = 1``)."""
        X = _as_data(X)
        _check_finite(X, "X", False)
        var = _data_variance(X)
        if not a > 1:
            raise ValueError(f"a must be > 1 for the prior variance to exist, got {a}")
        return cls(X.mean(axis=0), kappa, a, var_fraction * var * (a - 1.0))

    def stats(self, X) -> DiagGaussianStats:
        X = jnp.asarray(X, dtype=jnp.result_type(X, _float_dtype()))
        m = X.shape[-2]
        n = jnp.full(X.shape[:-2], m, dtype=X.dtype)
        mean = jnp.sum(X, axis=-2) / max(m, 1)
        ss = jnp.sum((X - mean[..., None, :]) ** 2, axis=-2)
        return DiagGaussianStats(n, mean, ss)

    def merge(self, s1, s2) -> DiagGaussianStats:
        n = s1.n + s2.n
        safe = jnp.where(n > 0, n, 1.0)
        mean = (s1.n / safe)[..., None] * s1.mean + (s2.n / safe)[..., None] * s2.mean
        diff = s1.mean - s2.mean
        ss = s1.ss + s2.ss + (s1.n * s2.n / safe)[..., None] * diff * diff
        return DiagGaussianStats(n, mean, ss)

    def prior_scale(self):
        """``sqrt(b / (a - 1))`` (the prior mean of ``1 / tau``; ``a - 1`` floored at 1 where
        that mean does not exist)."""
        return np.sqrt(np.asarray(self.b) / max(float(self.a) - 1.0, 1.0))

    def count_cache(self, n_max: int):
        m = jnp.arange(n_max + 1, dtype=self.mean.dtype)
        return {"gl": gammaln(self.a + 0.5 * m), "log_kn": jnp.log(self.kappa + m)}

    def log_marginal(self, s: DiagGaussianStats, cache=None):
        """``sum_j [log Gamma(a_n) - log Gamma(a) + a log b_j - a_n log b_nj + (log kappa - log
        kappa_n) / 2] - n d / 2 log 2 pi`` with ``kappa_n = kappa + n``, ``a_n = a + n / 2``,
        ``b_nj = b_j + ss_j / 2 + kappa n (xbar_j - mean_j)^2 / (2 kappa_n)`` (Murphy 2007,
        Eq. 95, per feature)."""
        d = self.dim
        kn = self.kappa + s.n
        if cache is None:
            gl, log_kn = gammaln(self.a + 0.5 * s.n), jnp.log(kn)
        else:
            gl, log_kn = _lookup(cache["gl"], s.n), _lookup(cache["log_kn"], s.n)
        an = self.a + 0.5 * s.n
        diff = s.mean - self.mean
        bn = self.b + 0.5 * s.ss + (0.5 * self.kappa * s.n / kn)[..., None] * diff * diff
        return (
            d * (gl - gammaln(self.a))
            + self.a * jnp.sum(jnp.log(self.b))
            - an * jnp.sum(jnp.log(bn), axis=-1)
            + 0.5 * d * (jnp.log(self.kappa) - log_kn)
            - 0.5 * s.n * d * _LOG_2PI
        )

    def unconstrain(self):
        return {"mean": self.mean, "log_kappa": jnp.log(self.kappa), "log_a": jnp.log(self.a),
                "log_b": jnp.log(self.b)}

    def constrain(self, u) -> "NormalGamma":
        return NormalGamma(u["mean"], _pos(u["log_kappa"]), _pos(u["log_a"]), _pos(u["log_b"]))


# ==========================================================================================
# Count families (per-column Beta priors; Dirichlet over categories)
# ==========================================================================================
# lookup tables of `count_cache` larger than this (entries) are not built
_MAX_CACHE_ENTRIES = 1 << 22


def _check_exact_counts(counts, name, family):
    """Counts beyond the float dtype's exact integers (2^53 in float64, 2^24 in float32)
    cannot be represented, and their log-gamma differences would be rounding noise."""
    limit = 2.0 ** (np.finfo(_float_dtype()).nmant + 1)
    c = np.asarray(counts, dtype=float)
    if np.any(c[np.isfinite(c)] > limit):
        raise ValueError(f"{name} must be at most 2^{np.finfo(_float_dtype()).nmant + 1} = {limit:.3g} for {family} "
                         f"(larger counts are not exact in {np.dtype(_float_dtype()).name}), got up to {np.nanmax(c):.3g}")


class CountStats(NamedTuple):
    """Per-column statistics of Bernoulli / Binomial data: observed count ``[..., d]``,
    successes ``[..., d]``, failures ``[..., d]``, summed log binomial coefficients ``[...]``."""

    n: jax.Array
    succ: jax.Array
    fail: jax.Array
    logc: jax.Array


def _count_stats(X, trials):
    X = jnp.asarray(X, dtype=jnp.result_type(X, _float_dtype()))
    obs = ~jnp.isnan(X)
    x = jnp.where(obs, X, 0.0)
    t = jnp.broadcast_to(jnp.asarray(trials, X.dtype), X.shape[-1:])
    tt = jnp.where(obs, t, 0.0)
    logc = gammaln(tt + 1) - gammaln(x + 1) - gammaln(tt - x + 1)
    return CountStats(
        jnp.sum(obs, axis=-2).astype(X.dtype),
        jnp.sum(x, axis=-2),
        jnp.sum(tt - x, axis=-2),
        jnp.sum(logc, axis=(-2, -1)),
    )


class _BetaCounts(Component):
    a: jax.Array
    b: jax.Array

    supports_missing: ClassVar[bool] = True

    def __check_init__(self):
        for name in ("a", "b"):
            v = getattr(self, name)
            if _concrete(v):
                arr = np.asarray(v)
                if arr.ndim > 1 or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
                    raise ValueError(f"{name} must be positive and finite (scalar or [d]), got {arr}")

    @property
    def dim(self) -> int:
        s = np.broadcast_shapes(np.shape(self.a), np.shape(self.b))
        return int(s[0]) if s else 1

    def _trials(self):
        return 1.0

    def validate_data(self, X, name: str = "X") -> np.ndarray:
        arr = _as_data(X, name)
        if np.ndim(self.a) or np.ndim(self.b):
            if arr.shape[1] != self.dim:
                raise ValueError(
                    f"{name} has {arr.shape[1]} columns but {type(self).__name__} was built for {self.dim}"
                )
        _check_finite(arr, name, True)
        self._check_domain(arr, name)
        return arr

    def merge(self, s1, s2) -> CountStats:
        return CountStats(*(u + v for u, v in zip(s1, s2)))

    def stats(self, X) -> CountStats:
        return _count_stats(X, self._trials())

    def count_cache(self, n_max: int):
        size = int(n_max) * int(np.max(np.asarray(self._trials()))) + 1
        if size * self.dim > _MAX_CACHE_ENTRIES:  # large trials: lgamma directly, no table
            return None
        if jnp.ndim(self.a) == 0 and jnp.ndim(self.b) == 0 and jnp.ndim(self._trials()) == 0:
            m = jnp.arange(size, dtype=self.a.dtype)  # shared by every column
            a, b = self.a, self.b
        else:
            m = jnp.arange(size, dtype=self.a.dtype)[:, None]
            a = jnp.broadcast_to(self.a, (self.dim,))
            b = jnp.broadcast_to(self.b, (self.dim,))
        return {"ga": gammaln(a + m), "gb": gammaln(b + m), "gab": gammaln(a + b + m)}

    def log_marginal(self, s: CountStats, cache=None):
        """``sum_j log B(a_j + succ_j, b_j + fail_j) - log B(a_j, b_j)`` plus coefficients."""
        if cache is None:
            per = betaln(self.a + s.succ, self.b + s.fail) - betaln(self.a, self.b)
        else:
            def col_lookup(table, idx):
                i = jnp.round(idx).astype(jnp.int32)
                if table.ndim == 1:
                    return jnp.take(table, i, mode="clip")
                flat = jnp.broadcast_to(i, idx.shape).reshape(-1, idx.shape[-1])
                return jnp.take_along_axis(table, flat, axis=0, mode="clip").reshape(idx.shape)

            per = (
                col_lookup(cache["ga"], s.succ) + col_lookup(cache["gb"], s.fail)
                - col_lookup(cache["gab"], s.succ + s.fail)
            ) - betaln(self.a, self.b)
        return s.logc + jnp.sum(per, axis=-1)

    def unconstrain(self):
        return {"log_a": jnp.log(self.a), "log_b": jnp.log(self.b)}

    def empty_stats(self, batch_shape=()):
        z = jnp.zeros(tuple(batch_shape) + (self.dim,), _float_dtype())
        return CountStats(z, z, z, jnp.zeros(tuple(batch_shape), _float_dtype()))


class BetaBernoulli(_BetaCounts):
    """Binary data, each column ``j`` Bernoulli(theta_j) with ``theta_j ~ Beta(a_j, b_j)``.

    Missing entries (NaN) are skipped (they do not enter the likelihood).

    Args:
      a, b: positive Beta parameters, scalars or ``[d]``.
    """

    def __init__(self, a=1.0, b=1.0):
        self.a = jnp.asarray(a, dtype=_float_dtype())
        self.b = jnp.asarray(b, dtype=_float_dtype())

    @classmethod
    def from_data(cls, X, strength: float = 2.0, eps: float = 0.05):
        """Mean-matched prior ``Beta(strength * m, strength * (1 - m))`` with ``m`` the column
        means clipped to ``[eps, 1 - eps]``. On scikit-learn's binarized digits (classes 0, 2,
        4; 40 per class; 10 subsets) BHC's dendrogram purity is 0.97 with this prior and 0.91
        with Beta(1, 1); on all 10 classes 0.62 vs 0.16 (benchmarks/bhc_purity.py)."""
        X = _as_data(X)
        _check_finite(X, "X", True)
        m = np.clip(np.nanmean(np.where(np.isnan(X), np.nan, X), axis=0), eps, 1 - eps)
        m = np.where(np.isnan(m), 0.5, m)
        return cls(strength * m, strength * (1 - m))

    def _check_domain(self, arr, name):
        ok = np.isnan(arr) | (arr == 0) | (arr == 1)
        if not np.all(ok):
            raise ValueError(f"{name} must be binary (0/1, NaN for missing) for BetaBernoulli")

    def constrain(self, u) -> "BetaBernoulli":
        return BetaBernoulli(_pos(u["log_a"]), _pos(u["log_b"]))


class BetaBinomial(_BetaCounts):
    """Count data in ``0..trials``, column ``j`` Binomial(trials_j, theta_j), ``theta_j ~
    Beta(a_j, b_j)``. Missing entries (NaN) are skipped.

    Args:
      a, b: positive Beta parameters, scalars or ``[d]``.
      trials: number of trials (positive integer), scalar or ``[d]``.
    """

    trials: Any = eqx.field(static=True)  # int or tuple of ints (static: sizes tables)

    def __init__(self, a=1.0, b=1.0, trials=1):
        self.a = jnp.asarray(a, dtype=_float_dtype())
        self.b = jnp.asarray(b, dtype=_float_dtype())
        t = np.asarray(trials)
        if isinstance(trials, jax.core.Tracer) or t.ndim > 1 or t.size == 0 or not np.all(np.isfinite(t)) \
                or np.any(t < 1) or np.any(t != np.round(t)):
            raise ValueError(f"trials must be positive integers (scalar or [d]), got {trials!r}")
        _check_exact_counts(t, "trials", "BetaBinomial")
        self.trials = int(t) if t.ndim == 0 else tuple(int(v) for v in t)

    @property
    def dim(self) -> int:
        s = np.broadcast_shapes(np.shape(self.a), np.shape(self.b), np.shape(self.trials))
        return int(s[0]) if s else 1

    def _trials(self):
        return np.asarray(self.trials, dtype=float)

    @classmethod
    def from_data(cls, X, trials, strength: float = 2.0, eps: float = 0.05):
        """Mean-matched ``Beta(strength * m, strength * (1 - m))`` with ``m = mean / trials``."""
        X = _as_data(X)
        _check_finite(X, "X", True)
        m = np.clip(np.nanmean(X, axis=0) / np.asarray(trials, float), eps, 1 - eps)
        m = np.where(np.isnan(m), 0.5, m)
        return cls(strength * m, strength * (1 - m), trials)

    def _check_domain(self, arr, name):
        t = np.broadcast_to(np.asarray(self.trials), arr.shape[1:])
        ok = np.isnan(arr) | ((arr >= 0) & (arr <= t) & (arr == np.round(arr)))
        if not np.all(ok):
            raise ValueError(f"{name} must hold integers in [0, trials] (NaN for missing) for BetaBinomial")

    def constrain(self, u) -> "BetaBinomial":
        return BetaBinomial(_pos(u["log_a"]), _pos(u["log_b"]), self.trials)


class MultinomialStats(NamedTuple):
    """Statistics of count vectors: summed counts ``[..., K]``, summed log multinomial
    coefficients ``[...]``."""

    counts: jax.Array
    logc: jax.Array


class DirichletMultinomial(Component):
    """Rows are count vectors over ``K`` categories, ``x_i ~ Multinomial(N_i, theta)``,
    ``theta ~ Dirichlet(alpha)``. The multinomial coefficients are included, so the log
    marginal is a density over count vectors.

    Args:
      alpha: positive concentration ``[K]``.
    """

    alpha: jax.Array

    def __init__(self, alpha):
        alpha = jnp.asarray(alpha, dtype=_float_dtype())
        if alpha.ndim != 1:
            raise ValueError(f"alpha must be a vector [K], got shape {alpha.shape}")
        self.alpha = alpha

    def __check_init__(self):
        if _concrete(self.alpha):
            a = np.asarray(self.alpha)
            if not np.all(np.isfinite(a)) or np.any(a <= 0):
                raise ValueError(f"alpha must be positive and finite, got {a}")

    @property
    def dim(self) -> int:
        return int(self.alpha.shape[0])

    @classmethod
    def from_data(cls, X, strength=None):
        """Mean-matched ``alpha = strength * p`` with ``p`` the pooled category frequencies
        (floored at 1 / (10 K)) and ``strength = K`` by default (the total of Dirichlet(1)).
        """
        X = _as_data(X)
        _check_finite(X, "X", False)
        K = X.shape[1]
        p = X.sum(axis=0) + 1e-12
        p = p / p.sum()
        p = np.maximum(p, 1.0 / (10 * K))
        p = p / p.sum()
        return cls((K if strength is None else strength) * p)

    def _check_domain(self, arr, name):
        if np.any(arr < 0) or np.any(arr != np.round(arr)):
            raise ValueError(f"{name} must hold non-negative integer counts for DirichletMultinomial")
        _check_exact_counts(np.sum(arr, axis=1), f"{name}'s row totals", "DirichletMultinomial")

    def stats(self, X) -> MultinomialStats:
        X = jnp.asarray(X, dtype=jnp.result_type(X, _float_dtype()))
        N = jnp.sum(X, axis=-1)
        logc = jnp.sum(gammaln(N + 1) - jnp.sum(gammaln(X + 1), axis=-1), axis=-1)
        return MultinomialStats(jnp.sum(X, axis=-2), logc)

    def merge(self, s1, s2) -> MultinomialStats:
        return MultinomialStats(s1.counts + s2.counts, s1.logc + s2.logc)

    def log_marginal(self, s: MultinomialStats, cache=None):
        """``logc + log Gamma(A) - log Gamma(A + N) + sum_k log Gamma(alpha_k + c_k) - log Gamma(alpha_k)``."""
        A = jnp.sum(self.alpha)
        N = jnp.sum(s.counts, axis=-1)
        return (
            s.logc
            + gammaln(A)
            - gammaln(A + N)
            + jnp.sum(gammaln(self.alpha + s.counts) - gammaln(self.alpha), axis=-1)
        )

    def unconstrain(self):
        return {"log_concentration": jnp.log(self.alpha)}  # not "log_alpha": that is the DPM alpha in learn_hyperparameters

    def constrain(self, u) -> "DirichletMultinomial":
        return DirichletMultinomial(_pos(u["log_concentration"]))
