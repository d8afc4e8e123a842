"""Ragged inputs of the trellis: jagged `awkward` arrays of four-vectors as the padded host
arrays the trellis takes (the optional ``hep`` extra brings awkward and vector; awkward is
imported only when such an array arrives).

This is the one conversion door for awkward / vector inputs: the trellis entry points
(`jaxhc.trellis.solve`, `solve_batch`, `prepare_batch`, `log_partition_batch`) call it, and
the jets layer (`jaxhc.jets.hep.jets_from_awkward`, `jet_from_awkward`) re-exports it, so a
jet array is converted once, here, whichever door it comes in by; the trellis imports
nothing of `jaxhc.jets`.

A jet is a list of four-vector records: fields ``E, px, py, pz`` (GeV), or `vector`
``Momentum4D`` records in any of its coordinate systems (``pt, eta, phi, mass``, ``x, y, z,
t`` ...). The padded layout is ``(E, px, py, pz)`` float64, zero rows past each jet's
leaf count.
"""

from __future__ import annotations

import numpy as np

__all__ = ["HEP_EXTRA_HINT", "host_rows", "is_awkward", "require_awkward", "padded_from_awkward", "rows_from_awkward"]

HEP_EXTRA_HINT = 'pip install "jaxhc[hep]" (awkward, vector, pyarrow, uproot)'

_FIELDS = ("E", "px", "py", "pz")


def require_awkward():
    """The ``awkward`` module, or an ImportError naming the ``hep`` extra."""
    try:
        import awkward as ak
    except ImportError as e:  # pragma: no cover - the extra is installed in CI
        raise ImportError(f"awkward arrays need the optional 'hep' extra: {HEP_EXTRA_HINT}") from e
    return ak


def is_awkward(x) -> bool:
    """Whether ``x`` is an awkward array or record, or a subclass such as vector's
    (checked without importing awkward)."""
    return any(c.__module__.split(".")[0] == "awkward" for c in type(x).__mro__)


def _four_components(arr, name):
    """``(E, px, py, pz)`` awkward arrays of a record array of four-vectors."""
    ak = require_awkward()
    fields = ak.fields(arr)
    if all(f in fields for f in _FIELDS):
        return tuple(arr[f] for f in _FIELDS)
    try:
        import vector
    except ImportError as e:  # pragma: no cover - the extra is installed in CI
        raise ImportError(f"{name}: four-vectors in vector's coordinates need the 'hep' extra: {HEP_EXTRA_HINT}") from e
    vector.register_awkward()
    try:
        v = arr if ak.parameters(arr).get("__record__", "").endswith("4D") else ak.with_name(arr, "Momentum4D")
        return v.E, v.px, v.py, v.pz
    except Exception as e:
        raise ValueError(
            f"{name} must hold four-vectors: records with fields E, px, py, pz (GeV) or vector Momentum4D "
            f"records (e.g. pt, eta, phi, mass); got fields {fields}"
        ) from e


def padded_from_awkward(jets, name: str = "jets"):
    """``(leaves_padded [B, N_max, 4], n_leaves [B])`` host arrays (float64 four-momenta in
    the order ``(E, px, py, pz)``, zero padding; int64 counts) from a jagged awkward array of
    jets of four-vectors."""
    ak = require_awkward()
    arr = ak.Array(jets)
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be a jagged array of jets [B, var] of four-vector records (one list of leaves per jet), "
            f"got {arr.ndim} list dimensions ({arr.type})"
        )
    comps = _four_components(arr, name)
    counts = ak.to_numpy(ak.num(comps[0], axis=1)).astype(np.int64)
    B = len(counts)
    if B == 0:
        raise ValueError(f"{name} must hold at least one jet")
    flat = np.stack([ak.to_numpy(ak.flatten(c, axis=1)).astype(np.float64) for c in comps], axis=-1)
    n_max = int(counts.max()) if B else 0
    out = np.zeros((B, max(n_max, 1), 4))
    row = np.repeat(np.arange(B), counts)
    col = np.arange(len(row)) - np.repeat(np.cumsum(counts) - counts, counts)
    out[row, col] = flat
    return out, counts


def rows_from_awkward(jet, name: str = "leaves") -> np.ndarray:
    """``[N, 4]`` float64 four-momenta ``(E, px, py, pz)`` of one jet given as an awkward
    array of four-vector records."""
    ak = require_awkward()
    arr = ak.Array(jet) if not isinstance(jet, ak.Array) else jet
    if arr.ndim != 1:
        raise ValueError(f"{name}: one jet must be a list of four-vector records, got type {arr.type}")
    comps = _four_components(arr, name)
    return np.stack([ak.to_numpy(c).astype(np.float64) for c in comps], axis=-1)


def host_rows(leaves, name: str = "leaves"):
    """One problem's ``leaves`` as given, or, for an awkward jet, its ``[N, 4]`` rows."""
    return rows_from_awkward(leaves, name) if is_awkward(leaves) else leaves
