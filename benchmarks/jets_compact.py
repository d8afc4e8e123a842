"""Compact batch results (issue 23, part 3): ``solve_batch`` + ``jaxhc.jets.to_awkward`` on
2000 Ginkgo jets of 5..12 leaves, the compact default (``tables=False``) against the tables
it replaces (``tables=True``), each in a fresh process: warm time, peak process memory,
compiles, and the size of the per-jet records (in memory and as parquet).

Targets (issue 23): output <= 2 MB, peak memory <= 1 GB, no more compiles than distinct jet
sizes. Usage: ``python benchmarks/jets_compact.py [--jets 2000] [--out FILE]``
(default ``benchmarks/results/jets_compact.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import result_doc, run_worker, write_json  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "jets_compact.json")
TARGETS = {"output_mb": 2.0, "peak_rss_gb": 1.0}


def worker(mode: str, n_jets: int) -> dict:
    import resource
    import tempfile

    import jax

    jax.config.update("jax_enable_x64", True)
    import awkward as ak
    import numpy as np
    from jax import monitoring

    compiles = [0]
    monitoring.register_event_duration_secs_listener(
        lambda ev, d, **kw: compiles.__setitem__(0, compiles[0] + (ev == "/jax/core/compile/backend_compile_duration"))
    )
    from jaxhc import trellis
    from jaxhc.jets import to_awkward
    from jaxhc.models import ginkgo

    params = ginkgo.GinkgoParams(lam=2.0, t_cut=16.0)
    jets = ginkgo.simulate(jax.random.PRNGKey(0), params, n_jets, min_leaves=5, max_leaves=12)
    lp, nl = np.asarray(jets.leaves), np.asarray(jets.n_leaves)
    energy = params.energy("exact")
    rss_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tables = mode == "tables"
    c0 = compiles[0]
    t = time.perf_counter()
    rec = to_awkward(trellis.solve_batch(energy, lp, nl, tables=tables))
    first = time.perf_counter() - t
    n_compiles = compiles[0] - c0
    runs = []
    for _ in range(3):
        t = time.perf_counter()
        sol = trellis.solve_batch(energy, lp, nl, tables=tables)
        rec = to_awkward(sol)
        runs.append(time.perf_counter() - t)
    path = os.path.join(tempfile.mkdtemp(), "trees.parquet")
    ak.to_parquet(rec, path)
    out = {
        "mode": mode,
        "jets": int(len(nl)),
        "distinct_sizes": int(len(np.unique(nl))),
        "sizes": {int(k): int(v) for k, v in zip(*np.unique(nl, return_counts=True))},
        "first_call_s": first,
        "warm_s": float(np.median(runs)),
        "warm_runs_s": runs,
        "compiles": n_compiles,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_before_solve_mb": rss_start,
        "records_mb": rec.layout.nbytes / 1e6,
        "parquet_mb": os.path.getsize(path) / 1e6,
    }
    if tables:
        out["tables_mb"] = sum(np.asarray(x).nbytes for x in (sol.log_z_table, sol.map_table, sol.backpointer)) / 1e6
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jets", type=int, default=2000)
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--_worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._worker:
        print("RESULT " + json.dumps(worker(args._worker, args.jets)), flush=True)
        return 0
    rows = []
    for mode in ("compact", "tables"):
        r = run_worker(__file__, mode, ["--jets", str(args.jets)], args.timeout)
        if "error" in r:
            print(f"{mode}: {r['error']}")
            return 1
        rows.append(r)
    c, t = rows
    print(f"\n{c['jets']} Ginkgo jets of 5..12 leaves ({c['distinct_sizes']} sizes), solve_batch + to_awkward, warm:")
    print("| mode | first call s | warm s | compiles | peak RSS MB | records MB | parquet MB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['mode']} | {r['first_call_s']:.2f} | {r['warm_s']:.2f} | {r['compiles']} | {r['peak_rss_mb']:.0f} | "
            f"{r['records_mb']:.2f} | {r['parquet_mb']:.3f} |"
        )
    print(
        f"(tables mode holds {t['tables_mb']:.0f} MB of [B, 2^N_max] tables; compact / tables warm time "
        f"{c['warm_s'] / t['warm_s']:.2f})"
    )
    checks = {
        "output_mb": [c["records_mb"], TARGETS["output_mb"], c["records_mb"] <= TARGETS["output_mb"]],
        "peak_rss_gb": [
            c["peak_rss_mb"] / 1024,
            TARGETS["peak_rss_gb"],
            c["peak_rss_mb"] / 1024 <= TARGETS["peak_rss_gb"],
        ],
        "compiles_le_sizes": [c["compiles"], c["distinct_sizes"], c["compiles"] <= c["distinct_sizes"]],
    }
    for k, (v, target, ok) in checks.items():
        print(f"  {k}: {v:.3g} (target {target}) -> {'met' if ok else 'MISSED'}")
    method = (
        "each mode in a fresh process: ginkgo.simulate(PRNGKey(0), lam=2, t_cut=16, 5..12 leaves), "
        "GinkgoEnergy exact; first call includes compilation (persistent cache as configured in the "
        "environment); warm = median of 3; peak RSS = ru_maxrss of the process (includes imports, "
        "simulation and compilation); compiles counted by jax.monitoring backend_compile events"
    )
    write_json(args.out, result_doc("jets_compact", method, targets=TARGETS, rows=rows, checks=checks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
