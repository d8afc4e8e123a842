"""Speed of the Pitman-Yor diffusion tree code: message passing against N, the section-5.1
MCMC sampler per move (single chain and 8 vmapped chains), the greedy EM search and prior
sampling (the JAX sampler against the NumPy reference).

Usage::

    python benchmarks/pydt.py                 # full run, writes benchmarks/results/pydt.json (~6-8 min on 2 cores)
    python benchmarks/pydt.py --quick         # smoke test: small N, few moves, EM with 2 iterations, no JSON
    python benchmarks/pydt.py --sections mp,mcmc --sizes 100,1000 --out /tmp/pydt.json
    python benchmarks/pydt.py --sections prior   # prior sampling only, writes benchmarks/results/pydt_prior.json

Sections: ``mp``, ``mcmc``, ``em`` (the default, ``--sections mp,mcmc,em``) and ``prior`` (not in
the default). Output file: ``--out`` if given; otherwise, for the default sections,
``benchmarks/results/pydt.json``, and for any other choice ``benchmarks/results/pydt_<sections>.json``
(sections in the order mp, mcmc, em, prior joined by ``_``, e.g. ``pydt_prior.json``), so a
partial run never overwrites the full results with a partial file (nothing is merged).

Everything runs in one process, float64 (``jax_enable_x64``), on ``jax.devices()[0]``.

Method (also recorded in the JSON under ``"method"``):

* **Message passing.** Trees from the PYDT prior (``models.pydt.sample_prior``, ``c = 1,
  alpha = 0.5, beta = 0.2, sigma2 = 1``, key ``N + D``), leaves ``X`` = the sampled leaf
  locations. Two compiled kernels, each ahead-of-time compiled for the size (*compile*
  column) then timed as the median of repeated calls (``block_until_ready``):
  ``models.pydt._log_marginal_likelihood`` (the kernel of ``log_marginal_likelihood``, on the
  compact ``m <= 2N - 1`` node arrays; the public function adds numpy validation, timed
  separately as *public*) and ``inference.pydt_mcmc.log_marginal_masked`` (the sampler's
  version on fixed-capacity ``2N - 1`` arrays with free slots and an ``active`` mask).
  Baselines in the same process: **NumPy loop** = the same upward message passing as a
  Python loop over nodes in post-order with NumPy vector ops of length ``D`` (written below,
  ``numpy_messages``); **dense** (N <= 500): the ``D`` columns of ``X`` as independent
  ``N(0, C)``, ``C[i, j] = sigma2 t_lca(i, j)`` (``C`` built outside the timing), evaluated by
  ``scipy.linalg`` Cholesky + triangular solve (*dense Cholesky*) and by
  ``scipy.stats.multivariate_normal(0, C).logpdf`` (*scipy.stats MVN*, an eigendecomposition).
  All five values agree (``max_abs_diff`` in the JSON). Ratio = jaxhc / baseline (< 1: jaxhc
  faster). Slope = least-squares slope of ``log time`` against ``log N``.
* **MCMC.** Data: ``N`` points, ``D = 2``, from 4 Gaussian clusters at ``(+-1, +-1)`` with
  standard deviation ``sqrt(1/8)`` (``N / 4`` each, numpy ``default_rng(N)``). State:
  ``pydt_mcmc_init`` (prior tree, ``c = 1, alpha = 0.5, beta = 0.2, sigma2 = 1``) followed by
  the timed full steps below (which act as burn-in). **One move** = one detach / re-attach
  MH move (``pydt_mcmc._move``: pick a subtree, re-draw its attachment by the generative
  process, marginal likelihood by message passing, accept / reject) - our unit of
  "iteration". *single chain*: ``jit(lax.scan(_move))`` over ``--moves`` (1000) moves,
  compiled first, median of the timed calls, divided by the number of moves. *8 chains*: the
  same scan of ``--chain-moves`` (250) moves under ``vmap`` over 8 chains (the batching of
  ``pydt_mcmc._step_chains``; all chains start from the single chain's state, with
  independent keys), throughput = 8 x moves / time. *Move breakdown*: each piece of
  ``_move`` jitted alone on the state (``log_prior_masked`` runs 3 times per move). *full step* = ``pydt_mcmc_step(...,
  num_moves=N)``: N moves, then Gibbs ``c`` and ``sigma2`` (backward sampling of locations) and
  slice sampling of ``alpha`` and ``beta``; median of ``--full-steps`` (5) after a compiling
  call.
* **Anchor** (not measured here; quoted from the issue): the authors' C++ sampler
  (davidaknowles/pydt, slice sampling of divergence times) runs 200 iterations on the
  4-cluster set, N = 60, D = 2, in 0.03 s on a 2-core machine, taken as **0.13 ms per
  iteration** (the issue's figure). Their "iteration" is not necessarily one of our moves;
  ratio = our time per move / 0.13 ms, and throughput ratio = our moves/s / (1 / 0.13 ms).
* **EM.** ``inference.pydt_em.pydt_em(key(0), X, num_iters=...)`` (other arguments default:
  ``k_best = 10``, 3 EM candidates per iteration, learned hyperparameters) on ``N = 200,
  D = 10``: 4 cluster means ``~ N(0, I)``, points ``~ N(mean, 0.3^2 I)`` (``default_rng(0)``).
  Three calls: *cold* = ``num_iters = 2`` (compiles the initial-tree and search programs),
  *initial tree* = ``num_iters = 0`` (compiled), *timed* = ``num_iters = --em-iters`` (20,
  compiled); per iteration = (timed - initial tree) / iterations. The function's default
  ``num_iters = 100`` would take too long for this script's budget on 2 cores, so its time is
  **projected**: initial tree + 100 x per iteration (+ the compilation estimate, cold -
  initial tree - 2 x per iteration).
* **Prior.** For each ``N`` in ``--prior-sizes`` (10, 50, 200) and each ``(alpha, beta)`` in
  ``(0.5, 0.2)`` and the DDT ``(0, 0)``, ``c = 1``, float64: *JAX trees* =
  ``models.pydt.PYDTTree(N, c, alpha, beta).sample(key, (S,))`` (``S = --prior-samples``,
  1000; the jitted ``_sample_trees``, static ``N``, ``vmap`` of
  ``pydt_math.sample_prior_tree`` over ``S`` keys), ``[S, 2, 2N - 1]``. *compile* = ahead-of-time
  ``lower(...).compile()`` of ``_sample_trees`` for the arguments ``sample`` passes, timed alone
  (jax caches it, so ``sample`` does not compile again); only the first setting of each ``N``
  compiles (``c, alpha, beta`` are traced: the DDT row's compile is the cache hit, ~0);
  *first call* = the first ``sample`` call after that; *warm* = the median of
  ``--prior-repeats`` (3) further calls with new keys (``block_until_ready``; fewer once the
  calls took ``--prior-jax-time``, 20 s; the ``*_times_s`` lists have them all). *Predictive* = the whole
  ``numpyro.infer.Predictive(pydt, num_samples=S, parallel=True)(key, num_points=N, dim=2,
  c, alpha, beta)`` (tree, Brownian increments, locations and ``X``; not wrapped in ``jit``
  by us): first call (it compiles the batched pieces; ``predictive_compile_s_est`` = first -
  warm) and warm calls timed the same way. Baseline in the same
  process: *NumPy* = ``models.pydt.sample_prior(key_i, N, 2, c, alpha, beta, sigma2=1)``
  called in a Python loop (one tree + its locations per call, host NumPy; keys made before
  the timing), ``S`` calls or as many as fit in ``--prior-np-time`` (30 s, at least 5
  calls), the total **extrapolated linearly** to ``S`` calls when fewer were run (the
  ``numpy_calls`` field says how many). Ratios = NumPy / JAX (> 1: JAX faster). Sanity
  check of the law (the two samplers use different random streams): mean number of branch
  points and mean first divergence time (the root's time) of the JAX trees against the
  NumPy draws (difference in standard errors, ``z``).

Targets (from the issue): one message-passing evaluation at N = 1000 <= 5 ms after
compilation; a single chain within 5x of the anchor per iteration at N = 60-100 (<= 0.65 ms
per move); 8 vmapped chains >= the anchor's throughput (>= 7692 iterations/s); EM on
N = 200, D = 10 <= 2 minutes; 1000 prior trees of N = 50 in <= 5 s warm (JAX sampler).
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
from _harness import aot, block, fmt_t, ints, machine, time_calls  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "pydt.json")
ANCHOR = {
    "source": "issue text: authors' C++ sampler (davidaknowles/pydt), 200 iterations, 4-cluster set, N = 60, D = 2, "
    "0.03 s on the issue's 2-core machines; not run here",
    "s_per_iter": 0.13e-3,
    "iters": 200,
    "total_s": 0.03,
    "N": 60,
    "D": 2,
}
TARGETS = {
    "mp_n1000_s": 5e-3,
    "single_chain_factor": 5.0,
    "chains8_iters_per_s": 1.0 / ANCHOR["s_per_iter"],
    "em_n200_d10_s": 120.0,
    "prior_1000_trees_n50_s": 5.0,
}
PRIOR_SETTINGS = ((0.5, 0.2), (0.0, 0.0))  # (alpha, beta); c = 1
SECTIONS = ("mp", "mcmc", "em", "prior")
DEFAULT_SECTIONS = "mp,mcmc,em"
HYP = dict(c=1.0, alpha=0.5, beta=0.2, sigma2=1.0)
FREE = -2


# ------------------------------------------------------------------------------------------
# baselines
# ------------------------------------------------------------------------------------------
def postorder_np(parent, times):
    used = parent != FREE
    return np.argsort(np.where(used, -times, np.inf), kind="stable")[: int(used.sum())]


def numpy_messages(parent, times, X, sigma2, order):
    """Upward message passing in a Python loop over nodes (post-order ``order``, children
    first), NumPy vectors of length D per node: ``log p(X | tree, times, sigma2)``."""
    N, D = X.shape
    m = parent.shape[0]
    prec = np.zeros(m)
    eta = np.zeros((m, D))
    logz = 0.0
    for k in order:
        p = parent[k]
        tp = times[p] if p >= 0 else 0.0
        edge = sigma2 * (times[k] - tp)
        if k < N:
            mk, vk = X[k], 0.0
        else:
            # product of the children's messages N(x; eta_i/prec_i, 1/prec_i): normaliser
            # accumulated in `logz` as the messages arrive (see below)
            vk = 1.0 / prec[k]
            mk = eta[k] * vk
        ov = vk + edge
        if p >= 0:
            if prec[p] > 0:  # combine with what the parent has so far
                vp = 1.0 / prec[p]
                mp = eta[p] * vp
                s = vp + ov
                logz += -0.5 * (D * np.log(2 * np.pi * s) + np.dot(mk - mp, mk - mp) / s)
            prec[p] += 1.0 / ov
            eta[p] += mk / ov
        else:  # root: close against the origin
            logz += -0.5 * (D * np.log(2 * np.pi * ov) + np.dot(mk, mk) / ov)
    return logz


def lca_cov(parent, times, N, sigma2):
    """``sigma2 t_lca(i, j)`` (``sigma2`` on the diagonal) by merging leaf sets up the tree."""
    order = postorder_np(parent, times)
    C = np.empty((N, N))
    below = {}
    for k in order:
        if k < N:
            below[k] = [k]
            C[k, k] = sigma2 * times[k]
    kids = {}
    for k in order:
        p = parent[k]
        if p >= 0:
            kids.setdefault(p, []).append(k)
    for k in order:
        if k < N:
            continue
        groups = [below.pop(c) for c in kids[k]]
        for a in range(len(groups)):
            for b in range(a + 1, len(groups)):
                ia, ib = np.asarray(groups[a]), np.asarray(groups[b])
                C[np.ix_(ia, ib)] = sigma2 * times[k]
                C[np.ix_(ib, ia)] = sigma2 * times[k]
        below[k] = [i for g in groups for i in g]
    return C


def four_clusters(N, seed):
    r = np.random.default_rng(seed)
    centres = np.array([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]])
    z = np.arange(N) % 4
    r.shuffle(z)
    return centres[z] + r.normal(0.0, np.sqrt(1.0 / 8.0), (N, 2))


def em_data(N, D, seed=0):
    r = np.random.default_rng(seed)
    means = r.normal(0.0, 1.0, (4, D))
    z = r.integers(0, 4, N)
    return means[z] + r.normal(0.0, 0.3, (N, D))


def loglog_slope(ns, ts):
    ok = [(n, t) for n, t in zip(ns, ts) if t is not None and t > 0]
    if len(ok) < 2:
        return None
    return float(np.polyfit(np.log([o[0] for o in ok]), np.log([o[1] for o in ok]), 1)[0])


# ------------------------------------------------------------------------------------------
# 1. message passing
# ------------------------------------------------------------------------------------------
def run_mp(N, D, args):
    import jax
    import jax.numpy as jnp
    from scipy.stats import multivariate_normal

    from jaxhc.inference.pydt import mcmc as PM
    from jaxhc.models import pydt as P

    s = P.sample_prior(
        jax.random.key(N + D), N, D, c=HYP["c"], alpha=HYP["alpha"], beta=HYP["beta"], sigma2=HYP["sigma2"]
    )
    par = np.asarray(s.tree.parent, np.int32)
    tim = np.asarray(s.tree.heights, float)
    X = np.asarray(s.X, float)
    m = par.size
    sigma2 = HYP["sigma2"]
    mt = args.min_time
    # compact kernel
    pj, tj, Xj = jnp.asarray(par), jnp.asarray(tim), jnp.asarray(X)
    k_comp, k_cs = aot(P._log_marginal_likelihood_jit, pj, tj, Xj, sigma2)
    val = float(k_comp(pj, tj, Xj, sigma2))
    k_s, k_n = time_calls(lambda: k_comp(pj, tj, Xj, sigma2), mt, args.max_calls)
    pub_s, _ = time_calls(lambda: P.log_marginal_likelihood(par, tim, X, sigma2), mt / 2, 20)
    # masked kernel on fixed capacity 2N - 1
    cap = 2 * N - 1
    parc = np.concatenate([par, np.full(cap - m, FREE, np.int32)])
    timc = np.concatenate([tim, np.zeros(cap - m)])
    pcj, tcj = jnp.asarray(parc), jnp.asarray(timc)
    acj = pcj != FREE
    masked = jax.jit(PM.log_marginal_masked)
    m_comp, m_cs = aot(masked, pcj, tcj, acj, Xj, sigma2)
    val_m = float(m_comp(pcj, tcj, acj, Xj, sigma2))
    m_s, m_n = time_calls(lambda: m_comp(pcj, tcj, acj, Xj, sigma2), mt, args.max_calls)
    # NumPy loop baseline (order computed outside the timing, as the kernels' argsort is inside theirs)
    order = postorder_np(par, tim)
    val_np = numpy_messages(par, tim, X, sigma2, order)
    t0 = time.perf_counter()
    reps = 0
    npt = []
    while reps < 3 or (time.perf_counter() - t0 < mt / 2 and reps < 20):
        t = time.perf_counter()
        numpy_messages(par, tim, X, sigma2, order)
        npt.append(time.perf_counter() - t)
        reps += 1
    np_s = statistics.median(npt)
    row = {
        "N": N,
        "D": D,
        "nodes": int(m),
        "branch_points": int(m - N),
        "depth_max": None,
        "kernel_compile_s": k_cs,
        "kernel_s": k_s,
        "kernel_calls": k_n,
        "public_s": pub_s,
        "masked_compile_s": m_cs,
        "masked_s": m_s,
        "masked_calls": m_n,
        "numpy_loop_s": np_s,
        "loglik": val,
        "loglik_masked": val_m,
        "loglik_numpy": val_np,
    }
    if N <= args.dense_max:
        import scipy.linalg as sl

        C = lca_cov(par, tim, N, sigma2)

        def dense_stats():  # scipy.stats (eigendecomposition inside)
            return float(np.sum(multivariate_normal(np.zeros(N), C).logpdf(X.T)))

        def dense_chol():  # Cholesky: -1/2 [D log det C + tr(X^T C^-1 X) + N D log 2 pi]
            L = sl.cholesky(C, lower=True)
            Z = sl.solve_triangular(L, X, lower=True)
            return float(-0.5 * (2 * D * np.sum(np.log(np.diag(L))) + np.sum(Z * Z) + N * D * np.log(2 * np.pi)))

        for name, fn in (("dense_mvn", dense_stats), ("dense_chol", dense_chol)):
            row["loglik_" + name] = fn()
            ts = []
            for _ in range(3 if N > 250 else 7):
                t = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t)
            row[name + "_s"] = statistics.median(ts)
    row["max_abs_diff"] = float(
        max(
            abs(val - val_m),
            abs(val - val_np),
            abs(val - row.get("loglik_dense_mvn", val)),
            abs(val - row.get("loglik_dense_chol", val)),
        )
    )
    row["ratio_kernel_vs_numpy"] = k_s / np_s
    row["ratio_masked_vs_numpy"] = m_s / np_s
    row["ratio_kernel_vs_dense"] = k_s / row["dense_chol_s"] if "dense_chol_s" in row else None
    # tree depth (edges from the root to the deepest leaf)
    depth = np.zeros(m, int)
    for k in postorder_np(par, tim)[::-1]:
        depth[k] = depth[par[k]] + 1 if par[k] >= 0 else 0
    row["depth_max"] = int(depth[:N].max())
    row["loadavg_1min"] = os.getloadavg()[0]
    print(
        f"  N={N:5d} D={D:2d}  nodes {m:5d} depth {row['depth_max']:3d}  kernel {fmt_t(k_s):>9} "
        f"(compile {k_cs:.1f} s, public {fmt_t(pub_s)})  masked {fmt_t(m_s):>9}  NumPy loop {fmt_t(np_s):>9}  "
        f"dense chol {fmt_t(row.get('dense_chol_s'))} / stats {fmt_t(row.get('dense_mvn_s'))}  |diff| {row['max_abs_diff']:.1e}  load {row['loadavg_1min']:.2f}",
        flush=True,
    )
    return row


# ------------------------------------------------------------------------------------------
# 2. MCMC
# ------------------------------------------------------------------------------------------
def run_mcmc(N, args):
    import jax
    import jax.numpy as jnp

    from jaxhc.inference.pydt import mcmc as PM

    X = four_clusters(N, N)
    Xj = jnp.asarray(X)
    key = jax.random.key(N)
    t = time.perf_counter()
    st = block(PM.pydt_mcmc_init(jax.random.fold_in(key, 1), Xj, **HYP))
    init_s = time.perf_counter() - t
    # full steps (N moves + hyperparameter updates); the first compiles
    times, accs = [], []
    for i in range(args.full_steps + 1):
        t = time.perf_counter()
        st, info = PM.pydt_mcmc_step(jax.random.fold_in(key, 100 + i), st, Xj, num_moves=N)
        block(st)
        dt = time.perf_counter() - t
        if i == 0:
            first_step_s = dt
        else:
            times.append(dt)
            accs.append(float(np.mean(np.asarray(info.accepted))))
    step_s = statistics.median(times)
    nm = args.moves

    def scan_moves(k, s):
        def body(s, kk):
            s, (acc, _, tries) = PM._move(kk, s, Xj, True)
            return s, (acc, tries)

        return jax.lax.scan(body, s, jax.random.split(k, nm))

    single = jax.jit(scan_moves)
    chains = jax.jit(jax.vmap(scan_moves))
    k1 = jax.random.fold_in(key, 7)
    single_c, single_cs = aot(single, k1, st)
    out = single_c(k1, st)
    block(out)
    acc_single = float(np.mean(np.asarray(out[1][0])))
    tries_single = float(np.mean(np.asarray(out[1][1])))
    ts = []
    for i in range(args.move_repeats):
        kk = jax.random.fold_in(key, 200 + i)
        t = time.perf_counter()
        block(single_c(kk, st))
        ts.append(time.perf_counter() - t)
    single_s = statistics.median(ts)
    C = args.chains
    ncm = args.chain_moves

    def scan_moves_c(k, s):
        def body(s, kk):
            s, (acc, _, tries) = PM._move(kk, s, Xj, True)
            return s, acc

        return jax.lax.scan(body, s, jax.random.split(k, ncm))

    chains = jax.jit(jax.vmap(scan_moves_c))
    # the chains start from the same state with independent keys
    stC = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (C,) + jnp.shape(a)), st)
    keysC = jax.random.split(k1, C)
    chains_c, chains_cs = aot(chains, keysC, stC)
    block(chains_c(keysC, stC))
    tc = []
    for i in range(args.move_repeats):
        kk = jax.random.split(jax.random.fold_in(key, 300 + i), C)
        t = time.perf_counter()
        block(chains_c(kk, stC))
        tc.append(time.perf_counter() - t)
    chains_s = statistics.median(tc)
    # the same C chains as separate single-chain programs in a thread pool (one thread per
    # core): what `pydt_mcmc(..., chain_method="parallel")` does on a CPU
    from concurrent.futures import ThreadPoolExecutor

    one_c, _ = aot(jax.jit(scan_moves_c), k1, st)
    block(one_c(k1, st))
    workers = max(1, min(C, os.cpu_count() or 1))
    tp = []
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for i in range(args.move_repeats):
            kk = jax.random.split(jax.random.fold_in(key, 400 + i), C)
            t = time.perf_counter()
            list(pool.map(lambda j: block(one_c(kk[j], st)), range(C)))
            tp.append(time.perf_counter() - t)
    par_s = statistics.median(tp)
    thr_par = C * ncm / par_s
    # per-move breakdown: the pieces of _move, jitted alone on the current state
    parts = move_breakdown(st, Xj, args)
    per_move = single_s / nm
    thr_single = nm / single_s
    thr_chains = C * ncm / chains_s
    a = ANCHOR["s_per_iter"]
    row = {
        "N": N,
        "D": 2,
        "init_s": init_s,
        "first_full_step_s": first_step_s,
        "full_step_s": step_s,
        "full_step_times_s": times,
        "full_step_per_move_s": step_s / N,
        "full_step_accept": float(np.mean(accs)),
        "moves": nm,
        "single_compile_s": single_cs,
        "single_moves_s": single_s,
        "single_times_s": ts,
        "single_per_move_s": per_move,
        "single_moves_per_s": thr_single,
        "single_accept": acc_single,
        "single_mean_tries": tries_single,
        "chains": C,
        "chain_moves": ncm,
        "chains_compile_s": chains_cs,
        "chains_moves_s": chains_s,
        "chains_times_s": tc,
        "chains_moves_per_s": thr_chains,
        "chains_speedup_vs_single": thr_chains / thr_single,
        "threads": workers,
        "threaded_chains_times_s": tp,
        "threaded_chains_moves_per_s": thr_par,
        "ratio_threaded_chains_throughput_vs_anchor": thr_par * a,
        "ratio_single_per_move_vs_anchor": per_move / a,
        "ratio_chains_throughput_vs_anchor": thr_chains * a,
        "ratio_full_step_per_move_vs_anchor": step_s / N / a,
        "move_breakdown_s": parts,
        "branch_points": int(np.sum((np.asarray(st.parent) != FREE)[N:])),
        "hyper_after": {k: float(getattr(st, k)) for k in ("c", "alpha", "beta", "sigma2")},
        "loadavg_1min": os.getloadavg()[0],
    }
    print(
        f"  N={N:4d}  full step ({N} moves + hyper) {fmt_t(step_s)} ({fmt_t(step_s / N)}/move, first "
        f"{first_step_s:.1f} s)  single chain {nm} moves {fmt_t(single_s)} = {fmt_t(per_move)}/move "
        f"({per_move / a:.1f}x anchor; compile {single_cs:.1f} s; acc {acc_single:.2f})  {C} chains "
        f"{thr_chains:.0f} moves/s vmapped ({thr_chains * a:.2f}x anchor), {thr_par:.0f} moves/s in {workers} "
        f"threads ({thr_par * a:.2f}x anchor)  load {row['loadavg_1min']:.2f}",
        flush=True,
    )
    print("    move pieces (each jitted alone): " + ", ".join(f"{k} {fmt_t(v)}" for k, v in parts.items()), flush=True)
    return row


def move_breakdown(st, Xj, args):
    """Median time of each piece of ``pydt_mcmc._move`` jitted alone on state ``st`` (one
    move calls log_prior_masked 3 times, _subtree_mask, _order + _up_counts, _attach_point
    and log_marginal_masked once each)."""
    import jax
    import jax.numpy as jnp

    from jaxhc.inference.pydt import mcmc as PM
    from jaxhc.models import pydt_math

    N = Xj.shape[0]
    par, tim = st.parent, st.times
    m = par.shape[0]
    act = par != FREE
    is_leaf = jnp.arange(m) < N
    s = jnp.int32(int(np.flatnonzero(np.asarray(act & (par >= 0)))[N // 2]))
    root = jnp.int32(int(np.flatnonzero(np.asarray(par) == -1)[0]))
    f = tim.dtype
    one = jnp.asarray(1.0, f)
    pieces = {
        "log_prior_masked": (jax.jit(PM.log_prior_masked), (par, tim, act, is_leaf, st.c, st.alpha, st.beta)),
        "log_marginal_masked": (jax.jit(PM.log_marginal_masked), (par, tim, act, Xj, st.sigma2)),
        "subtree_mask": (jax.jit(pydt_math.subtree_mask), (par, tim, act, s)),
        "order_up_counts": (
            jax.jit(lambda p, t, a, w: pydt_math.up_counts(p, pydt_math.time_order(p, t, a), a, w)),
            (par, tim, act, is_leaf.astype(jnp.int32)),
        ),
    }
    cnt = pieces["order_up_counts"][0](*pieces["order_up_counts"][1])
    pieces["attach_point"] = (
        jax.jit(pydt_math.attach_point),
        (jax.random.key(0), par, tim, act, cnt, root, one, st.c, st.alpha, st.beta),
    )
    pieces["move"] = (jax.jit(lambda k, s_: PM._move(k, s_, Xj, True)), (jax.random.key(1), st))
    out = {}
    for name, (fn, a) in pieces.items():
        out[name] = time_calls(lambda: fn(*a), args.min_time / 2, args.max_calls)[0]
    return out


# ------------------------------------------------------------------------------------------
# 3. EM
# ------------------------------------------------------------------------------------------
def run_em(args):
    try:
        from jaxhc.inference.pydt.em import pydt_em
    except Exception as e:  # noqa: BLE001
        print(f"  EM not available: {type(e).__name__}: {e}", flush=True)
        return {"status": f"not available ({type(e).__name__}: {e})"}
    import jax

    N, D = args.em_n, args.em_d
    X = em_data(N, D, 0)
    K = args.em_iters
    row = {"N": N, "D": D, "num_iters": K, "status": "ok"}

    def call(iters):
        t, c0 = time.perf_counter(), time.process_time()
        res = pydt_em(jax.random.key(0), X, num_iters=iters, progress_bar=False)
        return res, time.perf_counter() - t, time.process_time() - c0

    try:
        _, row["cold_s"], _ = call(2)  # compiles the initial-tree and search programs
        r0, row["initial_tree_s"], _ = call(0)
        res, row["wall_s"], row["cpu_s"] = call(K)
        row["per_iter_s"] = (row["wall_s"] - row["initial_tree_s"]) / max(K, 1)
        row["compile_s_est"] = max(row["cold_s"] - row["initial_tree_s"] - 2 * row["per_iter_s"], 0.0)
        row["projected_100_iters_s"] = row["initial_tree_s"] + 100 * row["per_iter_s"]
        row["projected_100_iters_cold_s"] = row["projected_100_iters_s"] + row["compile_s_est"]
        row["initial_log_evidence"] = float(r0.log_evidence)
        row["log_evidence"] = float(res.log_evidence)
        row["hyper"] = {"c": res.c, "alpha": res.alpha, "beta": res.beta, "sigma2": res.sigma2}
        row["branch_points"] = int(np.sum(np.asarray(res.parent)[N:] != FREE))
    except Exception as e:  # noqa: BLE001
        row["status"] = f"failed ({type(e).__name__}: {e})"
        print(f"  EM failed: {row['status']}", flush=True)
        return row
    row["loadavg_1min"] = os.getloadavg()[0]
    print(
        f"  EM N={N} D={D}: first call (2 iterations, compiles) {row['cold_s']:.1f} s; compiled: initial tree "
        f"{row['initial_tree_s']:.1f} s, {K} iterations {row['wall_s']:.1f} s (cpu {row['cpu_s']:.1f} s) = "
        f"{row['per_iter_s']:.2f} s/iteration; projected num_iters=100: {row['projected_100_iters_s']:.0f} s "
        f"(+ ~{row['compile_s_est']:.0f} s compilation); bound {row['initial_log_evidence']:.1f} -> "
        f"{row['log_evidence']:.1f}  load {row['loadavg_1min']:.2f}",
        flush=True,
    )
    return row


# ------------------------------------------------------------------------------------------
# 4. prior sampling
# ------------------------------------------------------------------------------------------
def tree_stats(parent, times, N):
    """Per tree: number of branch points and the first divergence time (the root's time)
    from parent / times rows ``[..., 2N - 1]`` (free slots ``-2``)."""
    parent = np.asarray(parent)
    times = np.asarray(times, float)
    used = parent[..., N:] != FREE
    bp = used.sum(-1)
    first = np.where(used, times[..., N:], np.inf).min(-1)
    return bp.astype(float), np.where(np.isfinite(first), first, 1.0)


def _z(a, b):
    se = np.sqrt(np.var(a, ddof=1) / len(a) + np.var(b, ddof=1) / len(b)) if len(a) > 1 and len(b) > 1 else 0.0
    return float((np.mean(a) - np.mean(b)) / se) if se > 0 else 0.0


def run_prior(N, alpha, beta, args):
    import jax
    import jax.numpy as jnp
    from numpyro.infer import Predictive

    from jaxhc.models import pydt as P

    c, S, R = HYP["c"], args.prior_samples, args.prior_repeats
    key = jax.random.key(10_000 + N)
    d = P.PYDTTree(N, c, alpha, beta)
    f = np.dtype(jnp.result_type(float))
    # compile alone: trace + compile `_sample_trees` (static N, dtype and S) for the arguments
    # `sample` passes; jax caches it for the calls below, and an earlier setting with the
    # same N and S already compiled it (c, alpha, beta are traced): then this is ~0
    _, compile_s = aot(P._sample_trees, jax.random.split(key, S), N, f, c, alpha, beta)
    t = time.perf_counter()
    block(d.sample(jax.random.fold_in(key, 0), (S,)))
    first_s = time.perf_counter() - t
    tt = []
    while len(tt) < R and (not tt or sum(tt) < args.prior_jax_time):
        t = time.perf_counter()
        trees = block(d.sample(jax.random.fold_in(key, 1 + len(tt)), (S,)))
        tt.append(time.perf_counter() - t)
    trees_s = statistics.median(tt)
    trees = np.asarray(trees)
    assert trees.shape == (S, 2, 2 * N - 1), trees.shape
    bp_j, t1_j = tree_stats(np.round(trees[:, 0]).astype(int), trees[:, 1], N)
    # the whole NumPyro program (tree + increments + locations + X), D = 2
    pred = Predictive(P.pydt, num_samples=S, parallel=True)
    kw = dict(num_points=N, dim=2, c=c, alpha=alpha, beta=beta)
    t = time.perf_counter()
    block(pred(jax.random.fold_in(key, 100), **kw))
    pred_first_s = time.perf_counter() - t
    tp = []
    while len(tp) < R and (not tp or sum(tp) < args.prior_jax_time):
        t = time.perf_counter()
        out = block(pred(jax.random.fold_in(key, 101 + len(tp)), **kw))
        tp.append(time.perf_counter() - t)
    pred_s = statistics.median(tp)
    assert out["X"].shape == (S, N, 2), out["X"].shape
    # NumPy reference: one tree + locations per call; keys made outside the timing
    keys = list(jax.random.split(jax.random.fold_in(key, 200), S))
    bp_n, t1_n = [], []
    t0 = time.perf_counter()
    n = 0
    while n < S and (n < 5 or time.perf_counter() - t0 < args.prior_np_time):
        s = P.sample_prior(keys[n], N, 2, c=c, alpha=alpha, beta=beta, sigma2=HYP["sigma2"])
        n += 1
        bp_n.append(s.tree.parent.size - N)
        t1_n.append(float(np.min(s.tree.heights[N:])) if s.tree.parent.size > N else 1.0)
    np_wall = time.perf_counter() - t0
    np_s = np_wall / n * S
    row = {
        "N": N,
        "c": c,
        "alpha": alpha,
        "beta": beta,
        "samples": S,
        "dtype": str(f),
        "jax_compile_s": compile_s,
        "jax_first_call_s": first_s,
        "jax_trees_s": trees_s,
        "jax_trees_times_s": tt,
        "predictive_first_call_s": pred_first_s,
        "predictive_s": pred_s,
        "predictive_compile_s_est": max(pred_first_s - pred_s, 0.0),
        "predictive_times_s": tp,
        "numpy_calls": n,
        "numpy_wall_s": np_wall,
        "numpy_per_call_s": np_wall / n,
        "numpy_s": np_s,
        "numpy_extrapolated": n < S,
        "ratio_numpy_vs_jax_trees": np_s / trees_s,
        "ratio_numpy_vs_predictive": np_s / pred_s,
        "branch_points_mean_jax": float(np.mean(bp_j)),
        "branch_points_mean_numpy": float(np.mean(bp_n)),
        "branch_points_z": _z(bp_j, np.asarray(bp_n, float)),
        "first_divergence_mean_jax": float(np.mean(t1_j)),
        "first_divergence_mean_numpy": float(np.mean(t1_n)),
        "first_divergence_z": _z(t1_j, np.asarray(t1_n)),
        "loadavg_1min": os.getloadavg()[0],
    }
    ex = f" (extrapolated from {n} calls)" if n < S else ""
    print(
        f"  N={N:4d} alpha={alpha} beta={beta}  {S} trees: JAX {fmt_t(trees_s)} (compile {compile_s:.1f} s, then "
        f"first call {first_s:.1f} s)  Predictive {fmt_t(pred_s)} (first {pred_first_s:.1f} s)  NumPy {fmt_t(np_s)}{ex}  "
        f"NumPy / JAX {np_s / trees_s:.1f}x, / Predictive {np_s / pred_s:.1f}x  branch points "
        f"{row['branch_points_mean_jax']:.2f} / {row['branch_points_mean_numpy']:.2f} (z {row['branch_points_z']:.1f}), "
        f"first divergence {row['first_divergence_mean_jax']:.3f} / {row['first_divergence_mean_numpy']:.3f} "
        f"(z {row['first_divergence_z']:.1f})  load {row['loadavg_1min']:.2f}",
        flush=True,
    )
    return row


# ------------------------------------------------------------------------------------------
# tables
# ------------------------------------------------------------------------------------------
def _r(x, fmt="{:.2f}"):
    return "-" if x is None else fmt.format(x)


def table_mp(rows):
    lines = [
        "| N | D | nodes | depth | kernel compile s | kernel | masked | NumPy loop | dense Cholesky | scipy.stats MVN | "
        "kernel / NumPy loop | masked / NumPy loop | kernel / dense Cholesky | public API | load |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['N']} | {r['D']} | {r['nodes']} | {r['depth_max']} | {r['kernel_compile_s']:.2f} | "
            f"{fmt_t(r['kernel_s'])} | {fmt_t(r['masked_s'])} | {fmt_t(r['numpy_loop_s'])} | "
            f"{fmt_t(r.get('dense_chol_s'))} | {fmt_t(r.get('dense_mvn_s'))} | {r['ratio_kernel_vs_numpy']:.3f} | {r['ratio_masked_vs_numpy']:.3f} | "
            f"{_r(r['ratio_kernel_vs_dense'], '{:.3f}')} | {fmt_t(r['public_s'])} | {r['loadavg_1min']:.2f} |"
        )
    return "\n".join(lines)


def table_mcmc(rows):
    lines = [
        "| N | single chain: per move | moves/s | per move / anchor (0.13 ms) | 8 chains vmapped: moves/s | / anchor (7692/s) | "
        "8 chains in threads: moves/s | / anchor | full step (N moves + hyper) | per move | accept | "
        "compile s (scan / step) | load |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['N']} | {fmt_t(r['single_per_move_s'])} | {r['single_moves_per_s']:.0f} | "
            f"{r['ratio_single_per_move_vs_anchor']:.2f} | {r['chains_moves_per_s']:.0f} | "
            f"{r['ratio_chains_throughput_vs_anchor']:.2f} | {r['threaded_chains_moves_per_s']:.0f} | "
            f"{r['ratio_threaded_chains_throughput_vs_anchor']:.2f} | {fmt_t(r['full_step_s'])} | "
            f"{fmt_t(r['full_step_per_move_s'])} | {r['single_accept']:.2f} | "
            f"{r['single_compile_s']:.1f} / {max(r['first_full_step_s'] - r['full_step_s'], 0):.1f} | "
            f"{r['loadavg_1min']:.2f} |"
        )
    return "\n".join(lines)


def table_prior(rows):
    lines = [
        "| N | alpha | beta | S | JAX compile s | JAX first call s (compiled) | JAX trees (warm) | Predictive trees + data (warm) | "
        "Predictive first call s | NumPy sample_prior x S | NumPy calls run | NumPy / JAX trees | NumPy / Predictive | branch points JAX / NumPy | "
        "load |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['N']} | {r['alpha']} | {r['beta']} | {r['samples']} | {r['jax_compile_s']:.1f} | "
            f"{r['jax_first_call_s']:.1f} | {fmt_t(r['jax_trees_s'])} | {fmt_t(r['predictive_s'])} | "
            f"{r['predictive_first_call_s']:.1f} | {fmt_t(r['numpy_s'])} | {r['numpy_calls']} | {r['ratio_numpy_vs_jax_trees']:.1f} | "
            f"{r['ratio_numpy_vs_predictive']:.1f} | {r['branch_points_mean_jax']:.2f} / "
            f"{r['branch_points_mean_numpy']:.2f} | {r['loadavg_1min']:.2f} |"
        )
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, few moves, EM 2 iterations, no JSON")
    ap.add_argument(
        "--sections",
        type=str,
        default=DEFAULT_SECTIONS,
        help=f"comma list of {', '.join(SECTIONS)} (default {DEFAULT_SECTIONS}; others write pydt_<sections>.json)",
    )
    ap.add_argument("--sizes", type=ints, default=None, help="message-passing N (default 100,250,500,1000,2000)")
    ap.add_argument("--dims", type=ints, default=None, help="message-passing D (default 2,10)")
    ap.add_argument("--dense-max", type=int, default=500, help="largest N for the dense MVN baseline")
    ap.add_argument("--min-time", type=float, default=None, help="seconds of repeated calls per timing (default 1.0)")
    ap.add_argument("--max-calls", type=int, default=200)
    ap.add_argument("--mcmc-sizes", type=ints, default=None, help="MCMC N (default 60,100)")
    ap.add_argument("--moves", type=int, default=None, help="moves per timed scan (default 1000)")
    ap.add_argument("--move-repeats", type=int, default=None, help="timed scans (default 3)")
    ap.add_argument("--chains", type=int, default=8)
    ap.add_argument(
        "--chain-moves", type=int, default=None, help="moves per chain per timed vmapped scan (default 250)"
    )
    ap.add_argument("--full-steps", type=int, default=None, help="timed full steps (default 5)")
    ap.add_argument("--em-n", type=int, default=200)
    ap.add_argument("--em-d", type=int, default=10)
    ap.add_argument("--em-iters", type=int, default=None, help="timed pydt_em num_iters (default 10; 100 projected)")
    ap.add_argument("--prior-sizes", type=ints, default=None, help="prior-sampling N (default 10,50,200)")
    ap.add_argument("--prior-samples", type=int, default=None, help="trees per prior-sampling call (default 1000)")
    ap.add_argument("--prior-repeats", type=int, default=None, help="timed warm calls (default 3)")
    ap.add_argument(
        "--prior-jax-time",
        type=float,
        default=20.0,
        help="stop the warm JAX / Predictive calls once they took this many seconds (at least 1 call)",
    )
    ap.add_argument(
        "--prior-np-time",
        type=float,
        default=None,
        help="seconds for the NumPy sample_prior loop before extrapolating to --prior-samples calls (default 30)",
    )
    ap.add_argument(
        "--out",
        type=str,
        default=None,
        help=f"JSON output (default {DEFAULT_OUT}, or results/pydt_<sections>.json for other sections; --quick: none)",
    )
    args = ap.parse_args(argv)
    q = args.quick
    sections = set(x.strip() for x in args.sections.split(",") if x.strip())
    bad = sections - set(SECTIONS)
    if bad or not sections:
        ap.error(f"--sections: unknown {sorted(bad)}; choose from {', '.join(SECTIONS)}")
    args.sizes = args.sizes or ([50, 100, 200] if q else [100, 250, 500, 1000, 2000])
    args.dims = args.dims or [2, 10]
    args.min_time = args.min_time if args.min_time is not None else (0.2 if q else 1.0)
    args.mcmc_sizes = args.mcmc_sizes or ([60] if q else [60, 100])
    args.moves = args.moves or (100 if q else 1000)
    args.move_repeats = args.move_repeats or (2 if q else 3)
    args.chain_moves = args.chain_moves or (50 if q else 250)
    args.full_steps = args.full_steps or (2 if q else 5)
    args.em_iters = args.em_iters if args.em_iters is not None else (2 if q else 10)
    args.prior_sizes = args.prior_sizes or ([10, 50] if q else [10, 50, 200])
    args.prior_samples = args.prior_samples or (100 if q else 1000)
    args.prior_repeats = args.prior_repeats or (2 if q else 3)
    args.prior_np_time = args.prior_np_time if args.prior_np_time is not None else (2.0 if q else 30.0)
    if q:
        args.em_n = min(args.em_n, 60)
    # a partial run never overwrites the full results: pydt_<sections>.json (no merging)
    if sections == set(DEFAULT_SECTIONS.split(",")):
        default_out = DEFAULT_OUT
    else:
        default_out = os.path.join(HERE, "results", "pydt_" + "_".join(x for x in SECTIONS if x in sections) + ".json")
    out_path = args.out or (None if q else default_out)

    import jax

    jax.config.update("jax_enable_x64", True)
    info = machine({"gpu": "none lent to this run" if jax.default_backend() == "cpu" else jax.default_backend()})
    print(
        f"machine: {info['cpu']}, {info['cpu_count']} CPUs; jax {info['jax']} ({info['backend']}); "
        f"load {info['loadavg_start'][0]:.2f}",
        flush=True,
    )
    t_all = time.perf_counter()
    mp, mc, em, pr = [], [], None, []
    if "mp" in sections:
        print("message passing (compiled, per evaluation):", flush=True)
        for D in args.dims:
            for N in args.sizes:
                mp.append(run_mp(N, D, args))
    if "mcmc" in sections:
        print(f"MCMC, 4-cluster data, D = 2 ({args.moves} moves per scan, {args.chains} chains):", flush=True)
        for N in args.mcmc_sizes:
            mc.append(run_mcmc(N, args))
    if "em" in sections:
        print(f"EM (pydt_em, N = {args.em_n}, D = {args.em_d}, num_iters = {args.em_iters}):", flush=True)
        em = run_em(args)
    if "prior" in sections:
        print(
            f"prior sampling ({args.prior_samples} trees per call, c = 1, float64; NumPy: sample_prior with D = 2):",
            flush=True,
        )
        for N in args.prior_sizes:
            for alpha, beta in PRIOR_SETTINGS:
                pr.append(run_prior(N, alpha, beta, args))

    slopes = {}
    for D in args.dims:
        rs = [r for r in mp if r["D"] == D]
        ns = [r["N"] for r in rs]
        slopes[f"D={D}"] = {
            k: loglog_slope(ns, [r[c] for r in rs])
            for k, c in (("kernel", "kernel_s"), ("masked", "masked_s"), ("numpy_loop", "numpy_loop_s"))
        }
        rd = [r for r in rs if "dense_mvn_s" in r]
        for c in ("dense_mvn", "dense_chol"):
            slopes[f"D={D}"][c] = loglog_slope([r["N"] for r in rd], [r[c + "_s"] for r in rd])
    checks = []
    for r in mp:
        if r["N"] == 1000:
            for col, name in (("kernel_s", "models.pydt kernel"), ("masked_s", "log_marginal_masked")):
                checks.append(
                    {
                        "name": f"message passing N = 1000, D = {r['D']}, {name} (ms)",
                        "value": round(r[col] * 1e3, 3),
                        "target": "<= 5",
                        "result": "met" if r[col] <= TARGETS["mp_n1000_s"] else "missed",
                    }
                )
    lim = TARGETS["single_chain_factor"] * ANCHOR["s_per_iter"]
    for r in mc:
        checks.append(
            {
                "name": f"single chain per move, N = {r['N']} (ms)",
                "value": round(r["single_per_move_s"] * 1e3, 3),
                "target": f"<= {lim * 1e3:.2f} (5x anchor)",
                "result": "met" if r["single_per_move_s"] <= lim else "missed",
            }
        )
        checks.append(
            {
                "name": f"{r['chains']} chains vmapped, N = {r['N']} (moves/s)",
                "value": round(r["chains_moves_per_s"]),
                "target": f">= {TARGETS['chains8_iters_per_s']:.0f} (anchor throughput)",
                "result": "met" if r["chains_moves_per_s"] >= TARGETS["chains8_iters_per_s"] else "missed",
            }
        )
        checks.append(
            {
                "name": f"{r['chains']} chains in {r['threads']} threads (chain_method='parallel'), "
                f"N = {r['N']} (moves/s)",
                "value": round(r["threaded_chains_moves_per_s"]),
                "target": f">= {TARGETS['chains8_iters_per_s']:.0f} (anchor throughput)",
                "result": "met" if r["threaded_chains_moves_per_s"] >= TARGETS["chains8_iters_per_s"] else "missed",
            }
        )
    if em is not None and em.get("status") == "ok":
        v = em["projected_100_iters_cold_s"]
        checks.append(
            {
                "name": f"EM N = {em['N']}, D = {em['D']}, num_iters = 100 (default), projected from "
                f"{em['num_iters']} timed iterations, incl. compilation (s)",
                "value": round(v, 1),
                "target": "<= 120",
                "result": "met" if v <= TARGETS["em_n200_d10_s"] else "missed",
            }
        )
    for r in pr:
        if r["N"] == 50 and r["samples"] == 1000:
            lim = TARGETS["prior_1000_trees_n50_s"]
            checks.append(
                {
                    "name": f"1000 PYDT prior trees, N = 50 (s), alpha = {r['alpha']}, beta = {r['beta']}, "
                    "PYDTTree.sample warm",
                    "value": round(r["jax_trees_s"], 3),
                    "target": f"<= {lim:g}",
                    "result": "met" if r["jax_trees_s"] <= lim else "missed",
                }
            )
    if mp:
        print("\n" + table_mp(mp))
        for D, s in slopes.items():
            print(f"log-log slope vs N ({D}): " + ", ".join(f"{k} {_r(v)}" for k, v in s.items()))
    if mc:
        print("\n" + table_mcmc(mc))
    if pr:
        print("\n" + table_prior(pr))
    for c in checks:
        print(f"  {c['name']}: {c['value']} (target {c['target']}) - {c['result']}")
    total = time.perf_counter() - t_all
    print(f"\ntotal {total:.0f} s", flush=True)
    if out_path:
        import inspect

        mod = sys.modules[__name__]
        doc = inspect.getdoc(mod)
        out = {
            "benchmark": "pydt",
            "date": _dt.datetime.now().isoformat(timespec="seconds"),
            "machine": dict(info, loadavg_end=list(os.getloadavg())),
            "args": vars(args),
            "method": doc[doc.index("Method") :],
            "anchor": ANCHOR,
            "targets": TARGETS,
            "message_passing": mp,
            "slopes": slopes,
            "mcmc": mc,
            "em": em if em is not None else {"status": "not run"},
            "prior": pr,
            "sections": [x for x in SECTIONS if x in sections],
            "gpu": "not lent to this task (CPU only)",
            "checks": checks,
            "total_s": total,
        }
        os.makedirs(os.path.dirname(out_path), exist_ok=True)
        with open(out_path, "w") as f:
            json.dump(out, f, indent=1)
        print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
