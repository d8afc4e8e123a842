"""The Pitman-Yor diffusion tree (Knowles & Ghahramani): prior over trees, Gaussian and probit
likelihoods.

A tree over ``N`` points is a `jaxhc.tree.ParentTree` with ``heights`` = divergence times:

* nodes ``0..N-1`` are the leaves (data points), nodes ``N..m-1`` are branch points (any
  arity ``>= 2``); ``parent[k]`` is the parent node, ``-1`` for the root branch point (the
  first divergence; the origin at time 0 is implicit, with one edge origin -> root), and
  ``-2`` marks a free slot of a fixed-capacity array (ignored everywhere, see below);
* ``times[k]`` is in ``(0, 1)`` for branch points and ``1.0`` for leaves; a parent diverges
  before its children. Children diverge later than parents, so sorting nodes by time,
  latest first, is a post-order; the array kernels use that (no recursion).

Divergence function (section 3): ``a(t) = c / (1 - t)``, ``A(t) = -c log(1 - t)``.

Densities (all array functions are jittable and take fixed-size ``(parent, times)``):

* `log_structure_times`: ``log P(tree, times)``, Eq. 9 per branch point plus Eq. 11 per edge.
  **Erratum**: Eq. 9 as printed omits a factor ``Gamma(1 - beta)^-(K_b - 1)`` per branch point
  (the last line of Appendix A writes ``prod_l Gamma(n_l - beta)`` where the products
  ``prod_{c=1}^{n_l - 1} (c - beta)`` give ``Gamma(n_l - beta) / Gamma(1 - beta)`` for the
  ``K_b - 1`` branches other than the one of the first point). With the factor the density
  equals the paper's own N = 4 example (Figure 1 text), integrates to one over structures and
  times, and equals the sequential generative process for any ordering of the points. The
  printed Eq. 9 is off by ``Gamma(1 - beta)^-(N - 1)``, a constant in the tree that still
  depends on ``beta``.
* `log_locations`: Eq. 12, a Gaussian per edge (origin at 0).
* `log_marginal_likelihood`: ``log p(X | tree, times, sigma2)`` with all branch-point
  locations integrated out by upward belief propagation (section 5).
* `probit_log_likelihood`: the probit observation model of section 5.4.

The divergence function, ``H_n``, the branch factors and the tree helpers shared with the
sampler and the EM are in `jaxhc.models.pydt_math` (re-exported here: `divergence`,
`cumulative_divergence`, `harmonic`, `FREE`).

`sample_prior` runs the generative process of section 1; `pydt` is the NumPyro program, with
the tree as one exact site (`PYDTTree`: its ``sample`` runs the process, its ``log_prob`` is
`log_structure_times`), the branch-point locations as Brownian increments and the leaves as
the observed site ``X``.

Hyperparameters: ``c > 0``, ``0 <= beta < 1``, ``alpha >= -2 beta`` (the paper allows
``beta = 1``, but there the divergence rate ``Gamma(m - beta) / Gamma(m + 1 + alpha)`` of a
path followed by one point is infinite: every tree collapses at ``t = 0`` into a star, which
has no density; so ``beta = 1`` is rejected). ``alpha = -2 beta`` is allowed (no branch point
gets a third branch).

Validation: the public functions check their inputs eagerly (clear ``ValueError``) when the
inputs are concrete; called on traced values (inside ``jit``/``vmap``/``grad``) they skip the
checks and run the kernel, so they batch with ``jax.vmap`` directly.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import gammaln, log_ndtr
from numpyro.distributions import constraints

from .._internal.deprecation import keyword_program
from .._internal.validation import numpy_rng
from ..tree import ParentTree
from .pydt_math import (
    FREE,
    check_X,
    cumulative_divergence,
    divergence,
    harmonic,
    harmonic_table,
    log_new_branch_table,
    sample_prior_tree,
    time_order,
)

__all__ = [
    "FREE",
    "PYDTSample",
    "PYDTTree",
    "check_hyper",
    "check_tree",
    "cumulative_divergence",
    "divergence",
    "harmonic",
    "log_joint",
    "log_locations",
    "log_marginal_likelihood",
    "log_structure_times",
    "node_counts",
    "probit_log_likelihood",
    "pydt",
    "sample_prior",
]


# ---------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------
def _concrete(*xs) -> bool:
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(xs))


def check_hyper(c=None, alpha=None, beta=None, sigma2=None):
    """Raise ``ValueError`` naming the argument unless ``c > 0``, ``0 <= beta < 1``,
    ``alpha >= -2 beta`` and ``sigma2 > 0`` (arguments left ``None`` are not checked).

    Traced values are not checked."""
    if not _concrete(c, alpha, beta, sigma2):
        return

    def scalar(v, name):
        a = np.asarray(v, dtype=float)
        if a.shape != () or not np.isfinite(a):
            raise ValueError(f"{name} must be a finite scalar, got {v!r}")
        return float(a)

    if c is not None and not scalar(c, "c") > 0:
        raise ValueError(f"c (divergence function a(t) = c / (1 - t)) must be > 0, got {c}")
    if sigma2 is not None and not scalar(sigma2, "sigma2") > 0:
        raise ValueError(f"sigma2 (Brownian motion variance) must be > 0, got {sigma2}")
    if beta is not None:
        b = scalar(beta, "beta")
        if not 0.0 <= b <= 1.0:
            raise ValueError(f"beta must be in [0, 1), got {beta}")
        if b == 1.0:
            raise ValueError(
                "beta must be in [0, 1): at beta = 1 the divergence rate "
                "Gamma(m - beta) / Gamma(m + 1 + alpha) of a path followed by one "
                "point is infinite and every tree collapses at t = 0"
            )
    if alpha is not None:
        a = scalar(alpha, "alpha")
        b = 0.0 if beta is None else float(beta)
        if a < -2.0 * b:
            raise ValueError(f"alpha must be >= -2 beta = {-2.0 * b}, got {alpha}")


def check_tree(parent, times, n_leaves=None):
    """Validate a PYDT tree in array form; returns the number of leaves ``N``.

    Checks: ``parent`` 1-D integer with exactly one ``-1`` (``-2`` = free slot), ids in
    range, no cycles; the childless used nodes are exactly ``0..N-1`` (and ``N ==
    n_leaves`` when given); every branch point has ``>= 2`` children; ``times`` has the
    shape of ``parent``, leaves at 1.0, branch points in ``(0, 1)``, and every node later
    than its parent. Raises ``ValueError`` with the reason."""
    par = np.asarray(parent)
    t = np.asarray(times, dtype=float)
    if par.ndim != 1 or par.size == 0:
        raise ValueError(f"parent must be a non-empty 1-D array, got shape {par.shape}")
    if not np.issubdtype(par.dtype, np.integer):
        raise ValueError(f"parent must be an integer array, got dtype {par.dtype}")
    m = par.size
    if t.shape != par.shape:
        raise ValueError(f"times must have the shape of parent {par.shape}, got {t.shape}")
    if np.any((par < FREE) | (par >= m)):
        raise ValueError(f"parent ids must be in [-2, {m - 1}] (-1 root, -2 free slot)")
    used = par != FREE
    roots = np.flatnonzero(par == -1)
    if roots.size != 1:
        raise ValueError(f"parent needs exactly one root (-1), found {roots.size}")
    if np.any(~used[par[used & (par >= 0)]]):
        raise ValueError("a node has a free slot (-2) as its parent")
    nkids = np.bincount(par[used & (par >= 0)], minlength=m)
    leaves = np.flatnonzero(used & (nkids == 0))
    N = leaves.size
    if not np.array_equal(leaves, np.arange(N)):
        raise ValueError(f"the leaves (childless nodes) must be nodes 0..N-1, got {leaves[:10].tolist()}")
    if n_leaves is not None and N != int(n_leaves):
        raise ValueError(f"the tree has {N} leaves but the data has {n_leaves} rows")
    inner = used & (nkids > 0)
    if np.any(inner & (nkids < 2)):
        bad = np.flatnonzero(inner & (nkids < 2))
        raise ValueError(f"branch points need >= 2 children; nodes {bad[:5].tolist()} have 1")
    if not np.all(np.isfinite(t[used])):
        raise ValueError("times must be finite")
    if np.any(t[:N] != 1.0):
        raise ValueError("leaf times must be 1.0")
    ti = t[inner]
    if np.any((ti <= 0.0) | (ti >= 1.0)):
        raise ValueError("branch point times must be in (0, 1)")
    nonroot = used & (par >= 0)
    if np.any(t[nonroot] <= t[par[nonroot]]):
        bad = np.flatnonzero(nonroot & (t <= t[np.maximum(par, 0)]))
        raise ValueError(
            f"times must increase from parent to child; nodes {bad[:5].tolist()} are not later than their parents"
        )
    # no cycles: with strictly increasing times along edges a cycle is impossible
    return N


def _unpack(tree_or_parent, times=None):
    if isinstance(tree_or_parent, ParentTree):
        if times is None:
            times = tree_or_parent.heights
        if times is None:
            raise ValueError("times not given and the ParentTree has no heights")
        return tree_or_parent.parent, times
    if times is None:
        raise ValueError("times must be given with a parent array")
    return tree_or_parent, times


# ---------------------------------------------------------------------------------------
# tree bookkeeping on fixed-size arrays
# ---------------------------------------------------------------------------------------
def node_counts(parent, times):
    """Number of leaves under every node ``[m]`` (``m(b)`` of the paper; 1 for leaves, 0 for
    free slots) and number of children ``[m]``.

    Args:
      parent: int ``[m]`` (``-1`` root, ``-2`` free slot); times: float ``[m]``.

    Returns:
      ``(counts int32 [m], num_children int32 [m])``.
    """
    parent = jnp.asarray(parent)
    times = jnp.asarray(times)
    m = parent.shape[0]
    used = parent != FREE
    has_parent = used & (parent >= 0)
    pidx = jnp.where(has_parent, parent, m)
    nkids = jax.ops.segment_sum(has_parent.astype(jnp.int32), pidx, num_segments=m + 1)[:m]
    order = time_order(parent, times, parent != FREE)
    leaf = used & (nkids == 0)

    def body(i, cnt):
        k = order[i]
        return cnt.at[pidx[k]].add(cnt[k])

    cnt = jax.lax.fori_loop(0, m, body, jnp.concatenate([leaf.astype(jnp.int32), jnp.zeros(1, jnp.int32)]))
    return cnt[:m], nkids


# ---------------------------------------------------------------------------------------
# Eq. 9 + Eq. 11: tree structure and divergence times
# ---------------------------------------------------------------------------------------
def _log_structure_times(parent, times, c, alpha, beta):
    m = parent.shape[0]
    f = jnp.result_type(times, c, alpha, beta, float)
    times = times.astype(f)
    cnt, nkids = node_counts(parent, times)
    used = parent != FREE
    branch = used & (nkids > 0)
    has_parent = used & (parent >= 0)
    pidx = jnp.where(has_parent, parent, m)
    cntf = cnt.astype(f)
    lg1b = gammaln(1.0 - beta)
    # Eq. 9 with the Gamma(1 - beta)^-(K - 1) factor (see module docstring)
    per_child = jnp.where(has_parent & (cnt > 1), gammaln(cntf - beta) - lg1b, 0.0)
    child_terms = jax.ops.segment_sum(per_child, pidx, num_segments=m + 1)[:m]
    tb = jnp.where(branch, times, 0.5)
    new_branch = log_new_branch_table(m, alpha, beta, f)[nkids]
    eq9 = jnp.log(c) - jnp.log1p(-tb) + new_branch + child_terms + lg1b - gammaln(cntf + alpha)
    # Eq. 11 over edges [ab] with m(b) >= 2 (into branch points), the root's from t = 0
    H = harmonic_table(m, alpha, beta, f)
    ta = jnp.where(has_parent, times[jnp.maximum(parent, 0)], 0.0)
    eq11 = c * (jnp.log1p(-tb) - jnp.log1p(-ta)) * H[jnp.clip(cnt - 1, 0, m)]
    return jnp.sum(jnp.where(branch, eq9 + eq11, 0.0))


_log_structure_times_jit = jax.jit(_log_structure_times)


def log_structure_times(tree_or_parent, times=None, c=1.0, alpha=0.0, beta=0.0):
    """``log P(tree structure, divergence times | c, alpha, beta)``.

    Args:
      tree_or_parent: a `ParentTree` (its ``heights`` are the times when ``times`` is None)
        or int ``[m]`` parent array (``-1`` root branch point, ``-2`` free slot).
      times: float ``[m]``: leaves 1.0, branch points in ``(0, 1)``, increasing downwards.
      c, alpha, beta: hyperparameters (scalars; may be traced, e.g. for ``grad``).

    Returns:
      scalar: the sum over branch points ``b`` (parent ``a``, the origin at 0 for the root) of
      ``log a(t_b) + sum_{k=3}^{K_b} log(alpha + (k-1) beta) + sum_l log[Gamma(n_l^b - beta) /
      Gamma(1 - beta)] + log Gamma(1 - beta) - log Gamma(m(b) + alpha)`` (Eq. 9, corrected,
      see the module docstring) ``+ (A(t_a) - A(t_b)) H_{m(b)-1}^{alpha,beta}`` (Eq. 11).
      Exchangeable: invariant to relabelling leaves and branch points (Lemma 1).
    """
    parent, times = _unpack(tree_or_parent, times)
    if _concrete(parent, times, c, alpha, beta):
        check_hyper(c=c, alpha=alpha, beta=beta)
        check_tree(parent, times)
    return _log_structure_times_jit(jnp.asarray(parent), jnp.asarray(times), c, alpha, beta)


# ---------------------------------------------------------------------------------------
# Eq. 12 and the marginal likelihood by message passing
# ---------------------------------------------------------------------------------------
def _log_locations(parent, times, locations, sigma2):
    m, D = locations.shape
    used = parent != FREE
    has_parent = used & (parent >= 0)
    pp = jnp.maximum(parent, 0)
    tp = jnp.where(has_parent, times[pp], 0.0)
    xp = jnp.where(has_parent[:, None], locations[pp], 0.0)
    var = sigma2 * jnp.where(used, times - tp, 1.0)
    lp = -0.5 * (D * jnp.log(2 * jnp.pi * var) + jnp.sum((locations - xp) ** 2, axis=1) / var)
    return jnp.sum(jnp.where(used, lp, 0.0))


def log_locations(tree_or_parent, times, locations, sigma2):
    """``log prod_{[ab]} N(x_b; x_a, sigma2 (t_b - t_a) I)`` (Eq. 12; the root's parent is the
    origin, location 0 at time 0).

    Args:
      tree_or_parent: `ParentTree` or int ``[m]`` parent array; times: float ``[m]`` (None:
        the ParentTree's heights).
      locations: float ``[m, D]``, a location per node (leaves: the data; free slots ignored).
      sigma2: Brownian motion variance.

    Returns:
      scalar.
    """
    parent, times = _unpack(tree_or_parent, times)
    if _concrete(parent, times, locations, sigma2):
        check_hyper(sigma2=sigma2)
        check_tree(parent, times)
        loc = np.asarray(locations)
        if loc.ndim != 2 or loc.shape[0] != np.shape(parent)[0]:
            raise ValueError(f"locations must be [m={np.shape(parent)[0]}, D], got shape {loc.shape}")
    return jax.jit(_log_locations)(jnp.asarray(parent), jnp.asarray(times), jnp.asarray(locations), sigma2)


def _upward(parent, times, X, sigma2, noise_var=0.0):
    """Upward belief propagation. Returns per node the mean ``[m, D]`` and variance ``[m]``
    of the product of its children's messages (leaves: the data and ``noise_var``), and per
    node the message it sends its parent, ``N(mean, out_var I)`` in the parent's location
    (the root sends to the origin)."""
    m = parent.shape[0]
    N, D = X.shape
    f = X.dtype
    used = parent != FREE
    has_parent = used & (parent >= 0)
    pidx = jnp.where(has_parent, parent, jnp.where(used, m, m + 1))  # m: origin, m + 1: void
    tp = jnp.where(has_parent, times[jnp.maximum(parent, 0)], 0.0)
    edge = sigma2 * (times - tp)
    order = time_order(parent, times, parent != FREE)
    Xp = jnp.concatenate([X, jnp.zeros((max(m - N, 0), D), f)])[:m]

    def body(i, carry):
        prec, eta, mu, v, out_v = carry
        k = order[i]
        leaf = k < N
        pk = jnp.where(leaf, 1.0, prec[k])
        vk = jnp.where(leaf, noise_var, 1.0 / pk)
        mk = jnp.where(leaf, Xp[k], eta[k] / pk)
        ov = vk + edge[k]
        p = pidx[k]
        prec = prec.at[p].add(1.0 / ov)
        eta = eta.at[p].add(mk / ov)
        return prec, eta, mu.at[k].set(mk), v.at[k].set(vk), out_v.at[k].set(ov)

    init = (jnp.zeros(m + 2, f), jnp.zeros((m + 2, D), f), jnp.zeros((m, D), f), jnp.zeros(m, f), jnp.ones(m, f))
    _, _, mu, v, out_v = jax.lax.fori_loop(0, m, body, init)
    return mu, v, out_v


def _log_marginal_likelihood(parent, times, X, sigma2, noise_var=0.0):
    m = parent.shape[0]
    N, D = X.shape
    f = jnp.result_type(X, times, sigma2, float)
    X = X.astype(f)
    times = times.astype(f)
    mu, v, out_v = _upward(parent, times, X, sigma2, noise_var)
    used = parent != FREE
    has_parent = used & (parent >= 0)
    pp = jnp.maximum(parent, 0)
    # per edge into a parent b: -1/2 [D log(2 pi out_v) + |mu_c - mu_b|^2 / out_v]
    target = jnp.where(has_parent[:, None], mu[pp], 0.0)
    edge_terms = -0.5 * (D * jnp.log(2 * jnp.pi * out_v) + jnp.sum((mu - target) ** 2, axis=1) / out_v)
    # per branch point: + D/2 log(2 pi v_b) (the normaliser of the product of messages)
    branch = used & (jnp.arange(m) >= N)
    node_terms = 0.5 * D * jnp.log(2 * jnp.pi * jnp.where(branch, v, 1.0))
    return jnp.sum(jnp.where(used, edge_terms, 0.0)) + jnp.sum(jnp.where(branch, node_terms, 0.0))


_log_marginal_likelihood_jit = jax.jit(_log_marginal_likelihood)


def log_marginal_likelihood(tree, times, X, sigma2, noise_var=0.0):
    """``log p(X | tree, times, sigma2)`` with the branch-point locations integrated out.

    Belief propagation upwards (section 5): every node sends its parent the Gaussian message
    ``N(x_parent; mean, (v + sigma2 (t_child - t_parent)) I)`` (leaf: mean ``x``, ``v =
    noise_var``; branch point: the normalised product of its children's messages, whose
    normaliser enters the result); the root's message is evaluated at the origin (location 0,
    time 0). Equals the dense Gaussian with ``Cov[x_i, x_j] = sigma2 t_lca(i, j)`` (``sigma2
    + noise_var`` on the diagonal), independently per dimension.

    Args:
      tree: `ParentTree` or int ``[m]`` parent array (leaves ``0..N-1``, ``-1`` root branch
        point, ``-2`` free slot of a fixed-capacity array).
      times: float ``[m]`` divergence times (leaves 1.0; None: the ParentTree's heights).
      X: float ``[N, D]``, row ``i`` at leaf ``i``.
      sigma2: Brownian motion variance.
      noise_var: extra observation variance at the leaves (0: the leaves are the data; 1: the
        probit model's auxiliary Gaussians).

    Returns:
      scalar. Jittable and ``vmap``-able (e.g. over a batch of ``X`` or of trees of one
      capacity ``m``); one ``fori_loop`` over the nodes in time order, ``O(m D)``.
    """
    parent, times = _unpack(tree, times)
    if _concrete(parent, times, X, sigma2, noise_var):
        check_hyper(sigma2=sigma2)
        Xn = check_X(X, min_rows=1)
        check_tree(parent, times, n_leaves=Xn.shape[0])
        if not float(noise_var) >= 0:
            raise ValueError(f"noise_var must be >= 0, got {noise_var}")
    return _log_marginal_likelihood_jit(jnp.asarray(parent), jnp.asarray(times), jnp.asarray(X), sigma2, noise_var)


def log_joint(tree, times, X, c, alpha, beta, sigma2):
    """``log P(tree, times) + log p(X | tree, times)`` (Eq. 9 + 11 and the marginal
    likelihood): the log density of a collapsed state, for MCMC and EM."""
    return log_structure_times(tree, times, c, alpha, beta) + log_marginal_likelihood(tree, times, X, sigma2)


def probit_log_likelihood(latent, Y):
    """``sum log Phi((2 y - 1) latent)``: the probit observation model (section 5.4).

    Args:
      latent: float ``[N, D]`` (the PYDT leaf locations); Y: ``[N, D]`` in ``{0, 1}``.

    Returns:
      scalar (``log_ndtr``, stable in the tails).
    """
    latent = jnp.asarray(latent)
    if _concrete(latent, Y):
        y = np.asarray(Y)
        if y.shape != latent.shape:
            raise ValueError(f"Y must have the shape of latent {latent.shape}, got {y.shape}")
        if not np.all((y == 0) | (y == 1)):
            raise ValueError("Y must be binary (0 / 1)")
    sign = 2.0 * jnp.asarray(Y, latent.dtype) - 1.0
    return jnp.sum(log_ndtr(sign * latent))


# ---------------------------------------------------------------------------------------
# the generative process (section 1)
# ---------------------------------------------------------------------------------------
class PYDTSample(NamedTuple):
    """A draw from the PYDT: ``tree`` (`ParentTree` with ``heights`` = times, ``m`` nodes),
    ``locations [m, D]`` (every node), ``X [N, D]`` (= ``locations[:N]``)."""

    tree: ParentTree
    locations: np.ndarray
    X: np.ndarray


def _gamma_ratio(mcount, alpha, beta):
    """``Gamma(m - beta) / Gamma(m + 1 + alpha)`` on the host (`pydt_math.log_rate_factor`'s
    exponential, for the NumPy process)."""
    from math import exp, lgamma

    return exp(lgamma(mcount - beta) - lgamma(mcount + 1 + alpha))


def _sample_structure(rng: np.random.Generator, N: int, c, alpha, beta, capacity=None):
    """Tree by the sequential process of section 1 (numpy; Python loops)."""
    # leaves first: reserve ids 0..N-1; internal ids appended after
    parent = [FREE] * N
    times = [1.0] * N
    kids = [[] for _ in range(N)]
    cnt = [0] * N
    parent[0] = -1
    cnt[0] = 1
    root = 0
    for i in range(1, N):
        E = rng.exponential()
        node, s = root, 0.0
        while True:
            w = c * _gamma_ratio(cnt[node], alpha, beta)
            t_end = times[node]
            hazard = np.inf if t_end >= 1.0 else w * (np.log1p(-s) - np.log1p(-t_end))
            if E < hazard:  # diverge on the edge into `node`
                t = 1.0 - (1.0 - s) * np.exp(-E / w)
                t = min(max(t, np.nextafter(s, 1.0)), np.nextafter(t_end, 0.0))
                b = len(parent)
                p = parent[node]
                parent.append(p)
                times.append(t)
                kids.append([node, i])
                cnt.append(cnt[node])
                if p >= 0:
                    kids[p][kids[p].index(node)] = b
                else:
                    root = b
                parent[node] = b
                parent[i] = b
                break
            E -= hazard
            # at branch point `node`: follow branch k w.p. (n_k - beta)/(m + alpha), new branch
            # w.p. (alpha + beta K)/(m + alpha)  (Eq. 2, 3)
            ks = kids[node]
            w_b = np.array([cnt[k] - beta for k in ks] + [alpha + beta * len(ks)], float)
            j = rng.choice(len(w_b), p=np.maximum(w_b, 0.0) / w_b.sum())
            if j == len(ks):
                ks.append(i)
                parent[i] = node
                break
            s = times[node]
            node = ks[j]
        # the new point passes through all ancestors of its leaf
        cnt[i] = 1
        k = parent[i]
        while k >= 0:
            cnt[k] += 1
            k = parent[k]
    parent = np.asarray(parent, np.int64)
    times = np.asarray(times, float)
    if capacity is not None:
        pad = capacity - parent.size
        parent = np.concatenate([parent, np.full(pad, FREE, np.int64)])
        times = np.concatenate([times, np.zeros(pad)])
    return parent, times


def _sample_locations_np(rng, parent, times, D, sigma2):
    m = parent.size
    loc = np.zeros((m, D))
    for k in np.argsort(np.where(parent == FREE, np.inf, times)):  # parents first
        if parent[k] == FREE:
            continue
        p = parent[k]
        tp, xp = (times[p], loc[p]) if p >= 0 else (0.0, 0.0)
        loc[k] = xp + np.sqrt(sigma2 * (times[k] - tp)) * rng.standard_normal(D)
    return loc


def sample_prior(key, num_points: int, dim: int, c=1.0, alpha=0.0, beta=0.0, sigma2=1.0) -> PYDTSample:
    """A draw from the PYDT by the generative process of section 1.

    Point ``i`` follows the paths of the earlier points: on an edge followed by ``m`` points it
    diverges at rate ``a(t) Gamma(m - beta) / Gamma(m + 1 + alpha)`` (Eq. 1), sampled exactly
    with one ``E ~ Exp(1)`` per point spent along its path (on an edge from ``s``, divergence at
    ``t = 1 - (1 - s) exp(-E / (c w))``, ``w = Gamma(m - beta) / Gamma(m + 1 + alpha)``, the
    inverse of Eq. 6); at a branch point it takes branch ``k`` w.p. ``(n_k - beta) / (m +
    alpha)`` (Eq. 2) or starts a new one w.p. ``(alpha + beta K) / (m + alpha)`` (Eq. 3).
    Locations are Brownian motion with variance ``sigma2`` from the origin.

    Runs in numpy (Python loops; not jittable), seeded from ``key`` by
    `jaxhc._internal.validation.numpy_rng`. This is the reference implementation of the process;
    `jaxhc.models.pydt_math.sample_prior_tree` is its jittable JAX twin (the sampler's start
    tree): the same law, a different random stream, so one key gives different trees.

    Args:
      key: a JAX PRNG key; num_points: ``N >= 1``; dim: ``D >= 1``; c, alpha, beta, sigma2:
        hyperparameters.

    Returns:
      `PYDTSample` ``(tree, locations [m, D], X [N, D])``; leaves ``0..N-1`` in order of
      arrival, branch points ``N..m-1`` in order of creation (``m <= 2N - 1``).
    """
    check_hyper(c=c, alpha=alpha, beta=beta, sigma2=sigma2)
    if int(num_points) < 1 or int(dim) < 1:
        raise ValueError(f"num_points and dim must be >= 1, got {num_points}, {dim}")
    rng = numpy_rng(key)
    parent, times = _sample_structure(rng, int(num_points), float(c), float(alpha), float(beta))
    loc = _sample_locations_np(rng, parent, times, int(dim), float(sigma2))
    return PYDTSample(ParentTree(parent, int(num_points), times), loc, loc[: int(num_points)].copy())


class PYDTTree(dist.Distribution):
    """The PYDT prior over tree structure and divergence times as a NumPyro distribution.

    A value is a float array ``[2, 2N - 1]``: row 0 the parent array (as floats; ``-2`` free
    slots pad the ``2N - 1`` capacity), row 1 the times (free slots 0). ``log_prob`` is
    `log_structure_times` (jittable, batches over leading dimensions); ``sample`` runs the
    generative process in JAX (`pydt_math.sample_prior_tree`: jittable, ``vmap``-able over
    keys, traced ``c, alpha, beta`` allowed; ``sample_shape`` draws independent trees).
    """

    support = constraints.real
    pytree_data_fields = ("c", "alpha", "beta")
    pytree_aux_fields = ("num_points",)

    def __init__(self, num_points: int, c=1.0, alpha=0.0, beta=0.0, *, validate_args=None):
        self.num_points = int(num_points)
        self.c, self.alpha, self.beta = c, alpha, beta
        super().__init__(batch_shape=(), event_shape=(2, 2 * self.num_points - 1), validate_args=validate_args)

    def sample(self, key, sample_shape=()):
        shape = tuple(sample_shape)
        n = int(np.prod(shape)) if shape else 1
        f = jnp.result_type(float)
        flat = _sample_trees(jax.random.split(key, n), self.num_points, np.dtype(f), self.c, self.alpha, self.beta)
        return flat.reshape(shape + self.event_shape)

    def log_prob(self, value):
        value = jnp.asarray(value)
        flat = value.reshape((-1,) + self.event_shape)
        return _tree_log_prob(flat, self.c, self.alpha, self.beta).reshape(value.shape[:-2])


@functools.partial(jax.jit, static_argnums=(1, 2))
def _sample_trees(keys, N, f, c, alpha, beta):
    """``[len(keys), 2, 2N - 1]`` trees by `pydt_math.sample_prior_tree`, one per key."""
    parent, times = jax.vmap(lambda k: sample_prior_tree(k, N, f, c, alpha, beta))(keys)
    return jnp.stack([parent.astype(f), times.astype(f)], axis=1)


@jax.jit
def _tree_log_prob(flat, c, alpha, beta):
    return jax.vmap(lambda v: _log_structure_times(jnp.round(v[0]).astype(jnp.int32), v[1], c, alpha, beta))(flat)


@jax.jit
def _accumulate(parent, times, inc):
    """Branch-point locations ``[m, D]`` from their increments ``[m - N, D]`` (slots ``N..m-1``),
    summed from the root down (increasing time); leaves' and free slots' rows are 0."""
    m = parent.shape[0]
    N = m - inc.shape[0]
    D = inc.shape[1]
    used = parent != FREE
    has_parent = used & (parent >= 0)
    pp = jnp.maximum(parent, 0)
    order = jnp.argsort(jnp.where(used, times, jnp.inf))
    incs = jnp.concatenate([jnp.zeros((N, D), inc.dtype), jnp.where(used[N:, None], inc, 0.0)])

    def body(i, loc):
        k = order[i]
        base = jnp.where(has_parent[k], loc[pp[k]], 0.0)
        return loc.at[k].set(jnp.where((k >= N) & used[k], base + incs[k], 0.0))

    return jax.lax.fori_loop(0, m, body, jnp.zeros((m, D), inc.dtype))


@keyword_program("num_points", "dim")
def pydt(
    *, X=None, num_points: Optional[int] = None, dim: Optional[int] = None, c=1.0, alpha=0.0, beta=0.0, sigma2=1.0
):
    """The PYDT with Gaussian observations as a NumPyro program.

    Sites:
      ``tree`` (`PYDTTree`, ``[2, 2N - 1]``: parent row and times row; ``log_prob`` = Eq. 9 +
      11); ``increments`` (``[N - 1, D]``, the Brownian increments ``x_b - x_parent(b) ~ N(0,
      sigma2 (t_b - t_a))`` of the branch-point slots, free slots masked out of the density);
      ``locations`` (deterministic ``[2N - 1, D]``: branch-point locations, leaves' rows 0);
      ``X`` (``[N, D]``, ``x_i ~ N(x_parent(i), sigma2 (1 - t_parent(i)))``, observed when
      given). The joint density of the trace is Eq. 9 + 11 + 12 exactly (the increments map to
      the locations with unit Jacobian).

    Every site is sampled in JAX, so the program runs under ``jit``, ``vmap`` over keys and
    `numpyro.infer.Predictive` (prior and posterior predictive, ``parallel=True`` or not);
    `sample_prior` is the NumPy reference of the same process.

    Every argument is a keyword (``pydt(X=X)`` conditions on data, ``pydt(num_points=N,
    dim=D)`` samples it); the former positional order ``(num_points, dim)`` still works for one
    release, with a ``DeprecationWarning``.

    Args:
      X: float ``[N, D]`` data or None to sample.
      num_points, dim: ``N`` and ``D`` (required when ``X`` is None; else taken from ``X``).
      c, alpha, beta, sigma2: hyperparameters.

    Returns:
      ``(parent int [2N - 1], times [2N - 1], X [N, D])``.
    """
    if X is not None:
        Xn = check_X(X, min_rows=1)
        if num_points is not None and num_points != Xn.shape[0]:
            raise ValueError(f"num_points={num_points} but X has {Xn.shape[0]} rows")
        num_points, dim = Xn.shape
    if num_points is None or dim is None:
        raise ValueError("give num_points and dim, or X")
    N, D = int(num_points), int(dim)
    if N < 1 or D < 1:
        raise ValueError(f"num_points and dim must be >= 1, got {N}, {D}")
    check_hyper(c=c, alpha=alpha, beta=beta, sigma2=sigma2)
    m = 2 * N - 1
    tree = numpyro.sample("tree", PYDTTree(N, c, alpha, beta))
    parent = jnp.round(tree[0]).astype(jnp.int32)
    times = tree[1]
    used = parent != FREE
    has_parent = used & (parent >= 0)
    pp = jnp.maximum(parent, 0)
    tp = jnp.where(has_parent, times[pp], 0.0)
    inner = used[N:]
    scale = jnp.sqrt(sigma2 * jnp.where(inner, times[N:] - tp[N:], 1.0))
    inc = numpyro.sample(
        "increments",
        dist.Normal(jnp.zeros((m - N, D)), scale[:, None] * jnp.ones((m - N, D))).mask(inner[:, None]).to_event(2),
    )
    loc = numpyro.deterministic("locations", _accumulate(parent, times, inc))
    leaf_par = parent[:N]
    mean = jnp.where((leaf_par >= 0)[:, None], loc[jnp.maximum(leaf_par, 0)], 0.0)
    var = sigma2 * (1.0 - tp[:N])
    x = numpyro.sample("X", dist.Normal(mean, jnp.sqrt(var)[:, None] * jnp.ones((N, D))).to_event(2), obs=X)
    return parent, times, x
