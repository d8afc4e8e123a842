"""Exact cluster trellis (`jaxhc.trellis.exact`) against brute force and closed forms.

Truth comes from enumerating every binary hierarchy (`reference.all_binary_trees`, (2N-3)!!
of them) and summing / maximising ``log phi(H)`` over them; from the energies' formulas
written out again in NumPy (Eq. 4 and 7-8 of the trellis paper; the Ginkgo split
likelihoods "paper" and "exact" as defined in the README of the Ginkgo data); from closed
forms (the counting semiring gives (2N-3)!!); and from the ClusterTrellis reference values
in tests/data/ginkgo_jets_reference.json (tests/data/ginkgo_generator_jets_6_7.json holds
six larger jets of the authors' generator for the batch test).

Compilations dominate the run time, so every test reuses a few (energy class, N) shapes.
"""

from __future__ import annotations

import functools
import json
import math
import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from jaxhc.tree import Tree
from jaxhc.trellis import (
    MAX_EXACT_LEAVES,
    CorrelationEnergy,
    DasguptaEnergy,
    Energy,
    GinkgoEnergy,
    UnitEnergy,
    cluster_marginals,
    log_partition,
    log_phi_of_tree,
    map_trees,
    memory_required,
    num_splits,
    sample,
    solve,
    solve_batch,
    subtree_log_marginal,
)
from jaxhc.trellis import classes as trellis_classes
from jaxhc.trellis import energies as trellis_energies
from jaxhc.trellis import exact as trellis_exact
from jaxhc.trellis import subsets as trellis_subsets

from reference import all_binary_trees

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
TOL = 1e-9  # log Z, MAP values, marginal probabilities against brute force


# ------------------------------------------------------------------------------------------
# brute force
# ------------------------------------------------------------------------------------------
class Enumeration(NamedTuple):
    trees: list  # every hierarchy over n leaves, as `Tree`
    L: np.ndarray  # [T, n-1] left-child bitmask of every merge
    R: np.ndarray  # [T, n-1] right-child bitmask
    P: np.ndarray  # [T, n-1] parent bitmask
    contains: np.ndarray  # [T, 2^n] whether cluster S is in the tree
    index: dict  # canonical key (sorted inner clusters) -> tree index


@functools.lru_cache(maxsize=None)
def enumerate_trees(n: int) -> Enumeration:
    trees = list(all_binary_trees(n))
    T = len(trees)
    assert T == _double_factorial(2 * n - 3)
    bm = np.stack([t.bitmasks() for t in trees])  # [T, 2n-1]
    if n > 1:
        ch = np.stack([np.asarray(t.children, np.int64) for t in trees])  # [T, n-1, 2]
        L = np.take_along_axis(bm, ch[:, :, 0], axis=1)
        R = np.take_along_axis(bm, ch[:, :, 1], axis=1)
        P = bm[:, n:]
    else:
        L = R = P = np.zeros((T, 0), np.int64)
    contains = np.zeros((T, 2**n), bool)
    contains[np.arange(T)[:, None], bm] = True
    index = {tuple(sorted(row)): t for t, row in enumerate(P.tolist())}
    assert len(index) == T  # all hierarchies distinct
    return Enumeration(trees, L, R, P, contains, index)


def _double_factorial(k: int) -> int:
    return math.prod(range(k, 0, -2)) if k > 0 else 1


def _all_masks(n):
    s = np.arange(2**n)
    return ((s[:, None] >> np.arange(n)[None, :]) & 1).astype(np.float64)


def _pairs(n):
    """Every ordered pair ``(L, R)`` of disjoint non-empty subsets of n elements."""
    s = np.arange(2**n)
    return np.nonzero(((s[:, None] & s[None, :]) == 0) & (s[:, None] > 0) & (s[None, :] > 0))


@functools.partial(jax.jit, static_argnums=(2,))
def _split_values(energy, leaves, n):
    """``log psi`` of every pair of `_pairs` (one compilation per energy class and N)."""
    Ls, Rs = _pairs(n)
    feats = energy.subset_features(leaves, jnp.asarray(_all_masks(n), leaves.dtype))
    take = lambda idx: jax.tree_util.tree_map(lambda x: x[idx], feats)
    return energy.log_psi(take(Ls | Rs), take(Ls), take(Rs))


def split_table(energy, leaves) -> np.ndarray:
    """``table[L, R] = log psi(L | R, L, R)`` for every ordered pair of disjoint non-empty
    subsets (NaN elsewhere), evaluated by the energy on its own subset features."""
    n = energy.n_elements(leaves)
    table = np.full((2**n, 2**n), np.nan)
    table[_pairs(n)] = np.asarray(_split_values(energy, jnp.asarray(leaves, jnp.float64), n), np.float64)
    return table


class Brute(NamedTuple):
    enum: Enumeration
    table: np.ndarray
    log_phi: np.ndarray  # [T]
    log_z: float
    prob: np.ndarray  # [T]
    marg: np.ndarray  # [2^n] P(S in H)


def brute_force(energy, leaves) -> Brute:
    n = energy.n_elements(leaves)
    E = enumerate_trees(n)
    table = split_table(energy, leaves)
    log_phi = table[E.L, E.R].sum(axis=1) if n > 1 else np.zeros(len(E.trees))
    assert not np.any(np.isnan(log_phi))
    log_z = float(logsumexp(log_phi))
    prob = np.exp(log_phi - log_z) if np.isfinite(log_z) else np.zeros_like(log_phi)
    return Brute(E, table, log_phi, log_z, prob, prob @ E.contains)


def _bits(S):
    S = int(S)
    return [i for i in range(S.bit_length()) if (S >> i) & 1]


def _local_to_global(elems):
    """``lut[m]``: the global bitmask of the local mask ``m`` over ``elems``."""
    k = len(elems)
    lut = np.zeros(2**k, np.int64)
    for m in range(2**k):
        lut[m] = sum(1 << int(elems[i]) for i in range(k) if (m >> i) & 1)
    return lut


def sub_trellis_brute(bf: Brute, S: int):
    """``(log Z(S), log phi*(S))`` by enumerating every hierarchy over the elements of S."""
    elems = _bits(S)
    Ek = enumerate_trees(len(elems))
    lut = _local_to_global(elems)
    if len(elems) == 1:
        return 0.0, 0.0
    lphi = bf.table[lut[Ek.L], lut[Ek.R]].sum(axis=1)
    return float(logsumexp(lphi)), float(np.max(lphi))


# ------------------------------------------------------------------------------------------
# the energies written out from the paper / data README, one split at a time
# ------------------------------------------------------------------------------------------
def ref_dasgupta(W, iL, iR, beta):
    return -beta * (len(iL) + len(iR)) * W[np.ix_(iL, iR)].sum()  # Eq. 4


def ref_correlation(W, iL, iR, beta):  # Eq. 7-8
    cross = W[np.ix_(iL, iR)]
    e = cross[cross > 0].sum()
    for idx in (iL, iR):
        inner = W[np.ix_(idx, idx)][~np.eye(len(idx), dtype=bool)]  # ordered pairs i != j
        e -= inner[inner < 0].sum()
    return -beta * e


def _m2(p):
    return max(p[0] ** 2 - p[1] ** 2 - p[2] ** 2 - p[3] ** 2, 0.0)


def ref_ginkgo(X, iL, iR, lam, tc, likelihood):
    """The split log likelihoods of the data README ("paper" and "exact")."""
    pL, pR = X[iL].sum(0), X[iR].sum(0)
    tP = _m2(pL + pR)
    lognorm = -np.log1p(-np.exp(-lam))
    if likelihood == "paper":
        if tP < tc:
            return -np.inf
        tL = _m2(pL) if len(iL) > 1 else 0.0
        tR = _m2(pR) if len(iR) > 1 else 0.0
        tmax, tmin = max(tL, tR), min(tL, tR)
        tP2 = (np.sqrt(tP) - np.sqrt(tmax)) ** 2

        def logf(t, s):
            if s <= 0:
                return -np.inf
            if t > 0:
                return lognorm + np.log(lam) - np.log(s) - lam * t / s
            return lognorm + np.log(-np.expm1(-lam * tc / s))

        return logf(tmax, tP) + logf(tmin, tP2) - np.log(4 * np.pi)
    tL, tR = _m2(pL), _m2(pR)
    K = tP**2 + tL**2 + tR**2 - 2 * tP * tL - 2 * tP * tR - 2 * tL * tR
    if not (tP > tc and K > 0):
        return -np.inf

    def logf(t, s, leaf):  # truncated exponential on [0, s), support by node type
        if not (s > 0 and t < s) or (leaf and t > tc) or (not leaf and t <= tc):
            return -np.inf
        return lognorm + np.log(lam) - np.log(s) - lam * t / s

    lleaf, rleaf = len(iL) == 1, len(iR) == 1
    a = logf(tL, tP, lleaf) + logf(tR, (np.sqrt(tP) - np.sqrt(tL)) ** 2, rleaf)
    b = logf(tR, tP, rleaf) + logf(tL, (np.sqrt(tP) - np.sqrt(tR)) ** 2, lleaf)
    return np.logaddexp(a, b) + np.log(8 * tP) - 0.5 * np.log(K) - np.log(4 * np.pi)


# ------------------------------------------------------------------------------------------
# problems
# ------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def reference_jets():
    with open(os.path.join(DATA, "ginkgo_jets_reference.json")) as f:
        return json.load(f)


@functools.lru_cache(maxsize=None)
def generator_jets():
    with open(os.path.join(DATA, "ginkgo_generator_jets_6_7.json")) as f:
        return json.load(f)["jets"]


def random_affinity(rng, n, low, high):
    W = rng.uniform(low, high, (n, n))
    W = np.triu(W, 1)
    W = W + W.T
    W[np.diag_indices(n)] = rng.uniform(-5, 5, n)  # the diagonal must be ignored
    return W


def perturb_jet(rng, X, scale=0.03):
    """Jitters the three-momenta and keeps every leaf's mass."""
    X = np.asarray(X, np.float64)
    m2 = np.maximum(X[:, 0] ** 2 - np.sum(X[:, 1:] ** 2, axis=1), 0.0)
    p = X[:, 1:] * (1 + scale * rng.standard_normal(X[:, 1:].shape))
    return np.column_stack([np.sqrt(np.sum(p**2, axis=1) + m2), p])


def ginkgo_problems(n: int, likelihood: str):
    """(leaves, lam, t_cut) with N = n and finite log Z: reference jets, perturbed jets and
    subsets of larger jets."""
    rng = np.random.default_rng(100 + n)
    jets = reference_jets()
    out = []
    cands = []
    for j in jets:
        X = np.asarray(j["leaves"])
        if len(X) == n:
            cands.append((X, j["lam"], j["t_cut"]))
    for j in jets[::3]:
        X = np.asarray(j["leaves"])
        if len(X) == n:
            cands.append((perturb_jet(rng, X), float(rng.uniform(1.0, 4.0)), j["t_cut"]))
        if len(X) > n:
            for _ in range(3):
                sub = np.sort(rng.choice(len(X), n, replace=False))
                cands.append((X[sub], j["lam"], j["t_cut"]))
    for X, lam, tc in cands:
        e = GinkgoEnergy(lam, tc, likelihood=likelihood)
        if np.isfinite(brute_force(e, X).log_z):
            out.append((X, lam, tc))
    return out[:12]


# ------------------------------------------------------------------------------------------
# brute-force comparison of one problem
# ------------------------------------------------------------------------------------------
def _assert_same_inf(a, b, atol, rtol=0.0, err=""):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert not np.any(np.isnan(a)), f"NaN in result {err}"
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=err)


def check_against_brute_force(energy, leaves, rng, n_subtrees=2, full=True):
    """Every exact quantity of `solve` against enumeration. ``full=False`` skips the checks
    that go through eager (un-jitted) library code: log_phi_of_tree, subtree marginals."""
    n = energy.n_elements(leaves)
    bf = brute_force(energy, leaves)
    E = bf.enum
    assert np.isfinite(bf.log_z)
    sol = solve(energy, leaves)
    assert sol.n_leaves == n
    # log Z (Eq. 2) and the MAP value (Prop. 2)
    assert abs(float(sol.log_z) - bf.log_z) <= TOL, (float(sol.log_z), bf.log_z)
    assert abs(float(sol.map_log_phi) - bf.log_phi.max()) <= TOL
    # the MAP tree: the argmax when unique, and in any case a tree with the MAP value
    order = np.argsort(-bf.log_phi)
    if len(order) == 1 or bf.log_phi[order[0]] - bf.log_phi[order[1]] > 1e-7:
        assert sol.map_tree.same_hierarchy(E.trees[order[0]])
    t_map = E.index[tuple(sorted(sol.map_tree.bitmasks()[n:].tolist()))]
    assert abs(bf.log_phi[t_map] - bf.log_phi.max()) <= TOL
    if full:
        assert abs(float(log_phi_of_tree(energy, leaves, sol.map_tree)) - float(sol.map_log_phi)) <= TOL
        # log_phi_of_tree of another tree equals the sum of the split table
        t = int(rng.integers(len(E.trees)))
        _assert_same_inf(log_phi_of_tree(energy, leaves, E.trees[t]), bf.log_phi[t], TOL)
    # every cluster marginal P(S in H) (Sec. 2.4)
    lm = np.asarray(sol.log_marginals)
    lz_tab, map_tab = np.asarray(sol.log_z_table), np.asarray(sol.map_table)
    assert lm.shape == (2**n,)
    assert lm[0] == -np.inf
    pm = np.exp(lm)
    _assert_same_inf(pm, bf.marg, atol=1e-12, rtol=TOL, err="cluster marginals")
    # every tree has 2N - 1 clusters; singletons and the root are in every tree
    assert abs(pm.sum() - (2 * n - 1)) <= 1e-9 * (2 * n - 1)
    np.testing.assert_allclose(pm[1 << np.arange(n)], 1.0, rtol=0, atol=1e-10)
    assert abs(pm[2**n - 1] - 1.0) <= 1e-10
    # the sub-trellis tables: log Z(S) and log phi*(S) of every vertex
    for S in range(1, 2**n):
        lz, mv = sub_trellis_brute(bf, S)
        _assert_same_inf(lz_tab[S], lz, TOL, err=f"log Z(S={S})")
        _assert_same_inf(map_tab[S], mv, TOL, err=f"phi*(S={S})")
    if not full:
        return sol, bf
    # sub-hierarchy marginals P(H_i) = sum of P(H) over trees containing H_i (Sec. 2.4),
    # over sets with Z(S) > 0 (Z(S) = 0: test_subtree_marginal_of_impossible_cluster_is_zero)
    for _ in range(n_subtrees):
        k = int(rng.integers(1, n + 1))
        elems = rng.permutation(n)[:k]  # leaf a of the subtree is element elems[a]
        if lz_tab[int(np.sum(1 << elems))] == -np.inf:
            continue
        Ek = enumerate_trees(k)
        sub = Ek.trees[int(rng.integers(len(Ek.trees)))]
        clusters = _local_to_global(elems)[sub.bitmasks()]
        p = bf.prob[np.all(E.contains[:, clusters], axis=1)].sum()
        got = float(subtree_log_marginal(sol, energy, leaves, sub, elems))
        assert not np.isnan(got), (elems, sub.to_nested())
        assert abs(np.exp(got) - p) <= 1e-12 + TOL * p, (np.exp(got), p)
    # the whole tree as its own sub-hierarchy: P(H_i) = P(H)
    t = int(rng.integers(len(E.trees)))
    got = float(subtree_log_marginal(sol, energy, leaves, E.trees[t], np.arange(n)))
    assert abs(np.exp(got) - bf.prob[t]) <= 1e-12 + TOL * bf.prob[t]
    return sol, bf


# ------------------------------------------------------------------------------------------
# brute force over every hierarchy, three kinds of energies
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7])
def test_dasgupta_against_brute_force(n):
    rng = np.random.default_rng(n)
    for _ in range(3 if n < 7 else 2):
        W = random_affinity(rng, n, 0.05, 1.0)
        check_against_brute_force(DasguptaEnergy(float(rng.uniform(0.05, 1.0))), W, rng)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7])
def test_correlation_against_brute_force(n):
    rng = np.random.default_rng(10 + n)
    for _ in range(3 if n < 7 else 2):
        W = random_affinity(rng, n, -1.0, 1.0)
        check_against_brute_force(CorrelationEnergy(float(rng.uniform(0.2, 2.0))), W, rng)


@pytest.mark.parametrize("likelihood", ["paper", "exact"])
@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_ginkgo_against_brute_force(n, likelihood):
    rng = np.random.default_rng(20 + n)
    problems = ginkgo_problems(n, likelihood)
    assert len(problems) >= 3
    for i, (X, lam, tc) in enumerate(problems):
        e = GinkgoEnergy(lam, tc, likelihood=likelihood)
        check_against_brute_force(e, X, rng, n_subtrees=1, full=i < 2)


def test_subtree_marginal_of_impossible_cluster_is_zero():
    """A sub-hierarchy over a set with Z(S) = 0 (no allowed split) has probability 0, not NaN."""
    j = next(j for j in reference_jets() if j["n_leaves"] == 5)
    X = np.asarray(j["leaves"])
    e = GinkgoEnergy(j["lam"], j["t_cut"])
    sol = solve(e, X)
    tz = np.asarray(sol.log_z_table)
    S = next(S for S in range(1, 2**5) if bin(S).count("1") == 2 and tz[S] == -np.inf)
    sub = Tree(np.array([[0, 1]]))
    got = float(subtree_log_marginal(sol, e, X, sub, _bits(S)))
    assert got == -np.inf


# ------------------------------------------------------------------------------------------
# the energies themselves: the library's log psi equals the formulas, split by split
# ------------------------------------------------------------------------------------------
def _check_table(energy, leaves, ref):
    n = energy.n_elements(leaves)
    table = split_table(energy, leaves)
    got, want = [], []
    for L in range(1, 2**n):
        for R in range(1, 2**n):
            if L & R == 0:
                got.append(table[L, R])
                want.append(ref(_bits(L), _bits(R)))
    got, want = np.array(got), np.array(want)
    assert np.array_equal(np.isfinite(got), np.isfinite(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-10, atol=1e-10)
    # psi is symmetric in its two children
    np.testing.assert_allclose(table, table.T, rtol=1e-12, atol=1e-12)


def test_energies_match_paper_formulas():
    rng = np.random.default_rng(5)
    W = random_affinity(rng, 6, 0.05, 1.0)
    _check_table(DasguptaEnergy(0.7), W, lambda l, r: ref_dasgupta(W, l, r, 0.7))
    W = random_affinity(rng, 6, -1.0, 1.0)
    _check_table(CorrelationEnergy(1.3), W, lambda l, r: ref_correlation(W, l, r, 1.3))
    for j in reference_jets()[8:13]:
        X = np.asarray(j["leaves"])
        for lik in ("paper", "exact"):
            e = GinkgoEnergy(j["lam"], j["t_cut"], likelihood=lik)
            _check_table(e, X, lambda l, r: ref_ginkgo(X, l, r, j["lam"], j["t_cut"], lik))


# ------------------------------------------------------------------------------------------
# Ginkgo reference values (ClusterTrellis, the authors' implementation)
# ------------------------------------------------------------------------------------------
class AllowedSplits(Energy):
    """Counting semiring restricted to the splits Ginkgo allows: psi = 1 where the Ginkgo
    potential is non-zero, 0 elsewhere, so Z counts the trees of non-zero likelihood."""

    base: GinkgoEnergy

    def subset_features(self, leaves, masks):
        return self.base.subset_features(leaves, masks)

    def log_psi(self, parent, left, right):
        lp = self.base.log_psi(parent, left, right)
        return jnp.where(jnp.isfinite(lp), 0.0, -jnp.inf)

    def validate_leaves(self, leaves, name="leaves"):
        return self.base.validate_leaves(leaves, name)


def truth_tree(jet) -> Tree:
    """The generating tree as a `Tree` whose leaf i is row i of ``jet['leaves']`` (matched by
    four-momentum)."""
    rows = jet["truth_tree"]
    content = np.asarray(jet["truth_content"])
    X = np.asarray(jet["leaves"])

    def nested(k):
        l, r = rows[k]
        if l == -1:
            d = np.abs(X - content[k]).max(axis=1)
            i = int(np.argmin(d))
            assert d[i] <= 1e-9 * np.abs(content[k]).max()
            return i
        return (nested(l), nested(r))

    return Tree.from_nested(nested(0))


@pytest.mark.parametrize("n", [4, 5])
def test_ginkgo_reference_values(n):
    jets = [j for j in reference_jets() if j["n_leaves"] == n]
    assert len(jets) == 10
    for j in jets:
        X = np.asarray(j["leaves"])
        e = GinkgoEnergy(j["lam"], j["t_cut"], likelihood="paper")
        sol = solve(e, X)
        assert abs(float(sol.log_z) - j["ct_log_z"]) <= 1e-8
        assert abs(float(sol.map_log_phi) - j["ct_map_log_likelihood"]) <= 1e-8
        # number of trees with non-zero likelihood: brute force and the trellis in the
        # counting semiring restricted to allowed splits
        bf = brute_force(e, X)
        assert int(np.sum(np.isfinite(bf.log_phi))) == j["ct_num_trees"]
        count = float(jnp.exp(solve(AllowedSplits(e), X, marginals=False).log_z))
        assert abs(count - j["ct_num_trees"]) <= 1e-9 * j["ct_num_trees"]
        # the generating tree's likelihood (recorded by the generator; its node masses were
        # stored in float32, hence the tolerance)
        t = truth_tree(j)
        lp = float(log_phi_of_tree(e, X, t))
        assert abs(lp - j["truth_log_likelihood"]) <= 1e-5 * abs(j["truth_log_likelihood"])
        assert lp <= float(sol.map_log_phi) + 1e-12


# ------------------------------------------------------------------------------------------
# counting semiring
# ------------------------------------------------------------------------------------------
def _log_double_factorial(k):
    return float(np.sum(np.log(np.arange(k, 0, -2, dtype=np.float64)))) if k > 0 else 0.0


@pytest.mark.parametrize("n", [2, 3, 12])
def test_unit_energy_counts_trees(n):
    sol = solve(UnitEnergy(), np.zeros((n, 1)), marginals=False)
    assert abs(float(sol.log_z) - _log_double_factorial(2 * n - 3)) <= 1e-9
    assert float(sol.map_log_phi) == 0.0
    # every vertex S is the root of a sub-trellis over |S| elements: log Z(S) = log (2|S|-3)!!
    # (this covers every N = 1 .. n)
    sizes = np.array([bin(S).count("1") for S in range(2**n)])
    want = np.array([_log_double_factorial(2 * k - 3) for k in sizes])
    np.testing.assert_allclose(np.asarray(sol.log_z_table)[1:], want[1:], rtol=0, atol=1e-9)
    np.testing.assert_array_equal(np.asarray(sol.map_table)[1:], 0.0)


def test_uniform_marginals_closed_form():
    """With psi = 1 (Dasgupta at beta = 0), P(S in H) = (2k-3)!! (2N-2k-1)!! / (2N-3)!!:
    the trees containing S are a tree over S times a tree with S collapsed to one leaf."""
    n = 7
    rng = np.random.default_rng(0)
    sol = solve(DasguptaEnergy(0.0), random_affinity(rng, n, 0.05, 1.0))
    assert abs(float(sol.log_z) - _log_double_factorial(2 * n - 3)) <= 1e-9
    assert abs(float(sol.map_log_phi)) <= 1e-12
    lm = np.asarray(sol.log_marginals)
    ldf = _log_double_factorial
    for S in range(1, 2**n):
        k = bin(S).count("1")
        assert abs(lm[S] - (ldf(2 * k - 3) + ldf(2 * n - 2 * k - 1) - ldf(2 * n - 3))) <= 1e-9


def test_num_splits_and_memory():
    for n in range(1, 11):
        count = sum(math.comb(n, k) * (2 ** (k - 1) - 1) for k in range(2, n + 1))
        assert num_splits(n) == count
    mem = [memory_required(n) for n in range(1, MAX_EXACT_LEAVES + 1)]
    assert all(b > a for a, b in zip(mem, mem[1:]))


# ------------------------------------------------------------------------------------------
# exact sampling (Alg. 2)
# ------------------------------------------------------------------------------------------
def test_sampling_matches_exact_distribution():
    jets = [j for j in reference_jets() if j["n_leaves"] == 5]
    j = max(jets, key=lambda j: j["ct_num_trees"])
    X = np.asarray(j["leaves"])
    e = GinkgoEnergy(j["lam"], j["t_cut"])
    bf = brute_force(e, X)
    num = 20000
    key = jax.random.PRNGKey(0)
    s = sample(key, e, X, num)
    assert s.n_leaves == 5 and np.shape(s.parent) == (num, 4)
    idx = np.array([bf.enum.index[k] for k in s.keys()])  # every sample is a valid hierarchy
    # each sample's log phi is that of its tree
    np.testing.assert_allclose(np.asarray(s.log_phi), bf.log_phi[idx], rtol=0, atol=TOL)
    for i in range(3):
        t = s.tree(i)
        assert t.same_hierarchy(bf.enum.trees[idx[i]])
        assert abs(float(log_phi_of_tree(e, X, t)) - float(s.log_phi[i])) <= TOL
    # zero-probability trees are never drawn; frequencies match P(H) = phi(H) / Z
    counts = np.bincount(idx, minlength=len(bf.prob)).astype(float)
    assert np.all(counts[bf.prob == 0] == 0)
    expected = num * bf.prob
    big = expected >= 5
    f_obs = np.append(counts[big], counts[~big].sum())
    f_exp = np.append(expected[big], expected[~big].sum())
    if f_exp[-1] == 0:
        f_obs, f_exp = f_obs[:-1], f_exp[:-1]
    assert len(f_obs) >= 10  # probabilities are spread over many trees
    _, p = stats.chisquare(f_obs, f_exp * f_obs.sum() / f_exp.sum())
    assert p > 1e-3, p
    # same key, same samples; another key, other samples
    s2 = sample(key, e, X, num)
    np.testing.assert_array_equal(np.asarray(s2.parent), np.asarray(s.parent))
    np.testing.assert_array_equal(np.asarray(s2.left), np.asarray(s.left))
    s3 = sample(jax.random.PRNGKey(1), e, X, num)
    assert not np.array_equal(np.asarray(s3.parent), np.asarray(s.parent))


# ------------------------------------------------------------------------------------------
# batches of problems of different sizes
# ------------------------------------------------------------------------------------------
def _ginkgo_batch():
    """Ten jets with 3..7 leaves (twice each), all with lam = 2, t_cut = 16."""
    ref = reference_jets()
    gen = generator_jets()
    pick = {
        3: [np.asarray(ref[0]["leaves"])[[0, 1, 2]], np.asarray(ref[12]["leaves"])[[0, 2, 4]]],
        4: [np.asarray(ref[1]["leaves"]), np.asarray(ref[5]["leaves"])],
        5: [np.asarray(ref[11]["leaves"]), np.asarray(ref[17]["leaves"])],
        6: [np.asarray(j["leaves"]) for j in gen if len(j["leaves"]) == 6][:2],
        7: [np.asarray(j["leaves"]) for j in gen if len(j["leaves"]) == 7][:2],
    }
    jets = [x for k in (3, 4, 5, 6, 7) for x in pick[k]]
    order = np.random.default_rng(3).permutation(len(jets))
    return [jets[i] for i in order]


def _pad(problems, n_max, fill, affinity):
    B = len(problems)
    shape = (B, n_max, n_max) if affinity else (B, n_max, 4)
    out = np.empty(shape)
    for b, x in enumerate(problems):
        out[b] = fill(b, out[b].shape)
        n = len(x)
        if affinity:
            out[b, :n, :n] = x
        else:
            out[b, :n] = x
    return out


_FILLS = [
    lambda b, s: np.zeros(s),
    lambda b, s: np.random.default_rng(b).uniform(-1e3, 1e3, s),
    lambda b, s: np.full(s, np.nan),
]


def _compare_batch(energy, batch, problems, singles, marginals=False):
    trees = map_trees(batch)
    for b, (x, sol) in enumerate(zip(problems, singles)):
        n = len(x)
        assert int(batch.n_leaves[b]) == n
        _assert_same_inf(batch.log_z[b], sol.log_z, 1e-10, err=f"log_z[{b}]")
        _assert_same_inf(batch.map_log_phi[b], sol.map_log_phi, 1e-10, err=f"map[{b}]")
        assert trees[b].same_hierarchy(sol.map_tree)
        _assert_same_inf(np.asarray(batch.log_z_table[b])[: 2**n], sol.log_z_table, 1e-10)
        _assert_same_inf(np.asarray(batch.map_table[b])[: 2**n], sol.map_table, 1e-10)
    if marginals:
        for b, (x, sol) in enumerate(zip(problems, singles)):
            n = len(x)
            lm = np.asarray(batch.log_marginals[b])
            # real clusters: the problem's own marginals; clusters containing padding: 0
            _assert_same_inf(lm[: 2**n], sol.log_marginals, 1e-10, err=f"log_marginals[{b}], N={n}")
            assert np.all(lm[2**n :] == -np.inf), f"log_marginals[{b}]: padding clusters"


def test_solve_batch_ginkgo_equals_individual():
    """Ten jets with 3..7 leaves padded to 7: every problem's values equal brute force, and
    for N <= 5 also the individual `solve` (N = 6, 7 individually would cost two more
    compilations; brute force already pins those values)."""
    e = GinkgoEnergy(2.0, 16.0, likelihood="paper")
    jets = _ginkgo_batch()
    nl = np.array([len(x) for x in jets])
    assert sorted(set(nl.tolist())) == [3, 4, 5, 6, 7]
    results = [
        solve_batch(e, _pad(jets, 7, fill, False), nl, devices=[jax.devices()[0]], tables=True) for fill in _FILLS
    ]
    for batch in results:
        trees = map_trees(batch)
        for b, x in enumerate(jets):
            n = len(x)
            bf = brute_force(e, x)
            assert np.isfinite(bf.log_z)
            assert int(batch.n_leaves[b]) == n
            assert abs(float(batch.log_z[b]) - bf.log_z) <= TOL
            assert abs(float(batch.map_log_phi[b]) - bf.log_phi.max()) <= TOL
            assert trees[b].same_hierarchy(bf.enum.trees[int(np.argmax(bf.log_phi))])
    small = [b for b, x in enumerate(jets) if len(x) <= 5]
    singles = [solve(e, jets[b]) for b in small]
    _compare_batch(
        e, jax.tree_util.tree_map(lambda a: a[np.array(small)], results[0]), [jets[b] for b in small], singles
    )
    for batch in results[1:]:  # padding content does not matter: identical output
        for field in ("log_z", "map_log_phi", "log_z_table", "backpointer"):
            np.testing.assert_array_equal(np.asarray(getattr(batch, field)), np.asarray(getattr(results[0], field)))


def test_solve_batch_dasgupta_equals_individual():
    energy = DasguptaEnergy(0.6)
    rng = np.random.default_rng(4)
    probs = [random_affinity(rng, n, 0.05, 1.0) for n in (5, 3, 7, 4, 6, 7)]
    nl = np.array([len(x) for x in probs])
    singles = [solve(energy, x) for x in probs]
    results = [
        solve_batch(energy, _pad(probs, 7, fill, True), nl, marginals=True, devices=[jax.devices()[0]], tables=True)
        for fill in _FILLS[:2]
    ]
    for batch in results:
        _compare_batch(energy, batch, probs, singles, marginals=True)


# ------------------------------------------------------------------------------------------
# gradients
# ------------------------------------------------------------------------------------------
def _central_difference(f, x, h):
    return (f(x + h) - f(x - h)) / (2 * h)


def test_grad_log_partition_ginkgo_lam():
    j = reference_jets()[3]
    X = np.asarray(j["leaves"])
    n, tc, lam0 = len(X), j["t_cut"], 2.0
    # gradient w.r.t. the energy module reaches its fields (lam, t_cut)
    g = jax.grad(lambda e: log_partition(e, X))(GinkgoEnergy(lam0, tc))
    g_lam, g_tc = float(g.lam), float(g.t_cut)
    fd_lam = float(_central_difference(lambda lam: log_partition(GinkgoEnergy(lam, tc), X), lam0, 1e-5))
    fd_tc = float(_central_difference(lambda t: log_partition(GinkgoEnergy(lam0, t), X), tc, 1e-5))
    assert abs(g_lam - fd_lam) <= 1e-6 * abs(fd_lam)
    assert abs(g_tc - fd_tc) <= 1e-6 * abs(fd_tc)
    # d log Z / d lam = E_P[d log phi(H) / d lam] by enumeration (only trees with P > 0)
    bf = brute_force(GinkgoEnergy(lam0, tc), X)
    d_tab = np.zeros((2**n, 2**n))
    d_tab[_pairs(n)] = np.asarray(jax.jacfwd(lambda lam: _split_values(GinkgoEnergy(lam, tc), jnp.asarray(X), n))(lam0))
    live = bf.prob > 0
    dphi = d_tab[bf.enum.L[live], bf.enum.R[live]].sum(axis=1)
    assert abs(np.sum(bf.prob[live] * dphi) - g_lam) <= 1e-9 * abs(g_lam)


def test_grad_log_partition_dasgupta_beta():
    rng = np.random.default_rng(7)
    n = 5
    W = random_affinity(rng, n, 0.05, 1.0)
    f = lambda b: log_partition(DasguptaEnergy(b), W)
    b0 = 0.4
    g = float(jax.grad(f)(b0))
    fd = float(_central_difference(f, b0, 1e-5))
    assert abs(g - fd) <= 1e-6 * abs(fd)
    # d log Z / d beta = -E_P[cost(H)], Dasgupta's cost summed over the splits of H
    bf = brute_force(DasguptaEnergy(b0), W)
    E = bf.enum
    cost = np.array(
        [sum(-ref_dasgupta(W, _bits(l), _bits(r), 1.0) for l, r in zip(E.L[t], E.R[t])) for t in range(len(E.trees))]
    )
    assert abs(-np.sum(bf.prob * cost) - g) <= 1e-9 * abs(g)


# ------------------------------------------------------------------------------------------
# composition with jit and NumPyro
# ------------------------------------------------------------------------------------------
def test_log_partition_inside_jit_and_numpyro():
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer.util import log_density

    j = reference_jets()[2]
    X = np.asarray(j["leaves"])
    tc = j["t_cut"]
    t = truth_tree(j)

    def model(leaves, tree):
        lam = numpyro.sample("lam", dist.Gamma(2.0, 1.0))
        e = GinkgoEnergy(lam, tc)
        # log P(tree | leaves, lam) = log phi(tree) - log Z
        numpyro.factor("trellis", log_phi_of_tree(e, leaves, tree) - log_partition(e, leaves))

    ld, _ = log_density(model, (X, t), {}, {"lam": 2.0})
    e = GinkgoEnergy(2.0, tc)
    bf = brute_force(e, X)
    log_phi_truth = bf.log_phi[bf.enum.index[tuple(sorted(t.bitmasks()[len(X) :].tolist()))]]
    want = float(dist.Gamma(2.0, 1.0).log_prob(2.0)) + log_phi_truth - bf.log_z
    assert np.isfinite(float(ld))
    assert abs(float(ld) - want) <= 1e-9
    # log_partition traced inside jit (leaves as tracers) gives the same value
    jitted = jax.jit(lambda lv: log_partition(e, lv))(jnp.asarray(X))
    assert abs(float(jitted) - bf.log_z) <= 1e-9


# ------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------
def test_too_many_leaves_points_to_sparse_solve():
    n = MAX_EXACT_LEAVES + 1
    W = np.ones((n, n))
    with pytest.raises(ValueError, match="sparse_solve"):
        solve(DasguptaEnergy(), W)
    with pytest.raises(ValueError, match="sparse_solve"):
        sample(jax.random.PRNGKey(0), DasguptaEnergy(), W, 3)
    with pytest.raises(ValueError, match="sparse_solve"):
        log_partition(DasguptaEnergy(), W)
    with pytest.raises(ValueError, match="sparse_solve"):
        solve_batch(DasguptaEnergy(), W[None], np.array([3]))
    with pytest.raises(ValueError, match="sparse_solve"):
        solve(DasguptaEnergy(), np.ones((4, 4)), max_leaves=3)
    with pytest.raises(ValueError, match="sparse_solve"):
        solve(DasguptaEnergy(), np.ones((4, 4)), max_bytes=16)


def test_bad_leaves_raise_value_error():
    X = np.asarray(reference_jets()[0]["leaves"])
    g = GinkgoEnergy(2.0, 16.0)
    bad = X.copy()
    bad[1, 2] = np.nan
    for fn in (
        lambda lv: solve(g, lv),
        lambda lv: log_partition(g, lv),
        lambda lv: sample(jax.random.PRNGKey(0), g, lv, 2),
    ):
        with pytest.raises(ValueError, match="NaN"):
            fn(bad)
        with pytest.raises(ValueError, match=r"\[N, 4\]"):
            fn(X[:, :3])
    with pytest.raises(ValueError, match="NaN"):
        solve_batch(g, bad[None], np.array([4]))
    W = random_affinity(np.random.default_rng(0), 4, 0.1, 1.0)
    d = DasguptaEnergy()
    with pytest.raises(ValueError, match="square"):
        solve(d, W[:3])
    asym = W.copy()
    asym[0, 1] += 0.5
    with pytest.raises(ValueError, match="symmetric"):
        solve(d, asym)
    with pytest.raises(ValueError, match="symmetric"):
        solve(CorrelationEnergy(), asym)
    with pytest.raises(ValueError):
        solve(d, np.zeros((0, 0)))
    with pytest.raises(ValueError):
        GinkgoEnergy(-1.0, 16.0)
    with pytest.raises(ValueError):
        GinkgoEnergy(2.0, 16.0, likelihood="other")


def test_non_energy_raises_type_error():
    W = random_affinity(np.random.default_rng(0), 3, 0.1, 1.0)
    for bad in ("dasgupta", lambda a, b, c: 0.0, None):
        with pytest.raises(TypeError):
            solve(bad, W)
        with pytest.raises(TypeError):
            sample(jax.random.PRNGKey(0), bad, W, 2)
        with pytest.raises(TypeError):
            solve_batch(bad, W[None], np.array([3]))
        with pytest.raises(TypeError):
            log_partition(bad, W)


def test_bad_sample_counts_and_batch_sizes():
    W = random_affinity(np.random.default_rng(0), 3, 0.1, 1.0)
    d = DasguptaEnergy()
    for num in (0, -2, 2.5):
        with pytest.raises(ValueError, match="num_samples"):
            sample(jax.random.PRNGKey(0), d, W, num)
    with pytest.raises(ValueError, match="n_leaves"):
        solve_batch(d, W[None], np.array([4]))  # above N_max = 3
    with pytest.raises(ValueError, match="n_leaves"):
        solve_batch(d, W[None], np.array([0]))
    with pytest.raises(ValueError, match="n_leaves"):
        solve_batch(d, np.stack([W, W]), np.array([3]))  # one size for two problems
    with pytest.raises(ValueError, match="n_leaves"):
        solve_batch(d, W[None], np.array([3.0]))
    with pytest.raises(ValueError, match="leaves_padded"):
        solve_batch(d, np.ones(3), np.array([3]))


# ------------------------------------------------------------------------------------------
# compilation
# ------------------------------------------------------------------------------------------
def test_solve_does_not_recompile_for_new_data():
    rng = np.random.default_rng(9)
    n = 4
    solve(DasguptaEnergy(0.5), random_affinity(rng, n, 0.05, 1.0))
    before = trellis_classes._class_core._cache_size()
    for beta in (0.5, 1.7):
        solve(DasguptaEnergy(beta), random_affinity(rng, n, 0.05, 1.0))
    assert trellis_classes._class_core._cache_size() == before
    X = np.asarray(reference_jets()[0]["leaves"])
    solve(GinkgoEnergy(2.0, 16.0), X)
    before = trellis_classes._class_core._cache_size()
    solve(GinkgoEnergy(3.0, 12.0), perturb_jet(rng, X))
    assert trellis_classes._class_core._cache_size() == before


def test_cluster_marginals_without_the_map_equal_brute_force():
    # cluster_marginals runs the inside pass without the MAP, then the outside pass: the
    # same probabilities as solve's and as enumeration's; the overflow check is solve's
    rng = np.random.default_rng(23)
    X = perturb_jet(rng, np.asarray(generator_jets()[0]["leaves"]))
    cases = [(DasguptaEnergy(0.9), random_affinity(rng, 6, 0.05, 1.0))]
    cases += [(GinkgoEnergy(2.0, 16.0, likelihood=lk), X) for lk in ("paper", "exact")]
    for energy, leaves in cases:
        bf = brute_force(energy, leaves)
        assert np.isfinite(bf.log_z)
        got = np.asarray(cluster_marginals(energy, leaves))
        np.testing.assert_allclose(got, bf.marg, rtol=TOL, atol=1e-12)
        np.testing.assert_allclose(got, np.exp(np.asarray(solve(energy, leaves).log_marginals)), rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="overflow float64"):
        cluster_marginals(DasguptaEnergy(-1e308), random_affinity(rng, 4, 0.5, 1.0))


@pytest.mark.parametrize("row_bits", [4, 5])
def test_size_class_chunks_that_split_a_parent(monkeypatch, row_bits):
    # with 2 rows (32 or 64 splits) per chunk, the parents of 7 and 8 elements (inside) and
    # the clusters of 1 and 2 (outside) spread over several chunks, combined by logaddexp /
    # the first maximum across chunks: the same tables, backpointers and marginals as the
    # level-unrolled program (rows of 32 splits: the parents of up to 6 elements fill part
    # of a row)
    rng = np.random.default_rng(29)
    X = perturb_jet(rng, np.asarray(generator_jets()[0]["leaves"]))
    X8 = np.concatenate([X, perturb_jet(rng, X)[:1] * 0.5])[:8]
    monkeypatch.setitem(trellis_classes._CLASS_SHAPE, 8, (2, row_bits))
    trellis_classes._class_tables.cache_clear()
    try:
        for energy, leaves in (
            (GinkgoEnergy(2.0, 16.0), X8),
            (DasguptaEnergy(0.7), random_affinity(rng, 8, 0.05, 1.0)),
        ):
            n = leaves.shape[0]
            got = trellis_classes.class_call(energy, jnp.asarray(leaves), n, True, True)
            ref = trellis_exact._solve_core(energy, jnp.asarray(leaves), n, marginals=True)
            assert np.isfinite(float(ref[0]))
            for a, b in zip(got[:5], ref[:5]):
                _assert_same_inf(a, b, 1e-12, err=type(energy).__name__)
            np.testing.assert_array_equal(np.asarray(got[5]), np.asarray(ref[5]))
    finally:
        trellis_classes._class_tables.cache_clear()


@pytest.mark.parametrize("with_map,marginals", [(True, True), (False, False), (False, True)])
def test_larger_size_classes_give_the_same_solution(with_map, marginals):
    # the programs of the 9..10, 11..12, 13..14, 15..16, 17..18 and 19..20 classes (chunks of
    # 64 rows of 8 splits, 128 rows of 32 or 1024 rows of 64) run a small problem padded to their bound: the same
    # tables, MAP and marginals as its own class's program, for the MAP program, the
    # log-Z-only one (linear sums) and the marginals without the MAP
    rng = np.random.default_rng(31)
    X = perturb_jet(rng, np.asarray(generator_jets()[0]["leaves"]))
    energy, n = GinkgoEnergy(2.0, 16.0, likelihood="exact"), X.shape[0]

    def run(bound):
        args = trellis_classes._class_args(energy, X, n, bound)
        res = trellis_classes._class_core(*args, bound=bound, with_map=with_map, marginals=marginals)
        return [None if x is None else np.asarray(x)[: 2**n] if np.ndim(x) else np.asarray(x) for x in res]

    ref = run(8)
    assert np.isfinite(ref[0])
    for bound in (10, 12, 14, 16, 18, 20):
        got = run(bound)
        for a, b in zip(got[:5], ref[:5]):
            assert (a is None) == (b is None)
            if a is not None:
                _assert_same_inf(a, b, 1e-12, err=f"bound {bound}")
        if with_map:
            np.testing.assert_array_equal(got[5], ref[5])


def test_classes_of_one_n_above_the_last_class(monkeypatch):
    # from the last class to 24 leaves each N has a class of its own (bound N, no padding);
    # with the classes cut to (8,) and own classes up to 11, problems of 9..11 leaves run
    # there: the level-unrolled program's tables, MAP and marginals; above, none
    assert [trellis_classes.size_class(n) for n in (17, 18, 19, 20, 21, 24)] == [18, 18, 20, 20, 21, 24]
    assert trellis_classes.size_class(25) is None
    monkeypatch.setattr(trellis_classes, "_SIZE_CLASSES", (8,))
    monkeypatch.setattr(trellis_classes, "_OWN_CLASS_MAX", 11)
    rng = np.random.default_rng(37)
    for n in (9, 11):
        assert trellis_classes.size_class(n) == n
        W = random_affinity(rng, n, 0.05, 1.0)
        got = trellis_classes.class_call(DasguptaEnergy(0.8), W, n, True, True)
        ref = trellis_exact._solve_core(DasguptaEnergy(0.8), jnp.asarray(W), n, marginals=True)
        for a, b in zip(got[:5], ref[:5]):
            _assert_same_inf(a, b, 1e-12, err=f"n {n}")
        np.testing.assert_array_equal(np.asarray(got[5]), np.asarray(ref[5]))
        z = trellis_classes.class_call(DasguptaEnergy(0.8), W, n, False, False, tables=False)
        np.testing.assert_allclose(float(z), float(ref[0]), rtol=1e-12)
    assert trellis_classes.size_class(12) is None


def test_accelerator_chunks_of_the_large_classes(monkeypatch):
    # on a GPU / TPU the classes from 17 leaves take 2^(bound - 8) rows a chunk (at least
    # the CPU's 1024, at most 2^16); forced here on the CPU with the threshold lowered to
    # the class of 10 and small chunks (3 rows of 8 splits) the host schedule follows the
    # shape and the results are the CPU shape's
    assert trellis_classes._accelerator_rows(18) == 1 << 10
    assert trellis_classes._accelerator_rows(22) == 1 << 14
    assert trellis_classes._accelerator_rows(24) == 1 << 16
    monkeypatch.setattr(trellis_classes, "_on_accelerator", lambda: True)
    assert trellis_classes._class_shape(24) == (1 << 16, 6)
    assert trellis_classes._class_shape(20) == (1 << 12, 6)
    assert trellis_classes._class_shape(16) == trellis_classes._CLASS_SHAPE[16]
    rng = np.random.default_rng(41)
    W = random_affinity(rng, 10, 0.05, 1.0)
    ref = trellis_classes.class_call(DasguptaEnergy(0.8), W, 10, True, True)
    monkeypatch.setattr(trellis_classes, "_ACCELERATOR_FROM", 10)
    monkeypatch.setattr(trellis_classes, "_accelerator_rows", lambda bound: 3)
    monkeypatch.setitem(trellis_classes._CLASS_SHAPE, 10, (1, 3))
    assert trellis_classes._class_shape(10) == (3, 3)
    got = trellis_classes.class_call(DasguptaEnergy(0.8), W, 10, True, True)
    assert trellis_classes._device_tables(10, 10)[2].shape[0] > 10 * len(
        trellis_classes._class_tables(10, 10, (1 << 6, 3))[3][0]
    )
    for a, b in zip(got[:5], ref[:5]):
        _assert_same_inf(a, b, 1e-12)
    np.testing.assert_array_equal(np.asarray(got[5]), np.asarray(ref[5]))


def test_one_compiled_program_per_size_class():
    # 5 and 7 leaves share the size class of 8: one compiled program (log Z, MAP and
    # marginals) serves both, and its values are the brute force's
    rng = np.random.default_rng(17)
    energy = DasguptaEnergy(0.9)
    W5, W7 = random_affinity(rng, 5, 0.05, 1.0), random_affinity(rng, 7, 0.05, 1.0)
    assert trellis_classes.size_class(5) == trellis_classes.size_class(7) == 8
    sol5 = solve(energy, W5)
    before = trellis_classes._class_core._cache_size()
    sol7 = solve(energy, W7)
    assert trellis_classes._class_core._cache_size() == before
    for W, sol in ((W5, sol5), (W7, sol7)):
        bf = brute_force(energy, W)
        np.testing.assert_allclose(float(sol.log_z), bf.log_z, rtol=1e-12)
        np.testing.assert_allclose(float(sol.map_log_phi), bf.log_phi.max(), rtol=1e-12)
        best = bf.enum.trees[int(np.argmax(bf.log_phi))]
        assert sorted(best.bitmasks()[W.shape[0] :].tolist()) == sorted(sol.map_tree.bitmasks()[W.shape[0] :].tolist())
        np.testing.assert_allclose(np.exp(np.asarray(sol.log_marginals)), bf.marg, atol=1e-10)


def _patched_class_call(monkeypatch, name, value, energy, leaves, marginals):
    """`class_call` (log Z only, or with the marginals) with the function ``name`` of
    `trellis.classes` returning ``value``: it is read when the program is traced."""
    monkeypatch.setattr(trellis_classes, name, lambda dtype: value)
    jax.clear_caches()
    return trellis_classes.class_call(energy, jnp.asarray(leaves), leaves.shape[0], False, marginals)


def test_outside_push_and_its_pull_fallback(monkeypatch):
    # The size-class programs push split probabilities in linear space and fall back to the
    # log-space pull when a buildable cluster is less likely than e^-PUSH_FLOOR: (1) on a jet
    # the push (the usual path) equals the pull, forced by a floor above every probability;
    # (2) Dasgupta at beta = 200 has clusters near e^-890 that the push alone flushes to 0:
    # the program takes the pull and gives them as the level-unrolled program does
    rng = np.random.default_rng(37)
    X = perturb_jet(rng, np.asarray(generator_jets()[0]["leaves"]))
    W = random_affinity(rng, 7, 0.05, 1.0)
    cases = [(GinkgoEnergy(2.0, 16.0, likelihood="exact"), X), (DasguptaEnergy(200.0), W)]

    assert trellis_classes._push_floor(jnp.float64) == trellis_classes.PUSH_FLOOR == 500.0
    assert 40.0 < trellis_classes._push_floor(jnp.float32) < 50.0  # float32 flushes below e^-87

    def marginals(energy, leaves, floor):
        return np.asarray(_patched_class_call(monkeypatch, "_push_floor", floor, energy, leaves, True)[2])

    try:
        for energy, leaves in cases:
            n = leaves.shape[0]
            ref = np.asarray(trellis_exact._solve_core(energy, jnp.asarray(leaves), n, marginals=True)[2])
            scale = max(1.0, abs(float(np.max(np.abs(ref[np.isfinite(ref)])))))
            got, pull, push = (marginals(energy, leaves, f) for f in (500.0, -1.0, 1e9))
            for a in (got, pull):
                _assert_same_inf(a, ref, 1e-13 * scale, err=type(energy).__name__)
            if isinstance(energy, GinkgoEnergy):
                assert ref[np.isfinite(ref)].min() > -500.0  # the push was used and is exact
                _assert_same_inf(push, ref, 1e-12, err="push")
            else:
                assert ref[np.isfinite(ref)].min() < -745.0
                assert np.sum(np.isfinite(ref) & ~np.isfinite(push)) > 0  # what the fallback prevents
    finally:
        jax.clear_caches()


def test_linear_space_log_z_and_its_shifted_fallback(monkeypatch):
    # The log-Z-only size-class programs sum each parent's terms in linear space, shifted by
    # the best peel max_i log Z(S \ {i}), and recompute a chunk's rows shifted by their own
    # max when a parent's sum is neither 0 nor in [floor, inf): (1) on jets and a mild
    # affinity problem the linear sums (the usual path) equal the forced fallback and the
    # level-unrolled program; (2) Dasgupta at beta = 200, summed as a generic energy, puts
    # every split ~e^-4000 below its peel shift: the linear sums alone lose buildable
    # clusters, the program falls back and gives the level-unrolled tables; as a separable
    # energy (its own path, shifted by one of the sum's own terms: no underflow) the sums
    # alone give them; (3)
    # with every x of log_psi_parts out of range the fallback gives them too

    class GenericDasgupta(DasguptaEnergy):  # the same energy without its separable form
        def log_psi_separable(self, feats, bound):
            return None

    rng = np.random.default_rng(41)
    X = perturb_jet(rng, np.asarray(generator_jets()[0]["leaves"]))
    W7 = random_affinity(rng, 7, 0.05, 1.0)
    cases = [
        (GinkgoEnergy(2.0, 16.0), X),
        (GinkgoEnergy(2.0, 16.0, likelihood="exact"), X),
        (DasguptaEnergy(0.7), random_affinity(rng, 9, 0.05, 1.0)),
        (DasguptaEnergy(200.0), W7),
        (GenericDasgupta(200.0), W7),
        (CorrelationEnergy(300.0), random_affinity(rng, 8, -1.0, 1.0)),
    ]
    tiny, floor, x_range = trellis_classes._linear_floor(jnp.float64)
    assert tiny == np.finfo(np.float64).tiny and floor == 2.0**-888 and x_range == 2.0**53
    assert trellis_classes._linear_floor(jnp.float32) == (2.0**-126, 2.0**-50, 2.0**24)

    def table(energy, leaves, floors):
        return np.asarray(_patched_class_call(monkeypatch, "_linear_floor", floors, energy, leaves, False)[3])

    try:
        for energy, leaves in cases:
            n = leaves.shape[0]
            ref = np.asarray(trellis_exact._solve_core(energy, jnp.asarray(leaves), n, marginals=False)[3])
            # as built; every parent in doubt; every x != 1 out of range; no fallback at all
            floors = ((tiny, floor, x_range), (tiny, np.inf, x_range), (tiny, floor, 1.0), (0.0, 0.0, np.inf))
            got, forced, no_x, alone = (table(energy, leaves, f) for f in floors)
            scale = max(1.0, float(np.max(np.abs(ref[np.isfinite(ref)]))))
            for a in (got, forced, no_x):
                _assert_same_inf(a, ref, 1e-14 * scale, err=type(energy).__name__)
            if not isinstance(energy, GenericDasgupta):
                _assert_same_inf(alone, ref, 1e-14 * scale, err="linear sums alone")
            else:
                assert np.sum(np.isfinite(ref) & ~np.isfinite(alone)) > 0  # what the fallback prevents
    finally:
        jax.clear_caches()


def test_a_subclass_that_changes_the_potential_leaves_the_separable_pass():
    # a DasguptaEnergy subclass with its own cost (or log_psi) but the inherited
    # log_psi_separable: the class program sums its own log psi (the level-unrolled
    # program's log Z), not Dasgupta's; the built-in energies keep the separable form
    class Doubled(DasguptaEnergy):
        def cost(self, parent, left, right):
            return 2.0 * super().cost(parent, left, right)

    class Shifted(DasguptaEnergy):
        def log_psi(self, parent, left, right):
            return super().log_psi(parent, left, right) - 0.1 * left.size

    rng = np.random.default_rng(61)
    W = random_affinity(rng, 9, 0.05, 1.0)
    for energy in (Doubled(0.7), Shifted(0.7)):
        assert trellis_energies.separable_form(energy, energy.features(jnp.asarray(W)), 10) is None
        ref = float(trellis_exact._log_partition_core(energy, jnp.asarray(W), 9))
        np.testing.assert_allclose(float(log_partition(energy, W)), ref, rtol=1e-12)
    assert trellis_energies.separable_form(DasguptaEnergy(0.7), DasguptaEnergy(0.7).features(jnp.asarray(W)), 10)
    np.testing.assert_allclose(
        float(log_partition(Doubled(0.7), W)), float(log_partition(DasguptaEnergy(1.4), W)), rtol=1e-12
    )


def test_affinity_features_by_doubling_match_the_membership_products():
    # the affinity energies' features of all 2^N subsets, built by doubling (O(2^N)), equal
    # the membership-matrix products of subset_features (size, inner sum, negative inner
    # sum), with a nonzero diagonal to ignore and mixed signs
    rng = np.random.default_rng(59)
    for n in (1, 2, 7):
        W = random_affinity(rng, n, -1.0, 1.0)
        for energy in (DasguptaEnergy(1.0), CorrelationEnergy(1.0)):
            got = energy.features(jnp.asarray(W))
            ref = energy.subset_features(jnp.asarray(W), trellis_energies.all_subset_masks(n))
            for a, b in zip(got, ref):
                assert a.shape == (2**n,)
                np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-13)

    class OwnFeatures(DasguptaEnergy):  # a subclass's own subset_features are its features
        def subset_features(self, leaves, masks):
            f = super().subset_features(leaves, masks)
            return f._replace(w_in=2.0 * f.w_in)

    W = random_affinity(rng, 5, 0.0, 1.0)
    got = OwnFeatures(1.0).features(jnp.asarray(W))
    ref = DasguptaEnergy(1.0).features(jnp.asarray(W))
    np.testing.assert_allclose(np.asarray(got.w_in), 2.0 * np.asarray(ref.w_in), rtol=1e-13)


def _every_split(n):
    """``(S, L)``: the parent and left masks of every split of ``n`` elements, level by level."""
    S, L = [], []
    for k in range(2, n + 1):
        masks, pos = trellis_subsets.level_tables(n, k)
        Lk = np.asarray(trellis_subsets.splits_of(jnp.asarray(pos), k))
        S.append(np.broadcast_to(masks[:, None], Lk.shape).ravel())
        L.append(Lk.ravel())
    return np.concatenate(S), np.concatenate(L)


def test_log_psi_separable_recombines_to_log_psi():
    # a(S) + c[|S|] (h(L) + h(R)) = log psi on every split of 9 elements for the separable
    # energies (positive and mixed-sign affinities); the others return None
    rng = np.random.default_rng(53)
    n, bound = 9, 10
    S, L = _every_split(n)
    size = np.array([bin(int(m)).count("1") for m in S])
    cases = [
        (DasguptaEnergy(0.8), random_affinity(rng, n, 0.05, 1.0)),
        (CorrelationEnergy(1.3), random_affinity(rng, n, -1.0, 1.0)),
    ]
    for energy, W in cases:
        f = energy.features(jnp.asarray(energy.pad_leaves(W, bound)))
        take = lambda idx: jax.tree_util.tree_map(lambda a: a[idx], f)
        lp = np.asarray(energy.log_psi(take(S), take(L), take(S ^ L)))
        a, c, h = (np.asarray(v) for v in energy.log_psi_separable(f, bound))
        assert a.shape == h.shape == (2**bound,) and c.shape == (bound + 1,)
        np.testing.assert_allclose(a[S] + c[size] * (h[L] + h[S ^ L]), lp, rtol=1e-12, atol=1e-12)
    assert GinkgoEnergy(2.0, 16.0).log_psi_separable(None, 8) is None


def test_log_psi_parts_recombine_to_log_psi():
    # log_psi_parts gives (b, x) with log psi = b + log x on every split of a jet (x in
    # range, no split possible in one and impossible in the other), for every Ginkgo variant
    # and the splitting energy; the default is (log psi, 1)
    from jaxhc.trellis import SplittingEnergy

    rng = np.random.default_rng(47)
    X = perturb_jet(rng, np.asarray(generator_jets()[0]["leaves"]))
    n = X.shape[0]
    S, L = _every_split(n)
    energies = [
        GinkgoEnergy(2.0, 16.0),
        GinkgoEnergy(2.0, 16.0, lam_root=3.0),
        GinkgoEnergy(2.0, 16.0, likelihood="exact"),
        GinkgoEnergy(2.0, 16.0, likelihood="exact", phase_space=False, lam_root=1.5),
        GinkgoEnergy(2.0, 16.0, likelihood="exact", ordered=True),
        SplittingEnergy(),
    ]
    for energy in energies:
        f = energy.features(jnp.asarray(X))
        take = lambda idx: jax.tree_util.tree_map(lambda a: a[idx], f)
        lp = np.asarray(energy.log_psi(take(S), take(L), take(S ^ L)))
        b, x = (np.broadcast_to(np.asarray(v), lp.shape) for v in energy.log_psi_parts(take(S), take(L), take(S ^ L)))
        fin = np.isfinite(lp)
        assert fin.mean() > 0.2 and (isinstance(energy, SplittingEnergy) or not fin.all())  # Ginkgo: both kinds
        np.testing.assert_array_equal(fin, np.isfinite(b))
        assert np.all((x[fin] > 2.0**-53) & (x[fin] < 2.0**53))
        np.testing.assert_allclose(b[fin] + np.log(x[fin]), lp[fin], rtol=1e-13, atol=1e-12)
    W = random_affinity(rng, 5, 0.05, 1.0)
    d = DasguptaEnergy(0.7)
    f = d.features(jnp.asarray(W))
    take = lambda idx: jax.tree_util.tree_map(lambda a: a[idx], f)
    b, x = d.log_psi_parts(take(S[S < 32]), take(L[S < 32]), take((S ^ L)[S < 32]))
    np.testing.assert_array_equal(
        np.asarray(b), np.asarray(d.log_psi(take(S[S < 32]), take(L[S < 32]), take((S ^ L)[S < 32])))
    )
    assert x == 1.0


def test_subset_sums_and_four_momentum_features_without_the_membership_matrix():
    # features() of the four-momentum energies sums the leaves over all subsets in one
    # elementwise loop: the same sums, bit for bit, as the membership matrix product, and the
    # same features as subset_features(all masks); a subclass that defines only
    # subset_features keeps the generic path
    from jaxhc.trellis import SplittingEnergy
    from jaxhc.trellis.energies import FourMomentumEnergy, all_subset_masks, subset_sums

    rng = np.random.default_rng(43)
    X = perturb_jet(rng, np.asarray(generator_jets()[0]["leaves"]))
    n = X.shape[0]
    masks = all_subset_masks(n)
    p, size = subset_sums(jnp.asarray(X))
    np.testing.assert_array_equal(np.asarray(p), np.asarray(masks @ jnp.asarray(X)))
    np.testing.assert_array_equal(np.asarray(size), np.asarray(jnp.sum(masks, axis=-1)))
    for energy in (
        GinkgoEnergy(2.0, 16.0),
        GinkgoEnergy(2.0, 16.0, likelihood="exact", lam_root=3.0),
        SplittingEnergy(),
    ):
        a, b = energy.features(jnp.asarray(X)), energy.subset_features(jnp.asarray(X), masks)
        for fa, fb in zip(a, b):
            np.testing.assert_array_equal(np.asarray(fa), np.asarray(fb))

    class MassOnly(FourMomentumEnergy):  # a user's energy: subset_features and log_psi only
        def subset_features(self, leaves, masks):
            q = masks @ jnp.asarray(leaves)
            return (q[..., 0] ** 2 - jnp.sum(q[..., 1:] ** 2, axis=-1),)

        def log_psi(self, parent, left, right):
            return -jnp.abs(parent[0] - left[0] - right[0]) * 1e-3

    (t,) = MassOnly().features(jnp.asarray(X))
    np.testing.assert_allclose(
        np.asarray(t), np.asarray(masks @ X)[:, 0] ** 2 - np.sum(np.asarray(masks @ X)[:, 1:] ** 2, axis=1)
    )
    assert np.isfinite(float(solve(MassOnly(), X).log_z))
