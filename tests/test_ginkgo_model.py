"""The Ginkgo shower as a NumPyro program (jaxhc.models.ginkgo).

Ground truth: four-momentum conservation and the kinematic bounds of every simulated split;
the NumPyro trace's own log density against our tree likelihood; the phase-space Jacobian
of the two-body decay computed by autodiff; the distribution of jets made by the authors'
Ginkgo generator (tests/data/ginkgo_generator_jets_lam2.0.json); the ClusterTrellis
reference likelihoods; brute force over all trees and over all drawing orders.
"""

import functools
import itertools
import json
import math
import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from numpyro.infer.util import log_density
from scipy import integrate, stats

from jaxhc import Tree, trellis
from jaxhc.models import ginkgo

from reference import all_binary_trees

DATA = os.path.join(os.path.dirname(__file__), "data")
P0 = ginkgo.GinkgoParams()


def _m2(p):
    p = np.asarray(p, np.float64)
    return p[..., 0] ** 2 - np.sum(p[..., 1:] ** 2, axis=-1)


@pytest.fixture(scope="module")
def jets():
    return ginkgo.simulate(
        jax.random.PRNGKey(0), ginkgo.GinkgoParams(lam=1.5, lam_root=3.0), 400, min_leaves=2, max_leaves=14
    )


def _trace_and_state(key, lam=2.0, lam_root=None, max_nodes=63):
    model = numpyro.handlers.seed(ginkgo.shower, key)
    tr = numpyro.handlers.trace(model).get_trace(lam, 16.0, None, lam_root, max_nodes=max_nodes)
    state = model(lam, 16.0, None, lam_root, max_nodes=max_nodes)
    return tr, state


# ---------------------------------------------------------------------------------------
# kinematics of simulated jets
# ---------------------------------------------------------------------------------------
def test_simulated_splits_conserve_momentum_and_respect_bounds(jets):
    tc = float(P0.t_cut)
    for b in range(len(jets)):
        tree, cont, t = jets.trees[b], jets.content[b], jets.t[b]
        n = tree.n_leaves
        ch = np.asarray(tree.children)
        # the leaves in `leaves` are the content of the leaf nodes
        np.testing.assert_array_equal(cont[:n], jets.jet(b))
        # the root is the given root momentum
        np.testing.assert_allclose(cont[2 * n - 2], np.asarray(P0.root_momentum()), rtol=1e-12, atol=1e-9)
        for k in range(n - 1):
            P, L, R = n + k, ch[k, 0], ch[k, 1]
            np.testing.assert_allclose(cont[L] + cont[R], cont[P], rtol=0, atol=1e-9 * np.abs(cont[P]).max())
            assert math.sqrt(t[L]) + math.sqrt(t[R]) <= math.sqrt(t[P]) * (1 + 1e-12)
            assert t[P] > tc
        assert np.all(t[:n] <= tc) and np.all(t[:n] >= 0)
        # the drawn masses are the masses of the momenta (float64; E ~ 400)
        np.testing.assert_allclose(_m2(cont), t, rtol=1e-6, atol=1e-6)
        # every leaf sums to the jet
        np.testing.assert_allclose(jets.jet(b).sum(0), cont[2 * n - 2], atol=1e-9 * 400)


def test_simulate_same_key_same_jets_and_selection():
    a = ginkgo.simulate(jax.random.PRNGKey(5), P0, 50, min_leaves=5, max_leaves=7)
    b = ginkgo.simulate(jax.random.PRNGKey(5), P0, 50, min_leaves=5, max_leaves=7)
    c = ginkgo.simulate(jax.random.PRNGKey(6), P0, 50, min_leaves=5, max_leaves=7)
    np.testing.assert_array_equal(a.leaves, b.leaves)
    assert not np.array_equal(a.leaves, c.leaves)
    assert a.leaves.shape == (50, 7, 4) and np.all((a.n_leaves >= 5) & (a.n_leaves <= 7))
    for i in range(50):  # zero padding after each jet's leaves
        assert np.all(a.leaves[i, a.n_leaves[i] :] == 0)


def test_distribution_matches_the_authors_generator():
    """300 jets of the authors' Ginkgo generator (lam = 2, no selection) against ours:
    number of leaves and the root split's first-drawn mass fraction."""
    with open(os.path.join(DATA, "ginkgo_generator_jets_lam2.0.json")) as f:
        ref = json.load(f)
    ours = ginkgo.simulate(jax.random.PRNGKey(11), P0, 4000)
    nl_ref = np.array([len(j["leaves"]) for j in ref])
    # chi-square on binned leaf counts (3-5, 6, 7, 8, 9, 10+)
    edges = [0, 6, 7, 8, 9, 10, 100]
    obs = np.histogram(nl_ref, edges)[0]
    p = np.histogram(ours.n_leaves, edges)[0] / len(ours)
    chi2 = stats.chisquare(obs, p * len(ref))
    assert chi2.pvalue > 1e-3, (obs, p * len(ref))
    frac_ref = np.array([_m2(j["content"][j["tree"][0][0]]) / j["root_t"] for j in ref])
    frac_ours = np.array([ours.t[b][ours.trees[b].children[-1, 0]] / P0.root_mass2 for b in range(len(ours))])
    assert stats.ks_2samp(frac_ref, frac_ours).pvalue > 1e-3
    # and against the closed form of the truncated exponential (the first draw at the root)
    cdf = lambda x: np.expm1(-2.0 * x) / np.expm1(-2.0)
    assert stats.kstest(frac_ours, cdf).pvalue > 1e-3


# ---------------------------------------------------------------------------------------
# the trace's density is our likelihood
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed,lam,lam_root", [(0, 2.0, None), (1, 1.5, 3.0), (2, 3.0, 0.7), (3, 2.0, None)])
def test_trace_log_density_equals_tree_log_likelihood(seed, lam, lam_root):
    key = jax.random.PRNGKey(seed)
    tr, state = _trace_and_state(key, lam, lam_root)
    values = {k: v["value"] for k, v in tr.items() if v["type"] == "sample"}
    lp, _ = log_density(ginkgo.shower, (lam, 16.0, None, lam_root), {"max_nodes": 63}, values)
    jb = ginkgo.jets_from_states(jax.tree_util.tree_map(lambda x: np.asarray(x)[None], state))
    params = ginkgo.GinkgoParams(lam=lam, lam_root=lam_root)
    ll = ginkgo.tree_log_likelihood(jb.trees[0], jb.jet(0), params, ordered=True, phase_space=False)
    assert int(jb.n_leaves[0]) >= 2
    np.testing.assert_allclose(float(ll), float(lp), rtol=1e-9, atol=1e-7)
    # the phase-space term is the only difference between the two coordinates
    ll_ps = ginkgo.tree_log_likelihood(jb.trees[0], jb.jet(0), params, ordered=True, phase_space=True)
    cont, ch = jb.content[0], np.asarray(jb.trees[0].children)
    n = jb.trees[0].n_leaves
    tm = _m2(cont)
    jac = sum(
        math.log(8 * tm[n + k])
        - 0.5
        * math.log(
            tm[n + k] ** 2 + tm[a] ** 2 + tm[b] ** 2 - 2 * (tm[n + k] * tm[a] + tm[n + k] * tm[b] + tm[a] * tm[b])
        )
        for k, (a, b) in enumerate(ch)
    )
    np.testing.assert_allclose(float(ll_ps) - float(ll), jac, rtol=1e-9)


def test_unordered_likelihood_sums_over_drawing_orders(jets):
    """exact, unordered = log sum over the 2^(n-1) choices of which child was drawn first.
    One jet of each size 3..7 (the identity is exact, so a second jet of a size adds little;
    124 ordered likelihoods instead of the 224 of six jets of 5..7 leaves)."""
    params = jets.params
    done = set()
    for b in range(len(jets)):
        n = int(jets.n_leaves[b])
        if not 3 <= n <= 7 or n in done:
            continue
        tree = jets.trees[b]
        ch = np.asarray(tree.children)
        vals = []
        for flips in itertools.product([False, True], repeat=n - 1):
            c2 = np.where(np.array(flips)[:, None], ch[:, ::-1], ch)
            vals.append(float(ginkgo.tree_log_likelihood(Tree(c2), jets.jet(b), params, ordered=True)))
        want = np.logaddexp.reduce(vals)
        got = float(ginkgo.tree_log_likelihood(tree, jets.jet(b), params))
        np.testing.assert_allclose(got, want, rtol=1e-10)
        done.add(n)
    assert done == {3, 4, 5, 6, 7}


def test_phase_space_jacobian_of_the_decay():
    """d^4 p_L = sqrt(K) / (8 t_P) dt_L dt_R dcos(theta) dphi (the data README's term)."""
    rng = np.random.default_rng(0)
    for _ in range(5):
        p3 = rng.normal(size=3) * 200
        tP = rng.uniform(50, 900)
        P = jnp.asarray(np.concatenate([[math.sqrt(tP + p3 @ p3)], p3]))
        tL = rng.uniform(0, 0.8) * tP
        tR = rng.uniform(0, 0.8) * (math.sqrt(tP) - math.sqrt(tL)) ** 2
        x = jnp.asarray([tL, tR, rng.uniform(-0.9, 0.9), rng.uniform(0, 6.2)])
        f = lambda v: ginkgo.decay(P, v[0], v[1], v[2], v[3])[0]
        J = np.asarray(jax.jacfwd(f)(x))
        K = tP**2 + tL**2 + tR**2 - 2 * (tP * tL + tP * tR + tL * tR)
        np.testing.assert_allclose(abs(np.linalg.det(J)), math.sqrt(K) / (8 * tP), rtol=1e-7)
        p1, p2 = ginkgo.decay(P, tL, tR, x[2], x[3])
        np.testing.assert_allclose(np.asarray(p1 + p2), np.asarray(P), rtol=1e-12, atol=1e-10)
        np.testing.assert_allclose([_m2(p1), _m2(p2)], [tL, tR], rtol=1e-8, atol=1e-7)


def test_truncated_exponential_is_a_density():
    for lam, s in [(2.0, 900.0), (0.3, 5.0), (7.0, 1.0)]:
        d = ginkgo.TruncatedExponential(lam, s)
        total, _ = integrate.quad(lambda t: math.exp(float(d.log_prob(t))), 0, s)
        np.testing.assert_allclose(total, 1.0, rtol=1e-9)
        x = d.sample(jax.random.PRNGKey(0), (200000,))
        assert float(x.min()) >= 0 and float(x.max()) < s
        np.testing.assert_allclose(float(x.mean()), float(d.mean), rtol=0.01)
        with warnings.catch_warnings():
            # numpyro >= 0.22 warns of the out-of-support value (0.21 does not): not ours
            warnings.simplefilter("ignore", UserWarning)
            assert float(d.log_prob(s * 1.01)) == -np.inf


# ---------------------------------------------------------------------------------------
# agreement with the reference data
# ---------------------------------------------------------------------------------------
def test_paper_likelihood_of_true_trees_matches_reference_data():
    with open(os.path.join(DATA, "ginkgo_jets_reference.json")) as f:
        ref = json.load(f)
    jb = ginkgo.load_jets(ref)
    for b, j in enumerate(ref):
        params = ginkgo.GinkgoParams(lam=j["lam"], lam_root=j["lam_root"], t_cut=j["t_cut"], root_mass2=j["root_t"])
        ll = ginkgo.tree_log_likelihood(jb.trees[b], jb.jet(b), params, likelihood="paper")
        # the generator's record was computed from its own float32 node contents
        np.testing.assert_allclose(float(ll), j["truth_log_likelihood"], rtol=1e-6)
    with open(os.path.join(DATA, "ginkgo_generator_jets_lam2.0.json")) as f:
        gen = json.load(f)
    jb = ginkgo.load_jets(gen)
    # the generator's own record (its leaves are stored in float32 precision)
    got = [float(ginkgo.tree_log_likelihood(jb.trees[b], jb.jet(b), P0, likelihood="paper")) for b in range(60)]
    np.testing.assert_allclose(got, [j["truth_log_likelihood_paper"] for j in gen[:60]], atol=1e-4)


def test_save_load_round_trip(tmp_path, jets):
    path = tmp_path / "jets.json"
    sub = jets.select(np.arange(12))
    ginkgo.save_jets(path, sub)
    back = ginkgo.load_jets(path)
    np.testing.assert_allclose(back.leaves, sub.leaves[:, : back.leaves.shape[1]])
    for b in range(12):
        assert back.trees[b].same_hierarchy(sub.trees[b])
        ll0 = ginkgo.tree_log_likelihood(sub.trees[b], sub.jet(b), jets.params, ordered=True)
        ll1 = ginkgo.tree_log_likelihood(back.trees[b], back.jet(b), jets.params, ordered=True)
        np.testing.assert_allclose(float(ll1), float(ll0), rtol=1e-12)


# ---------------------------------------------------------------------------------------
# the trellis sums the exact density over all trees (lam_root included)
# ---------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _all_trees(n):
    """Every binary tree over n leaves, with its node bitmasks and children (enumerated once
    per n: the test checks two jets of most sizes)."""
    trees = list(all_binary_trees(n))
    bm = np.stack([np.asarray(t.bitmasks()) for t in trees])  # [T, 2n-1]
    ch = np.stack([np.asarray(t.children) for t in trees])  # [T, n-1, 2]
    return trees, bm[:, n:], np.take_along_axis(bm, ch[:, :, 0], 1), np.take_along_axis(bm, ch[:, :, 1], 1)


@jax.jit
def _sum_log_psi(energy, X, par, left, right):
    """log phi = sum over merges of log psi, for a batch of trees given by their merges'
    bitmasks (one compiled program per size instead of every primitive run eagerly)."""
    feats = energy.features(X)
    take = lambda i: jax.tree_util.tree_map(lambda x: x[i], feats)  # noqa: E731
    return jnp.sum(energy.log_psi(take(par), take(left), take(right)), axis=1)


def _all_tree_values(energy, X, n):
    """log phi of every one of the (2n-3)!! trees, vectorised (and a few by tree_log_likelihood)."""
    trees, par, left, right = _all_trees(n)
    vals = np.asarray(_sum_log_psi(energy, jnp.asarray(X), jnp.asarray(par), jnp.asarray(left), jnp.asarray(right)))
    return trees, vals


def test_exact_log_z_equals_brute_force_over_trees(jets):
    params = jets.params
    e = params.energy("exact")
    done = {}
    for b in range(len(jets)):
        n = int(jets.n_leaves[b])
        if n not in (4, 5, 6, 7) or done.get(n, 0) >= (2 if n < 7 else 1):
            continue
        X = jets.jet(b)
        trees, vals = _all_tree_values(e, X, n)
        # the vectorised values are tree_log_likelihood's
        for i in (0, len(trees) // 2, int(np.argmax(vals))):
            np.testing.assert_allclose(float(ginkgo.tree_log_likelihood(trees[i], X, params)), vals[i], rtol=1e-12)
        sol = trellis.solve(e, X, marginals=False)
        np.testing.assert_allclose(float(sol.log_z), np.logaddexp.reduce(vals), rtol=1e-10)
        np.testing.assert_allclose(float(sol.map_log_phi), vals.max(), rtol=1e-10)
        # the true tree is among them and has positive density
        assert np.isfinite(float(ginkgo.tree_log_likelihood(jets.trees[b], X, params)))
        done[n] = done.get(n, 0) + 1
    assert sum(done.values()) >= 5


def test_lam_root_in_padded_batches_equals_single_solves(jets):
    params = jets.params
    e = params.energy("exact")
    sub = jets.select(np.flatnonzero((jets.n_leaves >= 3) & (jets.n_leaves <= 6))[:8])
    for group in (True, False):
        batch = trellis.solve_batch(e, sub.leaves, sub.n_leaves, group_by_size=group)
        for b in range(len(sub)):
            s = trellis.solve(e, sub.jet(b), marginals=False)
            np.testing.assert_allclose(float(batch.log_z[b]), float(s.log_z), rtol=1e-10)
            np.testing.assert_allclose(float(batch.map_log_phi[b]), float(s.map_log_phi), rtol=1e-10)
    # lam_root matters: tying it to lam changes log Z
    tied = ginkgo.GinkgoParams(lam=params.lam).energy("exact")
    assert abs(float(trellis.solve(tied, sub.jet(0)).log_z) - float(trellis.solve(e, sub.jet(0)).log_z)) > 1e-3


def test_gradient_of_tree_log_likelihood_in_lam(jets):
    b = int(np.flatnonzero(jets.n_leaves >= 5)[0])
    f = lambda lam: ginkgo.tree_log_likelihood(jets.trees[b], jets.jet(b), ginkgo.GinkgoParams(lam=lam, lam_root=3.0))
    g = float(jax.grad(f)(1.5))
    h = 1e-5
    np.testing.assert_allclose(g, (float(f(1.5 + h)) - float(f(1.5 - h))) / (2 * h), rtol=1e-6)


# ---------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------
def test_bad_input():
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match="lam"):
        ginkgo.simulate(key, ginkgo.GinkgoParams(lam=-1.0), 3)
    with pytest.raises(ValueError, match="lam_root"):
        ginkgo.simulate(key, ginkgo.GinkgoParams(lam_root=0.0), 3)
    with pytest.raises(ValueError, match="root_p3"):
        ginkgo.simulate(key, ginkgo.GinkgoParams(root_p3=(1.0, 2.0)), 3)
    with pytest.raises(ValueError, match="t_cut"):
        ginkgo.simulate(key, ginkgo.GinkgoParams(t_cut=float("nan")), 3)
    with pytest.raises(ValueError, match="num_jets"):
        ginkgo.simulate(key, P0, 0)
    with pytest.raises(ValueError, match="max_leaves"):
        ginkgo.simulate(key, P0, 3, min_leaves=5, max_leaves=4)
    with pytest.raises(ValueError, match="max_nodes"):
        ginkgo.simulate(key, P0, 3, max_leaves=10, max_nodes=9)
    with pytest.raises(ValueError, match="max_nodes"):  # capacity exhausted, never truncated
        ginkgo.simulate(key, P0, 200, max_nodes=7)
    with pytest.raises(ValueError, match="single leaf"):
        ginkgo.simulate(key, ginkgo.GinkgoParams(root_mass2=10.0), 3, min_leaves=2)
    with pytest.raises(ValueError, match="leaf range|max_draws"):
        ginkgo.simulate(key, P0, 3, min_leaves=60, max_leaves=61, max_draws=2048)
    tree = Tree.from_nested(((0, 1), 2))
    with pytest.raises(ValueError, match="leaves"):
        ginkgo.tree_log_likelihood(tree, np.ones((3, 3)), P0)
    with pytest.raises(ValueError, match="3 leaves"):
        ginkgo.tree_log_likelihood(tree, np.ones((4, 4)) * [10, 1, 1, 1], P0)
    with pytest.raises(ValueError, match="positive"):
        ginkgo.tree_log_likelihood(tree, np.array([[10, 1, 1, 1], [-1, 0, 0, 0], [5, 1, 0, 0.0]]), P0)
    with pytest.raises(TypeError, match="tree"):
        ginkgo.tree_log_likelihood(((0, 1), 2), np.ones((3, 4)), P0)
    with pytest.raises(ValueError, match="likelihood"):
        ginkgo.tree_log_likelihood(tree, np.ones((3, 4)), P0, likelihood="nope")
    with pytest.raises(ValueError, match="jet 0"):
        ginkgo.load_jets([{"leaves": [[1, 2, 3]]}])
    with pytest.raises(ValueError, match="non-empty"):
        ginkgo.load_jets([])
    with pytest.raises(ValueError, match="malformed 'tree'"):
        ginkgo.load_jets(
            [{"leaves": [[5, 1, 0, 0], [5, -1, 0, 0]], "tree": [[1, 7], [-1, -1]], "content": [[10, 0, 0, 0]]}]
        )


# ---------------------------------------------------------------------------------------
# learning lam with the trees summed out (simulated jets, no selection on the leaf count)
# ---------------------------------------------------------------------------------------
def test_score_in_lam_changes_sign_around_the_generating_value():
    """d/dlam of the mean exact log Z over 300 simulated jets is > 0 below the generating
    lam and < 0 above it. Root mass 20: every jet is small enough for the exact trellis, so
    no selection on the number of leaves (a lam-dependent selection would bias the score)."""
    params = ginkgo.GinkgoParams(lam=2.0, root_mass2=400.0)
    data = ginkgo.simulate(jax.random.PRNGKey(21), params, 300)
    assert data.n_leaves.max() <= 12
    batch = trellis.prepare_batch(params.energy("exact"), data.leaves, data.n_leaves)
    score = jax.grad(
        lambda lam: jnp.mean(trellis.log_partition_prepared(trellis.GinkgoEnergy(lam, 16.0, "exact"), batch))
    )
    s_lo, s_hi = float(score(1.6)), float(score(2.5))
    assert s_lo > 0 > s_hi, (s_lo, s_hi)
    # and the score is a proper gradient: finite everywhere, also through zero-padded layouts
    padded = trellis.prepare_batch(params.energy("exact"), data.leaves[:40], data.n_leaves[:40], group_by_size=False)
    g = jax.grad(lambda lam: jnp.sum(trellis.log_partition_prepared(trellis.GinkgoEnergy(lam, 16.0, "exact"), padded)))
    grouped = trellis.prepare_batch(params.energy("exact"), data.leaves[:40], data.n_leaves[:40])
    g2 = jax.grad(
        lambda lam: jnp.sum(trellis.log_partition_prepared(trellis.GinkgoEnergy(lam, 16.0, "exact"), grouped))
    )
    assert np.isfinite(float(g(2.0)))
    np.testing.assert_allclose(float(g(2.0)), float(g2(2.0)), rtol=1e-9)
