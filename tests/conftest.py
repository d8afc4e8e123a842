"""Test set-up: float64 everywhere, and tests/ on sys.path so `import reference` works."""
import os
import sys

import jax

jax.config.update("jax_enable_x64", True)

_HERE = os.path.dirname(os.path.abspath(__file__))
# tests/ for `reference`; the repository root for `jaxhc` when it is not pip-installed
for _p in (os.path.dirname(_HERE), _HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)
