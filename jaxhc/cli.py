"""The ``jaxhc`` command line (also ``python -m jaxhc``).

Subcommands:

* ``jaxhc demo [--out DIR] [--quick] [--per-class N] [--no-progress]`` - BHC on binarized
  digits (0, 2, 4; Beta-Bernoulli), iris and wine (standardized; Normal-inverse-Wishart),
  compared by dendrogram purity with scipy's average / complete / single linkage.
* ``jaxhc bhc FILE [--component ...] [--alpha A] [--labels-column C] [--standardize]
  [--out DIR] [--no-progress]`` - BHC on a CSV (header optional) or ``.npy`` file.
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

__all__ = ["main", "read_table", "read_jets", "InputError"]

LINKAGE_METHODS = ("average", "complete", "single")
COMPONENTS = ("niw", "bernoulli", "binomial", "multinomial", "normal")
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


def _is_binary(X: np.ndarray) -> bool:
    v = X[~np.isnan(X)]
    return v.size > 0 and bool(np.all((v == 0) | (v == 1)))


def _make_component(kind: str, X: np.ndarray, trials: Optional[int]):
    import jaxhc

    if kind == "niw":
        return jaxhc.NormalInverseWishart.from_data(X)
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


def _run_bhc(name, X, component, kind, alpha, labels, progress: bool):
    import jax

    import jaxhc
    from .metrics import dendrogram_purity

    t0 = time.perf_counter()
    res = jaxhc.bhc(X, component, alpha, progress_bar=None if progress else False)
    jax.block_until_ready(res.log_evidence)
    secs = time.perf_counter() - t0
    purity = {}
    if _has_pairs(labels):
        purity["bhc"] = dendrogram_purity(res.tree, labels)
        purity.update(_linkage_purities(X, labels))
    rep = Report(name, X.shape[0], X.shape[1], kind, float(res.log_evidence), float(res.dpm_lower_bound),
                 res.n_clusters(0.5), secs, purity)
    return res, rep


def _format_table(reports: Sequence[Report]) -> str:
    head = ["data set", "n", "d", "component", "log p(D|T)", "DPM bound", "K(r<.5)",
            "BHC", "average", "complete", "single", "time[s]"]
    rows = []
    for r in reports:
        pur = [f"{r.purity[m]:.3f}" if m in r.purity else "-" for m in ("bhc",) + LINKAGE_METHODS]
        rows.append([r.name, str(r.n), str(r.d), r.component, f"{r.log_evidence:.2f}", f"{r.dpm_bound:.2f}",
                     str(r.n_clusters), *pur, f"{r.seconds:.2f}"])
    widths = [max(len(h), *(len(row[j]) for row in rows)) for j, h in enumerate(head)]
    left = {0, 3}

    def fmt(cells):
        return "  ".join(c.ljust(w) if j in left else c.rjust(w) for j, (c, w) in enumerate(zip(cells, widths)))

    group = " " * (sum(widths[:7]) + 2 * 7) + "dendrogram purity".center(sum(widths[7:11]) + 2 * 3, "-")
    lines = [group, fmt(head), fmt(["-" * w for w in widths])] + [fmt(row) for row in rows]
    return "\n".join(lines)


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
    import jaxhc

    problems = [
        ("digits024", Xd, yd, "bernoulli", jaxhc.BetaBernoulli.from_data(Xd)),
        ("iris", std(Xi), yi, "niw", None),
        ("wine4" if args.quick else "wine", std(Xw), yw, "niw", None),
    ]
    reports, written = [], []
    for name, X, y, kind, comp in problems:
        if comp is None:
            comp = jaxhc.NormalInverseWishart.from_data(X)
        _log(progress, f"[jaxhc demo] BHC on {name} (n={X.shape[0]}, d={X.shape[1]}, {kind}) ...")
        res, rep = _run_bhc(name, X, comp, kind, args.alpha, y, progress)
        reports.append(rep)
        leaf_names = [f"{c}_{i}" for i, c in enumerate(y)]
        written += _write_outputs(args.out, name, res, leaf_names, y)
    print(_format_table(reports))
    print("(dendrogram purity of BHC and of scipy linkage on the same data, Euclidean; "
          "time includes JIT compilation)")
    for p in written:
        print(f"wrote {p}")
    wins = sum(r.purity["bhc"] > r.purity["average"] for r in reports)
    print(f"demo done: {len(reports)} data sets{' (quick)' if args.quick else ''}, BHC purity beats average "
          f"linkage on {wins}/{len(reports)}; outputs in {args.out}")
    return 0


def _cmd_bhc(args) -> int:
    progress = not args.no_progress
    table = read_table(args.file, args.labels_column)
    X = table.X
    if args.alpha <= 0 or not math.isfinite(args.alpha):
        raise InputError(f"--alpha must be a positive number, got {args.alpha}")
    kind = args.component or ("bernoulli" if _is_binary(X) else "niw")
    if args.trials is not None and kind != "binomial":
        raise InputError("--trials only applies to --component binomial")
    if args.standardize:
        if kind not in ("niw", "normal"):
            raise InputError(f"--standardize only applies to Gaussian components (niw, normal), not {kind}")
        sd = np.nanstd(X, axis=0)
        X = (X - np.nanmean(X, axis=0)) / np.where(sd > 0, sd, 1.0)
    if X.shape[0] < 2:
        raise InputError(f"{args.file}: need at least 2 data rows to build a hierarchy, got {X.shape[0]}")
    try:
        comp = _make_component(kind, X, args.trials)
        comp.validate_data(X)
    except (ValueError, TypeError) as e:
        raise InputError(f"{args.file}: data do not fit --component {kind}: {e}") from None
    stem = _safe_stem(os.path.splitext(os.path.basename(args.file))[0])
    _log(progress, f"[jaxhc bhc] {args.file}: n={X.shape[0]}, d={X.shape[1]}, component={kind}, "
                   f"alpha={args.alpha:g}" + (", header row detected" if table.has_header else ""))
    res, rep = _run_bhc(stem, X, comp, kind, args.alpha, table.labels, progress)
    flat = res.cut(0.5)
    labels = table.labels
    leaf_names = [f"{labels[i]}_{i}" for i in range(X.shape[0])] if labels is not None else None
    payload = {
        "source": os.path.abspath(args.file),
        "n": int(X.shape[0]),
        "d": int(X.shape[1]),
        "columns": table.columns,
        "component": kind,
        "alpha": float(args.alpha),
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


def _enable_compile_cache(path: Optional[str], progress: bool):
    """JAX's persistent compilation cache: the trellis programs (one per jet size) are
    compiled once per machine instead of once per run."""
    import jax

    path = path or os.environ.get("JAXHC_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "jaxhc", "xla")
    try:
        os.makedirs(path, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    except (OSError, AttributeError, ValueError) as e:  # read-only home, or an older JAX
        _log(progress, f"[jaxhc jets] compilation cache off ({e})")
        return
    _log(progress, f"[jaxhc jets] compilation cache: {path} (--no-cache to turn off)")


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
    d.add_argument("--alpha", type=_positive_float, default=1.0, help="DP concentration (default 1)")
    d.add_argument("--no-progress", action="store_true", help="no progress messages on stderr")
    d.set_defaults(func=_cmd_demo)

    b = sub.add_parser("bhc", help="cluster a CSV or .npy file",
                       description="Run BHC on the rows of a CSV (header row optional) or .npy file; "
                                   "write a dendrogram PNG, a Newick tree and a JSON summary.")
    b.add_argument("file", help="CSV (numeric columns, optional header) or .npy [n, d]")
    b.add_argument("--component", choices=COMPONENTS, default=None,
                   help="component family (default: bernoulli if all values are 0/1, else niw)")
    b.add_argument("--trials", type=_positive_int, default=None, help="trials per entry for binomial")
    b.add_argument("--alpha", type=_positive_float, default=1.0, help="DP concentration (default 1)")
    b.add_argument("--labels-column", default=None, metavar="NAME_OR_INDEX",
                   help="column with class labels (not clustered; used for purity, leaf names, colours)")
    b.add_argument("--standardize", action="store_true", help="z-score each column first (Gaussian components)")
    b.add_argument("--out", default="jaxhc_out", help="output folder (default: ./jaxhc_out)")
    b.add_argument("--no-progress", action="store_true", help="no progress messages or bars")
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
