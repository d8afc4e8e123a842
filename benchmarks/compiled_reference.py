"""A compiled reference for the exact trellis (issue 43, part 5): the plain subset DP in numba,
timed in the same process as `jaxhc.trellis.log_partition`.

Usage::

    pip install "jaxhc[bench]"                       # numba (not a runtime dependency)
    python benchmarks/compiled_reference.py          # N = 10..16, Dasgupta and Ginkgo exact
    python benchmarks/compiled_reference.py --ns 10,12 --quick
    python benchmarks/compiled_reference.py --ns 17,18,19,20 --calls 1 --rounds 1 \
        --out benchmarks/results/compiled_reference_large.json   # ~10 min

Method (recorded in the JSON under ``"method"``):

* the DP: ``log Z(S) = logsumexp over the splits (L, S \\ L), L holding the lowest element of
  S, of log psi(S, L, R) + log Z(L) + log Z(R)``, level by level (subsets of each size), the
  subsets of a level in a ``numba.prange`` loop (``parallel=True``), each parent's splits
  enumerated as the proper subsets of ``S`` minus its lowest element (``sub = (sub - 1) &
  rest``), an online ``logsumexp`` (one ``exp`` per split). Per-subset features are computed
  once, in one pass over the ``2^N`` subsets (each from the subset without its lowest element):
  size and inner affinity sum for Dasgupta; summed four-momentum, mass squared, its square
  root and the parent's constant terms for Ginkgo. ``log psi`` is the same formula as
  `jaxhc.trellis.DasguptaEnergy` (``-beta |S| (w(S) - w(L) - w(R))``) and
  `jaxhc.trellis.GinkgoEnergy(likelihood="exact")` (both drawing orders, supports, phase
  space; written anew from the energies' docstrings and formulas, scalar code).
* checks: its log Z equals ``trellis.log_partition``'s to 1e-10 (relative) at every N.
* threads: ``numba.set_num_threads(1)`` and ``(2)`` (the box has 2 cores); the trellis runs
  with XLA's default threads. ``OMP_WAIT_POLICY=PASSIVE`` (unless set): numba's OpenMP
  workers otherwise spin after each parallel region, and the trellis timed after them ran
  ~1.2x slower (N = 14, 16: 8.4 / 60 ms against 7.1 / 50 ms); the 2-thread DP takes the same
  time either way within ~6%.
* timing: median of ``--calls`` calls (15 up to N = 14, then 7) after one warm-up call (the
  numba functions are compiled before any timing; the trellis's size-class program too),
  in three rounds of blocks (trellis, 1-thread DP, 2-thread DP; `blocks_median`: the box's
  speed drifts within minutes; until 2026-12-06 one block each). Not one call of each in
  turn: idle OpenMP and XLA worker threads spin after a parallel region, and a call right
  after the other runtime's ran up to 2x slower. splits/s = ``(3^N + 1) / 2 - 2^N`` over
  the time; ratio = DP time / trellis time (> 1: the trellis is faster).
* problems: `benchmarks/trellis.py`'s ``dasgupta_problem(N, seed=N)`` with ``DasguptaEnergy(1)``
  and ``ginkgo_like_jet`` (seed N) with ``GinkgoEnergy(2, 16, likelihood="exact")``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np

from _harness import blocks_median

# numba's OpenMP workers spin after each parallel region and took the cores from XLA's pool
# (the trellis ran 1.2x slower after a numba call, 2026-12-06); passive, they sleep at once
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

try:
    import numba
    from numba import njit, prange
except ImportError as e:  # pragma: no cover - the bench extra
    raise SystemExit(f'benchmarks/compiled_reference.py needs numba: pip install "jaxhc[bench]" ({e})')


def level_order(n: int):
    """``(masks sorted by size, offsets [n + 2])``: the subsets of size k are
    ``masks[offsets[k]:offsets[k + 1]]``."""
    m = np.arange(1 << n, dtype=np.int64)
    size = _popcount(m)
    order = np.argsort(size, kind="stable")
    counts = np.bincount(size, minlength=n + 1)
    off = np.zeros(n + 2, np.int64)
    off[1:] = np.cumsum(counts)
    return m[order], off


def _popcount(m):
    c = np.zeros_like(m)
    x = m.copy()
    while np.any(x):
        c += x & 1
        x >>= 1
    return c


@njit(cache=False)
def _dasgupta_features(W, n):
    size = np.zeros(1 << n)
    w_in = np.zeros(1 << n)
    for S in range(1, 1 << n):
        low = S & -S
        i = 0
        while (low >> i) != 1:
            i += 1
        rest = S ^ low
        acc = 0.0
        for j in range(n):
            if (rest >> j) & 1:
                acc += W[i, j]
        size[S] = size[rest] + 1.0
        w_in[S] = w_in[rest] + acc
    return size, w_in


@njit(parallel=True, cache=False)
def dasgupta_log_z(W, beta, masks, off, n):
    size, w_in = _dasgupta_features(W, n)
    z = np.full(1 << n, -np.inf)
    for i in range(n):
        z[1 << i] = 0.0
    for k in range(2, n + 1):
        for q in prange(off[k], off[k + 1]):
            S = masks[q]
            low = S & -S
            rest = S ^ low
            coef = -beta * size[S]
            m = -np.inf
            s = 0.0
            sub = rest
            while True:
                sub = (sub - 1) & rest
                L = low | sub
                R = S ^ L
                t = coef * (w_in[S] - w_in[L] - w_in[R]) + z[L] + z[R]
                if t > m:
                    s = s * math.exp(m - t) + 1.0
                    m = t
                elif t > -np.inf:
                    s += math.exp(t - m)
                if sub == 0:
                    break
            z[S] = m + math.log(s) if s > 0 else -np.inf
    return z[(1 << n) - 1]


@njit(cache=False)
def _ginkgo_features(leaves, n, lam, t_cut):
    N = 1 << n
    p = np.zeros((N, 4))
    size = np.zeros(N)
    t = np.zeros(N)
    sq = np.zeros(N)
    base = np.full(N, -np.inf)
    rate = np.zeros(N)
    aux = np.zeros(N)
    sup = np.full(N, -np.inf)
    log_norm = -math.log(-math.expm1(-lam))
    c0 = 2.0 * (math.log(lam) + log_norm) - math.log(4.0 * math.pi) + math.log(8.0)
    for S in range(1, N):
        low = S & -S
        i = 0
        while (low >> i) != 1:
            i += 1
        rest = S ^ low
        for c in range(4):
            p[S, c] = p[rest, c] + leaves[i, c]
        size[S] = size[rest] + 1.0
        m2 = p[S, 0] * p[S, 0] - (p[S, 1] * p[S, 1] + p[S, 2] * p[S, 2] + p[S, 3] * p[S, 3])
        tt = m2 if m2 > 0.0 else 0.0
        t[S] = tt
        sq[S] = math.sqrt(tt)
        ts = tt if tt > 0.0 else 1.0
        if tt > t_cut:
            base[S] = c0 - 2.0 * math.log(ts)
        rate[S] = lam / ts
        aux[S] = 1.0 / (ts * ts)
        ok = (tt <= t_cut) if size[S] == 1.0 else (tt > t_cut)
        sup[S] = 0.0 if ok else -np.inf
    return t, sq, base, rate, aux, sup


@njit(inline="always")
def _ginkgo_log_psi(S, L, R, t, sq, base, rate, aux, sup, lam, big):
    tP, tL, tR = t[S], t[L], t[R]
    dA = sq[S] - sq[L]
    dB = sq[S] - sq[R]
    sA = dA * dA
    sB = dB * dB
    iA = 1.0 / (sA if sA > 0.0 else 1.0)
    iB = 1.0 / (sB if sB > 0.0 else 1.0)
    eA = -(tL * rate[S] + lam * tR * iA) if (tL < tP and tR < sA) else -big
    eB = -(tR * rate[S] + lam * tL * iB) if (tR < tP and tL < sB) else -big
    m = max(eA, eB)
    w = math.exp(-abs(eA - eB))
    tot = (iA + w * iB) if eA >= eB else (iB + w * iA)
    K = tP * tP + tL * tL + tR * tR - 2.0 * (tP * tL + tP * tR + tL * tR)
    if not (m > -big and K > 0.0):
        return -np.inf
    tt = tot * tP
    return base[S] + m + 0.5 * math.log(tt * tt / (K * aux[S])) + sup[L] + sup[R]


@njit(parallel=True, cache=False)
def ginkgo_log_z(leaves, lam, t_cut, masks, off, n):
    t, sq, base, rate, aux, sup = _ginkgo_features(leaves, n, lam, t_cut)
    big = np.finfo(np.float64).max
    z = np.full(1 << n, -np.inf)
    for i in range(n):
        z[1 << i] = 0.0
    for k in range(2, n + 1):
        for q in prange(off[k], off[k + 1]):
            S = masks[q]
            low = S & -S
            rest = S ^ low
            m = -np.inf
            s = 0.0
            sub = rest
            while True:
                sub = (sub - 1) & rest
                L = low | sub
                R = S ^ L
                tv = _ginkgo_log_psi(S, L, R, t, sq, base, rate, aux, sup, lam, big) + z[L] + z[R]
                if tv > m:
                    s = s * math.exp(m - tv) + 1.0
                    m = tv
                elif tv > -np.inf:
                    s += math.exp(tv - m)
                if sub == 0:
                    break
            z[S] = m + math.log(s) if s > 0 else -np.inf
    return z[(1 << n) - 1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ns", default="10,11,12,13,14,15,16")
    ap.add_argument("--energies", default="dasgupta,ginkgo_exact")
    ap.add_argument("--calls", type=int, default=0, help="calls per timing (0: 15 up to N = 14, then 7)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of blocks (1 for N >= 17: each call takes seconds)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(HERE / "results" / "compiled_reference.json"))
    args = ap.parse_args()

    import jax

    jax.config.update("jax_enable_x64", True)
    from trellis import make_problem

    from jaxhc import trellis

    ns = [int(x) for x in args.ns.split(",")]
    rows = []
    cols = f"{'energy':>13} {'N':>3} {'trellis ms':>11} {'numba1 ms':>10} {'numba2 ms':>10} {'trellis M/s':>11} "
    print(cols + f"{'numba1 M/s':>10} {'numba2 M/s':>10} {'ratio1':>6} {'ratio2':>6} {'|dlogZ|':>8}")
    for kind in args.energies.split(","):
        for n in ns:
            energy, leaves = make_problem(kind, n, n)
            leaves = np.asarray(leaves, np.float64)
            masks, off = level_order(n)
            if kind == "dasgupta":
                W = leaves - np.diag(np.diag(leaves))
                dp = lambda: dasgupta_log_z(W, float(energy.beta), masks, off, n)
            else:
                dp = lambda: ginkgo_log_z(leaves, float(energy.lam), float(energy.t_cut), masks, off, n)
            calls = args.calls or (15 if n <= 14 else 7)
            if args.quick:
                calls = 2
            t0 = time.perf_counter()
            ours = float(trellis.log_partition(energy, leaves))
            first = time.perf_counter() - t0
            refs = {}

            def numba_dp(th):
                def run():
                    numba.set_num_threads(th)
                    refs[th] = dp()

                return run

            fns = {0: lambda: float(trellis.log_partition(energy, leaves)), 1: numba_dp(1), 2: numba_dp(2)}
            times = blocks_median(fns, calls, args.rounds)
            t_ours = times[0]
            res = {th: (times[th], refs[th]) for th in (1, 2)}
            err = max(abs(res[th][1] - ours) for th in (1, 2))
            rel = err / max(1.0, abs(ours))
            splits = (3**n + 1) // 2 - 2**n
            row = {
                "energy": kind,
                "n": n,
                "splits": splits,
                "log_z": ours,
                "abs_err": err,
                "rel_err": rel,
                "trellis_s": t_ours,
                "trellis_first_call_s": first,
                "numba_1thread_s": res[1][0],
                "numba_2threads_s": res[2][0],
                "trellis_splits_per_s": splits / t_ours,
                "numba_1thread_splits_per_s": splits / res[1][0],
                "numba_2threads_splits_per_s": splits / res[2][0],
                "ratio_1thread": res[1][0] / t_ours,
                "ratio_2threads": res[2][0] / t_ours,
                "calls": calls,
                "load_1min": os.getloadavg()[0],
            }
            assert rel < 1e-10, f"{kind} N={n}: numba log Z {res[2][1]!r} vs trellis {ours!r}"
            rows.append(row)
            print(
                f"{kind:>13} {n:3d} {t_ours * 1e3:11.2f} {res[1][0] * 1e3:10.2f} {res[2][0] * 1e3:10.2f} "
                f"{splits / t_ours / 1e6:11.1f} {splits / res[1][0] / 1e6:10.1f} {splits / res[2][0] / 1e6:10.1f} "
                f"{row['ratio_1thread']:6.2f} {row['ratio_2threads']:6.2f} {err:8.1e}",
                flush=True,
            )
    if args.quick:
        return
    from _harness import machine

    doc = {"machine": machine(), "method": __doc__, "numba": numba.__version__, "rows": rows}
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps(doc, indent=1))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
