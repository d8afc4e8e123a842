"""The cost of the scikit-learn estimator over the library call it wraps (issue 55): one
process, x64.

Usage::

    python benchmarks/sklearn_overhead.py [--n 1000 --d 2 --rounds 3 --learn-off --out PATH]

Data: ``n`` points of 4 unit-variance Gaussian blobs in ``d`` dimensions (centres 6 apart).
Timed in blocks (``_harness.blocks_median``: each round a warm-up call then ``--calls`` calls
of each, alternating between the two, medians over ``--rounds`` rounds, so the machine's
drift falls on both): ``jaxhc.fit_bhc(X)`` (the estimator's default: the family chosen by
evidence, alpha and the prior learned) against ``BayesianHierarchicalClustering().fit(X)``,
which runs it and then converts the result (NumPy arrays, the monotone linkage, the cut, the
predictive weights); and the conversion alone on ``fit_bhc``'s result, as a share of
``fit_bhc``'s time (the ratio of the two fits is within the machine's noise on a shared box). ``--learn-off`` times both with ``learn=False`` too (BHC on the two
candidate families only: the conversion's share is then largest). The target: the estimator
within 5% of ``fit_bhc`` at n = 1000. Also timed: ``predict`` and ``score_samples`` of the
``n`` training rows. JSON: benchmarks/results/sklearn_overhead.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _harness import blocks_median, fmt_t, machine, result_doc, write_json  # noqa: E402

DEFAULT_OUT = os.path.join(HERE, "results", "sklearn_overhead.json")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--d", type=int, default=2)
    ap.add_argument("--calls", type=int, default=1, help="timed calls of each per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--learn-off", action="store_true", help="also time learn=False")
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args(argv)

    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np

    import jaxhc
    from jaxhc.sklearn import BayesianHierarchicalClustering

    rng = np.random.default_rng(0)
    centres = rng.normal(size=(4, args.d)) * 6.0
    X = rng.normal(size=(args.n, args.d)) + centres[rng.integers(0, 4, args.n)]

    rows = []
    settings = [True, False] if args.learn_off else [True]
    for learn in settings:
        est = BayesianHierarchicalClustering(learn=learn)
        t0 = time.perf_counter()
        est.fit(X)
        first = time.perf_counter() - t0
        fns = {
            "fit_bhc": lambda: jaxhc.fit_bhc(X, learn=learn),
            "estimator": lambda: BayesianHierarchicalClustering(learn=learn).fit(X),
        }
        med = blocks_median(fns, calls=args.calls * args.rounds, rounds=args.rounds)
        ratio = med["estimator"] / med["fit_bhc"]
        # the estimator's own work alone: the conversion of fit_bhc's result to its attributes
        fit = jaxhc.fit_bhc(X, learn=learn)
        conv = blocks_median(
            {"convert": lambda: est._set_fitted(fit.result, fit.family, fit.alpha, "greedy", ("threshold", 0.5))},
            9,
            3,
        )["convert"]
        t0 = time.perf_counter()
        est.predict(X)
        pred_first = time.perf_counter() - t0
        pm = blocks_median({"predict": lambda: est.predict(X), "score_samples": lambda: est.score_samples(X)}, 3, 3)
        rows.append(
            {
                "learn": learn,
                "n": args.n,
                "d": args.d,
                "family": est.family_,
                "n_clusters": est.n_clusters_,
                "estimator_first_s": first,
                "fit_bhc_s": med["fit_bhc"],
                "estimator_s": med["estimator"],
                "ratio": ratio,
                "conversion_s": conv,
                "conversion_share": conv / med["fit_bhc"],
                "predict_first_s": pred_first,
                "predict_s": pm["predict"],
                "score_samples_s": pm["score_samples"],
            }
        )
        print(
            f"learn={learn!s:5}  n={args.n} d={args.d}  fit_bhc {fmt_t(med['fit_bhc']):>9}  "
            f"estimator {fmt_t(med['estimator']):>9}  ratio {ratio:.3f}  conversion {fmt_t(conv)} "
            f"({100 * conv / med['fit_bhc']:.2f}%)  predict {fmt_t(pm['predict'])}  "
            f"score_samples {fmt_t(pm['score_samples'])}",
            flush=True,
        )
    print()
    print("| learn | n | d | fit_bhc | estimator.fit | ratio | conversion alone | predict (n rows) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['learn']} | {r['n']} | {r['d']} | {fmt_t(r['fit_bhc_s'])} | {fmt_t(r['estimator_s'])} | "
            f"{r['ratio']:.3f} | {fmt_t(r['conversion_s'])} ({100 * r['conversion_share']:.2f}%) | {fmt_t(r['predict_s'])} |"
        )
    doc = result_doc(
        "sklearn_overhead",
        "medians of blocks alternating fit_bhc(X) and BayesianHierarchicalClustering().fit(X) (same settings), "
        "warm; predict / score_samples of the training rows",
        machine=machine(),
        rows=rows,
    )
    write_json(args.out, doc)


if __name__ == "__main__":
    main()
