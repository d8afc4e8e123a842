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
import shutil
import sys
import tempfile


def _session_compilation_cache():
    """One JAX persistent compilation cache for the whole test session.

    XLA:CPU compilation is most of the suite's time on 2 cores. The controller of a session
    (or a plain `pytest` run) makes a fresh folder and exports it in the environment before
    JAX is imported, so the pytest-xdist workers (spawned later, with this environment),
    the notebooks run in them and the `python` subprocesses the tests start (CLI, hang
    reproducer) all read and write the same cache: a program compiled once in any of them
    is loaded, not recompiled, by the others. Results do not change: the cache stores the
    executables XLA would have built. Set JAX_COMPILATION_CACHE_DIR yourself to reuse a
    folder across sessions; JAXHC_TEST_NO_COMPILATION_CACHE=1 turns this off."""
    if os.environ.get("JAXHC_TEST_NO_COMPILATION_CACHE") == "1":
        return None
    created = None
    if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        created = tempfile.mkdtemp(prefix="jaxhc-test-jax-cache-")
        os.environ["JAX_COMPILATION_CACHE_DIR"] = created
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
    return created


_CREATED_CACHE = _session_compilation_cache()

import jax  # noqa: E402  (after the cache variables above)
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)
if os.environ.get("JAX_COMPILATION_CACHE_DIR") and os.environ.get("JAXHC_TEST_NO_COMPILATION_CACHE") != "1":
    # in case a plugin imported jax before this file set the variables
    jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
    jax.config.update("jax_persistent_cache_min_compile_time_secs",
                      float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes",
                      int(os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"]))


def pytest_unconfigure(config):
    # the process that made the session's cache folder removes it (xdist workers inherit it)
    if _CREATED_CACHE is not None and not hasattr(config, "workerinput"):
        shutil.rmtree(_CREATED_CACHE, ignore_errors=True)

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
