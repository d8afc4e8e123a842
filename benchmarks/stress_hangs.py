"""Hang stress test: every main compiled entry point, K fresh processes each, with a timeout.

A deadlock inside a compiled program (the merge loop of BHC froze at random on jax 0.10.x)
shows up only now and then, and only in a fresh process: this script runs each entry point
``--runs`` times, each in its own ``python -c`` subprocess under ``--timeout`` seconds, and
counts the runs that hung (killed at the timeout), failed (non-zero exit) or passed. It
prints one row per entry point, the Python, JAX and jaxlib versions, and writes JSON.

Every run computes in float64 on small data (a few seconds each) and prints a checksum of
its result, so a run that returns a different number for the same seed is caught too
(``mismatch``: runs whose checksum differs from the entry's first passing run).

By default all runs of an entry share a persistent compilation cache (a fresh temporary
folder per entry): the first run compiles, the others load the executables and only run
them. The deadlock is in running, not compiling, so this keeps each run to the cost of an
import plus the computation; ``--no-cache`` compiles in every run.

Runs are sequential on purpose: the hang needs the XLA CPU thread pool of a process to have
the machine's cores (on jax 0.10.2 it vanished when the process was pinned to one core).

Usage (from the repository root, package installed):

    python benchmarks/stress_hangs.py                         # all entry points, 20 runs each
    python benchmarks/stress_hangs.py --only bhc_repro --runs 100
    python benchmarks/stress_hangs.py --list
    python benchmarks/stress_hangs.py --python /path/to/other/venv/bin/python --out /tmp/s.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

PRELUDE = """
import os, sys, hashlib
import jax
jax.config.update("jax_enable_x64", True)
if os.environ.get("JAXHC_STRESS_CACHE"):
    jax.config.update("jax_compilation_cache_dir", os.environ["JAXHC_STRESS_CACHE"])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
import numpy as np
import jaxhc
rng = np.random.default_rng(0)
def mixture(n, d, k=4, spread=4.0):
    means = rng.normal(scale=spread, size=(k, d))
    return means[rng.integers(k, size=n)] + rng.normal(size=(n, d))
def done(*values):
    flat = np.concatenate([np.ravel(np.asarray(v, dtype=np.float64)) for v in values])
    print("CHECKSUM", hashlib.sha1(np.round(flat, 6).tobytes()).hexdigest()[:12], flush=True)
"""

# the reproducer of the jax 0.10 deadlock (BHC, NIW, 190 x 30 standard normal data)
REPRODUCER = """
X = np.random.default_rng(0).normal(size=(190, 30))
res = jaxhc.bhc(X, jaxhc.NormalInverseWishart.from_data(X), 1.0)
done(res.log_evidence, res.tree.children)
"""


def _bhc_family(family: str, d: int) -> str:
    data = {
        "niw": "X = mixture(150, {d}); comp = jaxhc.NormalInverseWishart.from_data(X)",
        "known_cov": "X = mixture(150, {d}); comp = jaxhc.NormalKnownCov.from_data(X)",
        "bernoulli": "X = (mixture(150, {d}) > 0).astype(float); comp = jaxhc.BetaBernoulli.from_data(X)",
        "binomial": (
            "X = np.clip(np.round(5 + mixture(150, {d})), 0, 10); comp = jaxhc.BetaBinomial.from_data(X, trials=10)"
        ),
        "multinomial": (
            "P = rng.dirichlet(np.ones({d}), size=4)[rng.integers(4, size=150)]; "
            "X = np.stack([rng.multinomial(20, p) for p in P]).astype(float); "
            "comp = jaxhc.DirichletMultinomial.from_data(X)"
        ),
    }[family].format(d=d)
    return data + "\nres = jaxhc.bhc(X, comp, 1.0)\ndone(res.log_evidence, res.tree.children)\n"


ENTRIES: dict[str, str] = {"bhc_repro": REPRODUCER}
for _fam in ("niw", "known_cov", "bernoulli", "binomial", "multinomial"):
    for _d in (2, 10, 30):
        ENTRIES[f"bhc_{_fam}_d{_d}"] = _bhc_family(_fam, _d)
ENTRIES.update(
    {
        "rbhc": """
X = np.random.default_rng(0).normal(size=(600, 30))
res = jaxhc.rbhc(jax.random.PRNGKey(0), X, jaxhc.NormalInverseWishart.from_data(X), 1.0)
done(res.log_evidence)
""",
        "learn_hyperparameters": """
X = mixture(120, 30); X = (X - X.mean(0)) / X.std(0)
fit = jaxhc.learn_hyperparameters(X, jaxhc.NormalInverseWishart.from_data(X), 1.0, steps=10, max_rounds=2)
done(fit.result.log_evidence)
""",
        "bhcc": """
from jaxhc.datasets import cross_clustering_synthetic
X, views, rows = cross_clustering_synthetic(0, n_rows=40, n_cols=16, n_views=2)
res = jaxhc.bhcc(X, jaxhc.BetaBinomial(0.5, 0.5, trials=50), 1.0)
done(res.cut(0.5))
""",
        "trellis_solve_batch": """
from jaxhc import trellis
from jaxhc.models import ginkgo
params = ginkgo.GinkgoParams(lam=2.0, t_cut=16.0)
jets = ginkgo.simulate(jax.random.PRNGKey(0), params, 64, min_leaves=3, max_leaves=9)
sols = trellis.solve_batch(params.energy("exact"), jets.leaves, jets.n_leaves)
done(sols.log_z)
""",
        "pydt_em": """
X = mixture(40, 2, spread=2.0)
res = jaxhc.pydt_em(jax.random.PRNGKey(0), X, num_iters=3, progress_bar=False)
done(res.log_evidence)
""",
        "pydt_mcmc": """
X = mixture(30, 2, spread=2.0)
s = jaxhc.pydt_mcmc(jax.random.key(1), X, num_samples=30, num_warmup=10, progress_bar=False)
done(s.c, s.sigma2)
""",
        "bhmc": """
X = mixture(60, 4)
res = jaxhc.bhmc(jax.random.key(0), X, depth=3, num_samples=20, num_warmup=10, progress_bar=False)
done(res.level_labels)
""",
        "cdpm_mcmc": """
from jaxhc.inference.gibbs import cdpm_mcmc
X = (mixture(40, 12) > 0).astype(float)
s = cdpm_mcmc(jax.random.PRNGKey(0), X, jaxhc.BetaBernoulli(1.0, 1.0), 1.0, num_samples=10, num_warmup=10,
              progress_bar=False)
done(s.column_views)
""",
    }
)


def run_one(python: str, code: str, timeout: float, cache_dir: str | None) -> dict:
    """One fresh process; returns ``{"status": "ok"|"hang"|"error", "seconds", "checksum", ...}``."""
    env = dict(os.environ)
    env.pop("JAXHC_STRESS_CACHE", None)
    if cache_dir:
        env["JAXHC_STRESS_CACHE"] = cache_dir
    t = time.perf_counter()
    try:
        p = subprocess.run(
            [python, "-c", PRELUDE + code], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT
        )
    except subprocess.TimeoutExpired:
        return {"status": "hang", "seconds": time.perf_counter() - t}
    sec = time.perf_counter() - t
    sums = [l.split()[1] for l in p.stdout.splitlines() if l.startswith("CHECKSUM ")]
    if p.returncode != 0 or not sums:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        return {"status": "error", "seconds": sec, "rc": p.returncode, "tail": tail}
    return {"status": "ok", "seconds": sec, "checksum": sums[-1]}


def versions(python: str) -> dict:
    code = (
        "import sys, platform, jax, jaxlib, numpy; print(platform.python_version(), jax.__version__, "
        "jaxlib.__version__, numpy.__version__)"
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120).stdout.split()
    return dict(zip(("python", "jax", "jaxlib", "numpy"), out))


def stress(names, runs: int, timeout: float, python: str, cache: bool, verbose: bool = True) -> dict:
    """Runs every entry in ``names`` ``runs`` times; returns a dict of per-entry summaries."""
    results = {}
    for name in names:
        cache_dir = tempfile.mkdtemp(prefix=f"jaxhc_stress_{name}_") if cache else None
        rows = []
        try:
            for _ in range(runs):
                rows.append(run_one(python, ENTRIES[name], timeout, cache_dir))
        finally:
            if cache_dir:
                shutil.rmtree(cache_dir, ignore_errors=True)
        ok = [r for r in rows if r["status"] == "ok"]
        first = ok[0]["checksum"] if ok else None
        summary = {
            "runs": runs,
            "ok": len(ok),
            "hang": sum(r["status"] == "hang" for r in rows),
            "error": sum(r["status"] == "error" for r in rows),
            "mismatch": sum(r["checksum"] != first for r in ok),
            "median_s": statistics.median(r["seconds"] for r in ok) if ok else None,
            "first_s": rows[0]["seconds"],
            "errors": [r["tail"] for r in rows if r["status"] == "error"][:2],
        }
        results[name] = summary
        if verbose:
            print(_row(name, summary), flush=True)
            for tail in summary["errors"]:
                print("    " + " | ".join(tail), flush=True)
    return results


def _row(name, s):
    med = "-" if s["median_s"] is None else f"{s['median_s']:.1f}"
    return (
        f"{name:28s} {s['runs']:5d} {s['ok']:5d} {s['hang']:5d} {s['error']:6d} {s['mismatch']:8d} "
        f"{s['first_s']:8.1f} {med:>8s}"
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20, help="fresh runs per entry point (default 20)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds before a run counts as hung")
    ap.add_argument("--only", default=None, help="comma-separated entry names (default: all; see --list)")
    ap.add_argument("--python", default=sys.executable, help="interpreter to run (another venv's python)")
    ap.add_argument("--no-cache", action="store_true", help="compile in every run (no shared cache)")
    ap.add_argument(
        "--out", default=None, help="JSON path (default benchmarks/results/stress_hangs.json; '-' for none)"
    )
    ap.add_argument("--list", action="store_true", help="list the entry points and exit")
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(ENTRIES))
        return 0
    names = list(ENTRIES) if args.only is None else [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [n for n in names if n not in ENTRIES]
    if unknown:
        ap.error(f"unknown entry points {unknown}; --list shows them")
    ver = versions(args.python)
    print(
        f"python {ver.get('python')}  jax {ver.get('jax')}  jaxlib {ver.get('jaxlib')}  "
        f"cores {os.cpu_count()}  runs {args.runs}  timeout {args.timeout:.0f} s  "
        f"cache {'off' if args.no_cache else 'shared per entry'}",
        flush=True,
    )
    print(
        f"{'entry point':28s} {'runs':>5s} {'ok':>5s} {'hang':>5s} {'error':>6s} {'mismatch':>8s} "
        f"{'first_s':>8s} {'median_s':>8s}",
        flush=True,
    )
    t0 = time.time()
    results = stress(names, args.runs, args.timeout, args.python, not args.no_cache)
    total_hangs = sum(s["hang"] for s in results.values())
    total_err = sum(s["error"] + s["mismatch"] for s in results.values())
    print(
        f"total: {total_hangs} hangs, {total_err} errors or mismatches in "
        f"{sum(s['runs'] for s in results.values())} runs ({time.time() - t0:.0f} s)",
        flush=True,
    )
    out = args.out or os.path.join(HERE, "results", "stress_hangs.json")
    if out != "-":
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        record = {
            "versions": ver,
            "cores": os.cpu_count(),
            "runs": args.runs,
            "timeout": args.timeout,
            "cache": not args.no_cache,
            "date": time.strftime("%Y-%m-%d"),
            "results": results,
        }
        prev = {}
        if os.path.exists(out):
            try:
                with open(out) as f:
                    prev = json.load(f)
            except (OSError, ValueError):
                prev = {}
        key = f"py{ver.get('python')}-jax{ver.get('jax')}"
        prev = prev if isinstance(prev, dict) and "versions" not in prev else {}
        prev.setdefault(key, {}).update({k: v for k, v in record.items() if k != "results"})
        prev[key].setdefault("results", {}).update(results)
        with open(out, "w") as f:
            json.dump(prev, f, indent=1)
        print(f"wrote {out}")
    return 1 if total_hangs or total_err else 0


if __name__ == "__main__":
    sys.exit(main())
