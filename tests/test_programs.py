import jax

jax.config.update("jax_enable_x64", True)

"""The five model programs under `numpyro.infer.Predictive` (``parallel=True``), ``jit`` and
``vmap`` over keys, and the JAX samplers behind them checked against exact laws: the PYDT
tree prior against the NumPy reference process (two-sample tests) and closed forms, the
truncated nCRP + HDP against the Ewens formulas and the HDP's sharing probability."""

from math import exp, lgamma

import jax.numpy as jnp
import numpy as np
import pytest
from numpyro import handlers
from numpyro.infer import Predictive
from scipy import stats

import jaxhc
import jaxhc.models.pydt as P
from jaxhc.models import cdpm as C
from jaxhc.models import dpm as D
from jaxhc.models import ginkgo as G
from jaxhc.models import ncrp_hdp as NH

PROGRAMS = {
    "dpm": (D.dpm, dict(component=jaxhc.BetaBernoulli(np.ones(3), np.ones(3)), num_points=5), "X", (5, 3)),
    "cdpm": (
        C.cdpm,
        dict(component=jaxhc.BetaBernoulli(np.ones(3), np.ones(3)), num_points=5, dim=3),
        "X",
        (5, 3),
    ),
    "ncrp_hdp": (
        NH.ncrp_hdp,
        dict(num_points=5, dim=2, depth=2, max_children=5, max_components=8),
        "X",
        (5, 2),
    ),
    "pydt": (P.pydt, dict(num_points=5, dim=2, alpha=0.5, beta=0.2), "X", (5, 2)),
    "ginkgo.shower": (G.shower, dict(lam=2.0, t_cut=16.0, max_nodes=15), None, None),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_runs_under_jit_of_a_parallel_predictive(name):
    """``jit`` of ``Predictive(parallel=True)``: the program traced once, vmapped over the
    split keys and compiled (no host-side sampling anywhere in it)."""
    model, kw, site, shape = PROGRAMS[name]
    out = jax.jit(lambda k: Predictive(model, num_samples=3, parallel=True)(k, **kw))(jax.random.key(0))
    assert out and all(v.shape[0] == 3 for v in out.values())
    if site is not None:
        assert out[site].shape == (3,) + shape and np.all(np.isfinite(np.asarray(out[site])))
    draws = [np.asarray(v).reshape(3, -1) for v in out.values()]
    assert any(len(np.unique(d, axis=0)) == 3 for d in draws)  # three different draws


# ---------------------------------------------------------------------------------------
# PYDT: the JAX tree sampler has the law of the reference process
# ---------------------------------------------------------------------------------------
def _tree_stats(par, t, N):
    """Root children, first divergence time, depth of leaf 0 (edges to the root)."""
    root = int(np.argmax(par == -1))
    kids = int(np.sum(par == root))
    depth, k = 0, 0
    while par[k] >= 0:
        k, depth = int(par[k]), depth + 1
    return kids, float(t[root]), depth


@pytest.mark.parametrize("c,alpha,beta", [(1.0, 0.0, 0.0), (1.5, 1.0, 0.4)])
def test_jax_tree_sampler_matches_the_numpy_process(c, alpha, beta):
    N, S_jax, S_np = 8, 3000, 400
    jx = np.asarray(P.PYDTTree(N, c, alpha, beta).sample(jax.random.key(5), (S_jax,)))
    a = np.array([_tree_stats(d[0].astype(int), d[1], N) for d in jx])
    b = []
    for i in range(S_np):
        s = P.sample_prior(jax.random.key(100 + i), N, 1, c, alpha, beta)
        b.append(_tree_stats(np.asarray(s.tree.parent), np.asarray(s.tree.heights), N))
    b = np.array(b)
    for j, name in enumerate(("root children", "first divergence time", "depth of leaf 0")):
        if j == 1:
            p = stats.ks_2samp(a[:, j], b[:, j]).pvalue
        else:  # discrete: chi-square on the pooled table
            vals = np.union1d(a[:, j], b[:, j])
            tab = np.array([[np.sum(x[:, j] == v) for v in vals] for x in (a, b)])
            tab = tab[:, tab.sum(0) >= 10] if np.sum(tab.sum(0) >= 10) >= 2 else tab
            p = stats.chi2_contingency(tab)[1] if tab.shape[1] > 1 else 1.0
        assert p > 1e-3, (name, p)
    if beta == 0.0 and alpha == 0.0:  # the DDT: binary trees only
        assert np.all(a[:, 0] == 2)
    # every sample is a valid tree with a finite density (Eq. 9 + 11)
    lp = np.asarray(P.PYDTTree(N, c, alpha, beta).log_prob(jnp.asarray(jx[:50])))
    assert np.all(np.isfinite(lp))


# ---------------------------------------------------------------------------------------
# nCRP + HDP, truncated program
# ---------------------------------------------------------------------------------------
def _ewens_table_sizes(N, a):
    """``E[number of tables of size j]``, ``j = 1..N``, of a CRP(a) over ``N`` customers."""
    j = np.arange(1, N + 1)
    return np.array(
        [(a / jj) * exp(lgamma(N + 1) - lgamma(N - jj + 1) + lgamma(a + N - jj) - lgamma(a + N)) for jj in j]
    )


def test_truncated_ncrp_paths_follow_the_nested_crp():
    """``max_children = N`` never binds: the level-1 table sizes have the Ewens law and
    the level-2 tables the nested one (``E[#level-2] = sum_j E[C_j] E[K_j]``)."""
    N, L, a, S = 6, 2, 1.3, 1500
    out = Predictive(NH.ncrp_hdp, num_samples=S, parallel=True)(
        jax.random.key(2), num_points=N, dim=1, depth=L, alpha=a, max_children=N, max_components=4
    )
    assert not np.any(np.asarray(out["truncated"]))
    cnt = np.asarray(out["counts"])
    lvl1 = cnt[:, 1 : 1 + N]
    sizes = np.stack([(lvl1 == j).sum(1) for j in range(1, N + 1)], 1)  # tables of size j
    want = _ewens_table_sizes(N, a)
    np.testing.assert_allclose(want @ np.arange(1, N + 1), N, rtol=1e-12)
    se = sizes.std(0) / np.sqrt(S) + 1e-3
    assert np.all(np.abs(sizes.mean(0) - want) < 4.5 * se), (sizes.mean(0), want)
    EK = np.array([sum(a / (a + i) for i in range(j)) for j in range(1, N + 1)])
    n2 = (cnt[:, 1 + N :] > 0).sum(1)
    assert abs(n2.mean() - want @ EK) < 4.5 * n2.std() / np.sqrt(S), (n2.mean(), want @ EK)
    paths = np.asarray(out["path_1"])
    assert paths.shape == (S, N) and np.all(paths[:, 0] == 0)  # the first point opens child 0


def test_truncated_ncrp_hdp_shares_components_as_the_hdp():
    """Two points, L = 1 (the closed form of tests/test_bhmc.py), up to the K-atom
    truncation of the root stick."""
    a, g0, g, S = 1.0, 1.5, 1.0, 2000
    want = (1 / (1 + a)) * (1 + g / (1 + g0)) / (1 + g) + (a / (1 + a)) / (1 + g0)
    out = Predictive(NH.ncrp_hdp, num_samples=S, parallel=True)(
        jax.random.key(3), num_points=2, dim=1, depth=1, alpha=a, gamma0=g0, gamma=g, max_children=2, max_components=40
    )
    same = np.mean(np.asarray(out["c"][:, 0] == out["c"][:, 1]))
    assert abs(same - want) < 4.5 * np.sqrt(want * (1 - want) / S), (same, want)


def test_truncated_ncrp_hdp_bad_arguments():
    with pytest.raises(ValueError, match="both max_children and max_components"):
        handlers.seed(NH.ncrp_hdp, 0)(num_points=3, dim=1, depth=2, max_children=3)
    with pytest.raises(ValueError, match="max_components"):
        handlers.seed(NH.ncrp_hdp, 0)(num_points=3, dim=1, depth=2, max_children=3, max_components=0)
    with pytest.raises(ValueError, match="alpha"):
        handlers.seed(NH.ncrp_hdp, 0)(num_points=3, dim=1, depth=2, alpha=-1.0, max_children=3, max_components=3)
