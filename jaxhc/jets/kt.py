"""Generalized-kt clustering of one jet: FastJet (`kt_tree`) or its NumPy twin
(`kt_tree_numpy`).

A jet is its constituents' four-momenta ``leaves [N, 4]`` (E, px, py, pz); the result is a
`jaxhc.Tree` whose leaf ``i`` is row ``i`` of ``leaves``.

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
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ..tree import Tree

__all__ = ["FASTJET_HINT", "MAX_R", "fastjet_interface", "kt_tree", "kt_tree_numpy"]

#: How to install the optional FastJet dependency.
FASTJET_HINT = 'pip install "jaxhc[jets]"'
#: FastJet refuses larger R (``JetDefinition::max_allowable_R``).
MAX_R = 1000.0
_DEFAULT_R = {"ee": 2.0 * math.pi, "pp": MAX_R}


def _check_kt_args(leaves, p, R, variant):
    """Eager validation shared by `kt_tree` and `kt_tree_numpy`; returns (arr, p, R)."""
    if variant not in ("ee", "pp"):
        raise ValueError(f"variant must be 'ee' or 'pp', got {variant!r}")
    if isinstance(p, (bool, np.bool_)) or not isinstance(p, (int, float, np.integer, np.floating)):
        raise TypeError(f"p must be a real number (1 kt, 0 Cambridge/Aachen, -1 anti-kt), got {p!r}")
    p = float(p)
    if not math.isfinite(p):
        raise ValueError(f"p must be finite, got {p}")
    if R is None:
        R = _DEFAULT_R[variant]
    if isinstance(R, (bool, np.bool_)) or not isinstance(R, (int, float, np.integer, np.floating)):
        raise TypeError(f"R must be a real number, got {R!r}")
    R = float(R)
    if not (0.0 < R <= MAX_R):
        raise ValueError(f"R must be in (0, {MAX_R:g}] (FastJet's limit), got {R}")
    from .hep import is_awkward, jet_from_awkward

    if is_awkward(leaves):  # one jet of four-vector records
        leaves = jet_from_awkward(leaves)
    try:
        arr = np.asarray(leaves, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError("leaves must be a numeric array of four-momenta [N, 4] (E, px, py, pz)") from None
    if arr.ndim != 2 or arr.shape[1] != 4 or arr.shape[0] == 0:
        raise ValueError(f"leaves must be four-momenta [N, 4] (E, px, py, pz) with N >= 1, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("leaves contains NaN or inf values")
    E, px, py, pz = arr.T
    if np.any(E <= 0):
        raise ValueError(f"leaves: every energy must be positive (rows {np.flatnonzero(E <= 0).tolist()})")
    if variant == "ee":
        bad = np.flatnonzero(px**2 + py**2 + pz**2 <= 0)
        if bad.size:
            raise ValueError(f"leaves: rows {bad.tolist()} have zero 3-momentum (no direction for variant='ee')")
    else:
        bad = np.flatnonzero((px**2 + py**2 <= 0) | (E <= np.abs(pz)))
        if bad.size:
            raise ValueError(
                f"leaves: rows {bad.tolist()} have no finite rapidity (need pt > 0 and E > |pz| "
                "for variant='pp'; use variant='ee')"
            )
    return arr, p, R


def _beam_error(variant, R, n_beam, n):
    hint = "use R in (pi, 3 pi]" if variant == "ee" else f"use a larger R (at most {MAX_R:g}) or variant='ee'"
    return ValueError(
        f"{n_beam} of the {n} leaves were merged with the beam (d_iB < d_ij) at R={R:g}, so the "
        f"clustering is not one tree; {hint}"
    )


def _empty_tree() -> Tree:
    return Tree(np.zeros((0, 2), np.int64), heights=np.zeros(0))


def fastjet_interface():
    """The SWIG interface of the optional ``fastjet`` package (lazy import)."""
    try:
        import fastjet
    except ImportError as e:
        raise ImportError(
            f"jaxhc.jets.kt_tree needs the optional dependency fastjet: {FASTJET_HINT} "
            "(or use jaxhc.jets.kt_tree_numpy)"
        ) from e
    return fastjet._swig


def kt_tree(leaves, p: float = 1, *, R: Optional[float] = None, variant: str = "ee") -> Tree:
    """The generalized-kt clustering tree of one jet, computed by FastJet.

    Runs ``fastjet.ClusterSequence`` with ``JetDefinition(ee_genkt_algorithm, R, p, E_scheme)``
    (``variant="ee"``) or ``genkt_algorithm`` (``"pp"``) and converts its clustering history:
    FastJet's jets vector holds the particles ``0..N-1`` (in input order) and then one jet per
    pairwise recombination, in order; the parents of each (``ClusterSequence.has_parents``),
    mapped through their history indices, are the children of merge ``t`` = node ``N + t``.
    The ``d_ij`` of each merge (``exclusive_dmerge``) becomes ``heights``.

    Args:
      leaves: four-momenta ``[N, 4]`` (E, px, py, pz), float64; positive energies.
      p: exponent: ``1`` kt, ``0`` Cambridge/Aachen, ``-1`` anti-kt (any real works).
      R: jet radius; default ``2 pi`` (``"ee"``: every ``pi < R <= 3 pi`` gives the same, full
        tree) or ``1000`` (``"pp"``, FastJet's largest). See the module docstring.
      variant: ``"ee"`` (energies and opening angles) or ``"pp"`` (kt, rapidity, azimuth).

    Returns:
      `Tree` over the ``N`` leaves (leaf ``i`` = row ``i``), ``heights [N-1]`` the ``d_ij`` of
      each merge.

    Raises:
      ImportError: fastjet is not installed (hint: ``pip install "jaxhc[jets]"``).
      ValueError: bad input, or a particle was merged with the beam (not a single jet).
    """
    arr, p, R = _check_kt_args(leaves, p, R, variant)
    fj = fastjet_interface()
    n = arr.shape[0]
    if n == 1:
        return _empty_tree()
    alg = fj.ee_genkt_algorithm if variant == "ee" else fj.genkt_algorithm
    jet_def = fj.JetDefinition(alg, R, p, fj.E_scheme, fj.Best)
    particles = []
    for i, (E, px, py, pz) in enumerate(arr.tolist()):
        pj = fj.PseudoJet(px, py, pz, E)
        pj.set_user_index(i)
        particles.append(pj)
    cs = fj.ClusterSequence(particles, jet_def)
    jets = cs.jets()  # particles, then one jet per i-j recombination, in order
    if len(jets) != 2 * n - 1:
        raise _beam_error(variant, R, 2 * n - 1 - len(jets), n)
    node_of = {}
    for k in range(len(jets)):
        if k < n and jets[k].user_index() != k:
            raise RuntimeError("FastJet reordered the input particles; cannot map its history to leaves")
        node_of[jets[k].cluster_hist_index()] = k
    children = np.zeros((n - 1, 2), np.int64)
    a, b = fj.PseudoJet(), fj.PseudoJet()
    for t in range(n - 1):
        if not cs.has_parents(jets[n + t], a, b):
            raise RuntimeError(f"FastJet jet {n + t} has no parents")
        i, j = node_of[a.cluster_hist_index()], node_of[b.cluster_hist_index()]
        children[t] = (min(i, j), max(i, j))
    # merge t is the step from N - t to N - t - 1 jets
    heights = np.array([cs.exclusive_dmerge(n - 1 - t) for t in range(n - 1)], np.float64)
    return Tree(children, heights=heights).validate()


def _kt_measures(P, p, variant):
    """Momentum factor ``[M]`` and angular distance ``[M, M]`` of the pseudojets ``P [M, 4]``."""
    E, p3 = P[:, 0], P[:, 1:]
    if variant == "ee":
        u = p3 / np.linalg.norm(p3, axis=1, keepdims=True)
        # 1 - cos theta = |u_i - u_j|^2 / 2: accurate for small angles (FastJet: 1 - u_i.u_j)
        ang = 0.5 * np.sum((u[:, None, :] - u[None, :, :]) ** 2, axis=-1)
        return np.power(E * E, p), ang
    pt2 = p3[:, 0] ** 2 + p3[:, 1] ** 2
    y = 0.5 * np.log((E + p3[:, 2]) / (E - p3[:, 2]))
    phi = np.arctan2(p3[:, 1], p3[:, 0])
    dphi = np.abs(phi[:, None] - phi[None, :])
    dphi = np.minimum(dphi, 2.0 * np.pi - dphi)
    return np.power(pt2, p), (y[:, None] - y[None, :]) ** 2 + dphi**2


def kt_tree_numpy(leaves, p: float = 1, *, R: Optional[float] = None, variant: str = "ee") -> Tree:
    """The generalized-kt clustering tree of one jet, in NumPy (same as `kt_tree`, no FastJet).

    At every step the pair of current pseudojets with the smallest ``d_ij`` is replaced by
    its four-momentum sum (E scheme); a beam distance ``d_iB`` below every ``d_ij`` would send
    a particle to the beam, which is reported as an error (the result must be one tree).
    Distances as in the module docstring; ``O(N^3)`` work.

    Args and Returns: as `kt_tree`.
    """
    arr, p, R = _check_kt_args(leaves, p, R, variant)
    n = arr.shape[0]
    if n == 1:
        return _empty_tree()
    if variant == "ee":
        norm = 1.0 / (1.0 - math.cos(R)) if R <= math.pi else 1.0 / (3.0 + math.cos(R))
    else:
        norm = 1.0 / (R * R)
    P = arr.copy()
    ids = list(range(n))
    children = np.zeros((n - 1, 2), np.int64)
    heights = np.zeros(n - 1)
    for t in range(n - 1):
        mom, ang = _kt_measures(P, p, variant)
        d = np.minimum(mom[:, None], mom[None, :]) * ang * norm
        np.fill_diagonal(d, np.inf)
        k = int(np.argmin(d))
        i, j = divmod(k, d.shape[0])
        if mom.min() < d[i, j]:
            raise _beam_error(variant, R, 1, n)
        i, j = min(i, j), max(i, j)
        children[t] = (min(ids[i], ids[j]), max(ids[i], ids[j]))
        heights[t] = d[i, j]
        P[i] = P[i] + P[j]
        P = np.delete(P, j, axis=0)
        ids[i] = n + t
        del ids[j]
    return Tree(children, heights=heights).validate()
