"""Tests for `jaxhc.jets` and ``jaxhc jets``: FastJet's generalized-kt trees equal the NumPy
implementation merge by merge; hand-made three-particle jets cluster as kt, C/A and anti-kt
must; the MAP comparison reproduces the ClusterTrellis reference values, never finds a tree
above the exact MAP, and Table 1 equals its hand-computed means; the command line writes its
files, and bad input exits with code 2."""

import jax

jax.config.update("jax_enable_x64", True)

import importlib.util
import json
import math
import os
import sys

import numpy as np
import pytest

from jaxhc import jets, trellis
from jaxhc.cli import main
from jaxhc.tree import Tree

DATA = os.path.join(os.path.dirname(__file__), "data")
GENERATOR_JETS = os.path.join(DATA, "ginkgo_generator_jets_lam2.0.json")
REFERENCE_JETS = os.path.join(DATA, "ginkgo_jets_reference.json")
KT_FAMILY = [(1, "kt"), (0, "ca"), (-1, "antikt")]

# FastJet is the optional `jets` extra, which the README's test command installs: a test
# marked `fastjet` fails with an ImportError naming the extra where it is missing (never skips)
HAS_FASTJET = importlib.util.find_spec("fastjet") is not None


@pytest.fixture(autouse=True)
def _fastjet_installed(request):
    if request.node.get_closest_marker("fastjet") is not None and not HAS_FASTJET:
        raise ImportError('this test runs FastJet, the "jets" extra: pip install "jaxhc[jets]"')


KT_FUNCTIONS = [pytest.param(jets.kt_tree, id="kt_tree", marks=pytest.mark.fastjet), jets.kt_tree_numpy]


def _random_jet(rng, n):
    """A jet of ``n`` massive particles around a random axis with a spread of energies and
    angles (wide enough that the kt, C/A and anti-kt orders differ)."""
    axis = rng.normal(size=3)
    axis /= np.linalg.norm(axis)
    d = axis + 0.3 * rng.normal(size=(n, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    p3 = d * rng.exponential(20.0, size=(n, 1))
    m = rng.uniform(0.0, 1.0, size=n)
    return np.column_stack([np.sqrt(np.sum(p3**2, axis=1) + m**2), p3])


def _massless(E, theta, phi):
    """Four-momentum of a massless particle of energy E in direction (theta, phi)."""
    return [E, E * math.sin(theta) * math.cos(phi), E * math.sin(theta) * math.sin(phi), E * math.cos(theta)]


def _pad(jet_list):
    nl = np.array([len(j) for j in jet_list])
    lp = np.zeros((len(jet_list), nl.max(), 4))
    for b, j in enumerate(jet_list):
        lp[b, : len(j)] = j
    return lp, nl


# ---------------------------------------------------------------------------------------
# generalized kt: FastJet vs NumPy
# ---------------------------------------------------------------------------------------
@pytest.mark.fastjet
@pytest.mark.parametrize("variant", ["ee", "pp"])
@pytest.mark.parametrize("p", [1, 0, -1])
def test_fastjet_equals_numpy_merge_by_merge(variant, p):
    rng = np.random.default_rng(7 + p)
    with open(GENERATOR_JETS) as f:
        ginkgo = [np.asarray(j["leaves"], np.float64) for j in json.load(f)[:40]]
    for L in ginkgo + [_random_jet(rng, int(rng.integers(2, 25))) for _ in range(40)]:
        a = jets.kt_tree(L, p, variant=variant)
        b = jets.kt_tree_numpy(L, p, variant=variant)
        n = len(L)
        assert a.n_leaves == n and b.n_leaves == n
        a.validate()
        assert a.leaf_sets()[a.root].all()  # every leaf is in the one jet
        np.testing.assert_array_equal(np.asarray(a.children), np.asarray(b.children))
        # FastJet computes 1 - cos theta as 1 - u_i.u_j (relative error ~1e-10 at these angles)
        np.testing.assert_allclose(a.heights, b.heights, rtol=1e-6, atol=0)


@pytest.mark.fastjet
def test_ee_tree_does_not_depend_on_R_above_pi():
    rng = np.random.default_rng(3)
    for _ in range(10):
        L = _random_jet(rng, 12)
        for p in (1, 0, -1):
            ref = jets.kt_tree(L, p)
            for R in (3.2, 5.0, 3 * math.pi):
                assert jets.kt_tree(L, p, R=R).same_hierarchy(ref)
                assert jets.kt_tree_numpy(L, p, R=R).same_hierarchy(ref)


@pytest.mark.parametrize("variant", ["ee", "pp"])
@pytest.mark.parametrize("fn", KT_FUNCTIONS)
def test_three_particles_merge_in_the_expected_order(fn, variant):
    # A and B hard (E = 100) at angle 0.1; C soft (E = 1) at angle 0.15 from A on the
    # other side (angle 0.25 from B). C/A merges the closest in angle first: (A, B).
    # kt weighs by the softer energy: d_AC = 1 * 0.15^2 << d_AB = 1e4 * 0.1^2: (A, C).
    # anti-kt weighs by 1 / harder energy: d_AB = 1e-4 * 0.1^2 < d_AC = 1e-4 * 0.15^2: (A, B).
    # variant "ee": directions about the z axis (angles theta); "pp": azimuths at rapidity 0.
    if variant == "ee":
        L = np.array([_massless(100, 0.3, 0.0), _massless(100, 0.4, 0.0), _massless(1, 0.15, 0.0)])
    else:
        L = np.array(
            [_massless(100, math.pi / 2, 0.0), _massless(100, math.pi / 2, 0.1), _massless(1, math.pi / 2, -0.15)]
        )
    A, B, C = 0, 1, 2
    expect = {0: ((A, B), C), 1: ((A, C), B), -1: ((A, B), C)}
    for p, nested in expect.items():
        tree = fn(L, p, variant=variant)
        assert tree.same_hierarchy(Tree.from_nested(nested)), (p, tree.to_nested())
    # the heights are FastJet's d_ij: C/A first merge (ee, R = 2 pi: 1 - cos R -> 3 + cos R = 4)
    tree = fn(L, 0, variant=variant)
    d_first = (1 - math.cos(0.1)) / 4 if variant == "ee" else 0.1**2 / jets.MAX_R**2
    np.testing.assert_allclose(tree.heights[0], d_first, rtol=1e-6)
    # kt: the first merge (A, C) has d = E_C^2 (1 - cos 0.15) / 4
    if variant == "ee":
        np.testing.assert_allclose(fn(L, 1).heights[0], (1 - math.cos(0.15)) / 4, rtol=1e-6)


@pytest.mark.parametrize("fn", KT_FUNCTIONS)
def test_small_R_loses_particles_to_the_beam(fn):
    L = np.array([_massless(100, 0.3, 0.0), _massless(100, 0.4, 0.0), _massless(1, 0.15, 0.0)])
    with pytest.raises(ValueError, match="merged with the beam"):
        fn(L, 1, R=0.05)
    with pytest.raises(ValueError, match="merged with the beam"):
        fn(L[:, [0, 3, 2, 1]], 1, R=0.05, variant="pp")  # beam axis across the jet


@pytest.mark.parametrize("fn", KT_FUNCTIONS)
def test_one_and_two_leaves(fn):
    L = np.array([_massless(10, 0.2, 0.0), _massless(5, 0.3, 1.0)])
    assert fn(L[:1]).n_leaves == 1
    tree = fn(L, -1)
    np.testing.assert_array_equal(np.asarray(tree.children), [[0, 1]])


@pytest.mark.parametrize("fn", KT_FUNCTIONS)
def test_kt_input_validation(fn):
    L = np.array([_massless(10, 0.2, 0.0), _massless(5, 0.3, 1.0)])
    with pytest.raises(ValueError, match="leaves must be four-momenta"):
        fn(L[:, :3])
    with pytest.raises(ValueError, match="leaves must be four-momenta"):
        fn(np.zeros((0, 4)))
    with pytest.raises(ValueError, match="NaN or inf"):
        fn(np.where(np.eye(2, 4, dtype=bool), np.nan, L))
    with pytest.raises(ValueError, match="positive"):
        fn(L * np.array([-1, 1, 1, 1]))
    with pytest.raises(ValueError, match="zero 3-momentum"):
        fn(np.array([[1.0, 0, 0, 0], L[0]]))
    with pytest.raises(ValueError, match="rapidity"):
        fn(np.array([[1.0, 0, 0, 1.0], L[0]]), variant="pp")
    with pytest.raises(ValueError, match="variant"):
        fn(L, variant="lhc")
    with pytest.raises(TypeError, match="p must be a real number"):
        fn(L, "kt")
    with pytest.raises(ValueError, match="R must be in"):
        fn(L, R=2000.0)
    with pytest.raises(ValueError, match="R must be in"):
        fn(L, R=-1.0)


def test_missing_fastjet_gives_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "fastjet", None)  # `import fastjet` now raises ImportError
    L = np.array([_massless(10, 0.2, 0.0), _massless(5, 0.3, 1.0)])
    with pytest.raises(ImportError, match=r'pip install "jaxhc\[jets\]"'):
        jets.kt_tree(L)
    assert jets.kt_tree_numpy(L).n_leaves == 2
    energy = trellis.GinkgoEnergy(2.0, 16.0)
    with open(GENERATOR_JETS) as f:
        lp, nl = _pad([np.asarray(json.load(f)[0]["leaves"])])
    with pytest.raises(ImportError, match="jaxhc.jets"):
        jets.compare_map_methods(energy, lp, nl, methods=("kt",), kt_backend="fastjet", progress_bar=False)
    res = jets.compare_map_methods(energy, lp, nl, methods=("kt",), kt_backend="auto", progress_bar=False)
    assert res.kt_backend == "numpy"


# ---------------------------------------------------------------------------------------
# MAP comparison
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def reference():
    """The 20 ClusterTrellis reference jets (4 and 5 leaves, lam = 1.5, paper likelihood)
    and all six methods on them."""
    with open(REFERENCE_JETS) as f:
        data = json.load(f)
    assert {(d["lam"], d["t_cut"]) for d in data} == {(1.5, 16.0)}
    energy = trellis.GinkgoEnergy(1.5, 16.0, likelihood="paper")
    leaf_list = [np.asarray(d["leaves"], np.float64) for d in data]
    lp, nl = _pad(leaf_list)
    res = jets.compare_map_methods(energy, lp, nl, progress_bar=False)
    return data, energy, leaf_list, res


def test_trellis_matches_cluster_trellis_reference(reference):
    data, _, _, res = reference
    np.testing.assert_allclose(res.map_log_phi, [d["ct_map_log_likelihood"] for d in data], rtol=0, atol=1e-8)
    np.testing.assert_allclose(res.log_z, [d["ct_log_z"] for d in data], rtol=0, atol=1e-8)
    np.testing.assert_allclose(res.log_phi["trellis"], res.map_log_phi, rtol=0, atol=1e-9)


@pytest.mark.fastjet
def test_exact_map_bounds_every_method(reference):
    _, energy, leaf_list, res = reference
    assert res.methods == jets.METHODS
    assert np.all(res.log_z >= res.map_log_phi)
    for m in res.methods:
        lp = res.log_phi[m]
        assert lp.shape == (len(leaf_list),)
        assert np.all(lp <= res.map_log_phi + 1e-9), m
        for b, L in enumerate(leaf_list):
            tree = res.trees[m][b]
            assert tree.n_leaves == len(L)
            tree.validate()
            # the batched scorer equals log_phi_of_tree, -inf included
            want = float(trellis.log_phi_of_tree(energy, L, tree))
            assert (lp[b] == want == -np.inf) or abs(lp[b] - want) <= 1e-9, (m, b, lp[b], want)
    for b, L in enumerate(leaf_list):
        assert res.trees["greedy"][b].same_hierarchy(trellis.greedy(energy, L).tree)
        assert res.trees["kt"][b].same_hierarchy(jets.kt_tree(L, 1))
        assert res.trees["antikt"][b].same_hierarchy(jets.kt_tree(L, -1))
    np.testing.assert_array_equal(res.beam_sizes, res.n_leaves * (res.n_leaves - 1) // 2)
    assert res.num_splits == sum(trellis.num_splits(int(n)) for n in res.n_leaves)
    assert res.kt_backend == "fastjet"
    assert set(res.seconds) == set(jets.METHODS)


def test_table1_equals_hand_computed_means(reference):
    _, _, _, res = reference
    rows = {(r.a, r.b): r for r in jets.table1(res)}
    assert list(rows) == [
        ("trellis", "beam"),
        ("trellis", "greedy"),
        ("beam", "greedy"),
        ("trellis", "kt"),
        ("trellis", "ca"),
        ("trellis", "antikt"),
    ]
    for (a, b), r in rows.items():
        la, lb = res.log_phi[a], res.log_phi[b]
        ok = np.isfinite(la) & np.isfinite(lb)
        d = la[ok] - lb[ok]
        assert r.n_used == ok.sum() and r.n_used + r.n_nonfinite == 20
        np.testing.assert_allclose(r.mean, np.mean(d), rtol=1e-12)
        np.testing.assert_allclose(r.std, np.std(d, ddof=1), rtol=1e-12)
        if a == "trellis":
            assert r.frac_exact == np.mean(np.abs(lb - la) < 1e-9)
        else:
            assert r.frac_exact is None
    assert rows[("trellis", "beam")].paper == (0.4, 0.5)
    assert rows[("trellis", "greedy")].paper == (1.5, 1.1)
    assert rows[("beam", "greedy")].paper == (1.1, 1.1)


def test_table1_on_a_hand_made_result():
    # 4 jets; kt has one -inf tree, greedy one; numbers worked out by hand
    log_phi = {
        "trellis": np.array([-10.0, -20.0, -30.0, -40.0]),
        "beam": np.array([-10.0, -21.0, -30.0, -42.0]),
        "greedy": np.array([-11.0, -21.0, -np.inf, -44.0]),
        "kt": np.array([-np.inf, -25.0, -30.0, -41.0]),
    }
    res = jets.MapComparison(
        ("trellis", "beam", "greedy", "kt"),
        np.array([5, 5, 6, 6]),
        log_phi,
        {},
        None,
        log_phi["trellis"],
        {},
        None,
        "numpy",
        0,
    )
    rows = {r.label: r for r in jets.table1(res)}
    assert list(rows) == ["Trellis - Beam", "Trellis - Greedy", "Beam - Greedy", "Trellis - kt"]
    r = rows["Trellis - Beam"]  # differences 0, 1, 0, 2
    assert (r.mean, r.n_used, r.n_nonfinite, r.frac_exact) == (0.75, 4, 0, 0.5)
    np.testing.assert_allclose(r.std, math.sqrt((0.75**2 * 2 + 0.25**2 + 1.25**2) / 3))
    r = rows["Trellis - Greedy"]  # differences 1, 1, 4 (jet 2 left out)
    assert (r.mean, r.n_used, r.n_nonfinite, r.frac_exact) == (2.0, 3, 1, 0.0)
    np.testing.assert_allclose(r.std, math.sqrt(3.0))
    r = rows["Beam - Greedy"]  # differences 1, 0, 2
    assert (r.mean, r.n_used, r.frac_exact) == (1.0, 3, None)
    r = rows["Trellis - kt"]  # differences 5, 0, 1
    assert (r.mean, r.n_used, r.n_nonfinite, r.frac_exact) == (2.0, 3, 1, 0.25)
    text = jets.format_table1(res)
    assert "| Trellis - Beam | 0.75 +- 0.96 | 4 | 0 | Beam: 50.0% | 0.4 +- 0.5 |" in text
    assert "| Trellis - kt | 2.00 +- 2.65 | 3 | 1 | kt: 25.0% |  |" in text
    assert "left out" in text


def test_compare_map_methods_validation():
    energy = trellis.GinkgoEnergy(2.0, 16.0)
    with open(GENERATOR_JETS) as f:
        lp, nl = _pad([np.asarray(j["leaves"]) for j in json.load(f)[:2]])
    with pytest.raises(TypeError, match="energy"):
        jets.compare_map_methods("ginkgo", lp, nl)
    with pytest.raises(ValueError, match="methods: unknown"):
        jets.compare_map_methods(energy, lp, nl, methods=("trellis", "cambridge"))
    with pytest.raises(ValueError, match="duplicates"):
        jets.compare_map_methods(energy, lp, nl, methods=("kt", "kt"))
    with pytest.raises(ValueError, match="n_leaves must be an integer array"):
        jets.compare_map_methods(energy, lp, nl[:1])
    with pytest.raises(ValueError, match="n_leaves must be in"):
        jets.compare_map_methods(energy, lp, nl + 100)
    with pytest.raises(ValueError, match="beam_size"):
        jets.compare_map_methods(energy, lp, nl, methods=("beam",), beam_size=0)
    with pytest.raises(ValueError, match="kt_backend"):
        jets.compare_map_methods(energy, lp, nl, methods=("kt",), kt_backend="root")
    with pytest.raises(ValueError, match=r"four-momenta \[B, N_max, 4\]"):
        jets.compare_map_methods(trellis.DasguptaEnergy(), np.ones((1, 3, 3)), np.array([3]), methods=("kt",))


# ---------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------
def _check_outputs(out, n_jets, n_solved=None):
    """The JSON summary: a row per jet read, ids 0..n_jets-1 in order; ``n_solved`` of them
    (default all) solved, with every method's tree and log likelihood."""
    with open(out / "jets_results.json") as f:
        payload = json.load(f)
    assert [j["jet_id"] for j in payload["jets"]] == list(range(n_jets))
    solved = [j for j in payload["jets"] if j["status"] == "solved"]
    assert len(solved) == (n_jets if n_solved is None else n_solved)
    assert payload["accounting"]["counts"]["solved"] == len(solved)
    assert sum(payload["accounting"]["counts"].values()) == n_jets
    assert [r["label"] for r in payload["table1"]][:3] == ["Trellis - Beam", "Trellis - Greedy", "Beam - Greedy"]
    for jet in payload["jets"]:
        if jet["status"] != "solved":
            assert jet["reason"] and jet["log_z"] is None and jet["trees"] is None
            continue
        ll = jet["log_likelihood"]
        assert abs(ll["trellis"] - jet["map_log_likelihood"]) < 1e-9
        assert jet["log_z"] >= jet["map_log_likelihood"]
        assert all(v is None or v <= jet["map_log_likelihood"] + 1e-9 for v in ll.values())
        assert len(jet["trees"]["kt"]) == jet["n_leaves"] - 1
    assert (out / "jets_logz_vs_map.png").stat().st_size > 1000
    return payload


@pytest.mark.fastjet
def test_cli_jets_from_file(tmp_path, capsys):
    out = tmp_path / "jets"
    argv = [
        "jets",
        "--input",
        GENERATOR_JETS,
        "--quick",
        "--min-leaves",
        "4",
        "--max-leaves",
        "5",
        "--no-progress",
        "--no-cache",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    with open(GENERATOR_JETS) as f:
        sizes_all = [len(j["leaves"]) for j in json.load(f)]
    sizes = sizes_all[:40]  # --quick: the file's first 40 jets
    n_expected = sum(4 <= n <= 5 for n in sizes)
    payload = _check_outputs(out, 40, n_expected)
    assert all(j["status"] == ("solved" if 4 <= j["n_leaves"] <= 5 else "outside_leaf_range") for j in payload["jets"])
    assert payload["kt_backend"] == "fastjet" and payload["likelihood"] == "paper"
    assert "| Trellis - Beam |" in text and "0.4 +- 0.5" in text and "splits/s" in text
    k = 40 - n_expected
    want = (
        f"jets done: {n_expected} of 40 jets solved ({k} not solved: {k} outside --min-leaves/--max-leaves 4-5); "
        f"the file's jets 40..{len(sizes_all) - 1} not read (--quick reads the first 40)"
    )
    assert text.strip().splitlines()[-1].startswith(want)


def test_cli_jets_simulated_without_fastjet(tmp_path, capsys):
    out = tmp_path / "sim"
    argv = [
        "jets",
        "--num-jets",
        "6",
        "--min-leaves",
        "4",
        "--max-leaves",
        "5",
        "--seed",
        "3",
        "--likelihood",
        "exact",
        "--no-fastjet",
        "--no-progress",
        "--no-cache",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    payload = _check_outputs(out, 6)
    assert payload["kt_backend"] == "numpy" and payload["likelihood"] == "exact"
    assert payload["source"] == "jaxhc.models.ginkgo.simulate"
    assert all(4 <= j["n_leaves"] <= 5 for j in payload["jets"])
    assert "| simulating the jets" in capsys.readouterr().out


@pytest.mark.parametrize(
    "content, needle",
    [
        (None, "no such file"),
        ("{not json", "not valid JSON"),
        ('{"leaves": [[1, 0, 0, 1]]}', "expected a non-empty JSON list"),
        ('[{"content": []}]', "jet 0 is not an object with 'leaves'"),
        ('[{"leaves": [[1, 2, 3]]}]', "jet 0: 'leaves' must be four-momenta"),
        ('[{"leaves": [[1, 0, 0, 1]]}, {"leaves": [["a", 0, 0, 1]]}]', "jet 1: 'leaves' must be a numeric"),
        ('[{"leaves": [[1, 0, 0, 1]' + ", [1, 0, 0, 1]" * 4 + ", [-2, 0, 1, 0]]}]", "(column 0) must be positive"),
        (
            '[{"leaves": ' + json.dumps([[1, 0, 0, 1]] * 9) + "}]",
            "none of its 1 jets has 1 to 7 leaves (they have 9 to 9)",
        ),
    ],
)
def test_cli_jets_bad_input_exits_2(tmp_path, capsys, content, needle):
    path = tmp_path / "jets.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit) as exc:
        main(["jets", "--input", str(path), "--quick", "--no-progress", "--no-cache", "--out", str(tmp_path / "o")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "jaxhc jets: error:" in err and needle in err
    assert len(err.strip().splitlines()) == 1


def test_cli_jets_bad_leaf_range_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "jets",
                "--input",
                GENERATOR_JETS,
                "--min-leaves",
                "8",
                "--max-leaves",
                "6",
                "--no-cache",
                "--out",
                str(tmp_path),
            ]
        )
    assert exc.value.code == 2
    assert "--min-leaves 8 is above --max-leaves 6" in capsys.readouterr().err


def test_cli_jets_compilation_cache(tmp_path, monkeypatch):
    """A separate process (the cache is process-wide JAX configuration): the trellis
    programs land in --cache-dir (`jaxhc.enable_compilation_cache`). A --cache-dir that
    cannot be created is an input error (exit 2), raised before anything is compiled."""
    import subprocess
    import sys

    monkeypatch.delenv("JAXHC_NO_COMPILATION_CACHE", raising=False)
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as exc:
        main(["jets", "--cache-dir", str(blocker / "xla"), "--no-progress", "--out", str(tmp_path / "b")])
    assert exc.value.code == 2
    cache = tmp_path / "cache"
    cmd = [
        sys.executable,
        "-m",
        "jaxhc",
        "jets",
        "--num-jets",
        "3",
        "--min-leaves",
        "6",
        "--max-leaves",
        "6",
        "--no-fastjet",
        "--no-progress",
        "--cache-dir",
        str(cache),
        "--out",
        str(tmp_path / "o"),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert any(cache.iterdir()), "nothing was written to the compilation cache"
