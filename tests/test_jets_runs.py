"""Resumable partitioned runs (`jaxhc.jets.runs`, ``jaxhc jets --partition-size K
[--resume]``; issue 24, part 3): one parquet file per partition, atomically, with a manifest;
a run killed with SIGKILL and resumed equals an uninterrupted one (no jet lost, none twice).
Every jet given has a record, solved or with the reason it was not (issue 58): outside the
leaf range, above the exact trellis limit, invalid four-momenta."""

import json
import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

ak = pytest.importorskip("awkward", reason="the hep extra (pip install -e '.[hep]')")

from jaxhc import trellis  # noqa: E402
from jaxhc.jets import hep, runs  # noqa: E402
from jaxhc.models import ginkgo  # noqa: E402

jax.config.update("jax_enable_x64", True)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARAMS = ginkgo.GinkgoParams(lam=2.0, t_cut=16.0)
ENERGY = PARAMS.energy("exact")


@pytest.fixture(scope="module")
def sample():
    sim = ginkgo.simulate(jax.random.PRNGKey(5), PARAMS, 45, min_leaves=2, max_leaves=6)
    return np.asarray(sim.leaves, np.float64), np.asarray(sim.n_leaves)


def _fields_equal(a, b):
    assert ak.fields(a) == ak.fields(b)
    for f in ak.fields(a):
        x, y = ak.to_list(a[f]), ak.to_list(b[f])
        if x != y:  # NaN (a jet not solved) differs from NaN in a list: compare as arrays
            np.testing.assert_array_equal(np.asarray(x, float), np.asarray(y, float), err_msg=f)


def test_partitions_equal_one_batch_and_resume_skips_finished(sample, tmp_path):
    lp, nl = sample
    out = str(tmp_path / "run")
    ids = 1000 + np.arange(len(nl))
    man = runs.solve_partitions(ENERGY, lp, out, nl, partition_size=10, ids=ids, progress_bar=False)
    assert man["n_partitions"] == 5 and len(man["done"]) == 5
    rec = runs.read_partitions(out)
    assert ak.to_list(rec.jet_id) == ids.tolist()
    whole = hep.to_awkward(trellis.solve_batch(ENERGY, lp, nl, tables=False))
    np.testing.assert_allclose(ak.to_numpy(rec.log_z), ak.to_numpy(whole.log_z), rtol=1e-12)
    assert ak.to_list(rec.map_left) == ak.to_list(whole.map_left)
    assert ak.to_list(rec.map_right) == ak.to_list(whole.map_right)
    # a lost partition file is solved again on resume; the others are kept as they are
    stamp = os.path.getmtime(os.path.join(out, "part-00000.parquet"))
    os.remove(os.path.join(out, "part-00003.parquet"))
    runs.solve_partitions(ENERGY, lp, out, nl, partition_size=10, ids=ids, resume=True, progress_bar=False)
    assert os.path.getmtime(os.path.join(out, "part-00000.parquet")) == stamp
    _fields_equal(runs.read_partitions(out), rec)
    # an existing run is never overwritten silently, and resuming needs the same settings
    with pytest.raises(ValueError, match="already holds a run"):
        runs.solve_partitions(ENERGY, lp, out, nl, partition_size=10, ids=ids, progress_bar=False)
    with pytest.raises(ValueError, match="partition_size"):
        runs.solve_partitions(ENERGY, lp, out, nl, partition_size=7, ids=ids, resume=True, progress_bar=False)
    with pytest.raises(ValueError, match="energy"):
        other = trellis.GinkgoEnergy(2.5, 16.0, "exact")
        runs.solve_partitions(other, lp, out, nl, partition_size=10, ids=ids, resume=True, progress_bar=False)
    with pytest.raises(ValueError, match="unique"):
        runs.solve_partitions(ENERGY, lp, str(tmp_path / "x"), nl, ids=np.zeros(len(nl)), progress_bar=False)


def test_read_partitions_of_an_unfinished_run(sample, tmp_path):
    lp, nl = sample
    out = str(tmp_path / "run")
    runs.solve_partitions(ENERGY, lp[:20], out, nl[:20], partition_size=10, progress_bar=False)
    with open(os.path.join(out, runs.MANIFEST)) as f:
        man = json.load(f)
    man["n_partitions"] = 3  # as if one partition were still missing
    with open(os.path.join(out, runs.MANIFEST), "w") as f:
        json.dump(man, f)
    with pytest.raises(ValueError, match="2 of 3 partitions"):
        runs.read_partitions(out)
    assert len(runs.read_partitions(out, complete=False)) == 20


_RUN = [sys.executable, "-m", "jaxhc", "jets", "--min-leaves", "2", "--max-leaves", "7", "--no-progress"]


def test_cli_killed_run_resumes_to_the_uninterrupted_output(tmp_path):
    """``jaxhc jets --input FILE --partition-size K``, killed with SIGKILL once a few
    partitions are on disk, then run again with ``--resume``: the final records equal an
    uninterrupted run's, every jet of the file once, solved or with the reason it was not
    (the file holds jets outside the leaf range, above the exact limit and off shell)."""
    sim = ginkgo.simulate(jax.random.PRNGKey(6), PARAMS, 400, min_leaves=2, max_leaves=7)
    jets = [np.asarray(sim.jet(b)) for b in range(len(sim))]
    off = jets[20].copy()
    off[0, 0] = 0.5 * np.linalg.norm(off[0, 1:])
    extra = {
        5: (jets[0][:1], "outside_leaf_range"),  # 1 leaf
        150: (np.concatenate([jets[1], jets[2], jets[3]])[:9], "outside_leaf_range"),  # 9 leaves
        260: (_massless(np.random.default_rng(0), 26), "above_exact_limit"),
        399: (off, "invalid"),
    }
    want = ["solved"] * len(jets)
    for at in sorted(extra):
        jets.insert(at, extra[at][0])
        want.insert(at, extra[at][1])
    src = str(tmp_path / "jets.json")
    with open(src, "w") as f:
        json.dump([{"leaves": j.tolist()} for j in jets], f)
    env = dict(os.environ, JAXHC_NO_COMPILATION_CACHE="1")
    full, cut = str(tmp_path / "full"), str(tmp_path / "cut")
    args = ["--input", src, "--partition-size", "4"]  # 101 partitions: the kill lands mid-run
    r = subprocess.run(_RUN + args + ["--out", full], check=True, cwd=ROOT, env=env, timeout=300, capture_output=True)
    last = "jets done: 400 of 404 jets solved (4 not solved: 2 outside --min-leaves/--max-leaves 2-7, 1 above the "
    assert r.stdout.decode().strip().splitlines()[-1].startswith(last)  # with --no-progress too

    p = subprocess.Popen(_RUN + args + ["--out", cut], cwd=ROOT, env=env, stderr=subprocess.PIPE)
    manifest = os.path.join(cut, runs.MANIFEST)
    done = 0
    t0 = time.time()
    while time.time() - t0 < 240 and p.poll() is None:
        if os.path.exists(manifest):
            try:
                with open(manifest) as f:
                    done = len(json.load(f)["done"])
            except (json.JSONDecodeError, OSError):  # renamed into place, never partial: retry
                done = 0
            if done >= 3:
                break
        time.sleep(0.02)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    with open(manifest) as f:
        killed_at = len(json.load(f)["done"])
    assert 3 <= killed_at < 101, f"the kill did not land mid-run ({killed_at} of 101 partitions)"
    with pytest.raises(ValueError, match="partitions are finished"):
        runs.read_partitions(cut)
    r = subprocess.run(_RUN + args + ["--out", cut, "--resume"], cwd=ROOT, env=env, timeout=300, capture_output=True)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    assert r.stdout.decode().strip().splitlines()[-1].startswith(last)
    a, b = runs.read_partitions(full), runs.read_partitions(cut)
    assert ak.to_list(b.jet_id) == list(range(404))  # every jet, once, in order
    assert ak.to_list(b.status) == want
    with open(manifest) as f:
        man = json.load(f)
    assert man["counts"] == {"solved": 400, "outside_leaf_range": 2, "above_exact_limit": 1, "invalid": 1}
    assert man["not_solved"] == {"outside_leaf_range": [5, 150], "above_exact_limit": [260], "invalid": [399]}
    _fields_equal(a, b)
    assert not [f for f in os.listdir(cut) if f.endswith(".tmp")]


# ---------------------------------------------------------------------------------------
# every jet given has a record, solved or not (issue 58)
# ---------------------------------------------------------------------------------------
def _massless(rng, n):
    p = rng.normal(size=(n, 3)) * 5.0 + 20.0
    return np.concatenate([np.linalg.norm(p, axis=1)[:, None], p], axis=1)


def mixed_jets(lp, nl, seed=0):
    """Jets of every kind, shuffled, with the status each must get under the leaf range 3-5:
    in range (``solved``), 2 or 6 leaves (``outside_leaf_range``), 25 and 27 leaves
    (``above_exact_limit``), in range with a leaf far off shell or a NaN (``invalid``)."""
    rng = np.random.default_rng(seed)
    jets, want = [], []
    for b in range(len(nl)):
        n = int(nl[b])
        jets.append(lp[b, :n].copy())
        want.append("solved" if 3 <= n <= 5 else "outside_leaf_range")
    for n in (25, 27):
        jets.append(_massless(rng, n))
        want.append("above_exact_limit")
    for k, b in enumerate(np.flatnonzero((nl >= 3) & (nl <= 5))[:2]):
        j = lp[b, : nl[b]].copy()
        if k == 0:
            j[1, 0] = 0.5 * np.linalg.norm(j[1, 1:])  # E = |p| / 2
        else:
            j[0, 2] = np.nan
        jets.append(j)
        want.append("invalid")
    order = rng.permutation(len(jets))
    return [jets[i] for i in order], np.array(want, dtype=object)[order]


@pytest.fixture(scope="module")
def mixed(sample):
    lp, nl = sample
    return mixed_jets(lp[:24], nl[:24])


def test_every_jet_has_a_record_solved_or_why_not(mixed, tmp_path):
    jets, want = mixed
    assert set(want) == set(runs.STATUSES)  # a jet of every kind
    ids = 500 + 3 * np.arange(len(jets))  # not positions: the records keep the caller's ids
    with pytest.warns(RuntimeWarning, match=r"jets: 2 of \d+ problems fail the checks"):
        man = runs.solve_partitions(
            ENERGY, jets, str(tmp_path / "run"), partition_size=7, ids=ids, min_leaves=3, max_leaves=5,
            progress_bar=False,
        )  # fmt: skip
    assert man["n_jets"] == len(jets) and (man["min_leaves"], man["max_leaves"]) == (3, 5)
    assert man["counts"] == {s: int(np.sum(want == s)) for s in runs.STATUSES}
    for s in runs.STATUSES[1:]:
        assert man["not_solved"][s] == ids[want == s].tolist()
    assert man["invalid"]["jet_ids"] == ids[want == "invalid"].tolist()
    rec = runs.read_partitions(str(tmp_path / "run"))
    assert ak.to_list(rec.jet_id) == ids.tolist()  # every jet, once, in order
    assert ak.to_list(rec.status) == want.tolist()
    status = np.asarray(want)
    reason = ak.to_list(rec.reason)
    assert all((r == "") == (s == "solved") for r, s in zip(reason, status))
    assert "outside the leaf range 3-5" in reason[int(np.argmax(status == "outside_leaf_range"))]
    assert "above the exact trellis limit of 24 leaves" in reason[int(np.argmax(status == "above_exact_limit"))]
    bad = [reason[i] for i in np.flatnonzero(status == "invalid")]
    assert all(r.startswith("invalid four-momenta: jets[") for r in bad)
    assert any("NaN" in r for r in bad) and any("< |p|" in r for r in bad)
    assert ak.to_list(rec.n_leaves) == [len(j) for j in jets]
    # the solved jets equal one solve_batch of them; the others have no values and no tree
    solved = np.flatnonzero(status == "solved")
    ref = trellis.solve_batch(ENERGY, *hep.as_padded_jets([jets[i] for i in solved]))
    np.testing.assert_allclose(ak.to_numpy(rec.log_z)[solved], ref.log_z, rtol=1e-12)
    assert np.all(np.isnan(ak.to_numpy(rec.log_z)[status != "solved"]))
    assert ak.to_numpy(rec.valid).tolist() == (status == "solved").tolist()
    trees = trellis.map_trees(hep.from_awkward(rec))  # records of every kind read back
    assert [t is not None for t in trees] == (status == "solved").tolist()


def test_killed_and_resumed_run_keeps_every_jet_once(mixed, tmp_path, monkeypatch):
    """A run that dies after two partitions (here: the third parquet write raises), resumed:
    the records equal an uninterrupted run's, every id once, solved or not."""
    jets, want = mixed
    kw = dict(partition_size=5, min_leaves=3, max_leaves=5, progress_bar=False)
    with pytest.warns(RuntimeWarning):
        runs.solve_partitions(ENERGY, jets, str(tmp_path / "full"), **kw)
    real, calls = ak.to_parquet, []

    def dies_on_the_third(rec, path, *a, **k):
        calls.append(path)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(rec, path, *a, **k)

    monkeypatch.setattr(ak, "to_parquet", dies_on_the_third)
    with pytest.raises(KeyboardInterrupt), pytest.warns(RuntimeWarning):
        runs.solve_partitions(ENERGY, jets, str(tmp_path / "cut"), **kw)
    monkeypatch.setattr(ak, "to_parquet", real)
    with open(tmp_path / "cut" / runs.MANIFEST) as f:
        assert sorted(json.load(f)["done"]) == ["0", "1"]
    with pytest.raises(ValueError, match="cannot resume: .* min_leaves"), pytest.warns(RuntimeWarning):
        runs.solve_partitions(ENERGY, jets, str(tmp_path / "cut"), **dict(kw, min_leaves=2), resume=True)
    with pytest.warns(RuntimeWarning):
        man = runs.solve_partitions(ENERGY, jets, str(tmp_path / "cut"), **kw, resume=True)
    assert len(man["done"]) == man["n_partitions"]
    a, b = runs.read_partitions(str(tmp_path / "full")), runs.read_partitions(str(tmp_path / "cut"))
    assert ak.to_list(b.jet_id) == list(range(len(jets)))
    assert ak.to_list(b.status) == want.tolist()
    _fields_equal(a, b)


def test_account_and_leaf_range_checks(sample):
    lp, nl = sample
    for kw, needle in (
        (dict(min_leaves=0), "min_leaves must be a positive integer"),
        (dict(max_leaves=2.5), "max_leaves must be a positive integer"),
        (dict(min_leaves=True), "min_leaves must be a positive integer"),
        (dict(min_leaves=6, max_leaves=4), "min_leaves=6 is above max_leaves=4"),
        (dict(max_leaves=25), "max_leaves=25 is above the exact trellis limit of 24"),
        (dict(ids=np.zeros(len(nl))), "ids must be"),
    ):
        with pytest.raises(ValueError, match=needle):
            runs.account_jets(ENERGY, lp, nl, **kw)
    with pytest.raises(ValueError, match=r"jets\[1\] must be four-momenta \[N, 4\]"):
        runs.account_jets(ENERGY, [lp[0, :3], np.ones((3, 3))])
    with pytest.raises(TypeError, match="n_leaves is required"):
        runs.account_jets(ENERGY, lp)
    # a list holding a NaN jet is accounted for (not refused); all in range and invalid raises
    jets = [lp[b, : nl[b]] for b in range(4)] + [np.full((3, 4), np.nan)]
    acc = runs.account_jets(ENERGY, jets)
    assert acc.status.tolist() == ["solved"] * 4 + ["invalid"] and acc.invalid.index == (4,)
    with pytest.raises(trellis.InvalidProblemsError, match=r"jets: 1 of 5 problems fail the checks \(index 4\)"):
        runs.solve_records(ENERGY, jets, on_invalid="raise")
    with pytest.raises(trellis.InvalidProblemsError, match="1 of 1 problems"):
        runs.solve_records(ENERGY, jets[4:])
    rec = runs.solve_records(ENERGY, jets[:4] + [_massless(np.random.default_rng(1), 30)], max_leaves=4)
    assert ak.to_list(rec.status)[-1] == "above_exact_limit" and len(ak.to_list(rec.map_left)[-1]) == 29


def test_cli_file_default_range_accounts_for_every_jet(sample, tmp_path, capsys, monkeypatch):
    """``jaxhc jets --input FILE --partition-size K --no-progress`` without a leaf range: the
    file's own jets from 1 leaf up to 16 are solved; a 17-leaf jet (named on stderr with
    how to include it), a jet above the exact limit and an off-shell one have rows with
    their reasons, and the last line counts them. The estimated time of a long run is
    printed before it (here every run counts as long)."""
    from jaxhc.cli import jets_cmd, main

    lp, nl = sample
    rng = np.random.default_rng(3)
    jets = [lp[b, : nl[b]] for b in range(12)] + [_massless(rng, 17), _massless(rng, 26), lp[12, : nl[12]].copy()]
    jets[-1][0, 0] = 0.5 * np.linalg.norm(jets[-1][0, 1:])
    want = ["solved"] * 12 + ["outside_leaf_range", "above_exact_limit", "invalid"]
    src = tmp_path / "jets.json"
    src.write_text(json.dumps([{"leaves": j.tolist()} for j in jets]))
    monkeypatch.setattr(jets_cmd, "_LONG_RUN_SECONDS", 0.0)
    out = str(tmp_path / "run")
    argv = ["jets", "--input", str(src), "--partition-size", "4", "--no-progress", "--no-cache", "--out", out]
    assert main(argv) == 0
    std = capsys.readouterr()
    assert std.out.strip().splitlines()[-1] == (
        "jets done: 12 of 15 jets solved (3 not solved: 1 outside --min-leaves/--max-leaves 1-16, 1 above the exact "
        f"trellis limit of 24 leaves, 1 invalid four-momenta); 4 of 4 partitions; outputs in {out}"
    )
    assert "1 jet of 17 leaves is not solved: the default --max-leaves is 16 for a file" in std.err
    assert "--max-leaves 17 solves it" in std.err
    assert "estimated time of the exact trellis: about" in std.err
    assert f"12 jets of {nl[:12].min()}-{nl[:12].max()} leaves" in std.err
    rec = runs.read_partitions(out)
    assert ak.to_list(rec.jet_id) == list(range(15)) and ak.to_list(rec.status) == want
    with open(os.path.join(out, runs.MANIFEST)) as f:
        man = json.load(f)
    assert (man["min_leaves"], man["max_leaves"]) == (1, 16)
    assert man["not_solved"] == {"outside_leaf_range": [12], "above_exact_limit": [13], "invalid": [14]}
