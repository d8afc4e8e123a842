"""Resumable batch runs over many jets: one parquet file of compact per-jet results per
partition of ``K`` jets, written atomically, with a manifest; a killed run continues where it
stopped (issue 24, part 3; the ``hep`` extra).

Layout of the output folder::

    manifest.json              the run's settings and its finished partitions
    part-00000.parquet ...     `jaxhc.jets.to_awkward` records plus ``jet_id``, one per jet

Each partition is written to a temporary name and renamed into place, then the manifest is
rewritten the same way, so a crash at any point leaves either a finished partition listed in
the manifest or nothing of it: no jet is lost or written twice when the run is resumed.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings

import numpy as np

from ..trellis.invalid import SKIP_WARNING as _SKIP_WARNING
from ..trellis.invalid import InvalidProblems, apply_policy, check_on_invalid

__all__ = ["solve_partitions", "read_partitions", "MANIFEST"]

MANIFEST = "manifest.json"
_VERSION = 1


def _energy_key(energy) -> str:
    """The energy's class, static settings and parameter values, as text (equinox's repr
    shows array shapes only)."""
    import jax

    leaves, treedef = jax.tree_util.tree_flatten(energy)
    vals = [np.asarray(x).tolist() for x in leaves]
    return f"{type(energy).__name__} {treedef} {json.dumps(vals)}"


def _atomic_write_json(path, obj):
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def solve_partitions(
    energy,
    jets,
    out_dir: str,
    n_leaves=None,
    *,
    partition_size: int = 1000,
    resume: bool = False,
    ids=None,
    marginals: bool = False,
    progress_bar: bool = True,
    on_invalid: str = "skip",
) -> dict:
    """Solves every jet with the exact trellis (`jaxhc.trellis.solve_batch`, compact results)
    in partitions of ``partition_size`` jets and writes one parquet file per partition under
    ``out_dir`` (see the module docstring). Returns the manifest.

    Args:
      energy: a `jaxhc.trellis.Energy` over four-momenta (e.g. `GinkgoEnergy`,
        `SplittingEnergy`).
      jets: a jagged awkward array of jets, a list of ``[N_b, 4]`` arrays, or a padded array
        ``[B, N_max, 4]`` with ``n_leaves``.
      ids: ``[B]`` integer jet ids stored with the records (default ``0 .. B-1``); unique.
      resume: continue the run in ``out_dir``: partitions listed in its manifest are kept, the
        rest solved. The settings (jets, ids, energy, partition size, marginals) must match;
        without ``resume`` an existing run in ``out_dir`` is an error, not overwritten.
      progress_bar: a tqdm bar over the partitions.
      on_invalid: ``"skip"`` (default): jets that fail the energy's checks are written with
        ``valid=False``, NaN values and the reason (one warning for the run; the manifest's
        ``"invalid"`` lists their ids and reasons); ``"raise"``: raise
        `jaxhc.trellis.InvalidProblemsError` naming every one before anything is solved.
    """
    from ..trellis import Energy, solve_batch
    from .hep import as_padded_jets, require_awkward, to_awkward

    ak = require_awkward()
    if not isinstance(energy, Energy):
        raise TypeError(f"energy must be a jaxhc.trellis Energy, got {type(energy).__name__}")
    if isinstance(partition_size, (bool, np.bool_)) or not isinstance(partition_size, (int, np.integer)):
        raise TypeError(f"partition_size must be a positive integer, got {partition_size!r}")
    if partition_size < 1:
        raise ValueError(f"partition_size must be a positive integer, got {partition_size}")
    check_on_invalid(on_invalid)
    lp, nl = as_padded_jets(jets, n_leaves)
    nl = np.asarray(nl).astype(np.int64)
    B = len(nl)
    ids = np.arange(B, dtype=np.int64) if ids is None else np.asarray(ids).astype(np.int64).reshape(-1)
    if ids.shape != (B,) or len(np.unique(ids)) != B:
        raise ValueError(f"ids must be {B} unique integers, one per jet")
    # every jet checked once, here; the partitions' solves then skip the same jets quietly
    lp, reasons = energy.check_batch(np.asarray(lp, np.float64), nl)
    invalid = InvalidProblems.from_reasons(reasons, B)
    apply_policy(invalid, on_invalid, name="jets")
    digest = hashlib.sha256()
    for a in (lp, nl, ids):
        digest.update(np.ascontiguousarray(a).tobytes())
    settings = {
        "version": _VERSION,
        "n_jets": int(B),
        "partition_size": int(partition_size),
        "n_partitions": int(-(-B // partition_size)),
        "energy": _energy_key(energy),
        "marginals": bool(marginals),
        "input_sha256": digest.hexdigest(),
    }
    os.makedirs(out_dir, exist_ok=True)
    mpath = os.path.join(out_dir, MANIFEST)
    done = {}
    if os.path.exists(mpath):
        if not resume:
            raise ValueError(
                f"{out_dir} already holds a run ({MANIFEST}); pass resume=True (--resume) to continue it, or choose "
                "another folder"
            )
        with open(mpath) as f:
            old = json.load(f)
        diff = [k for k in settings if old.get(k) != settings[k]]
        if diff:
            raise ValueError(
                f"{out_dir}: cannot resume: the run there was made with other {', '.join(diff)} "
                f"({', '.join(f'{k}={old.get(k)!r}' for k in diff)})"
            )
        done = {int(k): v for k, v in old.get("done", {}).items() if os.path.exists(os.path.join(out_dir, v["file"]))}
    report = {"invalid": {"jet_ids": [int(ids[i]) for i in invalid.index], "reasons": list(invalid.reasons)}}
    bar = None
    if progress_bar:
        from tqdm.auto import tqdm

        bar = tqdm(total=settings["n_partitions"], initial=len(done), desc="partitions", unit="part", leave=False)
    try:
        for p in range(settings["n_partitions"]):
            if p in done:
                continue
            a, b = p * partition_size, min(B, (p + 1) * partition_size)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=_SKIP_WARNING, category=RuntimeWarning)
                sol = solve_batch(energy, lp[a:b], nl[a:b], marginals=marginals, tables=False)
            rec = ak.with_field(to_awkward(sol), ids[a:b], "jet_id")
            name = f"part-{p:05d}.parquet"
            tmp = os.path.join(out_dir, "." + name + ".tmp")
            ak.to_parquet(rec, tmp)
            os.replace(tmp, os.path.join(out_dir, name))
            done[p] = {"file": name, "first": int(a), "count": int(b - a)}
            _atomic_write_json(mpath, dict(settings, done={str(k): v for k, v in sorted(done.items())}, **report))
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    if not os.path.exists(mpath):  # an empty run still leaves its manifest
        _atomic_write_json(mpath, dict(settings, done={}, **report))
    with open(mpath) as f:
        return json.load(f)


def read_partitions(out_dir: str, *, complete: bool = True):
    """All records of a `solve_partitions` run, in jet order (``complete``: every partition
    must be finished)."""
    from .hep import require_awkward

    ak = require_awkward()
    mpath = os.path.join(out_dir, MANIFEST)
    if not os.path.exists(mpath):
        raise ValueError(f"{out_dir}: no {MANIFEST} (not a jaxhc partitioned run)")
    with open(mpath) as f:
        man = json.load(f)
    done = man.get("done", {})
    if complete and len(done) != man["n_partitions"]:
        raise ValueError(
            f"{out_dir}: {len(done)} of {man['n_partitions']} partitions are finished; resume the run (or pass "
            "complete=False)"
        )
    parts = [ak.from_parquet(os.path.join(out_dir, done[k]["file"])) for k in sorted(done, key=int)]
    return ak.concatenate(parts) if parts else ak.Array([])
