"""Pitman-Yor diffusion trees (Knowles & Ghahramani): ``mcmc``, the detach / reattach sampler
(init / step kernels); ``em``, the greedy Bayesian EM search, built on ``estep``, ``mstep``,
``ep`` (probit observations) and ``moves`` (the structure search); ``predictive``, the
predictive density; ``messages``, the Gaussian message passing both use; ``state``, the
state and result types; ``checks``, the argument checks; ``padding``, the shape buckets of
`pydt_mcmc` and `pydt_em` (padding leaves, slot maps, padding-blind draws). The tree maths
shared with the prior is `jaxhc.models.pydt_math`."""

from . import checks, em, ep, estep, mcmc, messages, moves, mstep, padding, predictive, state
from .em import pydt_em
from .mcmc import PYDT, program_sites, pydt_mcmc, pydt_mcmc_init, pydt_mcmc_step
from .predictive import pydt_predictive_logpdf
from .state import PYDTEMResult, PYDTPriors, PYDTSamples, PYDTState

__all__ = [
    "PYDT",
    "PYDTEMResult",
    "PYDTPriors",
    "PYDTSamples",
    "PYDTState",
    "checks",
    "em",
    "ep",
    "estep",
    "mcmc",
    "messages",
    "moves",
    "mstep",
    "padding",
    "predictive",
    "program_sites",
    "pydt_em",
    "pydt_mcmc",
    "pydt_mcmc_init",
    "pydt_mcmc_step",
    "pydt_predictive_logpdf",
    "state",
]
