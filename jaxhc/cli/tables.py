"""Reading the data files of ``jaxhc bhc``: CSV (header optional, a label column, missing
values) and ``.npy``."""

from __future__ import annotations

import csv
import math
import os
import re
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np

from .common import InputError

__all__ = ["Table", "read_table"]

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
