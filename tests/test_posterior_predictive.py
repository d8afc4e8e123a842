import jax

jax.config.update("jax_enable_x64", True)

"""Posterior predictive with `numpyro.infer.Predictive` from runs of our NumPyro kernels: the
kernel's samples substitute the program's structure sites, and Predictive draws replicate
data given them. The collapsed kernels do not sample the cluster parameters / locations, so
Predictive redraws those from the model given the sampled structure: ``X_rep`` is a replicate
data set on the posterior's partitions (DPM) or trees (PYDT). The checks are the shapes, that
the structure is carried over, and the moments of ``X_rep`` given that structure."""

import numpy as np
import pytest
from numpyro.infer import MCMC, Predictive

import jaxhc
import jaxhc.models.pydt as P
from jaxhc.inference.gibbs import DPMGibbs
from jaxhc.inference.pydt import PYDT, program_sites
from jaxhc.models import dpm as D


def test_dpm_gibbs_samples_drive_the_dpm_program():
    """Beta(1, 1) per column: two rows of one cluster agree with probability
    ``E[p^2 + (1 - p)^2] = 2/3``, rows of different clusters with 1/2."""
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.random((6, 4)) < 0.9, rng.random((6, 4)) < 0.1]).astype(float)
    comp = jaxhc.BetaBernoulli(np.ones(4), np.ones(4))
    mcmc = MCMC(DPMGibbs(X, comp, 1.0), num_warmup=20, num_samples=300, progress_bar=False)
    mcmc.run(jax.random.key(0))
    z = np.asarray(mcmc.get_samples())
    assert z.shape == (300, 12)
    out = Predictive(D.dpm, posterior_samples={"z": z}, return_sites=["X", "z"])(
        jax.random.key(1), component=comp, num_points=12
    )
    Xr = np.asarray(out["X"])
    assert Xr.shape == (300, 12, 4) and set(np.unique(Xr)) <= {0.0, 1.0}
    np.testing.assert_array_equal(np.asarray(out["z"]), z)  # the kernel's partitions, carried over
    # the posterior puts the two blocks apart: most draws have rows 0 and 11 in different clusters
    assert np.mean(z[:, 0] != z[:, 11]) > 0.9
    same = z[:, :, None] == z[:, None, :]
    agree = (Xr[:, :, None, :] == Xr[:, None, :, :]).mean(-1)
    off = ~np.eye(12, dtype=bool)[None]
    for mask, want in ((same & off, 2 / 3), (~same, 1 / 2)):
        vals = agree[np.broadcast_to(mask, agree.shape)]
        se = 0.5 / np.sqrt(vals.size / 12)  # pairs share rows: a conservative effective size
        assert abs(vals.mean() - want) < 4.5 * se, (vals.mean(), want)


def test_pydt_kernel_samples_drive_the_pydt_program():
    """Given a tree, ``X_rep`` is Brownian motion from the origin: ``Var(x_i) = sigma2`` and
    ``E[x_i x_j] = sigma2 t_lca(i, j)`` (the divergence time of their common ancestor)."""
    Y = np.random.default_rng(1).normal(size=(5, 2))
    mcmc = MCMC(PYDT(Y), num_warmup=20, num_samples=200, progress_bar=False)
    mcmc.run(jax.random.key(2))
    s = mcmc.get_samples()
    par, times = np.asarray(s["parent"]), np.asarray(s["times"])
    assert par.shape == (200, 9) and times.shape == (200, 9)
    for name in ("c", "alpha", "beta", "sigma2"):  # the kernel samples its hyperparameters and reports them
        h = np.asarray(s[name])
        assert h.shape == (200,) and np.all(h > 0) and len(np.unique(h)) > 1, name
    trees = np.asarray(program_sites(s)["tree"])
    np.testing.assert_array_equal(trees, np.stack([par.astype(float), times], axis=1))
    with pytest.raises(ValueError, match="times"):
        program_sites({"parent": par})
    with pytest.raises(ValueError, match=r"\[S, 2N - 1\]"):
        program_sites({"parent": par, "times": times[:, :-1]})
    s2 = 0.7
    out = Predictive(P.pydt, posterior_samples={"tree": trees}, return_sites=["X", "tree"])(
        jax.random.key(3), num_points=5, dim=2, sigma2=s2
    )
    Xr = np.asarray(out["X"])
    assert Xr.shape == (200, 5, 2)
    np.testing.assert_array_equal(np.asarray(out["tree"]), trees)
    v = Xr**2
    np.testing.assert_allclose(v.mean(), s2, atol=4.5 * v.std() / np.sqrt(v.size / 2))

    def t_lca(p, t, i, j):
        anc = set()
        while i >= 0:
            anc.add(i)
            i = p[i]
        while j not in anc:
            j = p[j]
        return t[j]

    prod = Xr[:, 0, :] * Xr[:, 1, :]
    want = s2 * np.mean([t_lca(p.astype(int), t, 0, 1) for p, t in zip(par, times)])
    assert abs(prod.mean() - want) < 4.5 * prod.std() / np.sqrt(prod.size), (prod.mean(), want)


def test_cdpm_gibbs_samples_drive_the_cdpm_program():
    """Per column: two rows in one cluster of the column's view agree with probability 2/3
    under Beta(1, 1), rows in different clusters with 1/2."""
    from jaxhc.inference.gibbs import CDPMGibbs
    from jaxhc.models import cdpm as C

    rng = np.random.default_rng(2)
    rows = np.repeat([0.9, 0.1], 5)[:, None]
    X = (rng.random((10, 3)) < rows).astype(float)
    comp = jaxhc.BetaBernoulli(np.ones(3), np.ones(3))
    mcmc = MCMC(CDPMGibbs(X, comp, 1.0), num_warmup=20, num_samples=300, progress_bar=False)
    mcmc.run(jax.random.key(4))
    s = mcmc.get_samples()
    u, Z = np.asarray(s["column_views"]), np.asarray(s["row_labels"])
    assert u.shape == (300, 3) and Z.shape == (300, 10, 3)
    out = Predictive(C.cdpm, posterior_samples={"column_view": u, "row_cluster": Z}, return_sites=["X"])(
        jax.random.key(5), component=comp, num_points=10, dim=3
    )
    Xr = np.asarray(out["X"])
    assert Xr.shape == (300, 10, 3) and set(np.unique(Xr)) <= {0.0, 1.0}
    zc = np.take_along_axis(Z, u[:, None, :], axis=2)  # [S, N, J]: row cluster of each entry
    assert np.mean(zc[:, 0, :] != zc[:, 9, :]) > 0.8  # the posterior keeps the two row blocks apart
    same = zc[:, :, None, :] == zc[:, None, :, :]
    agree = Xr[:, :, None, :] == Xr[:, None, :, :]
    off = ~np.eye(10, dtype=bool)[None, :, :, None]
    for mask, want in ((same & off, 2 / 3), (~same, 1 / 2)):
        vals = agree[np.broadcast_to(mask, agree.shape)]
        se = 0.5 / np.sqrt(vals.size / 10)
        assert abs(vals.mean() - want) < 4.5 * se, (vals.mean(), want)


def test_bhmc_samples_drive_the_truncated_ncrp_hdp_program():
    """`program_sites` maps the kernel's node and component slots to the program's sites;
    given them, ``x_i`` and ``x_j`` share their component mean: ``E[x_i x_j] = prior_var``
    per dimension in one component (``mu0 = 0``), 0 across, ``E[x_i^2] = prior_var + sigma2``."""
    from jaxhc.inference.bhmc import BHMC, program_sites
    from jaxhc.models import ncrp_hdp as NH

    rng = np.random.default_rng(3)
    X = np.concatenate([rng.normal(-4.0, 0.5, (5, 2)), rng.normal(4.0, 0.5, (5, 2))])
    mcmc = MCMC(BHMC(X, depth=2), num_warmup=10, num_samples=120, progress_bar=False)
    mcmc.run(jax.random.key(6))
    sites, B, K = program_sites(mcmc.get_samples())
    assert set(sites) == {"path_1", "path_2", "c"} and sites["c"].shape == (120, 10)
    assert np.all(sites["path_1"][:, 0] == 0) and np.all(sites["c"][:, 0] == 0)  # first appearance
    assert np.mean(sites["c"][:, 0] != sites["c"][:, 9]) > 0.9  # the posterior keeps the groups apart
    s2, v0 = 0.5, 2.0
    out = Predictive(NH.ncrp_hdp, posterior_samples=sites, return_sites=["X", "c", "path_2", "truncated"])(
        jax.random.key(7), num_points=10, dim=2, depth=2, sigma2=s2, prior_var=v0, max_children=B, max_components=K
    )
    np.testing.assert_array_equal(np.asarray(out["c"]), sites["c"])
    np.testing.assert_array_equal(np.asarray(out["path_2"]), sites["path_2"])
    assert not np.any(np.asarray(out["truncated"]))
    Xr = np.asarray(out["X"])
    assert Xr.shape == (120, 10, 2)
    v = Xr**2
    assert abs(v.mean() - (v0 + s2)) < 4.5 * v.std() / np.sqrt(v.size / 10)
    prod = Xr[:, :, None, :] * Xr[:, None, :, :]
    same = (sites["c"][:, :, None] == sites["c"][:, None, :]) & ~np.eye(10, dtype=bool)[None]
    diff = sites["c"][:, :, None] != sites["c"][:, None, :]
    for mask, want in ((same, v0), (diff, 0.0)):
        vals = prod[np.broadcast_to(mask[..., None], prod.shape)]
        assert abs(vals.mean() - want) < 4.5 * vals.std() / np.sqrt(vals.size / 10), (vals.mean(), want)
