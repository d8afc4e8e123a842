"""Level-wise quality of BHMC (defaults only) against Ward linkage and BHC, with the model's
own verdict on the true labelling.

Usage::

    python benchmarks/bhmc_quality.py            # 5 seeds per synthetic design + digits (~15 min on 2 cores)
    python benchmarks/bhmc_quality.py --quick    # 2 seeds, fewer sweeps, no JSON
    python benchmarks/bhmc_quality.py --seeds 3 --out /tmp/q.json

Data (nothing is downloaded):

* ``h2``: `jaxhc.datasets.hierarchical_gaussian` with 3 top groups x 2 subgroups x 25 points,
  D = 4, scales (6, 2), noise 0.5 (the design of issue 14); seed ``s`` also multiplies the data
  by ``10 ** (s - 2)`` and shifts it by ``s``, so the scale varies over five decades.
* ``h3``: 2 x 2 x 2 groups x 15 points, D = 5, scales (8, 3, 1), noise 0.3, same rescaling.
* ``digits``: 200 scikit-learn digits (20 per class, seed 0), standardised pixels projected on
  10 principal components (the BHMC notebook's set); the truth is flat (10 classes), tiled to
  every level.

Methods, each cut to the true number of levels ``L`` (`jaxhc.metrics.tree_level_labels` for
trees): ``ward`` (scipy's Ward tree, the baseline a user would pick), ``ward-gaps`` (Ward's
tree cut at its largest merge-height jumps: BHMC's start, `level_sizes_from_gaps`), ``bhc``
(`jaxhc.bhc` with ``NormalInverseWishart.from_data``), ``pydt`` (`jaxhc.pydt_em`, 30 greedy
EM iterations with its defaults: hyperparameters learned; its multifurcating tree cut level
by level), ``bhmc`` (``jaxhc.bhmc(key, X,
depth=L)`` with every default: the reported state, i.e. the best of the start and the kept
sweeps by the complete-data likelihood) and ``bhmc-last`` (the sampler's last state, a
posterior draw).

Model evidence: the complete-data log likelihood ``log p(X, c, V | B, theta)`` (the paper's
criterion, maximised over 10 draws of ``B, theta`` from their conditionals given the paths and
components, at the chain's last hyperparameters) of the reported state (``found``), of the
true labelling with one component per true leaf group (``truth``), of the true paths with the
reported components (``truth_found_components``), and on the synthetic sets of the true
labelling with its top level shuffled (the level-1 groups re-formed from random leaf groups of
the same sizes; ``truth_top_shuffled``). When the truth scores below the found state the model
itself prefers the found tree (a weak model for these data, not a weak sampler); when the
shuffled truth scores like the truth, the model cannot tell the true top level from a wrong
one.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from scipy.cluster.hierarchy import linkage  # noqa: E402

import jaxhc  # noqa: E402
from jaxhc.inference import bhmc as B  # noqa: E402
from jaxhc.metrics import levelwise_scores, tree_level_labels  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "bhmc_quality.json")
METHODS = ("ward", "ward-gaps", "bhc", "pydt", "bhmc", "bhmc-last")


def _design(name, seed):
    if name == "h2":
        X, y = jaxhc.datasets.hierarchical_gaussian(seed, (3, 2), 25, 4, (6.0, 2.0), 0.5)
    elif name == "h3":
        X, y = jaxhc.datasets.hierarchical_gaussian(1000 + seed, (2, 2, 2), 15, 5, (8.0, 3.0, 1.0), 0.3)
    else:
        raise ValueError(name)
    return X * 10.0 ** (seed - 2) + seed, y


def _digits():
    from sklearn.datasets import load_digits

    Xd, yd = load_digits(return_X_y=True)
    rng = np.random.default_rng(0)
    idx = np.concatenate([rng.choice(np.flatnonzero(yd == c), 20, replace=False) for c in range(10)])
    Xd, y = Xd[idx], yd[idx]
    Xd = Xd - Xd.mean(0)
    sd = Xd.std(0)
    Xd = Xd / np.where(sd > 0, sd, 1.0)
    U, S, _ = np.linalg.svd(Xd, full_matrices=False)
    return U[:, :10] * S[:10], np.tile(y[:, None], (1, 3))


def _criterion(X, labels, components, cfg, hyper, reps=10):
    """Best complete-data log likelihood over ``reps`` draws of (B, theta) | (V, c)."""
    best = -np.inf
    for r in range(reps):
        st = B.state_from_level_labels(
            X,
            labels,
            cfg,
            key=jax.random.key(10_000 + r),
            components=components,
            max_nodes=X.shape[0] * labels.shape[1] + labels.shape[1] + 1,
            max_components=128,
            **hyper,
        )
        best = max(best, float(B.complete_data_log_likelihood(st, jnp.asarray(X))))
    return best


def _shuffle_top(y, rng):
    """The true labels with level 1 re-formed: the level-2 groups are dealt to level-1 groups
    of the same sizes (counted in level-2 groups) at random."""
    leaf2 = y[:, 1]
    groups = np.unique(leaf2)
    top_of = np.array([y[leaf2 == g, 0][0] for g in groups])
    perm = rng.permutation(top_of)
    out = y.copy()
    out[:, 0] = perm[np.searchsorted(groups, leaf2)]
    return out


def run_case(name, X, y, key, warm, keep, evidence=True, pydt_iters=30):
    L = y.shape[1]
    N = X.shape[0]
    row = {"dataset": name, "N": N, "D": X.shape[1], "levels": L}
    Zw = linkage(X, "ward")
    labels = {"ward": tree_level_labels(jaxhc.Tree.from_linkage(Zw), L)}
    start, sizes = B.tree_init_state(X, L, B.make_config(X), key=jax.random.key(0))  # BHMC's start
    labels["ward-gaps"] = B.state_to_tree(start)[1]
    t = time.perf_counter()
    bt = jaxhc.bhc(X, jaxhc.NormalInverseWishart.from_data(X)).tree
    row["bhc_s"] = time.perf_counter() - t
    labels["bhc"] = tree_level_labels(bt, L)
    t = time.perf_counter()
    pt = jaxhc.pydt_em(key, X, num_iters=pydt_iters, progress_bar=False).tree
    row["pydt_s"] = time.perf_counter() - t
    labels["pydt"] = tree_level_labels(pt, L)
    t = time.perf_counter()
    res = jaxhc.bhmc(key, X, depth=L, num_warmup=warm, num_samples=keep, progress_bar=False)
    row["bhmc_s"] = time.perf_counter() - t
    labels["bhmc"] = res.level_labels
    labels["bhmc-last"] = B.state_to_tree(res.state)[1]
    row["bhmc_best_sweep"] = int(res.best_sweep)
    row["gap_sizes"] = sizes
    row["scores"] = {m: {k: v.tolist() for k, v in levelwise_scores(y, labels[m]).items()} for m in METHODS}
    row["hyper_last"] = {k: float(res.trace[k][-1]) for k in ("alpha", "gamma0", "gamma", "sigma2")}
    if evidence:
        cfg = res.config
        hyper = {k: float(res.trace[k][-1]) for k in ("alpha", "gamma0", "gamma", "sigma2")}
        row["loglik_found"] = _criterion(X, res.level_labels, res.labels, cfg, hyper)
        row["loglik_truth"] = _criterion(X, y, None, cfg, hyper)
        row["loglik_truth_found_components"] = _criterion(X, y, res.labels, cfg, hyper)
        if y.shape[1] > 1 and np.unique(y[:, 1]).size > np.unique(y[:, 0]).size:
            row["loglik_truth_top_shuffled"] = _criterion(
                X, _shuffle_top(y, np.random.default_rng(0)), None, cfg, hyper
            )
    return row


def _report(r):
    ev = "  ".join(f"{k[7:]} {v:.1f}" for k, v in r.items() if k.startswith("loglik_"))
    print(
        f"  {r['dataset']} seed {r.get('seed', 0)}: bhmc NMI {np.round(r['scores']['bhmc']['nmi'], 3)} ward "
        f"{np.round(r['scores']['ward']['nmi'], 3)} best sweep {r['bhmc_best_sweep']} | log p(X, c, V | B, theta): "
        f"{ev}",
        flush=True,
    )


def _fmt(rows, L):
    lines = []
    head = (
        f"{'data':10s}{'method':11s}"
        + "".join(f"{'NMI L' + str(l + 1):>9s}" for l in range(L))
        + "".join(f"{'pur L' + str(l + 1):>9s}" for l in range(L))
    )
    lines.append(head)
    for m in METHODS:
        nmi = np.mean([r["scores"][m]["nmi"] for r in rows], axis=0)
        pur = np.mean([r["scores"][m]["purity"] for r in rows], axis=0)
        lines.append(
            f"{rows[0]['dataset']:10s}{m:11s}" + "".join(f"{v:9.3f}" for v in nmi) + "".join(f"{v:9.3f}" for v in pur)
        )
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    jaxhc.enable_compilation_cache()  # quality, not compile time: programs may come from the disk cache
    seeds = 2 if a.quick else a.seeds
    warm, keep = (20, 20) if a.quick else (100, 100)
    out = {
        "machine": {
            "python": platform.python_version(),
            "jax": jax.__version__,
            "cpus": os.cpu_count(),
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        },
        "sweeps": {"warmup": warm, "samples": keep},
        "rows": [],
    }
    t0 = time.perf_counter()
    for design in ("h2", "h3"):
        rows = []
        for s in range(seeds):
            X, y = _design(design, s)
            r = run_case(design, X, y, jax.random.key(s), warm, keep)
            r["seed"] = s
            _report(r)
            rows.append(r)
        out["rows"] += rows
        print("\n".join(_fmt(rows, rows[0]["levels"])), flush=True)
    X, y = _digits()
    r = run_case("digits", X, y, jax.random.key(0), warm, keep)
    _report(r)
    out["rows"].append(r)
    print("\n".join(_fmt([r], 3)), flush=True)
    print(f"total {time.perf_counter() - t0:.0f} s")
    path = a.out or (None if a.quick else DEFAULT_OUT)
    if path:
        with open(path, "w") as fh:
            json.dump(out, fh, indent=1)
        print("wrote", path)


if __name__ == "__main__":
    main()
