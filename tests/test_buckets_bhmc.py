"""Shape buckets of BHMC (issue 53, "compile once, fit many"): `jaxhc.bhmc` pads the points to
the library's bucket grid with rows that no sweep visits and every sum masks out. Facts
checked: the padded run equals the exact-shape run (same key: same paths, labels, tree and
summary; every number to 1e-10) on both sides of a bucket edge, from a tree start, from the
paper's chain start and when continuing from a state; the random order of a sweep is
`jax.random.permutation`'s whatever the padding; and every size of a bucket reuses the
bucket's compiled programs (counted with `count_compilations`)."""

import jax
import numpy as np
import pytest

import jaxhc
from jaxhc._internal.buckets import bucket
from jaxhc._internal.compiles import count_compilations
from jaxhc.inference.bhmc.state import row_permutation

# depth 2: split-merge moves on an internal level (nodes as items) and at the leaves (points)
KW = dict(depth=2, num_warmup=1, num_samples=2, progress_bar=False)
EDGE = 40  # bucket(40) == 40, bucket(41) == 48
MAX_PROGRAMS = 24  # programs one call compiles for a new bucket (15 measured; slack for JAX)


def points(n):
    """The first ``n`` of 48 points in a two-level hierarchy (3 groups x 2 subgroups)."""
    X, _ = jaxhc.datasets.hierarchical_gaussian(0, branching=(3, 2), n_per_leaf=8, dim=3, scales=(8.0, 2.5), noise=0.4)
    X = np.asarray(X)[np.random.default_rng(1).permutation(48)]
    return X[:n]


def close(a, b, what):
    np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float), rtol=0, atol=1e-10, err_msg=what)


def assert_same_run(a, b, n):
    """Two `BHMCSamples` of ``n`` points: equal answers, numbers to 1e-10."""
    np.testing.assert_array_equal(a.level_labels, b.level_labels)
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_array_equal(a.paths, b.paths)
    np.testing.assert_array_equal(a.tree.parent, b.tree.parent)
    assert a.best_sweep == b.best_sweep and a.starts == b.starts
    close(a.log_likelihood, b.log_likelihood, "log_likelihood")
    assert sorted(a.trace) == sorted(b.trace)
    for k in a.trace:
        close(a.trace[k], b.trace[k], k)
    for f in ("psm", "component_psm", "expected_loss", "weight_similarity"):
        close(getattr(a.posterior, f), getattr(b.posterior, f), f)
    for s, t in ((a.state, b.state), (a.best_state, b.best_state)):
        # every output holds the real points only
        assert np.shape(s.path) == np.shape(t.path) == (n, KW["depth"] + 1) and np.shape(s.c) == (n,)
        np.testing.assert_array_equal(s.path, t.path)
        np.testing.assert_array_equal(s.c, t.c)
        # node slots: the padded run may hold more (a capacity), the extra ones unused
        M = min(np.shape(s.count)[0], np.shape(t.count)[0])
        for u in (s, t):
            assert np.all(np.asarray(u.count)[M:] == 0)
        for f in ("parent", "level", "count"):
            np.testing.assert_array_equal(np.asarray(getattr(s, f))[:M], np.asarray(getattr(t, f))[:M], err_msg=f)
        close(np.where(np.isfinite(s.logb), s.logb, 0.0)[:M], np.where(np.isfinite(t.logb), t.logb, 0.0)[:M], "logb")
        np.testing.assert_array_equal(np.isfinite(s.logb)[:M], np.isfinite(t.logb)[:M])
        for f in ("theta", "alpha", "gamma0", "gamma", "sigma2"):
            close(getattr(s, f), getattr(t, f), f)


def test_row_permutation_is_jax_permutation_whatever_the_padding():
    """A sweep's order of the real points does not depend on the padding (one sorting round
    below 1626 points, two from there on, as `jax.random.permutation`)."""
    perm = jax.jit(row_permutation, static_argnums=1)
    for n, size in ((1, 8), (41, 48), (1626, 1792)):
        key = jax.random.key(n)
        want = np.asarray(jax.random.permutation(key, n))
        got = np.asarray(perm(key, size, np.int32(n)))
        np.testing.assert_array_equal(got[:n], want)
        np.testing.assert_array_equal(np.sort(got[n:]), np.arange(n, size))  # then the padding


@pytest.mark.slow
def test_bucket_sizes_reuse_their_programs():
    """The first size of a bucket compiles the bucket's programs (a bounded number); every
    other size in a bucket already met compiles nothing: a warm-up at 41, then 42..48 (all in
    bucket 48), and a sweep over sizes spanning buckets 40 and 48."""
    firsts = {}
    for n in (EDGE, 36, 33, EDGE + 1):  # buckets 40 (3 sizes), 48
        with count_compilations() as c:
            res = jaxhc.bhmc(jax.random.key(n), points(n), **KW)
        assert res.level_labels.shape == (n, KW["depth"])
        if bucket(n) in firsts:
            assert c.compiled == 0, (n, c.compiled)
        else:
            firsts[bucket(n)] = c.compiled
            assert c.compiled <= MAX_PROGRAMS, (n, c.compiled)
    assert sorted(firsts) == [40, 48]
    with count_compilations() as c:
        for n in range(EDGE + 2, 49):
            res = jaxhc.bhmc(jax.random.key(n), points(n), **KW)
            assert res.paths.shape == (n, KW["depth"] + 1) and res.tree.n_leaves == n
    assert c.compiled == 0, c.compiled


@pytest.mark.slow
def test_padded_runs_equal_exact_shape_runs():
    """Same key, same answer at ``n = 40`` (no padding) and ``n = 41`` (7 padding rows, more
    node slots) as the programs compiled at the exact shape; also from the paper's chain start
    and continuing from a returned state."""
    for n in (EDGE, EDGE + 1):
        X = points(n)
        a = jaxhc.bhmc(jax.random.key(7), X, **KW)
        b = jaxhc.bhmc(jax.random.key(7), X, _bucket=False, **KW)
        assert_same_run(a, b, n)
    # continuing from a state of the real points (padded again inside)
    a2 = jaxhc.bhmc(jax.random.key(8), X, init_state=a.state, **KW)
    b2 = jaxhc.bhmc(jax.random.key(8), X, init_state=b.state, _bucket=False, **KW)
    assert_same_run(a2, b2, n)
    # Algorithm 2's start: components at random distinct points, every point on one path
    kw = dict(KW, init="chain")
    a = jaxhc.bhmc(jax.random.key(9), X, **kw)
    b = jaxhc.bhmc(jax.random.key(9), X, _bucket=False, **kw)
    assert_same_run(a, b, n)
