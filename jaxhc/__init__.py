"""jaxhc: Bayesian hierarchical clustering on JAX.

The public API is re-exported here (loaded on first use); see the guides under docs/guides
for one example per model.
Importing jaxhc never changes JAX's configuration (enable float64 yourself with
``jax.config.update("jax_enable_x64", True)``; tests and the CLI do).
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers and the API reference see; at run time, `__getattr__`
    from . import components, datasets, jets, metrics, tree, trellis
    from ._internal.cache import enable_compilation_cache
    from ._internal.compiles import CompileCount, count_compilations
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
        BHCCSearch,
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
    from .sklearn import BayesianCrossClustering, BayesianHierarchicalClustering, BayesianHierarchicalMixtureClustering
    from .tree import ParentTree, Tree

__version__ = "0.1.0"

__all__ = [
    "BayesianCrossClustering",
    "BayesianHierarchicalClustering",
    "BayesianHierarchicalMixtureClustering",
    "BHCFit",
    "BHCCResult",
    "BHCCSearch",
    "BHCCView",
    "BHCResult",
    "BHMCResult",
    "BHMCSamples",
    "BetaBernoulli",
    "CompileCount",
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
    "count_compilations",
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


#: every subpackage a user reaches as ``jaxhc.<name>`` (imported on first access)
_SUBMODULES = frozenset(
    {"cli", "components", "datasets", "inference", "jets", "metrics", "models", "plot", "sklearn", "tree", "trellis"}
)
#: every other public name: the module it is defined in
_LAZY = {
    "enable_compilation_cache": "._internal.cache",
    "CompileCount": "._internal.compiles",
    "count_compilations": "._internal.compiles",
    "BetaBernoulli": ".components",
    "BetaBinomial": ".components",
    "DirichletMultinomial": ".components",
    "IndependentNormal": ".components",
    "NormalGamma": ".components",
    "NormalInverseWishart": ".components",
    "NormalKnownCov": ".components",
    "BHCFit": ".inference.bhc.auto",
    "fit_bhc": ".inference.bhc.auto",
    "BHCResult": ".inference.bhc.greedy",
    "bhc": ".inference.bhc.greedy",
    "tree_log_evidence": ".inference.bhc.greedy",
    "HyperoptResult": ".inference.bhc.hyperopt",
    "learn_hyperparameters": ".inference.bhc.hyperopt",
    "bhc_predictive": ".inference.bhc.predictive",
    "bhc_predictive_cell": ".inference.bhc.predictive",
    "rbhc": ".inference.bhc.randomized",
    "BHCCResult": ".inference.bhcc",
    "BHCCSearch": ".inference.bhcc",
    "BHCCView": ".inference.bhcc",
    "bhcc": ".inference.bhcc",
    "bhcc_predictive_cell": ".inference.bhcc",
    "bhcc_predictive_column": ".inference.bhcc",
    "bhcc_predictive_row": ".inference.bhcc",
    "rbhcc": ".inference.bhcc",
    "BHMCResult": ".inference.bhmc.sampler",
    "BHMCSamples": ".inference.bhmc.sampler",
    "bhmc": ".inference.bhmc.sampler",
    "cdpm_mcmc": ".inference.gibbs",
    "dpm_gibbs": ".inference.gibbs",
    "LambdaFit": ".inference.ginkgo_fit",
    "LambdaPosterior": ".inference.ginkgo_fit",
    "LambdaSamples": ".inference.ginkgo_fit",
    "fit_lambda": ".inference.ginkgo_fit",
    "sample_lambda": ".inference.ginkgo_fit",
    "PYDTEMResult": ".inference.pydt.em",
    "pydt_em": ".inference.pydt.em",
    "pydt_predictive_logpdf": ".inference.pydt.em",
    "PYDTSamples": ".inference.pydt.mcmc",
    "pydt_mcmc": ".inference.pydt.mcmc",
    "ParentTree": ".tree",
    "Tree": ".tree",
    # the scikit-learn estimators (the sklearn extra: an ImportError naming it without it)
    "BayesianCrossClustering": ".sklearn",
    "BayesianHierarchicalClustering": ".sklearn",
    "BayesianHierarchicalMixtureClustering": ".sklearn",
}


def __getattr__(name: str):
    """Imports on first access (PEP 562): ``import jaxhc`` costs little more than ``import
    jax``, and ``from jaxhc import trellis`` does not import NumPyro, SciPy or Optax (the time
    to a first trellis solve in a fresh process; benchmarks/trellis_latency.py)."""
    if name in _SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later accesses are plain attribute reads
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__) | _SUBMODULES)
