"""Version matrix: hangs and core speed under several Python / JAX versions, side by side.

For each interpreter (an existing venv's python, or ``PYVER:JAXVER`` to make a venv with
that Python and jax/jaxlib pinned), in fresh processes:

* the hang stress test (`stress_hangs.py`): the jax 0.10 reproducer ``--repro-runs``
  times and every other entry point ``--stress-runs`` times;
* greedy BHC at n = 1000 and n = 2000, d = 10 (NIW; the data of `bhc.py`): first call
  (compile + run) and the median of two more calls; the growth exponent
  ``log2(t(2000) / t(1000))`` (about 2 for our O(n^2) loop: a JAX whose in-place loop
  updates copy whole buffers shows up here as about 3);
* the exact trellis at N = 14 (Dasgupta energy, `trellis.py`'s problem): first call and
  median of ``log_partition``, in M splits/s.

Times are ratios to the first interpreter given (the baseline), measured one after the
other on the same machine; run it on an otherwise idle machine.

Usage (from the repository root):

    python benchmarks/version_matrix.py --pythons 3.11:0.9.2,3.11:0.7.2,3.12:0.12.0.1,3.13:0.12.0.1
    python benchmarks/version_matrix.py --pythons /path/venv/bin/python,... --repro-runs 100
    python benchmarks/version_matrix.py --pythons 3.11:0.10.2 --no-timings    # hangs only
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import stress_hangs  # noqa: E402

TIMING = r"""
import json, statistics, time
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
import jaxhc
from jaxhc import trellis

def mixture(n, d, seed):
    rng = np.random.default_rng(seed)
    means = rng.normal(scale=4.0, size=(4, d))
    return means[rng.integers(4, size=n)] + rng.normal(size=(n, d))

def timed(f, repeats):
    t = time.perf_counter(); jax.block_until_ready(f()); first = time.perf_counter() - t
    runs = []
    for _ in range(repeats):
        t = time.perf_counter(); jax.block_until_ready(f()); runs.append(time.perf_counter() - t)
    return first, statistics.median(runs)

out = {}
for n in (1000, 2000):
    X = mixture(n, 10, 1000 * 10 + n)
    comp = jaxhc.NormalInverseWishart.from_data(X)
    first, med = timed(lambda: jaxhc.bhc(X, comp, 1.0, progress_bar=False).log_evidence, 2)
    out[f"bhc_n{n}_first_s"], out[f"bhc_n{n}_s"] = first, med
rng = np.random.default_rng(14)
W = np.triu(rng.random((14, 14)), 1); W = W + W.T
energy = trellis.DasguptaEnergy(1.0)
first, med = timed(lambda: trellis.log_partition(energy, W), 7)
out["trellis_n14_first_s"], out["trellis_n14_s"] = first, med
out["trellis_n14_splits_per_s"] = ((3 ** 14 + 1) // 2 - 2 ** 14) / med
print("RESULT " + json.dumps(out))
"""


def find_python(pyver: str) -> str:
    for cand in (
        shutil.which(f"python{pyver}"),
        *sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{pyver}*/bin/python"))),
    ):
        if cand:
            try:
                subprocess.run([cand, "--version"], check=True, capture_output=True, timeout=30)
                return cand
            except (subprocess.SubprocessError, OSError):
                continue
    raise SystemExit(f"no python{pyver} found (PATH or ~/.pyenv/versions)")


def ensure_venv(spec: str, root: str) -> str:
    """``PYVER:JAXVER`` -> the python of a venv with jaxhc (editable) and that jax/jaxlib."""
    pyver, jaxver = spec.split(":", 1)
    venv = os.path.join(root, f"py{pyver}-jax{jaxver}")
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        print(f"making {venv} ...", flush=True)
        subprocess.run([find_python(pyver), "-m", "venv", venv], check=True)
        subprocess.run(
            [py, "-m", "pip", "install", "-q", "-e", f"{ROOT}[test,jets]", f"jax=={jaxver}", f"jaxlib=={jaxver}"],
            check=True,
        )
    return py


def timings(python: str, timeout: float) -> dict:
    try:
        p = subprocess.run([python, "-c", TIMING], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:.0f} s"}
    lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    if not lines:
        return {"error": (p.stderr or p.stdout).strip().splitlines()[-3:]}
    out = json.loads(lines[-1][7:])
    out["bhc_growth"] = math.log2(out["bhc_n2000_s"] / out["bhc_n1000_s"])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--pythons",
        required=True,
        help="comma-separated: venv pythons or PYVER:JAXVER (a venv is made); the first is the baseline",
    )
    ap.add_argument("--venv-root", default=os.path.expanduser("~/.cache/jaxhc-version-matrix"))
    ap.add_argument("--repro-runs", type=int, default=20, help="fresh runs of the jax 0.10 reproducer")
    ap.add_argument("--stress-runs", type=int, default=3, help="fresh runs of every other entry point")
    ap.add_argument("--timeout", type=float, default=150.0, help="seconds before a stress run counts as hung")
    ap.add_argument("--no-timings", action="store_true")
    ap.add_argument("--no-stress", action="store_true")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "version_matrix.json"), help="JSON ('-': none)")
    args = ap.parse_args(argv)

    rows = []
    for spec in [s.strip() for s in args.pythons.split(",") if s.strip()]:
        py = spec if os.path.sep in spec else ensure_venv(spec, args.venv_root)
        ver = stress_hangs.versions(py)
        print(f"== python {ver.get('python')} jax {ver.get('jax')} ({py})", flush=True)
        row = {"spec": spec, "versions": ver}
        if not args.no_timings:
            row["timings"] = timings(py, 1800)
            print("   timings:", json.dumps(row["timings"]), flush=True)
        if not args.no_stress:
            names = list(stress_hangs.ENTRIES)
            res = stress_hangs.stress(["bhc_repro"], args.repro_runs, args.timeout, py, cache=True)
            if args.stress_runs > 0:
                res.update(
                    stress_hangs.stress(
                        [n for n in names if n != "bhc_repro"], args.stress_runs, args.timeout, py, cache=True
                    )
                )
            row["stress"] = res
        rows.append(row)

    base = rows[0].get("timings", {})
    print()
    print(
        "| Python | jax | reproducer hangs | other entry points: hangs / errors | BHC n=1000 | BHC n=2000 "
        "| growth | vs base | trellis N=14 log Z | Msplits/s | vs base |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        v, t, s = row["versions"], row.get("timings", {}), row.get("stress", {})
        rep = s.get("bhc_repro")
        rep_txt = f"{rep['hang']} / {rep['runs']}" if rep else "-"
        others = [x for k, x in s.items() if k != "bhc_repro"]
        oth_txt = (
            (
                f"{sum(x['hang'] for x in others)} / {sum(x['error'] + x['mismatch'] for x in others)} "
                f"in {sum(x['runs'] for x in others)}"
            )
            if others
            else "-"
        )
        if "bhc_n2000_s" in t:
            rb = t["bhc_n2000_s"] / base["bhc_n2000_s"] if "bhc_n2000_s" in base else float("nan")
            rt = t["trellis_n14_s"] / base["trellis_n14_s"] if "trellis_n14_s" in base else float("nan")
            tim = (
                f"{t['bhc_n1000_s']:.2f} s | {t['bhc_n2000_s']:.2f} s | {t['bhc_growth']:.2f} | {rb:.2f} | "
                f"{t['trellis_n14_s'] * 1e3:.1f} ms | {t['trellis_n14_splits_per_s'] / 1e6:.0f} | {rt:.2f}"
            )
        else:
            tim = " | ".join(["-"] * 7) if not t else f"{t.get('error')} |" + " |" * 6
        print(f"| {v.get('python')} | {v.get('jax')} | {rep_txt} | {oth_txt} | {tim} |")
    if args.out != "-":
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d"), "cores": os.cpu_count(), "rows": rows}, f, indent=1)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
