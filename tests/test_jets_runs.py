"""Resumable partitioned runs (`jaxhc.jets.runs`, ``jaxhc jets --partition-size K
[--resume]``; issue 24, part 3): one parquet file per partition, atomically, with a manifest;
a run killed with SIGKILL and resumed equals an uninterrupted one (no jet lost, none twice)."""

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
        assert ak.to_list(a[f]) == ak.to_list(b[f]), f


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
    uninterrupted run's, every jet once."""
    sim = ginkgo.simulate(jax.random.PRNGKey(6), PARAMS, 400, min_leaves=2, max_leaves=7)
    jets = [np.asarray(sim.jet(b)) for b in range(len(sim))]
    src = str(tmp_path / "jets.json")
    with open(src, "w") as f:
        json.dump([{"leaves": j.tolist()} for j in jets], f)
    env = dict(os.environ, JAXHC_NO_COMPILATION_CACHE="1")
    full, cut = str(tmp_path / "full"), str(tmp_path / "cut")
    args = ["--input", src, "--partition-size", "4"]  # 100 partitions: the kill lands mid-run
    subprocess.run(_RUN + args + ["--out", full], check=True, cwd=ROOT, env=env, timeout=300, capture_output=True)

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
    assert 3 <= killed_at < 100, f"the kill did not land mid-run ({killed_at} of 100 partitions)"
    with pytest.raises(ValueError, match="partitions are finished"):
        runs.read_partitions(cut)
    r = subprocess.run(_RUN + args + ["--out", cut, "--resume"], cwd=ROOT, env=env, timeout=300, capture_output=True)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    a, b = runs.read_partitions(full), runs.read_partitions(cut)
    assert ak.to_list(b.jet_id) == list(range(400))  # every jet, once, in order
    _fields_equal(a, b)
    assert not [f for f in os.listdir(cut) if f.endswith(".tmp")]
