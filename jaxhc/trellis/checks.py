"""Host checks of a batch of problems, shared by every batch entry point of the trellis
(`jaxhc.trellis.solve_batch`, `jaxhc.trellis.prepare_batch`, `jaxhc.trellis.log_partition_batch`):
array shapes and sizes, the energy's per-problem checks (`Energy.check_batch`) and the
``on_invalid`` policy, done once on concrete host arrays."""

from __future__ import annotations

import warnings

import jax
import numpy as np

from .._internal.processes import process_local
from .._internal.validation import real_array
from .energies import Energy
from .exact import check_num_leaves
from .invalid import InvalidProblems, apply_policy, check_on_invalid
from .ragged import is_awkward, padded_from_awkward

__all__ = ["check_batch_inputs", "validate_batch_inputs", "awkward_or_padded"]

_WARNED_FLOAT32 = []


def _x64_enabled() -> bool:
    return bool(jax.config.jax_enable_x64)


def _warn_float32_once():
    """A batch path in a process without float64 (``jax_enable_x64`` off: a worker process
    that never enabled it) warns once: the DP then runs in float32."""
    if not _x64_enabled() and not _WARNED_FLOAT32:
        _WARNED_FLOAT32.append(True)
        warnings.warn(
            "jaxhc.trellis: jax_enable_x64 is off, so the trellis runs in float32 (log Z of Ginkgo jets "
            "moves by up to ~0.3 nats). Call jax.config.update('jax_enable_x64', True) at the start "
            "of every process (worker processes too) for float64.",
            RuntimeWarning,
            stacklevel=3,
        )


def validate_batch_inputs(energy: Energy, leaves_padded, n_leaves):
    """`check_batch_inputs` with ``on_invalid="raise"``: ``(lp, nl, n_max)``."""
    return check_batch_inputs(energy, leaves_padded, n_leaves, "raise")[:3]


def check_batch_inputs(energy: Energy, leaves_padded, n_leaves, on_invalid: str, stacklevel: int = 4):
    """Eager checks shared by `solve_batch` and `prepare_batch`.

    Returns ``(lp, nl, n_max, invalid)``: host float64 ``[B, N_max, ...]`` with every valid
    problem's padding rows replaced by `Energy.pad_leaves` (so no user padding value, NaN
    included, reaches a feature), host integer ``[B]`` sizes, ``N_max``, and the
    `InvalidProblems` report of the problems that fail `Energy.check_batch` (``on_invalid``:
    ``"raise"`` raises on any, ``"skip"`` warns and returns them for the caller to leave out,
    None returns them without either).
    """
    if on_invalid is not None:
        check_on_invalid(on_invalid)
    if not isinstance(energy, Energy):
        raise TypeError(f"energy must be a jaxhc.trellis Energy, got {type(energy).__name__}")
    if isinstance(leaves_padded, jax.core.Tracer) or isinstance(n_leaves, jax.core.Tracer):
        raise TypeError(
            "leaves_padded and n_leaves must be concrete arrays (validated on the host); "
            "inside jit, call prepare_batch outside and log_partition_prepared inside"
        )
    leaves_padded, n_leaves = awkward_or_padded(leaves_padded, n_leaves)
    _warn_float32_once()
    lp = real_array(leaves_padded, "leaves_padded", "[B, N_max, ...]").astype(np.float64)
    nl = np.asarray(n_leaves)
    if lp.ndim < 2 or lp.shape[0] == 0:
        raise ValueError(f"leaves_padded must be [B, N_max, ...] with B >= 1, got shape {lp.shape}")
    if nl.shape != (lp.shape[0],) or not np.issubdtype(nl.dtype, np.integer):
        raise ValueError(f"n_leaves must be an integer array [B={lp.shape[0]}], got {nl.shape} {nl.dtype}")
    n_max = lp.shape[1]
    if np.any(nl < 1) or np.any(nl > n_max):
        raise ValueError(f"n_leaves must be in [1, N_max={n_max}]")
    check_num_leaves(n_max, None, None)
    lp, reasons = energy.check_batch(lp, nl, "leaves_padded")
    invalid = InvalidProblems.from_reasons(reasons, lp.shape[0])
    if on_invalid is not None:
        apply_policy(invalid, on_invalid, stacklevel=stacklevel)
    return lp, nl, n_max, invalid


def awkward_or_padded(leaves_padded, n_leaves):
    """``(leaves_padded, n_leaves)`` as given, or from a jagged awkward array of jets
    (`jaxhc.trellis.ragged.padded_from_awkward`; ``n_leaves`` then optional, and checked
    against the array when given)."""
    # a global jax.Array over several processes: this process's jets
    leaves_padded, n_leaves = process_local(leaves_padded, "leaves_padded"), process_local(n_leaves, "n_leaves")
    if is_awkward(leaves_padded):
        if n_leaves is not None and np.ndim(n_leaves) == 0:
            raise TypeError(
                f"n_leaves={n_leaves!r} is a scalar: with awkward jets leave n_leaves out (None) and pass the "
                "arguments after it by keyword"
            )
        lp, counts = padded_from_awkward(leaves_padded, "leaves_padded")
        if n_leaves is not None and not np.array_equal(np.asarray(n_leaves).reshape(-1), counts):
            raise ValueError("n_leaves disagrees with the jagged array's leaf counts (leave it out for awkward input)")
        return lp, counts
    if n_leaves is None:
        raise TypeError("n_leaves is required with a padded leaves_padded array (it is optional for awkward jets)")
    return leaves_padded, n_leaves
