"""Single-jet latency of the exact trellis (issue 43, part 3): a warm `trellis.solve` of one
9-leaf Ginkgo jet, the host work around its compiled program, and a fresh process with a warm
persistent compilation cache solving its first jet.

Usage::

    python benchmarks/trellis_latency.py                        # this checkout
    python benchmarks/trellis_latency.py --before /tmp/jaxhc_head   # and an older source tree
    python benchmarks/trellis_latency.py --quick                # fewer calls, no JSON

(an older tree: ``git archive <commit> jaxhc | tar -x -C /tmp/jaxhc_head``).

Method (recorded in the JSON under ``"method"``):

* problem: the 9-leaf Ginkgo-like jet of `benchmarks/trellis.py` (``ginkgo_like_jet``, seed
  9), ``GinkgoEnergy(2.5, 16.0, likelihood="exact")`` (and ``"paper"`` for the NumPy
  reference's likelihood), float64.
* warm, per source tree, in a worker subprocess: ``solve`` (log Z, MAP tree, marginals; its
  ``log_z`` blocked on), ``solve(..., marginals=False)``, ``float(log_partition)``, and the
  size-class program alone (``classes._class_core`` on arguments built once, blocked on):
  ``host = solve - kernel`` is the work around the program. Each figure is the median of
  ``--calls`` calls after 20 warm-up calls; the workers of the source trees alternate for
  ``--rounds`` rounds and the table gives the median over rounds (the box's speed drifts).
* baseline, in the same worker: the pure-Python memoised recursion over subsets of
  `benchmarks/trellis.py` (``reference_trellis``, log Z + MAP, paper likelihood), the
  same jet; its log Z is checked against ``solve``'s.
* fresh: a new Python process (``import jax``, x64 on, ``import jaxhc``,
  ``jaxhc.enable_compilation_cache(<folder>)``, one ``solve``), run once to fill the
  folder, then ``--fresh`` times: wall and CPU (user + sys) time of the whole process from
  ``os.wait4``, and inside it the import and first-solve times.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent

FRESH_SCRIPT = r"""
import time
t0 = time.perf_counter()
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
import jaxhc
from jaxhc import trellis
t1 = time.perf_counter()
jaxhc.enable_compilation_cache({cache!r})
leaves = np.asarray({leaves!r})
sol = trellis.solve(trellis.GinkgoEnergy(2.5, 16.0, likelihood="exact"), leaves)
lz = float(sol.log_z)
t2 = time.perf_counter()
assert jaxhc.__file__.startswith({src!r}), (jaxhc.__file__, {src!r})  # the tree under test
print("RESULT", t1 - t0, t2 - t1, lz)
"""


def _jet(n=9):
    sys.path.insert(0, str(HERE))
    import numpy as np
    from trellis import ginkgo_like_jet

    return ginkgo_like_jet(np.random.default_rng(9), n)


def worker(args) -> dict:
    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np

    from jaxhc import trellis
    from jaxhc.trellis import classes

    sys.path.insert(0, str(HERE))
    from trellis import reference_trellis

    from _harness import median_time

    jet = _jet(args.n)
    out = {"src": str(pathlib.Path(trellis.__file__).parents[2])}

    def med(fn, calls):
        return median_time(fn, calls, warmup=20)

    for lk in ("exact", "paper"):
        e = trellis.GinkgoEnergy(2.5, 16.0, likelihood=lk)
        bound = classes.size_class(args.n)
        kargs = classes._class_args(e, np.asarray(jet), args.n, bound)
        kern = lambda m: jax.block_until_ready(classes._class_core(*kargs, bound=bound, with_map=True, marginals=m))
        r = {
            "solve_ms": med(lambda: jax.block_until_ready(trellis.solve(e, jet).log_z), args.calls) * 1e3,
            "solve_nomarg_ms": med(
                lambda: jax.block_until_ready(trellis.solve(e, jet, marginals=False).log_z), args.calls
            )
            * 1e3,
            "log_partition_ms": med(lambda: float(trellis.log_partition(e, jet)), args.calls) * 1e3,
            "kernel_ms": med(lambda: kern(True), args.calls) * 1e3,
            "kernel_nomarg_ms": med(lambda: kern(False), args.calls) * 1e3,
        }
        r["host_ms"] = r["solve_ms"] - r["kernel_ms"]
        r["log_z"] = float(trellis.solve(e, jet).log_z)
        if lk == "paper":
            t = time.perf_counter()
            ref_z, _ = reference_trellis("ginkgo", jet, lam=2.5, t_cut=16.0)
            r["numpy_reference_ms"] = (time.perf_counter() - t) * 1e3
            r["numpy_reference_log_z_err"] = abs(ref_z - r["log_z"])
        out[lk] = r
    return out


def run_worker(src, args) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src))
    cmd = [sys.executable, __file__, "--_worker", "--n", str(args.n), "--calls", str(args.calls)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def fresh(src, runs: int) -> dict:
    leaves = _jet(9).tolist()
    with tempfile.TemporaryDirectory() as cache:
        script = FRESH_SCRIPT.format(cache=cache, leaves=leaves, src=str(src))
        env = dict(os.environ, PYTHONPATH=str(src))
        rows = []
        for i in range(runs + 1):  # the first run fills the cache
            t = time.perf_counter()
            p = subprocess.Popen(
                [sys.executable, "-c", script],
                env=env,
                cwd=cache,  # not the checkout: `python -c` puts the working folder first on sys.path
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            out = p.stdout.read().decode()
            _, status, ru = os.wait4(p.pid, 0)
            wall = time.perf_counter() - t
            imp, first, lz = map(float, out.split("RESULT")[1].split())
            rows.append({"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "import_s": imp, "first_solve_s": first})
        timed = rows[1:]
        res = {k: statistics.median(r[k] for r in timed) for k in timed[0]}
        res["cold_cache"] = rows[0]
        res["runs"] = runs
        return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=9)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fresh", type=int, default=3, help="timed fresh processes per source tree (0: none)")
    ap.add_argument("--before", default=None, help="an older source tree (holding jaxhc/) to compare with")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(HERE / "results" / "trellis_latency.json"))
    ap.add_argument("--_worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._worker:
        print(json.dumps(worker(args)))
        return
    if args.quick:
        args.calls, args.rounds, args.fresh = 30, 1, 1
    srcs = {"after": REPO}
    if args.before:
        srcs = {"before": pathlib.Path(args.before), **srcs}
    per = {k: [] for k in srcs}
    for _ in range(args.rounds):
        for k, src in srcs.items():
            per[k].append(run_worker(src, args))
    table = {}
    for k, runs in per.items():
        table[k] = {
            lk: {m: statistics.median(r[lk][m] for r in runs) for m in runs[0][lk]} for lk in ("exact", "paper")
        }
    fr = {k: fresh(src, args.fresh) for k, src in srcs.items()} if args.fresh else {}
    print(f"warm {args.n}-leaf Ginkgo jet, median of {args.calls} calls, median over {args.rounds} rounds (ms)")
    cols = ("solve_ms", "solve_nomarg_ms", "log_partition_ms", "kernel_ms", "kernel_nomarg_ms", "host_ms")
    print(f"{'tree':>7} {'lik':>6} " + " ".join(f"{c[:-3]:>14}" for c in cols))
    for k, t in table.items():
        for lk in ("exact", "paper"):
            print(f"{k:>7} {lk:>6} " + " ".join(f"{t[lk][c]:14.3f}" for c in cols))
    ref = table["after"]["paper"]
    print(
        f"pure-Python reference (log Z + MAP, paper likelihood): {ref['numpy_reference_ms']:.1f} ms "
        f"(|d log Z| = {ref['numpy_reference_log_z_err']:.1e}); solve is {ref['numpy_reference_ms'] / ref['solve_ms']:.0f}x "
        "faster"
    )
    for k, f in fr.items():
        print(
            f"fresh process, warm cache ({k}): wall {f['wall_s']:.2f} s, CPU {f['cpu_s']:.2f} s "
            f"(import {f['import_s']:.2f} s, first solve {f['first_solve_s']:.2f} s; cold cache wall "
            f"{f['cold_cache']['wall_s']:.2f} s)"
        )
    if args.quick:
        return
    sys.path.insert(0, str(HERE))
    from _harness import machine

    doc = {
        "machine": machine(),
        "method": __doc__,
        "n": args.n,
        "calls": args.calls,
        "rounds": args.rounds,
        "warm": table,
        "warm_rounds": per,
        "fresh": fr,
        "loadavg_end": os.getloadavg(),
    }
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps(doc, indent=1))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
