"""Inference algorithms: each a pure function or an init/step kernel pair.

Subpackages and modules are named after the model, never after an exported function:
``bhc`` (greedy / randomized BHC, hyperparameter learning), ``bhcc`` (BHCC / RBHCC), ``bhmc``
(the BHMC sampler), ``pydt`` (PYDT MCMC and EM), ``gibbs`` (DPM / CDPM Gibbs), ``ginkgo_fit``
(the Ginkgo lambda fit) and ``mh``. The functions that share a subpackage's name
(``jaxhc.bhc``, ``jaxhc.bhcc``, ``jaxhc.bhmc``) are exported at the top level only.
"""

from . import bhc, bhcc, bhmc, gibbs, ginkgo_fit, mh, pydt
from .bhc import (
    BHCResult,
    HyperoptResult,
    bhc_predictive,
    bhc_predictive_cell,
    learn_hyperparameters,
    rbhc,
    tree_log_evidence,
)
from .bhcc import BHCCResult, BHCCView, bhcc_predictive_cell, bhcc_predictive_column, bhcc_predictive_row, rbhcc
from .bhmc import BHMC, BHMCResult, BHMCSamples, BHMCState, bhmc_init, bhmc_step
from .gibbs import CDPMGibbs, DPMGibbs, cdpm_mcmc, cdpm_predict_cells, dpm_gibbs, dpm_predict_cells
from .ginkgo_fit import LambdaFit, LambdaPosterior, LambdaSamples, fit_lambda, lambda_model, sample_lambda
from .pydt import (
    PYDT,
    PYDTEMResult,
    PYDTPriors,
    PYDTSamples,
    PYDTState,
    pydt_em,
    pydt_mcmc,
    pydt_mcmc_init,
    pydt_mcmc_step,
    pydt_predictive_logpdf,
)

__all__ = [
    "BHCResult",
    "BHCCResult",
    "BHCCView",
    "BHMC",
    "BHMCResult",
    "BHMCSamples",
    "BHMCState",
    "CDPMGibbs",
    "DPMGibbs",
    "HyperoptResult",
    "LambdaFit",
    "LambdaPosterior",
    "LambdaSamples",
    "PYDT",
    "PYDTEMResult",
    "PYDTPriors",
    "PYDTSamples",
    "PYDTState",
    "bhc",
    "bhcc",
    "bhmc",
    "gibbs",
    "ginkgo_fit",
    "mh",
    "pydt",
    "bhc_predictive",
    "bhc_predictive_cell",
    "bhcc_predictive_cell",
    "bhcc_predictive_column",
    "bhcc_predictive_row",
    "bhmc_init",
    "bhmc_step",
    "cdpm_mcmc",
    "cdpm_predict_cells",
    "dpm_gibbs",
    "dpm_predict_cells",
    "fit_lambda",
    "lambda_model",
    "learn_hyperparameters",
    "pydt_em",
    "pydt_mcmc",
    "pydt_mcmc_init",
    "pydt_mcmc_step",
    "pydt_predictive_logpdf",
    "rbhc",
    "rbhcc",
    "sample_lambda",
    "tree_log_evidence",
]
