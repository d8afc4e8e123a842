"""`trellis.solve_batch(..., layout="flat")` (one scan over all splits of all problems, with
a segment max / first argmax) equals the level-unrolled ``layout="grouped"`` DP.

Facts asserted: log Z and the MAP value of every problem agree to 1e-10 (relative to
``max(1, |value|)``: the two layouts sum features and splits in different orders; 1e-8 for
Ginkgo's exact likelihood, whose phase-space and support terms turn the 1e-13 relative
difference of the cluster masses between the two compiled programs into up to ~2e-9); every
per-subset table (``log Z(S)``, ``log phi*(S)``) agrees to the same tolerance with the same
``-inf`` pattern (padding subsets ``-inf``, backpointer 0); the backpointers are
identical, or where they differ (a tie between splits broken after different float
roundings) both MAP trees reach the MAP value (their ``log phi`` equals it).

Compilations dominate the run time: the Ginkgo tests compare against the grouped layout
with ``group_by_size=False`` (one padded program for all sizes 1..9, whose tables equal the
per-size ones, see test_trellis_sharding.py); the Dasgupta test against both.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxhc.models import ginkgo
from jaxhc.trellis import DasguptaEnergy, GinkgoEnergy, log_phi_of_tree, map_trees, solve_batch

TOL = 1e-10


def _same_inf(a, b, tol, err=""):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, err
    np.testing.assert_array_equal(np.isneginf(a), np.isneginf(b), err_msg=err)
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=err)
    fin = np.isfinite(a)
    np.testing.assert_array_equal(fin, np.isfinite(b), err_msg=err)
    assert np.all(np.abs(a[fin] - b[fin]) <= tol * np.maximum(1.0, np.abs(b[fin]))), err


def _assert_flat_equals_grouped(energy, leaves, n_leaves, crop, group_by_size=True, grouped_by_size=None, tol=TOL):
    dev = [jax.devices()[0]]
    grouped_by_size = group_by_size if grouped_by_size is None else grouped_by_size
    g = solve_batch(energy, leaves, n_leaves, devices=dev, layout="grouped", group_by_size=grouped_by_size, tables=True)
    f = solve_batch(energy, leaves, n_leaves, devices=dev, layout="flat", group_by_size=group_by_size, tables=True)
    assert f.map_tree is None and f.log_marginals is None
    for field in ("log_z", "map_log_phi", "log_z_table", "map_table", "backpointer", "n_leaves"):
        a, b = np.asarray(getattr(f, field)), np.asarray(getattr(g, field))
        assert a.shape == b.shape and a.dtype == b.dtype, field
    np.testing.assert_array_equal(np.asarray(f.n_leaves), np.asarray(g.n_leaves))
    _same_inf(f.log_z, g.log_z, tol, "log_z")
    _same_inf(f.map_log_phi, g.map_log_phi, tol, "map_log_phi")
    _same_inf(f.log_z_table, g.log_z_table, tol, "log_z_table")
    _same_inf(f.map_table, g.map_table, tol, "map_table")
    bpf, bpg = np.asarray(f.backpointer), np.asarray(g.backpointer)
    trees_f, trees_g = map_trees(f), map_trees(g)
    for b in range(len(n_leaves)):
        if np.array_equal(bpf[b], bpg[b]):
            continue
        if not np.isfinite(float(g.map_log_phi[b])):
            continue  # no possible tree: -inf either way (checked above)
        x = crop(b)
        for tree in (trees_f[b], trees_g[b]):
            want = float(g.map_log_phi[b])
            assert abs(float(log_phi_of_tree(energy, x, tree)) - want) <= tol * max(1.0, abs(want)), b
    return f, g


@pytest.fixture(scope="module")
def jets():
    sim = ginkgo.simulate(jax.random.PRNGKey(0), ginkgo.GinkgoParams(), 60, min_leaves=2, max_leaves=9)
    leaves, nl = np.asarray(sim.leaves), np.asarray(sim.n_leaves)
    # sizes 1..9: a one-leaf and a two-leaf problem (the first jet's first rows) in front
    leaves = np.concatenate([leaves[:1], leaves[:1], leaves])
    nl = np.concatenate([[1, 2], nl])
    return leaves, nl


@pytest.mark.parametrize("likelihood", ["paper", "exact"])
def test_flat_equals_grouped_ginkgo(jets, likelihood):
    leaves, nl = jets
    assert set(nl.tolist()) == set(range(1, 10))
    energy = GinkgoEnergy(lam=2.0, t_cut=16.0, likelihood=likelihood)
    tol = TOL if likelihood == "paper" else 1e-8
    f, g = _assert_flat_equals_grouped(energy, leaves, nl, lambda b: leaves[b, : nl[b]], grouped_by_size=False, tol=tol)
    assert np.all(np.isfinite(np.asarray(f.log_z)))
    # the MAP tree's log phi is the MAP value
    trees = map_trees(f)
    for b in np.flatnonzero(nl >= 2)[:15]:
        lphi = float(log_phi_of_tree(energy, leaves[b, : nl[b]], trees[b]))
        assert abs(lphi - float(f.map_log_phi[b])) <= tol * max(1.0, abs(lphi))


def _affinities(rng, sizes, n_max):
    W = np.zeros((len(sizes), n_max, n_max))
    for b, n in enumerate(sizes):
        A = rng.uniform(0.0, 1.0, (n, n))
        W[b, :n, :n] = (A + A.T) / 2
        W[b, n:, :] = W[b, :, n:] = rng.uniform(-5.0, 5.0)  # padding: never read
    return W


@pytest.mark.parametrize("group_by_size", [True, False])
def test_flat_equals_grouped_dasgupta(group_by_size):
    rng = np.random.default_rng(3)
    sizes = np.array([1, 2, 3, 4, 5, 6, 7, 3, 6, 2])
    W = _affinities(rng, sizes, 7)
    energy = DasguptaEnergy(0.7)
    f, g = _assert_flat_equals_grouped(energy, W, sizes, lambda b: W[b, : sizes[b], : sizes[b]], group_by_size)
    assert np.all(np.asarray(f.log_z_table)[:, 0] == -np.inf)
    assert np.all(np.asarray(f.backpointer)[:, 0] == 0)


def test_flat_ties_pick_the_first_split_like_grouped():
    """Zero affinities: every split of every subset ties; both layouts keep the first split
    in `_splits_of` order, so the backpointers are identical."""
    sizes = np.array([3, 5, 4, 6])
    W = np.zeros((4, 6, 6))
    f, g = _assert_flat_equals_grouped(DasguptaEnergy(1.0), W, sizes, lambda b: W[b, : sizes[b], : sizes[b]])
    np.testing.assert_array_equal(np.asarray(f.backpointer), np.asarray(g.backpointer))
    np.testing.assert_array_equal(np.asarray(f.map_log_phi), np.zeros(4))


def test_flat_impossible_problems():
    """Jets scaled down below the cut (every split impossible: log Z = MAP = -inf) among
    possible ones: -inf exactly where grouped has it, the others unaffected."""
    energy = GinkgoEnergy(lam=2.0, t_cut=16.0, likelihood="exact")
    sim = ginkgo.simulate(jax.random.PRNGKey(1), ginkgo.GinkgoParams(), 6, min_leaves=3, max_leaves=5)
    leaves, nl = np.asarray(sim.leaves).copy(), np.asarray(sim.n_leaves)
    dead = np.array([0, 3, 4])
    leaves[dead] *= 1e-3  # every cluster mass squared far below t_cut
    f, g = _assert_flat_equals_grouped(
        energy, leaves, nl, lambda b: leaves[b, : nl[b]], grouped_by_size=False, tol=1e-8
    )
    live = np.setdiff1d(np.arange(len(nl)), dead)
    for x in (f.log_z, f.map_log_phi):
        x = np.asarray(x)
        assert np.all(x[dead] == -np.inf) and np.all(np.isfinite(x[live]))
    np.testing.assert_array_equal(np.asarray(f.backpointer)[dead], np.asarray(g.backpointer)[dead])
    # each problem's result does not depend on its batch neighbours
    alone = solve_batch(energy, leaves[live], nl[live], layout="flat", tables=True)
    _same_inf(alone.log_z, np.asarray(f.log_z)[live], 1e-8)
    np.testing.assert_array_equal(np.asarray(alone.backpointer), np.asarray(f.backpointer)[live])


def test_layout_argument_checks():
    W = np.zeros((1, 3, 3))
    with pytest.raises(ValueError, match="layout"):
        solve_batch(DasguptaEnergy(), W, np.array([3]), layout="padded")
    with pytest.raises(ValueError, match="layout"):
        solve_batch(DasguptaEnergy(), W, np.array([3]), layout=1)
    with pytest.raises(ValueError, match="marginals"):
        solve_batch(DasguptaEnergy(), W, np.array([3]), layout="flat", marginals=True)
    sol = solve_batch(DasguptaEnergy(), W, np.array([3]), marginals=True)  # default: grouped
    assert sol.log_marginals.shape == (1, 8)


def test_flat_blocks_equal_one_program(jets, monkeypatch):
    """A batch above `_FLAT_BLOCK_PAIRS` splits runs in consecutive blocks padded to bucketed
    shapes (one-element problems, inert chunks, unused slots): every value and table equals
    the one-program layout exactly on a CPU (the same chunks of the same problems, in the
    same order), and the padding never reaches a result. On a GPU, XLA's scatter-add (the
    segment sums) adds in an order that can differ between two programs: log Z to the last
    bit or two there (seen on an H200, 3.6e-15), everything else exactly."""
    from jaxhc.trellis import batch as tb

    leaves, nl = jets
    leaves, nl = leaves[:16], nl[:16]
    energy = GinkgoEnergy(lam=2.0, t_cut=16.0)
    dev = [jax.devices()[0]]
    one = solve_batch(energy, leaves, nl, devices=dev, layout="flat", tables=True)
    splits = sum((3 ** int(n) + 1) // 2 - 2 ** int(n) for n in nl)
    monkeypatch.setattr(tb, "_FLAT_BLOCK_PAIRS", splits // 2)  # two or three blocks
    blocks = solve_batch(energy, leaves, nl, devices=dev, tables=True)
    for field in ("log_z", "map_log_phi", "log_z_table", "map_table", "backpointer", "n_leaves"):
        a, b = np.asarray(getattr(blocks, field)), np.asarray(getattr(one, field))
        assert a.shape == b.shape and a.dtype == b.dtype, field
        if field in ("log_z", "log_z_table") and jax.default_backend() != "cpu":
            np.testing.assert_allclose(a, b, rtol=1e-14, atol=0, err_msg=field)
        else:
            np.testing.assert_array_equal(a, b, err_msg=field)


def test_bucket_sizes():
    from jaxhc.trellis.flat import bucket_size as _bucket

    xs = np.arange(1, 5000)
    b = np.array([_bucket(int(x)) for x in xs])
    assert np.all(b >= xs) and np.all(b < 1.25 * xs + 1)  # at most 25% padding
    assert len(set(b.tolist())) <= 4 * 13  # four shapes per octave


def test_ginkgo_validate_batch_matches_the_per_jet_checks(jets):
    """GinkgoEnergy's vectorised `validate_batch` returns what the generic per-jet loop does
    (zero four-momenta as padding, whatever the padding rows held) and raises its errors,
    naming the failing jet."""
    from jaxhc.trellis.energies import Energy

    leaves, nl = jets
    energy = GinkgoEnergy(lam=2.0, t_cut=16.0)
    lp = leaves.copy()
    lp[np.arange(lp.shape[1])[None, :] >= nl[:, None]] = np.nan  # padding rows: never read
    np.testing.assert_array_equal(energy.validate_batch(lp, nl), Energy.validate_batch(energy, lp, nl))
    cases = (
        (np.nan, r"leaves_padded\[5\] contains NaN or inf values"),
        (-1.0, r"leaves_padded\[5\]: every energy E \(column 0\) must be positive"),
        (1e300, r"leaves_padded\[5\]: four-momenta up to .* too large"),
    )
    for value, msg in cases:
        bad = lp.copy()
        bad[5, 0, 0] = value
        for check in (energy.validate_batch, lambda x, n: Energy.validate_batch(energy, x, n)):
            with pytest.raises(ValueError, match=msg):
                check(bad, nl)
    with pytest.raises(ValueError, match=r"leaves_padded\[0\] must be four-momenta"):
        energy.validate_batch(lp[..., :3], nl)


def test_fastjet_ordered_four_momenta_are_refused(jets):
    """(px, py, pz, E) rows, FastJet's order, pass the old "E > 0" check whenever px > 0; the
    E >= |p| check refuses them in the single and batch paths, naming the order and the fix,
    and the rolled arrays are accepted."""
    from jaxhc.trellis import solve

    leaves, nl = jets
    energy = GinkgoEnergy(lam=2.0, t_cut=16.0)
    fj = np.roll(leaves, -1, axis=-1)
    fj[:, :, 0] = np.abs(fj[:, :, 0]) + 1.0  # px > 0: the positivity check alone passes
    msg = r"must be \(E, px, py, pz\) in GeV with E >= \|p\|.*np.roll\(x, 1, axis=-1\)"
    with pytest.raises(ValueError, match=r"leaves_padded\[\d+\]: four-momenta " + msg):
        solve_batch(energy, fj, nl)
    b = int(np.argmax(nl >= 3))
    with pytest.raises(ValueError, match=r"leaves: four-momenta " + msg):
        solve(energy, fj[b, : nl[b]], marginals=False)
    # a massless leaf (E = |p| up to rounding) is physical
    massless = leaves[b, : nl[b]].copy()
    massless[0, 0] = np.linalg.norm(massless[0, 1:]) * (1 - 1e-12)
    energy.validate_leaves(massless)


def test_batch_without_float64_warns_once(jets, monkeypatch):
    """A batch path in a process without float64 warns once, naming the setting; with
    float64 it is silent."""
    import warnings

    from jaxhc.trellis import checks as tb

    leaves, nl = jets
    energy = GinkgoEnergy(2.0, 16.0)
    monkeypatch.setattr(tb, "_WARNED_FLOAT32", [])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tb.validate_batch_inputs(energy, leaves[:3], nl[:3])  # float64 (the tests' setting): silent
    monkeypatch.setattr(tb, "_x64_enabled", lambda: False)
    with pytest.warns(RuntimeWarning, match=r"jax_enable_x64 is off.*jax.config.update\('jax_enable_x64', True\)"):
        tb.validate_batch_inputs(energy, leaves[:3], nl[:3])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tb.validate_batch_inputs(energy, leaves[:3], nl[:3])  # once only
