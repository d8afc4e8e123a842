"""Randomized BHC on a Dask cluster (`jaxhc.rbhc(..., client=...)`; issue 59, part 3): the
sub-problems below the top levels built by two workers give the tree and the numbers of one
process for the same key (~10 s, most of it compiling the one-process reference)."""

import sys

import jax
import numpy as np
import pytest

import jaxhc

jax.config.update("jax_enable_x64", True)


def _data(n=2000, d=3, k=6, seed=5):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    return rng.normal(size=(n, d)) + rng.normal(0, 5, (k, d))[y], y


def test_rbhc_on_two_workers_is_the_one_process_tree():
    distributed = pytest.importorskip("distributed", reason="the dask extra (pip install -e '.[dask]')")
    X, _ = _data()
    c = jaxhc.NormalInverseWishart.from_data(X)
    key = jax.random.PRNGKey(3)
    ref = jaxhc.rbhc(key, X, c, 1.0, progress_bar=False)
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cl,
        distributed.Client(cl) as client,
    ):
        # task_size 300: ~10 sides of 65..300 points go to the workers, in whatever order
        got = jaxhc.rbhc(key, X, c, 1.0, progress_bar=False, client=client, task_size=300)
        assert not client.futures  # every task released
    np.testing.assert_array_equal(np.asarray(got.tree.children), np.asarray(ref.tree.children))
    for f in ("log_r", "log_pT", "log_d", "log_h1", "log_1mr"):
        np.testing.assert_allclose(np.asarray(getattr(got, f)), np.asarray(getattr(ref, f)), rtol=0, atol=1e-10)
    for a, b in zip(jax.tree_util.tree_leaves(got.node_stats), jax.tree_util.tree_leaves(ref.node_stats)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-10)
    np.testing.assert_allclose(float(got.dpm_lower_bound), float(ref.dpm_lower_bound), rtol=0, atol=1e-10)


def test_rbhc_dask_arguments(monkeypatch):
    X, _ = _data(100)
    c = jaxhc.NormalInverseWishart.from_data(X)
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match="task_size applies only with a Dask client"):
        jaxhc.rbhc(key, X, c, task_size=500)
    with pytest.raises(ValueError, match="task_size must be an integer > leaf_size=64"):
        jaxhc.rbhc(key, X, c, client=object(), task_size=64)
    monkeypatch.setitem(sys.modules, "distributed", None)  # the extra missing
    with pytest.raises(ImportError, match=r"'dask' extra: pip install \"jaxhc\[dask\]\""):
        jaxhc.rbhc(key, X, c, client=object())


def test_rbhc_dask_client_type():
    pytest.importorskip("distributed", reason="the dask extra")
    X, _ = _data(100)
    c = jaxhc.NormalInverseWishart.from_data(X)
    with pytest.raises(TypeError, match="client must be a distributed.Client, got dict"):
        jaxhc.rbhc(jax.random.PRNGKey(0), X, c, client={})
