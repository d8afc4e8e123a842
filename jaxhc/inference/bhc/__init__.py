"""Bayesian hierarchical clustering (Heller & Ghahramani 2005).

``greedy``: the greedy agglomerative search, ``log p(D|T)``, the DPM bound and predictives;
``randomized``: randomized BHC (filtering, ``O(n log n)``); ``hyperopt``: optax learning of
the hyperparameters; ``auto``: `fit_bhc`, the family chosen by evidence with alpha and the prior
learned (what ``jaxhc bhc`` runs). The functions are exported at the top level (``jaxhc.bhc``, ...).
"""

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
