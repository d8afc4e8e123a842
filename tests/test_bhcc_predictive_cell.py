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
    orig = predictive._result_queries

    def spy(res, nodes, mode, per_node_queries):
        seen.append(len(nodes))
        return orig(res, nodes, mode, per_node_queries)

    monkeypatch.setattr(predictive, "_result_queries", spy)
    rows, cols = np.array([0, 1]), np.array([0, 0])
    monkeypatch.setattr(predictive, "CELL_PRUNE_NATS", np.inf)
    jaxhc.bhcc_predictive_cell(fitted, rows, cols, [1.0, 0.0])
    n_all = seen[-1]
    monkeypatch.setattr(predictive, "CELL_PRUNE_NATS", 5.0)
    monkeypatch.setattr(predictive, "CELL_CERTIFY_NATS", 0.0)
    jaxhc.bhcc_predictive_cell(fitted, rows, cols, [1.0, 0.0])
    assert seen[-1] < n_all
