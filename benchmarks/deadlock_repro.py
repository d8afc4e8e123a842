"""XLA:CPU deadlock: concurrent batched LAPACK Cholesky custom calls hang forever (jaxlib 0.10.2).

Symptom: a jitted function with >= 2 *independent* batched ``jnp.linalg.cholesky`` calls
(lapack_dpotrf_ffi / spotrf) sometimes never returns: 0% CPU, the main thread waits in
``tsl::BlockUntilReady``. gdb (caught in the original program, a jaxhc clustering loop) shows
both threads of the intra-op pool ("tf_XLAEigen", one per CPU; 2 here) inside
``lapack_dpotrf_ffi -> jax::CholeskyFactorization -> jax::ParallelBatchMap ->
absl::BlockingCounter::Wait``, reached from ``xla::cpu::ThunkExecutor`` (one via
``SplitReadyQueue``), while all other pool threads idle in ``WaitForWork``. So each call
seems to block a pool worker waiting for batch chunks it queued on that same pool; once
every worker is blocked this way, nothing is left to run the chunks.

Measured on a 2-CPU Linux x86-64 box, CPU backend, fresh processes, defaults below
(k=2, batch=190, dim=30, 100 calls, float64; a normal attempt takes 3-6 s):
  jax/jaxlib 0.10.2: 6/12 and 4/8 hung (1/12 to 3/12 with 20 calls in earlier versions of this
                     script; the rate depends on the machine load)
  jax/jaxlib 0.9.2:  0/12 hung (also 0/12 with 20 calls)

Conditions (0.10.2, 10-12 fresh runs each):
  * k=1, one Cholesky call per computation: 0/10. This explains why a single batched Cholesky
    inside a fori_loop, or lax.map plus a nested while_loop, never hung in our tests.
  * small batches or matrices, presumably below the threshold where ParallelBatchMap splits
    the batch: batch=1 0/12, batch=16 0/10, dim=4 0/12, dim=10 0/10 (batch=190, dim=30 hangs).
  * float32 hangs too: 5/12.
  * Loops are not needed. A Python loop of jitted calls hangs, and so does a single call (3/6
    with one call after eager setup work). The same two calls inside lax.fori_loop also
    hang, and more concurrent calls (k=3, 4) hang as well.
  * Untested on machines with more CPUs: the pool there has more threads, so probably
    k >= #CPUs is needed (the default), or pin the process with ``taskset -c 0,1``.
    Under ``taskset -c 0`` (presumably a 1-thread pool), k=1 with one call did not hang (0/3).

Run:  python deadlock_repro.py                         # one attempt (hangs or prints "ok")
      python deadlock_repro.py --runs 12 --timeout 20  # 12 fresh subprocesses; prints hangs/12
Options: --k, --batch, --dim, --calls, --f32 (passed on to the subprocesses).
"""

import argparse
import os
import subprocess
import sys
import time


def n_cpus():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def attempt(a):
    import jax

    if not a.f32:
        jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    m = jax.random.normal(jax.random.key(0), (a.k, a.batch, a.dim, a.dim))
    A = m @ jnp.swapaxes(m, -1, -2) + a.dim * jnp.eye(a.dim)  # k x batch SPD matrices

    def logdet(x):  # batched log-determinant through the LAPACK potrf custom call
        return 2.0 * jnp.log(jnp.diagonal(jnp.linalg.cholesky(x), axis1=-2, axis2=-1)).sum()

    # k independent batched Cholesky factorisations: no data dependence between them, so
    # XLA:CPU's thunk executor may run them at the same time on different pool threads.
    f = jax.jit(lambda A, t: sum(logdet(A[i] + t * jnp.eye(a.dim)) for i in range(a.k)))
    t0 = time.time()
    for t in range(a.calls):
        out = float(f(A, 1e-3 * t))
    print(f"ok {out:.6g} in {time.time() - t0:.2f}s, jax {jax.__version__}", flush=True)


def many(a):
    import jax  # only for the version; the attempts run in fresh subprocesses

    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--k",
        str(a.k),
        "--batch",
        str(a.batch),
        "--dim",
        str(a.dim),
        "--calls",
        str(a.calls),
    ] + (["--f32"] if a.f32 else [])
    hangs = 0
    for r in range(a.runs):
        t0 = time.time()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
            status = "ok" if p.returncode == 0 else f"error rc={p.returncode}: {p.stderr.strip()[-300:]}"
        except subprocess.TimeoutExpired:
            hangs += 1
            status = "HANG"
        print(f"run {r + 1}/{a.runs}: {status} ({time.time() - t0:.1f}s)", flush=True)
    print(
        f"hangs {hangs}/{a.runs}  jax {jax.__version__}  (k={a.k} batch={a.batch} dim={a.dim} "
        f"calls={a.calls} {'float32' if a.f32 else 'float64'}, {n_cpus()} CPUs)"
    )


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=0, help="launch this many fresh subprocesses and count hangs")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds after which a subprocess counts as hung")
    p.add_argument("--k", type=int, default=max(2, n_cpus()), help="independent Cholesky calls (>= #CPUs)")
    p.add_argument("--batch", type=int, default=190, help="matrices per Cholesky call")
    p.add_argument("--dim", type=int, default=30, help="matrix size")
    p.add_argument("--calls", type=int, default=100, help="calls of the jitted function per attempt")
    p.add_argument("--f32", action="store_true", help="float32 instead of float64")
    a = p.parse_args()
    many(a) if a.runs else attempt(a)
