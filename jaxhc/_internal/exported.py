"""Programs kept as serialized `jax.export` modules beside JAX's persistent compilation cache,
so that a fresh process skips tracing and lowering them.

With the persistent cache on (`jaxhc.enable_compilation_cache`), a fresh process still traces
and lowers every program before JAX can look up its compiled executable. For BHC's merge
search and the hyperparameter M-step that is most of a warm `fit_bhc` (on 2 cores, ~3 s of
tracing and ~2 s of lowering against ~2 s to load the executables). `call` writes the lowered
program once, as a `jax.export` module, to ``<cache folder>/jaxhc-programs/``; a later
process reads it back and runs it (the compiled executable then comes from JAX's cache).

A module is keyed by everything its program depends on: the jaxhc, JAX and jaxlib versions,
the source of the subpackages the caller names (a changed checkout never reads an old
module), the backend, x64, the static arguments (their ``repr``, or a ``static_key`` the
caller gives when a ``repr`` would not be stable across processes, e.g. a function) and the
tree, shapes and dtypes of the arguments. Only jaxhc's own classes may appear among the
arguments (a user's subclass may change without any of these changing). A module that cannot
be read, written or deserialized is traced as usual: this cache only ever saves time, and the
results are the traced program's (the same StableHLO, compiled the same way).

`jaxhc.trellis.exported` keeps the trellis's size-class programs with the same machinery.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import tempfile
from typing import Any, Callable, Dict, Optional, Sequence

import jax
import numpy as np

__all__ = ["NO_EXPORT_ENV", "SUBFOLDER", "call", "call_with", "program_folder", "source_hash"]

#: subfolder of the compilation cache holding the serialized modules
SUBFOLDER = "jaxhc-programs"

#: set (to anything but ``""`` or ``"0"``) to trace every time: the test suite does, since
#: its tests patch module-level settings that a traced program reads, which no key can see
NO_EXPORT_ENV = "JAXHC_NO_EXPORTED_PROGRAMS"

_LOADED: dict = {}  # key -> the jitted call of a deserialized module (one per process)
_SOURCE_HASHES: Dict[tuple, str] = {}
_PACKAGE_ROOT = pathlib.Path(__file__).resolve().parents[1]


def program_folder() -> Optional[str]:
    """The folder of the serialized modules: ``jaxhc-programs`` in JAX's compilation cache
    folder, or None when no such folder is configured or ``$JAXHC_NO_EXPORTED_PROGRAMS`` is
    set (then `call` traces as usual)."""
    if os.environ.get(NO_EXPORT_ENV, "").strip() not in ("", "0"):
        return None
    d = getattr(jax.config, "jax_compilation_cache_dir", None)
    return os.path.join(d, SUBFOLDER) if d else None


def source_hash(subpackages: Sequence[str]) -> str:
    """A hash of the ``*.py`` files of jaxhc's ``subpackages`` (folders relative to the
    package root, e.g. ``"inference/bhc"``), computed once per process."""
    key = tuple(subpackages)
    if key not in _SOURCE_HASHES:
        h = hashlib.sha256()
        for sub in key:
            for p in sorted((_PACKAGE_ROOT / sub).glob("*.py")):
                h.update(f"{sub}/{p.name}".encode() + p.read_bytes())
        _SOURCE_HASHES[key] = h.hexdigest()
    return _SOURCE_HASHES[key]


def _key(name: str, static_key: str, flat: list, tdef, sources: str) -> str:
    import jaxlib

    from .. import __version__

    parts = [
        name,
        __version__,
        jax.__version__,
        jaxlib.__version__,
        sources,
        jax.default_backend(),
        str(getattr(jax.config, "jax_enable_x64")),  # (a config attribute mypy cannot see)
        static_key,
        repr(tdef),
        repr([(np.shape(x), str(getattr(x, "dtype", None) or np.result_type(x))) for x in flat]),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


_REGISTERED: list = []


def _register_output_types() -> None:
    """Registers jaxhc's NamedTuple containers that programs return (the families' sufficient
    statistics) for `jax.export` serialization, once per process, under their import names
    (a writer and a reader register the same names)."""
    if _REGISTERED:
        return
    _REGISTERED.append(True)
    from jax import export

    from .. import components

    for name in sorted(dir(components)):
        cls = getattr(components, name)
        if isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields"):
            try:
                export.register_namedtuple_serialization(cls, serialized_name=f"{cls.__module__}.{cls.__qualname__}")
            except ValueError:  # registered already (e.g. by a user)
                pass


def _load_or_export(path: str, fn: Callable, static: dict, flat: list, tdef):
    from jax import export

    _register_output_types()

    try:
        with open(path, "rb") as f:
            return export.deserialize(bytearray(f.read()))
    except Exception:  # missing, unreadable, truncated or from an incompatible writer: trace
        pass
    exp = export.export(jax.jit(lambda *fl: fn(*jax.tree_util.tree_unflatten(tdef, fl), **static)))(*flat)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = exp.serialize()
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the whole new one
    except Exception:  # a read-only folder, no flatbuffers, ...: the module serves this process
        pass
    return exp


def _jaxhc_classes_only(x) -> bool:
    """``x`` is built of arrays, numbers, None, plain tuples, lists and dicts and objects of
    jaxhc's own classes (a user's subclass may change without the key seeing it)."""
    if x is None or isinstance(x, (bool, int, float, complex, np.ndarray, np.generic, jax.Array)):
        return True
    if type(x) in (tuple, list):
        return all(_jaxhc_classes_only(y) for y in x)
    if type(x) is dict:
        return all(_jaxhc_classes_only(y) for y in x.values())
    return type(x).__module__.startswith("jaxhc.")


def call_with(
    folder: Optional[str],
    loaded: dict,
    sources: str,
    name: str,
    fn: Callable,
    args: tuple,
    static: dict,
    static_key: Optional[str] = None,
) -> Any:
    """``fn(*args, **static)`` through a serialized module kept in ``folder`` (None: called
    directly), ``loaded`` the process's table of read modules, ``sources`` the hash of the
    source the program depends on (`source_hash`). ``static_key`` replaces ``repr`` of
    ``static`` in the key."""
    flat, tdef = jax.tree_util.tree_flatten(args)
    if folder is None or any(isinstance(x, jax.core.Tracer) for x in flat):
        return fn(*args, **static)
    # weakly typed scalars (Python numbers, results of jnp ops on them) as plain arrays: one
    # module and one compiled call serve both (a weak type would lower a second program)
    flat = [
        np.asarray(x) if isinstance(x, (bool, int, float, complex)) or getattr(x, "weak_type", False) else x
        for x in flat
    ]
    # every argument committed to one device: a call mixing host arrays and a program's
    # outputs (committed) would compile the call a second time
    committed = [x for x in flat if isinstance(x, jax.Array) and x.committed]
    dev = next(iter(committed[0].devices())) if committed else jax.devices()[0]
    flat = [x if isinstance(x, jax.Array) and x.committed else jax.device_put(x, dev) for x in flat]
    key = _key(name, repr(sorted(static.items())) if static_key is None else static_key, flat, tdef, sources)
    run = loaded.get(key)
    if run is None:
        exp = _load_or_export(os.path.join(folder, key + ".jaxexport"), fn, static, flat, tdef)
        run = loaded[key] = jax.jit(exp.call)
    return run(*flat)


def call(
    name: str,
    fn: Callable,
    args: tuple,
    static: dict,
    *,
    sources: Sequence[str],
    static_key: Optional[str] = None,
) -> Any:
    """``fn(*args, **static)`` (``fn`` jitted with ``static`` as static arguments), through a
    serialized module of its program when a compilation cache folder is configured, the
    arguments are concrete and built of jaxhc's own classes; else ``fn`` called directly.
    ``sources``: the subpackages whose code the program runs (``"_internal"`` is always
    added)."""
    folder = program_folder()
    if folder is None or not _jaxhc_classes_only(args):
        return fn(*args, **static)
    subs = tuple(dict.fromkeys([*sources, "_internal"]))
    return call_with(folder, _LOADED, source_hash(subs), name, fn, args, static, static_key)
