"""BHC cell predictives (issue 18 parts 4 and 5): one process, x64.

Usage::

    python benchmarks/bhc_predictive.py [--rows 100 --cols 200 --cells 2000 --out PATH]

Data: ``rows x cols``, 3 latent row groups with column probabilities drawn uniformly, 10% of
the entries missing (NaN): binary under ``BetaBernoulli.from_data(X)``, and counts of
``--trials`` (50: the cross-clustering fold's 51 values) under ``BetaBinomial.from_data``;
greedy BHC. ``jaxhc.bhc_predictive_cell`` on ``--cells`` random cells, every candidate value
of each: first call (compilation included) and a warm call. Beside it, in the same process,
the implementation before issue 18 (every query scored against every node over all columns;
kept in tests/test_bhc_predictive_cell.py) on ``--baseline-cells`` of the same cells (a
tenth of them for the counts), warm, and the largest difference of the values.
``bhcc_predictive_cell``: a 100 x 200 table of 8 views of 25 Binomial(50) columns
(``cross_cluster_table``), 10% missing, ``bhcc`` fitted, ``--cells`` of the missing cells
with all 51 values: first and warm call; every live column-tree node computed
(``CELL_PRUNE_NATS = inf``); and the baseline, in the same process, on ``--baseline-cells``
of the cells: Lemma A.7 composed from separately tested parts (per column-tree node on the
cell's path, the view's row BHC from ``BHCCResult.view_of`` and ``bhc_predictive_cell`` on
it). Targets: BHC 2000 cells at 100 x 200 <= 5 s; BHCC 2000 cells <= 10 s. The 1-minute load
average is recorded beside every figure (a shared 2-core machine). JSON:
benchmarks/results/bhc_predictive.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _harness import result_doc, write_json  # noqa: E402

DEFAULT_OUT = os.path.join(HERE, "results", "bhc_predictive.json")


def _bhcc_cell_reference(res, rows, cols, vals):
    """``log sum_k omega_k p(X_ij = v | view k)`` over every live column-tree node ``k`` on
    column ``j``'s path, each view's predictive from its own row BHC (`BHCCResult.view_of`)
    and BHC's cell predictive: the same formula built from separately tested parts."""
    import numpy as np

    import jaxhc

    lw = res.log_omega()
    sets = res.tree.leaf_sets()
    live = np.isfinite(lw) & ~np.isnan(res.log_h1)
    out = np.full(vals.shape, -np.inf)
    views = {}
    for q, (i, j) in enumerate(zip(rows, cols)):
        for k in np.flatnonzero(live & sets[:, j]):
            if k not in views:
                views[k] = res.view_of(np.flatnonzero(sets[k]))
            v = views[k]
            pos = int(np.searchsorted(v.columns, j))
            lp = jaxhc.bhc_predictive_cell(v.rows, [i], [pos], vals[q : q + 1])[0]
            out[q] = np.logaddexp(out[q], lw[k] + lp)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=100)
    ap.add_argument("--cols", type=int, default=200)
    ap.add_argument("--cells", type=int, default=2000)
    ap.add_argument("--baseline-cells", type=int, default=200)
    ap.add_argument("--trials", type=int, default=50, help="Beta-Binomial trials of the second setting")
    ap.add_argument("--no-bhcc", action="store_true", help="skip the bhcc_predictive_cell section")
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args(argv)

    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np

    import jaxhc

    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    from test_bhc_predictive_cell import _binary, _cell_reference

    load = lambda: round(os.getloadavg()[0], 2)
    rows_out = []
    for family, trials in (("BetaBernoulli", 1), ("BetaBinomial", args.trials)):
        rng = np.random.default_rng(1)
        if trials == 1:
            X = _binary(0, args.rows, args.cols)
            comp = jaxhc.BetaBernoulli.from_data(X)
        else:
            z = rng.integers(0, 3, args.rows)
            X = rng.binomial(trials, rng.random((3, args.cols))[z]).astype(float)
            X[rng.random(X.shape) < 0.1] = np.nan
            comp = jaxhc.BetaBinomial.from_data(X, trials)
        res = jaxhc.bhc(X, comp, progress_bar=False)
        Q = args.cells
        rows, cols = rng.integers(0, args.rows, Q), rng.integers(0, args.cols, Q)
        vals = np.tile(np.arange(trials + 1, dtype=float), (Q, 1))  # every candidate value
        times = []
        for _ in range(2):
            t0 = time.perf_counter()
            got = jaxhc.bhc_predictive_cell(res, rows, cols, vals)
            times.append(time.perf_counter() - t0)
        row = {"family": family, "rows": args.rows, "cols": args.cols, "cells": Q, "values_per_cell": trials + 1}
        row.update(first_call_s=times[0], warm_s=times[1], load=load())
        B = min(args.baseline_cells if trials == 1 else max(args.baseline_cells // 10, 1), Q)
        _cell_reference(res, rows[:B], cols[:B], vals[:B])  # compiles
        t0 = time.perf_counter()
        ref = _cell_reference(res, rows[:B], cols[:B], vals[:B])
        tb = time.perf_counter() - t0
        row.update(
            baseline_cells=B,
            baseline_warm_s=tb,
            baseline_per_cell_s=tb / B,
            speedup_per_cell_warm=(tb / B) / (times[1] / Q),
            max_abs_diff=float(np.max(np.abs(got[:B] - ref))),
            load_baseline=load(),
            target_s=5.0,
            target_met_incl_compile=times[0] <= 5.0,
        )
        print(json.dumps(row), flush=True)
        rows_out.append(row)
    bhcc_row = None
    if not args.no_bhcc:
        from jaxhc.datasets import cross_cluster_table
        from jaxhc.inference.bhcc import predictive as bhcc_predictive

        X, _, _ = cross_cluster_table(
            0, view_sizes=(25,) * 8, n_rows=args.rows, n_clusters=4, kind="binomial", trials=args.trials
        )
        X = X.astype(float)
        rng = np.random.default_rng(2)
        miss = rng.random(X.shape) < 0.1
        X[miss] = np.nan
        t0 = time.perf_counter()
        res = jaxhc.bhcc(X, jaxhc.BetaBinomial.from_data(X, args.trials), 1.0)
        fit_s = time.perf_counter() - t0
        mi, mj = np.nonzero(miss)
        pick = rng.choice(len(mi), min(args.cells, len(mi)), replace=False)
        rows, cols = mi[pick], mj[pick]
        vals = np.tile(np.arange(args.trials + 1, dtype=float), (len(rows), 1))
        times = []
        for _ in range(2):
            t0 = time.perf_counter()
            got = jaxhc.bhcc_predictive_cell(res, rows, cols, vals)
            times.append(time.perf_counter() - t0)
        load_new = load()
        prune = bhcc_predictive.CELL_PRUNE_NATS
        bhcc_predictive.CELL_PRUNE_NATS = float("inf")  # every live column-tree node
        try:
            t0 = time.perf_counter()
            full = jaxhc.bhcc_predictive_cell(res, rows, cols, vals)
            tf = time.perf_counter() - t0
        finally:
            bhcc_predictive.CELL_PRUNE_NATS = prune
        B = min(args.baseline_cells, len(rows))
        t0 = time.perf_counter()
        ref = _bhcc_cell_reference(res, rows[:B], cols[:B], vals[:B])
        tb = time.perf_counter() - t0
        bhcc_row = {
            "table": f"{args.rows} x 200, 8 views of 25 columns, Binomial({args.trials}), 10% missing",
            "fit_s": fit_s,
            "cells": len(rows),
            "values_per_cell": args.trials + 1,
            "first_call_s": times[0],
            "warm_s": times[1],
            "load": load_new,
            "all_nodes_s": tf,
            "max_abs_diff_all_nodes": float(np.max(np.abs(got - full))),
            "baseline": "Lemma A.7 composed from parts: per column-tree node on the cell's path, "
            "result.view_of(node's columns) (a row BHC) and jaxhc.bhc_predictive_cell on it",
            "baseline_cells": B,
            "baseline_s": tb,
            "speedup_per_cell": (tb / B) / (times[1] / len(rows)),
            "max_abs_diff_baseline": float(np.max(np.abs(got[:B] - ref))),
            "load_baseline": load(),
            "target_s": 10.0,
        }
        print(json.dumps(bhcc_row), flush=True)
    write_json(args.out, result_doc("bhc_predictive", __doc__, cell=rows_out, bhcc_cell=bhcc_row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
