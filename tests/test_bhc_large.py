"""Large-n paths of the BHC outputs (issue 59, part 4) at small scale: the dendrogram of
the top clusters only (scipy's ``truncate_mode="lastp"`` layout, computed by us) and
``jaxhc bhc`` above its size threshold (lowered here): learning on a random subset,
randomized BHC on all rows, the method in the summary and the JSON."""

import json

import jax
import numpy as np
import pytest

import jaxhc
from jaxhc.cli import bhc_cmd, main
from jaxhc.plot import _dendrogram_coords_top
from jaxhc.tree import Tree

jax.config.update("jax_enable_x64", True)


def _size_ordered_tree(n=300, seed=0):
    """A tree whose merges are numbered by (cluster size, id): its highest merges (scipy's
    lastp) are then the largest clusters (ours)."""
    from scipy.cluster.hierarchy import linkage

    t = Tree.from_linkage(linkage(np.random.default_rng(seed).normal(size=(n, 2)), "average"))
    sizes = t.sizes()
    order = np.lexsort((np.arange(n - 1), sizes[n:]))
    new_id = np.arange(2 * n - 1)
    new_id[n + order] = n + np.arange(n - 1)
    return Tree(new_id[np.asarray(t.children)[order]])


@pytest.mark.parametrize("p", [2, 7, 50, 299])
def test_top_clusters_layout_is_scipys_lastp(p):
    from scipy.cluster.hierarchy import dendrogram

    t = _size_ordered_tree()
    icoord, dcoord, nodes, clusters = _dendrogram_coords_top(t, p)
    d = dendrogram(t.to_linkage(), truncate_mode="lastp", p=p, no_plot=True)
    np.testing.assert_allclose(icoord, d["icoord"])
    np.testing.assert_allclose(dcoord, d["dcoord"])
    assert len(clusters) == p and len(nodes) == p - 1
    # the clusters partition the leaves
    assert int(t.sizes()[clusters].sum()) == t.n_leaves


def test_plot_bhc_truncated(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, 200)
    X = rng.normal(size=(200, 2)) + 8.0 * np.eye(3)[y][:, :2]
    res = jaxhc.bhc(X, jaxhc.NormalInverseWishart.from_data(X), 1.0)
    ax = jaxhc.plot.plot_bhc(res, colors_by=y, truncate=12)
    assert len(ax.lines) == 11 and "top 12 clusters" in ax.get_title()
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert len(ticks) == 12 and sum(int(s.strip("()")) for s in ticks) == 200
    plt.close(ax.figure)
    ax = jaxhc.plot.plot_dendrogram(res.tree, truncate=5)
    assert len(ax.get_xticklabels()) == 5
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="truncate must be None or an integer >= 2"):
        jaxhc.plot.plot_bhc(res, truncate=1)


def test_cli_bhc_above_the_threshold(tmp_path, capsys, monkeypatch):
    rng = np.random.default_rng(21)
    y = rng.integers(0, 4, 300)
    X = rng.normal(size=(300, 3)) * 0.6 + rng.normal(0, 6, (4, 3))[y]
    csv = tmp_path / "big.csv"
    np.savetxt(csv, np.column_stack([X, y]), delimiter=",", header="a,b,c,label", comments="")
    drawn = {}
    real = jaxhc.plot.plot_bhc

    def spy(res, **kw):
        drawn.update(kw)
        return real(res, **kw)

    monkeypatch.setattr(jaxhc.plot, "plot_bhc", spy)
    monkeypatch.setattr(bhc_cmd, "PLOT_FULL_MAX", 100)  # 300 rows: the top clusters only
    out = tmp_path / "out"
    argv = ["bhc", str(csv), "--component", "niw", "--labels-column", "label", "--randomized-above", "100"]
    argv += ["--learn-subset", "57", "--seed", "3", "--no-cache", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "randomized BHC (jaxhc.rbhc) on all 300 rows" in text
    assert text.strip().splitlines()[-1].startswith("bhc done: 300 points")
    assert "method rbhc (hyperparameters on 57 rows)" in text
    assert drawn["truncate"] == bhc_cmd.PLOT_CLUSTERS
    summary = json.loads((out / "big_bhc.json").read_text())
    assert summary["method"] == "rbhc" and len(summary["learn_subset_rows"]) == 57
    # the library call with the same seed: the same tree and numbers
    fit = jaxhc.fit_bhc(X, "niw", randomized_above=100, learn_subset=57, key=jax.random.PRNGKey(3))
    assert summary["learn_subset_rows"] == fit.subset.tolist()
    np.testing.assert_array_equal(np.asarray(summary["tree"]["children"]), np.asarray(fit.tree.children))
    assert summary["log_evidence"] == pytest.approx(fit.log_evidence, abs=1e-9)
    assert (out / "big_dendrogram.png").stat().st_size > 0 and (out / "big.nwk").exists()
