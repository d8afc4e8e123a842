"""An energy for real jets: the leading-order QCD collinear splitting weight with a smooth
infrared cutoff (`SplittingEnergy`)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._internal import vmath
from .._internal.dtypes import float_dtype as _float
from .energies import SummedMomentumEnergy

__all__ = ["SplittingEnergy"]

#: the colour factor of the gluon splitting function, C_A = N_c = 3
C_A = 3.0


class _SplittingFeatures(NamedTuple):
    energy: jax.Array  # E of the subset
    t: jax.Array  # invariant mass squared, clamped at 0
    mu2: jax.Array  # the jet's infrared scale squared (the same for every subset of a jet)


class SplittingEnergy(SummedMomentumEnergy):
    """The leading-order QCD splitting weight of every 1 -> 2 split, with a smooth infrared
    cutoff at a per-jet scale: an energy for jets of massless (or massive) particles or
    subjets, where `GinkgoEnergy`'s hard ``t_cut`` makes most trees impossible.

    For a parent ``P`` split into ``L`` and ``R`` (four-momenta summed over their leaves):
    ``z = E_L / E_P`` (``E_P = E_L + E_R``), ``t_P = P^2`` the parent's virtuality (invariant
    mass squared), ``kt^2 = z (1 - z) t_P`` (the splitting's transverse momentum squared in
    the collinear limit) and

        psi = alpha_s / (2 pi) * P_gg(z) * z (1 - z) / (kt^2 + mu^2),
        P_gg(z) = C_A [z / (1 - z) + (1 - z) / z + z (1 - z)]   (C_A = 3),

    so ``psi = alpha_s / (2 pi) P_gg(z) / t_P`` when ``kt >> mu``: the collinear factorisation
    of the QCD matrix element, ``dP = alpha_s / (2 pi) P(z) dz dt / t`` (Altarelli & Parisi,
    Nucl. Phys. B126 (1977) 298; e.g. Ellis, Stirling & Webber, "QCD and collider physics",
    ch. 5). Below ``kt ~ mu`` the weight levels off smoothly instead of diverging:
    ``P_gg(z) z (1 - z) = C_A [z^2 + (1 - z)^2 + z^2 (1 - z)^2]`` is finite at ``z = 0, 1``,
    so soft and collinear splits (massless leaves included, ``t_P = 0`` included) get
    finite weights and every tree is possible. The scale is per jet: ``mu^2 = cutoff^2
    t_jet`` with ``t_jet`` the invariant mass squared of the whole jet (all its leaves), so
    the weights, and the posterior over trees, are unchanged when a jet's momenta are scaled.

    ``P_gg`` is flavour-blind and symmetric in ``z <-> 1 - z``, so ``psi`` does not depend on
    which child is called left. It is invariant under rotations of the jet (``E`` and the
    masses are); ``z`` is taken from energies, so it is frame-dependent like a shower's.

    Parameters are differentiable (`jax.grad` of `jaxhc.trellis.log_partition` reaches
    them). ``psi`` is a weight, not a normalised density of the leaves (that would need the
    Sudakov factor): ``alpha_s`` multiplies every tree of an ``N``-leaf jet by
    ``alpha_s^(N-1)`` (it moves ``log Z`` by ``(N - 1) log alpha_s`` and leaves the posterior
    over trees unchanged), while ``cutoff`` shapes the posterior.

    Args:
      alpha_s: the strong coupling (> 0; default 0.118, its value at the Z mass).
      cutoff: the infrared scale as a fraction of the jet's mass (> 0; default 0.1:
        splits with ``kt`` below about a tenth of the jet mass are no longer enhanced).
    """

    alpha_s: jax.Array
    cutoff: jax.Array

    def __init__(self, alpha_s=0.118, cutoff=0.1):
        self.alpha_s = jnp.asarray(alpha_s, dtype=_float())
        self.cutoff = jnp.asarray(cutoff, dtype=_float())

    def __check_init__(self):
        for name in ("alpha_s", "cutoff"):
            v = getattr(self, name)
            if not isinstance(v, jax.core.Tracer):
                a = np.asarray(v)
                if a.ndim != 0 or not np.isfinite(a) or a <= 0:
                    raise ValueError(f"{name} must be a positive finite scalar, got {a}")

    def features_of_sums(self, leaves, p, size):
        t = jnp.maximum(p[..., 0] ** 2 - jnp.sum(p[..., 1:] ** 2, axis=-1), 0.0)
        jet = jnp.sum(leaves, axis=0)  # padding rows are zero four-momenta
        t_jet = jnp.maximum(jet[0] ** 2 - jnp.sum(jet[1:] ** 2), 0.0)
        # a jet of one massless direction has t_jet = 0: fall back on its energy squared
        scale2 = jnp.where(t_jet > 0, t_jet, jet[0] ** 2)
        mu2 = jnp.broadcast_to(self.cutoff**2 * scale2, t.shape)
        return _SplittingFeatures(p[..., 0], t, mu2)

    def log_psi(self, parent, left, right):
        b, x = self.log_psi_parts(parent, left, right)
        return b + vmath.log(x)

    def log_psi_parts(self, parent, left, right):
        e = left.energy + right.energy
        z = left.energy / jnp.where(e > 0, e, 1.0)
        y = 1.0 - z
        zz = z * y
        num = z * z + y * y + zz * zz  # P_gg(z) z (1 - z) / C_A
        return jnp.log(self.alpha_s * C_A / (2.0 * jnp.pi)), num / (zz * parent.t + parent.mu2)
