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

Above `RANDOMIZED_ABOVE` rows (``randomized_above``) the exact path is replaced by two steps:
the family is chosen and alpha and the prior learned as above on ``learn_subset`` rows drawn
with ``key``, and randomized BHC (`jaxhc.rbhc`, ``O(n log n)`` time and ``O(n)`` memory)
builds the tree over all rows with them; `BHCFit.method` says which ran (``"greedy"`` or
``"rbhc"``) and `BHCFit.subset` holds the learning rows.
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
    "LEARN_SUBSET",
    "RANDOMIZED_ABOVE",
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
#: `fit_bhc` learns on a subset and runs randomized BHC above this many rows. The exact path
#: (greedy BHC inside every round of learning, two families) grows as ``n**1.8-1.9`` in time
#: and ``n**2`` in memory: benchmarks/results/fit_bhc_scale.json (d = 10, 10 clusters, 2
#: cores) has the learned fit at n = 1000, 2000, 4000 and greedy BHC alone; at n = 4000 one
#: greedy BHC takes 3.2-3.8 s and learning repeats it per round and family, and past ~13 000
#: rows greedy BHC's ``[n, n]`` pair table alone passes 1.3 GB.
RANDOMIZED_ABOVE = 4000
#: rows the hyperparameters are learned on above `RANDOMIZED_ABOVE` (greedy BHC with
#: learning at this size takes seconds)
LEARN_SUBSET = 1000


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
      method: ``"greedy"`` (greedy BHC on all rows) or ``"rbhc"`` (above
        ``randomized_above`` rows: the family chosen and the hyperparameters learned on the
        rows ``subset``, then `jaxhc.rbhc` on all rows with them; ``fits`` and ``bounds`` are
        then those of the subset, ``result`` the tree over all rows).
      subset: int64 ``[m]`` sorted rows the family and hyperparameters were chosen on
        (``method="rbhc"``; empty when one family with ``learn=False`` left nothing to
        choose); None for ``"greedy"``.
    """

    family: str
    component: Component
    alpha: float
    result: BHCResult
    bounds: Dict[str, float]
    fits: Dict[str, FamilyFit]
    skipped: Dict[str, str] = field(default_factory=dict)
    learned: bool = True
    method: str = "greedy"
    subset: Optional[np.ndarray] = None

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
    randomized_above: Optional[int] = RANDOMIZED_ABOVE,
    learn_subset: int = LEARN_SUBSET,
    key=None,
    subset_size: int = 64,
    leaf_size: int = 64,
    client=None,
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
      progress_bar: BHC's merge-loop progress bar (one family, ``learn=False`` only);
        above ``randomized_above`` rows, randomized BHC's bar over the points placed.
      randomized_above: above this many rows (default `RANDOMIZED_ABOVE`), choose the
        family and learn on ``learn_subset`` random rows, then build the tree over all rows
        with randomized BHC (`BHCFit.method` ``"rbhc"``); None: always greedy BHC on all
        rows (``O(n^2)`` memory).
      learn_subset: rows the family and hyperparameters are chosen on above
        ``randomized_above`` (>= 2; default `LEARN_SUBSET`). With ``learn=False`` and one
        family nothing is learned and the data-derived prior of all rows is used; with
        ``learn=False`` and several families the subset chooses the family, whose prior is
        then derived from all rows.
      key: a `jax.random` key for the randomized path: split into the subset's draw and
        `jaxhc.rbhc`'s key (default ``jax.random.PRNGKey(0)``: the same answer every run).
      subset_size, leaf_size: `jaxhc.rbhc`'s subset and leaf block sizes.
      client: a ``distributed.Client``: `jaxhc.rbhc` builds its sub-problems on the Dask
        workers (the same tree as without it).

    Returns:
      `BHCFit`: the chosen family, its hyperparameters, its `BHCResult`, every candidate's
      DPM lower bound, and which path ran (``method``, ``subset``).
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
    n = X.shape[0]
    if randomized_above is not None and (
        isinstance(randomized_above, bool)
        or not isinstance(randomized_above, (int, np.integer))
        or randomized_above < 0
    ):
        raise ValueError(f"randomized_above must be None or an integer >= 0, got {randomized_above!r}")
    if isinstance(learn_subset, bool) or not isinstance(learn_subset, (int, np.integer)) or learn_subset < 2:
        raise ValueError(f"learn_subset must be an integer >= 2, got {learn_subset!r}")
    if randomized_above is not None and n > randomized_above:
        rb = dict(subset_size=subset_size, leaf_size=leaf_size, client=client, progress_bar=progress_bar)
        return _fit_randomized(X, starts, skipped, alpha, learn, trials, workers, learn_subset, key, rb)
    if client is not None:
        raise ValueError(f"client applies only to the randomized path (n > randomized_above={randomized_above})")
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


def _fit_randomized(X, starts, skipped, alpha, learn, trials, workers, learn_subset, key, rbhc_args) -> BHCFit:
    """`fit_bhc` above ``randomized_above`` rows: the family and hyperparameters from
    `fit_bhc` on ``learn_subset`` rows drawn with the first half of ``key``, the tree from
    `jaxhc.rbhc` (``rbhc_args``) with the second half over all rows."""
    import jax

    from ..._internal.validation import check_key, numpy_rng
    from .randomized import rbhc

    key = check_key(jax.random.PRNGKey(0) if key is None else key, "key")
    key_subset, key_tree = jax.random.split(key)
    n = X.shape[0]
    names = tuple(starts)
    if learn or len(names) > 1:
        rows = np.arange(n)
        if n > learn_subset:
            rows = np.sort(numpy_rng(key_subset).choice(n, learn_subset, replace=False))
        sub = fit_bhc(X[rows], names, alpha=alpha, learn=learn, trials=trials, workers=workers, randomized_above=None)
        family, fits, bounds = sub.family, sub.fits, sub.bounds
        skipped = {**skipped, **sub.skipped}
        comp, alpha = (sub.component, sub.alpha) if learn else (starts[family], float(alpha))
    else:
        rows = np.arange(0)
        family, fits, bounds = names[0], {}, {}
        comp, alpha = starts[family], float(alpha)
    t0 = time.perf_counter()
    res = rbhc(key_tree, X, comp, alpha, **rbhc_args)
    jax.block_until_ready(res.log_evidence)
    seconds = time.perf_counter() - t0
    if not fits:  # nothing learned or chosen: the fit is the tree over all rows
        fits = {family: FamilyFit(family, comp, float(alpha), res, float(res.dpm_lower_bound), False, seconds)}
        bounds = {family: float(res.dpm_lower_bound)}
    return BHCFit(family, comp, float(alpha), res, bounds, fits, skipped, learn, "rbhc", rows)
