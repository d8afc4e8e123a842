"""Inference algorithms: each a pure function or an init/step kernel pair."""
from .bhc import BHCResult, bhc, bhc_predictive, tree_log_evidence

__all__ = ["BHCResult", "bhc", "bhc_predictive", "tree_log_evidence"]
