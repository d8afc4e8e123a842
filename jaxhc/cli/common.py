"""What the subcommands of the ``jaxhc`` command line share: the input error, progress
messages on stderr and JAX's persistent compilation cache."""

from __future__ import annotations

import sys
from typing import Optional

__all__ = ["InputError", "enable_compile_cache", "log"]


class InputError(Exception):
    """A problem with the user's input; reported on stderr with exit code 2."""


def log(progress: bool, msg: str):
    if progress:
        print(msg, file=sys.stderr, flush=True)


def enable_compile_cache(path: Optional[str], progress: bool, cmd: str = "jets"):
    """JAX's persistent compilation cache (`jaxhc.enable_compilation_cache`): the compiled
    programs (BHC's merge loop and M-step per family and shape, the trellis per jet size) are
    compiled once per machine instead of once per run. ``--cache-dir`` moves it; without it,
    a folder JAX is already configured with (``JAX_COMPILATION_CACHE_DIR``) is kept, else
    ``$JAXHC_CACHE_DIR`` or ``~/.cache/jaxhc/xla``. A ``--cache-dir`` that cannot be created
    is an input error."""
    from .._internal.cache import enable_compilation_cache

    try:
        folder = enable_compilation_cache(path)
    except (TypeError, ValueError) as e:
        msg = str(e)
        raise InputError(f"--cache-dir: {msg[len('path: ') :] if msg.startswith('path: ') else msg}") from None
    if folder is None:
        log(progress, f"[jaxhc {cmd}] compilation cache off")
    else:
        log(progress, f"[jaxhc {cmd}] compilation cache: {folder} (--no-compilation-cache to turn off)")
