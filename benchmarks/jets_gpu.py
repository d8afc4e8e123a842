"""The exact trellis on a GPU against 2 CPU cores (issue 17, part 5): `solve_batch` (compact
results: log Z, MAP log phi and every MAP tree on the host) on 10 000 and 100 000 Ginkgo jets,
run on the machine's accelerator and, in a second process on the same machine, on the CPU
restricted to 2 cores (``sched_setaffinity``); the same jets in both, and their answers
compared. Prints a table and writes JSON (default ``benchmarks/results/jets_gpu.json``).

Usage: ``python benchmarks/jets_gpu.py [--jets 10000,100000] [--min-leaves 5 --max-leaves 12]``
(``--quick``: 2000 jets; ``--cpu-baseline``: also time this machine's 2 cores when it has no
accelerator, for a dry run; ``--trees host|device`` where the MAP trees are read, ``--trees-ab``
also the accelerator with the trees read on the host). ``benchmarks/device_check.sh`` runs
it with the other device checks of issue 43 in one call. Needs nothing beyond the core install.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import fmt_t, result_doc, run_worker, write_json  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "jets_gpu.json")
TARGETS = {"gpu_over_2_cores_min": 20.0}


def _setup():
    import jax

    jax.config.update("jax_enable_x64", True)


def _energy(lik):
    from jaxhc.models import ginkgo

    return ginkgo.GinkgoParams(lam=2.0, t_cut=16.0).energy(lik)


def worker(args) -> dict:
    """Times `solve_batch` on each batch size (the first call, with compilation, then
    ``--repeats`` warm calls: the fastest counts) on this process's default device; saves
    log Z and the MAP trees for the comparison."""
    if args.cores:
        os.sched_setaffinity(0, set(range(args.cores)))
    _setup()
    import jax
    import numpy as np
    from jax import monitoring

    from jaxhc import trellis
    from jaxhc.trellis import batch as tb

    compiles = [0]
    monitoring.register_event_duration_secs_listener(
        lambda ev, d, **kw: compiles.__setitem__(0, compiles[0] + (ev == "/jax/core/compile/backend_compile_duration"))
    )
    # where the MAP trees are read: None = the library's choice (the device on accelerators)
    tb._TREES_ON_DEVICE = {"auto": None, "device": True, "host": False}[args.trees]
    if args.limits:
        blk, jets, chunk = (int(x) for x in args.limits.split(","))
        tb._GROUP_ACCEL = tb._GROUP_CPU = (blk, jets, chunk)
    d = np.load(args.data)
    lp, nl = d["lp"], d["nl"]
    dev = jax.devices()[0]
    out = {
        "device": str(dev),
        "device_kind": getattr(dev, "device_kind", None),
        "platform": dev.platform,
        "cores": len(os.sched_getaffinity(0)),
        "limits": list(tb._group_limits(dev)),
        "trees": args.trees,
        "runs": [],
    }
    e = _energy(args.likelihood)
    for B in [int(x) for x in args.jets.split(",")]:
        t = time.perf_counter()
        c0 = compiles[0]
        sol = trellis.solve_batch(e, lp[:B], nl[:B])
        first = time.perf_counter() - t
        # a first call that compiled nothing (every size met in an earlier batch) is warm too
        warm = [first] if compiles[0] == c0 else []
        for _ in range(max(args.repeats - len(warm), 0 if warm else 1)):
            t = time.perf_counter()
            sol = trellis.solve_batch(e, lp[:B], nl[:B])
            warm.append(time.perf_counter() - t)
        np.savez(f"{args.save}_{B}.npz", log_z=sol.log_z, map_log_phi=sol.map_log_phi, children=sol.map_children)
        splits = int(sum(trellis.num_splits(int(n)) for n in nl[:B]))
        out["runs"].append(
            {
                "jets": B,
                "first_call_s": first,
                "compiles_first_call": compiles[0] - c0,
                "warm_s": min(warm),
                "warm_all_s": warm,
                "jets_per_s": B / min(warm),
                "splits_per_s": splits / min(warm),
            }
        )
        print(json.dumps(out["runs"][-1]), file=sys.stderr, flush=True)
    if args.profile:
        # where a warm call of the largest batch spends its host time (waits on the device
        # show up in the array conversions)
        import cProfile
        import io
        import pstats

        pr = cProfile.Profile()
        pr.enable()
        trellis.solve_batch(e, lp[:B], nl[:B])
        pr.disable()
        buf = io.StringIO()
        pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(15)
        out["profile_top"] = buf.getvalue().splitlines()[-25:]
    return out


def _compare(a, b) -> dict:
    import numpy as np

    A, Bz = np.load(a), np.load(b)
    lz = float(np.max(np.abs(A["log_z"] - Bz["log_z"])))
    mp = float(np.max(np.abs(A["map_log_phi"] - Bz["map_log_phi"])))
    same = np.all(A["children"] == Bz["children"], axis=(1, 2))
    return {"max_abs_log_z_diff": lz, "max_abs_map_log_phi_diff": mp, "same_map_tree_fraction": float(same.mean())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jets", default=None, help="batch sizes (default 10000,100000; 2000 with --quick)")
    ap.add_argument("--likelihood", default="exact")
    ap.add_argument("--min-leaves", type=int, default=5)
    ap.add_argument("--max-leaves", type=int, default=12)
    ap.add_argument("--cores", type=int, default=2, help="CPU cores of the baseline")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--cpu-repeats", type=int, default=1)
    ap.add_argument(
        "--accel-limits",
        default="",
        help="extra accelerator runs with other compact-path limits: 'BLOCK,JETS,CHUNK;...'",
    )
    ap.add_argument("--cpu-baseline", action="store_true", help="time the CPU even without an accelerator")
    ap.add_argument("--skip-cpu", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--_worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--data", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--save", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--limits", default="", help=argparse.SUPPRESS)
    ap.add_argument("--profile", action="store_true", help="profile one warm call of the largest batch")
    ap.add_argument(
        "--trees", default="auto", choices=("auto", "device", "host"), help="where solve_batch reads the MAP trees"
    )
    ap.add_argument(
        "--trees-ab", action="store_true", help="also time the accelerator with the MAP trees read on the host"
    )
    args = ap.parse_args(argv)
    if args._worker:
        if args._worker != "cpu":
            args.cores = 0  # the accelerator's process keeps every core
        print("RESULT " + json.dumps(worker(args)), flush=True)
        return 0
    sizes = args.jets or ("2000" if args.quick else "10000,100000")
    n = max(int(x) for x in sizes.split(","))
    _setup()
    import jax
    import numpy as np

    from jaxhc.models import ginkgo

    accel = jax.default_backend() != "cpu"
    if not accel and not args.cpu_baseline:
        print("no accelerator here (jax.default_backend() is 'cpu'): nothing to time; --cpu-baseline times the CPU")
        return 0
    t0 = time.perf_counter()
    with jax.default_device(jax.devices("cpu")[0]):
        sim = ginkgo.simulate(
            jax.random.PRNGKey(0),
            ginkgo.GinkgoParams(lam=2.0, t_cut=16.0),
            n,
            min_leaves=args.min_leaves,
            max_leaves=args.max_leaves,
        )
    lp, nl = np.asarray(sim.leaves, np.float64), np.asarray(sim.n_leaves, np.int64)
    tmp = tempfile.mkdtemp(prefix="jaxhc-gpu-")
    data = os.path.join(tmp, "jets.npz")
    np.savez(data, lp=lp, nl=nl)
    sim_s = time.perf_counter() - t0
    print(f"{n} jets of {args.min_leaves}..{args.max_leaves} leaves simulated in {sim_s:.1f} s", flush=True)
    common = ["--data", data, "--jets", sizes, "--likelihood", args.likelihood, "--trees", args.trees] + (
        ["--profile"] if args.profile else []
    )
    res = {
        "jets_sizes": [int(x) for x in sizes.split(",")],
        "leaves": [args.min_leaves, args.max_leaves],
        "likelihood": args.likelihood,
        "sizes_hist": np.bincount(nl, minlength=args.max_leaves + 1)[args.min_leaves :].tolist(),
        "simulate_s": sim_s,
        "devices": [str(d) for d in jax.devices()],
    }
    env_cpu = dict(os.environ, JAX_PLATFORMS="cpu")
    if accel:
        res["accelerator"] = run_worker(
            __file__, "accel", common + ["--save", os.path.join(tmp, "accel"), "--repeats", str(args.repeats)], 1800
        )
        print("accelerator:", json.dumps(res["accelerator"]), flush=True)
        if args.trees_ab:  # the same, the MAP trees read on the host (compact.map_queue_device's gain)
            host = [x if x != args.trees else "host" for x in common]
            res["accelerator_host_trees"] = run_worker(
                __file__,
                "accel",
                host + ["--save", os.path.join(tmp, "hosttrees"), "--repeats", str(args.repeats)],
                1800,
            )
            print("accelerator, trees on the host:", json.dumps(res["accelerator_host_trees"]), flush=True)
        res["accelerator_other_limits"] = []
        for lim in [x for x in args.accel_limits.split(";") if x]:
            r = run_worker(
                __file__,
                "accel",
                common
                + [
                    "--jets",
                    str(n),
                    "--save",
                    os.path.join(tmp, "alt"),
                    "--repeats",
                    str(args.repeats),
                    "--limits",
                    lim,
                ],
                1800,
            )
            res["accelerator_other_limits"].append(r)
            print(f"accelerator, limits {lim}:", json.dumps(r), flush=True)
    accel_failed = accel and "error" in res["accelerator"]
    if (accel or args.cpu_baseline) and not args.skip_cpu and not accel_failed:
        res["cpu"] = run_worker(
            __file__,
            "cpu",
            common
            + ["--save", os.path.join(tmp, "cpu"), "--repeats", str(args.cpu_repeats), "--cores", str(args.cores)],
            3600,
            env=env_cpu,
        )
        print(f"cpu ({args.cores} cores):", json.dumps(res["cpu"]), flush=True)
    rows = []
    for B in res["jets_sizes"]:
        row = {"jets": B}
        for k in ("accelerator", "cpu"):
            r = res.get(k) or {}
            run = next((x for x in r.get("runs", []) if x["jets"] == B), None)
            row[k] = run
        if row["accelerator"] and row["cpu"]:
            row["speedup"] = row["cpu"]["warm_s"] / row["accelerator"]["warm_s"]
            row.update(_compare(os.path.join(tmp, f"accel_{B}.npz"), os.path.join(tmp, f"cpu_{B}.npz")))
        rows.append(row)
    res["rows"] = rows
    print()
    print(
        f"| jets | {'GPU' if accel else 'accelerator'} first | warm | jets/s | {args.cores}-core CPU warm | jets/s | speedup | max dlogZ | same MAP |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        a, c = r["accelerator"] or {}, r["cpu"] or {}
        print(
            f"| {r['jets']} | {fmt_t(a.get('first_call_s'))} | {fmt_t(a.get('warm_s'))} | {a.get('jets_per_s', 0):.0f} "
            f"| {fmt_t(c.get('warm_s'))} | {c.get('jets_per_s', 0):.0f} | {r.get('speedup', float('nan')):.1f}x "
            f"| {r.get('max_abs_log_z_diff', float('nan')):.1e} | {r.get('same_map_tree_fraction', float('nan')):.4f} |"
        )
    method = (
        f"Ginkgo jets (lam 2, t_cut 16, {args.likelihood} likelihood) of {args.min_leaves}..{args.max_leaves} leaves, "
        "trellis.solve_batch with its defaults (compact results: log Z, MAP log phi, MAP trees read on the host), "
        "float64; accelerator: the default device of a fresh process; CPU: a fresh process with "
        f"JAX_PLATFORMS=cpu pinned to {args.cores} cores by sched_setaffinity, on the same machine; warm = the "
        "fastest of the repeated calls after the first; the two processes' answers compared jet by jet"
    )
    if args.quick and not args.out:
        return 0
    write_json(args.out or DEFAULT_OUT, result_doc("jets_gpu", method, targets=TARGETS, **res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
