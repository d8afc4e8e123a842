"""The cross-cutting DPM (CDPM, "CrossCat"; Shafto et al. 2006; Li & Shafto, Eq. 1-5).

``u ~ CRP(alpha)`` over the ``J`` columns assigns each column to a view (Eq. 1); within each
view ``v``, ``Z[:, v] ~ CRP(alpha)`` over the ``N`` rows (Eq. 2); every (view, row cluster,
column) has conjugate parameters ``Theta ~ H`` (Eq. 3) and ``X[i, j] ~ F(. | Theta[u_j,
Z[i, u_j], j])`` (Eq. 4). Integrating ``Theta`` out gives Eq. 5: the block of view ``v``'s
columns and row cluster ``c`` has density ``G = component.log_marginal`` of the component
restricted to those columns.

`cdpm` is the generative program: sites ``column_view [J]`` (sequential CRP, as in `dpm`),
``row_cluster [N, V]`` (one sequential CRP per view slot, labels in first-appearance order),
``truncated`` (deterministic), then ``theta [V, K, J] ~ Beta`` (plates ``views``,
``clusters``, ``columns``) and ``X [N, J]`` for the Beta families, or ``mu [V, K, J] ~
Normal`` for a `NormalKnownCov` with diagonal covariances. Capacities ``max_views`` (default
``J``) and ``max_clusters`` (default ``N``) are exact by default; smaller ones truncate the
CRPs and set ``truncated``.

`cdpm_log_joint` is the collapsed joint ``log CRP(u) + sum_v [log CRP(Z_v) + sum_c log
G(X[Z_v = c, u = v])]``. `cdpm_log_evidence_bruteforce` is ``log sum_u sum_{Z_v, v in u}
exp(joint)``; because the joint factorises over views given ``u``, the inner sum over the
row partitions of all views is the product over views of each view's DPM evidence, which is
how it is computed (the same sum, exactly). `dpm_log_evidence_bruteforce` is re-exported:
the CDPM with one column is the DPM.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import logsumexp

from .._internal.deprecation import keyword_program
from .._internal.validation import check_component as _check_component
from ..components import BetaBernoulli, BetaBinomial, Component, NormalKnownCov
from .dpm import (
    MAX_BRUTEFORCE_ROWS,
    crp_log_prob,
    dpm_log_evidence_bruteforce,
    dpm_log_joint,
    set_partitions,
)
from .dpm import check_alpha_jax as _check_alpha
from .dpm import check_count as _check_count
from .dpm import check_labels as _check_labels
from .dpm import check_program_component as _check_program_component
from .dpm import col_vec as _col_vec
from .dpm import crp_scan as _crp_scan
from .dpm import program_data as _program_data
from .dpm import program_sizes as _program_sizes

__all__ = [
    "CDPMSample",
    "cdpm",
    "cdpm_log_joint",
    "cdpm_log_evidence_bruteforce",
    "dpm_log_evidence_bruteforce",
    "restrict_columns",
    "MAX_BRUTEFORCE_COLS",
]

MAX_BRUTEFORCE_COLS = 4


def restrict_columns(component: Component, cols: Union[Sequence[int], np.ndarray]) -> Component:
    """The component of the columns ``cols`` alone (its prior marginalised to them), by the
    family's `Component.restrict_columns`: Beta families slice their per-column parameters;
    `NormalKnownCov` takes the sub-vector and sub-matrices. Families whose columns are not
    separable raise `jaxhc.components.ColumnSplitError` (a ``TypeError``)."""
    _check_component(component)
    return component.restrict_columns(np.asarray(cols, dtype=np.int64), name="the CDPM")


# ------------------------------------------------------------------------------------------
# generative program
# ------------------------------------------------------------------------------------------
class CDPMSample(NamedTuple):
    """Output of `cdpm`: data ``X [N, J]``, ``column_views [J]`` (view of each column),
    ``row_labels [N, V]`` (column ``v``: the row labels of view slot ``v``; slots no column
    uses are drawn but irrelevant), ``truncated`` (a capacity was hit)."""

    X: jax.Array
    column_views: jax.Array
    row_labels: jax.Array
    truncated: jax.Array


@keyword_program("X", "component", "alpha", "num_points", "dim")
def cdpm(
    *,
    X=None,
    component: Optional[Component] = None,
    alpha=1.0,
    num_points: Optional[int] = None,
    dim: Optional[int] = None,
    max_views: Optional[int] = None,
    max_clusters: Optional[int] = None,
    num_rows: Optional[int] = None,
    num_cols: Optional[int] = None,
) -> CDPMSample:
    """The CDPM (Eq. 1-4) as a NumPyro program (see the module docstring for the sites).

    Every argument is a keyword, as in `jaxhc.models.dpm.dpm`; the former positional order
    ``(X, component, alpha, num_rows, num_cols)`` still works for one release, with a
    ``DeprecationWarning``.

    Args:
      X: data ``[N, J]`` to condition on, or None to sample it.
      component: `BetaBernoulli`, `BetaBinomial`, or `NormalKnownCov` with diagonal
        covariances (columns are independent given their cluster); required.
      alpha: concentration of every CRP (> 0).
      num_points, dim: table size ``N``, ``J`` (taken from ``X`` when given; ``num_points``
        is required when ``X`` is None, ``dim`` defaults to ``component.dim``).
      max_views, max_clusters: CRP capacities (defaults ``J`` and ``N``: exact).
      num_rows, num_cols: deprecated spellings of ``num_points`` and ``dim``.
    """
    num_points, dim = _program_sizes(num_points, dim, num_rows, num_cols, "jaxhc.models.cdpm.cdpm")
    component = _check_program_component(component)
    alpha = _check_alpha(alpha)
    Xo, n, d = _program_data(X, component, num_points, dim)
    V = d if max_views is None else min(_check_count(max_views, "max_views"), d)
    K = n if max_clusters is None else min(_check_count(max_clusters, "max_clusters"), n)
    if isinstance(component, NormalKnownCov):
        for nm in ("prior_cov", "noise_cov"):
            m = np.asarray(getattr(component, nm))
            if np.any(m - np.diag(np.diag(m))):
                raise ValueError(
                    f"component.{nm} must be diagonal for the cdpm program (columns are "
                    f"conditionally independent); the collapsed functions accept full covariances"
                )

    u, t1 = _crp_scan("column_view", alpha, d, V)
    Z, t2 = _crp_scan("row_cluster", alpha, n, K, batch=(V,))  # [n, V]
    trunc = t1 | t2
    numpyro.deterministic("truncated", trunc)
    cols = jnp.arange(d)
    zi = Z[:, u]  # [n, d]: row cluster of each entry in its column's view
    with numpyro.plate("views", V, dim=-3), numpyro.plate("clusters", K, dim=-2), numpyro.plate("columns", d, dim=-1):
        if isinstance(component, NormalKnownCov):
            par = numpyro.sample("mu", dist.Normal(component.mean, jnp.sqrt(jnp.diag(component.prior_cov))))
        else:
            par = numpyro.sample("theta", dist.Beta(_col_vec(component.a, d), _col_vec(component.b, d)))
    p = par[u[None, :], zi, cols[None, :]]  # [n, d]
    with numpyro.plate("rows", n, dim=-2), numpyro.plate("columns", d, dim=-1):
        if isinstance(component, BetaBernoulli):
            x = numpyro.sample("X", dist.Bernoulli(probs=p), obs=Xo)
        elif isinstance(component, BetaBinomial):
            t = jnp.broadcast_to(jnp.asarray(component.trials), (d,))
            x = numpyro.sample("X", dist.Binomial(total_count=t, probs=p), obs=Xo)
        else:
            x = numpyro.sample("X", dist.Normal(p, jnp.sqrt(jnp.diag(component.noise_cov))), obs=Xo)
    return CDPMSample(x, u, Z, trunc)


# ------------------------------------------------------------------------------------------
# collapsed joint and brute-force evidence
# ------------------------------------------------------------------------------------------
def _view_row_labels(row_labels_per_view, view_ids, n):
    """Row labels of each original view label in ``view_ids``, from a mapping ``{view:
    labels [N]}`` or an array ``[N, V]`` whose column ``v`` is view ``v``'s labels."""
    out = {}
    if isinstance(row_labels_per_view, Mapping):
        for v in view_ids:
            if v not in row_labels_per_view:
                raise ValueError(f"row_labels_per_view has no labels for view {v}")
            out[v] = _check_labels(row_labels_per_view[v], n, f"row_labels_per_view[{v}]")
        return out
    arr = np.asarray(row_labels_per_view)
    if arr.ndim != 2 or arr.shape[0] != n:
        raise ValueError(
            f"row_labels_per_view must be a mapping {{view: labels [{n}]}} or an array [{n}, V], got shape {arr.shape}"
        )
    for v in view_ids:
        if not 0 <= v < arr.shape[1]:
            raise ValueError(f"row_labels_per_view has {arr.shape[1]} columns but column_views uses view {v}")
        out[v] = _check_labels(arr[:, v], n, f"row_labels_per_view[:, {v}]")
    return out


def cdpm_log_joint(X, column_views, row_labels_per_view, component: Component, alpha):
    """Collapsed ``log p(X, u, Z) = log CRP(u | alpha) + sum_v [log CRP(Z_v | alpha) + sum_c
    log G(X[Z_v = c, u = v])]`` (Eq. 1, 2, 5), ``G`` the component restricted to the view's
    columns (`restrict_columns`).

    Args:
      X: data ``[N, J]``.
      column_views: integer view label of each column ``[J]``.
      row_labels_per_view: ``{view label: row labels [N]}``, or an array ``[N, V]`` whose
        column ``v`` holds the row labels of view label ``v`` (as `cdpm` returns).
      component, alpha: as in `cdpm`.
    """
    _check_component(component)
    alpha = _check_alpha(alpha)
    Xa = component.validate_data(X, "X")
    n, d = Xa.shape
    if isinstance(column_views, jax.core.Tracer):
        raise TypeError("column_views must be concrete (not traced)")
    u_raw = np.asarray(column_views)
    _check_labels(u_raw, d, "column_views")  # shape and dtype checks
    u_raw = u_raw.astype(np.int64)
    view_ids = sorted(set(int(v) for v in u_raw))
    Zs = _view_row_labels(row_labels_per_view, view_ids, n)
    out = crp_log_prob(u_raw, alpha)
    for v in view_ids:
        cols = np.flatnonzero(u_raw == v)
        out = out + dpm_log_joint(Xa[:, cols], Zs[v], restrict_columns(component, cols), alpha)
    return out


def cdpm_log_evidence_bruteforce(
    X, component: Component, alpha, *, max_rows: int = MAX_BRUTEFORCE_ROWS, max_cols: int = MAX_BRUTEFORCE_COLS
):
    """``log p(X) = log sum_u sum_{Z} exp cdpm_log_joint(X, u, Z)`` over every column
    partition ``u`` and every row partition of every view (computed as ``sum_u CRP(u)
    prod_v p_DPM(X[:, u = v])``, the same sum factorised). Raises ``ValueError`` above
    ``max_rows`` rows (default 6) or ``max_cols`` columns (default 4)."""
    _check_component(component)
    alpha = _check_alpha(alpha)
    Xa = component.validate_data(X, "X")
    n, d = Xa.shape
    if n > max_rows or d > max_cols:
        raise ValueError(
            f"X has shape {Xa.shape}; the brute-force evidence is limited to {max_rows} rows x {max_cols} columns"
        )
    cache = {}

    def view_ev(cols):
        key = tuple(cols)
        if key not in cache:
            cache[key] = dpm_log_evidence_bruteforce(
                Xa[:, list(cols)], restrict_columns(component, cols), alpha, max_rows=max_rows
            )
        return cache[key]

    terms = []
    for p in set_partitions(d):
        t = crp_log_prob(p, alpha)
        for v in range(int(p.max()) + 1):
            t = t + view_ev(tuple(int(c) for c in np.flatnonzero(p == v)))
        terms.append(t)
    return logsumexp(jnp.stack(terms))
