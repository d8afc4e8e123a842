"""Tree maths of the Pitman-Yor diffusion tree (Knowles & Ghahramani), shared by the prior
(`jaxhc.models.pydt`), the collapsed sampler (`jaxhc.inference.pydt.mcmc`) and the greedy EM
(`jaxhc.inference.pydt.em`).

Trees are fixed-capacity parent arrays (as in `jaxhc.models.pydt`): leaves ``0..N-1`` at time
1, branch points after them, ``parent = -1`` for the root branch point and `FREE` (``-2``) for
an unused slot; the masked helpers take an ``active`` mask of the nodes present instead.

* Divergence: ``a(t) = c / (1 - t)`` (`divergence`), ``A(t)`` (`cumulative_divergence``),
  the rate factor ``Gamma(m - beta) / Gamma(m + 1 + alpha)`` of a path followed by ``m``
  points (`log_rate_factor`), ``H_n^{alpha,beta}`` in closed form (`harmonic`) and as a table
  of cumulative sums (`harmonic_table`).
* Branch choice: ``sum_{k=3}^{K} log(alpha + (k - 1) beta)`` of a branch point with ``K``
  branches, as cumulative sums (`log_new_branch_table`, used by the prior's density) and in
  closed form (`log_branch_prod`, used by the sampler and EM). Both are kept: they round
  differently, and each keeps its callers' values unchanged.
* Tree structure on masked arrays: `time_order`, `walk_up`, `up_counts`, `subtree_mask`.
* Eq. 9 (corrected, see `jaxhc.models.pydt`) + Eq. 11 on masked arrays: `log_prior_masked`
  (with per-count `PriorTables`) and `log_prior_from_counts` (given the leaf counts; no loops).
* The generative process in JAX: `attach_point` (where a new point diverges from a tree) and
  `sample_prior_tree` (a whole tree, points attached one by one; jittable). The host-side
  `jaxhc.models.pydt.sample_prior` (NumPy, seeded by `jaxhc._internal.validation.numpy_rng`)
  is the reference implementation of the same process; the two use different random streams,
  so one key gives different trees, but the same law (tested).
* `check_X`: the data check of the PYDT entry points.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import digamma, gammaln, polygamma

from .._internal.validation import real_array

__all__ = [
    "FREE",
    "PriorTables",
    "attach_point",
    "check_X",
    "check_squares",
    "cumulative_divergence",
    "divergence",
    "exprel",
    "harmonic",
    "harmonic_table",
    "log_branch_prod",
    "log_new_branch_table",
    "log_prior_from_counts",
    "log_prior_masked",
    "log_rate_factor",
    "node_sum",
    "ordered_sum",
    "prior_tables",
    "sample_prior_tree",
    "subtree_mask",
    "time_order",
    "up_counts",
    "walk_up",
]

FREE = -2  # parent value of an unused slot in a fixed-capacity array


# ------------------------------------------------------------------------------------------
# divergence function, H_n^{alpha, beta}, branch factors
# ------------------------------------------------------------------------------------------
def divergence(t, c):
    """Divergence function ``a(t) = c / (1 - t)`` (section 3)."""
    return c / (1.0 - t)


def cumulative_divergence(t, c):
    """Cumulative rate ``A(t) = -c log(1 - t)``."""
    return -c * jnp.log1p(-t)


def exprel(x):
    """``(e^x - 1) / x`` (1 at 0)."""
    small = jnp.abs(x) < 1e-5
    xs = jnp.where(small, 1.0, x)
    return jnp.where(small, 1.0 + x / 2.0 + x * x / 6.0, jnp.expm1(xs) / xs)


def harmonic(n, alpha, beta):
    """``H_n^{alpha,beta} = sum_{i=1}^n Gamma(i - beta) / Gamma(i + 1 + alpha)`` elementwise.

    Args:
      n: integer array (any shape), ``n >= 0`` (``H_0 = 0``); may be traced.
      alpha, beta: scalars (broadcast), ``0 <= beta < 1``, ``alpha >= -2 beta``.

    Returns:
      float array of ``n``'s shape.

    Closed form (definition after Eq. 10): with ``s = alpha + beta`` and ``f(i) =
    Gamma(i - beta) / Gamma(i + alpha)``, each term is ``(f(i) - f(i + 1)) / s``, so
    ``H_n = t_1 + f(2) D exprel(-s D)`` where ``t_1`` is the first term and ``D = (G(u + s) -
    G(u)) / s``, ``G(y) = log Gamma(n + y) - log Gamma(1 + y)``, ``u = 1 - beta``; for ``|s|``
    small ``D`` is its Taylor series (digamma / polygamma), so ``alpha = -beta`` (``H_n =
    psi(n + 1 - beta) - psi(1 - beta)``) is continuous. All in log space.
    """
    alpha = jnp.asarray(alpha, jnp.result_type(alpha, float))
    beta = jnp.asarray(beta, jnp.result_type(beta, float))
    nf = jnp.asarray(n).astype(jnp.result_type(alpha, beta, float))
    u = 1.0 - beta
    s = alpha + beta
    t1 = jnp.exp(gammaln(u) - gammaln(2.0 + alpha))
    f2 = jnp.exp(gammaln(1.0 + u) - gammaln(2.0 + alpha))

    def G(y):
        return gammaln(nf + y) - gammaln(1.0 + y)

    small = jnp.abs(s) < 1e-3
    ss = jnp.where(small, 1.0, s)
    d_direct = (G(u + ss) - G(u)) / ss
    g1 = digamma(nf + u) - digamma(1.0 + u)
    g2 = polygamma(1, nf + u) - polygamma(1, 1.0 + u)
    g3 = polygamma(2, nf + u) - polygamma(2, 1.0 + u)
    d_taylor = g1 + s * g2 / 2.0 + s * s * g3 / 6.0
    D = jnp.where(small, d_taylor, d_direct)
    rest = f2 * D * exprel(-s * D)
    return jnp.where(nf >= 1, t1 + jnp.where(nf >= 2, rest, 0.0), 0.0)


def harmonic_table(n_max, alpha, beta, dtype=None):
    """``[H_0, ..., H_{n_max}]``, ``H_n = sum_{i=1}^n Gamma(i - beta) / Gamma(i + 1 + alpha)``, by a
    cumulative sum of the terms (``dtype``: default the result type of ``alpha`` and float)."""
    dtype = jnp.result_type(alpha, float) if dtype is None else dtype
    i = jnp.arange(1, n_max + 1, dtype=dtype)
    terms = jnp.exp(gammaln(i - beta) - gammaln(i + 1.0 + alpha))
    return jnp.concatenate([jnp.zeros(1, dtype), jnp.cumsum(terms)])


def log_rate_factor(m, alpha, beta):
    """``log[Gamma(m - beta) / Gamma(m + 1 + alpha)]``: the divergence rate on a path followed by
    ``m`` points is ``a(t)`` times its exponential (Eq. 1)."""
    return gammaln(m - beta) - gammaln(m + 1 + alpha)


def log_new_branch_table(k_max: int, alpha, beta, dtype):
    """``L[K] = sum_{k=3}^K log(alpha + (k - 1) beta)`` for ``K = 0..k_max`` (0 for K <= 2;
    ``-inf`` from ``K = 3`` on when ``alpha + 2 beta = 0``)."""
    k = jnp.arange(k_max + 1, dtype=dtype)
    terms = jnp.where(k >= 3, jnp.log(jnp.maximum(alpha + (k - 1.0) * beta, 0.0)), 0.0)
    return jnp.cumsum(terms)


def log_branch_prod(K, alpha, beta):
    """``sum_{k=3}^{K} log(alpha + (k - 1) beta)`` (0 for ``K <= 2``)."""
    Kf = K.astype(jnp.result_type(alpha, float))
    bpos = beta > 0
    sb = jnp.where(bpos, beta, 1.0)
    with_beta = (Kf - 2) * jnp.log(sb) + gammaln(alpha / sb + Kf) - gammaln(alpha / sb + 2)
    no_beta = (Kf - 2) * jnp.log(jnp.where(alpha > 0, alpha, 1.0)) + jnp.where(alpha > 0, 0.0, -jnp.inf)
    return jnp.where(K > 2, jnp.where(bpos, with_beta, no_beta), 0.0)


# ------------------------------------------------------------------------------------------
# sums that padding does not change
# ------------------------------------------------------------------------------------------
_RADIX = 8


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def ordered_sum(x, axis=0):
    """``x`` summed along ``axis`` in an order fixed by the element index: left folds of 8
    consecutive entries, then of 8 consecutive partial sums, and so on (zeros pad each level
    to a multiple of 8). Appending zeros to ``x`` leaves the result unchanged bit for bit,
    which XLA's own reductions do not promise (their association depends on the length): the
    EM's optimisers compare nearly equal sums, and a padded program
    (`jaxhc.inference.pydt.padding`) must make the same choices as the exact-size one. Its
    derivative is the plain sum's (a custom JVP: reverse mode broadcasts the cotangent, exact
    at any padding, instead of transposing the folds)."""
    x = jnp.moveaxis(jnp.asarray(x), axis, 0)
    while True:
        pad = (-x.shape[0]) % _RADIX
        if pad:
            x = jnp.concatenate([x, jnp.zeros((pad,) + x.shape[1:], x.dtype)])
        x = x.reshape((-1, _RADIX) + x.shape[1:])
        acc = x[:, 0]
        for j in range(1, _RADIX):
            acc = acc + x[:, j]
        x = acc
        if x.shape[0] == 1:
            return x[0]


@ordered_sum.defjvp
def _ordered_sum_jvp(axis, primals, tangents):
    return ordered_sum(primals[0], axis), jnp.sum(tangents[0], axis=axis)


def node_sum(x):
    """The sum of a per-node array ``[m, ...]`` (``m = 2N - 1`` fixed-capacity slots) over its
    first axis: leaves ``0..N-1`` and internal slots ``N..m-1`` each by `ordered_sum`, so a
    padded tree (padding leaves after the real ones, the internal slots shifted up) sums to
    the exact-size tree's value bit for bit."""
    N = (x.shape[0] + 1) // 2
    return ordered_sum(x[:N]) + ordered_sum(x[N:])


# ------------------------------------------------------------------------------------------
# tree structure on masked, fixed-capacity arrays
# ------------------------------------------------------------------------------------------
def time_order(parent, times, active):
    """Node slots by decreasing time (children before parents), inactive ones last."""
    return jnp.argsort(jnp.where(active, -times, jnp.inf))


def walk_up(parent, active, weight):
    """Leaf-to-root walks, all started at once: every active node with nonzero ``weight``
    sends a walker up its parent chain (stopping after the first inactive node, as `up_counts`
    did). Returns ``(cnt, height)``: ``cnt[k]`` the total weight of the walkers passing
    ``k`` (itself included), ``height[k]`` the longest walk reaching ``k`` (0 at the starting
    nodes, ``-1`` where none arrives). One vectorised step per level of the tree, so the
    cost is ``O(depth x m)`` with depth (about log N for PYDT trees) instead of a loop over
    all ``m`` nodes, and the steps batch well under ``vmap``."""
    m = parent.shape[0]
    start = active & (weight != 0)
    cur0 = jnp.where(start, jnp.arange(m, dtype=parent.dtype), -1)
    w = jnp.where(start, weight, 0)

    def cond(c):  # at most m steps: a parent array with a cycle (never a valid tree) cannot hang
        return jnp.any(c[0] >= 0) & (c[1] < m)

    def body(c):
        cur, d, cnt, h = c
        ok = cur >= 0
        idx = jnp.where(ok, cur, m)
        cnt = cnt.at[idx].add(w, mode="drop")
        h = h.at[idx].max(d, mode="drop")
        safe = jnp.maximum(cur, 0)
        nxt = parent[safe]
        cur = jnp.where(ok & active[safe] & (nxt >= 0), nxt, -1).astype(cur0.dtype)
        return cur, d + 1, cnt, h

    init = (cur0, jnp.int32(0), jnp.zeros(m, weight.dtype), jnp.full(m, -1, jnp.int32))
    _, _, cnt, h = jax.lax.while_loop(cond, body, init)
    return cnt, h


def up_counts(parent, order, active, weight):
    """``cnt[k]`` = total ``weight`` in the subtree of ``k`` (over active nodes); ``order`` is
    not needed (kept for callers that have it), see `walk_up`."""
    del order
    return walk_up(parent, active, weight)[0]


def subtree_mask(parent, times, active, s):
    """``[m]`` bool: nodes in the subtree of ``s`` (including ``s``): the active nodes whose
    chain of active ancestors reaches ``s`` (all chains walked at once, one step per level)."""
    del times
    m = parent.shape[0]
    cur0 = jnp.where(active, jnp.arange(m, dtype=parent.dtype), -1)

    def cond(c):  # at most m steps (see `walk_up`)
        return jnp.any(c[0] >= 0) & (c[2] < m)

    def body(c):
        cur, hit, i = c
        hit = hit | (cur == s)
        safe = jnp.maximum(cur, 0)
        nxt = parent[safe]
        ok = (cur >= 0) & (cur != s) & (nxt >= 0)
        nxt_ok = ok & active[jnp.maximum(nxt, 0)]
        return jnp.where(nxt_ok, nxt, -1).astype(cur0.dtype), hit, i + 1

    _, hit, _ = jax.lax.while_loop(cond, body, (cur0, jnp.zeros(m, bool), jnp.int32(0)))
    return hit & active


# ------------------------------------------------------------------------------------------
# Eq. 9 + 11 on masked arrays
# ------------------------------------------------------------------------------------------
class PriorTables(NamedTuple):
    """Per-count lookup tables of the prior for fixed ``alpha, beta`` (index ``n = 0..m``):
    ``H[n]`` (Eq. 11's harmonic sum), ``lg_mb[n] = log Gamma(n - beta)``, ``lg_pa[n] = log
    Gamma(n + alpha)``, ``lbp[K]`` = `log_branch_prod` (``K`` children), ``lg_1mb = log
    Gamma(1 - beta)``. A move evaluates the prior three times; the tables are built once per
    sweep instead of ``O(m)`` log-gammas per evaluation."""

    H: jax.Array
    lg_mb: jax.Array
    lg_pa: jax.Array
    lbp: jax.Array
    lg_1mb: jax.Array


def prior_tables(m, alpha, beta, dtype=None) -> PriorTables:
    f = jnp.result_type(alpha, beta, float) if dtype is None else dtype
    n = jnp.arange(m + 1)
    nf = jnp.maximum(n, 1).astype(f)  # n = 0 never indexed by an active node
    return PriorTables(
        harmonic_table(m, alpha, beta).astype(f),
        gammaln(nf - beta),
        gammaln(nf + alpha),
        log_branch_prod(n, alpha, beta).astype(f),
        gammaln(1.0 - beta).astype(f),
    )


def log_prior_masked(parent, times, active, is_leaf, c, alpha, beta, tables: Optional[PriorTables] = None):
    """Eq. 9 (corrected, see below) + Eq. 11 of a tree given on masked arrays; equal to
    `jaxhc.models.pydt.log_structure_times`.

    Args:
      parent: int ``[m]`` (``-1`` root; entries of inactive nodes are ignored).
      times: float ``[m]``.
      active: bool ``[m]`` nodes present in the tree.
      is_leaf: bool ``[m]`` nodes that are leaves (data points, or a detached subtree
        standing in as one point).
      c, alpha, beta: PYDT hyperparameters.
      tables: `prior_tables(m, alpha, beta)` if already built (must match ``alpha, beta``).

    Returns:
      ``log P(structure, times)`` (scalar).
    """
    m = parent.shape[0]
    f = times.dtype
    T = prior_tables(m, alpha, beta, f) if tables is None else tables
    cnt = walk_up(parent, active, is_leaf.astype(jnp.int32))[0]
    cnt = jnp.clip(cnt, 0, m)
    nonroot = active & (parent >= 0)
    pidx = jnp.where(nonroot, parent, m)
    nkids = jax.ops.segment_sum(nonroot.astype(jnp.int32), pidx, num_segments=m + 1)[:m]
    branch = active & ~is_leaf
    child_terms = jax.ops.segment_sum(jnp.where(nonroot, T.lg_mb[cnt], 0.0), pidx, num_segments=m + 1)[:m]
    tb = jnp.where(branch, times, 0.0)
    # Eq. 9 with the Gamma(1 - beta)^-(K_b - 1) that the printed equation drops (Appendix A's
    # products give Gamma(n_l - beta) / Gamma(1 - beta) for every branch but the first point's;
    # the N = 2 density is a(t) Gamma(1 - beta) / Gamma(2 + alpha) exp(...), not Gamma(1 - beta)^2)
    eq9 = jnp.log(c) - jnp.log1p(-tb) + T.lbp[nkids] + child_terms - (nkids - 1).astype(f) * T.lg_1mb - T.lg_pa[cnt]
    tpar = jnp.where(parent >= 0, times[jnp.maximum(parent, 0)], 0.0)
    A = lambda t: -c * jnp.log1p(-t)  # noqa: E731
    eq11 = (A(tpar) - A(tb)) * T.H[jnp.clip(cnt - 1, 0, m)]
    return node_sum(jnp.where(branch, eq9 + eq11, 0.0))


def log_prior_from_counts(parent, times, active, cnt, N, c, alpha, beta):
    """Eq. 9 + 11 given the leaf counts (equals `log_prior_masked`; no loops, vmappable)."""
    m = parent.shape[0]
    f = times.dtype
    is_leaf = jnp.arange(m) < N
    nonroot = active & (parent >= 0)
    pidx = jnp.where(nonroot, parent, m)
    nkids = jax.ops.segment_sum(nonroot.astype(jnp.int32), pidx, num_segments=m + 1)[:m]
    branch = active & ~is_leaf
    cntf = cnt.astype(f)
    child_terms = jax.ops.segment_sum(
        jnp.where(nonroot, gammaln(jnp.maximum(cntf, 1.0) - beta), 0.0), pidx, num_segments=m + 1
    )[:m]
    tb = jnp.where(branch, times, 0.0)
    # Eq. 9 with the Gamma(1 - beta)^-(K - 1) factor the printed equation drops (as
    # `log_prior_masked`)
    eq9 = (
        jnp.log(c)
        - jnp.log1p(-tb)
        + log_branch_prod(nkids, alpha, beta)
        + child_terms
        - (nkids - 1).astype(f) * gammaln(1.0 - beta)
        - gammaln(jnp.maximum(cntf, 1.0) + alpha)
    )
    H = harmonic_table(m, alpha, beta)
    tpar = jnp.where(parent >= 0, times[jnp.maximum(parent, 0)], 0.0)
    A = lambda t: -c * jnp.log1p(-t)  # noqa: E731
    eq11 = (A(tpar) - A(tb)) * H[jnp.clip(cnt - 1, 0, m)]
    return node_sum(jnp.where(branch, eq9 + eq11, 0.0))


# ------------------------------------------------------------------------------------------
# the generative process in JAX (section 1)
# ------------------------------------------------------------------------------------------
def attach_point(key, parent, times, active, cnt, root, t_max, c, alpha, beta, max_tries=1000):
    """Where a new point diverges from the tree (section 1), redrawn until the divergence
    time is ``< t_max``. Returns ``(on_segment, node, time, tries)``: a new branch point at
    ``time`` on the edge into ``node`` (``on_segment``), or a new branch at branch point
    ``node``; ``tries`` paths were drawn (at most ``max_tries``; the last path is returned
    even if its time is not below ``t_max``).

    One flat ``while_loop`` over path steps (a redraw restarts at the root), two uniforms a
    step: the divergence time on the current segment by inverting the survival function of
    the rate ``a(t) Gamma(m - beta) / Gamma(m + 1 + alpha)``, and the branch at a branch
    point by inverting the cumulative weights (child ``k``: ``n_k - beta``, new branch:
    ``alpha + beta K``). Under ``vmap`` the loop runs the longest chain's steps."""
    m = parent.shape[0]
    f = times.dtype
    slots = jnp.arange(m)
    root = jnp.asarray(root, jnp.int32)

    def cond(s):  # the step cap only matters for an invalid (cyclic) parent array
        return ~s[3] & (s[2] < max_tries * m)

    def body(s):
        cur, t0, i, done, seg, node, t, tries = s
        u = jax.random.uniform(jax.random.fold_in(key, i), (2,), f, minval=jnp.finfo(f).tiny)
        mcur = cnt[cur].astype(f)
        rate = c * jnp.exp(log_rate_factor(mcur, alpha, beta))
        td = 1.0 - (1.0 - t0) * u[0] ** (1.0 / rate)
        here = td < times[cur]
        kids = active & (parent == cur) & (slots != cur)
        w = jnp.where(kids, jnp.maximum(cnt.astype(f) - beta, 0.0), 0.0)
        cum = jnp.cumsum(w)
        w_new = jnp.maximum(alpha + beta * jnp.sum(kids), 0.0)
        x = u[1] * (cum[-1] + w_new)
        new_branch = x >= cum[-1]
        pick = jnp.argmax(cum > x).astype(jnp.int32)
        end = here | new_branch
        t_end = jnp.where(here, td, times[cur])
        finish = end & ((t_end < t_max) | (tries >= max_tries))
        restart = end & ~finish
        nxt = jnp.where(end, root, pick)
        t0_next = jnp.where(end, 0.0, times[cur])
        return (
            nxt,
            t0_next.astype(f),
            i + 1,
            finish,
            jnp.where(finish, here, seg),
            jnp.where(finish, cur, node),
            jnp.where(finish, t_end, t),
            tries + restart.astype(jnp.int32),
        )

    init = (
        root,
        jnp.zeros((), f),
        jnp.int32(0),
        jnp.bool_(False),
        jnp.bool_(False),
        root,
        jnp.zeros((), f),
        jnp.int32(1),
    )
    _, _, _, _, seg, node, t, tries = jax.lax.while_loop(cond, body, init)
    return seg, node, t, tries


def sample_prior_tree(key, N, f, c, alpha, beta, n=None):
    """A tree drawn from the PYDT prior by the generative process (points one by one, each by
    `attach_point`), jittable: ``(parent int32 [2N - 1], times [2N - 1])`` (float ``f``).

    The JAX twin of `jaxhc.models.pydt.sample_prior` (the NumPy reference, run on the host):
    same law, different random stream (``jax.random.fold_in(key, n)`` for point ``n``).

    ``n`` (optional, may be traced): a tree over the first ``n <= N`` leaves only, on the ``2N - 1``
    slots (leaves ``n..N-1`` stay free, internal nodes from slot ``N``): one program for every
    ``n`` of a shape bucket, the same draws as ``N = n`` with the internal slots shifted by
    ``N - n`` (`jaxhc.inference.pydt.padding`)."""
    m = 2 * N - 1
    slots = jnp.arange(m)
    parent = jnp.full(m, FREE, jnp.int32).at[0].set(-1)
    times = jnp.zeros(m, f).at[:N].set(1.0)
    is_leaf = slots < N

    def body(i, carry):
        parent, times = carry
        active = (parent != FREE) & ((slots < i) | (slots >= N))
        order = time_order(parent, times, active)
        cnt = up_counts(parent, order, active, is_leaf.astype(jnp.int32))
        root = jnp.argmax(active & (parent == -1)).astype(jnp.int32)
        seg, node, t, _ = attach_point(
            jax.random.fold_in(key, i), parent, times, active, cnt, root, jnp.asarray(1.0, f), c, alpha, beta
        )
        slot = jnp.argmax((parent == FREE) & (slots >= N)).astype(jnp.int32)
        par_seg = parent.at[slot].set(parent[node]).at[node].set(slot).at[i].set(slot)
        par_bp = parent.at[i].set(node)
        parent = jnp.where(seg, par_seg, par_bp)
        times = jnp.where(seg, times.at[slot].set(t), times)
        return parent, times

    # leaf n is "free" until inserted: mark it by leaving its parent as FREE
    parent = parent.at[1:N].set(FREE)
    return jax.lax.fori_loop(1, N if n is None else n, body, (parent, times))


# ------------------------------------------------------------------------------------------
# data check
# ------------------------------------------------------------------------------------------
def check_X(X, name: str = "X", min_rows: int = 2):
    """``X`` as a float array ``[N, D]`` (``N >= min_rows``, ``D >= 1``) after checking that it
    is real (`jaxhc._internal.validation.real_array`), finite, and that its sums of squares do
    not overflow; ``TypeError`` / ``ValueError`` naming ``name`` otherwise."""
    X = real_array(X, name, "[N, D]")
    if X.ndim != 2 or X.shape[0] < min_rows or X.shape[1] < 1:
        raise ValueError(f"{name} must be 2-D [N, D] with N >= {min_rows}, got shape {X.shape}")
    X = X.astype(jnp.result_type(float))
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{name} contains NaN or inf")
    check_squares(X, name)
    return X


def check_squares(X: np.ndarray, name: str = "X"):
    """Raises a ``ValueError`` when sums of squares of ``X`` overflow float64 (entries near
    1e150 and above), which would turn every Gaussian score into NaN or inf."""
    with np.errstate(over="ignore", invalid="ignore"):
        ok = np.isfinite(np.sum(np.square(X))) and np.isfinite(np.sum(np.square(X - np.mean(X, axis=0))))
    if not ok:
        raise ValueError(
            f"{name}: entries up to {float(np.max(np.abs(X))):.3g} are too large: their sums of squares "
            f"overflow float64; rescale {name} (e.g. standardise its columns)"
        )
