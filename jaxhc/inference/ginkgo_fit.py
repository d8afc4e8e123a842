"""Learning the Ginkgo shower rate ``lambda`` from observed jets, with the trees summed out.

Only the leaves (final-state four-momenta) of each jet are observed; the shower history is
not. The likelihood of ``lambda`` for one jet is the sum over every binary tree of the
shower density of that tree, ``p(leaves | lambda) = Z(lambda)``, which the exact cluster
trellis computes in ``O(3^N)`` (Alg. 1 of the trellis paper); over independent jets the
log likelihood is ``sum_b log Z_b(lambda)``. Use ``likelihood="exact"`` (the generator's
exact density, see the data README: with it the trees-summed-out maximum likelihood
recovers the generating ``lambda``; the paper's likelihood does not).

- `fit_lambda`: maximum likelihood (optax + Newton on ``u = log lambda``).
- `lambda_model` (defined in `jaxhc.models.ginkgo`, re-exported here): a NumPyro model,
  ``lam ~ prior``, ``factor(sum_b log Z_b(lam))``.
- `sample_lambda`: NUTS over that model; posterior mean and 95% interval.

All three validate the jets once on the host (`jaxhc.trellis.prepare_batch`) and accept an
already prepared batch in place of ``leaves_padded`` (then ``n_leaves=None``), so a loop
over many parameter values never re-validates. Fit in float64
(``jax.config.update("jax_enable_x64", True)``): ``E^2 - |p|^2`` cancels badly in float32.
"""

from __future__ import annotations

import warnings
from functools import partial
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .._internal.deprecation import renamed_argument
from .._internal.processes import allgather_sum
from ..models.ginkgo_lambda import check_lam_prior as _check_prior
from ..models.ginkgo_lambda import check_likelihood as _check_likelihood
from ..models.ginkgo_lambda import check_positive as _check_positive
from ..models.ginkgo_lambda import default_lam_prior, lambda_model, prepare_jets
from ..trellis.energies import GinkgoEnergy
from ..trellis.flat import PreparedBatch, log_partition_prepared
from ..trellis.invalid import InvalidProblems

__all__ = [
    "LambdaFit",
    "LambdaPosterior",
    "LambdaSamples",
    "default_lam_prior",
    "fit_lambda",
    "lambda_model",
    "log_likelihood",
    "prepare_jets",
    "sample_lambda",
]


# ------------------------------------------------------------------------------------------
# validation (the jets' checks and layout, prepare_jets, live with lambda_model in
# jaxhc.models.ginkgo)
# ------------------------------------------------------------------------------------------
def _check_count(x, name: str, minimum: int) -> int:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {x!r}")
    if x < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {x}")
    return int(x)


def _warn_float32():
    if not jax.config.jax_enable_x64:
        warnings.warn(
            "jax_enable_x64 is off: Ginkgo masses E^2 - |p|^2 lose most of their digits in "
            "float32; enable it (jax.config.update('jax_enable_x64', True)) before fitting",
            stacklevel=3,
        )


# ------------------------------------------------------------------------------------------
# the objective: mean log Z per jet as a function of u = log lambda
# ------------------------------------------------------------------------------------------
def _mean_log_z(u, batch, t_cut, likelihood):
    # only lam is passed: a root-split rate (lam_root), where the energy has one, stays tied to lam
    energy = GinkgoEnergy(jnp.exp(u), t_cut, likelihood)
    return jnp.mean(log_partition_prepared(energy, batch))  # batch: a solved_part (no skipped jets)


@partial(jax.jit, static_argnames=("likelihood",))
def _derivatives_jit(u, batch, t_cut, likelihood):
    f = lambda v: _mean_log_z(v, batch, t_cut, likelihood)
    df = lambda v: jax.jvp(f, (v,), (jnp.ones_like(v),))
    (value, grad), (_, hess) = jax.jvp(df, (u,), (jnp.ones_like(u),))
    return value, grad, hess


def _derivatives(u, batch, t_cut, likelihood):
    """``(f, f', f'')`` of the mean log Z per jet at ``u = log lambda`` (nested forward mode:
    one parameter, so forward mode is the cheapest and the curvature comes with it). After
    `jax.distributed.initialize` with several processes, each holding its own jets, the mean
    is over the jets of all processes (local sums gathered across processes), so every
    process takes the same steps and a fit on P processes equals the single-process fit."""
    dtype = jnp.result_type(float)
    out = _derivatives_jit(jnp.asarray(u, dtype), batch, jnp.asarray(t_cut, dtype), likelihood)
    if jax.process_count() == 1:
        return out
    n = float(batch.batch_size)
    tot = allgather_sum(np.array([n] + [n * float(x) for x in out], np.float64))
    return tuple(tot[1:] / tot[0])


def _total_batch_size(batch) -> int:
    """Jets over all processes (`_derivatives`' denominator)."""
    return int(allgather_sum(np.array([batch.batch_size], np.int64))[0])


class LambdaFit(NamedTuple):
    """Output of `fit_lambda`.

    Fields:
      lam: the maximum-likelihood ``lambda``.
      stderr: its asymptotic standard error, ``1 / sqrt(-d^2/dlam^2 sum_b log Z_b)`` at
        ``lam`` (observed information; ``nan`` if the curvature is not negative).
      trace: ``[num_steps + 1]`` mean ``log Z`` per jet at each iterate (entry 0: ``lam_init``).
      num_steps: optimisation steps taken.
      converged: ``|d/du mean log Z| <= tol`` and ``d^2/du^2 mean log Z < 0`` at ``lam``
        (``u = log lambda``): a maximum, not the flat ``lambda -> 0`` end.
      grad: ``d/dlam`` of the summed ``log Z`` at ``lam``.
      num_jets: the jets fitted (over all processes), those that passed the checks.
      invalid: the `jaxhc.trellis.InvalidProblems` report of the jets left out
        (``on_invalid="skip"``; empty when none was).
    """

    lam: float
    stderr: float
    trace: np.ndarray
    num_steps: int
    converged: bool
    grad: float
    num_jets: int = 0
    invalid: Any = None


def fit_lambda(
    leaves_padded,
    n_leaves=None,
    t_cut=None,
    *,
    lam_init: float = 1.0,
    likelihood: str = "exact",
    steps: int = 100,
    learning_rate: float = 0.2,
    optimizer: Optional[optax.GradientTransformation] = None,
    tol: float = 1e-9,
    max_newton_step: float = 1.0,
    progress_bar: bool = True,
    progress: Optional[bool] = None,
    on_invalid: str = "skip",
) -> LambdaFit:
    """Maximum-likelihood ``lambda`` of a batch of jets with the trees summed out.

    Maximises ``f(u) = (1/B) sum_b log Z_b(e^u)`` over the unconstrained ``u = log lambda``
    (``Z_b`` the exact trellis partition function of jet ``b``: Alg. 1 of the trellis
    paper). The method: every iteration computes ``f, f', f''`` at once by nested
    forward-mode differentiation (one parameter, one compiled program). Where ``f'' < 0``
    it takes a Newton step ``-f'/f''`` (at most ``max_newton_step`` in ``u``), halved until
    ``f`` increases; elsewhere one step of ``optimizer`` (an optax transformation of the
    gradient of ``-f``, default ``optax.adam(learning_rate)``). In 1-D Newton converges
    quadratically near the maximum (``f`` is smooth and concave there), the backtracking
    makes every Newton step an ascent step, and the optax steps carry the iterate out of
    non-concave regions (``f`` is convex at small ``lambda``, where it flattens out as
    ``lambda -> 0``); a line-search method (``optax.lbfgs``) would trace the trellis several
    times into its line search and compile it again. Stops when ``|f'| <= tol`` at a point
    where ``f'' < 0``.

    Args:
      leaves_padded: ``[B, N_max, 4]`` four-momenta, jet ``b`` in its first
        ``n_leaves[b]`` rows (the rest never read), or a `PreparedBatch` from `prepare_jets`
        (then ``n_leaves=None``).
      n_leaves: ``[B]`` number of leaves per jet (None for a jagged awkward array of jets,
        `jaxhc.jets.hep`: taken from the array).
      t_cut: the shower's mass-squared cut-off (> 0).
      lam_init: starting ``lambda`` (> 0).
      likelihood: ``"exact"`` (the generator's density; use it for inference) or ``"paper"``.
      steps: maximum number of iterations.
      learning_rate: of the default optimizer.
      optimizer: optax transformation of the gradient of ``-f`` used where the objective is
        not locally concave (transformations taking extra arguments, e.g. ``optax.lbfgs``,
        get ``value``, ``grad`` and ``value_fn``).
      tol: convergence tolerance on ``|d/du mean log Z|``.
      max_newton_step: largest Newton step in ``u`` (a factor ``e`` in ``lambda`` by default).
      progress_bar: show a tqdm progress bar.
      progress: deprecated spelling of ``progress_bar`` (DeprecationWarning).
      on_invalid: ``"skip"`` (default): jets that fail the checks (`prepare_jets`) are left
        out of the fit with one warning, and named in ``LambdaFit.invalid``; ``"raise"``:
        raise `jaxhc.trellis.InvalidProblemsError` naming every one.

    Returns:
      `LambdaFit`. Only ``lam`` is fitted: a separate root-split rate of the energy, where it
      exists, stays tied to ``lam``.
    """
    progress_bar = renamed_argument(progress_bar, progress, old="progress", new="progress_bar", where="fit_lambda")
    _check_likelihood(likelihood)
    tc = _check_positive(t_cut, "t_cut")
    lam0 = _check_positive(lam_init, "lam_init")
    steps = _check_count(steps, "steps", 1)
    lr = _check_positive(learning_rate, "learning_rate")
    tol = _check_positive(tol, "tol")
    max_step = _check_positive(max_newton_step, "max_newton_step")
    if optimizer is not None and not isinstance(optimizer, optax.GradientTransformation):
        raise TypeError(f"optimizer must be an optax GradientTransformation, got {type(optimizer).__name__}")
    prepared = prepare_jets(leaves_padded, n_leaves, tc, likelihood, on_invalid)
    batch = prepared.solved_part()
    # the root of a one-leaf jet is the subset {0} (bitmask 1); with several processes the
    # count is global, so that every process raises or none does
    multi = int(allgather_sum(np.array([np.sum(np.asarray(batch.subset_mask)[np.asarray(batch.roots)] > 1)]))[0])
    if not isinstance(leaves_padded, PreparedBatch) and multi == 0:
        raise ValueError(
            "n_leaves: every jet has a single leaf, whose likelihood does not depend on lambda "
            "(log Z = 0): there is nothing to fit"
        )
    _warn_float32()
    opt = optax.adam(lr) if optimizer is None else optimizer

    u = jnp.asarray(np.log(lam0), jnp.result_type(float))
    opt_state = opt.init(u)
    value, grad, hess = (float(x) for x in _derivatives(u, batch, tc, likelihood))
    if not (np.isfinite(value) and np.isfinite(grad)):
        raise ValueError(
            f"fit_lambda: the mean log Z per jet is {value} at lam_init={lam0:g} (gradient {grad}): "
            f"some jet has no possible hierarchy, or lam_init is too extreme; check the jets and t_cut"
        )
    trace = [value]
    converged = abs(grad) <= tol and hess < 0
    bar = None
    if progress_bar:
        from tqdm.auto import tqdm

        bar = tqdm(total=steps, desc="fit lambda", leave=False)
    extra_args = isinstance(opt, optax.GradientTransformationExtraArgs)
    neg_f = lambda v: -_mean_log_z(v, batch, tc, likelihood)
    n_steps = 0
    try:
        while not converged and n_steps < steps:
            cand = None
            if hess < 0:  # Newton, halved until f does not decrease
                delta = float(np.clip(-grad / hess, -max_step, max_step))
                for _ in range(20):
                    trial = _derivatives(u + delta, batch, tc, likelihood)
                    if np.isfinite(float(trial[0])) and float(trial[0]) >= value:
                        u, cand = u + delta, trial
                        break
                    delta *= 0.5
            if cand is None:  # not locally concave (or no ascent found): one optax step on -f
                g = jnp.asarray(-grad, u.dtype)
                kw = dict(value=jnp.asarray(-value, u.dtype), grad=g, value_fn=neg_f) if extra_args else {}
                updates, opt_state = opt.update(g, opt_state, u, **kw)
                u = optax.apply_updates(u, updates)
                cand = _derivatives(u, batch, tc, likelihood)
            value, grad, hess = (float(x) for x in cand)
            trace.append(value)
            n_steps += 1
            converged = abs(grad) <= tol and hess < 0
            if bar is not None:
                bar.update(1)
                bar.set_postfix(lam=f"{float(np.exp(u)):.5g}", grad=f"{grad:.2e}")
    finally:
        if bar is not None:
            bar.close()
    lam = float(np.exp(u))
    B = _total_batch_size(batch)
    # d/dlam = f' / lam, d^2/dlam^2 = (f'' - f') / lam^2 (per jet; times B for the sum)
    curv = B * (hess - grad) / lam**2
    stderr = float(1.0 / np.sqrt(-curv)) if curv < 0 else float("nan")
    invalid = prepared.invalid if prepared.invalid is not None else InvalidProblems((), (), prepared.batch_size)
    return LambdaFit(lam, stderr, np.asarray(trace), n_steps, bool(converged), B * grad / lam, B, invalid)


def log_likelihood(lam, leaves_padded, n_leaves, t_cut, *, likelihood: str = "exact", on_invalid: str = "skip"):
    """``sum_b log Z_b(lam)``: the log likelihood of ``lam`` with the trees summed out
    (traceable and differentiable in ``lam``; pass a `PreparedBatch` to skip the host
    checks), over the jets that pass the checks (``on_invalid`` as in `prepare_jets`)."""
    _check_likelihood(likelihood)
    tc = _check_positive(t_cut, "t_cut")
    batch = prepare_jets(leaves_padded, n_leaves, tc, likelihood, on_invalid).solved_part()
    if not isinstance(lam, jax.core.Tracer):
        _check_positive(lam, "lam")
    return jnp.sum(log_partition_prepared(GinkgoEnergy(lam, tc, likelihood), batch))


# ------------------------------------------------------------------------------------------
# Bayesian: NumPyro model and NUTS
# ------------------------------------------------------------------------------------------
class LambdaSamples(NamedTuple):
    """Output of `sample_lambda` (MCMC draws of ``lambda``; ``LambdaPosterior`` is its former
    name, kept as an alias).

    Fields:
      mcmc: the `numpyro.infer.MCMC` object (``print_summary()``; ``get_extra_fields()``
        holds each draw's ``num_steps`` (leapfrog steps) and ``diverging``).
      samples: ``[num_chains * num_samples]`` posterior draws of ``lambda``.
      mean, sd: posterior mean and standard deviation.
      interval: ``(2.5%, 97.5%)`` posterior quantiles (central 95% interval).
      invalid: the `jaxhc.trellis.InvalidProblems` report of the jets left out.
    """

    mcmc: Any
    samples: np.ndarray
    mean: float
    sd: float
    interval: tuple
    invalid: Any = None


#: Former name of `LambdaSamples`.
LambdaPosterior = LambdaSamples


def sample_lambda(
    key,
    leaves_padded,
    n_leaves=None,
    t_cut=None,
    *,
    num_warmup: int = 300,
    num_samples: int = 500,
    num_chains: int = 1,
    lam_prior=None,
    likelihood: str = "exact",
    progress_bar: bool = True,
    progress: Optional[bool] = None,
    on_invalid: str = "skip",
) -> LambdaSamples:
    """Posterior of ``lambda`` given the jets' leaves by NUTS over `lambda_model`.

    The jets are validated and laid out once (`prepare_jets`); NUTS differentiates the
    potential in forward mode (one parameter: cheaper than reverse mode through the
    trellis) and starts from the prior median. Same key, same samples. After
    ``jax.distributed.initialize`` with several processes, each passing its own jets (host
    arrays or its rows of a global ``jax.Array``), the likelihood is summed over all
    processes' jets at every step, so every process runs the same chains (one after
    another) and returns the posterior given all jets; call it on every process with the
    same key and settings.

    Args:
      key: a JAX PRNG key.
      leaves_padded, n_leaves, t_cut, lam_prior, likelihood: as in `lambda_model`.
      num_warmup, num_samples, num_chains: NUTS settings (chains run in parallel over
        devices when there are enough, sequentially otherwise).
      progress_bar: NumPyro's progress bar.
      progress: deprecated spelling of ``progress_bar`` (DeprecationWarning).
      on_invalid: ``"skip"`` (default): jets that fail the checks are left out with one
        warning (``LambdaSamples.invalid`` names them); ``"raise"``: raise
        `jaxhc.trellis.InvalidProblemsError` naming every one.

    Returns:
      `LambdaSamples`.
    """
    from numpyro.infer import MCMC, NUTS, init_to_median

    progress_bar = renamed_argument(progress_bar, progress, old="progress", new="progress_bar", where="sample_lambda")
    if not isinstance(key, jax.Array):
        raise TypeError(f"key must be a JAX PRNG key (jax.random.key or PRNGKey), got {type(key).__name__}")
    _check_likelihood(likelihood)
    tc = _check_positive(t_cut, "t_cut")
    num_warmup = _check_count(num_warmup, "num_warmup", 0)
    num_samples = _check_count(num_samples, "num_samples", 1)
    num_chains = _check_count(num_chains, "num_chains", 1)
    prior = _check_prior(lam_prior)
    prepared = prepare_jets(leaves_padded, n_leaves, tc, likelihood, on_invalid)
    batch = prepared.solved_part()
    _warn_float32()
    # after jax.distributed.initialize with several processes, each holding its own jets,
    # the model's likelihood is summed over the processes (`sum_over_processes`), so every
    # process runs the same chains on all the jets; the chains then run one after another
    # (chains running at once could exchange their sums in different orders on different
    # processes)
    multi = jax.process_count() > 1
    model = partial(lambda_model, across_processes=True) if multi else lambda_model
    kernel = NUTS(model, forward_mode_differentiation=True, init_strategy=init_to_median)
    method = "parallel" if jax.local_device_count() >= num_chains and not multi else "sequential"
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method=method,
        progress_bar=progress_bar,
    )
    mcmc.run(key, batch, None, tc, lam_prior=prior, likelihood=likelihood, extra_fields=("num_steps", "diverging"))
    s = np.asarray(mcmc.get_samples()["lam"])
    lo, hi = np.quantile(s, [0.025, 0.975])
    invalid = prepared.invalid if prepared.invalid is not None else InvalidProblems((), (), prepared.batch_size)
    return LambdaSamples(mcmc, s, float(s.mean()), float(s.std()), (float(lo), float(hi)), invalid)
