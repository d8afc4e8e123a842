"""``jaxhc demo`` and ``jaxhc bhc``: BHC with learned (or fixed) hyperparameters, the family of
highest DPM evidence bound, dendrogram purity beside scipy's linkages, and the outputs
(dendrogram PNG, Newick, JSON); see `jaxhc.cli` for the commands."""

from __future__ import annotations

import json
import math
import os
import re
import time
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

import numpy as np

from ..inference.bhc.auto import (
    FAMILIES,
    LEARN_OBJECTIVE,
    LEARN_SUBSET,
    RANDOMIZED_ABOVE,
    REAL_FAMILIES,
    BHCFit,
    FamilyFit,
    candidate_families,
    fit_bhc,
    make_component,
)
from .common import InputError, enable_compile_cache, log
from .tables import read_table

__all__ = [
    "COMPONENTS",
    "LEARN_OBJECTIVE",
    "LEARN_SUBSET",
    "LINKAGE_MAX_ROWS",
    "LINKAGE_METHODS",
    "PLOT_CLUSTERS",
    "PLOT_FULL_MAX",
    "RANDOMIZED_ABOVE",
    "QUICK_WINE_FEATURES",
    "REAL_FAMILIES",
    "Fit",
    "Report",
    "Verdict",
    "class_respecting_tree",
    "cmd_bhc",
    "cmd_demo",
    "linkage_purities",
]

# scipy's linkages BHC is compared with (Euclidean); Ward is scikit-learn's default
LINKAGE_METHODS = ("average", "complete", "single", "ward")
# the families (`jaxhc.fit_bhc`: the CLI's pipeline as a library call), its candidates for
# real-valued data and its objective: BHC's lower bound on the DPM marginal likelihood
COMPONENTS = FAMILIES
Fit = FamilyFit
# scipy's linkages are compared only up to this many rows (their condensed distance matrix
# is n^2 / 2 floats: 1.6 GB at 20 000 rows)
LINKAGE_MAX_ROWS = 20000
# above this many rows the dendrogram PNG shows the top PLOT_CLUSTERS clusters only (matplotlib
# cannot draw 10^6 leaves; jaxhc.plot.plot_bhc's truncate)
PLOT_FULL_MAX = 2000
PLOT_CLUSTERS = 50
# alcohol, flavanoids, colour intensity, proline: wine's classic discriminating features
QUICK_WINE_FEATURES = [0, 6, 9, 12]


# ---------------------------------------------------------------------------------------
# running BHC and reporting
# ---------------------------------------------------------------------------------------
@dataclass
class Verdict:
    """Why BHC's tree loses to a linkage tree when it does: the model's own scores of the
    true classes against BHC's answer (all at the fitted hyperparameters)."""

    class_tree_bound: float  # DPM lower bound of the class-respecting tree closest to BHC's
    truth_joint: float  # DPM log p(D, true classes)
    cut_joint: float  # DPM log p(D, BHC's clusters at r < 0.5)
    n_cut: int
    n_classes: int


@dataclass
class Report:
    name: str
    n: int
    d: int
    component: str
    log_evidence: float
    dpm_bound: float
    n_clusters: int
    seconds: float
    purity: dict  # method -> purity (empty without labels)
    fixed_bound: Optional[float] = None  # DPM bound with the starting prior, when learned
    alpha: float = 1.0
    candidates: dict = field(default_factory=dict)  # family -> learned (or fixed) DPM bound
    verdict: Optional[Verdict] = None
    method: str = "greedy"  # BHCFit.method: "greedy" or "rbhc" (subset learning + randomized BHC)
    subset: int = 0  # rows the hyperparameters were learned on ("rbhc")


def linkage_purities(X: np.ndarray, labels, methods: Sequence[str] = LINKAGE_METHODS) -> dict:
    """``{method: dendrogram purity}`` of scipy's linkage trees (Euclidean) of ``X`` against
    ``labels``; missing entries are imputed by column means first."""
    from scipy.cluster.hierarchy import linkage

    from ..metrics import dendrogram_purity
    from ..tree import Tree

    out = {}
    if np.isnan(X).any():  # linkage cannot handle missing entries; impute column means
        X = np.where(np.isnan(X), np.nanmean(X, axis=0), X)
    for m in methods:
        out[m] = dendrogram_purity(Tree.from_linkage(linkage(X, method=m, metric="euclidean")), labels)
    return out


def _has_pairs(labels) -> bool:
    if labels is None:
        return False
    _, counts = np.unique(np.asarray(labels), return_counts=True)
    return bool(np.any(counts >= 2))


def _restricted(nested, keep):
    """The subtree of a nested-pairs tree induced by the leaves in ``keep`` (nodes left with
    one child are contracted); None when no leaf is kept."""
    if not isinstance(nested, tuple):
        return nested if nested in keep else None
    a, b = _restricted(nested[0], keep), _restricted(nested[1], keep)
    if a is None or b is None:
        return b if a is None else a
    return (a, b)


def class_respecting_tree(tree, labels, score):
    """The tree closest to ``tree`` in which every class of ``labels`` is a subtree: each
    class keeps the hierarchy ``tree`` induces on its members, and the class subtrees are
    joined greedily, at each step the pair whose join gives the highest ``score`` (a function
    of a `Tree`) when the remaining groups are joined in a chain. Exhaustive for up to three
    classes. Returns a `Tree`."""
    from ..tree import Tree

    labels = np.asarray(labels)
    nested = tree.to_nested()
    groups = [_restricted(nested, set(np.flatnonzero(labels == c).tolist())) for c in np.unique(labels)]

    def chain(gs):
        out = gs[0]
        for g in gs[1:]:
            out = (out, g)
        return out

    while len(groups) > 1:
        best = None
        for i in range(len(groups)):
            for j in range(i + 1, len(groups)):
                rest = [g for k, g in enumerate(groups) if k not in (i, j)]
                cand = [(groups[i], groups[j])] + rest
                s = score(Tree.from_nested(chain(cand)))
                if best is None or s > best[0]:
                    best = (s, cand)
        groups = best[1]
    return Tree.from_nested(groups[0])


def _verdict(X, fit: BHCFit, labels) -> Verdict:
    """The model's scores of the true classes against BHC's tree and clusters."""
    from ..inference.bhc.greedy import tree_log_evidence
    from ..models.dpm import dpm_log_joint

    score = lambda t: float(tree_log_evidence(X, t, fit.component, fit.alpha).dpm_lower_bound)  # noqa: E731
    ct = class_respecting_tree(fit.result.tree, labels, score)
    cut = np.asarray(fit.result.cut(0.5))
    _, y = np.unique(np.asarray(labels), return_inverse=True)
    return Verdict(
        score(ct),
        float(dpm_log_joint(X, y, fit.component, fit.alpha)),
        float(dpm_log_joint(X, cut, fit.component, fit.alpha)),
        int(cut.max()) + 1,
        int(y.max()) + 1,
    )


def _run_jobs(jobs, workers: int) -> list:
    """Runs the jobs, ``workers`` at a time in threads (JAX compiles and runs outside the
    GIL, so the compilations of different data sets overlap)."""
    if workers <= 1 or len(jobs) <= 1:
        return [j() for j in jobs]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(workers, len(jobs))) as ex:
        return list(ex.map(lambda j: j(), jobs))


def _workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def best_linkage(purity: dict) -> Optional[str]:
    """The linkage of highest purity in a purity table (first of `LINKAGE_METHODS` on ties;
    None when no linkage was run)."""
    return max((m for m in LINKAGE_METHODS if m in purity), key=lambda m: purity[m], default=None)


def _report(name, X, fit: BHCFit, labels, seconds: Optional[float] = None):
    """The `Report` of a `fit_bhc` result: its dendrogram purity beside scipy's linkages (up
    to `LINKAGE_MAX_ROWS` rows), and a `Verdict` when BHC's purity is below the best
    linkage's. ``seconds``: the fit's wall time (default: the families' fits, summed)."""
    from ..metrics import dendrogram_purity

    res = fit.result
    purity, verdict = {}, None
    if _has_pairs(labels):
        purity["bhc"] = dendrogram_purity(res.tree, labels)
        if X.shape[0] <= LINKAGE_MAX_ROWS:
            purity.update(linkage_purities(X, labels))
            best = best_linkage(purity)
            if best is not None and purity["bhc"] < purity[best]:
                verdict = _verdict(X, fit, labels)
    return Report(
        name,
        X.shape[0],
        X.shape[1],
        fit.family,
        fit.log_evidence,
        fit.dpm_lower_bound,
        res.n_clusters(0.5),
        sum(f.seconds for f in fit.fits.values()) if seconds is None else seconds,
        purity,
        fit.start_bound if fit.learned else None,
        fit.alpha,
        dict(fit.bounds),
        verdict,
        fit.method,
        0 if fit.subset is None else int(len(fit.subset)),
    )


def _format_table(reports: Sequence[Report]) -> str:
    learned = any(r.fixed_bound is not None for r in reports)
    head = (
        ["data set", "n", "d", "component", "log p(D|T)", "DPM bound"]
        + (["gain"] if learned else [])
        + ["K(r<.5)", "BHC", *LINKAGE_METHODS, "time[s]"]
    )
    rows = []
    for r in reports:
        pur = [f"{r.purity[m]:.3f}" if m in r.purity else "-" for m in ("bhc",) + LINKAGE_METHODS]
        gain = [f"{r.dpm_bound - r.fixed_bound:+.1f}" if r.fixed_bound is not None else "-"] if learned else []
        rows.append(
            [
                r.name,
                str(r.n),
                str(r.d),
                r.component,
                f"{r.log_evidence:.2f}",
                f"{r.dpm_bound:.2f}",
                *gain,
                str(r.n_clusters),
                *pur,
                f"{r.seconds:.2f}",
            ]
        )
    widths = [max(len(h), *(len(row[j]) for row in rows)) for j, h in enumerate(head)]
    left = {0, 3}
    p0 = head.index("BHC")

    def fmt(cells):
        return "  ".join(c.ljust(w) if j in left else c.rjust(w) for j, (c, w) in enumerate(zip(cells, widths)))

    k = 1 + len(LINKAGE_METHODS)
    group = " " * (sum(widths[:p0]) + 2 * p0) + "dendrogram purity".center(sum(widths[p0 : p0 + k]) + 2 * (k - 1), "-")
    lines = [group, fmt(head), fmt(["-" * w for w in widths])] + [fmt(row) for row in rows]
    return "\n".join(lines)


def _hyper_json(comp) -> dict:
    """The component's hyperparameters as JSON lists (its dataclass fields)."""
    import dataclasses

    out = {"family": type(comp).__name__}
    for f in dataclasses.fields(comp):
        v = getattr(comp, f.name)
        try:
            a = np.asarray(v, dtype=float)
        except (TypeError, ValueError):
            continue
        out[f.name] = a.tolist()
    return out


def _explain(r: Report) -> List[str]:
    """Lines under the table: the family choice, and the verdict where BHC loses."""
    lines = []
    if r.method == "rbhc":
        what = f"on {r.subset} random rows" if r.subset else "from all rows (fixed prior, one family)"
        lines.append(
            f"{r.name}: {r.n} rows: family and hyperparameters chosen {what}, then randomized BHC (jaxhc.rbhc) on "
            f"all {r.n} rows (method rbhc; greedy BHC up to --randomized-above rows)"
        )
    if len(r.candidates) > 1:
        alt = ", ".join(f"{k} {v:.1f}" for k, v in sorted(r.candidates.items(), key=lambda kv: -kv[1]))
        lines.append(f"{r.name}: family chosen by the DPM evidence bound: {alt}")
    v = r.verdict
    if v is not None:
        dt = v.class_tree_bound - r.dpm_bound
        dj = v.truth_joint - v.cut_joint
        side = lambda x: "above" if x > 0 else "below"  # noqa: E731
        if abs(dt) <= 0.05:
            why = (
                "the model does not decide it: the tree that keeps the true classes together scores the same "
                "(within 0.05 nats)"
            )
        elif dt > 0:
            why = "a better tree exists under the model: the greedy search stopped short of the model's optimum"
        else:
            why = "the model itself prefers BHC's tree, not only the greedy search"
        m = best_linkage(r.purity)
        lines.append(
            f"{r.name}: BHC's purity {r.purity['bhc']:.3f} is below {m} linkage's {r.purity[m]:.3f} (the best "
            f"linkage); "
            f"{why}. At the fitted prior (alpha = {r.alpha:.3g}) the tree that keeps the {v.n_classes} true "
            f"classes together has DPM bound {v.class_tree_bound:.2f} against BHC's {r.dpm_bound:.2f}, and the DPM "
            f"scores the true classes log p(D, c) = {v.truth_joint:.1f}, {abs(dj):.1f} {side(dj)} BHC's "
            f"{v.n_cut} clusters at r < 0.5."
        )
    return lines


def _safe_stem(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "data"


def _write_outputs(out_dir, stem, res, leaf_names, classes, extra_json: Optional[dict] = None) -> List[str]:
    """The dendrogram PNG (above `PLOT_FULL_MAX` rows, its top `PLOT_CLUSTERS` clusters),
    the Newick file and the JSON summary; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..plot import plot_bhc

    os.makedirs(out_dir, exist_ok=True)
    paths = []
    n = res.tree.n_leaves
    truncate = PLOT_CLUSTERS if n > PLOT_FULL_MAX else None
    ax = plot_bhc(res, labels=leaf_names, colors_by=classes, truncate=truncate)
    if ax.get_title():
        ax.set_title(f"{stem}: " + ax.get_title(), fontsize=10)
    png = os.path.join(out_dir, f"{stem}_dendrogram.png")
    ax.figure.tight_layout()
    ax.figure.savefig(png, dpi=110)
    plt.close(ax.figure)
    paths.append(png)
    nwk = os.path.join(out_dir, f"{stem}.nwk")
    with open(nwk, "w") as f:
        f.write(res.tree.to_newick(leaf_names) + "\n")
    paths.append(nwk)
    if extra_json is not None:
        js = os.path.join(out_dir, f"{stem}_bhc.json")
        with open(js, "w") as f:  # indented for small trees (json's indent is its slow encoder)
            json.dump(extra_json, f, indent=1 if n <= PLOT_FULL_MAX else None)
        paths.append(js)
    return paths


# ---------------------------------------------------------------------------------------
# subcommands
# ---------------------------------------------------------------------------------------
def cmd_demo(args) -> int:
    from .. import datasets

    progress = not args.no_progress
    if args.per_class is not None and args.per_class < 2:
        raise InputError(f"--per-class must be at least 2, got {args.per_class}")
    # --quick: the paper's 40 digits per class; 20 rows per class of iris and wine and 4 of
    # wine's 13 features, so the two tables have the same shape [60, 4] and share one
    # compiled BHC program (compilation, not the clustering, dominates at these sizes)
    digits_per_class = args.per_class or (40 if args.quick else None)  # None: all ~180 per class
    table_per_class = 20 if args.quick else None

    def subsample(X, y, per_class, seed):
        if per_class is None:
            return X, y
        rng = np.random.default_rng(seed)
        idx = np.concatenate(
            [
                np.sort(rng.choice(np.flatnonzero(y == c), min(per_class, np.sum(y == c)), replace=False))
                for c in np.unique(y)
            ]
        )
        return X[idx], y[idx]

    try:
        Xd, yd = datasets.load_digits_binary(classes=(0, 2, 4), per_class=digits_per_class, key_or_seed=0)
    except ValueError as e:
        raise InputError(str(e)) from None
    Xi, yi = subsample(*datasets.load_iris(), table_per_class, 1)
    Xw, yw = subsample(*datasets.load_wine(), table_per_class, 2)
    if args.quick:
        Xw = Xw[:, QUICK_WINE_FEATURES]
    std = lambda X: (X - X.mean(0)) / np.where(X.std(0) > 0, X.std(0), 1.0)  # noqa: E731
    problems = [
        ("digits024", Xd, yd),
        ("iris", std(Xi), yi),
        ("wine4" if args.quick else "wine", std(Xw), yw),
    ]
    learn = not args.fixed_prior
    if not args.no_cache:
        enable_compile_cache(args.cache_dir, progress, "demo")
    reports, written, notes = [], [], []
    t_all = time.perf_counter()
    jobs = []
    for name, X, y in problems:
        kinds = candidate_families(X)
        log(
            progress,
            f"[jaxhc demo] BHC on {name} (n={X.shape[0]}, d={X.shape[1]}; "
            f"{' vs '.join(kinds)}{', hyperparameters learned' if learn else ', fixed prior'})",
        )
        jobs.append(lambda X=X, kinds=kinds: fit_bhc(X, kinds, alpha=args.alpha, learn=learn, workers=len(kinds)))
    log(progress, f"[jaxhc demo] {len(jobs)} data sets, {_workers()} at a time ...")
    fits = _run_jobs(jobs, _workers())
    for (name, X, y), fit in zip(problems, fits):
        res, rep = fit.result, _report(name, X, fit, y)
        reports.append(rep)
        notes += _explain(rep)
        leaf_names = [f"{c}_{i}" for i, c in enumerate(y)]
        written += _write_outputs(args.out, name, res, leaf_names, y)
    print(_format_table(reports))
    print(
        "(dendrogram purity of BHC and of scipy linkage on the same data, Euclidean; "
        + (
            "alpha and the prior learned by the DPM evidence bound, gain of the bound over the starting prior; "
            if learn
            else ""
        )
        + "time includes JIT compilation)"
    )
    for line in notes:
        print(line)
    for p in written:
        print(f"wrote {p}")
    wins = sum(r.purity["bhc"] >= r.purity[best_linkage(r.purity)] for r in reports)
    explained = sum(r.verdict is not None for r in reports)
    print(
        f"demo done: {len(reports)} data sets{' (quick)' if args.quick else ''} in "
        f"{time.perf_counter() - t_all:.1f} s, BHC purity at least the best linkage's on {wins}/{len(reports)}"
        + (f" ({explained} explained above)" if explained else "")
        + f"; outputs in {args.out}"
    )
    return 0


def cmd_bhc(args) -> int:
    progress = not args.no_progress
    table = read_table(args.file, args.labels_column)
    X = table.X
    with np.errstate(over="ignore", invalid="ignore"):
        squares_ok = np.isfinite(np.nansum(np.square(X)))
    if not squares_ok:
        raise InputError(
            f"{args.file}: values up to {float(np.nanmax(np.abs(X))):.3g} are too large (their squares "
            f"overflow float64); rescale the data (change its units)"
        )
    if args.alpha <= 0 or not math.isfinite(args.alpha):
        raise InputError(f"--alpha must be a positive number, got {args.alpha}")
    kinds = (args.component,) if args.component else candidate_families(X)
    if kinds == ("binomial",) and args.trials is None:
        raise InputError("--component binomial needs --trials T (the number of trials per entry)")
    if args.trials is not None and kinds != ("binomial",):
        raise InputError("--trials only applies to --component binomial")
    if args.standardize:
        if not set(kinds) <= {"niw", "normalgamma", "normal"}:
            raise InputError(
                f"--standardize only applies to Gaussian components (niw, normalgamma, normal), not {kinds[0]}"
            )
        sd = np.nanstd(X, axis=0)
        X = (X - np.nanmean(X, axis=0)) / np.where(sd > 0, sd, 1.0)
    if X.shape[0] < 2:
        raise InputError(f"{args.file}: need at least 2 data rows to build a hierarchy, got {X.shape[0]}")
    if args.component:  # a named family must fit the data; candidates that do not are skipped
        try:
            make_component(args.component, X, args.trials).validate_data(X)
        except (ValueError, TypeError) as e:
            raise InputError(f"{args.file}: data do not fit --component {args.component}: {e}") from None
    learn = not args.fixed_prior
    if not args.no_cache:
        enable_compile_cache(args.cache_dir, progress, "bhc")
    stem = _safe_stem(os.path.splitext(os.path.basename(args.file))[0])
    log(
        progress,
        f"[jaxhc bhc] {args.file}: n={X.shape[0]}, d={X.shape[1]}, component={' vs '.join(kinds)}, "
        f"alpha={args.alpha:g}{' (learned with the hyperparameters)' if learn else ', fixed prior'}"
        + (", header row detected" if table.has_header else ""),
    )
    n = X.shape[0]
    if n > args.randomized_above:
        log(
            progress,
            f"[jaxhc bhc] {n} rows > --randomized-above {args.randomized_above}: hyperparameters on "
            f"{min(args.learn_subset, n)} random rows (--seed {args.seed}), then randomized BHC on all rows",
        )
    import jax

    t0 = time.perf_counter()
    try:
        fit = fit_bhc(
            X,
            kinds,
            alpha=args.alpha,
            learn=learn,
            trials=args.trials,
            workers=_workers(),
            progress_bar=progress,
            randomized_above=args.randomized_above,
            learn_subset=args.learn_subset,
            key=jax.random.PRNGKey(args.seed),
        )
    except ValueError as e:
        raise InputError(f"{args.file}: {e}") from None
    seconds = time.perf_counter() - t0 if fit.method == "rbhc" else None
    res, rep = fit.result, _report(stem, X, fit, table.labels, seconds)
    kind = rep.component
    flat = res.cut(0.5)
    labels = table.labels
    leaf_names = [f"{labels[i]}_{i}" for i in range(X.shape[0])] if labels is not None else None
    payload = {
        "source": os.path.abspath(args.file),
        "n": int(X.shape[0]),
        "d": int(X.shape[1]),
        "columns": table.columns,
        "component": kind,
        "alpha": rep.alpha,
        "alpha_start": float(args.alpha),
        "learned": learn,
        "method": fit.method,
        "randomized_above": int(args.randomized_above),
        "learn_subset_rows": None if fit.subset is None else np.asarray(fit.subset).tolist(),
        "seed": int(args.seed),
        "learn_objective": LEARN_OBJECTIVE if learn else None,
        "dpm_lower_bound_fixed_prior": rep.fixed_bound if learn else rep.dpm_bound,
        "families_dpm_lower_bound": rep.candidates,
        "hyperparameters": _hyper_json(res.component),
        "standardize": bool(args.standardize),
        "log_evidence": rep.log_evidence,
        "dpm_lower_bound": rep.dpm_bound,
        "n_clusters": rep.n_clusters,
        "flat_labels": np.asarray(flat).tolist(),
        "dendrogram_purity": rep.purity or None,
        "tree": res.tree.to_dict(),
    }
    written = _write_outputs(args.out, stem, res, leaf_names, labels, payload)
    print(_format_table([rep]))
    for line in _explain(rep):
        print(line)
    for p in written:
        print(f"wrote {p}")
    plural = "" if rep.n_clusters == 1 else "s"
    print(
        f"bhc done: {rep.n} points, {rep.n_clusters} cluster{plural} at r<0.5, log p(D|T) = {rep.log_evidence:.3f}, "
        f"method {rep.method}" + (f" (hyperparameters on {rep.subset} rows)" if rep.subset else "") + f"; outputs in "
        f"{args.out}"
    )
    return 0
