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
from .kt import fastjet_interface, kt_tree, kt_tree_numpy

__all__ = [
    "METHODS",
    "MapComparison",
    "Table1Row",
    "compare_map_methods",
    "format_table1",
    "plot_log_z_vs_map",
    "table1",
]

#: Methods of `compare_map_methods`; the kt family maps to ``p`` below.
METHODS = ("trellis", "beam", "greedy", "kt", "ca", "antikt")
_KT_P = {"kt": 1.0, "ca": 0.0, "antikt": -1.0}
_LABEL = {"trellis": "Trellis", "beam": "Beam", "greedy": "Greedy", "kt": "kt", "ca": "C/A", "antikt": "anti-kt"}
#: Table 1 of the trellis paper (Ginkgo510), mean and std of the log-likelihood differences.
PAPER_TABLE1 = {("trellis", "beam"): (0.4, 0.5), ("trellis", "greedy"): (1.5, 1.1), ("beam", "greedy"): (1.1, 1.1)}


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
        sets = tree.leaf_sets().astype(np.float64)  # dense [2n-1, n]: a jet has a few dozen leaves
        ch = np.asarray(tree.children)
        par[b, : n - 1, :n] = sets[n:]
        lef[b, : n - 1, :n] = sets[ch[:, 0]]
        rig[b, : n - 1, :n] = sets[ch[:, 1]]
        valid[b, : n - 1] = True
    out = _score_core(
        energy, jnp.asarray(leaves_padded), jnp.asarray(par), jnp.asarray(lef), jnp.asarray(rig), jnp.asarray(valid)
    )
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


def progress_iter(iterable, total, desc, enabled):
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


def compare_map_methods(
    energy,
    leaves_padded,
    n_leaves=None,
    *,
    methods: Sequence[str] = METHODS,
    beam_size: Optional[int] = None,
    kt_backend: str = "auto",
    progress_bar: bool = True,
    progress: Optional[bool] = None,
) -> MapComparison:
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
    progress_bar = renamed_argument(
        progress_bar, progress, old="progress", new="progress_bar", where="compare_map_methods"
    )
    from .. import trellis
    from ..trellis.energies import Energy

    if not isinstance(energy, Energy):
        raise TypeError(f"energy must be a jaxhc.trellis Energy, got {type(energy).__name__}")
    methods = _check_methods(methods)
    from ..trellis.checks import awkward_or_padded

    leaves_padded, n_leaves = awkward_or_padded(leaves_padded, n_leaves)
    lp = np.asarray(leaves_padded, dtype=np.float64)
    if lp.ndim < 2 or lp.shape[0] == 0:
        raise ValueError(f"leaves_padded must be [B, N_max, ...] with B >= 1, got shape {lp.shape}")
    nl = np.asarray(n_leaves)
    if nl.shape != (lp.shape[0],) or not np.issubdtype(nl.dtype, np.integer):
        raise ValueError(f"n_leaves must be an integer array [B={lp.shape[0]}], got shape {nl.shape} dtype {nl.dtype}")
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
    jets = [energy.validate_leaves(energy.crop_leaves(lp[b], int(nl[b])), name=f"leaves_padded[{b}]") for b in range(B)]
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
            for b in progress_iter(range(B), B, m, progress_bar):
                res = (
                    trellis.greedy(energy, jets[b])
                    if m == "greedy"
                    else trellis.beam(energy, jets[b], int(beam_sizes[b]))
                )
                out.append(res.tree)
            trees[m] = out
        else:
            fn = kt_tree if backend == "fastjet" else kt_tree_numpy
            trees[m] = [fn(jets[b], _KT_P[m]) for b in progress_iter(range(B), B, m, progress_bar)]
        seconds[m] = time.perf_counter() - t0
    log_phi = {m: _score_trees(energy, lp0, nl, trees[m]) for m in methods}
    splits = int(sum(trellis.num_splits(int(n)) for n in nl))
    return MapComparison(
        methods, nl.astype(np.int64), log_phi, trees, log_z, map_lp, seconds, beam_sizes, backend, splits
    )


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


_PAIRS = [
    ("trellis", "beam"),
    ("trellis", "greedy"),
    ("beam", "greedy"),
    ("trellis", "kt"),
    ("trellis", "ca"),
    ("trellis", "antikt"),
]


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
        rows.append(
            Table1Row(
                f"{_LABEL[a]} - {_LABEL[b]}",
                a,
                b,
                mean,
                std,
                int(ok.sum()),
                int((~ok).sum()),
                frac,
                PAPER_TABLE1.get((a, b)),
            )
        )
    return rows


def format_table1(rows) -> str:
    """Markdown table of `table1` rows (or of a `MapComparison`), with the paper's numbers."""
    if isinstance(rows, MapComparison):
        rows = table1(rows)
    lines = [
        "| log-likelihood difference | mean +- std | jets used | left out (-inf) | finds exact MAP "
        "| paper (Ginkgo510) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        ms = (
            "n/a"
            if math.isnan(r.mean)
            else (f"{r.mean:.2f} +- {r.std:.2f}" if not math.isnan(r.std) else f"{r.mean:.2f}")
        )
        frac = "" if r.frac_exact is None else f"{_LABEL[r.b]}: {100 * r.frac_exact:.1f}%"
        paper = "" if r.paper is None else f"{r.paper[0]} +- {r.paper[1]}"
        lines.append(f"| {r.label} | {ms} | {r.n_used} | {r.n_nonfinite} | {frac} | {paper} |")
    lines.append("")
    lines.append(
        "Differences of log p(tree | leaves) = log phi (nats), mean and sample std over the jets where "
        "both trees have a finite likelihood; trees with a forbidden split (e.g. t_P < t_cut, common "
        "for the kt family, which ignores the likelihood) have likelihood 0 and are left out. Paper: "
        "Table 1 of the trellis paper (Ginkgo510: 5000 jets, 5-10 leaves)."
    )
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
