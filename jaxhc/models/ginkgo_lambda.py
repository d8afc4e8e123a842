"""The Ginkgo splitting rate lambda given the leaves of many jets, every tree summed out by
the exact trellis, as a NumPyro program (`lambda_model`), with the jet preparation and the
checks it shares with `jaxhc.inference.ginkgo_fit` (fit_lambda, sample_lambda)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from .._internal.processes import process_local, sum_over_processes
from .._internal.validation import check_alpha
from ..trellis.checks import check_batch_inputs
from ..trellis.energies import GinkgoEnergy
from ..trellis.flat import PreparedBatch, layout_valid, log_partition_prepared
from ..trellis.invalid import InvalidProblems, apply_policy, check_on_invalid

__all__ = ["check_lam_prior", "check_likelihood", "check_positive", "default_lam_prior", "lambda_model", "prepare_jets"]

# ------------------------------------------------------------------------------------------
# the rate lambda given the leaves of many jets, trees summed out: NumPyro model
# (fitted by jaxhc.inference.ginkgo_fit: fit_lambda, sample_lambda)
# ------------------------------------------------------------------------------------------
_LIKELIHOODS = ("paper", "exact")


def check_likelihood(likelihood) -> str:
    if not isinstance(likelihood, str) or likelihood not in _LIKELIHOODS:
        raise ValueError(f"likelihood must be 'paper' or 'exact', got {likelihood!r}")
    return likelihood


def check_positive(x, name: str) -> float:
    if isinstance(x, (bool, np.bool_, str, bytes)):
        raise TypeError(f"{name} must be a positive scalar, got {x!r}")
    return check_alpha(x, name)


def prepare_jets(leaves_padded, n_leaves, t_cut, likelihood: str = "exact", on_invalid: str = "skip") -> PreparedBatch:
    """Validates a batch of jets once and lays it out for the trellis (host work).

    Args:
      leaves_padded: ``[B, N_max, 4]`` four-momenta ``(E, px, py, pz)``; jet ``b`` in its
        first ``n_leaves[b]`` rows, the remaining rows never read (zero padding is fine).
        A `jaxhc.trellis.PreparedBatch` is returned as is (then ``n_leaves`` must be None).
        Or a jagged awkward array of jets of four-vectors (`jaxhc.jets.hep`).
      n_leaves: ``[B]`` integer number of leaves of each jet, in ``[1, N_max]`` (None for
        awkward jets: taken from the array).
      t_cut: mass-squared cut-off of the shower (> 0, finite).
      likelihood: ``"exact"`` or ``"paper"``.
      on_invalid: ``"skip"`` (default): jets that fail the four-momentum checks
        (`jaxhc.trellis.GinkgoEnergy`) or that cannot split (several leaves whose total mass
        squared is not above ``t_cut``: ``log Z = -inf`` for every ``lambda``) are left out,
        with one warning; the batch's ``invalid`` report names each and why. ``"raise"``:
        raise `jaxhc.trellis.InvalidProblemsError` naming every one.

    Returns:
      `jaxhc.trellis.PreparedBatch` (every valid jet at its own size, one compiled program).
    """
    check_likelihood(likelihood)
    tc = check_positive(t_cut, "t_cut")
    if isinstance(leaves_padded, PreparedBatch):
        if n_leaves is not None:
            raise ValueError("n_leaves must be None when leaves_padded is a PreparedBatch")
        return leaves_padded
    from ..trellis.ragged import is_awkward  # the trellis's conversion door (not jaxhc.jets: imports run downhill)

    if is_awkward(leaves_padded):  # jagged jets of four-vectors: n_leaves from the array
        from ..trellis.checks import awkward_or_padded

        leaves_padded, n_leaves = awkward_or_padded(leaves_padded, n_leaves)
    if n_leaves is None:
        raise ValueError("n_leaves is required (the number of leaves of each jet)")
    leaves_padded, n_leaves = process_local(leaves_padded, "leaves_padded"), process_local(n_leaves, "n_leaves")
    lp = leaves_padded if isinstance(leaves_padded, jax.core.Tracer) else np.asarray(leaves_padded)
    if isinstance(lp, np.ndarray) and (lp.ndim != 3 or lp.shape[-1] != 4):
        raise ValueError(f"leaves_padded must be four-momenta [B, N_max, 4], got shape {lp.shape}")
    check_on_invalid(on_invalid)
    with jax.ensure_compile_time_eval():
        # the four-momentum checks collected (never raised) here, the split check added, then
        # the policy applied once to both
        lp, nl, n_max, invalid = check_batch_inputs(GinkgoEnergy(1.0, tc, likelihood), leaves_padded, n_leaves, None)
        invalid = invalid.merged(_split_check(lp, nl, tc))
        apply_policy(invalid, on_invalid, stacklevel=3)
        return layout_valid(lp, nl, n_max, invalid)


def _split_check(lp: np.ndarray, nl: np.ndarray, t_cut: float) -> InvalidProblems:
    """Every split needs its parent's mass squared above ``t_cut``: a jet of two or more
    leaves whose total mass squared is not has ``log Z = -inf`` for every ``lambda``."""
    real = np.arange(lp.shape[1])[None, :] < nl[:, None]
    with np.errstate(invalid="ignore", over="ignore"):
        p = np.sum(np.where(real[..., None], lp, 0.0), axis=1)
        m2 = p[:, 0] ** 2 - np.sum(p[:, 1:] ** 2, axis=1)
    bad = np.flatnonzero((nl >= 2) & ~(m2 > t_cut) & np.isfinite(m2))
    reasons = {
        int(b): (
            f"leaves_padded[{b}]: t_cut={t_cut:g} is not below the jet's mass squared {m2[b]:.4g}: no split is "
            "possible (log Z = -inf for every lambda); lower t_cut or check the units of the momenta"
        )
        for b in bad
    }
    return InvalidProblems.from_reasons(reasons, len(nl))


def default_lam_prior():
    """The default prior of ``lambda``: ``LogNormal(0, 1)`` (median 1, central 95% mass in
    ``[0.14, 7.1]``): weakly informative over the rates a parton-shower toy uses (Ginkgo's
    examples take 1 to 3), support ``lambda > 0``."""

    return dist.LogNormal(0.0, 1.0)


def check_lam_prior(lam_prior):

    if lam_prior is None:
        return default_lam_prior()
    if not isinstance(lam_prior, dist.Distribution):
        raise TypeError(f"lam_prior must be a numpyro Distribution, got {type(lam_prior).__name__}")
    if lam_prior.batch_shape != () or lam_prior.event_shape != ():
        raise ValueError(
            f"lam_prior must be a scalar distribution, got batch_shape {lam_prior.batch_shape} "
            f"and event_shape {lam_prior.event_shape}"
        )
    with jax.ensure_compile_time_eval():  # the model is traced under jit by NUTS
        negative_allowed = lam_prior.support(jnp.asarray(-1.0))
    if not isinstance(negative_allowed, jax.core.Tracer) and bool(negative_allowed):
        raise ValueError("lam_prior must have support in lambda > 0 (e.g. LogNormal, Gamma, HalfNormal)")
    return lam_prior


def lambda_model(
    leaves_padded, n_leaves, t_cut, *, lam_prior=None, likelihood: str = "exact", across_processes: bool = False
):
    """NumPyro model of ``lambda`` given jets' leaves, trees summed out.

    ``lam ~ lam_prior`` (site ``"lam"``; default `default_lam_prior`, ``LogNormal(0, 1)``),
    then ``numpyro.factor("log_z", sum_b log Z_b(lam))`` with ``Z_b`` the exact trellis
    partition function of jet ``b`` under ``GinkgoEnergy(lam, t_cut, likelihood)``. Jittable
    and differentiable in ``lam`` (NUTS, ``Predictive``, ``log_density``): the jets' layout
    is static structure of the prepared batch.

    Args:
      leaves_padded: ``[B, N_max, 4]`` four-momenta (jet ``b`` in its first ``n_leaves[b]``
        rows) or, better, a `PreparedBatch` from `prepare_jets` (``n_leaves=None``): raw
        arrays are validated on the host each time the model is traced and must be concrete.
      n_leaves: ``[B]`` number of leaves per jet (None with a `PreparedBatch`).
      t_cut: mass-squared cut-off (> 0).
      lam_prior: a scalar numpyro distribution with support ``lambda > 0``.
      likelihood: ``"exact"`` or ``"paper"``.
      across_processes: after ``jax.distributed.initialize`` with several processes, each
        passing its own jets: the factor is ``sum_b log Z_b`` over the jets of *all*
        processes (exchanged by a host callback at every evaluation, value and forward-mode
        tangent; `jaxhc.sample_lambda` sets it). Every process must then evaluate the model
        in lockstep (the same inference on the same keys). No effect with one process.
    """

    prior = check_lam_prior(lam_prior)
    check_likelihood(likelihood)
    if isinstance(t_cut, jax.core.Tracer):
        if not isinstance(leaves_padded, PreparedBatch):
            raise TypeError("with a traced t_cut, leaves_padded must be a PreparedBatch (prepare_jets)")
        tc, batch = t_cut, leaves_padded
    else:
        tc = check_positive(t_cut, "t_cut")
        batch = prepare_jets(leaves_padded, n_leaves, tc, likelihood)
    lam = numpyro.sample("lam", prior)
    log_z = log_partition_prepared(GinkgoEnergy(lam, tc, likelihood), batch.solved_part())  # skipped jets left out
    total = jnp.sum(log_z)
    numpyro.factor("log_z", sum_over_processes(total) if across_processes else total)
