"""Property-based tests (hypothesis) of invariances and identities that hold for every input:

- the exact trellis: log Z, the MAP value and the cluster marginals are invariant to
  permuting the leaves (the marginals move with the leaves); the marginals lie in [0, 1],
  are 1 for the singletons and the root, and sum to 2N - 1 (every binary hierarchy over N
  leaves has 2N - 1 clusters); exact samples follow P(H) = phi(H) / Z, with P(H) from brute
  force over all (2N - 3)!! hierarchies;
- BHC: the log evidence, the DPM lower bound and the hierarchy do not depend on the order
  of the rows (continuous data, so no ties);
- every conjugate family: ``log p(X) = sum_i log p(x_i | x_1 .. x_{i-1})`` (the chain rule of
  its sequential predictives, built from ``empty_stats``, ``merge`` and ``log_predictive``);
- `Tree`: linkage (against scipy), JSON, Newick (parsed back here), nested and parent-form
  round trips and leaf relabelling, on random merge orders.

Compilation dominates: every jitted function sees one fixed shape per test (the examples
draw values, not shapes), so each compiles once and the examples cost milliseconds. The
Tree conversions run in NumPy, so those tests draw the number of leaves too.
"""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy.cluster import hierarchy as sch
from scipy.special import logsumexp

import jaxhc
from jaxhc.components import (
    BetaBernoulli,
    BetaBinomial,
    DirichletMultinomial,
    IndependentNormal,
    NormalGamma,
    NormalInverseWishart,
    NormalKnownCov,
)
from jaxhc.tree import ParentTree, Tree
from jaxhc.trellis import DasguptaEnergy, sample, solve

from reference import all_binary_trees

# database=None: keep hypothesis from writing a .hypothesis/ folder into the checkout (a
# failing example is printed in full, with the seed to reproduce it)
SETTINGS = dict(max_examples=100, deadline=None, database=None)


def _floats(lo, hi):
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False)


def _close(a, b, rtol, atol=0.0):
    return abs(float(a) - float(b)) <= atol + rtol * max(abs(float(a)), abs(float(b)))


# ==========================================================================================
# exact trellis (N = 5: one compilation of `solve` and one of `sample`)
# ==========================================================================================
N_TRELLIS = 5


@st.composite
def affinities(draw, n=N_TRELLIS):
    """A symmetric affinity matrix ``[n, n]`` with entries in [-1, 1] (negative affinities
    included: Dasgupta's potential is defined for them too)."""
    A = draw(hnp.arrays(np.float64, (n, n), elements=_floats(-1.0, 1.0)))
    return 0.5 * (A + A.T)


def _permuted_masks(perm):
    """``out[S']``: the bitmask of ``{perm[i] : i in S'}`` for every subset ``S'``."""
    n = len(perm)
    s = np.arange(2**n)
    out = np.zeros(2**n, np.int64)
    for i, p in enumerate(perm):
        out |= ((s >> i) & 1) << int(p)
    return out


@settings(**SETTINGS)
@given(W=affinities(), beta=_floats(0.0, 3.0), perm=st.permutations(range(N_TRELLIS)))
def test_trellis_invariant_to_leaf_permutation(W, beta, perm):
    """Element ``i`` of the permuted problem is element ``perm[i]`` of the original: log Z and
    the MAP value are unchanged, the MAP tree and the marginals follow the elements."""
    perm = np.asarray(perm)
    e = DasguptaEnergy(beta)
    a = solve(e, W)
    b = solve(e, W[np.ix_(perm, perm)])
    assert _close(a.log_z, b.log_z, 1e-10, 1e-10), (float(a.log_z), float(b.log_z))
    assert _close(a.map_log_phi, b.map_log_phi, 1e-10, 1e-10)
    ma, mb = np.exp(np.asarray(a.log_marginals)), np.exp(np.asarray(b.log_marginals))
    np.testing.assert_allclose(mb, ma[_permuted_masks(perm)], rtol=0, atol=1e-10)
    # the MAP value is the value of the permuted problem's MAP tree in the original problem
    # (the MAP tree itself may differ where two trees tie)
    tb = b.map_tree.relabel_leaves(perm)
    val = -beta * _dasgupta_log_phi_terms(W, [tb])[0]
    assert _close(val, a.map_log_phi, 1e-10, 1e-10), (val, float(a.map_log_phi))


@settings(**SETTINGS)
@given(W=affinities(), beta=_floats(0.0, 3.0))
def test_trellis_marginals_are_probabilities_summing_to_2n_minus_1(W, beta):
    n = N_TRELLIS
    sol = solve(DasguptaEnergy(beta), W)
    m = np.exp(np.asarray(sol.log_marginals))
    assert m[0] == 0.0  # the empty set is no cluster
    assert np.all(m >= 0.0) and np.all(m <= 1.0 + 1e-12), m
    # every hierarchy holds the N singletons and the root
    np.testing.assert_allclose(m[1 << np.arange(n)], 1.0, rtol=0, atol=1e-12)
    assert abs(m[2**n - 1] - 1.0) <= 1e-12
    # E[number of clusters] = 2N - 1 in every hierarchy, so the marginals sum to 2N - 1
    assert abs(m.sum() - (2 * n - 1)) <= 1e-9, m.sum()
    # ... and those of a fixed size k sum to the expected number of size-k clusters, which
    # lies in [0, floor(N / k)] (clusters of one size are disjoint)
    sizes = np.array([bin(S).count("1") for S in range(2**n)])
    for k in range(2, n):
        tot = m[sizes == k].sum()
        assert -1e-12 <= tot <= n // k + 1e-9, (k, tot)


# -- sampling ---------------------------------------------------------------------------
_ENUM_TREES = list(all_binary_trees(N_TRELLIS))  # (2N - 3)!! = 105 hierarchies


def _split_sets(trees):
    """``(L, R, size)`` of every inner node of every tree: ``[T, n-1, n]`` leaf indicators of
    the two children, ``[T, n-1]`` the parent's size."""
    L, R, size = [], [], []
    for t in trees:
        sets = t.leaf_sets().astype(float)
        ch = np.asarray(t.children)
        L.append(sets[ch[:, 0]])
        R.append(sets[ch[:, 1]])
        size.append(sets[t.n_leaves :].sum(axis=1))
    return np.asarray(L), np.asarray(R), np.asarray(size)


def _dasgupta_log_phi_terms(W, trees=None, splits=None):
    """``sum over inner nodes of |P| * sum_{i in L, j in R} W_ij`` per tree (NumPy), so that
    ``log phi(H) = -beta * value`` (Eq. 4 of the trellis paper written out again)."""
    W = np.asarray(W, float) - np.diag(np.diag(W))
    L, R, size = _split_sets(trees) if splits is None else splits
    return np.sum(size * np.einsum("tki,ij,tkj->tk", L, W, R), axis=1)


def _tree_key(t: Tree):
    return tuple(sorted(int(b) for b in t.bitmasks()[t.n_leaves :]))


_ENUM_INDEX = {_tree_key(t): i for i, t in enumerate(_ENUM_TREES)}
_ENUM_SPLITS = _split_sets(_ENUM_TREES)
assert len(_ENUM_INDEX) == math.prod(range(2 * N_TRELLIS - 3, 0, -2))
NUM_SAMPLES = 4000
# the total-variation test below fails with probability < 1e-9 per example when the sampler
# is exact, so 100 examples per run make a false alarm practically impossible
_TV_DELTA = 1e-9


@settings(**SETTINGS)
@given(W=affinities(), beta=_floats(0.0, 2.0), seed=st.integers(0, 2**31 - 1))
def test_trellis_samples_follow_exact_tree_probabilities(W, beta, seed):
    """4000 samples per example (one compilation, ~40 ms a call, so the full 100 examples):
    the empirical distribution over the 105 hierarchies is within a total-variation bound of
    P(H) = phi(H) / Z computed by brute force.

    Bound: TV = 1/2 sum_H |c_H / m - p_H|. By Jensen E[TV] <= 1/2 sum_H sqrt(p_H (1 - p_H) / m),
    and one sample moves TV by at most 1 / m, so by McDiarmid P(TV > E[TV] + t) <=
    exp(-2 m t^2); with t = sqrt(log(1 / delta) / (2 m)) the test fails with probability
    below delta for an exact sampler (about 0.07 + 0.08 at most for m = 4000; a sampler that
    ignored the potentials is far outside it for most draws)."""
    m = NUM_SAMPLES
    log_phi = -beta * _dasgupta_log_phi_terms(W, splits=_ENUM_SPLITS)
    log_z = logsumexp(log_phi)
    p = np.exp(log_phi - log_z)
    e = DasguptaEnergy(beta)
    # the DP's log Z is brute force's (marginals=True: the program the tests above compiled)
    sol = solve(e, W)
    assert _close(sol.log_z, log_z, 1e-10, 1e-10), (float(sol.log_z), log_z)
    s = sample(jax.random.PRNGKey(seed), e, W, m)
    idx = np.array([_ENUM_INDEX[k] for k in s.keys()])  # every sample is a hierarchy
    # each sample's reported log phi is its tree's
    np.testing.assert_allclose(np.asarray(s.log_phi), log_phi[idx], rtol=1e-10, atol=1e-10)
    freq = np.bincount(idx, minlength=len(p)) / m
    tv = 0.5 * np.abs(freq - p).sum()
    bound = 0.5 * np.sum(np.sqrt(p * (1 - p) / m)) + math.sqrt(math.log(1 / _TV_DELTA) / (2 * m))
    assert tv <= bound, (tv, bound)


# ==========================================================================================
# BHC: invariance to the order of the rows
# ==========================================================================================
N_BHC, D_BHC = 8, 2


@settings(**SETTINGS)
@given(
    seed=st.integers(0, 2**32 - 1),
    perm=st.permutations(range(N_BHC)),
    alpha=_floats(0.1, 10.0),
    kappa=_floats(0.05, 2.0),
    a=_floats(1.0, 5.0),
    b=_floats(0.1, 2.0),
    spread=_floats(0.5, 5.0),
)
def test_bhc_invariant_to_row_order(seed, perm, alpha, kappa, a, b, spread):
    """Continuous data (drawn from a seeded generator: ties, and hence order-dependent tie
    breaks, have probability zero) from three clusters, a Normal-Gamma prior with drawn
    hyperparameters (the greedy search is the same for every family; this one compiles in
    about half the time of NormalInverseWishart): permuting the rows changes neither the log
    evidence, nor the DPM lower bound, nor the hierarchy."""
    rng = np.random.default_rng(seed)
    centers = spread * rng.normal(size=(3, D_BHC))
    X = centers[rng.integers(0, 3, N_BHC)] + rng.normal(size=(N_BHC, D_BHC))
    comp = NormalGamma(np.zeros(D_BHC), kappa, a, b)
    perm = np.asarray(perm)
    ra = jaxhc.bhc(X, comp, alpha)
    rb = jaxhc.bhc(X[perm], comp, alpha)
    assert _close(ra.log_evidence, rb.log_evidence, 1e-8), (float(ra.log_evidence), float(rb.log_evidence))
    assert _close(ra.dpm_lower_bound, rb.dpm_lower_bound, 1e-8), (float(ra.dpm_lower_bound), float(rb.dpm_lower_bound))
    # row i of X[perm] is row perm[i] of X
    assert rb.tree.relabel_leaves(perm).same_hierarchy(ra.tree)


# ==========================================================================================
# components: log marginal = sum of sequential log predictives
# ==========================================================================================
N_ROWS, D_COMP = 6, 3


@jax.jit
def _chain_rule(comp, X):
    """``(sum_i log p(x_i | x_<i), log p(X), log p of the merged sequential stats)``."""

    def step(carry, x):
        s, acc = carry
        acc = acc + comp.log_predictive(x, s)
        return (comp.merge(s, comp.stats(x[None, :])), acc), None

    (s, total), _ = jax.lax.scan(step, (comp.empty_stats(), jnp.zeros((), X.dtype)), X)
    return total, comp.log_marginal(comp.stats(X)), comp.log_marginal(s)


def _check_chain_rule(comp, X):
    X = comp.validate_data(X)
    total, direct, merged = (float(v) for v in _chain_rule(comp, jnp.asarray(X)))
    assert np.isfinite(direct), direct
    assert _close(total, direct, 1e-8, 1e-8), (total, direct, total - direct)
    assert _close(merged, direct, 1e-8, 1e-8), (merged, direct)


def _pd_matrix(draw, d, lo=0.3, hi=2.0):
    """``L L^T`` with a drawn lower-triangular ``L`` (diagonal in [lo, hi])."""
    L = np.tril(draw(hnp.arrays(np.float64, (d, d), elements=_floats(-1.0, 1.0))), -1)
    L += np.diag(draw(hnp.arrays(np.float64, (d,), elements=_floats(lo, hi))))
    return L @ L.T


def _gauss_data():
    return hnp.arrays(np.float64, (N_ROWS, D_COMP), elements=_floats(-5.0, 5.0))


def _vec(lo, hi, d=D_COMP):
    return hnp.arrays(np.float64, (d,), elements=_floats(lo, hi))


@settings(**SETTINGS)
@given(data=st.data(), X=_gauss_data(), mean=_vec(-3, 3), kappa=_floats(0.05, 5.0), dof_excess=_floats(0.1, 10.0))
def test_chain_rule_normal_inverse_wishart(data, X, mean, kappa, dof_excess):
    scale = _pd_matrix(data.draw, D_COMP)
    _check_chain_rule(NormalInverseWishart(mean, kappa, D_COMP - 1 + dof_excess, scale), X)


@settings(**SETTINGS)
@given(data=st.data(), X=_gauss_data(), mean=_vec(-3, 3))
def test_chain_rule_normal_known_cov(data, X, mean):
    prior_cov = _pd_matrix(data.draw, D_COMP)
    noise_cov = _pd_matrix(data.draw, D_COMP)
    _check_chain_rule(NormalKnownCov(mean, prior_cov, noise_cov), X)


@settings(**SETTINGS)
@given(X=_gauss_data(), mean=_vec(-3, 3), kappa=_floats(0.05, 5.0), a=_floats(0.5, 10.0), b=_vec(0.1, 5.0))
def test_chain_rule_normal_gamma(X, mean, kappa, a, b):
    _check_chain_rule(NormalGamma(mean, kappa, a, b), X)


@settings(**SETTINGS)
@given(
    X=hnp.arrays(np.float64, (N_ROWS, D_COMP), elements=st.one_of(_floats(-5.0, 5.0), st.just(np.nan))),
    mean=_vec(-3, 3),
    prior_var=_vec(0.1, 5.0),
    noise_var=_vec(0.1, 5.0),
)
def test_chain_rule_independent_normal(X, mean, prior_var, noise_var):
    _check_chain_rule(IndependentNormal(mean, prior_var, noise_var), X)


@settings(**SETTINGS)
@given(
    X=hnp.arrays(np.float64, (N_ROWS, D_COMP), elements=st.sampled_from([0.0, 1.0, np.nan])),
    a=_vec(0.1, 10.0),
    b=_vec(0.1, 10.0),
)
def test_chain_rule_beta_bernoulli(X, a, b):
    """Missing entries (NaN) included: they enter neither side."""
    _check_chain_rule(BetaBernoulli(a, b), X)


TRIALS = (1, 4, 7)  # static in BetaBinomial (it sizes tables): fixed, so one compilation


@settings(**SETTINGS)
@given(data=st.data(), a=_vec(0.1, 10.0), b=_vec(0.1, 10.0))
def test_chain_rule_beta_binomial(data, a, b):
    cols = [
        data.draw(hnp.arrays(np.float64, (N_ROWS,), elements=st.sampled_from([np.nan] + list(range(t + 1)))))
        for t in TRIALS
    ]
    _check_chain_rule(BetaBinomial(a, b, TRIALS), np.stack(cols, axis=1))


@settings(**SETTINGS)
@given(X=hnp.arrays(np.float64, (N_ROWS, D_COMP), elements=st.integers(0, 8).map(float)), alpha=_vec(0.1, 10.0))
def test_chain_rule_dirichlet_multinomial(X, alpha):
    _check_chain_rule(DirichletMultinomial(alpha), X)


def test_every_component_family_is_covered():
    """A new family in jaxhc.components needs a chain-rule property here."""
    import jaxhc.components as C

    families = {
        name
        for name in C.__all__
        if isinstance(getattr(C, name), type)
        and issubclass(getattr(C, name), C.Component)
        and getattr(C, name) is not C.Component
    }
    covered = {
        "NormalInverseWishart",
        "NormalKnownCov",
        "NormalGamma",
        "BetaBernoulli",
        "BetaBinomial",
        "DirichletMultinomial",
        "IndependentNormal",
    }
    assert families == covered, families ^ covered


# ==========================================================================================
# Tree conversions on random merge orders
# ==========================================================================================
@st.composite
def trees(draw, min_n=1, max_n=12, with_values=False):
    """A random binary `Tree`: each merge joins two drawn active nodes (in drawn order);
    heights non-decreasing in the merge order (as `to_linkage` needs for an exact round
    trip), with repeats allowed."""
    n = draw(st.integers(min_n, max_n))
    active = list(range(n))
    rows = []
    for t in range(n - 1):
        a = active.pop(draw(st.integers(0, len(active) - 1)))
        b = active.pop(draw(st.integers(0, len(active) - 1)))
        rows.append((a, b))
        active.append(n + t)
    steps = draw(hnp.arrays(np.float64, (n - 1,), elements=_floats(0.0, 10.0)))
    heights = np.cumsum(steps)
    values = None
    if with_values:
        values = {
            "log_r": draw(hnp.arrays(np.float64, (n - 1,), elements=_floats(-1e6, 0.0))),
            "count": draw(hnp.arrays(np.int64, (n - 1,), elements=st.integers(-5, 5))),
        }
    return Tree(np.asarray(rows, np.int64).reshape(n - 1, 2), heights, values).validate()


def _reference_clusters(t: Tree) -> set:
    """Leaf sets of all nodes, from the children rows alone (independent of `leaf_sets`)."""
    n = t.n_leaves
    sets = [frozenset([i]) for i in range(n)]
    for a, b in np.asarray(t.children).tolist():
        sets.append(sets[a] | sets[b])
    return set(sets)


@settings(**SETTINGS)
@given(t=trees(min_n=2))
def test_tree_linkage_round_trip_and_scipy(t):
    n = t.n_leaves
    Z = t.to_linkage()
    assert Z.shape == (n - 1, 4)
    assert sch.is_valid_linkage(Z)
    np.testing.assert_array_equal(Z[:, 3], t.sizes()[n:])
    u = Tree.from_linkage(Z)
    np.testing.assert_array_equal(np.asarray(u.children), np.asarray(t.children))
    np.testing.assert_array_equal(np.asarray(u.heights), np.asarray(t.heights))
    # scipy reads the same hierarchy: its left-to-right leaf order and its cluster sizes
    np.testing.assert_array_equal(sch.leaves_list(Z), t.leaf_order())
    root = sch.to_tree(Z)
    assert root.get_count() == n and root.id == 2 * n - 2
    assert abs(root.dist - float(np.max(t.heights))) == 0.0


@settings(**SETTINGS)
@given(t=trees(with_values=True))
def test_tree_json_round_trip(t):
    s = t.to_json()
    u = Tree.from_json(s)
    assert json.loads(s)["n_leaves"] == t.n_leaves
    np.testing.assert_array_equal(np.asarray(u.children).reshape(-1, 2), np.asarray(t.children))
    np.testing.assert_array_equal(np.asarray(u.heights), np.asarray(t.heights))  # floats exact
    assert set(u.values) == set(t.values)
    for k in t.values:
        np.testing.assert_array_equal(np.asarray(u.values[k]), np.asarray(t.values[k]))
    assert Tree.from_dict(t.to_dict()).same_hierarchy(t)
    # the parent form keeps the clusters through its own JSON round trip
    p = ParentTree.from_json(t.to_parent().to_json())
    assert p.clusters() == _reference_clusters(t)


# -- Newick ----------------------------------------------------------------------------
def _parse_newick(s: str):
    """Minimal Newick reader for binary trees: ``(nested pairs of names, {name: distance from
    the root})``; names may be quoted ('...' with '' for a quote), edges may carry ``:len``."""
    assert s.endswith(";"), s
    pos = 0

    def name():
        nonlocal pos
        if s[pos] == "'":
            out, pos = [], pos + 1
            while True:
                if s[pos] == "'":
                    if s[pos + 1 : pos + 2] == "'":
                        out.append("'")
                        pos += 2
                        continue
                    pos += 1
                    return "".join(out)
                out.append(s[pos])
                pos += 1
        start = pos
        while s[pos] not in ",():;":
            pos += 1
        return s[start:pos]

    def length():
        nonlocal pos
        if s[pos] != ":":
            return 0.0
        start = pos = pos + 1
        while s[pos] not in ",();":
            pos += 1
        return float(s[start:pos])

    depth = {}  # leaf name -> distance from the root of the subtree being parsed

    def node():
        nonlocal pos
        if s[pos] != "(":
            nm = name()
            depth[nm] = 0.0
            return nm
        pos += 1
        kids = [edge()]
        assert s[pos] == ",", s[pos:]
        pos += 1
        kids.append(edge())
        assert s[pos] == ")", s[pos:]
        pos += 1
        return tuple(kids)

    def edge():
        # a subtree, then the length of the edge above it, which moves its leaves down
        before = set(depth)
        sub = node()
        ln = length()
        for k in set(depth) - before:
            depth[k] += ln
        return sub

    tree = node()
    assert s[pos:] == ";", s[pos:]
    return tree, depth


_LABEL = st.text(alphabet=st.sampled_from(list("ab_-.'(),:;[] ")), min_size=1, max_size=4)


@settings(**SETTINGS)
@given(data=st.data(), t=trees())
def test_tree_newick_round_trip(data, t):
    n = t.n_leaves
    # leaf ids as names
    nested, _ = _parse_newick(t.to_newick())
    ids = lambda x: tuple(ids(c) for c in x) if isinstance(x, tuple) else int(x)
    assert Tree.from_nested(ids(nested)).clusters() == _reference_clusters(t)
    # arbitrary labels (quoted where they hold Newick's special characters), branch lengths
    labels = data.draw(st.lists(_LABEL, min_size=n, max_size=n, unique=True))
    nested, depth = _parse_newick(t.to_newick(labels, branch_lengths=True))
    back = {lab: i for i, lab in enumerate(labels)}
    relabel = lambda x: tuple(relabel(c) for c in x) if isinstance(x, tuple) else back[x]
    assert Tree.from_nested(relabel(nested)).clusters() == _reference_clusters(t)
    # edges are height differences and the leaves sit at height 0: every leaf lies at the
    # root's height from the root (up to the 6 significant digits written per edge)
    top = float(np.max(t.heights)) if n > 1 else 0.0
    assert set(depth) == set(labels)
    for lab in labels:
        assert abs(depth[lab] - top) <= 1e-5 * max(top, 1e-300) * n, (lab, depth[lab], top)


@settings(**SETTINGS)
@given(t=trees(), data=st.data())
def test_tree_nested_parent_and_relabel(t, data):
    n = t.n_leaves
    ref = _reference_clusters(t)
    assert t.clusters() == ref
    nested = t.to_nested()
    u = Tree.from_nested(nested)
    assert u.clusters() == ref and u.same_hierarchy(t)
    assert u.to_nested() == nested  # child order is kept, merges renumbered in post-order
    # bitmasks and leaf sets agree
    bits = t.bitmasks()
    sets = t.leaf_sets()
    np.testing.assert_array_equal(sets, ((bits[:, None] >> np.arange(n)) & 1).astype(bool))
    assert t.to_parent().validate().clusters() == ref
    # relabelling: leaf perm[i] plays the role of leaf i
    perm = np.asarray(data.draw(st.permutations(range(n))))
    r = t.relabel_leaves(perm).validate()
    assert r.clusters() == {frozenset(int(perm[i]) for i in c) for c in ref}
    inv = np.argsort(perm)
    assert r.relabel_leaves(inv).same_hierarchy(t)
