import jax

jax.config.update("jax_enable_x64", True)

"""Tests for the ``jaxhc`` command line: the quick demo writes its files and prints purity
numbers; ``jaxhc bhc`` clusters CSV files with and without a header and .npy files; bad
input ends with exit code 2 and a message naming the problem."""
import json
import re
import subprocess
import sys

import numpy as np
import pytest

import jaxhc
from jaxhc.cli import InputError, class_respecting_tree, main, read_table

# the CSV fixtures are [60, 4] like the quick demo's iris / wine tables, so they reuse its
# compiled BHC program when run in the same process
N_ROWS, N_COLS = 60, 4


@pytest.fixture(scope="module")
def blobs():
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1, 2], N_ROWS // 3)
    centers = np.array([[0, 0, 0, 0], [6, 6, 0, 0], [0, 6, 6, 6]], float)
    X = centers[y] + rng.normal(size=(N_ROWS, N_COLS))
    return X, y


def _write_csv(path, X, header=None, labels=None):
    with open(path, "w") as f:
        if header is not None:
            f.write(",".join(header) + "\n")
        for i, row in enumerate(X):
            cells = [repr(float(v)) for v in row]
            if labels is not None:
                cells.append(str(labels[i]))
            f.write(",".join(cells) + "\n")
    return str(path)


def _run_error(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "error" in err
    return err


# ---------------------------------------------------------------------------------------
# demo
# ---------------------------------------------------------------------------------------
def test_demo_quick(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--quick", "--no-progress", "--no-cache", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    for name in ("digits024", "iris", "wine4"):
        assert (out / f"{name}_dendrogram.png").stat().st_size > 1000
        nwk = (out / f"{name}.nwk").read_text().strip()
        assert nwk.startswith("(") and nwk.endswith(";")
        row = next(line for line in text.splitlines() if line.startswith(name))
        purities = re.findall(r"\s(0\.\d{3}|1\.000)\s", row + " ")
        assert len(purities) == 5, row  # BHC, average, complete, single, ward
        assert all(0 < float(p) <= 1 for p in purities)
    assert "dendrogram purity" in text and "log p(D|T)" in text
    last = text.strip().splitlines()[-1]
    assert last.startswith("demo done: 3 data sets") and "/3" in last and str(out) in last
    # hyperparameters learned by default: a non-negative evidence gain per data set; the
    # real-valued sets pick their family by evidence; every loss to the best linkage is
    # explained by the model's scores of the true classes
    assert "gain" in text
    wins = 0
    for name in ("digits024", "iris", "wine4"):
        cells = next(line for line in text.splitlines() if line.startswith(name)).split()
        gain = float(next(c for c in cells if c.startswith("+") or c.startswith("-0")))
        assert gain >= 0
        bhc, linkages = float(cells[-6]), dict(zip(("average", "complete", "single", "ward"), map(float, cells[-5:-1])))
        best = max(linkages, key=linkages.get)
        verdict = [line for line in text.splitlines() if line.startswith(f"{name}: BHC's purity")]
        assert len(verdict) == (bhc < linkages[best])  # the verdict compares with the best linkage
        if verdict:
            assert f"below {best} linkage's {linkages[best]:.3f} (the best linkage)" in verdict[0]
            assert "true classes" in verdict[0] and "DPM bound" in verdict[0] and "log p(D, c)" in verdict[0]
        wins += bhc >= linkages[best]
    for name in ("iris", "wine4"):
        assert any(line.startswith(f"{name}: family chosen by the DPM evidence bound") for line in text.splitlines())
    assert f"at least the best linkage's on {wins}/3" in last
    # the digits leaves are named class_index, so the Newick file holds 120 leaves
    assert (out / "digits024.nwk").read_text().count("_") == 120


# ---------------------------------------------------------------------------------------
# bhc on files
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("header", [True, False])
def test_bhc_csv_with_and_without_header(tmp_path, capsys, blobs, header):
    X, y = blobs
    csv = _write_csv(tmp_path / "data.csv", X, header=["a", "b", "c", "d"] if header else None)
    out = tmp_path / "out"
    assert (
        main(["bhc", csv, "--component", "niw", "--fixed-prior", "--no-cache", "--out", str(out), "--no-progress"]) == 0
    )
    text = capsys.readouterr().out
    assert "niw" in text and text.strip().splitlines()[-1].startswith("bhc done: 60 points")
    assert (out / "data_dendrogram.png").stat().st_size > 1000
    assert (out / "data.nwk").read_text().strip().endswith(";")
    summary = json.loads((out / "data_bhc.json").read_text())
    assert summary["n"] == N_ROWS and summary["d"] == N_COLS
    assert summary["columns"] == (["a", "b", "c", "d"] if header else ["x0", "x1", "x2", "x3"])
    assert len(summary["flat_labels"]) == N_ROWS
    assert summary["n_clusters"] == max(summary["flat_labels"]) + 1 == 3
    assert summary["tree"]["n_leaves"] == N_ROWS and len(summary["tree"]["children"]) == N_ROWS - 1
    assert np.isfinite(summary["log_evidence"]) and summary["dpm_lower_bound"] < summary["log_evidence"]
    # --fixed-prior: the data-derived prior as it is
    assert summary["learned"] is False and summary["alpha"] == 1.0
    assert summary["dpm_lower_bound_fixed_prior"] == summary["dpm_lower_bound"]
    want = jaxhc.bhc(X, jaxhc.NormalInverseWishart.from_data(X), 1.0)
    assert summary["log_evidence"] == pytest.approx(float(want.log_evidence), rel=1e-12)


def test_bhc_learns_and_picks_the_family_by_evidence(tmp_path, capsys, blobs):
    """Without --component and --fixed-prior, both Gaussian families are fitted with their
    hyperparameters learned by the DPM evidence bound; the one of higher bound is kept and
    the gain is reported."""
    X, y = blobs
    csv = _write_csv(tmp_path / "blobs.csv", X, labels=y)
    out = tmp_path / "out"
    assert main(["bhc", csv, "--labels-column", "-1", "--no-cache", "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    summary = json.loads((out / "blobs_bhc.json").read_text())
    fams = summary["families_dpm_lower_bound"]
    assert set(fams) == {"niw", "normalgamma"} and summary["learned"] is True
    assert summary["component"] == max(fams, key=fams.get)
    assert summary["dpm_lower_bound"] == max(fams.values()) >= summary["dpm_lower_bound_fixed_prior"]
    assert summary["learn_objective"] == "dpm_lower_bound"
    # the same numbers as the library call, and the hyperparameters written are the learned ones
    start = jaxhc.NormalInverseWishart if summary["component"] == "niw" else jaxhc.NormalGamma
    fit = jaxhc.learn_hyperparameters(X, start.from_data(X), 1.0, objective="dpm_lower_bound")
    assert summary["log_evidence"] == pytest.approx(float(fit.result.log_evidence), rel=1e-9)
    assert summary["dpm_lower_bound"] == pytest.approx(float(fit.result.dpm_lower_bound), rel=1e-9)
    assert summary["dpm_lower_bound_fixed_prior"] == pytest.approx(float(fit.trace[0]), rel=1e-9)
    assert summary["alpha"] == pytest.approx(fit.alpha, rel=1e-9)
    assert summary["hyperparameters"]["family"] == type(fit.component).__name__
    np.testing.assert_allclose(summary["hyperparameters"]["kappa"], np.asarray(fit.component.kappa), rtol=1e-9)
    gain = summary["dpm_lower_bound"] - summary["dpm_lower_bound_fixed_prior"]
    row = next(line for line in text.splitlines() if line.startswith("blobs "))
    assert f"{gain:+.1f}" in row.split()
    assert "family chosen by the DPM evidence bound" in text


def test_bhc_cli_and_fit_bhc_agree_on_iris(tmp_path, capsys):
    """``jaxhc bhc FILE`` is `jaxhc.fit_bhc` plus output: the same family, tree, numbers and
    hyperparameters on a built-in data set (iris, 20 rows per class: the [60, 4] shape of the
    blobs, so the compiled programs are shared)."""
    X, y = jaxhc.datasets.load_iris()
    idx = np.concatenate([np.flatnonzero(y == c)[:20] for c in np.unique(y)])
    X, y = np.asarray(X, float)[idx], np.asarray(y)[idx]
    csv = _write_csv(tmp_path / "iris60.csv", X, labels=y)
    out = tmp_path / "out"
    assert main(["bhc", csv, "--labels-column", "-1", "--no-cache", "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    summary = json.loads((out / "iris60_bhc.json").read_text())
    fit = jaxhc.fit_bhc(X)
    assert isinstance(fit, jaxhc.BHCFit) and fit.learned
    assert summary["component"] == fit.family and set(fit.bounds) == {"niw", "normalgamma"}
    assert fit.bounds[fit.family] == max(fit.bounds.values()) == fit.dpm_lower_bound
    np.testing.assert_array_equal(np.asarray(jaxhc.Tree.from_dict(summary["tree"]).children), fit.tree.children)
    want_tree = fit.tree.to_dict()
    assert summary["tree"]["children"] == want_tree["children"]
    np.testing.assert_allclose(summary["tree"]["values"]["log_r"], want_tree["values"]["log_r"], rtol=1e-9, atol=1e-12)
    assert summary["flat_labels"] == np.asarray(fit.result.cut(0.5)).tolist()
    for key, want in (
        ("log_evidence", fit.log_evidence),
        ("dpm_lower_bound", fit.dpm_lower_bound),
        ("dpm_lower_bound_fixed_prior", fit.start_bound),
        ("alpha", fit.alpha),
    ):
        assert summary[key] == pytest.approx(want, rel=1e-9), key
    for fam, bound in fit.bounds.items():
        assert summary["families_dpm_lower_bound"][fam] == pytest.approx(bound, rel=1e-9)
    assert summary["hyperparameters"]["family"] == type(fit.component).__name__
    for name, v in summary["hyperparameters"].items():
        if name != "family":
            np.testing.assert_allclose(v, np.asarray(getattr(fit.component, name)), rtol=1e-9)


def test_fit_bhc_bad_arguments(blobs):
    X, _ = blobs
    with pytest.raises(ValueError, match="families: unknown family 'gauss'"):
        jaxhc.fit_bhc(X, ["gauss"])
    with pytest.raises(ValueError, match="X: the data do not fit the bernoulli family"):
        jaxhc.fit_bhc(X, "bernoulli")
    with pytest.raises(ValueError, match="trials"):
        jaxhc.fit_bhc(X, "binomial")
    with pytest.raises(ValueError, match="alpha"):
        jaxhc.fit_bhc(X, alpha=0.0)
    with pytest.raises(ValueError, match="X must be"):
        jaxhc.fit_bhc(X[:1])
    with pytest.raises(TypeError, match="X must be a real numeric array"):
        jaxhc.fit_bhc(X + 1j)
    with pytest.raises(TypeError, match="X must be a real numeric array"):
        jaxhc.fit_bhc(X.astype(str))
    with pytest.raises(ValueError, match="X contains inf"):
        jaxhc.fit_bhc(np.where(X > 5, np.inf, X))


def test_class_respecting_tree():
    """Every class becomes a subtree, each class keeps the hierarchy the tree induces on it,
    and with three classes the top is the best of the three joins under the score."""
    from itertools import combinations

    from jaxhc.tree import Tree

    rng = np.random.default_rng(3)
    n = 11
    labels = rng.integers(0, 3, n)
    labels[:3] = [0, 1, 2]
    tree = Tree.from_linkage(
        __import__("scipy.cluster.hierarchy", fromlist=["linkage"]).linkage(rng.normal(size=(n, 2)), "average")
    )
    score = lambda t: float(np.sum(t.depths()[:n] * np.arange(1, n + 1)))  # noqa: E731  any tree score
    ct = class_respecting_tree(tree, labels, score)
    cl_new = {frozenset(c) for c in ct.clusters()}
    for c in range(3):
        members = frozenset(np.flatnonzero(labels == c).tolist())
        assert members in cl_new
        induced = {frozenset(a) & members for a in tree.clusters()} - {frozenset()}
        assert {a for a in cl_new if a <= members} == induced
    # brute force over the three ways of joining three class subtrees
    sub = [frozenset(np.flatnonzero(labels == c).tolist()) for c in range(3)]
    scores = []
    for i, j in combinations(range(3), 2):
        cand = {a for a in cl_new if any(a <= m for m in sub)} | {sub[i] | sub[j], frozenset(range(n))}
        nested = None

        # rebuild the tree from its clusters (a laminar family) by nesting
        def build(cluster):
            kids = [c for c in cand if c < cluster and not any(c < d < cluster for d in cand)]
            if not kids:
                return next(iter(cluster))
            assert len(kids) == 2
            return (build(kids[0]), build(kids[1]))

        nested = build(frozenset(range(n)))
        scores.append(score(Tree.from_nested(nested)))
    assert score(ct) == pytest.approx(max(scores))


def test_bhc_header_and_no_header_agree(tmp_path, capsys, blobs):
    X, _ = blobs
    a = read_table(_write_csv(tmp_path / "a.csv", X, header=["a", "b", "c", "d"]))
    b = read_table(_write_csv(tmp_path / "b.csv", X))
    assert a.has_header and not b.has_header
    np.testing.assert_array_equal(a.X, b.X)
    np.testing.assert_allclose(a.X, X)


@pytest.mark.parametrize("spec", ["species", "4", "-1"])
def test_bhc_labels_column(tmp_path, capsys, blobs, spec):
    X, y = blobs
    names = np.array(["setosa", "versicolor", "virginica"])[y]
    csv = _write_csv(tmp_path / "lab.csv", X, header=["a", "b", "c", "d", "species"], labels=names)
    out = tmp_path / "out"
    assert (
        main(["bhc", csv, "--labels-column", spec, "--standardize", "--no-cache", "--out", str(out), "--no-progress"])
        == 0
    )
    text = capsys.readouterr().out
    row = next(line for line in text.splitlines() if line.startswith("lab "))
    assert len(re.findall(r"\s(0\.\d{3}|1\.000)\s", row + " ")) == 5  # BHC and four linkages
    summary = json.loads((out / "lab_bhc.json").read_text())
    assert summary["d"] == 4 and summary["columns"] == ["a", "b", "c", "d"] and summary["standardize"]
    assert set(summary["dendrogram_purity"]) == {"bhc", "average", "complete", "single", "ward"}
    assert summary["dendrogram_purity"]["bhc"] > 0.9
    assert "setosa_0" in (out / "lab.nwk").read_text()


def test_bhc_binary_defaults_to_bernoulli_and_npy(tmp_path, capsys):
    rng = np.random.default_rng(1)
    B = (rng.random((N_ROWS, N_COLS)) < 0.5).astype(float)
    csv = _write_csv(tmp_path / "bin.csv", B)
    assert main(["bhc", csv, "--no-cache", "--out", str(tmp_path), "--no-progress"]) == 0
    assert json.loads((tmp_path / "bin_bhc.json").read_text())["component"] == "bernoulli"
    np.save(tmp_path / "arr.npy", B)
    assert (
        main(
            [
                "bhc",
                str(tmp_path / "arr.npy"),
                "--component",
                "bernoulli",
                "--no-cache",
                "--out",
                str(tmp_path),
                "--no-progress",
            ]
        )
        == 0
    )
    summary = json.loads((tmp_path / "arr_bhc.json").read_text())
    assert summary["component"] == "bernoulli" and summary["n"] == N_ROWS
    assert summary["log_evidence"] == pytest.approx(
        json.loads((tmp_path / "bin_bhc.json").read_text())["log_evidence"], rel=1e-12
    )
    capsys.readouterr()


def test_bhc_binomial_component(tmp_path, capsys):
    rng = np.random.default_rng(2)
    C = rng.integers(0, 4, size=(N_ROWS, N_COLS)).astype(float)
    np.save(tmp_path / "counts.npy", C)
    assert (
        main(
            [
                "bhc",
                str(tmp_path / "counts.npy"),
                "--component",
                "binomial",
                "--trials",
                "3",
                "--no-cache",
                "--out",
                str(tmp_path),
                "--no-progress",
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "counts_bhc.json").read_text())["component"] == "binomial"
    capsys.readouterr()


# ---------------------------------------------------------------------------------------
# bad input: exit code 2, message on stderr
# ---------------------------------------------------------------------------------------
def test_missing_file(tmp_path, capsys):
    err = _run_error(capsys, ["bhc", str(tmp_path / "nope.csv"), "--out", str(tmp_path)])
    assert "nope.csv" in err and "no such file" in err


def test_empty_file(tmp_path, capsys):
    (tmp_path / "empty.csv").write_text("")
    err = _run_error(capsys, ["bhc", str(tmp_path / "empty.csv"), "--out", str(tmp_path)])
    assert "empty" in err
    (tmp_path / "blank.csv").write_text("\n\n  \n")
    assert "empty" in _run_error(capsys, ["bhc", str(tmp_path / "blank.csv"), "--out", str(tmp_path)])
    (tmp_path / "head.csv").write_text("a,b,c\n")
    assert "no data rows" in _run_error(capsys, ["bhc", str(tmp_path / "head.csv"), "--out", str(tmp_path)])


def test_non_numeric_column_named(tmp_path, capsys):
    (tmp_path / "bad.csv").write_text("height,colour\n1.0,red\n2.0,blue\n3.0,red\n")
    err = _run_error(capsys, ["bhc", str(tmp_path / "bad.csv"), "--out", str(tmp_path)])
    assert "'colour'" in err and "not numeric" in err and "red" in err
    # a stray string further down in a numeric column
    (tmp_path / "bad2.csv").write_text("a,b\n1,2\n3,4\n5,oops\n")
    err = _run_error(capsys, ["bhc", str(tmp_path / "bad2.csv"), "--out", str(tmp_path)])
    assert "'b'" in err and "line 4" in err and "oops" in err


def test_ragged_rows(tmp_path, capsys):
    (tmp_path / "rag.csv").write_text("1,2,3\n4,5,6\n7,8\n")
    err = _run_error(capsys, ["bhc", str(tmp_path / "rag.csv"), "--out", str(tmp_path)])
    assert "ragged" in err and "line 3" in err and "2 fields" in err and "expected 3" in err


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--labels-column", "nope"], "--labels-column"),
        (["--labels-column", "9"], "out of range"),
        (["--component", "bernoulli"], "binary"),
        (["--component", "binomial"], "--trials"),
        (["--trials", "3"], "--trials only"),
    ],
)
def test_bad_options(tmp_path, capsys, blobs, extra, needle):
    csv = _write_csv(tmp_path / "d.csv", blobs[0][:6], header=["a", "b", "c", "d"])
    err = _run_error(capsys, ["bhc", csv, "--out", str(tmp_path), *extra])
    assert needle in err


def test_argparse_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bhc", "x.csv", "--alpha", "-1"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2
    capsys.readouterr()


def test_read_table_nan_and_missing_markers(tmp_path):
    (tmp_path / "m.csv").write_text("a;b\n1;NA\n0;1\n;0\n")
    t = read_table(str(tmp_path / "m.csv"))
    assert t.has_header and t.columns == ["a", "b"]
    assert np.isnan(t.X[0, 1]) and np.isnan(t.X[2, 0]) and t.X[1, 1] == 1
    with pytest.raises(InputError, match="no such file"):
        read_table(str(tmp_path / "missing.csv"))


def test_python_m_jaxhc_help():
    r = subprocess.run([sys.executable, "-m", "jaxhc", "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "demo" in r.stdout and "bhc" in r.stdout


# ---------------------------------------------------------------------------------------
# the figures the CLI writes (jaxhc.plot)
# ---------------------------------------------------------------------------------------
def test_plot_bhc_marks_cut_merges(blobs):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import jaxhc
    from jaxhc.plot import plot_bhc, plot_dendrogram

    X, y = blobs
    res = jaxhc.bhc(X, jaxhc.NormalInverseWishart.from_data(X))
    ax = plot_bhc(res, labels=[f"p{i}" for i in range(N_ROWS)], colors_by=y)
    links = [ln for ln in ax.lines if len(ln.get_xdata()) == 4]
    assert len(links) == N_ROWS - 1
    n_dashed = sum(ln.get_linestyle() == "--" for ln in links)
    assert n_dashed == int(np.sum(np.exp(np.asarray(res.log_r)) < 0.5)) >= res.n_clusters() - 1
    assert f"{res.n_clusters()} clusters" in ax.get_title()
    assert len(ax.get_xticklabels()) == N_ROWS
    plt.close(ax.figure)

    fig, ax2 = plt.subplots()
    out = plot_dendrogram(res.tree, labels=list(range(N_ROWS)), ax=ax2, colors_by=y, title="t")
    assert out is ax2 and ax2.get_title() == "t" and len(ax2.get_xticklabels()) == N_ROWS
    with pytest.raises(ValueError, match="one entry per leaf"):
        plot_dendrogram(res.tree, colors_by=y[:5], ax=ax2)
    plt.close(fig)
