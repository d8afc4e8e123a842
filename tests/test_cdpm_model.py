"""DPM and CDPM (CrossCat) NumPyro programs and collapsed joints: CRP normalisation, closed
forms on tiny tables, brute-force sums, and Monte Carlo checks of the programs' priors."""

import itertools
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import logsumexp
from numpyro import handlers
from numpyro.infer import Predictive
from scipy import stats as sps

from jaxhc.components import BetaBernoulli, BetaBinomial, DirichletMultinomial, NormalKnownCov
from jaxhc.models import cdpm as C
from jaxhc.models import dpm as D


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("alpha", [0.4, 2.7])
def test_crp_normalised_over_partitions(n, alpha):
    parts = list(D.set_partitions(n))
    assert len(parts) == [1, 2, 5, 15, 52, 203][n - 1]  # Bell numbers
    lp = jnp.stack([D.crp_log_prob(p, alpha) for p in parts])
    assert abs(float(logsumexp(lp))) < 1e-12


def test_crp_log_prob_closed_form_and_relabelling():
    # (0, 0, 1): alpha * 1 * 1 / (alpha (alpha+1) (alpha+2)) * ... sequential: 1 * 1/(1+a) * a/(2+a)
    a = 1.3
    want = np.log(1 / (1 + a) * a / (2 + a))
    assert np.isclose(float(D.crp_log_prob([0, 0, 1], a)), want, atol=1e-13)
    assert np.isclose(float(D.crp_log_prob([7, 7, -2], a)), want, atol=1e-13)


def _comp_cases():
    return [
        (BetaBernoulli(jnp.array([1.5, 0.7]), jnp.array([0.8, 2.0])), np.array([[1.0, 0.0], [1.0, 1.0]])),
        (BetaBinomial(1.2, 0.6, trials=3), np.array([[2.0], [0.0]])),
        (
            NormalKnownCov(jnp.array([0.3, -0.1]), jnp.array([[1.0, 0.3], [0.3, 2.0]]), 0.5),
            np.array([[0.2, 1.1], [-0.7, 0.4]]),
        ),
    ]


@pytest.mark.parametrize("case", range(3))
def test_dpm_two_rows_closed_form(case):
    comp, X = _comp_cases()[case]
    alpha = 0.8
    lm = lambda rows: float(comp.log_marginal(comp.stats(jnp.asarray(X[rows]))))
    want = np.log(alpha / (1 + alpha) * np.exp(lm([0]) + lm([1])) + 1 / (1 + alpha) * np.exp(lm([0, 1])))
    got = float(D.dpm_log_evidence_bruteforce(X, comp, alpha))
    assert np.isclose(got, want, rtol=0, atol=1e-12)
    # the joint itself
    assert np.isclose(
        float(D.dpm_log_joint(X, [0, 1], comp, alpha)), np.log(alpha / (1 + alpha)) + lm([0]) + lm([1]), atol=1e-12
    )
    assert np.isclose(float(D.dpm_log_joint(X, [5, 5], comp, alpha)), np.log(1 / (1 + alpha)) + lm([0, 1]), atol=1e-12)


def test_dpm_joint_any_component_family():
    comp = DirichletMultinomial(jnp.array([1.0, 2.0, 0.5]))
    X = np.array([[1.0, 0, 2], [0, 3, 0], [1, 1, 1]])
    ev = D.dpm_log_evidence_bruteforce(X, comp, 1.1)
    direct = logsumexp(jnp.stack([D.dpm_log_joint(X, p, comp, 1.1) for p in D.set_partitions(3)]))
    assert np.isclose(float(ev), float(direct), atol=1e-12)


def test_cdpm_one_column_is_dpm():
    rng = np.random.default_rng(0)
    X = rng.integers(0, 2, size=(5, 1)).astype(float)
    comp = BetaBernoulli(0.7, 1.9)
    assert np.isclose(
        float(C.cdpm_log_evidence_bruteforce(X, comp, 1.7)),
        float(C.dpm_log_evidence_bruteforce(X, comp, 1.7)),
        atol=1e-12,
    )


def test_cdpm_evidence_equals_literal_double_sum():
    rng = np.random.default_rng(1)
    X = rng.integers(0, 4, size=(3, 2)).astype(float)
    comp = BetaBinomial(jnp.array([1.0, 0.5]), jnp.array([1.5, 1.0]), trials=(3, 4))
    alpha = 0.9
    terms = []
    for u in D.set_partitions(2):
        V = int(u.max()) + 1
        for Zs in itertools.product(list(D.set_partitions(3)), repeat=V):
            terms.append(C.cdpm_log_joint(X, u, {v: Zs[v] for v in range(V)}, comp, alpha))
    assert len(terms) == 5 + 25
    assert np.isclose(
        float(C.cdpm_log_evidence_bruteforce(X, comp, alpha)), float(logsumexp(jnp.stack(terms))), atol=1e-11
    )
    # array form of the row labels (column v = view v) gives the same joint
    Z = np.array([[0, 0], [1, 0], [1, 1]])
    assert np.isclose(
        float(C.cdpm_log_joint(X, [0, 1], Z, comp, alpha)),
        float(C.cdpm_log_joint(X, [4, 2], {4: Z[:, 0], 2: Z[:, 1]}, comp, alpha)),
        atol=1e-13,
    )


def test_cdpm_evidence_normalised_over_binary_tables():
    comp = BetaBernoulli(jnp.array([0.6, 1.4]), jnp.array([1.1, 0.5]))
    tot = [
        C.cdpm_log_evidence_bruteforce(np.array(bits, float).reshape(2, 2), comp, 1.3)
        for bits in itertools.product([0, 1], repeat=4)
    ]
    assert abs(float(logsumexp(jnp.stack(tot)))) < 1e-12


def test_cdpm_gaussian_full_cov_single_view_matches_dpm():
    # with one view the CDPM joint is the DPM joint with the full component
    comp = NormalKnownCov(
        jnp.array([0.0, 1.0]), jnp.array([[1.0, 0.4], [0.4, 1.5]]), jnp.array([[0.3, 0.1], [0.1, 0.2]])
    )
    X = np.array([[0.1, 0.9], [1.2, 0.3], [-0.5, 1.4]])
    z = [0, 1, 0]
    assert np.isclose(
        float(C.cdpm_log_joint(X, [0, 0], {0: z}, comp, 0.7)),
        np.log(1 / 1.7) + float(D.dpm_log_joint(X, z, comp, 0.7)),
        atol=1e-12,
    )


# ------------------------------------------------------------------------------------------
# NumPyro programs
# ------------------------------------------------------------------------------------------
def test_dpm_program_determinism_shapes_sites_and_crp_density():
    comp = BetaBernoulli(jnp.array([0.5, 1.0, 2.0]), 1.0)
    key = jax.random.PRNGKey(3)
    s1 = handlers.seed(D.dpm, key)(component=comp, alpha=1.5, num_points=4)
    s2 = handlers.seed(D.dpm, key)(component=comp, alpha=1.5, num_points=4)
    np.testing.assert_array_equal(s1.X, s2.X)
    np.testing.assert_array_equal(s1.labels, s2.labels)
    assert s1.X.shape == (4, 3) and s1.labels.shape == (4,)
    assert set(np.unique(np.asarray(s1.X))) <= {0.0, 1.0}
    assert not bool(s1.truncated)
    tr = handlers.trace(handlers.seed(D.dpm, key)).get_trace(component=comp, alpha=1.5, num_points=4)
    assert {"z", "theta", "X", "truncated"} <= set(tr)
    assert tr["theta"]["value"].shape == (4, 3)
    z = tr["z"]["value"]
    assert int(z[0]) == 0 and all(int(z[i]) <= int(z[:i].max()) + 1 for i in range(1, 4))
    lp = jnp.sum(tr["z"]["fn"].log_prob(z))
    assert np.isclose(float(lp), float(D.crp_log_prob(z, 1.5)), atol=1e-12)
    # conditioning on data: X is observed
    trc = handlers.trace(handlers.seed(D.dpm, key)).get_trace(X=np.asarray(s1.X), component=comp, alpha=1.5)
    assert trc["X"]["is_observed"]
    # NormalKnownCov
    g = handlers.seed(D.dpm, key)(component=NormalKnownCov(jnp.zeros(2)), alpha=1.0, num_points=4)
    assert g.X.shape == (4, 2)


def test_dpm_exchangeable_labels_density_and_normalisation():
    """``labels="exchangeable"``: the trace density of every one of the K^n label vectors is
    ``crp_log_prob(z) + log((K - k)! / K!)``, so the densities sum to 1 over all labellings;
    with ordered labels a vector out of first-appearance order has density 0."""
    from numpyro.infer.util import log_density
    from scipy.special import gammaln

    comp, n, alpha = BetaBernoulli(), 4, 1.5
    allz = np.array(list(itertools.product(range(n), repeat=n)))

    def lp(z, labels):
        model = lambda: D.dpm(component=comp, alpha=alpha, num_points=n, dim=1, labels=labels)
        return log_density(handlers.block(handlers.seed(model, 0), hide=["theta", "X"]), (), {}, {"z": z})[0]

    ex = np.asarray(jax.jit(jax.vmap(lambda z: lp(z, "exchangeable")))(allz))
    k = np.array([len(set(z)) for z in allz])
    want = np.array([float(D.crp_log_prob(z, alpha)) for z in allz]) + gammaln(n - k + 1) - gammaln(n + 1)
    np.testing.assert_allclose(ex, want, atol=1e-12)
    np.testing.assert_allclose(np.exp(ex).sum(), 1.0, atol=1e-12)
    ordered = np.asarray(jax.jit(jax.vmap(lambda z: lp(z, "ordered")))(allz))
    in_order = np.array([_canon(z) == tuple(z) for z in allz])
    assert np.all(np.isneginf(ordered[~in_order])) and np.all(np.isfinite(ordered[in_order]))
    np.testing.assert_allclose(np.exp(ordered).sum(), 1.0, atol=1e-12)
    draws = jax.vmap(
        lambda key: handlers.seed(D.dpm, key)(component=comp, alpha=alpha, num_points=n, labels="exchangeable").labels
    )(jax.random.split(jax.random.PRNGKey(0), 200))
    assert np.mean(np.asarray(draws)[:, 0] != 0) > 0.5  # labels are not in first-appearance order
    with pytest.raises(ValueError, match="labels"):
        D.dpm(component=comp, num_points=n, labels="sorted")


def test_dpm_truncation_flag():
    s = handlers.seed(D.dpm, jax.random.PRNGKey(0))(
        component=BetaBernoulli(), alpha=1e6, num_points=5, dim=2, max_clusters=2
    )
    assert bool(s.truncated)
    assert int(jnp.max(s.labels)) <= 1


def _canon(labels):
    seen = {}
    return tuple(seen.setdefault(int(v), len(seen)) for v in labels)


def test_cdpm_program_and_column_partition_prior():
    comp = BetaBinomial(1.0, 1.0, trials=2)
    key = jax.random.PRNGKey(11)
    s1 = handlers.seed(C.cdpm, key)(component=comp, alpha=0.9, num_points=4, dim=3)
    s2 = handlers.seed(C.cdpm, key)(component=comp, alpha=0.9, num_points=4, dim=3)
    np.testing.assert_array_equal(s1.X, s2.X)
    assert s1.X.shape == (4, 3) and s1.column_views.shape == (3,) and s1.row_labels.shape == (4, 3)
    tr = handlers.trace(handlers.seed(C.cdpm, key)).get_trace(component=comp, alpha=0.9, num_points=4, dim=3)
    assert {"column_view", "row_cluster", "theta", "X", "truncated"} <= set(tr)
    assert tr["theta"]["value"].shape == (3, 4, 3)
    # the trace's CRP sites have density log CRP(u) + sum over view slots log CRP(Z_v)
    u, Z = tr["column_view"]["value"], tr["row_cluster"]["value"]
    lp = jnp.sum(tr["column_view"]["fn"].log_prob(u)) + jnp.sum(tr["row_cluster"]["fn"].log_prob(Z))
    want = D.crp_log_prob(u, 0.9) + sum(D.crp_log_prob(Z[:, v], 0.9) for v in range(3))
    assert np.isclose(float(lp), float(want), atol=1e-12)

    # Monte Carlo: column partitions follow CRP(alpha) on 3 columns
    alpha, N = 0.9, 4000
    pred = Predictive(C.cdpm, num_samples=N, return_sites=["column_view"])
    draws = np.asarray(pred(jax.random.PRNGKey(5), component=comp, alpha=alpha, num_points=2, dim=3)["column_view"])
    parts = [tuple(int(v) for v in p) for p in D.set_partitions(3)]
    counts = Counter(_canon(d) for d in draws)
    assert set(counts) <= set(parts)
    obs = np.array([counts[p] for p in parts])
    exp = N * np.exp(np.array([float(D.crp_log_prob(np.array(p), alpha)) for p in parts]))
    assert np.isclose(exp.sum(), N)
    assert sps.chisquare(obs, exp).pvalue > 1e-3

    # Gaussian (diagonal) program
    g = handlers.seed(C.cdpm, key)(component=NormalKnownCov(jnp.zeros(3), 2.0, 0.5), alpha=1.0, num_points=5)
    assert g.X.shape == (5, 3)


# ------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------
def test_bad_input():
    comp = BetaBernoulli()
    X = np.array([[0.0, 1.0], [1.0, 1.0]])
    with pytest.raises(ValueError, match="alpha"):
        D.crp_log_prob([0, 1], 0.0)
    with pytest.raises(ValueError, match="alpha"):
        D.dpm_log_joint(X, [0, 1], comp, -1.0)
    with pytest.raises(TypeError, match="alpha"):
        D.dpm_log_joint(X, [0, 1], comp, "big")
    with pytest.raises(TypeError, match="component"):
        D.dpm_log_joint(X, [0, 1], "beta", 1.0)
    with pytest.raises(ValueError, match="labels"):
        D.dpm_log_joint(X, [0, 1, 1], comp, 1.0)
    with pytest.raises(ValueError, match="binary"):
        D.dpm_log_joint(X + 0.5, [0, 1], comp, 1.0)
    with pytest.raises(ValueError, match="rows"):
        D.dpm_log_evidence_bruteforce(np.zeros((7, 1)), comp, 1.0)
    with pytest.raises(ValueError, match="brute-force"):
        C.cdpm_log_evidence_bruteforce(np.zeros((2, 5)), comp, 1.0)
    with pytest.raises(ValueError, match="column_views"):
        C.cdpm_log_joint(X, [0], {0: [0, 1]}, comp, 1.0)
    with pytest.raises(ValueError, match="view 1"):
        C.cdpm_log_joint(X, [0, 1], {0: [0, 1]}, comp, 1.0)
    with pytest.raises(TypeError, match="DirichletMultinomial"):
        C.cdpm_log_joint(X, [0, 1], {0: [0, 1], 1: [0, 0]}, DirichletMultinomial(jnp.ones(2)), 1.0)
    with pytest.raises(ValueError, match="num_points"):
        handlers.seed(D.dpm, 0)(component=comp, alpha=1.0)
    with pytest.raises(ValueError, match="max_clusters"):
        handlers.seed(D.dpm, 0)(component=comp, alpha=1.0, num_points=3, max_clusters=0)
    with pytest.raises(TypeError, match="NormalInverseWishart|supports"):
        from jaxhc.components import NormalInverseWishart

        handlers.seed(C.cdpm, 0)(component=NormalInverseWishart(jnp.zeros(2)), alpha=1.0, num_points=3)
    with pytest.raises(ValueError, match="diagonal"):
        handlers.seed(C.cdpm, 0)(
            component=NormalKnownCov(jnp.zeros(2), jnp.array([[1.0, 0.5], [0.5, 1.0]])), alpha=1.0, num_points=3
        )
    with pytest.raises(ValueError, match="missing"):
        handlers.seed(C.cdpm, 0)(X=np.array([[0.0, np.nan]]), component=comp, alpha=1.0)
    with pytest.raises(ValueError, match="num_points"):
        handlers.seed(C.cdpm, 0)(X=X, component=comp, alpha=1.0, num_points=3)
