"""Inference algorithms: each a pure function or an init/step kernel pair."""
from .bhc import BHCResult, bhc, bhc_predictive, tree_log_evidence
from .hyperopt import HyperoptResult, learn_hyperparameters
from .rbhc import rbhc

__all__ = ["BHCResult", "HyperoptResult", "bhc", "bhc_predictive", "learn_hyperparameters", "rbhc", "tree_log_evidence"]
