"""Real jets from Pythia 8 (`jaxhc.jets.pythia`, the ``pythia`` extra): small generated
samples (seconds), their physics, reproducibility, and the study's rates (issue 23, part 6)."""

import numpy as np
import pytest

pytest.importorskip("pythia8mc", reason="the pythia extra (pip install -e '.[pythia]')")
pytest.importorskip("fastjet", reason="the pythia extra brings FastJet")

import jax  # noqa: E402

from jaxhc import trellis  # noqa: E402
from jaxhc.jets import pythia  # noqa: E402

jax.config.update("jax_enable_x64", True)


@pytest.fixture(scope="module")
def samples():
    return {p: pythia.generate_jets(p, 12, seed=3, n_subjets=(6, 8)) for p in ("pp", "ee")}


def test_generated_jets_are_physical_and_reproducible(samples):
    for process, jets in samples.items():
        assert len(jets) == 12
        sizes = [len(j) for j in jets]
        assert min(sizes) >= 6 and max(sizes) <= 8
        for j in jets:
            assert j.shape[1] == 4 and np.all(j[:, 0] > 0)
            assert np.all(j[:, 0] >= np.linalg.norm(j[:, 1:], axis=1))  # E >= |p|
            assert np.all(np.diff(j[:, 0]) <= 0)  # by decreasing energy
        total = np.array([j[:, 0].sum() for j in jets])
        if process == "ee":  # the more energetic half of a 91.19 GeV event
            assert np.all((total > 20.0) & (total < 91.2))
        else:  # the leading jet of a pT-hat > 200 GeV event
            pt = np.array([np.hypot(*j[:, 1:3].sum(0)) for j in jets])
            assert np.median(pt) > 150.0
    again = pythia.generate_jets("ee", 12, seed=3, n_subjets=(6, 8))
    assert all(np.array_equal(a, b) for a, b in zip(again, samples["ee"]))
    other = pythia.generate_jets("ee", 12, seed=4, n_subjets=(6, 8))
    assert not all(a.shape == b.shape and np.allclose(a, b) for a, b in zip(other, samples["ee"]))


def test_study_rates(samples):
    energies = {"ginkgo": trellis.GinkgoEnergy(2.0, 16.0, "exact"), "splitting": trellis.SplittingEnergy()}
    for jets in samples.values():
        rows = {r.energy: r for r in pythia.pythia_study(jets, energies)}
        s = rows["splitting"]
        # the splitting energy makes every tree of every jet possible
        assert s.possible == 1.0 and s.kt_possible == 1.0 and s.ca_possible == 1.0
        assert np.isfinite(s.log_p_kt) and s.log_p_kt < 0
        for r in rows.values():
            for f in ("possible", "kt_possible", "ca_possible", "map_is_kt", "map_is_ca"):
                assert 0.0 <= getattr(r, f) <= 1.0
            assert r.jets == 12 and r.seconds_per_jet > 0
        # where Ginkgo forbids the kt tree, its probability is 0
        g = rows["ginkgo"]
        assert g.kt_possible <= g.possible
    text = pythia.format_pythia_study(list(rows.values()), "t")
    assert "| splitting | 12 | 1.00 |" in text


def test_bad_arguments():
    with pytest.raises(ValueError, match="process must be"):
        pythia.generate_jets("ep", 1)
    with pytest.raises(ValueError, match="n_subjets"):
        pythia.generate_jets("ee", 1, n_subjets=(1, 3))
    with pytest.raises(ValueError, match="num_jets"):
        pythia.generate_jets("ee", 0)
