"""Resumable batch runs over many jets: one parquet file of per-jet records per partition of
``K`` jets, written atomically, with a manifest; a killed run continues where it stopped
(issue 24, part 3; the ``hep`` extra). Every jet given has a record, solved or not (issue 58):
`account_jets` says which jets a run solves and why each other one is not, and the records
carry that account (``status``, ``reason``) beside the solutions.

Layout of the output folder::

    manifest.json              the run's settings, its finished partitions and its account
    part-00000.parquet ...     `jaxhc.jets.to_awkward` records plus ``jet_id`` and ``status``,
                               one per jet given, solved or not

Each partition is written to a temporary name and renamed into place, then the manifest is
rewritten the same way, so a crash at any point leaves either a finished partition listed in
the manifest or nothing of it: no jet is lost or written twice when the run is resumed.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from typing import NamedTuple

import numpy as np

from ..trellis.exact import MAX_EXACT_LEAVES
from ..trellis.invalid import SKIP_WARNING as _SKIP_WARNING
from ..trellis.invalid import InvalidProblems, apply_policy, check_on_invalid

__all__ = [
    "MANIFEST",
    "STATUSES",
    "JetAccount",
    "account_jets",
    "account_records",
    "check_leaf_range",
    "read_partitions",
    "solve_partitions",
    "solve_records",
]

MANIFEST = "manifest.json"
_VERSION = 2  # 2: every jet given has a record (status, reason); the leaf range is a setting

#: the ``status`` of a jet in a run's account and records: ``"solved"``, or why it was not
#: (its leaf count outside ``min_leaves .. max_leaves``; above `jaxhc.trellis.MAX_EXACT_LEAVES`;
#: four-momenta that fail the energy's checks, skipped under ``on_invalid="skip"``)
STATUSES = ("solved", "outside_leaf_range", "above_exact_limit", "invalid")


def check_leaf_range(min_leaves=1, max_leaves=None) -> tuple:
    """``(min_leaves, max_leaves)`` checked: integers with ``1 <= min_leaves <= max_leaves <=
    MAX_EXACT_LEAVES`` (``max_leaves=None``: `jaxhc.trellis.MAX_EXACT_LEAVES`); raises
    ``ValueError`` naming the argument."""
    hi = MAX_EXACT_LEAVES if max_leaves is None else max_leaves
    for name, v in (("min_leaves", min_leaves), ("max_leaves", hi)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if hi > MAX_EXACT_LEAVES:
        raise ValueError(f"max_leaves={hi} is above the exact trellis limit of {MAX_EXACT_LEAVES} leaves")
    if min_leaves > hi:
        raise ValueError(f"min_leaves={min_leaves} is above max_leaves={hi}")
    return int(min_leaves), int(hi)


class JetAccount(NamedTuple):
    """Which jets of a batch a run solves, and why each other one is not (`account_jets`).

    Fields:
      ids: ``[B]`` int64 jet ids (e.g. each jet's index in its file).
      n_leaves: ``[B]`` int64 leaves per jet.
      status: ``[B]`` one of `STATUSES` per jet: ``"solved"`` for the jets the run solves.
      reasons: ``[B]`` why each jet is not solved, a sentence naming its leaf count and the
        range or the check it fails (``"invalid four-momenta: jets[7]: ..."``, the jet named
        by its id); ``""`` for a solved jet.
      min_leaves, max_leaves: the leaf range of the jets solved.
      invalid: the jets in range that fail the energy's checks, as
        `jaxhc.trellis.InvalidProblems` indexed by jet id (``num_problems``: the jets in
        range; the reasons without the ``"invalid four-momenta: "`` prefix).
    """

    ids: np.ndarray
    n_leaves: np.ndarray
    status: np.ndarray
    reasons: tuple
    min_leaves: int
    max_leaves: int
    invalid: InvalidProblems

    @property
    def solved(self) -> np.ndarray:
        """``[B]`` bool: the jets the run solves."""
        return self.status == "solved"

    def counts(self) -> dict:
        """``{status: number of jets}`` for every status of `STATUSES`, in that order."""
        return {s: int(np.sum(self.status == s)) for s in STATUSES}

    def not_solved(self) -> dict:
        """``{status: [jet ids]}`` for every status of `STATUSES` but ``"solved"``."""
        return {s: [int(i) for i in self.ids[self.status == s]] for s in STATUSES[1:]}


def _ids(ids, B):
    ids = np.arange(B, dtype=np.int64) if ids is None else np.asarray(ids).reshape(-1)
    if ids.shape != (B,) or not (np.issubdtype(ids.dtype, np.integer) or B == 0) or len(np.unique(ids)) != B:
        raise ValueError(f"ids must be {B} unique integers, one per jet")
    return ids.astype(np.int64)


def account_jets(energy, jets, n_leaves=None, *, ids=None, min_leaves=1, max_leaves=None) -> JetAccount:
    """Which jets of a batch are solved by the exact trellis and why each other one is not:
    a jet above `jaxhc.trellis.MAX_EXACT_LEAVES` leaves is ``"above_exact_limit"``, one
    outside ``min_leaves .. max_leaves`` ``"outside_leaf_range"``, and one in range whose
    four-momenta fail the energy's checks (`jaxhc.trellis.Energy.check_batch`) ``"invalid"``;
    the others are ``"solved"``. Checks only; nothing is solved, and no policy applied.

    Args:
      energy: a `jaxhc.trellis.Energy` over four-momenta.
      jets: a jagged awkward array of jets, a list of ``[N_b, 4]`` arrays, or a padded array
        ``[B, N_max, 4]`` with ``n_leaves``; jets of any size (those above the exact limit
        are counted, never solved).
      ids: ``[B]`` unique integer jet ids (default ``0 .. B-1``); the reasons name jets by id.
      min_leaves, max_leaves: the leaf range to solve (default ``1 ..
        MAX_EXACT_LEAVES``; `check_leaf_range`).

    Returns:
      `JetAccount`.
    """
    from ..trellis import Energy

    if not isinstance(energy, Energy):
        raise TypeError(f"energy must be a jaxhc.trellis Energy, got {type(energy).__name__}")
    lo, hi = check_leaf_range(min_leaves, max_leaves)
    lp, nl = _padded(jets, n_leaves)
    nl = np.asarray(nl).reshape(-1)
    if lp.ndim != 3 or nl.shape != (lp.shape[0],) or not np.issubdtype(nl.dtype, np.integer):
        raise ValueError(f"jets must be [B, N_max, 4] with n_leaves [B] integers, got {lp.shape} and {nl.shape}")
    nl = nl.astype(np.int64)
    if np.any(nl < 1) or np.any(nl > lp.shape[1]):
        raise ValueError(f"n_leaves must be in [1, N_max={lp.shape[1]}]")
    B = len(nl)
    ids = _ids(ids, B)
    status = np.full(B, "solved", dtype=object)
    reasons = [""] * B
    for b in np.flatnonzero(nl > MAX_EXACT_LEAVES):
        status[b] = "above_exact_limit"
        reasons[b] = f"above the exact trellis limit of {MAX_EXACT_LEAVES} leaves ({nl[b]} leaves)"
    for b in np.flatnonzero(((nl < lo) | (nl > hi)) & (nl <= MAX_EXACT_LEAVES)):
        status[b] = "outside_leaf_range"
        reasons[b] = f"outside the leaf range {lo}-{hi} ({nl[b]} leaves)"
    inside = np.flatnonzero(status == "solved")
    named = {}
    if len(inside):
        n_in = int(nl[inside].max())
        _, bad = energy.check_batch(lp[inside, :n_in], nl[inside], "jets")
        for k, r in bad.items():
            b = int(inside[k])
            named[int(ids[b])] = r.replace(f"jets[{k}]", f"jets[{int(ids[b])}]", 1)
            status[b] = "invalid"
            reasons[b] = "invalid four-momenta: " + named[int(ids[b])]
    return JetAccount(ids, nl, status, tuple(reasons), lo, hi, InvalidProblems.from_reasons(named, len(inside)))


def _padded(jets, n_leaves):
    """``(leaves [B, N_max, 4] float64, n_leaves [B])`` of any jets `account_jets` takes (a
    list's jets may hold NaN: accounted as invalid, not refused here)."""
    from .hep import as_padded_jets

    lp, nl = as_padded_jets(jets, n_leaves)
    return np.asarray(lp, np.float64), np.asarray(nl)


def account_records(account: JetAccount, solution=None, *, marginals: bool = False):
    """One awkward record per jet of ``account``: `jaxhc.jets.to_awkward`'s fields plus
    ``jet_id`` and ``status``. A solved jet's values come from ``solution``, the
    `jaxhc.trellis.solve_batch` result of the jets ``account.solved`` (in batch order); every
    other jet has ``valid=False``, NaN values, children ``-1`` (``n_leaves - 1`` of them, so
    `jaxhc.jets.from_awkward` reads it back) and its ``reason``.

    Args:
      account: `account_jets`'s answer for the batch.
      solution: the solve of the solved jets (compact or with tables; None when none is).
      marginals: write ``map_log_marginals`` (NaN where not solved; taken from ``solution``).
    """
    from ..trellis.compact import compact_result, compact_solution
    from .hep import require_awkward, to_awkward

    ak = require_awkward()
    nl = np.asarray(account.n_leaves, np.int64)
    B = len(nl)
    keep = account.solved
    width = max(int(nl.max(initial=1)) - 1, 0)
    log_z, map_v = np.full(B, np.nan), np.full(B, np.nan)
    children = np.full((B, width, 2), -1, np.int32)
    lm = np.full((B, width), np.nan) if marginals else None
    valid = keep.copy()
    if np.any(keep):
        if solution is None:
            raise ValueError("solution is required when the account solves some jet")
        sol = compact_solution(solution)
        if len(np.asarray(sol.log_z)) != int(keep.sum()):
            raise ValueError(f"solution holds {len(np.asarray(sol.log_z))} jets, the account solves {int(keep.sum())}")
        log_z[keep] = np.asarray(sol.log_z, np.float64)
        map_v[keep] = np.asarray(sol.map_log_phi, np.float64)
        ch = np.asarray(sol.map_children)
        children[keep, : ch.shape[1]] = ch[:, :width]
        if marginals:
            if sol.map_log_marginals is None:
                raise ValueError("marginals=True needs a solution with marginals")
            m = np.asarray(sol.map_log_marginals, np.float64)
            lm[keep, : m.shape[1]] = m[:, :width]
        if sol.valid is not None:
            valid[keep] = np.asarray(sol.valid, bool)
    bad = np.flatnonzero(~keep)
    skipped = InvalidProblems(tuple(int(b) for b in bad), tuple(account.reasons[b] for b in bad), B)
    rec = to_awkward(compact_result(log_z, map_v, nl, children, lm, valid, skipped))
    rec = ak.with_field(rec, np.asarray(account.ids, np.int64), "jet_id")
    return ak.with_field(rec, [str(s) for s in account.status], "status")


def _solve_accounted(energy, lp, account: JetAccount, marginals: bool, n_max=None):
    """The records of every jet of ``account`` (`account_records`), the solved ones through
    `solve_batch` (compact; padded to ``n_max`` leaves when given)."""
    from ..trellis import solve_batch

    keep = account.solved
    sol = None
    if np.any(keep):
        nl = account.n_leaves[keep]
        width = int(nl.max()) if n_max is None else int(n_max)
        if np.any(nl > width):
            raise ValueError(f"a jet has {int(nl.max())} leaves, more than n_max={width}")
        sub = np.zeros((len(nl), width, lp.shape[2]))
        k = min(width, lp.shape[1])
        sub[:, :k] = lp[keep, :k]
        with warnings.catch_warnings():  # the jets to solve passed the checks
            warnings.filterwarnings("ignore", message=_SKIP_WARNING, category=RuntimeWarning)
            sol = solve_batch(energy, sub, nl, marginals=marginals, tables=False)
    return account_records(account, sol, marginals=marginals)


def solve_records(
    energy,
    jets,
    n_leaves=None,
    *,
    ids=None,
    min_leaves: int = 1,
    max_leaves=None,
    marginals: bool = False,
    on_invalid: str = "skip",
    n_max=None,
):
    """Every jet of a batch as one awkward record (`account_records`): the jets of
    ``min_leaves .. max_leaves`` leaves that pass the energy's checks solved by the exact
    trellis (`jaxhc.trellis.solve_batch`, compact), every other one with its ``status`` and
    ``reason`` (`account_jets`). The records' ``jet_id`` are ``ids``, exactly once each.

    Args:
      energy: a `jaxhc.trellis.Energy` over four-momenta.
      jets: a jagged awkward array of jets, a list of ``[N_b, 4]`` arrays, or a padded array
        ``[B, N_max, 4]`` with ``n_leaves``; any sizes.
      ids: ``[B]`` unique integer jet ids (default ``0 .. B-1``).
      min_leaves, max_leaves: the leaf range solved (default ``1 ..
        jaxhc.trellis.MAX_EXACT_LEAVES``).
      marginals: also the marginals of the MAP trees' clusters.
      on_invalid: ``"skip"`` (default): jets in range that fail the checks get records with
        ``status="invalid"`` (one warning); ``"raise"``: raise
        `jaxhc.trellis.InvalidProblemsError` naming every one (by id). Under both, a batch
        whose jets in range all fail raises (the cause is then the whole input's).
      n_max: the leaf count the solved jets are padded to (a jet in range above it raises
        ``ValueError``); default their largest.
    """
    check_on_invalid(on_invalid)
    lp, nl = _padded(jets, n_leaves)
    account = account_jets(energy, lp, nl, ids=ids, min_leaves=min_leaves, max_leaves=max_leaves)
    apply_policy(account.invalid, on_invalid, name="jets")
    return _solve_accounted(energy, lp, account, marginals, n_max)


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


def _take(account: JetAccount, a: int, b: int) -> JetAccount:
    return account._replace(
        ids=account.ids[a:b], n_leaves=account.n_leaves[a:b], status=account.status[a:b], reasons=account.reasons[a:b]
    )


def solve_partitions(
    energy,
    jets,
    out_dir: str,
    n_leaves=None,
    *,
    partition_size: int = 1000,
    resume: bool = False,
    ids=None,
    min_leaves: int = 1,
    max_leaves=None,
    marginals: bool = False,
    progress_bar: bool = True,
    on_invalid: str = "skip",
) -> dict:
    """Solves the jets with the exact trellis (`jaxhc.trellis.solve_batch`, compact results)
    in partitions of ``partition_size`` jets and writes one parquet file per partition under
    ``out_dir`` (see the module docstring): a record for every jet given, solved or not
    (`solve_records`, `account_jets`). Returns the manifest.

    Args:
      energy: a `jaxhc.trellis.Energy` over four-momenta (e.g. `GinkgoEnergy`,
        `SplittingEnergy`).
      jets: a jagged awkward array of jets, a list of ``[N_b, 4]`` arrays, or a padded array
        ``[B, N_max, 4]`` with ``n_leaves``; any sizes (jets outside the leaf range, or above
        `jaxhc.trellis.MAX_EXACT_LEAVES`, are recorded as not solved).
      ids: ``[B]`` integer jet ids stored with the records (default ``0 .. B-1``); unique.
      resume: continue the run in ``out_dir``: partitions listed in its manifest are kept, the
        rest solved. The settings (jets, ids, energy, partition size, leaf range, marginals)
        must match; without ``resume`` an existing run in ``out_dir`` is an error, not
        overwritten.
      min_leaves, max_leaves: the leaf range solved (default ``1 .. MAX_EXACT_LEAVES``); the
        other jets get records with ``status="outside_leaf_range"``.
      progress_bar: a tqdm bar over the partitions.
      on_invalid: ``"skip"`` (default): jets in range that fail the energy's checks are
        written with ``valid=False``, ``status="invalid"``, NaN values and the reason (one
        warning for the run; the manifest's ``"invalid"`` lists their ids and reasons);
        ``"raise"``: raise `jaxhc.trellis.InvalidProblemsError` naming every one before
        anything is solved. A run whose jets in range all fail raises under both.

    Returns:
      the manifest: the settings (``n_jets``: every jet given), ``done`` (the finished
      partitions), ``counts`` (jets per status of `STATUSES`), ``not_solved`` (the ids of
      each status but ``"solved"``) and ``invalid`` (ids and reasons).
    """
    from ..trellis import Energy
    from .hep import require_awkward

    ak = require_awkward()
    if not isinstance(energy, Energy):
        raise TypeError(f"energy must be a jaxhc.trellis Energy, got {type(energy).__name__}")
    if isinstance(partition_size, (bool, np.bool_)) or not isinstance(partition_size, (int, np.integer)):
        raise TypeError(f"partition_size must be a positive integer, got {partition_size!r}")
    if partition_size < 1:
        raise ValueError(f"partition_size must be a positive integer, got {partition_size}")
    check_on_invalid(on_invalid)
    lp, nl = _padded(jets, n_leaves)
    # every jet accounted for and checked once, here; the partitions then solve the jets to solve
    account = account_jets(energy, lp, nl, ids=ids, min_leaves=min_leaves, max_leaves=max_leaves)
    apply_policy(account.invalid, on_invalid, name="jets")
    nl, ids = account.n_leaves, account.ids
    B = len(nl)
    # one padded width for every partition: they share compiled programs
    n_max = int(nl[account.solved].max()) if np.any(account.solved) else None
    digest = hashlib.sha256()
    for a in (lp, nl, ids):
        digest.update(np.ascontiguousarray(a).tobytes())
    settings = {
        "version": _VERSION,
        "n_jets": int(B),
        "partition_size": int(partition_size),
        "n_partitions": int(-(-B // partition_size)),
        "energy": _energy_key(energy),
        "min_leaves": account.min_leaves,
        "max_leaves": account.max_leaves,
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
    report = {
        "counts": account.counts(),
        "not_solved": account.not_solved(),
        "invalid": {"jet_ids": list(account.invalid.index), "reasons": list(account.invalid.reasons)},
    }
    bar = None
    if progress_bar:
        from tqdm.auto import tqdm

        bar = tqdm(total=settings["n_partitions"], initial=len(done), desc="partitions", unit="part", leave=False)
    try:
        for p in range(settings["n_partitions"]):
            if p in done:
                continue
            a, b = p * partition_size, min(B, (p + 1) * partition_size)
            rec = _solve_accounted(energy, lp[a:b], _take(account, a, b), marginals, n_max)
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
