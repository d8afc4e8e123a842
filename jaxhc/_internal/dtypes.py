"""The floating dtype JAX computes in."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def float_dtype():
    """``float64`` when ``jax_enable_x64`` is on, else ``float32``."""
    return jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
