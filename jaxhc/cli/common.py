"""What the subcommands of the ``jaxhc`` command line share: the input error, progress
messages on stderr and JAX's persistent compilation cache."""

from __future__ import annotations

import os
import sys
from typing import Optional

__all__ = ["InputError", "enable_compile_cache", "log"]


class InputError(Exception):
    """A problem with the user's input; reported on stderr with exit code 2."""


def log(progress: bool, msg: str):
    if progress:
        print(msg, file=sys.stderr, flush=True)


def enable_compile_cache(path: Optional[str], progress: bool, cmd: str = "jets"):
    """JAX's persistent compilation cache: the compiled programs (BHC's merge loop and
    M-step per family and shape, the trellis per jet size) are compiled once per machine
    instead of once per run."""
    import jax

    path = path or os.environ.get("JAXHC_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "jaxhc", "xla")
    try:
        os.makedirs(path, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0 if cmd in ("demo", "bhc") else 1.0)
    except (OSError, AttributeError, ValueError) as e:  # read-only home, or an older JAX
        log(progress, f"[jaxhc {cmd}] compilation cache off ({e})")
        return
    log(progress, f"[jaxhc {cmd}] compilation cache: {path} (--no-cache to turn off)")
