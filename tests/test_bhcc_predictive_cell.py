"""bhcc_predictive_cell computes the row BHC of only the column-tree nodes that matter to a
cell (issue 18 part 4): nodes far below the heaviest on a cell's column path are left out
when a bound certifies them negligible, else added in a second pass. Values equal the full
sum over every node (the implementation before) to 1e-9."""

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np
import pytest

import jaxhc
from jaxhc.datasets import cross_cluster_table
from jaxhc.inference.bhcc import predictive


@pytest.fixture(scope="module")
def fitted():
    X, _, _ = cross_cluster_table(3, view_sizes=(3, 4, 5), n_rows=24, n_clusters=3)
    X = X.astype(float)
    rng = np.random.default_rng(0)
    X[rng.random(X.shape) < 0.1] = np.nan
    return jaxhc.bhcc(X, jaxhc.BetaBernoulli(1.0, 1.0), 1.0)


@pytest.mark.parametrize("prune,certify", [(150.0, 35.0), (1.0, 35.0), (1.0, 1e3)])
def test_pruned_cell_predictive_equals_the_full_sum(fitted, monkeypatch, prune, certify):
    """Every (prune, certify): the defaults; a prune so tight that most nodes are left out
    at first; and a certificate no value passes (so every cell takes the second pass)."""
    rng = np.random.default_rng(1)
    I, J = fitted.X.shape
    rows, cols = rng.integers(0, I, 30), rng.integers(0, J, 30)
    vals = np.tile([0.0, 1.0], (30, 1))
    with monkeypatch.context() as m:
        m.setattr(predictive, "CELL_PRUNE_NATS", np.inf)
        full = jaxhc.bhcc_predictive_cell(fitted, rows, cols, vals)
    with monkeypatch.context() as m:
        m.setattr(predictive, "CELL_PRUNE_NATS", prune)
        m.setattr(predictive, "CELL_CERTIFY_NATS", certify)
        got = jaxhc.bhcc_predictive_cell(fitted, rows, cols, vals)
    np.testing.assert_allclose(got, full, rtol=0, atol=1e-9)
    np.testing.assert_allclose(np.exp(got).sum(axis=1), 1.0, atol=1e-9)
    one = jaxhc.bhcc_predictive_cell(fitted, rows[:3], cols[:3], vals[:3, 1])
    np.testing.assert_allclose(one, full[:3, 1], rtol=0, atol=1e-9)


def test_pruning_leaves_nodes_out(fitted, monkeypatch):
    """With a tight prune, fewer views are computed than live nodes on the queried paths."""
    seen = []
    orig = predictive._row_trees

    def spy(cd, col_lists, alpha):
        seen.append(len(col_lists))
        return orig(cd, col_lists, alpha)

    monkeypatch.setattr(predictive, "_row_trees", spy)
    rows, cols = np.array([0, 1]), np.array([0, 0])
    monkeypatch.setattr(predictive, "CELL_PRUNE_NATS", np.inf)
    jaxhc.bhcc_predictive_cell(fitted, rows, cols, [1.0, 0.0])
    n_all = seen[-1]
    monkeypatch.setattr(predictive, "CELL_PRUNE_NATS", 5.0)
    monkeypatch.setattr(predictive, "CELL_CERTIFY_NATS", 0.0)
    jaxhc.bhcc_predictive_cell(fitted, rows, cols, [1.0, 0.0])
    assert seen[-1] < n_all


def test_normal_cell_predictive_is_a_density():
    """The Normal family's cell predictive (a mixture of Normals over both paths) integrates
    to one over the value, per cell, including an observed cell predicted given itself."""
    rng = np.random.default_rng(4)
    X = np.concatenate([rng.normal(0, 1, (10, 3)), rng.normal(4, 1, (10, 3))])
    X[2, 1] = np.nan
    res = jaxhc.bhcc(X, jaxhc.IndependentNormal(0.0, 4.0, 1.0), 1.0)
    grid = np.linspace(-15.0, 20.0, 7001)
    lp = jaxhc.bhcc_predictive_cell(res, [2, 15, 0], [1, 2, 0], np.tile(grid, (3, 1)))
    np.testing.assert_allclose(np.trapezoid(np.exp(lp), grid, axis=1), 1.0, atol=1e-6)
    # a cell of the second block is predicted near the second block's mean
    assert grid[np.argmax(lp[1])] > 2.0
