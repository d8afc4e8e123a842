"""Greedy BHC, this source tree against another (e.g. the previous commit in a git worktree),
each call in a fresh process, the two alternating (issue 18).

Usage::

    git worktree add /tmp/base HEAD~1
    python benchmarks/bhc_fresh_ab.py --baseline /tmp/base [--n 4000 --d 10 --pairs 3]

Data: ``bhc.make_data(n, d, seed=1000 d + n)`` (the data of ``benchmarks/bhc.py``),
NIW.from_data, alpha = 1, float64. Each process imports ``jaxhc`` from its tree
(``PYTHONPATH``), calls ``jaxhc.bhc`` three times and reports the first call (compilation
included) and the two warm calls. Nothing else runs in the process (``benchmarks/bhc.py``
samples memory from a thread during its timed calls). Alternating the trees, pair by pair,
is the comparison that survives a shared machine's drifting speed. JSON:
benchmarks/results/bhc_fresh_ab.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _harness import result_doc, write_json  # noqa: E402

DEFAULT_OUT = os.path.join(HERE, "results", "bhc_fresh_ab.json")

CHILD = """
import json, sys, time
import jax
jax.config.update("jax_enable_x64", True)
sys.path.insert(0, {bench!r})
from bhc import make_data
import jaxhc
n, d = {n}, {d}
X, _ = make_data(n, d, seed=1000 * d + n)
comp = jaxhc.NormalInverseWishart.from_data(X)
ts = []
for _ in range(3):
    t0 = time.perf_counter()
    r = jaxhc.bhc(X, comp, 1.0, progress_bar=False)
    jax.block_until_ready(r.log_evidence)
    ts.append(time.perf_counter() - t0)
print(json.dumps(dict(file=jaxhc.__file__, times=ts, log_evidence=float(r.log_evidence))))
"""


def run(tree: str, n: int, d: int) -> dict:
    env = dict(os.environ, PYTHONPATH=tree)
    code = CHILD.format(bench=HERE, n=n, d=d)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=tree)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    if not os.path.abspath(row["file"]).startswith(os.path.abspath(tree)):
        raise RuntimeError(f"{tree}: imported jaxhc from {row['file']}")
    row["load"] = os.getloadavg()[0]
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", required=True, help="the other source tree (a checkout of the package)")
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    this = os.path.dirname(HERE)
    rows = []
    print("| pair | tree | first call s | warm s | log evidence | load |")
    print("|---:|---|---:|---|---:|---:|")
    for p in range(args.pairs):
        for name, tree in (("baseline", args.baseline), ("this", this)):
            r = run(tree, args.n, args.d)
            r.update(pair=p, tree=name)
            rows.append(r)
            t = r["times"]
            print(
                f"| {p} | {name} | {t[0]:.2f} | {t[1]:.2f}, {t[2]:.2f} | {r['log_evidence']:.6f} | {r['load']:.2f} |",
                flush=True,
            )
    warm = {k: sorted(x for r in rows if r["tree"] == k for x in r["times"][1:]) for k in ("baseline", "this")}
    summary = {k: dict(median_warm_s=v[len(v) // 2], min_warm_s=v[0]) for k, v in warm.items()}
    print(json.dumps(summary))
    write_json(args.out, result_doc("bhc_fresh_ab", __doc__, n=args.n, d=args.d, rows=rows, summary=summary))


if __name__ == "__main__":
    sys.exit(main())
