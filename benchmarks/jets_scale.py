"""Jets at scale (issue 24, part 4): the exact trellis (log Z + MAP, compact results) on many
Ginkgo jets of 5..12 leaves, one process against a Dask cluster of 2 workers x 1 thread and
against 2 JAX processes (`jax.distributed`), plus a partitioned run killed with SIGKILL and
resumed. Prints a table and writes JSON (default ``benchmarks/results/jets_scale.json``).

Usage: ``python benchmarks/jets_scale.py [--jets 100000] [--partition 5000]``
(``--quick``: 10 000 jets). Needs the hep and dask extras.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import result_doc, write_json  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_OUT = os.path.join(HERE, "results", "jets_scale.json")
TARGETS = {"dask_throughput_ratio_min": 0.9}


def _setup():
    import jax

    jax.config.update("jax_enable_x64", True)


def _energy():
    from jaxhc.models import ginkgo

    return ginkgo.GinkgoParams(lam=2.0, t_cut=16.0).energy("exact")


def _load(path):
    import numpy as np

    d = np.load(path)
    return d["lp"], d["nl"]


def one_process(path, K):
    """Steady-state throughput: partitions of K jets through solve_batch (the first partition,
    with compilation, timed apart)."""
    import numpy as np
    from jax import monitoring

    from jaxhc import trellis

    count = [0]
    monitoring.register_event_duration_secs_listener(
        lambda ev, d, **kw: count.__setitem__(0, count[0] + (ev == "/jax/core/compile/backend_compile_duration"))
    )
    lp, nl = _load(path)
    e = _energy()
    t0 = time.perf_counter()
    trellis.solve_batch(e, lp[:K], nl[:K])
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    logz = [np.zeros(0)]
    for a in range(K, len(nl), K):
        logz.append(trellis.solve_batch(e, lp[a : a + K], nl[a : a + K]).log_z)
    rest = time.perf_counter() - t0
    return {
        "first_partition_s": first,
        "steady_jets_per_s": (len(nl) - K) / rest,
        "total_s": first + rest,
        "compiles": count[0],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def on_dask(path, K):
    import distributed
    import numpy as np

    from jaxhc.jets import dask as jd

    lp, nl = _load(path)
    e = _energy()
    parts = [(lp[a : a + K], nl[a : a + K]) for a in range(0, len(nl), K)]
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cl,
        distributed.Client(cl) as c,
    ):
        # the workers share one persistent compilation cache, empty at the start (what the
        # plugin does by default, in a fresh folder here so that the run is cold)
        cache = tempfile.mkdtemp(prefix="jaxhc-scale-cache-")
        t0 = time.perf_counter()
        jd.solve_on_dask(c, e, parts[:2], n_max=12, cache_dir=cache)  # one warm-up partition per worker
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        recs = jd.solve_on_dask(c, e, parts[2:], n_max=12, register_plugin=False)
        rest = time.perf_counter() - t0
        compiles = jd.worker_compile_counts(c)
        rss = c.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    n_rest = sum(len(p[1]) for p in parts[2:])
    assert sum(len(r) for r in recs) == n_rest
    return {
        "warmup_s": first,
        "steady_jets_per_s": n_rest / rest,
        "compiles_per_worker": list(compiles.values()),
        "peak_rss_mb_per_worker": list(rss.values()),
        "distinct_sizes": int(len(np.unique(nl))),
    }


_JAXPROC = r"""
import json, sys, time
import jax
pid, port, path, K, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=pid)
import numpy as np
from jaxhc import trellis
from jaxhc.models import ginkgo
from jax.experimental import multihost_utils
d = np.load(path); lp, nl = d["lp"], d["nl"]
mine = slice(pid * len(nl) // 2, (pid + 1) * len(nl) // 2)
lp, nl = lp[mine], nl[mine]
e = ginkgo.GinkgoParams(lam=2.0, t_cut=16.0).energy("exact")
trellis.solve_batch(e, lp[:K], nl[:K])
multihost_utils.sync_global_devices("warm")
t0 = time.perf_counter()
for a in range(K, len(nl), K):
    trellis.solve_batch(e, lp[a:a + K], nl[a:a + K])
multihost_utils.sync_global_devices("done")
json.dump({"jets": int(len(nl) - K), "s": time.perf_counter() - t0}, open(out, "w"))
"""


def jax_processes(path, K):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    d = tempfile.mkdtemp()
    outs = [os.path.join(d, f"{i}.json") for i in range(2)]
    ps = [
        subprocess.Popen([sys.executable, "-c", _JAXPROC, str(i), str(port), path, str(K), outs[i]], cwd=ROOT)
        for i in range(2)
    ]
    for p in ps:
        p.wait(timeout=3600)
    r = [json.load(open(o)) for o in outs]
    return {"steady_jets_per_s": sum(x["jets"] for x in r) / max(x["s"] for x in r)}


def killed_and_resumed(path, K):
    """A partitioned CLI-equivalent run killed with SIGKILL half way and resumed, against an
    uninterrupted run: lost, duplicated and differing jets."""
    import awkward as ak

    from jaxhc.jets import runs

    d = tempfile.mkdtemp()
    full, cut = os.path.join(d, "full"), os.path.join(d, "cut")
    code = (
        "import sys, jax, numpy as np; jax.config.update('jax_enable_x64', True)\n"
        "from jaxhc.jets import runs\nfrom jaxhc.models import ginkgo\n"
        "d = np.load(sys.argv[1])\n"
        "runs.solve_partitions(ginkgo.GinkgoParams(lam=2.0, t_cut=16.0).energy('exact'), d['lp'], sys.argv[2], "
        "d['nl'], partition_size=int(sys.argv[3]), resume=sys.argv[4] == '1', progress_bar=False)\n"
    )
    run = lambda out, resume: [sys.executable, "-c", code, path, out, str(K), "1" if resume else "0"]
    subprocess.run(run(full, False), check=True, cwd=ROOT)
    p = subprocess.Popen(run(cut, False), cwd=ROOT)
    man = os.path.join(cut, runs.MANIFEST)
    n_parts = None
    while p.poll() is None:
        if os.path.exists(man):
            try:
                m = json.load(open(man))
                n_parts = m["n_partitions"]
                if len(m["done"]) >= n_parts // 2:
                    break
            except (json.JSONDecodeError, OSError):
                pass
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait()
    killed_at = len(json.load(open(man))["done"])
    subprocess.run(run(cut, True), check=True, cwd=ROOT)
    a, b = runs.read_partitions(full), runs.read_partitions(cut)
    ids = ak.to_numpy(b.jet_id)
    return {
        "partitions": n_parts,
        "killed_after_partitions": killed_at,
        "lost": int(len(set(ak.to_numpy(a.jet_id).tolist()) - set(ids.tolist()))),
        "duplicated": int(len(ids) - len(set(ids.tolist()))),
        "identical": bool(all(ak.to_list(a[f]) == ak.to_list(b[f]) for f in ak.fields(a))),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jets", type=int, default=None, help="default 100000 (10000 with --quick)")
    ap.add_argument("--partition", type=int, default=5000)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--_worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--_data", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    n = args.jets or (10_000 if args.quick else 100_000)
    K = args.partition
    if args._worker:
        _setup()
        fn = {"one": one_process, "dask": on_dask, "resume": killed_and_resumed}[args._worker]
        print("RESULT " + json.dumps(fn(args._data, K)), flush=True)
        return 0
    _setup()
    import jax
    import numpy as np

    from jaxhc.models import ginkgo

    t0 = time.perf_counter()
    sim = ginkgo.simulate(
        jax.random.PRNGKey(0), ginkgo.GinkgoParams(lam=2.0, t_cut=16.0), n, min_leaves=5, max_leaves=12
    )
    lp, nl = np.asarray(sim.leaves, np.float64), np.asarray(sim.n_leaves, np.int64)
    path = os.path.join(tempfile.mkdtemp(), "jets.npz")
    np.savez(path, lp=lp, nl=nl)
    print(f"{n} jets of 5..12 leaves simulated in {time.perf_counter() - t0:.1f} s; partitions of {K}", flush=True)

    def worker(mode):
        p = subprocess.run(
            [sys.executable, __file__, "--_worker", mode, "--_data", path, "--partition", str(K)],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
        if p.returncode or not lines:
            return {"error": p.stderr[-2000:]}
        return json.loads(lines[-1][7:])

    res = {"jets": n, "partition": K, "sizes": np.bincount(nl, minlength=13)[5:].tolist()}
    res["one_process"] = worker("one")
    print("one process:", res["one_process"], flush=True)
    res["dask_2x1"] = worker("dask")
    print("dask 2 workers x 1 thread:", res["dask_2x1"], flush=True)
    res["jax_2_processes"] = jax_processes(path, K)
    print("2 JAX processes:", res["jax_2_processes"], flush=True)
    res["killed_and_resumed"] = worker("resume")
    print("killed and resumed:", res["killed_and_resumed"], flush=True)
    one = res["one_process"].get("steady_jets_per_s")
    dk = res["dask_2x1"].get("steady_jets_per_s")
    if one and dk:
        res["dask_over_one_process"] = dk / one
        print(f"Dask / one process throughput: {dk / one:.2f} (target >= {TARGETS['dask_throughput_ratio_min']})")
    method = (
        "Ginkgo jets (lam 2, t_cut 16, exact likelihood), solve_batch compact (log Z + MAP trees) in partitions; "
        "steady state = after one partition per process/worker; 2 cores; compiles by jax.monitoring; "
        "peak RSS by ru_maxrss per worker; resume: jaxhc.jets.runs.solve_partitions killed with SIGKILL after "
        "half its partitions, then resumed, compared with an uninterrupted run"
    )
    write_json(args.out or DEFAULT_OUT, result_doc("jets_scale", method, targets=TARGETS, **res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
