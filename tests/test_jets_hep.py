"""Jets as awkward arrays (`jaxhc.jets.hep`, the ``hep`` extra): jagged four-vector input
equal to the padded path, compact batch results equal to the tables they summarise, and
records that survive parquet and ROOT files (issue 23, parts 1 and 3)."""

import os

import jax
import numpy as np
import pytest

ak = pytest.importorskip("awkward", reason="the hep extra (pip install -e '.[hep]')")
vector = pytest.importorskip("vector")
try:
    import fastjet  # noqa: F401

    HAS_FASTJET = True
except ImportError:  # the jets extra; CI installs it
    HAS_FASTJET = False

from jaxhc import trellis  # noqa: E402
from jaxhc.jets import hep  # noqa: E402
from jaxhc.models import ginkgo  # noqa: E402

jax.config.update("jax_enable_x64", True)

PARAMS = ginkgo.GinkgoParams(lam=2.0, t_cut=16.0)
ENERGY = PARAMS.energy("exact")


@pytest.fixture(scope="module")
def jets():
    sim = ginkgo.simulate(jax.random.PRNGKey(3), PARAMS, 12, min_leaves=2, max_leaves=5)
    lp, nl = np.asarray(sim.leaves, np.float64), np.asarray(sim.n_leaves)
    recs = [[dict(E=r[0], px=r[1], py=r[2], pz=r[3]) for r in lp[b, : nl[b]]] for b in range(len(nl))]
    return lp, nl, ak.Array(recs)


def test_awkward_records_equal_the_padded_path(jets):
    lp, nl, A = jets
    ref = trellis.solve_batch(ENERGY, lp, nl, tables=True)
    got = trellis.solve_batch(ENERGY, A, tables=True)
    for f in ("log_z", "map_log_phi", "log_z_table", "map_table", "backpointer", "n_leaves"):
        np.testing.assert_array_equal(np.asarray(getattr(got, f)), np.asarray(getattr(ref, f)), err_msg=f)
    np.testing.assert_array_equal(
        np.asarray(trellis.log_partition_batch(ENERGY, A)), np.asarray(trellis.log_partition_batch(ENERGY, lp, nl))
    )
    prep = trellis.prepare_batch(ENERGY, A)
    np.testing.assert_array_equal(
        np.asarray(trellis.log_partition_prepared(ENERGY, prep)),
        np.asarray(trellis.log_partition_prepared(ENERGY, trellis.prepare_batch(ENERGY, lp, nl))),
        err_msg="prepare_batch",
    )
    one = trellis.solve(ENERGY, A[4])
    want = trellis.solve(ENERGY, lp[4, : nl[4]])
    assert float(one.log_z) == float(want.log_z)
    assert np.array_equal(one.map_tree.children, want.map_tree.children)
    # n_leaves, when given with awkward input, must agree with the array
    trellis.solve_batch(ENERGY, A, nl)
    with pytest.raises(ValueError, match="n_leaves disagrees"):
        trellis.solve_batch(ENERGY, A, nl + 1)


def test_vector_coordinates(jets):
    """`vector` Momentum4D records in (pt, eta, phi, mass) coordinates: the same jets, up to
    the rounding of the coordinate change."""
    lp, nl, A = jets
    v = vector.zip({"px": A.px, "py": A.py, "pz": A.pz, "E": A.E})
    ptm = vector.zip({"pt": v.pt, "eta": v.eta, "phi": v.phi, "mass": v.mass})
    pad, counts = hep.jets_from_awkward(ptm)
    np.testing.assert_array_equal(counts, nl)
    np.testing.assert_allclose(
        pad, np.where(np.arange(lp.shape[1])[None, :, None] < nl[:, None, None], lp, 0.0), rtol=1e-12, atol=1e-9
    )
    got = trellis.solve_batch(ENERGY, ptm)
    ref = trellis.solve_batch(ENERGY, lp, nl)
    np.testing.assert_allclose(got.log_z, ref.log_z, rtol=1e-10)
    np.testing.assert_array_equal(got.map_children, ref.map_children)


def test_compact_results_summarise_the_tables(jets):
    lp, nl, A = jets
    full = trellis.solve_batch(ENERGY, A, marginals=True, tables=True)
    small = trellis.solve_batch(ENERGY, A, marginals=True)  # default for B > 1: compact
    assert small.log_z_table is None and small.backpointer is None and small.log_marginals is None
    np.testing.assert_array_equal(small.log_z, np.asarray(full.log_z))
    np.testing.assert_array_equal(small.map_log_phi, np.asarray(full.map_log_phi))
    lm_tab = np.asarray(full.log_marginals)
    for b, (t_full, t_small) in enumerate(zip(trellis.map_trees(full), trellis.map_trees(small))):
        n = int(nl[b])
        assert np.array_equal(t_full.children, t_small.children)
        # the marginal of each MAP cluster, read from the table by its bitmask
        masks = [int(sum(1 << i for i in np.flatnonzero(row))) for row in t_full.leaf_sets()[n:]]
        np.testing.assert_array_equal(small.map_log_marginals[b, : n - 1], lm_tab[b, masks])
        assert np.all(np.isnan(small.map_log_marginals[b, n - 1 :]))
        assert np.all(small.map_children[b, n - 1 :] == -1)
        # a cluster of the MAP tree has marginal probability in (0, 1]; the root's is 1
        if n > 1:
            assert small.map_log_marginals[b, n - 2] == pytest.approx(0.0, abs=1e-10)
            assert np.all(small.map_log_marginals[b, : n - 1] <= 1e-10)
    # one problem keeps its tables by default; tables=... overrides either way
    assert trellis.solve_batch(ENERGY, A[:1]).log_z_table is not None
    assert trellis.solve_batch(ENERGY, A[:1], tables=False).log_z_table is None
    with pytest.raises(TypeError, match="tables must be"):
        trellis.solve_batch(ENERGY, A, tables="yes")


def test_records_round_trip_through_parquet_and_root(jets, tmp_path):
    lp, nl, A = jets
    sol = trellis.solve_batch(ENERGY, A, marginals=True)
    rec = hep.to_awkward(sol)
    assert len(rec) == len(nl)
    np.testing.assert_array_equal(ak.to_numpy(ak.num(rec.map_left, axis=1)), np.maximum(nl - 1, 0))
    path = os.path.join(tmp_path, "trees.parquet")
    ak.to_parquet(rec, path)
    back = hep.from_awkward(ak.from_parquet(path))
    for f in ("log_z", "map_log_phi", "n_leaves", "map_children"):
        np.testing.assert_array_equal(getattr(back, f), getattr(sol, f), err_msg=f)
    np.testing.assert_array_equal(back.map_log_marginals, sol.map_log_marginals)
    # from tables, too
    rec2 = hep.to_awkward(trellis.solve_batch(ENERGY, A, tables=True))
    assert "map_log_marginals" not in ak.fields(rec2)
    np.testing.assert_array_equal(ak.to_numpy(ak.flatten(rec2.map_left)), ak.to_numpy(ak.flatten(rec.map_left)))

    uproot = pytest.importorskip("uproot")
    root = os.path.join(tmp_path, "trees.root")
    with uproot.recreate(root) as f:
        f["jets"] = {k: rec[k] for k in ak.fields(rec)}  # an RNTuple (uproot 5.7's default)
        f.mktree("tree", {k: rec[k].type.content for k in ak.fields(rec)})  # and a TTree
        f["tree"].extend({k: rec[k] for k in ak.fields(rec)})
    with uproot.open(root) as f:
        assert f.classnames()["tree;1"] == "TTree"
        for name in ("jets", "tree"):
            back2 = hep.from_awkward(f[name].arrays())
            np.testing.assert_array_equal(back2.map_children, sol.map_children)
            np.testing.assert_array_equal(back2.log_z, sol.log_z)
            np.testing.assert_array_equal(back2.map_log_marginals, sol.map_log_marginals)


def test_bad_awkward_input(jets):
    lp, nl, A = jets
    with pytest.raises(ValueError, match="jagged array of jets"):
        trellis.solve_batch(ENERGY, ak.flatten(A))
    with pytest.raises(ValueError, match="four-vectors"):
        trellis.solve_batch(ENERGY, ak.Array([[{"a": 1.0, "b": 2.0}]]))
    with pytest.raises(TypeError, match="n_leaves is required"):
        trellis.solve_batch(ENERGY, lp)
    with pytest.raises(ValueError, match="expected the output of jaxhc.jets.to_awkward"):
        hep.from_awkward(ak.Array([{"log_z": 1.0}]))
    # FastJet's order (px, py, pz, E) given as records is caught by the energy's checks
    swapped = ak.zip({"E": A.px, "px": A.py, "py": A.pz, "pz": A.E})
    with pytest.raises(ValueError, match=r"\(E, px, py, pz\)"):
        trellis.solve_batch(ENERGY, swapped)


def test_awkward_in_jet_studies_and_the_lambda_fit(jets):
    from jaxhc import fit_lambda
    from jaxhc.jets import compare_map_methods, kt_tree_numpy

    lp, nl, A = jets
    b = int(np.argmax(nl))
    assert np.array_equal(kt_tree_numpy(A[b], p=0).children, kt_tree_numpy(lp[b, : nl[b]], p=0).children)
    got = compare_map_methods(ENERGY, A, methods=("trellis", "greedy"))
    want = compare_map_methods(ENERGY, lp, nl, methods=("trellis", "greedy"))
    np.testing.assert_array_equal(got.n_leaves, want.n_leaves)
    for m in ("trellis", "greedy"):
        np.testing.assert_array_equal(got.log_phi[m], want.log_phi[m], err_msg=m)
    if HAS_FASTJET:  # the FastJet baseline too
        from jaxhc.jets import kt_tree

        assert np.array_equal(kt_tree(A[b], p=-1).children, kt_tree(lp[b, : nl[b]], p=-1).children)
    from jaxhc import sample_lambda

    key = jax.random.key(0)
    sa = sample_lambda(key, A, t_cut=16.0, num_warmup=10, num_samples=10, progress_bar=False)
    sp = sample_lambda(key, lp, nl, 16.0, num_warmup=10, num_samples=10, progress_bar=False)
    np.testing.assert_array_equal(np.asarray(sa.samples), np.asarray(sp.samples))
    fa = fit_lambda(A, t_cut=16.0, progress_bar=False)
    fp = fit_lambda(lp, nl, 16.0, progress_bar=False)
    assert float(fa.lam) == float(fp.lam)
    with pytest.raises(TypeError, match="t_cut"):
        fit_lambda(A, 16.0, progress_bar=False)  # t_cut given where n_leaves goes
    with pytest.raises(TypeError, match="is a scalar"):
        trellis.solve_batch(ENERGY, A, 5)


@pytest.mark.parametrize("limits", ["cpu", "many-blocks", "accelerator"])
def test_compact_flat_path_equals_the_tables(jets, monkeypatch, limits):
    """The compact flat path reads every MAP tree from per-slot backpointers, block by block
    (no [B, 2^N_max] tables): the same answers as the tables it replaces, with the CPU's
    block sizes, with blocks of 2 jets, and with an accelerator's large blocks and chunks."""
    from jaxhc.trellis import batch as batch_mod

    lp, nl, A = jets
    if limits == "many-blocks":
        monkeypatch.setattr(batch_mod, "_GROUP_CPU", (40, 2, batch_mod._GROUP_CPU[2]))
    elif limits == "accelerator":
        monkeypatch.setattr(batch_mod, "_group_limits", lambda device: batch_mod._GROUP_ACCEL)
    small = trellis.solve_batch(ENERGY, lp, nl)
    full = trellis.solve_batch(ENERGY, lp, nl, tables=True)
    assert small.log_z_table is None and small.map_log_marginals is None
    np.testing.assert_allclose(small.log_z, np.asarray(full.log_z), rtol=1e-12)
    np.testing.assert_allclose(small.map_log_phi, np.asarray(full.map_log_phi), rtol=1e-12)
    for t_small, t_full in zip(trellis.map_trees(small), trellis.map_trees(full)):
        assert np.array_equal(t_small.children, t_full.children)


def test_cli_jets_reads_parquet_and_root_and_writes_parquet(jets, tmp_path, capsys):
    """`jaxhc jets --input` with a parquet file (jets under a column) and a ROOT file (jagged
    branches with a prefix, in pt/eta/phi/mass): the same jets, and the compact results as
    parquet beside the JSON."""
    import json

    from jaxhc.cli import main

    uproot = pytest.importorskip("uproot")
    lp, nl, A = jets
    pq = os.path.join(tmp_path, "jets.parquet")
    ak.to_parquet(ak.zip({"jets": A, "id": np.arange(len(nl))}, depth_limit=1), pq)
    root = os.path.join(tmp_path, "jets.root")
    v = vector.zip({"px": A.px, "py": A.py, "pz": A.pz, "E": A.E})
    cols = {"jet_pt": v.pt, "jet_eta": v.eta, "jet_phi": v.phi, "jet_mass": v.mass}
    with uproot.recreate(root) as f:  # a TTree of jagged branches
        f.mktree("events", {k: c.type.content for k, c in cols.items()})
        f["events"].extend(cols)
    common = ["--min-leaves", "2", "--max-leaves", "5", "--no-fastjet", "--no-progress", "--no-cache"]
    out_pq, out_root = tmp_path / "o1", tmp_path / "o2"
    assert main(["jets", "--input", pq, "--field", "jets", "--out", str(out_pq)] + common) == 0
    assert main(["jets", "--input", root, "--branch", "jet_", "--out", str(out_root)] + common) == 0
    text = capsys.readouterr().out
    assert "jets_results.parquet" in text
    keep = nl >= 2
    for out, tol in ((out_pq, 0.0), (out_root, 1e-9)):
        with open(out / "jets_results.json") as f:
            payload = json.load(f)
        got = [np.asarray(j["leaves"]) for j in payload["jets"]]
        assert len(got) == len(nl)  # every jet has a row: solved, or why not
        assert [j["status"] == "solved" for j in payload["jets"]] == keep.tolist()
        for g, b in zip(got, range(len(nl))):
            np.testing.assert_allclose(g, lp[b, : nl[b]], rtol=tol, atol=tol * 100)
        rec = ak.from_parquet(out / "jets_results.parquet")
        assert ak.to_list(rec.jet_id) == list(range(len(nl)))
        back = hep.from_awkward(rec)
        want = [np.nan if j["log_z"] is None else j["log_z"] for j in payload["jets"]]
        np.testing.assert_allclose(back.log_z, want, rtol=1e-12)
        assert "log_phi_kt" in ak.fields(rec) and "log_phi_trellis" in ak.fields(rec)
    # a ROOT file without the branches names what it has
    with pytest.raises(SystemExit):
        main(["jets", "--input", root, "--out", str(tmp_path / "o3")] + common)
    assert "jet_pt" in capsys.readouterr().err


def test_missing_extra_names_it(monkeypatch, jets):
    import sys

    monkeypatch.setitem(sys.modules, "awkward", None)  # as if the hep extra were not installed
    with pytest.raises(ImportError, match=r"jaxhc\[hep\]"):
        hep.jets_from_awkward([[{"E": 1.0, "px": 0.0, "py": 0.0, "pz": 0.5}]])
