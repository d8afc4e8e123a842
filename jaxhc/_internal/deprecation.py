"""Renamed keyword arguments: the old spelling keeps working for a while, with a
``DeprecationWarning`` that names the new one (e.g. ``progress=`` -> ``progress_bar=``)."""

from __future__ import annotations

import functools
import warnings

__all__ = ["keyword_program", "renamed_argument"]


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


def keyword_program(*old_order: str):
    """Decorator for the NumPyro programs of `jaxhc.models`: their arguments are keyword-only
    (data as ``X=None``, sizes inferred from ``X``), and a call with positional arguments in
    the program's former order ``old_order`` still works for one release: the positionals
    are bound to those names, with a ``DeprecationWarning`` that spells out the keyword call.
    ``inspect.signature`` of the decorated program shows the keyword-only signature."""

    def deco(fn):
        where = f"jaxhc.models.{fn.__module__.rpartition('.')[2]}.{fn.__name__}"

        @functools.wraps(fn)
        def program(*args, **kwargs):
            if args:
                if len(args) > len(old_order):
                    raise TypeError(
                        f"{where} takes keyword arguments only (at most {len(old_order)} deprecated positional "
                        f"ones: {', '.join(old_order)}), got {len(args)} positional arguments"
                    )
                names = old_order[: len(args)]
                for n in names:
                    if n in kwargs:
                        raise TypeError(f"{where} got multiple values for argument {n!r}")
                call = ", ".join(f"{n}=..." for n in names)
                warnings.warn(
                    f"{where}: positional arguments are deprecated (removed in the next release); "
                    f"call it with keywords: {fn.__name__}({call}, ...)",
                    DeprecationWarning,
                    stacklevel=2,
                )
                kwargs.update(zip(names, args))
            return fn(**kwargs)

        return program

    return deco
