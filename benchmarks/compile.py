"""Compile once, fit many: what a user waits for on a first call, and over many data sizes.

Usage::

    python benchmarks/compile.py                         # every system: first call + sweeps
    python benchmarks/compile.py --systems bhc,fit_bhc --sweep-sizes 20
    python benchmarks/compile.py --exact-shapes          # BHC without the size buckets (before)
    python benchmarks/compile.py --warm-cache            # fresh process, persistent cache warm

For each system, in a fresh process without any compilation cache: the first call at its
reference size split into trace, lowering, compile and run (JAX's own events,
`jaxhc._internal.compiles`), the programs it compiled, and the warm run time (the same
call again). Then, in one more fresh process, a sweep over ``--sweep-sizes`` data sizes
spread geometrically over the system's range (BHC: 50..2000): every size's first call and a
warm repeat, the programs compiled, and the buckets touched (`jaxhc._internal.buckets`).
The sweep's total is reported against the sum of the warm run times plus one compile per
bucket touched (the issue's target: total <= 2 x warm + one compile per bucket).
``--warm-cache``: a first process fills a temporary persistent cache at one size, a second
fresh process times the first call at another size of the same bucket.
Writes ``benchmarks/results/compile.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import machine, result_doc, run_worker, write_json  # noqa: E402


def _data(n: int, d: int = 4, seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    return rng.normal(size=(n, d)) + 4.0 * np.eye(d)[y]


def _binary(n: int, d: int, seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    p = np.where(rng.integers(0, 2, (n, 1)) == 1, 0.8, 0.2)
    return (rng.random((n, d)) < p).astype(float)


def _call(system: str, n: int, seed: int):
    """One call of ``system`` at data size ``n`` (small iteration counts: the point is the
    programs, not the statistics)."""
    import jax
    import numpy as np

    import jaxhc

    key = jax.random.key(seed)
    if system == "bhc":
        X = _data(n, seed=seed)
        return jaxhc.bhc(X, jaxhc.NormalInverseWishart.from_data(X))
    if system == "fit_bhc":
        return jaxhc.fit_bhc(_data(n, seed=seed))
    if system == "rbhc":
        X = _data(n, seed=seed)
        return jaxhc.rbhc(key, X, jaxhc.NormalInverseWishart.from_data(X))
    if system == "bhc_predictive":
        X = _data(n, seed=seed)
        res = jaxhc.bhc(X, jaxhc.NormalInverseWishart.from_data(X))
        return jaxhc.bhc_predictive(res, X)
    if system == "bhcc":
        X = _binary(n, 12, seed)
        return jaxhc.bhcc(X, jaxhc.BetaBernoulli.from_data(X))
    if system == "rbhcc":
        X = _binary(n, 12, seed)
        return jaxhc.rbhcc(key, X, jaxhc.BetaBernoulli.from_data(X))
    if system == "bhmc":
        return jaxhc.bhmc(key, _data(n, d=2, seed=seed), depth=2, num_samples=5, num_warmup=5, progress_bar=False)
    if system == "pydt_em":
        return jaxhc.pydt_em(key, _data(n, d=2, seed=seed), num_iters=5, max_em=2, progress_bar=False)
    if system == "pydt_mcmc":
        return jaxhc.pydt_mcmc(key, _data(n, d=2, seed=seed), num_samples=5, progress_bar=False)
    if system == "dpm_gibbs":
        X = _binary(n, 6, seed)
        return jaxhc.dpm_gibbs(key, X, jaxhc.BetaBernoulli.from_data(X), 1.0, num_samples=5, progress_bar=False)
    if system == "cdpm_mcmc":
        X = _binary(n, 6, seed)
        return jaxhc.cdpm_mcmc(key, X, jaxhc.BetaBernoulli.from_data(X), 1.0, num_samples=5, progress_bar=False)
    if system == "trellis":
        from jaxhc import trellis

        X = np.random.default_rng(seed).random((n, n))
        return trellis.solve(trellis.DasguptaEnergy(), X + X.T)
    raise ValueError(f"unknown system {system!r}")


# reference size of the first call, and the sweep's range, per system
SYSTEMS = {
    "bhc": (100, (50, 2000)),
    "fit_bhc": (100, (50, 2000)),
    "rbhc": (2000, (500, 20000)),
    "bhc_predictive": (100, (50, 2000)),
    "bhcc": (60, (20, 200)),
    "rbhcc": (60, (20, 200)),
    "bhmc": (60, (20, 200)),
    "pydt_em": (30, (10, 60)),
    "pydt_mcmc": (30, (10, 60)),
    "dpm_gibbs": (100, (20, 500)),
    "cdpm_mcmc": (60, (20, 200)),
    "trellis": (9, (5, 14)),
}


def _timed(system, n, seed):
    import jax

    from jaxhc._internal.compiles import count_compilations

    with count_compilations() as c:
        t = time.perf_counter()
        out = _call(system, n, seed)
        jax.block_until_ready([x for x in jax.tree_util.tree_leaves(out) if isinstance(x, jax.Array)])
        total = time.perf_counter() - t
    return total, c


def _setup(exact_shapes: bool):
    import jax

    jax.config.update("jax_enable_x64", True)
    if exact_shapes:
        from jaxhc.inference.bhc import terms

        terms.PAD_TO_BUCKETS = False


def worker_first(system: str, n: int, exact_shapes: bool, cache: str) -> dict:
    t0 = time.perf_counter()
    if cache:
        import jaxhc

        jaxhc.enable_compilation_cache(cache)
    _setup(exact_shapes)
    import jaxhc  # noqa: F401

    imp = time.perf_counter() - t0
    total, c = _timed(system, n, 0)
    warm, _ = _timed(system, n, 0)
    return {
        "system": system,
        "n": n,
        "import_s": imp,
        "first_s": total,
        "trace_s": c.trace_s,
        "lower_s": c.lower_s,
        "compile_s": c.compile_s,
        "programs": c.compiled,
        "run_s": max(total - c.trace_s - c.lower_s - c.compile_s, 0.0),
        "warm_s": warm,
    }


def worker_sweep(system: str, sizes: list, exact_shapes: bool) -> dict:
    from jaxhc._internal.buckets import bucket

    _setup(exact_shapes)
    rows = []
    for i, n in enumerate(sizes):
        first, c = _timed(system, n, i)
        warm, _ = _timed(system, n, i)
        rows.append(
            {
                "n": n,
                "bucket": bucket(n),
                "first_s": first,
                "warm_s": warm,
                "programs": c.compiled,
                "compile_s": c.compile_s,
            }
        )
    return {"system": system, "rows": rows}


def _sizes(lo, hi, k):
    import numpy as np

    return sorted({int(round(x)) for x in np.geomspace(lo, hi, k)})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--sweep-systems", default="bhc,fit_bhc")
    ap.add_argument("--sweep-sizes", type=int, default=20)
    ap.add_argument("--exact-shapes", action="store_true", help="BHC without the size buckets (the behaviour before)")
    ap.add_argument("--warm-cache", action="store_true")
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--out", default="benchmarks/results/compile.json")
    ap.add_argument("--no-json", action="store_true")
    ap.add_argument("--_worker", nargs="+", help=argparse.SUPPRESS)
    args, rest = ap.parse_known_args()
    if args._worker:
        import json

        mode, system = args._worker[0], args._worker[1]
        if mode == "first":
            res = worker_first(
                system, int(args._worker[2]), args.exact_shapes, args._worker[3] if len(args._worker) > 3 else ""
            )
        else:
            res = worker_sweep(system, [int(x) for x in args._worker[2].split(",")], args.exact_shapes)
        print("RESULT " + json.dumps(res))
        return
    env = dict(os.environ, JAXHC_NO_COMPILATION_CACHE="1")
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    flag = ["--exact-shapes"] if args.exact_shapes else []
    doc = result_doc(
        "compile",
        "fresh processes without a compilation cache; first call split by JAX's monitoring events",
        machine=machine(),
        exact_shapes=args.exact_shapes,
        first={},
        sweep={},
        warm_cache={},
    )
    print(
        f"{'system':16s} {'n':>6s} {'first':>8s} {'trace':>7s} {'lower':>7s} {'compile':>8s} {'run':>7s} {'progs':>5s} {'warm':>8s}"
    )
    for s in [x for x in args.systems.split(",") if x]:
        n = SYSTEMS[s][0]
        r = run_worker(__file__, "first", [s, str(n), ""] + flag, args.timeout, env)
        doc["first"][s] = r
        if not args.no_json:  # after every system: a long run killed midway keeps its rows
            write_json(args.out, doc)
        if "error" in r:
            print(f"{s:16s} error: {r['error'][-300:]}")
            continue
        print(
            f"{s:16s} {n:6d} {r['first_s']:8.2f} {r['trace_s']:7.2f} {r['lower_s']:7.2f} {r['compile_s']:8.2f} "
            f"{r['run_s']:7.2f} {r['programs']:5d} {r['warm_s']:8.3f}"
        )
    for s in [x for x in args.sweep_systems.split(",") if x and args.sweep_sizes > 0]:
        lo, hi = SYSTEMS[s][1]
        sizes = _sizes(lo, hi, args.sweep_sizes)
        r = run_worker(__file__, "sweep", [s, ",".join(map(str, sizes))] + flag, args.timeout, env)
        doc["sweep"][s] = r
        if not args.no_json:
            write_json(args.out, doc)
        if "error" in r:
            print(f"sweep {s}: error: {r['error'][-300:]}")
            continue
        rows = r["rows"]
        total = sum(x["first_s"] for x in rows)
        warm = sum(x["warm_s"] for x in rows)
        buckets = sorted({x["bucket"] for x in rows})
        # one compile per bucket: the compile time of each bucket's first size
        seen, per_bucket = set(), 0.0
        for x in rows:
            if x["bucket"] not in seen:
                seen.add(x["bucket"])
                per_bucket += x["compile_s"]
        r.update(
            total_s=total,
            warm_sum_s=warm,
            buckets=buckets,
            bucket_compile_s=per_bucket,
            programs=sum(x["programs"] for x in rows),
            target_s=2 * warm + per_bucket,
        )
        print(
            f"sweep {s}: {len(rows)} sizes {rows[0]['n']}..{rows[-1]['n']}, {len(buckets)} buckets, "
            f"{r['programs']} programs; total {total:.1f} s, warm sum {warm:.1f} s, compile of each bucket's "
            f"first size {per_bucket:.1f} s; target 2 x warm + that = {r['target_s']:.1f} s"
        )
    if args.warm_cache:
        with tempfile.TemporaryDirectory() as d:
            for s in ("bhc", "fit_bhc"):
                run_worker(__file__, "first", [s, "100", d] + flag, args.timeout, env)
                r = run_worker(__file__, "first", [s, "110", d] + flag, args.timeout, env)
                doc["warm_cache"][s] = r
                if "error" not in r:
                    print(
                        f"warm cache {s}: n = 110 after n = 100 in another process: first call {r['first_s']:.2f} s "
                        f"(import {r['import_s']:.2f} s), {r['programs']} programs loaded"
                    )
    if not args.no_json:
        write_json(args.out, doc)


if __name__ == "__main__":
    main()
