"""Generic Metropolis-Hastings accept / reject, shared by the samplers of jaxhc.

A move is a function ``proposal_fn(key, position) -> (new_position, log_q_ratio)`` with
``log_q_ratio = log q(position | new_position) - log q(new_position | position)``. The MH
kernel accepts it with probability ``min(1, exp(log_ratio))``,

    log_ratio = log pi(new_position) - log pi(position) + log_q_ratio,

and treats a NaN ratio as a rejection (as blackjax's ``random_walk.build_rmh``). Positions are
any pytrees; the target is cached in `MHState` so each step evaluates it once.

Samplers whose moves compute the ratio themselves (split-merge, tempered swaps) call
`mh_accept` and `tree_select` directly.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

__all__ = ["MHState", "MHInfo", "mh_accept", "tree_select", "mh_init", "mh_step"]


class MHState(NamedTuple):
    """State of the generic MH kernel.

    Attributes:
      position: the current point (any pytree).
      log_density: ``log pi(position)`` (unnormalised), cached.
    """

    position: Any
    log_density: jax.Array


class MHInfo(NamedTuple):
    """What one MH decision did.

    Attributes:
      accepted: bool, whether the proposal was accepted.
      log_ratio: the log acceptance ratio (may be NaN, which counts as a rejection).
    """

    accepted: jax.Array
    log_ratio: jax.Array


def mh_accept(key, log_ratio) -> jax.Array:
    """Returns ``log U < log_ratio`` with ``U ~ Uniform(0, 1)``: True with probability
    ``min(1, exp(log_ratio))``; False for a NaN ratio (any batch shape of ``log_ratio``)."""
    log_ratio = jnp.asarray(log_ratio)
    u = jax.random.uniform(
        key, log_ratio.shape, dtype=log_ratio.dtype if jnp.issubdtype(log_ratio.dtype, jnp.floating) else jnp.float32
    )
    return jnp.log(u) < jnp.where(jnp.isnan(log_ratio), -jnp.inf, log_ratio)


def tree_select(pred, on_true, on_false):
    """``on_true`` where the scalar ``pred`` holds, else ``on_false`` (leaf by leaf)."""
    return jax.tree_util.tree_map(lambda a, b: jnp.where(pred, a, b), on_true, on_false)


def mh_init(position, log_target: Callable) -> MHState:
    """Returns the `MHState` of ``position`` (evaluates ``log_target(position)`` once)."""
    return MHState(position, jnp.asarray(log_target(position)))


def mh_step(key, state: MHState, proposal_fn: Callable, log_target: Callable):
    """One Metropolis-Hastings transition.

    Args:
      key: PRNG key.
      state: current `MHState`.
      proposal_fn: ``(key, position) -> (new_position, log_q_ratio)``.
      log_target: ``position -> log pi(position)`` (unnormalised, scalar).

    Returns:
      ``(new_state, MHInfo)``; ``new_state`` is the proposal if accepted, else ``state``.
    """
    k_prop, k_acc = jax.random.split(key)
    new_position, log_q_ratio = proposal_fn(k_prop, state.position)
    new_log_density = jnp.asarray(log_target(new_position))
    log_ratio = new_log_density - state.log_density + log_q_ratio
    accepted = mh_accept(k_acc, log_ratio)
    new_state = tree_select(accepted, MHState(new_position, new_log_density), state)
    return new_state, MHInfo(accepted, log_ratio)
