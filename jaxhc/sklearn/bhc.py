"""`BayesianHierarchicalClustering`: BHC (`jaxhc.fit_bhc`, `jaxhc.rbhc`) as a scikit-learn
clusterer."""

from __future__ import annotations

from numbers import Integral, Real

import jax
import jax.numpy as jnp
import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from .._internal.buckets import bucket, pad_rows
from ..inference.bhc.auto import FAMILIES, fit_bhc
from ..inference.bhc.auto import RANDOMIZED_ABOVE as _FIT_RANDOMIZED_ABOVE
from ..inference.bhc.result import BHCResult
from ..tree import Tree
from ._common import (
    check_dense,
    cut_n_clusters,
    family_tuple,
    key_from_random_state,
    monotone_linkage,
    node_clusters,
    resolve_cut,
)

__all__ = ["BayesianHierarchicalClustering", "RANDOMIZED_ABOVE"]

#: ``algorithm="auto"`` runs randomized BHC (`jaxhc.rbhc`) above this many samples: greedy
#: BHC keeps an ``[n, n]`` table of pair scores (1.3 GB at n = 13 000 in float64) and its
#: time grows as ``n**1.8-1.9`` (3.5 s at n = 4000, d = 10 on 2 cores; benchmarks/README.md).
#: The same size as `jaxhc.fit_bhc`'s (`jaxhc.inference.bhc.auto.RANDOMIZED_ABOVE`).
RANDOMIZED_ABOVE = _FIT_RANDOMIZED_ABOVE

#: rows scored by one call of the compiled predictive program (each row alone, in a loop
#: inside the program, so a row's scores do not depend on the other rows or their number)
_PREDICT_CHUNK = 64


@jax.jit
def _predictive_cache(comp, node_stats):
    return comp.predictive_cache(node_stats)


@jax.jit
def _row_scores(comp, cache, log_w, group, n_groups, X):
    """Per row of ``X [B, d]``: ``log p(x | D)`` (BHC's predictive, a mixture over all
    ``N`` nodes with weights ``log_w``) and the group ``0 .. n_groups - 1`` whose nodes hold
    the most of it (``group [N]``: cluster ``c``'s nodes hold ``c``, the others ``N - 1``;
    ties go to the lower group)."""
    N = log_w.shape[0]
    live = jnp.arange(N) < n_groups

    def one(x):
        lp = log_w + comp.log_predictive_cached(x, cache)
        total = jax.scipy.special.logsumexp(lp)
        top = jax.ops.segment_max(lp, group, num_segments=N)
        top = jnp.where(jnp.isfinite(top), top, 0.0)
        mass = top + jnp.log(jax.ops.segment_sum(jnp.exp(lp - top[group]), group, num_segments=N))
        return total, jnp.argmax(jnp.where(live, mass, -jnp.inf))

    return jax.lax.map(one, X)  # a scan over rows: the same program for every row


def _numpy_result(res: BHCResult) -> BHCResult:
    return jax.tree_util.tree_map(np.asarray, res)


def _renumbered(res: BHCResult, order, children, heights) -> BHCResult:
    """``res`` with its merges in the order ``order`` (`monotone_linkage`): every per-node
    field permuted, the tree re-built with ``children`` and ``heights``."""
    n = res.tree.n_leaves
    perm = np.concatenate([np.arange(n), n + np.asarray(order)])
    log_r = np.asarray(res.log_r)[order]
    tree = Tree(children, heights=heights, values={"log_r": log_r})
    return res._replace(
        tree=tree,
        log_r=log_r,
        log_d=np.asarray(res.log_d)[perm],
        log_pT=np.asarray(res.log_pT)[perm],
        log_h1=np.asarray(res.log_h1)[perm],
        log_1mr=np.asarray(res.log_1mr)[perm],
        node_stats=jax.tree_util.tree_map(lambda x: np.asarray(x)[perm], res.node_stats),
    )


class BayesianHierarchicalClustering(ClusterMixin, BaseEstimator):
    """Bayesian hierarchical clustering (Heller & Ghahramani 2005) as a scikit-learn
    clusterer: a binary tree over the rows whose every merge carries its posterior
    probability ``r_k``, cut where ``r_k < 0.5``.

    By default ``fit`` runs `jaxhc.fit_bhc`: the conjugate family chosen by BHC's lower bound
    on the DPM evidence (Beta-Bernoulli for 0/1 data, else Normal-inverse-Wishart against
    Normal-Gamma), alpha and the prior learned. Above `RANDOMIZED_ABOVE` samples it runs
    randomized BHC (`jaxhc.rbhc`, ``O(n log n)``), the family and hyperparameters chosen and
    learned as above on ``learn_subset`` rows drawn from ``random_state``.

    The fitted tree is given in scikit-learn's and scipy's conventions (``children_``,
    ``distances_``, ``linkage_matrix_``: merges in order of height, node ``n + i`` made by
    row ``i``). A merge's height is ``-log r_k`` (nats), lowered where needed to the height
    of its parent so that heights never decrease towards the root, and separated by a few
    ulps where equal (`monotone_linkage`): ``scipy.cluster.hierarchy.fcluster(Z, -log t,
    "distance")`` is BHC's own cut at ``r_k < t``, ``fcluster(Z, k, "maxclust")`` is
    ``cut(n_clusters=k)``, and ``dendrogram(Z)`` draws the tree.

    Args:
      family: the conjugate family: None (default) to choose by evidence among the
        candidates for the data, a name of `jaxhc.inference.bhc.auto.FAMILIES` (``"niw"``,
        ``"normalgamma"``, ``"normal"``, ``"bernoulli"``, ``"binomial"``,
        ``"multinomial"``), or a tuple of names to choose among.
      alpha: DPM concentration (> 0): the start of learning, or the value used with
        ``learn=False``.
      learn: learn alpha and the prior by maximising the DPM lower bound (default), or keep
        the data-derived prior (``Family.from_data(X)``) and ``alpha``.
      merge_threshold: cut the tree top-down where ``r_k < merge_threshold`` (in [0, 1]).
      n_clusters: cut the tree into this many clusters instead (the ``n_clusters - 1``
        highest merges undone). At most one of ``merge_threshold`` and ``n_clusters`` may be
        given; with neither the cut is ``merge_threshold=0.5``, BHC's own rule.
      algorithm: ``"auto"`` (greedy BHC up to `RANDOMIZED_ABOVE` samples, randomized above),
        ``"greedy"`` or ``"randomized"``.
      trials: trials per entry, for the ``"binomial"`` family only.
      subset_size, leaf_size: randomized BHC's subset and leaf block sizes (`jaxhc.rbhc`).
      learn_subset: randomized BHC chooses the family and learns the hyperparameters on at
        most this many rows, drawn from ``random_state``.
      random_state: None, an int or a ``numpy.random.RandomState``: seeds the JAX key of
        randomized BHC and of its learning subset (an int ``s`` is ``jax.random.PRNGKey(s)``).
        Greedy BHC draws nothing.
      progress_bar: show BHC's progress bars.

    Attributes:
      labels_: int64 ``[n]`` cluster of every sample, ``0 .. n_clusters_ - 1`` in order of
        first appearance.
      n_clusters_: number of clusters of the cut.
      children_: int64 ``[n-1, 2]``: row ``i`` merges the two nodes into node ``n + i``
        (nodes ``< n`` are samples), in order of height.
      distances_: ``[n-1]`` strictly increasing heights of the merges (the transform above).
      linkage_matrix_: ``[n-1, 4]`` scipy linkage: ``children_``, ``distances_``, sizes.
      merge_prob_: ``[n-1]`` posterior probability ``r_k`` of every merge, in ``children_``
        order.
      log_evidence_: ``log p(D | T)`` of the tree.
      dpm_lower_bound_: BHC's lower bound on the DPM log marginal likelihood.
      family_: the family used; component_: its prior (a `jaxhc.components` instance with
        NumPy fields); alpha_: its DPM concentration.
      algorithm_: ``"greedy"`` or ``"randomized"``, what ran.
      tree_: the `jaxhc.Tree` (``children_``, heights ``distances_``, ``values["log_r"]``).
      n_features_in_: number of features seen by ``fit``.
      feature_names_in_: the column names of a DataFrame given to ``fit``.
    """

    _parameter_constraints: dict = {
        "family": [None, StrOptions(set(FAMILIES)), tuple, list],
        "alpha": [Interval(Real, 0, None, closed="neither")],
        "learn": ["boolean"],
        "merge_threshold": [None, Interval(Real, 0, 1, closed="both")],
        "n_clusters": [None, Interval(Integral, 1, None, closed="left")],
        "algorithm": [StrOptions({"auto", "greedy", "randomized"})],
        "trials": [None, Interval(Integral, 1, None, closed="left")],
        "subset_size": [Interval(Integral, 2, None, closed="left")],
        "leaf_size": [Interval(Integral, 2, None, closed="left")],
        "learn_subset": [Interval(Integral, 2, None, closed="left")],
        "random_state": ["random_state"],
        "progress_bar": ["boolean"],
    }

    def __init__(
        self,
        family=None,
        *,
        alpha=1.0,
        learn=True,
        merge_threshold=None,
        n_clusters=None,
        algorithm="auto",
        trials=None,
        subset_size=64,
        leaf_size=64,
        learn_subset=1000,
        random_state=None,
        progress_bar=False,
    ):
        self.family = family
        self.alpha = alpha
        self.learn = learn
        self.merge_threshold = merge_threshold
        self.n_clusters = n_clusters
        self.algorithm = algorithm
        self.trials = trials
        self.subset_size = subset_size
        self.leaf_size = leaf_size
        self.learn_subset = learn_subset
        self.random_state = random_state
        self.progress_bar = progress_bar

    # ---- fit ----------------------------------------------------------------------------
    def _check_X(self, X, reset: bool) -> np.ndarray:
        check_dense(X)
        return validate_data(self, X, reset=reset, dtype=np.float64, ensure_min_samples=2 if reset else 1)

    def fit(self, X, y=None):
        """Builds the tree and cuts it; returns ``self``.

        Args:
          X: ``[n, d]`` samples (array-like or DataFrame; dense), ``n >= 2``.
          y: ignored.
        """
        self._validate_params()
        cut = resolve_cut(self.merge_threshold, self.n_clusters)
        families = family_tuple(self.family)
        unknown = [f for f in families or () if f not in FAMILIES]
        if unknown:
            raise ValueError(f"family: unknown families {unknown}; choose from {', '.join(FAMILIES)}")
        X = self._check_X(X, reset=True)
        n = X.shape[0]
        if cut[0] == "n_clusters" and cut[1] > n:
            raise ValueError(f"n_clusters={cut[1]} is more than the {n} samples")
        if self.leaf_size < self.subset_size:
            raise ValueError(f"leaf_size must be >= subset_size={self.subset_size}, got {self.leaf_size}")
        algorithm = self.algorithm
        if algorithm == "auto":
            algorithm = "randomized" if n > RANDOMIZED_ABOVE else "greedy"
        # fit_bhc: greedy BHC, or (randomized) the family and hyperparameters from
        # learn_subset rows drawn with the first half of the key, rbhc with the second
        fit = fit_bhc(
            X,
            families,
            alpha=self.alpha,
            learn=self.learn,
            trials=self.trials,
            progress_bar=bool(self.progress_bar),
            randomized_above=None if algorithm == "greedy" else 0,
            learn_subset=int(self.learn_subset),
            key=None if algorithm == "greedy" else key_from_random_state(self.random_state),
            subset_size=int(self.subset_size),
            leaf_size=int(self.leaf_size),
        )
        return self._set_fitted(fit.result, fit.family, fit.alpha, algorithm, cut)

    def _set_fitted(self, res: BHCResult, family: str, alpha, algorithm: str, cut: tuple):
        """The fitted attributes from a `BHCResult` (all the estimator adds to the library
        call: NumPy arrays, the monotone linkage, the cut, the predictive's weights)."""
        n = res.tree.n_leaves
        res = _numpy_result(res)
        order, children, heights = monotone_linkage(res.tree.children, res.log_r)
        res = _renumbered(res, order, children, heights)
        self._result = res
        self.tree_ = res.tree
        self.children_ = children
        self.distances_ = heights
        sizes = res.tree.sizes()[n:].astype(np.float64)
        self.linkage_matrix_ = np.column_stack([children.astype(np.float64), heights, sizes])
        self.merge_prob_ = np.exp(np.asarray(res.log_r, dtype=np.float64))
        self.log_evidence_ = float(res.log_evidence)
        self.dpm_lower_bound_ = float(res.dpm_lower_bound)
        self.family_ = family
        self.component_ = res.component
        self.alpha_ = float(alpha)
        self.algorithm_ = algorithm
        self.labels_ = self._cut_labels(cut)
        self.n_clusters_ = int(self.labels_.max()) + 1
        self._node_cluster = node_clusters(children, self.labels_)
        self._log_weights = res.log_weights()
        return self

    # ---- cuts ---------------------------------------------------------------------------
    def _cut_labels(self, cut) -> np.ndarray:
        kind, value = cut
        if kind == "n_clusters":
            return cut_n_clusters(self.tree_, self.distances_, value)
        return self.tree_.cut(value, scores=self.merge_prob_).astype(np.int64)

    def cut(self, merge_threshold=None, n_clusters=None) -> np.ndarray:
        """Labels ``[n]`` of another cut of the fitted tree (nothing is refitted; ``labels_``
        and ``predict`` keep the fitted cut).

        Args:
          merge_threshold: split the nodes with ``r_k < merge_threshold`` from the root down.
          n_clusters: undo the ``n_clusters - 1`` highest merges instead. At most one of the
            two; with neither, the estimator's own cut (its ``merge_threshold`` /
            ``n_clusters``).

        Returns:
          int64 ``[n]`` labels ``0 .. K-1`` in order of first appearance.
        """
        check_is_fitted(self)
        if merge_threshold is None and n_clusters is None:
            return self._cut_labels(resolve_cut(self.merge_threshold, self.n_clusters))
        cut = resolve_cut(merge_threshold, n_clusters, "cut: ")
        return self._cut_labels(cut)

    # ---- predictive ---------------------------------------------------------------------
    def _scores(self, X) -> tuple:
        """``(log p(x | D) [m], cluster [m])`` of the rows of ``X``."""
        check_is_fitted(self)
        X = self._check_X(X, reset=False)
        res = self._result
        comp = res.component
        comp.validate_data(X)
        n = res.tree.n_leaves
        N = 2 * bucket(n, _PREDICT_CHUNK) - 1  # one program for every n of a bucket (and all n <= 64)
        group = np.where(self._node_cluster >= 0, self._node_cluster, N - 1).astype(np.int32)
        args = (
            jnp.asarray(pad_rows(np.asarray(self._log_weights, dtype=np.float64), N, -np.inf)),
            jnp.asarray(pad_rows(group, N, N - 1)),
            jnp.asarray(self.n_clusters_, dtype=jnp.int32),
        )
        stats = jax.tree_util.tree_map(lambda x: jnp.asarray(pad_rows(x, N, "first")), res.node_stats)
        cache = _predictive_cache(comp, stats)
        m = X.shape[0]
        total, labels = np.empty(m), np.empty(m, dtype=np.int64)
        for start in range(0, m, _PREDICT_CHUNK):
            rows = X[start : start + _PREDICT_CHUNK]
            t, c = _row_scores(comp, cache, *args, jnp.asarray(pad_rows(rows, _PREDICT_CHUNK, "first")))
            total[start : start + len(rows)] = np.asarray(t)[: len(rows)]
            labels[start : start + len(rows)] = np.asarray(c)[: len(rows)]
        return total, labels

    def predict(self, X) -> np.ndarray:
        """The cluster of the fitted cut each row of ``X`` joins under BHC's predictive.

        ``p(x | D) = sum_k w_k p(x | D_k)`` over the tree's nodes (`jaxhc.bhc_predictive`);
        a row goes to the cluster whose nodes (the cluster's own node and those below it)
        hold the most of that mixture (ties: the lower label). Each row is scored alone by
        one compiled program, so the labels do not depend on the order or the number of the
        rows passed, to the last bit.

        Args:
          X: ``[m, d]`` rows with the features seen by ``fit``.

        Returns:
          int64 ``[m]`` labels of ``labels_``'s clusters.
        """
        return self._scores(X)[1]

    def score_samples(self, X) -> np.ndarray:
        """``log p(x | D)`` of every row of ``X [m, d]`` under BHC's predictive (the tree's
        mixture of the family's posterior predictives, `jaxhc.bhc_predictive`); ``[m]``."""
        return self._scores(X)[0]

    def score(self, X, y=None) -> float:
        """Mean log predictive density of the rows of ``X`` (higher is better), so that model
        selection (``GridSearchCV``) can compare alpha or the family by held-out likelihood.

        Args:
          X: ``[m, d]`` rows.
          y: ignored.
        """
        return float(np.mean(self.score_samples(X)))

    # ---- export -------------------------------------------------------------------------
    def to_newick(self, labels=None, *, support: bool = True, branch_lengths: bool = True) -> str:
        """The fitted tree as a Newick string.

        Args:
          labels: leaf names ``[n]`` (default: the sample indices).
          support: write each merge's ``r_k`` (3 decimals) as its node's label, where
            phylogenetic viewers show support values.
          branch_lengths: edge lengths from ``distances_`` (parent minus child; samples at 0).
        """
        check_is_fitted(self)
        inner = [f"{p:.3f}" for p in self.merge_prob_] if support else None
        return self.tree_.to_newick(labels, branch_lengths=branch_lengths, inner_labels=inner)
