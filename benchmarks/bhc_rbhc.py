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
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args(argv)

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
