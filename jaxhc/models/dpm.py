"""The Dirichlet-process mixture (DPM) with a conjugate component, as a NumPyro program.

Model (Neal 1998; Heller & Ghahramani 2005, Sec. 2): row labels ``z ~ CRP(alpha)``,
per-cluster parameters ``theta_k ~ H`` (the component's prior), rows ``x_i ~ F(. |
theta_{z_i})``.

`dpm` is the generative program. The CRP is drawn *sequentially* (the Chinese restaurant
itself, not a truncated stick-breaking): a `scan` over rows with one ``Categorical`` site
``z`` (stacked ``[num_rows]``), so the labels come out in order of first appearance
(``z[0] = 0``, a new cluster takes the next free label) and ``sum log p(z)`` over the trace
is exactly ``crp_log_prob(z, alpha)``. The capacity is fixed (``max_clusters``, default
``num_rows``, which can never be exceeded, so the default draw is exact). With a smaller
capacity a row that would open a cluster beyond it is forced into an existing one; the
program then reports ``truncated = True`` (also the deterministic site ``"truncated"``) and
the draw is not from the CRP. With ``labels="exchangeable"`` a new cluster takes one of the
unused labels uniformly instead (same partition law; every labelling has positive
probability, which samplers that update one label at a time need).

Parameter / data sites: ``BetaBernoulli`` / ``BetaBinomial``: ``theta [K, d] ~ Beta(a, b)``
(plates ``clusters``, ``columns``), ``X [n, d] ~ Bernoulli / Binomial(trials, theta[z])``;
``NormalKnownCov``: ``mu [K, d] ~ N(mean, prior_cov)``, ``X [n, d] ~ N(mu[z], noise_cov)``.
Other families raise ``TypeError`` in the program (the collapsed functions accept any
component).

`dpm_log_joint` is the collapsed joint ``log p(X, z) = log CRP(z | alpha) + sum_k log
p(X_k)`` (component parameters integrated out). `dpm_log_evidence_bruteforce` sums it over
all set partitions of the rows (tiny data only).
"""

from __future__ import annotations

from typing import Iterator, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import gammaln, logsumexp
from numpyro.contrib.control_flow import scan

from .._internal.deprecation import keyword_program, renamed_argument
from .._internal.dtypes import float_dtype as _float
from .._internal.validation import check_alpha, check_component
from ..components import BetaBernoulli, BetaBinomial, Component, NormalKnownCov

__all__ = [
    "DPMSample",
    "dpm",
    "crp_log_prob",
    "dpm_log_joint",
    "dpm_log_evidence_bruteforce",
    "set_partitions",
    "MAX_BRUTEFORCE_ROWS",
]

MAX_BRUTEFORCE_ROWS = 6


# ------------------------------------------------------------------------------------------
# validation helpers (shared with cdpm)
# ------------------------------------------------------------------------------------------
def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def check_alpha_jax(alpha, name="alpha"):
    """`jaxhc._internal.validation.check_alpha`, returned as a JAX scalar (traced values pass)."""
    return jnp.asarray(check_alpha(alpha, name), _float())


def check_count(v, name, allow_none=False):
    if v is None:
        if allow_none:
            return None
        raise ValueError(f"{name} is required")
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")
    return int(v)


def check_labels(labels, n, name="labels") -> np.ndarray:
    """Concrete integer labels ``[n]``, relabelled ``0..K-1`` in order of first appearance."""
    if isinstance(labels, jax.core.Tracer):
        raise TypeError(f"{name} must be concrete (not traced)")
    arr = np.asarray(labels)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"{name} must have shape [{n}], got {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.bool_)):
        if not np.issubdtype(arr.dtype, np.floating) or np.any(arr != np.round(arr)):
            raise TypeError(f"{name} must be integer labels, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    _, first, inv = np.unique(arr, return_index=True, return_inverse=True)
    order = np.argsort(np.argsort(first))  # rank of each unique label by first appearance
    return order[inv.reshape(-1)]


def set_partitions(n: int) -> Iterator[np.ndarray]:
    """All set partitions of ``n`` items as restricted growth strings (labels ``[n]`` in
    order of first appearance); there are Bell(n) of them."""
    n = check_count(n, "n")

    def rec(prefix, k):
        if len(prefix) == n:
            yield np.array(prefix, dtype=np.int64)
            return
        for c in range(k + 1):
            yield from rec(prefix + [c], max(k, c + 1))

    yield from rec([0], 1)


# ------------------------------------------------------------------------------------------
# CRP
# ------------------------------------------------------------------------------------------
def crp_log_prob(labels, alpha):
    """``log CRP(labels | alpha) = K log alpha + sum_k log Gamma(n_k) + log Gamma(alpha) -
    log Gamma(alpha + n)`` for a partition given as integer labels ``[n]`` (any label values
    when concrete; traced labels must lie in ``0..n-1``). Differentiable in ``alpha``."""
    alpha = check_alpha_jax(alpha)
    if _is_concrete(labels):
        arr = np.asarray(labels)
        labels = check_labels(arr, arr.shape[0] if arr.ndim == 1 else -1)
    labels = jnp.asarray(labels)
    n = labels.shape[0]
    counts = jnp.sum(labels[:, None] == jnp.arange(n)[None, :], axis=0).astype(alpha.dtype)
    occ = counts > 0
    K = jnp.sum(occ)
    return (
        K * jnp.log(alpha)
        + jnp.sum(jnp.where(occ, gammaln(jnp.where(occ, counts, 1.0)), 0.0))
        + gammaln(alpha)
        - gammaln(alpha + n)
    )


def crp_scan(name, alpha, n, K, batch=(), labels: str = "ordered"):
    """Sequential CRP over ``n`` items with capacity ``K``, ``len(batch)`` independent
    restaurants in parallel. Returns labels ``[n, *batch]`` and a truncation flag.

    ``labels="ordered"``: a new cluster takes the next free label (first-appearance order).
    ``"exchangeable"``: it takes one of the ``K - k`` unused labels uniformly, so the labels are
    a uniformly random labelling of the CRP partition (``log p(z) = crp_log_prob(z) +
    log((K - k)! / K!)``, ``k`` clusters) and every labelling has positive probability."""
    f = alpha.dtype
    exchangeable = labels == "exchangeable"

    def step(carry, _):
        counts, trunc = carry
        occupied = counts > 0
        num = jnp.sum(occupied, axis=-1)
        if exchangeable:  # alpha shared by the unused labels
            new = ~occupied
            a_new = alpha / jnp.maximum(K - num, 1).astype(f)[..., None]
        else:
            new = jnp.arange(K) == num[..., None]
            a_new = alpha
        w = jnp.where(occupied, counts, jnp.where(new, a_new, 0.0))
        d = dist.Categorical(probs=w / jnp.sum(w, axis=-1, keepdims=True))
        if batch:
            d = d.to_event(len(batch))
        z = numpyro.sample(name, d)
        counts = counts + jax.nn.one_hot(z, K, dtype=f)
        return (counts, trunc | jnp.any(num >= K)), z

    init = (jnp.zeros(tuple(batch) + (K,), f), jnp.asarray(False))
    (_, trunc), z = scan(step, init, None, length=n)
    return z, trunc


# ------------------------------------------------------------------------------------------
# generative program
# ------------------------------------------------------------------------------------------
class DPMSample(NamedTuple):
    """Output of `dpm`: data ``X [n, d]``, labels ``z [n]`` (first-appearance order), and
    ``truncated`` (True when the capacity ``max_clusters`` was hit)."""

    X: jax.Array
    labels: jax.Array
    truncated: jax.Array


_PROGRAM_FAMILIES = (BetaBernoulli, BetaBinomial, NormalKnownCov)


def check_program_component(component) -> "BetaBernoulli | BetaBinomial | NormalKnownCov":
    """``component`` if it is one of the families the generative programs draw from."""
    check_component(component)
    if not isinstance(component, _PROGRAM_FAMILIES):
        raise TypeError(
            f"the generative program supports BetaBernoulli, BetaBinomial and NormalKnownCov "
            f"components, got {type(component).__name__} (the collapsed log joint and "
            f"brute-force evidence accept any component)"
        )
    return component


def program_data(X, component, num_points, dim, name="X"):
    """Eager checks shared by `dpm` and `cdpm`; returns (X or None, n, d)."""
    if X is not None:
        if isinstance(X, jax.core.Tracer):
            Xa = X
            if Xa.ndim != 2:
                raise ValueError(f"{name} must be 2-D [num_points, dim], got shape {Xa.shape}")
        else:
            Xa = component.validate_data(X, name)
            if np.any(np.isnan(Xa)):
                raise ValueError(f"{name} has missing entries (NaN); the generative program needs complete data")
        n, d = Xa.shape
        if num_points is not None and check_count(num_points, "num_points") != n:
            raise ValueError(f"num_points={num_points} but {name} has {n} rows")
        if dim is not None and check_count(dim, "dim") != d:
            raise ValueError(f"dim={dim} but {name} has {d} columns")
        return jnp.asarray(Xa, _float()), n, d
    if num_points is None:
        raise ValueError("num_points is required when X is None (sampling data)")
    n = check_count(num_points, "num_points")
    d = check_count(dim, "dim", allow_none=True)
    if d is None:
        d = component.dim
    elif (
        isinstance(component, NormalKnownCov)
        or np.ndim(getattr(component, "a", 0))
        or np.ndim(getattr(component, "b", 0))
    ) and d != component.dim:
        raise ValueError(f"dim={d} but the component was built for {component.dim} columns")
    return None, n, d


def program_sizes(num_points, dim, num_rows, num_cols, where: str):
    """``(num_points, dim)`` from the program's keywords and their deprecated spellings
    ``num_rows`` / ``num_cols`` (a ``DeprecationWarning`` names the new one)."""
    num_points = renamed_argument(num_points, num_rows, old="num_rows", new="num_points", where=where, stacklevel=5)
    dim = renamed_argument(dim, num_cols, old="num_cols", new="dim", where=where, stacklevel=5)
    return num_points, dim


def col_vec(v, d):
    return jnp.broadcast_to(jnp.asarray(v, _float()), (d,))


@keyword_program("X", "component", "alpha", "num_points")
def dpm(
    *,
    X=None,
    component: Optional[Component] = None,
    alpha=1.0,
    num_points: Optional[int] = None,
    dim: Optional[int] = None,
    max_clusters: Optional[int] = None,
    labels: str = "ordered",
    num_rows: Optional[int] = None,
    num_cols: Optional[int] = None,
) -> DPMSample:
    """The DPM as a NumPyro program (see the module docstring for the sites).

    Every argument is a keyword (``dpm(X=X, component=c)`` conditions on data,
    ``dpm(component=c, num_points=n)`` samples it); the former positional order ``(X,
    component, alpha, num_rows)`` still works for one release, with a ``DeprecationWarning``.

    Args:
      X: data ``[n, d]`` to condition on, or None to sample it.
      component: a `BetaBernoulli`, `BetaBinomial` or `NormalKnownCov` (required).
      alpha: CRP concentration (> 0).
      num_points: number of rows ``n`` (required when ``X`` is None; else taken from ``X``).
      dim: number of columns ``d`` when sampling (default ``component.dim``; else from ``X``).
      max_clusters: capacity of the CRP (default ``num_points``: exact).
      labels: ``"ordered"`` (default): a new cluster takes the next free label, so ``z`` is in
        order of first appearance and ``sum log p(z) = crp_log_prob(z, alpha)``.
        ``"exchangeable"``: a new cluster takes one of the unused labels uniformly at random;
        the partition has the same CRP law, ``sum log p(z) = crp_log_prob(z, alpha) + log((K -
        k)! / K!)`` (``K = max_clusters``, ``k`` clusters), and every labelling has positive
        probability. Use it when a sampler updates single labels (NumPyro's
        ``DiscreteHMCGibbs``): with ordered labels, a cluster other than the last one can never
        be emptied, so such a chain can only add clusters.
      num_rows, num_cols: deprecated spellings of ``num_points`` and ``dim``.

    Returns:
      `DPMSample` ``(X, labels, truncated)``.
    """
    num_points, dim = program_sizes(num_points, dim, num_rows, num_cols, "jaxhc.models.dpm.dpm")
    component = check_program_component(component)
    alpha = check_alpha_jax(alpha)
    Xo, n, d = program_data(X, component, num_points, dim)
    K = n if max_clusters is None else check_count(max_clusters, "max_clusters")
    K = min(K, n)
    if labels not in ("ordered", "exchangeable"):
        raise ValueError(f"labels must be 'ordered' or 'exchangeable', got {labels!r}")

    z, trunc = crp_scan("z", alpha, n, K, labels=labels)
    numpyro.deterministic("truncated", trunc)
    if isinstance(component, (BetaBernoulli, BetaBinomial)):
        with numpyro.plate("clusters", K, dim=-2), numpyro.plate("columns", d, dim=-1):
            theta = numpyro.sample("theta", dist.Beta(col_vec(component.a, d), col_vec(component.b, d)))
        p = theta[z]
        with numpyro.plate("rows", n, dim=-2), numpyro.plate("columns", d, dim=-1):
            if isinstance(component, BetaBernoulli):
                x = numpyro.sample("X", dist.Bernoulli(probs=p), obs=Xo)
            else:
                t = jnp.broadcast_to(jnp.asarray(component.trials), (d,))
                x = numpyro.sample("X", dist.Binomial(total_count=t, probs=p), obs=Xo)
    else:  # NormalKnownCov
        with numpyro.plate("clusters", K, dim=-1):
            mu = numpyro.sample("mu", dist.MultivariateNormal(component.mean, component.prior_cov))
        with numpyro.plate("rows", n, dim=-1):
            x = numpyro.sample("X", dist.MultivariateNormal(mu[z], component.noise_cov), obs=Xo)
    return DPMSample(x, z, trunc)


# ------------------------------------------------------------------------------------------
# collapsed joint and brute-force evidence
# ------------------------------------------------------------------------------------------
def _cluster_log_marginal(component, Xa, rows):
    return component.log_marginal(component.stats(jnp.asarray(Xa[np.asarray(rows)], _float())))


def dpm_log_joint(X, labels, component: Component, alpha):
    """Collapsed ``log p(X, labels) = log CRP(labels | alpha) + sum_k log p(X_{labels=k})``
    with the component parameters integrated out (``component.log_marginal``). Any
    component family; labels are any integers ``[n]`` (only the partition matters)."""
    check_component(component)
    alpha = check_alpha_jax(alpha)
    Xa = component.validate_data(X, "X")
    lab = check_labels(labels, Xa.shape[0])
    leaf = component.leaf_stats(jnp.asarray(Xa, _float()))
    return crp_log_prob(lab, alpha) + _partition_log_marginal(component, leaf, jnp.asarray(lab, jnp.int32))


@jax.jit
def _partition_log_marginal(component, leaf_stats, labels):
    """``sum_k log p(X_{labels=k})`` for labels in ``0..n-1``: the rows' statistics folded
    into ``n`` cluster slots by ``merge`` (empty slots have log marginal 0). One compiled
    program per family and ``n``, whatever the partition."""
    n = labels.shape[0]
    # a family whose dimension is unknown from scalar hyperparameters reports ``dim = 1``:
    # its empty statistics broadcast to the rows' own statistic shapes
    slots = jax.tree_util.tree_map(
        lambda e, l: jnp.broadcast_to(e, l.shape).astype(l.dtype), component.empty_stats((n,)), leaf_stats
    )

    def step(slots, i):
        c = labels[i]
        cur = jax.tree_util.tree_map(lambda x: x[c], slots)
        new = component.merge(cur, jax.tree_util.tree_map(lambda x: x[i], leaf_stats))
        return jax.tree_util.tree_map(lambda x, v: x.at[c].set(v), slots, new), None

    slots, _ = jax.lax.scan(step, slots, jnp.arange(n))
    used = jnp.zeros(n, bool).at[labels].set(True)
    return jnp.sum(jnp.where(used, component.log_marginal(slots), 0.0))


def _subset_log_marginals(component, Xa):
    """``log p(X_S)`` for every non-empty subset ``S`` of rows, indexed by bitmask."""
    n = Xa.shape[0]
    table = [jnp.zeros((), _float())]
    for mask in range(1, 1 << n):
        rows = [i for i in range(n) if mask >> i & 1]
        table.append(_cluster_log_marginal(component, Xa, rows))
    return table


def _partition_masks(p):
    masks = [0] * (int(p.max()) + 1)
    for i, c in enumerate(p):
        masks[c] |= 1 << i
    return masks


def dpm_log_evidence_bruteforce(X, component: Component, alpha, *, max_rows: int = MAX_BRUTEFORCE_ROWS):
    """``log p(X) = log sum_z exp dpm_log_joint(X, z)`` over all Bell(n) set partitions of
    the rows. Raises ``ValueError`` above ``max_rows`` rows (default 6)."""
    check_component(component)
    alpha = check_alpha_jax(alpha)
    Xa = component.validate_data(X, "X")
    n = Xa.shape[0]
    if n > max_rows:
        raise ValueError(f"X has {n} rows; the brute-force evidence is limited to {max_rows} rows")
    table = _subset_log_marginals(component, Xa)
    terms = []
    for p in set_partitions(n):
        lm = sum(table[m] for m in _partition_masks(p))
        terms.append(crp_log_prob(p, alpha) + lm)
    return logsumexp(jnp.stack(terms))
