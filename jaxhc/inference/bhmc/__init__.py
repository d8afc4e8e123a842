"""BHMC (Huang et al.): the Metropolis-Hastings sampler over nested-CRP paths and the
multilevel HDP mixture, as init / step kernels. ``jaxhc.bhmc`` runs the chains."""
from . import sampler
from .sampler import BHMC, BHMCResult, BHMCState, bhmc_init, bhmc_step

__all__ = ["BHMC", "BHMCResult", "BHMCState", "bhmc_init", "bhmc_step", "sampler"]
