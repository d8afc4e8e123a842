import jax

jax.config.update("jax_enable_x64", True)

"""The CDPM's exact criterion (`jaxhc.inference.bhcc.exact`) against brute force: each view's
DPM evidence summed over every row partition, the column partition's CRP prior, and BHCC's
criterion (row-BHC lower bounds) never above it."""

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import gammaln, logsumexp

import jaxhc
from jaxhc.inference.bhcc import MAX_EXACT_ROWS, cdpm_log_joint_exact
from jaxhc.inference.bhcc.exact import ExactSetEvidence, column_subset_tables, dpm_log_evidence_exact


def _set_partitions(items):
    items = list(items)
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _set_partitions(rest):
        for i in range(len(part)):
            yield part[:i] + [[first] + part[i]] + part[i + 1 :]
        yield [[first]] + part


def _log_crp(sizes, a):
    return len(sizes) * np.log(a) + gammaln(a) - gammaln(a + sum(sizes)) + sum(gammaln(s) for s in sizes)


_CACHE: dict = {}


def _block_log_marginal(comp, X, rows, cols):
    key = (id(comp), tuple(rows), tuple(cols))
    if key not in _CACHE:
        _CACHE[key] = _block_log_marginal_uncached(comp, X, rows, cols)
    return _CACHE[key]


def _block_log_marginal_uncached(comp, X, rows, cols):
    sub = comp.restrict_columns(np.asarray(cols), name="test")
    leaf = sub.leaf_stats(jnp.asarray(X[np.ix_(rows, cols)]))
    stats = jax.tree_util.tree_map(lambda x: x.sum(0) if x.ndim else x, leaf)
    return float(sub.log_marginal(stats))


def _brute_dpm(comp, X, cols, a):
    n = X.shape[0]
    return logsumexp(
        [
            _log_crp([len(b) for b in part], a) + sum(_block_log_marginal(comp, X, b, cols) for b in part)
            for part in _set_partitions(range(n))
        ]
    )


def _table(seed, n=5, J=3):
    rng = np.random.default_rng(seed)
    X = (rng.random((n, J)) < rng.random(J)).astype(float)
    comp = jaxhc.BetaBernoulli(rng.uniform(0.3, 2.0, J), rng.uniform(0.3, 2.0, J))
    return X, comp


@pytest.mark.parametrize("seed", [0, 1])
def test_dpm_evidence_equals_the_sum_over_all_row_partitions(seed):
    X, comp = _table(seed)
    a = 0.7 + seed
    tabs = column_subset_tables(X, comp)
    assert tabs.shape == (3, 32) and np.all(tabs[:, 0] == 0.0)
    for cols in ([0], [1, 2], [0, 1, 2]):
        exact = dpm_log_evidence_exact(tabs[cols].sum(0), a)[0]
        np.testing.assert_allclose(exact, _brute_dpm(comp, X, cols, a), rtol=1e-10, atol=1e-10)


def test_cdpm_joint_and_bhcc_bound_below_it():
    """``log p(u, X)`` = CRP(u) + sum of exact view evidences; summed over every column
    partition it is ``log p(X)``, and BHCC's criterion of its answer is a lower bound on the
    exact joint of the same partition."""
    X, comp = _table(3, n=6, J=4)
    a = 1.3
    ev = ExactSetEvidence(X, comp, a)
    joints = []
    for part in _set_partitions(range(4)):
        u = np.zeros(4, int)
        for k, b in enumerate(part):
            u[b] = k
        j = cdpm_log_joint_exact(X, comp, a, u, evidence=ev)
        brute = _log_crp([len(b) for b in part], a) + sum(_brute_dpm(comp, X, b, a) for b in part)
        np.testing.assert_allclose(j, brute, rtol=1e-10)
        joints.append(j)
    assert len(joints) == 15  # Bell(4)
    res = jaxhc.bhcc(X, comp, alpha=a, progress_bar=False)
    found = np.asarray(res.cut(0.5))
    assert res.views_log_joint() <= cdpm_log_joint_exact(X, comp, a, found, evidence=ev) + 1e-9


def test_exact_criterion_refuses_large_tables():
    X = np.zeros((MAX_EXACT_ROWS + 1, 2))
    with pytest.raises(ValueError, match=f"limited to {MAX_EXACT_ROWS} rows"):
        column_subset_tables(X, jaxhc.BetaBernoulli(np.ones(2), np.ones(2)))
