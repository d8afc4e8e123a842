"""The exact trellis on a Dask cluster (`jaxhc.jets.dask`; issue 24, part 2): two worker
processes give the single-process results, in float64, with a bounded number of compiled
programs per worker (counted), from concrete or delayed partitions."""

import numpy as np
import pytest

distributed = pytest.importorskip("distributed", reason="the dask extra (pip install -e '.[dask]')")
ak = pytest.importorskip("awkward", reason="the hep extra")

import dask  # noqa: E402
import jax  # noqa: E402

from jaxhc import trellis  # noqa: E402
from jaxhc.jets import dask as jd  # noqa: E402
from jaxhc.jets.hep import as_padded_jets  # noqa: E402
from jaxhc.models import ginkgo  # noqa: E402

jax.config.update("jax_enable_x64", True)

PARAMS = ginkgo.GinkgoParams(lam=2.0, t_cut=16.0)


@pytest.fixture(scope="module")
def client():
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c


def test_dask_equals_one_process(client):
    sim = ginkgo.simulate(jax.random.PRNGKey(7), PARAMS, 96, min_leaves=3, max_leaves=8)
    lp, nl = np.asarray(sim.leaves, np.float64), np.asarray(sim.n_leaves)
    e = PARAMS.energy("exact")
    parts = [(lp[a : a + 16], nl[a : a + 16]) for a in range(0, 96, 16)]
    recs = jd.solve_on_dask(client, e, parts, cache_dir=False)
    got = ak.concatenate(recs)
    ref = trellis.solve_batch(e, lp, nl)
    assert ak.to_list(got.jet_id) == list(range(96))
    # float64 on the workers: the same values as this process to the last bits
    np.testing.assert_allclose(ak.to_numpy(got.log_z), ref.log_z, rtol=1e-13)
    np.testing.assert_allclose(ak.to_numpy(got.map_log_phi), ref.map_log_phi, rtol=1e-13)
    want_left = [list(ch[: n - 1, 0]) for ch, n in zip(ref.map_children, nl)]
    assert ak.to_list(got.map_left) == want_left
    first = jd.worker_compile_counts(client)
    assert len(first) == 2 and sum(first.values()) > 0
    # partitions share shapes: a second pass over other jets compiles little or nothing
    sim2 = ginkgo.simulate(jax.random.PRNGKey(8), PARAMS, 96, min_leaves=3, max_leaves=8)
    parts2 = [(np.asarray(sim2.leaves)[a : a + 16], np.asarray(sim2.n_leaves)[a : a + 16]) for a in range(0, 96, 16)]
    client.register_plugin(jd.JaxhcWorkerPlugin(False))  # resets the counts
    jd.solve_on_dask(client, e, parts2, n_max=8, register_plugin=False)
    second = jd.worker_compile_counts(client)
    assert sum(second.values()) <= sum(first.values()), (first, second)


def test_delayed_partitions_and_bad_input(client, capsys):
    sim = ginkgo.simulate(jax.random.PRNGKey(9), PARAMS, 20, min_leaves=3, max_leaves=6)
    lp, nl = np.asarray(sim.leaves, np.float64), np.asarray(sim.n_leaves)
    e = PARAMS.energy("paper")
    make = dask.delayed(lambda a, b: (lp[a:b], nl[a:b]))
    capsys.readouterr()
    recs = jd.solve_on_dask(client, e, [make(0, 10), make(10, 20)], n_max=6, cache_dir=False)
    assert "partitions" in capsys.readouterr().err  # the progress bar over partitions
    got = np.concatenate([ak.to_numpy(r.log_z) for r in recs])
    np.testing.assert_allclose(got, trellis.solve_batch(e, lp, nl).log_z, rtol=1e-13)
    capsys.readouterr()
    jd.solve_on_dask(client, e, [make(0, 10)], n_max=6, register_plugin=False, progress_bar=False)
    assert "partitions" not in capsys.readouterr().err
    with pytest.raises(ValueError, match="n_max is required"):
        jd.solve_on_dask(client, e, [make(0, 10)])
    with pytest.raises(TypeError, match="Energy"):
        jd.solve_on_dask(client, "ginkgo", [(lp, nl)])


def test_a_bad_jet_is_skipped_on_the_workers(client):
    """One jet with a NaN: its partition's other jets are solved, its record says why."""
    sim = ginkgo.simulate(jax.random.PRNGKey(11), PARAMS, 16, min_leaves=3, max_leaves=6)
    lp, nl = np.array(sim.leaves, np.float64), np.asarray(sim.n_leaves)
    lp[5, 1, 2] = np.nan
    e = PARAMS.energy("exact")
    recs = jd.solve_on_dask(client, e, [(lp[:8], nl[:8]), (lp[8:], nl[8:])], cache_dir=False, progress_bar=False)
    got = ak.concatenate(recs)
    valid = ak.to_numpy(got.valid)
    assert np.flatnonzero(~valid).tolist() == [5]
    assert "NaN" in ak.to_list(got.reason)[5]
    keep = np.flatnonzero(valid)
    ref = trellis.solve_batch(e, lp[keep], nl[keep])
    np.testing.assert_allclose(ak.to_numpy(got.log_z)[keep], ref.log_z, rtol=1e-13)
    with pytest.raises(ValueError, match=r"1 of 8 problems fail the checks \(index 5\)"):
        jd.solve_on_dask(client, e, [(lp[:8], nl[:8])], register_plugin=False, progress_bar=False, on_invalid="raise")


def test_every_jet_once_on_the_workers(client):
    """Partitions holding jets of every kind (issue 58): in the leaf range 3-5, outside it,
    above the exact limit, off shell or NaN. One record per jet, ids 0..B-1 each once, with
    its status; the solved jets equal one process's solve."""
    sim = ginkgo.simulate(jax.random.PRNGKey(12), PARAMS, 20, min_leaves=2, max_leaves=6)
    lp, nl = np.asarray(sim.leaves, np.float64), np.asarray(sim.n_leaves)
    jets = [lp[b, : nl[b]].copy() for b in range(len(nl))]
    want = ["solved" if 3 <= n <= 5 else "outside_leaf_range" for n in nl]
    p = np.random.default_rng(0).normal(size=(26, 3)) * 5.0 + 20.0
    jets.insert(7, np.concatenate([np.linalg.norm(p, axis=1)[:, None], p], axis=1))
    want.insert(7, "above_exact_limit")
    for k, b in enumerate([i for i, w in enumerate(want) if w == "solved"][:2]):
        if k == 0:
            jets[b][0, 0] = 0.5 * np.linalg.norm(jets[b][0, 1:])  # E = |p| / 2
        else:
            jets[b][1, 3] = np.nan
        want[b] = "invalid"
    assert set(want) == {"solved", "outside_leaf_range", "above_exact_limit", "invalid"}
    e = PARAMS.energy("exact")
    parts = [jets[a : a + 6] for a in range(0, len(jets), 6)]
    recs = jd.solve_on_dask(client, e, parts, min_leaves=3, max_leaves=5, cache_dir=False, progress_bar=False)
    got = ak.concatenate(recs)
    assert ak.to_list(got.jet_id) == list(range(len(jets)))
    assert ak.to_list(got.status) == want
    assert ak.to_list(got.n_leaves) == [len(j) for j in jets]
    solved = [b for b, w in enumerate(want) if w == "solved"]
    ref = trellis.solve_batch(e, *as_padded_jets([jets[b] for b in solved]))
    np.testing.assert_allclose(ak.to_numpy(got.log_z)[solved], ref.log_z, rtol=1e-13)
    assert not np.any(ak.to_numpy(got.valid)[[b for b, w in enumerate(want) if w != "solved"]])
    with pytest.raises(ValueError, match="max_leaves=30 is above the exact trellis limit"):
        jd.solve_on_dask(client, e, parts, max_leaves=30, register_plugin=False)
