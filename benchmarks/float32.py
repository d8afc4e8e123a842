"""What holds without ``jax_enable_x64``: float32 against float64 on the main computations.

Usage::

    python benchmarks/float32.py            # table + benchmarks/results/float32.json
    python benchmarks/float32.py --quick    # fewer cases, no JSON

Each case runs in two fresh subprocesses, one with ``jax_enable_x64`` on and one with it
off (JAX's default, float32), and compares the outputs: relative error of the log evidence /
log partition function, and whether the tree (or MAP tree) is the same. ``tests/test_float32.py``
checks the CI-sized part against the tolerances documented in docs/guides/versions-and-cache.md
("Precision and long runs").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Each case: code that defines ``out`` (a dict of floats / lists) from data it builds itself.
CASES = {
    "bhc_niw_iris": """
from jaxhc.datasets import load_iris
from jaxhc.components import NormalInverseWishart
X, _ = load_iris()
r = jaxhc.bhc(X, NormalInverseWishart.from_data(X))
out = dict(value=float(r.log_evidence), bound=float(r.dpm_lower_bound), tree=r.tree.children.tolist(),
           cut=r.cut(0.5).tolist())
""",
    "bhc_normalgamma_wine": """
from jaxhc.datasets import load_wine
from jaxhc.components import NormalGamma
X, _ = load_wine()
r = jaxhc.bhc(X, NormalGamma.from_data(X))
out = dict(value=float(r.log_evidence), bound=float(r.dpm_lower_bound), tree=r.tree.children.tolist(),
           cut=r.cut(0.5).tolist())
""",
    "bhc_betabernoulli_digits": """
from jaxhc.datasets import load_digits_binary
from jaxhc.components import BetaBernoulli
X, _ = load_digits_binary(classes=(0, 2, 4), per_class=30, key_or_seed=0)
r = jaxhc.bhc(X, BetaBernoulli(np.ones(X.shape[1]), np.ones(X.shape[1])))
out = dict(value=float(r.log_evidence), bound=float(r.dpm_lower_bound), tree=r.tree.children.tolist(),
           cut=r.cut(0.5).tolist())
""",
    "bhc_niw_digits": """
from jaxhc.datasets import load_digits_binary
from jaxhc.components import NormalInverseWishart
X, _ = load_digits_binary(classes=(0, 2, 4), per_class=30, key_or_seed=0)
X = X[:, X.std(0) > 0] + 0.0
r = jaxhc.bhc(X, NormalInverseWishart.from_data(X))
out = dict(value=float(r.log_evidence), bound=float(r.dpm_lower_bound), tree=r.tree.children.tolist(),
           cut=r.cut(0.5).tolist())
""",
    "bhc_niw_mixture_n1000": """
rng = np.random.default_rng(0)
X = np.concatenate([rng.normal(size=(250, 2)) + c for c in ((0, 0), (6, 0), (0, 6), (6, 6))])
from jaxhc.components import NormalInverseWishart
r = jaxhc.bhc(X, NormalInverseWishart.from_data(X))
out = dict(value=float(r.log_evidence), bound=float(r.dpm_lower_bound), tree=r.tree.children.tolist(),
           cut=r.cut(0.5).tolist())
""",
    "trellis_ginkgo_reference": """
import json
from jaxhc import trellis
with open(os.path.join(ROOT, "tests", "data", "ginkgo_jets_reference.json")) as f:
    jets = json.load(f)
jet = max((j for j in jets if j["n_leaves"] <= 9), key=lambda j: j["n_leaves"])
e = trellis.GinkgoEnergy(lam=jet["lam"], t_cut=jet["t_cut"])
s = trellis.solve(e, np.asarray(jet["leaves"]))
out = dict(value=float(s.log_z), map=float(s.map_log_phi), tree=np.asarray(s.map_tree.children).tolist())
""",
    "trellis_ginkgo_generator_n11": """
import json
from jaxhc import trellis
with open(os.path.join(ROOT, "tests", "data", "ginkgo_generator_jets_lam2.0.json")) as f:
    jets = json.load(f)
jet = max(jets, key=lambda j: len(j["leaves"]))
e = trellis.GinkgoEnergy(lam=jet["lam"], t_cut=jet["t_cut"])
s = trellis.solve(e, np.asarray(jet["leaves"]))
out = dict(value=float(s.log_z), map=float(s.map_log_phi), tree=np.asarray(s.map_tree.children).tolist(),
           n=len(jet["leaves"]))
""",
    "trellis_dasgupta": """
from jaxhc import trellis
rng = np.random.default_rng(0)
X = rng.normal(size=(10, 3))
W = np.exp(-((X[:, None] - X[None]) ** 2).sum(-1))
e = trellis.DasguptaEnergy(1.0)
s = trellis.solve(e, W)
out = dict(value=float(s.log_z), map=float(s.map_log_phi), tree=np.asarray(s.map_tree.children).tolist())
""",
}

QUICK = ("bhc_niw_iris", "trellis_ginkgo_reference")

_PRELUDE = """
import os, sys, json, warnings
ROOT = {root!r}
import jax
jax.config.update("jax_enable_x64", {x64})
import numpy as np
import jaxhc
jaxhc.enable_compilation_cache()  # values, not times: programs may come from the disk cache
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
{body}
        out["error"] = None
    except Exception as e:
        out = dict(error=type(e).__name__ + ": " + str(e)[:300])
out["warnings"] = sorted({{str(w.message)[:200] for w in caught}})
print("JSON" + json.dumps(out))
"""


def run_case(name: str, x64: bool, timeout: float = 900.0) -> dict:
    body = "\n".join("        " + line for line in CASES[name].strip().splitlines())
    code = _PRELUDE.format(root=ROOT, x64=x64, body=body)
    tic = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("JSON")]
    if not line:
        return dict(error=f"exit {p.returncode}: {p.stderr[-500:]}", seconds=time.perf_counter() - tic)
    out = json.loads(line[-1][4:])
    out["seconds"] = time.perf_counter() - tic
    return out


def compare(name: str) -> dict:
    f64, f32 = run_case(name, True), run_case(name, False)
    row = dict(case=name, f64=f64, f32=f32)
    if f64.get("error") or f32.get("error"):
        row.update(rel_err=None, same_tree=None)
        return row
    row["rel_err"] = abs(f32["value"] - f64["value"]) / max(abs(f64["value"]), 1e-300)
    row["same_tree"] = f32["tree"] == f64["tree"]
    if "cut" in f64:
        from sklearn.metrics import adjusted_rand_score

        row["cut_ari"] = float(adjusted_rand_score(f64["cut"], f32["cut"]))
    if "map" in f64:
        row["map_rel_err"] = abs(f32["map"] - f64["map"]) / max(abs(f64["map"]), 1e-300)
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "float32.json"))
    args = ap.parse_args(argv)
    names = QUICK if args.quick else tuple(CASES)
    rows = []
    print(
        f"{'case':28s} {'float64 value':>16s} {'float32 value':>16s} {'rel err':>9s} {'same tree':>9s} {'cut ARI':>7s}  float32 note"
    )
    for name in names:
        r = compare(name)
        rows.append(r)
        v64 = r["f64"].get("value")
        v32 = r["f32"].get("value")
        note = r["f32"].get("error") or "; ".join(r["f32"].get("warnings", []))[:80]
        fmt = lambda v: f"{v:16.6f}" if isinstance(v, float) else f"{'-':>16s}"
        re_ = f"{r['rel_err']:9.1e}" if r.get("rel_err") is not None else f"{'-':>9s}"
        ari = f"{r['cut_ari']:7.3f}" if r.get("cut_ari") is not None else f"{'-':>7s}"
        print(f"{name:28s} {fmt(v64)} {fmt(v32)} {re_} {str(r.get('same_tree')):>9s} {ari}  {note}", flush=True)
    if not args.quick:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from _harness import machine

        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(
                dict(benchmark="float32", machine=machine(), date=time.strftime("%Y-%m-%dT%H:%M:%S%z"), rows=rows),
                f,
                indent=1,
            )
        print("wrote", args.out)


if __name__ == "__main__":
    main()
