"""MCMC baselines (DPM Gibbs + split-merge, CDPM MCMC): invariance against exact posteriors by
enumeration, bookkeeping against statistics recomputed from scratch, determinism, proper
cell predictives, the NumPyro adapters, the generic MH kernel and input validation."""

import itertools
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import logsumexp

from jaxhc.components import BetaBernoulli, BetaBinomial, NormalInverseWishart, NormalKnownCov
from jaxhc.inference import gibbs as G
from jaxhc.inference import mh
from jaxhc.models.cdpm import restrict_columns
from jaxhc.models.dpm import crp_log_prob, dpm_log_joint, set_partitions


def _canon(labels):
    """Restricted growth string of a label vector (first-appearance order)."""
    m = {}
    return tuple(m.setdefault(int(x), len(m)) for x in labels)


def _tv(p, q):
    keys = set(p) | set(q)
    return 0.5 * sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in keys)


def _freq(items):
    c = Counter(items)
    n = sum(c.values())
    return {k: v / n for k, v in c.items()}


def _dpm_exact(X, comp, alpha):
    parts = list(set_partitions(X.shape[0]))
    lj = np.array([float(dpm_log_joint(X, p, comp, alpha)) for p in parts])
    p = np.exp(lj - logsumexp(lj))
    return {tuple(int(v) for v in q): float(w) for q, w in zip(parts, p)}


X_BB = np.array([[1, 0, 1], [1, np.nan, 1], [0, 1, 0], [1, 1, 0], [0, 1, np.nan]], float)
X_NK = np.array([[0.1, -0.3], [0.3, 0.0], [2.0, 2.2], [1.7, 2.5]])


# ------------------------------------------------------------------------------------------
# DPM Gibbs. Every run on one data set shares one compiled program (chain lengths, the
# number of restricted scans and `gibbs_sweep` are traced), so each test below compiles one.
# ------------------------------------------------------------------------------------------
BB = BetaBernoulli(jnp.array([1.0, 0.5, 2.0]), 1.0)
SM = dict(num_split_merge=2, num_restricted_scans=2)


def _dpm_check_posterior(res, X, comp, alpha, exact, tol):
    freq = _freq(_canon(z) for z in np.asarray(res.labels))
    assert _tv(freq, exact) < tol
    # the stored log joint is the collapsed joint of the stored labels
    z = np.asarray(res.labels[-1])
    assert np.isclose(float(res.log_joint[-1]), float(dpm_log_joint(X, z, comp, alpha)), atol=1e-9)
    _check_dpm_bookkeeping(res.state, X, comp, alpha)  # after thousands of add / remove


def test_dpm_gibbs_beta_bernoulli_posterior_determinism_and_steps():
    """Exact posterior (52 partitions, NaN cells) with the Gibbs sweep and with split-merge
    moves alone; same key -> same chain, a shorter run is a prefix; single steps keep the
    statistics in step with the labels."""
    alpha = 1.3
    exact = _dpm_exact(X_BB, BB, alpha)
    # TV of the empirical law to the exact one over 10 seeds: with the sweep, 12000 samples give
    # 0.024 +- 0.003 (max 0.029); split-merge alone mixes slower (integrated autocorrelation
    # ~1.9), 20000 give 0.025 +- 0.003 (max 0.036; 0.042 at the former 6000). A Gibbs weight
    # n_k + 1 gives 0.064, split-merge without the log q term 0.26.
    for sweep, n in ((True, 12000), (False, 20000)):
        res = G.dpm_gibbs(
            jax.random.PRNGKey(0),
            X_BB,
            BB,
            alpha,
            num_samples=n,
            num_warmup=50,
            gibbs_sweep=sweep,
            progress_bar=False,
            **SM,
        )
        _dpm_check_posterior(res, X_BB, BB, alpha, exact, 0.04)
        if not sweep:
            assert 0.05 < float(res.split_merge_rate) < 0.95
    kw = dict(num_warmup=3, thin=2, progress_bar=False, **SM)
    a = G.dpm_gibbs(jax.random.PRNGKey(5), X_BB, BB, 1.0, num_samples=4, **kw)
    b = G.dpm_gibbs(jax.random.PRNGKey(5), X_BB, BB, 1.0, num_samples=6, **kw)
    assert a.labels.shape == (4, 5) and b.labels.shape == (6, 5)
    np.testing.assert_array_equal(a.labels, b.labels[:4])
    np.testing.assert_array_equal(a.log_joint, b.log_joint[:4])
    st = G.dpm_gibbs_init(jax.random.PRNGKey(3), X_BB, BB, 1.0)
    seen = set()
    for k in jax.random.split(jax.random.PRNGKey(4), 30):
        st, info = G.dpm_gibbs_step(k, st, X_BB, BB, 1.0, **SM)
        seen.add(_canon(st.labels))
    assert info.split_merge_accepted.shape == (2,) and len(seen) > 1
    _check_dpm_bookkeeping(st, X_BB, BB, 1.0)


def test_dpm_gibbs_gaussian_posterior():
    """Any component family: Normal-inverse-Wishart (Gaussian statistics, whose removal goes
    through raw moments) against the exact posterior over the 15 partitions."""
    comp, alpha = NormalInverseWishart(jnp.zeros(2), 1.0, 4.0, 1.0), 0.8  # TV 0.013 +- 0.005 over 10 seeds
    res = G.dpm_gibbs(
        jax.random.PRNGKey(1), X_NK, comp, alpha, num_samples=6000, num_warmup=50, progress_bar=False, **SM
    )
    _dpm_check_posterior(res, X_NK, comp, alpha, _dpm_exact(X_NK, comp, alpha), 0.04)


def _check_dpm_bookkeeping(state, X, comp, alpha):
    fresh = G.dpm_gibbs_init(None, X, comp, alpha, labels=state.labels)
    z, zf = np.asarray(state.labels), np.asarray(fresh.labels)
    for a, b in zip(jax.tree_util.tree_leaves(state.stats), jax.tree_util.tree_leaves(fresh.stats)):
        np.testing.assert_allclose(np.asarray(a)[z], np.asarray(b)[zf], rtol=1e-9, atol=1e-9)
        empty = np.asarray(state.counts) == 0
        assert np.all(np.asarray(a)[empty] == 0)
    np.testing.assert_allclose(
        np.asarray(state.log_marginals)[z], np.asarray(fresh.log_marginals)[zf], rtol=1e-10, atol=1e-9
    )
    np.testing.assert_allclose(np.asarray(state.counts)[z], np.bincount(z)[z])
    assert np.isclose(float(state.log_joint), float(dpm_log_joint(X, z, comp, alpha)), atol=1e-8)


# ------------------------------------------------------------------------------------------
# CDPM MCMC
# ------------------------------------------------------------------------------------------
def _cdpm_exact(X, comp, alpha):
    """Exact posterior over (column partition, row partition of every view) by enumeration:
    log p = log CRP(u) + sum_v dpm_log_joint(X[:, v], Z_v) (Eq. 1, 2, 5)."""
    n, d = X.shape
    cache = {}

    def view(cols, z):
        key = (cols, z)
        if key not in cache:
            cache[key] = float(dpm_log_joint(X[:, list(cols)], np.array(z), restrict_columns(comp, cols), alpha))
        return cache[key]

    rows = [tuple(int(v) for v in p) for p in set_partitions(n)]
    out = {}
    for u in set_partitions(d):
        u = tuple(int(v) for v in u)
        V = max(u) + 1
        views = [tuple(j for j in range(d) if u[j] == v) for v in range(V)]
        for zs in itertools.product(rows, repeat=V):
            out[(u, zs)] = float(crp_log_prob(np.array(u), alpha)) + sum(view(c, z) for c, z in zip(views, zs))
    keys = list(out)
    lp = np.array([out[k] for k in keys])
    p = np.exp(lp - logsumexp(lp))
    return dict(zip(keys, p))


def _cdpm_key(u, Z):
    u = np.asarray(u)
    order = list(dict.fromkeys(int(v) for v in u))
    return _canon(u), tuple(_canon(np.asarray(Z)[:, v]) for v in order)


X_C = np.array([[1, 1, 0], [1, np.nan, 1], [0, 0, 1]], float)
C_C, ALPHA_C = BetaBernoulli(jnp.array([0.6, 1.0, 1.5]), 0.8), 1.1
CDPM_OPTS = dict(num_aux=2)  # every CDPM run on X_C shares one compiled program (heat is traced)


def test_cdpm_mcmc_posterior_determinism_and_steps():
    """Exact posterior over (u, Z) with a strongly heated partner (heat 0.5: swaps and the
    tempered Algorithm-8 weights must not bias the cold chain), NaN cell included; then
    single steps: same keys -> same states, statistics of both chains match a recount."""
    # over 12 seeds (6000 samples): column TV 0.013 +- 0.003, joint TV 0.062 +- 0.003 (the
    # floor of 205 states; iid: 0.060). Dropping the CRP^(beta - 1) factor of the tempered
    # auxiliary views gives 0.11 / 0.12 at 8000, halving the swap log ratio 0.07 / 0.10.
    exact = _cdpm_exact(X_C, C_C, ALPHA_C)
    res = G.cdpm_mcmc(
        jax.random.PRNGKey(7),
        X_C,
        C_C,
        ALPHA_C,
        num_samples=8000,
        num_warmup=50,
        heat=0.5,
        progress_bar=False,
        **CDPM_OPTS,
    )
    keys = [_cdpm_key(u, Z) for u, Z in zip(np.asarray(res.column_views), np.asarray(res.row_labels))]
    col_exact, col_freq = Counter(), _freq(k[0] for k in keys)
    for (u, _), p in exact.items():
        col_exact[u] += p
    assert _tv(col_freq, dict(col_exact)) < 0.03
    assert _tv(_freq(keys), exact) < 0.08  # 205 joint states
    assert 0.05 < float(res.swap_rate) <= 1.0
    _check_cdpm_bookkeeping(res.state, X_C, C_C, ALPHA_C)  # both chains, after 8000 steps
    u, Z = np.asarray(res.column_views[-1]), np.asarray(res.row_labels[-1])
    assert np.isclose(
        float(res.log_joint[-1]), np.log(exact[_cdpm_key(u, Z)]) + _log_evidence(X_C, C_C, ALPHA_C), atol=1e-8
    )

    st = G.cdpm_mcmc_init(jax.random.PRNGKey(8), X_C, C_C, ALPHA_C)
    st2 = st
    for k in jax.random.split(jax.random.PRNGKey(9), 30):
        st, info = G.cdpm_mcmc_step(k, st, X_C, C_C, ALPHA_C, heat=0.7, **CDPM_OPTS)
        st2, _ = G.cdpm_mcmc_step(k, st2, X_C, C_C, ALPHA_C, heat=0.7, **CDPM_OPTS)
    for a, b in zip(jax.tree_util.tree_leaves(st), jax.tree_util.tree_leaves(st2)):
        np.testing.assert_array_equal(a, b)
    assert int(info.num_views) == int(np.sum(np.asarray(st.view_sizes[0]) > 0))
    _check_cdpm_bookkeeping(st, X_C, C_C, ALPHA_C)


def _log_evidence(X, comp, alpha):
    from jaxhc.models.cdpm import cdpm_log_evidence_bruteforce

    return float(cdpm_log_evidence_bruteforce(X, comp, alpha))


def _check_cdpm_bookkeeping(st, X, comp, alpha):
    from jaxhc.models.cdpm import cdpm_log_joint

    for c in range(2):
        u, Z = np.asarray(st.column_views[c]), np.asarray(st.row_labels[c])
        fresh = G.cdpm_mcmc_init(None, X, comp, alpha, column_views=u, row_labels=Z)
        uf, Zf = np.asarray(fresh.column_views[0]), np.asarray(fresh.row_labels[0])
        for a, b in zip(jax.tree_util.tree_leaves(st.stats), jax.tree_util.tree_leaves(fresh.stats)):
            a, b = np.asarray(a)[c], np.asarray(b)[0]
            for j in range(X.shape[1]):
                np.testing.assert_allclose(a[Z[:, u[j]], j], b[Zf[:, uf[j]], j], atol=1e-12)
        np.testing.assert_allclose(
            np.sort(np.asarray(st.log_marginals[c]).ravel()),
            np.sort(np.asarray(fresh.log_marginals[0]).ravel()),
            atol=1e-9,
        )
        np.testing.assert_array_equal(np.asarray(st.view_sizes[c]), np.bincount(u, minlength=X.shape[1]))
        for v in range(X.shape[1]):
            np.testing.assert_array_equal(np.asarray(st.row_counts[c, v]), np.bincount(Z[:, v], minlength=X.shape[0]))
        want = float(cdpm_log_joint(X, u, Z, comp, alpha))
        assert np.isclose(float(st.log_joint[c]), want, atol=1e-8)
        assert np.isclose(float(fresh.log_joint[0]), want, atol=1e-8)


# ------------------------------------------------------------------------------------------
# cell predictives
# ------------------------------------------------------------------------------------------
def test_predict_cells_are_distributions_and_match_closed_form():
    rng = np.random.default_rng(5)
    T = 4
    X = rng.integers(0, T + 1, size=(8, 5)).astype(float)
    held = [(0, 1), (3, 4), (5, 0)]
    Xtr = X.copy()
    for i, j in held:
        Xtr[i, j] = np.nan
    comp = BetaBinomial(jnp.linspace(0.7, 1.6, 5), 1.3, trials=T)
    rows = np.repeat([h[0] for h in held], T + 1)
    cols = np.repeat([h[1] for h in held], T + 1)
    vals = np.tile(np.arange(T + 1.0), len(held))
    # any label samples give proper distributions: use random ones
    L = rng.integers(0, 3, size=(3, 8))
    U = rng.integers(0, 2, size=(3, 5))
    Zs = rng.integers(0, 3, size=(3, 8, 5))
    lp_d = G.dpm_predict_cells(Xtr, comp, L, rows, cols, vals)
    lp_c = G.cdpm_predict_cells(Xtr, comp, U, Zs, rows, cols, vals)
    for lp in (lp_d, lp_c):
        np.testing.assert_allclose(np.exp(np.asarray(lp)).reshape(len(held), T + 1).sum(1), 1.0, atol=1e-12)
    # one cluster of everything in every sample: the Beta-Binomial predictive of the column
    i, j = held[0]
    lp1 = G.dpm_predict_cells(
        Xtr, comp, np.zeros((3, 8), int), np.full_like(rows, i), np.full_like(cols, j), np.full_like(vals, 2.0)
    )  # (3 equal samples: the shapes of lp_d, no recompile)
    col = Xtr[:, j][~np.isnan(Xtr[:, j])]
    cj = restrict_columns(comp, [j])
    want = cj.log_predictive(jnp.array([2.0]), cj.stats(jnp.asarray(col[:, None])))
    assert np.isclose(float(lp1[0]), float(want), atol=1e-12)
    # Bernoulli cells
    Xb = (X > 1).astype(float)
    Xb[0, 0] = np.nan
    lb = G.dpm_predict_cells(Xb, BetaBernoulli(1.0, 1.0), np.zeros((2, 8), int), [0, 0], [0, 0], [0.0, 1.0])
    assert np.isclose(float(np.exp(lb).sum()), 1.0, atol=1e-12)


# ------------------------------------------------------------------------------------------
# NumPyro adapters, MH
# ------------------------------------------------------------------------------------------
def test_numpyro_dpm_kernel_runs_and_keeps_bookkeeping():
    """`DPMGibbs` under `numpyro.infer.MCMC`, on Beta-Binomial counts with missing cells
    (the NumPyro loop compiles its own program: one component per kernel test)."""
    from numpyro.infer import MCMC

    rng = np.random.default_rng(1)
    X = rng.integers(0, 6, size=(12, 4)).astype(float)
    X[rng.random(X.shape) < 0.2] = np.nan
    comp = BetaBinomial(1.0, 2.0, trials=5)
    m = MCMC(G.DPMGibbs(X, comp, 1.0), num_warmup=2, num_samples=4, progress_bar=False)
    m.run(jax.random.PRNGKey(0))
    z = m.get_samples()
    assert z.shape == (4, 12) and z.dtype == jnp.int32
    assert len({_canon(r) for r in np.asarray(z)}) > 1
    _check_dpm_bookkeeping(m.last_state.state, X, comp, 1.0)


def test_numpyro_cdpm_kernel_recovers_views_normal_known_cov():
    """`CDPMGibbs` under `numpyro.infer.MCMC` on Gaussian data whose rows split one way in
    columns 0-1 and another in 2-3: the views are recovered, and with 10 rows (more than
    one block of cluster slots) the statistics of both chains match a recount."""
    from numpyro.infer import MCMC

    rng = np.random.default_rng(4)
    a = np.repeat([0.0, 5.0], 5)  # rows split one way in columns 0-1
    b = np.tile([0.0, 5.0], 5)  # another way in columns 2-3
    X = np.stack([a, a, b, b], 1) + 0.3 * rng.normal(size=(10, 4))
    comp = NormalKnownCov(jnp.full(4, 2.5), jnp.full(4, 9.0), jnp.full(4, 0.09))
    m = MCMC(G.CDPMGibbs(X, comp, 1.0), num_warmup=25, num_samples=3, progress_bar=False)
    m.run(jax.random.PRNGKey(10))
    s = m.get_samples()
    assert s["column_views"].shape == (3, 4) and s["row_labels"].shape == (3, 10, 4)
    u = np.asarray(s["column_views"][-1])
    assert u[0] == u[1] and u[2] == u[3] and u[0] != u[2]
    _check_cdpm_bookkeeping(m.last_state.state, X, comp, 1.0)


def test_mh_step_targets_a_discrete_distribution_and_nan_rejects():
    logp = jnp.log(jnp.array([0.1, 0.2, 0.3, 0.4]))

    def prop(key, x):  # symmetric random walk on a cycle
        return (x + jnp.where(jax.random.bernoulli(key), 1, -1)) % 4, 0.0

    def step(s, k):
        s, info = mh.mh_step(k, s, prop, lambda x: logp[x])
        return s, s.position

    s0 = mh.mh_init(jnp.int32(0), lambda x: logp[x])
    _, xs = jax.lax.scan(step, s0, jax.random.split(jax.random.PRNGKey(0), 40000))
    np.testing.assert_allclose(np.bincount(np.asarray(xs), minlength=4) / 40000, [0.1, 0.2, 0.3, 0.4], atol=0.015)
    keys = jax.random.split(jax.random.PRNGKey(1), 1000)
    assert not np.any(jax.vmap(mh.mh_accept, (0, None))(keys, jnp.nan))
    assert np.all(jax.vmap(mh.mh_accept, (0, None))(keys, 0.0))


# ------------------------------------------------------------------------------------------
# validation
# ------------------------------------------------------------------------------------------
def test_bad_inputs_raise():
    X = np.array([[0, 1], [1, 1]], float)
    bb = BetaBernoulli(1.0, 1.0)
    k = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match="binary"):
        G.dpm_gibbs(k, np.array([[0, 2], [1, 1]], float), bb, 1.0, num_samples=2, progress_bar=False)
    with pytest.raises(ValueError, match="2-D"):
        G.dpm_gibbs(k, np.array([0, 1.0]), bb, 1.0, num_samples=2)
    with pytest.raises(ValueError, match="non-empty"):
        G.cdpm_mcmc(k, np.zeros((0, 2)), bb, 1.0, num_samples=2)
    with pytest.raises(ValueError, match="alpha"):
        G.dpm_gibbs(k, X, bb, -1.0, num_samples=2)
    with pytest.raises(TypeError, match="component"):
        G.dpm_gibbs(k, X, "beta", 1.0, num_samples=2)
    with pytest.raises(ValueError, match="heat"):
        G.cdpm_mcmc(k, X, bb, 1.0, num_samples=2, heat=1.5)
    with pytest.raises(ValueError, match="heat"):
        G.cdpm_mcmc_step(k, None, X, bb, 1.0, heat=0.0)
    with pytest.raises(TypeError, match="column-separable"):
        G.cdpm_mcmc(k, X, NormalInverseWishart(jnp.zeros(2)), 1.0, num_samples=2)
    with pytest.raises(ValueError, match="diagonal"):
        G.cdpm_mcmc(k, X, NormalKnownCov(jnp.zeros(2), jnp.array([[1.0, 0.5], [0.5, 1.0]])), 1.0, num_samples=2)
    with pytest.raises(ValueError, match="num_samples"):
        G.dpm_gibbs(k, X, bb, 1.0, num_samples=0)
    with pytest.raises(ValueError, match="thin"):
        G.cdpm_mcmc(k, X, bb, 1.0, num_samples=2, thin=0)
    with pytest.raises(ValueError, match="labels"):
        G.dpm_gibbs_init(k, X, bb, 1.0, labels=[0, 1, 2])
    with pytest.raises(ValueError, match="NaN"):
        G.dpm_gibbs(k, np.array([[0.0, np.nan], [1.0, 2.0]]), NormalKnownCov(jnp.zeros(2)), 1.0, num_samples=2)
    with pytest.raises(ValueError, match="rows"):
        G.dpm_predict_cells(X, bb, np.zeros((1, 2), int), [5], [0], [1.0])
    with pytest.raises(ValueError, match="same shape"):
        G.cdpm_predict_cells(X, bb, np.zeros((1, 2), int), np.zeros((1, 2, 2), int), [0, 1], [0, 1], [1.0])
