"""Pairwise potentials psi(X_L, X_R) of the cluster trellis (Greenberg, Macaluso et al.).

An `Energy` is an ``eqx.Module`` holding the model's parameters (so ``jax.grad`` reaches
them) with two methods:

- ``subset_features(leaves, masks)``: per-subset aggregates of the subsets given as boolean
  rows ``masks [M, N]`` (e.g. summed four-momenta, summed affinities inside the subset);
  ``features(leaves)`` evaluates them for all ``2**N`` subsets at once, indexed by bitmask
  (leaf ``i`` is bit ``i``).
- ``log_psi(parent, left, right)``: the log potential of splitting ``parent`` into
  ``left`` and ``right``, elementwise over broadcast feature pytrees.
- optionally ``log_psi_parts(parent, left, right)``: ``(b, x)`` with ``log psi = b + log
  x``, for an energy whose ``log psi`` ends in a ``log``: the size-class programs that sum
  ``psi`` in linear space (`jaxhc.trellis.log_partition`, `jaxhc.trellis.sample`) then
  compute ``x e^b`` and no ``log`` per split.

``log phi(H) = sum over the inner nodes of H of log psi(children)``, ``P(H) = phi(H) / Z``
(Eq. 1-2 of the trellis paper). Users bring their own energies by subclassing `Energy`.
"""

from __future__ import annotations

import abc
import math
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._internal import vmath
from .._internal.dtypes import float_dtype as _float
from .._internal.validation import real_array
from .ragged import host_rows

__all__ = [
    "Energy",
    "DasguptaEnergy",
    "CorrelationEnergy",
    "FourMomentumEnergy",
    "SummedMomentumEnergy",
    "GinkgoEnergy",
    "UnitEnergy",
    "SplitReport",
    "all_subset_masks",
    "pad_on_host",
    "subset_sums",
    "separable_form",
    "log_phi_of_tree",
]


def all_subset_masks(n: int, dtype=jnp.float64) -> jax.Array:
    """Membership of every subset: ``[2**n, n]``, row ``s`` has bit ``i`` of ``s`` in column ``i``."""
    s = jnp.arange(2**n, dtype=jnp.int32)[:, None]
    return ((s >> jnp.arange(n, dtype=jnp.int32)[None, :]) & 1).astype(dtype)


def subset_sums(leaves):
    """``(sums [2**N, d], sizes [2**N])``: the rows of ``leaves [N, d]`` summed over every
    subset (indexed by bitmask) and the subset sizes, in one elementwise loop (no membership
    matrix): the same sums, added in the same order, as ``all_subset_masks(N) @ leaves``."""
    leaves = jnp.asarray(leaves)
    n, d = leaves.shape
    S = jnp.arange(2**n, dtype=jnp.int32)
    p = jnp.zeros((2**n, d), leaves.dtype)
    for b in range(n):
        p = p + jnp.where((((S >> b) & 1) == 1)[:, None], leaves[b][None, :], 0.0)
    return p, jax.lax.population_count(S).astype(leaves.dtype)


def _defined_in(cls, name: str):
    """The class of ``cls``'s MRO that defines ``name`` (None if none does)."""
    return next((c for c in cls.__mro__ if name in vars(c)), None)


def separable_form(energy, feats, bound: int):
    """``energy.log_psi_separable(feats, bound)``, or None when a subclass changed the
    potential below the class that stated the separable form (it overrides ``log_psi``,
    ``cost`` or ``log_psi_parts`` but not ``log_psi_separable``): that form would then
    describe another energy."""
    cls = type(energy)
    owner = _defined_in(cls, "log_psi_separable")
    for name in ("log_psi", "cost", "log_psi_parts"):
        c = _defined_in(cls, name)
        if c is not None and c is not owner and issubclass(c, owner):
            return None
    return energy.log_psi_separable(feats, bound)


def _namespace(x):
    """NumPy for a host array, else ``jax.numpy``."""
    return np if isinstance(x, np.ndarray) else jnp


class Energy(eqx.Module):
    """Base class of trellis energies (see the module docstring)."""

    @abc.abstractmethod
    def subset_features(self, leaves, masks):
        """Features of the subsets ``masks [M, N]`` (float 0/1), leading axis ``M``."""

    @abc.abstractmethod
    def log_psi(self, parent, left, right):
        """Elementwise log potential of splitting ``parent`` into ``left`` and ``right``."""

    def log_psi_parts(self, parent, left, right):
        """``(b, x)`` with ``log psi = b + log x`` elementwise (``x > 0`` where ``b > -inf``;
        a scalar ``x`` broadcasts). Passes that sum ``psi`` in linear space compute ``x
        e^(b + ...)``, so an energy whose ``log psi`` ends in ``log(x)`` saves that ``log``
        by returning ``x`` here. A split whose ``x`` lies outside ``[2^-53, 2^53]``
        (float64; ``[2^-24, 2^24]`` in float32) is allowed: its parent is then summed in log
        space from `log_psi`. The default is ``(log_psi(...), 1.0)``."""
        return self.log_psi(parent, left, right), 1.0

    def log_psi_separable(self, feats, bound: int):
        """None (the default), or ``(a, c, h)`` with ``log psi(S, L, R) = a(S) + c[|S|] (h(L)
        + h(R))`` for every split: ``a`` and ``h`` ``[2^bound]`` over the subsets (``feats``,
        their features), ``c`` ``[bound + 1]`` indexed by the parent's size. The log-Z-only
        pass of the size-class programs then sums ``e^(a(S) + g(L) + g(R))`` with one table
        ``g = log Z + c[k] h`` per level ``k``: two gathers per split and no ``log psi``
        (`DasguptaEnergy`, `CorrelationEnergy`; ~1.2-1.5x their log Z at N = 13..16). A
        subclass that overrides ``log_psi`` (or ``cost``, ``log_psi_parts``) but not this
        method is summed from its own ``log_psi`` (`separable_form`)."""
        return None

    def features(self, leaves):
        """Features of all ``2**N`` subsets, indexed by bitmask."""
        n = self.n_elements(leaves)
        return self.subset_features(leaves, all_subset_masks(n, jnp.result_type(leaves, _float())))

    def n_elements(self, leaves) -> int:
        return int(np.shape(leaves)[0])

    def validate_leaves(self, leaves, name: str = "leaves") -> np.ndarray:
        """Eager checks (dtype, shape, finiteness); returns a host float array."""
        arr = real_array(leaves, name).astype(np.float64)
        if arr.ndim < 1 or arr.shape[0] == 0:
            raise ValueError(f"{name} must be a non-empty array with one row per element, got shape {arr.shape}")
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} contains NaN or inf values")
        return arr

    def crop_leaves(self, padded, n: int):
        """The first ``n`` elements of one padded problem."""
        return padded[:n]

    def pad_leaves(self, leaves, n_max: int):
        """Pads one problem's leaves to ``n_max`` elements (the padding never enters any
        subset of the real elements). The built-in energies pad a NumPy array with NumPy
        (`pad_on_host`) and a JAX array, traced or not, with JAX."""
        xp = _namespace(leaves)
        n = leaves.shape[0]
        pad = xp.repeat(leaves[:1], n_max - n, axis=0)
        return xp.concatenate([leaves, pad], axis=0)

    def explain(self, leaves, tree) -> list:
        """Every split of ``tree`` (a `jaxhc.Tree` over ``leaves``) as a `SplitReport`: its
        ``log psi`` and, for each impossible split (``-inf``), the constraint that failed
        (`why_impossible`). The splits whose reason is not None are what makes
        ``log phi(tree) = -inf``."""
        arr = self.validate_leaves(host_rows(leaves))  # one awkward jet: its rows
        n = self.n_elements(arr)
        if tree.n_leaves != n:
            raise ValueError(f"tree has {tree.n_leaves} leaves but leaves has {n} elements")
        sets = np.asarray(tree.leaf_sets())  # dense [2n-1, n]: one jet, a few dozen leaves
        feats = self.subset_features(jnp.asarray(arr), jnp.asarray(sets, dtype=jnp.result_type(arr, _float())))
        feats = jax.tree_util.tree_map(np.asarray, feats)
        ch = np.asarray(tree.children)
        out = []
        for t in range(len(ch)):
            k, a, b = n + t, int(ch[t, 0]), int(ch[t, 1])
            take = lambda i: jax.tree_util.tree_map(lambda x: x[i], feats)
            P, L, R = take(k), take(a), take(b)
            lp = float(self.log_psi(P, L, R))
            reason = None
            if lp == -np.inf:
                reason = self.why_impossible(P, L, R) or "log psi is -inf (this energy names no reason)"
            out.append(SplitReport(k, a, b, tuple(int(i) for i in np.flatnonzero(sets[k])), lp, reason))
        return out

    def why_impossible(self, parent, left, right):
        """The constraint a split with ``log psi = -inf`` fails, in words (host features of
        one split); energies with hard constraints override it. None: no reason known."""
        return None

    def check_batch(self, leaves_padded: np.ndarray, n_leaves: np.ndarray, name: str = "leaves_padded"):
        """`validate_leaves` of every problem of a host batch ``[B, N_max, ...]``, collecting
        every failure instead of raising the first.

        Returns ``(batch, reasons)``: the batch (float64) with each valid problem's padding
        from `pad_leaves` (a failing problem's rows as given), and ``{b: message}`` for every
        problem ``b`` that fails (the message names it as ``name[b]``). Energies override it
        with a vectorised version (checks and messages alike)."""
        n_max = leaves_padded.shape[1]
        out, reasons = np.array(leaves_padded, dtype=np.float64), {}
        for b in range(leaves_padded.shape[0]):
            try:
                real = self.validate_leaves(self.crop_leaves(leaves_padded[b], int(n_leaves[b])), name=f"{name}[{b}]")
            except ValueError as e:
                reasons[b] = str(e)
                continue
            out[b] = np.asarray(self.pad_leaves(jnp.asarray(real), n_max))
        return out, reasons

    def validate_batch(self, leaves_padded: np.ndarray, n_leaves: np.ndarray, name: str = "leaves_padded"):
        """`check_batch` that raises `jaxhc.trellis.InvalidProblemsError` (a ``ValueError``)
        naming every failing problem; returns the batch (float64, padding from
        `pad_leaves`)."""
        from .invalid import InvalidProblems, InvalidProblemsError

        out, reasons = self.check_batch(leaves_padded, n_leaves, name)
        if reasons:
            raise InvalidProblemsError(InvalidProblems.from_reasons(reasons, leaves_padded.shape[0]), name)
        return out


class SplitReport(NamedTuple):
    """One split of a tree in `Energy.explain`: inner ``node`` (`jaxhc.Tree` numbering) with
    children ``left``, ``right``, the ``leaves`` under it, its ``log_psi`` and, when that is
    ``-inf``, the ``reason`` (else None)."""

    node: int
    left: int
    right: int
    leaves: tuple
    log_psi: float
    reason: object


class UnitEnergy(Energy):
    """``psi = 1`` for every split: ``Z`` counts the trees, ``(2N - 3)!!`` (counting semiring)."""

    def subset_features(self, leaves, masks):
        return jnp.sum(masks, axis=-1)

    def log_psi(self, parent, left, right):
        return jnp.zeros(jnp.broadcast_shapes(jnp.shape(parent), jnp.shape(left), jnp.shape(right)), _float())


class _AffinityFeatures(NamedTuple):
    size: jax.Array
    w_in: jax.Array  # sum of affinities over unordered pairs inside the subset
    neg_in: jax.Array  # the same over negative affinities only


def _affinity_features_all(W):
    """`_affinity_features` of all ``2^N`` subsets (indexed by bitmask), built by doubling:
    the subsets of the first ``m + 1`` elements are those of the first ``m`` and the same
    with element ``m`` added, whose inner sums grow by ``sum_{j in S} W[j, m]``; those
    column sums are carried for the elements not yet added (``[2^m, N - m]``). O(2^N) work
    and memory, where the membership-matrix products take ``O(N^2 2^N)`` flops and an
    ``[2^N, N]`` matrix (at N = 17 in the class of 20: 40 of a log Z's 277 ms)."""
    W = jnp.asarray(W)
    n = W.shape[0]
    W = W - jnp.diag(jnp.diagonal(W))
    Wn = jnp.minimum(W, 0.0)
    w = jnp.zeros((1,), W.dtype)
    neg = jnp.zeros((1,), W.dtype)
    cw = jnp.zeros((1, n), W.dtype)  # sum_{j in S} W[j, c] for the columns c not yet added
    cn = jnp.zeros((1, n), W.dtype)
    for m in range(n):
        w = jnp.concatenate([w, w + cw[:, 0]])
        neg = jnp.concatenate([neg, neg + cn[:, 0]])
        cw = jnp.concatenate([cw[:, 1:], cw[:, 1:] + W[m, m + 1 :][None, :]])
        cn = jnp.concatenate([cn[:, 1:], cn[:, 1:] + Wn[m, m + 1 :][None, :]])
    size = jax.lax.population_count(jnp.arange(2**n, dtype=jnp.int32)).astype(W.dtype)
    return _AffinityFeatures(size, w, neg)


def _affinity_features(W, masks):
    W = jnp.asarray(W)
    W = W - jnp.diag(jnp.diagonal(W))
    Wn = jnp.minimum(W, 0.0)
    mw = masks @ W
    mn = masks @ Wn
    return _AffinityFeatures(
        jnp.sum(masks, axis=-1), 0.5 * jnp.sum(mw * masks, axis=-1), 0.5 * jnp.sum(mn * masks, axis=-1)
    )


class AffinityEnergy(Energy):
    """Base of the energies over a symmetric affinity matrix ``[N, N]`` (the "leaves"; a
    subset's features are its size and inner affinity sum) with inverse temperature ``beta``:
    `DasguptaEnergy`, `CorrelationEnergy`."""

    beta: jax.Array

    def __init__(self, beta=1.0):
        self.beta = jnp.asarray(beta, dtype=_float())

    def __check_init__(self):
        if not isinstance(self.beta, jax.core.Tracer):
            b = np.asarray(self.beta)
            if not np.all(np.isfinite(b)):
                raise ValueError(f"beta must be finite, got {b}")

    def subset_features(self, leaves, masks):
        return _affinity_features(leaves, masks)

    def features(self, leaves):
        if _defined_in(type(self), "subset_features") is not AffinityEnergy:  # a subclass's own
            return super().features(leaves)
        return _affinity_features_all(leaves)

    def validate_leaves(self, leaves, name: str = "leaves") -> np.ndarray:
        arr = super().validate_leaves(leaves, name)
        if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
            raise ValueError(f"{name} must be a square affinity matrix [N, N], got shape {arr.shape}")
        if not np.allclose(arr, arr.T, rtol=1e-10, atol=1e-12):
            raise ValueError(f"{name} must be a symmetric affinity matrix")
        return arr

    def crop_leaves(self, padded, n: int):
        return padded[:n, :n]

    def pad_leaves(self, leaves, n_max: int):
        n = leaves.shape[0]
        return _namespace(leaves).pad(leaves, ((0, n_max - n), (0, n_max - n)))


class DasguptaEnergy(AffinityEnergy):
    """Dasgupta's cost as an energy: ``E(L, R) = (|L| + |R|) sum_{i in L, j in R} w_ij``,
    ``psi = exp(-beta E)`` (Eq. 4 of the trellis paper). Leaves: symmetric affinities
    ``[N, N]`` (the diagonal is ignored).

    Args:
      beta: inverse temperature.
    """

    def cost(self, parent, left, right):
        cross = parent.w_in - left.w_in - right.w_in
        return parent.size * cross

    def log_psi(self, parent, left, right):
        return -self.beta * self.cost(parent, left, right)

    def log_psi_separable(self, feats, bound: int):
        # -beta |S| (w(S) - w(L) - w(R)): a = -beta |S| w(S), c[k] = beta k, h = w
        c = self.beta * jnp.arange(bound + 1, dtype=feats.w_in.dtype)
        return -self.beta * feats.size * feats.w_in, c, feats.w_in


class CorrelationEnergy(AffinityEnergy):
    """Correlation clustering (Eq. 7-8): ``E(L, R) = sum_{L x R} w_ij [w_ij > 0] -
    sum_{ordered pairs i != j inside L} w_ij [w_ij < 0] - (the same inside R)``,
    ``psi = exp(-beta E)``. Leaves: symmetric affinities ``[N, N]`` in ``[-1, 1]``.

    Args:
      beta: inverse temperature.
    """

    def log_psi(self, parent, left, right):
        pos_in = lambda f: f.w_in - f.neg_in
        cross_pos = pos_in(parent) - pos_in(left) - pos_in(right)
        energy = cross_pos - 2.0 * left.neg_in - 2.0 * right.neg_in
        return -self.beta * energy

    def log_psi_separable(self, feats, bound: int):
        # with pos = w_in - neg_in: -beta pos(S) + beta (pos + 2 neg)(L) + beta (pos + 2 neg)(R)
        c = jnp.full((bound + 1,), self.beta, feats.w_in.dtype)
        return -self.beta * (feats.w_in - feats.neg_in), c, feats.w_in + feats.neg_in


#: a leaf is physical when ``E^2 - |p|^2 >= -MASS2_TOLERANCE * E * E_jet`` (``E_jet``: the
#: summed energy of its jet's leaves). The tolerance comes from the precision the momenta
#: carry: float32 (what generators and ROOT files often store, and what Ginkgo computes its
#: boosts in) keeps each component to a relative 2^-24, and a leaf made by boosts at the
#: jet's scale carries absolute errors of a few 2^-24 E_jet per component, so its ``m^2 =
#: E^2 - |p|^2`` is off by up to about ``4 E delta``; 2^-20 allows delta = 4 float32 ulps of
#: E_jet. For a one-leaf jet it is about 1e-6 E^2. Such leaves are read with mass squared
#: ``max(m^2, 0)``. A FastJet-ordered row (E last) has ``m^2`` near ``-E^2`` and fails unless
#: its energy is below 2^-20 E_jet.
MASS2_TOLERANCE = 2.0**-20


def _jet_energy(p, real=None) -> np.ndarray:
    """Summed energy of each jet (last axis ``E, px, py, pz``; rows axis -2; ``real`` masks
    padding rows), broadcast back over the rows."""
    e = p[..., 0] if real is None else np.where(real, p[..., 0], 0.0)
    return np.sum(e, axis=-1, keepdims=True)


def _unphysical(p, e_jet) -> np.ndarray:
    """Rows (last axis ``E, px, py, pz``) with ``E^2 - |p|^2 < -MASS2_TOLERANCE E E_jet``."""
    e, x, y, z = p[..., 0], p[..., 1], p[..., 2], p[..., 3]
    return e * e - (x * x + y * y + z * z) < -MASS2_TOLERANCE * np.abs(e) * e_jet


_ORDER_HINT = (
    " (four-momenta are (E, px, py, pz) in GeV; FastJet and `vector` order them (px, py, pz, E): "
    "pass np.roll(x, 1, axis=-1))"
)


def _overflow_message(name, big) -> str:
    return (
        f"{name}: four-momenta up to {big:.3g} are too large: the squared invariant masses overflow "
        "float64; rescale the momenta (and t_cut with them)"
    )


def _unphysical_message(name, rows, i, e_jet) -> str:
    e, q = float(rows[i, 0]), float(np.linalg.norm(rows[i, 1:]))
    m2 = e * e - q * q
    return (
        f"{name}: four-momenta must be (E, px, py, pz) in GeV with E >= |p| (mass^2 >= -2^-20 E E_jet, "
        f"float32 rounding at the jet's scale); row {i} has E = {e:.6g} < |p| = {q:.6g} (mass^2 = {m2:.3g}, "
        f"{m2 / (e * e_jet):.3g} E E_jet). FastJet and `vector` order four-vectors (px, py, pz, E): pass "
        f"np.roll(x, 1, axis=-1) instead"
    )


class _GinkgoFeatures(NamedTuple):
    """Per-subset terms of `GinkgoEnergy`: everything that depends on one subset is computed
    here once, so a split evaluates one ``log`` (and one ``expm1`` or ``exp``) and a few
    arithmetic operations. The fields read per child are ``t``, ``sqrt_t`` (and ``support``
    for the exact likelihood); the others are read for the parent only."""

    t: jax.Array  # mass squared, clamped at 0; "paper": 0 for leaves (the paper's convention)
    sqrt_t: jax.Array
    support: jax.Array  # "exact": 0 if the subset may be a child (leaf t <= t_cut, inner t > t_cut), else -inf
    base: jax.Array  # the split's constant terms as a parent (-inf when the subset cannot split)
    rate: jax.Array  # lam / t as a parent
    aux: jax.Array  # "paper": the constant terms plus log f(0 | t) of a leaf child; "exact": 1 / t^2
    lam: jax.Array  # the rate of the subset's split (lam_root for the root)


def _mass2(p):
    return jnp.maximum(p[..., 0] ** 2 - jnp.sum(p[..., 1:] ** 2, axis=-1), 0.0)


def kallen(a, b, c):
    """The Kallen function ``a^2 + b^2 + c^2 - 2ab - 2ac - 2bc``."""
    return a * a + b * b + c * c - 2.0 * (a * b + a * c + b * c)


class FourMomentumEnergy(Energy):
    """Base of the energies over jets: leaves are four-momenta ``[N, 4]`` in GeV, ordered
    ``(E, px, py, pz)``, physical (``E > 0``, ``E >= |p|`` within `MASS2_TOLERANCE`; a
    FastJet-ordered array, E last, is refused with a message naming the order); padding rows
    are zero four-momenta. Subclasses: `SummedMomentumEnergy` (`GinkgoEnergy`,
    `jaxhc.trellis.SplittingEnergy`)."""

    def validate_leaves(self, leaves, name: str = "leaves") -> np.ndarray:
        arr = real_array(leaves, name).astype(np.float64)
        # one reduction first (the host time of a small solve): finite and small enough
        # that E^4 of the whole jet stays finite (the splitting terms take squares of masses
        # squared, the Kallen function); the checks below name what failed otherwise
        with np.errstate(over="ignore", invalid="ignore"):
            total = float(np.abs(arr).sum()) if arr.size else np.nan
            ok = math.isfinite(total) and bool(np.isfinite(np.float64(total) ** 4 * 64.0))
        if not ok or arr.ndim != 2 or arr.shape[1] != 4:
            arr = super().validate_leaves(arr, name)  # empty, NaN or inf
            if arr.ndim != 2 or arr.shape[1] != 4:
                raise ValueError(f"{name} must be four-momenta [N, 4] (E, px, py, pz), got shape {arr.shape}")
        e = arr[:, 0]
        if e.min() <= 0:
            raise ValueError(f"{name}: every energy E (column 0) must be positive{_ORDER_HINT}")
        if not ok:
            raise ValueError(_overflow_message(name, float(np.max(np.abs(arr)))))
        e_jet = float(e.sum())
        bad = _unphysical(arr, e_jet)
        if bad.any():
            raise ValueError(_unphysical_message(name, arr, int(np.argmax(bad)), e_jet))
        return arr

    def pad_leaves(self, leaves, n_max: int):
        """Pads with zero four-momenta (they mark padding: the root is the set of the rows
        with ``E > 0``)."""
        n = leaves.shape[0]
        if isinstance(leaves, np.ndarray):  # np.pad costs ~10 us of a small solve's host time
            out = np.zeros((n_max,) + leaves.shape[1:], leaves.dtype)
            out[:n] = leaves
            return out
        return jnp.pad(leaves, ((0, n_max - n), (0, 0)))

    def check_batch(self, leaves_padded: np.ndarray, n_leaves: np.ndarray, name: str = "leaves_padded"):
        """`Energy.check_batch` of every jet at once (the same checks and messages as
        `validate_leaves`, each jet reported by its first failing check); padding rows set to
        zero four-momenta (`pad_leaves`)."""
        lp = np.asarray(leaves_padded, dtype=np.float64)
        if lp.ndim != 3 or lp.shape[2] != 4:
            if lp.ndim >= 2 and lp.shape[0] > 0:  # the per-jet message, for the first jet
                b = 0
                self.validate_leaves(self.crop_leaves(lp[b], int(n_leaves[b])), name=f"{name}[{b}]")
            raise ValueError(f"{name} must be four-momenta [B, N_max, 4] (E, px, py, pz), got shape {lp.shape}")
        real = np.arange(lp.shape[1])[None, :] < np.asarray(n_leaves)[:, None]
        reasons = {}

        def note(bad_jets, msg):
            for b in np.flatnonzero(bad_jets):
                if int(b) not in reasons:  # each jet by its first failing check
                    reasons[int(b)] = msg(int(b))

        with np.errstate(invalid="ignore", over="ignore"):
            note(
                np.any(~np.all(np.isfinite(lp), axis=2) & real, axis=1),
                lambda b: f"{name}[{b}] contains NaN or inf values",
            )
            note(
                np.any((lp[:, :, 0] <= 0) & real, axis=1),
                lambda b: f"{name}[{b}]: every energy E (column 0) must be positive{_ORDER_HINT}",
            )
            tot = np.sum(np.where(real[:, :, None], np.abs(lp), 0.0), axis=(1, 2))
            note(
                ~np.isfinite(tot**4 * 64.0),
                lambda b: _overflow_message(f"{name}[{b}]", float(np.max(np.abs(lp[b][real[b]])))),
            )
            e_jet = _jet_energy(lp, real)
            bad = _unphysical(lp, e_jet) & real
        note(
            np.any(bad, axis=1),
            lambda b: _unphysical_message(f"{name}[{b}]", lp[b], int(np.argmax(bad[b])), float(e_jet[b, 0])),
        )
        return np.where(real[:, :, None], lp, 0.0), reasons


class SummedMomentumEnergy(FourMomentumEnergy):
    """A `FourMomentumEnergy` whose features depend on a subset only through its summed
    four-momentum and its size (`features_of_sums`): `features` then sums the leaves over all
    subsets in one elementwise loop (`subset_sums`) instead of a membership-matrix product.
    Subclasses: `GinkgoEnergy`, `jaxhc.trellis.SplittingEnergy`."""

    @abc.abstractmethod
    def features_of_sums(self, leaves, p, size):
        """Features from the subsets' summed four-momenta ``p [M, 4]`` and sizes ``[M]``."""

    def subset_features(self, leaves, masks):
        leaves = jnp.asarray(leaves)
        return self.features_of_sums(leaves, masks @ leaves, jnp.sum(masks, axis=-1))

    def features(self, leaves):
        leaves = jnp.asarray(leaves)
        return self.features_of_sums(leaves, *subset_sums(leaves))


class GinkgoEnergy(SummedMomentumEnergy):
    """The Ginkgo toy parton shower's 1 -> 2 split likelihood (Eq. 5-6 of the trellis paper).

    Leaves: four-momenta ``[N, 4]`` in GeV, ordered (E, px, py, pz) (FastJet's order, E last,
    must be rolled first: ``np.roll(x, 1, axis=-1)``), physical (``E > 0``, ``E >= |p|``
    within `MASS2_TOLERANCE`; checked, with a message naming the order); ``lam`` is
    dimensionless and ``t_cut`` in GeV^2. A cluster's momentum is the sum of its leaves'. ``likelihood="paper"`` is the paper's formula (the one of the
    ClusterTrellis reference values): leaves have ``t = 0``, ``t_max, t_min`` the larger and
    smaller child mass squared, ``log psi = log f(t_max | t_P) + log f(t_min | (sqrt t_P -
    sqrt t_max)^2) - log(4 pi)`` with ``f(t | s) = lam / (s (1 - e^-lam)) e^{-lam t / s}``
    for inner children and ``f(0 | s) = (1 - e^{-lam t_cut / s}) / (1 - e^-lam)`` for
    leaves; ``-inf`` when ``t_P < t_cut``. ``likelihood="exact"`` is the exact density of
    the generator (see ``jaxhc.models.ginkgo`` and the data README): both orders in which
    the children could have been drawn, truncated exponentials with support conditions
    (inner children ``t > t_cut``, leaves ``t <= t_cut`` with their observed masses), and
    the phase-space term ``log(8 t_P) - 1/2 log K(t_P, t_L, t_R)`` that makes it a density of
    the child's four-momentum; ``- log(4 pi)`` for the direction.

    Args:
      lam: rate of the exponential splitting distribution (> 0).
      t_cut: mass-squared cut-off below which a particle is a leaf.
      likelihood: ``"paper"`` or ``"exact"``.
      lam_root: rate of the root split (the split of the set of all leaves); ``None``: ``lam``.
      ordered: (exact only) the first child of every split is the one drawn first, so only
        that order counts; for scoring a tree whose drawing order is known
        (`jaxhc.models.ginkgo.tree_log_likelihood`). The trellis splits are unordered: keep
        ``False`` there.
      phase_space: (exact only) include the phase-space term. ``False`` gives the density
        of ``(t_first, t_second, direction)``, the coordinates the generator draws in.
    """

    lam: jax.Array
    t_cut: jax.Array
    lam_root: jax.Array
    likelihood: str = eqx.field(static=True)
    separate_root: bool = eqx.field(static=True)
    ordered: bool = eqx.field(static=True)
    phase_space: bool = eqx.field(static=True)

    def __init__(
        self,
        lam=2.0,
        t_cut=16.0,
        likelihood: str = "paper",
        lam_root=None,
        *,
        ordered: bool = False,
        phase_space: bool = True,
    ):
        if likelihood not in ("paper", "exact"):
            raise ValueError(f"likelihood must be 'paper' or 'exact', got {likelihood!r}")
        self.lam = jnp.asarray(lam, dtype=_float())
        self.t_cut = jnp.asarray(t_cut, dtype=_float())
        self.separate_root = lam_root is not None
        self.lam_root = jnp.asarray(lam if lam_root is None else lam_root, dtype=_float())
        self.likelihood = likelihood
        self.ordered = bool(ordered)
        self.phase_space = bool(phase_space)

    def __check_init__(self):
        names = ("lam", "t_cut", "lam_root") if self.separate_root else ("lam", "t_cut")
        for name in names:
            v = getattr(self, name)
            if not isinstance(v, jax.core.Tracer):
                a = np.asarray(v)
                if a.ndim != 0 or not np.isfinite(a) or a <= 0:
                    raise ValueError(f"{name} must be a positive finite scalar, got {a}")

    def _lam_of(self, is_root):
        if not self.separate_root:
            return self.lam
        return jnp.where(is_root, self.lam_root, self.lam)

    def features_of_sums(self, leaves, p, size):
        t = _mass2(p)
        lam = self._lam_of(size == jnp.sum(leaves[:, 0] > 0))
        tc = self.t_cut
        pos = t > 0
        ts = jnp.where(pos, t, 1.0)
        log_t = jnp.log(ts)
        log_norm = -jnp.log(-jnp.expm1(-lam))  # -log(1 - e^-lam)
        ninf = jnp.full_like(t, -jnp.inf)
        if self.likelihood == "paper":
            t = jnp.where(size == 1, 0.0, t)
            splits = pos & (t >= tc)
            const = 2.0 * log_norm - jnp.log(4 * jnp.pi)
            base = jnp.where(splits, const + jnp.log(lam) - log_t, ninf)  # with log f(t_max | t_P)
            aux = jnp.where(splits, const + jnp.log(-jnp.expm1(-lam * tc / ts)), ninf)  # with log f(0 | t_P)
            support = jnp.zeros_like(t)
        else:
            # 2 log(lam / (1 - e^-lam)) - log(4 pi) (+ log 8) - 2 log t_P; log_psi adds
            # log(t_P / s_second) (and 1/2 log(t_P^2 / K) with the phase space)
            const = 2.0 * (jnp.log(lam) + log_norm) - jnp.log(4 * jnp.pi) - 2.0 * log_t
            if self.phase_space:
                const = const + jnp.log(8.0)
            base = jnp.where(t > tc, const, ninf)
            aux = 1.0 / (ts * ts)
            support = jnp.where(jnp.where(size == 1, t <= tc, t > tc), 0.0, ninf)
        return _GinkgoFeatures(t, jnp.sqrt(t), support, base, lam / ts, aux, jnp.broadcast_to(lam, t.shape))

    def log_psi(self, parent, left, right):
        # One log (and one expm1 or exp) per split, each result used once: XLA:CPU then keeps
        # the whole split, feature gathers included, in one vectorised loop (an expensive
        # operation read twice is computed apart and the gathers are materialised).
        lam = parent.lam if self.separate_root else self.lam
        if self.likelihood == "paper":
            return self._log_psi_paper(parent, left, right, lam)
        return self._log_psi_exact(parent, left, right, lam)

    def why_impossible(self, P, L, R):
        tc = float(self.t_cut)
        tP, tL, tR = float(P.t), float(L.t), float(R.t)
        if self.likelihood == "paper":
            if not (tP > 0 and tP >= tc):
                return f"the parent's mass^2 t_P = {tP:.6g} is below t_cut = {tc:.6g}: it cannot split"
            if not float(P.sqrt_t) > max(float(L.sqrt_t), float(R.sqrt_t)):
                return (
                    f"the heavier child's mass {max(float(L.sqrt_t), float(R.sqrt_t)):.6g} is not below the parent's "
                    f"{float(P.sqrt_t):.6g}: no phase space for the lighter one"
                )
            return None
        if not tP > tc:
            return f"the parent's mass^2 t_P = {tP:.6g} is not above t_cut = {tc:.6g}: it cannot split"
        for side, F in (("left", L), ("right", R)):
            if float(F.support) == -np.inf:
                t = float(F.t)
                if t > tc:
                    return (
                        f"the {side} child has mass^2 {t:.6g} > t_cut = {tc:.6g}: as a leaf it would have split "
                        "(leaves must lie below the cut-off)"
                    )
                return (
                    f"the {side} child has mass^2 {t:.6g} <= t_cut = {tc:.6g}: as an inner node it could not have "
                    "split (inner nodes must lie above the cut-off)"
                )
        sq = np.sqrt(tP)
        if np.sqrt(tL) + np.sqrt(tR) >= sq or kallen(tP, tL, tR) <= 0:
            return (
                f"the children's masses {np.sqrt(tL):.6g} + {np.sqrt(tR):.6g} reach the parent's {sq:.6g}: "
                "kinematically impossible (Kallen function <= 0)"
            )
        return "neither drawing order fits: each child must be lighter than the mass left after the other one"

    def log_psi_parts(self, parent, left, right):
        lam = parent.lam if self.separate_root else self.lam
        if self.likelihood == "paper":
            f1, e, x, ok = self._paper_terms(parent, left, right, lam)
            return jnp.where(ok, f1 - e, -jnp.inf), x
        m, tt, K, ok = self._exact_terms(parent, left, right, lam)
        x = tt / jnp.sqrt(K * parent.aux) if self.phase_space else tt  # see _log_psi_exact
        return jnp.where(ok, parent.base + m, -jnp.inf) + left.support + right.support, x

    def _paper_terms(self, P, L, R, lam):
        """``(f1, e, x, ok)``: ``log psi = f1 + log x - e`` where ``ok``, else ``-inf``."""
        # leaves carry t = 0, so the larger child's t and sqrt t are plain maxima
        tmax, tmin = jnp.maximum(L.t, R.t), jnp.minimum(L.t, R.t)
        f1 = jnp.where(tmax > 0, P.base - tmax * P.rate, P.aux)  # log f(t_max | t_P) + constants
        # log f(t_min | t_P2), t_P2 = (sqrt t_P - sqrt t_max)^2, r = lam / t_P2:
        # inner: log r - r t_min; leaf (t_min = 0): log(1 - exp(-r t_cut))
        d = P.sqrt_t - jnp.maximum(L.sqrt_t, R.sqrt_t)
        d2 = d * d
        ok = d2 > 0
        r = lam / jnp.where(ok, d2, 1.0)
        return f1, tmin * r, jnp.where(tmin > 0, r, -vmath.expm1(-self.t_cut * r)), ok

    def _log_psi_paper(self, P, L, R, lam):
        f1, e, x, ok = self._paper_terms(P, L, R, lam)
        return f1 + jnp.where(ok, vmath.log(x) - e, -jnp.inf)

    def _exact_terms(self, P, L, R, lam):
        """``(m, tt, K, ok)``: ``log psi = base + m + 1/2 log(tt^2 / (K aux))`` (phase space;
        else ``+ log tt``) plus the children's supports where ``ok``, else ``-inf``."""
        tP, tL, tR = P.t, L.t, R.t
        # order A: left drawn first on [0, t_P), right on [0, sA), sA = (sqrt t_P - sqrt t_L)^2,
        # density exp(eA) / (t_P sA) times the constants in P.base; order B: the mirror image
        dA, dB = P.sqrt_t - L.sqrt_t, P.sqrt_t - R.sqrt_t
        sA, sB = dA * dA, dB * dB
        vA = (tL < tP) & (tR < sA)
        iA = 1.0 / jnp.where(sA > 0, sA, 1.0)
        eA = -(tL * P.rate + lam * tR * iA)
        if self.ordered:
            m, tot, live = eA, iA, vA
        else:
            # exp(eA) iA + exp(eB) iB = exp(m) (i of the larger term + w i of the smaller),
            # w = exp(-|eA - eB|) <= 1; an impossible order has exponent -big and w = 0
            big = jnp.finfo(tP.dtype).max
            vB = (tR < tP) & (tL < sB)
            iB = 1.0 / jnp.where(sB > 0, sB, 1.0)
            eB = -(tR * P.rate + lam * tL * iB)
            eA, eB = jnp.where(vA, eA, -big), jnp.where(vB, eB, -big)
            m = jnp.maximum(eA, eB)
            w = jnp.exp(-jnp.abs(eA - eB))
            tot = jnp.where(eA >= eB, iA + w * iB, iB + w * iA)
            live = m > -big
        K = kallen(tP, tL, tR)
        return m, tot * tP, jnp.where(K > 0, K, 1.0), live & (K > 0)

    def _log_psi_exact(self, P, L, R, lam):
        m, tt, K, ok = self._exact_terms(P, L, R, lam)
        if self.phase_space:
            # log(8 t_P) - 1/2 log K as 1/2 log(tt^2 t_P^2 / K), 1 / t_P^2 = P.aux (log 8: P.base)
            core = 0.5 * vmath.log(tt * tt / (K * P.aux))
        else:
            core = vmath.log(tt)
        out = jnp.where(ok, P.base + m + core, -jnp.inf)
        return out + L.support + R.support


def pad_on_host(energy: Energy, leaves: np.ndarray, n_max: int):
    """`Energy.pad_leaves` of one problem's host array: with NumPy (no JAX dispatch, a host
    array out) where the energy pads with a built-in method, else through JAX (a user's
    ``pad_leaves`` gets the JAX array it may expect)."""
    pad = type(energy).pad_leaves  # through the class: no bound method built per call (equinox)
    if pad in (Energy.pad_leaves, AffinityEnergy.pad_leaves, FourMomentumEnergy.pad_leaves):
        return pad(energy, np.asarray(leaves), n_max)
    return pad(energy, jnp.asarray(leaves), n_max)


def log_phi_of_tree(energy: Energy, leaves, tree) -> jax.Array:
    """``log phi(H)``: the sum of ``log psi`` over the inner nodes of ``tree`` (a `Tree`)."""
    n = energy.n_elements(leaves)
    # dense [2N-1, N] subset masks, as the energies' per-subset features are: trellis sizes
    masks = jnp.asarray(tree.leaf_sets(), dtype=jnp.result_type(leaves, _float()))
    feats = energy.subset_features(jnp.asarray(leaves), masks)
    ch = np.asarray(tree.children)
    take = lambda idx: jax.tree_util.tree_map(lambda x: x[idx], feats)
    if ch.shape[0] == 0:
        return jnp.zeros((), _float())
    par = n + np.arange(n - 1)
    return jnp.sum(energy.log_psi(take(par), take(ch[:, 0]), take(ch[:, 1])))
