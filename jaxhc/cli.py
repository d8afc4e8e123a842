"""The ``jaxhc`` command line (also ``python -m jaxhc``).

Subcommands:

* ``jaxhc demo [--out DIR] [--quick] [--per-class N] [--fixed-prior] [--no-progress]
  [--cache-dir DIR] [--no-cache]`` - BHC on binarized digits (0, 2, 4; Beta-Bernoulli), iris
  and wine (standardized; Normal-inverse-Wishart or per-feature Normal-Gamma, whichever has
  the higher DPM evidence bound), compared by dendrogram purity with scipy's average / complete /
  single linkage.
* ``jaxhc bhc FILE [--component ...] [--alpha A] [--labels-column C] [--standardize]
  [--fixed-prior] [--out DIR] [--no-progress] [--cache-dir DIR] [--no-cache]`` - BHC on a
  CSV (header optional) or ``.npy`` file.

``demo`` and ``bhc`` learn alpha and the component's hyperparameters by maximising BHC's lower
bound on the DPM marginal likelihood ``p(D | alpha, prior)`` (`jaxhc.learn_hyperparameters`
with ``objective="dpm_lower_bound"``, starting from the data-derived prior; ``--fixed-prior``
keeps that prior) and, without ``--component``, fit every candidate family and keep the one
of highest bound. The bound, not the tree evidence ``log p(D|T)``, is the objective because
alpha and the prior are hyperparameters of the DPM that BHC approximates, and the bound is a
lower bound on that model's evidence; ``log p(D|T)`` is the evidence of a tree-restricted
model, and maximised over alpha it drives alpha up (55 to 200 on the built-in sets) until
the merges above the clusters carry no weight, which leaves the upper hierarchy undecided.
The table reports the bound's gain over the starting prior. Where BHC's dendrogram purity is
below average linkage's, a line under the table gives the model's own scores of the true
classes against BHC's answer: the bound of the class-respecting tree closest to BHC's
(`class_respecting_tree`) and the DPM joint ``log p(D, c)`` of the true classes against BHC's
clusters, so a reader sees whether the model or the greedy search is to blame. Compiled programs go to JAX's persistent cache.
* ``jaxhc jets [--num-jets B] [--quick] [--min-leaves 5] [--max-leaves 10] [--lam 2]
  [--t-cut 16] [--likelihood paper|exact] [--seed S] [--input FILE.json] [--out DIR]
  [--no-progress] [--no-fastjet]`` - Ginkgo jets (simulated by `jaxhc.models.ginkgo`, or
  read from a JSON list of objects with ``leaves``): the exact trellis MAP tree and log Z,
  greedy and beam search, and kt / Cambridge-Aachen / anti-kt (FastJet, or the NumPy twin
  with ``--no-fastjet``), compared by log likelihood (Table 1 of the trellis paper; see
  `jaxhc.jets`).

``demo`` and ``bhc`` print a summary table and write, per data set, a dendrogram PNG
(`jaxhc.plot.plot_bhc`) and a Newick file; ``bhc`` also writes a JSON with the tree, the flat
labels at ``r_k < 0.5`` and the log evidence. ``jets`` prints Table 1 and timings and writes
``jets_results.json`` (per-jet log likelihoods and trees) and ``jets_logz_vs_map.png`` (log Z
against the MAP log likelihood coloured by the number of leaves, Fig. 5 of the paper).
Problems with the input file end the command with exit code 2 and a one-line message on
stderr. The CLI enables float64 in JAX.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

import numpy as np

__all__ = ["main", "read_table", "read_jets", "class_respecting_tree", "InputError"]

LINKAGE_METHODS = ("average", "complete", "single")
COMPONENTS = ("niw", "normalgamma", "bernoulli", "binomial", "multinomial", "normal")
# families compared by the DPM evidence bound for real-valued data when --component is not given
REAL_FAMILIES = ("niw", "normalgamma")
# what learning maximises and families are compared by: BHC's lower bound on the DPM marginal
# likelihood p(D | alpha, prior) (the model BHC approximates; see the module docstring)
LEARN_OBJECTIVE = "dpm_lower_bound"
# alcohol, flavanoids, colour intensity, proline: wine's classic discriminating features
QUICK_WINE_FEATURES = [0, 6, 9, 12]


class InputError(Exception):
    """A problem with the user's input; reported on stderr with exit code 2."""


# ---------------------------------------------------------------------------------------
# reading data files
# ---------------------------------------------------------------------------------------
_MISSING = {"", "na", "nan", "n/a", "null", "none", "?"}


def _to_float(s: str) -> Optional[float]:
    """Float value of a CSV cell; NaN for a missing marker; None when not numeric."""
    t = s.strip()
    if t.lower() in _MISSING:
        return math.nan
    try:
        return float(t)
    except ValueError:
        return None


def _is_numeric(s: str) -> bool:
    t = s.strip()
    return t.lower() not in _MISSING and _to_float(t) is not None


def _sniff_delimiter(line: str) -> str:
    for d in (",", "\t", ";"):
        if d in line:
            return d
    return ","


@dataclass
class Table:
    """A data file read by `read_table`: numeric matrix plus names and optional labels."""

    X: np.ndarray
    columns: List[str]
    labels: Optional[np.ndarray] = None
    label_name: Optional[str] = None
    has_header: bool = False
    notes: List[str] = field(default_factory=list)


def _resolve_label_column(spec: str, header: Optional[List[str]], ncol: int) -> int:
    if header is not None and spec in header:
        return header.index(spec)
    if re.fullmatch(r"-?\d+", spec.strip()):
        j = int(spec)
        if not -ncol <= j < ncol:
            raise InputError(f"--labels-column {spec}: index out of range for {ncol} columns (0-based)")
        return j % ncol
    names = ", ".join(repr(h) for h in header) if header else "(the file has no header row)"
    raise InputError(f"--labels-column {spec!r} is neither a column name nor an index; columns: {names}")


def _read_csv(path: str, label_spec: Optional[str]) -> Table:
    with open(path, newline="", encoding="utf-8-sig") as f:
        text = f.read()
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise InputError(f"{path}: file is empty (no data rows)")
    delim = _sniff_delimiter(lines[0])
    rows = [[c.strip() for c in r] for r in csv.reader(lines, delimiter=delim)]
    # header detection: the first row is a header when it has a non-numeric cell in a
    # column whose next-row cell is numeric, or when it is the only row and not numeric
    first = rows[0]
    if len(rows) == 1:
        has_header = not all(_is_numeric(c) or c.lower() in _MISSING for c in first)
    else:
        second = rows[1]
        has_header = any(
            not _is_numeric(c) and c.lower() not in _MISSING and j < len(second) and _is_numeric(second[j])
            for j, c in enumerate(first)
        ) or (all(not _is_numeric(c) for c in first) and any(_is_numeric(c) for c in second))
    header = first if has_header else None
    body = rows[1:] if has_header else rows
    if not body:
        raise InputError(f"{path}: no data rows (only a header: {', '.join(first)})")
    ncol = len(header) if header is not None else len(body[0])
    for i, r in enumerate(body):
        if len(r) != ncol:
            line_no = i + (2 if has_header else 1)
            raise InputError(
                f"{path}: ragged rows: line {line_no} has {len(r)} fields, expected {ncol}"
                + (" (as in the header)" if has_header else " (as in the first row)")
            )
    names = header if header is not None else [f"x{j}" for j in range(ncol)]
    if header is not None and len(set(names)) != len(names):
        dup = sorted({h for h in names if names.count(h) > 1})
        raise InputError(f"{path}: duplicate column names in the header: {', '.join(map(repr, dup))}")
    lab_j = None if label_spec is None else _resolve_label_column(label_spec, header, ncol)
    cols, feat_names = [], []
    for j in range(ncol):
        if j == lab_j:
            continue
        vals = []
        for i, r in enumerate(body):
            v = _to_float(r[j])
            if v is None:
                line_no = i + (2 if has_header else 1)
                raise InputError(
                    f"{path}: column {names[j]!r} (column {j}) is not numeric: line {line_no} has {r[j]!r}"
                    + ("; pass --labels-column to use it as class labels" if lab_j is None else "")
                )
            vals.append(v)
        cols.append(vals)
        feat_names.append(names[j])
    if not cols:
        raise InputError(f"{path}: no numeric feature columns left after removing the label column")
    X = np.asarray(cols, dtype=np.float64).T
    labels = None
    if lab_j is not None:
        labels = np.asarray([r[lab_j] for r in body], dtype=object)
        if all(_is_numeric(v) for v in labels):
            f = np.asarray([float(v) for v in labels])
            labels = f.astype(np.int64) if np.all(f == np.round(f)) else f
        else:
            labels = labels.astype(str)
    return Table(X, feat_names, labels, None if lab_j is None else names[lab_j], has_header)


def _read_npy(path: str, label_spec: Optional[str]) -> Table:
    try:
        arr = np.load(path, allow_pickle=False)
    except ValueError as e:
        raise InputError(f"{path}: cannot read as a .npy array ({e})") from None
    if not isinstance(arr, np.ndarray):
        raise InputError(f"{path}: expected a single array (.npy), got {type(arr).__name__}")
    if arr.size == 0:
        raise InputError(f"{path}: array is empty (shape {arr.shape})")
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise InputError(f"{path}: expected a 2-D array [n_points, n_features], got shape {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise InputError(f"{path}: array has non-numeric dtype {arr.dtype}")
    if np.iscomplexobj(arr):
        raise InputError(f"{path}: array has complex dtype {arr.dtype}; expected real numbers")
    X = arr.astype(np.float64)
    names = [f"x{j}" for j in range(X.shape[1])]
    labels = None
    lab_name = None
    if label_spec is not None:
        j = _resolve_label_column(label_spec, None, X.shape[1])
        lab = X[:, j]
        labels = lab.astype(np.int64) if np.all(lab == np.round(lab)) else lab
        lab_name = names[j]
        X = np.delete(X, j, axis=1)
        del names[j]
        if X.shape[1] == 0:
            raise InputError(f"{path}: no feature columns left after removing the label column")
    return Table(X, names, labels, lab_name, False)


def read_table(path: str, labels_column: Optional[str] = None) -> Table:
    """Reads a CSV (header row optional, detected) or ``.npy`` file into a `Table`.

    Raises `InputError` with a message naming the problem (missing file, empty file, ragged
    rows, a non-numeric column by its header name, a bad label column).
    """
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory, expected a CSV or .npy file")
    if os.path.getsize(path) == 0:
        raise InputError(f"{path}: file is empty")
    try:
        if path.lower().endswith(".npy"):
            return _read_npy(path, labels_column)
        return _read_csv(path, labels_column)
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text CSV file (use .npy for binary arrays)") from None
    except csv.Error as e:
        raise InputError(f"{path}: malformed CSV ({e})") from None


# ---------------------------------------------------------------------------------------
# running BHC and reporting
# ---------------------------------------------------------------------------------------
@dataclass
class Fit:
    """One family's BHC fit: with hyperparameters learned (`learn_hyperparameters`, the
    objective = the DPM lower bound; its value at the data-derived starting prior kept as
    ``fixed_bound``) or fixed."""

    kind: str
    component: object
    alpha: float
    result: object
    fixed_bound: float
    learned: bool
    seconds: float

    @property
    def log_evidence(self) -> float:
        return float(self.result.log_evidence)

    @property
    def bound(self) -> float:
        return float(self.result.dpm_lower_bound)


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


def _is_binary(X: np.ndarray) -> bool:
    v = X[~np.isnan(X)]
    return v.size > 0 and bool(np.all((v == 0) | (v == 1)))


def _make_component(kind: str, X: np.ndarray, trials: Optional[int]):
    import jaxhc

    if kind == "niw":
        return jaxhc.NormalInverseWishart.from_data(X)
    if kind == "normalgamma":
        return jaxhc.NormalGamma.from_data(X)
    if kind == "normal":
        return jaxhc.NormalKnownCov.from_data(X)
    if kind == "bernoulli":
        return jaxhc.BetaBernoulli.from_data(X)
    if kind == "binomial":
        if trials is None:
            raise InputError("--component binomial needs --trials T (the number of trials per entry)")
        return jaxhc.BetaBinomial.from_data(X, trials)
    if kind == "multinomial":
        return jaxhc.DirichletMultinomial.from_data(X)
    raise InputError(f"unknown component {kind!r}; choose one of {', '.join(COMPONENTS)}")


def _candidate_kinds(X: np.ndarray) -> tuple:
    """The families compared by the DPM evidence bound when ``--component`` is not given: Beta-Bernoulli
    for 0/1 data; otherwise full-covariance Normal-inverse-Wishart against independent
    per-feature Normal-Gamma."""
    return ("bernoulli",) if _is_binary(X) else REAL_FAMILIES


def _linkage_purities(X: np.ndarray, labels) -> dict:
    from scipy.cluster.hierarchy import linkage

    from .metrics import dendrogram_purity
    from .tree import Tree

    out = {}
    if np.isnan(X).any():  # linkage cannot handle missing entries; impute column means
        X = np.where(np.isnan(X), np.nanmean(X, axis=0), X)
    for m in LINKAGE_METHODS:
        out[m] = dendrogram_purity(Tree.from_linkage(linkage(X, method=m, metric="euclidean")), labels)
    return out


def _has_pairs(labels) -> bool:
    if labels is None:
        return False
    _, counts = np.unique(np.asarray(labels), return_counts=True)
    return bool(np.any(counts >= 2))


def _fit_family(X, kind, comp, alpha, learn: bool, progress: bool) -> Fit:
    import jax

    import jaxhc

    t0 = time.perf_counter()
    if learn:
        fit = jaxhc.learn_hyperparameters(X, comp, alpha, objective=LEARN_OBJECTIVE)
        res, comp, alpha = fit.result, fit.component, fit.alpha
        fixed = float(fit.trace[0])  # the E-step at the starting prior: BHC with it fixed
    else:
        res = jaxhc.bhc(X, comp, alpha, progress_bar=None if progress else False)
        fixed = float(res.dpm_lower_bound)
    jax.block_until_ready(res.log_evidence)
    return Fit(kind, comp, float(alpha), res, fixed, learn, time.perf_counter() - t0)


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
    from .tree import Tree

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


def _verdict(X, fit: Fit, labels) -> Verdict:
    """The model's scores of the true classes against BHC's tree and clusters."""
    from .inference.bhc.greedy import tree_log_evidence
    from .models.dpm import dpm_log_joint

    score = lambda t: float(tree_log_evidence(X, t, fit.component, fit.alpha).dpm_lower_bound)  # noqa: E731
    ct = class_respecting_tree(fit.result.tree, labels, score)
    cut = np.asarray(fit.result.cut(0.5))
    _, y = np.unique(np.asarray(labels), return_inverse=True)
    return Verdict(score(ct), float(dpm_log_joint(X, y, fit.component, fit.alpha)),
                   float(dpm_log_joint(X, cut, fit.component, fit.alpha)), int(cut.max()) + 1, int(y.max()) + 1)


def _fit_candidates(X, kinds, alpha, progress: bool, learn: bool = True, trials=None) -> list:
    """One job per candidate family: a callable returning a `Fit`, or the error raised when
    the data do not fit the family."""

    def job(kind):
        def run():
            try:
                comp = _make_component(kind, X, trials)
                comp.validate_data(X)
            except (ValueError, TypeError) as e:
                return e
            return _fit_family(X, kind, comp, alpha, learn, progress)
        return run

    return [job(k) for k in kinds]


def _run_jobs(jobs, workers: int) -> list:
    """Runs the jobs, ``workers`` at a time in threads (JAX compiles and runs outside the
    GIL, so the compilations of different families and data sets overlap)."""
    if workers <= 1 or len(jobs) <= 1:
        return [j() for j in jobs]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(workers, len(jobs))) as ex:
        return list(ex.map(lambda j: j(), jobs))


def _workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def _report(name, X, kinds, outs, labels, learn: bool):
    """The fit of highest DPM lower bound among the candidates, its dendrogram purity beside scipy's
    linkages, and a `Verdict` when BHC's purity is below average linkage's."""
    from .metrics import dendrogram_purity

    fits = [f for f in outs if isinstance(f, Fit)]
    if not fits:
        raise InputError(f"{name}: data do not fit --component {kinds[0]}: {outs[0]}")
    best = max(fits, key=lambda f: f.bound)
    res = best.result
    purity, verdict = {}, None
    if _has_pairs(labels):
        purity["bhc"] = dendrogram_purity(res.tree, labels)
        purity.update(_linkage_purities(X, labels))
        if purity["bhc"] < purity["average"]:
            verdict = _verdict(X, best, labels)
    rep = Report(name, X.shape[0], X.shape[1], best.kind, best.log_evidence, float(res.dpm_lower_bound),
                 res.n_clusters(0.5), sum(f.seconds for f in fits), purity,
                 best.fixed_bound if learn else None, best.alpha,
                 {f.kind: f.bound for f in fits}, verdict)
    return res, rep


def _format_table(reports: Sequence[Report]) -> str:
    learned = any(r.fixed_bound is not None for r in reports)
    head = ["data set", "n", "d", "component", "log p(D|T)", "DPM bound"] + (["gain"] if learned else []) + [
        "K(r<.5)", "BHC", "average", "complete", "single", "time[s]"]
    rows = []
    for r in reports:
        pur = [f"{r.purity[m]:.3f}" if m in r.purity else "-" for m in ("bhc",) + LINKAGE_METHODS]
        gain = [f"{r.dpm_bound - r.fixed_bound:+.1f}" if r.fixed_bound is not None else "-"] if learned else []
        rows.append([r.name, str(r.n), str(r.d), r.component, f"{r.log_evidence:.2f}", f"{r.dpm_bound:.2f}", *gain,
                     str(r.n_clusters), *pur, f"{r.seconds:.2f}"])
    widths = [max(len(h), *(len(row[j]) for row in rows)) for j, h in enumerate(head)]
    left = {0, 3}
    p0 = head.index("BHC")

    def fmt(cells):
        return "  ".join(c.ljust(w) if j in left else c.rjust(w) for j, (c, w) in enumerate(zip(cells, widths)))

    group = " " * (sum(widths[:p0]) + 2 * p0) + "dendrogram purity".center(sum(widths[p0:p0 + 4]) + 2 * 3, "-")
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
    if len(r.candidates) > 1:
        alt = ", ".join(f"{k} {v:.1f}" for k, v in sorted(r.candidates.items(), key=lambda kv: -kv[1]))
        lines.append(f"{r.name}: family chosen by the DPM evidence bound: {alt}")
    v = r.verdict
    if v is not None:
        dt = v.class_tree_bound - r.dpm_bound
        dj = v.truth_joint - v.cut_joint
        side = lambda x: "above" if x > 0 else "below"  # noqa: E731
        if abs(dt) <= 0.05:
            why = ("the model does not decide it: the tree that keeps the true classes together scores the same "
                   "(within 0.05 nats)")
        elif dt > 0:
            why = "a better tree exists under the model: the greedy search stopped short of the model's optimum"
        else:
            why = "the model itself prefers BHC's tree, not only the greedy search"
        lines.append(
            f"{r.name}: BHC's purity {r.purity['bhc']:.3f} is below average linkage's {r.purity['average']:.3f}; "
            f"{why}. At the fitted prior (alpha = {r.alpha:.3g}) the tree that keeps the {v.n_classes} true "
            f"classes together has DPM bound {v.class_tree_bound:.2f} against BHC's {r.dpm_bound:.2f}, and the DPM "
            f"scores the true classes log p(D, c) = {v.truth_joint:.1f}, {abs(dj):.1f} {side(dj)} BHC's "
            f"{v.n_cut} clusters at r < 0.5.")
    return lines
def _safe_stem(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "data"


def _write_outputs(out_dir, stem, res, leaf_names, classes, extra_json: Optional[dict] = None) -> List[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .plot import plot_bhc

    os.makedirs(out_dir, exist_ok=True)
    paths = []
    ax = plot_bhc(res, labels=leaf_names, colors_by=classes)
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
        with open(js, "w") as f:
            json.dump(extra_json, f, indent=1)
        paths.append(js)
    return paths


def _log(progress: bool, msg: str):
    if progress:
        print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# subcommands
# ---------------------------------------------------------------------------------------
def _cmd_demo(args) -> int:
    from . import datasets

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
        idx = np.concatenate([np.sort(rng.choice(np.flatnonzero(y == c), min(per_class, np.sum(y == c)),
                                                 replace=False)) for c in np.unique(y)])
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
        _enable_compile_cache(args.cache_dir, progress, "demo")
    reports, written, notes = [], [], []
    t_all = time.perf_counter()
    jobs, spans = [], []
    for name, X, y in problems:
        kinds = _candidate_kinds(X)
        _log(progress, f"[jaxhc demo] BHC on {name} (n={X.shape[0]}, d={X.shape[1]}; "
                       f"{' vs '.join(kinds)}{', hyperparameters learned' if learn else ', fixed prior'})")
        spans.append((len(jobs), kinds))
        jobs += _fit_candidates(X, kinds, args.alpha, False, learn=learn)
    _log(progress, f"[jaxhc demo] {len(jobs)} fits, {_workers()} at a time ...")
    outs = _run_jobs(jobs, _workers())
    for (name, X, y), (start, kinds) in zip(problems, spans):
        res, rep = _report(name, X, kinds, outs[start:start + len(kinds)], y, learn)
        reports.append(rep)
        notes += _explain(rep)
        leaf_names = [f"{c}_{i}" for i, c in enumerate(y)]
        written += _write_outputs(args.out, name, res, leaf_names, y)
    print(_format_table(reports))
    print("(dendrogram purity of BHC and of scipy linkage on the same data, Euclidean; "
          + ("alpha and the prior learned by the DPM evidence bound, gain of the bound over the starting prior; "
             if learn else "") + "time includes JIT compilation)")
    for line in notes:
        print(line)
    for p in written:
        print(f"wrote {p}")
    wins = sum(r.purity["bhc"] >= r.purity["average"] for r in reports)
    explained = sum(r.verdict is not None for r in reports)
    print(f"demo done: {len(reports)} data sets{' (quick)' if args.quick else ''} in "
          f"{time.perf_counter() - t_all:.1f} s, BHC purity at least average linkage's on {wins}/{len(reports)}"
          + (f" ({explained} explained above)" if explained else "") + f"; outputs in {args.out}")
    return 0


def _cmd_bhc(args) -> int:
    progress = not args.no_progress
    table = read_table(args.file, args.labels_column)
    X = table.X
    with np.errstate(over="ignore", invalid="ignore"):
        squares_ok = np.isfinite(np.nansum(np.square(X)))
    if not squares_ok:
        raise InputError(f"{args.file}: values up to {float(np.nanmax(np.abs(X))):.3g} are too large (their squares "
                         f"overflow float64); rescale the data (change its units)")
    if args.alpha <= 0 or not math.isfinite(args.alpha):
        raise InputError(f"--alpha must be a positive number, got {args.alpha}")
    kinds = (args.component,) if args.component else _candidate_kinds(X)
    if args.trials is not None and kinds != ("binomial",):
        raise InputError("--trials only applies to --component binomial")
    if args.standardize:
        if not set(kinds) <= {"niw", "normalgamma", "normal"}:
            raise InputError(f"--standardize only applies to Gaussian components (niw, normalgamma, normal), "
                             f"not {kinds[0]}")
        sd = np.nanstd(X, axis=0)
        X = (X - np.nanmean(X, axis=0)) / np.where(sd > 0, sd, 1.0)
    if X.shape[0] < 2:
        raise InputError(f"{args.file}: need at least 2 data rows to build a hierarchy, got {X.shape[0]}")
    if args.component:  # a named family must fit the data; candidates that do not are skipped
        try:
            _make_component(args.component, X, args.trials).validate_data(X)
        except (ValueError, TypeError) as e:
            raise InputError(f"{args.file}: data do not fit --component {args.component}: {e}") from None
    learn = not args.fixed_prior
    if not args.no_cache:
        _enable_compile_cache(args.cache_dir, progress, "bhc")
    stem = _safe_stem(os.path.splitext(os.path.basename(args.file))[0])
    _log(progress, f"[jaxhc bhc] {args.file}: n={X.shape[0]}, d={X.shape[1]}, component={' vs '.join(kinds)}, "
                   f"alpha={args.alpha:g}{' (learned with the hyperparameters)' if learn else ', fixed prior'}"
                   + (", header row detected" if table.has_header else ""))
    jobs = _fit_candidates(X, kinds, args.alpha, progress and len(kinds) == 1, learn=learn, trials=args.trials)
    res, rep = _report(stem, X, kinds, _run_jobs(jobs, _workers()), table.labels, learn)
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
    print(f"bhc done: {rep.n} points, {rep.n_clusters} cluster{plural} at r<0.5, log p(D|T) = {rep.log_evidence:.3f}; "
          f"outputs in {args.out}")
    return 0


# ---------------------------------------------------------------------------------------
# jets: trellis vs greedy / beam / kt family on Ginkgo jets (Table 1 of the trellis paper)
# ---------------------------------------------------------------------------------------
#: Ginkgo settings of the paper's jets (and of tests/data/ginkgo_generator_jets_lam2.0.json):
#: root mass 30, |p| = 400 along (1, 1, 1) / sqrt(3)
JETS_ROOT_MASS2 = 900.0
JETS_ROOT_P3 = tuple(400.0 / math.sqrt(3.0) for _ in range(3))
JETS_QUICK = {"num_jets": 40, "max_leaves": 7}
JETS_DEFAULT = {"num_jets": 1000, "max_leaves": 10}


def read_jets(path: str):
    """Reads jets from a JSON list of objects with ``leaves`` (four-momenta ``[n, 4]``).

    Returns a list of float64 arrays; raises `InputError` naming the problem.
    """
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory, expected a JSON file")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text JSON file") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    from .models import ginkgo

    try:
        batch = ginkgo.load_jets(data)
    except ValueError as e:
        raise InputError(f"{path}: {e}") from None
    return [batch.jet(i) for i in range(len(batch))]


def _pad_jets(jets):
    nl = np.array([len(j) for j in jets], np.int64)
    lp = np.zeros((len(jets), int(nl.max()), 4))
    for b, j in enumerate(jets):
        lp[b, : len(j)] = j
    return lp, nl


def _simulate_jets(args, num_jets, min_leaves, max_leaves, progress):
    import jax

    try:
        from .models import ginkgo
    except ImportError as e:
        raise InputError(f"generating jets needs jaxhc.models.ginkgo ({e}); pass --input FILE.json") from None
    params = ginkgo.GinkgoParams(lam=args.lam, lam_root=args.lam, t_cut=args.t_cut,
                                 root_mass2=JETS_ROOT_MASS2, root_p3=JETS_ROOT_P3)
    try:
        sim = ginkgo.simulate(jax.random.PRNGKey(args.seed), params, num_jets, min_leaves=min_leaves,
                              max_leaves=max_leaves, progress=progress)
    except ValueError as e:  # e.g. no jets in the leaf range after many showers
        raise InputError(f"cannot simulate {num_jets} jets with {min_leaves}-{max_leaves} leaves: {e}") from None
    lp = np.asarray(sim.leaves, np.float64)
    nl = np.asarray(sim.n_leaves, np.int64)
    return lp, nl


def _finite_or_none(x) -> Optional[float]:
    x = float(x)
    return x if math.isfinite(x) else None


def _rate(count: float, secs: float) -> str:
    if secs <= 0:
        return "-"
    r = count / secs
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if r >= scale:
            return f"{r / scale:.2f}{unit}"
    return f"{r:.1f}"


def _enable_compile_cache(path: Optional[str], progress: bool, cmd: str = "jets"):
    """JAX's persistent compilation cache: the compiled programs (BHC's merge loop and
    M-step per family and shape, the trellis per jet size) are compiled once per machine
    instead of once per run."""
    import jax

    path = path or os.environ.get("JAXHC_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "jaxhc", "xla")
    try:
        os.makedirs(path, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0 if cmd in ("demo", "bhc") else 1.0)
    except (OSError, AttributeError, ValueError) as e:  # read-only home, or an older JAX
        _log(progress, f"[jaxhc {cmd}] compilation cache off ({e})")
        return
    _log(progress, f"[jaxhc {cmd}] compilation cache: {path} (--no-cache to turn off)")


def _cmd_jets(args) -> int:
    import jax

    from . import jets as jetsmod
    from . import trellis

    progress = not args.no_progress
    if not args.no_cache:
        _enable_compile_cache(args.cache_dir, progress)
    defaults = JETS_QUICK if args.quick else JETS_DEFAULT
    num_jets = args.num_jets if args.num_jets is not None else defaults["num_jets"]
    max_leaves = args.max_leaves if args.max_leaves is not None else defaults["max_leaves"]
    min_leaves = args.min_leaves
    if min_leaves > max_leaves:
        raise InputError(f"--min-leaves {min_leaves} is above --max-leaves {max_leaves}")
    if max_leaves > trellis.MAX_EXACT_LEAVES:
        raise InputError(f"--max-leaves {max_leaves} is above the exact trellis limit of "
                         f"{trellis.MAX_EXACT_LEAVES} leaves")
    energy = trellis.GinkgoEnergy(args.lam, args.t_cut, likelihood=args.likelihood)
    sim_seconds = None
    if args.input is not None:
        all_jets = read_jets(args.input)
        kept = [j for j in all_jets if min_leaves <= len(j) <= max_leaves][:num_jets]
        if not kept:
            raise InputError(f"{args.input}: none of its {len(all_jets)} jets has {min_leaves} to {max_leaves} leaves")
        lp, nl = _pad_jets(kept)
        source = os.path.abspath(args.input)
        _log(progress, f"[jaxhc jets] {args.input}: {len(kept)} of {len(all_jets)} jets with {min_leaves}-"
                       f"{max_leaves} leaves")
    else:
        _log(progress, f"[jaxhc jets] simulating {num_jets} Ginkgo jets ({min_leaves}-{max_leaves} leaves, "
                       f"lam={args.lam:g}, t_cut={args.t_cut:g}, seed={args.seed}) ...")
        t0 = time.perf_counter()
        lp, nl = _simulate_jets(args, num_jets, min_leaves, max_leaves, progress)
        sim_seconds = time.perf_counter() - t0
        source = "jaxhc.models.ginkgo.simulate"
    backend = "numpy" if args.no_fastjet else "auto"
    _log(progress, f"[jaxhc jets] {len(nl)} jets, likelihood={args.likelihood}: trellis, beam, greedy, kt family ...")
    res = jetsmod.compare_map_methods(energy, lp, nl, kt_backend=backend, progress=progress)
    # the first trellis call compiles its program (one for the batch; one per size with marginals); time a second, warm one
    t0 = time.perf_counter()
    jax.block_until_ready(trellis.solve_batch(energy, lp, nl).log_z)
    warm = time.perf_counter() - t0
    rows = jetsmod.table1(res)
    B = len(nl)

    print(f"## Table 1: {B} jets, {int(nl.min())}-{int(nl.max())} leaves, lam={args.lam:g}, t_cut={args.t_cut:g}, "
          f"likelihood={args.likelihood}, beam size N(N-1)/2, kt family via "
          f"{'FastJet' if res.kt_backend == 'fastjet' else 'NumPy'} (ee generalized kt, E scheme)")
    print()
    print(jetsmod.format_table1(rows))
    print()
    print("## timings")
    print()
    print("| method | seconds | jets/s | splits/s |")
    print("|---|---|---|---|")
    print(f"| trellis (first call, with JIT compilation) | {res.seconds['trellis']:.2f} | "
          f"{_rate(B, res.seconds['trellis'])} | {_rate(res.num_splits, res.seconds['trellis'])} |")
    print(f"| trellis (warm) | {warm:.2f} | {_rate(B, warm)} | {_rate(res.num_splits, warm)} |")
    for m in res.methods:
        if m != "trellis":
            print(f"| {m} | {res.seconds[m]:.2f} | {_rate(B, res.seconds[m])} | |")
    if sim_seconds is not None:
        print(f"| simulating the jets (with JIT compilation) | {sim_seconds:.2f} | {_rate(B, sim_seconds)} | |")
    print()

    os.makedirs(args.out, exist_ok=True)
    table = [r._asdict() for r in rows]
    for r in table:
        r["mean"], r["std"] = _finite_or_none(r["mean"]), _finite_or_none(r["std"])
    per_jet = []
    for b in range(B):
        n = int(nl[b])
        per_jet.append({
            "n_leaves": n,
            "leaves": lp[b, :n].tolist(),
            "log_z": _finite_or_none(res.log_z[b]),
            "map_log_likelihood": _finite_or_none(res.map_log_phi[b]),
            "log_likelihood": {m: _finite_or_none(res.log_phi[m][b]) for m in res.methods},
            "trees": {m: np.asarray(res.trees[m][b].children).tolist() for m in res.methods},
        })
    payload = {
        "source": source,
        "seed": args.seed if args.input is None else None,
        "lam": args.lam,
        "t_cut": args.t_cut,
        "likelihood": args.likelihood,
        "methods": list(res.methods),
        "kt_backend": res.kt_backend,
        "beam_sizes": np.asarray(res.beam_sizes).tolist(),
        "seconds": dict(res.seconds, trellis_warm=warm, **({} if sim_seconds is None else {"simulate": sim_seconds})),
        "num_splits": res.num_splits,
        "table1": table,
        "note": "log likelihoods are log phi of each method's tree under the Ginkgo energy; null is -inf (a "
                "forbidden split); trees are [left, right] rows, merge t creating node n + t (scipy linkage layout)",
        "jets": per_jet,
    }
    js = os.path.join(args.out, "jets_results.json")
    with open(js, "w") as f:
        json.dump(payload, f, indent=1)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ax = jetsmod.plot_log_z_vs_map(res)
    png = os.path.join(args.out, "jets_logz_vs_map.png")
    ax.figure.tight_layout()
    ax.figure.savefig(png, dpi=110)
    plt.close(ax.figure)
    for p in (js, png):
        print(f"wrote {p}")
    tb = next(r for r in rows if (r.a, r.b) == ("trellis", "beam"))
    tg = next(r for r in rows if (r.a, r.b) == ("trellis", "greedy"))
    print(f"jets done: {B} jets; trellis - beam {tb.mean:.2f} +- {tb.std:.2f}, trellis - greedy "
          f"{tg.mean:.2f} +- {tg.std:.2f} (paper 0.4 +- 0.5, 1.5 +- 1.1); outputs in {args.out}")
    return 0


# ---------------------------------------------------------------------------------------
# entry point
# ---------------------------------------------------------------------------------------
def _positive_float(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {s!r}") from None
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {s!r}")
    return v


def _positive_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {s!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {s!r}")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jaxhc",
        description="Bayesian hierarchical clustering (Heller & Ghahramani 2005) on JAX.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    d = sub.add_parser("demo", help="BHC vs linkage on digits (0,2,4), iris and wine",
                       description="Run BHC on built-in data sets and compare dendrogram purity with "
                                   "scipy average / complete / single linkage.")
    d.add_argument("--out", default="jaxhc_out", help="output folder (default: ./jaxhc_out)")
    d.add_argument("--quick", action="store_true",
                   help="small subsets: 40 digits per class, 20 rows per class of iris and wine "
                        "(wine on 4 of its 13 features)")
    d.add_argument("--per-class", type=_positive_int, default=None,
                   help="digits per class (default: all ~180 of each of 0, 2, 4; 40 with --quick)")
    d.add_argument("--alpha", type=_positive_float, default=1.0, help="DP concentration (default 1; the start of learning unless --fixed-prior)")
    d.add_argument("--no-progress", action="store_true", help="no progress messages on stderr")
    d.add_argument("--fixed-prior", action="store_true",
                   help="keep the data-derived prior and alpha fixed (default: learn them by maximising "
                        "BHC's lower bound on the DPM evidence)")
    d.add_argument("--cache-dir", default=None, metavar="DIR",
                   help="persistent JAX compilation cache (default: $JAXHC_CACHE_DIR or ~/.cache/jaxhc/xla)")
    d.add_argument("--no-cache", action="store_true", help="do not use the compilation cache")
    d.set_defaults(func=_cmd_demo)

    b = sub.add_parser("bhc", help="cluster a CSV or .npy file",
                       description="Run BHC on the rows of a CSV (header row optional) or .npy file; "
                                   "write a dendrogram PNG, a Newick tree and a JSON summary.")
    b.add_argument("file", help="CSV (numeric columns, optional header) or .npy [n, d]")
    b.add_argument("--component", choices=COMPONENTS, default=None,
                   help="component family (default: bernoulli if all values are 0/1, else niw or normalgamma, "
                        "whichever gives the higher DPM evidence bound)")
    b.add_argument("--trials", type=_positive_int, default=None, help="trials per entry for binomial")
    b.add_argument("--alpha", type=_positive_float, default=1.0, help="DP concentration (default 1; the start of learning unless --fixed-prior)")
    b.add_argument("--labels-column", default=None, metavar="NAME_OR_INDEX",
                   help="column with class labels (not clustered; used for purity, leaf names, colours)")
    b.add_argument("--standardize", action="store_true", help="z-score each column first (Gaussian components)")
    b.add_argument("--out", default="jaxhc_out", help="output folder (default: ./jaxhc_out)")
    b.add_argument("--no-progress", action="store_true", help="no progress messages or bars")
    b.add_argument("--fixed-prior", action="store_true",
                   help="keep the data-derived prior and alpha fixed (default: learn them by maximising "
                        "BHC's lower bound on the DPM evidence)")
    b.add_argument("--cache-dir", default=None, metavar="DIR",
                   help="persistent JAX compilation cache (default: $JAXHC_CACHE_DIR or ~/.cache/jaxhc/xla)")
    b.add_argument("--no-cache", action="store_true", help="do not use the compilation cache")
    b.set_defaults(func=_cmd_bhc)

    j = sub.add_parser("jets", help="trellis MAP vs greedy / beam / kt on Ginkgo jets (Table 1)",
                       description="Exact trellis MAP tree and log Z, greedy and beam search, and kt / "
                                   "Cambridge-Aachen / anti-kt on Ginkgo jets, compared by log likelihood "
                                   "(Table 1 and Fig. 5 of the trellis paper).")
    j.add_argument("--num-jets", type=_positive_int, default=None,
                   help=f"number of jets (default {JETS_DEFAULT['num_jets']}; {JETS_QUICK['num_jets']} with "
                        "--quick; with --input, at most this many of the file's)")
    j.add_argument("--quick", action="store_true",
                   help=f"small run: {JETS_QUICK['num_jets']} jets of at most {JETS_QUICK['max_leaves']} leaves "
                        "unless given")
    j.add_argument("--min-leaves", type=_positive_int, default=5, help="fewest leaves per jet (default 5)")
    j.add_argument("--max-leaves", type=_positive_int, default=None,
                   help=f"most leaves per jet (default {JETS_DEFAULT['max_leaves']}; "
                        f"{JETS_QUICK['max_leaves']} with --quick)")
    j.add_argument("--lam", type=_positive_float, default=2.0, help="Ginkgo splitting rate lambda (default 2)")
    j.add_argument("--t-cut", type=_positive_float, default=16.0, help="mass-squared cut-off t_cut (default 16)")
    j.add_argument("--likelihood", choices=("paper", "exact"), default="paper",
                   help="Ginkgo split likelihood: the trellis paper's (default) or the generator's exact density")
    j.add_argument("--seed", type=int, default=0, help="random seed of the simulated jets (default 0)")
    j.add_argument("--input", default=None, metavar="FILE.json",
                   help="read jets from a JSON list of objects with 'leaves' ([n, 4] four-momenta E, px, py, pz) "
                        "instead of simulating them")
    j.add_argument("--out", default="jaxhc_out", help="output folder (default: ./jaxhc_out)")
    j.add_argument("--no-progress", action="store_true", help="no progress messages or bars")
    j.add_argument("--cache-dir", default=None, metavar="DIR",
                   help="JAX compilation cache (default $JAXHC_CACHE_DIR or ~/.cache/jaxhc/xla)")
    j.add_argument("--no-cache", action="store_true", help="do not use the compilation cache")
    j.add_argument("--no-fastjet", action="store_true",
                   help="kt family by the NumPy implementation instead of FastJet (used anyway when fastjet "
                        "is not installed)")
    j.set_defaults(func=_cmd_jets)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the ``jaxhc`` command; returns 0, or raises ``SystemExit(2)`` for bad input."""
    import jax

    jax.config.update("jax_enable_x64", True)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except InputError as e:
        print(f"jaxhc {args.command}: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
