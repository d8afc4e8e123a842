"""JAX's multi-controller runtime (issue 24, part 1): two CPU processes on 127.0.0.1 after
`jax.distributed.initialize`, each with its own jets: `solve_batch` solves the local jets on
the local devices (given as host arrays or as a global `jax.Array`), `fit_lambda` sums its
objective over the processes, so the fit equals the single-process fit on all jets, and
`sample_lambda` runs the same NUTS chain on every process with the likelihood of all jets."""

import json
import os
import socket
import subprocess
import sys

import jax
import numpy as np

from jaxhc import fit_lambda, sample_lambda, trellis
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
from jaxhc import fit_lambda, sample_lambda, trellis
from jaxhc.models import ginkgo
params = ginkgo.GinkgoParams(lam=2.0, t_cut=16.0, root_mass2=400.0)
sim = ginkgo.simulate(jax.random.PRNGKey(0), params, 60)
lp, nl = np.asarray(sim.leaves), np.asarray(sim.n_leaves)
mine = slice(0, 25) if pid == 0 else slice(25, 60)  # unequal shares
fit = fit_lambda(lp[mine], nl[mine], 16.0, progress_bar=False)
sol = trellis.solve_batch(params.energy("exact"), lp[mine], nl[mine])
post = sample_lambda(jax.random.PRNGKey(3), lp[mine], nl[mine], 16.0, num_warmup=60, num_samples=60, progress_bar=False)
# a global jax.Array (half the jets on each process): each process solves its own rows
from jax.sharding import Mesh, NamedSharding, PartitionSpec
shard = NamedSharding(Mesh(np.array(jax.devices()), ("p",)), PartitionSpec("p"))
half = slice(30 * pid, 30 * pid + 30)
glp = jax.make_array_from_process_local_data(shard, lp[half])
gnl = jax.make_array_from_process_local_data(shard, nl[half])
gsol = trellis.solve_batch(params.energy("exact"), glp, gnl)
every = trellis.gather_solutions(sol)  # both processes' jets (25 + 35), on each process
from jaxhc._internal import processes
kv = processes._kv_client() is not None and processes._SEQ[0] > 0  # NUTS exchanged through the host store
with open(out, "w") as f:
    json.dump({"lam": fit.lam, "stderr": fit.stderr, "grad": fit.grad, "log_z": np.asarray(sol.log_z).tolist(),
               "processes": jax.process_count(), "samples": np.asarray(post.samples).tolist(),
               "global_shape": list(glp.shape), "global_log_z": np.asarray(gsol.log_z).tolist(),
               "gathered_log_z": every.log_z.tolist(), "kv": kv, "gathered_children": every.map_children.tolist()}, f)
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
    # gathered: every process holds all 60 jets' answers, in process order
    full = trellis.solve_batch(params.energy("exact"), lp, nl)
    for g in got:
        np.testing.assert_allclose(g["gathered_log_z"], ref, rtol=1e-12)
        np.testing.assert_array_equal(g["gathered_children"], full.map_children)
    # a global jax.Array as input: every process solved its own 30 rows
    assert [g["global_shape"] for g in got] == [[60, lp.shape[1], 4]] * 2
    np.testing.assert_allclose(got[0]["global_log_z"] + got[1]["global_log_z"], ref, rtol=1e-12)
    # NUTS over lambda with the likelihood summed over both processes: the same chain on
    # both, and the single-process chain on all 60 jets (the sums differ by rounding only)
    assert got[0]["samples"] == got[1]["samples"]
    assert all(g["kv"] for g in got)
    post = sample_lambda(jax.random.PRNGKey(3), lp, nl, 16.0, num_warmup=60, num_samples=60, progress_bar=False)
    np.testing.assert_allclose(got[0]["samples"], np.asarray(post.samples), rtol=1e-8)


def test_one_process_helpers_are_identities():
    """With one process: `sum_over_processes` is the identity under jit, vmap and forward
    mode, `process_local` returns its argument, and `lambda_model(across_processes=True)`
    has the default model's density."""
    import jax.numpy as jnp
    from numpyro.infer.util import log_density

    from jaxhc._internal.processes import allgather_sum, process_local, sum_over_processes
    from jaxhc.models.ginkgo_lambda import lambda_model, prepare_jets

    f = jax.jit(lambda x: sum_over_processes(jnp.sin(x)))
    x = jnp.array([0.3, 1.2])
    np.testing.assert_allclose(f(x), np.sin(x))
    np.testing.assert_allclose(jax.jacfwd(f)(x), np.diag(np.cos(x)))
    np.testing.assert_allclose(jax.vmap(f)(x[:, None])[:, 0], np.sin(x))
    np.testing.assert_array_equal(allgather_sum(np.arange(3)), np.arange(3))
    a = jnp.arange(4.0)
    assert process_local(a, "a") is a
    params = ginkgo.GinkgoParams(lam=2.0, t_cut=16.0)
    sim = ginkgo.simulate(jax.random.PRNGKey(0), params, 6)
    batch = prepare_jets(np.asarray(sim.leaves), np.asarray(sim.n_leaves), 16.0)
    lp = [
        log_density(lambda_model, (batch, None, 16.0), {"across_processes": flag}, {"lam": 1.7})[0]
        for flag in (False, True)
    ]
    assert float(lp[0]) == float(lp[1])
