"""BHMC (Huang et al.): the Metropolis-Hastings / block Gibbs sampler over nested-CRP paths and
the multilevel HDP mixture, as init / step kernels. ``jaxhc.bhmc`` runs the chains.

Modules: `state` (`BHMCState`, `BHMCConfig`, `make_config`, input checks), `moves` (a point's
path and component), `updates` (weights ``B``, means ``theta``, hyperparameters, the
complete-data log likelihood), `init` (starting states), `sampler` (the sweep, `bhmc`,
`BHMCSamples`, the NumPyro kernel `BHMC`).
"""

from ...models.ncrp_hdp import joint_log_density
from . import init, moves, sampler, state, updates
from .init import bhmc_init, level_sizes_from_gaps, prior_sample_state, state_from_level_labels, tree_init_state
from .sampler import BHMC, BHMCResult, BHMCSamples, bhmc_step, program_sites, state_to_tree
from .state import OVERFLOW_COMPONENTS, OVERFLOW_NODES, BHMCConfig, BHMCState, make_config
from .updates import complete_data_log_likelihood, update_hyper, update_theta, update_weights, update_weights_exact

__all__ = [
    "BHMC",
    "BHMCConfig",
    "BHMCResult",
    "BHMCSamples",
    "BHMCState",
    "OVERFLOW_COMPONENTS",
    "OVERFLOW_NODES",
    "bhmc_init",
    "bhmc_step",
    "complete_data_log_likelihood",
    "joint_log_density",
    "level_sizes_from_gaps",
    "make_config",
    "prior_sample_state",
    "program_sites",
    "state_from_level_labels",
    "state_to_tree",
    "tree_init_state",
    "update_hyper",
    "update_theta",
    "update_weights",
    "update_weights_exact",
    "init",
    "moves",
    "sampler",
    "state",
    "updates",
]
