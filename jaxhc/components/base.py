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
- Column splitting (BHCC, the CDPM), for families whose columns are independent given the
  cluster: ``check_column_split(name)``, ``restrict_columns(cols)``, ``column_components(J)``
  and ``column_parameters()``. The base class refuses with one `ColumnSplitError`, so a new
  family that cannot be split needs nothing, and one that can overrides these in its own file.

The families live in ``base`` (the interface and shared helpers), ``gaussian`` and ``counts``.

The statistics of the empty set have log marginal 0, so padding is harmless.
"""

from __future__ import annotations

import abc
import contextlib
import contextvars
from typing import Any, ClassVar, NamedTuple, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from .._internal.dtypes import float_dtype as _float_dtype
from .._internal.validation import real_array

__all__ = ["Component", "ColumnParameters", "ColumnSplitError"]

LOG_PI = float(np.log(np.pi))
LOG_2PI = float(np.log(2 * np.pi))


def betaln(a, b):
    """``log B(a, b)`` as a sum of ``gammaln`` (``jax.scipy.special.betaln`` is off by up to
    ~2e-8 for arguments in the hundreds; this agrees with scipy to ~1e-14)."""
    return gammaln(a) + gammaln(b) - gammaln(a + b)


def concrete(*xs) -> bool:
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(xs))


def as_data(X, name="X") -> np.ndarray:
    """Host float array, 2-D, non-empty; raises clear errors."""
    arr = real_array(X, name, "[n, d]")
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D [n_points, n_features], got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name} must be non-empty, got shape {arr.shape}")
    return arr.astype(np.float64) if arr.dtype == bool else arr


def data_variance(X, name="X") -> np.ndarray:
    """Per-column variance for the empirical priors (1 for constant columns or one row);
    a ValueError where it overflows (entries beyond ~1e154)."""
    with np.errstate(over="ignore", invalid="ignore"):
        var = X.var(axis=0) if X.shape[0] > 1 else np.ones(X.shape[1])
    if not np.all(np.isfinite(var)):
        raise ValueError(
            f"{name}'s per-column variance overflows float64 (entries up to {np.max(np.abs(X)):.3g}): "
            f"rescale {name}, e.g. standardise its columns"
        )
    return np.where(var > 0, var, 1.0)


def check_finite(arr, name, allow_nan: bool):
    if allow_nan:
        if np.any(np.isinf(arr)):
            raise ValueError(f"{name} contains inf values")
    elif not np.all(np.isfinite(arr)):
        raise ValueError(
            f"{name} contains NaN or inf values; this component does not support missing data "
            "(use BetaBernoulli / BetaBinomial for data with missing entries, or impute)"
        )


class ColumnSplitError(TypeError, ValueError):
    """The component cannot be split by column, which BHCC and the CDPM (they split the columns
    into views) need: its family does not make the columns independent given the cluster (a
    type fault), or its parameters couple the columns (e.g. a non-diagonal covariance of
    `NormalKnownCov`, a value fault). It is both a ``TypeError`` and a ``ValueError``, so
    callers catching either kind of fault see it."""


class ColumnParameters(NamedTuple):
    """The per-column conjugate pair of a column-separable family (host or device arrays,
    scalars or ``[d]``; `Component.column_parameters`).

    ``kind == "beta"``: ``(p1, p2, p3) = (a, b, trials)``, column ``j`` Binomial(trials_j,
    theta_j) with ``theta_j ~ Beta(a_j, b_j)`` (trials 1: Bernoulli).
    ``kind == "normal"``: ``(p1, p2, p3) = (mean, prior_var, noise_var)``, column ``j``
    ``N(mu_j, noise_var_j)`` with ``mu_j ~ N(mean_j, prior_var_j)``."""

    kind: str
    p1: Any
    p2: Any
    p3: Any


def _column_families() -> str:
    """The public families that can be split by column (they override `check_column_split`),
    for error messages."""
    out, todo = {}, [Component]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if not cls.__name__.startswith("_") and cls.check_column_split is not Component.check_column_split:
            out[cls.__name__] = cls.__name__ + cls.column_split_condition
    return ", ".join(out[k] for k in sorted(out))


class Component(eqx.Module):
    """Base class of the conjugate component families (see the module docstring)."""

    supports_missing: ClassVar[bool] = False
    # what `jaxhc._internal.validation.check_component` recognises a component by (it cannot
    # import this class: this module imports it)
    _jaxhc_component: ClassVar[bool] = True

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

    def merged_log_marginal(self, s1, s2, cache=None):
        """``log_marginal(merge(s1, s2))`` (broadcasts over leading axes). Families may
        override it with a form that never builds the merged statistics (same operations,
        same values); BHC's merge rows call it for one cluster against every slot."""
        s = self.merge(s1, s2)
        return self.log_marginal(s) if cache is None else self.log_marginal(s, cache)

    def count_cache(self, n_max: int):
        """Optional lookup tables indexed by point counts ``0 .. n_max`` that make
        ``log_marginal(s, cache)`` cheaper (lgamma terms depend only on counts), and terms
        that depend on the prior only (e.g. the NIW's ``log|S0|``), computed once where a
        program builds the cache rather than in every log marginal it traces. ``None``
        when the family has none. The cache is differentiable in the hyperparameters."""
        return None

    # -- column splitting (BHCC, the CDPM); see the module docstring ----------------------
    # condition a family states in the error message after its name (e.g. " with diagonal covariances")
    column_split_condition: ClassVar[str] = ""

    def check_column_split(self, name: str) -> None:
        """Raises `ColumnSplitError` unless the columns are independent given the cluster, so
        that ``name`` (the algorithm, named in the message) can split them into views. The
        base class refuses every family; column-separable families override this."""
        raise ColumnSplitError(
            f"{name} splits columns into views, which needs a column-separable component (columns independent "
            f"given the cluster: {_column_families()}); got {type(self).__name__}"
        )

    def restrict_columns(self, cols, *, name: str = "restrict_columns") -> "Component":
        """The component of the columns ``cols`` alone (its prior marginalised to them).
        Families that cannot be split by column raise `ColumnSplitError` naming ``name``."""
        self.check_column_split(name)
        # reached only by a family that accepts column splitting but gives no restriction
        raise ColumnSplitError(
            f"{name}: {type(self).__name__} declares its columns separable (check_column_split) but does not "
            "define restrict_columns; a column-separable family must override both"
        )

    def column_components(self, J: int, name: str = "column_components") -> "Component":
        """The component restricted to each of ``J`` columns, stacked along a leading axis
        ``[J]`` (one `restrict_columns` per column); raises `ColumnSplitError` naming ``name``
        where the columns cannot be split."""
        self.check_column_split(name)
        cols = [self.restrict_columns([j], name=name) for j in range(J)]
        return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *cols)

    def column_parameters(self) -> Optional[ColumnParameters]:
        """The per-column conjugate pair (`ColumnParameters`) of a family whose columns can be
        independent given the cluster, or ``None``. It does not check that they are (for a
        `NormalKnownCov` it gives the covariances' diagonals): `check_column_split` does."""
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
        arr = as_data(X, name)
        if arr.shape[1] != self.dim:
            raise ValueError(
                f"{name} has {arr.shape[1]} columns but {type(self).__name__} was built for {self.dim} dimensions"
            )
        check_finite(arr, name, self.supports_missing)
        self._check_domain(arr, name)
        return arr


def _jaxlib_deadlocks() -> bool:
    """True for jaxlib 0.10.x, whose CPU runtime deadlocks at random when two batched LAPACK
    Cholesky calls of one program run at once (BHC's merge loop froze in about 1 of 4 fresh
    processes for NIW data with d > 10; ``benchmarks/deadlock_repro.py``).
    pyproject.toml excludes these releases; if one is installed anyway we warn and avoid
    LAPACK in `logdet_pd`."""
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


def logdet_elimination_loop(A):
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

    _, out, piv = jax.lax.fori_loop(0, d, body, (A, jnp.zeros(A.shape[:-2], A.dtype), jnp.zeros(A.shape[:-1], A.dtype)))
    return out, piv


# `logdet_pd` returns NaN where a pivot is below ``PIVOT_TOL * eps`` times its diagonal entry
PIVOT_TOL = 4.0


def logdet_pd(A, small_program: bool = False):
    """log-determinant of positive definite matrices ``[..., d, d]``.

    For ``d <= 10`` an unrolled elimination vectorised over the batch (faster than a
    batched LAPACK call on CPU); otherwise a Cholesky factorisation (an elimination loop
    on jaxlib 0.10, see `_jaxlib_deadlocks`). ``small_program``: the factorisation at every
    ``d``, for a few matrices traced into a large program (the unrolled code is ~500
    operations at d = 10, ~0.3 s of compilation each time)."""
    d = A.shape[-1]
    tol = PIVOT_TOL * jnp.finfo(A.dtype).eps
    diag = jnp.diagonal(A, axis1=-2, axis2=-1)
    if (d > 10 or small_program) and _XLA_LOGDET:
        out, piv = logdet_elimination_loop(A)
    elif d <= UNROLLED_MAX_D and not small_program:
        return logdet_pd_entries(lambda i, j: A[..., i, j], d)
    else:
        if small_program and d <= UNROLLED_MAX_D:
            # the matrix from its lower triangle, as the unrolled elimination reads it (the
            # same gradient: off-diagonal entries below the diagonal only)
            A = jnp.tril(A) + jnp.swapaxes(jnp.tril(A, -1), -1, -2)
        L = jnp.linalg.cholesky(A)
        ld = jnp.diagonal(L, axis1=-2, axis2=-1)
        out, piv = 2.0 * jnp.sum(jnp.log(ld), axis=-1), ld * ld
    # a pivot below eps * its diagonal entry has lost every digit to cancellation (condition
    # number beyond ~1 / eps, e.g. data 1e8 times the prior's scale): NaN, never a finite
    # value made of rounding error (callers turn it into an error that names the cause)
    lost = jnp.any(~(piv > tol * diag), axis=-1)
    return jnp.where(lost, jnp.nan, out)


# `logdet_pd` eliminates matrices up to this size in unrolled code (`logdet_pd_entries`)
UNROLLED_MAX_D = 10


def logdet_pd_entries(entry, d: int):
    """`logdet_pd` of the symmetric positive definite matrix whose lower-triangle entry
    ``(i, j)``, ``i >= j``, is ``entry(i, j)`` (an array over the batch).

    Unrolled symmetric elimination on the lower triangle, one batch vector per entry:
    every operation is a vectorised loop over the batch (several times faster on CPU than
    slicing ``[..., d, d]`` arrays, and a small program), ``d^3 / 6`` multiply-adds and
    ``d`` reciprocals. Callers that build the matrix from parts (e.g. the NIW posterior
    scale) pass the entries directly, so the upper triangle is never formed. Same NaN rule
    as `logdet_pd` (a pivot below ``PIVOT_TOL * eps`` times its diagonal entry)."""
    keys = [(i, j) for i in range(d) for j in range(i + 1)]
    first = [entry(i, j) for i, j in keys]
    shape = jnp.broadcast_shapes(*(jnp.shape(x) for x in first))
    a = {key: jnp.broadcast_to(x, shape) for key, x in zip(keys, first)}
    # inside `staged_elimination` and for large batches only: elsewhere the extra fusions cost
    # more (dispatch, compile time) than the strided reads they save
    staged = is_staged(shape)
    if staged:
        a = _materialise(a)
    diag = [a[(k, k)] for k in range(d)]
    tol = PIVOT_TOL * jnp.finfo(a[(0, 0)].dtype).eps
    out, lost = None, None
    for k in range(d):
        piv = a[(k, k)]
        out = jnp.log(piv) if out is None else out + jnp.log(piv)
        bad = ~(piv > tol * diag[k])
        lost = bad if lost is None else lost | bad
        inv = 1.0 / piv
        q = {j: a[(j, k)] * inv for j in range(k + 1, d)}
        for i in range(k + 1, d):
            for j in range(k + 1, i + 1):
                a[(i, j)] = a[(i, j)] - a[(i, k)] * q[j]
        if staged and k + 2 < d:
            a = _materialise({key: v for key, v in a.items() if key[1] > k})
    return jnp.where(lost, jnp.nan, out)


#: inside `staged_elimination`, `logdet_pd_entries` stages its elimination (`_materialise`
#: after every pivot) from this many matrices on: measured on BHC's merge rows (n = 4000,
#: d = 10: 3.5 -> 1.8 ms a merge; n = 500: 0.33 -> 0.16 s a search); RBHC's 64-point blocks
#: stay unstaged (staging everything lengthened RBHC's compilation by ~10 s). Since the
#: greedy loop runs rows of 512 slots or more in cache-sized tiles (`bhc.slots.slot_log_marginals`,
#: unstaged), staging serves its rows of 256-511 slots and slot counts that do not tile
_STAGED_MIN_BATCH = 256
_STAGED = contextvars.ContextVar("jaxhc_staged_elimination", default=False)


def is_staged(batch_shape) -> bool:
    """Whether log-determinants over ``batch_shape`` are traced staged (inside
    `staged_elimination`, at least `_STAGED_MIN_BATCH` matrices)."""
    return bool(_STAGED.get()) and int(np.prod(batch_shape)) >= _STAGED_MIN_BATCH


@contextlib.contextmanager
def staged_elimination():
    """Trace-time switch: log-determinants traced inside it over batches of at least
    `_STAGED_MIN_BATCH` matrices use the staged elimination (see `_materialise`). BHC's
    greedy search turns it on around its per-merge rows of log marginals."""
    token = _STAGED.set(True)
    try:
        yield
    finally:
        _STAGED.reset(token)


def _materialise(a: dict) -> dict:
    """The batch vectors of ``a`` stacked into one ``[len(a), ...batch]`` array behind an
    optimisation barrier, and read back as rows: XLA then writes each vector once,
    contiguously, instead of keeping a strided ``[batch, d, d]`` intermediate (or
    recomputing a long chain) that every later fusion reads."""
    if not a or jnp.ndim(next(iter(a.values()))) == 0:
        return a
    E = jax.lax.optimization_barrier(jnp.stack(list(a.values())))
    return {key: E[m] for m, key in enumerate(a)}


def lookup_table(table, n):
    """``table[n]`` for integer-valued float counts ``n`` (any batch shape)."""
    return jnp.take(table, jnp.round(n).astype(jnp.int32), axis=0, mode="clip")


# Unconstrained parameterisations (``unconstrain`` / ``constrain``) are total: every real
# vector maps to a valid component, so gradient steps can never produce a component whose
# constructor refuses it. Positive scalars are ``exp(u)`` with ``u`` clipped to
# [-LOG_BOUND, LOG_BOUND]; positive definite matrices are a log-Cholesky factor plus a
# relative floor on the spectrum, ``A = L L^T + PD_FLOOR * tr(L L^T) / d * I``, so that A
# stays numerically positive definite (condition number below ~1 / PD_FLOOR) whatever L is.
LOG_BOUND = 30.0
PD_FLOOR = 1e-8


def positive_param(u):
    """``exp(u)`` with ``u`` clipped to ``[-LOG_BOUND, LOG_BOUND]``: always positive and finite."""
    return jnp.exp(jnp.clip(u, -LOG_BOUND, LOG_BOUND))
