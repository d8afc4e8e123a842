"""Speed and memory benchmark of greedy BHC (and randomized BHC when available).

Usage::

    python benchmarks/bhc.py                      # full run: n in 500..4000, d in {2, 10}, RBHC n=20000
    python benchmarks/bhc.py --quick              # smoke test (small sizes, seconds)
    python benchmarks/bhc.py --sizes 500,1000 --dims 2 --no-rbhc --out /tmp/bhc.json

Every configuration runs in a fresh Python subprocess (``--_worker``), so compile caches and
the peak resident set size (``ru_maxrss``) are per configuration.

Method (recorded in the JSON under ``"method"``):

* data: a mixture of 4 spherical unit-variance Gaussians in ``d`` dimensions with means
  drawn from ``N(0, 4^2 I)``, ``n`` points (numpy Generator seeded per config), component
  ``NormalInverseWishart.from_data(X)``, ``alpha = 1``, float64 (``jax_enable_x64``).
* compile time = (wall time of the first ``jaxhc.bhc`` call) - (median wall time of the
  later calls). The first call traces, lowers and compiles ``bhc_core`` for this
  ``(n, d, component type)`` and then runs it, so the difference is the one-off cost of
  tracing + XLA compilation.
* run time = median over ``--repeats`` calls after the first, each timed end to end
  (``jaxhc.bhc(...)`` including host-side tree assembly, then ``block_until_ready`` on the
  log evidence). ``progress_bar=False`` so no host callbacks run.
* peak memory, two readings (tracemalloc does not see XLA buffers):
  ``run_peak_delta_mb`` = peak RSS sampled every 5 ms (thread reading /proc/self/statm)
  during the post-compilation calls minus the RSS just before them: the working memory of
  a compiled run. ``peak_delta_mb`` = ``ru_maxrss`` after all BHC calls minus the RSS just
  before the first call (after imports, data generation and component set-up): includes
  the compiler's memory, which dominates at small n. ``peak_rss_mb`` is the worker's
  absolute peak. scipy runs after these readings.
* scipy: ``scipy.cluster.hierarchy.linkage(X, "average")`` (Euclidean), median of the same
  number of repeats, in the same process; ratio = BHC run time / scipy time.
* RBHC (if ``jaxhc.rbhc`` exists): ``jaxhc.rbhc(PRNGKey(0), X, component, 1.0)`` at
  ``n = 20000, d = 10``; the first call (including compilation) and a second call with the
  same key are timed; the log evidence of the returned tree is reported. In the same
  process RBHC then also runs on the data of the BHC configs with d = 10 and n in
  {2000, 4000} (same seeds), so its log evidence can be compared with greedy BHC's.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _memory import RssSampler, maxrss_mb, rss_mb  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "bhc.json")
HIGHDIM_OUT = os.path.join(HERE, "results", "bhc_highdim.json")
# high-dimensional section: (n, d) pairs. At d >= GRAM_MIN_D greedy BHC runs the Gram-matrix
# search (three [n, n] float64 arrays) and returns a d x d scatter per node ((2n - 1) d^2
# float64, the API's node_stats); a configuration whose estimate exceeds HIGHDIM_MEM_GB is skipped
HIGHDIM_CONFIGS = [(n, d) for d in (100, 500, 2000) for n in (50, 500)]
HIGHDIM_MEM_GB = 12.0

TARGETS = {
    "growth_exponent_max": 2.2,  # of BHC run time from n = 1000 to n = 4000
    "bhc_n2000_d10_s": 10.0,  # after compilation
    "rbhc_n20000_d10_s": 60.0,
}


# ------------------------------------------------------------------------------------------
# worker side (one configuration per process)
# ------------------------------------------------------------------------------------------
_rss_mb, _maxrss_mb = rss_mb, maxrss_mb


def make_data(n: int, d: int, seed: int, k: int = 4):
    import numpy as np

    rng = np.random.default_rng(seed)
    means = rng.normal(0.0, 4.0, size=(k, d))
    z = rng.integers(0, k, size=n)
    X = means[z] + rng.normal(size=(n, d))
    return X, z


def worker(args) -> dict:
    import jax

    jax.config.update("jax_enable_x64", True)
    from scipy.cluster.hierarchy import linkage

    import jaxhc

    n, d = args.n, args.d
    X, _ = make_data(n, d, seed=1000 * d + n)
    comp = jaxhc.NormalInverseWishart.from_data(X)
    out = {"algo": args.algo, "n": n, "d": d}
    try:  # which greedy search bhc runs here (the Gram-matrix one from d >= GRAM_MIN_D)
        from jaxhc.inference.bhc import gram

        out["search"] = "gram" if gram.use_gram(comp, None, n) else "compiled"
    except ImportError:
        out["search"] = "compiled"

    if args.algo == "rbhc":
        if not hasattr(jaxhc, "rbhc"):
            out["status"] = "not available"
            return out
        import inspect

        key = jax.random.PRNGKey(0)
        params = inspect.signature(jaxhc.rbhc).parameters
        kw = {"progress_bar": False} if "progress_bar" in params else {}
        out["rbhc_defaults"] = {
            k: repr(v.default) for k, v in params.items() if v.default is not inspect.Parameter.empty
        }
        rss0 = _rss_mb()
        times, evs, cpu = [], [], []
        with RssSampler() as samp:
            for _ in range(1 + args.repeats):
                t0, c0 = time.perf_counter(), time.process_time()
                res = jaxhc.rbhc(key, X, comp, 1.0, **kw)
                ev = jax.block_until_ready(res.log_evidence)
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
                evs.append(float(ev))
                del res
        out.update(
            status="ok",
            first_call_s=times[0],
            run_s=statistics.median(times[1:]) if len(times) > 1 else None,
            run_times_s=times[1:],
            cpu_s=cpu,
            log_evidence=evs[0],
            log_evidence_per_point=evs[0] / n,
            log_evidences=evs,
            peak_rss_mb=_maxrss_mb(),
            peak_delta_mb=_maxrss_mb() - rss0,
            sampled_peak_delta_mb=samp.peak - rss0,
        )
        # same data as the BHC configs of these sizes, to compare log evidence (this process
        # has compiled most RBHC programs already, so these times are roughly warm)
        comp_rows = []
        for m in args.compare_sizes:
            Xm, _ = make_data(m, d, seed=1000 * d + m)
            cm = jaxhc.NormalInverseWishart.from_data(Xm)
            t0 = time.perf_counter()
            rm = jaxhc.rbhc(key, Xm, cm, 1.0, **kw)
            ev = float(jax.block_until_ready(rm.log_evidence))
            comp_rows.append({"n": m, "d": d, "time_s": time.perf_counter() - t0, "log_evidence": ev})
            del rm
        out["compare"] = comp_rows
        return out

    rss0 = _rss_mb()
    times, cpu = [], []

    def call():
        t0, c0 = time.perf_counter(), time.process_time()
        r = jaxhc.bhc(X, comp, 1.0, progress_bar=False)
        jax.block_until_ready(r.log_evidence)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        return r

    res = call()  # compiles
    del res
    rss1 = _rss_mb()
    with RssSampler() as samp:
        for _ in range(args.repeats):
            res = call()
    peak = _maxrss_mb()
    run = statistics.median(times[1:])
    st = []
    for _ in range(max(1, args.repeats)):
        t0 = time.perf_counter()
        linkage(X, "average")
        st.append(time.perf_counter() - t0)
    scipy_s = statistics.median(st)
    out.update(
        status="ok",
        first_call_s=times[0],
        compile_s=max(times[0] - run, 0.0),
        run_s=run,
        run_times_s=times[1:],
        run_cpu_s=statistics.median(cpu[1:]),
        first_call_cpu_s=cpu[0],
        log_evidence=float(res.log_evidence),
        n_clusters_r05=int(res.n_clusters(0.5)),
        rss_before_mb=rss0,
        peak_rss_mb=peak,
        peak_delta_mb=peak - rss0,
        run_rss_before_mb=rss1,
        run_peak_rss_mb=samp.peak,
        run_peak_delta_mb=samp.peak - rss1,
        scipy_average_s=scipy_s,
        ratio_bhc_over_scipy=run / scipy_s if scipy_s > 0 else None,
    )
    return out


# ------------------------------------------------------------------------------------------
# driver
# ------------------------------------------------------------------------------------------
def machine_info() -> dict:
    import jax
    import numpy as np
    import scipy

    info = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
        "jaxlib": getattr(jax.lib, "__version__", None) or _jaxlib_version(),
        "backend": jax.default_backend(),
        "devices": [str(dv) for dv in jax.devices()],
        "numpy": np.__version__,
        "scipy": scipy.__version__,
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            info["mem_total_gb"] = round(int(f.readline().split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    return info


def _jaxlib_version():
    try:
        import jaxlib

        return jaxlib.__version__
    except Exception:  # pragma: no cover
        return None


def run_config(algo: str, n: int, d: int, repeats: int, timeout: float, compare_sizes=()) -> dict:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--_worker",
        "--algo",
        algo,
        "--n",
        str(n),
        "--d",
        str(d),
        "--repeats",
        str(repeats),
        "--compare-sizes",
        ",".join(str(m) for m in compare_sizes),
    ]
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"algo": algo, "n": n, "d": d, "status": f"timeout after {timeout:.0f} s"}
    wall = time.perf_counter() - t0
    lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        tail = (p.stderr or p.stdout).strip().splitlines()[-5:]
        return {"algo": algo, "n": n, "d": d, "status": f"failed (rc={p.returncode})", "error": tail}
    out = json.loads(lines[-1][len("RESULT ") :])
    out["process_wall_s"] = wall
    # 1-min load average before / after (2-core box: > ~1.2 means something else competed)
    out["loadavg_1min_before_after"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    return out


def _fmt(x, spec=".2f", none="-"):
    return none if x is None else format(x, spec)


def print_tables(results, growth, checks, rbhc_rows, growth_cpu=None):
    growth_cpu = growth_cpu or {}
    hdr = (
        f"{'n':>6} {'d':>3} {'compile s':>10} {'BHC s':>9} {'BHC cpu s':>10} {'scipy avg s':>12} {'BHC/scipy':>10} "
        f"{'run dRSS MB':>12} {'1st-call dRSS MB':>17} {'log p(D|T)':>14}"
    )
    print(
        "\nGreedy BHC (NIW.from_data, alpha=1, float64); run time after compilation "
        "(wall; 'cpu' = process CPU time, all threads)"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        if r.get("status") != "ok":
            print(f"{r['n']:>6} {r['d']:>3}  {r.get('status')}")
            continue
        print(
            f"{r['n']:>6} {r['d']:>3} {r['compile_s']:>10.2f} {r['run_s']:>9.3f} {r['run_cpu_s']:>10.3f} "
            f"{r['scipy_average_s']:>12.4f} "
            f"{r['ratio_bhc_over_scipy']:>10.0f} {r['run_peak_delta_mb']:>12.0f} {r['peak_delta_mb']:>17.0f} "
            f"{r['log_evidence']:>14.2f}"
        )
    if growth:
        print(
            "\nGrowth exponent of BHC run time, n = 1000 -> 4000 (log ratio / log 4); target <= "
            f"{TARGETS['growth_exponent_max']}"
        )
        for d, g in growth.items():
            gc = growth_cpu.get(d)
            print(
                f"  d={d}: {g:.2f}  {'OK' if g <= TARGETS['growth_exponent_max'] else 'MISSED'}"
                + (f"   (from CPU time: {gc:.2f})" if gc is not None else "")
            )
    if rbhc_rows:
        print("\nRandomized BHC")
        for r in rbhc_rows:
            if r.get("status") != "ok":
                print(f"  n={r['n']} d={r['d']}: {r.get('status')}")
            else:
                print(
                    f"  n={r['n']} d={r['d']}: first call (incl. compile) {r['first_call_s']:.1f} s, "
                    f"second call {_fmt(r.get('run_s'), '.1f')} s, log p(D|T) = {r['log_evidence']:.1f} "
                    f"({r['log_evidence_per_point']:.3f}/point), peak dRSS {r['peak_delta_mb']:.0f} MB"
                )
                for c in r.get("compare", []):
                    line = f"    same data as BHC n={c['n']} d={c['d']}: RBHC {c['time_s']:.1f} s, log p(D|T) = {c['log_evidence']:.1f}"
                    if "bhc_log_evidence" in c:
                        line += (
                            f" vs BHC {c['bhc_log_evidence']:.1f} ({c['bhc_run_s']:.1f} s); "
                            f"RBHC - BHC = {c['delta_per_point']:+.3f}/point"
                        )
                    print(line)
    if checks:
        print("\nTargets")
        for c in checks:
            print(f"  {c['name']}: {c['value']} (target {c['target']}) -> {c['result']}")


def highdim_main(args) -> int:
    """n in {50, 500} x d in {100, 500, 2000}: greedy BHC beside scipy average linkage in one
    process per configuration (the worker of the main section), ``--timeout`` each."""
    info = machine_info()
    results = []
    for n, d in HIGHDIM_CONFIGS:
        need_gb = ((2 * n - 1) * d * d + 3 * n * n) * 8 / 2**30
        print(f"  BHC n={n} d={d} ...", end=" ", flush=True)
        if need_gb > HIGHDIM_MEM_GB:
            r = {"algo": "bhc", "n": n, "d": d, "status": f"skipped: ~{need_gb:.0f} GB of per-node scatters"}
        else:
            r = run_config("bhc", n, d, args.repeats if args.repeats is not None else 1, args.timeout)
        results.append(r)
        ok = r.get("status") == "ok"
        print(f"run {r['run_s']:.3f} s, scipy {r['scipy_average_s']:.4f} s" if ok else r.get("status"), flush=True)
    print("\n| n | d | search | compile s | BHC s | BHC cpu s | scipy avg s | BHC / scipy | status |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---|")
    for r in results:
        ok = r.get("status") == "ok"
        g = (lambda k, f=".3f": _fmt(r.get(k), f)) if ok else (lambda k, f=".3f": "-")
        ratio = _fmt(r["run_s"] / r["scipy_average_s"], ".0f") if ok else "-"
        print(
            f"| {r['n']} | {r['d']} | {r.get('search', '-')} | {g('compile_s', '.2f')} | {g('run_s')} | {g('run_cpu_s')} | "
            f"{g('scipy_average_s', '.4f')} | {ratio} | {r.get('status')} |"
        )
    out_path = args.out or HIGHDIM_OUT
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    doc = {
        "benchmark": "bhc_highdim",
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": info,
        "method": "as bhc.json (fresh process per config, compile = first call minus later ones, scipy average "
        f"linkage in the same process); timeout {args.timeout:.0f} s per config; configs whose per-slot "
        f"scatters and Gram arrays would exceed {HIGHDIM_MEM_GB} GB are skipped",
        "targets": {"n500_d500_s": 10.0, "n50_d2000_s": 5.0},
        "bhc": results,
    }
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=2)
    print(f"\nwrote {out_path}")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes for smoke testing")
    ap.add_argument("--sizes", type=str, default=None, help="comma-separated n (default 500,1000,2000,4000)")
    ap.add_argument("--dims", type=str, default=None, help="comma-separated d (default 2,10)")
    ap.add_argument("--repeats", type=int, default=None, help="timed calls after the first (default 3; 2 for n>=4000)")
    ap.add_argument("--rbhc-n", type=int, default=None, help="RBHC size (default 20000; 1000 with --quick)")
    ap.add_argument("--rbhc-repeats", type=int, default=1, help="RBHC calls after the first (default 1)")
    ap.add_argument(
        "--rbhc-compare",
        type=str,
        default=None,
        help="comma-separated n (d=10) at which RBHC also runs on the BHC benchmark's data to "
        "compare log evidence (default: the BHC sizes with d=10 among 2000,4000)",
    )
    ap.add_argument(
        "--highdim",
        action="store_true",
        help="the high-dimensional section instead: n in {50, 500} x d in {100, 500, 2000} (NIW.from_data), "
        f"beside scipy in the same process, RBHC off; JSON default {HIGHDIM_OUT}",
    )
    ap.add_argument("--no-rbhc", action="store_true")
    ap.add_argument("--timeout", type=float, default=1800.0, help="per-config subprocess timeout, s")
    ap.add_argument("--out", type=str, default=None, help=f"JSON output (default {DEFAULT_OUT}; --quick: none)")
    # worker mode
    ap.add_argument("--_worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--algo", default="bhc", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--d", type=int, help=argparse.SUPPRESS)
    ap.add_argument(
        "--compare-sizes", type=lambda v: [int(x) for x in v.split(",") if x], default=[], help=argparse.SUPPRESS
    )
    args = ap.parse_args(argv)

    if args._worker:
        res = worker(args)
        print("RESULT " + json.dumps(res), flush=True)
        return 0

    if args.highdim:
        return highdim_main(args)

    sizes = (
        [int(s) for s in args.sizes.split(",")]
        if args.sizes
        else ([100, 200, 400] if args.quick else [500, 1000, 2000, 4000])
    )
    dims = [int(s) for s in args.dims.split(",")] if args.dims else [2, 10]
    rbhc_n = args.rbhc_n or (1000 if args.quick else 20000)
    out_path = args.out or (None if args.quick else DEFAULT_OUT)

    info = machine_info()
    print(f"machine: {info.get('cpu_model', info['processor'])}, {info['cpu_count']} CPUs, {info['platform']}")
    print(f"jax {info['jax']} backend={info['backend']}")

    results = []
    for d in dims:
        for n in sizes:
            reps = args.repeats if args.repeats is not None else (2 if n >= 4000 else 3)
            print(f"  BHC n={n} d={d} ...", end=" ", flush=True)
            r = run_config("bhc", n, d, reps, args.timeout)
            results.append(r)
            print(
                r.get("status")
                if r.get("status") != "ok"
                else f"compile {r['compile_s']:.2f} s, run {r['run_s']:.3f} s, scipy {r['scipy_average_s']:.4f} s",
                flush=True,
            )

    by = {(r["n"], r["d"]): r for r in results if r.get("status") == "ok"}
    growth, growth_cpu = {}, {}
    lo_n, hi_n = (1000, 4000)
    for d in dims:
        if (lo_n, d) in by and (hi_n, d) in by:
            growth[d] = math.log(by[(hi_n, d)]["run_s"] / by[(lo_n, d)]["run_s"]) / math.log(hi_n / lo_n)
            growth_cpu[d] = math.log(by[(hi_n, d)]["run_cpu_s"] / by[(lo_n, d)]["run_cpu_s"]) / math.log(hi_n / lo_n)

    rbhc_rows = []
    if not args.no_rbhc:
        print(f"  RBHC n={rbhc_n} d=10 ...", end=" ", flush=True)
        if args.rbhc_compare is not None:
            cmp_sizes = [int(x) for x in args.rbhc_compare.split(",") if x]
        else:
            cmp_sizes = [m for m in sizes if m in (2000, 4000)] if 10 in dims else []
        r = run_config("rbhc", rbhc_n, 10, args.rbhc_repeats, args.timeout, cmp_sizes)
        for c in r.get("compare", []):
            b = by.get((c["n"], c["d"]))
            if b is not None:
                c["bhc_log_evidence"] = b["log_evidence"]
                c["bhc_run_s"] = b["run_s"]
                c["delta_per_point"] = (c["log_evidence"] - b["log_evidence"]) / c["n"]
        rbhc_rows.append(r)
        print(r.get("status"), flush=True)

    checks = []
    for d, g in growth.items():
        checks.append(
            {
                "name": f"BHC growth exponent n=1000->4000, d={d}",
                "value": round(g, 3),
                "target": f"<= {TARGETS['growth_exponent_max']}",
                "result": "met" if g <= TARGETS["growth_exponent_max"] else "missed",
            }
        )
    if (2000, 10) in by:
        v = by[(2000, 10)]["run_s"]
        checks.append(
            {
                "name": "BHC n=2000 d=10 run time after compilation (s)",
                "value": round(v, 3),
                "target": f"<= {TARGETS['bhc_n2000_d10_s']}",
                "result": "met" if v <= TARGETS["bhc_n2000_d10_s"] else "missed",
            }
        )
    for r in rbhc_rows:
        if r["n"] == 20000 and r["d"] == 10:
            if r.get("status") == "ok":
                v = r["first_call_s"]
                checks.append(
                    {
                        "name": "RBHC n=20000 d=10 first call incl. compile (s)",
                        "value": round(v, 2),
                        "target": f"<= {TARGETS['rbhc_n20000_d10_s']}",
                        "result": "met" if v <= TARGETS["rbhc_n20000_d10_s"] else "missed",
                    }
                )
            else:
                checks.append(
                    {
                        "name": "RBHC n=20000 d=10 (s)",
                        "value": None,
                        "target": f"<= {TARGETS['rbhc_n20000_d10_s']}",
                        "result": r.get("status"),
                    }
                )

    print_tables(results, growth, checks, rbhc_rows, growth_cpu)

    if out_path:
        os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
        doc = {
            "benchmark": "bhc",
            "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "machine": info,
            "method": {
                "data": "mixture of 4 unit-variance Gaussians, means ~ N(0, 16 I); NIW.from_data; alpha=1; float64",
                "compile_s": "first jaxhc.bhc call minus median of later calls (fresh process per config)",
                "run_s": "median of later calls, end to end incl. host tree assembly, block_until_ready",
                "peak_delta_mb": "ru_maxrss after all BHC calls minus RSS just before the first call "
                "(dominated by compilation at small n)",
                "run_peak_delta_mb": "peak RSS sampled every 5 ms during the post-compilation calls minus "
                "RSS just before them (working memory of a compiled run)",
                "scipy_average_s": "scipy.cluster.hierarchy.linkage(X, 'average'), median, same process",
                "growth_exponent": "log(run_s(4000) / run_s(1000)) / log(4)",
                "run_cpu_s": "process CPU time (all threads) of the same calls, median; less sensitive "
                "to other load on the machine than wall time",
                "loadavg_1min_before_after": "1-minute load average before/after each config's subprocess",
                "rbhc": "jaxhc.rbhc(PRNGKey(0), X, comp, 1.0): first call (incl. compile) and a second call; "
                "compare: RBHC in the same process on the BHC configs' data (same seeds)",
            },
            "targets": TARGETS,
            "bhc": results,
            "growth_exponent": {str(d): g for d, g in growth.items()},
            "growth_exponent_cpu_time": {str(d): g for d, g in growth_cpu.items()},
            "rbhc": rbhc_rows,
            "checks": checks,
        }
        with open(out_path, "w") as f:
            json.dump(doc, f, indent=2)
        print(f"\nwrote {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
