"""jaxhc: Bayesian hierarchical clustering on JAX.

The public API is re-exported here; see README.md for one example per model.
Importing jaxhc never changes JAX's configuration (enable float64 yourself with
``jax.config.update("jax_enable_x64", True)``; tests and the CLI do).
"""

from . import components, datasets, jets, metrics, tree, trellis
from ._internal.cache import enable_compilation_cache
from .components import (
    BetaBernoulli,
    BetaBinomial,
    DirichletMultinomial,
    IndependentNormal,
    NormalGamma,
    NormalInverseWishart,
    NormalKnownCov,
)
from .inference.bhc.auto import BHCFit, fit_bhc
from .inference.bhc.greedy import BHCResult, bhc, tree_log_evidence
from .inference.bhc.hyperopt import HyperoptResult, learn_hyperparameters
from .inference.bhc.predictive import bhc_predictive, bhc_predictive_cell
from .inference.bhc.randomized import rbhc
from .inference.bhcc import (
    BHCCResult,
    BHCCView,
    bhcc,
    bhcc_predictive_cell,
    bhcc_predictive_column,
    bhcc_predictive_row,
    rbhcc,
)
from .inference.bhmc.sampler import BHMCResult, BHMCSamples, bhmc
from .inference.gibbs import cdpm_mcmc, dpm_gibbs
from .inference.ginkgo_fit import LambdaFit, LambdaPosterior, LambdaSamples, fit_lambda, sample_lambda
from .inference.pydt.em import PYDTEMResult, pydt_em, pydt_predictive_logpdf
from .inference.pydt.mcmc import PYDTSamples, pydt_mcmc
from .tree import ParentTree, Tree

__version__ = "0.1.0"

__all__ = [
    "BHCFit",
    "BHCCResult",
    "BHCCView",
    "BHCResult",
    "BHMCResult",
    "BHMCSamples",
    "BetaBernoulli",
    "BetaBinomial",
    "DirichletMultinomial",
    "HyperoptResult",
    "IndependentNormal",
    "LambdaFit",
    "LambdaPosterior",
    "LambdaSamples",
    "NormalGamma",
    "NormalInverseWishart",
    "NormalKnownCov",
    "PYDTEMResult",
    "PYDTSamples",
    "ParentTree",
    "Tree",
    "bhc",
    "bhc_predictive",
    "bhc_predictive_cell",
    "bhcc",
    "bhmc",
    "bhcc_predictive_cell",
    "bhcc_predictive_column",
    "bhcc_predictive_row",
    "cdpm_mcmc",
    "dpm_gibbs",
    "enable_compilation_cache",
    "components",
    "datasets",
    "fit_bhc",
    "fit_lambda",
    "jets",
    "learn_hyperparameters",
    "metrics",
    "pydt_em",
    "pydt_mcmc",
    "pydt_predictive_logpdf",
    "rbhc",
    "rbhcc",
    "sample_lambda",
    "tree",
    "tree_log_evidence",
    "trellis",
]
