"""The sparse trellis on jets (Sec. 3.1, Fig. 7 and App. A.12 of the trellis paper): seed
trees from the Ginkgo simulator or from beam search, and the MAP of the sparse trellis
against its sparsity index (`sparse_vs_sparsity`); see `jaxhc.jets.studies` for the MAP
comparison of Table 1."""

from __future__ import annotations

import math
import time
from typing import Dict, List, NamedTuple, Optional, Sequence

import numpy as np

from .._internal.deprecation import renamed_argument
from ..tree import Tree
from .arrays import jet_list, map_rank_trees, positive_int, to_rank_tree, tree_list
from .studies import progress_iter

__all__ = [
    "OWN_BEAM",
    "SPARSE_SIZES",
    "SparseStudy",
    "SparseStudyRow",
    "beam_seed_trees",
    "format_sparse_study",
    "simulator_seed_trees",
    "sparse_vs_sparsity",
]

# ------------------------------------------------------------------------------------------
# sparse trellis on jets (Sec. 3.1, Fig. 7 and App. A.12 of the trellis paper)
# ------------------------------------------------------------------------------------------
#: Value of a `sparse_vs_sparsity` ``seeds_by_method`` entry that seeds every test jet with
#: the final beam of its own beam search (`jaxhc.trellis.seed_trees_from_beam`).
OWN_BEAM = "own_beam"
#: Default numbers of seed trees of `sparse_vs_sparsity`.
SPARSE_SIZES = (1, 3, 10, 30, 100, 300, 1000)


def simulator_seed_trees(
    key, params, n_leaves: int, num_trees: int, *, chunk_size: int = 1024, max_draws: Optional[int] = None
) -> List[Tree]:
    """Rank trees of the "Simulator trellis" (Sec. 3.1 of the trellis paper): the true trees
    of ``num_trees`` jets drawn from the Ginkgo shower conditioned on exactly ``n_leaves``
    leaves (`jaxhc.models.ginkgo.simulate`), each relabelled by `to_rank_tree` (leaf ``r`` =
    the ``r``-th smallest ``|p|`` of its own jet).

    Args:
      key: PRNG key (the same key gives the same trees).
      params: `jaxhc.models.ginkgo.GinkgoParams` (None: its defaults, lam = 2, t_cut = 16,
        root mass 30; raise ``root_mass2`` for large ``n_leaves``, which are rare otherwise).
      n_leaves: leaves per tree (``>= 2``).
      num_trees: number of trees (``>= 1``).
      chunk_size, max_draws: passed to `simulate` (it raises ``ValueError`` when too few
        showers have ``n_leaves`` leaves).

    Returns:
      list of ``num_trees`` `Tree` over ``n_leaves`` leaves (duplicates possible: they are
      independent draws).
    """
    from ..models import ginkgo

    if params is None:
        params = ginkgo.GinkgoParams()
    if not isinstance(params, ginkgo.GinkgoParams):
        raise TypeError(f"params must be a GinkgoParams, got {type(params).__name__}")
    n = positive_int(n_leaves, "n_leaves", 2)
    num = positive_int(num_trees, "num_trees")
    jb = ginkgo.simulate(key, params, num, min_leaves=n, max_leaves=n, chunk_size=chunk_size, max_draws=max_draws)
    return [to_rank_tree(jb.trees[b], jb.jet(b)) for b in range(num)]


def beam_seed_trees(energy, train_leaves_list, beam_size: int, *, unique: bool = True) -> List[Tree]:
    """Rank trees of the "Beam Search trellis" (Sec. 3.1 of the trellis paper): the final beam
    of `jaxhc.trellis.beam` on every training jet, each tree relabelled by `to_rank_tree`.

    The trees are interleaved by beam position (the best tree of every training jet, then
    every second-best, ...), so the first ``k`` seeds spread over the training jets, and with
    ``unique=True`` a tree equal (as a hierarchy over ranks) to an earlier one is dropped.

    Args:
      energy: the `jaxhc.trellis.Energy` of the beam search (e.g. ``GinkgoEnergy``).
      train_leaves_list: training jets, all with the same number ``N >= 2`` of leaves: a list
        of ``[N, 4]`` arrays or a `jaxhc.models.ginkgo.JetBatch`.
      beam_size: beam size (``>= 1``; the paper uses ``N (N - 1) / 2``).
      unique: drop repeated hierarchies.

    Returns:
      list of `Tree` over ``N`` leaves (at most ``beam_size`` per training jet).
    """
    from .. import trellis
    from ..trellis.energies import Energy

    if not isinstance(energy, Energy):
        raise TypeError(f"energy must be a jaxhc.trellis Energy, got {type(energy).__name__}")
    jets = jet_list(train_leaves_list, "train_leaves_list")
    beam_size = positive_int(beam_size, "beam_size")
    sizes = {len(j) for j in jets}
    if len(sizes) != 1:
        raise ValueError(
            f"train_leaves_list: every training jet must have the same number of leaves, got {sorted(sizes)}"
        )
    if sizes.pop() < 2:
        raise ValueError("train_leaves_list: jets need at least 2 leaves")
    per_jet = []
    for b, lv in enumerate(jets):
        energy.validate_leaves(lv, name=f"train_leaves_list[{b}]")
        per_jet.append([to_rank_tree(t, lv) for t in trellis.beam(energy, lv, beam_size).trees])
    out, seen = [], set()
    for pos in range(max(len(t) for t in per_jet)):
        for trees in per_jet:
            if pos >= len(trees):
                continue
            t = trees[pos]
            if unique:
                key = frozenset(int(m) for m in t.bitmasks()) if t.n_leaves <= 62 else frozenset(t.clusters())
                if key in seen:
                    continue
                seen.add(key)
            out.append(t)
    return out


class SparseStudyRow(NamedTuple):
    """One row of `sparse_vs_sparsity` (one point of Fig. 7 of the trellis paper).

    Fields:
      method: the ``seeds_by_method`` name, or ``"exact"``, ``"beam"``, ``"greedy"`` for the
        reference rows.
      num_seeds: seed trees per test jet (None for the reference rows).
      mean_delta, std_delta: mean and sample std over the test jets of the MAP ``log phi``
        minus greedy's (over the ``n_finite`` jets where both are finite).
      n_finite: jets in the mean (a sparse trellis whose every realised tree has a forbidden
        split has MAP ``-inf``; such jets are counted here, not averaged).
      frac_exact: fraction of the jets where the MAP equals the exact MAP (None without exact).
      mean_sparsity: mean sparsity index ``num_trees / (2N-3)!!`` (the paper's "sparsity
        index", Sec. 3: the fraction of all hierarchies the trellis realises); 1 for exact.
      mean_vertex_fraction: mean ``vertices / (2^N - 1)`` (vertices of the full trellis).
      mean_vertices, mean_splits: mean vertices and edges of the sparse trellis.
      seconds_per_jet: wall time per jet (sparse: `sparse_solve` including building the
        trellis, the seeds' mapping or own beam search, and any JIT compilation; references:
        their own solve, the exact one with its compilation).
    """

    method: str
    num_seeds: Optional[int]
    mean_delta: float
    std_delta: float
    n_finite: int
    frac_exact: Optional[float]
    mean_sparsity: float
    mean_vertex_fraction: float
    mean_vertices: float
    mean_splits: float
    seconds_per_jet: float


class SparseStudy(NamedTuple):
    """Output of `sparse_vs_sparsity`.

    Fields:
      rows: list of `SparseStudyRow` (every method at every seed count, then the references).
      n_leaves: ``[J]`` leaves of each test jet.
      greedy_log_phi, beam_log_phi: ``[J]`` log phi of greedy's and beam search's tree.
      exact_log_phi: ``[J]`` exact MAP log phi (None when some jet has more than
        ``exact_max_leaves`` leaves).
      sparse_log_phi: ``{(method, num_seeds): [J]}`` sparse-trellis MAP log phi.
      sparsity: ``{(method, num_seeds): [J]}`` sparsity index per jet.
      beam_size: beam size of the beam reference row (None: ``N (N - 1) / 2`` per jet).
    """

    rows: list
    n_leaves: np.ndarray
    greedy_log_phi: np.ndarray
    beam_log_phi: np.ndarray
    exact_log_phi: Optional[np.ndarray]
    sparse_log_phi: dict
    sparsity: dict
    beam_size: Optional[int]


def _seed_source(name, src, ns) -> object:
    """Validated ``seeds_by_method`` entry: OWN_BEAM or ``{n: [rank trees]}``."""
    if isinstance(src, str):
        if src != OWN_BEAM:
            raise ValueError(f"seeds_by_method[{name!r}]: the only string value is {OWN_BEAM!r}, got {src!r}")
        return OWN_BEAM
    if isinstance(src, dict):
        by_n = {}
        for n, trees in src.items():
            trees = tree_list(trees, f"seeds_by_method[{name!r}][{n!r}]")
            if not trees:
                raise ValueError(f"seeds_by_method[{name!r}][{n!r}] is empty")
            by_n[int(n)] = trees
    else:
        trees = tree_list(src, f"seeds_by_method[{name!r}]")
        if not trees:
            raise ValueError(f"seeds_by_method[{name!r}] holds no trees")
        by_n = {trees[0].n_leaves: trees}
    for n, trees in by_n.items():
        bad = [k for k, t in enumerate(trees) if t.n_leaves != n]
        if bad:
            raise ValueError(f"seeds_by_method[{name!r}]: trees {bad[:5]} do not have {n} leaves like the first")
    missing = sorted(set(ns) - set(by_n))
    if missing:
        raise ValueError(
            f"seeds_by_method[{name!r}] has rank trees over {sorted(by_n)} leaves but test jets have "
            f"{missing} leaves (give a dict {{n_leaves: rank trees}})"
        )
    return by_n


def _mean_std(d):
    d = d[np.isfinite(d)]
    mean = float(d.mean()) if d.size else float("nan")
    std = float(d.std(ddof=1)) if d.size > 1 else float("nan")
    return mean, std, int(d.size)


def sparse_vs_sparsity(
    energy,
    test_leaves_list,
    seeds_by_method: Dict[str, object],
    sizes: Sequence[int] = SPARSE_SIZES,
    *,
    beam_size: Optional[int] = None,
    exact_max_leaves: int = 14,
    progress_bar: bool = False,
    progress: Optional[bool] = None,
) -> SparseStudy:
    """MAP log likelihood of sparse trellises against their sparsity (Fig. 7 and App. A.12,
    Fig. 11-12, of the trellis paper), relative to greedy, with the exact trellis and beam
    search as references.

    For every method and every ``k`` in ``sizes``, each test jet gets a sparse trellis
    (`jaxhc.trellis.sparse_solve`) seeded with the first ``k`` seed trees of the method
    (rank trees mapped onto the jet by `map_rank_trees`, so the trellis is pre-built on
    other jets and run on the test jet, as in the paper); the row holds the mean over the
    jets of its MAP ``log phi`` minus greedy's and the mean sparsity index. A ``k`` above
    the number of seeds available uses them all (rows with the same effective count are
    merged). With `OWN_BEAM`, ``k`` is the beam size of the test jet's own beam search and
    its final beam (up to ``k`` distinct trees) seeds the trellis; ``k = 1`` is greedy's tree.

    Args:
      energy: a `jaxhc.trellis.Energy` over four-momenta (e.g. ``GinkgoEnergy``).
      test_leaves_list: the test jets: a list of ``[N_b, 4]`` arrays or a `JetBatch`.
      seeds_by_method: ``{name: seeds}``, ``seeds`` one of: a list of rank trees (all over
        the test jets' ``N``; e.g. `simulator_seed_trees`, `beam_seed_trees`); a dict
        ``{N: list of rank trees}`` for test jets of several sizes; or `OWN_BEAM` (the final
        beam of each test jet's own beam search with beam size ``k``,
        `jaxhc.trellis.seed_trees_from_beam`: not pre-built, a per-jet sparse trellis).
      sizes: increasing numbers of seed trees per jet (positive integers).
      beam_size: beam size of the beam-search reference row (default ``N (N - 1) / 2``, the
        paper's choice).
      exact_max_leaves: the exact trellis row (`jaxhc.trellis.solve_batch`) is computed when
        every test jet has at most this many leaves; otherwise it is left out.
      progress_bar: a tqdm bar over the test jets.
      progress: deprecated spelling of ``progress_bar`` (DeprecationWarning).

    Returns:
      `SparseStudy`.
    """
    progress_bar = renamed_argument(
        progress_bar, progress, old="progress", new="progress_bar", where="sparse_vs_sparsity"
    )
    from .. import trellis
    from ..trellis.energies import Energy
    from ..trellis.sparse import double_factorial

    if not isinstance(energy, Energy):
        raise TypeError(f"energy must be a jaxhc.trellis Energy, got {type(energy).__name__}")
    jets = jet_list(test_leaves_list, "test_leaves_list")
    jets = [energy.validate_leaves(j, name=f"test_leaves_list[{b}]") for b, j in enumerate(jets)]
    if not isinstance(seeds_by_method, dict) or not seeds_by_method:
        raise ValueError("seeds_by_method must be a non-empty dict {name: seeds}")
    try:
        sizes = [int(s) for s in sizes]
    except TypeError:
        raise ValueError(f"sizes must be a sequence of positive integers, got {sizes!r}") from None
    if not sizes or any(s < 1 for s in sizes) or sorted(set(sizes)) != sizes:
        raise ValueError(f"sizes must be strictly increasing positive integers, got {sizes}")
    if beam_size is not None:
        beam_size = positive_int(beam_size, "beam_size")
    exact_max_leaves = positive_int(exact_max_leaves, "exact_max_leaves")
    nl = np.array([len(j) for j in jets], np.int64)
    if np.any(nl < 2):
        raise ValueError("test_leaves_list: every test jet needs at least 2 leaves")
    reserved = {"exact", "beam", "greedy"}
    for name in seeds_by_method:
        if not isinstance(name, str) or name in reserved:
            raise ValueError(f"seeds_by_method: names must be strings other than {sorted(reserved)}, got {name!r}")
    sources = {name: _seed_source(name, src, set(nl.tolist())) for name, src in seeds_by_method.items()}
    J = len(jets)

    # references: greedy, beam, exact
    t0 = time.perf_counter()
    greedy = np.array([trellis.greedy(energy, j).log_phi for j in jets], np.float64)
    t_greedy = (time.perf_counter() - t0) / J
    t0 = time.perf_counter()
    beam_lp = np.array(
        [trellis.beam(energy, j, beam_size or max(1, len(j) * (len(j) - 1) // 2)).log_phi for j in jets], np.float64
    )
    t_beam = (time.perf_counter() - t0) / J
    exact = None
    if nl.max() <= exact_max_leaves:
        lp = np.zeros((J, int(nl.max()), 4))
        for b, j in enumerate(jets):
            lp[b, : len(j)] = j
        t0 = time.perf_counter()
        exact = np.asarray(trellis.solve_batch(energy, lp, nl).map_log_phi, np.float64)
        t_exact = (time.perf_counter() - t0) / J

    # the effective seed counts per method (a count above what is available uses them all)
    counts = {}
    for name, src in sources.items():
        if src == OWN_BEAM:
            counts[name] = list(sizes)
        else:
            avail = min(len(v) for v in src.values())
            counts[name] = sorted({min(s, avail) for s in sizes})
    sparse_lp = {(m, k): np.full(J, -np.inf) for m in sources for k in counts[m]}
    sparsity = {(m, k): np.zeros(J) for m in sources for k in counts[m]}
    vfrac = {(m, k): np.zeros(J) for m in sources for k in counts[m]}
    verts = {(m, k): np.zeros(J) for m in sources for k in counts[m]}
    splits = {(m, k): np.zeros(J) for m in sources for k in counts[m]}
    secs = {(m, k): 0.0 for m in sources for k in counts[m]}
    for b in progress_iter(range(J), J, "sparse trellis", progress_bar):
        lv, n = jets[b], int(nl[b])
        for m, src in sources.items():
            t0 = time.perf_counter()
            seeds = None if src == OWN_BEAM else map_rank_trees(src[n][: max(counts[m])], lv)
            t_seed = time.perf_counter() - t0
            for k in counts[m]:
                t0 = time.perf_counter()
                own = trellis.seed_trees_from_beam(energy, lv, k) if seeds is None else seeds[:k]
                sol = trellis.sparse_solve(energy, lv, own)
                secs[(m, k)] += time.perf_counter() - t0 + t_seed / len(counts[m])
                sparse_lp[(m, k)][b] = float(sol.map_log_phi)
                sparsity[(m, k)][b] = sol.num_trees / double_factorial(2 * n - 3)
                verts[(m, k)][b] = len(sol.clusters)
                vfrac[(m, k)][b] = len(sol.clusters) / (2.0**n - 1.0)
                splits[(m, k)][b] = sol.num_splits

    def frac_exact(v):
        if exact is None:
            return None
        return float(np.mean(np.isclose(v, exact, rtol=1e-9, atol=1e-9) | (np.isneginf(v) & np.isneginf(exact))))

    rows = []
    for m in sources:
        for k in counts[m]:
            key = (m, k)
            mean, std, nf = _mean_std(sparse_lp[key] - greedy)
            rows.append(
                SparseStudyRow(
                    m,
                    k,
                    mean,
                    std,
                    nf,
                    frac_exact(sparse_lp[key]),
                    float(sparsity[key].mean()),
                    float(vfrac[key].mean()),
                    float(verts[key].mean()),
                    float(splits[key].mean()),
                    secs[key] / J,
                )
            )
    full_splits = float(np.mean([trellis.num_splits(int(n)) for n in nl]))
    if exact is not None:
        mean, std, nf = _mean_std(exact - greedy)
        rows.append(
            SparseStudyRow(
                "exact", None, mean, std, nf, 1.0, 1.0, 1.0, float(np.mean(2.0**nl - 1)), full_splits, t_exact
            )
        )
    mean, std, nf = _mean_std(beam_lp - greedy)
    rows.append(
        SparseStudyRow(
            "beam",
            None,
            mean,
            std,
            nf,
            frac_exact(beam_lp),
            float("nan"),
            float("nan"),
            float("nan"),
            float("nan"),
            t_beam,
        )
    )
    rows.append(
        SparseStudyRow(
            "greedy",
            None,
            0.0,
            0.0,
            int(np.isfinite(greedy).sum()),
            frac_exact(greedy),
            float("nan"),
            float("nan"),
            float("nan"),
            float("nan"),
            t_greedy,
        )
    )
    return SparseStudy(rows, nl, greedy, beam_lp, exact, sparse_lp, sparsity, beam_size)


def format_sparse_study(study) -> str:
    """Markdown table of a `sparse_vs_sparsity` result (the numbers behind Fig. 7)."""
    rows = study.rows if isinstance(study, SparseStudy) else list(study)

    def num(x, fmt):
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)

    lines = [
        "| method | seeds / jet | MAP - greedy (mean +- std) | jets finite | finds exact MAP | sparsity index "
        "(trees / (2N-3)!!) | vertices / (2^N-1) | vertices | splits | ms / jet |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ms = "n/a" if math.isnan(r.mean_delta) else f"{r.mean_delta:.2f} +- {num(r.std_delta, '.2f')}"
        fe = "" if r.frac_exact is None else f"{100 * r.frac_exact:.0f}%"
        lines.append(
            f"| {r.method} | {'' if r.num_seeds is None else r.num_seeds} | {ms} | {r.n_finite} | {fe} "
            f"| {num(r.mean_sparsity, '.3g')} | {num(r.mean_vertex_fraction, '.3f')} "
            f"| {num(r.mean_vertices, '.0f')} | {num(r.mean_splits, '.0f')} "
            f"| {1e3 * r.seconds_per_jet:.1f} |"
        )
    return "\n".join(lines)
