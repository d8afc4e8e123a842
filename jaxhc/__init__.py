"""jaxhc: Bayesian hierarchical clustering on JAX.

The public API is re-exported here; see README.md for one example per model.
Importing jaxhc never changes JAX's configuration (enable float64 yourself with
``jax.config.update("jax_enable_x64", True)``; tests and the CLI do).
"""
from . import components, datasets, jets, metrics, tree, trellis
from .components import (
    BetaBernoulli,
    BetaBinomial,
    DirichletMultinomial,
    NormalInverseWishart,
    NormalKnownCov,
)
from .inference.bhc import BHCResult, bhc, bhc_predictive, tree_log_evidence
from .inference.hyperopt import HyperoptResult, learn_hyperparameters
from .inference.rbhc import rbhc
from .tree import ParentTree, Tree

__version__ = "0.1.0"

__all__ = [
    "BHCResult",
    "BetaBernoulli",
    "BetaBinomial",
    "DirichletMultinomial",
    "HyperoptResult",
    "NormalInverseWishart",
    "NormalKnownCov",
    "ParentTree",
    "Tree",
    "bhc",
    "bhc_predictive",
    "components",
    "datasets",
    "jets",
    "learn_hyperparameters",
    "metrics",
    "rbhc",
    "tree",
    "tree_log_evidence",
    "trellis",
]
