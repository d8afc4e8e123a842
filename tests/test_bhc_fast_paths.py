"""The fast paths of greedy BHC (issue 18) against the plain formulas: the unrolled
symmetric elimination of `logdet_pd_entries`, the O(d) single-point pair marginal of
`NormalInverseWishart.point_pair_log_marginal` (matrix determinant lemma), and the greedy
search with and without them (same tree, same values)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxhc
from jaxhc.components.base import logdet_pd_entries
from jaxhc.inference.bhc.greedy import bhc_core
from jaxhc.inference.bhc.terms import take

jax.config.update("jax_enable_x64", True)


@pytest.mark.parametrize("d", [1, 4, 10])
def test_logdet_entries_matches_slogdet(d):
    rng = np.random.default_rng(d)
    G = rng.normal(size=(7, d, d + 2))
    A = G @ G.transpose(0, 2, 1) + 0.1 * np.eye(d)
    A = jnp.asarray(A)
    got = logdet_pd_entries(lambda i, j: A[:, i, j], d)
    np.testing.assert_allclose(np.asarray(got), np.linalg.slogdet(np.asarray(A))[1], rtol=0, atol=1e-11)
    # a singular matrix (a pivot lost to cancellation) is NaN, never a finite value
    B = jnp.asarray(np.ones((1, d, d))) if d > 1 else jnp.zeros((1, 1, 1))
    assert np.isnan(np.asarray(logdet_pd_entries(lambda i, j: B[:, i, j], d))).all()


@pytest.mark.parametrize("d", [2, 10])
def test_staged_elimination_equals_the_plain_one(d):
    """The staged elimination (`staged_elimination`: every pivot's trailing entries
    materialised as contiguous batch vectors, for batches of >= 256 matrices) is the same
    arithmetic: equal values, NaN for the same lost pivots; under jit and vmap."""
    from jaxhc.components.base import staged_elimination

    rng = np.random.default_rng(d)
    G = rng.normal(size=(300, d, d + 2))
    A = G @ G.transpose(0, 2, 1) + 0.1 * np.eye(d)
    A[7] = 1.0  # singular: NaN in both
    A = jnp.asarray(A)
    f = lambda A: logdet_pd_entries(lambda i, j: A[..., i, j], d)
    plain = np.asarray(jax.jit(f)(A))
    with staged_elimination():
        staged = np.asarray(jax.jit(f)(A))
        batched = np.asarray(jax.vmap(jax.jit(f))(A.reshape(2, 150, d, d))).reshape(-1)
    np.testing.assert_allclose(staged, plain, rtol=1e-13, atol=0)
    np.testing.assert_allclose(batched, plain, rtol=1e-13, atol=0)
    assert np.isnan(staged[7]) and np.isnan(plain[7]) and np.isfinite(np.delete(staged, 7)).all()
    np.testing.assert_allclose(np.delete(plain, 7), np.linalg.slogdet(np.delete(np.asarray(A), 7, 0))[1], atol=1e-10)


def test_greedy_search_staged_or_not_gives_one_tree(monkeypatch):
    """BHC at n = 300 (merge rows of 300 log marginals: staged) against the same search with
    staging switched off: the same tree and values."""
    from jaxhc.components import base

    rng = np.random.default_rng(5)
    X = np.concatenate([rng.normal(size=(100, 4)) + 5 * rng.normal(size=4) for _ in range(3)])
    comp = jaxhc.NormalInverseWishart.from_data(X)
    calls = []
    real = base._materialise
    monkeypatch.setattr(base, "_materialise", lambda a: calls.append(1) or real(a))
    jax.clear_caches()
    a = jaxhc.bhc(X, comp, progress_bar=False)
    assert calls  # the staged path was traced
    monkeypatch.setattr(base, "_STAGED_MIN_BATCH", 10**9)
    jax.clear_caches()
    calls.clear()
    b = jaxhc.bhc(X, comp, progress_bar=False)
    assert not calls
    assert np.array_equal(a.tree.children, b.tree.children)
    np.testing.assert_allclose(a.log_r, b.log_r, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(float(a.log_evidence), float(b.log_evidence), rtol=1e-12)


def test_tiled_slots_split_into_equal_tiles():
    from jaxhc.inference.bhc import slots as slot_rows

    T = slot_rows.SLOT_TILE
    for n in [1, 2, T, 2 * T - 1, 2 * T, 2 * T + 1, 1000, 4000, 4001, 10**5 + 3]:
        m = slot_rows.tiled_slots(n)
        assert m >= n and slot_rows.tiled_slots(m) == m
        if n < 2 * T:
            assert m == n
            continue
        k = -(-m // T)
        assert m % k == 0 and m // k <= T and m - n < k


@pytest.mark.parametrize("chunked", [False, True])
def test_tiled_merge_rows_give_one_tree(monkeypatch, chunked):
    """From 2 x `SLOT_TILE` slots the merge rows run tile by tile (n = 530: 3 tiles of 177
    slots, one filler slot added): the same tree and values as the rows in one batch, in
    the one-call search and in the chunked driver."""
    from jaxhc.inference.bhc import greedy
    from jaxhc.inference.bhc import slots as slot_rows

    rng = np.random.default_rng(11)
    X = np.concatenate([rng.normal(size=(265, 3)) + 4 * rng.normal(size=3) for _ in range(2)])
    comp = jaxhc.NormalInverseWishart.from_data(X)
    leaf = comp.leaf_stats(jnp.asarray(X))
    assert slot_rows.tiled_slots(530) == 531
    maps = []
    real_map = jax.lax.map
    monkeypatch.setattr(jax.lax, "map", lambda f, xs, **kw: maps.append(f.__qualname__) or real_map(f, xs, **kw))
    jax.clear_caches()
    a = greedy.bhc_from_stats(comp, 1.0, leaf, chunked=chunked)
    tiled = lambda: [q for q in maps if q.startswith("slot_log_marginals")]
    assert tiled()  # the tiled rows were traced
    monkeypatch.setattr(slot_rows, "SLOT_TILE", 10**6)
    jax.clear_caches()
    maps.clear()
    b = greedy.bhc_from_stats(comp, 1.0, leaf, chunked=chunked)
    assert not tiled()
    assert np.array_equal(a.tree.children, b.tree.children)
    np.testing.assert_allclose(a.log_r, b.log_r, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(float(a.log_evidence), float(b.log_evidence), rtol=1e-12)


@pytest.mark.parametrize("d", [3, 40])
def test_point_pair_log_marginal_matches_direct_formula(d):
    # every pair of 5 points (d = 40: nodes of 2 points, far fewer points than dimensions)
    # against the d x d formula on the merged statistics; a full prior scale and an
    # off-centre prior mean so that no term vanishes
    rng = np.random.default_rng(d)
    X = rng.normal(size=(5, d)) * 2.0 + 1.0
    M = rng.normal(size=(d, d))
    comp = jaxhc.NormalInverseWishart(np.full(d, 0.3), 0.2, d + 1.5, M @ M.T / d + 0.5 * np.eye(d))
    leaf = comp.leaf_stats(jnp.asarray(X))
    pair = jax.tree_util.tree_map(lambda x: x[:, None], leaf), jax.tree_util.tree_map(lambda x: x[None], leaf)
    direct = np.asarray(comp.log_marginal(comp.merge(*pair)))
    w = comp.point_coordinates(leaf)
    fast = np.asarray(comp.point_pair_log_marginal(w[:, None], w[None]))
    np.testing.assert_allclose(fast, direct, rtol=1e-12, atol=1e-9)
    assert np.array_equal(fast, fast.T)  # symmetric to the last bit (ties stay ties)
    # plain numpy NIW marginal of one pair (DESIGN.md formula) as ground truth
    from scipy.special import multigammaln

    x = X[[1, 3]]
    m0, k0, nu0, S0 = map(np.asarray, (comp.mean, comp.kappa, comp.dof, comp.scale))
    xb = x.mean(0)
    Sn = S0 + (x - xb).T @ (x - xb) + k0 * 2 / (k0 + 2) * np.outer(xb - m0, xb - m0)
    ref = (
        -d * np.log(np.pi)
        + multigammaln((nu0 + 2) / 2, d)
        - multigammaln(nu0 / 2, d)
        + nu0 / 2 * np.linalg.slogdet(S0)[1]
        - (nu0 + 2) / 2 * np.linalg.slogdet(Sn)[1]
        + d / 2 * (np.log(k0) - np.log(k0 + 2))
    )
    np.testing.assert_allclose(fast[1, 3], ref, rtol=1e-12, atol=1e-9)
    # with the count cache (the prior's log-determinant read from it): the same values
    cached = np.asarray(comp.point_pair_log_marginal(w[:, None], w[None], comp.count_cache(2)))
    np.testing.assert_allclose(cached, fast, rtol=1e-13, atol=1e-12)
    # single points: `point_log_marginal` against the d x d formula and the numpy marginal
    direct1 = np.asarray(comp.log_marginal(leaf))
    for cache in (None, comp.count_cache(1)):
        np.testing.assert_allclose(np.asarray(comp.point_log_marginal(leaf, cache)), direct1, rtol=1e-12, atol=1e-9)
    S1 = S0 + k0 / (k0 + 1) * np.outer(X[2] - m0, X[2] - m0)
    ref1 = (
        -d / 2 * np.log(np.pi)
        + multigammaln((nu0 + 1) / 2, d)
        - multigammaln(nu0 / 2, d)
        + nu0 / 2 * np.linalg.slogdet(S0)[1]
        - (nu0 + 1) / 2 * np.linalg.slogdet(S1)[1]
        + d / 2 * (np.log(k0) - np.log(k0 + 1))
    )
    np.testing.assert_allclose(float(comp.point_log_marginal(take(leaf, 2))), ref1, rtol=1e-12, atol=1e-9)
    # empty statistics give 0, as `log_marginal`; a point far outside the prior's scale gives
    # NaN exactly where `log_marginal`'s elimination loses a pivot (here 1e10 prior scales)
    empty = comp.stats(jnp.zeros((0, d)))
    assert float(comp.point_log_marginal(empty)) == 0.0 == float(comp.log_marginal(empty))
    far = comp.leaf_stats(jnp.asarray(np.stack([X[0], X[1] * 1e10, X[2] * 1e3])))
    got, want = np.asarray(comp.point_log_marginal(far)), np.asarray(comp.log_marginal(far))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[1]) and np.isfinite(got[[0, 2]]).all()
    np.testing.assert_allclose(got[[0, 2]], want[[0, 2]], rtol=1e-9)  # 1e3: the elimination loses digits


def test_greedy_with_point_pairs_equals_plain_search():
    # the initial pair scores by the single-point formula give the same tree and the same
    # per-merge values as the generic merge-and-factorise path
    rng = np.random.default_rng(3)
    X = np.concatenate([rng.normal(size=(12, 3)), rng.normal(4.0, 1.0, size=(12, 3))])
    X = np.concatenate([X, X[:2]])  # duplicated points: exact ties must break the same way
    comp = jaxhc.NormalInverseWishart.from_data(X)
    leaf = comp.leaf_stats(jnp.asarray(X))
    la = jnp.log(jnp.asarray(1.0, jnp.float64))
    n = jnp.asarray(X.shape[0], jnp.int32)
    plain = bhc_core(comp, la, leaf, n, row_batch=4, points=False)
    fast = bhc_core(comp, la, leaf, n, row_batch=4, points=True)
    np.testing.assert_array_equal(np.asarray(plain[0]), np.asarray(fast[0]))
    for a, b in zip(plain[2:], fast[2:]):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-9)
    # the public entry point takes the fast path and agrees
    res = jaxhc.bhc(X, comp, 1.0)
    np.testing.assert_array_equal(np.asarray(res.tree.children), np.asarray(plain[0]))
    np.testing.assert_allclose(float(res.log_evidence), float(plain[4][-1]), rtol=0, atol=1e-9)


def test_chunked_search_with_compacted_slots_equals_one_call(monkeypatch):
    """The chunked driver halves its slots as clusters merge (`_compact_slots`, here from
    600 slots down to 75) where the saving pays for the compilation (not at this size by
    default; forced here), else moves the active slots to the front in place: the same
    merges and values as the one-call search on all slots."""
    from jaxhc.inference.bhc import greedy

    rng = np.random.default_rng(11)
    X = np.concatenate([rng.normal(size=(150, 3)) + 6 * rng.normal(size=3) for _ in range(4)])
    comp = jaxhc.NormalInverseWishart.from_data(X)
    stats = comp.leaf_stats(jnp.asarray(X))
    one = greedy.bhc_from_stats(comp, 1.0, stats, chunked=False)
    monkeypatch.setattr(greedy, "_COMPACT_MIN_SLOTS", 64)
    seen = []
    real = greedy._compact_slots
    monkeypatch.setattr(greedy, "_compact_slots", lambda st, keep, m: seen.append(m) or real(st, keep, m))
    monkeypatch.setattr(greedy, "_COMPILED_SLOTS", set())
    # the default rule: at n = 600 a halving saves far less than compiling its program costs;
    # once 300 clusters are left they move in place to the front (tiles of 200 slots: the
    # last one is skipped from then on)
    plain = greedy.bhc_from_stats(comp, 1.0, stats, chunked=True)
    assert seen == [600]
    seen.clear()

    class Free(dict):  # compiling counted as free: every halving pays
        def get(self, key, default=None):
            return 0.0

        def __setitem__(self, key, value):
            pass

    monkeypatch.setattr(greedy, "_COMPILE_SECONDS", Free())
    chunked = greedy.bhc_from_stats(comp, 1.0, stats, chunked=True)
    assert seen == [300, 150, 75]
    for res in (plain, chunked):
        assert np.array_equal(one.tree.children, res.tree.children)
        np.testing.assert_array_equal(one.log_r, res.log_r)
        np.testing.assert_array_equal(np.asarray(one.log_evidence), np.asarray(res.log_evidence))


def test_rescans_read_each_pair_from_the_later_clusters_row():
    """A merge writes only its new cluster's row of the score matrix; a stale row's rescan
    reads each pair from the row of the cluster formed later (`greedy._row_of`). On data
    whose clusters keep stealing each other's best partners (points on a noisy line: many
    rescans), the search equals the one that recomputes every rescanned row from the
    statistics (``keep_matrix=False``) and the plain reference search."""
    import reference as R

    rng = np.random.default_rng(5)
    X = np.sort(rng.uniform(0, 30, size=70))[:, None] + 0.05 * rng.normal(size=(70, 1))
    X = np.concatenate([X, 0.3 * rng.normal(size=(70, 1))], axis=1)
    comp = jaxhc.NormalInverseWishart.from_data(X, kappa=0.2)
    leaf = comp.leaf_stats(jnp.asarray(X))
    la = jnp.log(jnp.asarray(0.5, jnp.float64))
    n = jnp.asarray(X.shape[0], jnp.int32)
    kept = bhc_core(comp, la, leaf, n, row_batch=8, points=True)
    recomputed = bhc_core(comp, la, leaf, n, row_batch=8, points=True, keep_matrix=False)
    np.testing.assert_array_equal(np.asarray(kept[0]), np.asarray(recomputed[0]))
    np.testing.assert_allclose(np.asarray(kept[5]), np.asarray(recomputed[5]), rtol=0, atol=1e-10)
    ref = R.bhc_reference(
        X,
        R.make_log_marginal(
            "niw", m0=np.asarray(comp.mean), kappa0=float(comp.kappa), nu0=float(comp.dof), S0=np.asarray(comp.scale)
        ),
        0.5,
    )
    np.testing.assert_array_equal(np.asarray(kept[0]), ref["children"])
    np.testing.assert_allclose(np.asarray(kept[5]), ref["log_r"], rtol=0, atol=1e-8)


@pytest.mark.parametrize("chunked", [False, True])
def test_single_point_leaves_checked_inside_the_search(monkeypatch, chunked):
    """Leaves of single points are computed (and checked by the pivot rule) inside the
    search's own programs: data far outside the prior's scale raise the error that names the
    prior on both drivers, before the merges on the chunked one; good data give the tree of
    the leaves computed apart (the plain log marginal)."""
    from jaxhc.inference.bhc import greedy

    rng = np.random.default_rng(2)
    X = rng.normal(size=(20, 3))
    comp = jaxhc.NormalInverseWishart(np.zeros(3), 1.0, 5.0, np.eye(3))
    merges = []
    real = greedy._merges_chunk
    monkeypatch.setattr(greedy, "_merges_chunk", lambda *a: merges.append(1) or real(*a))
    with pytest.raises(ValueError, match="single points is not finite[\\s\\S]*prior does not fit"):
        greedy.bhc_from_stats(comp, 1.0, comp.leaf_stats(jnp.asarray(X * 1e10)), chunked=chunked)
    assert not merges  # the chunked driver stops before its merges
    leaf = comp.leaf_stats(jnp.asarray(X))
    res = greedy.bhc_from_stats(comp, 1.0, leaf, chunked=chunked)
    la = jnp.log(jnp.asarray(1.0, jnp.float64))
    apart = bhc_core(comp, la, leaf, jnp.asarray(20, jnp.int32), points=True, leaf_log_h1=comp.log_marginal(leaf))
    np.testing.assert_array_equal(res.tree.children, np.asarray(apart[0]))
    np.testing.assert_allclose(res.log_r, np.asarray(apart[5]), rtol=0, atol=1e-10)


@pytest.mark.parametrize("d", [1, 3, 10])
def test_point_log_marginal_flags_the_points_the_elimination_loses(d):
    """`point_log_marginal`'s closed-form pivots (ratios of leading minors) flag NaN for the
    same single points as `log_marginal`'s elimination (the same rule), away from the band
    around the threshold where the eliminated pivot is itself rounding noise; d = 1 never."""
    rng = np.random.default_rng(d)
    M = rng.normal(size=(d, d))
    comp = jaxhc.NormalInverseWishart(rng.normal(size=d), 0.3, d + 2.0, M @ M.T / d + 0.5 * np.eye(d))
    X = rng.normal(size=(300, d)) * 10.0 ** rng.uniform(0, 12, size=(300, 1))
    leaf = comp.leaf_stats(jnp.asarray(X))
    fast = np.isnan(np.asarray(comp.point_log_marginal(leaf)))
    elim = np.isnan(np.asarray(comp.log_marginal(leaf)))
    scale = np.abs(X).max(axis=1)
    clear = (scale < 1e7) | (scale > 1e9)
    np.testing.assert_array_equal(fast[clear], elim[clear])
    assert (fast == elim).mean() > 0.98
    assert fast.any() == (d > 1)
