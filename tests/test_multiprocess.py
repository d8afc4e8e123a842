"""JAX's multi-controller runtime (issue 24, part 1): two CPU processes on 127.0.0.1 after
`jax.distributed.initialize`, each with its own jets: `solve_batch` solves the local jets on
the local devices, and `fit_lambda` sums its objective over the processes, so the fit equals
the single-process fit on all jets."""

import json
import os
import socket
import subprocess
import sys

import jax
import numpy as np

from jaxhc import fit_lambda, trellis
from jaxhc.models import ginkgo

jax.config.update("jax_enable_x64", True)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_WORKER = r"""
import json, sys
import jax
pid, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=pid)
import numpy as np
from jaxhc import fit_lambda, trellis
from jaxhc.models import ginkgo
params = ginkgo.GinkgoParams(lam=2.0, t_cut=16.0, root_mass2=400.0)
sim = ginkgo.simulate(jax.random.PRNGKey(0), params, 60)
lp, nl = np.asarray(sim.leaves), np.asarray(sim.n_leaves)
mine = slice(0, 25) if pid == 0 else slice(25, 60)  # unequal shares
fit = fit_lambda(lp[mine], nl[mine], 16.0, progress_bar=False)
sol = trellis.solve_batch(params.energy("exact"), lp[mine], nl[mine])
with open(out, "w") as f:
    json.dump({"lam": fit.lam, "stderr": fit.stderr, "grad": fit.grad, "log_z": np.asarray(sol.log_z).tolist(),
               "processes": jax.process_count()}, f)
"""


def test_two_processes_solve_locally_and_fit_globally(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    outs = [str(tmp_path / f"p{i}.json") for i in range(2)]
    env = dict(os.environ, JAXHC_NO_COMPILATION_CACHE="1")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(i), str(port), outs[i]],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for i in range(2)
    ]
    errs = []
    try:
        for p in procs:
            _, err = p.communicate(timeout=240)
            errs.append(err.decode(errors="replace")[-3000:])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs), errs
    got = [json.load(open(o)) for o in outs]
    assert [g["processes"] for g in got] == [2, 2]

    params = ginkgo.GinkgoParams(lam=2.0, t_cut=16.0, root_mass2=400.0)
    sim = ginkgo.simulate(jax.random.PRNGKey(0), params, 60)
    lp, nl = np.asarray(sim.leaves), np.asarray(sim.n_leaves)
    one = fit_lambda(lp, nl, 16.0, progress_bar=False)
    for g in got:  # every process ends with the single-process fit
        np.testing.assert_allclose(g["lam"], one.lam, rtol=1e-10)
        np.testing.assert_allclose(g["stderr"], one.stderr, rtol=1e-8)
        np.testing.assert_allclose(g["grad"], one.grad, atol=1e-8)
    ref = trellis.solve_batch(params.energy("exact"), lp, nl).log_z
    np.testing.assert_allclose(got[0]["log_z"] + got[1]["log_z"], ref, rtol=1e-12)
