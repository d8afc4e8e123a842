"""What holds without ``jax_enable_x64`` (docs/guides/versions-and-cache.md, "Precision and
long runs"; `benchmarks/float32.py` has the full table): in float32 the BHC log evidence and
the exact trellis log Z agree with float64 to 1e-5 relative (the cluster marginals to 2e-4),
and the trees and flat cuts are the same on continuous data."""

import json
import os
import subprocess
import sys

import jax
import numpy as np

import jaxhc
from jaxhc import trellis
from jaxhc.components import NormalInverseWishart
from jaxhc.datasets import load_iris

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_SCRIPT = r"""
import json, os, sys
import jax
import numpy as np
import jaxhc
from jaxhc import trellis
from jaxhc.components import NormalInverseWishart
from jaxhc.datasets import load_iris
assert not jax.config.jax_enable_x64
X = load_iris()[0][::3]
r = jaxhc.bhc(X, NormalInverseWishart.from_data(X))
jet = json.loads(sys.argv[1])
s = trellis.solve(trellis.GinkgoEnergy(lam=jet["lam"], t_cut=jet["t_cut"]), np.asarray(jet["leaves"]))
print("JSON" + json.dumps(dict(
    dtype=str(r.log_evidence.dtype), bhc=float(r.log_evidence), bhc_tree=r.tree.children.tolist(),
    bhc_cut=r.cut(0.5).tolist(), log_z=float(s.log_z), map=float(s.map_log_phi),
    map_tree=np.asarray(s.map_tree.children).tolist(), marg=np.exp(np.asarray(s.log_marginals)).tolist())))
"""


def _jet():
    with open(os.path.join(ROOT, "tests", "data", "ginkgo_jets_reference.json")) as f:
        jets = json.load(f)
    return max((j for j in jets if j["n_leaves"] <= 8), key=lambda j: j["n_leaves"])


def test_float32_agrees_with_float64_to_1e_5():
    assert jax.config.jax_enable_x64  # this process: the float64 reference
    jet = _jet()
    X = load_iris()[0][::3]
    r = jaxhc.bhc(X, NormalInverseWishart.from_data(X))
    s = trellis.solve(trellis.GinkgoEnergy(lam=jet["lam"], t_cut=jet["t_cut"]), np.asarray(jet["leaves"]))
    env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
    p = subprocess.run(
        [sys.executable, "-c", _SCRIPT, json.dumps(jet)], capture_output=True, text=True, timeout=600, cwd=ROOT, env=env
    )
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("JSON")]
    assert lines, p.stderr[-2000:]
    f32 = json.loads(lines[-1][4:])
    assert f32["dtype"] == "float32"
    np.testing.assert_allclose(f32["bhc"], float(r.log_evidence), rtol=1e-5)
    assert f32["bhc_tree"] == r.tree.children.tolist()
    np.testing.assert_array_equal(f32["bhc_cut"], r.cut(0.5))
    np.testing.assert_allclose(f32["log_z"], float(s.log_z), rtol=1e-5)
    np.testing.assert_allclose(f32["map"], float(s.map_log_phi), rtol=1e-5)
    assert f32["map_tree"] == np.asarray(s.map_tree.children).tolist()
    # the cluster marginals (float32: the push outside pass, floor e^-45): float32 rounding of
    # log values of tens leaves ~5e-5 here, in the log-space pull as much (4e-7 apart)
    np.testing.assert_allclose(f32["marg"], np.exp(np.asarray(s.log_marginals)), rtol=0, atol=2e-4)
