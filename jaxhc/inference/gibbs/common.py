"""Shared pieces of the Gibbs samplers (`jaxhc.inference.gibbs`): statistics bookkeeping
(removal and segment sums), CRP helpers, shape buckets, input validation and the NumPyro
kernel state."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from ..._internal.buckets import MIN_BUCKET, bucket, bucket_grid, pad_rows
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
    s = jax.eval_shape(component.stats, jax.ShapeDtypeStruct((1,) + X.shape[1:], X.dtype))  # traced only
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


def _batch_keys(key, batch):
    """Independent keys ``[*batch]``: ``split`` level by level, so the key of element
    ``(j, a)`` does not depend on the batch's size (a padded batch keeps its real keys)."""
    if not batch:
        return key
    return jax.vmap(lambda k: _batch_keys(k, batch[1:]))(jax.random.split(key, batch[0]))


def crp_draw(key, n, size, K, alpha, batch=(), dtype=jnp.float32):
    """Sequential CRP draws over the first ``n`` of ``size`` items (``n`` may be traced),
    ``batch`` independent ones: labels ``[*batch, size]`` in first-appearance order (items
    ``n..size-1`` get the out-of-range label ``K`` and count nowhere) and cluster sizes
    ``[*batch, K]``.

    Item ``t`` draws with the ``t``-th key of ``split(key, size)`` over ``K`` slots, batch
    element ``b`` with its own key (`_batch_keys`), so the draws of the real items are the same
    whatever ``size`` and ``K`` (padded) or the batch's size: one draw over ``[K]`` logits per
    item and key (``-inf`` beyond the first free slot)."""

    def one(key):
        def step(counts, tk):
            t, k = tk
            occ = counts > 0
            new = jnp.arange(K) == jnp.sum(occ)
            logits = jnp.where(occ, jnp.log(jnp.where(occ, counts, 1.0)), jnp.where(new, jnp.log(alpha), -jnp.inf))
            z = jnp.where(t < n, jax.random.categorical(k, logits), K)
            return counts + jax.nn.one_hot(z, K, dtype=counts.dtype), z  # z = K: a zero row

        counts, z = jax.lax.scan(step, jnp.zeros((K,), dtype), (jnp.arange(size), jax.random.split(key, size)))
        return z.astype(jnp.int32), counts

    if not batch:
        return one(key)
    keys = _batch_keys(key, tuple(batch))
    flat = jax.tree_util.tree_map(lambda k: k.reshape((-1,) + k.shape[len(batch) :]), keys)
    z, counts = jax.vmap(one)(flat)
    return z.reshape(tuple(batch) + (size,)), counts.reshape(tuple(batch) + (K,))


crp_draw_jit = jax.jit(crp_draw, static_argnums=(2, 3, 5, 6))


# ==========================================================================================
# shape buckets (jaxhc._internal.buckets)
# ==========================================================================================
_BUCKETS = True  # False: programs at the data's exact shape (the tests' reference path)


def padded_size(n: int) -> int:
    """The size a data axis of ``n`` entries is padded to: its bucket (exact ``n`` when the
    module flag ``_BUCKETS`` is off)."""
    return bucket(n) if _BUCKETS else int(n)


def bucket_floor(size: int, n: int) -> int:
    """The smallest data size padded to ``size`` (``n`` itself when buckets are off)."""
    if not _BUCKETS:
        return int(n)
    if size <= MIN_BUCKET:
        return 1
    return max(b for b in bucket_grid(MIN_BUCKET, size) if b < size) + 1


def pad_axis(a, size, fill, axis=0):
    """``a`` padded with ``fill`` to ``size`` along ``axis``: NumPy on the host (no program
    compiled per shape), ``jnp`` for a traced ``a``."""
    extra = int(size) - a.shape[axis]
    if isinstance(a, jax.core.Tracer):
        widths = [(0, 0)] * a.ndim
        widths[axis] = (0, extra)
        return jnp.pad(a, widths, constant_values=fill) if extra else a
    return pad_rows(a, size, fill, axis)


def take_front(a, sizes):
    """``a[:sizes[0], :sizes[1], ...]`` (leading axes; NumPy on the host, ``jnp`` when traced)."""
    idx = tuple(slice(0, int(k)) for k in sizes)
    if isinstance(a, jax.core.Tracer):
        return a[idx]
    return np.asarray(a)[idx]


def to_device(tree):
    """Host arrays of ``tree`` as device arrays (a transfer, no compiled program)."""
    return _tmap(lambda a: a if isinstance(a, jax.core.Tracer) else jnp.asarray(a), tree)


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
    """``(X as a host float array [n, d], alpha)``; raises on invalid input."""
    check_component(component)
    alpha = check_alpha(alpha)
    Xa = np.asarray(component.validate_data(X, name), dtype=jnp.dtype(_float()))
    _check_stats_type(component, Xa)
    return Xa, alpha


def check_leaf_scores(component, Xa, who, lm=None):
    """Raises a ``ValueError`` (as `jaxhc.bhc` does) when a single row's log marginal is not
    finite, e.g. for data at a scale the prior was not fitted on; the sampler's scores would
    be NaN. ``lm``: the rows' log marginals where the caller computed them already (in its
    padded program), so that only a failure computes them here (eagerly, at ``Xa``'s shape)."""
    if lm is not None and np.all(np.isfinite(np.asarray(lm))):
        return
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
    return np.asarray(check(labels, n, name), np.int32)


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
