"""The size-class programs kept as serialized `jax.export` modules (`jaxhc.trellis.exported`):
the same solution as the traced program, read back without tracing by a later process (here:
with the in-process table emptied), and traced again when the file is damaged, the key
changes or the energy is a user's."""

import os

import jax
import numpy as np
import pytest

from jaxhc import trellis
from jaxhc.trellis import DasguptaEnergy, GinkgoEnergy, exported


def _affinity(n, seed=3):
    rng = np.random.default_rng(seed)
    W = rng.uniform(0.05, 1.0, (n, n))
    return (W + W.T) / 2


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setattr(exported, "program_folder", lambda: str(tmp_path))
    monkeypatch.setattr(exported, "_LOADED", {})
    return tmp_path


def _same(a, b):
    for x, y in zip(a, b):
        if x is None or y is None:
            assert x is None and y is None
        else:
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _fields(sol):
    return (sol.log_z, sol.map_log_phi, sol.log_marginals, sol.log_z_table, sol.map_table, sol.backpointer)


def test_exported_program_gives_the_traced_solution_and_is_read_back(folder, monkeypatch):
    energy, W = DasguptaEnergy(0.8), _affinity(6)
    ref = trellis.solve(energy, W)  # no folder: the traced program
    monkeypatch.setattr(exported, "_LOADED", {})
    got = trellis.solve(energy, W)
    _same(_fields(got), _fields(ref))
    assert got.map_tree.children.tolist() == ref.map_tree.children.tolist()
    files = os.listdir(folder)
    assert len(files) == 1 and files[0].endswith(".jaxexport")

    # a later process: the module is read, not traced or exported again
    monkeypatch.setattr(exported, "_LOADED", {})

    def refuse(*a, **k):
        raise AssertionError("traced again")

    monkeypatch.setattr(jax.export, "export", refuse)
    again = trellis.solve(energy, _affinity(6, seed=4))  # same shapes: the same module
    np.testing.assert_allclose(float(again.log_z), float(trellis.solve(energy, _affinity(6, seed=4)).log_z))
    assert os.listdir(folder) == files
    # log Z alone is another program (another key)
    with pytest.raises(AssertionError, match="traced again"):
        trellis.log_partition(energy, W)


def test_a_damaged_module_is_traced_again_and_replaced(folder, monkeypatch):
    energy, W = DasguptaEnergy(1.1), _affinity(5)
    ref = float(trellis.solve(energy, W).log_z)
    (path,) = [folder / f for f in os.listdir(folder)]
    path.write_bytes(b"not a module")
    monkeypatch.setattr(exported, "_LOADED", {})
    assert float(trellis.solve(energy, W).log_z) == ref
    assert path.read_bytes() != b"not a module"


def test_the_key_follows_static_fields_and_user_energies_are_not_kept(folder):
    W = _affinity(5)
    trellis.solve(DasguptaEnergy(0.5), W)
    trellis.solve(DasguptaEnergy(0.9), W)  # a parameter, not the program: the same module
    assert len(os.listdir(folder)) == 1
    jet = np.array([[5.0, 0.0, 0.0, 4.0], [3.0, 0.0, 2.0, 0.0], [4.0, 3.0, 0.0, 0.0]])
    a = trellis.solve(GinkgoEnergy(2.0, 1.0, likelihood="exact"), jet)
    b = trellis.solve(GinkgoEnergy(2.0, 1.0, likelihood="paper"), jet)  # a static field
    assert len(os.listdir(folder)) == 3
    assert float(a.log_z) != float(b.log_z)

    class Scaled(DasguptaEnergy):  # a user's energy: its code may change under the same key
        def log_psi(self, parent, left, right):
            return 2.0 * super().log_psi(parent, left, right)

    sol = trellis.solve(Scaled(0.5), W)
    assert len(os.listdir(folder)) == 3
    np.testing.assert_allclose(float(sol.log_z), float(trellis.solve(DasguptaEnergy(1.0), W).log_z), rtol=1e-12)


def test_the_environment_switch_turns_the_modules_off(monkeypatch):
    folder = jax.config.jax_compilation_cache_dir  # the suite's (None when its cache is off)
    monkeypatch.setenv(exported.NO_EXPORT_ENV, "1")
    assert exported.program_folder() is None
    monkeypatch.setenv(exported.NO_EXPORT_ENV, "0")
    assert exported.program_folder() == (os.path.join(folder, exported.SUBFOLDER) if folder else None)
