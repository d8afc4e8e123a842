"""Shared pieces of the Gibbs samplers (`jaxhc.inference.gibbs`): statistics bookkeeping
(removal and segment sums), CRP helpers, input validation and the NumPyro kernel state."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from ..._internal.dtypes import float_dtype as _float
from ..._internal.validation import check_alpha, check_component
from ...components import (
    CountStats,
    GaussianStats,
    MultinomialStats,
)

_tmap = jax.tree_util.tree_map


# ==========================================================================================
# statistics bookkeeping (removal and segment sums; merge itself is the component's)
# ==========================================================================================
def to_additive(s):
    """Statistics as quantities that add over disjoint data sets. Count and multinomial
    statistics already do (their ``merge`` is a sum); Gaussian ``(n, mean, scatter)`` become
    the raw moments ``(n, n mean, scatter + n mean mean^T)``."""
    if isinstance(s, GaussianStats):
        sm = s.n[..., None] * s.mean
        return (s.n, sm, s.scatter + sm[..., :, None] * s.mean[..., None, :])
    return s


def from_additive(a, like):
    if isinstance(like, GaussianStats):
        n, sm, sq = a
        safe = jnp.where(n > 0, n, 1.0)[..., None]
        mean = jnp.where(n[..., None] > 0, sm / safe, 0.0)
        return GaussianStats(n, mean, sq - sm[..., :, None] * mean[..., None, :])
    return a


def sub_stats(s, t):
    """Statistics of ``D \\ D_t`` from those of ``D`` and of the subset ``D_t`` (the inverse
    of ``merge``)."""
    a, b = to_additive(s), to_additive(t)
    return from_additive(_tmap(lambda x, y: x - y, a, b), s)


def segment_stats(leaves, ids, num):
    """Statistics of ``num`` groups from per-item statistics ``leaves`` (leading axis over
    items, ids ``[items]`` in ``0..num-1``)."""
    a = to_additive(leaves)
    out = _tmap(lambda x: jax.ops.segment_sum(x, ids, num_segments=num), a)
    return from_additive(out, leaves)


def take_slots(s, idx):
    return _tmap(lambda a: a[idx], s)


def zeros_stats(s):
    return _tmap(jnp.zeros_like, s)


def _check_stats_type(component, X):
    s = component.stats(jnp.asarray(X[:1]))
    if not isinstance(s, (CountStats, GaussianStats, MultinomialStats)):
        raise TypeError(
            f"the Gibbs samplers need statistics whose merge can be undone (CountStats, "
            f"GaussianStats, MultinomialStats); {type(component).__name__} gives {type(s).__name__}"
        )


def log_marginal(component, s, cache):
    return component.log_marginal(s) if cache is None else component.log_marginal(s, cache)


def crp_log_prob_counts(counts, alpha):
    """``log CRP`` of a partition given its cluster sizes ``counts [..., K]`` (0 = empty)."""
    occ = counts > 0
    n = jnp.sum(counts, axis=-1)
    return (
        jnp.sum(occ, axis=-1) * jnp.log(alpha)
        + jnp.sum(jnp.where(occ, gammaln(jnp.where(occ, counts, 1.0)), 0.0), axis=-1)
        + gammaln(alpha)
        - gammaln(alpha + n)
    )


def crp_draw(key, n, K, alpha, batch=(), dtype=jnp.float32):
    """Sequential CRP draws over ``n`` items, ``batch`` independent ones: labels ``[*batch,
    n]`` in first-appearance order and cluster sizes ``[*batch, K]``."""

    def step(counts, k):
        occ = counts > 0
        new = jnp.arange(K) == jnp.sum(occ, axis=-1, keepdims=True)
        logits = jnp.where(occ, jnp.log(jnp.where(occ, counts, 1.0)), jnp.where(new, jnp.log(alpha), -jnp.inf))
        z = jax.random.categorical(k, logits, axis=-1)
        return counts + jax.nn.one_hot(z, K, dtype=counts.dtype), z

    counts, z = jax.lax.scan(step, jnp.zeros(tuple(batch) + (K,), dtype), jax.random.split(key, n))
    return jnp.moveaxis(z, 0, -1).astype(jnp.int32), counts


crp_draw_jit = jax.jit(crp_draw, static_argnums=(1, 2, 4, 5))


def select_rows(mask, a, b):
    """Leaf-wise ``where(mask[k], a[k], b[k])`` over the leading axis."""
    return _tmap(lambda x, y: jnp.where(mask.reshape(mask.shape + (1,) * (x.ndim - mask.ndim)), x, y), a, b)


# ==========================================================================================
# validation
# ==========================================================================================
def check_int(v, name, minimum):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {v!r}")
    return int(v)


def validate(X, component, alpha, name="X"):
    check_component(component)
    alpha = check_alpha(alpha)
    Xa = component.validate_data(X, name)
    _check_stats_type(component, Xa)
    return jnp.asarray(Xa, _float()), alpha


def check_leaf_scores(component, Xa, who):
    """Raises a ``ValueError`` (as `jaxhc.bhc` does) when a single row's log marginal is not
    finite, e.g. for data at a scale the prior was not fitted on; the sampler's scores would
    be NaN."""
    leaf = component.leaf_stats(Xa)
    lm = np.asarray(component.log_marginal(leaf))
    if np.all(np.isfinite(lm)):
        return
    from ..bhc.greedy import check_finite_scores

    try:
        check_finite_scores(component, leaf, Xa.shape[0], leaf_log_h1=lm)
    except ValueError as e:
        msg = str(e)
        raise ValueError(f"{who}{msg[3:]}" if msg.startswith("bhc:") else msg) from None


def check_no_nan(log_joint, who, X):
    if np.any(np.isnan(np.asarray(log_joint))):
        raise ValueError(
            f"{who}: the log joint of the samples became NaN; X's entries reach "
            f"{float(np.nanmax(np.abs(np.asarray(X)))):.3g}: check that the component's prior fits the data's "
            f"scale (refit it with from_data(X), or standardise X's columns)"
        )


def check_labels(labels, n, name="labels"):
    from ...models.dpm import check_labels as check

    if isinstance(labels, jax.core.Tracer):
        return labels.astype(jnp.int32)
    return jnp.asarray(check(labels, n, name), jnp.int32)


def check_heat(heat):
    try:
        h = float(heat)
    except (TypeError, ValueError):
        raise TypeError(f"heat must be a scalar in (0, 1], got {heat!r}") from None
    if np.ndim(heat) != 0 or not (0.0 < h <= 1.0):
        raise ValueError(f"heat must be a scalar in (0, 1], got {heat!r}")
    return h


def int_dtype():
    """The integer dtype ``jnp.sum`` of booleans gives (int64 under x64)."""
    return jax.dtypes.canonicalize_dtype(jnp.int64)


def check_run(num_samples, num_warmup, thin):
    return (
        check_int(num_samples, "num_samples", 1),
        check_int(num_warmup, "num_warmup", 0),
        check_int(thin, "thin", 1),
    )


# ==========================================================================================
# NumPyro MCMCKernel adapters
# ==========================================================================================
class KernelState(NamedTuple):
    sample: Any
    state: Any
    rng_key: jax.Array
