"""bhc_predictive_cell reads one column per distinct (column, value) pair (issue 18 part 4):
equal to the implementation before it (every query scored against every node over all
columns) to 1e-9."""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np
import pytest

import jaxhc
from jaxhc.inference.bhc import predictive


def _cell_reference(result, rows, cols, values):
    """The implementation before issue 18: each query a full row (NaN but the cell) scored
    against every node, mixed over the nodes on its row's path."""
    comp = result.component
    vals = np.asarray(values, float)
    v2 = vals[:, None] if vals.ndim == 1 else vals
    rows, cols = np.asarray(rows), np.asarray(cols)
    n = result.tree.n_leaves
    d = int(np.shape(jax.tree_util.tree_leaves(result.node_stats)[0])[-1])
    sets = result.tree.leaf_sets()
    par = result.tree.parents()
    log_r = np.concatenate([np.zeros(n), np.asarray(result.log_r)])
    l1 = np.asarray(result.log_1mr)
    above = np.zeros(2 * n - 1)
    for k in range(2 * n - 3, -1, -1):
        above[k] = above[par[k]] + l1[par[k]]
    log_w = np.where(sets[:, rows].T, (log_r + above)[None, :], -np.inf)
    Q, K = v2.shape
    Xq = np.full((Q * K, d), np.nan)
    Xq[np.arange(Q * K), np.repeat(cols, K)] = v2.reshape(-1)

    @jax.jit
    def core(lw, X):
        return jax.vmap(lambda w, x: jax.scipy.special.logsumexp(w + comp.log_predictive(x, result.node_stats)))(lw, X)

    out = np.asarray(core(jnp.asarray(np.repeat(log_w, K, axis=0)), jnp.asarray(Xq))).reshape(Q, K)
    return out[:, 0] if vals.ndim == 1 else out


def _binary(seed, n, d, p_missing=0.1):
    rng = np.random.default_rng(seed)
    z = rng.integers(0, 3, n)
    X = (rng.random((n, d)) < rng.random((3, d))[z]).astype(float)
    X[rng.random((n, d)) < p_missing] = np.nan
    return X


@pytest.mark.parametrize("family", ["bernoulli_shared", "bernoulli_from_data", "binomial"])
def test_cell_predictive_equals_the_previous_implementation(family):
    rng = np.random.default_rng(4)
    if family == "binomial":
        X = rng.integers(0, 4, (24, 7)).astype(float)
        X[rng.random(X.shape) < 0.1] = np.nan
        comp = jaxhc.BetaBinomial(rng.uniform(0.5, 2, 7), rng.uniform(0.5, 2, 7), trials=3)
        cand = np.array([0.0, 1.0, 2.0, 3.0])
    else:
        X = _binary(5, 24, 7)
        comp = jaxhc.BetaBernoulli(1.0, 1.0) if family == "bernoulli_shared" else jaxhc.BetaBernoulli.from_data(X)
        cand = np.array([0.0, 1.0])
    res = jaxhc.bhc(X, comp)
    Q = 40
    rows, cols = rng.integers(0, 24, Q), rng.integers(0, 7, Q)
    vals = rng.choice(cand, Q)
    np.testing.assert_allclose(
        jaxhc.bhc_predictive_cell(res, rows, cols, vals), _cell_reference(res, rows, cols, vals), rtol=0, atol=1e-9
    )
    many = np.tile(cand, (Q, 1))
    got = jaxhc.bhc_predictive_cell(res, rows, cols, many)
    np.testing.assert_allclose(got, _cell_reference(res, rows, cols, many), rtol=0, atol=1e-9)
    # the candidates of a cell are a distribution
    np.testing.assert_allclose(np.exp(got).sum(axis=1), 1.0, atol=1e-9)


def test_column_table_equals_full_row_table():
    """The one-column path (`_pair_table_columns`) and the full-row path (NaN elsewhere)
    give the same per-node predictives."""
    X = _binary(6, 16, 5)
    comp = jaxhc.BetaBernoulli.from_data(X)
    res = jaxhc.bhc(X, comp)
    pc = np.array([0, 1, 4, 4, 2])
    pv = np.array([1.0, 0.0, 0.0, 1.0, 1.0])
    got = predictive._pair_table(comp, res.node_stats, pc, pv, 5)
    Xq = np.full((64, 5), np.nan)
    Xq[np.arange(5), pc] = pv
    Xq[5:, 0] = 1.0
    full = np.asarray(predictive._pair_table_full(comp, res.node_stats, jnp.asarray(Xq)))[:5]
    np.testing.assert_allclose(got, full, rtol=0, atol=1e-10)
