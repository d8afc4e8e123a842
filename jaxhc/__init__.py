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
from .inference.ginkgo_fit import LambdaFit, LambdaPosterior, fit_lambda, sample_lambda
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
    "LambdaFit",
    "LambdaPosterior",
    "NormalInverseWishart",
    "NormalKnownCov",
    "ParentTree",
    "Tree",
    "bhc",
    "bhc_predictive",
    "components",
    "datasets",
    "fit_lambda",
    "jets",
    "learn_hyperparameters",
    "metrics",
    "rbhc",
    "sample_lambda",
    "tree",
    "tree_log_evidence",
    "trellis",
]
