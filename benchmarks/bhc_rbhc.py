"""Randomized BHC at scale (issue 18 parts 3 and 5): one fresh process, x64.

Usage::

    python benchmarks/bhc_rbhc.py                    # n = 20000 and 100000, greedy check at 4000
    python benchmarks/bhc_rbhc.py --sizes 20000 --no-greedy --out /tmp/r.json

Data as benchmarks/bhc.py (``make_data(n, 10, seed=1000 * d + n)``: 4 unit Gaussians, means
from N(0, 4^2 I)), ``NormalInverseWishart.from_data(X)``, ``alpha = 1``, ``PRNGKey(0)``,
``jaxhc.rbhc`` defaults. The first size is timed twice (first call = compilation included,
then warm); later sizes once (programs already compiled: nothing in rbhc compiles per n).
Beside each: scipy average linkage in the same process, on the full data when its condensed
distance matrix fits in ``--scipy-max-gb`` (else on the first ``--scipy-subsample`` rows,
flagged). Greedy BHC at n = 4000 on the same data gives the evidence check (log evidence per
point, target: RBHC within 0.01 nats). The 1-minute load average is recorded beside every
figure (a shared 2-core machine). JSON: benchmarks/results/bhc_rbhc.json.

``--million`` (issue 59, part 2) instead: 10 planted Gaussian clusters (means from
N(0, 4^2 I), unit noise), ``--dims`` (default 10,50), ``--n`` points (default 10^6), each
run in a fresh process: ``jaxhc.rbhc`` with the defaults and ``PRNGKey(0)``, with its tqdm
bar over the points placed (``--no-progress`` turns it off); wall time (compilation
included), peak RSS (a 50 ms sampler thread and ``getrusage``), the ARI of ``cut(0.5)``
against the planted labels. ``--dask-workers W`` also runs it on a ``LocalCluster`` of W
worker processes (1 thread each) and reports the speed-up and whether the tree is the same.
JSON: benchmarks/results/bhc_rbhc_million.json::

    nice -n 10 python benchmarks/bhc_rbhc.py --million --dims 10
    python benchmarks/bhc_rbhc.py --million --n 100000 --dims 10,50 --dask-workers 2

Memory model of ``rbhc`` (NIW, d features; S = 8 (1 + d + d^2) bytes, one node's statistics:
count, mean, scatter). Per point: the data 8d; every node's statistics in one host buffer,
``2n - 1`` nodes: 2S; the result's device copy of it (``BHCResult.node_stats``): 2S; the
per-node terms on the host and in the result (log r, log d, log p(D|T), log p(D|H1),
log(1 - r), counts, children): ~200 B. So ``4S + 8d + 200`` bytes per point plus the JAX
runtime (~0.4 GB): d = 10: S = 888 B, 3.8 KB per point, 3.8 GB at 10^6; d = 50: S = 20.4 KB,
82 KB per point, 8 GB at 10^5 and 82 GB at 10^6 (a d = 50 million-point run needs a
machine of ~100 GB, or statistics not kept per node). The recursion's own working set (one
level's subset tree and a 1024-row chunk of scores) is independent of n.
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

DEFAULT_OUT = os.path.join(HERE, "results", "bhc_rbhc.json")
MILLION_OUT = os.path.join(HERE, "results", "bhc_rbhc_million.json")
MILLION_TARGETS = {"n1e6_d10_minutes": 20.0, "n1e6_d10_peak_gb": 6.0, "n1e6_d10_ari": 0.99}


def planted(n: int, d: int, seed: int = 0, k: int = 10):
    """``k`` planted Gaussian clusters: means from N(0, 4^2 I), unit noise."""
    import numpy as np

    rng = np.random.default_rng(seed)
    means = rng.normal(0.0, 4.0, size=(k, d))
    z = rng.integers(0, k, size=n)
    X = means[z]
    X += rng.normal(size=(n, d))
    return X, z


def million_one(n: int, d: int, progress: bool, workers: int) -> dict:
    """One run in this (fresh) process: time, peak RSS, ARI (and the tree's children)."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np
    from sklearn.metrics import adjusted_rand_score

    import jaxhc

    from _memory import RssSampler, maxrss_mb

    X, z = planted(n, d, seed=d)
    comp = jaxhc.NormalInverseWishart.from_data(X)
    key = jax.random.PRNGKey(0)
    row = {"n": n, "d": d, "workers": workers, "load_before": _load()}
    with RssSampler(0.05) as rss:
        t0 = time.perf_counter()
        if workers:
            from distributed import Client, LocalCluster

            with (
                LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cl,
                Client(cl) as client,
            ):
                t1 = time.perf_counter()
                res = jaxhc.rbhc(key, X, comp, 1.0, progress_bar=progress, client=client)
                row["cluster_start_s"] = t1 - t0
        else:
            res = jaxhc.rbhc(key, X, comp, 1.0, progress_bar=progress)
        ev = float(jax.block_until_ready(res.log_evidence))
        row["seconds"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        labels = np.asarray(res.cut(0.5))
        row["cut_s"] = time.perf_counter() - t0
    row.update(
        log_evidence_per_point=ev / n,
        clusters=int(labels.max()) + 1,
        ari=float(adjusted_rand_score(z, labels)),
        peak_rss_gb=max(rss.peak, maxrss_mb()) / 1024.0,
        load_after=_load(),
    )
    np.save(os.environ["RBHC_MILLION_CHILDREN"], np.asarray(res.tree.children))
    return row


def million(args) -> int:
    import subprocess
    import tempfile

    import numpy as np

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for d in (int(s) for s in args.dims.split(",")):
            trees = {}
            for workers in [0] + ([args.dask_workers] if args.dask_workers else []):
                path = os.path.join(tmp, f"children_{d}_{workers}.npy")
                cmd = [sys.executable, __file__, "--million-one", str(args.n), str(d), str(workers)]
                cmd += ["--no-progress"] if args.no_progress else []
                out = subprocess.run(
                    cmd, stdout=subprocess.PIPE, text=True, env={**os.environ, "RBHC_MILLION_CHILDREN": path}
                )
                if out.returncode != 0:
                    row = {"n": args.n, "d": d, "workers": workers, "error": f"exit {out.returncode}"}
                else:
                    row = json.loads(out.stdout.strip().splitlines()[-1])
                    trees[workers] = np.load(path)
                if workers and 0 in trees and workers in trees:
                    base = next(r for r in rows if r["d"] == d and r["workers"] == 0)
                    row["speedup"] = base["seconds"] / row["seconds"]
                    row["same_tree"] = bool(np.array_equal(trees[0], trees[workers]))
                print(json.dumps(row), flush=True)
                rows.append(row)
    write_json(args.out or MILLION_OUT, result_doc("bhc_rbhc --million", __doc__, targets=MILLION_TARGETS, runs=rows))
    return 0


TARGETS = {"n20000_first_call_s": 30.0, "n100000_s": 300.0, "evidence_gap_per_point": 0.01}


def make_data(n: int, d: int, seed: int, k: int = 4):
    import numpy as np

    rng = np.random.default_rng(seed)
    means = rng.normal(0.0, 4.0, size=(k, d))
    z = rng.integers(0, k, size=n)
    return means[z] + rng.normal(size=(n, d)), z


def _load():
    return round(os.getloadavg()[0], 2)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="20000,100000")
    ap.add_argument("--greedy-n", type=int, default=4000)
    ap.add_argument("--no-greedy", action="store_true")
    ap.add_argument("--scipy-max-gb", type=float, default=4.0)
    ap.add_argument("--scipy-subsample", type=int, default=20000)
    ap.add_argument("--out", default=None)
    ap.add_argument("--million", action="store_true", help="the issue-59 run: 10 planted clusters, n = --n")
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--dims", default="10,50")
    ap.add_argument("--dask-workers", type=int, default=0)
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--million-one", nargs=3, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.million_one:
        n, d, workers = args.million_one
        print(json.dumps(million_one(n, d, not args.no_progress, workers)), flush=True)
        return 0
    if args.million:
        return million(args)
    args.out = args.out or DEFAULT_OUT

    import jax

    jax.config.update("jax_enable_x64", True)
    from scipy.cluster.hierarchy import linkage

    import jaxhc

    d = 10
    key = jax.random.PRNGKey(0)
    rows = []

    def scipy_time(X):
        n = X.shape[0]
        full = n * (n - 1) / 2 * 8 / 1e9 <= args.scipy_max_gb
        Xs = X if full else X[: args.scipy_subsample]
        t0 = time.perf_counter()
        linkage(Xs, "average")
        return time.perf_counter() - t0, Xs.shape[0], full

    for i, n in enumerate(int(s) for s in args.sizes.split(",")):
        X, _ = make_data(n, d, seed=1000 * d + n)
        comp = jaxhc.NormalInverseWishart.from_data(X)
        row = {"n": n, "d": d, "load_before": _load()}
        times = []
        for _ in range(2 if i == 0 else 1):
            t0 = time.perf_counter()
            res = jaxhc.rbhc(key, X, comp, 1.0, progress_bar=False)
            ev = float(jax.block_until_ready(res.log_evidence))
            times.append(time.perf_counter() - t0)
            del res
        row.update(
            first_call_s=times[0] if i == 0 else None,
            warm_s=times[-1] if len(times) > 1 or i > 0 else None,
            log_evidence=ev,
            log_evidence_per_point=ev / n,
            load_after=_load(),
        )
        st, sn, full = scipy_time(X)
        row.update(scipy_average_s=st, scipy_n=sn, scipy_full_n=full, load_scipy=_load())
        print(json.dumps(row), flush=True)
        rows.append(row)

    greedy = None
    if not args.no_greedy:
        m = args.greedy_n
        X, _ = make_data(m, d, seed=1000 * d + m)
        comp = jaxhc.NormalInverseWishart.from_data(X)
        t0 = time.perf_counter()
        r = jaxhc.rbhc(key, X, comp, 1.0, progress_bar=False)
        rt = time.perf_counter() - t0
        t0 = time.perf_counter()
        b = jaxhc.bhc(X, comp, 1.0, progress_bar=False)
        bt = time.perf_counter() - t0
        greedy = {
            "n": m,
            "rbhc_log_evidence_per_point": float(r.log_evidence) / m,
            "bhc_log_evidence_per_point": float(b.log_evidence) / m,
            "gap_per_point": (float(r.log_evidence) - float(b.log_evidence)) / m,
            "rbhc_s": rt,
            "bhc_s_incl_compile": bt,
            "load": _load(),
        }
        print(json.dumps(greedy), flush=True)

    write_json(args.out, result_doc("bhc_rbhc", __doc__, targets=TARGETS, rbhc=rows, greedy_check=greedy))
    return 0


if __name__ == "__main__":
    sys.exit(main())
