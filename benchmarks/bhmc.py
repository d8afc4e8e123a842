"""Time per sweep of BHMC's MH sampler (Huang et al., Algorithm 2) against N, and against a
pure-NumPy per-point reference of the same sweep.

Usage::

    python benchmarks/bhmc.py                 # full: N in 500..5000, D = 10, L = 4, writes JSON (~4-6 min)
    python benchmarks/bhmc.py --quick         # smoke test: N in {200, 400}, fewer sweeps, no JSON
    python benchmarks/bhmc.py --sizes 1000,2000 --max-nodes 256 --out /tmp/bhmc.json

Everything runs in one process, float64 (``jax_enable_x64``), on ``jax.devices()[0]``.

Method (recorded in the JSON under ``"method"``):

* **Data.** ``N`` points in ``D = 10`` dimensions from 12 spherical Gaussian clusters
  arranged in a two-level hierarchy: 4 super-cluster means ``~ N(0, I)``, 3 sub-cluster
  means per super-cluster ``~ N(super, 0.3^2 I)``, points ``~ N(sub, 0.15^2 I)``, equal
  cluster probabilities (numpy ``default_rng(N)``). Model: ``depth L = 4``,
  ``H = N(0, I)`` (``make_config(X)``), ``sigma2 = 0.15^2`` (the true within-cluster
  variance), ``alpha = 0.5, gamma0 = 1, gamma = 0.5`` (the ``bhmc`` defaults), no
  hyperparameter sampling; capacities ``--max-nodes`` (1024) and ``--max-components``
  (128), the ``bhmc`` defaults at these N.
* **jaxhc.** ``bhmc_init`` then ``bhmc_step`` with keys ``fold_in(key, t)`` (``--path-update
  mh``, the default here: Algorithm 2 with Eq. 3-4; ``gibbs``: the exact block Gibbs step and
  table-count weights that ``jaxhc.bhmc`` uses by default). *Compile* = wall
  time of the first sweep minus the median sweep time (the first sweep traces and compiles
  ``_sweep_jit`` for this ``N``, then runs). ``--warmup`` (5) further sweeps let the tree grow,
  then *sweep* = median wall time of ``--repeats`` (7) sweeps, each followed by
  ``block_until_ready`` on the new state (*sweep cpu* = median process CPU time of the same
  sweeps, less sensitive to other jobs on a shared machine). Nodes / components in use and the path acceptance
  rate are read from the last sweep's ``info``. *point loop* = median time of the sweep's
  per-point loop alone (``_point_update`` over a random permutation, jitted separately, from
  the final state; ``--repeats`` calls); sweep - point loop is the end-of-sweep work
  (``update_weights``, ``update_theta``, log likelihood).
* **Slope.** Least-squares slope of ``log(sweep time)`` against ``log N`` over all sizes
  (and of the point loop). The paper's average-case bound is ``O(N log N)``, a slope of
  about 1.1 at these N.
* **NumPy reference** (written below, ``numpy_sweep``): the same sweep as a per-point
  Python loop over NumPy arrays, on a copy of the jaxhc state after the timed sweeps (same
  tree, same capacities). Per point: remove it from its path, propose a path by the nCRP over
  the other points' counts (children found with one vectorised mask per level), draw
  ``beta ~ DP(gamma, beta_parent)`` for new nodes (Dirichlet by log-gamma draws, small shapes
  via ``log Gamma(a + 1) + log(U) / a``), MH acceptance with the Eq. 1 mixture likelihood over
  the live components, then Gibbs ``c_n`` by Eq. 2. It does **not** create new components: a
  draw of ``beta*`` in Eq. 2 keeps the old ``c_n`` (counted as ``new_component_skipped``).
  After the loop it updates ``B`` (Eq. 3-4, active nodes only, level by level) and
  ``theta`` (Eq. 5). Timed as the median of ``--ref-repeats`` (3) sweeps at
  ``--ref-sizes`` (500, 1000) and at 2000 if the 1000-point sweep took under 15 s.
  ratio = jaxhc sweep / NumPy sweep (< 1: jaxhc faster); the per-point loops alone are also
  compared (jaxhc point loop / NumPy point loop).

The target (from the issue): one sweep over N = 2000 in <= 2 s on a 2-core CPU after
compilation.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import block, fmt_t, ints, machine  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "bhmc.json")
TARGETS = {"sweep_n2000_s": 2.0}
HYPER = dict(alpha=0.5, gamma0=1.0, gamma=0.5, sigma2=0.15**2)


def make_data(N, D, seed):
    """12 Gaussian clusters in a 4 x 3 hierarchy (see the module docstring)."""
    r = np.random.default_rng(seed)
    sup = r.normal(0.0, 1.0, (4, D))
    sub = (sup[:, None, :] + r.normal(0.0, 0.3, (4, 3, D))).reshape(12, D)
    z = r.integers(0, 12, N)
    return sub[z] + r.normal(0.0, 0.15, (N, D)), z


# ------------------------------------------------------------------------------------------
# NumPy reference of one sweep
# ------------------------------------------------------------------------------------------
def _logsumexp(a):
    m = np.max(a)
    if not np.isfinite(m):
        return m
    return m + np.log(np.sum(np.exp(a - m)))


def _categorical(rng, logits):
    p = np.exp(logits - np.max(logits))
    c = np.cumsum(p)
    return min(int(np.searchsorted(c, rng.random() * c[-1], side="right")), len(logits) - 1)


def _loggamma(rng, a):
    """``log g`` for ``g ~ Gamma(a, 1)`` (array ``a > 0``), stable for tiny ``a``."""
    small = a < 1.0
    g = np.log(rng.gamma(np.where(small, a + 1.0, a)))
    with np.errstate(over="ignore", divide="ignore"):  # a ~ 1e-300: log w = -inf (weight 0)
        return np.where(small, g + np.log(rng.random(a.shape)) / np.where(small, a, 1.0), g)


def _dirichlet_log(rng, log_conc):
    """``log w``, ``w ~ Dir(exp(log_conc))`` over the finite entries (others stay -inf)."""
    out = np.full(log_conc.shape, -np.inf)
    live = np.isfinite(log_conc)
    a = np.exp(log_conc[live])
    ok = a > 0
    g = np.full(a.shape, -np.inf)
    g[ok] = _loggamma(rng, a[ok])
    out[live] = g - _logsumexp(g)
    return out


def _normal_logpdf(x, mean, var):
    return -0.5 * np.sum(np.log(2 * np.pi * var) + (x - mean) ** 2 / var, axis=-1)


def numpy_state(st):
    """A mutable NumPy copy of a `BHMCState`."""
    return {k: np.array(getattr(st, k)) for k in ("path", "c", "parent", "level", "count", "logb", "theta")} | {
        k: float(getattr(st, k)) for k in ("alpha", "gamma0", "gamma", "sigma2")
    }


def numpy_sweep(rng, s, X, mu0, prior_var):
    """One sweep of Algorithm 2 on the NumPy state ``s`` (modified in place); returns
    ``(accepted paths, new components skipped, seconds in the per-point loop)``. No new components are created."""
    N, L1 = s["path"].shape
    L = L1 - 1
    M, K1 = s["logb"].shape
    K = K1 - 1
    parent, level, count, logb, theta, path, c = (
        s[k] for k in ("parent", "level", "count", "logb", "theta", "path", "c")
    )
    alpha, gamma, sigma2 = s["alpha"], s["gamma"], s["sigma2"]
    log_alpha, log_gamma = np.log(alpha), np.log(gamma)
    n_acc = n_skip = 0
    t_loop = time.perf_counter()
    for n in rng.permutation(N):
        x = X[n]
        old = path[n].copy()
        free = np.flatnonzero(count[1:] == 0)[:L] + 1  # before removal, as jaxhc
        count[old] -= 1  # remove the point
        # nCRP path proposal over the other points
        prop = np.empty(L + 1, np.int64)
        prop[0] = 0
        first_new = L + 1
        cur = 0
        for l in range(1, L + 1):
            if first_new <= L:
                cur = free[l - 1] if l - 1 < free.size else M
            else:
                ch = np.flatnonzero((parent == cur) & (count > 0))
                ch = ch[ch > 0]
                logits = np.append(np.log(count[ch]), log_alpha)
                pick = _categorical(rng, logits)
                if pick == ch.size:
                    first_new = l
                    cur = free[l - 1] if l - 1 < free.size else M
                else:
                    cur = ch[pick]
            prop[l] = cur
        if first_new <= L and prop[L] >= M:
            raise ValueError("NumPy reference ran out of node slots")
        # beta ~ DP(gamma, beta_parent) for the new nodes
        newlb = {}
        for l in range(first_new, L + 1):
            par_lb = newlb[l - 1] if l - 1 >= first_new else logb[prop[l - 1]]
            newlb[l] = _dirichlet_log(rng, log_gamma + par_lb)
        lb_prop = newlb[L] if first_new <= L else logb[prop[L]]
        # MH with the Eq. 1 mixture likelihood
        ll = _normal_logpdf(x, theta, sigma2)
        lfs = _normal_logpdf(x, mu0, prior_var + sigma2)
        lp_new = _logsumexp(np.append(lb_prop[:K] + ll, lb_prop[K] + lfs))
        lp_old = _logsumexp(np.append(logb[old[L], :K] + ll, logb[old[L], K] + lfs))
        if np.log(rng.random()) < lp_new - lp_old:
            n_acc += 1
            for l in range(first_new, L + 1):
                z = prop[l]
                parent[z], level[z], logb[z] = prop[l - 1], l, newlb[l]
            path[n] = prop
        count[path[n]] += 1
        # c_n by Eq. 2
        leaf = logb[path[n, L]]
        cn = _categorical(rng, np.append(leaf[:K] + ll, leaf[K] + lfs))
        if cn == K:
            n_skip += 1
        else:
            c[n] = cn
    t_loop = time.perf_counter() - t_loop
    # B by Eq. 3-4 (active nodes, parents first) and theta by Eq. 5
    active = count > 0
    nk = np.zeros((M, K))
    np.add.at(nk, (path.reshape(-1), np.repeat(c, L1)), 1.0)
    with np.errstate(divide="ignore"):
        lnk = np.log(nk)
    logb[0] = _dirichlet_log(rng, np.append(lnk[0], np.log(s["gamma0"])))
    for l in range(1, L + 1):
        for z in np.flatnonzero(active & (level == l) & (parent >= 0)):
            lp = logb[parent[z]]
            conc = np.append(np.logaddexp(lnk[z], log_gamma + lp[:K]), log_gamma + lp[K])
            logb[z] = _dirichlet_log(rng, conc)
    cnt = np.bincount(c, minlength=K).astype(float)
    sk = np.zeros((K, X.shape[1]))
    np.add.at(sk, c, X)
    var = 1.0 / (1.0 / prior_var[None, :] + cnt[:, None] / sigma2)
    mean = var * (mu0 / prior_var + sk / sigma2)
    theta[:] = mean + np.sqrt(var) * rng.standard_normal(mean.shape)
    return n_acc, n_skip, t_loop


# ------------------------------------------------------------------------------------------
# measurements
# ------------------------------------------------------------------------------------------
def run_size(N, args, log=print):
    import jax

    from jaxhc.inference import bhmc as B
    from jaxhc.inference.bhmc import moves as BM

    X, _ = make_data(N, args.dim, seed=N)
    Xj = jax.numpy.asarray(X)
    cfg = B.make_config(X, mu0=0.0, prior_var=1.0)
    key = jax.random.key(N)
    t = time.perf_counter()
    st = block(
        B.bhmc_init(
            jax.random.fold_in(key, 10**6),
            Xj,
            args.depth,
            cfg,
            max_nodes=args.max_nodes,
            max_components=args.max_components,
            **HYPER,
        )
    )
    init_s = time.perf_counter() - t  # includes compiling _init_jit

    def sweep(t_):
        nonlocal st
        t0, c0 = time.perf_counter(), time.process_time()
        st, info = B.bhmc_step(jax.random.fold_in(key, t_), st, Xj, cfg, path_update=args.path_update)
        block(st)
        return time.perf_counter() - t0, time.process_time() - c0, info

    first_s, _, _ = sweep(0)
    for i in range(args.warmup):
        sweep(1 + i)
    times, cpus, infos = [], [], []
    for i in range(args.repeats):
        dt, dc, info = sweep(1 + args.warmup + i)
        times.append(dt)
        cpus.append(dc)
        infos.append(jax.device_get(info))
    if int(st.overflow):
        raise RuntimeError(f"N={N}: capacity overflow flag {int(st.overflow)}; raise --max-nodes / --max-components")
    med = statistics.median(times)

    @jax.jit
    def points(k, s):  # the per-point loop of B.sampler._sweep alone (same keys and order)
        kperm, kpts = jax.random.split(k, 5)[:2]
        perm = jax.random.permutation(kperm, N)

        def body(i, carry):
            n = perm[i]
            if args.path_update == "gibbs":
                return BM.gibbs_point_update(jax.random.fold_in(kpts, i), carry, n, Xj[n], cfg)[0]
            return BM.point_update(jax.random.fold_in(kpts, i), carry, n, Xj[n], cfg, mode="mcmc")[0]

        return jax.lax.fori_loop(0, N, body, s)

    block(points(key, st))
    pt = []
    for i in range(args.repeats):
        t0 = time.perf_counter()
        block(points(jax.random.fold_in(key, 1000 + i), st))
        pt.append(time.perf_counter() - t0)
    points_s = statistics.median(pt)
    post_s = max(med - points_s, 0.0)  # end-of-sweep updates (estimate)
    last = infos[-1]
    row = {
        "N": N,
        "D": args.dim,
        "L": args.depth,
        "max_nodes": args.max_nodes,
        "max_components": args.max_components,
        "init_s": init_s,
        "first_sweep_s": first_s,
        "compile_s": max(first_s - med, 0.0),
        "sweep_s": med,
        "sweep_times_s": times,
        "sweep_cpu_s": statistics.median(cpus),
        "points_s": points_s,
        "points_times_s": pt,
        "post_s_est": post_s,
        "per_point_us": points_s / N * 1e6,
        "nodes": int(last["num_nodes"]),
        "components": int(last["num_components"]),
        "nodes_range": [int(min(i["num_nodes"] for i in infos)), int(max(i["num_nodes"] for i in infos))],
        "accept_rate": float(np.mean([i["accept_rate"] for i in infos])),
        "log_likelihood": float(last["log_likelihood"]),
        "loadavg_1min": os.getloadavg()[0],
    }
    log(
        f"  N={N:5d}  compile {row['compile_s']:5.1f} s  sweep {fmt_t(med):>9} (cpu {fmt_t(row['sweep_cpu_s'])})  (point loop {fmt_t(points_s)}, "
        f"{row['per_point_us']:.0f} us/point)  nodes {row['nodes']}  comps {row['components']}  "
        f"acc {row['accept_rate']:.3f}  load {row['loadavg_1min']:.2f}",
        flush=True,
    )
    return row, st, X, cfg


def run_reference(N, st, X, cfg, args, log=print):
    mu0, pv = np.asarray(cfg.mu0), np.asarray(cfg.prior_var)
    rng = np.random.default_rng(N)
    s = numpy_state(st)
    times, cpus, loops, acc, skip = [], [], [], [], []
    for _ in range(args.ref_repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        a, k, tl = numpy_sweep(rng, s, X, mu0, pv)
        loops.append(tl)
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        acc.append(a / X.shape[0])
        skip.append(k)
    row = {
        "N": N,
        "numpy_sweep_s": statistics.median(times),
        "numpy_sweep_times_s": times,
        "numpy_sweep_cpu_s": statistics.median(cpus),
        "numpy_points_s": statistics.median(loops),
        "numpy_accept_rate": float(np.mean(acc)),
        "new_component_skipped": skip,
        "numpy_nodes": int(np.sum(s["count"] > 0)),
        "loadavg_1min": os.getloadavg()[0],
    }
    log(
        f"  N={N:5d}  NumPy sweep {fmt_t(row['numpy_sweep_s'])}  acc {row['numpy_accept_rate']:.3f}  "
        f"nodes {row['numpy_nodes']}  new-component draws skipped {skip}",
        flush=True,
    )
    return row


def loglog_slope(ns, ts):
    if len(ns) < 2:
        return None
    return float(np.polyfit(np.log(ns), np.log(ts), 1)[0])


def table(rows, ref):
    refd = {r["N"]: r for r in ref}
    lines = [
        "| N | compile s | sweep s | sweep cpu s | point loop s | us / point | nodes | comps | accept | NumPy sweep s | "
        "NumPy point loop s | jaxhc / NumPy (sweep) | jaxhc / NumPy (point loop) | load |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        f = refd.get(r["N"])
        lines.append(
            f"| {r['N']} | {r['compile_s']:.1f} | {r['sweep_s']:.3f} | {r['sweep_cpu_s']:.3f} | {r['points_s']:.3f} | "
            f"{r['per_point_us']:.0f} | {r['nodes']} | {r['components']} | {r['accept_rate']:.3f} | "
            + (
                f"{f['numpy_sweep_s']:.3f} | {f['numpy_points_s']:.3f} | {f['ratio_sweep']:.2f} | {f['ratio_points']:.2f} | "
                if f
                else "- | - | - | - | "
            )
            + f"{r['loadavg_1min']:.2f} |"
        )
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="N in {200, 400}, fewer sweeps, no JSON")
    ap.add_argument("--sizes", type=ints, default=None, help="N values (default 500,1000,2000,5000)")
    ap.add_argument("--dim", type=int, default=10)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--max-nodes", type=int, default=1024, help="node slot capacity (default 1024)")
    ap.add_argument("--max-components", type=int, default=128, help="component slot capacity (default 128)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed sweeps after the first (default 5; 2 quick)")
    ap.add_argument("--repeats", type=int, default=None, help="timed sweeps (default 7; 3 quick)")
    ap.add_argument(
        "--ref-sizes",
        type=ints,
        default=None,
        help="N of the NumPy reference (default 500,1000 and 2000 if 1000 took < 15 s)",
    )
    ap.add_argument("--ref-repeats", type=int, default=3, help="NumPy reference sweeps per size (default 3)")
    ap.add_argument(
        "--path-update",
        choices=("mh", "gibbs"),
        default="mh",
        help="mh: Algorithm 2 (the NumPy reference's sweep); gibbs: the exact block Gibbs step "
        "(bhmc's default; no NumPy reference, pass --ref-sizes '')",
    )
    ap.add_argument("--out", type=str, default=None, help=f"JSON output (default {DEFAULT_OUT}; --quick: none)")
    args = ap.parse_args(argv)
    q = args.quick
    args.sizes = args.sizes or ([200, 400] if q else [500, 1000, 2000, 5000])
    args.warmup = args.warmup if args.warmup is not None else (2 if q else 5)
    args.repeats = args.repeats or (3 if q else 7)
    auto_ref = args.ref_sizes is None
    args.ref_sizes = args.ref_sizes or ([200, 400] if q else [500, 1000])
    if args.path_update == "gibbs":  # the NumPy reference implements Algorithm 2's MH sweep only
        args.ref_sizes, auto_ref = [], False
    out_path = args.out or (None if q else DEFAULT_OUT)

    import jax

    jax.config.update("jax_enable_x64", True)
    info = machine()
    print(
        f"machine: {info['cpu']}, {info['cpu_count']} CPUs; jax {info['jax']} ({info['backend']}); "
        f"load {info['loadavg_start'][0]:.2f}",
        flush=True,
    )
    print(
        f"BHMC sweep: D={args.dim}, L={args.depth}, max_nodes={args.max_nodes}, "
        f"max_components={args.max_components}, {args.warmup} warm-up + {args.repeats} timed sweeps",
        flush=True,
    )
    t_all = time.perf_counter()
    rows, ref, states = [], [], {}
    for N in args.sizes:
        row, st, X, cfg = run_size(N, args, log=print)
        rows.append(row)
        states[N] = (st, X, cfg)
    print("NumPy reference (no new components):", flush=True)
    ref_sizes = list(args.ref_sizes)
    i = 0
    while i < len(ref_sizes):
        N = ref_sizes[i]
        if N not in states:
            row, st, X, cfg = run_size(N, args, log=print)
            states[N] = (st, X, cfg)
        st, X, cfg = states[N]
        r = run_reference(N, st, X, cfg, args)
        jr = next(x for x in rows if x["N"] == N) if any(x["N"] == N for x in rows) else None
        if jr is not None:
            r["ratio_sweep"] = jr["sweep_s"] / r["numpy_sweep_s"]
            r["ratio_points"] = jr["points_s"] / r["numpy_points_s"]
        ref.append(r)
        if auto_ref and not q and N == 1000 and r["numpy_sweep_s"] < 15.0 and 2000 not in ref_sizes:
            ref_sizes.append(2000)
        i += 1

    ns = [r["N"] for r in rows]
    slope = loglog_slope(ns, [r["sweep_s"] for r in rows])
    slope_cpu = loglog_slope(ns, [r["sweep_cpu_s"] for r in rows])
    slope_pts = loglog_slope(ns, [r["points_s"] for r in rows])
    slope_ref = loglog_slope([r["N"] for r in ref], [r["numpy_sweep_s"] for r in ref])
    checks = []
    r2 = next((r for r in rows if r["N"] == 2000), None)
    if r2 is not None:
        checks.append(
            {
                "name": "sweep over N = 2000 after compilation (s)",
                "value": round(r2["sweep_s"], 3),
                "target": f"<= {TARGETS['sweep_n2000_s']}",
                "result": "met" if r2["sweep_s"] <= TARGETS["sweep_n2000_s"] else "missed",
            }
        )
    tab = table(rows, ref)
    print("\n" + tab)
    print(f"\nlog-log slope of sweep time vs N ({ns}): {slope:.2f}" if slope is not None else "")
    if slope_pts is not None:
        print(f"log-log slope of the sweep CPU time: {slope_cpu:.2f}")
        print(f"log-log slope of the per-point loop: {slope_pts:.2f}")
    if slope_ref is not None:
        print(f"log-log slope of the NumPy sweep: {slope_ref:.2f}")
    for c in checks:
        print(f"target: {c['name']}: {c['value']} ({c['target']}) -> {c['result']}")
    total = time.perf_counter() - t_all
    print(f"total {total:.0f} s", flush=True)
    if out_path:
        doc = {
            "benchmark": "bhmc",
            "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "machine": info,
            "config": {k: v for k, v in vars(args).items() if k != "out"} | {"hyper": HYPER},
            "targets": TARGETS,
            "method": __doc__,
            "jaxhc": rows,
            "numpy_reference": ref,
            "loglog_slope_sweep": slope,
            "loglog_slope_sweep_cpu": slope_cpu,
            "loglog_slope_point_loop": slope_pts,
            "loglog_slope_numpy": slope_ref,
            "checks": checks,
            "table_markdown": tab,
            "total_wall_s": total,
            "loadavg_end": list(os.getloadavg()),
        }
        os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
        with open(out_path, "w") as f:
            json.dump(doc, f, indent=2)
        print(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
