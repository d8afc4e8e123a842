"""Held-out cells: log posterior predictives under DPM and CDPM samples."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from ..._internal.dtypes import float_dtype as _float
from ...components import Component
from .cdpm import column_components, make_columns
from .common import (
    from_additive,
    take_slots,
    to_additive,
    validate,
)

_tmap = jax.tree_util.tree_map


# ==========================================================================================
# held-out cells
# ==========================================================================================
def _check_cells(rows, cols, values, N, J):
    out = []
    for name, v, hi in (("rows", rows, N), ("cols", cols, J)):
        a = np.asarray(v)
        if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"{name} must be a 1-D integer array, got shape {a.shape} dtype {a.dtype}")
        if a.size and (a.min() < 0 or a.max() >= hi):
            raise ValueError(f"{name} must lie in [0, {hi}), got range [{a.min()}, {a.max()}]")
        out.append(jnp.asarray(a, jnp.int32))
    vals = np.asarray(values, dtype=float)
    if vals.shape != out[0].shape or out[1].shape != out[0].shape:
        raise ValueError(
            f"rows, cols and values must have the same shape [M], got {out[0].shape}, {out[1].shape}, {vals.shape}"
        )
    if not np.all(np.isfinite(vals)):
        raise ValueError("values must be finite")
    return out[0], out[1], jnp.asarray(vals, _float())


@jax.jit
def _predict_cells(X, comps, U, Zs, rows, cols, values):
    C = make_columns(X, comps)

    def one(u, Z):
        v = u[cols]  # [M]
        c = Z[rows, v]  # [M]
        member = Z[:, v].T == c[:, None]  # [M, N]
        cell_j = _tmap(lambda a: a[:, cols], C.cells)  # [N, M, ...]
        s = _tmap(lambda a: jnp.einsum("mn,nm...->m...", member.astype(a.dtype), a), to_additive(cell_j))
        s = from_additive(s, cell_j)
        comp_m = take_slots(C.comps, cols)
        return jax.vmap(lambda cm, sm, x: cm.log_predictive(x[None], sm))(comp_m, s, values)

    lp = jax.lax.map(lambda uz: one(*uz), (U, Zs))  # [S, M]
    return logsumexp(lp, axis=0) - jnp.log(lp.shape[0])


def cdpm_predict_cells(X, component: Component, column_view_samples, row_label_samples, rows, cols, values):
    """Log posterior predictive of held-out cells under CDPM samples.

    ``log (1/S) sum_s p(x_ij = value | X[rows in the cluster of i in view u_j, j])``: for
    sample ``s`` the cell ``(i, j)`` uses the view ``u_j`` of its column and the row's
    cluster ``Z[i, u_j]`` in that view, with the component restricted to column ``j``
    (observed cells only; NaN cells of ``X`` are skipped).

    Args:
      X: training data ``[N, J]``, held-out cells NaN.
      component: as in `cdpm_mcmc_init`.
      column_view_samples: ``[S, J]``; row_label_samples: ``[S, N, V]`` (as in `CDPMSamples`).
      rows, cols: integer ``[M]`` cell coordinates; values: ``[M]`` the values to score.

    Returns:
      ``[M]`` log predictive densities / probabilities.
    """
    Xa, _ = validate(X, component, 1.0)
    N, J = Xa.shape
    comps = column_components(component, J)
    U = jnp.asarray(column_view_samples, jnp.int32)
    Zs = jnp.asarray(row_label_samples, jnp.int32)
    if U.ndim != 2 or U.shape[1] != J:
        raise ValueError(f"column_view_samples must have shape [S, {J}], got {U.shape}")
    if Zs.ndim != 3 or Zs.shape[0] != U.shape[0] or Zs.shape[1] != N or Zs.shape[2] < int(jnp.max(U)) + 1:
        raise ValueError(f"row_label_samples must have shape [{U.shape[0]}, {N}, V], got {Zs.shape}")
    r, c, v = _check_cells(rows, cols, values, N, J)
    return _predict_cells(Xa, comps, U, Zs, r, c, v)


def dpm_predict_cells(X, component: Component, label_samples, rows, cols, values):
    """Log posterior predictive of held-out cells under DPM samples.

    ``log (1/S) sum_s p(x_ij = value | X[rows in the cluster of i in sample s, j])`` (the
    component restricted to column ``j``; NaN cells skipped). Needs a column-separable
    component (`BetaBernoulli`, `BetaBinomial`, diagonal `NormalKnownCov`).

    Args:
      X: training data ``[N, d]``, held-out cells NaN.
      component: the DPM's component.
      label_samples: ``[S, N]`` row labels (as in `DPMGibbsSamples`).
      rows, cols: integer ``[M]`` cell coordinates; values: ``[M]`` the values to score.

    Returns:
      ``[M]`` log predictive densities / probabilities.
    """
    L = jnp.asarray(label_samples, jnp.int32)
    if L.ndim != 2:
        raise ValueError(f"label_samples must have shape [S, N], got {L.shape}")
    d = np.asarray(X).shape[-1] if np.ndim(X) == 2 else 0
    return cdpm_predict_cells(X, component, jnp.zeros((L.shape[0], d), jnp.int32), L[:, :, None], rows, cols, values)
