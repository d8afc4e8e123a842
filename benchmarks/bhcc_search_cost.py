"""BHCC's stochastic column search (``search="stochastic"``) against the local search: cost on
wide tables and reach on tables where the local search stops short (issue 44).

Usage::

    python benchmarks/bhcc_search_cost.py                # timing 100 x {100, 200} + hard tables, JSON
    python benchmarks/bhcc_search_cost.py --quick        # 100 x 100 once, 20 tables, 2 search seeds, no JSON
    python benchmarks/bhcc_search_cost.py --cols 200 --repeats 3 --tables 0

Two studies, float64:

* **cost**: the paper's runtime design (as ``benchmarks/bhcc.py``): 100 rows, 4 views,
  Binomial(50) counts (``jaxhc.datasets.cross_clustering_synthetic(7 + J)``),
  ``BetaBinomial(0.5, 0.5, 50)``, ``alpha = 1``; ``jaxhc.bhcc`` with ``search="local"`` and
  ``"stochastic"`` (defaults otherwise), each in a fresh subprocess (one call: compilation
  included, the same programs for both), alternating ``--repeats`` times so that both see the
  same load. Ratio = median stochastic / median local.
* **reach**: ``--tables`` binary tables of ``jaxhc.datasets.cross_cluster_table(seed,
  view_sizes=(6, 10, 8, 12))`` (60 rows, 4 row clusters per view, ``Beta(0.3, 0.3)`` cells,
  columns shuffled by ``numpy.random.default_rng(seed)``),
  ``BetaBernoulli(0.5, 0.5)`` per column: on those where the local search ends more than 0.1
  nats below the true column partition's criterion (`BHCCResult.views_log_joint`'s quantity, the partitions read from ``cut(0.5)``), the
  stochastic search with ``--search-seeds`` seeds; a run reaches the truth when its
  criterion is at least the truth's less 0.1 nats.

Target (issue 44): BHCC on 100 x 200 with the new moves within 2x of the local search's time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import ints, machine, result_doc, run_worker, write_json  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "bhcc_search_cost.json")


def _worker(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--cols", type=int)
    ap.add_argument("--search")
    a = ap.parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    import jaxhc

    X, _, _ = jaxhc.datasets.cross_clustering_synthetic(7 + a.cols, n_rows=100, n_cols=a.cols, n_views=4)
    t = time.perf_counter()
    res = jaxhc.bhcc(X, jaxhc.BetaBinomial(0.5, 0.5, 50), 1.0, search=a.search, seed=0, progress_bar=False)
    out = {"cols": a.cols, "search": a.search, "seconds": time.perf_counter() - t, "n_views": len(res.views)}
    out["criterion"] = float(res.views_log_joint())
    print("RESULT " + json.dumps(out), flush=True)


def cost_study(args, log=print):
    rows = []
    for cols in args.cols:
        runs = {"local": [], "stochastic": []}
        for _ in range(args.repeats):
            for search in runs:
                r = run_worker(__file__, "time", ["--cols", str(cols), "--search", search], timeout=args.timeout)
                runs[search].append(r)
                if "error" in r:
                    log(f"  100 x {cols} {search}: ERROR {r['error'][-300:]}", flush=True)
                    continue
                log(
                    f"  100 x {cols} {search:<10} {r['seconds']:7.1f} s  views {r['n_views']}  "
                    f"criterion {r['criterion']:.2f}  load {r['loadavg_1min_before_after'][0]:.1f}",
                    flush=True,
                )
        entry = {"cols": cols, "runs": runs}
        ok = {k: [r["seconds"] for r in v if "error" not in r] for k, v in runs.items()}
        if ok["local"] and ok["stochastic"]:
            entry["local_s"], entry["stochastic_s"] = float(np.median(ok["local"])), float(np.median(ok["stochastic"]))
            entry["ratio"] = entry["stochastic_s"] / entry["local_s"]
            log(f"  100 x {cols}: stochastic / local = {entry['ratio']:.2f}", flush=True)
        rows.append(entry)
    return rows


def reach_study(args, log=print):
    import jax

    jax.config.update("jax_enable_x64", True)
    import jaxhc
    from jaxhc.inference.bhcc.columns import column_model
    from jaxhc.inference.bhcc.refine import Partition, SetEvidence

    rows = []
    for seed in range(args.tables):
        X, views, _ = jaxhc.datasets.cross_cluster_table(seed, view_sizes=(6, 10, 8, 12))
        perm = np.random.default_rng(seed).permutation(X.shape[1])  # columns shuffled
        X, views = np.asarray(X)[:, perm], np.asarray(views)[perm]
        J = X.shape[1]
        comp = jaxhc.BetaBernoulli(a=0.5 * np.ones(J), b=0.5 * np.ones(J))
        t = time.perf_counter()
        local = jaxhc.bhcc(X, comp, 1.0)
        t_local = time.perf_counter() - t
        ev = SetEvidence(column_model(comp, np.asarray(X, float)), 1.0)

        def criterion(labels):
            labels = np.asarray(labels)
            return Partition(ev, 1.0, [tuple(np.flatnonzero(labels == g)) for g in np.unique(labels)]).score()

        truth = criterion(views)
        row = {"seed": seed, "local_regret": criterion(local.cut(0.5)) - truth, "local_s": t_local}
        if row["local_regret"] < -0.1:
            row["stochastic_regret"], row["stochastic_s"] = [], []
            for s in range(args.search_seeds):
                t = time.perf_counter()
                res = jaxhc.bhcc(X, comp, 1.0, search="stochastic", seed=s)
                row["stochastic_s"].append(time.perf_counter() - t)
                row["stochastic_regret"].append(criterion(res.cut(0.5)) - truth)
            log(
                f"  table {seed}: local {row['local_regret']:+.2f} nats ({t_local:.1f} s); stochastic "
                + " ".join(f"{r:+.2f}" for r in row["stochastic_regret"])
                + f" ({np.median(row['stochastic_s']):.1f} s each)",
                flush=True,
            )
        rows.append(row)
    hard = [r for r in rows if "stochastic_regret" in r]
    runs = [x for r in hard for x in r["stochastic_regret"]]
    summary = {
        "tables": len(rows),
        "local_short": len(hard),
        "stochastic_runs": len(runs),
        "stochastic_reach": int(sum(x >= -0.1 for x in runs)),
        "tables_reached_by_some_seed": int(sum(max(r["stochastic_regret"]) >= -0.1 for r in hard)),
    }
    log(f"  {summary}", flush=True)
    return {"rows": rows, "summary": summary}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--_worker"]:
        return _worker(argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="100 x 100 once, 20 tables, 2 search seeds, no JSON")
    ap.add_argument("--cols", type=ints, default=None, help="timing widths (default 100,200; '' for none)")
    ap.add_argument("--repeats", type=int, default=None, help="local / stochastic subprocess pairs (default 2)")
    ap.add_argument("--tables", type=int, default=None, help="60 x 36 tables scanned (default 50)")
    ap.add_argument("--search-seeds", type=int, default=None, help="stochastic seeds per hard table (default 5)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per timing subprocess")
    ap.add_argument("--out", type=str, default=None, help=f"JSON output (default {DEFAULT_OUT}; --quick: none)")
    args = ap.parse_args(argv)
    q = args.quick
    args.cols = args.cols if args.cols is not None else ([100] if q else [100, 200])
    args.repeats = args.repeats or (1 if q else 2)
    args.tables = args.tables if args.tables is not None else (20 if q else 50)
    args.search_seeds = args.search_seeds or (2 if q else 5)
    out_path = args.out or (None if q else DEFAULT_OUT)
    info = machine()
    t0 = time.perf_counter()
    print("Cost (fresh subprocess per run)", flush=True)
    cost = cost_study(args)
    print("\nReach (60 x 36 binary tables where the local search stops short)", flush=True)
    reach = reach_study(args) if args.tables else None
    checks = [
        {
            "name": "BHCC 100 x 200: stochastic / local time",
            "value": round(e["ratio"], 2),
            "target": "<= 2",
            "result": "met" if e["ratio"] <= 2 else "missed",
        }
        for e in cost
        if e["cols"] == 200 and "ratio" in e
    ]
    for c in checks:
        print(f"{c['name']}: {c['value']} (target {c['target']}): {c['result']}")
    if out_path:
        doc = result_doc(
            "bhcc_search_cost",
            __doc__,
            machine=info,
            config={k: v for k, v in vars(args).items() if k != "out"},
            cost=cost,
            reach=reach,
            checks=checks,
            total_wall_s=time.perf_counter() - t0,
        )
        write_json(out_path, doc)


if __name__ == "__main__":
    main()
