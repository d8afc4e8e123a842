"""Gaussian families: `NormalInverseWishart`, `NormalKnownCov`, `NormalGamma` and the
column-separable `IndependentNormal` (see the package docstring for the interface)."""

from __future__ import annotations

from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln, multigammaln

from .._internal.dtypes import float_dtype as _float_dtype
from .base import (
    LOG_2PI,
    LOG_BOUND,
    LOG_PI,
    PD_FLOOR,
    PIVOT_TOL,
    UNROLLED_MAX_D,
    ColumnParameters,
    ColumnSplitError,
    Component,
    as_data,
    check_finite,
    concrete,
    data_variance,
    logdet_pd,
    logdet_pd_entries,
    lookup_table,
    positive_param,
)

__all__ = [
    "GaussianStats",
    "NormalInverseWishart",
    "NormalKnownCov",
    "DiagGaussianStats",
    "NormalGamma",
    "IndepNormalStats",
    "IndependentNormal",
]


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


def _merge_parts(s1: GaussianStats, s2: GaussianStats):
    """``(n, mean, diff, coef)`` of merging two Gaussian statistics: the merged scatter is
    ``S1 + S2 + coef diff diff^T`` (shared by `_gauss_merge` and the NIW's fused
    `merged_log_marginal`, so both do the same floating-point operations)."""
    n = s1.n + s2.n
    safe = jnp.where(n > 0, n, 1.0)
    mean = (s1.n / safe)[..., None] * s1.mean + (s2.n / safe)[..., None] * s2.mean
    return n, mean, s1.mean - s2.mean, s1.n * s2.n / safe


def _gauss_merge(s1: GaussianStats, s2: GaussianStats) -> GaussianStats:
    n, mean, diff, coef = _merge_parts(s1, s2)
    scatter = s1.scatter + s2.scatter + coef[..., None, None] * diff[..., :, None] * diff[..., None, :]
    return GaussianStats(n, mean, scatter)


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
    if concrete(A):
        a = np.asarray(A)
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name} must be finite")
        if not np.allclose(a, a.T, rtol=1e-8, atol=1e-10 * max(1.0, np.abs(a).max())):
            raise ValueError(f"{name} must be symmetric")
        if np.linalg.eigvalsh(a).min() <= 0:
            raise ValueError(f"{name} must be positive definite")


def _chol_params(A):
    """Inverse of `_chol_unparams`: the log-Cholesky factor of ``A - floor * I``. A matrix
    with a condition number beyond ~1 / PD_FLOOR maps to one whose smallest eigenvalues are
    raised to the floor (the round trip is exact otherwise)."""
    d = A.shape[-1]
    floor = PD_FLOOR * jnp.trace(A) / (d * (1.0 + PD_FLOOR))
    lam_min = jnp.linalg.eigvalsh(A)[0]
    L = jnp.linalg.cholesky(A - jnp.minimum(floor, 0.5 * lam_min) * jnp.eye(d, dtype=A.dtype))
    diag = jnp.log(jnp.diagonal(L))
    return L * (1 - jnp.eye(d)) + jnp.diag(diag)


def _chol_unparams(U):
    """``L L^T + PD_FLOOR tr(L L^T) / d I`` with ``L = tril(U, -1) + diag(exp(diag U))``
    (entries clipped so that nothing overflows): positive definite for every real ``U``."""
    d = U.shape[-1]
    big = float(np.exp(LOG_BOUND))
    low = jnp.clip(jnp.tril(U, -1), -big, big)
    L = low + jnp.diag(positive_param(jnp.diagonal(U)))
    A = L @ L.T
    floor = PD_FLOOR * jnp.sum(L * L) / d
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
        if concrete(self.kappa, self.dof):
            if not (np.ndim(self.kappa) == 0 and float(self.kappa) > 0 and np.isfinite(float(self.kappa))):
                raise ValueError(f"kappa must be a positive scalar, got {self.kappa}")
            if not (np.ndim(self.dof) == 0 and float(self.dof) > d - 1 and np.isfinite(float(self.dof))):
                raise ValueError(f"dof must be a scalar > d - 1 = {d - 1}, got {self.dof}")
        if concrete(self.mean) and not np.all(np.isfinite(np.asarray(self.mean))):
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
        X = as_data(X)
        check_finite(X, "X", False)
        d = X.shape[1]
        dof = d + 3.0 if dof is None else float(dof)
        var = data_variance(X)
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
        # and the prior's log-determinant, once per program: traced inside a merge loop's
        # log marginal it was ~500 scalar operations, ~0.5 s of BHC's compilation at d = 10
        m = jnp.arange(n_max + 1, dtype=self.mean.dtype)
        return {
            "mgl": multigammaln(0.5 * (self.dof + m), self.dim),
            "log_kn": jnp.log(self.kappa + m),
            "logdet0": logdet_pd(self.scale, small_program=True),
        }

    def _logdet0(self, cache):
        return logdet_pd(self.scale) if cache is None else cache["logdet0"]

    def log_marginal(self, s: GaussianStats, cache=None):
        """NIW log marginal likelihood (formula in DESIGN.md; Murphy 2007, Eq. 266)."""
        return self._log_marginal(s.n, s.mean, lambda i, j: s.scatter[..., i, j], s.scatter, cache)

    def merged_log_marginal(self, s1: GaussianStats, s2: GaussianStats, cache=None):
        """``log_marginal(merge(s1, s2))`` by the same floating-point operations, without
        forming the merged ``[..., d, d]`` scatter for ``d <= 10``: each lower-triangle entry
        of the posterior scale is built where the elimination reads it. In BHC's merge rows
        (one cluster against ~4000 slots, d = 10) this is ~25% faster a merge."""
        if self.dim > UNROLLED_MAX_D:
            return self.log_marginal(self.merge(s1, s2), cache)
        n, mean, diff, coef = _merge_parts(s1, s2)
        # the entries of `_gauss_merge`'s scatter, in its order of operations
        scatter = lambda i, j: (s1.scatter[..., i, j] + s2.scatter[..., i, j]) + coef * diff[..., i] * diff[..., j]
        return self._log_marginal(n, mean, scatter, None, cache)

    def _log_marginal(self, n, mean, scatter_entry, scatter, cache):
        """The NIW log marginal of ``n`` points with this ``mean``; the scatter as a function
        of a lower-triangle entry ``(i, j)`` (used for ``d <= 10``) and as an array (else)."""
        d = self.dim
        k0, nu0 = self.kappa, self.dof
        kn = k0 + n
        nun = nu0 + n
        if cache is None:
            mgl, log_kn = multigammaln(0.5 * nun, d), jnp.log(kn)
        else:
            mgl, log_kn = lookup_table(cache["mgl"], n), lookup_table(cache["log_kn"], n)
        diff = mean - self.mean
        coef = k0 * n / kn
        if d <= UNROLLED_MAX_D:
            # the posterior scale S_n entry by entry (lower triangle only), eliminated in
            # unrolled vectorised code: no [..., d, d] array is formed
            scale = self.scale
            logdet_n = logdet_pd_entries(
                lambda i, j: scale[i, j] + scatter_entry(i, j) + coef * diff[..., i] * diff[..., j], d
            )
        else:
            Sn = self.scale + scatter + coef[..., None, None] * diff[..., :, None] * diff[..., None, :]
            logdet_n = logdet_pd(Sn)
        return (
            -0.5 * n * d * LOG_PI
            + mgl
            - multigammaln(0.5 * nu0, d)
            + 0.5 * nu0 * self._logdet0(cache)
            - 0.5 * nun * logdet_n
            + 0.5 * d * (jnp.log(k0) - log_kn)
        )

    def point_coordinates(self, s: GaussianStats):
        """Whitened coordinates ``w = L0^-1 (mean - m0) [..., d]`` (``S0 = L0 L0^T``) of
        statistics of single points, for `point_pair_log_marginal`."""
        L0 = jnp.linalg.cholesky(self.scale)
        y = (s.mean - self.mean).reshape(-1, self.dim).T
        w = jax.scipy.linalg.solve_triangular(L0, y, lower=True)
        return w.T.reshape(s.mean.shape)

    def point_log_marginal(self, s: GaussianStats, cache=None, w=None, check: bool = True):
        """`log_marginal` of statistics of at most one point each, the values in ``O(d)``:
        one point has ``S_1 = S0 + c v v^T`` (``v`` the point minus ``m0``, ``c = kappa /
        (kappa + 1)``), so ``log|S_1| = log|S0| + log(1 + c |w|^2)`` in `point_coordinates`
        (matrix determinant lemma). NaN where `log_marginal`'s elimination loses a pivot
        (`logdet_pd`'s rule, on the pivots in closed form), so a prior that does not fit the data's scale is
        reported as before. A small program: BHC's leaves need no unrolled ``d x d``
        elimination compiled for them (~1 s of a fresh process's first call at d = 10).
        ``w``: the points' `point_coordinates` when the caller has them; ``check=False``
        skips the pivot rule (values only, for callers that check the same points elsewhere)."""
        d = self.dim
        k0, nu0 = self.kappa, self.dof
        c = k0 / (k0 + 1.0)
        w = self.point_coordinates(s) if w is None else w
        val = (
            -0.5 * d * LOG_PI
            + multigammaln(0.5 * (nu0 + 1.0), d)
            - multigammaln(0.5 * nu0, d)
            - 0.5 * self._logdet0(cache)
            - 0.5 * (nu0 + 1.0) * jnp.log1p(c * jnp.sum(w * w, axis=-1))
            + 0.5 * d * (jnp.log(k0) - jnp.log(k0 + 1.0))
        )
        if check:
            # `logdet_pd`'s rule on S_1's pivots, in closed form: the k-th pivot is the ratio
            # of leading minors, det(S0_k + c v_k v_k^T) = det(S0_k) (1 + c |w_<=k|^2) (L0 is
            # lower triangular), so pivot_k = L0_kk^2 (1 + c q_k) / (1 + c q_k-1) with q the
            # running sums of w^2; NaN where one is below PIVOT_TOL eps of its diagonal entry
            q = jnp.cumsum(w * w, axis=-1)
            L0 = jnp.diagonal(jnp.linalg.cholesky(self.scale))
            piv = L0 * L0 * (1.0 + c * q) / (1.0 + c * (q - w * w))
            v = s.mean - self.mean
            diag = jnp.diagonal(self.scale) + c * v * v
            lost = jnp.any(~(piv > PIVOT_TOL * jnp.finfo(piv.dtype).eps * diag), axis=-1)
            val = jnp.where(lost, jnp.nan, val)
        return jnp.where(s.n > 0, val, jnp.zeros((), val.dtype))

    def point_pair_log_marginal(self, wa, wb, cache=None):
        """``log_marginal(merge(a, b))`` of two single points from their `point_coordinates`
        (broadcast), in ``O(d)`` instead of a ``d x d`` factorisation.

        Two points have ``S_n = S0 + u u^T / 2 + c v v^T`` (``u`` their difference, ``v``
        their mean minus ``m0``, ``c = 2 kappa / (kappa + 2)``): a rank-2 update of the
        prior scale, so by the matrix determinant lemma ``log|S_n| = log|S0| + log((1 +
        |u|^2 / 2)(1 + c |v|^2) - c (u.v)^2 / 2)`` in whitened coordinates. The sums are
        taken over the coordinates directly (no Gram-matrix cancellation), and the value
        is symmetric in ``a, b`` to the last bit. ``cache``: `count_cache`'s tables (the
        prior's log-determinant read from them)."""
        d = self.dim
        k0, nu0 = self.kappa, self.dof
        u = wa - wb
        p = wa + wb
        uu = jnp.sum(u * u, axis=-1)
        vv = 0.25 * jnp.sum(p * p, axis=-1)
        uv = 0.5 * jnp.sum(u * p, axis=-1)
        c = 2.0 * k0 / (k0 + 2.0)
        logdet_ratio = jnp.log((1.0 + 0.5 * uu) * (1.0 + c * vv) - 0.5 * c * uv * uv)
        return (
            -d * LOG_PI
            + multigammaln(0.5 * (nu0 + 2.0), d)
            - multigammaln(0.5 * nu0, d)
            - self._logdet0(cache)
            - 0.5 * (nu0 + 2.0) * logdet_ratio
            + 0.5 * d * (jnp.log(k0) - jnp.log(k0 + 2.0))
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
            gammaln(0.5 * (df + d))
            - gammaln(0.5 * df)
            - 0.5 * d * jnp.log(df * np.pi)
            - 0.5 * logdet
            - 0.5 * (df + d) * jnp.log1p(q / df)
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
            u["mean"],
            positive_param(u["log_kappa"]),
            (d - 1) + jnp.maximum(positive_param(u["log_dof_excess"]), 1e-6),
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
        if concrete(self.mean) and not np.all(np.isfinite(np.asarray(self.mean))):
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
        X = as_data(X)
        check_finite(X, "X", False)
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
            -0.5 * n * d * LOG_2PI
            - 0.5 * (n - 1) * logdet_s
            - 0.5 * d * jnp.log(safe_n)
            - 0.5 * tr
            - 0.5 * logdet_c
            - 0.5 * jnp.sum(z * z, axis=-1)
        )
        return jnp.where(n > 0, out, 0.0)

    def unconstrain(self):
        return {
            "mean": self.mean,
            "prior_chol": _chol_params(self.prior_cov),
            "noise_chol": _chol_params(self.noise_cov),
        }

    # column splitting: separable when both covariances are diagonal
    column_split_condition: ClassVar[str] = " with diagonal covariances"

    def check_column_split(self, name: str) -> None:
        for nm in ("prior_cov", "noise_cov"):
            m = np.asarray(getattr(self, nm))
            if np.any(m - np.diag(np.diag(m))):
                raise ColumnSplitError(
                    f"{name} needs a column-separable component; component.{nm} of NormalKnownCov must be "
                    f"diagonal (columns independent given the cluster)"
                )

    def restrict_columns(self, cols, *, name: str = "restrict_columns") -> "NormalKnownCov":
        """The sub-vector and sub-matrices of ``cols`` (any covariances: the prior marginalised
        to those columns)."""
        cols = np.asarray(cols, dtype=np.int64)
        ix = np.ix_(cols, cols)
        return NormalKnownCov(self.mean[cols], self.prior_cov[ix], self.noise_cov[ix])

    def column_parameters(self) -> ColumnParameters:
        return ColumnParameters(
            "normal", self.mean, np.diag(np.asarray(self.prior_cov)), np.diag(np.asarray(self.noise_cov))
        )

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
            if concrete(v) and not (np.ndim(v) == 0 and np.isfinite(float(v)) and float(v) > 0):
                raise ValueError(f"{name} must be a positive finite scalar, got {v}")
        if concrete(self.b) and not (np.all(np.isfinite(np.asarray(self.b))) and np.all(np.asarray(self.b) > 0)):
            raise ValueError("b must be positive and finite")
        if concrete(self.mean) and not np.all(np.isfinite(np.asarray(self.mean))):
            raise ValueError("mean must be finite")

    @property
    def dim(self) -> int:
        return int(self.mean.shape[0])

    @classmethod
    def from_data(cls, X, kappa: float = 0.05, var_fraction: float = 0.1, a: float = 2.0):
        """Empirical defaults, matching `NormalInverseWishart.from_data` feature by feature:
        prior mean = data mean, ``E[1 / tau_j] = var_fraction * var(X_j)`` (clusters narrower
        than the whole data), shape ``a = 2`` (the NIW default ``dof = d + 3`` at ``d = 1``)."""
        X = as_data(X)
        check_finite(X, "X", False)
        var = data_variance(X)
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
            gl, log_kn = lookup_table(cache["gl"], s.n), lookup_table(cache["log_kn"], s.n)
        an = self.a + 0.5 * s.n
        diff = s.mean - self.mean
        bn = self.b + 0.5 * s.ss + (0.5 * self.kappa * s.n / kn)[..., None] * diff * diff
        return (
            d * (gl - gammaln(self.a))
            + self.a * jnp.sum(jnp.log(self.b))
            - an * jnp.sum(jnp.log(bn), axis=-1)
            + 0.5 * d * (jnp.log(self.kappa) - log_kn)
            - 0.5 * s.n * d * LOG_2PI
        )

    def unconstrain(self):
        return {"mean": self.mean, "log_kappa": jnp.log(self.kappa), "log_a": jnp.log(self.a), "log_b": jnp.log(self.b)}

    def constrain(self, u) -> "NormalGamma":
        return NormalGamma(
            u["mean"], positive_param(u["log_kappa"]), positive_param(u["log_a"]), positive_param(u["log_b"])
        )


# ==========================================================================================
# a column-separable Normal family with per-column missing values (BHCC's Normal model)
# ==========================================================================================
class IndepNormalStats(NamedTuple):
    """Per-column statistics of Normal data: observed count, sum, sum of squares ``[..., d]``."""

    n: jax.Array
    sx: jax.Array
    sxx: jax.Array


class IndependentNormal(Component):
    """Columns independent given the cluster: ``mu_j ~ N(mean_j, prior_var_j)``, ``x_ij |
    mu_j ~ N(mu_j, noise_var_j)``; NaN entries are skipped. `NormalKnownCov` with diagonal
    covariances is the same model (without missing-value support); BHCC uses this form."""

    mean: jax.Array
    prior_var: jax.Array
    noise_var: jax.Array

    supports_missing = True

    def __init__(self, mean, prior_var, noise_var):
        self.mean = jnp.asarray(mean, dtype=jnp.result_type(float))
        self.prior_var = jnp.asarray(prior_var, dtype=self.mean.dtype)
        self.noise_var = jnp.asarray(noise_var, dtype=self.mean.dtype)

    @property
    def dim(self) -> int:
        return int(self.mean.shape[-1])

    def stats(self, X) -> IndepNormalStats:
        X = jnp.asarray(X)
        obs = ~jnp.isnan(X)
        x = jnp.where(obs, X, 0.0)
        return IndepNormalStats(jnp.sum(obs, -2).astype(x.dtype), jnp.sum(x, -2), jnp.sum(x * x, -2))

    def merge(self, s1, s2) -> IndepNormalStats:
        return IndepNormalStats(*(u + v for u, v in zip(s1, s2)))

    def column_log_marginal(self, s: IndepNormalStats):
        """Per-column ``log p(x_{1..n, j})`` ``[..., d]`` (0 for no observations)."""
        s2, t2, m0 = self.noise_var, self.prior_var, self.mean
        prec = 1.0 / t2 + s.n / s2
        lin = m0 / t2 + s.sx / s2
        return (
            -0.5 * s.n * (LOG_2PI + jnp.log(s2))
            - 0.5 * jnp.log1p(s.n * t2 / s2)
            - 0.5 * s.sxx / s2
            - 0.5 * m0 * m0 / t2
            + 0.5 * lin * lin / prec
        )

    def log_marginal(self, s, cache=None):
        return jnp.sum(self.column_log_marginal(s), axis=-1)

    def unconstrain(self):
        return {"mean": self.mean, "log_prior_var": jnp.log(self.prior_var), "log_noise_var": jnp.log(self.noise_var)}

    def constrain(self, u) -> "IndependentNormal":
        return IndependentNormal(u["mean"], jnp.exp(u["log_prior_var"]), jnp.exp(u["log_noise_var"]))

    # column splitting: columns are independent given the cluster by construction
    def check_column_split(self, name: str) -> None:
        pass

    def restrict_columns(self, cols, *, name: str = "restrict_columns") -> "IndependentNormal":
        """The parameters of ``cols`` (scalar parameters, shared by every column, stay scalars)."""
        cols = np.asarray(cols, dtype=np.int64)
        g = lambda x: x if np.ndim(x) == 0 else np.asarray(x)[cols]
        return IndependentNormal(g(self.mean), g(self.prior_var), g(self.noise_var))

    def column_parameters(self) -> ColumnParameters:
        return ColumnParameters("normal", self.mean, self.prior_var, self.noise_var)
