"""BHC as the command line runs it: the component family chosen by evidence, alpha and the
prior learned.

`fit_bhc` is what ``jaxhc bhc FILE`` and ``jaxhc demo`` compute, as one library call: each
candidate family is started from its data-derived prior (``Family.from_data(X)``, the paper's
"fit a single model to the whole data set"), alpha and the prior are learned by maximising
BHC's lower bound on the DPM marginal likelihood ``p(D | alpha, prior)``
(`learn_hyperparameters` with ``objective="dpm_lower_bound"``), and the family of highest
bound is kept. The bound, not the tree evidence ``log p(D|T)``, is the objective because alpha
and the prior are hyperparameters of the DPM that BHC approximates; maximised over alpha,
``log p(D|T)`` drives alpha up until the merges above the clusters carry no weight.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Dict, Optional, Sequence

import numpy as np

from ...components import (
    BetaBernoulli,
    BetaBinomial,
    Component,
    DirichletMultinomial,
    NormalGamma,
    NormalInverseWishart,
    NormalKnownCov,
)
from .greedy import BHCResult, bhc
from .hyperopt import learn_hyperparameters

__all__ = [
    "FAMILIES",
    "LEARN_OBJECTIVE",
    "REAL_FAMILIES",
    "BHCFit",
    "FamilyFit",
    "candidate_families",
    "fit_bhc",
    "make_component",
]

# the families `fit_bhc` knows by name, each started from ``Family.from_data(X)``
FAMILIES = ("niw", "normalgamma", "bernoulli", "binomial", "multinomial", "normal")
# the candidates for real-valued data: full-covariance Normal-inverse-Wishart against
# independent per-feature Normal-Gamma
REAL_FAMILIES = ("niw", "normalgamma")
# what learning maximises and families are compared by
LEARN_OBJECTIVE = "dpm_lower_bound"


def make_component(family: str, X, trials: Optional[int] = None) -> Component:
    """The data-derived starting prior of ``family`` (one of `FAMILIES`) for data ``X``:
    ``NormalInverseWishart / NormalGamma / NormalKnownCov / BetaBernoulli /
    DirichletMultinomial .from_data(X)``, ``BetaBinomial.from_data(X, trials)``."""
    if family == "niw":
        return NormalInverseWishart.from_data(X)
    if family == "normalgamma":
        return NormalGamma.from_data(X)
    if family == "normal":
        return NormalKnownCov.from_data(X)
    if family == "bernoulli":
        return BetaBernoulli.from_data(X)
    if family == "binomial":
        if trials is None:
            raise ValueError("trials: the binomial family needs the number of trials per entry")
        return BetaBinomial.from_data(X, trials)
    if family == "multinomial":
        return DirichletMultinomial.from_data(X)
    raise ValueError(f"families: unknown family {family!r}; choose from {', '.join(FAMILIES)}")


def candidate_families(X) -> tuple:
    """The families compared when none is named: ``("bernoulli",)`` for 0/1 data (missing
    entries ignored), else `REAL_FAMILIES`."""
    X = np.asarray(X, dtype=float)
    v = X[~np.isnan(X)]
    binary = v.size > 0 and bool(np.all((v == 0) | (v == 1)))
    return ("bernoulli",) if binary else REAL_FAMILIES


@dataclass
class FamilyFit:
    """One family's BHC fit.

    Fields:
      family: its name (`FAMILIES`).
      component: the prior used: learned, or the data-derived start when not learned.
      alpha: the DPM concentration used.
      result: the `BHCResult` of the tree built with them.
      start_bound: the DPM lower bound with the data-derived prior and the starting alpha
        (the E-step of the first round when learned).
      learned: whether alpha and the prior were learned.
      seconds: wall time of the fit (compilation included).
    """

    family: str
    component: Component
    alpha: float
    result: BHCResult
    start_bound: float
    learned: bool
    seconds: float

    @property
    def log_evidence(self) -> float:
        return float(self.result.log_evidence)

    @property
    def bound(self) -> float:
        """The DPM lower bound ``log p(D | DPM) >=`` of this fit."""
        return float(self.result.dpm_lower_bound)


@dataclass
class BHCFit:
    """Output of `fit_bhc`.

    Fields:
      family: the chosen family (highest DPM lower bound among the candidates).
      component: its prior (learned when ``learned``; ``result.component`` too).
      alpha: its DPM concentration.
      result: the chosen family's `BHCResult` (``.tree``, ``.log_evidence``,
        ``.dpm_lower_bound``, ``.cut(0.5)``, ...).
      bounds: ``{family: DPM lower bound}`` of every candidate that fitted the data.
      fits: ``{family: FamilyFit}`` of every candidate that fitted the data.
      skipped: ``{family: reason}`` of the candidates whose prior does not fit the data
        (e.g. non-binary data for ``bernoulli``).
      learned: whether alpha and the priors were learned.
    """

    family: str
    component: Component
    alpha: float
    result: BHCResult
    bounds: Dict[str, float]
    fits: Dict[str, FamilyFit]
    skipped: Dict[str, str] = field(default_factory=dict)
    learned: bool = True

    @property
    def tree(self):
        return self.result.tree

    @property
    def log_evidence(self) -> float:
        return float(self.result.log_evidence)

    @property
    def dpm_lower_bound(self) -> float:
        return float(self.result.dpm_lower_bound)

    @property
    def start_bound(self) -> float:
        """The chosen family's DPM lower bound at its data-derived prior."""
        return self.fits[self.family].start_bound


def _fit_one(X, family, comp, alpha, learn: bool, progress_bar: bool) -> FamilyFit:
    import jax

    t0 = time.perf_counter()
    if learn:
        fit = learn_hyperparameters(X, comp, alpha, objective=LEARN_OBJECTIVE)
        res, comp, alpha = fit.result, fit.component, fit.alpha
        start = float(fit.trace[0])  # the E-step at the starting prior: BHC with it fixed
    else:
        res = bhc(X, comp, alpha, progress_bar=None if progress_bar else False)
        start = float(res.dpm_lower_bound)
    jax.block_until_ready(res.log_evidence)
    return FamilyFit(family, comp, float(alpha), res, start, learn, time.perf_counter() - t0)


def fit_bhc(
    X,
    families: Optional[Sequence[str]] = None,
    *,
    alpha: float = 1.0,
    learn: bool = True,
    trials: Optional[int] = None,
    workers: Optional[int] = None,
    progress_bar: bool = False,
) -> BHCFit:
    """BHC with the family chosen by the DPM evidence bound and alpha and the prior learned
    (what ``jaxhc bhc FILE`` runs); returns a `BHCFit`.

    Args:
      X: data ``[n, d]`` (``n >= 2``; NaN entries are missing values).
      families: candidate family names (`FAMILIES`); default `candidate_families(X)`:
        Beta-Bernoulli for 0/1 data, else Normal-inverse-Wishart and Normal-Gamma. A family
        named alone must fit the data (``ValueError`` otherwise); among several, those whose
        prior does not fit the data are skipped (`BHCFit.skipped`).
      alpha: starting DPM concentration (> 0); kept as is with ``learn=False``.
      learn: learn alpha and the prior (default) or keep the data-derived prior.
      trials: trials per entry, for the ``binomial`` family only.
      workers: candidates fitted at a time, in threads (JAX compiles and runs outside the
        GIL, so the compilations of different families overlap); default: one per
        candidate, at most the machine's CPU count. The result does not depend on it.
      progress_bar: BHC's merge-loop progress bar (one family, ``learn=False`` only).

    Returns:
      `BHCFit`: the chosen family, its hyperparameters, its `BHCResult`, and every
      candidate's DPM lower bound.
    """
    from ..._internal.validation import check_alpha, real_array

    check_alpha(alpha, "alpha")
    X = real_array(X, "X", "[n, d]").astype(float)
    if X.ndim != 2 or X.shape[0] < 2:
        raise ValueError(f"X must be [n, d] with n >= 2 rows, got shape {X.shape}")
    if np.any(np.isinf(X)):
        raise ValueError("X contains inf (NaN entries are missing values; inf is not)")
    if families is None:
        families = candidate_families(X)
    elif isinstance(families, str):
        families = (families,)
    families = tuple(families)
    if not families:
        raise ValueError("families must name at least one family")
    if trials is not None and "binomial" not in families:
        raise ValueError("trials only applies to the binomial family")
    if workers is None:
        import os

        workers = max(1, min(len(families), os.cpu_count() or 1))
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    starts, skipped = {}, {}
    for fam in families:
        if fam not in FAMILIES:
            raise ValueError(f"families: unknown family {fam!r}; choose from {', '.join(FAMILIES)}")
        try:
            comp = make_component(fam, X, trials)
            comp.validate_data(X)
        except (ValueError, TypeError) as e:
            if len(families) == 1:
                raise ValueError(f"X: the data do not fit the {fam} family: {e}") from None
            skipped[fam] = str(e)
            continue
        starts[fam] = comp
    if not starts:
        raise ValueError(f"X: the data fit none of the families {', '.join(families)}: {skipped}")
    bar = progress_bar and len(starts) == 1
    run = lambda fam: _fit_one(X, fam, starts[fam], alpha, learn, bar)  # noqa: E731
    if workers > 1 and len(starts) > 1:
        with ThreadPoolExecutor(min(workers, len(starts))) as ex:
            outs = list(ex.map(run, starts))
    else:
        outs = [run(f) for f in starts]
    fits = {f.family: f for f in outs}
    best = max(outs, key=lambda f: f.bound)
    return BHCFit(
        best.family,
        best.component,
        best.alpha,
        best.result,
        {f.family: f.bound for f in outs},
        fits,
        skipped,
        learn,
    )
