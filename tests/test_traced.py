import jax

jax.config.update("jax_enable_x64", True)

"""Every public log-density works with traced parameters: under ``jax.jit`` and ``jax.vmap``
it returns the eager value, and ``jax.grad`` agrees with a central finite difference. One
row per (function, parameter); the data and structures are concrete, as in a user's model
that scores fixed data at sampled hyperparameters (``numpyro.factor``, NUTS, optax)."""

import json
import os

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

import jaxhc
import jaxhc.models.pydt as P
from jaxhc import trellis
from jaxhc.inference import bhmc as B
from jaxhc.models import cdpm as C
from jaxhc.models import dpm as D
from jaxhc.models import ncrp_hdp as NH

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _jets():
    with open(os.path.join(ROOT, "tests", "data", "ginkgo_jets_reference.json")) as f:
        jets = json.load(f)
    small = [np.asarray(j["leaves"], float) for j in jets if 3 <= j["n_leaves"] <= 5][:3]
    n_max = max(len(x) for x in small)
    Xp = np.zeros((len(small), n_max, 4))
    for i, x in enumerate(small):
        Xp[i, : len(x)] = x
    return small, Xp, np.array([len(x) for x in small])


def _cases():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(6, 2))
    niw = jaxhc.NormalInverseWishart.from_data(X)
    tree = jaxhc.bhc(X, niw).tree
    labels = np.array([0, 0, 1, 1, 2, 0])
    Xb = (rng.random((6, 3)) < 0.5).astype(float)
    bern = jaxhc.BetaBernoulli.from_data(Xb)
    jets, Xp, nl = _jets()
    aff = np.abs(rng.normal(size=(5, 5)))
    aff = aff + aff.T
    pt = P.sample_prior(jax.random.key(0), 6, 2, 1.0, 0.5, 0.2)
    par, tt = np.asarray(pt.tree.parent), np.asarray(pt.tree.heights)
    cfg = B.make_config(X)
    st, Xs = B.prior_sample_state(jax.random.key(3), 6, 2, 2, cfg, alpha=1.0, gamma0=1.0, gamma=1.0, sigma2=0.5)
    return {
        "trellis.log_partition(Ginkgo lam)": (
            lambda lam: trellis.log_partition(trellis.GinkgoEnergy(lam, 16.0), jets[0]),
            2.0,
        ),
        "trellis.log_partition(Dasgupta beta)": (
            lambda b: trellis.log_partition(trellis.DasguptaEnergy(beta=b), aff),
            0.7,
        ),
        "trellis.log_partition_batch(Ginkgo lam)": (
            lambda lam: trellis.log_partition_batch(trellis.GinkgoEnergy(lam, 16.0), Xp, nl).sum(),
            2.0,
        ),
        "tree_log_evidence(alpha)": (lambda a: jaxhc.tree_log_evidence(X, tree, niw, a).log_evidence, 1.3),
        "tree_log_evidence(NIW kappa)": (
            lambda k: jaxhc.tree_log_evidence(X, tree, eqx.tree_at(lambda c: c.kappa, niw, k), 1.0).log_evidence,
            0.5,
        ),
        "pydt.log_structure_times(c)": (lambda c: P.log_structure_times(par, tt, c, 0.5, 0.2), 1.3),
        "pydt.log_marginal_likelihood(sigma2)": (lambda s: P.log_marginal_likelihood(par, tt, pt.X, s), 0.8),
        "pydt.log_joint(alpha)": (lambda a: P.log_joint(par, tt, pt.X, 1.0, a, 0.2, 0.8), 0.5),
        "dpm.crp_log_prob(alpha)": (lambda a: D.crp_log_prob(labels, a), 1.3),
        "dpm_log_joint(alpha)": (lambda a: D.dpm_log_joint(X, labels, niw, a), 1.3),
        "cdpm_log_joint(alpha)": (
            lambda a: C.cdpm_log_joint(Xb, np.array([0, 1, 0]), np.stack([labels, labels[::-1]], 1), bern, a),
            1.3,
        ),
        "ncrp_hdp.ncrp_log_prob(alpha)": (lambda a: NH.ncrp_log_prob(st.parent, st.level, st.count, a, 2), 1.3),
        "ncrp_hdp.joint_log_density(gamma)": (
            lambda g: NH.joint_log_density(st._replace(gamma=g), Xs, cfg.mu0, cfg.prior_var),
            0.9,
        ),
    }


CASES = _cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_log_density_under_jit_vmap_and_grad(name):
    f, x0 = CASES[name]
    eager = float(f(x0))
    assert np.isfinite(eager), name
    np.testing.assert_allclose(float(jax.jit(f)(x0)), eager, rtol=1e-10)
    xs = jnp.array([x0, 1.1 * x0])
    v = np.asarray(jax.vmap(f)(xs))
    np.testing.assert_allclose(v, [eager, float(f(1.1 * x0))], rtol=1e-10)
    g = float(jax.grad(f)(x0))
    # five-point stencil: truncation O(h^4), rounding ~1e-16 |f| / h (|f| ~ 1e3 here)
    h = 1e-3 * x0
    fd = (-float(f(x0 + 2 * h)) + 8 * float(f(x0 + h)) - 8 * float(f(x0 - h)) + float(f(x0 - 2 * h))) / (12 * h)
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-7)
    assert g != 0.0  # the density depends on the parameter: the row checks something


def test_batch_validation_outside_a_trace_names_the_jit_safe_path():
    """Traced leaves cannot be validated on the host: the error names the jit-safe pair."""
    _, Xp, nl = _jets()
    with pytest.raises(TypeError, match="prepare_batch.*log_partition_prepared"):
        jax.jit(lambda X: trellis.log_partition_batch(trellis.GinkgoEnergy(2.0, 16.0), X, nl).sum())(Xp)
