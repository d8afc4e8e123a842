"""One table of bad inputs for the whole public API (issue 16).

Each row is (entry point, bad input) -> the expected outcome: either a ``ValueError`` /
``TypeError`` whose message names the offending argument (``pytest.raises(..., match=...)``),
or a correct result checked by an assertion that could fail (finite evidence, a valid tree,
``-inf`` rather than NaN for an impossible problem, ...). No input may hang or silently
return NaN: a SIGALRM guard fails any case that runs longer than ``CASE_TIMEOUT_S``.

The data are tiny and share shapes (6 x 2 Gaussian rows, 6 x 4 binary rows, the Ginkgo jets
of ``tests/data``) so that JAX compiles each program once for the whole file. The samplers
whose programs take many seconds to compile (BHMC, PYDT MCMC / EM, NUTS over lambda) are
exercised on their eager validation only; the other entry points also run on the odd but
valid inputs (one point, constant columns, duplicated rows, missing cells, impossible jets).

The command line (`jaxhc.cli.main`) ends bad input with exit code 2 and a message on stderr;
`_cli` turns that into a ``ValueError`` carrying the message so it fits the same table.
"""

import contextlib
import io
import os
import shutil
import signal
import tempfile
import threading
from collections import Counter
from functools import lru_cache
from typing import Any, Callable, NamedTuple, Optional

import jax
import numpy as np
import pytest

import jaxhc
from jaxhc import Tree, trellis
from jaxhc.cli import main as cli_main
from jaxhc.inference.pydt.mcmc import PYDTPriors
from jaxhc.models import ginkgo

CASE_TIMEOUT_S = 60
HERE = os.path.dirname(os.path.abspath(__file__))
KEY = jax.random.key(0)


# ------------------------------------------------------------------------------------------
# the per-case time guard: a hang fails its case instead of freezing the run
# ------------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _time_guard():
    if not hasattr(signal, "SIGALRM") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_alarm(signum, frame):
        raise TimeoutError(f"the case ran for more than {CASE_TIMEOUT_S} s (a hang?)")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(CASE_TIMEOUT_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# ------------------------------------------------------------------------------------------
# data (tiny, fixed shapes)
# ------------------------------------------------------------------------------------------
_rng = np.random.default_rng(0)
X = _rng.normal(size=(6, 2))  # Gaussian rows
B = (_rng.random((6, 4)) < 0.5).astype(float)  # binary rows
B[0, 0], B[1, 0] = 0.0, 1.0  # no column of B is constant by accident
G = _rng.normal(size=(6, 4))  # Gaussian rows for the column-separable families
EYE = np.eye(6, 2, dtype=bool)


def niw():
    return jaxhc.NormalInverseWishart.from_data(X)


def bern():
    return jaxhc.BetaBernoulli(1.0, 1.0)


def nkc():
    return jaxhc.NormalKnownCov(np.zeros(4), np.eye(4), np.eye(4))


def with_nan(A):
    return np.where(np.eye(*A.shape, dtype=bool), np.nan, A)


def with_inf(A, sign=1.0):
    return np.where(np.eye(*A.shape, dtype=bool), sign * np.inf, A)


def strings(A):
    return np.full(A.shape, "a")


def objects(A):
    return np.full(A.shape, None, dtype=object)


def const_col(A, j=1, v=0.3):
    A = np.array(A, float)
    A[:, j] = v
    return A


def dup_rows(A):
    return np.repeat(A[: len(A) // 2], 2, axis=0)  # rows 2i and 2i+1 are equal


@lru_cache(maxsize=None)
def bhc_result():
    return jaxhc.bhc(X, niw())


@lru_cache(maxsize=None)
def bhcc_result():
    return jaxhc.bhcc(B, bern())


@lru_cache(maxsize=None)
def jets():
    """Six Ginkgo jets of 6-7 leaves (``[6, 7, 4]`` zero-padded) from tests/data."""
    jb = ginkgo.load_jets(os.path.join(HERE, "data", "ginkgo_generator_jets_6_7.json"))
    return np.asarray(jb.leaves, float), np.asarray(jb.n_leaves)


def jet(b=0):
    lp, nl = jets()
    return lp[b, : nl[b]]


ENERGY = trellis.GinkgoEnergy(lam=2.0, t_cut=16.0)


@lru_cache(maxsize=None)
def greedy_tree():
    return trellis.greedy(ENERGY, jet()).tree


# ------------------------------------------------------------------------------------------
# checks of correct results (each can fail)
# ------------------------------------------------------------------------------------------
def _finite(*xs):
    for x in xs:
        a = np.asarray(x, dtype=float)
        assert np.all(np.isfinite(a)), f"not finite: {a}"


def valid_bhc(n, clusters=()):
    def check(res):
        res.tree.validate()
        assert res.tree.n_leaves == n
        _finite(res.log_evidence, res.dpm_lower_bound, res.log_r)
        assert np.all(np.asarray(res.log_r) <= 1e-12)  # r <= 1
        assert res.dpm_lower_bound <= res.log_evidence + 1e-9 or n == 1
        assert np.asarray(res.cut(0.5)).shape == (n,)
        for c in clusters:
            assert frozenset(c) in res.tree.clusters(), f"{sorted(c)} is not a cluster of the tree"

    return check


def valid_bhcc(J, I):
    def check(res):
        res.tree.validate()
        assert res.tree.n_leaves == J
        _finite(res.log_evidence, res.cdpm_lower_bound)
        labels = np.asarray(res.cut(0.5))
        assert labels.shape == (J,)
        for v in res.views:
            assert v.rows.tree.n_leaves == I

    return check


def finite_vector(m):
    def check(out):
        out = np.asarray(out)
        assert out.shape == (m,)
        _finite(out)

    return check


def no_nan_solution(n, possible=True):
    """A trellis solution over ``n`` leaves: ``log Z`` finite (or ``-inf`` for an impossible
    problem, with every marginal ``-inf``), marginals never NaN and at most 0, the root in
    every tree."""

    def check(sol):
        lz = float(sol.log_z)
        lm = np.asarray(sol.log_marginals)
        assert not np.any(np.isnan(lm)), "NaN cluster marginals"
        assert np.all(lm <= 1e-9)
        if possible:
            assert np.isfinite(lz)
            np.testing.assert_allclose(lm[-1], 0.0, atol=1e-9)  # the root (last in both layouts)
        else:
            assert lz == -np.inf and np.all(lm == -np.inf)

    return check


def valid_search(n):
    def check(res):
        res.tree.validate()
        assert res.tree.n_leaves == n and np.isfinite(res.log_phi)

    return check


def valid_tree(n):
    def check(t):
        t.validate()
        assert t.n_leaves == n

    return check


# ------------------------------------------------------------------------------------------
# the command line
# ------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def cli_dir():
    """A scratch folder for the command line's input and output files (removed at the end)."""
    return tempfile.mkdtemp(prefix="jaxhc_bad_inputs_")


@pytest.fixture(scope="module", autouse=True)
def _remove_cli_dir():
    yield
    if cli_dir.cache_info().currsize:
        shutil.rmtree(cli_dir(), ignore_errors=True)


def _csv(name, A):
    path = os.path.join(cli_dir(), name)
    with open(path, "w") as f:
        f.write("".join(",".join(repr(float(v)) for v in row) + "\n" for row in A))
    return path


def _text(name, text):
    path = os.path.join(cli_dir(), name)
    with open(path, "w") as f:
        f.write(text)
    return path


def _npy(name, A):
    path = os.path.join(cli_dir(), name)
    np.save(path, A)
    return path


_BHC_FLAGS = ["--component", "niw", "--fixed-prior", "--no-cache", "--no-progress", "--out"]


def _cli(argv):
    """Runs ``jaxhc.cli.main(argv)``: its JSON summary on success; a ``ValueError`` with
    stderr on exit code 2 (bad input)."""
    err, out = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            rc = cli_main(argv)
    except SystemExit as e:
        assert e.code == 2, f"exit code {e.code}: {err.getvalue()}"
        raise ValueError(err.getvalue()) from None
    assert rc == 0
    return out.getvalue()


def cli_bhc(path):
    out = os.path.join(cli_dir(), "out")
    return _cli(["bhc", path] + _BHC_FLAGS + [out])


def cli_summary(stem, n):
    def check(stdout):
        import json

        assert stdout.strip().splitlines()[-1].startswith(f"bhc done: {n} points")
        with open(os.path.join(cli_dir(), "out", f"{stem}_bhc.json")) as f:
            summary = json.load(f)
        _finite(summary["log_evidence"], summary["dpm_lower_bound"])
        Tree.from_dict(summary["tree"]).validate()
        assert len(summary["flat_labels"]) == n

    return check


# ------------------------------------------------------------------------------------------
# the table
# ------------------------------------------------------------------------------------------
class Case(NamedTuple):
    entry: str
    name: str
    call: Callable[[], Any]
    error: Optional[tuple]  # (exception type, regex the message must contain)
    check: Optional[Callable[[Any], None]]


CASES: list = []


def raises(entry, name, call, exc, match):
    CASES.append(Case(entry, name, call, (exc, match), None))


def ok(entry, name, call, check):
    CASES.append(Case(entry, name, call, None, check))


V, T = ValueError, TypeError
ALPHA = r"alpha must be a positive finite scalar"
SCALE = r"prior does not fit the data's scale"
# complex data must be refused, not silently cast to its real part (or fail inside XLA)
COMPLEX = r"\bX\b.*complex"

# --- bhc ------------------------------------------------------------------------------
e = "bhc"
raises(e, "empty", lambda: jaxhc.bhc(np.zeros((0, 2)), niw()), V, r"X must be non-empty")
raises(e, "rank 1", lambda: jaxhc.bhc(X[:, 0], niw()), V, r"X must be 2-D")
raises(e, "rank 3", lambda: jaxhc.bhc(X[None], niw()), V, r"X must be 2-D")
raises(e, "strings", lambda: jaxhc.bhc(strings(X), niw()), T, r"X must be a (real )?numeric array")
raises(e, "objects", lambda: jaxhc.bhc(objects(X), niw()), T, r"X must be a (real )?numeric array")
raises(e, "complex", lambda: jaxhc.bhc(X + 1j, niw()), T, COMPLEX)
raises(e, "NaN", lambda: jaxhc.bhc(with_nan(X), niw()), V, r"X contains NaN")
raises(e, "+inf", lambda: jaxhc.bhc(with_inf(X), niw()), V, r"X contains NaN or inf")
raises(e, "-inf", lambda: jaxhc.bhc(with_inf(X, -1), niw()), V, r"X contains NaN or inf")
raises(e, "1e300", lambda: jaxhc.bhc(X * 1e300, niw()), V, SCALE)
raises(e, "data 1e10 x the prior's scale", lambda: jaxhc.bhc(X * 1e10, niw()), V, SCALE)
raises(e, "wrong width", lambda: jaxhc.bhc(np.zeros((6, 3)), niw()), V, r"X has 3 columns")
raises(e, "alpha 0", lambda: jaxhc.bhc(X, niw(), alpha=0.0), V, ALPHA)
raises(e, "alpha -1", lambda: jaxhc.bhc(X, niw(), alpha=-1.0), V, ALPHA)
raises(e, "alpha NaN", lambda: jaxhc.bhc(X, niw(), alpha=np.nan), V, ALPHA)
raises(e, "alpha inf", lambda: jaxhc.bhc(X, niw(), alpha=np.inf), V, ALPHA)
raises(e, "alpha string", lambda: jaxhc.bhc(X, niw(), alpha="one"), T, r"alpha must be a positive scalar")
raises(e, "component None", lambda: jaxhc.bhc(X, None), T, r"component must be a jaxhc.components.Component")
ok(e, "one point", lambda: jaxhc.bhc(X[:1], niw()), valid_bhc(1))
ok(e, "constant column", lambda: jaxhc.bhc(const_col(X), niw()), valid_bhc(6))
ok(e, "all columns constant", lambda: jaxhc.bhc(np.ones((6, 2)), niw()), valid_bhc(6))
ok(e, "duplicated rows", lambda: jaxhc.bhc(dup_rows(X), niw()), valid_bhc(6, [{0, 1}, {2, 3}, {4, 5}]))
ok(e, "1e-300", lambda: jaxhc.bhc(X * 1e-300, niw()), valid_bhc(6))

# --- bhc_predictive ---------------------------------------------------------------------
e = "bhc_predictive"
raises(e, "result None", lambda: jaxhc.bhc_predictive(None, X), T, r"result must be a BHCResult")
raises(e, "empty", lambda: jaxhc.bhc_predictive(bhc_result(), np.zeros((0, 2))), V, r"X_new must be non-empty")
raises(e, "rank 1", lambda: jaxhc.bhc_predictive(bhc_result(), X[0]), V, r"X_new must be 2-D")
raises(
    e, "strings", lambda: jaxhc.bhc_predictive(bhc_result(), strings(X)), T, r"X_new must be a (real )?numeric array"
)
raises(e, "complex", lambda: jaxhc.bhc_predictive(bhc_result(), X + 1j), T, r"\bX_new\b.*complex")
raises(e, "NaN", lambda: jaxhc.bhc_predictive(bhc_result(), with_nan(X)), V, r"X_new contains NaN")
raises(e, "inf", lambda: jaxhc.bhc_predictive(bhc_result(), with_inf(X)), V, r"X_new contains NaN or inf")
raises(e, "wrong width", lambda: jaxhc.bhc_predictive(bhc_result(), np.zeros((2, 3))), V, r"X_new has 3 columns")
# far outside the prior's scale the Student-t log densities lose every digit: a clear error,
# not NaN (as bhc itself raises for such data)
raises(e, "1e10 x the prior's scale", lambda: jaxhc.bhc_predictive(bhc_result(), X * 1e10), V, r"X_new[\s\S]*scale")
ok(e, "one point", lambda: jaxhc.bhc_predictive(bhc_result(), X[:1]), finite_vector(1))


def _near_beats_far(out):
    finite_vector(2)(out)
    assert out[0] > out[1]  # the data's mean is likelier than a point 30 sd away


ok(
    e,
    "near and far points",
    lambda: jaxhc.bhc_predictive(bhc_result(), np.stack([X.mean(0), X.mean(0) + 30 * X.std(0)])),
    _near_beats_far,
)

# --- learn_hyperparameters ------------------------------------------------------------------
e = "learn_hyperparameters"
LH = dict(steps=2, max_rounds=1)
raises(e, "empty", lambda: jaxhc.learn_hyperparameters(np.zeros((0, 2)), niw(), **LH), V, r"X must be non-empty")
raises(e, "NaN", lambda: jaxhc.learn_hyperparameters(with_nan(X), niw(), **LH), V, r"X contains NaN")
raises(e, "complex", lambda: jaxhc.learn_hyperparameters(X + 1j, niw(), **LH), T, COMPLEX)
raises(e, "data 1e10 x the prior's scale", lambda: jaxhc.learn_hyperparameters(X * 1e10, niw(), **LH), V, SCALE)
raises(e, "alpha 0", lambda: jaxhc.learn_hyperparameters(X, niw(), 0.0, **LH), V, ALPHA)
raises(e, "steps 0", lambda: jaxhc.learn_hyperparameters(X, niw(), steps=0), V, r"steps must be a positive integer")
raises(
    e,
    "max_rounds 0",
    lambda: jaxhc.learn_hyperparameters(X, niw(), max_rounds=0),
    V,
    r"max_rounds must be a positive integer",
)
raises(e, "tol NaN", lambda: jaxhc.learn_hyperparameters(X, niw(), tol=np.nan, **LH), V, r"tol must be a finite")
raises(
    e,
    "unknown parameter",
    lambda: jaxhc.learn_hyperparameters(X, niw(), learn=["nope"], **LH),
    V,
    r"learn: unknown parameter names \['nope'\]",
)
raises(
    e,
    "objective",
    lambda: jaxhc.learn_hyperparameters(X, niw(), objective="x", **LH),
    V,
    r"objective must be 'evidence' or 'dpm_lower_bound'",
)


def _valid_hyperopt(res):
    valid_bhc(6, [{0, 1}, {2, 3}, {4, 5}])(res.result)
    _finite(res.trace, res.alpha)
    assert res.alpha > 0
    # the result is the best tree of the rounds (trace: the objective after each)
    np.testing.assert_allclose(res.result.log_evidence, np.max(res.trace), rtol=1e-9)


ok(e, "duplicated rows", lambda: jaxhc.learn_hyperparameters(dup_rows(X), niw(), **LH), _valid_hyperopt)

# --- rbhc -------------------------------------------------------------------------------
e = "rbhc"
raises(e, "key int", lambda: jaxhc.rbhc(0, X, niw()), V, r"key must be a single JAX PRNG key")
raises(e, "key string", lambda: jaxhc.rbhc("key", X, niw()), V, r"key must be a single JAX PRNG key")
raises(e, "empty", lambda: jaxhc.rbhc(KEY, np.zeros((0, 2)), niw()), V, r"X must be non-empty")
raises(e, "NaN", lambda: jaxhc.rbhc(KEY, with_nan(X), niw()), V, r"X contains NaN")
raises(e, "complex", lambda: jaxhc.rbhc(KEY, X + 1j, niw()), T, COMPLEX)
raises(e, "data 1e10 x the prior's scale", lambda: jaxhc.rbhc(KEY, X * 1e10, niw()), V, SCALE)
raises(e, "alpha -1", lambda: jaxhc.rbhc(KEY, X, niw(), alpha=-1.0), V, ALPHA)
raises(e, "subset_size 1", lambda: jaxhc.rbhc(KEY, X, niw(), subset_size=1), V, r"subset_size must be an integer >= 2")
raises(
    e,
    "leaf_size < subset_size",
    lambda: jaxhc.rbhc(KEY, X, niw(), subset_size=4, leaf_size=2),
    V,
    r"leaf_size must be an integer >= subset_size",
)
raises(e, "balance NaN", lambda: jaxhc.rbhc(KEY, X, niw(), balance=np.nan), V, r"balance must be in \[0, 0.5\)")

# --- bhcc -------------------------------------------------------------------------------
e = "bhcc"
raises(e, "empty", lambda: jaxhc.bhcc(np.zeros((0, 4)), bern()), V, r"X must have at least one row and one column")
raises(e, "rank 1", lambda: jaxhc.bhcc(B[0], bern()), V, r"X must be a 2-D array")
raises(e, "strings", lambda: jaxhc.bhcc(strings(B), bern()), T, r"X must be a real numeric array")
raises(e, "objects", lambda: jaxhc.bhcc(objects(B), bern()), T, r"X must be a real numeric array")
raises(e, "complex", lambda: jaxhc.bhcc(B + 1j, bern()), T, COMPLEX)
raises(e, "ragged", lambda: jaxhc.bhcc([[0.0, 1.0], [1.0]], bern()), V, r"X is ragged")
raises(e, "inf", lambda: jaxhc.bhcc(with_inf(B), bern()), V, r"X contains inf")
raises(e, "not binary (1e300)", lambda: jaxhc.bhcc(B * 1e300 + 1, bern()), V, r"X must be binary")
raises(e, "Gaussian 1e300", lambda: jaxhc.bhcc(G * 1e300, nkc()), V, r"X: entries up to .* too large")
raises(e, "alpha 0", lambda: jaxhc.bhcc(B, bern(), alpha=0.0), V, ALPHA)
raises(e, "refine_passes 0", lambda: jaxhc.bhcc(B, bern(), refine_passes=0), V, r"refine_passes must be a positive")
raises(
    e,
    "non-separable component",
    lambda: jaxhc.bhcc(G, jaxhc.NormalInverseWishart.from_data(G)),
    T,
    r"column-separable component",
)
ok(e, "missing cells (NaN)", lambda: jaxhc.bhcc(with_nan(B), bern()), valid_bhcc(4, 6))
ok(e, "all cells missing", lambda: jaxhc.bhcc(np.full((6, 4), np.nan), bern()), valid_bhcc(4, 6))
ok(e, "constant column", lambda: jaxhc.bhcc(const_col(B, 1, 1.0), bern()), valid_bhcc(4, 6))
ok(e, "duplicated rows", lambda: jaxhc.bhcc(dup_rows(B), bern()), valid_bhcc(4, 6))

# --- rbhcc ------------------------------------------------------------------------------
e = "rbhcc"
raises(e, "key int", lambda: jaxhc.rbhcc(0, B, bern()), V, r"key must be a single JAX PRNG key")
raises(
    e, "empty", lambda: jaxhc.rbhcc(KEY, np.zeros((6, 0)), bern()), V, r"X must have at least one row and one column"
)
raises(e, "strings", lambda: jaxhc.rbhcc(KEY, strings(B), bern()), T, r"X must be a real numeric array")
raises(e, "complex", lambda: jaxhc.rbhcc(KEY, B + 1j, bern()), T, COMPLEX)
raises(e, "not binary", lambda: jaxhc.rbhcc(KEY, B * 2, bern()), V, r"X must be binary")
raises(e, "alpha NaN", lambda: jaxhc.rbhcc(KEY, B, bern(), alpha=np.nan), V, ALPHA)
raises(e, "levels -1", lambda: jaxhc.rbhcc(KEY, B, bern(), levels=-1), V, r"levels must be None or a non-negative")
raises(
    e, "subset_size 1", lambda: jaxhc.rbhcc(KEY, B, bern(), subset_size=1), V, r"subset_size must be an integer >= 2"
)
raises(
    e,
    "threshold < subset_size",
    lambda: jaxhc.rbhcc(KEY, B, bern(), subset_size=4, threshold=2),
    V,
    r"threshold must be an integer >= subset_size",
)
ok(e, "missing cells (NaN)", lambda: jaxhc.rbhcc(KEY, with_nan(B), bern()), valid_bhcc(4, 6))

# --- bhcc predictives -------------------------------------------------------------------
e = "bhcc_predictive_row"
raises(e, "result None", lambda: jaxhc.bhcc_predictive_row(None, B), T, r"result must be a BHCCResult")
raises(
    e, "wrong width", lambda: jaxhc.bhcc_predictive_row(bhcc_result(), B[:, :3]), V, r"X_new must have shape \[m, 4\]"
)
raises(e, "strings", lambda: jaxhc.bhcc_predictive_row(bhcc_result(), strings(B)), T, r"X_new must be a real numeric")
raises(e, "complex", lambda: jaxhc.bhcc_predictive_row(bhcc_result(), B + 1j), T, r"X_new must be a real numeric")
raises(e, "inf", lambda: jaxhc.bhcc_predictive_row(bhcc_result(), with_inf(B)), V, r"X_new contains inf")
raises(e, "not binary", lambda: jaxhc.bhcc_predictive_row(bhcc_result(), B * 2), V, r"X_new must be binary")
ok(e, "missing entries", lambda: jaxhc.bhcc_predictive_row(bhcc_result(), with_nan(B)), finite_vector(6))
ok(e, "no rows", lambda: jaxhc.bhcc_predictive_row(bhcc_result(), np.zeros((0, 4))), finite_vector(0))

e = "bhcc_predictive_column"
raises(
    e, "wrong length", lambda: jaxhc.bhcc_predictive_column(bhcc_result(), B.T[:, :5]), V, r"Y must have shape \[m, 6\]"
)
raises(e, "strings", lambda: jaxhc.bhcc_predictive_column(bhcc_result(), strings(B.T)), T, r"Y must be a real numeric")
raises(e, "not binary", lambda: jaxhc.bhcc_predictive_column(bhcc_result(), B.T * 2), V, r"Y must be binary")
raises(
    e,
    "column 1.5",
    lambda: jaxhc.bhcc_predictive_column(bhcc_result(), B.T, column=1.5),
    T,
    r"column must be None or an integer",
)
raises(
    e,
    "column out of range",
    lambda: jaxhc.bhcc_predictive_column(bhcc_result(), B.T, column=9),
    V,
    r"column must be in \[0, 4\)",
)
ok(e, "missing entries", lambda: jaxhc.bhcc_predictive_column(bhcc_result(), with_nan(B.T)), finite_vector(4))


def _proper_cell(out):
    out = np.asarray(out)
    assert out.shape == (2, 2)
    _finite(out)
    np.testing.assert_allclose(np.exp(out).sum(axis=1), 1.0, rtol=1e-9)  # p(0) + p(1) = 1


e = "bhcc_predictive_cell"
raises(
    e,
    "rows not integers",
    lambda: jaxhc.bhcc_predictive_cell(bhcc_result(), [0.5], [1], [1.0]),
    T,
    r"rows must hold integer cell indices",
)
raises(
    e,
    "rows strings",
    lambda: jaxhc.bhcc_predictive_cell(bhcc_result(), ["a"], [1], [1.0]),
    T,
    r"rows must hold integer cell indices",
)
raises(
    e,
    "out of range",
    lambda: jaxhc.bhcc_predictive_cell(bhcc_result(), [6], [1], [1.0]),
    V,
    r"cell coordinates out of range",
)
raises(
    e, "value NaN", lambda: jaxhc.bhcc_predictive_cell(bhcc_result(), [0], [1], [np.nan]), V, r"values must be finite"
)
raises(
    e,
    "value not binary",
    lambda: jaxhc.bhcc_predictive_cell(bhcc_result(), [0], [1], [2.0]),
    V,
    r"values must be binary",
)
raises(
    e,
    "value complex",
    lambda: jaxhc.bhcc_predictive_cell(bhcc_result(), [0], [1], [1 + 1j]),
    T,
    r"values must be a real numeric",
)
raises(
    e,
    "shape mismatch",
    lambda: jaxhc.bhcc_predictive_cell(bhcc_result(), [0, 1], [1], [1.0]),
    V,
    r"rows, cols must be \[Q\]",
)
ok(
    e,
    "both values of two cells",
    lambda: jaxhc.bhcc_predictive_cell(bhcc_result(), [0, 5], [1, 3], [[0.0, 1.0]] * 2),
    _proper_cell,
)

# --- bhmc -------------------------------------------------------------------------------
e = "bhmc"
BH = dict(depth=2, num_samples=1, num_warmup=0, progress_bar=False)
raises(e, "empty", lambda: jaxhc.bhmc(KEY, np.zeros((0, 2)), **BH), V, r"X must not be empty")
raises(e, "rank 1", lambda: jaxhc.bhmc(KEY, X[:, 0], **BH), V, r"X must be 2-D")
raises(e, "strings", lambda: jaxhc.bhmc(KEY, strings(X), **BH), T, r"X must be a real numeric")
raises(e, "complex", lambda: jaxhc.bhmc(KEY, X + 1j, **BH), T, r"X must be a real numeric")
raises(e, "ragged", lambda: jaxhc.bhmc(KEY, [[1.0, 2.0], [3.0]], **BH), V, r"X must be a rectangular")
raises(e, "NaN", lambda: jaxhc.bhmc(KEY, with_nan(X), **BH), V, r"X contains NaN or inf")
raises(e, "-inf", lambda: jaxhc.bhmc(KEY, with_inf(X, -1), **BH), V, r"X contains NaN or inf")
raises(e, "1e300", lambda: jaxhc.bhmc(KEY, X * 1e300, **BH), V, r"X: entries up to .* too large")
raises(e, "key int", lambda: jaxhc.bhmc(0, X, **BH), T, r"key must be a jax.random key")
raises(e, "alpha 0", lambda: jaxhc.bhmc(KEY, X, alpha=0.0, **BH), V, r"alpha must be a finite number > 0")
raises(e, "gamma NaN", lambda: jaxhc.bhmc(KEY, X, gamma=np.nan, **BH), V, r"gamma must be a finite number > 0")
raises(e, "gamma outside its hyperprior", lambda: jaxhc.bhmc(KEY, X, gamma=2.0, **BH), V, r"gamma must be < 1.5")
raises(e, "sigma2 -1", lambda: jaxhc.bhmc(KEY, X, sigma2=-1.0, **BH), V, r"sigma2 must be a finite number > 0")
raises(e, "prior_var 0", lambda: jaxhc.bhmc(KEY, X, prior_var=0.0, **BH), V, r"prior_var must be finite and > 0")
raises(e, "depth 0", lambda: jaxhc.bhmc(KEY, X, **{**BH, "depth": 0}), V, r"depth must be >= 1")
raises(e, "max_nodes too small", lambda: jaxhc.bhmc(KEY, X, max_nodes=4, **BH), V, r"max_nodes=4")
raises(e, "max_components too small", lambda: jaxhc.bhmc(KEY, X, max_components=1, **BH), V, r"max_components=1")
raises(e, "num_samples 0", lambda: jaxhc.bhmc(KEY, X, **{**BH, "num_samples": 0}), V, r"num_samples must be >= 1")

# --- pydt_mcmc --------------------------------------------------------------------------
e = "pydt_mcmc"
PM = dict(num_samples=2, progress_bar=False)
raises(e, "empty", lambda: jaxhc.pydt_mcmc(KEY, np.zeros((0, 2)), **PM), V, r"X must be 2-D \[N, D\] with N >= 2")
raises(e, "one point", lambda: jaxhc.pydt_mcmc(KEY, X[:1], **PM), V, r"X must be 2-D \[N, D\] with N >= 2")
raises(e, "strings", lambda: jaxhc.pydt_mcmc(KEY, strings(X), **PM), T, r"X must be a real numeric")
raises(e, "complex", lambda: jaxhc.pydt_mcmc(KEY, X + 1j, **PM), T, r"X must be a real numeric")
raises(e, "ragged", lambda: jaxhc.pydt_mcmc(KEY, [[1.0, 2.0], [3.0]], **PM), V, r"X must be a rectangular")
raises(e, "+inf", lambda: jaxhc.pydt_mcmc(KEY, with_inf(X), **PM), V, r"X contains NaN or inf")
raises(e, "1e300", lambda: jaxhc.pydt_mcmc(KEY, X * 1e300, **PM), V, r"X: entries up to .* too large")
raises(e, "key int", lambda: jaxhc.pydt_mcmc(0, X, **PM), V, r"key must be a single JAX PRNG key")
raises(e, "beta 1", lambda: jaxhc.pydt_mcmc(KEY, X, beta=1.0, **PM), V, r"beta must be in \[0, 1\)")
raises(e, "c 0", lambda: jaxhc.pydt_mcmc(KEY, X, c=0.0, **PM), V, r"c must be > 0")
raises(e, "alpha NaN", lambda: jaxhc.pydt_mcmc(KEY, X, alpha=np.nan, **PM), V, r"alpha must be finite")
raises(e, "sigma2 0", lambda: jaxhc.pydt_mcmc(KEY, X, sigma2=0.0, **PM), V, r"sigma2 must be > 0")
raises(e, "num_samples 0", lambda: jaxhc.pydt_mcmc(KEY, X, num_samples=0), V, r"num_samples must be an integer >= 1")
raises(e, "thin 0", lambda: jaxhc.pydt_mcmc(KEY, X, thin=0, **PM), V, r"thin must be an integer >= 1")
raises(e, "num_moves -3", lambda: jaxhc.pydt_mcmc(KEY, X, num_moves=-3, **PM), V, r"num_moves must be an integer >= 1")
raises(
    e,
    "priors NaN",
    lambda: jaxhc.pydt_mcmc(KEY, X, priors=PYDTPriors(alpha=(np.nan, 1.0)), **PM),
    V,
    r"priors.alpha must be two positive finite numbers",
)
raises(
    e,
    "probit on real data",
    lambda: jaxhc.pydt_mcmc(KEY, X, likelihood="probit", **PM),
    V,
    r"likelihood='probit' needs binary X",
)

# --- pydt_em ----------------------------------------------------------------------------
e = "pydt_em"
PE = dict(num_iters=1, progress_bar=False)
raises(e, "two points", lambda: jaxhc.pydt_em(KEY, X[:2], **PE), V, r"pydt_em needs N >= 3 points")
raises(e, "objects", lambda: jaxhc.pydt_em(KEY, objects(X), **PE), T, r"X must be a real numeric")
raises(e, "complex", lambda: jaxhc.pydt_em(KEY, X + 1j, **PE), T, r"X must be a real numeric")
raises(e, "NaN", lambda: jaxhc.pydt_em(KEY, with_nan(X), **PE), V, r"X contains NaN or inf")
raises(e, "1e300", lambda: jaxhc.pydt_em(KEY, X * 1e300, **PE), V, r"X: entries up to .* too large")
raises(e, "key int", lambda: jaxhc.pydt_em(0, X, **PE), V, r"key must be a single JAX PRNG key")
raises(e, "c NaN", lambda: jaxhc.pydt_em(KEY, X, c=np.nan, **PE), V, r"c must be finite")
raises(e, "sigma2 0", lambda: jaxhc.pydt_em(KEY, X, sigma2=0.0, **PE), V, r"sigma2 must be > 0")
raises(
    e,
    "num_iters 1.5",
    lambda: jaxhc.pydt_em(KEY, X, num_iters=1.5, progress_bar=False),
    V,
    r"num_iters must be an integer >= 0",
)
raises(e, "k_best 0", lambda: jaxhc.pydt_em(KEY, X, k_best=0, **PE), V, r"k_best must be an integer >= 1")
raises(
    e,
    "num_em_candidates 0",
    lambda: jaxhc.pydt_em(KEY, X, num_em_candidates=0, **PE),
    V,
    r"num_em_candidates must be an integer >= 1",
)
raises(e, "tol_em NaN", lambda: jaxhc.pydt_em(KEY, X, tol_em=np.nan, **PE), V, r"tol_em must be a finite number")
raises(
    e,
    "sigma2_max -1",
    lambda: jaxhc.pydt_em(KEY, X, sigma2_max=-1.0, **PE),
    V,
    r"sigma2_max must be a finite number > 0",
)
raises(e, "moves unknown", lambda: jaxhc.pydt_em(KEY, X, moves=("swap",), **PE), V, r"moves must be a non-empty subset")

# --- dpm_gibbs --------------------------------------------------------------------------
e = "dpm_gibbs"


def dpm(data, component=None, alpha=1.0, num_samples=2, key=KEY, **kw):
    # plain Gibbs sweeps (no split-merge moves): the smallest program to compile
    return jaxhc.dpm_gibbs(
        key,
        data,
        niw() if component is None else component,
        alpha,
        num_samples=num_samples,
        num_split_merge=0,
        num_restricted_scans=0,
        progress_bar=False,
        **kw,
    )


raises(e, "empty", lambda: dpm(np.zeros((0, 2))), V, r"X must be non-empty")
raises(e, "strings", lambda: dpm(strings(X)), T, r"X must be a (real )?numeric array")
raises(e, "complex", lambda: dpm(X + 1j), T, COMPLEX)
raises(e, "NaN", lambda: dpm(with_nan(X)), V, r"X contains NaN")
raises(e, "data 1e10 x the prior's scale", lambda: dpm(X * 1e10), V, r"dpm_gibbs: .*" + SCALE)
raises(e, "key int", lambda: dpm(X, key=0), V, r"key must be a single JAX PRNG key")
raises(e, "alpha 0", lambda: dpm(X, alpha=0.0), V, ALPHA)
raises(e, "num_samples 0", lambda: dpm(X, num_samples=0), V, r"num_samples must be an integer >= 1")
raises(e, "init_labels wrong length", lambda: dpm(X, init_labels=[0, 1]), V, r"labels must have shape \[6\]")


def _valid_dpm(s):
    labels = np.asarray(s.labels)
    assert labels.shape == (2, 6) and labels.min() >= 0
    _finite(s.log_joint)


ok(e, "duplicated rows", lambda: dpm(dup_rows(X)), _valid_dpm)
ok(e, "constant column", lambda: dpm(const_col(X)), _valid_dpm)

# --- cdpm_mcmc --------------------------------------------------------------------------
e = "cdpm_mcmc"
NK2 = lambda: jaxhc.NormalKnownCov(np.zeros(2), np.eye(2), np.eye(2))  # noqa: E731


def cdpm(data, component=None, alpha=1.0, num_samples=2, key=KEY, **kw):
    return jaxhc.cdpm_mcmc(
        key, data, NK2() if component is None else component, alpha, num_samples=num_samples, progress_bar=False, **kw
    )


raises(e, "empty", lambda: cdpm(np.zeros((0, 2))), V, r"X must be non-empty")
raises(e, "complex", lambda: cdpm(X + 1j), T, COMPLEX)
raises(e, "inf", lambda: cdpm(with_inf(X)), V, r"X contains NaN or inf")
raises(e, "1e300", lambda: cdpm(X * 1e300), V, r"cdpm_mcmc: .*" + SCALE)
raises(e, "key int", lambda: cdpm(X, key=0), V, r"key must be a single JAX PRNG key")
raises(e, "alpha NaN", lambda: cdpm(X, alpha=np.nan), V, ALPHA)
raises(e, "heat 0", lambda: cdpm(X, heat=0.0), V, r"heat must be a scalar in \(0, 1\]")
raises(e, "heat 2", lambda: cdpm(X, heat=2.0), V, r"heat must be a scalar in \(0, 1\]")
raises(e, "non-separable component", lambda: cdpm(X, component=niw()), T, r"column-separable component")


# --- trellis.solve ------------------------------------------------------------------------
e = "trellis.solve"
LEAVES = r"leaves must be a real numeric array"
raises(e, "empty", lambda: trellis.solve(ENERGY, np.zeros((0, 4))), V, r"leaves must be a non-empty array")
raises(e, "rank 1", lambda: trellis.solve(ENERGY, jet()[:, 0]), V, r"leaves must be four-momenta \[N, 4\]")
raises(e, "strings", lambda: trellis.solve(ENERGY, strings(jet())), T, LEAVES)
raises(e, "objects", lambda: trellis.solve(ENERGY, objects(jet())), T, LEAVES)
raises(e, "complex", lambda: trellis.solve(ENERGY, jet() + 1j), T, LEAVES)
raises(e, "NaN", lambda: trellis.solve(ENERGY, with_nan(jet())), V, r"leaves contains NaN or inf")
raises(e, "inf", lambda: trellis.solve(ENERGY, with_inf(jet())), V, r"leaves contains NaN or inf")
raises(e, "negative energy", lambda: trellis.solve(ENERGY, -jet()), V, r"leaves: every energy E .* must be positive")
raises(e, "1e300", lambda: trellis.solve(ENERGY, jet() * 1e300), V, r"leaves: four-momenta up to .* too large")
raises(
    e,
    "N beyond the exact limit",
    lambda: trellis.solve(ENERGY, np.tile(jet()[:1], (25, 1))),
    V,
    r"N=25 is above the exact trellis limit",
)
raises(e, "max_leaves", lambda: trellis.solve(ENERGY, jet(), max_leaves=3), V, r"above the exact trellis limit of 3")
raises(e, "max_bytes", lambda: trellis.solve(ENERGY, jet(), max_bytes=1), V, r"above max_bytes")
raises(e, "energy None", lambda: trellis.solve(None, jet()), T, r"energy must be a jaxhc.trellis Energy")
raises(
    e, "Dasgupta beta NaN", lambda: trellis.solve(trellis.DasguptaEnergy(np.nan), np.eye(4)), V, r"beta must be finite"
)
raises(
    e,
    "affinities not symmetric",
    lambda: trellis.solve(trellis.DasguptaEnergy(), np.triu(np.ones((4, 4)))),
    V,
    r"leaves must be a symmetric affinity matrix",
)
ok(e, "one leaf", lambda: trellis.solve(ENERGY, jet()[:1]), no_nan_solution(1))
ok(e, "duplicated leaves", lambda: trellis.solve(ENERGY, dup_rows(jet())), no_nan_solution(6))
# jets scaled below the cut: no hierarchy is possible, log Z = -inf and no NaN marginal
ok(e, "1e-300 (impossible)", lambda: trellis.solve(ENERGY, jet() * 1e-300), no_nan_solution(6, possible=False))

# --- trellis.sample -----------------------------------------------------------------------
e = "trellis.sample"
raises(e, "num_samples 0", lambda: trellis.sample(KEY, ENERGY, jet(), 0), V, r"num_samples must be a positive integer")
raises(e, "key int", lambda: trellis.sample(0, ENERGY, jet(), 2), V, r"key must be a single JAX PRNG key")
raises(e, "strings", lambda: trellis.sample(KEY, ENERGY, strings(jet()), 2), T, LEAVES)
raises(e, "NaN", lambda: trellis.sample(KEY, ENERGY, with_nan(jet()), 2), V, r"leaves contains NaN or inf")
raises(
    e,
    "N beyond the exact limit",
    lambda: trellis.sample(KEY, ENERGY, np.tile(jet()[:1], (25, 1)), 2),
    V,
    r"N=25 is above the exact trellis limit",
)
raises(
    e,
    "1e-300 (impossible)",
    lambda: trellis.sample(KEY, ENERGY, jet() * 1e-300, 3),
    V,
    r"leaves: cannot sample, log Z is not finite",
)


def _valid_samples(n):
    def check(s):
        for t in s.trees():
            valid_tree(n)(t)
        _finite(s.log_phi)

    return check


ok(e, "one leaf", lambda: trellis.sample(KEY, ENERGY, jet()[:1], 2), lambda s: s.n_leaves == 1)
ok(e, "duplicated leaves", lambda: trellis.sample(KEY, ENERGY, dup_rows(jet()), 3), _valid_samples(6))

# --- trellis.solve_batch ------------------------------------------------------------------
e = "trellis.solve_batch"
raises(
    e,
    "n_leaves float",
    lambda: trellis.solve_batch(ENERGY, jets()[0], jets()[1].astype(float)),
    V,
    r"n_leaves must be an integer array",
)
raises(
    e,
    "n_leaves 0",
    lambda: trellis.solve_batch(ENERGY, jets()[0], np.zeros(6, int)),
    V,
    r"n_leaves must be in \[1, N_max=7\]",
)
raises(
    e,
    "empty batch",
    lambda: trellis.solve_batch(ENERGY, jets()[0][:0], jets()[1][:0]),
    V,
    r"leaves_padded must be \[B, N_max, ...\] with B >= 1",
)
raises(
    e,
    "strings",
    lambda: trellis.solve_batch(ENERGY, strings(jets()[0]), jets()[1]),
    T,
    r"leaves_padded must be a real numeric array",
)
raises(
    e,
    "complex",
    lambda: trellis.solve_batch(ENERGY, jets()[0] + 1j, jets()[1]),
    T,
    r"leaves_padded must be a real numeric array",
)
raises(
    e,
    "NaN in a jet",
    lambda: trellis.solve_batch(ENERGY, jets()[0] * np.nan, jets()[1]),
    V,
    r"leaves_padded\[0\] contains NaN",
)
raises(
    e,
    "N_max beyond the exact limit",
    lambda: trellis.solve_batch(ENERGY, np.zeros((1, 25, 4)), np.array([3])),
    V,
    r"N=25 is above the exact trellis limit",
)
raises(e, "layout", lambda: trellis.solve_batch(ENERGY, *jets(), layout="x"), V, r"layout must be 'grouped' or 'flat'")


def _nan_padding_ignored(sol):
    lp, nl = jets()
    ref = trellis.solve_batch(ENERGY, lp, nl)
    _finite(sol.log_z)
    np.testing.assert_allclose(np.asarray(sol.log_z), np.asarray(ref.log_z), rtol=1e-12)


def _nan_padded():
    lp, nl = jets()
    lp = lp.copy()
    lp[np.arange(7)[None, :] >= nl[:, None]] = np.nan
    return trellis.solve_batch(ENERGY, lp, nl)


ok(e, "NaN padding", _nan_padded, _nan_padding_ignored)

# --- trellis.sparse_solve -----------------------------------------------------------------
e = "trellis.sparse_solve"
raises(
    e, "no seed trees", lambda: trellis.sparse_solve(ENERGY, jet(), []), V, r"seed_trees must hold at least one tree"
)
raises(
    e,
    "seed of the wrong size",
    lambda: trellis.sparse_solve(ENERGY, jet()[:1], [greedy_tree()]),
    V,
    r"seed_trees\[0\] has 6 leaves, the problem has N=1",
)
raises(
    e,
    "seed not a tree",
    lambda: trellis.sparse_solve(ENERGY, jet(), [None]),
    V,
    r"seed_trees\[0\] must be a jaxhc.Tree",
)
raises(e, "NaN", lambda: trellis.sparse_solve(ENERGY, with_nan(jet()), [greedy_tree()]), V, r"leaves contains NaN")
raises(e, "strings", lambda: trellis.sparse_solve(ENERGY, strings(jet()), [greedy_tree()]), T, LEAVES)


def _sparse_one_tree(sol):
    no_nan_solution(6)(sol)
    np.testing.assert_allclose(float(sol.log_z), trellis.greedy(ENERGY, jet()).log_phi, rtol=1e-10)


ok(e, "one seed tree", lambda: trellis.sparse_solve(ENERGY, jet(), [greedy_tree()]), _sparse_one_tree)
ok(
    e,
    "1e-300 (impossible)",
    lambda: trellis.sparse_solve(ENERGY, jet() * 1e-300, [greedy_tree()]),
    no_nan_solution(6, possible=False),
)

# --- trellis.greedy / trellis.beam --------------------------------------------------------
e = "trellis.greedy"
raises(e, "empty", lambda: trellis.greedy(ENERGY, np.zeros((0, 4))), V, r"leaves must be a non-empty array")
raises(e, "strings", lambda: trellis.greedy(ENERGY, strings(jet())), T, LEAVES)
raises(e, "NaN", lambda: trellis.greedy(ENERGY, with_nan(jet())), V, r"leaves contains NaN")
raises(e, "1e300", lambda: trellis.greedy(ENERGY, jet() * 1e300), V, r"leaves: four-momenta up to .* too large")
raises(e, "energy None", lambda: trellis.greedy(None, jet()), T, r"energy must be a jaxhc.trellis Energy")
ok(e, "one leaf", lambda: trellis.greedy(ENERGY, jet()[:1]), lambda r: r.tree.n_leaves == 1)
ok(e, "duplicated leaves", lambda: trellis.greedy(ENERGY, dup_rows(jet())), valid_search(6))

e = "trellis.beam"
raises(e, "beam_size 0", lambda: trellis.beam(ENERGY, jet(), 0), V, r"beam_size must be a positive integer")
raises(e, "beam_size 1.5", lambda: trellis.beam(ENERGY, jet(), 1.5), V, r"beam_size must be a positive integer")
raises(e, "complex", lambda: trellis.beam(ENERGY, jet() + 1j, 2), T, LEAVES)
raises(e, "inf", lambda: trellis.beam(ENERGY, with_inf(jet()), 2), V, r"leaves contains NaN or inf")
raises(e, "rank 3", lambda: trellis.beam(ENERGY, jet()[None], 2), V, r"leaves must be four-momenta \[N, 4\]")
ok(e, "duplicated leaves", lambda: trellis.beam(ENERGY, dup_rows(jet()), 2), valid_search(6))

# --- ginkgo.simulate ----------------------------------------------------------------------
e = "ginkgo.simulate"
P = ginkgo.GinkgoParams()
SIM = dict(chunk_size=64, max_nodes=3)
raises(
    e, "lam NaN", lambda: ginkgo.simulate(KEY, P._replace(lam=np.nan), 2), V, r"lam must be a positive finite scalar"
)
raises(e, "lam 0", lambda: ginkgo.simulate(KEY, P._replace(lam=0.0), 2), V, r"lam must be a positive finite scalar")
raises(e, "t_cut -1", lambda: ginkgo.simulate(KEY, P._replace(t_cut=-1.0), 2), V, r"t_cut must be a positive finite")
raises(
    e,
    "root_p3 of length 2",
    lambda: ginkgo.simulate(KEY, P._replace(root_p3=(1.0, 2.0)), 2),
    V,
    r"root_p3 must be a finite three-momentum",
)
raises(e, "num_jets 0", lambda: ginkgo.simulate(KEY, P, 0), V, r"num_jets must be a positive integer")
raises(
    e,
    "min_leaves > max_leaves",
    lambda: ginkgo.simulate(KEY, P, 2, min_leaves=5, max_leaves=4),
    V,
    r"max_leaves must be an integer >= min_leaves=5",
)
raises(e, "key int", lambda: ginkgo.simulate(0, P, 2), V, r"key must be a single JAX PRNG key")
raises(e, "chunk_size 0", lambda: ginkgo.simulate(KEY, P, 2, chunk_size=0), V, r"chunk_size must be a positive integer")
raises(
    e,
    "max_nodes below max_leaves",
    lambda: ginkgo.simulate(KEY, P, 2, max_leaves=4, max_nodes=3),
    V,
    r"max_nodes=3 cannot hold jets of max_leaves=4",
)
raises(
    e,
    "showers beyond max_nodes",
    lambda: ginkgo.simulate(KEY, P, 2, **SIM),
    V,
    r"a shower needed more than max_nodes=3 slots",
)


def _valid_jets(jb):
    assert jb.leaves.shape[0] == 2 and np.all((jb.n_leaves >= 1) & (jb.n_leaves <= 2))
    for b, t in enumerate(jb.trees):
        if t is not None:
            valid_tree(int(jb.n_leaves[b]))(t)
    _finite(jb.leaves)


ok(e, "capacity exactly enough", lambda: ginkgo.simulate(KEY, P, 2, max_leaves=2, **SIM), _valid_jets)

# --- ginkgo.tree_log_likelihood -----------------------------------------------------------
e = "ginkgo.tree_log_likelihood"
raises(e, "tree None", lambda: ginkgo.tree_log_likelihood(None, jet(), P), T, r"tree must be a jaxhc.Tree")
raises(
    e,
    "tree of the wrong size",
    lambda: ginkgo.tree_log_likelihood(Tree.from_nested((0, (1, 2))), jet(), P),
    V,
    r"tree has 3 leaves but leaves has 6 rows",
)
raises(
    e,
    "lam NaN",
    lambda: ginkgo.tree_log_likelihood(greedy_tree(), jet(), P._replace(lam=np.nan)),
    V,
    r"lam must be a positive finite scalar",
)
raises(
    e,
    "likelihood",
    lambda: ginkgo.tree_log_likelihood(greedy_tree(), jet(), P, likelihood="x"),
    V,
    r"likelihood must be 'paper' or 'exact'",
)
raises(e, "strings", lambda: ginkgo.tree_log_likelihood(greedy_tree(), strings(jet()), P), T, LEAVES)
raises(e, "NaN", lambda: ginkgo.tree_log_likelihood(greedy_tree(), with_nan(jet()), P), V, r"leaves contains NaN")
raises(
    e,
    "1e300",
    lambda: ginkgo.tree_log_likelihood(greedy_tree(), jet() * 1e300, P),
    V,
    r"leaves: four-momenta up to .* too large",
)
ok(
    e,
    "one leaf",
    lambda: ginkgo.tree_log_likelihood(Tree(np.zeros((0, 2), np.int64)), jet()[:1], P),
    lambda v: float(v) == 0.0,
)
ok(e, "the greedy tree", lambda: ginkgo.tree_log_likelihood(greedy_tree(), jet(), P), lambda v: _finite(v))
ok(
    e,
    "1e-300 (impossible)",
    lambda: ginkgo.tree_log_likelihood(greedy_tree(), jet() * 1e-300, P),
    lambda v: float(v) == -np.inf,
)

# --- fit_lambda / sample_lambda -------------------------------------------------------------
e = "fit_lambda"
FIT = dict(steps=2, progress_bar=False)
raises(e, "t_cut 0", lambda: jaxhc.fit_lambda(*jets(), 0.0, **FIT), V, r"t_cut must be a positive finite scalar")
raises(e, "t_cut NaN", lambda: jaxhc.fit_lambda(*jets(), np.nan, **FIT), V, r"t_cut must be a positive finite scalar")
raises(
    e,
    "t_cut above every jet's mass",
    lambda: jaxhc.fit_lambda(*jets(), 1e6, **FIT),
    V,
    r"t_cut=1e\+06 is not below the jet.s mass squared",
)
raises(
    e,
    "lam_init -1",
    lambda: jaxhc.fit_lambda(*jets(), 16.0, lam_init=-1.0, **FIT),
    V,
    r"lam_init must be a positive finite scalar",
)
raises(e, "steps 0", lambda: jaxhc.fit_lambda(*jets(), 16.0, steps=0, progress_bar=False), V, r"steps must be >= 1")
raises(
    e,
    "NaN leaves",
    lambda: jaxhc.fit_lambda(jets()[0] * np.nan, jets()[1], 16.0, **FIT),
    V,
    r"leaves_padded\[0\] contains NaN",
)
raises(
    e,
    "complex",
    lambda: jaxhc.fit_lambda(jets()[0] + 1j, jets()[1], 16.0, **FIT),
    T,
    r"leaves_padded must be a real numeric array",
)
raises(
    e,
    "single-leaf jets",
    lambda: jaxhc.fit_lambda(jets()[0][:, :1], np.ones(6, int), 16.0, **FIT),
    V,
    r"n_leaves: every jet has a single leaf",
)
raises(
    e,
    "N_max beyond the exact limit",
    lambda: jaxhc.fit_lambda(np.zeros((1, 25, 4)), np.array([3]), 16.0, **FIT),
    V,
    r"N=25 is above the exact trellis limit",
)
raises(e, "n_leaves None", lambda: jaxhc.fit_lambda(jets()[0], None, 16.0, **FIT), V, r"n_leaves is required")


def _valid_fit(fit):
    assert fit.lam > 0 and fit.num_steps <= 2
    _finite(fit.lam, fit.trace, fit.grad)


ok(e, "two steps", lambda: jaxhc.fit_lambda(*jets(), 16.0, **FIT), _valid_fit)

e = "sample_lambda"
SL = dict(num_warmup=2, num_samples=2, progress_bar=False)
raises(e, "key int", lambda: jaxhc.sample_lambda(0, *jets(), 16.0, **SL), T, r"key must be a JAX PRNG key")
raises(
    e,
    "num_samples 0",
    lambda: jaxhc.sample_lambda(KEY, *jets(), 16.0, **{**SL, "num_samples": 0}),
    V,
    r"num_samples must be >= 1",
)
raises(
    e,
    "lam_prior not a distribution",
    lambda: jaxhc.sample_lambda(KEY, *jets(), 16.0, lam_prior="x", **SL),
    T,
    r"lam_prior must be a numpyro Distribution",
)
raises(
    e,
    "NaN leaves",
    lambda: jaxhc.sample_lambda(KEY, jets()[0] * np.nan, jets()[1], 16.0, **SL),
    V,
    r"leaves_padded\[0\] contains NaN",
)
raises(
    e, "t_cut -1", lambda: jaxhc.sample_lambda(KEY, *jets(), -1.0, **SL), V, r"t_cut must be a positive finite scalar"
)
# every jet impossible: NumPyro's "Cannot find valid initial parameters" before; now named
raises(
    e,
    "t_cut above every jet's mass",
    lambda: jaxhc.sample_lambda(KEY, *jets(), 1e6, **SL),
    V,
    r"t_cut=1e\+06 is not below the jet.s mass squared",
)

# --- Tree conversions -----------------------------------------------------------------------
e = "Tree"
T4 = Tree.from_nested(((0, 1), (2, 3)))
raises(
    e,
    "children not integers",
    lambda: Tree(np.array([[0.5, 1.0], [2.0, 3.0], [4.0, 5.0]])).validate(),
    T,
    r"children must hold integer node ids",
)
raises(
    e, "children strings", lambda: Tree(np.array([["a", "b"]])).validate(), T, r"children must hold integer node ids"
)
raises(e, "children rank 1", lambda: Tree(np.array([0, 1])).validate(), V, r"children must have shape \[n-1, 2\]")
raises(
    e,
    "child twice",
    lambda: Tree(np.array([[0, 0]])).validate(),
    V,
    r"every node except the root must appear exactly once",
)
raises(
    e,
    "heights NaN",
    lambda: Tree(T4.children, heights=np.array([1.0, np.nan, 2.0])).validate(),
    V,
    r"heights must not be NaN",
)
raises(
    e,
    "from_linkage fractional ids",
    lambda: Tree.from_linkage(np.array([[0.5, 1, 1, 2]])),
    V,
    r"Z\[:, :2\] .* must hold integer ids",
)
raises(
    e,
    "from_linkage NaN height",
    lambda: Tree.from_linkage(np.array([[0, 1, np.nan, 2]])),
    V,
    r"Z: the merge heights .* must not be NaN",
)
raises(
    e,
    "from_linkage complex",
    lambda: Tree.from_linkage(np.array([[0, 1, 1, 2]], complex)),
    T,
    r"Z must be a real numeric linkage matrix",
)
raises(e, "from_linkage rank 1", lambda: Tree.from_linkage(np.zeros(4)), V, r"Z must be a linkage matrix \[n-1, 4\]")
raises(e, "from_nested strings", lambda: Tree.from_nested(("a", "b")), T, r"from_nested: leaves must be integer ids")
raises(e, "from_nested fractional", lambda: Tree.from_nested((0.5, 1)), T, r"from_nested: leaves must be integer ids")
raises(e, "from_nested triple", lambda: Tree.from_nested((0, 1, 2)), V, r"every inner node needs 2 children")
raises(e, "from_nested duplicate leaf", lambda: Tree.from_nested((0, 0)), V, r"leaves must be 0..1 once each")
raises(e, "from_json without children", lambda: Tree.from_json("{}"), V, r"a Tree dict needs a 'children' entry")
raises(e, "from_dict odd children", lambda: Tree.from_dict({"children": [0, 1, 2]}), V, r"children must have shape")
raises(e, "relabel fractional", lambda: T4.relabel_leaves([0.5, 1, 2, 3]), V, r"perm must hold integer ids")
raises(e, "relabel not a permutation", lambda: T4.relabel_leaves([0, 0, 1, 2]), V, r"perm must be a permutation")
raises(e, "cut NaN threshold", lambda: T4.cut(np.nan), V, r"threshold must be a number \(not NaN\)")
raises(e, "newick labels", lambda: T4.to_newick(["a"]), V, r"labels must have length n_leaves=4")
raises(
    e,
    "ParentTree strings",
    lambda: jaxhc.ParentTree(np.array(["a"]), 1).validate(),
    T,
    r"parent must hold integer node ids",
)


def _linkage_roundtrip():
    from scipy.cluster.hierarchy import linkage

    Z = linkage(X)
    t = Tree.from_linkage(Z)
    return t, Z


def _check_linkage_roundtrip(out):
    t, Z = out
    valid_tree(6)(t)
    np.testing.assert_allclose(t.to_linkage(), Z)


ok(e, "scipy linkage round trip", _linkage_roundtrip, _check_linkage_roundtrip)
ok(
    e,
    "one leaf",
    lambda: Tree.from_json(Tree.from_nested(0).to_json()),
    lambda t: t.n_leaves == 1 and t.to_newick() == "0;" and t.cut(0.5).tolist() == [0],
)
ok(
    e,
    "integral float linkage ids",
    lambda: Tree.from_linkage(np.array([[0.0, 1.0, 1.0, 2.0]])),
    lambda t: t.children.tolist() == [[0, 1]],
)

# --- the command line ------------------------------------------------------------------------
e = "cli"
raises(e, "empty file", lambda: cli_bhc(_text("empty.csv", "")), V, r"file is empty")
raises(e, "one row", lambda: cli_bhc(_csv("one.csv", X[:1])), V, r"need at least 2 data rows")
raises(e, "NaN", lambda: cli_bhc(_csv("nan.csv", with_nan(X))), V, r"data do not fit --component niw: X contains NaN")
raises(
    e, "strings", lambda: cli_bhc(_text("words.csv", "a,b\nc,d\ne,f\n")), V, r"column 'x0' \(column 0\) is not numeric"
)
raises(e, "ragged", lambda: cli_bhc(_text("ragged.csv", "1,2\n3\n4,5\n")), V, r"ragged rows: line 2")
raises(e, "1e300", lambda: cli_bhc(_csv("huge.csv", X * 1e300)), V, r"huge.csv: values up to .* too large")
raises(e, "complex .npy", lambda: cli_bhc(_npy("complex.npy", X + 1j)), V, r"complex.npy: array has complex dtype")
raises(
    e, "object .npy", lambda: cli_bhc(_npy("objects.npy", objects(X))), V, r"objects.npy: cannot read as a .npy array"
)
raises(
    e,
    "alpha -1",
    lambda: _cli(["bhc", _csv("ok.csv", X), "--alpha", "-1"] + _BHC_FLAGS + [cli_dir()]),
    V,
    r"argument --alpha: must be a positive number",
)
raises(
    e,
    "jets beyond the exact limit",
    lambda: _cli(["jets", "--max-leaves", "25", "--no-cache", "--out", cli_dir()]),
    V,
    r"--max-leaves 25 is above the exact trellis limit",
)
raises(
    e,
    "jets lam inf",
    lambda: _cli(["jets", "--lam", "inf", "--no-cache", "--out", cli_dir()]),
    V,
    r"argument --lam: must be a positive number",
)
raises(
    e,
    "jets file with NaN",
    lambda: _cli(
        [
            "jets",
            "--input",
            _text("jets.json", '[{"leaves": [[NaN, 1, 1, 1]' + ", [2, 1, 1, 1]" * 5 + "]}]"),
            "--no-cache",
            "--out",
            cli_dir(),
        ]
    ),
    V,
    r"jets\[0\] contains NaN or inf",
)
ok(e, "constant column", lambda: cli_bhc(_csv("constant.csv", const_col(X))), cli_summary("constant", 6))


# ------------------------------------------------------------------------------------------
# the tests
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[f"{c.entry}-{c.name}" for c in CASES])
def test_bad_input(case):
    if case.error is not None:
        exc, match = case.error
        with pytest.raises(exc, match=match):
            case.call()
    else:
        out = case.call()
        check = case.check(out)
        assert check is None or check is True, f"check returned {check!r}"


def test_every_entry_point_has_five_cases():
    counts = Counter(c.entry for c in CASES)
    few = {k: n for k, n in counts.items() if n < 5}
    assert not few, f"entry points with fewer than 5 cases: {few}"
    assert len(counts) >= 25
