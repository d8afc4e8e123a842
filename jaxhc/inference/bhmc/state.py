"""BHMC's state and configuration (`BHMCState`, `BHMCConfig`, `make_config`), the input
checks of its public functions, and the padding of a state's points to a bucket size.

Padding ("compile once, fit many"): `jaxhc.bhmc` runs its compiled programs on the data's
rows padded to ``bucket(N)`` (`jaxhc._internal.buckets`). Padded points have path 0 (the
root at every level) and component 0, take no node (node ``count`` holds the real points
only), are never visited by a sweep and are masked out of every sum over points (the
``mask`` arguments, ``arange(size) < N``); random draws are made per real point (row-major
prefixes, `row_permutation`), so a key gives the same state whatever the padding. (A draw
of shape ``[size, ...]`` starts with the draw of shape ``[N, ...]`` under JAX's default
``jax_threefry_partitionable=True``; with it off, results depend on the bucket too.)"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..._internal.buckets import pad_rows
from ..._internal.validation import real_array

__all__ = [
    "BHMCConfig",
    "BHMCState",
    "OVERFLOW_COMPONENTS",
    "OVERFLOW_NODES",
    "make_config",
]

NEG_INF = -jnp.inf
OVERFLOW_NODES = 1
OVERFLOW_COMPONENTS = 2


class BHMCState(NamedTuple):
    """State of the BHMC sampler.

    Attributes:
      path: int32 ``[N, L + 1]`` node slot of every point at every level (column 0: root 0).
      c: int32 ``[N]`` component slot of every point.
      parent: int32 ``[M]`` parent slot of every node (``-1`` for the root and unused slots).
      level: int32 ``[M]`` depth of every node.
      count: int32 ``[M]`` points through every node (0 = free slot).
      logb: float ``[M, K + 1]`` log mixture weights ``beta_z`` (last column ``beta*_z``;
        ``-inf`` for a component that does not exist).
      theta: float ``[K, D]`` component means.
      alpha, gamma0, gamma, sigma2: hyperparameters (scalars).
      overflow: int32 bit flags (1: out of node slots, 2: out of component slots).
    """

    path: jax.Array
    c: jax.Array
    parent: jax.Array
    level: jax.Array
    count: jax.Array
    logb: jax.Array
    theta: jax.Array
    alpha: jax.Array
    gamma0: jax.Array
    gamma: jax.Array
    sigma2: jax.Array
    overflow: jax.Array


class BHMCConfig(NamedTuple):
    """Fixed parts of the model and sampler (arrays; `bhmc` builds it).

    Attributes:
      mu0, prior_var: ``H = N(mu0, diag(prior_var))``, each ``[D]``.
      sigma2_max: upper end ``s`` of the ``Unif(0, s)`` prior on ``sigma2``.
      step: ``[4]`` log-scale random-walk step sizes for ``(alpha, gamma0, gamma, sigma2)``.
      gamma_max: upper end of the ``Unif(0, gamma_max)`` prior on ``gamma`` (1.5).
    """

    mu0: jax.Array
    prior_var: jax.Array
    sigma2_max: jax.Array
    step: jax.Array
    gamma_max: jax.Array


# ------------------------------------------------------------------------------------------
# validation and the configuration
# ------------------------------------------------------------------------------------------
def check_X(X):
    X = real_array(X, "X", "[N, D]")
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D [N, D], got shape {X.shape}")
    if X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(f"X must not be empty, got shape {X.shape}")
    X = X.astype(jnp.result_type(float))
    if not np.all(np.isfinite(X)):
        raise ValueError("X contains NaN or inf; BHMC needs complete, finite data")
    with np.errstate(over="ignore", invalid="ignore"):
        ok = np.isfinite(np.sum(np.square(X))) and np.isfinite(np.sum(np.var(X, axis=0)))
    if not ok:
        raise ValueError(
            f"X: entries up to {float(np.max(np.abs(X))):.3g} are too large: their sums of squares "
            f"overflow float64; rescale X (e.g. standardise its columns)"
        )
    return X


def check_positive(v, name, upper=None):
    try:
        v = float(v)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, got {type(v).__name__}") from None
    if not np.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {v}")
    if upper is not None and v >= upper:
        raise ValueError(f"{name} must be < {upper} (the support of its hyperprior), got {v}")
    return v


def check_int(v, name, minimum):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v}")
    return int(v)


def check_key(key):
    if not (
        isinstance(key, jax.Array)
        and (jnp.issubdtype(key.dtype, jax.dtypes.prng_key) or (key.dtype == jnp.uint32 and key.shape == (2,)))
    ):
        raise TypeError("key must be a jax.random key (jax.random.key(0) or PRNGKey(0))")


def _data_scale(X):
    """Mean per-feature variance of ``X`` (1 for a single point or constant data)."""
    v = float(np.mean(np.var(X, axis=0))) if X.shape[0] > 1 else 0.0
    return v if v > 0 and np.isfinite(v) else 1.0


def make_config(X, *, mu0=None, prior_var=None, sigma2_max=None, step=(0.3, 0.3, 0.3, 0.1), gamma_max=1.5):
    """The `BHMCConfig` for data ``X``.

    Defaults come from the data, so the model moves with it under ``X -> a X + b``: ``mu0``
    the per-feature mean, ``prior_var`` the per-feature variance (the spread of the component
    means is at most the data's; a constant feature gets ``1e-6`` of the mean variance),
    ``sigma2_max`` the mean per-feature variance (the noise cannot exceed the data's spread)."""
    X = np.asarray(X, float)
    D = X.shape[1]
    scale = _data_scale(X)
    if mu0 is None:
        mu0 = np.mean(X, axis=0)
    if prior_var is None:
        prior_var = np.maximum(np.var(X, axis=0), 1e-6 * scale) if X.shape[0] > 1 else np.full(D, scale)
    try:
        mu0 = np.broadcast_to(np.asarray(mu0, float), (D,))
        pv = np.broadcast_to(np.asarray(prior_var, float), (D,))
    except (TypeError, ValueError):
        raise ValueError(f"mu0 and prior_var must be scalars or length-{D} vectors") from None
    if not np.all(np.isfinite(mu0)):
        raise ValueError("mu0 must be finite")
    if not np.all(np.isfinite(pv)) or np.any(pv <= 0):
        raise ValueError(f"prior_var must be finite and > 0, got {prior_var}")
    if sigma2_max is None:
        sigma2_max = scale
    sigma2_max = check_positive(sigma2_max, "sigma2_max")
    f = jnp.result_type(float)
    return BHMCConfig(
        jnp.asarray(mu0, f),
        jnp.asarray(pv, f),
        jnp.asarray(sigma2_max, f),
        jnp.asarray(step, f),
        jnp.asarray(gamma_max, f),
    )


def raise_overflow(flag, M, K, where):
    if flag & OVERFLOW_NODES:
        raise ValueError(f"BHMC ran out of node slots (max_nodes={M}) {where}; pass a larger max_nodes")
    if flag & OVERFLOW_COMPONENTS:
        raise ValueError(f"BHMC ran out of component slots (max_components={K}) {where}; pass a larger max_components")


# ------------------------------------------------------------------------------------------
# padding the points to a bucket size (module docstring)
# ------------------------------------------------------------------------------------------
def _shuffle_rounds(n: int) -> int:
    """Sorting rounds `jax.random.permutation` uses for ``n`` entries."""
    return int(np.ceil(3 * np.log(max(1, n)) / np.log(np.iinfo(np.uint32).max)))


def row_permutation(key, size: int, num_points=None):
    """A uniformly random order ``[size]`` of the rows ``0..n-1`` (``n = num_points``, a traced
    int allowed; default ``size``), followed by the padding rows ``n..size-1`` (in some order).

    The real rows' order depends on ``key`` and ``n`` only, not on ``size``, and equals
    ``jax.random.permutation(key, n)`` (its sorts by random 32-bit keys, the padding rows
    sorted last)."""
    n = size if num_points is None else num_points
    x = jnp.arange(size, dtype=jnp.int32)
    for r in range(_shuffle_rounds(size)):
        key, sub = jax.random.split(key)
        bits = jax.random.bits(sub, (size,), jnp.uint32)
        y = jax.lax.sort(((x >= n).astype(jnp.int32), bits, x), num_keys=2, is_stable=True)[2]
        if r == 0:  # every n > 1 sorts at least once (n <= 1: the identity either way)
            x = y
        else:  # round r only for the sizes that need it (rounds(m) > r <=> m > the last m without)
            lo, hi = 1, size
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if _shuffle_rounds(mid) <= r else (lo, mid - 1)
            x = jnp.where(n > lo, y, x)
    return x


def point_mask(size: int, num_points=None):
    """``bool [size]``: the real points (``None`` when nothing is padded)."""
    return None if num_points is None else jnp.arange(size) < num_points


def pad_state(st: BHMCState, size: int) -> BHMCState:
    """A host state of ``N`` points padded to ``size`` rows (path 0, component 0)."""
    st = jax.device_get(st)
    return st._replace(path=pad_rows(np.asarray(st.path), size, 0, -2), c=pad_rows(np.asarray(st.c), size, 0, -1))


def unpad_state(st: BHMCState, num_points: int) -> BHMCState:
    """The state's first ``num_points`` points (host arrays; a leading chain axis is kept)."""
    st = jax.device_get(st)
    return st._replace(path=np.asarray(st.path)[..., :num_points, :], c=np.asarray(st.c)[..., :num_points])


def grow_state(st: BHMCState, M2: int, K2: int) -> BHMCState:
    """``st`` (or a stack of chains) padded to ``M2`` node and ``K2`` component slots."""
    M, K1 = st.logb.shape[-2:]
    K = K1 - 1
    lead = st.logb.shape[:-2]
    f = st.logb.dtype
    logb = jnp.full(lead + (M2, K2 + 1), NEG_INF, f).at[..., :, K2].set(0.0)
    logb = logb.at[..., :M, :K].set(st.logb[..., :K]).at[..., :M, K2].set(st.logb[..., K])
    theta = jnp.zeros(lead + (K2, st.theta.shape[-1]), f).at[..., :K, :].set(st.theta)

    def pad(a, fill):
        return jnp.full(lead + (M2,), fill, a.dtype).at[..., :M].set(a)

    return st._replace(
        logb=logb,
        theta=theta,
        parent=pad(st.parent, -1),
        level=pad(st.level, 0),
        count=pad(st.count, 0),
        overflow=jnp.zeros_like(st.overflow),
    )
