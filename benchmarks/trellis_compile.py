"""Compile time of the exact trellis: one program per size class against one per N.

Usage::

    python benchmarks/trellis_compile.py                      # Ginkgo, N = 9, 12, 14, 16
    python benchmarks/trellis_compile.py --n 12 16 --energy dasgupta --no-json

`jaxhc.trellis.solve` / `log_partition` run the program of the size class of ``N`` (the
smallest of ``classes._SIZE_CLASSES`` >= N: levels as a loop over chunks of host-built
tables passed as arguments, so every N of a class shares one compiled program); the
per-N programs (`exact._log_partition_core`, `exact._solve_core`: one unrolled loop per
level, compiled for each N) remain for traced / differentiated ``log Z``, batches and
N above the last class. For each N, in one process: the AOT compile time
(``lower(...).compile()``) of the three kernels -- ``log Z``, ``log Z + MAP``, ``log Z + MAP +
all marginals`` -- per N and per class, and their warm run times, interleaved call by call
(min over ``--reps`` calls after a warm-up), with the values checked equal (log Z and MAP
value to 1e-12, backpointers identical, marginals to 1e-10). The load average is recorded
(the machine may be shared). Writes ``benchmarks/results/trellis_compile.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import aot, machine  # noqa: E402

KERNELS = (("logz", False, False), ("map", True, False), ("marg", True, True))


def measure(kind: str, n: int, reps: int, per_n: bool) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from trellis import make_problem

    from jaxhc.trellis import classes, exact

    energy, X = make_problem(kind, n, seed=n)
    Xj = jnp.asarray(X)
    bound = classes.size_class(n)
    order, offset, count, (s_in, c_in), (s_out, c_out) = classes._class_tables(n, bound, classes._class_shape(bound))
    args = (energy, energy.pad_leaves(Xj, bound), jnp.int32(n), (order, offset, count), s_in, jnp.int32(c_in))
    args = args + (s_out, jnp.int32(c_out))
    row = {"energy": kind, "n": n, "class": bound, "splits": exact.num_splits(n), "load_1min": os.getloadavg()[0]}
    for name, with_map, marginals in KERNELS:
        new, row[f"compile_class_{name}_s"] = aot(
            classes._class_core, *args, bound=bound, with_map=with_map, marginals=marginals
        )
        calls = {"class": lambda: new(*args)}
        if per_n:
            if name == "logz":
                old, t = aot(exact._log_partition_core, energy, Xj, n=n)
                calls["per_n"] = lambda: old(energy, Xj)
            else:
                old, t = aot(exact._solve_core, energy, Xj, n=n, marginals=marginals)
                calls["per_n"] = lambda: old(energy, Xj)
            row[f"compile_per_n_{name}_s"] = t
        outs = {k: jax.block_until_ready(f()) for k, f in calls.items()}
        times = {k: [] for k in calls}
        for _ in range(reps):
            for k, f in calls.items():
                t = time.perf_counter()
                jax.block_until_ready(f())
                times[k].append(time.perf_counter() - t)
        for k in calls:
            row[f"warm_{k}_{name}_s"] = min(times[k])
        if per_n:
            a, b = outs["per_n"], outs["class"]
            size = 2**n
            if name == "logz":
                assert abs(float(a) - float(b[0])) <= 1e-12 * max(1.0, abs(float(a))), (a, b[0])
            else:
                assert abs(float(a[0]) - float(b[0])) <= 1e-12 * max(1.0, abs(float(a[0])))
                assert abs(float(a[1]) - float(b[1])) <= 1e-12 * max(1.0, abs(float(a[1])))
                assert np.array_equal(np.asarray(a[5]), np.asarray(b[5])[:size]), "backpointers differ"
                if marginals:
                    ma, mb = np.exp(np.asarray(a[2])), np.exp(np.asarray(b[2])[:size])
                    assert np.max(np.abs(ma - mb)) <= 1e-10
            row[f"warm_ratio_{name}"] = row[f"warm_class_{name}_s"] / row[f"warm_per_n_{name}_s"]
    row["load_1min_end"] = os.getloadavg()[0]
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[9, 12, 14, 16])
    ap.add_argument("--energy", choices=["ginkgo", "dasgupta"], default="ginkgo")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-per-n", action="store_true", help="skip the per-N programs (slow to compile)")
    ap.add_argument("--no-json", action="store_true")
    ap.add_argument(
        "--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "trellis_compile.json")
    )
    args = ap.parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    rows = []
    hdr = f"{'N':>3} {'cls':>3} {'kernel':>6} {'compile per-N':>13} {'class':>7} {'warm per-N':>10} {'class':>9} {'ratio':>6} load"
    print(hdr)
    for n in args.n:
        row = measure(args.energy, n, args.reps, not args.no_per_n)
        rows.append(row)
        for name, _, _ in KERNELS:
            cp = row.get(f"compile_per_n_{name}_s", float("nan"))
            wp = row.get(f"warm_per_n_{name}_s", float("nan"))
            print(
                f"{n:>3} {row['class']:>3} {name:>6} {cp:>12.2f}s {row[f'compile_class_{name}_s']:>6.2f}s "
                f"{wp * 1e3:>8.1f}ms {row[f'warm_class_{name}_s'] * 1e3:>7.1f}ms "
                f"{row.get(f'warm_ratio_{name}', float('nan')):>6.2f} {row['load_1min']:.1f}",
                flush=True,
            )
    if not args.no_json:
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump({"machine": machine(), "energy": args.energy, "rows": rows}, f, indent=1)
        print("wrote", args.out)


if __name__ == "__main__":
    main()
