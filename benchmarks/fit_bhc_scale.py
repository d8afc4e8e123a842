"""Where `jaxhc.fit_bhc` switches to a learning subset + randomized BHC (issue 59 part 4):
the cost of the exact path (greedy BHC with alpha and the prior learned, the CLI's default)
against n. Each size in a fresh process (peak RSS of that process, compilation included).

Usage::

    python benchmarks/fit_bhc_scale.py                       # n = 1000, 2000, 4000; d = 10
    python benchmarks/fit_bhc_scale.py --sizes 1000 --out /tmp/f.json

Data: 10 planted Gaussian clusters (means from N(0, 4^2 I), unit noise), d = 10; `fit_bhc(X)`
with the defaults but ``randomized_above`` past n (so the exact path runs): NIW against
Normal-Gamma, alpha and the prior learned. Also greedy `jaxhc.bhc` alone (fixed prior).
JSON: benchmarks/results/fit_bhc_scale.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _harness import result_doc, write_json  # noqa: E402

DEFAULT_OUT = os.path.join(HERE, "results", "fit_bhc_scale.json")


def make_data(n: int, d: int, seed: int, k: int = 10):
    import numpy as np

    rng = np.random.default_rng(seed)
    means = rng.normal(0.0, 4.0, size=(k, d))
    z = rng.integers(0, k, size=n)
    return means[z] + rng.normal(size=(n, d)), z


def one(n: int, d: int, what: str) -> dict:
    import jax

    jax.config.update("jax_enable_x64", True)
    import jaxhc

    from _memory import maxrss_mb

    X, _ = make_data(n, d, seed=n)
    t0 = time.perf_counter()
    if what == "fit_bhc":
        fit = jaxhc.fit_bhc(X, randomized_above=n)
        ev = fit.log_evidence
    else:
        ev = float(jaxhc.bhc(X, jaxhc.NormalInverseWishart.from_data(X), 1.0, progress_bar=False).log_evidence)
    return {
        "n": n,
        "d": d,
        "what": what,
        "seconds": time.perf_counter() - t0,
        "peak_rss_mb": maxrss_mb(),
        "log_evidence": ev,
        "load": round(os.getloadavg()[0], 2),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000,2000,4000")
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--one", nargs=2, metavar=("N", "WHAT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(int(args.one[0]), args.d, args.one[1])))
        return 0
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        for what in ("bhc", "fit_bhc"):
            out = subprocess.run(
                [sys.executable, __file__, "--one", str(n), what, "--d", str(args.d)],
                capture_output=True,
                text=True,
                check=True,
            )
            row = json.loads(out.stdout.strip().splitlines()[-1])
            print(json.dumps(row), flush=True)
            rows.append(row)
    write_json(args.out, result_doc("fit_bhc_scale", __doc__, rows=rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
