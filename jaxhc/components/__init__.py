"""Conjugate component families (see `jaxhc.components.base` for the interface): the Gaussian
families in ``gaussian``, the count families in ``counts``. A new family needs one module
that subclasses `Component` (and, if its columns are independent given the cluster, overrides
the column-splitting methods that BHCC and the CDPM use)."""

from .base import ColumnParameters, ColumnSplitError, Component, betaln
from .counts import BetaBernoulli, BetaBinomial, CountStats, DirichletMultinomial, MultinomialStats
from .gaussian import (
    DiagGaussianStats,
    GaussianStats,
    IndependentNormal,
    IndepNormalStats,
    NormalGamma,
    NormalInverseWishart,
    NormalKnownCov,
)

__all__ = [
    "Component",
    "ColumnParameters",
    "ColumnSplitError",
    "GaussianStats",
    "CountStats",
    "MultinomialStats",
    "NormalInverseWishart",
    "NormalKnownCov",
    "NormalGamma",
    "DiagGaussianStats",
    "IndependentNormal",
    "IndepNormalStats",
    "BetaBernoulli",
    "BetaBinomial",
    "DirichletMultinomial",
    "betaln",
]
