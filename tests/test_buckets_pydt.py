"""Shape buckets of the PYDT entry points (issue 53, "compile once, fit many"): `pydt_mcmc` and
`pydt_em` run their programs on ``bucket(N)`` leaf slots, the padding leaves never joining a
tree and the internal slots shifted past them (`jaxhc.inference.pydt.padding`). Facts checked:
the helpers (sums, slot draws, the permutation, the prior tree) ignore the padding bit for bit;
the padded runs equal the exact-shape runs (``_bucket=False``) on both sides of a bucket edge,
same key same trees, every number to 1e-10, Gaussian and probit, one chain and several, from a
state or a start tree; every size of a bucket reuses the bucket's compiled programs, and a
sweep over sizes compiles only for the buckets it meets (counted with `count_compilations`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxhc._internal.buckets import bucket
from jaxhc._internal.compiles import count_compilations
from jaxhc.inference.pydt import pydt_em, pydt_mcmc
from jaxhc.inference.pydt.moves import _permutation
from jaxhc.inference.pydt.padding import pad_tree, slot_categorical, unpad_tree
from jaxhc.models.pydt_math import FREE, node_sum, ordered_sum, sample_prior_tree

EDGE = 16  # bucket(16) == 16, bucket(17) == 20
MCMC = dict(num_samples=3, num_warmup=1, progress_bar=False)
EM = dict(num_iters=3, max_em=3, k_best=3, progress_bar=False)  # 3 iterations: each move once
MAX_PROGRAMS = 4  # programs a sampler call compiles for a new bucket (2 measured: init and step)


def data(n, probit=False):
    """The first ``n`` of 48 points in two groups (bits for probit: signs, with a few flipped)."""
    rng = np.random.default_rng(5)
    X = np.concatenate([rng.normal(-1.5, 0.6, (24, 3)), rng.normal(1.5, 0.6, (24, 3))])[rng.permutation(48)]
    if probit:
        X = np.where(rng.random(X.shape) < 0.1, X < 0, X > 0).astype(float)
    return X[:n]


def close(a, b, what):
    np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float), rtol=0, atol=1e-10, err_msg=what)


def assert_same_samples(a, b, n):
    """Two `PYDTSamples` over ``n`` leaves: the same trees, every number to 1e-10."""
    assert a.parent.shape[-1] == b.parent.shape[-1] == 2 * n - 1
    np.testing.assert_array_equal(a.parent, b.parent)
    for f in ("times", "c", "alpha", "beta", "sigma2", "log_lik", "log_prior"):
        close(getattr(a, f), getattr(b, f), f)
    assert a.accept_rate == b.accept_rate
    np.testing.assert_array_equal(np.asarray(a.state.parent), np.asarray(b.state.parent))
    for f in ("times", "c", "alpha", "beta", "sigma2", "log_lik", "log_prior", "latent"):
        if getattr(a.state, f) is None:
            assert getattr(b.state, f) is None
        else:
            close(getattr(a.state, f), getattr(b.state, f), "state." + f)


def assert_same_fit(a, b, n):
    """Two `PYDTEMResult` over ``n`` leaves: the same trees and K-best list, numbers to 1e-10."""
    assert a.parent.shape == b.parent.shape == (2 * n - 1,)
    np.testing.assert_array_equal(a.parent, b.parent)
    np.testing.assert_array_equal(a.tree.parent, b.tree.parent)
    close(a.times, b.times, "times")
    close(a.log_evidence, b.log_evidence, "log_evidence")
    assert len(a.k_best) == len(b.k_best)
    for (la, pa, ta), (lb, pb, tb) in zip(a.k_best, b.k_best):
        close(la, lb, "k_best bound")
        np.testing.assert_array_equal(pa, pb)
        close(ta, tb, "k_best times")
    for ha, hb in zip(a.k_best_hyper, b.k_best_hyper):
        assert ha.keys() == hb.keys()
        for k in ha:
            close(ha[k], hb[k], k)
    for f in ("c", "alpha", "beta", "sigma2", "trace", "restart_bounds"):
        close(getattr(a, f), getattr(b, f), f)
    for f in ("q_c", "q_precision"):
        assert (getattr(a, f) is None) == (getattr(b, f) is None)
        if getattr(a, f) is not None:
            close(getattr(a, f), getattr(b, f), f)
    assert [m[0] for m in a.move_trace] == [m[0] for m in b.move_trace]
    close([m[1:] for m in a.move_trace], [m[1:] for m in b.move_trace], "move_trace")
    if a.k_best_sites is not None:
        for sa, sb in zip(a.k_best_sites, b.k_best_sites):
            assert sa.tau.shape == (n, a.X.shape[1])
            close(sa.tau, sb.tau, "sites.tau")
            close(sa.nu, sb.nu, "sites.nu")


# ------------------------------------------------------------------------------------------
# the pieces
# ------------------------------------------------------------------------------------------
def test_sums_and_draws_ignore_the_padding():
    """`ordered_sum` with trailing zeros and `node_sum` on a padded node array equal the exact
    sums bit for bit (XLA's own reductions do not: their order depends on the length); a slot
    draw on a padded tree is `jax.random.categorical`'s draw on the exact tree; the padded
    permutation is `jax.random.permutation` (one sorting round below 1626 points, two above)."""
    rng = np.random.default_rng(0)
    osum = jax.jit(ordered_sum)
    nsum = jax.jit(node_sum)
    for n in (3, 17, 33, 70, 130):
        nb = bucket(n)
        x = rng.normal(size=2 * n - 1) * 10.0 ** rng.normal(size=2 * n - 1)
        xp = np.zeros(2 * nb - 1)
        xp[np.concatenate([np.arange(n), np.arange(nb, nb + n - 1)])] = x
        assert float(osum(x)) == float(osum(np.concatenate([x, np.zeros(nb)])))
        assert float(nsum(x)) == float(nsum(xp))
        close(nsum(x), np.sum(x), "node_sum")
        key = jax.random.key(n)
        logits = np.where(rng.random(2 * n - 1) < 0.7, 0.0, -np.inf)
        logits_p = np.full(2 * nb - 1, -np.inf)
        logits_p[np.concatenate([np.arange(n), np.arange(nb, nb + n - 1)])] = logits
        want = int(jax.random.categorical(key, jnp.asarray(logits)))
        got = int(slot_categorical(key, jnp.asarray(logits_p), nb, n))
        assert got == (want if want < n else want + nb - n)
    perm = jax.jit(_permutation, static_argnums=2)
    for n, size in ((3, 8), (33, 40), (1626, 1792)):
        key = jax.random.key(n)
        got = np.asarray(perm(key, np.int32(n), size))
        np.testing.assert_array_equal(got[:n], np.asarray(jax.random.permutation(key, n)))
        np.testing.assert_array_equal(np.sort(got[n:]), np.arange(n, size))


def test_prior_tree_and_slot_maps():
    """`sample_prior_tree` over the first ``n`` of ``Nb`` leaf slots draws the exact-size tree
    with its internal slots shifted (`pad_tree`); `unpad_tree` undoes `pad_tree`."""
    for n in (17, 33):
        nb = bucket(n)
        key = jax.random.key(n)
        par, tim = jax.jit(sample_prior_tree, static_argnums=(1, 2))(key, n, jnp.float64, 1.0, 0.5, 0.2)
        par_b, tim_b = jax.jit(sample_prior_tree, static_argnums=(1, 2))(key, nb, jnp.float64, 1.0, 0.5, 0.2, n)
        want_p, want_t = pad_tree(par, tim, n, nb)
        np.testing.assert_array_equal(np.asarray(par_b), want_p)
        close(tim_b, want_t, "times")
        assert np.all(want_p[n:nb] == FREE) and np.all(want_p[want_p >= 0] >= nb)
        back_p, back_t = unpad_tree(par_b, tim_b, n, nb)
        np.testing.assert_array_equal(back_p, np.asarray(par))
        close(back_t, tim, "unpadded times")


# ------------------------------------------------------------------------------------------
# padded runs == exact-shape runs
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_mcmc_bucketed_equals_exact():
    """Same key, same samples with and without padding (``N = 17``: 3 padding leaves and 6
    more slots), and again when continuing from the final state. (At ``N = 16 = bucket(16)``
    the padded call is the exact-shape call: nothing to compare; the sizes below the edge are
    the sweep's and the reuse test's.)"""
    n = EDGE + 1
    X = data(n)
    a = pydt_mcmc(jax.random.key(1), X, **MCMC)
    b = pydt_mcmc(jax.random.key(1), X, **MCMC, _bucket=False)
    assert_same_samples(a, b, n)
    a2 = pydt_mcmc(jax.random.key(2), X, init_state=a.state, **MCMC)
    b2 = pydt_mcmc(jax.random.key(2), X, init_state=b.state, **MCMC, _bucket=False)
    assert_same_samples(a2, b2, n)


@pytest.mark.slow
def test_mcmc_probit_and_chains_bucketed_equal_exact():
    """The probit sampler (latent leaf values drawn per row) and two vectorised chains, padded
    (``N = 17``) and not: the same samples."""
    n = EDGE + 1
    Y = data(n, probit=True)
    a = pydt_mcmc(jax.random.key(3), Y, likelihood="probit", **MCMC)
    b = pydt_mcmc(jax.random.key(3), Y, likelihood="probit", **MCMC, _bucket=False)
    assert_same_samples(a, b, n)
    assert a.state.latent.shape == (n, 3)
    X = data(n)
    a = pydt_mcmc(jax.random.key(4), X, num_chains=2, **MCMC)
    b = pydt_mcmc(jax.random.key(4), X, num_chains=2, **MCMC, _bucket=False)
    assert a.parent.shape == (2, MCMC["num_samples"], 2 * n - 1)
    assert_same_samples(a, b, n)


@pytest.mark.slow
def test_em_bucketed_equals_exact():
    """Same key, same search with and without padding (``N = 17``): every move (re-attach,
    regraft, collapse), the K-best list, the bounds and hyperparameters; and EM from a given
    tree."""
    n = EDGE + 1
    X = data(n)
    a = pydt_em(jax.random.key(5), X, **EM)
    b = pydt_em(jax.random.key(5), X, **EM, _bucket=False)
    assert {m[0] for m in a.move_trace} == {"reattach", "regraft", "collapse"}
    assert_same_fit(a, b, n)
    kw = dict(EM, num_iters=0)
    a2 = pydt_em(jax.random.key(6), X, init=(a.tree.parent, a.tree.heights), **kw)
    b2 = pydt_em(jax.random.key(6), X, init=(a.tree.parent, a.tree.heights), **kw, _bucket=False)
    assert_same_fit(a2, b2, n)


@pytest.mark.slow
def test_em_probit_bucketed_equals_exact():
    """The probit EM (EP sites per leaf; padding rows hold theirs and do not count) padded and
    not: the same search, bounds and sites."""
    n = EDGE + 1
    Y = data(n, probit=True)
    kw = dict(EM, num_iters=2, moves=("reattach",))
    a = pydt_em(jax.random.key(7), Y, likelihood="probit", **kw)
    b = pydt_em(jax.random.key(7), Y, likelihood="probit", **kw, _bucket=False)
    assert_same_fit(a, b, n)


# ------------------------------------------------------------------------------------------
# compilations
# ------------------------------------------------------------------------------------------
def run_mcmc(n):
    pydt_mcmc(jax.random.key(n), data(n), **MCMC)


def run_em(n):
    pydt_em(jax.random.key(n), data(n), **EM)


@pytest.mark.parametrize("system", ["mcmc", "em"])
def test_sizes_of_a_bucket_reuse_the_programs(system):
    """After one run at 20, every size 17..19 (bucket 20) runs without compiling anything."""
    run = {"mcmc": run_mcmc, "em": run_em}[system]
    run(20)
    sizes = (17, 18, 19)
    assert {bucket(n) for n in sizes} == {20}
    for n in sizes:
        with count_compilations() as c:
            run(n)
        assert c.compiled == 0, (system, n, c)


def test_a_sweep_compiles_once_per_bucket():
    """A sweep over sizes in three buckets (14, 16, 20) compiles at most one call's programs
    for each bucket met for the first time and nothing for a size of a bucket already met."""
    sizes = (13, 15, 17, 14, 19, 18)
    assert len({bucket(n) for n in sizes}) == 3
    seen, total = set(), 0
    for n in sizes:
        with count_compilations() as c:
            run_mcmc(n)
        total += c.compiled
        if bucket(n) in seen:
            assert c.compiled == 0, (n, c)
        else:
            assert c.compiled <= MAX_PROGRAMS, (n, c)
        seen.add(bucket(n))
    assert total <= MAX_PROGRAMS * len(seen)
