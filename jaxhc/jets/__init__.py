"""Jets: generalized-kt clustering (FastJet, or a NumPy twin) and the MAP comparison of the
trellis paper (its Table 1 and Fig. 5).

A jet is its constituents' four-momenta ``leaves [N, 4]`` (E, px, py, pz), the ``leaves`` of a
`jaxhc.trellis.GinkgoEnergy`. Every clustering here returns a `jaxhc.Tree` whose leaf ``i`` is
row ``i`` of ``leaves``, so its Ginkgo likelihood is `jaxhc.trellis.log_phi_of_tree`.

**Generalized kt** (`kt_tree`, `kt_tree_numpy`): ``p = 1`` kt, ``p = 0`` Cambridge/Aachen,
``p = -1`` anti-kt, E-scheme recombination (four-momenta add), clustered exclusively down to
ONE jet, so every leaf is merged and the result is a full binary tree. Two distance families:

* ``variant="ee"`` (default; FastJet's ``ee_genkt_algorithm``):
  ``d_ij = min(E_i^2p, E_j^2p) (1 - cos theta_ij) / (1 - cos R)`` for ``R <= pi`` and
  ``/ (3 + cos R)`` for ``R > pi``; ``d_iB = E_i^2p``. For ``pi < R <= 3 pi`` the
  denominator is at least 2 >= ``1 - cos theta``, so ``d_ij <= d_iB``: nothing is ever merged
  with the beam and the tree does not depend on ``R`` (default ``R = 2 pi``, denominator 4,
  ``d_ij <= d_iB / 2``). This is why it is the default: a full binary tree is guaranteed, and
  the measure (energies and opening angles) is rotation invariant, as befits Ginkgo's toy
  jets, whose direction is arbitrary. It is also the measure of the Ginkgo authors' own
  reclustering, up to their use of the transverse momentum for the energy.
* ``variant="pp"`` (FastJet's longitudinally invariant ``genkt_algorithm``):
  ``d_ij = min(kt_i^2p, kt_j^2p) dR_ij^2 / R^2`` with ``dR^2 = dy^2 + dphi^2`` (rapidity,
  azimuth about the z axis), ``d_iB = kt_i^2p``. It gives a single jet only when ``R`` exceeds
  every ``dR`` met during the clustering; the default is FastJet's largest ``R = 1000``, and a
  jet that still loses a particle to the beam raises ``ValueError``.

In both, the order of the merges, hence the tree, is that of the global minimum ``d_ij`` at
every step (exact ties aside); the ``d_ij`` of each merge is the tree's ``heights``, so
``tree.cut(d_cut)`` gives the exclusive jets at ``d_cut`` for kt and C/A.

`kt_tree` runs FastJet itself (the optional dependency ``fastjet``:
``pip install "jaxhc[jets]"``; it prints its citation banner on stdout on first use);
`kt_tree_numpy` is the same algorithm in NumPy (``O(N^3)``), used to cross-check the
conversion of FastJet's clustering history and as a fallback.

**MAP comparison** (`compare_map_methods`, `table1`, `format_table1`): for a batch of jets,
the log likelihood ``log phi`` (Eq. 1 of the trellis paper) of the exact MAP tree of the
trellis (`jaxhc.trellis.solve_batch`), of greedy and beam search
(`jaxhc.trellis.greedy` / `beam`, Sec. 4.2) and of the kt family; ``log Z`` too. Table 1 of
the paper (Ginkgo510: 5000 jets of 5 to 10 leaves): Trellis - Beam ``0.4 +- 0.5``, Trellis -
Greedy ``1.5 +- 1.1``, Beam - Greedy ``1.1 +- 1.1``. `plot_log_z_vs_map` draws Fig. 5.

**Sparse trellis on jets** (`simulator_seed_trees`, `beam_seed_trees`, `map_rank_trees`,
`sparse_vs_sparsity`; Sec. 3.1, Fig. 7 and App. A.12 of the paper): a sparse trellis is
pre-built from "rank trees", hierarchies over leaf ranks where leaf ``r`` stands for the
``r``-th smallest 3-momentum norm ``|p|`` (`to_rank_tree`): the true trees of jets drawn
from the Ginkgo simulator ("Sim. trellis") or the beam-search trees of training jets ("BS
trellis"). On a test jet, rank ``r`` becomes its leaf with the ``r``-th smallest ``|p|``
(`map_rank_trees`) and `jaxhc.trellis.sparse_solve` gives the MAP over every hierarchy
the trellis realises. `sparse_vs_sparsity` traces the MAP (relative to greedy) against the
sparsity index ``num_trees / (2N-3)!!`` as the number of seed trees grows, with the exact
trellis and beam search as references (paper: with N = 9 both sparse trellises pass beam
search at a sparsity index of about 2% and approach the exact MAP, the BS trellis sooner).

Modules: `jaxhc.jets.kt` (generalized kt), `jaxhc.jets.studies` (MAP comparison), `jaxhc.jets.sparse_study` (the
sparse-trellis study), `jaxhc.jets.arrays` (jet arrays and momentum ranks shared by them);
every public name is re-exported here.
"""

from . import arrays, hep, kt, pythia, sparse_study, studies
from .arrays import map_rank_trees, momentum_order, to_rank_tree
from .hep import from_awkward, jets_from_awkward, to_awkward
from .kt import FASTJET_HINT, MAX_R, kt_tree, kt_tree_numpy
from .sparse_study import (
    OWN_BEAM,
    SPARSE_SIZES,
    SparseStudy,
    SparseStudyRow,
    beam_seed_trees,
    format_sparse_study,
    simulator_seed_trees,
    sparse_vs_sparsity,
)
from .studies import (
    METHODS,
    PAPER_TABLE1,
    MapComparison,
    Table1Row,
    compare_map_methods,
    format_table1,
    plot_log_z_vs_map,
    table1,
)

__all__ = [
    "FASTJET_HINT",
    "MAX_R",
    "METHODS",
    "PAPER_TABLE1",
    "MapComparison",
    "Table1Row",
    "compare_map_methods",
    "format_table1",
    "kt_tree",
    "kt_tree_numpy",
    "plot_log_z_vs_map",
    "table1",
    # sparse trellis on jets
    "OWN_BEAM",
    "SPARSE_SIZES",
    "SparseStudy",
    "SparseStudyRow",
    "beam_seed_trees",
    "format_sparse_study",
    "map_rank_trees",
    "momentum_order",
    "simulator_seed_trees",
    "sparse_vs_sparsity",
    "to_rank_tree",
    # awkward arrays in and out (the hep extra)
    "from_awkward",
    "jets_from_awkward",
    "to_awkward",
    # modules
    "arrays",
    "hep",
    "pythia",
    "kt",
    "sparse_study",
    "studies",
]
