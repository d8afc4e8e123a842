"""Data sets: loaders for the ones shipped with scikit-learn and synthetic generators.

* `load_digits_binary` - scikit-learn's 8x8 handwritten digits, binarized (the BHC paper's
  digits experiments), with an optional class subset and per-class subsample.
* `load_iris`, `load_wine` - the classic UCI tables shipped with scikit-learn.
* `sample_dpm` - data from a Dirichlet-process mixture: a CRP partition drawn with
  ``jax.random`` and Gaussian (random means and covariances) or Bernoulli clusters.
* `mixture_of_gaussians` - isotropic Gaussian blobs around given centers.
* `hierarchical_gaussian` - a nested Gaussian hierarchy with known labels at every level
  (group means drawn around their parent's mean, level by level).
* `cross_clustering_synthetic`, `cross_cluster_table` - cross-clustered tables (views of
  columns, each with its own row clusters), by number of views or by view sizes.

The loaders need scikit-learn (``pip install jaxhc[cli]``); it is imported lazily, and the
data files ship inside scikit-learn, so no network access is needed. Every function returns
host numpy arrays ``(X float64 [n, d], y int64 [n])`` and raises ``ValueError`` naming the
offending argument for bad input. Random functions take an explicit PRNG key.
"""

from __future__ import annotations

import numbers
from functools import partial
from typing import Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from ._internal.validation import check_key, numpy_rng

__all__ = [
    "load_digits_binary",
    "load_iris",
    "load_wine",
    "sample_dpm",
    "mixture_of_gaussians",
    "hierarchical_gaussian",
    "cross_clustering_synthetic",
    "cross_cluster_table",
]


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------
def _sklearn_datasets():
    try:
        from sklearn import datasets
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "this loader needs scikit-learn, which ships the data set; install it with "
            "`pip install jaxhc[cli]` (or `pip install scikit-learn`)"
        ) from e
    return datasets


def _as_key(key_or_seed, name: str = "key_or_seed"):
    """A PRNG key from a key or a non-negative integer seed."""
    if isinstance(key_or_seed, numbers.Integral) and not isinstance(key_or_seed, bool):
        if key_or_seed < 0:
            raise ValueError(f"{name}: an integer seed must be non-negative, got {key_or_seed}")
        return jax.random.key(int(key_or_seed))
    return check_key(key_or_seed, name)


def _positive_int(x, name: str) -> int:
    if isinstance(x, bool) or not isinstance(x, numbers.Integral) or x < 1:
        raise ValueError(f"{name} must be a positive integer, got {x!r}")
    return int(x)


def _positive_float(x, name: str) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive number, got {x!r}") from None
    if np.ndim(x) != 0 or not np.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {x!r}")
    return v


def _standardize(X: np.ndarray) -> np.ndarray:
    sd = X.std(axis=0)
    return (X - X.mean(axis=0)) / np.where(sd > 0, sd, 1.0)


# ---------------------------------------------------------------------------------------
# loaders (scikit-learn)
# ---------------------------------------------------------------------------------------
def load_digits_binary(
    classes: Optional[Sequence[int]] = None,
    per_class: Optional[int] = None,
    threshold: float = 8,
    key_or_seed=0,
) -> Tuple[np.ndarray, np.ndarray]:
    """Binarized scikit-learn digits: ``X[i, j] = 1`` where pixel ``j >= threshold``.

    The 8x8 images have pixel values 0..16; ``threshold=8`` keeps the pen strokes (the BHC
    paper's binarized digits, e.g. its 3-digit subset ``classes=(0, 2, 4)``).

    Args:
      classes: digits to keep (subset of 0..9, no repeats); ``None`` keeps all ten.
      per_class: if given, a uniform random subsample of this many images per class
        (without replacement; must not exceed the smallest class, ~174 images).
      threshold: binarization threshold in ``(0, 16]``.
      key_or_seed: PRNG key or integer seed for the subsample.

    Returns:
      ``(X, y)``: ``X`` float64 ``[n, 64]`` with values in {0, 1}; ``y`` int64 ``[n]``, the
      digit of every row. Rows are grouped by class in the order of ``classes``.
    """
    thr = float(threshold) if np.ndim(threshold) == 0 else np.nan
    if not (0 < thr <= 16):
        raise ValueError(f"threshold must be a number in (0, 16] (pixels are 0..16), got {threshold!r}")
    if classes is None:
        cls = list(range(10))
    else:
        try:
            cls = [int(c) for c in classes]
        except (TypeError, ValueError):
            raise ValueError(f"classes must be a sequence of digits 0..9, got {classes!r}") from None
        if not cls:
            raise ValueError("classes must not be empty")
        if any(c < 0 or c > 9 for c in cls) or any(c != cc for c, cc in zip(cls, classes)):
            raise ValueError(f"classes must hold digits 0..9, got {list(classes)!r}")
        if len(set(cls)) != len(cls):
            raise ValueError(f"classes must not repeat a digit, got {cls}")
    if per_class is not None:
        per_class = _positive_int(per_class, "per_class")
    rng = numpy_rng(_as_key(key_or_seed))

    digits = _sklearn_datasets().load_digits()
    data, target = np.asarray(digits.data), np.asarray(digits.target)
    rows = []
    for i, c in enumerate(cls):
        idx = np.flatnonzero(target == c)
        if per_class is not None:
            if per_class > idx.size:
                raise ValueError(f"per_class={per_class} exceeds the {idx.size} images of digit {c}")
            idx = np.sort(rng.choice(idx, per_class, replace=False))
        rows.append(idx)
    idx = np.concatenate(rows)
    X = (data[idx] >= thr).astype(np.float64)
    return X, target[idx].astype(np.int64)


def load_iris(standardize: bool = False) -> Tuple[np.ndarray, np.ndarray]:
    """Fisher's iris: ``X`` float64 ``[150, 4]`` (cm), ``y`` int64 ``[150]`` (3 species).

    With ``standardize=True`` every column is shifted and scaled to mean 0, variance 1.
    """
    d = _sklearn_datasets().load_iris()
    X = np.asarray(d.data, np.float64)
    return (_standardize(X) if standardize else X), np.asarray(d.target, np.int64)


def load_wine(standardize: bool = False) -> Tuple[np.ndarray, np.ndarray]:
    """UCI wine: ``X`` float64 ``[178, 13]`` (chemical analyses), ``y`` int64 ``[178]``
    (3 cultivars). With ``standardize=True`` columns get mean 0, variance 1."""
    d = _sklearn_datasets().load_wine()
    X = np.asarray(d.data, np.float64)
    return (_standardize(X) if standardize else X), np.asarray(d.target, np.int64)


# ---------------------------------------------------------------------------------------
# synthetic data
# ---------------------------------------------------------------------------------------
def _crp(key, n: int, alpha: float) -> jax.Array:
    """Table of every customer ``[n]`` under a Chinese restaurant process (tables numbered
    in order of opening, so labels appear in order 0, 1, 2, ...)."""

    def step(carry, xs):
        counts, n_tables = carry
        i, k = xs
        # existing table t with weight counts[t], a new one (index n_tables) with alpha
        w = jnp.where(jnp.arange(n) == n_tables, alpha, counts)
        t = jax.random.categorical(k, jnp.log(w))
        counts = counts.at[t].add(1.0)
        n_tables = n_tables + (t == n_tables)
        return (counts, n_tables), t

    keys = jax.random.split(key, n)
    (_, _), z = jax.lax.scan(step, (jnp.zeros(n), jnp.asarray(0)), (jnp.arange(n), keys))
    return z


def sample_dpm(
    key,
    n: int,
    alpha: float,
    component_kind: str = "gaussian",
    dim: int = 2,
    *,
    mean_scale: float = 5.0,
    cluster_scale: float = 1.0,
    beta_a: float = 0.5,
    beta_b: float = 0.5,
) -> Tuple[np.ndarray, np.ndarray]:
    """Data from a Dirichlet-process mixture with concentration ``alpha``.

    The partition is a CRP draw (customer ``i`` joins table ``t`` with probability
    ``n_t / (i + alpha)``, a new table with ``alpha / (i + alpha)``). Per cluster:

    * ``"gaussian"``: mean ``~ N(0, mean_scale^2 I)``; covariance ``Q diag(s^2) Q^T`` with a
      random rotation ``Q`` and scales ``s = cluster_scale * exp(0.3 N(0, 1))``;
      ``x ~ N(mean, cov)``.
    * ``"bernoulli"``: ``theta_j ~ Beta(beta_a, beta_b)`` per column; ``x_j ~ Bernoulli(theta_j)``.

    Args:
      key: a JAX PRNG key (the only source of randomness; same key, same data).
      n: number of points.
      alpha: DP concentration (> 0); larger gives more clusters (~ alpha log n).
      component_kind: ``"gaussian"`` or ``"bernoulli"``.
      dim: number of columns ``d``.
      mean_scale, cluster_scale: spread of the cluster means and of the points within a
        cluster (Gaussian only).
      beta_a, beta_b: Beta prior of the Bernoulli probabilities (Bernoulli only).

    Returns:
      ``(X, labels)``: ``X`` float64 ``[n, dim]``, ``labels`` int64 ``[n]`` in
      ``0 .. K-1`` numbered by first appearance.
    """
    check_key(key)
    n = _positive_int(n, "n")
    alpha = _positive_float(alpha, "alpha")
    dim = _positive_int(dim, "dim")
    kinds = ("gaussian", "bernoulli")
    if component_kind not in kinds:
        raise ValueError(f"component_kind must be one of {kinds}, got {component_kind!r}")
    mean_scale = _positive_float(mean_scale, "mean_scale")
    cluster_scale = _positive_float(cluster_scale, "cluster_scale")
    beta_a = _positive_float(beta_a, "beta_a")
    beta_b = _positive_float(beta_b, "beta_b")

    X, z = _sample_dpm_core(
        check_key(key), alpha, mean_scale, cluster_scale, beta_a, beta_b, n=n, dim=dim, kind=component_kind
    )
    return np.asarray(X, dtype=np.float64), np.asarray(z, dtype=np.int64)


@partial(jax.jit, static_argnames=("n", "dim", "kind"))
def _sample_dpm_core(key, alpha, mean_scale, cluster_scale, beta_a, beta_b, *, n, dim, kind):
    """Jitted body of `sample_dpm`; parameters are drawn for ``n`` potential clusters (the
    most a CRP over ``n`` customers can open) so shapes depend only on ``(n, dim)``."""
    k_crp, k_par, k_x = jax.random.split(key, 3)
    z = _crp(k_crp, n, alpha)
    if kind == "gaussian":
        km, kq, ks = jax.random.split(k_par, 3)
        means = mean_scale * jax.random.normal(km, (n, dim))
        Q, R = jnp.linalg.qr(jax.random.normal(kq, (n, dim, dim)))
        Q = Q * jnp.sign(jnp.diagonal(R, axis1=-2, axis2=-1))[:, None, :]  # Haar rotation
        s = cluster_scale * jnp.exp(0.3 * jax.random.normal(ks, (n, dim)))
        A = Q * s[:, None, :]  # cov = A A^T
        eps = jax.random.normal(k_x, (n, dim))
        X = means[z] + jnp.einsum("nij,nj->ni", A[z], eps)
    else:
        theta = jax.random.beta(k_par, beta_a, beta_b, (n, dim))
        X = jax.random.bernoulli(k_x, theta[z]).astype(theta.dtype)
    return X, z


def mixture_of_gaussians(key, n_per_cluster, centers, scale=1.0) -> Tuple[np.ndarray, np.ndarray]:
    """Isotropic Gaussian blobs: ``x ~ N(centers[k], scale_k^2 I)``.

    Args:
      key: a JAX PRNG key (its bits seed the host-side normal draws).
      n_per_cluster: points per cluster, an int (same for all) or ``[K]`` positive ints.
      centers: cluster centers ``[K, d]``.
      scale: standard deviation, a positive scalar or ``[K]``.

    Returns:
      ``(X, labels)``: ``X`` float64 ``[N, d]`` (``N = sum n_per_cluster``; cluster by
      cluster), ``labels`` int64 ``[N]``.
    """
    key = check_key(key)
    C = np.asarray(centers, dtype=np.float64) if not isinstance(centers, str) else np.array([])
    if C.ndim != 2 or C.shape[0] == 0 or C.shape[1] == 0:
        raise ValueError(f"centers must be a non-empty 2-D array [K, d], got shape {C.shape}")
    if not np.all(np.isfinite(C)):
        raise ValueError("centers must be finite")
    K, d = C.shape
    counts = np.asarray(n_per_cluster)
    if counts.ndim == 0:
        counts = np.full(K, counts)
    if counts.shape != (K,) or counts.dtype.kind not in "iu" or np.any(counts < 1):
        raise ValueError(
            f"n_per_cluster must be a positive int or {K} positive ints (one per center), got {n_per_cluster!r}"
        )
    sc = np.asarray(scale, dtype=np.float64)
    if sc.ndim == 0:
        sc = np.full(K, float(sc))
    if sc.shape != (K,) or not np.all(np.isfinite(sc)) or np.any(sc <= 0):
        raise ValueError(f"scale must be a positive number or {K} positive numbers, got {scale!r}")
    labels = np.repeat(np.arange(K), counts)
    eps = numpy_rng(key).standard_normal((labels.size, d))
    X = C[labels] + sc[labels, None] * eps
    return X, labels.astype(np.int64)


def hierarchical_gaussian(
    key, branching=(3, 2), n_per_leaf=25, dim: int = 4, scales=(6.0, 2.0), noise: float = 0.5
) -> Tuple[np.ndarray, np.ndarray]:
    """A nested Gaussian hierarchy with known labels at every level.

    Level 1 has ``branching[0]`` groups with means ``m ~ N(0, scales[0]^2 I)``; every group at
    level ``l`` has ``branching[l]`` children with means ``m_child ~ N(m_parent, scales[l]^2
    I)``; every leaf group (level ``len(branching)``) holds ``n_per_leaf`` points ``x ~
    N(m_leaf, noise^2 I)``. With ``scales`` decreasing and ``noise`` below the last scale the
    levels are visible to a hierarchical clustering, and a fixed-depth model (BHMC, nested
    CRP) has one true node per group.

    Args:
      key: a JAX PRNG key or an integer seed (its bits seed the host-side draws).
      branching: children per node at each level, positive ints (the number of levels is its
        length).
      n_per_leaf: points per leaf group (positive int).
      dim: dimension ``d``.
      scales: standard deviation of the group means around their parent's at each level
        (same length as ``branching``, positive).
      noise: within-leaf standard deviation (positive).

    Returns:
      ``(X, level_labels)``: ``X`` float64 ``[N, d]`` with ``N = prod(branching) *
      n_per_leaf`` (leaf group by leaf group), ``level_labels`` int64 ``[N, len(branching)]``
      whose column ``l`` numbers the level-``l + 1`` groups ``0 ..``.
    """
    key = _as_key(key, "key")
    br = np.asarray(branching)
    if br.ndim != 1 or br.size == 0 or br.dtype.kind not in "iu" or np.any(br < 1):
        raise ValueError(f"branching must be a non-empty sequence of positive ints, got {branching!r}")
    sc = np.asarray(scales, dtype=np.float64)
    if sc.shape != br.shape or not np.all(np.isfinite(sc)) or np.any(sc <= 0):
        raise ValueError(f"scales must be {br.size} positive numbers (one per level), got {scales!r}")
    n = _positive_int(n_per_leaf, "n_per_leaf")
    d = _positive_int(dim, "dim")
    noise = _positive_float(noise, "noise")
    rng = numpy_rng(key)
    means = np.zeros((1, d))
    labels = np.zeros((1, 0), np.int64)
    for b, s in zip(br.tolist(), sc.tolist()):
        means = np.repeat(means, b, axis=0) + s * rng.standard_normal((means.shape[0] * b, d))
        groups = np.arange(means.shape[0])
        labels = np.concatenate([np.repeat(labels, b, axis=0), groups[:, None]], axis=1)
    X = np.repeat(means, n, axis=0) + noise * rng.standard_normal((means.shape[0] * n, d))
    return X, np.repeat(labels, n, axis=0).astype(np.int64)


def cross_clustering_synthetic(
    key,
    n_rows: int = 100,
    n_cols: int = 200,
    n_views: int = 4,
    n_clusters=4,
    trials: int = 50,
    a: float = 0.5,
    b: float = 0.5,
    view_sizes=None,
):
    """Binomial cross-clustering data as in the BHCC paper's synthetic study (section 8.2).

    The columns are split into ``n_views`` views; in each view the rows are split into
    ``n_clusters`` clusters (equal sizes, independently shuffled per view); every (view,
    cluster, column) has ``theta ~ Beta(a, b)`` and ``X[i, j] ~ Binomial(trials, theta)``.
    With the defaults (Beta(0.5, 0.5), 50 trials) the clusters are well separated.

    Args:
      key: a JAX PRNG key (its bits seed the host-side draws) or an integer seed.
      n_rows, n_cols: table size (defaults 100 x 200).
      n_views: number of views (column groups).
      n_clusters: row clusters per view, an int or ``[n_views]`` ints.
      trials: Binomial trials per entry.
      a, b: Beta prior of the cluster probabilities.
      view_sizes: columns per view ``[n_views]`` summing to ``n_cols`` (default: as equal as
        possible).

    Returns:
      ``(X, column_views, row_labels)``: ``X`` float64 ``[n_rows, n_cols]``, the view of
      each column ``[n_cols]`` (views are contiguous column blocks), the row cluster of each
      row in each view ``[n_rows, n_views]``.
    """
    key = _as_key(key, "key")
    n_rows, n_cols, n_views = (
        _positive_int(v, nm) for v, nm in ((n_rows, "n_rows"), (n_cols, "n_cols"), (n_views, "n_views"))
    )
    trials = _positive_int(trials, "trials")
    a, b = _positive_float(a, "a"), _positive_float(b, "b")
    if n_views > n_cols:
        raise ValueError(f"n_views={n_views} is more than n_cols={n_cols}")
    ks = np.broadcast_to(np.asarray(n_clusters), (n_views,))
    if ks.dtype.kind not in "iu" or np.any(ks < 1) or np.any(ks > n_rows):
        raise ValueError(f"n_clusters must be positive ints <= n_rows (one or one per view), got {n_clusters!r}")
    if view_sizes is None:
        sizes = np.full(n_views, n_cols // n_views)
        sizes[: n_cols % n_views] += 1
    else:
        sizes = np.asarray(view_sizes)
        if sizes.shape != (n_views,) or sizes.dtype.kind not in "iu" or np.any(sizes < 1) or sizes.sum() != n_cols:
            raise ValueError(
                f"view_sizes must be {n_views} positive ints summing to n_cols={n_cols}, got {view_sizes!r}"
            )
    rng = numpy_rng(key)
    column_views = np.repeat(np.arange(n_views), sizes)
    row_labels = np.stack([rng.permutation(np.arange(n_rows) % k) for k in ks], axis=1)
    X = np.empty((n_rows, n_cols))
    for j in range(n_cols):
        v = column_views[j]
        theta = rng.beta(a, b, size=int(ks[v]))
        X[:, j] = rng.binomial(trials, theta[row_labels[:, v]])
    return X, column_views.astype(np.int64), row_labels.astype(np.int64)


def cross_cluster_table(
    key,
    view_sizes=(6, 8, 10, 12),
    n_rows: int = 60,
    n_clusters=4,
    concentration: float = 0.3,
    kind: str = "binary",
    trials: Optional[int] = None,
):
    """A cross-clustered table given by its view sizes: binary or Binomial columns.

    The columns form ``len(view_sizes)`` contiguous views; in each view the rows are split
    into ``n_clusters`` equal-size clusters (shuffled independently per view); every (view,
    cluster, column) has its own ``theta ~ Beta(concentration, concentration)`` and
    ``X[i, j] ~ Binomial(trials, theta)`` (``kind="binary"``: one trial, ``X`` in {0, 1}).
    The same draws as `cross_clustering_synthetic` with ``a = b = concentration``, sized by
    the views. A small ``concentration`` makes the probabilities near 0 or 1 (clusters
    distinct); with few rows and columns per view, binary views are hard to tell apart.

    Args:
      key: a JAX PRNG key (its bits seed the host-side draws) or an integer seed.
      view_sizes: columns per view, positive ints (``J = sum(view_sizes)``).
      n_rows: number of rows ``I``.
      n_clusters: row clusters per view, an int or one per view (each <= ``n_rows``).
      concentration: both parameters of the Beta prior of the cluster probabilities (> 0).
      kind: ``"binary"`` (Bernoulli entries) or ``"binomial"`` (counts in ``0..trials``).
      trials: Binomial trials (``"binomial"`` only; default 50).

    Returns:
      ``(X, column_views, row_labels)``: ``X`` float64 ``[I, J]``, the view of each column
      int64 ``[J]`` (``0 ..``, contiguous blocks), the row cluster of each row in each view
      int64 ``[I, len(view_sizes)]``.
    """
    key = _as_key(key, "key")
    sizes = np.asarray(view_sizes) if not isinstance(view_sizes, (str, bytes)) else np.array([])
    if sizes.ndim != 1 or sizes.size == 0 or sizes.dtype.kind not in "iu" or np.any(sizes < 1):
        raise ValueError(f"view_sizes must be a non-empty sequence of positive ints, got {view_sizes!r}")
    n_rows = _positive_int(n_rows, "n_rows")
    concentration = _positive_float(concentration, "concentration")
    kinds = ("binary", "binomial")
    if kind not in kinds:
        raise ValueError(f"kind must be one of {kinds}, got {kind!r}")
    if kind == "binary":
        if trials not in (None, 1) or isinstance(trials, bool):
            raise ValueError(f"trials must be None (or 1) for kind='binary', got {trials!r}")
        trials = 1
    else:
        trials = 50 if trials is None else _positive_int(trials, "trials")
    try:
        ks = np.broadcast_to(np.asarray(n_clusters), sizes.shape)
    except ValueError:
        ks = np.array([])
    if ks.shape != sizes.shape or ks.dtype.kind not in "iu" or np.any(ks < 1) or np.any(ks > n_rows):
        raise ValueError(
            f"n_clusters must be positive ints <= n_rows={n_rows} (one, or one per view), got {n_clusters!r}"
        )
    return cross_clustering_synthetic(
        key,
        n_rows=n_rows,
        n_cols=int(sizes.sum()),
        n_views=int(sizes.size),
        n_clusters=ks.astype(np.int64),
        trials=trials,
        a=concentration,
        b=concentration,
        view_sizes=sizes.astype(np.int64),
    )
