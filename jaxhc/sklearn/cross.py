"""`BayesianCrossClustering`: BHCC / RBHCC (`jaxhc.bhcc`, `jaxhc.rbhcc`) as a scikit-learn
clusterer: the columns split into views, the rows clustered within each view."""

from __future__ import annotations

from numbers import Integral, Real

import jax
import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ..components import BetaBernoulli, BetaBinomial, IndependentNormal
from ..inference.bhcc import bhcc, rbhcc
from ..tree import Tree
from ._common import check_dense, key_from_random_state, monotone_linkage

__all__ = ["BayesianCrossClustering", "RANDOMIZED_COLUMNS_ABOVE", "CROSS_FAMILIES"]

#: ``algorithm="auto"`` runs randomized BHCC (`jaxhc.rbhcc`, ``O(J log J)`` column
#: comparisons) above this many columns (greedy BHCC compares every pair of columns)
RANDOMIZED_COLUMNS_ABOVE = 200
#: the column-separable families by name, each started from the data
CROSS_FAMILIES = ("bernoulli", "binomial", "normal")


def cross_component(family: str, X: np.ndarray, trials=None):
    """The data-derived prior of a column-separable ``family`` (`CROSS_FAMILIES`):
    ``BetaBernoulli.from_data(X)``, ``BetaBinomial.from_data(X, trials)``, or an
    `IndependentNormal` with each column's observed mean and variance as the prior of its
    cluster means and a tenth of that variance as the noise (as ``NormalKnownCov.from_data``)."""
    if family == "bernoulli":
        return BetaBernoulli.from_data(X)
    if family == "binomial":
        if trials is None:
            raise ValueError("trials: the binomial family needs the number of trials per entry")
        return BetaBinomial.from_data(X, trials)
    if family == "normal":
        obs = ~np.isnan(X)
        count = np.maximum(obs.sum(0), 1)
        mean = np.where(obs, X, 0.0).sum(0) / count
        var = np.where(obs, (X - mean) ** 2, 0.0).sum(0) / count
        var = np.where(var > 0, var, 1.0)
        return IndependentNormal(mean, var, 0.1 * var)
    raise ValueError(f"family: unknown family {family!r}; choose from {', '.join(CROSS_FAMILIES)}")


def _tree_attributes(children, log_r) -> tuple:
    """``(tree, children, heights, linkage, merge_prob)`` of a tree in the monotone layout."""
    order, ch, heights = monotone_linkage(children, log_r)
    log_r = np.asarray(log_r, dtype=np.float64)[order]
    tree = Tree(ch, heights=heights, values={"log_r": log_r})
    m = ch.shape[0] + 1
    linkage = np.column_stack([ch.astype(np.float64), heights, tree.sizes()[m:].astype(np.float64)])
    return tree, ch, heights, linkage, np.exp(log_r)


class BayesianCrossClustering(ClusterMixin, BaseEstimator):
    """Bayesian hierarchical cross-clustering (Li & Shafto) as a scikit-learn clusterer: a
    BHC-style tree over the columns whose cut splits them into views, and in each view a BHC
    tree over the rows.

    ``fit`` runs `jaxhc.bhcc` (above `RANDOMIZED_COLUMNS_ABOVE` columns `jaxhc.rbhcc`) with a
    column-separable family started from the data. The column tree is given in the layout of
    `BayesianHierarchicalClustering` (``children_``, ``distances_``, ``linkage_matrix_``,
    ``merge_prob_``: heights ``-log r_k`` lowered to the parent's, merges in order of height).

    Args:
      family: ``"bernoulli"`` (0/1 data), ``"binomial"`` (counts of ``trials``) or
        ``"normal"`` (real data, `IndependentNormal`); None (default): ``"bernoulli"`` for 0/1
        data, else ``"normal"``.
      alpha: concentration of both CRPs (columns into views, rows into clusters), > 0.
      algorithm: ``"auto"``, ``"greedy"`` (`jaxhc.bhcc`) or ``"randomized"`` (`jaxhc.rbhcc`).
      trials: trials per entry, for ``"binomial"`` only.
      refine: refine the cut's column partition by the local (and stochastic) search.
      search: ``"stochastic"`` or ``"local"`` (see `jaxhc.bhcc`).
      levels: randomized BHCC only: truncate the column hierarchy at this depth (None: full).
      random_state: None, an int or a ``numpy.random.RandomState``: the seed of the
        stochastic search and of randomized BHCC's subsets (an int ``s`` is
        ``jax.random.PRNGKey(s)``).
      progress_bar: show progress bars.

    Attributes:
      column_labels_: int64 ``[d]``: the view of every column (``0 .. n_views_ - 1``, in order
        of first column).
      n_views_: number of views.
      labels_: int64 ``[n, n_views_]``: column ``v`` holds every row's cluster in view ``v``
        (BHC's cut of the view's row tree at ``r < 0.5``).
      n_clusters_: int64 ``[n_views_]`` clusters of each view.
      children_, distances_, linkage_matrix_, merge_prob_, tree_: the column tree (as in
        `BayesianHierarchicalClustering`).
      view_linkage_matrices_: list of ``n_views_`` scipy linkages ``[n-1, 4]`` of the views'
        row trees (same layout).
      log_evidence_: ``log p(X | T)`` of the column tree; cdpm_lower_bound_: the lower bound on
        the CDPM log marginal likelihood.
      family_, component_, alpha_, algorithm_: the model and the algorithm that ran.
      n_features_in_, feature_names_in_: as scikit-learn's.
    """

    _parameter_constraints: dict = {
        "family": [None, StrOptions(set(CROSS_FAMILIES))],
        "alpha": [Interval(Real, 0, None, closed="neither")],
        "algorithm": [StrOptions({"auto", "greedy", "randomized"})],
        "trials": [None, Interval(Integral, 1, None, closed="left")],
        "refine": ["boolean"],
        "search": [StrOptions({"stochastic", "local"})],
        "levels": [None, Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
        "progress_bar": ["boolean"],
    }

    def __init__(
        self,
        family=None,
        *,
        alpha=1.0,
        algorithm="auto",
        trials=None,
        refine=True,
        search="stochastic",
        levels=None,
        random_state=None,
        progress_bar=False,
    ):
        self.family = family
        self.alpha = alpha
        self.algorithm = algorithm
        self.trials = trials
        self.refine = refine
        self.search = search
        self.levels = levels
        self.random_state = random_state
        self.progress_bar = progress_bar

    def fit(self, X, y=None):
        """Builds the column tree, its views and their row trees; returns ``self``.

        Args:
          X: ``[n, d]`` (dense; rows are the points, columns the features), ``n >= 2``.
          y: ignored.
        """
        self._validate_params()
        check_dense(X)
        X = validate_data(self, X, dtype=np.float64, ensure_min_samples=2, ensure_all_finite="allow-nan")
        family = self.family
        if family is None:
            seen = X[~np.isnan(X)]
            family = "bernoulli" if seen.size and np.all((seen == 0) | (seen == 1)) else "normal"
        comp = cross_component(family, X, self.trials)
        try:
            comp.validate_data(X)
        except (TypeError, ValueError) as e:
            raise ValueError(f"X: the data do not fit the {family} family: {e}") from None
        algorithm = self.algorithm
        if algorithm == "auto":
            algorithm = "randomized" if X.shape[1] > RANDOMIZED_COLUMNS_ABOVE else "greedy"
        key = key_from_random_state(self.random_state)
        bar = bool(self.progress_bar)
        if algorithm == "greedy":
            res = bhcc(X, comp, float(self.alpha), refine=self.refine, search=self.search, seed=key, progress_bar=bar)
        else:
            res = rbhcc(
                key,
                X,
                comp,
                float(self.alpha),
                levels=self.levels,
                refine=self.refine,
                search=self.search,
                progress_bar=bar,
            )
        n, d = X.shape
        column_labels = np.zeros(d, dtype=np.int64)
        labels = np.zeros((n, len(res.views)), dtype=np.int64)
        linkages = []
        for v, view in enumerate(res.views):
            column_labels[np.asarray(view.columns)] = v
            labels[:, v] = view.cut(0.5)
            if n > 1:
                linkages.append(_tree_attributes(view.rows.tree.children, np.asarray(view.rows.log_r))[3])
        if d > 1:
            self.tree_, self.children_, self.distances_, self.linkage_matrix_, self.merge_prob_ = _tree_attributes(
                res.tree.children, np.asarray(res.log_r)
            )
        else:  # one column: one view, no column merges
            self.tree_ = Tree(np.zeros((0, 2), np.int64), heights=np.zeros(0), values={"log_r": np.zeros(0)})
            self.children_ = np.zeros((0, 2), np.int64)
            self.distances_ = np.zeros(0)
            self.linkage_matrix_ = np.zeros((0, 4))
            self.merge_prob_ = np.zeros(0)
        self.column_labels_ = column_labels
        self.n_views_ = len(res.views)
        self.labels_ = labels
        self.n_clusters_ = labels.max(axis=0).astype(np.int64) + 1
        self.view_linkage_matrices_ = linkages
        self.log_evidence_ = float(res.log_evidence)
        self.cdpm_lower_bound_ = float(res.cdpm_lower_bound)
        self.family_ = family
        self.component_ = jax.tree_util.tree_map(np.asarray, res.component)
        self.alpha_ = float(res.alpha)
        self.algorithm_ = algorithm
        return self

    def to_newick(self, labels=None, *, support: bool = True, branch_lengths: bool = True) -> str:
        """The column tree as a Newick string (leaf names ``labels`` [d], default the feature
        names of a DataFrame or the column indices; ``r_k`` as support values)."""
        check_is_fitted(self)
        if labels is None and hasattr(self, "feature_names_in_"):
            labels = list(self.feature_names_in_)
        inner = [f"{p:.3f}" for p in self.merge_prob_] if support else None
        return self.tree_.to_newick(labels, branch_lengths=branch_lengths, inner_labels=inner)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # the column-separable families skip missing entries
        return tags
