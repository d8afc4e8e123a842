"""The one grid of padded sizes for the whole library ("compile once, fit many").

A compiled XLA program is specialised on its array shapes, so a program over ``n`` data rows
compiles again for every new ``n``. jaxhc's systems therefore pad each data size up to the
next size of one geometric grid, with masked rows that contribute exactly nothing, and
compile one program per grid size ("bucket") instead of one per ``n``.

The grid: ``q * 2**e`` for ``q`` in ``(4, 5, 6, 7)``, from `MIN_BUCKET` up:
8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, ...
Four sizes a doubling, so neighbours differ by a factor of at most 1.25 (4 -> 5), on
average about 1.19; a size padded to its bucket carries at most 25% padding rows (about 9%
on average over uniformly spread sizes). Programs whose work or memory is linear in the
rows waste at most 25% of it, those quadratic in them (BHC's ``[n, n]`` pair scores) at most
``1.25**2 - 1 = 56%`` (about 19% on average). A sweep over sizes 20..2000 touches 28
buckets, against 1981 shapes unpadded; a finer grid (8 a doubling, at most 12.5% padding)
would double the compilations for a few percent of run time, a coarser one (powers of two,
as randomized BHC used before) wastes up to 100% of the rows and 300% of a quadratic table.

Every grid size from 32 on is a multiple of 8, and from 64 on of 16, so padded arrays keep
vector-friendly leading dimensions.
"""

from __future__ import annotations

import math
from typing import Iterable, Tuple

import numpy as np

__all__ = ["GRID_STEPS", "MIN_BUCKET", "bucket", "bucket_grid", "buckets_of", "pad_rows"]

#: the grid's mantissas: sizes ``q * 2**e``
GRID_STEPS = (4, 5, 6, 7)
#: the smallest bucket: sizes 1..8 share one program
MIN_BUCKET = 8


def bucket(n: int, minimum: int = MIN_BUCKET) -> int:
    """The smallest grid size ``>= max(n, minimum)`` (``minimum`` itself rounded up to the
    grid). ``bucket(100) == 112``, ``bucket(112) == 112``, ``bucket(113) == 128``."""
    n = max(int(n), int(minimum), 1)
    if n <= 4:
        return 4 if n > 2 else n  # only below the grid's start (minimum < 4)
    e = max(0, math.floor(math.log2(n)) - 2)
    while True:
        for q in GRID_STEPS:
            if q << e >= n:
                return q << e
        e += 1


def bucket_grid(lo: int, hi: int, minimum: int = MIN_BUCKET) -> Tuple[int, ...]:
    """The distinct buckets of the sizes ``lo..hi`` (inclusive), increasing."""
    out = []
    b = bucket(lo, minimum)
    while True:
        out.append(b)
        if b >= hi:
            return tuple(out)
        b = bucket(b + 1, minimum)


def pad_rows(x, size: int, fill=0, axis: int = 0) -> np.ndarray:
    """``x`` (a host array) padded to ``size`` entries along ``axis`` with ``fill``, or with
    copies of its first entry for ``fill="first"`` (valid data, so a padded value computed
    from it stays finite). NumPy, on the host: an eager ``jnp`` pad compiles a program per
    shape."""
    x = np.asarray(x)
    extra = int(size) - x.shape[axis]
    if extra < 0:
        raise ValueError(f"cannot pad {x.shape[axis]} rows down to {size}")
    if extra == 0:
        return x
    if isinstance(fill, str):
        if fill != "first":
            raise ValueError(f"fill must be a value or 'first', got {fill!r}")
        pad = np.repeat(np.take(x, [0], axis=axis), extra, axis=axis)
    else:
        shape = list(x.shape)
        shape[axis] = extra
        pad = np.full(shape, fill, dtype=x.dtype)
    return np.concatenate([x, pad], axis=axis)


def buckets_of(sizes: Iterable[int], minimum: int = MIN_BUCKET) -> Tuple[int, ...]:
    """The distinct buckets of ``sizes``, increasing."""
    return tuple(sorted({bucket(n, minimum) for n in sizes}))
