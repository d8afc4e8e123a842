"""Renamed keyword arguments: the old spelling keeps working for a while, with a
``DeprecationWarning`` that names the new one (e.g. ``progress=`` -> ``progress_bar=``)."""

from __future__ import annotations

import warnings

__all__ = ["renamed_argument"]


def renamed_argument(new_value, old_value, *, old: str, new: str, where: str, stacklevel: int = 3):
    """The value of a renamed keyword argument: ``new_value`` when the deprecated spelling was
    not given (``old_value is None``), else ``old_value`` after a ``DeprecationWarning``
    (``stacklevel=3`` points at the caller of the public function that calls this)."""
    if old_value is None:
        return new_value
    warnings.warn(
        f"{where}: the argument {old}= is deprecated, use {new}= instead", DeprecationWarning, stacklevel=stacklevel
    )
    return old_value
