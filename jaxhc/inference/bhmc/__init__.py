"""BHMC (Huang et al.): the Metropolis-Hastings / block Gibbs sampler over nested-CRP paths and
the multilevel HDP mixture, as init / step kernels. ``jaxhc.bhmc`` runs the chains.

Modules: `state` (`BHMCState`, `BHMCConfig`, `make_config`, input checks), `moves` (a point's
path and component), `splitmerge` (split-merge moves on a level's nodes), `updates` (weights
``B``, means ``theta``, hyperparameters, the complete-data log likelihood), `init` (starting
states), `summary` (the posterior summary `BHMCPosterior`), `sampler` (the sweep, `bhmc`,
`BHMCSamples`, the NumPyro kernel `BHMC`).
"""

from ...models.ncrp_hdp import joint_log_density
from . import init, moves, sampler, splitmerge, state, summary, updates
from .init import (
    auto_starts,
    bhmc_init,
    level_sizes_from_gaps,
    prior_sample_state,
    start_level_labels,
    state_from_level_labels,
    tree_init_state,
)
from .sampler import BHMC, BHMCResult, BHMCSamples, bhmc_step, program_sites, state_to_tree
from .splitmerge import split_merge_level
from .state import OVERFLOW_COMPONENTS, OVERFLOW_NODES, BHMCConfig, BHMCState, make_config
from .summary import BHMCPosterior, consensus_partition, level_expected_loss, posterior_summary, tree_from_level_labels
from .updates import complete_data_log_likelihood, update_hyper, update_theta, update_weights, update_weights_exact

__all__ = [
    "BHMC",
    "BHMCConfig",
    "BHMCPosterior",
    "BHMCResult",
    "BHMCSamples",
    "BHMCState",
    "OVERFLOW_COMPONENTS",
    "OVERFLOW_NODES",
    "auto_starts",
    "bhmc_init",
    "bhmc_step",
    "complete_data_log_likelihood",
    "consensus_partition",
    "joint_log_density",
    "level_expected_loss",
    "level_sizes_from_gaps",
    "make_config",
    "posterior_summary",
    "prior_sample_state",
    "program_sites",
    "split_merge_level",
    "start_level_labels",
    "state_from_level_labels",
    "state_to_tree",
    "tree_from_level_labels",
    "tree_init_state",
    "update_hyper",
    "update_theta",
    "update_weights",
    "update_weights_exact",
    "init",
    "moves",
    "sampler",
    "splitmerge",
    "state",
    "summary",
    "updates",
]
