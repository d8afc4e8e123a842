"""The size-class programs kept as serialized `jax.export` modules beside JAX's persistent
compilation cache, so that a fresh process skips tracing and lowering them.

With the persistent cache on (`jaxhc.enable_compilation_cache`), a fresh process still traces
and lowers a size-class program before JAX can look up its compiled executable: on 2 cores,
0.25 s of tracing and 0.15 s of lowering for the 9-leaf program against 0.11 s to load the
executable. `call` writes the lowered program once, as a `jax.export` module, to
``<cache folder>/jaxhc-programs/``; a later process reads it back and runs it (the compiled
executable then comes from JAX's cache as before). The first 9-leaf solve of a fresh process
with a warm cache: 0.17 s instead of 0.5 s (benchmarks/trellis_latency.py).

A module is keyed by everything its program depends on: the jaxhc, JAX and jaxlib versions,
the source of the trellis and of ``jaxhc._internal`` (a changed checkout never reads an old
module), the backend, x64, the static arguments and the tree, shapes and dtypes of the
arguments (the energy's static fields included). Only the built-in energies are kept (a
user's `Energy` subclass may change without any of these changing). A module that cannot be
read, written or deserialized is traced as usual: this cache only ever saves time, and the
results are the traced program's (the same StableHLO, compiled the same way).
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import tempfile
from typing import Any, Callable, Optional

import jax
import numpy as np

__all__ = ["call", "program_folder"]

#: subfolder of the compilation cache holding the serialized modules
SUBFOLDER = "jaxhc-programs"
_LOADED: dict = {}  # key -> the jitted call of a deserialized module (one per process)
_SOURCE_HASH: list = []


#: set (to anything but ``""`` or ``"0"``) to trace every time: the test suite does, since
#: its tests patch the module-level settings that a traced program reads (e.g. the chunk
#: shapes of `jaxhc.trellis.classes`), which no key here can see
NO_EXPORT_ENV = "JAXHC_NO_EXPORTED_PROGRAMS"


def program_folder() -> Optional[str]:
    """The folder of the serialized modules: ``jaxhc-programs`` in JAX's compilation cache
    folder, or None when no such folder is configured or ``$JAXHC_NO_EXPORTED_PROGRAMS`` is
    set (then `call` traces as usual)."""
    if os.environ.get(NO_EXPORT_ENV, "").strip() not in ("", "0"):
        return None
    d = getattr(jax.config, "jax_compilation_cache_dir", None)
    return os.path.join(d, SUBFOLDER) if d else None


def _source_hash() -> str:
    if not _SOURCE_HASH:
        h = hashlib.sha256()
        root = pathlib.Path(__file__).resolve().parents[1]
        for p in sorted([*(root / "trellis").glob("*.py"), *(root / "_internal").glob("*.py")]):
            h.update(p.name.encode() + p.read_bytes())
        _SOURCE_HASH.append(h.hexdigest())
    return _SOURCE_HASH[0]


def _built_in(args) -> bool:
    from .energies import Energy

    return all(type(a).__module__.startswith("jaxhc.") for a in args if isinstance(a, Energy))


def _key(name: str, static: dict, flat: list, tdef) -> str:
    import jaxlib

    from .. import __version__

    parts = [
        name,
        __version__,
        jax.__version__,
        jaxlib.__version__,
        _source_hash(),
        jax.default_backend(),
        str(getattr(jax.config, "jax_enable_x64")),  # (a config attribute mypy cannot see)
        repr(sorted(static.items())),
        repr(tdef),
        repr([(np.shape(x), str(getattr(x, "dtype", None) or np.result_type(x))) for x in flat]),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _load_or_export(path: str, fn: Callable, static: dict, flat: list, tdef):
    from jax import export

    try:
        with open(path, "rb") as f:
            return export.deserialize(bytearray(f.read()))
    except Exception:  # missing, unreadable, truncated or from an incompatible writer: trace
        pass
    exp = export.export(jax.jit(lambda *fl: fn(*jax.tree_util.tree_unflatten(tdef, fl), **static)))(*flat)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(exp.serialize())
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the whole new one
    except Exception:  # a read-only folder, no flatbuffers, ...: the module serves this process
        pass
    return exp


def call(name: str, fn: Callable, args: tuple, static: dict) -> Any:
    """``fn(*args, **static)`` (``fn`` jitted with ``static`` as static arguments), through a
    serialized module of its program when a compilation cache folder is configured, the
    arguments are concrete and the energies built in; else ``fn`` called directly."""
    folder = program_folder()
    flat, tdef = jax.tree_util.tree_flatten(args)
    if folder is None or any(isinstance(x, jax.core.Tracer) for x in flat) or not _built_in(args):
        return fn(*args, **static)
    key = _key(name, static, flat, tdef)
    run = _LOADED.get(key)
    if run is None:
        exp = _load_or_export(os.path.join(folder, key + ".jaxexport"), fn, static, flat, tdef)
        run = _LOADED[key] = jax.jit(exp.call)
    return run(*flat)
