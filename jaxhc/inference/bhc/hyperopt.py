"""Hyperparameter learning for BHC: the EM-like scheme of Heller & Ghahramani (2005, Sec. 4).

E-step (Viterbi-like): build the greedy BHC tree under the current hyperparameters.
M-step: for that fixed tree, ``log p(D|T)`` is a differentiable function of the DPM
concentration ``alpha`` and of the component's hyperparameters (the node statistics do not
depend on them); maximise it with an optax optimiser over an unconstrained
reparameterisation (log for positive scalars, log-Cholesky for covariance matrices). Repeat
until the evidence of the rebuilt tree stops improving.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..._internal import exported
from ..._internal.buckets import bucket
from ..._internal.validation import check_alpha, check_component
from ...components import Component
from . import terms
from .greedy import PROGRAM_SOURCES, BHCResult, bhc
from .terms import pad_tree, padded_tree_terms

__all__ = ["HyperoptResult", "learn_hyperparameters"]


class HyperoptResult(NamedTuple):
    """Output of `learn_hyperparameters`.

    Fields:
      component: the fitted component (best evidence seen).
      alpha: the fitted DPM concentration.
      result: the `BHCResult` of the tree built with the fitted hyperparameters.
      trace: ``[rounds + 1]`` objective of the rebuilt tree after each round (entry 0: the
        initial hyperparameters).
      m_step_traces: list of ``[steps]`` objective traces of each M-step (fixed tree).
    """

    component: Component
    alpha: float
    result: BHCResult
    trace: np.ndarray
    m_step_traces: list


def _evidence(t):
    return t.log_evidence


def _dpm_bound(t):
    return t.dpm_lower_bound


def _objective(kind):
    if kind == "evidence":
        return _evidence
    if kind == "dpm_lower_bound":
        return _dpm_bound
    raise ValueError(f"objective must be 'evidence' or 'dpm_lower_bound', got {kind!r}")


# One default optimiser instance: the compiled M-step is keyed on it (and on the family, the
# mask, the objective, the number of steps and the shapes), so repeated calls reuse it.
_DEFAULT_OPT = optax.adam(0.05)


def _unpack(component, u, mask):
    u = {k: (v if mask[k] else jax.lax.stop_gradient(v)) for k, v in u.items()}
    comp = component.constrain({k: v for k, v in u.items() if k != "log_alpha"})
    return comp, jnp.exp(jnp.clip(u["log_alpha"], -30.0, 30.0))  # total, as the components' maps


@functools.partial(jax.jit, static_argnames=("mask_items",))
def _unpack_program(component, u, mask_items):
    """`_unpack` as one compiled program (eagerly, each of its primitives compiles a program
    of its own in a fresh process: ~1 s of a first `fit_bhc`)."""
    return _unpack(component, u, dict(mask_items))


@jax.jit
def _unconstrain_program(component):
    return component.unconstrain()


def _finite(tree):
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree_util.tree_leaves(tree)]))


@functools.partial(jax.jit, static_argnames=("obj", "opt", "mask_items", "steps"))
def _m_step(component, u, node_stats, children, n_valid, *, obj, opt, mask_items, steps):
    """``steps`` optimiser steps on the fixed tree over ``n_valid`` points, laid out in its
    size bucket (`pad_tree`, `padded_tree_terms`: one program serves every ``n`` of a bucket). A step is kept only if the objective and
    its gradient at the new point are finite; otherwise the step is undone and the step size
    halved (backtracking). Returns the last accepted point and the trace. Module level and
    keyed on static arguments, so it compiles once per family, shape and setting."""
    mask = dict(mask_items)

    def value(u):
        comp, a = _unpack(component, u, mask)
        return obj(padded_tree_terms(comp, a, node_stats, children, n_valid))

    state = opt.init(u)

    def where(c, a, b):
        return jax.tree_util.tree_map(lambda x, y: jnp.where(c, x, y), a, b)

    # One evaluation of the objective per iteration, inside value_and_grad, so the program
    # holds a single copy of the forward pass (the objective at the start and the check of
    # the last proposal used to be separate copies: ~40% of the M-step's compile time).
    # Iteration 0 evaluates the start (its value seeds v_ok, accepted or not); iteration
    # `steps` only checks the last proposal (value finite and point finite) and its
    # optimiser update is discarded.
    def step(carry, t):
        # u_ok: last accepted point; u: the proposal u_ok + scale * direction
        u_ok, u, state, direction, scale, v_ok = carry
        v, g = jax.value_and_grad(value)(u)
        last = t == steps
        ok = jnp.isfinite(v) & _finite(g)
        g = {k: jnp.where(ok & mask[k], -gv, jnp.zeros_like(gv)) for k, gv in g.items()}
        upd, new_state = opt.update(g, state, u)
        # accepted: step from u with the optimiser's update; rejected: back to u_ok and retry
        # the same direction with half the step
        u_ok = where(jnp.where(last, jnp.isfinite(v) & _finite(u), ok), u, u_ok)
        state = where(ok, new_state, state)
        direction = where(ok, upd, direction)
        scale = jnp.where(ok, jnp.minimum(1.0, 2.0 * scale), 0.5 * scale)
        v_ok = jnp.where(ok | (t == 0), v, v_ok)
        u_next = jax.tree_util.tree_map(lambda a, b: a + scale * b, u_ok, direction)
        return (u_ok, u_next, state, direction, scale, v_ok), v_ok

    one = jnp.ones((), jnp.result_type(float))
    zero_dir = jax.tree_util.tree_map(jnp.zeros_like, u)
    carry = (u, u, state, zero_dir, one, jnp.zeros((), one.dtype))
    (u_ok, _, _, _, _, _), trace = jax.lax.scan(step, carry, jnp.arange(steps + 1))
    return u_ok, trace[:steps]


def learn_hyperparameters(
    X,
    component: Component,
    alpha: float = 1.0,
    *,
    learn: Optional[Sequence[str]] = None,
    objective: str = "evidence",
    optimizer: Optional[optax.GradientTransformation] = None,
    steps: int = 100,
    max_rounds: int = 10,
    tol: float = 1e-3,
    progress_bar: bool = False,
) -> HyperoptResult:
    """Fits ``alpha`` and the component's hyperparameters by maximising BHC's evidence.

    Args:
      X: data ``[n, d]``.
      component: the initial component (its family is kept).
      alpha: initial DPM concentration (> 0).
      learn: names of the unconstrained parameters to learn (keys of
        ``component.unconstrain()`` plus ``"log_alpha"``); default: all.
      objective: ``"evidence"`` (``log p(D|T)``, as in the paper) or ``"dpm_lower_bound"``.
      optimizer: an optax transformation (default ``optax.adam(0.05)``).
      steps: optimiser steps per M-step.
      max_rounds: maximum number of E/M rounds.
      tol: stop when the rebuilt tree's objective improves by less than this.
      progress_bar: print one line per round.

    Returns:
      `HyperoptResult` with the fitted component and alpha, the final BHC result, and the
      objective trace.
    """
    check_component(component)
    alpha = check_alpha(alpha)
    Xh = component.validate_data(X)
    if not (isinstance(steps, (int, np.integer)) and steps >= 1):
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if not (isinstance(max_rounds, (int, np.integer)) and max_rounds >= 1):
        raise ValueError(f"max_rounds must be a positive integer, got {max_rounds!r}")
    try:
        tol_ok = np.ndim(tol) == 0 and np.isfinite(float(tol)) and float(tol) >= 0
    except (TypeError, ValueError):
        tol_ok = False
    if not tol_ok:
        raise ValueError(f"tol must be a finite number >= 0, got {tol!r}")
    obj = _objective(objective)
    opt = optimizer if optimizer is not None else _DEFAULT_OPT

    u0 = dict(_unconstrain_program(component))
    if "log_alpha" in u0:  # a family must not use the DPM concentration's name
        raise ValueError(f"{type(component).__name__}.unconstrain() uses the reserved name 'log_alpha'")
    u0["log_alpha"] = jnp.asarray(np.log(np.asarray(alpha, dtype=jnp.result_type(float))))
    names = set(u0) if learn is None else set(learn)
    unknown = names - set(u0)
    if unknown:
        raise ValueError(f"learn: unknown parameter names {sorted(unknown)}; choose from {sorted(u0)}")
    mask = {k: (k in names) for k in u0}

    def unpack(u):
        return _unpack_program(component, u, tuple(sorted(mask.items())))

    n = Xh.shape[0]
    N = bucket(n) if terms.PAD_TO_BUCKETS else n

    mask_items = tuple(sorted(mask.items()))

    def m_step(u, node_stats, children):
        stats_p, children_p = pad_tree(node_stats, children, N)
        args = (component, u, jax.tree_util.tree_map(jnp.asarray, stats_p), jnp.asarray(children_p), np.int32(n))
        static = dict(obj=obj, opt=opt, mask_items=mask_items, steps=int(steps))
        if opt is not _DEFAULT_OPT:  # a user's optimiser: no key can name it across processes
            return _m_step(*args, **static)
        # the default optimiser and a built-in objective: through a serialized module of the
        # program when the compilation cache is on (`jaxhc._internal.exported`)
        key = repr((objective, "adam(0.05)", mask_items, int(steps)))
        return exported.call("m_step", _m_step, args, static, sources=PROGRAM_SOURCES, static_key=key)

    def e_step(u):
        comp, a = unpack(u)
        res = bhc(Xh, comp, float(a), progress_bar=False)
        return res, float(obj(res)) if objective == "evidence" else float(res.dpm_lower_bound)

    u = u0
    res, best = e_step(u)
    best_u, best_res = u, res
    trace, m_traces = [best], []
    for rnd in range(max_rounds):
        u_new, mt = m_step(u, res.node_stats, res.tree.children)
        m_traces.append(np.asarray(mt))
        if not all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree_util.tree_leaves(u_new)):
            break  # the optimiser diverged; keep the best so far
        res_new, val = e_step(u_new)
        trace.append(val)
        if progress_bar:
            print(f"round {rnd + 1}: objective {val:.4f} (best {best:.4f})")
        u, res = u_new, res_new
        if val > best + tol:
            best, best_u, best_res = val, u_new, res_new
        else:
            if val > best:
                best, best_u, best_res = val, u_new, res_new
            break
    comp, a = unpack(best_u)
    return HyperoptResult(comp, float(a), best_res, np.asarray(trace), m_traces)
