"""Dendrogram purity of BHC vs scipy single / complete / average / Ward linkage.

Usage::

    python benchmarks/bhc_purity.py             # full run (10 subsets per data set), a few minutes
    python benchmarks/bhc_purity.py --quick     # 2 subsets per data set, smoke test
    python benchmarks/bhc_purity.py --reps 5 --datasets digits3,iris --out /tmp/p.json

Data sets (all bundled with scikit-learn, no download):

* ``digits3``: scikit-learn digits (8x8, pixels 0..16) binarized ``pixel >= 8 -> 1``, classes
  {0, 2, 4}, 40 random points per class (120 points, 64 binary features) - the 3-digit
  setting of Heller & Ghahramani (2005).
* ``digits10``: the same binarized digits, all 10 classes, 20 random points per class
  (200 points).
* ``iris`` / ``wine``: a random 80% of the points (without replacement), features
  standardized (zero mean, unit variance) on the subsample.

Subset ``s`` (``s = 0 .. reps-1``) is drawn with ``numpy.random.default_rng(s)``.

Methods: "BHC, learned": `jaxhc.learn_hyperparameters` (alpha and the prior, maximising the
DPM lower bound, as ``jaxhc demo``) from the default component; "BHC, evidence-selected
family": the higher learned DPM bound of two starts (digits: ``BetaBernoulli.from_data`` and ``BetaBernoulli(1, 1)``; iris / wine:
``NormalInverseWishart.from_data`` and ``NormalGamma.from_data``), as ``jaxhc demo`` chooses.
BHC (``jaxhc.bhc``, ``alpha = 1``, float64) with ``BetaBernoulli.from_data`` (the
mean-matched Beta prior, fitted on the subset) for the digits and
``NormalInverseWishart.from_data`` for iris / wine; on the digits also BHC with the flat
``BetaBernoulli(1, 1)`` prior, and on iris / wine also (supplementary) BHC with
``NormalInverseWishart.from_data(X, cov_fraction=1.0)`` (prior expected covariance equal
to the data's per-feature variances instead of 0.1 times them). Baselines: ``scipy.cluster.hierarchy.linkage(X, method)``
with Euclidean distance for ``single``, ``complete``, ``average`` and ``ward``, on the same
(binarized / standardized) features. Score: exact dendrogram purity
(``jaxhc.metrics.dendrogram_purity``). Reported: mean and standard error
(``std(ddof=1) / sqrt(reps)``) over the subsets.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
from scipy.cluster.hierarchy import linkage  # noqa: E402

import jaxhc  # noqa: E402
from jaxhc.metrics import dendrogram_purity  # noqa: E402
from jaxhc.tree import Tree  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "bhc_purity.json")
LINKAGES = ("single", "complete", "average", "ward")
DATASETS = ("digits3", "digits10", "iris", "wine")
LEARN_OUT = os.path.join(HERE, "results", "bhc_learning.json")


# ------------------------------------------------------------------------------------------
# data
# ------------------------------------------------------------------------------------------
def _digits_binary():
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data >= 8).astype(np.float64), d.target.astype(np.int64)


def digits_subset(classes, per_class, seed):
    X, y = _digits_binary()
    rng = np.random.default_rng(seed)
    idx = np.concatenate([rng.choice(np.flatnonzero(y == c), per_class, replace=False) for c in classes])
    return X[idx], y[idx]


def uci_subset(name, frac, seed):
    from sklearn.datasets import load_breast_cancer, load_iris, load_wine

    d = {"iris": load_iris, "wine": load_wine, "breast_cancer": load_breast_cancer}[name]()
    X, y = d.data.astype(np.float64), d.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    m = int(round(frac * X.shape[0]))
    idx = np.sort(rng.choice(X.shape[0], m, replace=False))
    Xs = X[idx]
    sd = Xs.std(axis=0)
    Xs = (Xs - Xs.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    return Xs, y[idx]


def get_subset(name, seed):
    if name == "digits3":
        return digits_subset((0, 2, 4), 40, seed)
    if name == "digits10":
        return digits_subset(tuple(range(10)), 20, seed)
    if name == "breast_cancer":  # 150 random points of 569
        return uci_subset(name, 150 / 569, seed)
    return uci_subset(name, 0.8, seed)


def bhc_methods(name, X):
    """(method name, component) pairs of BHC for this data set."""
    if name.startswith("digits"):
        out = [("BHC", jaxhc.BetaBernoulli.from_data(X))]
        out.append(("BHC Beta(1,1)", jaxhc.BetaBernoulli(1.0, 1.0)))
        return out
    return [
        ("BHC", jaxhc.NormalInverseWishart.from_data(X)),
        # supplementary: a broader prior covariance (E[Sigma] = diag var(X) instead of 0.1x)
        ("BHC cov_frac=1", jaxhc.NormalInverseWishart.from_data(X, cov_fraction=1.0)),
    ]


def learned_candidates(name, X):
    """Starting components for the learned rows: the first is "BHC, learned"; the one of
    highest learned evidence among all is "BHC, evidence-selected family" (for the digits,
    the same family from its two starting priors; for iris / wine, full-covariance NIW
    against per-feature Normal-Gamma, as `jaxhc demo` and `jaxhc bhc` choose)."""
    if name.startswith("digits"):
        return [
            ("BetaBernoulli", jaxhc.BetaBernoulli.from_data(X)),
            ("BetaBernoulli from Beta(1,1)", jaxhc.BetaBernoulli(1.0, 1.0)),
        ]
    return [
        ("NormalInverseWishart", jaxhc.NormalInverseWishart.from_data(X)),
        ("NormalGamma", jaxhc.NormalGamma.from_data(X)),
    ]


COMPONENT_DESC = {
    "digits3": {"BHC": "BetaBernoulli.from_data(X) (mean-matched Beta prior)", "BHC Beta(1,1)": "BetaBernoulli(1, 1)"},
    "digits10": {"BHC": "BetaBernoulli.from_data(X) (mean-matched Beta prior)", "BHC Beta(1,1)": "BetaBernoulli(1, 1)"},
    "iris": {
        "BHC": "NormalInverseWishart.from_data(X)",
        "BHC cov_frac=1": "NormalInverseWishart.from_data(X, cov_fraction=1.0) (supplementary)",
    },
    "wine": {
        "BHC": "NormalInverseWishart.from_data(X)",
        "BHC cov_frac=1": "NormalInverseWishart.from_data(X, cov_fraction=1.0) (supplementary)",
    },
}


# ------------------------------------------------------------------------------------------
# evaluation
# ------------------------------------------------------------------------------------------
def evaluate(name, reps, verbose=True, learned=True):
    selected, evidences = [], []
    scores: dict[str, list] = {}
    times: dict[str, list] = {}
    info = None
    for seed in range(reps):
        X, y = get_subset(name, seed)
        info = {"n": int(X.shape[0]), "d": int(X.shape[1]), "classes": int(np.unique(y).size)}
        for meth, comp in bhc_methods(name, X):
            t0 = time.perf_counter()
            res = jaxhc.bhc(X, comp, 1.0, progress_bar=False)
            times.setdefault(meth, []).append(time.perf_counter() - t0)
            scores.setdefault(meth, []).append(dendrogram_purity(res.tree, y))
        if learned:
            fits = []
            for fam, comp in learned_candidates(name, X):
                t0 = time.perf_counter()
                fit = jaxhc.learn_hyperparameters(X, comp, 1.0, objective="dpm_lower_bound")
                fits.append((fam, fit, time.perf_counter() - t0))
            best = max(fits, key=lambda f: float(f[1].result.dpm_lower_bound))
            for meth, (fam, fit, secs) in (("BHC, learned", fits[0]), ("BHC, evidence-selected family", best)):
                times.setdefault(meth, []).append(secs if meth == "BHC, learned" else sum(f[2] for f in fits))
                scores.setdefault(meth, []).append(dendrogram_purity(fit.result.tree, y))
            selected.append(best[0])
            evidences.append({f: float(fit.result.dpm_lower_bound) for f, fit, _ in fits})
        for link in LINKAGES:
            meth = f"{link} linkage"
            t0 = time.perf_counter()
            Z = linkage(X, link)
            times.setdefault(meth, []).append(time.perf_counter() - t0)
            scores.setdefault(meth, []).append(dendrogram_purity(Tree.from_linkage(Z), y))
        if verbose:
            print(f"  {name} subset {seed}: " + ", ".join(f"{m}={v[-1]:.3f}" for m, v in scores.items()), flush=True)
    rows = {}
    for meth, v in scores.items():
        a = np.asarray(v)
        rows[meth] = {
            "mean": float(a.mean()),
            "se": float(a.std(ddof=1) / math.sqrt(a.size)) if a.size > 1 else float("nan"),
            "values": [float(x) for x in a],
            # the first BHC call of a shape includes compilation; report the median
            "median_time_s": float(np.median(times[meth])),
        }
    out = {"dataset": name, **(info or {}), "reps": reps, "components": COMPONENT_DESC[name], "results": rows}
    if learned:
        out["evidence_selected"] = selected  # the family (start) picked per subset
        out["learned_dpm_lower_bound"] = evidences
    return out


def print_table(all_res):
    meths = []
    for r in all_res:
        for m in r["results"]:
            if m not in meths:
                meths.append(m)
    colw = 18
    mw = max(16, *(len(m) + 1 for m in meths))
    hdr = f"{'method':<{mw}}" + "".join(f"{r['dataset'] + ' (n=' + str(r['n']) + ')':>{colw}}" for r in all_res)
    print("\nDendrogram purity, mean +- standard error over subsets")
    print("BHC = BetaBernoulli.from_data (digits) / NormalInverseWishart.from_data (iris, wine), alpha=1")
    print(hdr)
    print("-" * len(hdr))
    for m in meths:
        cells = []
        for r in all_res:
            v = r["results"].get(m)
            cells.append(f"{v['mean']:.3f} +- {v['se']:.3f}" if v else "-")
        print(f"{m:<{mw}}" + "".join(f"{c:>{colw}}" for c in cells))
    for r in all_res:
        if "evidence_selected" in r:
            picks = {f: r["evidence_selected"].count(f) for f in dict.fromkeys(r["evidence_selected"])}
            print(f"{r['dataset']}: evidence-selected " + ", ".join(f"{f} x{k}" for f, k in picks.items()))


# ------------------------------------------------------------------------------------------
# hyperparameter learning: evidence and purity before / after, and the true labelling
# ------------------------------------------------------------------------------------------
LEARN_DATASETS = ("digits3", "iris", "wine", "breast_cancer")


def learn_families(name, X):
    """(family name, data, starting component) for the learning table."""
    if name.startswith("digits"):
        return [
            ("BetaBernoulli", X, jaxhc.BetaBernoulli.from_data(X)),
            ("BetaBernoulli from Beta(1,1)", X, jaxhc.BetaBernoulli(1.0, 1.0)),
        ]
    return [
        ("NormalInverseWishart", X, jaxhc.NormalInverseWishart.from_data(X)),
        ("NormalKnownCov", X, jaxhc.NormalKnownCov.from_data(X)),
    ]


def _scores(X, y, comp, alpha):
    """Evidence, dendrogram purity, and the DPM log joint ``log p(D, c)`` of BHC's flat cut
    (r < 0.5) and of the true labelling under the same model."""
    from jaxhc.models.dpm import dpm_log_joint

    res = jaxhc.bhc(X, comp, alpha, progress_bar=False)
    cut = np.asarray(res.cut(0.5))
    return {
        "evidence": float(res.log_evidence),
        "dpm_bound": float(res.dpm_lower_bound),
        "purity": float(dendrogram_purity(res.tree, y)),
        "clusters": int(np.unique(cut).size),
        "joint_cut": float(dpm_log_joint(X, cut, comp, alpha)),
        "joint_true": float(dpm_log_joint(X, y, comp, alpha)),
    }


def evaluate_learning(name, reps, steps=100, max_rounds=10, verbose=True):
    """Per family: scores with the empirical defaults (alpha = 1), then with the
    hyperparameters (alpha and the family's) learned by `jaxhc.learn_hyperparameters`."""
    rows = {}
    info = None
    for seed in range(reps):
        X, y = get_subset(name, seed)
        info = {"n": int(X.shape[0]), "d": int(X.shape[1]), "classes": int(np.unique(y).size)}
        for fam, Xf, comp in learn_families(name, X):
            before = _scores(Xf, y, comp, 1.0)
            t0 = time.perf_counter()
            fit = jaxhc.learn_hyperparameters(Xf, comp, 1.0, steps=steps, max_rounds=max_rounds)
            secs = time.perf_counter() - t0
            after = _scores(Xf, y, fit.component, fit.alpha)
            after["alpha"] = float(fit.alpha)
            rows.setdefault(fam, []).append({"before": before, "after": after, "seconds": secs})
            if verbose:
                print(
                    f"  {name} subset {seed} {fam}: evidence {before['evidence']:.1f} -> {after['evidence']:.1f}, "
                    f"purity {before['purity']:.3f} -> {after['purity']:.3f}",
                    flush=True,
                )
    out = {}
    for link in ("ward", "average"):  # the baselines, on the same subsets
        rows[f"{link} linkage"] = []
        for seed in range(reps):
            X, y = get_subset(name, seed)
            pur = float(dendrogram_purity(Tree.from_linkage(linkage(X, link)), y))
            rows[f"{link} linkage"].append({"purity": pur})
    for fam, rs in rows.items():
        if fam.endswith("linkage"):
            out[fam] = {"summary": {"purity": float(np.mean([r["purity"] for r in rs]))}, "subsets": rs}
            continue
        summ = {}
        for when in ("before", "after"):
            for key in ("evidence", "dpm_bound", "purity", "clusters", "joint_cut", "joint_true"):
                summ[f"{when}_{key}"] = float(np.mean([r[when][key] for r in rs]))
            summ[f"{when}_true_beats_cut"] = int(sum(r[when]["joint_true"] > r[when]["joint_cut"] for r in rs))
        summ["alpha_learned"] = float(np.mean([r["after"]["alpha"] for r in rs]))
        summ["seconds"] = float(np.median([r["seconds"] for r in rs]))
        out[fam] = {"summary": summ, "subsets": rs}
    return {"dataset": name, **(info or {}), "reps": reps, "families": out}


def print_learning_table(all_res):
    print("\nHyperparameter learning (means over subsets; 'true > cut': subsets where the true labelling has a")
    print("higher DPM log joint log p(D, c) than BHC's r < 0.5 cut under the same model, i.e. the search, not the")
    print("model, falls short there)")
    hdr = (
        "| data | family | evidence before -> after | purity before -> after | clusters | "
        "log p(D, c_cut) | log p(D, c_true) | true > cut |"
    )
    print(hdr)
    print("|---|---|---|---|---|---|---|---|")
    for r in all_res:
        for fam, v in r["families"].items():
            s = v["summary"]
            if fam.endswith("linkage"):
                print(f"| {r['dataset']} (n={r['n']}, d={r['d']}) | {fam} (baseline) | | {s['purity']:.3f} | | | | |")
                continue
            print(
                f"| {r['dataset']} (n={r['n']}, d={r['d']}) | {fam} | {s['before_evidence']:.1f} -> {s['after_evidence']:.1f} "
                f"| {s['before_purity']:.3f} -> {s['after_purity']:.3f} "
                f"| {s['before_clusters']:.1f} -> {s['after_clusters']:.1f} "
                f"| {s['before_joint_cut']:.1f} -> {s['after_joint_cut']:.1f} "
                f"| {s['before_joint_true']:.1f} -> {s['after_joint_true']:.1f} "
                f"| {s['before_true_beats_cut']} -> {s['after_true_beats_cut']} of {r['reps']} |"
            )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 subsets per data set (smoke test)")
    ap.add_argument("--reps", type=int, default=None, help="subsets per data set (default 10)")
    ap.add_argument("--datasets", type=str, default=",".join(DATASETS), help=f"subset of {','.join(DATASETS)}")
    ap.add_argument("--out", type=str, default=None, help=f"JSON output (default {DEFAULT_OUT}; --quick: none)")
    ap.add_argument(
        "--no-learned", action="store_true", help="skip the rows 'BHC, learned' and 'BHC, evidence-selected family'"
    )
    ap.add_argument(
        "--learn",
        action="store_true",
        help=f"hyperparameter learning table instead (data sets {','.join(LEARN_DATASETS)}; "
        f"default 3 subsets; JSON {LEARN_OUT})",
    )
    args = ap.parse_args(argv)
    jaxhc.enable_compilation_cache()  # purity, not compile time: programs may come from the disk cache
    if args.learn:
        reps = args.reps or (1 if args.quick else 3)
        names = (
            [s for s in args.datasets.split(",") if s] if args.datasets != ",".join(DATASETS) else list(LEARN_DATASETS)
        )
        t0 = time.perf_counter()
        res = [
            evaluate_learning(n, reps, steps=30 if args.quick else 100, max_rounds=2 if args.quick else 10)
            for n in names
        ]
        print_learning_table(res)
        print(f"\ntotal {time.perf_counter() - t0:.1f} s")
        out_path = args.out or (None if args.quick else LEARN_OUT)
        if out_path:
            with open(out_path, "w") as f:
                json.dump(
                    {
                        "benchmark": "bhc_purity --learn",
                        "jax": jax.__version__,
                        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                        "method": "subsets as for purity; alpha=1 and from_data defaults, then "
                        "learn_hyperparameters(steps=100, max_rounds=10); dpm_log_joint of the "
                        "r<0.5 cut and of the true labels",
                        "datasets": res,
                    },
                    f,
                    indent=1,
                )
            print(f"wrote {out_path}")
        return 0
    reps = args.reps or (2 if args.quick else 10)
    out_path = args.out or (None if args.quick else DEFAULT_OUT)
    names = [s for s in args.datasets.split(",") if s]
    for s in names:
        if s not in DATASETS + ("breast_cancer",):
            ap.error(f"unknown data set {s!r}; choose from {DATASETS}")

    t0 = time.perf_counter()
    all_res = [evaluate(name, reps, learned=not args.no_learned) for name in names]
    print_table(all_res)
    print(f"\ntotal {time.perf_counter() - t0:.1f} s")

    if out_path:
        os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
        doc = {
            "benchmark": "bhc_purity",
            "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "machine": {
                "platform": platform.platform(),
                "cpu_count": os.cpu_count(),
                "python": platform.python_version(),
                "jax": jax.__version__,
                "backend": jax.default_backend(),
            },
            "method": {
                "subsets": "numpy default_rng(seed), seed = 0..reps-1",
                "digits3": "binarized digits (pixel >= 8), classes {0,2,4}, 40 per class",
                "digits10": "binarized digits, 10 classes, 20 per class",
                "iris/wine": "80% random subsample, standardized on the subsample",
                "bhc": "alpha=1, float64; BetaBernoulli.from_data (digits), NIW.from_data (iris/wine); "
                "digits also BetaBernoulli(1,1); iris/wine also NIW.from_data(X, cov_fraction=1.0)",
                "bhc_learned": "learn_hyperparameters(objective='dpm_lower_bound') (alpha and the prior) from "
                "BetaBernoulli.from_data (digits) / NIW.from_data (iris/wine)",
                "bhc_evidence_selected": "the highest learned DPM lower bound among BetaBernoulli from from_data and "
                "from Beta(1,1) (digits), NIW.from_data and NormalGamma.from_data "
                "(iris/wine)",
                "linkage": "scipy.cluster.hierarchy.linkage, Euclidean",
                "score": "jaxhc.metrics.dendrogram_purity; mean and se = std(ddof=1)/sqrt(reps)",
            },
            "datasets": all_res,
        }
        with open(out_path, "w") as f:
            json.dump(doc, f, indent=2)
        print(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
