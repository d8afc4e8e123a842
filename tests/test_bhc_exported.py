"""BHC's merge search and the hyperparameter M-step kept as serialized `jax.export` modules
(`jaxhc._internal.exported`, issue 53: a fresh process with a warm cache skips tracing and
lowering them): the same results as the traced programs, read back without tracing by a
later process (here: with the in-process table emptied), a user's component class never kept,
and a damaged module traced again."""

import os

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np
import pytest

import jaxhc
from jaxhc._internal import exported


def _data(n=24, seed=0):
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.normal(-2, 1, (n // 2, 3)), rng.normal(2, 1, (n - n // 2, 3))])


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setattr(exported, "program_folder", lambda: str(tmp_path))
    monkeypatch.setattr(exported, "_LOADED", {})
    return tmp_path


def _same_bhc(a, b):
    assert a.tree.same_hierarchy(b.tree)
    np.testing.assert_array_equal(np.asarray(a.tree.children), np.asarray(b.tree.children))
    for f in ("log_r", "log_d"):
        np.testing.assert_array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f)))
    assert float(a.log_evidence) == float(b.log_evidence)


def test_bhc_through_a_module_equals_the_traced_program_and_is_read_back(folder, monkeypatch):
    X = _data()
    for comp in (jaxhc.NormalInverseWishart.from_data(X), jaxhc.NormalGamma.from_data(X)):
        monkeypatch.setattr(exported, "program_folder", lambda: None)
        ref = jaxhc.bhc(X, comp, 1.5)  # no folder: traced as usual
        monkeypatch.setattr(exported, "program_folder", lambda: str(folder))
        _same_bhc(jaxhc.bhc(X, comp, 1.5), ref)  # exported, serialized, run
    files = sorted(os.listdir(folder))
    assert len(files) == 2 and all(f.endswith(".jaxexport") for f in files)

    # a later process: the modules are read, not traced or exported again; another n of the
    # same size bucket is the same module
    monkeypatch.setattr(exported, "_LOADED", {})

    def refuse(*a, **k):
        raise AssertionError("traced again")

    monkeypatch.setattr(jax.export, "export", refuse)
    X2 = _data(23, seed=1)
    comp2 = jaxhc.NormalInverseWishart.from_data(X2)
    got = jaxhc.bhc(X2, comp2, 0.7)
    assert sorted(os.listdir(folder)) == files
    monkeypatch.setattr(exported, "program_folder", lambda: None)
    _same_bhc(got, jaxhc.bhc(X2, comp2, 0.7))


def test_learning_through_modules_equals_the_traced_run(folder, monkeypatch):
    X = _data(20, seed=2)
    comp = jaxhc.NormalGamma.from_data(X)
    kw = dict(objective="dpm_lower_bound", steps=5, max_rounds=2)
    got = jaxhc.learn_hyperparameters(X, comp, 1.0, **kw)
    assert len(os.listdir(folder)) == 2  # the merge search and the M-step
    monkeypatch.setattr(exported, "program_folder", lambda: None)
    ref = jaxhc.learn_hyperparameters(X, comp, 1.0, **kw)
    np.testing.assert_array_equal(got.trace, ref.trace)
    assert got.alpha == ref.alpha
    _same_bhc(got.result, ref.result)


def test_a_users_component_class_is_traced_and_a_damaged_module_replaced(folder, monkeypatch):
    X = _data(12, seed=3)

    class Mine(jaxhc.NormalGamma):  # a user's class: its code may change under the same key
        pass

    comp = jaxhc.NormalGamma.from_data(X)
    mine = Mine(comp.mean, comp.kappa, comp.a, comp.b)
    jaxhc.bhc(X, mine, 1.0)
    assert os.listdir(folder) == []
    ref = float(jaxhc.bhc(X, comp, 1.0).log_evidence)
    (path,) = [folder / f for f in os.listdir(folder)]
    path.write_bytes(b"not a module")
    monkeypatch.setattr(exported, "_LOADED", {})
    assert float(jaxhc.bhc(X, comp, 1.0).log_evidence) == ref
    assert path.read_bytes() != b"not a module"
