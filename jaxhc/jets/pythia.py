"""Real jets from Pythia 8 (the optional ``pythia`` extra, ``pip install "jaxhc[pythia]"``,
which brings ``pythia8mc`` and FastJet) and the study of how the trellis energies see them
(issue 23, part 6).

`generate_jets` showers and hadronises events, finds the leading jet and reclusters its
particles to ``N`` exclusive kt subjets (``N`` drawn from a range): pp collisions at 13 TeV
(QCD 2 -> 2, ``pT-hat`` above a threshold, anti-kt ``R = 0.8`` jets) or ``e+ e- -> Z -> q
qbar`` at the Z pole (the more energetic of two exclusive Durham jets). `pythia_study`
scores those subjet problems with any energies against the kt and Cambridge-Aachen trees.
"""

from __future__ import annotations

import time
from typing import Dict, List, NamedTuple, Sequence

import numpy as np

__all__ = ["PYTHIA_EXTRA_HINT", "generate_jets", "pythia_study", "PythiaStudyRow", "format_pythia_study"]

PYTHIA_EXTRA_HINT = 'pip install "jaxhc[pythia]" (pythia8mc 8.317.2, a wheel; and FastJet)'

_PROCESSES = {
    "pp": lambda pt_hat_min: [
        "Beams:eCM = 13000.",
        "HardQCD:all = on",
        f"PhaseSpace:pTHatMin = {float(pt_hat_min)}",
    ],
    "ee": lambda pt_hat_min: [
        "Beams:idA = 11",
        "Beams:idB = -11",
        "Beams:eCM = 91.1876",
        "PDF:lepton = off",
        "WeakSingleBoson:ffbar2gmZ = on",
        "23:onMode = off",
        "23:onIfAny = 1 2 3 4 5",
    ],
}


def _modules():
    try:
        import pythia8mc
    except ImportError as e:
        raise ImportError(f"Pythia jets need the optional 'pythia' extra: {PYTHIA_EXTRA_HINT}") from e
    from .kt import fastjet_interface

    return pythia8mc, fastjet_interface()


def generate_jets(
    process: str = "pp",
    num_jets: int = 100,
    *,
    seed: int = 0,
    n_subjets: Sequence[int] = (6, 12),
    pt_hat_min: float = 200.0,
    R: float = 0.8,
    max_events: int | None = None,
) -> List[np.ndarray]:
    """``num_jets`` jets as four-momenta ``[N, 4]`` (E, px, py, pz; GeV) of ``N`` exclusive kt
    subjets, ``N`` uniform in ``n_subjets = (lo, hi)`` per jet.

    Args:
      process: ``"pp"`` (13 TeV, QCD 2 -> 2 with ``pT-hat > pt_hat_min``, the leading anti-kt
        ``R`` jet) or ``"ee"`` (``e+ e- -> Z -> q qbar`` at 91.19 GeV, the more energetic of
        the event's two exclusive ee-kt (Durham) jets).
      seed: Pythia's random seed (and the draw of ``N``): the same seed gives the same jets.
      n_subjets: the range of ``N`` (each at least 2; jets with fewer particles are skipped).
      max_events: events to try before giving up (default ``20 * num_jets + 100``).
    """
    if process not in _PROCESSES:
        raise ValueError(f"process must be 'pp' or 'ee', got {process!r}")
    lo, hi = (int(v) for v in n_subjets)
    if not 2 <= lo <= hi:
        raise ValueError(f"n_subjets must be (lo, hi) with 2 <= lo <= hi, got {tuple(n_subjets)}")
    if not (isinstance(num_jets, (int, np.integer)) and num_jets >= 1):
        raise ValueError(f"num_jets must be a positive integer, got {num_jets!r}")
    p8, fj = _modules()
    py = p8.Pythia("", False)
    for s in _PROCESSES[process](pt_hat_min) + [
        "Print:quiet = on",
        "Next:numberCount = 0",
        "Random:setSeed = on",
        f"Random:seed = {int(seed) % 900000000 + 1}",
    ]:
        py.readString(s)
    if not py.init():
        raise RuntimeError(f"Pythia failed to initialise the {process} process")
    rng = np.random.default_rng(seed)
    sub_def = fj.JetDefinition(fj.ee_kt_algorithm)
    if process == "pp":
        jet_def = fj.JetDefinition(fj.antikt_algorithm, float(R))
    else:
        jet_def = fj.JetDefinition(fj.ee_kt_algorithm)
    out: List[np.ndarray] = []
    limit = 20 * num_jets + 100 if max_events is None else int(max_events)
    for _ in range(limit):
        if len(out) >= num_jets:
            break
        if not py.next():
            continue
        parts = [fj.PseudoJet(p.px(), p.py(), p.pz(), p.e()) for p in py.event if p.isFinal() and p.isVisible()]
        if len(parts) < 2:
            continue
        cs = fj.ClusterSequence(parts, jet_def)
        if process == "pp":
            jets = fj.sorted_by_pt(cs.inclusive_jets())
        else:
            jets = sorted(cs.exclusive_jets(2), key=lambda j: -j.e())
        if not jets:
            continue
        cons = list(jets[0].constituents())
        n = int(rng.integers(lo, hi + 1))
        if len(cons) < n:
            continue
        subs = fj.ClusterSequence(cons, sub_def).exclusive_jets(n)
        arr = np.array([[j.e(), j.px(), j.py(), j.pz()] for j in subs], np.float64)
        # rounding can leave a (nearly) massless subjet a hair below E = |p|: put it on shell
        p3 = np.linalg.norm(arr[:, 1:], axis=1)
        arr[:, 0] = np.maximum(arr[:, 0], p3)
        out.append(arr[np.argsort(-arr[:, 0], kind="stable")])
    if len(out) < num_jets:
        raise RuntimeError(f"only {len(out)} of {num_jets} jets with {lo}..{hi} subjets in {limit} events")
    return out


class PythiaStudyRow(NamedTuple):
    """One energy on one sample (`pythia_study`); rates over the jets whose log Z is finite
    where marked."""

    energy: str
    jets: int
    possible: float  # fraction of jets with at least one possible tree (finite log Z)
    kt_possible: float  # fraction whose kt tree is possible
    ca_possible: float
    map_is_kt: float  # among possible jets: the exact MAP tree is the kt tree
    map_is_ca: float
    shared_kt: float  # mean fraction of the MAP tree's clusters that the kt tree has
    shared_ca: float
    log_p_kt: float  # median log posterior probability of the kt tree (possible jets, -inf counted)
    seconds_per_jet: float  # exact trellis, warm


def _clusters(tree) -> set:
    sets = np.asarray(tree.leaf_sets())  # dense [2n-1, n]: a jet has a few dozen leaves
    n = tree.n_leaves
    return {tuple(np.flatnonzero(r)) for r in sets[n:]}


def pythia_study(jets: Sequence[np.ndarray], energies: Dict[str, object]) -> List[PythiaStudyRow]:
    """Scores subjet problems (e.g. from `generate_jets`) with each energy: the fraction of
    jets with a possible tree, whether the kt and C/A trees are possible, how the exact MAP
    tree compares with them (identical trees, shared clusters), the posterior probability of
    the kt tree, and the trellis's time per jet (warm)."""
    from .. import trellis
    from .studies import compare_map_methods

    jets = [np.asarray(j, np.float64) for j in jets]
    nl = np.array([len(j) for j in jets], np.int64)
    lp = np.zeros((len(jets), int(nl.max()), 4))
    for b, j in enumerate(jets):
        lp[b, : len(j)] = j
    rows = []
    for name, energy in energies.items():
        res = compare_map_methods(
            energy, lp, nl, methods=("trellis", "kt", "ca"), kt_backend="numpy", progress_bar=False
        )
        t0 = time.perf_counter()
        trellis.solve_batch(energy, lp, nl)
        warm = (time.perf_counter() - t0) / len(nl)
        log_z = np.asarray(res.log_z)
        ok = np.isfinite(log_z)
        eq = {m: np.zeros(len(nl), bool) for m in ("kt", "ca")}
        shared = {m: np.full(len(nl), np.nan) for m in ("kt", "ca")}
        for b in np.flatnonzero(ok):
            cmap = _clusters(res.trees["trellis"][b])
            for m in ("kt", "ca"):
                c = _clusters(res.trees[m][b])
                eq[m][b] = c == cmap
                shared[m][b] = len(c & cmap) / max(len(cmap), 1)
        with np.errstate(invalid="ignore"):  # -inf - -inf on impossible jets (not used)
            lp_kt = np.asarray(res.log_phi["kt"]) - log_z
        frac = lambda x: float(np.mean(x)) if len(x) else float("nan")
        rows.append(
            PythiaStudyRow(
                name,
                len(nl),
                frac(ok),
                frac(np.isfinite(res.log_phi["kt"])),
                frac(np.isfinite(res.log_phi["ca"])),
                frac(eq["kt"][ok]),
                frac(eq["ca"][ok]),
                float(np.nanmean(shared["kt"][ok])) if ok.any() else float("nan"),
                float(np.nanmean(shared["ca"][ok])) if ok.any() else float("nan"),
                float(np.median(lp_kt[ok])) if ok.any() else float("nan"),
                warm,
            )
        )
    return rows


def format_pythia_study(rows: Sequence[PythiaStudyRow], title: str = "") -> str:
    head = (
        "| energy | jets | possible | kt possible | C/A possible | MAP = kt | MAP = C/A | shared clusters kt | "
        "shared C/A | median log P(kt tree) | ms / jet |"
    )
    lines = ([f"{title}", ""] if title else []) + [head, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r.energy} | {r.jets} | {r.possible:.2f} | {r.kt_possible:.2f} | {r.ca_possible:.2f} | "
            f"{r.map_is_kt:.2f} | {r.map_is_ca:.2f} | {r.shared_kt:.2f} | {r.shared_ca:.2f} | {r.log_p_kt:.2f} | "
            f"{1e3 * r.seconds_per_jet:.2f} |"
        )
    return "\n".join(lines)
