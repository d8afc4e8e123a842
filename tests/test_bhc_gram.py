"""The Gram-matrix search for `NormalInverseWishart` in high dimension
(`jaxhc.inference.bhc.gram`): the same trees and values as the pure-NumPy greedy reference
(all pairs rescored every step, ``d x d`` log determinants), as the compiled ``d x d`` search,
and node statistics equal to the fixed-tree recursion's."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxhc import bhc
from jaxhc.components import NormalInverseWishart
from jaxhc.inference.bhc import gram
from jaxhc.inference.bhc.greedy import node_stats_of_tree

from reference import bhc_reference, niw_log_marginal


def _clustered(n, d, k, seed, spread=3.0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(k, d)) * spread
    return centers[rng.integers(0, k, n)] + rng.normal(size=(n, d))


def _full_niw(X, seed):
    """A full-covariance NIW with an off-centre mean (exercises the whitening solve)."""
    rng = np.random.default_rng(seed)
    d = X.shape[1]
    A = rng.normal(size=(d, d)) / np.sqrt(d)
    scale = 1.5 * (A @ A.T + np.eye(d))
    return NormalInverseWishart(X.mean(0) + 0.3, kappa=0.2, dof=d + 4.0, scale=scale)


def _reference(X, comp, alpha):
    m0, k0, nu0, S0 = (np.asarray(v) for v in (comp.mean, comp.kappa, comp.dof, comp.scale))
    return bhc_reference(X, lambda Y: niw_log_marginal(Y, m0, k0, nu0, S0), alpha)


@pytest.mark.parametrize(
    "n, d, full, alpha",
    [(30, 40, False, 1.0), (20, 30, True, 0.5), (12, 60, False, 3.0)],
    ids=["diag-prior", "full-prior", "d>n"],
)
def test_gram_search_equals_reference(n, d, full, alpha):
    assert d >= gram.GRAM_MIN_D
    X = _clustered(n, d, 3, seed=n + d)
    comp = _full_niw(X, seed=d) if full else NormalInverseWishart.from_data(X)
    assert gram.use_gram(comp, None, n)
    res = bhc(X, comp, alpha, progress_bar=False)
    ref = _reference(X, comp, alpha)
    np.testing.assert_array_equal(res.tree.children, ref["children"])
    np.testing.assert_allclose(np.asarray(res.log_h1), ref["log_h1"], rtol=1e-11, atol=1e-9)
    np.testing.assert_allclose(np.asarray(res.log_pT), ref["log_pT"], rtol=1e-11, atol=1e-9)
    np.testing.assert_allclose(np.asarray(res.log_d), ref["log_d"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(res.log_r), ref["log_r"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(float(res.log_evidence), ref["log_evidence"], rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(float(res.dpm_lower_bound), ref["dpm_lower_bound"], rtol=1e-12, atol=1e-9)
    # every node's statistics as the fixed-tree recursion builds them
    leaf = comp.leaf_stats(jnp.asarray(X))
    want = node_stats_of_tree(comp, leaf, jnp.asarray(res.tree.children))
    for got, exp in zip(res.node_stats, want):
        np.testing.assert_allclose(np.asarray(got), np.asarray(exp), rtol=1e-12, atol=1e-10)


def test_gram_search_equals_compiled_search(monkeypatch):
    """The same tree and values as the compiled ``d x d`` search it replaces at d >= GRAM_MIN_D."""
    n, d = 24, gram.GRAM_MIN_D
    X = _clustered(n, d, 3, seed=5, spread=2.0)
    X = np.concatenate([X, X[:2]])  # duplicated points: exact ties must break the same way
    n = X.shape[0]
    comp = NormalInverseWishart.from_data(X)
    fast = bhc(X, comp, progress_bar=False)
    monkeypatch.setattr(gram, "GRAM_MIN_D", 10**9)
    assert not gram.use_gram(comp, None, n)
    slow = bhc(X, comp, progress_bar=False)
    np.testing.assert_array_equal(fast.tree.children, slow.tree.children)
    for f in ("log_h1", "log_pT", "log_d", "log_r"):
        np.testing.assert_allclose(np.asarray(getattr(fast, f)), np.asarray(getattr(slow, f)), rtol=1e-11, atol=1e-9)
    for got, exp in zip(fast.node_stats, slow.node_stats):
        np.testing.assert_allclose(np.asarray(got), np.asarray(exp), rtol=1e-12, atol=1e-10)
    assert isinstance(fast.node_stats.scatter, np.ndarray)  # host arrays (no device copy of [2n-1, d, d])


def test_gram_search_invariant_to_point_order():
    """Exchangeability: permuting the points relabels the leaves of the same tree (same
    clusters at every merge, same evidence)."""
    n, d = 25, 32
    X = _clustered(n, d, 4, seed=9)
    comp = NormalInverseWishart.from_data(X)
    perm = np.random.default_rng(0).permutation(n)
    a = bhc(X, comp, progress_bar=False)
    b = bhc(X[perm], comp, progress_bar=False)
    np.testing.assert_allclose(float(a.log_evidence), float(b.log_evidence), rtol=1e-12)
    sets_a = {frozenset(np.flatnonzero(r)) for r in a.tree.leaf_sets()}
    sets_b = {frozenset(perm[np.flatnonzero(r)]) for r in b.tree.leaf_sets()}
    assert sets_a == sets_b


def test_gram_search_not_used_for_grouped_leaves_or_other_families():
    X = _clustered(10, 30, 2, seed=1)
    comp = NormalInverseWishart.from_data(X)
    two = comp.stats(jnp.asarray(X).reshape(5, 2, 30))  # slots holding two points each
    assert not gram.use_gram(comp, two, 5)
    assert not gram.use_gram(NormalInverseWishart.from_data(X[:, :10]), None, 10)


def test_gram_search_progress_bar(capsys):
    X = _clustered(30, 30, 2, seed=4)
    res = bhc(X, NormalInverseWishart.from_data(X), progress_bar=True)
    assert res.tree.n_leaves == 30
    assert "BHC" in capsys.readouterr().err
