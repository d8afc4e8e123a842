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

__all__ = ["JETS_DEFAULT", "JETS_QUICK", "JETS_ROOT_MASS2", "JETS_ROOT_P3", "cmd_jets", "read_jets"]


# ---------------------------------------------------------------------------------------
# jets: trellis vs greedy / beam / kt family on Ginkgo jets (Table 1 of the trellis paper)
# ---------------------------------------------------------------------------------------
#: Ginkgo settings of the paper's jets (and of tests/data/ginkgo_generator_jets_lam2.0.json):
#: root mass 30, |p| = 400 along (1, 1, 1) / sqrt(3)
JETS_ROOT_MASS2 = 900.0
JETS_ROOT_P3 = tuple(400.0 / math.sqrt(3.0) for _ in range(3))
JETS_QUICK = {"num_jets": 40, "max_leaves": 7}
JETS_DEFAULT = {"num_jets": 1000, "max_leaves": 10}


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


def _write_parquet(path, sol, res, progress):
    """The compact per-jet results (`jaxhc.jets.to_awkward`) plus each method's log phi, as
    parquet; skipped with a message without the hep extra."""
    try:
        import awkward as ak
    except ImportError:
        from ..jets.hep import HEP_EXTRA_HINT

        log(progress, f"[jaxhc jets] no parquet output: it needs the 'hep' extra ({HEP_EXTRA_HINT})")
        return None
    from ..jets.hep import to_awkward

    rec = to_awkward(sol)
    for m in res.methods:
        rec = ak.with_field(rec, np.asarray(res.log_phi[m], np.float64), f"log_phi_{m}")
    ak.to_parquet(rec, path)
    return path


def _partitioned(args, energy, lp, nl, source, progress) -> int:
    """``--partition-size K``: every jet through the exact trellis, one parquet file per K
    jets under ``--out`` with a manifest (`jaxhc.jets.runs.solve_partitions`); ``--resume``
    continues a killed run."""
    _hep_modules(args.out)
    from ..jets.runs import solve_partitions

    log(progress, f"[jaxhc jets] {len(nl)} jets from {source}: partitions of {args.partition_size} under {args.out}")
    try:
        man = solve_partitions(
            energy,
            lp,
            args.out,
            nl,
            partition_size=args.partition_size,
            resume=args.resume,
            ids=getattr(args, "_jet_ids", None),
            progress_bar=progress,
            on_invalid=args.on_invalid,
        )
    except ValueError as e:
        raise InputError(str(e)) from None
    print(
        f"jets done: {man['n_jets']} jets in {len(man['done'])} of {man['n_partitions']} partitions; "
        f"outputs in {args.out}"
    )
    return 0


def _valid_jets(energy, lp, nl, on_invalid: str, progress: bool, ids=None):
    """The jets that pass the energy's checks (`jaxhc.trellis.Energy.check_batch`), checked
    once here: ``on_invalid="raise"`` stops with every bad jet named, ``"skip"`` drops them
    with a message naming each (stderr). ``ids``: each jet's index in the input file (the
    messages use it)."""
    from ..trellis.invalid import InvalidProblems, InvalidProblemsError

    lp, reasons = energy.check_batch(np.asarray(lp, np.float64), np.asarray(nl), "jets")
    if not reasons:
        return lp, nl
    ids = np.arange(len(nl)) if ids is None else np.asarray(ids)
    named = {int(ids[b]): r.replace(f"jets[{b}]", f"jets[{int(ids[b])}]", 1) for b, r in reasons.items()}
    invalid = InvalidProblems.from_reasons(named, len(nl))
    if on_invalid == "raise" or len(invalid) == len(nl):
        raise InputError(str(InvalidProblemsError(invalid, "jets")))
    log(True, f"[jaxhc jets] skipping {invalid.summary('jets', shown=3)}")
    keep = np.ones(len(nl), bool)
    keep[list(reasons)] = False
    return lp[keep], np.asarray(nl)[keep]


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

    progress = not args.no_progress
    if not args.no_cache:
        enable_compile_cache(args.cache_dir, progress)
    defaults = JETS_QUICK if args.quick else JETS_DEFAULT
    num_jets = args.num_jets if args.num_jets is not None else defaults["num_jets"]
    if args.partition_size is not None and args.input is not None and args.num_jets is None:
        num_jets = None  # a partitioned run takes every jet of the file (within the leaf range)
    max_leaves = args.max_leaves if args.max_leaves is not None else defaults["max_leaves"]
    min_leaves = args.min_leaves
    if min_leaves > max_leaves:
        raise InputError(f"--min-leaves {min_leaves} is above --max-leaves {max_leaves}")
    if max_leaves > trellis.MAX_EXACT_LEAVES:
        raise InputError(
            f"--max-leaves {max_leaves} is above the exact trellis limit of {trellis.MAX_EXACT_LEAVES} leaves"
        )
    energy = trellis.GinkgoEnergy(args.lam, args.t_cut, likelihood=args.likelihood)
    sim_seconds = None
    if args.input is not None:
        all_jets = read_jets(args.input, args.field, args.tree, args.branch)
        keep_idx = [i for i, j in enumerate(all_jets) if min_leaves <= len(j) <= max_leaves]
        keep_idx = keep_idx if num_jets is None else keep_idx[:num_jets]
        kept = [all_jets[i] for i in keep_idx]
        args._jet_ids = keep_idx  # partitioned runs key their records by the jet's index in the file
        if not kept:
            raise InputError(f"{args.input}: none of its {len(all_jets)} jets has {min_leaves} to {max_leaves} leaves")
        lp, nl = _pad_jets(kept)
        source = os.path.abspath(args.input)
        log(
            progress,
            f"[jaxhc jets] {args.input}: {len(kept)} of {len(all_jets)} jets with {min_leaves}-{max_leaves} leaves",
        )
    else:
        log(
            progress,
            f"[jaxhc jets] simulating {num_jets} Ginkgo jets ({min_leaves}-{max_leaves} leaves, "
            f"lam={args.lam:g}, t_cut={args.t_cut:g}, seed={args.seed}) ...",
        )
        t0 = time.perf_counter()
        lp, nl = _simulate_jets(args, num_jets, min_leaves, max_leaves, progress)
        sim_seconds = time.perf_counter() - t0
        source = "jaxhc.models.ginkgo.simulate"
    if args.partition_size is not None:
        return _partitioned(args, energy, lp, nl, source, progress)
    if args.resume:
        raise InputError("--resume continues a partitioned run: pass it with --partition-size")
    lp, nl = _valid_jets(energy, lp, nl, args.on_invalid, progress, getattr(args, "_jet_ids", None))
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
    per_jet = []
    for b in range(B):
        n = int(nl[b])
        per_jet.append(
            {
                "n_leaves": n,
                "leaves": lp[b, :n].tolist(),
                "log_z": _finite_or_none(res.log_z[b]),
                "map_log_likelihood": _finite_or_none(res.map_log_phi[b]),
                "log_likelihood": {m: _finite_or_none(res.log_phi[m][b]) for m in res.methods},
                "trees": {m: np.asarray(res.trees[m][b].children).tolist() for m in res.methods},
            }
        )
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
        "note": "log likelihoods are log phi of each method's tree under the Ginkgo energy; null is -inf (a "
        "forbidden split); trees are [left, right] rows, merge t creating node n + t (scipy linkage layout)",
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
    pq = _write_parquet(os.path.join(args.out, "jets_results.parquet"), sol, res, progress)
    for p in (js, png, pq):
        if p is not None:
            print(f"wrote {p}")
    tb = next(r for r in rows if (r.a, r.b) == ("trellis", "beam"))
    tg = next(r for r in rows if (r.a, r.b) == ("trellis", "greedy"))
    print(
        f"jets done: {B} jets; trellis - beam {tb.mean:.2f} +- {tb.std:.2f}, trellis - greedy "
        f"{tg.mean:.2f} +- {tg.std:.2f} (paper 0.4 +- 0.5, 1.5 +- 1.1); outputs in {args.out}"
    )
    return 0
