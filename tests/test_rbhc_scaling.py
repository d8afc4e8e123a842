"""Randomized BHC at scale (issue 18 part 3): the same trees as before with Algorithm 2's
split, the balanced split only where it costs no evidence, and compiled programs reused
across recursion levels and data sizes."""

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np
import pytest
from reference_rbhc import rbhc_reference

import jaxhc
from jaxhc.inference.bhc import greedy, randomized
from jaxhc.tree import Tree


def _blobs(seed, n, d=2):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 4, n)
    return rng.normal(size=(n, d)) * 0.6 + rng.normal(0, 6, (4, d))[y]


def test_algorithm2_split_equals_the_previous_implementation():
    """balance=0: the tree of the implementation before issue 18 (one BHC call per node, the
    final quantities from `tree_node_terms` over the whole tree), node for node, and every
    per-node quantity to 1e-9."""
    X = _blobs(14, 200)
    c = jaxhc.NormalInverseWishart.from_data(X)
    key = jax.random.PRNGKey(1)
    new = jaxhc.rbhc(key, X, c, 1.0, subset_size=16, leaf_size=32, balance=0.0)
    old = rbhc_reference(key, X, c, 1.0, subset_size=16, leaf_size=32)
    np.testing.assert_array_equal(np.asarray(new.tree.children), np.asarray(old.tree.children))
    for f in ("log_evidence", "log_r", "dpm_lower_bound", "log_d", "log_pT", "log_h1", "log_1mr"):
        np.testing.assert_allclose(np.asarray(getattr(new, f)), np.asarray(getattr(old, f)), rtol=0, atol=1e-9)
    for a, b in zip(jax.tree_util.tree_leaves(new.node_stats), jax.tree_util.tree_leaves(old.node_stats)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-9)


def test_regraft_moves_one_subtree_to_the_root():
    """`_regraft_children`: the root's children are the chosen subtree and the rest; every
    other cluster of the new tree is a cluster of the subtree or one of the old tree minus
    the subtree's leaves."""
    rng = np.random.default_rng(3)
    m = 9
    for _ in range(20):
        nodes = list(range(m))
        ch = []
        for t in range(m - 1):
            i, j = sorted(rng.choice(len(nodes), 2, replace=False))
            b, a = nodes.pop(j), nodes.pop(i)
            ch.append((min(a, b), max(a, b)))
            nodes.append(m + t)
        ch = np.asarray(ch)
        old = Tree(ch).validate()
        old_sets = old.leaf_sets()
        par = old.parents()
        for s in range(2 * m - 2):
            new_ch = randomized._regraft_children(ch, s)
            if par[s] == 2 * m - 2:
                assert new_ch is None
                continue
            new = Tree(new_ch).validate()
            sets = new.leaf_sets()
            a, b = new_ch[-1]
            assert {tuple(sets[a]), tuple(sets[b])} == {tuple(old_sets[s]), tuple(~old_sets[s])}
            inside = [x for x in old_sets if not np.any(x & ~old_sets[s])]
            allowed = {tuple(x & ~old_sets[s]) for x in old_sets} | {tuple(x) for x in inside}
            for k in range(2 * m - 2):
                assert tuple(sets[k]) in allowed


def test_auto_balance_keeps_evidence_and_shortens_the_recursion():
    """One Gaussian cluster: the balanced split is taken (a much shallower tree) at the
    evidence of Algorithm 2's tree. A cluster with far outliers: they are still peeled off
    (the evidence of Algorithm 2 on these keys). Quantities exact on the returned trees."""
    rng = np.random.default_rng(16)
    X = rng.normal(size=(300, 2))
    c = jaxhc.NormalInverseWishart.from_data(X)
    key = jax.random.PRNGKey(0)
    auto = jaxhc.rbhc(key, X, c, 1.0, subset_size=16, leaf_size=16)
    alg2 = jaxhc.rbhc(key, X, c, 1.0, subset_size=16, leaf_size=16, balance=0.0)
    assert auto.tree.depths().max() < 0.75 * alg2.tree.depths().max()
    np.testing.assert_allclose(float(auto.log_evidence), float(alg2.log_evidence), atol=1e-3 * 300)
    terms = jaxhc.tree_log_evidence(X, auto.tree, c, 1.0)
    np.testing.assert_allclose(float(auto.log_evidence), float(terms.log_evidence), atol=1e-8)
    np.testing.assert_allclose(np.asarray(auto.log_r), np.asarray(terms.log_r)[300:], atol=1e-8)

    rng = np.random.default_rng(15)
    X = np.concatenate([rng.normal(size=(400, 2)), rng.normal(0, 30, size=(4, 2))])
    c = jaxhc.NormalInverseWishart.from_data(X)
    for k in (0, 1, 2):
        key = jax.random.PRNGKey(k)
        auto = jaxhc.rbhc(key, X, c, 1.0, subset_size=16, leaf_size=64)
        alg2 = jaxhc.rbhc(key, X, c, 1.0, subset_size=16, leaf_size=64, balance=0.0)
        np.testing.assert_allclose(float(auto.log_evidence), float(alg2.log_evidence), atol=1e-3 * 404)


def test_programs_are_compiled_once_across_levels_and_sizes():
    """With the defaults every level and leaf block runs one padded greedy program: a second
    call on a different number of points (other levels, other side sizes) compiles nothing."""
    watched = [greedy.bhc_core, randomized._side_scores, randomized._subset_tree, randomized._join]
    X = _blobs(5, 700)
    c = jaxhc.NormalInverseWishart.from_data(X)
    before = [f._cache_size() for f in watched]
    r1 = jaxhc.rbhc(jax.random.PRNGKey(0), X[:500], c, 1.0)
    mid = [f._cache_size() for f in watched]
    assert mid[0] - before[0] <= 1  # one greedy program for every level and leaf block
    r2 = jaxhc.rbhc(jax.random.PRNGKey(1), X, c, 1.0)
    assert [f._cache_size() for f in watched] == mid
    for r, m in ((r1, 500), (r2, 700)):
        terms = jaxhc.tree_log_evidence(X[:m], r.tree, c, 1.0)
        np.testing.assert_allclose(float(r.log_evidence), float(terms.log_evidence), atol=1e-8)


def test_balance_argument_is_checked():
    X = np.random.default_rng(0).normal(size=(20, 2))
    c = jaxhc.NormalInverseWishart.from_data(X)
    for bad in ("balanced", 0.5, -0.1, None):
        with pytest.raises(ValueError, match="balance must be"):
            jaxhc.rbhc(jax.random.PRNGKey(0), X, c, balance=bad)
