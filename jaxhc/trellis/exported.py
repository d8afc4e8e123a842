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
results are the traced program's (the same StableHLO, compiled the same way). The machinery
is `jaxhc._internal.exported`'s (BHC's programs use it too).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from .._internal import exported as _core

__all__ = ["call", "program_folder"]

#: subfolder of the compilation cache holding the serialized modules
SUBFOLDER = _core.SUBFOLDER
_LOADED: dict = {}  # key -> the jitted call of a deserialized module (one per process)

#: set (to anything but ``""`` or ``"0"``) to trace every time: the test suite does, since
#: its tests patch the module-level settings that a traced program reads (e.g. the chunk
#: shapes of `jaxhc.trellis.classes`), which no key here can see
NO_EXPORT_ENV = _core.NO_EXPORT_ENV


def program_folder() -> Optional[str]:
    """The folder of the serialized modules: ``jaxhc-programs`` in JAX's compilation cache
    folder, or None when no such folder is configured or ``$JAXHC_NO_EXPORTED_PROGRAMS`` is
    set (then `call` traces as usual)."""
    return _core.program_folder()


def _built_in(args) -> bool:
    from .energies import Energy

    return all(type(a).__module__.startswith("jaxhc.") for a in args if isinstance(a, Energy))


def call(name: str, fn: Callable, args: tuple, static: dict) -> Any:
    """``fn(*args, **static)`` (``fn`` jitted with ``static`` as static arguments), through a
    serialized module of its program when a compilation cache folder is configured, the
    arguments are concrete and the energies built in; else ``fn`` called directly."""
    folder = program_folder()
    if folder is None or not _built_in(args):
        return fn(*args, **static)
    return _core.call_with(folder, _LOADED, _core.source_hash(("trellis", "_internal")), name, fn, args, static)
