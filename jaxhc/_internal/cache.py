"""JAX's persistent compilation cache for the processes jaxhc's users start.

A fresh Python process pays XLA's compilation of every program shape it meets (seconds on
CPU: the trellis of a 9-leaf jet, BHC's merge loop per family and size); with JAX's
persistent cache pointed at a folder, the second process loads those executables from disk
instead. `enable_compilation_cache` turns the cache on; importing jaxhc changes no JAX
setting, so nothing is cached unless a script, notebook or the CLI calls it.
"""

from __future__ import annotations

import hashlib
import os
import platform
import sys
import warnings
from typing import Optional, Union

__all__ = [
    "CACHE_DIR_ENV",
    "HOST_MARKER",
    "NO_CACHE_ENV",
    "default_cache_dir",
    "enable_compilation_cache",
    "host_cpu_signature",
    "quiet_cache_loads",
]

CACHE_DIR_ENV = "JAXHC_CACHE_DIR"
NO_CACHE_ENV = "JAXHC_NO_COMPILATION_CACHE"
# the file in a cache folder naming the CPU its entries were compiled on
HOST_MARKER = "jaxhc-host-cpu.txt"


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


def host_cpu_signature() -> str:
    """A short hash of this machine's CPU: architecture, vendor, model and instruction-set
    flags (``/proc/cpuinfo`` on Linux, else ``platform.processor()``). Two machines with the
    same signature run each other's XLA:CPU executables."""
    parts = [platform.machine()]
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
    except OSError:
        info = ""
    keys = ("vendor_id", "cpu family", "model", "model name", "flags", "CPU implementer", "CPU part", "Features")
    seen = {}
    for line in info.splitlines():
        k, _, v = line.partition(":")
        k = k.strip()
        if k in keys and k not in seen:
            seen[k] = " ".join(sorted(v.split()))
    parts += [f"{k}={seen[k]}" for k in sorted(seen)] if seen else [platform.processor()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def quiet_cache_loads(folder: str) -> bool:
    """Silences XLA's C++ log lines (absl minimum level FATAL) when the cache ``folder`` holds
    executables compiled on this machine's CPU; returns whether it did.

    Why: loading a cached XLA:CPU executable logs a warning (``pjrt_executable.cc: Assume
    version compatibility``) and, on hosts whose LLVM CPU model carries tuning-only features
    (AMD Zen 4: ``+prefer-no-gather``, ``+prefer-no-scatter``), an error per executable from
    ``cpu_aot_loader.cc`` claiming the executable was compiled for another machine and may
    raise SIGILL. That check compares the compile-time feature list, tuning flags included,
    with the host's ISA features, which never list tuning flags (openxla/xla issue 44565), so
    it fails for executables compiled on this very machine; the executable is loaded and
    runs correctly all the same. The folder's `HOST_MARKER` file records the CPU signature
    (`host_cpu_signature`) of the first process that used it: when it matches, every entry
    was compiled here and the lines are false alarms; when it does not (a folder shared
    between different machines, where the warning can be real), nothing is silenced.
    ``TF_CPP_MIN_LOG_LEVEL=0`` in the environment (all C++ logs asked for) is left alone. The level is process-wide: other C++ errors of XLA are silenced too (errors that
    stop a computation still raise Python exceptions)."""
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "").strip() == "0":  # (importing jax sets "1" when unset)
        return False
    sig = host_cpu_signature()
    marker = os.path.join(folder, HOST_MARKER)
    try:
        with open(marker) as f:
            recorded = f.read().strip()
    except OSError:
        recorded = None
    if recorded is None:
        try:
            with open(marker, "w") as f:
                f.write(sig + "\n")
        except OSError:
            return False
    elif recorded != sig:
        return False
    try:
        from jaxlib import utils
    except ImportError:  # pragma: no cover - jaxlib always ships it
        return False
    set_level = getattr(utils, "absl_set_min_log_level", None)
    if set_level is None:  # an older jaxlib: the variable works if jaxlib is not loaded yet
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
        return True
    set_level(3)
    return True


def _make_folder(path: str, name: str) -> str:
    path = os.path.abspath(os.path.expanduser(path))
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise ValueError(f"{name}: cannot create the compilation cache folder {path!r} ({e})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"{name}: the compilation cache folder {path!r} is not writable")
    return path


def enable_compilation_cache(path: Optional[Union[str, os.PathLike]] = None, *, quiet: bool = True) -> Optional[str]:
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
      quiet: silence XLA's C++ log lines when the folder's executables were compiled on this
        machine's CPU (`quiet_cache_loads`: every load of a cached executable logs a warning,
        and on AMD Zen 4 a false SIGILL error, openxla/xla issue 44565); ``False`` leaves
        XLA's logging as it is.

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

    current = getattr(jax.config, "jax_compilation_cache_dir")  # (a config attribute mypy cannot see)
    if path is None:
        if current:
            folder = os.path.abspath(current)
            if quiet and os.path.isdir(folder):
                quiet_cache_loads(folder)
            return folder
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
    if quiet:
        quiet_cache_loads(folder)
    return folder
