"""`fit_bhc` above its size threshold (issue 59, part 4): the family and hyperparameters
learned on a random subset, randomized BHC on all rows. The threshold is lowered here so
300 rows take that path; it must equal the pieces called by hand with the same key."""

import jax
import numpy as np
import pytest

import jaxhc
from jaxhc._internal.validation import numpy_rng
from jaxhc.inference.bhc.auto import RANDOMIZED_ABOVE

jax.config.update("jax_enable_x64", True)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(21)
    y = rng.integers(0, 4, 300)
    return rng.normal(size=(300, 3)) * 0.6 + rng.normal(0, 6, (4, 3))[y], y


def test_subset_then_rbhc_is_the_pieces_by_hand(data):
    X, y = data
    key = jax.random.PRNGKey(7)
    kw = dict(subset_size=16, leaf_size=32)
    # 57 rows: the size bucket of 60, compiled by the other BHC tests
    fit = jaxhc.fit_bhc(X, "niw", randomized_above=100, learn_subset=57, key=key, **kw)
    assert fit.method == "rbhc" and fit.learned
    key_subset, key_tree = jax.random.split(key)
    rows = np.sort(numpy_rng(key_subset).choice(300, 57, replace=False))
    np.testing.assert_array_equal(fit.subset, rows)
    sub = jaxhc.fit_bhc(X[rows], "niw", randomized_above=None)
    assert fit.alpha == sub.alpha != 1.0
    assert fit.bounds == sub.bounds  # the learning subset's bound
    res = jaxhc.rbhc(key_tree, X, sub.component, sub.alpha, **kw)
    np.testing.assert_array_equal(np.asarray(fit.tree.children), np.asarray(res.tree.children))
    np.testing.assert_allclose(np.asarray(fit.result.log_r), np.asarray(res.log_r), rtol=0, atol=1e-10)
    assert fit.log_evidence == pytest.approx(float(res.log_evidence), abs=1e-10)
    assert fit.result.tree.n_leaves == 300
    assert jaxhc.metrics.dendrogram_purity(fit.tree, y) > 0.95


def test_fixed_prior_one_family_learns_nothing(data):
    X, _ = data
    key = jax.random.PRNGKey(1)
    fit = jaxhc.fit_bhc(X, "niw", learn=False, randomized_above=100, key=key, subset_size=16, leaf_size=32)
    assert fit.method == "rbhc" and fit.subset.size == 0 and fit.alpha == 1.0
    res = jaxhc.rbhc(
        jax.random.split(key)[1], X, jaxhc.NormalInverseWishart.from_data(X), 1.0, subset_size=16, leaf_size=32
    )
    assert fit.tree.same_hierarchy(res.tree)
    assert fit.start_bound == fit.dpm_lower_bound == pytest.approx(float(res.dpm_lower_bound), abs=1e-10)


def test_threshold_and_arguments(data):
    X, _ = data
    assert RANDOMIZED_ABOVE == 4000
    small = jaxhc.fit_bhc(X[:40], "niw", learn=False)  # below the default threshold: greedy
    assert small.method == "greedy" and small.subset is None
    with pytest.raises(ValueError, match="randomized_above must be None or an integer >= 0"):
        jaxhc.fit_bhc(X, "niw", randomized_above=-1)
    with pytest.raises(ValueError, match="learn_subset must be an integer >= 2"):
        jaxhc.fit_bhc(X, "niw", learn_subset=1)
    with pytest.raises(ValueError, match="client applies only to the randomized path"):
        jaxhc.fit_bhc(X[:40], "niw", learn=False, client=object())
    with pytest.raises(ValueError, match="key must be a single JAX PRNG key"):
        jaxhc.fit_bhc(X, "niw", learn=False, randomized_above=100, key=3)
