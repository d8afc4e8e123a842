"""Jets as physicists hold them: jagged `awkward` arrays of four-vectors in, compact per-jet
results out (the optional ``hep`` extra: ``pip install "jaxhc[hep]"``, which brings
awkward, vector, pyarrow and uproot).

In: a jagged array of jets, each a list of leaves, as records with fields ``E, px, py, pz``
(GeV) or as `vector` ``Momentum4D`` records in any of its coordinate systems (``pt, eta,
phi, mass``, ``px, py, pz, E``, ``x, y, z, t`` ...). `jets_from_awkward` turns it into the
padded ``[B, N_max, 4]`` float64 array in the library's order ``(E, px, py, pz)`` and the
per-jet leaf counts; `jet_from_awkward` does the same for one jet. The conversion itself is
the trellis's (`jaxhc.trellis.ragged`, the one door: the trellis entry points `solve`,
`solve_batch`, `log_partition_batch`, `prepare_batch` accept such arrays directly and convert
them there; the trellis imports nothing of `jaxhc.jets`).

Out: `to_awkward` turns a `solve_batch` result into one record per jet (``n_leaves``,
``log_z``, ``map_log_phi``, the MAP tree as ``map_left`` / ``map_right`` child lists, and
``map_log_marginals`` when computed): flat jagged numeric fields, which ``ak.to_parquet``
writes and ``uproot`` stores as TTree branches. `from_awkward` reads such records back into a
compact `TrellisSolution` (and `jaxhc.trellis.map_trees` into `Tree` objects).
"""

from __future__ import annotations

import numpy as np

from ..trellis.ragged import HEP_EXTRA_HINT, is_awkward, padded_from_awkward, require_awkward, rows_from_awkward

__all__ = [
    "HEP_EXTRA_HINT",
    "as_padded_jets",
    "from_awkward",
    "is_awkward",
    "jet_from_awkward",
    "jets_from_awkward",
    "require_awkward",
    "to_awkward",
]


def jets_from_awkward(jets, name: str = "jets"):
    """``(leaves_padded [B, N_max, 4], n_leaves [B])`` host arrays (float64 four-momenta in
    the order ``(E, px, py, pz)``, zero padding; int64 counts) from a jagged awkward array of
    jets of four-vectors (the trellis's one conversion door,
    `jaxhc.trellis.ragged.padded_from_awkward`)."""
    return padded_from_awkward(jets, name)


def jet_from_awkward(jet, name: str = "leaves") -> np.ndarray:
    """``[N, 4]`` float64 four-momenta ``(E, px, py, pz)`` of one jet given as an awkward
    array of four-vector records (`jaxhc.trellis.ragged.rows_from_awkward`)."""
    return rows_from_awkward(jet, name)


def to_awkward(solution):
    """One awkward record per jet of a `jaxhc.trellis.solve_batch` result (compact or with
    tables): ``n_leaves``, ``log_z``, ``map_log_phi``, the MAP tree as ``map_left`` and
    ``map_right`` (the children of inner node ``n_leaves + t``, in `jaxhc.Tree` numbering:
    leaves ``0..n-1``), ``map_log_marginals`` (``log P(cluster in H)`` of each inner node
    of the MAP tree) when the solve computed marginals, ``valid`` (False for a jet skipped
    by ``on_invalid="skip"``: NaN values, children ``-1``) and ``reason`` (why it was
    skipped; ``""`` for a valid jet)."""
    from ..trellis.compact import compact_solution

    ak = require_awkward()
    sol = compact_solution(solution)
    nl = np.asarray(sol.n_leaves).astype(np.int64)
    k = np.maximum(nl - 1, 0)
    ch = np.asarray(sol.map_children)
    live = np.arange(ch.shape[1])[None, :] < k[:, None]
    fields = {
        "n_leaves": nl,
        "log_z": np.asarray(sol.log_z, np.float64),
        "map_log_phi": np.asarray(sol.map_log_phi, np.float64),
        "map_left": ak.unflatten(ch[..., 0][live].astype(np.int32), k),
        "map_right": ak.unflatten(ch[..., 1][live].astype(np.int32), k),
    }
    valid = np.ones(len(nl), bool) if sol.valid is None else np.asarray(sol.valid, bool)
    reasons = [""] * len(nl)
    if sol.invalid is not None:
        for i, r in zip(sol.invalid.index, sol.invalid.reasons):
            reasons[i] = r
    fields["valid"] = valid
    fields["reason"] = reasons
    if sol.map_log_marginals is not None:
        fields["map_log_marginals"] = ak.unflatten(np.asarray(sol.map_log_marginals, np.float64)[live], k)
    return ak.zip(fields, depth_limit=1)


def from_awkward(records):
    """A compact `TrellisSolution` from `to_awkward`'s records (e.g. read back with
    ``ak.from_parquet`` or from a TTree); `jaxhc.trellis.map_trees` gives its `Tree` s."""
    from ..trellis.compact import compact_result

    ak = require_awkward()
    arr = ak.Array(records)
    need = ("n_leaves", "log_z", "map_log_phi", "map_left", "map_right")
    missing = [f for f in need if f not in ak.fields(arr)]
    if missing:
        raise ValueError(f"records lack the fields {missing} (expected the output of jaxhc.jets.to_awkward)")
    nl = ak.to_numpy(arr["n_leaves"]).astype(np.int64)
    k = np.maximum(nl - 1, 0)
    if not np.array_equal(ak.to_numpy(ak.num(arr["map_left"], axis=1)), k):
        raise ValueError("records: map_left must hold n_leaves - 1 children per jet")
    width = max(int(k.max(initial=0)), int(nl.max(initial=1)) - 1, 0)
    live = np.arange(width)[None, :] < k[:, None]
    children = np.full((len(nl), width, 2), -1, np.int32)
    children[..., 0][live] = ak.to_numpy(ak.flatten(arr["map_left"]))
    children[..., 1][live] = ak.to_numpy(ak.flatten(arr["map_right"]))
    lm = None
    if "map_log_marginals" in ak.fields(arr):
        lm = np.full((len(nl), width), np.nan)
        lm[live] = ak.to_numpy(ak.flatten(arr["map_log_marginals"]))
    valid, invalid = None, None
    if "valid" in ak.fields(arr):
        from ..trellis.invalid import InvalidProblems

        valid = ak.to_numpy(arr["valid"]).astype(bool)
        why = ak.to_list(arr["reason"]) if "reason" in ak.fields(arr) else [""] * len(nl)
        bad = np.flatnonzero(~valid)
        invalid = InvalidProblems(tuple(int(i) for i in bad), tuple(str(why[i]) for i in bad), len(nl))
    return compact_result(ak.to_numpy(arr["log_z"]), ak.to_numpy(arr["map_log_phi"]), nl, children, lm, valid, invalid)


def as_padded_jets(jets, n_leaves=None):
    """``(leaves_padded [B, N_max, 4], n_leaves [B])`` from a jagged awkward array of jets, a
    list of ``[N_b, 4]`` arrays (``n_leaves=None``; shapes checked here, values left to the
    energy's checks, so a jet holding NaN is padded like any other) or a padded array with
    ``n_leaves``."""
    if is_awkward(jets):
        from ..trellis.checks import awkward_or_padded

        return awkward_or_padded(jets, n_leaves)
    if n_leaves is not None:
        return np.asarray(jets, np.float64), np.asarray(n_leaves)
    if isinstance(jets, np.ndarray) and jets.ndim == 3:
        raise TypeError("n_leaves is required with a padded jets array [B, N_max, 4] (optional for awkward jets)")
    if hasattr(jets, "jet") and hasattr(jets, "n_leaves"):  # a JetBatch
        jets = [jets.jet(b) for b in range(len(jets))]
    try:
        arrs = [np.asarray(j, np.float64) for j in jets]
    except (TypeError, ValueError):
        raise TypeError("jets must be a list of four-momenta [N, 4], a padded array or an awkward array") from None
    if not arrs:
        raise ValueError("jets must hold at least one jet")
    for b, a in enumerate(arrs):
        if a.ndim != 2 or a.shape[1] != 4 or a.shape[0] == 0:
            raise ValueError(f"jets[{b}] must be four-momenta [N, 4] (E, px, py, pz) with N >= 1, got shape {a.shape}")
    nl = np.array([len(a) for a in arrs], np.int64)
    lp = np.zeros((len(arrs), int(nl.max()), 4))
    for b, a in enumerate(arrs):
        lp[b, : len(a)] = a
    return lp, nl
