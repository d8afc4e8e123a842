"""Inference algorithms: each a pure function or an init/step kernel pair.

Subpackages and modules are named after the model, never after an exported function:
``bhc`` (greedy / randomized BHC, hyperparameter learning), ``bhcc`` (BHCC / RBHCC), ``bhmc``
(the BHMC sampler), ``pydt`` (PYDT MCMC and EM), ``gibbs`` (DPM / CDPM Gibbs), ``ginkgo_fit``
(the Ginkgo lambda fit) and ``mh``. The functions that share a subpackage's name
(``jaxhc.bhc``, ``jaxhc.bhcc``, ``jaxhc.bhmc``) are exported at the top level only.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load on first access
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
    from .bhcc import (
        BHCCResult,
        BHCCSearch,
        BHCCView,
        bhcc_predictive_cell,
        bhcc_predictive_column,
        bhcc_predictive_row,
        rbhcc,
    )
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
    "BHCCSearch",
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

#: subpackages and modules, imported on first access
_SUBMODULES = frozenset(["bhc", "bhcc", "bhmc", "gibbs", "ginkgo_fit", "mh", "pydt"])
#: every other public name: the module it is defined in
_LAZY = {
    "BHCResult": ".bhc",
    "HyperoptResult": ".bhc",
    "bhc_predictive": ".bhc",
    "bhc_predictive_cell": ".bhc",
    "learn_hyperparameters": ".bhc",
    "rbhc": ".bhc",
    "tree_log_evidence": ".bhc",
    "BHCCResult": ".bhcc",
    "BHCCSearch": ".bhcc",
    "BHCCView": ".bhcc",
    "bhcc_predictive_cell": ".bhcc",
    "bhcc_predictive_column": ".bhcc",
    "bhcc_predictive_row": ".bhcc",
    "rbhcc": ".bhcc",
    "BHMC": ".bhmc",
    "BHMCResult": ".bhmc",
    "BHMCSamples": ".bhmc",
    "BHMCState": ".bhmc",
    "bhmc_init": ".bhmc",
    "bhmc_step": ".bhmc",
    "CDPMGibbs": ".gibbs",
    "DPMGibbs": ".gibbs",
    "cdpm_mcmc": ".gibbs",
    "cdpm_predict_cells": ".gibbs",
    "dpm_gibbs": ".gibbs",
    "dpm_predict_cells": ".gibbs",
    "LambdaFit": ".ginkgo_fit",
    "LambdaPosterior": ".ginkgo_fit",
    "LambdaSamples": ".ginkgo_fit",
    "fit_lambda": ".ginkgo_fit",
    "lambda_model": ".ginkgo_fit",
    "sample_lambda": ".ginkgo_fit",
    "PYDT": ".pydt",
    "PYDTEMResult": ".pydt",
    "PYDTPriors": ".pydt",
    "PYDTSamples": ".pydt",
    "PYDTState": ".pydt",
    "pydt_em": ".pydt",
    "pydt_mcmc": ".pydt",
    "pydt_mcmc_init": ".pydt",
    "pydt_mcmc_step": ".pydt",
    "pydt_predictive_logpdf": ".pydt",
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
