"""``jaxhc jets``: the exact trellis against greedy, beam search and the kt family on Ginkgo
jets (Table 1 and Fig. 5 of the trellis paper); see `jaxhc.cli` for the command."""

from __future__ import annotations

import json
import math
import os
import time
from typing import Optional

import numpy as np

from .common import InputError, enable_compile_cache, log

__all__ = [
    "JETS_DEFAULT",
    "JETS_FILE_MAX_LEAVES",
    "JETS_QUICK",
    "JETS_ROOT_MASS2",
    "JETS_ROOT_P3",
    "cmd_jets",
    "read_jets",
]


# ---------------------------------------------------------------------------------------
# jets: trellis vs greedy / beam / kt family on Ginkgo jets (Table 1 of the trellis paper)
# ---------------------------------------------------------------------------------------
#: Ginkgo settings of the paper's jets (and of tests/data/ginkgo_generator_jets_lam2.0.json):
#: root mass 30, |p| = 400 along (1, 1, 1) / sqrt(3)
JETS_ROOT_MASS2 = 900.0
JETS_ROOT_P3 = tuple(400.0 / math.sqrt(3.0) for _ in range(3))
JETS_QUICK = {"num_jets": 40, "max_leaves": 7}
#: simulated jets: the paper's study (Ginkgo510: 5 to 10 leaves)
JETS_DEFAULT = {"num_jets": 1000, "min_leaves": 5, "max_leaves": 10}
#: jets read from a file (``--input``): every jet of the file, from 1 leaf up to this many by
#: default. The exact trellis does ``(3^N + 1) / 2 - 2^N`` split evaluations for a jet of N
#: leaves; on 2 CPU cores a jet of 16 leaves takes about 2 s, one of 18 about 40 s, one of 20
#: about 6 minutes, one of 24 (the limit) hours; ``--max-leaves`` up to 24 includes them.
JETS_FILE_MAX_LEAVES = 16

#: the exact trellis's split evaluations per second (float64, compact batch results), as
#: measured on 2 CPU cores: ``(most leaves, rate)``, and the compilation seconds per jet size
_SPLITS_PER_SECOND = ((16, 1.1e7), (None, 5.0e6))
_COMPILE_SECONDS = ((14, 2.0), (16, 5.0), (None, 10.0))
#: a run estimated to take longer says so before it starts, progress messages or not
_LONG_RUN_SECONDS = 60.0


_PARQUET = (".parquet", ".pq")
_ROOT = (".root",)


def read_jets(path: str, field: Optional[str] = None, tree: Optional[str] = None, branch: str = ""):
    """Reads jets from a file: a JSON list of objects with ``leaves`` (four-momenta ``[n,
    4]``); a parquet file of jagged four-vectors (``.parquet`` / ``.pq``: records ``E, px, py,
    pz`` or ``pt, eta, phi, mass``, at the top level or under the column ``field``); or a ROOT
    file (``.root``, via uproot: the jagged branches ``branch + "E"``, ``+ "px"``, ``+ "py"``,
    ``+ "pz"`` or ``+ "pt"``, ``+ "eta"``, ``+ "phi"``, ``+ "mass"`` of the TTree (or RNTuple)
    ``tree``, default the file's only one). Parquet and ROOT need the ``hep`` extra.

    Returns a list of float64 arrays ``[n, 4]`` (E, px, py, pz); raises `InputError` naming
    the problem.
    """
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory, expected a JSON, parquet or ROOT file")
    ext = os.path.splitext(path)[1].lower()
    if ext in _PARQUET + _ROOT:
        return _read_hep_jets(path, ext, field, tree, branch)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text JSON file") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    from ..models import ginkgo

    try:
        batch = ginkgo.load_jets(data)
    except ValueError as e:
        raise InputError(f"{path}: {e}") from None
    return [batch.jet(i) for i in range(len(batch))]


def _hep_modules(path):
    try:
        import awkward as ak
    except ImportError:
        from ..jets.hep import HEP_EXTRA_HINT

        raise InputError(f"{path}: reading parquet and ROOT files needs the 'hep' extra: {HEP_EXTRA_HINT}") from None
    return ak


def _read_hep_jets(path, ext, field, tree, branch):
    """Parquet / ROOT jets as a list of ``[n, 4]`` arrays (see `read_jets`)."""
    ak = _hep_modules(path)
    from ..jets.hep import jets_from_awkward

    try:
        if ext in _PARQUET:
            arr = ak.from_parquet(path)
            if field is not None:
                if field not in ak.fields(arr):
                    raise InputError(f"{path}: no column {field!r} (columns: {ak.fields(arr)})")
                arr = arr[field]
            elif not {"E", "px", "py", "pz"} <= set(ak.fields(arr)) and len(ak.fields(arr)) == 1:
                arr = arr[ak.fields(arr)[0]]  # one column: the jets
        else:
            import uproot

            with uproot.open(path) as f:
                trees = [k.split(";")[0] for k, c in f.classnames().items() if c in ("TTree", "ROOT::RNTuple")]
                name = tree if tree is not None else (trees[0] if len(trees) == 1 else None)
                if name is None or name not in trees:
                    raise InputError(
                        f"{path}: name the TTree with --tree (TTrees: {sorted(set(trees))})"
                        if tree is None
                        else f"{path}: no TTree {tree!r} (TTrees: {sorted(set(trees))})"
                    )
                t = f[name]
                have = set(t.keys())
                for names in (("E", "px", "py", "pz"), ("pt", "eta", "phi", "mass")):
                    full = [branch + n for n in names]
                    if set(full) <= have:
                        cols = t.arrays(full)
                        arr = ak.zip({n: cols[b] for n, b in zip(names, full)})
                        if names[0] == "pt":
                            import vector

                            vector.register_awkward()
                            arr = ak.with_name(arr, "Momentum4D")
                        break
                else:
                    raise InputError(
                        f"{path}: TTree {name!r} has no jagged branches {branch}E/{branch}px/{branch}py/{branch}pz "
                        f"or {branch}pt/{branch}eta/{branch}phi/{branch}mass (branches: {sorted(have)}; --branch "
                        "gives their common prefix)"
                    )
        lp, nl = jets_from_awkward(arr, path)
    except InputError:
        raise
    except (ValueError, TypeError, OSError) as e:
        raise InputError(f"{path}: {e}") from None
    return [lp[b, : nl[b]] for b in range(len(nl))]


def _write_parquet(path, account, sol, res, progress):
    """A record for every jet (`jaxhc.jets.runs.account_records`: the compact results of the
    solved ones, the status and reason of the others) plus each method's log phi (NaN for a
    jet not solved), as parquet; skipped with a message without the hep extra."""
    try:
        import awkward as ak
    except ImportError:
        from ..jets.hep import HEP_EXTRA_HINT

        log(progress, f"[jaxhc jets] no parquet output: it needs the 'hep' extra ({HEP_EXTRA_HINT})")
        return None
    from ..jets.runs import account_records

    rec = account_records(account, sol)
    keep = account.solved
    for m in res.methods:
        v = np.full(len(keep), np.nan)
        v[keep] = np.asarray(res.log_phi[m], np.float64)
        rec = ak.with_field(rec, v, f"log_phi_{m}")
    ak.to_parquet(rec, path)
    return path


def _partitioned(args, energy, lp, nl, account, source, progress, n_file) -> int:
    """``--partition-size K``: every jet through the exact trellis, one parquet file per K
    jets under ``--out`` with a manifest (`jaxhc.jets.runs.solve_partitions`), a record for
    every jet read, solved or not; ``--resume`` continues a killed run."""
    import warnings

    _hep_modules(args.out)
    from ..jets.runs import solve_partitions
    from ..trellis.invalid import SKIP_WARNING

    log(progress, f"[jaxhc jets] {len(nl)} jets from {source}: partitions of {args.partition_size} under {args.out}")
    try:
        with warnings.catch_warnings():  # the skipped jets were named above
            warnings.filterwarnings("ignore", message=SKIP_WARNING, category=RuntimeWarning)
            man = solve_partitions(
                energy,
                lp,
                args.out,
                nl,
                partition_size=args.partition_size,
                resume=args.resume,
                ids=account.ids,
                min_leaves=account.min_leaves,
                max_leaves=account.max_leaves,
                progress_bar=progress,
                on_invalid=args.on_invalid,
            )
    except ValueError as e:
        raise InputError(str(e)) from None
    print(
        f"jets done: {_account_text(man['counts'], man['n_jets'], account, n_file, args.quick and args.num_jets is None)}; "
        f"{len(man['done'])} of {man['n_partitions']} partitions; outputs in {args.out}"
    )
    return 0


def _status_text(status: str, account) -> str:
    from ..trellis import MAX_EXACT_LEAVES

    return {
        "outside_leaf_range": f"outside --min-leaves/--max-leaves {account.min_leaves}-{account.max_leaves}",
        "above_exact_limit": f"above the exact trellis limit of {MAX_EXACT_LEAVES} leaves",
        "invalid": "invalid four-momenta",
    }[status]


def _account_text(counts: dict, n_jets: int, account, n_file=None, quick: bool = False) -> str:
    """``"263 of 300 jets solved (37 not solved: 37 outside --min-leaves/--max-leaves
    5-10)"``: the run's account of its jets, by reason (the last line of every run), and the
    jets of the file not read (``--num-jets``, ``--quick``)."""
    solved = int(counts["solved"])
    text = f"{solved} of {n_jets} jets solved"
    why = [f"{k} {_status_text(st, account)}" for st, k in counts.items() if st != "solved" and k]
    if why:
        text += f" ({n_jets - solved} not solved: {', '.join(why)})"
    if n_file is not None and n_file > n_jets:
        why = f"--quick reads the first {n_jets}" if quick else f"--num-jets {n_jets}"
        text += f"; the file's jets {n_jets}..{n_file - 1} not read ({why})"
    return text


def _duration(secs: float) -> str:
    if secs < 90:
        return f"{secs:.0f} s"
    if secs < 5400:
        return f"{secs / 60:.0f} min"
    return f"{secs / 3600:.1f} h"


def _estimated_seconds(n_leaves) -> float:
    """Rough seconds of the exact trellis on jets of ``n_leaves`` leaves, compilation
    included, at the rates measured on 2 CPU cores (`_SPLITS_PER_SECOND`)."""
    from ..trellis import num_splits

    nl = np.asarray(n_leaves, np.int64)
    secs = 0.0
    for n in np.unique(nl):
        rate = next(r for top, r in _SPLITS_PER_SECOND if top is None or n <= top)
        compile_s = next(c for top, c in _COMPILE_SECONDS if top is None or n <= top)
        secs += int(np.sum(nl == n)) * num_splits(int(n)) / rate + compile_s
    return secs


def _announce(args, nl, account, from_file: bool, progress: bool):
    """Before the run, on stderr: which jets are solved (with progress messages), the jets of
    the file above the default leaf range (always), and the estimated time of a long run
    (always)."""
    from ..trellis import MAX_EXACT_LEAVES

    lo, hi = account.min_leaves, account.max_leaves
    todo = nl[account.solved]
    if from_file:
        log(progress, f"[jaxhc jets] {args.input}: {len(todo)} of {len(nl)} jets with {lo}-{hi} leaves")
        above = nl[(nl > hi) & (nl <= MAX_EXACT_LEAVES)]
        if args.max_leaves is None and len(above):
            top, low = int(above.max()), int(above.min())
            which = f"1 jet of {top} leaves is" if len(above) == 1 else f"{len(above)} jets of {low}-{top} leaves are"
            log(
                True,
                f"[jaxhc jets] {which} not solved: the default --max-leaves is {hi} for a file (the exact trellis "
                f"takes about {_duration(_estimated_seconds([top]))} for one jet of {top} leaves on 2 CPU cores); "
                f"--max-leaves {top} solves {'it' if len(above) == 1 else 'them'}",
            )
    secs = _estimated_seconds(todo) if len(todo) else 0.0
    if secs > _LONG_RUN_SECONDS:
        from ..trellis import num_splits

        splits = sum(num_splits(int(n)) for n in todo)
        extra = "" if args.partition_size is not None else "; beam search and the kt family add to it"
        log(
            True,
            f"[jaxhc jets] estimated time of the exact trellis: about {_duration(secs)} ({len(todo)} jets of "
            f"{int(todo.min())}-{int(todo.max())} leaves, {splits:.2e} split evaluations at the rate of 2 CPU "
            f"cores, compilation included; faster on a GPU{extra})",
        )


def _pad_jets(jets):
    nl = np.array([len(j) for j in jets], np.int64)
    lp = np.zeros((len(jets), int(nl.max()), 4))
    for b, j in enumerate(jets):
        lp[b, : len(j)] = j
    return lp, nl


def _simulate_jets(args, num_jets, min_leaves, max_leaves, progress):
    import jax

    try:
        from ..models import ginkgo
    except ImportError as e:
        raise InputError(f"generating jets needs jaxhc.models.ginkgo ({e}); pass --input FILE.json") from None
    params = ginkgo.GinkgoParams(
        lam=args.lam, lam_root=args.lam, t_cut=args.t_cut, root_mass2=JETS_ROOT_MASS2, root_p3=JETS_ROOT_P3
    )
    try:
        sim = ginkgo.simulate(
            jax.random.PRNGKey(args.seed),
            params,
            num_jets,
            min_leaves=min_leaves,
            max_leaves=max_leaves,
            progress_bar=progress,
        )
    except ValueError as e:  # e.g. no jets in the leaf range after many showers
        raise InputError(f"cannot simulate {num_jets} jets with {min_leaves}-{max_leaves} leaves: {e}") from None
    lp = np.asarray(sim.leaves, np.float64)
    nl = np.asarray(sim.n_leaves, np.int64)
    return lp, nl


def _finite_or_none(x) -> Optional[float]:
    x = float(x)
    return x if math.isfinite(x) else None


def _rate(count: float, secs: float) -> str:
    if secs <= 0:
        return "-"
    r = count / secs
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if r >= scale:
            return f"{r / scale:.2f}{unit}"
    return f"{r:.1f}"


def cmd_jets(args) -> int:

    from .. import jets as jetsmod
    from .. import trellis
    from ..jets.runs import account_jets
    from ..trellis.invalid import InvalidProblemsError

    progress = not args.no_progress
    if args.resume and args.partition_size is None:
        raise InputError("--resume continues a partitioned run: pass it with --partition-size")
    if not args.no_cache:
        enable_compile_cache(args.cache_dir, progress)
    from_file = args.input is not None
    defaults = JETS_QUICK if args.quick else JETS_DEFAULT
    min_leaves = args.min_leaves if args.min_leaves is not None else (1 if from_file else JETS_DEFAULT["min_leaves"])
    if args.max_leaves is not None:
        max_leaves = args.max_leaves
    elif from_file and not args.quick:
        max_leaves = JETS_FILE_MAX_LEAVES
    else:
        max_leaves = defaults["max_leaves"]
    if min_leaves > max_leaves:
        given = "" if args.max_leaves is not None else " (its default; pass --max-leaves)"
        raise InputError(f"--min-leaves {min_leaves} is above --max-leaves {max_leaves}{given}")
    if max_leaves > trellis.MAX_EXACT_LEAVES:
        raise InputError(
            f"--max-leaves {max_leaves} is above the exact trellis limit of {trellis.MAX_EXACT_LEAVES} leaves"
        )
    energy = trellis.GinkgoEnergy(args.lam, args.t_cut, likelihood=args.likelihood)
    sim_seconds = n_file = None
    if from_file:
        all_jets = read_jets(args.input, args.field, args.tree, args.branch)
        n_file = len(all_jets)
        # every jet of the file (the first --num-jets of them), each solved or accounted for
        num_jets = args.num_jets if args.num_jets is not None else (JETS_QUICK["num_jets"] if args.quick else None)
        taken = all_jets if num_jets is None else all_jets[:num_jets]
        lp, nl = _pad_jets(taken)
        source = os.path.abspath(args.input)
    else:
        num_jets = args.num_jets if args.num_jets is not None else defaults["num_jets"]
        log(
            progress,
            f"[jaxhc jets] simulating {num_jets} Ginkgo jets ({min_leaves}-{max_leaves} leaves, "
            f"lam={args.lam:g}, t_cut={args.t_cut:g}, seed={args.seed}) ...",
        )
        t0 = time.perf_counter()
        lp, nl = _simulate_jets(args, num_jets, min_leaves, max_leaves, progress)
        sim_seconds = time.perf_counter() - t0
        source = "jaxhc.models.ginkgo.simulate"
    account = account_jets(energy, lp, nl, min_leaves=min_leaves, max_leaves=max_leaves)
    if from_file and not np.any((nl >= min_leaves) & (nl <= max_leaves)):
        which = f"its {n_file} jets" if len(nl) == n_file else f"the first {len(nl)} of its {n_file} jets"
        raise InputError(
            f"{args.input}: none of {which} has {min_leaves} to {max_leaves} leaves (they have "
            f"{int(nl.min())} to {int(nl.max())})"
        )
    invalid = account.invalid
    if invalid:
        if args.on_invalid == "raise" or len(invalid) == invalid.num_problems:
            raise InputError(str(InvalidProblemsError(invalid, "jets")))
        log(True, f"[jaxhc jets] skipping {invalid.summary('jets', shown=3)}")
    _announce(args, nl, account, from_file, progress)
    if args.partition_size is not None:
        return _partitioned(args, energy, lp, nl, account, source, progress, n_file)
    keep = account.solved
    lp_all, nl_all = lp, nl
    nl = nl_all[keep]
    lp = lp_all[keep][:, : int(nl.max())]
    backend = "numpy" if args.no_fastjet else "auto"
    log(progress, f"[jaxhc jets] {len(nl)} jets, likelihood={args.likelihood}: trellis, beam, greedy, kt family ...")
    res = jetsmod.compare_map_methods(energy, lp, nl, kt_backend=backend, progress_bar=progress)
    # the first trellis call compiles its program (one for the batch; one per size with marginals); time a second, warm one
    t0 = time.perf_counter()
    sol = trellis.solve_batch(energy, lp, nl, tables=False)
    warm = time.perf_counter() - t0
    rows = jetsmod.table1(res)
    B = len(nl)

    print(
        f"## Table 1: {B} jets, {int(nl.min())}-{int(nl.max())} leaves, lam={args.lam:g}, t_cut={args.t_cut:g}, "
        f"likelihood={args.likelihood}, beam size N(N-1)/2, kt family via "
        f"{'FastJet' if res.kt_backend == 'fastjet' else 'NumPy'} (ee generalized kt, E scheme)"
    )
    print()
    print(jetsmod.format_table1(rows))
    print()
    print("## timings")
    print()
    print("| method | seconds | jets/s | splits/s |")
    print("|---|---|---|---|")
    print(
        f"| trellis (first call, with JIT compilation) | {res.seconds['trellis']:.2f} | "
        f"{_rate(B, res.seconds['trellis'])} | {_rate(res.num_splits, res.seconds['trellis'])} |"
    )
    print(f"| trellis (warm) | {warm:.2f} | {_rate(B, warm)} | {_rate(res.num_splits, warm)} |")
    for m in res.methods:
        if m != "trellis":
            print(f"| {m} | {res.seconds[m]:.2f} | {_rate(B, res.seconds[m])} | |")
    if sim_seconds is not None:
        print(f"| simulating the jets (with JIT compilation) | {sim_seconds:.2f} | {_rate(B, sim_seconds)} | |")
    print()

    os.makedirs(args.out, exist_ok=True)
    table = [r._asdict() for r in rows]
    for r in table:
        r["mean"], r["std"] = _finite_or_none(r["mean"]), _finite_or_none(r["std"])
    per_jet, solved_at = [], np.cumsum(keep) - 1
    for b in range(len(nl_all)):
        n = int(nl_all[b])
        row = {
            "jet_id": int(account.ids[b]),
            "status": str(account.status[b]),
            "reason": account.reasons[b],
            "n_leaves": n,
            "leaves": lp_all[b, :n].tolist(),
        }
        if keep[b]:
            k = int(solved_at[b])
            row.update(
                log_z=_finite_or_none(res.log_z[k]),
                map_log_likelihood=_finite_or_none(res.map_log_phi[k]),
                log_likelihood={m: _finite_or_none(res.log_phi[m][k]) for m in res.methods},
                trees={m: np.asarray(res.trees[m][k].children).tolist() for m in res.methods},
            )
        else:
            row.update(log_z=None, map_log_likelihood=None, log_likelihood=None, trees=None)
        per_jet.append(row)
    counts = account.counts()
    payload = {
        "source": source,
        "seed": args.seed if args.input is None else None,
        "lam": args.lam,
        "t_cut": args.t_cut,
        "likelihood": args.likelihood,
        "methods": list(res.methods),
        "kt_backend": res.kt_backend,
        "beam_sizes": np.asarray(res.beam_sizes).tolist(),
        "seconds": dict(res.seconds, trellis_warm=warm, **({} if sim_seconds is None else {"simulate": sim_seconds})),
        "num_splits": res.num_splits,
        "table1": table,
        "accounting": {
            "n_jets": int(len(nl_all)),
            "file_jets": n_file,
            "min_leaves": account.min_leaves,
            "max_leaves": account.max_leaves,
            "counts": counts,
            "not_solved": account.not_solved(),
        },
        "note": "every jet has a row, keyed by jet_id (its index in the input): status 'solved', or why not "
        "('outside_leaf_range', 'above_exact_limit', 'invalid') with its reason and null values; log likelihoods "
        "are log phi of each method's tree under the Ginkgo energy; null is -inf (a forbidden split); trees are "
        "[left, right] rows, merge t creating node n + t (scipy linkage layout)",
        "jets": per_jet,
    }
    js = os.path.join(args.out, "jets_results.json")
    with open(js, "w") as f:
        json.dump(payload, f, indent=1)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ax = jetsmod.plot_log_z_vs_map(res)
    png = os.path.join(args.out, "jets_logz_vs_map.png")
    ax.figure.tight_layout()
    ax.figure.savefig(png, dpi=110)
    plt.close(ax.figure)
    pq = _write_parquet(os.path.join(args.out, "jets_results.parquet"), account, sol, res, progress)
    for p in (js, png, pq):
        if p is not None:
            print(f"wrote {p}")
    tb = next(r for r in rows if (r.a, r.b) == ("trellis", "beam"))
    tg = next(r for r in rows if (r.a, r.b) == ("trellis", "greedy"))
    print(
        f"jets done: {_account_text(counts, len(nl_all), account, n_file, args.quick and args.num_jets is None)}; "
        f"trellis - beam {tb.mean:.2f} +- {tb.std:.2f}, trellis - greedy "
        f"{tg.mean:.2f} +- {tg.std:.2f} (paper 0.4 +- 0.5, 1.5 +- 1.1); outputs in {args.out}"
    )
    return 0
