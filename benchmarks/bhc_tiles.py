"""Greedy BHC's merge rows tile by tile against one batch (issue 18), in one process.

Usage::

    python benchmarks/bhc_tiles.py [--sizes 1000,2000,4000 --tiles 256,1000000 --rounds 3
                                    --family niw|bernoulli --out PATH]

Data: ``--family niw``: ``bhc.make_data(n, 10, 0)`` (4 Gaussian clusters, d = 10),
NIW.from_data; ``bernoulli``: 4 clusters of 50 binary columns with uniform random
probabilities, ``BetaBernoulli(1, 1)``. alpha = 1, float64. For each n, ``--rounds`` rounds; in each round every tile size in turn: JAX's
caches and the search's compile records are cleared, one call compiles, then two timed
calls (``jaxhc.bhc`` end to end). A tile size of at least n runs the rows in one batch
(the code before tiling). Printed and written: per tile size the timed calls, their min
and median, the log evidence (must agree), and the 1-minute load average. Interleaving the
variants in one process is the comparison that survives a shared machine's drifting speed.
JSON: benchmarks/results/bhc_tiles.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _harness import result_doc, write_json  # noqa: E402

DEFAULT_OUT = os.path.join(HERE, "results", "bhc_tiles.json")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,2000,4000")
    ap.add_argument("--tiles", default="256,1000000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--family", choices=("niw", "bernoulli"), default="niw")
    ap.add_argument("--out", default=None, help=f"JSON (default {DEFAULT_OUT}, _bernoulli for that family)")
    args = ap.parse_args(argv)

    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np
    from bhc import make_data

    import jaxhc
    from jaxhc.inference.bhc import greedy
    from jaxhc.inference.bhc import slots as slot_rows

    tiles = [int(t) for t in args.tiles.split(",")]
    rows = []
    print("| n | tile | timed calls s | min s | median s | log evidence | load |")
    print("|---:|---:|---|---:|---:|---:|---:|")
    for n in (int(s) for s in args.sizes.split(",")):
        if args.family == "niw":
            X, _ = make_data(n, 10, 0)
            comp = jaxhc.NormalInverseWishart.from_data(X)
        else:
            rng = np.random.default_rng(0)
            z = rng.integers(0, 4, n)
            X = (rng.random((n, 50)) < rng.random((4, 50))[z]).astype(float)
            comp = jaxhc.BetaBernoulli(1.0, 1.0)
        times = {t: [] for t in tiles}
        ev = {}
        for _ in range(args.rounds):
            for t in tiles:
                slot_rows.SLOT_TILE = t
                jax.clear_caches()
                greedy._COMPILED_SLOTS.clear()
                greedy._COMPILE_SECONDS.clear()
                for i in range(3):
                    t0 = time.perf_counter()
                    r = jaxhc.bhc(X, comp, 1.0, progress_bar=False)
                    jax.block_until_ready(r.log_evidence)
                    if i:
                        times[t].append(time.perf_counter() - t0)
                ev[t] = float(r.log_evidence)
        for t in tiles:
            v = times[t]
            row = dict(
                family=args.family,
                n=n,
                tile=t,
                one_batch=t >= n,
                timed_s=v,
                min_s=min(v),
                median_s=float(np.median(v)),
                log_evidence=ev[t],
                load=os.getloadavg()[0],
            )
            rows.append(row)
            print(
                f"| {n} | {'one batch' if t >= n else t} | {', '.join(f'{x:.2f}' for x in v)} | {min(v):.2f} | "
                f"{np.median(v):.2f} | {ev[t]:.6f} | {row['load']:.2f} |",
                flush=True,
            )
    out = args.out or (DEFAULT_OUT if args.family == "niw" else DEFAULT_OUT.replace(".json", "_bernoulli.json"))
    write_json(out, result_doc("bhc_tiles", __doc__, rows=rows))


if __name__ == "__main__":
    sys.exit(main())
