"""BHCC / RBHCC with and without the refinement of the column partition (issue 15).

Usage::

    python benchmarks/bhcc_refine.py                 # quality (5 tables) + timing, writes JSON
    python benchmarks/bhcc_refine.py --no-timing     # quality only (~5-10 min on 2 cores)
    python benchmarks/bhcc_refine.py --quick         # 2 tables, one RBHCC key, no timing, no JSON

Two studies, float64 (``jax_enable_x64``):

* **quality**: ``--tables`` (5) tables from ``jaxhc.datasets.cross_cluster_table(seed)``
  (seeds 0..4): 60 binary rows, 4 views of 6, 8, 10 and 12 columns, 4 equal row clusters per
  view, every (view, cluster, column) probability ``~ Beta(0.3, 0.3)``. All methods use the
  generating prior ``BetaBernoulli(0.3, 0.3)`` and ``alpha = 1``: ``bhcc`` with
  ``refine=False`` (Algorithm 1) and with the refinement (the default), ``rbhcc`` (default
  ``subset_size=16, threshold=32``; 36 columns is one filtering level) off and on, for
  ``--keys`` (3) keys. Per table: the view ARI (ARI of the column-to-view partition against
  the truth) and the criterion of each column partition: ``log CRP(u; alpha) + sum_v log
  p(X_v | BHC)`` (`BHCCResult.views_log_joint`; the true partition's from the row BHCs of
  its views, `BHCCResult.view_of`), the quantity the refinement increases.
* **timing**: the paper's runtime design (as ``benchmarks/bhcc.py``): 100 rows, 4 views,
  Binomial(50) counts, ``BetaBinomial(0.5, 0.5, 50)``; ``bhcc`` on 100 x ``--bhcc-cols``
  (200) and ``rbhcc(levels=6)`` on 100 x ``--rbhcc-cols`` (2000), refinement off and on,
  each in a fresh subprocess (first call = compilation + run, second call = run),
  alternating off / on ``--repeats`` (2) times so that both see the same load.

Targets (issue 15): BHCC with refinement mean view ARI >= 0.9; refined criterion >= the
true partition's on every table where the truth outscores the greedy tree; RBHCC with
refinement mean view ARI >= 0.85; BHCC on 100 x 200 with refinement within 1.5x of the time
without it.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import ints, machine, run_worker  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "bhcc_refine.json")
TARGETS = {"bhcc_refined_mean_view_ari": 0.9, "rbhcc_refined_mean_view_ari": 0.85, "bhcc_100x200_time_ratio": 1.5}


def _ari(a, b):
    from jaxhc import metrics

    return float(metrics.adjusted_rand_index(np.asarray(a), np.asarray(b)))


def partition_criterion(res, labels) -> float:
    """``log CRP(u; alpha) + sum_v log p(X_v | BHC)`` of the column partition ``labels``
    (each view's row BHC through ``res.view_of``)."""
    from scipy.special import gammaln

    J, a = res.n_columns, res.alpha
    tot = float(gammaln(a) - gammaln(J + a))
    for g in np.unique(labels):
        cols = np.flatnonzero(labels == g)
        tot += float(np.log(a) + gammaln(len(cols)) + float(res.view_of(cols).rows.dpm_lower_bound))
    return tot


# ------------------------------------------------------------------------------------------
# quality
# ------------------------------------------------------------------------------------------
def quality_study(args, log=print):
    import jax

    import jaxhc

    comp = jaxhc.BetaBernoulli(0.3, 0.3)
    rows = []
    for seed in range(args.tables):
        X, u, _ = jaxhc.datasets.cross_cluster_table(seed)
        row = {"seed": seed, "shape": list(X.shape)}
        for name, refine in (("bhcc_off", False), ("bhcc_on", True)):
            t = time.perf_counter()
            res = jaxhc.bhcc(X, comp, 1.0, refine=refine, progress_bar=False)
            row[name] = {
                "view_ari": _ari(u, res.cut(0.5)),
                "criterion": res.views_log_joint(),
                "refine_gain": res.refine_gain,
                "n_views": len(res.views),
                "s": time.perf_counter() - t,
                "labels": res.cut(0.5).tolist(),
            }
            if not refine:
                row["truth_criterion"] = partition_criterion(res, u)
        for name, refine in (("rbhcc_off", False), ("rbhcc_on", True)):
            per = []
            for k in range(args.keys):
                t = time.perf_counter()
                res = jaxhc.rbhcc(jax.random.key(k), X, comp, 1.0, refine=refine, progress_bar=False)
                per.append(
                    {
                        "key": k,
                        "view_ari": _ari(u, res.cut(0.5)),
                        "criterion": res.views_log_joint(),
                        "refine_gain": res.refine_gain,
                        "n_views": len(res.views),
                        "s": time.perf_counter() - t,
                    }
                )
            row[name] = {
                "per_key": per,
                "view_ari": float(np.mean([p["view_ari"] for p in per])),
                "criterion": float(np.mean([p["criterion"] for p in per])),
            }
        rows.append(row)
        log(
            f"  table {seed}: truth {row['truth_criterion']:9.2f} | BHCC off ARI {row['bhcc_off']['view_ari']:.3f} "
            f"({row['bhcc_off']['criterion']:9.2f}) on {row['bhcc_on']['view_ari']:.3f} ({row['bhcc_on']['criterion']:9.2f}) | "
            f"RBHCC off {row['rbhcc_off']['view_ari']:.3f} on {row['rbhcc_on']['view_ari']:.3f}",
            flush=True,
        )
    summary = {
        k: float(np.mean([r[k]["view_ari"] for r in rows])) for k in ("bhcc_off", "bhcc_on", "rbhcc_off", "rbhcc_on")
    }
    truth_wins = [r["seed"] for r in rows if r["truth_criterion"] > r["bhcc_off"]["criterion"] + 1e-9]
    covered = [s for s in truth_wins if rows[s]["bhcc_on"]["criterion"] >= rows[s]["truth_criterion"] - 1e-9]
    return {
        "tables": rows,
        "mean_view_ari": summary,
        "truth_beats_greedy": truth_wins,
        "refined_at_least_truth_there": covered,
    }


def print_quality(q):
    print("\nView ARI (criterion log CRP + sum of view DPM bounds, nats); RBHCC: mean over keys")
    hdr = (
        f"{'table':>5} | {'truth crit':>10} | {'BHCC':>5} {'crit':>9} | {'BHCC+ref':>8} {'crit':>9} {'gain':>6} | "
        f"{'RBHCC':>5} | {'RBHCC+ref':>9} | {'BHCC+ref s':>10}"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in q["tables"]:
        a, b = r["bhcc_off"], r["bhcc_on"]
        print(
            f"{r['seed']:>5} | {r['truth_criterion']:10.2f} | {a['view_ari']:5.3f} {a['criterion']:9.2f} | "
            f"{b['view_ari']:8.3f} {b['criterion']:9.2f} {b['refine_gain']:6.2f} | {r['rbhcc_off']['view_ari']:5.3f} | "
            f"{r['rbhcc_on']['view_ari']:9.3f} | {b['s']:10.1f}"
        )
    m = q["mean_view_ari"]
    print(
        f"{'mean':>5} | {'':>10} | {m['bhcc_off']:5.3f} {'':>9} | {m['bhcc_on']:8.3f} {'':>9} {'':>6} | "
        f"{m['rbhcc_off']:5.3f} | {m['rbhcc_on']:9.3f} |"
    )
    print(
        f"tables where the truth outscores the greedy tree: {q['truth_beats_greedy']}; "
        f"refined >= truth on {q['refined_at_least_truth_there']}"
    )


# ------------------------------------------------------------------------------------------
# timing (fresh subprocesses)
# ------------------------------------------------------------------------------------------
def _worker(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--algo")
    ap.add_argument("--cols", type=int)
    ap.add_argument("--refine", type=int)
    ap.add_argument("--calls", type=int, default=2)
    a = ap.parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    import jaxhc

    X, cv, _ = jaxhc.datasets.cross_clustering_synthetic(7 + a.cols, n_rows=100, n_cols=a.cols, n_views=4)
    comp = jaxhc.BetaBinomial(0.5, 0.5, 50)
    if a.algo == "bhcc":
        call = lambda: jaxhc.bhcc(X, comp, 1.0, refine=bool(a.refine), progress_bar=False)
    else:
        call = lambda: jaxhc.rbhcc(jax.random.key(0), X, comp, 1.0, levels=6, refine=bool(a.refine), progress_bar=False)
    out = {"algo": a.algo, "cols": a.cols, "refine": bool(a.refine), "calls_s": []}
    for _ in range(a.calls):
        t = time.perf_counter()
        res = call()
        out["calls_s"].append(time.perf_counter() - t)
    out.update(n_views=len(res.views), view_ari=_ari(cv, res.cut(0.5)), refine_gain=res.refine_gain)
    print("RESULT " + json.dumps(out), flush=True)


def timing_study(args, log=print):
    out = []
    for algo, cols in [("bhcc", c) for c in args.bhcc_cols] + [("rbhcc", c) for c in args.rbhcc_cols]:
        runs = {False: [], True: []}
        for rep in range(args.repeats):
            for refine in (False, True):
                r = run_worker(
                    __file__,
                    "time",
                    ["--algo", algo, "--cols", str(cols), "--refine", str(int(refine))],
                    timeout=args.timeout,
                )
                runs[refine].append(r)
                if "error" in r:
                    log(f"  {algo} 100 x {cols} refine={refine}: ERROR {r['error'][-300:]}", flush=True)
                    continue
                log(
                    f"  {algo} 100 x {cols} refine={str(refine):<5} first {r['calls_s'][0]:7.1f} s  second "
                    f"{r['calls_s'][-1]:7.1f} s  views {r['n_views']}  ARI {r['view_ari']:.3f}  gain {r['refine_gain']:.2f}  "
                    f"load {r['loadavg_1min_before_after'][0]:.1f}",
                    flush=True,
                )
        ok = {k: [r for r in v if "error" not in r] for k, v in runs.items()}
        entry = {"algo": algo, "cols": cols, "off": runs[False], "on": runs[True]}
        if ok[False] and ok[True]:
            for i, kind in ((0, "first"), (-1, "second")):
                off = float(np.median([r["calls_s"][i] for r in ok[False]]))
                on = float(np.median([r["calls_s"][i] for r in ok[True]]))
                entry[f"{kind}_off_s"], entry[f"{kind}_on_s"], entry[f"{kind}_ratio"] = off, on, on / off
            log(
                f"  {algo} 100 x {cols}: median on/off first call {entry['first_ratio']:.2f}, "
                f"second call {entry['second_ratio']:.2f}",
                flush=True,
            )
        out.append(entry)
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--_worker"]:
        return _worker(argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 tables, 1 RBHCC key, no timing, no JSON")
    ap.add_argument("--tables", type=int, default=None, help="generated tables (seeds 0..; default 5)")
    ap.add_argument("--keys", type=int, default=None, help="RBHCC keys per table (default 3)")
    ap.add_argument("--no-quality", action="store_true")
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--bhcc-cols", type=ints, default=[200], help="BHCC timing sizes (default 200)")
    ap.add_argument("--rbhcc-cols", type=ints, default=[2000], help="RBHCC timing sizes (default 2000; '' for none)")
    ap.add_argument("--repeats", type=int, default=2, help="off/on subprocess pairs per size (default 2)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per timing subprocess")
    ap.add_argument("--out", type=str, default=None, help=f"JSON output (default {DEFAULT_OUT}; --quick: none)")
    args = ap.parse_args(argv)
    q = args.quick
    args.tables = args.tables or (2 if q else 5)
    args.keys = args.keys or (1 if q else 3)
    if q:
        args.no_timing = True
    out_path = args.out or (None if q else DEFAULT_OUT)

    import jax

    import jaxhc

    jax.config.update("jax_enable_x64", True)
    # this process measures quality only; the timing subprocesses leave the cache off
    jaxhc.enable_compilation_cache()
    info = machine()
    print(
        f"machine: {info['cpu']}, {info['cpu_count']} CPUs; jax {info['jax']} ({info['backend']}); "
        f"load {info['loadavg_start'][0]:.2f}",
        flush=True,
    )
    t_all = time.perf_counter()
    doc = {
        "benchmark": "bhcc_refine",
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": info,
        "config": {k: v for k, v in vars(args).items() if k != "out"},
        "targets": TARGETS,
        "method": __doc__,
    }
    checks = []
    if not args.no_quality:
        print("\nQuality: generated 60 x 36 binary tables", flush=True)
        doc["quality"] = qd = quality_study(args)
        print_quality(qd)
        m = qd["mean_view_ari"]
        checks.append(
            {
                "name": "BHCC + refinement mean view ARI",
                "value": round(m["bhcc_on"], 3),
                "target": ">= 0.9",
                "result": "met" if m["bhcc_on"] >= 0.9 else "missed",
            }
        )
        ok = set(qd["refined_at_least_truth_there"]) == set(qd["truth_beats_greedy"])
        checks.append(
            {
                "name": "refined criterion >= truth's where the truth beats the greedy tree",
                "value": f"{len(qd['refined_at_least_truth_there'])} of {len(qd['truth_beats_greedy'])}",
                "target": "all",
                "result": "met" if ok else "missed",
            }
        )
        checks.append(
            {
                "name": "RBHCC + refinement mean view ARI",
                "value": round(m["rbhcc_on"], 3),
                "target": ">= 0.85",
                "result": "met" if m["rbhcc_on"] >= 0.85 else "missed",
            }
        )
    if not args.no_timing:
        print("\nTiming (fresh subprocess per run; first call includes compilation)", flush=True)
        doc["timing"] = tm = timing_study(args)
        for e in tm:
            if e["algo"] == "bhcc" and e["cols"] == 200 and "second_ratio" in e:
                for kind in ("first", "second"):
                    v = e[f"{kind}_ratio"]
                    checks.append(
                        {
                            "name": f"BHCC 100 x 200 time with / without refinement ({kind} call)",
                            "value": round(v, 2),
                            "target": "<= 1.5",
                            "result": "met" if v <= 1.5 else "missed",
                        }
                    )
    doc["checks"] = checks
    doc["total_wall_s"] = time.perf_counter() - t_all
    doc["loadavg_end"] = list(os.getloadavg())
    if checks:
        print("\nTargets")
        for c in checks:
            print(f"  {c['name']}: {c['value']} (target {c['target']}) -> {c['result']}")
    print(f"\ntotal {doc['total_wall_s']:.0f} s", flush=True)
    if out_path:
        os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
        with open(out_path, "w") as f:
            json.dump(doc, f, indent=2)
        print(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
