"""The BHC quantities of one merge, shared by the greedy search and the fixed-tree
recursion, and the fixed-tree recursion itself (`tree_log_evidence`, `tree_node_terms`).

Formulas: DESIGN.md, "Formulas" (and `jaxhc.inference.bhc.greedy`'s docstring).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import chex
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln
from scipy.special import gammaln as _host_gammaln

from ..._internal.buckets import bucket, pad_rows
from ..._internal.validation import check_alpha, check_component
from ...components import Component
from ...tree import Tree

__all__ = [
    "Merge",
    "merge_terms",
    "merge_log",
    "take",
    "set_at",
    "concat_nodes",
    "TreeTerms",
    "node_stats_of_tree",
    "tree_node_terms",
    "tree_log_evidence",
    "check_finite_scores",
]


class Merge(NamedTuple):
    stats: Any
    n: jax.Array
    log_h1: jax.Array
    log_d: jax.Array
    log_pT: jax.Array
    log_r: jax.Array
    log_1mr: jax.Array
    logit: jax.Array


def merge_terms(
    comp, log_alpha, sa, na, log_da, log_pTa, sb, nb, log_db, log_pTb, cache=None, lgamma_table=None, log_h1=None
) -> Merge:
    """All BHC quantities of merging clusters a and b (broadcasts over leading axes);
    ``lgamma_table[m] = log Gamma(m)`` replaces ``gammaln`` of the integer count when given;
    ``log_h1``, when given, is the merged log marginal (computed by the caller)."""
    s = comp.merge(sa, sb)
    n = na + nb
    if log_h1 is None:
        log_h1 = comp.log_marginal(s) if cache is None else comp.log_marginal(s, cache)
    if lgamma_table is None:
        lag = log_alpha + gammaln(n)
    else:
        lag = log_alpha + jnp.take(lgamma_table, jnp.round(n).astype(jnp.int32), mode="clip")
    ldd = log_da + log_db
    log_d = jnp.logaddexp(lag, ldd)
    a = lag - log_d + log_h1  # log pi_k p(D_k|H1)
    b = ldd - log_d + log_pTa + log_pTb  # log (1 - pi_k) p(D_i|T_i) p(D_j|T_j)
    log_pT = jnp.logaddexp(a, b)
    return Merge(s, n, log_h1, log_d, log_pT, a - log_pT, b - log_pT, a - b)


def merge_log(log_alpha, na, nb, log_da, log_db, log_pa, log_pb, log_h1):
    """`merge_terms` on the host, from the merged log marginal ``log_h1`` (Eq. 6-8; NumPy,
    broadcasts; scipy's ``gammaln``): ``(log_d, log_pT, log_r, log_1mr, logit)``. Used by
    the Gram-matrix search and BHCC's searches."""
    lag = log_alpha + _host_gammaln(na + nb)
    ldd = log_da + log_db
    log_d = np.logaddexp(lag, ldd)
    x = lag - log_d + log_h1
    y = ldd - log_d + log_pa + log_pb
    log_pT = np.logaddexp(x, y)
    return log_d, log_pT, x - log_pT, y - log_pT, x - y


def take(tree, i):
    """Row ``i`` of every leaf of a pytree."""
    return jax.tree_util.tree_map(lambda x: x[i], tree)


def set_at(tree, i, val):
    """``tree`` with row ``i`` of every leaf set to ``val``'s."""
    return jax.tree_util.tree_map(lambda x, v: x.at[i].set(v), tree, val)


def concat_nodes(leaf, inner):
    """Leaf rows then inner-node rows, leaf by leaf of the pytrees."""
    return jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b], axis=0), leaf, inner)


#: pad the data to the library's bucket grid (`jaxhc._internal.buckets`); tests turn it off
#: to compare the padded search with the exact-shape one
PAD_TO_BUCKETS = True


def padded_leaf_stats(component, Xh: np.ndarray):
    """The leaf statistics of the rows of ``Xh [n, d]`` padded to ``bucket(n)`` slots with
    copies of row 0 (valid data, so every padded value is finite; the search never activates
    them), so one compiled program serves every ``n`` of a bucket."""
    n = Xh.shape[0]
    size = bucket(n) if PAD_TO_BUCKETS else n
    return _leaf_stats(component, jnp.asarray(pad_rows(Xh, size, "first")))


@eqx.filter_jit
def _leaf_stats(comp, X):
    # one small program instead of an eager compile per primitive (~0.1 s of a first call)
    return comp.leaf_stats(X)


# ------------------------------------------------------------------------------------------
class TreeTerms(NamedTuple):
    """Per-node BHC quantities of a fixed tree, each ``[2n-1]``."""

    log_evidence: jax.Array
    dpm_lower_bound: jax.Array
    log_h1: jax.Array
    log_d: jax.Array
    log_pT: jax.Array
    log_r: jax.Array
    log_1mr: jax.Array


@jax.jit
def node_stats_of_tree(comp: Component, leaf_stats, children):
    """Sufficient statistics of every node ``[2n-1, ...]`` of a tree given as ``children``."""
    children = jnp.asarray(children)
    n = children.shape[0] + 1
    chex.assert_shape(children, (n - 1, 2))
    chex.assert_tree_shape_prefix(leaf_stats, (n,))
    pad = jax.tree_util.tree_map(lambda x: jnp.zeros((n - 1,) + x.shape[1:], x.dtype), leaf_stats)
    allst = concat_nodes(leaf_stats, pad)

    def step(st, tc):
        t, (a, b) = tc
        m = comp.merge(take(st, a), take(st, b))
        return set_at(st, n + t, m), None

    allst, _ = jax.lax.scan(step, allst, (jnp.arange(n - 1), children))
    return allst


@jax.jit
def tree_node_terms(comp: Component, alpha, node_stats, children) -> TreeTerms:
    """BHC recursion on a fixed tree: differentiable in ``alpha`` and the component's
    hyperparameters (``node_stats`` from `node_stats_of_tree`, ``children [n-1, 2]``)."""
    children = jnp.asarray(children)
    n = children.shape[0] + 1
    chex.assert_shape(children, (n - 1, 2))
    chex.assert_tree_shape_prefix(node_stats, (2 * n - 1,))
    return padded_tree_terms(comp, alpha, node_stats, children, n)  # a bucket of exactly n


def padded_tree_terms(comp: Component, alpha, node_stats, children, n_valid) -> TreeTerms:
    """`tree_node_terms` of a tree over ``n_valid`` points laid out in a bucket of ``N``
    (`pad_tree`): leaves ``0..N-1`` (real ones first), inner nodes ``N..2N-2`` (the real
    merges first, in order), ``children [N-1, 2]``. The padded merges (rows ``t >= n_valid - 1``)
    write only padded nodes, which nothing real reads, so every real node's terms are those
    of the unpadded recursion; the root is node ``N + n_valid - 2`` and the DPM bound uses
    ``n_valid`` points. Traced inside callers' programs (one program per bucket ``N``)."""
    N = children.shape[0] + 1
    log_alpha = jnp.log(alpha)
    log_h1 = comp.log_marginal(node_stats)
    dtype = log_h1.dtype
    idx = jnp.arange(2 * N - 1)
    cnt0 = (idx < N).astype(dtype)
    log_d0 = jnp.where(idx < N, log_alpha, 0.0).astype(dtype)
    log_pT0 = jnp.where(idx < N, log_h1, 0.0)
    log_r0 = jnp.zeros(2 * N - 1, dtype)
    log_1mr0 = jnp.full(2 * N - 1, -jnp.inf, dtype)

    def step(c, tc):
        cnt, log_d, log_pT, log_r, log_1mr = c
        t, (a, b) = tc
        k = N + t
        nk = cnt[a] + cnt[b]
        lag = log_alpha + gammaln(nk)
        ldd = log_d[a] + log_d[b]
        ld = jnp.logaddexp(lag, ldd)
        x = lag - ld + log_h1[k]
        y = ldd - ld + log_pT[a] + log_pT[b]
        lp = jnp.logaddexp(x, y)
        return (
            cnt.at[k].set(nk),
            log_d.at[k].set(ld),
            log_pT.at[k].set(lp),
            log_r.at[k].set(x - lp),
            log_1mr.at[k].set(y - lp),
        ), None

    (cnt, log_d, log_pT, log_r, log_1mr), _ = jax.lax.scan(
        step, (cnt0, log_d0, log_pT0, log_r0, log_1mr0), (jnp.arange(N - 1), children)
    )
    root = jnp.where(n_valid > 1, N + n_valid - 2, 0)  # one point: the root is leaf 0
    ev = log_pT[root]
    bound = ev + log_d[root] + gammaln(alpha) - gammaln(n_valid + alpha)
    return TreeTerms(ev, bound, log_h1, log_d, log_pT, log_r, log_1mr)


def pad_tree(node_stats, children, N: int):
    """``(node_stats [2N-1, ...], children [N-1, 2])`` on the host: a tree over ``n`` points
    (``node_stats [2n-1, ...]``, leaves first; ``children [n-1, 2]``) laid out in a bucket of
    ``N >= n`` for `padded_tree_terms`. Padded nodes hold copies of node 0's statistics
    (finite values and gradients, never read by a real node); padded merges join leaf 0
    with itself into a padded node."""
    ch = np.asarray(children, np.int64).reshape(-1, 2)
    n = ch.shape[0] + 1
    extra = N - n

    def pad(x):
        x = np.asarray(x)
        filler = np.repeat(x[:1], extra, axis=0)
        return np.concatenate([x[:n], filler, x[n:], filler], axis=0)

    stats = jax.tree_util.tree_map(pad, node_stats)
    ch = np.where(ch >= n, ch + extra, ch)
    ch = np.concatenate([ch, np.zeros((extra, 2), np.int64)]).astype(np.int32)
    return stats, ch


def tree_log_evidence(X, tree: Tree, component: Component, alpha: float = 1.0) -> TreeTerms:
    """``log p(D|T)`` and all per-node BHC quantities of a given tree (any binary tree over
    the rows of ``X``; ``TreeTerms``)."""
    check_component(component)
    check_alpha(alpha)
    Xh = component.validate_data(X)
    tree = tree.validate() if isinstance(tree, Tree) else Tree(tree).validate()
    if tree.n_leaves != Xh.shape[0]:
        raise ValueError(f"tree has {tree.n_leaves} leaves but X has {Xh.shape[0]} rows")
    n = Xh.shape[0]
    leaf = padded_leaf_stats(component, Xh)
    N = jax.tree_util.tree_leaves(leaf)[0].shape[0]
    _, children = pad_tree(np.zeros(2 * n - 1), tree.children, N)
    # traced (under jit / grad in alpha or the component's parameters): stay in JAX
    traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves((component, alpha)))
    xp = jnp if traced else np
    terms = _tree_terms(component, xp.asarray(alpha, dtype=jnp.result_type(float)), leaf, children, np.int32(n))
    # the real nodes of the bucket's layout (leaves 0..n-1, inner N..N+n-2), on the host
    # when not traced (an eager gather compiles per shape)
    rows = np.concatenate([np.arange(n), N + np.arange(n - 1)])
    if traced:
        return TreeTerms(*(x[rows] if jnp.ndim(x) else x for x in terms))
    return TreeTerms(*(jnp.asarray(np.asarray(x)[rows] if np.ndim(x) else np.asarray(x)) for x in terms))


@jax.jit
def _tree_terms(comp, alpha, leaf_stats, children, n_valid):
    """`node_stats_of_tree` then `padded_tree_terms` as one compiled program (per family and
    size bucket: leaves padded to ``N``, ``children`` laid out by `pad_tree`)."""
    return padded_tree_terms(comp, alpha, node_stats_of_tree(comp, leaf_stats, children), children, n_valid)


def check_finite_scores(comp, leaf_stats, n, leaf_log_h1=None, merge_terms=()):
    """Raises a ``ValueError`` naming the likely cause when a leaf log marginal or a merge
    score is not finite: BHC's merge scores are differences of log marginals, and a NaN
    there would make the greedy search meaningless. For the Gaussian families the cause is
    almost always a prior whose scale does not fit the data's (data in other units than the
    prior was fitted on): the message gives both scales."""
    bad = None
    if leaf_log_h1 is not None:
        v = np.asarray(leaf_log_h1)
        if not np.all(np.isfinite(v)):
            bad = f"the log marginal likelihood of {int(np.sum(~np.isfinite(v)))} of the {n} single points"
    for v in merge_terms:
        v = np.asarray(v)
        if bad is None and np.any(np.isnan(v) | (v == np.inf)):
            bad = f"{int(np.sum(np.isnan(v) | (v == np.inf)))} of the {n - 1} merge scores"
    if bad is None:
        return
    family = type(comp).__name__
    scale = comp.prior_scale()
    mean = getattr(leaf_stats, "mean", None)
    if scale is not None and mean is not None:
        with np.errstate(over="ignore", invalid="ignore"):
            m = np.asarray(mean)[:n]
            data_sd = np.nanstd(m, axis=0) if n > 1 else np.zeros(m.shape[-1])
            dev = np.nanmax(np.abs(m - np.asarray(comp.mean)), axis=0)
            ratio = float(np.max(np.maximum(data_sd, dev) / scale))
        raise ValueError(
            f"bhc: {bad} is not finite (NaN or inf): the {family} prior does not fit the data's scale. "
            f"The data's largest per-feature standard deviation is {float(np.max(data_sd)):.3g} and its largest "
            f"distance from the prior mean {float(np.max(dev)):.3g}, against a prior within-cluster scale of "
            f"{float(np.min(scale)):.3g} to {float(np.max(scale)):.3g} ({family}.prior_scale()), a ratio up to "
            f"{ratio:.3g}: the log marginals lose every digit of precision. Fit the prior to these data "
            f"({family}.from_data(X)) or rescale X (e.g. standardise its columns)."
        )
    raise ValueError(
        f"bhc: {bad} is not finite (NaN or inf) under {family}: check the data for extreme values "
        f"(e.g. counts near 1e300 overflow) and the component's hyperparameters."
    )
