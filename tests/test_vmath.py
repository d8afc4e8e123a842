"""The vectorisable float64 log and expm1 of `jaxhc._internal.vmath` against numpy's libm:
accuracy over the whole float64 range, the special values, gradients, other dtypes, and that
a trellis program using them gives the values of the same program with XLA's own log."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxhc._internal import vmath


def _ulps(got, ref):
    return np.abs(got - ref) / np.spacing(np.maximum(np.abs(ref), np.finfo(np.float64).tiny))


def test_log_within_three_ulps_of_libm_over_the_float64_range():
    rng = np.random.default_rng(0)
    x = np.concatenate(
        [
            np.exp(rng.uniform(-744, 709, 200_000)),  # every binade, subnormals included
            rng.uniform(0.5, 2.0, 100_000),  # around the reduction's boundaries
            1.0 + rng.normal(0.0, 1e-9, 10_000),  # log near 0: relative error counts
            np.sqrt(0.5) * (1 + rng.uniform(-1e-12, 1e-12, 1000)),
            np.sqrt(2.0) * (1 + rng.uniform(-1e-12, 1e-12, 1000)),
            [5e-324, 1e-310, np.finfo(np.float64).tiny, 0.5, 1.0, 2.0, np.finfo(np.float64).max],
        ]
    )
    got = np.asarray(jax.jit(vmath.log)(x))
    ref = np.log(x)
    assert np.all(np.isfinite(got))
    assert _ulps(got, ref).max() <= 3.0
    assert got[-3] == 0.0  # log 1 exactly


def test_log_special_values_are_libm_s():
    x = np.array([0.0, -0.0, np.inf, -np.inf, -1.0, -5e-324, np.nan, -np.nan])
    with np.errstate(divide="ignore", invalid="ignore"):
        ref = np.log(x)
    got = np.asarray(jax.jit(vmath.log)(x))
    np.testing.assert_array_equal(got, ref)  # -inf, -inf, inf, nan x 5


def test_expm1_within_a_few_ulps_and_exact_near_zero():
    rng = np.random.default_rng(1)
    x = np.concatenate(
        [rng.uniform(-0.35, 0.35, 100_000), rng.normal(0.0, 1e-8, 10_000), rng.uniform(-745, 709, 100_000)]
    )
    got = np.asarray(jax.jit(vmath.expm1)(x))
    ref = np.expm1(x)
    small = np.abs(x) <= 0.34
    assert _ulps(got[small], ref[small]).max() <= 1.0  # the polynomial: no cancellation
    assert _ulps(got, ref).max() <= 8.0  # exp(x) - 1 beyond ln2 / 2
    special = np.array([0.0, -np.inf, np.inf, np.nan, 710.0])
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(np.asarray(vmath.expm1(special)), np.expm1(special))


def test_gradients_are_the_closed_forms():
    x = jnp.array([1e-300, 0.3, 1.0, 7.5, 1e200])
    np.testing.assert_allclose(jax.vmap(jax.grad(vmath.log))(x), 1.0 / x, rtol=1e-15)
    np.testing.assert_allclose(jax.vmap(jax.grad(jax.grad(vmath.log)))(x), -1.0 / x**2, rtol=1e-15)
    y = jnp.array([-3.0, -1e-9, 0.0, 0.2, 2.0])
    np.testing.assert_allclose(jax.vmap(jax.grad(vmath.expm1))(y), np.exp(y), rtol=1e-15)


def test_other_dtypes_use_jax_s_functions():
    x = jnp.array([0.5, 2.0, 3.0], jnp.float32)
    assert vmath.log(x).dtype == jnp.float32
    np.testing.assert_array_equal(vmath.log(x), jnp.log(x))
    np.testing.assert_array_equal(vmath.expm1(x), jnp.expm1(x))


@pytest.mark.parametrize("likelihood", ["paper", "exact"])
def test_ginkgo_trellis_equals_the_one_with_xla_s_log(monkeypatch, likelihood):
    """The Ginkgo split terms through vmath against the same program with jnp.log / jnp.expm1:
    log Z, every subset's tables and the marginals agree to 1e-12, with the same MAP tree."""
    from jaxhc import trellis
    from jaxhc.trellis import energies

    rng = np.random.default_rng(3)
    n = 7
    p3 = rng.normal(0.0, 8.0, (n, 3))
    m2 = rng.uniform(0.5, 9.0, n)
    leaves = np.column_stack([np.sqrt(m2 + (p3**2).sum(1)), p3])
    energy = trellis.GinkgoEnergy(lam=2.0, t_cut=16.0, likelihood=likelihood)
    new = trellis.solve(energy, leaves, marginals=True)
    monkeypatch.setattr(energies.vmath, "log", jnp.log)
    monkeypatch.setattr(energies.vmath, "expm1", jnp.expm1)
    jax.clear_caches()
    old = trellis.solve(energy, leaves, marginals=True)
    jax.clear_caches()
    assert np.isfinite(float(old.log_z))
    np.testing.assert_allclose(float(new.log_z), float(old.log_z), rtol=0, atol=1e-12)
    np.testing.assert_allclose(float(new.map_log_phi), float(old.map_log_phi), rtol=0, atol=1e-12)
    assert new.map_tree.same_hierarchy(old.map_tree)
    for a, b in (
        (new.log_marginals, old.log_marginals),
        (new.log_z_table, old.log_z_table),
        (new.map_table, old.map_table),
    ):
        a, b = np.asarray(a), np.asarray(b)
        np.testing.assert_array_equal(np.isfinite(a), np.isfinite(b))
        np.testing.assert_allclose(a[np.isfinite(a)], b[np.isfinite(b)], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(np.asarray(new.backpointer), np.asarray(old.backpointer))
