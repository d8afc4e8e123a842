"""Bayesian hierarchical clustering (Heller & Ghahramani 2005).

``greedy``: the greedy agglomerative search, ``log p(D|T)``, the DPM bound and predictives;
``randomized``: randomized BHC (filtering, ``O(n log n)``); ``hyperopt``: optax learning of
the hyperparameters; ``auto``: `fit_bhc`, the family chosen by evidence with alpha and the prior
learned (what ``jaxhc bhc`` runs). The functions are exported at the top level (``jaxhc.bhc``, ...).
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load on first access
    from . import auto, greedy, hyperopt, predictive, randomized
    from .auto import BHCFit, FamilyFit, fit_bhc
    from .greedy import BHCResult, tree_log_evidence
    from .hyperopt import HyperoptResult, learn_hyperparameters
    from .predictive import bhc_predictive, bhc_predictive_cell
    from .randomized import rbhc

__all__ = [
    "BHCFit",
    "BHCResult",
    "FamilyFit",
    "auto",
    "fit_bhc",
    "HyperoptResult",
    "bhc_predictive",
    "bhc_predictive_cell",
    "greedy",
    "hyperopt",
    "learn_hyperparameters",
    "predictive",
    "randomized",
    "rbhc",
    "tree_log_evidence",
]

#: subpackages and modules, imported on first access
_SUBMODULES = frozenset(["auto", "greedy", "hyperopt", "predictive", "randomized"])
#: every other public name: the module it is defined in
_LAZY = {
    "BHCFit": ".auto",
    "FamilyFit": ".auto",
    "fit_bhc": ".auto",
    "BHCResult": ".greedy",
    "tree_log_evidence": ".greedy",
    "HyperoptResult": ".hyperopt",
    "learn_hyperparameters": ".hyperopt",
    "bhc_predictive": ".predictive",
    "bhc_predictive_cell": ".predictive",
    "rbhc": ".randomized",
}


def __getattr__(name: str):
    """Imports on first access (PEP 562), as the top-level package does: ``jaxhc.bhc`` loads
    the BHC modules only, not the BHMC, PYDT or Gibbs samplers (and NumPyro with them)."""
    if name in _SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__) | _SUBMODULES)
