"""One large jet on the exact trellis (issue 43, part 6, CPU figures): log Z, log Z + MAP and
log Z + MAP + marginals for one Ginkgo jet at N = 18, 19, 20, with the memory model's bytes.

Usage::

    python benchmarks/trellis_large.py                 # N = 18, 19, 20
    python benchmarks/trellis_large.py --ns 18 --max-s 60
    python benchmarks/trellis_large.py --ns 22,24 --programs log_z,log_z_map --no-warm   # a GPU

Method (recorded in the JSON under ``"method"``): one ``ginkgo_like_jet`` of `benchmarks/trellis.py`
(seed N) with ``GinkgoEnergy(2, 16, likelihood="exact")``, float64, each N in a fresh worker
process (so its peak RSS is its own). For each of ``log_partition`` (log Z), ``solve(...,
marginals=False)`` (log Z + MAP tree) and ``solve`` (+ marginals): the first call (tracing,
compilation, run) and one warm call, wall time. A program is skipped when the projection
from the previous one (warm time x 2.2 for the MAP, x 1.8 for the marginals) exceeds
``--max-s`` (default 180 s). ``maxrss`` = the worker's ``ru_maxrss`` at its end (compiler
included); ``model`` = `jaxhc.trellis.memory_required(N)` and the per-subset table bytes of
the size-class program (benchmarks/notes/trellis.md, "Memory model").
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent


def worker(n: int, max_s: float, warm: bool = True, programs: str = "log_z,log_z_map,all") -> dict:
    import jax

    jax.config.update("jax_enable_x64", True)
    sys.path.insert(0, str(HERE))
    from trellis import make_problem

    from jaxhc import trellis

    energy, leaves = make_problem("ginkgo_exact", n, n)
    out = {"n": n, "splits": trellis.num_splits(n), "memory_required_bytes": trellis.memory_required(n, 7)}
    progs = {
        "log_z": lambda: float(trellis.log_partition(energy, leaves)),
        "log_z_map": lambda: float(trellis.solve(energy, leaves, marginals=False).log_z),
        "all": lambda: float(trellis.solve(energy, leaves).log_z),
    }
    factor = {"log_z": 1.0, "log_z_map": 2.2, "all": 1.8}
    prev = None
    for name, fn in progs.items():
        if name not in programs.split(","):
            continue
        if prev is not None and prev * factor[name] > max_s:
            out[name] = {"skipped": f"projected {prev * factor[name]:.0f} s > {max_s:.0f} s"}
            continue
        t = time.perf_counter()
        v = fn()
        first = time.perf_counter() - t
        if warm:
            t = time.perf_counter()
            fn()
            took = time.perf_counter() - t
        else:  # N >= 21: the first call's compilation is a small part of it
            took = first
        out[name] = {
            "first_s": first,
            "warm_s": took if warm else None,
            "log_z": v,
            "splits_per_s": out["splits"] / took,
        }
        prev = took
    out["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    stats = jax.devices()[0].memory_stats() or {}  # accelerators: the device's peak bytes
    out["device_peak_bytes"] = stats.get("peak_bytes_in_use")
    out["device"] = str(jax.devices()[0])
    out["load_1min"] = os.getloadavg()[0]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ns", default="18,19,20")
    ap.add_argument("--max-s", type=float, default=180.0)
    ap.add_argument("--out", default=str(HERE / "results" / "trellis_large.json"))
    ap.add_argument("--programs", default="log_z,log_z_map,all", help="of log_z, log_z_map, all")
    ap.add_argument("--no-warm", action="store_true", help="time the first call only (N >= 21)")
    ap.add_argument("--_worker", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._worker:
        print(json.dumps(worker(args._worker, args.max_s, not args.no_warm, args.programs)))
        return
    rows = []
    for n in [int(x) for x in args.ns.split(",")]:
        cmd = [sys.executable, __file__, "--_worker", str(n), "--max-s", str(args.max_s), "--programs", args.programs]
        cmd += ["--no-warm"] if args.no_warm else []
        p = subprocess.run(cmd, capture_output=True, text=True, check=True)
        r = json.loads(p.stdout.strip().splitlines()[-1])
        rows.append(r)
        cells = []
        for k in ("log_z", "log_z_map", "all"):
            c = r.get(k, {"skipped": "not asked"})
            cells.append(
                f"{k}: {c['skipped']}"
                if "skipped" in c
                else f"{k}: first {c['first_s']:.1f} s, warm {c['warm_s'] or c['first_s']:.2f} s "
                f"({c['splits_per_s'] / 1e6:.0f} M splits/s)"
            )
        print(f"N={n} ({r['splits']:.3g} splits, maxrss {r['maxrss_mb']:.0f} MB): " + "; ".join(cells), flush=True)
    sys.path.insert(0, str(HERE))
    from _harness import machine

    doc = {"machine": machine(), "method": __doc__, "rows": rows}
    pathlib.Path(args.out).write_text(json.dumps(doc, indent=1))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
