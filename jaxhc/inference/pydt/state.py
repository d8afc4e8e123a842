"""Types of the PYDT inference: the priors on the hyperparameters, the sampler's state and
output (`PYDTState`, `PYDTInfo`, `PYDTSamples`), the EM's output (`PYDTEMResult`), and
`state_to_tree` (fixed-capacity arrays to a compact `jaxhc.ParentTree`)."""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import jax
import numpy as np

from ...models.pydt_math import FREE
from ...tree import ParentTree

__all__ = ["PYDTEMResult", "PYDTInfo", "PYDTPriors", "PYDTSamples", "PYDTState", "state_to_tree"]


class PYDTPriors(NamedTuple):
    """Gamma (shape, rate) priors on ``alpha``, ``c``, ``1/sigma2`` and Beta on ``beta``
    (section 4 of the paper: ``G(2, .5)``, ``G(1, 1)``, ``G(1, 1)``, ``Beta(1, 1)``)."""

    alpha: tuple = (2.0, 0.5)
    c: tuple = (1.0, 1.0)
    precision: tuple = (1.0, 1.0)
    beta: tuple = (1.0, 1.0)


class PYDTState(NamedTuple):
    """State of the PYDT sampler.

    Attributes:
      parent: int32 ``[2N - 1]``; ``-1`` root branch point, ``-2`` free internal slot.
      times: float ``[2N - 1]`` divergence times (leaves 1.0; free slots 0.0).
      c, alpha, beta, sigma2: hyperparameters (scalars).
      log_lik: ``log p(X | tree, times, sigma2)`` (locations integrated out).
      log_prior: ``log`` of Eq. 9 and 11 (tree structure and times).
      latent: probit model only: the auxiliary Gaussian leaf values ``[N, D]`` (``y = 1`` iff
        positive; each is the leaf location plus ``N(0, 1)`` noise, so ``P(y = 1) =
        Phi(location)``); ``None`` for Gaussian data.
    """

    parent: jax.Array
    times: jax.Array
    c: jax.Array
    alpha: jax.Array
    beta: jax.Array
    sigma2: jax.Array
    log_lik: jax.Array
    log_prior: jax.Array
    latent: Any = None


class PYDTInfo(NamedTuple):
    """What a step did: ``accepted [num_moves]`` (bool), ``log_ratio [num_moves]``,
    ``retries [num_moves]`` (re-runs of the generative process until divergence preceded the
    subtree), ``num_branch_points``."""

    accepted: jax.Array
    log_ratio: jax.Array
    retries: jax.Array
    num_branch_points: jax.Array


class PYDTSamples(NamedTuple):
    """Output of `pydt_mcmc`: per kept step ``parent [S, 2N-1]``, ``times [S, 2N-1]``,
    ``c, alpha, beta, sigma2, log_lik, log_prior [S]``, ``accept_rate`` (kept steps) and the
    final `PYDTState`."""

    parent: np.ndarray
    times: np.ndarray
    c: np.ndarray
    alpha: np.ndarray
    beta: np.ndarray
    sigma2: np.ndarray
    log_lik: np.ndarray
    log_prior: np.ndarray
    accept_rate: float
    state: PYDTState

    def tree(self, i: int = -1) -> ParentTree:
        """Sample ``i`` as a `ParentTree` (free slots dropped, internal nodes renumbered)."""
        return state_to_tree(self.parent[i], self.times[i])


def state_to_tree(parent, times) -> ParentTree:
    """A compact `ParentTree` (heights = divergence times) from fixed-capacity arrays."""
    parent = np.asarray(parent)
    times = np.asarray(times)
    m = parent.shape[0]
    N = (m + 1) // 2
    keep = np.flatnonzero(parent != FREE)
    new_id = np.full(m, -1)
    new_id[keep] = np.arange(keep.size)
    par = np.where(parent[keep] >= 0, new_id[np.maximum(parent[keep], 0)], -1)
    return ParentTree(par, N, times[keep])


class PYDTEMResult(NamedTuple):
    """Output of `pydt_em`.

    Attributes:
      tree: the best tree as a compact `jaxhc.ParentTree` (heights = divergence times).
      parent, times: the best tree on fixed-capacity arrays ``[2N - 1]``.
      log_evidence: the EM bound of the best tree (approximate ``log p(X | T)``).
      k_best: list of ``(log_evidence, parent, times)``, best first.
      k_best_hyper: list of dicts ``c, alpha, beta, sigma2`` matching ``k_best``.
      c, alpha, beta, sigma2: hyperparameters of the best tree (``<c>``, ``1/<1/sigma2>``).
      q_c, q_precision: ``(shape, rate)`` of the Gamma posteriors (``None`` if not learned).
      trace: ``[num_iters + 1]`` best bound after the initial tree and each iteration, of the
        returned restart (shorter if a search without ``"reattach"`` stopped early).
      X: the data (for `pydt_predictive_logpdf`; the bits under probit).
      likelihood: ``"gaussian"`` or ``"probit"``.
      k_best_sites: probit: the `EPSites` of each K-best tree (at its final times); else
        ``None``.
      restart_bounds: ``[num_restarts]`` the best bound each restart reached (``log_evidence``
        is their maximum).
      move_trace: the returned restart's moves, one ``(move, best bound before, best bound
        after)`` per iteration (``trace[i + 1]`` is iteration ``i``'s "after").
    """

    tree: object
    parent: np.ndarray
    times: np.ndarray
    log_evidence: float
    k_best: list
    k_best_hyper: list
    c: float
    alpha: float
    beta: float
    sigma2: float
    q_c: Optional[tuple]
    q_precision: Optional[tuple]
    trace: np.ndarray
    X: np.ndarray
    likelihood: str = "gaussian"
    k_best_sites: Optional[list] = None
    restart_bounds: Optional[np.ndarray] = None
    move_trace: Optional[list] = None
