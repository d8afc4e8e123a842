"""Test set-up: float64 everywhere, tests/ on sys.path so `import reference` works, and a
bound on the compiled programs one test worker keeps alive.

Every program XLA:CPU compiles (each jitted function, and each primitive run eagerly, per
shape) stays loaded in JAX's caches, and each loaded program holds a few memory mappings.
A pytest-xdist worker running half the suite compiles tens of thousands of programs; once
its mappings reach the kernel's ``vm.max_map_count`` (65530 by default), LLVM cannot map
the next program ("LLVM compilation error: Cannot allocate memory") and the worker dies of a
segmentation fault inside ``backend_compile``. So after each test, when the process holds
more than half that many mappings, the caches are cleared (programs are recompiled on
demand; results do not change).
"""
import gc
import os
import sys

import jax
import pytest

jax.config.update("jax_enable_x64", True)

_HERE = os.path.dirname(os.path.abspath(__file__))
# tests/ for `reference`; the repository root for `jaxhc` when it is not pip-installed
for _p in (os.path.dirname(_HERE), _HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)


def _map_limit():
    try:
        with open("/proc/sys/vm/max_map_count") as fh:
            return int(fh.read())
    except (OSError, ValueError):
        return None


_MAP_LIMIT = _map_limit()


def _n_maps():
    try:
        with open("/proc/self/maps", "rb") as fh:
            return fh.read().count(b"\n")
    except OSError:
        return 0


@pytest.fixture(autouse=True)
def _bounded_compiled_programs():
    yield
    if _MAP_LIMIT is not None and _n_maps() > _MAP_LIMIT // 2:
        jax.clear_caches()
        gc.collect()
