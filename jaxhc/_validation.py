"""Host-side input checks shared by the public entry points."""
from __future__ import annotations

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
