"""The host side of a single `trellis.solve` (issue 43, part 3): leaves padded with NumPy
for the built-in energies (`pad_on_host`), a user energy's own ``pad_leaves`` still given a
JAX array, and the same solution either way."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jaxhc.trellis import DasguptaEnergy, GinkgoEnergy, UnitEnergy, solve
from jaxhc.trellis import classes as trellis_classes
from jaxhc.trellis.energies import pad_on_host


def _jet(rng, n):
    p = rng.normal(size=(n, 3)) * 3.0
    m = rng.uniform(0.1, 1.0, size=n)
    return np.concatenate([np.sqrt(m**2 + np.sum(p**2, axis=1))[:, None], p], axis=1)


def test_pad_on_host_is_pad_leaves_in_numpy():
    rng = np.random.default_rng(3)
    W = rng.random((5, 5))
    W = W + W.T
    for energy, leaves in ((DasguptaEnergy(1.0), W), (GinkgoEnergy(2.0, 16.0), _jet(rng, 5)), (UnitEnergy(), W[:, :2])):
        host = pad_on_host(energy, leaves, 8)
        assert isinstance(host, np.ndarray)
        np.testing.assert_array_equal(host, np.asarray(energy.pad_leaves(jnp.asarray(leaves), 8)))


class _JaxPaddedDasgupta(DasguptaEnergy):
    """A user energy whose ``pad_leaves`` only works on JAX arrays (``.at``)."""

    def pad_leaves(self, leaves, n_max: int):
        n = leaves.shape[0]
        return jnp.zeros((n_max, n_max), leaves.dtype).at[:n, :n].set(leaves)


def test_a_user_pad_leaves_gets_a_jax_array_and_the_same_solution():
    rng = np.random.default_rng(5)
    W = rng.random((6, 6))
    W = W + W.T
    host = pad_on_host(_JaxPaddedDasgupta(0.7), W, 8)
    assert not isinstance(host, np.ndarray)
    a, b = solve(DasguptaEnergy(0.7), W), solve(_JaxPaddedDasgupta(0.7), W)
    for x, y in ((a.log_z, b.log_z), (a.map_log_phi, b.map_log_phi), (a.log_marginals, b.log_marginals)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    np.testing.assert_array_equal(np.asarray(a.map_tree.children), np.asarray(b.map_tree.children))
    assert a.log_z_table.shape == (2**6,) and a.backpointer.shape == (2**6,)


def test_device_tables_follow_the_host_tables():
    # the device copies are rebuilt when `_class_tables` is cleared (tests patch the class
    # shapes and clear it), never served stale
    first = trellis_classes._device_tables(5, 8)
    assert trellis_classes._device_tables(5, 8) is first
    trellis_classes._class_tables.cache_clear()
    again = trellis_classes._device_tables(5, 8)
    assert again is not first
    for x, y in zip(first[1], again[1]):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
