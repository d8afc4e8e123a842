import jax

jax.config.update("jax_enable_x64", True)

"""Tests for jaxhc.datasets: loader shapes and values, class subsets, reproducible
synthetic generators (same key, same data; different keys, different data), bad arguments."""
import numpy as np
import pytest

from jaxhc import datasets


# ---------------------------------------------------------------------------------------
# loaders
# ---------------------------------------------------------------------------------------
def test_digits_binary_all():
    X, y = datasets.load_digits_binary()
    assert X.shape == (1797, 64) and y.shape == (1797,)
    assert X.dtype == np.float64 and y.dtype == np.int64
    assert set(np.unique(X)) == {0.0, 1.0}
    assert set(np.unique(y)) == set(range(10))


def test_digits_binary_threshold_matches_pixels():
    from sklearn.datasets import load_digits

    raw = load_digits()
    X, y = datasets.load_digits_binary(threshold=5)
    order = np.argsort(raw.target, kind="stable")  # rows come grouped by class
    np.testing.assert_array_equal(X, (raw.data[order] >= 5).astype(float))
    np.testing.assert_array_equal(y, raw.target[order])
    # a higher threshold keeps a subset of the pixels
    X12, _ = datasets.load_digits_binary(threshold=12)
    assert np.all(X12 <= X) and X12.sum() < X.sum()


def test_digits_binary_class_subset_and_per_class():
    X, y = datasets.load_digits_binary(classes=(0, 2, 4))
    assert set(np.unique(y)) == {0, 2, 4}
    assert X.shape[0] == np.sum(np.isin(datasets.load_digits_binary()[1], [0, 2, 4]))
    X, y = datasets.load_digits_binary(classes=[4, 0, 2], per_class=40, key_or_seed=3)
    assert X.shape == (120, 64)
    np.testing.assert_array_equal(np.bincount(y, minlength=5)[[0, 2, 4]], [40, 40, 40])
    np.testing.assert_array_equal(y[:40], 4)  # grouped in the order of `classes`
    # rows are distinct images of the right class: compare with the raw data
    from sklearn.datasets import load_digits

    raw = load_digits()
    raw_bin = (raw.data >= 8).astype(float)
    for row, lab in zip(X[:5], y[:5]):
        assert np.any(np.all(raw_bin[raw.target == lab] == row, axis=1))


def test_digits_binary_subsample_reproducible():
    a = datasets.load_digits_binary(classes=(1, 7), per_class=10, key_or_seed=0)
    b = datasets.load_digits_binary(classes=(1, 7), per_class=10, key_or_seed=jax.random.PRNGKey(0))
    c = datasets.load_digits_binary(classes=(1, 7), per_class=10, key_or_seed=1)
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(a[0], c[0])


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(classes=(10,)),
        dict(classes=(-1, 2)),
        dict(classes=()),
        dict(classes=(1, 1)),
        dict(classes=(1.5,)),
        dict(per_class=0),
        dict(per_class=1000),
        dict(per_class=2.5),
        dict(threshold=0),
        dict(threshold=17),
        dict(key_or_seed=-3),
        dict(key_or_seed="seed"),
    ],
)
def test_digits_binary_bad_args(kwargs):
    with pytest.raises(ValueError):
        datasets.load_digits_binary(**kwargs)


@pytest.mark.parametrize("loader,shape", [(datasets.load_iris, (150, 4)), (datasets.load_wine, (178, 13))])
def test_table_loaders(loader, shape):
    X, y = loader()
    assert X.shape == shape and y.shape == (shape[0],)
    assert X.dtype == np.float64 and y.dtype == np.int64
    assert set(np.unique(y)) == {0, 1, 2}
    Z, y2 = loader(standardize=True)
    np.testing.assert_allclose(Z.mean(0), 0.0, atol=1e-12)
    np.testing.assert_allclose(Z.std(0), 1.0, rtol=1e-12)
    np.testing.assert_array_equal(y, y2)


# ---------------------------------------------------------------------------------------
# sample_dpm (one size, N x D, throughout: each (n, dim, kind) compiles once)
# ---------------------------------------------------------------------------------------
N, D = 80, 3


@pytest.mark.parametrize("kind", ["gaussian", "bernoulli"])
def test_sample_dpm_shapes_and_labels(kind):
    dim = D
    X, z = datasets.sample_dpm(jax.random.PRNGKey(0), N, 2.0, kind, dim=dim)
    assert X.shape == (N, dim) and z.shape == (N,)
    assert isinstance(X, np.ndarray) and X.dtype == np.float64 and z.dtype == np.int64
    assert np.all(np.isfinite(X))
    # labels are 0..K-1 numbered by first appearance (a CRP seats customer 0 at table 0)
    K = z.max() + 1
    assert z[0] == 0
    first = [np.flatnonzero(z == k)[0] for k in range(K)]
    assert first == sorted(first) and np.all(np.bincount(z) > 0)
    if kind == "bernoulli":
        assert set(np.unique(X)) <= {0.0, 1.0}


def test_sample_dpm_same_key_same_output_different_keys_differ():
    k = jax.random.key(42)
    a = datasets.sample_dpm(k, N, 1.5, dim=D)
    b = datasets.sample_dpm(jax.random.key(42), N, 1.5, dim=D)
    c = datasets.sample_dpm(jax.random.key(43), N, 1.5, dim=D)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[0], c[0])
    d = datasets.sample_dpm(k, N, 1.5, "bernoulli", dim=D)
    e = datasets.sample_dpm(k, N, 1.5, "bernoulli", dim=D)
    f = datasets.sample_dpm(jax.random.key(43), N, 1.5, "bernoulli", dim=D)
    np.testing.assert_array_equal(d[0], e[0])
    assert not np.array_equal(d[0], f[0])
    # a raw uint32 key and the typed key with the same bits give the same sample
    g = datasets.sample_dpm(jax.random.PRNGKey(42), N, 1.5, dim=D)
    np.testing.assert_array_equal(a[0], g[0])


def test_sample_dpm_number_of_clusters_grows_with_alpha():
    # E[K] = sum_i alpha / (alpha + i): about 2.4 for alpha=0.3 and 22 for alpha=10 at n=80
    keys = jax.random.split(jax.random.key(0), 40)
    k_small = np.mean([datasets.sample_dpm(k, N, 0.3, dim=D)[1].max() + 1 for k in keys[:20]])
    k_large = np.mean([datasets.sample_dpm(k, N, 10.0, dim=D)[1].max() + 1 for k in keys[20:]])
    expect = lambda a: np.sum(a / (a + np.arange(N)))  # noqa: E731
    assert abs(k_small - expect(0.3)) < 1.0
    assert abs(k_large - expect(10.0)) < 3.0
    assert k_large > k_small + 10


def test_sample_dpm_gaussian_clusters_are_separated():
    X, z = datasets.sample_dpm(jax.random.key(1), N, 1.0, dim=D, mean_scale=20.0, cluster_scale=0.5)
    # within-cluster spread ~ cluster_scale, far below the spread of the means
    within = np.mean([X[z == k].std(0).mean() for k in np.unique(z) if np.sum(z == k) > 10])
    assert 0.2 < within < 1.2


@pytest.mark.parametrize(
    "args,kwargs",
    [
        ((0, 1.0), {}),
        ((-5, 1.0), {}),
        ((2.5, 1.0), {}),
        ((10, 0.0), {}),
        ((10, -1.0), {}),
        ((10, float("nan")), {}),
        ((10, 1.0), dict(component_kind="poisson")),
        ((10, 1.0), dict(dim=0)),
        ((10, 1.0), dict(mean_scale=-1.0)),
        ((10, 1.0), dict(beta_a=0.0)),
    ],
)
def test_sample_dpm_bad_args(args, kwargs):
    with pytest.raises(ValueError):
        datasets.sample_dpm(jax.random.key(0), *args, **kwargs)


@pytest.mark.parametrize("key", [0, None, np.zeros(3, np.uint32), "key"])
def test_sample_dpm_needs_a_key(key):
    with pytest.raises(ValueError, match="PRNG key"):
        datasets.sample_dpm(key, 10, 1.0)


# ---------------------------------------------------------------------------------------
# mixture_of_gaussians
# ---------------------------------------------------------------------------------------
def test_mixture_of_gaussians():
    centers = [[0.0, 0.0, 0.0], [10.0, 0.0, 0.0]]
    X, y = datasets.mixture_of_gaussians(jax.random.key(0), [300, 200], centers, scale=[0.5, 2.0])
    assert X.shape == (500, 3) and y.shape == (500,) and X.dtype == np.float64
    np.testing.assert_array_equal(np.bincount(y), [300, 200])
    np.testing.assert_allclose(X[y == 0].mean(0), centers[0], atol=0.15)
    np.testing.assert_allclose(X[y == 1].mean(0), centers[1], atol=0.6)
    np.testing.assert_allclose(X[y == 0].std(0), 0.5, rtol=0.2)
    np.testing.assert_allclose(X[y == 1].std(0), 2.0, rtol=0.2)
    a = datasets.mixture_of_gaussians(jax.random.key(5), 4, centers)
    b = datasets.mixture_of_gaussians(jax.random.key(5), 4, centers)
    c = datasets.mixture_of_gaussians(jax.random.key(6), 4, centers)
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(a[0], c[0])


@pytest.mark.parametrize(
    "n,centers,scale",
    [
        (0, [[0.0, 0.0]], 1.0),
        ([3, 3], [[0.0, 0.0]], 1.0),
        (2.5, [[0.0, 0.0]], 1.0),
        (3, [0.0, 1.0], 1.0),
        (3, np.zeros((0, 2)), 1.0),
        (3, [[0.0, np.inf]], 1.0),
        (3, [[0.0, 0.0]], -1.0),
        (3, [[0.0, 0.0], [1.0, 1.0]], [1.0, 2.0, 3.0]),
    ],
)
def test_mixture_of_gaussians_bad_args(n, centers, scale):
    with pytest.raises(ValueError):
        datasets.mixture_of_gaussians(jax.random.key(0), n, centers, scale)


# ---------------------------------------------------------------------------------------
# cross-clustered tables by view sizes
# ---------------------------------------------------------------------------------------
def test_cross_cluster_table_shapes_values_and_key():
    X, u, Z = datasets.cross_cluster_table(jax.random.key(0))
    assert X.shape == (60, 36) and u.shape == (36,) and Z.shape == (60, 4)
    assert X.dtype == np.float64 and u.dtype == np.int64 and Z.dtype == np.int64
    assert set(np.unique(X)) <= {0.0, 1.0}
    np.testing.assert_array_equal(np.bincount(u), [6, 8, 10, 12])
    np.testing.assert_array_equal(u, np.sort(u))  # contiguous blocks
    for v in range(4):  # 4 equal-size clusters per view
        np.testing.assert_array_equal(np.bincount(Z[:, v]), [15, 15, 15, 15])
    # columns of one (view, cluster) share a probability: within a cluster the rows agree
    # more often than across clusters (Beta(0.3, 0.3) puts theta near 0 or 1)
    same = np.mean([np.mean(X[Z[:, 0] == k][:, u == 0].std(axis=0)) for k in range(4)])
    assert same < X[:, u == 0].std(axis=0).mean()
    a = datasets.cross_cluster_table(jax.random.key(0))
    b = datasets.cross_cluster_table(0)
    c = datasets.cross_cluster_table(jax.random.key(1))
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], c[0])
    # the same draws as cross_clustering_synthetic with a = b = concentration
    ref = datasets.cross_clustering_synthetic(
        3, n_rows=20, n_cols=7, n_views=2, n_clusters=[2, 3], trials=9, a=0.7, b=0.7, view_sizes=[3, 4]
    )
    got = datasets.cross_cluster_table(
        3, view_sizes=[3, 4], n_rows=20, n_clusters=[2, 3], concentration=0.7, kind="binomial", trials=9
    )
    for x, y in zip(ref, got):
        np.testing.assert_array_equal(x, y)
    Xb, _, _ = datasets.cross_cluster_table(1, view_sizes=(2, 3), n_rows=10, kind="binomial")
    assert Xb.max() <= 50 and Xb.max() > 1  # default 50 trials


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"view_sizes": ()}, "view_sizes"),
        ({"view_sizes": (3, 0)}, "view_sizes"),
        ({"view_sizes": (2.5, 3)}, "view_sizes"),
        ({"n_rows": 0}, "n_rows"),
        ({"n_clusters": 0}, "n_clusters"),
        ({"n_clusters": 61}, "n_clusters"),
        ({"n_clusters": [2, 3]}, "n_clusters"),
        ({"concentration": 0.0}, "concentration"),
        ({"kind": "gaussian"}, "kind"),
        ({"kind": "binary", "trials": 5}, "trials"),
        ({"kind": "binomial", "trials": 0}, "trials"),
    ],
)
def test_cross_cluster_table_bad_args(kwargs, match):
    with pytest.raises(ValueError, match=match):
        datasets.cross_cluster_table(0, **kwargs)
    with pytest.raises(ValueError, match="key"):
        datasets.cross_cluster_table("key")
