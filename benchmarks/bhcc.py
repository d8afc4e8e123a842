"""Missing-value prediction, runtime and filtering levels of BHCC / RBHCC (the BHCC paper, Sec. 8).

Usage::

    python benchmarks/bhcc.py                  # default run (~20-25 min on 2 idle cores), writes JSON
    python benchmarks/bhcc.py --quick          # smoke test (small sizes, ~3 min), no JSON
    python benchmarks/bhcc.py --folds 10 --run-folds 10   # the paper's full 10-fold study (~3-4 h)
    python benchmarks/bhcc.py --no-runtime --no-levels --views 4 --out /tmp/bhcc.json

Three studies, all in this one process (float64, ``jax_enable_x64``):

* **prediction** (Fig. 2): ``jaxhc.datasets.cross_clustering_synthetic`` tables of
  ``--rows x --cols`` (100 x 200) Binomial(50) counts with 2, 3 and 4 views, four row
  clusters per view, ``theta ~ Beta(0.5, 0.5)``. The cells are randomly partitioned into
  ``--folds`` folds (10, as in the paper); each of the first ``--run-folds`` folds is held out
  once (set to NaN) and every held-out cell's predictive distribution over ``0..50`` is
  computed by each method, all with ``BetaBinomial(0.5, 0.5, 50)`` and ``alpha = 1``:
  BHC (``bhc`` + ``bhc_predictive_cell``), DPM Gibbs (``dpm_gibbs``, 50 warm-up + 10 samples
  thinned by 5, split-merge moves; ``dpm_predict_cells``), BHCC (``bhcc`` +
  ``bhcc_predictive_cell``), RBHCC (``rbhcc(levels=6)``), CDPM MCMC (``cdpm_mcmc``, same
  schedule, Metropolis-coupled with heat 0.8; ``cdpm_predict_cells``), and an *oracle*: the
  predictive given the true views and row clusters (``cdpm_predict_cells`` with the true
  labels as its one sample; the Beta posterior of each true cluster is still estimated).
  Scores per held-out cell: ``acc`` = the predictive mode equals the true count, ``acc+-2``
  = the mode is within 2 of it, ``log p`` = log predictive of the true count (mean).
  ``fit s`` = wall time of the fit, ``pred s`` = of the predictions (first calls include
  compilation; the data sets share shapes, so later data sets run compiled programs).
* **runtime** (Fig. 4): 100 rows, 4 views, complete data; ``bhcc`` for ``--bhcc-cols``
  (40..200) and ``rbhcc(levels=6)`` for ``--rbhcc-cols`` (40..2000), two calls per size
  (first call = compile of any new padded shape + run, second call = run); log-log slope of
  the second-call time against the number of columns (least squares over all sizes).
* **levels** (Fig. 5): RBHCC accuracy against the number of filtering levels ``L`` on one
  fold of one table (default 100 x 200 with 8 views; ``subset_size=16, threshold=32`` so
  that the recursion is deep enough for ``L`` to matter at 200 columns).

The targets (from the issue) are checked at the end: BHCC on 100 x 200 <= 60 s and RBHCC on
100 x 2000 <= 60 s on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import ints, machine  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "bhcc.json")
TRIALS = 50
TARGETS = {"bhcc_100x200_s": 60.0, "rbhcc_100x2000_s": 60.0}
METHODS = ("oracle", "BHC", "DPM Gibbs", "BHCC", "RBHCC", "CDPM MCMC")


# ------------------------------------------------------------------------------------------
# predictions
# ------------------------------------------------------------------------------------------
def _chunks(n, size):
    for s in range(0, n, size):
        yield slice(s, min(s + size, n))


def sampled_cells(fn, rows, cols, K, chunk=20000):
    """``[Q, K]`` log predictive of every value ``0..K-1`` of each cell, from a predictor
    ``fn(rows, cols, values)`` that scores one value per query (``*_predict_cells``)."""
    R, C = np.repeat(rows, K), np.repeat(cols, K)
    V = np.tile(np.arange(K, dtype=float), len(rows))
    out = np.concatenate([np.asarray(fn(R[s], C[s], V[s])) for s in _chunks(len(R), chunk)])
    return out.reshape(len(rows), K)


def bhc_cells(res, rows, cols, K):
    """``jaxhc.bhc_predictive_cell`` column by column.

    The library call evaluates each query against the full ``d``-column node statistics
    (``O(Q K n d)`` work; ~0.25 s per cell at 100 x 200 with 51 values), although only the
    query's column matters; restricting the node statistics to one column at a time gives
    the same numbers (checked to 1e-11) ~100x faster. Queries are padded to one size per
    column so the kernel compiles once."""
    import jaxhc
    from jaxhc.components import CountStats

    st = res.node_stats
    if not isinstance(st, CountStats):  # not a Beta family: use the library call directly
        return jaxhc.bhc_predictive_cell(res, rows, cols, np.tile(np.arange(K, dtype=float), (len(rows), 1)))
    out = np.empty((len(rows), K))
    per = np.bincount(cols)
    P = int(max(8, 8 * math.ceil(per.max() / 8)))
    vals = np.tile(np.arange(K, dtype=float), (P, 1))
    zero = np.zeros(P, np.int64)
    for j in np.unique(cols):
        sel = np.flatnonzero(cols == j)
        r = np.zeros(P, np.int64)
        r[: len(sel)] = rows[sel]
        s1 = CountStats(st.n[:, j : j + 1], st.succ[:, j : j + 1], st.fail[:, j : j + 1], st.logc * 0)
        lp = jaxhc.bhc_predictive_cell(res._replace(node_stats=s1), r, zero, vals)
        out[sel] = lp[: len(sel)]
    return out


def score(lp, truth):
    """acc (mode == truth), acc within +-2, mean log p(truth), total probability check."""
    mode = np.argmax(lp, axis=1)
    t = truth.astype(int)
    return {
        "acc": float(np.mean(mode == t)),
        "acc_pm2": float(np.mean(np.abs(mode - t) <= 2)),
        "log_p": float(np.mean(lp[np.arange(len(t)), t])),
        "max_abs_log_total": float(np.max(np.abs(np.logaddexp.reduce(lp, axis=1)))),
    }


def run_fold(Xtr, rows, cols, truth, views_true, rows_true, methods, seed, levels, mcmc, log=print):
    """Fits every method on ``Xtr`` (held-out cells NaN) and scores the held-out cells."""
    import jax

    import jaxhc
    from jaxhc.inference import gibbs

    comp = jaxhc.BetaBinomial(0.5, 0.5, TRIALS)
    K = TRIALS + 1
    vals = np.tile(np.arange(K, dtype=float), (len(rows), 1))
    warm, ns, thin = mcmc
    out = {}
    for m in methods:
        t0 = time.perf_counter()
        extra = {}
        if m == "oracle":
            U = np.asarray(views_true)[None]
            Z = np.asarray(rows_true)[None]
            fit = time.perf_counter()
            lp = sampled_cells(lambda r, c, v: gibbs.cdpm_predict_cells(Xtr, comp, U, Z, r, c, v), rows, cols, K)
        elif m == "BHC":
            res = jaxhc.bhc(Xtr, comp, 1.0, progress_bar=False)
            jax.block_until_ready(res.log_evidence)
            fit = time.perf_counter()
            lp = bhc_cells(res, rows, cols, K)
            extra = {"n_clusters": int(res.n_clusters(0.5)), "dpm_lower_bound": float(res.dpm_lower_bound)}
        elif m == "DPM Gibbs":
            s = gibbs.dpm_gibbs(
                jax.random.key(seed), Xtr, comp, 1.0, num_samples=ns, num_warmup=warm, thin=thin, progress_bar=False
            )
            lab = jax.block_until_ready(s.labels)
            fit = time.perf_counter()
            lp = sampled_cells(lambda r, c, v: gibbs.dpm_predict_cells(Xtr, comp, lab, r, c, v), rows, cols, K)
            extra = {"mean_clusters": float(np.mean([len(np.unique(l)) for l in np.asarray(lab)]))}
        elif m in ("BHCC", "RBHCC"):
            if m == "BHCC":
                res = jaxhc.bhcc(Xtr, comp, 1.0, progress_bar=False)
            else:
                res = jaxhc.rbhcc(jax.random.key(seed), Xtr, comp, 1.0, levels=levels, progress_bar=False)
            fit = time.perf_counter()
            lp = jaxhc.bhcc_predictive_cell(res, rows, cols, vals)
            extra = {
                "n_views": len(res.views),
                "cdpm_lower_bound": float(res.cdpm_lower_bound),
                "view_ari": float(_ari(views_true, res.cut(0.5))),
            }
        elif m == "CDPM MCMC":
            s = gibbs.cdpm_mcmc(
                jax.random.key(seed),
                Xtr,
                comp,
                1.0,
                num_samples=ns,
                num_warmup=warm,
                thin=thin,
                heat=0.8,
                progress_bar=False,
            )
            U, Z = jax.block_until_ready((s.column_views, s.row_labels))
            fit = time.perf_counter()
            lp = sampled_cells(lambda r, c, v: gibbs.cdpm_predict_cells(Xtr, comp, U, Z, r, c, v), rows, cols, K)
            extra = {
                "mean_views": float(np.mean([len(np.unique(u)) for u in np.asarray(U)])),
                "view_ari_last": float(_ari(views_true, np.asarray(U)[-1])),
            }
        else:
            raise ValueError(m)
        end = time.perf_counter()
        out[m] = dict(score(np.asarray(lp), truth), fit_s=fit - t0, predict_s=end - fit, **extra)
        r = out[m]
        log(
            f"    {m:<10} acc {r['acc']:.3f}  acc+-2 {r['acc_pm2']:.3f}  log p {r['log_p']:8.3f}  "
            f"fit {r['fit_s']:6.1f} s  pred {r['predict_s']:5.1f} s",
            flush=True,
        )
    return out


def _ari(a, b):
    from jaxhc import metrics

    return metrics.adjusted_rand_index(np.asarray(a), np.asarray(b))


def folds_of(I, J, n_folds, seed):
    perm = np.random.default_rng(seed).permutation(I * J)
    return [np.sort(perm[f::n_folds]) for f in range(n_folds)]


def prediction_study(args, log=print):
    import jaxhc

    results = []
    for V in args.views:
        X, cv, rl = jaxhc.datasets.cross_clustering_synthetic(
            100 + V, n_rows=args.rows, n_cols=args.cols, n_views=V, n_clusters=4, trials=TRIALS
        )
        I, J = X.shape
        folds = folds_of(I, J, args.folds, seed=V)
        per_fold = []
        for f in range(args.run_folds):
            idx = folds[f]
            rows, cols = np.divmod(idx, J)
            Xtr = X.copy()
            Xtr[rows, cols] = np.nan
            log(f"  {V} views, {I} x {J}, fold {f + 1}/{args.folds} ({len(idx)} held-out cells)", flush=True)
            per_fold.append(
                run_fold(
                    Xtr,
                    rows,
                    cols,
                    X[rows, cols],
                    cv,
                    rl,
                    args.methods,
                    seed=1000 * V + f,
                    levels=args.levels,
                    mcmc=args.mcmc,
                    log=log,
                )
            )
        summary = {}
        for m in args.methods:
            rs = [pf[m] for pf in per_fold]
            summary[m] = {k: float(np.mean([r[k] for r in rs])) for k in rs[0]}
            summary[m]["acc_se"] = (
                float(np.std([r["acc"] for r in rs], ddof=1) / np.sqrt(len(rs))) if len(rs) > 1 else None
            )
        results.append(
            {
                "n_views": V,
                "rows": I,
                "cols": J,
                "folds": args.folds,
                "folds_run": args.run_folds,
                "view_sizes": np.bincount(cv).tolist(),
                "per_fold": per_fold,
                "mean": summary,
            }
        )
    return results


# ------------------------------------------------------------------------------------------
# runtime
# ------------------------------------------------------------------------------------------
def _timed(fn):
    t = time.perf_counter()
    r = fn()
    return r, time.perf_counter() - t


def runtime_study(args, log=print):
    import jax

    import jaxhc

    comp = jaxhc.BetaBinomial(0.5, 0.5, TRIALS)
    out = {}
    for name, sizes in (("BHCC", args.bhcc_cols), ("RBHCC", args.rbhcc_cols)):
        rows = []
        for J in sizes:
            X, cv, _ = jaxhc.datasets.cross_clustering_synthetic(7 + J, n_rows=args.rows, n_cols=J, n_views=4)
            if name == "BHCC":
                call = lambda: jaxhc.bhcc(X, comp, 1.0, progress_bar=False)
            else:
                call = lambda: jaxhc.rbhcc(jax.random.key(0), X, comp, 1.0, levels=args.levels, progress_bar=False)
            c0 = time.process_time()
            res, t1 = _timed(call)
            cpu1 = time.process_time() - c0
            row = {
                "cols": J,
                "first_s": t1,
                "first_cpu_s": cpu1,
                "n_views": len(res.views),
                "view_ari": float(_ari(cv, res.cut(0.5))),
                "cdpm_lower_bound": float(res.cdpm_lower_bound),
                "loadavg_1min": os.getloadavg()[0],
            }
            if args.second_calls:
                _, t2 = _timed(call)
                row["second_s"] = t2
                row["compile_s_est"] = max(t1 - t2, 0.0)
            rows.append(row)
            log(
                f"  {name:<5} 100 x {J:<5} first {t1:7.1f} s"
                + (f"  second {row['second_s']:7.1f} s" if "second_s" in row else "")
                + f"  views {row['n_views']}  view ARI {row['view_ari']:.3f}",
                flush=True,
            )
        # slope of the compiled (second) calls; of the first calls with --no-second-calls
        use = rows
        tt = [r.get("second_s", r["first_s"]) for r in use]
        slope = float(np.polyfit(np.log([r["cols"] for r in use]), np.log(tt), 1)[0]) if len(use) >= 2 else None
        out[name] = {"rows": rows, "loglog_slope": slope, "slope_sizes": [r["cols"] for r in use]}
        log(
            f"  {name} log-log slope of time vs columns ({[r['cols'] for r in use]}): {slope if slope is None else round(slope, 2)}"
        )
    return out


# ------------------------------------------------------------------------------------------
# filtering levels
# ------------------------------------------------------------------------------------------
def levels_study(args, log=print):
    import jax

    import jaxhc

    comp = jaxhc.BetaBinomial(0.5, 0.5, TRIALS)
    X, cv, rl = jaxhc.datasets.cross_clustering_synthetic(
        55, n_rows=args.rows, n_cols=args.levels_cols, n_views=args.levels_views, n_clusters=4, trials=TRIALS
    )
    I, J = X.shape
    idx = folds_of(I, J, args.folds, seed=55)[0]
    rows, cols = np.divmod(idx, J)
    Xtr = X.copy()
    Xtr[rows, cols] = np.nan
    vals = np.tile(np.arange(TRIALS + 1, dtype=float), (len(rows), 1))
    out = []
    for L in args.level_list:
        t0 = time.perf_counter()
        res = jaxhc.rbhcc(
            jax.random.key(0),
            Xtr,
            comp,
            1.0,
            subset_size=args.levels_subset,
            threshold=2 * args.levels_subset,
            levels=L,
            progress_bar=False,
        )
        t1 = time.perf_counter()
        lp = jaxhc.bhcc_predictive_cell(res, rows, cols, vals)
        r = dict(
            score(lp, X[rows, cols]),
            levels=L,
            fit_s=t1 - t0,
            predict_s=time.perf_counter() - t1,
            n_views=len(res.views),
            view_ari=float(_ari(cv, res.cut(0.5))),
            cdpm_lower_bound=float(res.cdpm_lower_bound),
        )
        out.append(r)
        log(
            f"  L={L}: acc {r['acc']:.3f}  acc+-2 {r['acc_pm2']:.3f}  log p {r['log_p']:.3f}  views {r['n_views']}  "
            f"view ARI {r['view_ari']:.3f}  bound {r['cdpm_lower_bound']:.1f}  fit {r['fit_s']:.1f} s",
            flush=True,
        )
    return {
        "rows": I,
        "cols": J,
        "n_views": args.levels_views,
        "subset_size": args.levels_subset,
        "threshold": 2 * args.levels_subset,
        "held_out_cells": len(idx),
        "results": out,
    }


# ------------------------------------------------------------------------------------------
# driver
# ------------------------------------------------------------------------------------------
def print_prediction_table(pred):
    print("\nMissing-value prediction (mean over folds run): acc / acc+-2 / mean log p / fit s")
    hdr = f"{'method':<10}" + "".join(f" | {str(d['n_views']) + ' views':^30}" for d in pred)
    print(hdr)
    print("-" * len(hdr))
    for m in pred[0]["mean"]:
        line = f"{m:<10}"
        for d in pred:
            r = d["mean"][m]
            line += f" | {r['acc']:.3f} {r['acc_pm2']:.3f} {r['log_p']:7.3f} {r['fit_s']:6.1f}"
        print(line)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes for smoke testing (no JSON)")
    ap.add_argument("--rows", type=int, default=None, help="rows of every table (default 100; 40 quick)")
    ap.add_argument("--cols", type=int, default=None, help="columns of the prediction tables (default 200; 60 quick)")
    ap.add_argument("--views", type=ints, default=None, help="views of the prediction tables (default 2,3,4)")
    ap.add_argument("--folds", type=int, default=10, help="folds the cells are partitioned into (default 10)")
    ap.add_argument(
        "--run-folds",
        type=int,
        default=None,
        help="how many of the folds are held out and predicted (default 1; --folds N --run-folds N "
        "is the paper's full cross-validation)",
    )
    ap.add_argument(
        "--methods",
        type=lambda v: v.split(","),
        default=list(METHODS),
        help=f"comma-separated subset of {','.join(METHODS)}",
    )
    ap.add_argument(
        "--levels", type=int, default=6, help="RBHCC filtering levels in the prediction and runtime studies"
    )
    ap.add_argument("--mcmc", type=ints, default=None, help="warmup,samples,thin of both samplers (default 50,10,5)")
    ap.add_argument("--bhcc-cols", type=ints, default=None, help="BHCC runtime sizes (default 40,80,120,160,200)")
    ap.add_argument(
        "--rbhcc-cols", type=ints, default=None, help="RBHCC runtime sizes (default 40,100,200,500,1000,2000)"
    )
    ap.add_argument(
        "--no-second-calls",
        dest="second_calls",
        action="store_false",
        help="skip the second (compiled) call at each runtime size",
    )
    ap.add_argument("--level-list", type=ints, default=None, help="levels of the levels study (default 2..8)")
    ap.add_argument("--levels-cols", type=int, default=None, help="columns of the levels table (default 200)")
    ap.add_argument("--levels-views", type=int, default=8, help="views of the levels table (default 8)")
    ap.add_argument(
        "--levels-subset",
        type=int,
        default=16,
        help="RBHCC subset_size in the levels study (threshold = 2 x this; default 16)",
    )
    ap.add_argument("--no-prediction", action="store_true")
    ap.add_argument("--no-runtime", action="store_true")
    ap.add_argument("--no-levels", action="store_true")
    ap.add_argument("--out", type=str, default=None, help=f"JSON output (default {DEFAULT_OUT}; --quick: none)")
    args = ap.parse_args(argv)

    q = args.quick
    args.rows = args.rows or (40 if q else 100)
    args.cols = args.cols or (60 if q else 200)
    args.views = args.views or ([2, 4] if q else [2, 3, 4])
    args.run_folds = args.run_folds or 1
    if not 1 <= args.run_folds <= args.folds:
        ap.error("--run-folds must be in [1, --folds]")
    args.mcmc = tuple(args.mcmc or ([10, 4, 2] if q else [50, 10, 5]))
    args.bhcc_cols = args.bhcc_cols or ([20, 40, 60] if q else [40, 80, 120, 160, 200])
    args.rbhcc_cols = args.rbhcc_cols or ([40, 100, 200] if q else [40, 100, 200, 500, 1000, 2000])
    args.level_list = args.level_list or ([2, 4] if q else list(range(2, 9)))
    args.levels_cols = args.levels_cols or (80 if q else 200)
    bad = set(args.methods) - set(METHODS)
    if bad:
        ap.error(f"unknown methods {sorted(bad)}")
    out_path = args.out or (None if q else DEFAULT_OUT)

    import jax

    jax.config.update("jax_enable_x64", True)
    info = machine()
    print(
        f"machine: {info['cpu']}, {info['cpu_count']} CPUs; jax {info['jax']} ({info['backend']}); "
        f"load {info['loadavg_start'][0]:.2f}",
        flush=True,
    )
    t_all = time.perf_counter()
    doc = {
        "benchmark": "bhcc",
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": info,
        "config": {k: v for k, v in vars(args).items() if k != "out"},
        "targets": TARGETS,
        "method": __doc__,
    }
    if not args.no_prediction:
        print("\nPrediction study (Fig. 2)", flush=True)
        doc["prediction"] = prediction_study(args)
        print_prediction_table(doc["prediction"])
    if not args.no_runtime:
        print("\nRuntime study (Fig. 4)", flush=True)
        doc["runtime"] = runtime_study(args)
    if not args.no_levels:
        print("\nFiltering levels (Fig. 5)", flush=True)
        doc["levels"] = levels_study(args)

    checks = []
    rt = doc.get("runtime", {})
    for name, J, key in (("BHCC", 200, "bhcc_100x200_s"), ("RBHCC", 2000, "rbhcc_100x2000_s")):
        row = next((r for r in rt.get(name, {}).get("rows", []) if r["cols"] == J), None)
        if row is not None and args.rows == 100:
            for kind in ("first_s", "second_s"):
                if kind in row:
                    v = row[kind]
                    checks.append(
                        {
                            "name": f"{name} 100 x {J} {kind.split('_')[0]} call (s)",
                            "value": round(v, 1),
                            "target": f"<= {TARGETS[key]}",
                            "result": "met" if v <= TARGETS[key] else "missed",
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
