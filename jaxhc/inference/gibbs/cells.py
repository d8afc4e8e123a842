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
    pad_axis,
    padded_size,
    take_slots,
    to_additive,
    to_device,
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
        out.append(a.astype(np.int32))
    vals = np.asarray(values, dtype=float)
    if vals.shape != out[0].shape or out[1].shape != out[0].shape:
        raise ValueError(
            f"rows, cols and values must have the same shape [M], got {out[0].shape}, {out[1].shape}, {vals.shape}"
        )
    if not np.all(np.isfinite(vals)):
        raise ValueError("values must be finite")
    return out[0], out[1], vals.astype(jnp.dtype(_float()))


@jax.jit
def _predict_cells(X, comps, U, Zs, rows, cols, values, n, nc, num_samples):
    C = make_columns(X, comps, n, nc)  # padding rows and columns: zero statistics

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
    lp = jnp.where((jnp.arange(lp.shape[0]) < num_samples)[:, None], lp, -jnp.inf)  # padding samples
    return logsumexp(lp, axis=0) - jnp.log(jnp.asarray(num_samples, lp.dtype))


def cdpm_predict_cells(X, component: Component, column_view_samples, row_label_samples, rows, cols, values):
    """Log posterior predictive of held-out cells under CDPM samples.

    ``log (1/S) sum_s p(x_ij = value | X[rows in the cluster of i in view u_j, j])``: for
    sample ``s`` the cell ``(i, j)`` uses the view ``u_j`` of its column and the row's
    cluster ``Z[i, u_j]`` in that view, with the component restricted to column ``j``
    (observed cells only; NaN cells of ``X`` are skipped).

    Compilation: rows, columns, view slots, samples and cells are padded to the library's
    bucket grid (`jaxhc._internal.buckets`; padding rows and columns with zero statistics,
    padding samples out of the average, padding cells dropped), one program a bucket.

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
    U = np.asarray(column_view_samples).astype(np.int32)
    Zs = np.asarray(row_label_samples).astype(np.int32)
    if U.ndim != 2 or U.shape[1] != J:
        raise ValueError(f"column_view_samples must have shape [S, {J}], got {U.shape}")
    if Zs.ndim != 3 or Zs.shape[0] != U.shape[0] or Zs.shape[1] != N or Zs.shape[2] < int(np.max(U)) + 1:
        raise ValueError(f"row_label_samples must have shape [{U.shape[0]}, {N}, V], got {Zs.shape}")
    r, c, v = _check_cells(rows, cols, values, N, J)
    S, M = U.shape[0], r.shape[0]
    Nb, Jb, Sb, Mb, Vb = (padded_size(k) for k in (N, J, S, M, Zs.shape[2]))
    comps = column_components(component, J, Jb)
    Xp = pad_axis(pad_axis(Xa, Jb, 0.0, axis=1), Nb, 0.0, axis=0)
    Up = pad_axis(pad_axis(U, Jb, 0, axis=1), Sb, 0, axis=0)
    Zp = pad_axis(pad_axis(pad_axis(Zs, Vb, -1, axis=2), Nb, -1, axis=1), Sb, -1, axis=0)
    fill = v[:1] if M else np.zeros(1, v.dtype)
    cells = (pad_axis(r, Mb, 0), pad_axis(c, Mb, 0), np.concatenate([v, np.repeat(fill, Mb - M)]))
    out = _predict_cells(*to_device((Xp, comps, Up, Zp) + cells), N, J, S)
    return to_device(np.asarray(out)[:M])


def dpm_predict_cells(X, component: Component, label_samples, rows, cols, values):
    """Log posterior predictive of held-out cells under DPM samples.

    ``log (1/S) sum_s p(x_ij = value | X[rows in the cluster of i in sample s, j])`` (the
    component restricted to column ``j``; NaN cells skipped). Needs a column-separable
    component (`BetaBernoulli`, `BetaBinomial`, diagonal `NormalKnownCov`). Padded to the
    bucket grid as `cdpm_predict_cells`.

    Args:
      X: training data ``[N, d]``, held-out cells NaN.
      component: the DPM's component.
      label_samples: ``[S, N]`` row labels (as in `DPMGibbsSamples`).
      rows, cols: integer ``[M]`` cell coordinates; values: ``[M]`` the values to score.

    Returns:
      ``[M]`` log predictive densities / probabilities.
    """
    L = np.asarray(label_samples).astype(np.int32)
    if L.ndim != 2:
        raise ValueError(f"label_samples must have shape [S, N], got {L.shape}")
    d = np.asarray(X).shape[-1] if np.ndim(X) == 2 else 0
    return cdpm_predict_cells(X, component, np.zeros((L.shape[0], d), np.int32), L[:, :, None], rows, cols, values)
