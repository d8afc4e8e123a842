"""Jet studies of the trellis paper: the MAP comparison of exact trellis, beam search, greedy
and the kt family (Table 1 and Fig. 5) and the sparse trellis on jets (Fig. 7).

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
"""
from __future__ import annotations

import math
import time
from typing import Dict, List, NamedTuple, Optional, Sequence

import numpy as np

from .._internal.deprecation import renamed_argument
from .._internal.progress import Progress
from ..tree import Tree
from .arrays import jet_list, map_rank_trees, positive_int, to_rank_tree, tree_list
from .kt import fastjet_interface, kt_tree, kt_tree_numpy

__all__ = [
    "METHODS",
    "MapComparison",
    "Table1Row",
    "compare_map_methods",
    "format_table1",
    "plot_log_z_vs_map",
    "table1",
    # sparse trellis on jets
    "OWN_BEAM",
    "SPARSE_SIZES",
    "SparseStudy",
    "SparseStudyRow",
    "beam_seed_trees",
    "format_sparse_study",
    "simulator_seed_trees",
    "sparse_vs_sparsity",
]

#: Methods of `compare_map_methods`; the kt family maps to ``p`` below.
METHODS = ("trellis", "beam", "greedy", "kt", "ca", "antikt")
_KT_P = {"kt": 1.0, "ca": 0.0, "antikt": -1.0}
_LABEL = {"trellis": "Trellis", "beam": "Beam", "greedy": "Greedy", "kt": "kt", "ca": "C/A",
          "antikt": "anti-kt"}
#: Table 1 of the trellis paper (Ginkgo510), mean and std of the log-likelihood differences.
PAPER_TABLE1 = {("trellis", "beam"): (0.4, 0.5), ("trellis", "greedy"): (1.5, 1.1),
                ("beam", "greedy"): (1.1, 1.1)}


# ------------------------------------------------------------------------------------------
# MAP comparison (Table 1 and Fig. 5 of the trellis paper)
# ------------------------------------------------------------------------------------------
class MapComparison(NamedTuple):
    """Output of `compare_map_methods` for a batch of ``B`` jets.

    Fields:
      methods: the methods run, in order.
      n_leaves: ``[B]`` int, leaves of each jet.
      log_phi: ``{method: [B] float64}`` log likelihood ``log phi`` of each method's tree under
        the energy (``-inf`` for a tree with a forbidden split); the same scorer for every
        method.
      trees: ``{method: list of B Trees}``.
      log_z: ``[B]`` log partition function over all trees (None without ``"trellis"``).
      map_log_phi: ``[B]`` the trellis's exact MAP ``log phi`` from its dynamic program (None
        without ``"trellis"``); equal to ``log_phi["trellis"]`` up to rounding.
      seconds: ``{method: wall seconds for the batch}`` (the trellis's includes its JIT
        compilation, one program per distinct jet size; greedy and beam include theirs).
      beam_sizes: ``[B]`` beam size used per jet (None without ``"beam"``).
      kt_backend: ``"fastjet"`` or ``"numpy"`` (None without a kt method).
      num_splits: total split evaluations of the exact trellis over the batch.
    """

    methods: tuple
    n_leaves: np.ndarray
    log_phi: Dict[str, np.ndarray]
    trees: Dict[str, list]
    log_z: Optional[np.ndarray]
    map_log_phi: Optional[np.ndarray]
    seconds: Dict[str, float]
    beam_sizes: Optional[np.ndarray]
    kt_backend: Optional[str]
    num_splits: int


def _score_trees(energy, leaves_padded, n_leaves, trees) -> np.ndarray:
    """``log phi`` of ``trees[b]`` over the leaves of jet ``b``, all jets in one jitted call.

    Inner nodes are padded to ``N_max - 1`` rows per jet; padded rows are masked out.
    """
    import jax
    import jax.numpy as jnp

    B, n_max = leaves_padded.shape[:2]
    m = max(n_max - 1, 1)
    par = np.zeros((B, m, n_max))
    lef = np.zeros((B, m, n_max))
    rig = np.zeros((B, m, n_max))
    valid = np.zeros((B, m), bool)
    for b, tree in enumerate(trees):
        n = int(n_leaves[b])
        if n == 1:
            continue
        sets = tree.leaf_sets().astype(np.float64)
        ch = np.asarray(tree.children)
        par[b, : n - 1, :n] = sets[n:]
        lef[b, : n - 1, :n] = sets[ch[:, 0]]
        rig[b, : n - 1, :n] = sets[ch[:, 1]]
        valid[b, : n - 1] = True
    out = _score_core(energy, jnp.asarray(leaves_padded), jnp.asarray(par), jnp.asarray(lef),
                      jnp.asarray(rig), jnp.asarray(valid))
    return np.asarray(jax.device_get(out), np.float64)


def _score_core_impl(energy, leaves, par, lef, rig, valid):
    import jax
    import jax.numpy as jnp

    def one(lv, P, L, R, ok):
        f = lambda M: energy.subset_features(lv, M)  # noqa: E731
        lp = energy.log_psi(f(P), f(L), f(R))
        return jnp.sum(jnp.where(ok, lp, 0.0))

    return jax.vmap(one)(leaves, par, lef, rig, valid)


_SCORE_JIT = None


def _score_core(*args):
    global _SCORE_JIT
    if _SCORE_JIT is None:
        import jax

        _SCORE_JIT = jax.jit(_score_core_impl)
    return _SCORE_JIT(*args)


def _progress(iterable, total, desc, enabled):
    """``iterable`` with a tqdm bar on stderr (closed at the end of the loop) when ``enabled``."""
    if not enabled:
        return iterable
    return _with_bar(iterable, total, desc)


def _with_bar(iterable, total, desc):
    with Progress(total, desc, leave=False) as bar:
        for x in iterable:
            yield x
            bar.update(1)


def _check_methods(methods) -> tuple:
    if isinstance(methods, str):
        methods = (methods,)
    methods = tuple(methods)
    if not methods:
        raise ValueError("methods must name at least one method")
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise ValueError(f"methods: unknown {bad}; choose from {list(METHODS)}")
    if len(set(methods)) != len(methods):
        raise ValueError(f"methods has duplicates: {list(methods)}")
    return methods


def _kt_backend(kt_backend: str) -> str:
    if kt_backend not in ("auto", "fastjet", "numpy"):
        raise ValueError(f"kt_backend must be 'auto', 'fastjet' or 'numpy', got {kt_backend!r}")
    if kt_backend == "auto":
        try:
            fastjet_interface()
            return "fastjet"
        except ImportError:
            return "numpy"
    if kt_backend == "fastjet":
        fastjet_interface()
    return kt_backend


def compare_map_methods(energy, leaves_padded, n_leaves, *, methods: Sequence[str] = METHODS,
                        beam_size: Optional[int] = None, kt_backend: str = "auto",
                        progress_bar: bool = True, progress: Optional[bool] = None) -> MapComparison:
    """Log likelihood of the MAP tree of every method on a batch of jets (Table 1 of the
    trellis paper, plus the kt family).

    ``"trellis"``: the exact MAP tree and ``log Z`` (`jaxhc.trellis.solve_batch`,
    `map_trees`). ``"greedy"`` and ``"beam"``: `jaxhc.trellis.greedy` and `beam` under
    ``energy``. ``"kt"``, ``"ca"``, ``"antikt"``: `kt_tree` with ``p = 1, 0, -1`` (default ee
    variant), which knows nothing of the energy. Every tree is scored by the same jitted
    ``log phi`` (Eq. 1 of the paper), so the values are comparable; the trellis's is an upper
    bound for all others.

    Args:
      energy: a `jaxhc.trellis.Energy` (for the kt family: four-momentum leaves, e.g.
        `jaxhc.trellis.GinkgoEnergy`).
      leaves_padded: ``[B, N_max, 4]`` four-momenta, jet ``b`` in its first ``n_leaves[b]``
        rows (the padding rows are ignored; any values).
      n_leaves: ``[B]`` int, leaves per jet, in ``[1, N_max]``.
      methods: any of `METHODS`, in the order to run them.
      beam_size: beam size of ``"beam"``; default ``N (N - 1) / 2`` for a jet of ``N`` leaves
        (the paper's choice; at least 1).
      kt_backend: ``"fastjet"`` (`kt_tree`), ``"numpy"`` (`kt_tree_numpy`), or ``"auto"``
        (FastJet when installed).
      progress_bar: tqdm bars on stderr for the per-jet loops.
      progress: deprecated spelling of ``progress_bar`` (DeprecationWarning).

    Returns:
      `MapComparison`.
    """
    progress_bar = renamed_argument(progress_bar, progress, old="progress", new="progress_bar",
                                    where="compare_map_methods")
    from .. import trellis
    from ..trellis.energies import Energy

    if not isinstance(energy, Energy):
        raise TypeError(f"energy must be a jaxhc.trellis Energy, got {type(energy).__name__}")
    methods = _check_methods(methods)
    lp = np.asarray(leaves_padded, dtype=np.float64)
    if lp.ndim < 2 or lp.shape[0] == 0:
        raise ValueError(f"leaves_padded must be [B, N_max, ...] with B >= 1, got shape {lp.shape}")
    nl = np.asarray(n_leaves)
    if nl.shape != (lp.shape[0],) or not np.issubdtype(nl.dtype, np.integer):
        raise ValueError(f"n_leaves must be an integer array [B={lp.shape[0]}], got shape {nl.shape} "
                         f"dtype {nl.dtype}")
    n_max = lp.shape[1]
    if np.any(nl < 1) or np.any(nl > n_max):
        raise ValueError(f"n_leaves must be in [1, N_max={n_max}], got {nl.min()}..{nl.max()}")
    kt_methods = [m for m in methods if m in _KT_P]
    if kt_methods and (lp.ndim != 3 or lp.shape[2] != 4):
        raise ValueError(f"leaves_padded must be four-momenta [B, N_max, 4] for {kt_methods}, got shape {lp.shape}")
    if beam_size is not None:
        if isinstance(beam_size, (bool, np.bool_)) or not isinstance(beam_size, (int, np.integer)) or beam_size < 1:
            raise ValueError(f"beam_size must be a positive integer or None, got {beam_size!r}")
    backend = _kt_backend(kt_backend) if kt_methods else None
    B = lp.shape[0]
    jets = [energy.validate_leaves(energy.crop_leaves(lp[b], int(nl[b])), name=f"leaves_padded[{b}]")
            for b in range(B)]
    # padding rows are zeroed so that no value there can reach the scorer's features
    lp0 = np.zeros_like(lp)
    for b in range(B):
        lp0[b, : nl[b]] = jets[b]

    trees: Dict[str, list] = {}
    seconds: Dict[str, float] = {}
    log_z = map_lp = beam_sizes = None
    for m in methods:
        t0 = time.perf_counter()
        if m == "trellis":
            sols = trellis.solve_batch(energy, lp0, nl)
            log_z = np.asarray(sols.log_z, np.float64)
            map_lp = np.asarray(sols.map_log_phi, np.float64)
            trees[m] = trellis.map_trees(sols)
        elif m in ("greedy", "beam"):
            if m == "beam":
                beam_sizes = np.array([beam_size or max(1, int(n) * (int(n) - 1) // 2) for n in nl])
            out = []
            for b in _progress(range(B), B, m, progress_bar):
                res = (trellis.greedy(energy, jets[b]) if m == "greedy"
                       else trellis.beam(energy, jets[b], int(beam_sizes[b])))
                out.append(res.tree)
            trees[m] = out
        else:
            fn = kt_tree if backend == "fastjet" else kt_tree_numpy
            trees[m] = [fn(jets[b], _KT_P[m]) for b in _progress(range(B), B, m, progress_bar)]
        seconds[m] = time.perf_counter() - t0
    log_phi = {m: _score_trees(energy, lp0, nl, trees[m]) for m in methods}
    splits = int(sum(trellis.num_splits(int(n)) for n in nl))
    return MapComparison(methods, nl.astype(np.int64), log_phi, trees, log_z, map_lp, seconds, beam_sizes,
                         backend, splits)


class Table1Row(NamedTuple):
    """One row of `table1`: the difference ``log phi(a) - log phi(b)`` over the jets.

    Fields:
      label: e.g. ``"Trellis - Beam"``; a, b: the two methods.
      mean, std: mean and sample standard deviation (``ddof=1``; NaN below 2 jets) over the
        ``n_used`` jets where both trees have finite ``log phi``.
      n_used: jets in the mean; n_nonfinite: jets left out (a tree with ``log phi = -inf``,
        a forbidden split; ``n_used + n_nonfinite = B``).
      frac_exact: for ``a = "trellis"``, the fraction of all jets where ``b`` reaches the exact
        MAP value (``np.isclose(..., rtol=1e-9, atol=1e-9)``); None otherwise.
      paper: ``(mean, std)`` of Table 1 of the trellis paper (Ginkgo510) or None.
    """

    label: str
    a: str
    b: str
    mean: float
    std: float
    n_used: int
    n_nonfinite: int
    frac_exact: Optional[float]
    paper: Optional[tuple]


_PAIRS = [("trellis", "beam"), ("trellis", "greedy"), ("beam", "greedy"), ("trellis", "kt"),
          ("trellis", "ca"), ("trellis", "antikt")]


def table1(result: MapComparison) -> List[Table1Row]:
    """Table 1 of the trellis paper from a `compare_map_methods` result: mean +- std of the
    log-likelihood differences Trellis - Beam, Trellis - Greedy, Beam - Greedy and Trellis -
    kt / C/A / anti-kt (the rows whose two methods were run), each over the jets where both
    likelihoods are finite, with the number of jets left out and, for Trellis - X, the
    fraction of jets where X finds the exact MAP.

    Returns:
      list of `Table1Row`.
    """
    if not isinstance(result, MapComparison):
        raise TypeError(f"result must be a MapComparison (from compare_map_methods), got {type(result).__name__}")
    rows = []
    for a, b in _PAIRS:
        if a not in result.log_phi or b not in result.log_phi:
            continue
        la, lb = np.asarray(result.log_phi[a]), np.asarray(result.log_phi[b])
        ok = np.isfinite(la) & np.isfinite(lb)
        d = la[ok] - lb[ok]
        mean = float(d.mean()) if d.size else float("nan")
        std = float(d.std(ddof=1)) if d.size > 1 else float("nan")
        frac = None
        if a == "trellis":
            hit = np.isclose(lb, la, rtol=1e-9, atol=1e-9) | (np.isneginf(la) & np.isneginf(lb))
            frac = float(np.mean(hit))
        rows.append(Table1Row(f"{_LABEL[a]} - {_LABEL[b]}", a, b, mean, std, int(ok.sum()), int((~ok).sum()),
                              frac, PAPER_TABLE1.get((a, b))))
    return rows


def format_table1(rows) -> str:
    """Markdown table of `table1` rows (or of a `MapComparison`), with the paper's numbers."""
    if isinstance(rows, MapComparison):
        rows = table1(rows)
    lines = ["| log-likelihood difference | mean +- std | jets used | left out (-inf) | finds exact MAP "
             "| paper (Ginkgo510) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        ms = "n/a" if math.isnan(r.mean) else (f"{r.mean:.2f} +- {r.std:.2f}" if not math.isnan(r.std)
                                              else f"{r.mean:.2f}")
        frac = "" if r.frac_exact is None else f"{_LABEL[r.b]}: {100 * r.frac_exact:.1f}%"
        paper = "" if r.paper is None else f"{r.paper[0]} +- {r.paper[1]}"
        lines.append(f"| {r.label} | {ms} | {r.n_used} | {r.n_nonfinite} | {frac} | {paper} |")
    lines.append("")
    lines.append("Differences of log p(tree | leaves) = log phi (nats), mean and sample std over the jets where "
                 "both trees have a finite likelihood; trees with a forbidden split (e.g. t_P < t_cut, common "
                 "for the kt family, which ignores the likelihood) have likelihood 0 and are left out. Paper: "
                 "Table 1 of the trellis paper (Ginkgo510: 5000 jets, 5-10 leaves).")
    return "\n".join(lines)


def plot_log_z_vs_map(result: MapComparison, ax=None):
    """Scatter of ``log Z`` against the MAP ``log phi`` per jet, coloured by the number of
    leaves (Fig. 5 of the trellis paper); returns the matplotlib ``Axes``."""
    if not isinstance(result, MapComparison) or result.log_z is None:
        raise ValueError("result must be a MapComparison that includes the 'trellis' method")
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 4.5))
    from matplotlib.colors import BoundaryNorm

    x, y = result.map_log_phi, result.log_z
    ok = np.isfinite(x) & np.isfinite(y)
    sizes = np.unique(result.n_leaves)
    cmap = plt.get_cmap("viridis", len(sizes))
    norm = BoundaryNorm(np.append(sizes - 0.5, sizes[-1] + 0.5), len(sizes))  # one colour per size
    sc = ax.scatter(x[ok], y[ok], c=result.n_leaves[ok], cmap=cmap, norm=norm, s=10, alpha=0.8)
    lo, hi = (float(min(x[ok].min(), y[ok].min())), float(max(x[ok].max(), y[ok].max()))) if ok.any() else (0, 1)
    ax.plot([lo, hi], [lo, hi], color="0.5", lw=0.8, ls="--", label="log Z = MAP")
    ax.figure.colorbar(sc, ax=ax, label="number of leaves", ticks=sizes)
    ax.set_xlabel("MAP log likelihood (exact trellis)")
    ax.set_ylabel("log Z (all trees)")
    ax.set_title(f"{int(ok.sum())} jets: partition function vs MAP", fontsize=10)
    ax.legend(loc="upper left", fontsize=8)
    return ax



# ------------------------------------------------------------------------------------------
# sparse trellis on jets (Sec. 3.1, Fig. 7 and App. A.12 of the trellis paper)
# ------------------------------------------------------------------------------------------
#: Value of a `sparse_vs_sparsity` ``seeds_by_method`` entry that seeds every test jet with
#: the final beam of its own beam search (`jaxhc.trellis.seed_trees_from_beam`).
OWN_BEAM = "own_beam"
#: Default numbers of seed trees of `sparse_vs_sparsity`.
SPARSE_SIZES = (1, 3, 10, 30, 100, 300, 1000)



def simulator_seed_trees(key, params, n_leaves: int, num_trees: int, *,
                         chunk_size: int = 1024, max_draws: Optional[int] = None) -> List[Tree]:
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
    jb = ginkgo.simulate(key, params, num, min_leaves=n, max_leaves=n, chunk_size=chunk_size,
                         max_draws=max_draws)
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
        raise ValueError(f"train_leaves_list: every training jet must have the same number of leaves, got {sorted(sizes)}")
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
        raise ValueError(f"seeds_by_method[{name!r}] has rank trees over {sorted(by_n)} leaves but test jets have "
                         f"{missing} leaves (give a dict {{n_leaves: rank trees}})")
    return by_n


def _mean_std(d):
    d = d[np.isfinite(d)]
    mean = float(d.mean()) if d.size else float("nan")
    std = float(d.std(ddof=1)) if d.size > 1 else float("nan")
    return mean, std, int(d.size)


def sparse_vs_sparsity(energy, test_leaves_list, seeds_by_method: Dict[str, object],
                       sizes: Sequence[int] = SPARSE_SIZES, *, beam_size: Optional[int] = None,
                       exact_max_leaves: int = 14, progress_bar: bool = False,
                       progress: Optional[bool] = None) -> SparseStudy:
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
    progress_bar = renamed_argument(progress_bar, progress, old="progress", new="progress_bar",
                                    where="sparse_vs_sparsity")
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
    beam_lp = np.array([trellis.beam(energy, j, beam_size or max(1, len(j) * (len(j) - 1) // 2)).log_phi
                        for j in jets], np.float64)
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
    for b in _progress(range(J), J, "sparse trellis", progress_bar):
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
            rows.append(SparseStudyRow(m, k, mean, std, nf, frac_exact(sparse_lp[key]), float(sparsity[key].mean()),
                                       float(vfrac[key].mean()), float(verts[key].mean()), float(splits[key].mean()),
                                       secs[key] / J))
    full_splits = float(np.mean([trellis.num_splits(int(n)) for n in nl]))
    if exact is not None:
        mean, std, nf = _mean_std(exact - greedy)
        rows.append(SparseStudyRow("exact", None, mean, std, nf, 1.0, 1.0, 1.0, float(np.mean(2.0**nl - 1)),
                                   full_splits, t_exact))
    mean, std, nf = _mean_std(beam_lp - greedy)
    rows.append(SparseStudyRow("beam", None, mean, std, nf, frac_exact(beam_lp), float("nan"), float("nan"),
                               float("nan"), float("nan"), t_beam))
    rows.append(SparseStudyRow("greedy", None, 0.0, 0.0, int(np.isfinite(greedy).sum()), frac_exact(greedy),
                               float("nan"), float("nan"), float("nan"), float("nan"), t_greedy))
    return SparseStudy(rows, nl, greedy, beam_lp, exact, sparse_lp, sparsity, beam_size)


def format_sparse_study(study) -> str:
    """Markdown table of a `sparse_vs_sparsity` result (the numbers behind Fig. 7)."""
    rows = study.rows if isinstance(study, SparseStudy) else list(study)

    def num(x, fmt):
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)

    lines = ["| method | seeds / jet | MAP - greedy (mean +- std) | jets finite | finds exact MAP | sparsity index "
             "(trees / (2N-3)!!) | vertices / (2^N-1) | vertices | splits | ms / jet |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ms = "n/a" if math.isnan(r.mean_delta) else f"{r.mean_delta:.2f} +- {num(r.std_delta, '.2f')}"
        fe = "" if r.frac_exact is None else f"{100 * r.frac_exact:.0f}%"
        lines.append(f"| {r.method} | {'' if r.num_seeds is None else r.num_seeds} | {ms} | {r.n_finite} | {fe} "
                     f"| {num(r.mean_sparsity, '.3g')} | {num(r.mean_vertex_fraction, '.3f')} "
                     f"| {num(r.mean_vertices, '.0f')} | {num(r.mean_splits, '.0f')} "
                     f"| {1e3 * r.seconds_per_jet:.1f} |")
    return "\n".join(lines)
