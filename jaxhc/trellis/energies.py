"""Pairwise potentials psi(X_L, X_R) of the cluster trellis (Greenberg, Macaluso et al.).

An `Energy` is an ``eqx.Module`` holding the model's parameters (so ``jax.grad`` reaches
them) with two methods:

- ``subset_features(leaves, masks)``: per-subset aggregates of the subsets given as boolean
  rows ``masks [M, N]`` (e.g. summed four-momenta, summed affinities inside the subset);
  ``features(leaves)`` evaluates them for all ``2**N`` subsets at once, indexed by bitmask
  (leaf ``i`` is bit ``i``).
- ``log_psi(parent, left, right)``: the log potential of splitting ``parent`` into
  ``left`` and ``right``, elementwise over broadcast feature pytrees.

``log phi(H) = sum over the inner nodes of H of log psi(children)``, ``P(H) = phi(H) / Z``
(Eq. 1-2 of the trellis paper). Users bring their own energies by subclassing `Energy`.
"""

from __future__ import annotations

import abc
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._internal.dtypes import float_dtype as _float
from .._internal.validation import real_array

__all__ = [
    "Energy",
    "DasguptaEnergy",
    "CorrelationEnergy",
    "GinkgoEnergy",
    "UnitEnergy",
    "all_subset_masks",
    "log_phi_of_tree",
]


def all_subset_masks(n: int, dtype=jnp.float64) -> jax.Array:
    """Membership of every subset: ``[2**n, n]``, row ``s`` has bit ``i`` of ``s`` in column ``i``."""
    s = jnp.arange(2**n, dtype=jnp.int32)[:, None]
    return ((s >> jnp.arange(n, dtype=jnp.int32)[None, :]) & 1).astype(dtype)


class Energy(eqx.Module):
    """Base class of trellis energies (see the module docstring)."""

    @abc.abstractmethod
    def subset_features(self, leaves, masks):
        """Features of the subsets ``masks [M, N]`` (float 0/1), leading axis ``M``."""

    @abc.abstractmethod
    def log_psi(self, parent, left, right):
        """Elementwise log potential of splitting ``parent`` into ``left`` and ``right``."""

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
        subset of the real elements)."""
        n = leaves.shape[0]
        pad = jnp.repeat(leaves[:1], n_max - n, axis=0)
        return jnp.concatenate([leaves, pad], axis=0)


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
        return jnp.pad(leaves, ((0, n_max - n), (0, n_max - n)))


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


class _JetFeatures(NamedTuple):
    p: jax.Array  # [..., 4] summed four-momentum (E, px, py, pz)
    size: jax.Array
    t: jax.Array  # mass squared (clamped at 0)
    sqrt_t: jax.Array
    log_t: jax.Array  # log t (0 where t = 0; never used there)
    leaf_term: jax.Array  # log(1 - exp(-lam t_cut / t)): a leaf child's log f when this is the parent
    is_root: jax.Array  # the subset holds every (real) leaf: its split uses lam_root


def _mass2(p):
    return jnp.maximum(p[..., 0] ** 2 - jnp.sum(p[..., 1:] ** 2, axis=-1), 0.0)


def _logaddexp_safe(a, b):
    """``logaddexp`` whose gradient is 0, not NaN, where both arguments are ``-inf``."""
    m = jnp.maximum(a, b)
    ok = m > -jnp.inf
    a_s, b_s, m_s = (jnp.where(ok, x, 0.0) for x in (a, b, m))
    out = m_s + jnp.log(jnp.exp(a_s - m_s) + jnp.exp(b_s - m_s))
    return jnp.where(ok, out, -jnp.inf)


def kallen(a, b, c):
    """The Kallen function ``a^2 + b^2 + c^2 - 2ab - 2ac - 2bc``."""
    return a * a + b * b + c * c - 2.0 * (a * b + a * c + b * c)


class GinkgoEnergy(Energy):
    """The Ginkgo toy parton shower's 1 -> 2 split likelihood (Eq. 5-6 of the trellis paper).

    Leaves: four-momenta ``[N, 4]`` (E, px, py, pz; ``E > 0``); a cluster's momentum is the
    sum of its leaves'. ``likelihood="paper"`` is the paper's formula (the one of the
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

    def validate_leaves(self, leaves, name: str = "leaves") -> np.ndarray:
        arr = super().validate_leaves(leaves, name)
        if arr.ndim != 2 or arr.shape[1] != 4:
            raise ValueError(f"{name} must be four-momenta [N, 4] (E, px, py, pz), got shape {arr.shape}")
        if np.any(arr[:, 0] <= 0):
            raise ValueError(f"{name}: every energy E (column 0) must be positive")
        # the splitting terms take squares of masses squared (the Kallen function): E^4 of
        # the whole jet must stay finite
        with np.errstate(over="ignore"):
            ok = bool(np.isfinite(np.float64(np.sum(np.abs(arr))) ** 4 * 64.0))
        if not ok:
            raise ValueError(
                f"{name}: four-momenta up to {float(np.max(np.abs(arr))):.3g} are too large: the squared "
                f"invariant masses overflow float64; rescale the momenta (and t_cut with them)"
            )
        return arr

    def pad_leaves(self, leaves, n_max: int):
        """Pads with zero four-momenta (they mark padding: the root is the set of the rows
        with ``E > 0``)."""
        n = leaves.shape[0]
        return jnp.pad(leaves, ((0, n_max - n), (0, 0)))

    def _lam_of(self, is_root):
        if not self.separate_root:
            return self.lam
        return jnp.where(is_root, self.lam_root, self.lam)

    def subset_features(self, leaves, masks):
        # per-subset terms are computed once here, not once per split
        leaves = jnp.asarray(leaves)
        p = masks @ leaves
        t = _mass2(p)
        pos = t > 0
        ts = jnp.where(pos, t, 1.0)
        size = jnp.sum(masks, axis=-1)
        n_real = jnp.sum(leaves[:, 0] > 0)
        is_root = size == n_real
        lam = self._lam_of(is_root)
        return _JetFeatures(
            p,
            size,
            t,
            jnp.sqrt(t),
            jnp.where(pos, jnp.log(ts), 0.0),
            jnp.log(-jnp.expm1(-lam * self.t_cut / ts)),
            is_root,
        )

    def log_psi(self, parent, left, right):
        if self.likelihood == "paper":
            return self._log_psi_paper(parent, left, right)
        return self._log_psi_exact(parent, left, right)

    def _log_psi_paper(self, parent, left, right):
        lam, tc = self._lam_of(parent.is_root), self.t_cut
        log_lam = jnp.log(lam)
        log_norm = -jnp.log(-jnp.expm1(-lam))
        tP, sP = parent.t, parent.sqrt_t
        lin, rin = left.size > 1, right.size > 1  # leaves have t = 0 in the paper's convention
        tL, tR = jnp.where(lin, left.t, 0.0), jnp.where(rin, right.t, 0.0)
        l_is_max = tL >= tR
        tmax, tmin = jnp.where(l_is_max, tL, tR), jnp.where(l_is_max, tR, tL)
        smax = jnp.where(l_is_max, jnp.where(lin, left.sqrt_t, 0.0), jnp.where(rin, right.sqrt_t, 0.0))
        # log f(t_max | t_P): the parent's log t and leaf term are per-subset features
        tPs = jnp.where(tP > 0, tP, 1.0)
        f1 = jnp.where(tmax > 0, log_lam - parent.log_t - lam * tmax / tPs, parent.leaf_term)
        # log f(t_min | t_P2), t_P2 = (sqrt t_P - sqrt t_max)^2
        tP2 = (sP - smax) ** 2
        ok2 = tP2 > 0
        s2 = jnp.where(ok2, tP2, 1.0)
        f2 = jnp.where(tmin > 0, log_lam - jnp.log(s2) - lam * tmin / s2, jnp.log(-jnp.expm1(-lam * tc / s2)))
        out = 2.0 * log_norm + f1 + jnp.where(ok2, f2, -jnp.inf) - jnp.log(4 * jnp.pi)
        return jnp.where((tP < tc) | (tP <= 0), -jnp.inf, out)

    def _log_psi_exact(self, parent, left, right):
        lam, tc = self._lam_of(parent.is_root), self.t_cut
        log_c = jnp.log(lam) - jnp.log(-jnp.expm1(-lam))  # log(lam / (1 - e^-lam))
        tP = parent.t
        tL, tR = left.t, right.t
        lleaf, rleaf = left.size == 1, right.size == 1
        # support of a child: leaves t <= t_cut, inner t > t_cut
        okL = jnp.where(lleaf, tL <= tc, tL > tc)
        okR = jnp.where(rleaf, tR <= tc, tR > tc)
        tPs = jnp.where(tP > 0, tP, 1.0)

        def logf2(t, s):
            # truncated exponential density on [0, s), s the second child's bound
            ok = (s > 0) & (t < s)
            s_safe = jnp.where(ok, s, 1.0)
            return jnp.where(ok, log_c - jnp.log(s_safe) - lam * t / s_safe, -jnp.inf)

        # first-drawn child: density on [0, t_P) uses the parent's per-subset log t
        f1L = jnp.where(tL < tP, log_c - parent.log_t - lam * tL / tPs, -jnp.inf)
        sqP = parent.sqrt_t
        a = f1L + logf2(tR, (sqP - left.sqrt_t) ** 2)
        if self.ordered:
            tot = a
        else:
            f1R = jnp.where(tR < tP, log_c - parent.log_t - lam * tR / tPs, -jnp.inf)
            b = f1R + logf2(tL, (sqP - right.sqrt_t) ** 2)
            tot = _logaddexp_safe(a, b)
        out = tot - jnp.log(4 * jnp.pi)
        K = kallen(tP, tL, tR)
        if self.phase_space:
            K_safe = jnp.where(K > 0, K, 1.0)
            out = out + jnp.log(8.0) + parent.log_t - 0.5 * jnp.log(K_safe)
        return jnp.where((tP > tc) & (K > 0) & okL & okR, out, -jnp.inf)


def log_phi_of_tree(energy: Energy, leaves, tree) -> jax.Array:
    """``log phi(H)``: the sum of ``log psi`` over the inner nodes of ``tree`` (a `Tree`)."""
    n = energy.n_elements(leaves)
    masks = jnp.asarray(tree.leaf_sets(), dtype=jnp.result_type(leaves, _float()))
    feats = energy.subset_features(jnp.asarray(leaves), masks)
    ch = np.asarray(tree.children)
    take = lambda idx: jax.tree_util.tree_map(lambda x: x[idx], feats)
    if ch.shape[0] == 0:
        return jnp.zeros((), _float())
    par = n + np.arange(n - 1)
    return jnp.sum(energy.log_psi(take(par), take(ch[:, 0]), take(ch[:, 1])))
