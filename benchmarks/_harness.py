"""Timing and subprocess helpers shared by the benchmark scripts."""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time


def block(x):
    """``jax.block_until_ready(x)``; returns ``x``."""
    import jax

    jax.block_until_ready(x)
    return x


def time_calls(fn, min_time: float, max_calls: int = 50):
    """Median wall time of ``fn()`` after one warm-up call, repeated for ~min_time s;
    returns ``(median seconds, number of timed calls)``."""
    block(fn())
    times = []
    start = time.perf_counter()
    while True:
        t = time.perf_counter()
        block(fn())
        times.append(time.perf_counter() - t)
        if len(times) >= max_calls or time.perf_counter() - start >= min_time:
            break
    return statistics.median(times), len(times)


def median_time(fn, calls: int, warmup: int = 1) -> float:
    """Median wall time of ``calls`` calls of ``fn()`` after ``warmup`` untimed ones (``fn``
    returns host values: nothing to block on)."""
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def time_calls_interleaved(fns: dict, min_time: float, max_calls: int = 50) -> dict:
    """``{name: (median seconds, calls)}`` of the callables ``fns``, called in turn (one
    call of each per round, after one warm-up round) for ~``min_time`` s per callable: the
    machine's speed drifts within minutes, and timing one program after the other would
    put the drift into their ratios."""
    for fn in fns.values():
        block(fn())
    times = {k: [] for k in fns}
    start = time.perf_counter()
    while True:
        for k, fn in fns.items():
            t = time.perf_counter()
            block(fn())
            times[k].append(time.perf_counter() - t)
        done = len(next(iter(times.values())))
        if done >= max_calls or time.perf_counter() - start >= min_time * len(fns):
            break
    return {k: (statistics.median(v), len(v)) for k, v in times.items()}


def blocks_median(fns: dict, calls: int, rounds: int = 3) -> dict:
    """``{name: median seconds}``: ``rounds`` rounds, each a block of ``ceil(calls / rounds)``
    calls of every callable in turn (one warm-up call per block), medians over all rounds.
    Blocks, not single calls in turn: the runtimes' idle worker threads spin for a while
    after a parallel region (OpenMP's and XLA's), so a call right after the other's is slowed
    by up to 2x; rounds, so that the box's drift falls on all of them."""
    per = max(1, math.ceil(calls / rounds))
    got: dict = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            fn()
            for _ in range(per):
                t = time.perf_counter()
                fn()
                got[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in got.items()}


def aot(jitted, *args, **static):
    """Ahead-of-time compile ``jitted`` for these arguments; returns ``(compiled, seconds)``."""
    t = time.perf_counter()
    compiled = jitted.lower(*args, **static).compile()
    return compiled, time.perf_counter() - t


def machine(extra: dict | None = None) -> dict:
    """Platform, CPU model, core count, memory, Python / JAX / NumPy versions, devices, load."""
    import jax
    import numpy

    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), cpu)
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            mem = int(next(l for l in f if l.startswith("MemTotal")).split()[1]) / 2**20
    except (OSError, StopIteration):
        mem = None
    out = {
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "mem_gb": mem,
        "python": platform.python_version(),
        "jax": jax.__version__,
        "numpy": numpy.__version__,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "loadavg_start": list(os.getloadavg()),
    }
    out.update(extra or {})
    return out


def run_worker(script: str, mode: str, argv: list, timeout: float, env=None) -> dict:
    """Runs ``script --_worker mode argv...`` in a fresh process (environment ``env``, default
    this process's) and returns the JSON of its last ``RESULT {...}`` line, with the worker's
    wall time and the 1-minute load average before and after (``{"error": ...}`` on failure or
    timeout)."""
    cmd = [sys.executable, os.path.abspath(script), "--_worker", mode] + list(argv)
    load0 = os.getloadavg()[0]
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:.0f} s"}
    wall = time.perf_counter() - t
    lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        return {"error": (p.stderr or p.stdout)[-2000:], "worker_wall_s": wall}
    res = json.loads(lines[-1][len("RESULT ") :])
    res["worker_wall_s"] = wall
    res["loadavg_1min_before_after"] = [load0, os.getloadavg()[0]]
    return res


def ints(v: str) -> list:
    """A comma-separated list of integers (an argparse ``type``; ``''`` is the empty list)."""
    return [int(x) for x in v.split(",") if x]


def fmt_t(s):
    """Seconds as ``us`` / ``ms`` / ``s`` text (``-`` for None or NaN)."""
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.0f} us"
    if s < 1.0:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def result_doc(name: str, method: str, **body) -> dict:
    """The head of a benchmark's JSON (name, local date, JAX version, core count, method text)
    followed by ``body``."""
    import datetime

    import jax

    doc = {
        "benchmark": name,
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "jax": jax.__version__,
        "cpu_count": os.cpu_count(),
        "method": method,
    }
    doc.update(body)
    return doc


def write_json(path: str, doc: dict) -> None:
    """Writes ``doc`` to ``path`` (folders made as needed) and says so."""
    import json

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
    print(f"wrote {path}")
