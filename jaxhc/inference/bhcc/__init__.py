"""Bayesian hierarchical cross-clustering, BHCC and RBHCC (Li & Shafto), with the row, column
and cell predictives. The functions are exported at the top level (``jaxhc.bhcc``, ...)."""
from . import core
from .core import (
    BHCCResult,
    BHCCView,
    bhcc_predictive_cell,
    bhcc_predictive_column,
    bhcc_predictive_row,
    rbhcc,
)

__all__ = [
    "BHCCResult", "BHCCView", "bhcc_predictive_cell", "bhcc_predictive_column", "bhcc_predictive_row",
    "core", "rbhcc",
]
