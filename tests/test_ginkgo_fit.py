"""Learning the Ginkgo shower rate lambda with the trees summed out (trellis log Z).

Ground truth: per-jet `trellis.log_partition` (itself checked against brute-force
enumeration in test_trellis.py), finite differences, and 300 jets made by the authors' own
Ginkgo generator with lambda = 2.0, t_cut = 16 (tests/data/ginkgo_generator_jets_lam2.0.json,
see ../shared/data/README.md).
"""

import functools
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxhc import trellis
from jaxhc.inference.ginkgo_fit import (
    LambdaFit,
    default_lam_prior,
    fit_lambda,
    lambda_model,
    log_likelihood,
    prepare_jets,
    sample_lambda,
)
from jaxhc.trellis import GinkgoEnergy

DATA = os.path.join(os.path.dirname(__file__), "data", "ginkgo_generator_jets_lam2.0.json")
TRUE_LAM, T_CUT = 2.0, 16.0


@functools.lru_cache(maxsize=None)
def generator_jets():
    with open(DATA) as f:
        jets = json.load(f)
    assert all(j["lam"] == TRUE_LAM and j["t_cut"] == T_CUT for j in jets)
    return tuple(np.asarray(j["leaves"], np.float64) for j in jets)


def pad(jets, fill=0.0):
    """``[B, N_max, 4]`` (padding rows set to ``fill``) and ``[B]`` sizes."""
    nl = np.array([len(x) for x in jets])
    X = np.full((len(jets), nl.max(), 4), fill)
    for b, x in enumerate(jets):
        X[b, : len(x)] = x
    return X, nl


@functools.lru_cache(maxsize=None)
def small_jets():
    """Two jets of each size 3..5 in mixed order, plus a one-leaf problem (log Z = 0)."""
    jets = generator_jets()
    by_size = {n: [x for x in jets if len(x) == n][:2] for n in (3, 4, 5)}
    return (by_size[5][0], by_size[3][0], jets[0][:1], by_size[4][0], by_size[3][1], by_size[5][1], by_size[4][1])


@functools.lru_cache(maxsize=None)
def fit_batch():
    """The generator jets with <= 9 leaves (274 of 300), prepared once."""
    jets = [x for x in generator_jets() if len(x) <= 9]
    X, nl = pad(jets)
    return prepare_jets(X, nl, T_CUT), len(jets)


def _ginkgo(lam):
    return GinkgoEnergy(lam, T_CUT, "exact")


# ------------------------------------------------------------------------------------------
# log_partition_batch
# ------------------------------------------------------------------------------------------
def test_log_partition_batch_equals_per_jet_and_compiles_once():
    traces = []

    class Counting(GinkgoEnergy):
        def subset_features(self, leaves, masks):
            traces.append(1)  # runs only while tracing
            return super().subset_features(leaves, masks)

    jets = small_jets()
    X, nl = pad(jets, fill=np.nan)  # padding rows are never read
    want = np.array([float(trellis.log_partition(_ginkgo(TRUE_LAM), x)) for x in jets])
    assert want[2] == 0.0 and np.all(np.isfinite(want))
    got = np.asarray(trellis.log_partition_batch(_ginkgo(TRUE_LAM), X, nl))
    assert got.shape == (len(jets),)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    # every problem padded to N_max (subsets holding padding evaluated and ignored)
    padded = np.asarray(trellis.log_partition_batch(_ginkgo(TRUE_LAM), X, nl, group_by_size=False))
    np.testing.assert_allclose(padded, want, rtol=0, atol=1e-10)
    # prepared once, evaluated at several lambdas: one trace for the whole batch
    batch = trellis.prepare_batch(Counting(1.0, T_CUT, "exact"), X, nl)
    vals = {
        lam: np.asarray(trellis.log_partition_prepared(Counting(lam, T_CUT, "exact"), batch))
        for lam in (1.5, TRUE_LAM, 2.5)
    }
    assert len(traces) == 1
    np.testing.assert_allclose(vals[TRUE_LAM], want, rtol=0, atol=1e-10)
    assert np.all(vals[1.5][nl > 1] != vals[2.5][nl > 1])


def test_log_partition_batch_gradient_in_lam():
    jets = small_jets()
    X, nl = pad(jets)
    total = lambda lam: jnp.sum(trellis.log_partition_batch(_ginkgo(lam), X, nl))
    lam0, h = 1.7, 1e-5
    g = float(jax.grad(total)(lam0))
    fd = (float(total(lam0 + h)) - float(total(lam0 - h))) / (2 * h)
    per_jet = sum(float(jax.grad(lambda lam: trellis.log_partition(_ginkgo(lam), x))(lam0)) for x in jets)
    assert abs(g - per_jet) <= 1e-9 * abs(per_jet)
    assert abs(g - fd) <= 1e-6 * abs(fd)
    # the padded layout's gradient: the padding subsets carry none (and no NaN)
    Xs, ns = pad(jets[:3])
    g_pad = jax.grad(lambda lam: jnp.sum(trellis.log_partition_batch(_ginkgo(lam), Xs, ns, group_by_size=False)))(lam0)
    g_own = sum(float(jax.grad(lambda lam: trellis.log_partition(_ginkgo(lam), x))(lam0)) for x in jets[:3])
    assert abs(float(g_pad) - g_own) <= 1e-9 * abs(g_own)


# ------------------------------------------------------------------------------------------
# maximum likelihood
# ------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def the_fit() -> LambdaFit:
    batch, _ = fit_batch()
    return fit_lambda(batch, None, T_CUT, lam_init=1.0, progress_bar=False)


def _loglik(lam):
    batch, _ = fit_batch()
    return float(log_likelihood(lam, batch, None, T_CUT))


def test_fit_lambda_is_a_stationary_maximum():
    fit = the_fit()
    assert fit.converged and 1 <= fit.num_steps < 50
    assert fit.trace.shape == (fit.num_steps + 1,) and fit.trace[-1] >= fit.trace[0]
    lam, B = fit.lam, fit_batch()[1]
    L0 = _loglik(lam)
    assert abs(fit.trace[-1] * B - L0) <= 1e-9 * abs(L0)
    # the gradient of the summed log Z vanishes (central difference, independent of the fit)
    h = 1e-4 * lam
    Lp, Lm = _loglik(lam + h), _loglik(lam - h)
    slope = (Lp - Lm) / (2 * h)
    curvature = (Lp - 2 * L0 + Lm) / h**2
    assert curvature < 0
    assert abs(slope) <= 1e-4 and abs(fit.grad) <= 1e-6
    # a maximum: lower 5% either side
    assert _loglik(lam * 1.05) < L0 and _loglik(lam * 0.95) < L0
    # the reported standard error is 1 / sqrt(observed information)
    assert abs(fit.stderr - 1 / np.sqrt(-curvature)) <= 1e-3 * fit.stderr
    # the same maximum from the other side
    other = fit_lambda(fit_batch()[0], None, T_CUT, lam_init=6.0, progress_bar=False)
    assert other.converged and abs(other.lam - lam) <= 1e-6 * lam


def test_fit_lambda_recovers_the_generator_lambda():
    fit = the_fit()
    # the score changes sign across the true lambda (+-25%)
    h = 1e-4
    score = lambda lam: (_loglik(lam * (1 + h)) - _loglik(lam * (1 - h))) / (2 * lam * h)
    assert score(0.75 * TRUE_LAM) > 0 > score(1.25 * TRUE_LAM)
    # within 3 standard errors of the truth (keeping jets with <= 9 leaves selects against
    # small lambda; with all 300 jets the estimate is 1.91, with these 274 about 2.10)
    assert 0.03 < fit.stderr < 0.2
    assert abs(fit.lam - TRUE_LAM) < 3 * fit.stderr


def test_fit_lambda_from_the_convex_small_lambda_side():
    # 7 small jets: f(u) = mean log Z(e^u) is convex below lambda ~ 2 (it flattens out as
    # lambda -> 0), so Newton does not apply there and the optax steps must carry the iterate
    X, nl = pad(small_jets())
    batch = prepare_jets(X, nl, T_CUT)
    lam_grid = np.array([0.2, 0.5, 1.0])
    assert all(
        float(log_likelihood(a, batch, None, T_CUT)) < float(log_likelihood(b, batch, None, T_CUT))
        for a, b in zip(lam_grid[:-1], lam_grid[1:])
    )
    import optax

    fits = [
        fit_lambda(batch, None, T_CUT, lam_init=lam0, progress_bar=False, **kw)
        for lam0, kw in ((0.2, {}), (0.5, dict(optimizer=optax.sgd(0.5))), (20.0, {}))
    ]
    for fit in fits:
        assert fit.converged and fit.trace[-1] >= fit.trace.max() - 1e-12
        assert abs(fit.lam - fits[-1].lam) <= 1e-6 * fits[-1].lam
    assert 1.0 < fits[-1].lam < 20.0


# ------------------------------------------------------------------------------------------
# NumPyro model and NUTS
# ------------------------------------------------------------------------------------------
def test_lambda_model_log_density_is_prior_plus_log_z():
    from numpyro.infer.util import log_density

    X, nl = pad(small_jets())
    batch = prepare_jets(X, nl, T_CUT)
    prior = default_lam_prior()
    for lam in (1.5, TRUE_LAM):
        ld, _ = log_density(lambda_model, (batch, None, T_CUT), {}, {"lam": lam})
        want = float(prior.log_prob(lam)) + float(jnp.sum(trellis.log_partition_batch(_ginkgo(lam), X, nl)))
        assert abs(float(ld) - want) <= 1e-10 * abs(want)
    # raw arrays give the same density (validated on the host while tracing)
    ld_raw, _ = log_density(lambda_model, (X, nl, T_CUT), {}, {"lam": TRUE_LAM})
    assert abs(float(ld_raw) - want) <= 1e-10 * abs(want)


@functools.lru_cache(maxsize=None)
def nuts_batch():
    """The first 40 generator jets with <= 9 leaves (maximum likelihood 1.89 +- 0.19)."""
    X, nl = pad([x for x in generator_jets() if len(x) <= 9][:40])
    return prepare_jets(X, nl, T_CUT)


def test_nuts_posterior_covers_truth_and_matches_the_likelihood():
    batch = nuts_batch()
    post = sample_lambda(jax.random.key(1), batch, None, T_CUT, num_warmup=100, num_samples=150, progress_bar=False)
    ml = fit_lambda(batch, None, T_CUT, progress_bar=False)
    assert post.samples.shape == (150,) and np.all(post.samples > 0)
    assert not np.any(np.asarray(post.mcmc.get_extra_fields()["diverging"]))
    lo, hi = post.interval
    assert lo < TRUE_LAM < hi and lo < ml.lam < hi
    # 40 jets: the posterior is close to normal around the maximum likelihood with the
    # observed-information width (Bernstein-von Mises); Monte Carlo error ~ 0.1 sd here
    assert abs(post.mean - ml.lam) < 0.35 * ml.stderr
    assert abs(post.sd - ml.stderr) < 0.25 * ml.stderr
    # posterior predictive: replicate jets from the shower program at the posterior's lam
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import Predictive

    from jaxhc.models import ginkgo as G

    def replicate():
        s = G.shower(lam=numpyro.sample("lam", dist.LogNormal(0.0, 1.0)), t_cut=T_CUT, max_nodes=31)
        numpyro.deterministic("momenta", s.momenta)
        numpyro.deterministic("status", s.status)  # (the program records "overflow" itself)

    sites = ["lam", "momenta", "status", "overflow"]
    pp = Predictive(replicate, posterior_samples={"lam": post.samples}, return_sites=sites)(jax.random.key(2))
    np.testing.assert_array_equal(np.asarray(pp["lam"]), np.asarray(post.samples))
    mom, status, ok = np.asarray(pp["momenta"]), np.asarray(pp["status"]), ~np.asarray(pp["overflow"])
    assert mom.shape == (150, 31, 4) and ok.mean() > 0.9
    leaf_sum = np.sum(np.where((status == 2)[..., None], mom, 0.0), axis=1)  # the leaves carry the root's momentum
    np.testing.assert_allclose(leaf_sum[ok], mom[ok, 0], rtol=1e-9, atol=1e-9)
    assert np.mean((status == 2).sum(1)) > 2  # jets, not single particles


def test_sample_lambda_same_key_same_samples():
    X, nl = pad([x for x in small_jets() if len(x) == 3])
    run = lambda key: sample_lambda(key, X, nl, T_CUT, num_warmup=20, num_samples=20, progress_bar=False).samples
    a, b = run(jax.random.key(7)), run(jax.random.key(7))
    np.testing.assert_array_equal(a, b)
    assert len(np.unique(a)) > 1


# ------------------------------------------------------------------------------------------
# bad inputs
# ------------------------------------------------------------------------------------------
def test_bad_inputs_name_the_argument():
    X, nl = pad(small_jets()[:4])
    ok = dict(progress_bar=False)
    for bad in (0.0, -1.0, np.nan, np.inf):
        with pytest.raises(ValueError, match="t_cut"):
            fit_lambda(X, nl, bad, **ok)
        with pytest.raises(ValueError, match="lam_init"):
            fit_lambda(X, nl, T_CUT, lam_init=bad, **ok)
    with pytest.raises(TypeError, match="t_cut"):
        fit_lambda(X, nl, "16", **ok)
    with pytest.raises(ValueError, match="likelihood"):
        fit_lambda(X, nl, T_CUT, likelihood="approx", **ok)
    with pytest.raises(ValueError, match="leaves_padded"):
        fit_lambda(X[..., :3], nl, T_CUT, **ok)
    Xn = X.copy()
    Xn[1, 0, 2] = np.nan
    with pytest.raises(ValueError, match=r"leaves_padded\[1\]"):
        fit_lambda(Xn, nl, T_CUT, on_invalid="raise", **ok)
    with pytest.warns(RuntimeWarning, match=r"leaves_padded\[1\] contains NaN"):
        skipped = fit_lambda(Xn, nl, T_CUT, steps=2, **ok)
    assert list(skipped.invalid.index) == [1]
    with pytest.raises(ValueError, match="n_leaves"):
        fit_lambda(X, nl[:-1], T_CUT, **ok)
    with pytest.raises(ValueError, match="n_leaves"):
        fit_lambda(X, nl.astype(float), T_CUT, **ok)
    with pytest.raises(ValueError, match="n_leaves"):
        fit_lambda(X, nl + 10, T_CUT, **ok)
    with pytest.raises(ValueError, match="steps"):
        fit_lambda(X, nl, T_CUT, steps=0, **ok)
    with pytest.raises(TypeError, match="optimizer"):
        fit_lambda(X, nl, T_CUT, optimizer="adam", **ok)
    with pytest.raises(TypeError, match="energy"):
        trellis.log_partition_batch("ginkgo", X, nl)
    with pytest.raises(TypeError, match="leaves_padded"):
        jax.jit(lambda x: trellis.log_partition_batch(GinkgoEnergy(), x, nl))(X)
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="lam_prior"):
        import numpyro.distributions as dist

        sample_lambda(key, X, nl, T_CUT, lam_prior=dist.Normal(2.0, 1.0), progress_bar=False)
    with pytest.raises(TypeError, match="lam_prior"):
        sample_lambda(key, X, nl, T_CUT, lam_prior="lognormal", progress_bar=False)
    with pytest.raises(ValueError, match="num_samples"):
        sample_lambda(key, X, nl, T_CUT, num_samples=0, progress_bar=False)
    with pytest.raises(TypeError, match="key"):
        sample_lambda(0, X, nl, T_CUT, progress_bar=False)
    with pytest.raises(ValueError, match="likelihood"):
        lambda_model(X, nl, T_CUT, likelihood="exactly")
