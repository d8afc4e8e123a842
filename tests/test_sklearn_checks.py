"""scikit-learn's own estimator checks (`parametrize_with_checks`) over jaxhc's BHC estimator.

The checks fit about fifty small data sets of 1 to 10 features and 10 to 160 rows; their
cost is compilation (one BHC program per size bucket and feature count, `jaxhc._internal.
buckets`), not the fits: ~3 min on 2 cores with a cold compilation cache, ~35 s warm. So
the configurations checked here are the cheap ones: learning off and one family (a family
chosen by evidence compiles a search per candidate, learning an M-step per shape), greedy
and randomized BHC. The defaults (learning on, the family chosen by evidence, greedy and
randomized) pass every check too, in runs by hand of ``check_estimator`` (~5.5 min and ~2
min cold); tests/test_sklearn.py checks that the defaults are `jaxhc.fit_bhc`'s answers.
"""

import jax

jax.config.update("jax_enable_x64", True)

from sklearn.utils.estimator_checks import parametrize_with_checks

from jaxhc.sklearn import BayesianHierarchicalClustering

ESTIMATORS = [
    BayesianHierarchicalClustering("niw", learn=False),
    # randomized BHC on small data: subsets of 8 rows and leaf blocks of 16, so the filtering
    # levels run (with the defaults, 64 and 64, n <= 64 is one plain BHC block)
    BayesianHierarchicalClustering(
        "niw", learn=False, algorithm="randomized", subset_size=8, leaf_size=16, random_state=0
    ),
]


def _expected_failed_checks(estimator):
    # every check passes: nothing is expected to fail
    return {}


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=_expected_failed_checks)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)
