"""Argument checks shared by the PYDT sampler, EM and predictive density (the data check,
`check_X`, lives in `jaxhc.models.pydt_math`)."""

from __future__ import annotations

import numpy as np

from .state import PYDTPriors

__all__ = ["check_count", "check_hyperparameters", "check_likelihood", "check_priors"]


def check_hyperparameters(c, alpha, beta, sigma2=1.0):
    """Raise a ValueError unless ``c > 0``, ``0 <= beta < 1``, ``alpha >= -2 beta``,
    ``sigma2 > 0`` (the sampler needs ``beta < 1``: ``Gamma(1 - beta)`` is infinite at 1)."""
    vals = {}
    for name, v in (("c", c), ("alpha", alpha), ("beta", beta), ("sigma2", sigma2)):
        try:
            vals[name] = float(v)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be a number, got {type(v).__name__}") from None
        if not np.isfinite(vals[name]):
            raise ValueError(f"{name} must be finite, got {v}")
    if vals["c"] <= 0:
        raise ValueError(f"c must be > 0, got {c}")
    if not 0 <= vals["beta"] < 1:
        raise ValueError(f"beta must be in [0, 1), got {beta}")
    if vals["alpha"] < -2 * vals["beta"]:
        raise ValueError(f"alpha must be >= -2 beta = {-2 * vals['beta']}, got {alpha}")
    if vals["sigma2"] <= 0:
        raise ValueError(f"sigma2 must be > 0, got {sigma2}")
    return vals["c"], vals["alpha"], vals["beta"], vals["sigma2"]


def check_count(v, name: str, minimum: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {v!r}")
    return int(v)


def check_priors(priors) -> PYDTPriors:
    """`PYDTPriors` with every (shape, rate) pair positive and finite."""
    try:
        pri = PYDTPriors(*(tuple(float(v) for v in p) for p in priors))
    except (TypeError, ValueError):
        raise TypeError(f"priors must be a PYDTPriors of (shape, rate) pairs, got {priors!r}") from None
    for name, p in zip(pri._fields, pri):
        if len(p) != 2 or not all(np.isfinite(v) and v > 0 for v in p):
            raise ValueError(f"priors.{name} must be two positive finite numbers, got {p}")
    return pri


def check_likelihood(X, likelihood):
    if likelihood not in ("gaussian", "probit"):
        raise ValueError(f"likelihood must be 'gaussian' or 'probit', got {likelihood!r}")
    if likelihood == "probit" and not np.all((X == 0) | (X == 1)):
        raise ValueError("likelihood='probit' needs binary X (entries 0 or 1)")
