"""Pitman-Yor diffusion trees (Knowles & Ghahramani): ``mcmc``, the detach / reattach sampler
(init / step kernels); ``em``, message passing and greedy Bayesian EM."""
from . import em, mcmc
from .em import PYDTEMResult, pydt_em, pydt_predictive_logpdf
from .mcmc import PYDT, PYDTPriors, PYDTSamples, PYDTState, pydt_mcmc, pydt_mcmc_init, pydt_mcmc_step

__all__ = [
    "PYDT", "PYDTEMResult", "PYDTPriors", "PYDTSamples", "PYDTState", "em", "mcmc", "pydt_em",
    "pydt_mcmc", "pydt_mcmc_init", "pydt_mcmc_step", "pydt_predictive_logpdf",
]
