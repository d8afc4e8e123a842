"""Compile once, fit many, for one jet at a time: `trellis.solve` runs the program of its
size class (`jaxhc.trellis.classes`), so every leaf count of a class shares its compiled
programs, the results cut to ``2^N`` entries included."""

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np

from jaxhc import trellis
from jaxhc._internal.compiles import count_compilations
from jaxhc.trellis import classes


def _affinity(n, seed):
    A = np.random.default_rng(seed).random((n, n))
    return A + A.T


def test_solve_compiles_nothing_for_new_leaf_counts_of_a_class():
    energy = trellis.DasguptaEnergy()
    sizes = [n for n in range(3, 9) if classes.size_class(n) == classes.size_class(8)]
    assert len(sizes) >= 4
    trellis.solve(energy, _affinity(sizes[0], 0))
    with count_compilations() as c:
        for n in sizes[1:]:
            sol = trellis.solve(energy, _affinity(n, n))
            log_m = np.asarray(sol.log_marginals)  # (host reads: an eager index compiles per shape)
            assert log_m.shape == (2**n,)
            # the full set is in every tree, each leaf too
            np.testing.assert_allclose(log_m[[2**n - 1] + [1 << i for i in range(n)]], 0.0, atol=1e-12)
    assert c.compiled == 0, c


def test_unit_potentials_count_every_tree_at_each_size():
    # (2N - 3)!! trees: with unit potentials log Z is its logarithm, whatever the class
    energy = trellis.UnitEnergy()
    for n in range(2, 9):
        count = np.prod(np.arange(1, 2 * n - 2, 2, dtype=float))
        np.testing.assert_allclose(float(trellis.solve(energy, np.zeros((n, 1))).log_z), np.log(count), rtol=1e-12)
