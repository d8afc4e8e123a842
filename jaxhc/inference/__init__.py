"""Inference algorithms: each a pure function or an init/step kernel pair."""
from . import gibbs, mh, pydt_em, pydt_mcmc  # the modules (jaxhc.pydt_mcmc is the function)
from . import bhmc  # the module (jaxhc.bhmc is the function)
from .bhmc import BHMC, BHMCResult, BHMCState, bhmc_init, bhmc_step
from .pydt_em import PYDTEMResult, pydt_predictive_logpdf
from .pydt_mcmc import PYDT, PYDTPriors, PYDTSamples, PYDTState, pydt_mcmc_init, pydt_mcmc_step
from .bhc import BHCResult, bhc, bhc_predictive, bhc_predictive_cell, tree_log_evidence
from .bhcc import (
    BHCCResult,
    BHCCView,
    bhcc,
    bhcc_predictive_cell,
    bhcc_predictive_column,
    bhcc_predictive_row,
    rbhcc,
)
from .gibbs import CDPMGibbs, DPMGibbs, cdpm_mcmc, cdpm_predict_cells, dpm_gibbs, dpm_predict_cells
from .ginkgo_fit import LambdaFit, LambdaPosterior, fit_lambda, lambda_model, sample_lambda
from .hyperopt import HyperoptResult, learn_hyperparameters
from .rbhc import rbhc

__all__ = [
    "BHMC", "BHMCResult", "BHMCState", "bhmc", "bhmc_init", "bhmc_step",
    "PYDT", "PYDTEMResult", "PYDTPriors", "pydt_em", "pydt_predictive_logpdf", "PYDTSamples", "PYDTState", "pydt_mcmc", "pydt_mcmc_init", "pydt_mcmc_step",
    "BHCCResult", "BHCCView", "CDPMGibbs", "DPMGibbs", "bhcc", "bhcc_predictive_cell", "bhcc_predictive_column",
    "bhcc_predictive_row", "cdpm_mcmc", "cdpm_predict_cells", "dpm_gibbs", "dpm_predict_cells", "gibbs", "mh",
    "rbhcc",
    "BHCResult", "bhc_predictive_cell", "HyperoptResult", "LambdaFit", "LambdaPosterior", "bhc", "bhc_predictive", "fit_lambda",
    "lambda_model", "learn_hyperparameters", "rbhc", "sample_lambda", "tree_log_evidence",
]
