"""Exact and sparse cluster trellis (Greenberg, Macaluso et al.): partition function, MAP
hierarchy, cluster marginals and exact sampling over all binary hierarchies."""

from .batch import compact_solution, gather_solutions, map_trees, solve_batch
from .energies import (
    CorrelationEnergy,
    DasguptaEnergy,
    Energy,
    FourMomentumEnergy,
    GinkgoEnergy,
    SplitReport,
    UnitEnergy,
    log_phi_of_tree,
)
from .exact import (
    MAX_EXACT_LEAVES,
    TrellisSolution,
    cluster_marginals,
    log_partition,
    memory_required,
    num_splits,
    solve,
    subtree_log_marginal,
)
from .flat import PreparedBatch, log_partition_batch, log_partition_prepared, prepare_batch
from .invalid import InvalidProblems, InvalidProblemsError
from .sampling import SampledTrees, sample
from .search import SearchResult, beam, greedy
from .sparse import SparseSolution, double_factorial, seed_trees_from_beam, sparse_solve
from .splitting import SplittingEnergy

__all__ = [
    "SearchResult",
    "SparseSolution",
    "beam",
    "double_factorial",
    "greedy",
    "seed_trees_from_beam",
    "sparse_solve",
    "CorrelationEnergy",
    "DasguptaEnergy",
    "Energy",
    "FourMomentumEnergy",
    "GinkgoEnergy",
    "InvalidProblems",
    "InvalidProblemsError",
    "SplitReport",
    "SplittingEnergy",
    "MAX_EXACT_LEAVES",
    "PreparedBatch",
    "SampledTrees",
    "TrellisSolution",
    "UnitEnergy",
    "cluster_marginals",
    "compact_solution",
    "gather_solutions",
    "log_partition",
    "log_partition_batch",
    "log_partition_prepared",
    "log_phi_of_tree",
    "map_trees",
    "memory_required",
    "num_splits",
    "prepare_batch",
    "sample",
    "solve",
    "solve_batch",
    "subtree_log_marginal",
]
