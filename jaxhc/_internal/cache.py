"""JAX's persistent compilation cache for the processes jaxhc's users start.

A fresh Python process pays XLA's compilation of every program shape it meets (seconds on
CPU: the trellis of a 9-leaf jet, BHC's merge loop per family and size); with JAX's
persistent cache pointed at a folder, the second process loads those executables from disk
instead. `enable_compilation_cache` turns the cache on; importing jaxhc changes no JAX
setting, so nothing is cached unless a script, notebook or the CLI calls it.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Optional, Union

__all__ = ["CACHE_DIR_ENV", "NO_CACHE_ENV", "default_cache_dir", "enable_compilation_cache"]

CACHE_DIR_ENV = "JAXHC_CACHE_DIR"
NO_CACHE_ENV = "JAXHC_NO_COMPILATION_CACHE"


def default_cache_dir() -> str:
    """The folder `enable_compilation_cache` uses by default: ``$JAXHC_CACHE_DIR`` when set,
    else ``jaxhc/xla`` in the user's cache directory: ``$XDG_CACHE_HOME`` or ``~/.cache``
    on Linux and other Unix systems, ``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%`` on
    Windows."""
    env = os.environ.get(CACHE_DIR_ENV)
    if env:
        return os.path.expanduser(env)
    if sys.platform == "darwin":
        base = os.path.join(os.path.expanduser("~"), "Library", "Caches")
    elif sys.platform.startswith("win"):
        base = os.environ.get("LOCALAPPDATA") or os.path.join(os.path.expanduser("~"), "AppData", "Local")
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "jaxhc", "xla")


def _make_folder(path: str, name: str) -> str:
    path = os.path.abspath(os.path.expanduser(path))
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise ValueError(f"{name}: cannot create the compilation cache folder {path!r} ({e})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"{name}: the compilation cache folder {path!r} is not writable")
    return path


def enable_compilation_cache(path: Optional[Union[str, os.PathLike]] = None) -> Optional[str]:
    """Turns on JAX's persistent compilation cache; returns the folder it uses.

    Compiled programs are written to the folder and loaded from it by later processes, so a
    script run a second time skips XLA compilation (on 2 CPU cores, a fresh process solving
    one 9-leaf jet with the trellis: about 1 s instead of several). The minimum compile time
    and entry size for caching are set to 0, so jaxhc's many small programs are cached too
    (JAX's default caches only programs that took over 1 s to compile). JAX keys each entry
    by the program, the JAX / XLA versions, the device and the flags: a stale entry is never
    loaded, and results do not change.

    Args:
      path: the folder (``str`` or ``os.PathLike``; created if missing). ``None``: keep the
        folder JAX is already configured with, if any (``JAX_COMPILATION_CACHE_DIR`` or
        ``jax.config.update("jax_compilation_cache_dir", ...)``: that configuration, folder
        and thresholds, is left exactly as it is), else `default_cache_dir()`:
        ``$JAXHC_CACHE_DIR``, or ``~/.cache/jaxhc/xla`` (``$XDG_CACHE_HOME/jaxhc/xla``;
        ``~/Library/Caches/jaxhc/xla`` on macOS, ``%LOCALAPPDATA%\\jaxhc\\xla`` on
        Windows). A ``path`` given explicitly always wins, moving an existing configuration.

    Returns:
      The absolute folder in use, or ``None`` when the cache stays off: the environment
      variable ``JAXHC_NO_COMPILATION_CACHE=1`` is set, or (``path=None`` only) the default
      folder cannot be created, in which case a warning says so.

    Raises:
      TypeError: ``path`` is not a string or path-like object.
      ValueError: ``path`` is empty, or the folder cannot be created or is not writable.

    Empty the cache by deleting the folder (``rm -rf ~/.cache/jaxhc/xla``); JAX does not
    delete entries by itself. This changes process-wide JAX configuration; call it once,
    near the start of a script, before the first compilation.
    """
    if path is not None:
        if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike folder, got {type(path).__name__}")
        path = os.fspath(path)
        if not isinstance(path, str) or not path:
            raise ValueError(f"path must name a folder, got {path!r}")
    if os.environ.get(NO_CACHE_ENV, "").strip() not in ("", "0"):
        return None

    import jax
    from jax.experimental.compilation_cache import compilation_cache as cc

    current = jax.config.jax_compilation_cache_dir
    if path is None:
        if current:
            return os.path.abspath(current)
        try:
            folder = _make_folder(default_cache_dir(), "the default folder")
        except ValueError as e:
            warnings.warn(f"jaxhc.enable_compilation_cache: cache left off: {e}", RuntimeWarning, stacklevel=2)
            return None
    else:
        folder = _make_folder(path, "path")
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    if current != folder:
        jax.config.update("jax_compilation_cache_dir", folder)
        if current:
            # JAX opens its cache once per process, at the first compilation: a folder that
            # was in use is only replaced after a reset
            cc.reset_cache()
    return folder
