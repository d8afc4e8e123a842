"""`BayesianHierarchicalMixtureClustering`: BHMC (`jaxhc.bhmc`) as a scikit-learn clusterer:
nested partitions of the rows at a fixed number of levels."""

from __future__ import annotations

from numbers import Integral, Real

import jax
import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ..inference.bhmc.sampler import bhmc
from ._common import check_dense, key_from_random_state

__all__ = ["BayesianHierarchicalMixtureClustering"]


def _first_appearance(labels: np.ndarray) -> np.ndarray:
    """``labels`` renumbered ``0 .. K-1`` in order of first appearance (int64)."""
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.argsort(np.argsort(first))
    return rank[inverse.reshape(-1)].astype(np.int64)


class BayesianHierarchicalMixtureClustering(ClusterMixin, BaseEstimator):
    """Bayesian hierarchical mixture clustering (Huang et al.; the nCRP over a fixed number
    of levels with HDP-shared components) as a scikit-learn clusterer: ``depth`` nested
    partitions of the rows, the posterior summary of `jaxhc.bhmc`'s block Gibbs sampler.

    Args:
      depth: levels below the root (>= 1).
      alpha, gamma0, gamma: nCRP and HDP concentrations (> 0), the sampler's starting values
        (sampled under their hyperpriors).
      num_samples, num_warmup: sweeps kept / burnt.
      num_chains: independent chains pooled by the summary.
      summary: ``"posterior"`` (default) or ``"best_joint"`` (see `jaxhc.bhmc`).
      random_state: None, an int or a ``numpy.random.RandomState``: the sampler's key (an
        int ``s`` is ``jax.random.PRNGKey(s)``).
      progress_bar: show the sampler's progress bar.

    Attributes:
      level_labels_: int64 ``[n, depth]``: column ``l - 1`` is every row's node at level
        ``l`` (nested: level ``l + 1`` refines level ``l``), numbered in order of first row.
      labels_: int64 ``[n]``: the deepest level, ``level_labels_[:, -1]``.
      n_clusters_: clusters of the deepest level; n_level_clusters_: int64 ``[depth]``, per
        level.
      component_labels_: int64 ``[n]``: the mixture component of every row (the posterior
        consensus).
      tree_: the `jaxhc.ParentTree` of the levels (rows are leaves ``0 .. n-1``).
      log_likelihood_: complete-data log likelihood of the best state.
      n_features_in_, feature_names_in_: as scikit-learn's.
    """

    _parameter_constraints: dict = {
        "depth": [Interval(Integral, 1, None, closed="left")],
        "alpha": [Interval(Real, 0, None, closed="neither")],
        "gamma0": [Interval(Real, 0, None, closed="neither")],
        "gamma": [Interval(Real, 0, None, closed="neither")],
        "num_samples": [Interval(Integral, 1, None, closed="left")],
        "num_warmup": [Interval(Integral, 0, None, closed="left")],
        "num_chains": [Interval(Integral, 1, None, closed="left")],
        "summary": [StrOptions({"posterior", "best_joint"})],
        "random_state": ["random_state"],
        "progress_bar": ["boolean"],
    }

    def __init__(
        self,
        depth=3,
        *,
        alpha=1.0,
        gamma0=1.0,
        gamma=0.5,
        num_samples=200,
        num_warmup=100,
        num_chains=1,
        summary="posterior",
        random_state=None,
        progress_bar=False,
    ):
        self.depth = depth
        self.alpha = alpha
        self.gamma0 = gamma0
        self.gamma = gamma
        self.num_samples = num_samples
        self.num_warmup = num_warmup
        self.num_chains = num_chains
        self.summary = summary
        self.random_state = random_state
        self.progress_bar = progress_bar

    def fit(self, X, y=None):
        """Runs the sampler and summarises its levels; returns ``self``.

        Args:
          X: ``[n, d]`` real data (dense), ``n >= 2``.
          y: ignored.
        """
        self._validate_params()
        check_dense(X)
        X = validate_data(self, X, dtype=np.float64, ensure_min_samples=2)
        res = bhmc(
            key_from_random_state(self.random_state),
            X,
            int(self.depth),
            alpha=float(self.alpha),
            gamma0=float(self.gamma0),
            gamma=float(self.gamma),
            num_samples=int(self.num_samples),
            num_warmup=int(self.num_warmup),
            num_chains=int(self.num_chains),
            summary=self.summary,
            progress_bar=bool(self.progress_bar),
        )
        levels = np.asarray(res.level_labels)
        self.level_labels_ = np.column_stack([_first_appearance(levels[:, l]) for l in range(levels.shape[1])])
        self.labels_ = self.level_labels_[:, -1].copy()
        self.n_level_clusters_ = self.level_labels_.max(axis=0).astype(np.int64) + 1
        self.n_clusters_ = int(self.n_level_clusters_[-1])
        self.component_labels_ = _first_appearance(np.asarray(res.labels))
        self.tree_ = jax.tree_util.tree_map(np.asarray, res.tree)
        self.log_likelihood_ = float(res.log_likelihood)
        return self

    def to_newick(self, labels=None) -> str:
        """The levels' tree as a Newick string (leaf names ``labels`` [n], default the row
        indices)."""
        check_is_fitted(self)
        return self.tree_.to_newick(labels)
