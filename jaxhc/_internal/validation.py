"""Host-side input checks shared by the public entry points."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def real_array(x, name: str, shape: str = "") -> np.ndarray:
    """``x`` as a NumPy array after checking that it is real and numeric: strings, ``None``,
    object arrays and complex numbers raise a ``TypeError`` naming ``name``, ragged nesting a
    ``ValueError``. ``shape`` (e.g. ``"[N, D]"``) describes the expected layout in messages.
    Shape, finiteness and domain are the caller's checks."""
    sfx = f" {shape}" if shape else ""
    if x is None or isinstance(x, (str, bytes)):
        raise TypeError(f"{name} must be a real numeric array{sfx}, got {type(x).__name__}")
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} must be a rectangular numeric array{sfx}: {e}") from None
    if arr.dtype == object or np.iscomplexobj(arr) or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"{name} must be a real numeric array{sfx}, got dtype {arr.dtype}")
    return arr


def check_alpha(alpha, name: str = "alpha") -> float:
    """Returns ``alpha`` as a float after checking it is a positive finite scalar."""
    if isinstance(alpha, jax.core.Tracer):
        return alpha
    if isinstance(alpha, (str, bytes)):
        raise TypeError(f"{name} must be a positive scalar, got {alpha!r}")
    try:
        a = float(np.asarray(alpha))
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a positive scalar, got {alpha!r}") from None
    if np.ndim(alpha) != 0 or not np.isfinite(a) or a <= 0:
        raise ValueError(f"{name} must be a positive finite scalar, got {alpha!r}")
    return a


def check_component(component, name: str = "component"):
    """``component`` after checking it is a ``jaxhc.components.Component``."""
    # `jaxhc.components.Component` marks itself with a class attribute, so this module (which
    # the components import) never imports them: `_internal` imports nothing of jaxhc above it
    if isinstance(component, type) or getattr(component, "_jaxhc_component", False) is not True:
        raise TypeError(
            f"{name} must be a jaxhc.components.Component (e.g. NormalInverseWishart.from_data(X)), "
            f"got {type(component).__name__}"
        )
    return component


def is_key(key) -> bool:
    if isinstance(key, jax.Array) and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key.ndim == 0
    try:
        arr = np.asarray(key)
    except Exception:
        return False
    return arr.shape == (2,) and arr.dtype == np.uint32


def check_key(key, name: str = "key"):
    """The key as a typed PRNG key (raw ``uint32[2]`` keys are wrapped, same bits)."""
    if not is_key(key):
        raise ValueError(
            f"{name} must be a single JAX PRNG key (jax.random.key(0) or jax.random.PRNGKey(0)), "
            f"got {type(key).__name__}{'' if not hasattr(key, 'shape') else ' of shape ' + str(np.shape(key))}"
        )
    if isinstance(key, jax.Array) and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    return jax.random.wrap_key_data(jnp.asarray(key, dtype=jnp.uint32))


def numpy_rng(key) -> np.random.Generator:
    """A numpy generator seeded by the bits of a JAX key (host-side sampling without
    compiling a JAX program per shape)."""
    return np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist())
