"""jaxhc's algorithms as scikit-learn estimators (the ``sklearn`` extra).

`BayesianHierarchicalClustering` runs BHC (`jaxhc.fit_bhc`, `jaxhc.rbhc` above
`RANDOMIZED_ABOVE` samples) behind scikit-learn's clusterer API: ``fit`` / ``fit_predict`` /
``labels_``, the tree as ``children_`` / ``distances_`` / a scipy ``linkage_matrix_``, the merge
probabilities ``merge_prob_``, ``cut`` without refitting, ``predict`` and ``score`` by BHC's
predictive, and ``to_newick``. `BayesianCrossClustering` runs BHCC / RBHCC (``labels_`` per
view, ``column_labels_``, the column tree), `BayesianHierarchicalMixtureClustering` BHMC
(``level_labels_``, ``labels_`` the deepest level). The estimators are thin: parameters in ``__init__``, NumPy
attributes after ``fit``, the work done by the library functions.

Needs scikit-learn (``pip install 'jaxhc[sklearn]'``); importing this module without it
raises an ImportError naming the extra.
"""

try:
    import sklearn
except ImportError as e:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "jaxhc.sklearn needs scikit-learn >= 1.6, which is not installed: pip install 'jaxhc[sklearn]'"
    ) from e

if tuple(int(p) for p in sklearn.__version__.split(".")[:2] if p.isdigit()) < (1, 6):
    raise ImportError(
        f"jaxhc.sklearn needs scikit-learn >= 1.6 (its validate_data and estimator tags), found "
        f"{sklearn.__version__}: pip install 'jaxhc[sklearn]'"
    )

from .bhc import RANDOMIZED_ABOVE, BayesianHierarchicalClustering  # noqa: E402
from .cross import CROSS_FAMILIES, RANDOMIZED_COLUMNS_ABOVE, BayesianCrossClustering  # noqa: E402
from .levels import BayesianHierarchicalMixtureClustering  # noqa: E402

__all__ = [
    "BayesianCrossClustering",
    "BayesianHierarchicalClustering",
    "BayesianHierarchicalMixtureClustering",
    "CROSS_FAMILIES",
    "RANDOMIZED_ABOVE",
    "RANDOMIZED_COLUMNS_ABOVE",
]
