"""Randomized Bayesian hierarchical clustering (Heller & Ghahramani 2005b).

The filtering scheme, as Algorithm 2 of the BHCC paper describes it for columns, applied to
rows: run BHC on a random subset of ``subset_size`` points, take the two top subtrees
``T_a``, ``T_b`` of its tree, send every other point to the side with the larger
``n_a p(x | T_a)`` vs ``n_b p(x | T_b)`` (``p(x | T)`` the BHC predictive of the subtree,
``n`` its size: the DPM prior of joining it), and recurse on each side (its subset points
plus the points sent to it) until a side has at most ``leaf_size`` points, which plain BHC
clusters. The top split of every level is thus decided by a small BHC and a linear pass, so
the total work is ``O(n log n)`` for balanced splits.

Balanced splits. Inside one cluster BHC's top split peels off the most outlying points, so
Algorithm 2 alone recurses ``O(n / subset_size)`` levels deep. With ``balance="auto"`` (the
default) a level whose smaller top side holds less than a quarter of the subset also
considers the tree ``T_bal`` that moves the subtree closest to half the subset to the root
(a subtree-prune-and-regraft of the subset's tree). It takes it when BHC sees one cluster in
the subset (``r >= 0.5`` at the root), ``T_bal``'s evidence on the subset is at most
`AUTO_BALANCE_NATS` below the BHC tree's (a Bayes factor of at most ``e``), and no point
outside the subset is an outlier to it (a one-cluster predictive `AUTO_OUTLIER_NATS` below
the subset's lowest). Inside a cluster both trees have the evidence of one cluster and the
balanced one is taken; outliers far from a cluster, seen in the subset or not, are still
peeled off by BHC's top split.

Compiled programs. Every BHC call is padded to the library's size grid from 64 points up
(`jaxhc._internal.buckets.bucket(m, 64)`), so with
the defaults (``subset_size = leaf_size = 64``) one greedy program serves every level and
every leaf block; the split scores, the balanced tree's evidence and the final joins are
three more programs of fixed shapes. Nothing compiles per ``n``: the quantities of the
final tree (``log p(D|T)``, ``r_k``, the DPM bound) are those of the leaf blocks' BHC runs
plus the joins above them, computed exactly on that tree.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from ..._internal.buckets import bucket
from ...components import Component
from ...tree import Tree
from .greedy import (
    BHCResult,
    bhc_from_stats,
    check_alpha,
    check_component,
    check_finite_scores,
    node_stats_of_tree,
    padded_leaf_stats,
    tree_node_terms,
)
from .result import result_from_nodes

__all__ = ["rbhc", "AUTO_BALANCE_NATS"]

# balance="auto" takes the balanced split when it lowers the subset's log evidence by at
# most this many nats
AUTO_BALANCE_NATS = 1.0
# ... unless a point outside the subset has a one-cluster predictive this many nats below the
# lowest of the subset's own points (an outlier the subset did not contain)
AUTO_OUTLIER_NATS = 25.0
# ... and considers it only when the smaller top side holds less than this fraction
_AUTO_CONSIDER = 0.25


# BHC calls are padded to at least this many points (so that small sides share a program)
_MIN_BUCKET = 64


def _bucket(m: int) -> int:
    """The library's size grid (`jaxhc._internal.buckets`), from `_MIN_BUCKET` points up."""
    return bucket(m, _MIN_BUCKET)


def _pad_rows(tree_stats, size):
    # on the host (host arrays in, device arrays out): eager jnp ops would compile per shape
    def pad(x):
        extra = size - x.shape[0]
        return jnp.asarray(np.concatenate([x, np.zeros((extra,) + x.shape[1:], x.dtype)], axis=0) if extra else x)

    return jax.tree_util.tree_map(pad, tree_stats)


_CHUNK = 1024
_SMALL_CHUNK = 128
# joins of the final tree are computed in batches of this many (one compiled program)
_JOIN_BATCH = 256


@jax.jit
def _side_scores(comp, node_stats, log_wa, log_wb, Xr):
    """Per row of ``Xr [chunk, d]``: ``log p(x | T_a)``, ``log p(x | T_b)`` and the
    predictive of the last node (the root: all the subset's points as one cluster)."""
    cache = comp.predictive_cache(node_stats)

    def one(x):
        lp = comp.log_predictive_cached(x, cache)
        return jax.scipy.special.logsumexp(log_wa + lp), jax.scipy.special.logsumexp(log_wb + lp), lp[-1]

    return jax.lax.map(one, Xr, batch_size=64)


@jax.jit
def _split(key):
    return tuple(jax.random.split(key))


@jax.jit
def _subset_tree(comp, alpha, leaf_stats, children):
    """Node statistics and BHC terms of a given tree over a subset (one program per size)."""
    st = node_stats_of_tree(comp, leaf_stats, children)
    return st, tree_node_terms(comp, alpha, st, children)


@jax.jit
def _log_marginals(comp, stats):
    return comp.log_marginal(stats)


@jax.jit
def _join(comp, log_alpha, sa, na, log_da, log_pTa, sb, nb, log_db, log_pTb):
    """BHC terms of merging clusters a and b, batched over a leading axis (DESIGN.md)."""
    s = comp.merge(sa, sb)
    n = na + nb
    log_h1 = comp.log_marginal(s)
    lag = log_alpha + gammaln(n)
    ldd = log_da + log_db
    log_d = jnp.logaddexp(lag, ldd)
    a = lag - log_d + log_h1
    b = ldd - log_d + log_pTa + log_pTb
    log_pT = jnp.logaddexp(a, b)
    return s, log_h1, log_d, log_pT, a - log_pT, b - log_pT


def _log_weights(tree: Tree, log_r_nodes, log_1mr) -> np.ndarray:
    """`BHCResult.log_weights` of a tree with per-node ``log r`` and ``log(1 - r)``."""
    par = tree.parents()
    size = tree.sizes().astype(float)
    acc = np.zeros(tree.n_nodes)
    for k in range(tree.n_nodes - 2, -1, -1):
        p = par[k]
        acc[k] = acc[p] + log_1mr[p] + np.log(size[k] / size[p])
    return np.asarray(log_r_nodes) + acc


def _subtree_log_weights(ranges, lw, log_r_nodes, top: int) -> np.ndarray:
    """Predictive weights of the subtree rooted at ``top`` (``-inf`` outside it); ``ranges``
    is the tree's `Tree.leaf_ranges` (the nodes below ``top`` are those whose leaf range
    lies inside its own)."""
    _, start, end = ranges
    members = (start >= start[top]) & (end <= end[top])
    return np.where(members, lw - (lw[top] - log_r_nodes[top]), -np.inf)


def _regraft_children(children: np.ndarray, s: int) -> Optional[np.ndarray]:
    """The tree with the subtree rooted at node ``s`` pruned and regrafted as a child of a
    new root (the rest of the tree, its parent spliced out, the other child). ``None`` when
    ``s`` is already a child of the root. Node ids are renumbered (children before parents);
    the leaves keep theirs."""
    m = children.shape[0] + 1
    par = np.empty(2 * m - 1, np.int64)
    par[children.ravel()] = np.repeat(np.arange(m, 2 * m - 1), 2)
    p = int(par[s])
    if p == 2 * m - 2:
        return None
    sib = int(children[p - m][0] if children[p - m][1] == s else children[p - m][1])
    rows = []
    for t in range(m - 1):
        if t == p - m:
            continue
        a, b = (int(x) for x in children[t])
        a, b = (sib if a == p else a), (sib if b == p else b)
        a, b = (a - 1 if a > p else a), (b - 1 if b > p else b)
        rows.append((min(a, b), max(a, b)))
    rest_root = 2 * m - 3  # the old root, one id lower
    s_new = s - 1 if s > p else s
    rows.append((min(s_new, rest_root), max(s_new, rest_root)))
    return np.asarray(rows, np.int64)


class _Part(NamedTuple):
    """A randomized-BHC tree over ``m`` points (ids: the points ``0 .. m-1``, the inner nodes
    ``m .. 2m-2`` in creation order, as `rbhc` numbers them), before the joins are filled.

    Fields:
      children: int64 ``[m-1, 2]``.
      joins: int64 ``[k, 3]``: ``(node, left, right)`` of the splits, whose terms
        `_fill_joins` computes once the whole tree is built.
      log_h1, log_d, log_pT, log_1mr, log_r, cnt: float ``[2m-1]`` per-node terms (those of
        the joins not yet filled).
      inner_stats: the inner nodes' statistics, leading axis ``m-1``.
    """

    children: np.ndarray
    joins: np.ndarray
    log_h1: np.ndarray
    log_d: np.ndarray
    log_pT: np.ndarray
    log_1mr: np.ndarray
    log_r: np.ndarray
    cnt: np.ndarray
    inner_stats: object


class _Hole(NamedTuple):
    """A sub-problem left to a worker: its points (sorted), its key, and the first id of the
    ``m - 1`` inner nodes reserved for it (its root is the last of them)."""

    idx: np.ndarray
    key: object
    first: int


def _build(
    component,
    alpha,
    Xh,
    leaf_np,
    key,
    subset_size,
    leaf_size,
    balance,
    bar=None,
    hole_size=None,
    on_hole=None,
    inner_stats=None,
):
    """The recursion of `rbhc` over the rows of ``Xh``: returns a `_Part` (its
    ``inner_stats`` written into ``inner_stats`` when given, leading axis ``n - 1``). With
    ``hole_size``, a side of at most that many points (and more than ``leaf_size``) is not
    split here: ``on_hole(_Hole)`` is called and ``m - 1`` ids are reserved for its nodes,
    which the caller fills in (`_place`). The ids, keys and the order of the joins do not
    depend on ``hole_size``: a side's nodes take consecutive ids, its root the last."""
    n = Xh.shape[0]
    alpha_arr = jnp.asarray(alpha, dtype=jnp.result_type(float))
    log_alpha = float(np.log(alpha))
    # per node (leaves 0..n-1, inner nodes n..2n-2 in creation order): BHC terms and stats
    node_log_h1 = np.zeros(2 * n - 1)
    node_log_d = np.full(2 * n - 1, log_alpha)
    node_log_pT = np.zeros(2 * n - 1)
    node_log_1mr = np.full(2 * n - 1, -np.inf)
    node_log_r = np.zeros(2 * n - 1)
    node_cnt = np.ones(2 * n - 1)
    if inner_stats is None:
        inner_stats = jax.tree_util.tree_map(lambda x: np.zeros((max(n - 1, 0),) + x.shape[1:], x.dtype), leaf_np)
    children = np.zeros((max(n - 1, 0), 2), np.int64)
    joins: list = []  # (node id, left, right) of the splits, filled after the recursion
    next_id = [n]

    def stats_of(idx, size):
        sub = jax.tree_util.tree_map(lambda x: x[idx], leaf_np)
        return _pad_rows(sub, size)

    # a leaf block of one point reads its log marginal from this program; run it once up
    # front, so the programs a call compiles do not depend on the data (a later call whose
    # recursion first peels off a single point compiles nothing)
    _log_marginals(component, stats_of(np.arange(1), _bucket(1)))

    def plain(idx):
        m = len(idx)
        if m == 1:
            h1 = np.asarray(_log_marginals(component, stats_of(idx, _bucket(1))))[:1]
            check_finite_scores(component, leaf_np, 1, leaf_log_h1=h1)
            node_log_h1[idx[0]] = node_log_pT[idx[0]] = float(h1[0])
            if bar is not None:
                bar.update(1)
            return int(idx[0])
        res = bhc_from_stats(component, alpha, stats_of(idx, _bucket(m)), n_valid=m)
        ch = np.asarray(res.tree.children)
        ids = [int(i) for i in idx]
        h1, ld, lp, l1 = (np.asarray(v) for v in (res.log_h1, res.log_d, res.log_pT, res.log_1mr))
        node_log_h1[idx] = h1[:m]
        node_log_pT[idx] = lp[:m]
        first = next_id[0]
        for a, b in ch:
            ids.append(next_id[0])
            children[next_id[0] - n] = (ids[a], ids[b])
            next_id[0] += 1
        sl = slice(first, next_id[0])
        node_log_h1[sl], node_log_d[sl], node_log_pT[sl], node_log_1mr[sl] = h1[m:], ld[m:], lp[m:], l1[m:]
        node_log_r[sl] = np.asarray(res.log_r)
        node_cnt[sl] = res.tree.sizes()[m:]
        inner = jax.tree_util.tree_map(lambda x: np.asarray(x)[m:], res.node_stats)
        jax.tree_util.tree_map(
            lambda dst, src: dst.__setitem__(slice(first - n, next_id[0] - n), src), inner_stats, inner
        )
        if bar is not None:
            bar.update(m)
        return ids[-1]

    def choose_split(sub):
        """The trees over the subset whose top split this level may use, with per-node
        terms: ``(BHC's tree, the balanced tree or None)``."""
        res = bhc_from_stats(component, alpha, stats_of(sub, _bucket(subset_size)), n_valid=subset_size)
        tree = res.tree
        top = (
            tree,
            np.concatenate([np.zeros(subset_size), np.asarray(res.log_r)]),
            np.asarray(res.log_1mr),
            res.node_stats,
        )
        sizes = tree.sizes()
        top_a, top_b = np.asarray(tree.children)[-1]
        small = min(sizes[top_a], sizes[top_b])
        limit = _AUTO_CONSIDER if balance == "auto" else balance
        if small >= limit * subset_size:
            return top, None
        if balance == "auto" and not float(np.asarray(res.log_r)[-1]) >= np.log(0.5):
            return top, None  # BHC does not see one cluster in the subset: keep its top split
        cand = np.arange(tree.n_nodes - 1)
        s = int(cand[np.argmin(np.abs(sizes[cand] - subset_size / 2))])
        ch2 = _regraft_children(np.asarray(tree.children), s)
        if ch2 is None:
            return top, None
        leaf = jax.tree_util.tree_map(lambda x: jnp.asarray(np.asarray(x)[:subset_size]), res.node_stats)
        st2, terms = _subset_tree(component, alpha_arr, leaf, jnp.asarray(ch2, jnp.int32))
        if balance == "auto" and not float(terms.log_evidence) >= float(res.log_evidence) - AUTO_BALANCE_NATS:
            return top, None
        return top, (Tree(ch2), np.asarray(terms.log_r), np.asarray(terms.log_1mr), st2)

    def scores(rows_all, node_stats, wa, wb):
        """``log p(x | T_a)``, ``log p(x | T_b)`` and ``log p(x | D_subset)`` of ``rows_all``."""
        out: tuple = ([], [], [])
        c0 = 0
        while c0 < len(rows_all):
            # full chunks of _CHUNK rows, the remainder in chunks of _SMALL_CHUNK (two programs)
            size = _CHUNK if len(rows_all) - c0 > _CHUNK - _SMALL_CHUNK else _SMALL_CHUNK
            rows = rows_all[c0 : c0 + size]
            c0 += size
            Xr = np.concatenate([Xh[rows], np.repeat(Xh[rows[:1]], size - len(rows), 0)])
            got = _side_scores(component, node_stats, jnp.asarray(wa), jnp.asarray(wb), jnp.asarray(Xr))
            for o, g in zip(out, got):
                o.append(np.asarray(g)[: len(rows)])
        return tuple(np.concatenate(o) for o in out)

    def filtered(sub, rest, cand):
        tree, log_r_nodes, log_1mr, node_stats = cand
        top_a, top_b = np.asarray(tree.children)[-1]
        lw = _log_weights(tree, log_r_nodes, log_1mr)
        ranges = tree.leaf_ranges()
        wa = _subtree_log_weights(ranges, lw, log_r_nodes, top_a)
        wb = _subtree_log_weights(ranges, lw, log_r_nodes, top_b)
        order, start, end = ranges
        in_a = np.zeros(tree.n_leaves, bool)
        in_a[order[start[top_a] : end[top_a]]] = True
        na, nb = in_a.sum(), (~in_a).sum()
        la, lb, lroot = scores(rest, node_stats, wa, wb)
        to_a = (np.log(na) + la) > (np.log(nb) + lb)
        return in_a, to_a, (node_stats, wa, wb, lroot)

    def split(idx, key):
        """The two sides of a node with more than ``leaf_size`` points."""
        m = len(idx)
        # a host generator seeded by the key (jax.random.permutation would compile once per m)
        seed = np.asarray(jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key)
        rng = np.random.default_rng(seed.astype(np.uint32).ravel().tolist())
        perm = rng.permutation(m)
        sub, rest = idx[perm[:subset_size]], idx[perm[subset_size:]]
        top, bal = choose_split(sub)
        in_a, to_a, (node_stats, wa, wb, lroot) = filtered(sub, rest, top if bal is None else bal)
        if bal is not None and balance == "auto":
            # points far outside the subset's cluster (rarer than 1 in subset_size, so the
            # subset did not see them): keep BHC's top split, which peels them off
            lsub = scores(sub, node_stats, wa, wb)[2]
            if np.min(lroot) < np.min(lsub) - AUTO_OUTLIER_NATS:
                in_a, to_a, _ = filtered(sub, rest, top)
        idx_a = np.sort(np.concatenate([sub[in_a], rest[to_a]]))
        idx_b = np.sort(np.concatenate([sub[~in_a], rest[~to_a]]))
        return idx_a, idx_b

    # depth-first, left side first, without Python recursion (peeled outliers can make the
    # recursion deep); a split's node id is taken when both its sides are built
    stack: list = [("visit", np.arange(n), key)]
    done: list = []
    while stack:
        task = stack.pop()
        if task[0] == "join":
            right, left = done.pop(), done.pop()
            lo, hi = min(left, right), max(left, right)
            children[next_id[0] - n] = (lo, hi)
            joins.append((next_id[0], lo, hi))
            next_id[0] += 1
            done.append(next_id[0] - 1)
            continue
        _, idx, k = task
        if len(idx) <= leaf_size:
            done.append(plain(idx))
            continue
        if hole_size is not None and on_hole is not None and len(idx) <= hole_size:
            on_hole(_Hole(idx, k, next_id[0]))
            next_id[0] += len(idx) - 1
            done.append(next_id[0] - 1)
            continue
        idx_a, idx_b = split(idx, k)
        ka, kb = _split(k)
        stack.append(("join",))
        stack.append(("visit", idx_b, kb))
        stack.append(("visit", idx_a, ka))
    return _Part(
        children,
        np.asarray(joins, np.int64).reshape(-1, 3),
        node_log_h1,
        node_log_d,
        node_log_pT,
        node_log_1mr,
        node_log_r,
        node_cnt,
        inner_stats,
    )


def _place(dst: _Part, hole: _Hole, part: _Part, n: int) -> None:
    """Writes ``part`` (the tree of ``hole``'s points, in its own ids) into ``dst`` (the
    tree of all ``n`` points) at the ids the hole reserved: point ``j`` of the part is
    ``hole.idx[j]``, its inner node ``m + t`` is ``hole.first + t`` (an increasing map, so
    every ``(min, max)`` pair stays in order)."""
    idx, first = hole.idx, hole.first
    m = len(idx)
    gid = np.concatenate([idx, first + np.arange(m - 1)])
    dst.children[first - n : first - n + m - 1] = gid[part.children]
    inner = slice(first, first + m - 1)
    for name in ("log_h1", "log_d", "log_pT", "log_1mr", "log_r", "cnt"):
        a, b = getattr(dst, name), getattr(part, name)
        a[idx] = b[:m]
        a[inner] = b[m:]
    for d, s in zip(jax.tree_util.tree_leaves(dst.inner_stats), jax.tree_util.tree_leaves(part.inner_stats)):
        d[first - n : first - n + m - 1] = s


def _key_payload(key):
    """A key as plain data for another process: ``(key bits, impl name)``."""
    return np.asarray(jax.random.key_data(key)), str(jax.random.key_impl(key))


def _solve_hole(component, alpha, X_rows, key_payload, subset_size, leaf_size, balance, x64: bool) -> _Part:
    """Dask task: `_build` over one sub-problem's rows (in float64 when the caller is)."""
    if x64 and not jax.config.jax_enable_x64:
        jax.config.update("jax_enable_x64", True)
    data, impl = key_payload
    key = jax.random.wrap_key_data(jnp.asarray(data), impl=impl)
    m = X_rows.shape[0]
    leaf_np = jax.tree_util.tree_map(lambda x: np.asarray(x)[:m], padded_leaf_stats(component, X_rows))
    return _build(component, alpha, X_rows, leaf_np, key, subset_size, leaf_size, balance)


def _check_balance(balance) -> Union[str, float]:
    if isinstance(balance, str):
        if balance != "auto":
            raise ValueError(f'balance must be in [0, 0.5) or "auto", got {balance!r}')
        return balance
    try:
        b = float(balance)
    except (TypeError, ValueError):
        raise ValueError(f'balance must be in [0, 0.5) or "auto", got {balance!r}') from None
    if not (0.0 <= b < 0.5):
        raise ValueError(f'balance must be in [0, 0.5) or "auto", got {balance!r}')
    return b


def rbhc(
    key,
    X,
    component: Component,
    alpha: float = 1.0,
    *,
    subset_size: int = 64,
    leaf_size: int = 64,
    balance: Union[str, float] = "auto",
    progress_bar: Optional[bool] = None,
    client=None,
    task_size: Optional[int] = None,
) -> BHCResult:
    """Randomized BHC: a full binary tree over the rows of ``X`` in ``O(n log n)``.

    Args:
      key: a `jax.random` key (the random subsets; the same key gives the same tree).
      X: data ``[n, d]`` in the component's domain.
      component: a conjugate component family (see `jaxhc.components`).
      alpha: DPM concentration (> 0).
      subset_size: points in the random subset clustered by BHC at each level (>= 2).
      leaf_size: sides with at most this many points are clustered by plain BHC
        (>= subset_size). BHC calls are padded to the library's size grid from 64 points up
        (`jaxhc._internal.buckets.bucket(m, 64)`), so sizes up to 64 share one compiled
        program.
      balance: how a level splits when BHC's top split of the subset is very unbalanced
        (an outlying point or a few peeled off). ``"auto"`` (default): split at the subtree
        closest to half the subset (regrafted to the root) when the smaller top side holds
        under a quarter of the subset, BHC's root joins the subset (``r >= 0.5``), that
        tree's log evidence on the subset is at most `AUTO_BALANCE_NATS` below the BHC
        tree's and no other point is a far outlier to the subset (module docstring), so the
        recursion stays shallow inside clusters while far outliers are still peeled off. A number ``b`` in ``[0, 0.5)``:
        always take that balanced split when the smaller top side holds less than ``b``
        of the subset; ``0`` is Algorithm 2 (always the top split).
      progress_bar: tqdm bar over points placed (default: n >= 5000).
      client: a ``distributed.Client`` (the ``dask`` extra) to run the independent
        sub-problems on its workers: the levels above sides of ``task_size`` points are
        split here, each such side is built by a worker, and the nodes above them are
        joined here. The same key gives the same tree and the same numbers as without a
        client (each side's key is the one the recursion gives it, whatever the workers'
        order). The workers compute in float64 when this process does.
      task_size: with ``client``, sides of at most this many points go to the workers as
        one task each (default: ``n / (4 x workers)``, at least ``4 * leaf_size``).

    Returns:
      `BHCResult` of the final tree, every quantity computed exactly on it.
    """
    check_component(component)
    alpha = check_alpha(alpha)
    Xh = component.validate_data(X)
    n = Xh.shape[0]
    if not (isinstance(subset_size, (int, np.integer)) and subset_size >= 2):
        raise ValueError(f"subset_size must be an integer >= 2, got {subset_size!r}")
    balance = _check_balance(balance)
    if not (isinstance(leaf_size, (int, np.integer)) and leaf_size >= subset_size):
        raise ValueError(f"leaf_size must be an integer >= subset_size={subset_size}, got {leaf_size!r}")
    if task_size is not None and not (
        isinstance(task_size, (int, np.integer)) and not isinstance(task_size, bool) and task_size > leaf_size
    ):
        raise ValueError(f"task_size must be an integer > leaf_size={leaf_size}, got {task_size!r}")
    if task_size is not None and client is None:
        raise ValueError("task_size applies only with a Dask client (client=...)")
    from ..._internal.validation import check_key

    key = check_key(key, "key")
    if client is not None:
        from ..._internal.dask import check_client

        workers = check_client(client)
        if task_size is None:
            task_size = max(4 * leaf_size, -(-n // (4 * workers)))
    # every node's statistics in one host buffer [2n-1] (leaves first, the inner nodes
    # written by the recursion), the leaves' through the bucketed program of `bhc` (no eager
    # program per n); the result holds one device copy of it (module docstring: memory)
    leaf_dev = padded_leaf_stats(component, Xh)
    node_np = jax.tree_util.tree_map(lambda x: np.zeros((2 * n - 1,) + x.shape[1:], x.dtype), leaf_dev)
    for dst, src in zip(jax.tree_util.tree_leaves(node_np), jax.tree_util.tree_leaves(leaf_dev)):
        dst[:n] = np.asarray(src)[:n]
    del leaf_dev
    leaf_np = jax.tree_util.tree_map(lambda x: x[:n], node_np)
    inner_np = jax.tree_util.tree_map(lambda x: x[n:], node_np)
    if progress_bar is None:
        progress_bar = n >= 5000
    bar = None
    if progress_bar:
        from tqdm.auto import tqdm

        bar = tqdm(total=n, desc="RBHC points placed", leave=False)
    fdtype = np.asarray(jax.tree_util.tree_leaves(leaf_np)[0]).dtype
    fdtype = fdtype if np.issubdtype(fdtype, np.floating) else np.float64
    try:
        if client is None:
            part = _build(
                component, alpha, Xh, leaf_np, key, subset_size, leaf_size, balance, bar, inner_stats=inner_np
            )
        else:
            part = _build_on_dask(
                client, component, alpha, Xh, leaf_np, key, subset_size, leaf_size, balance, bar, task_size, inner_np
            )
    finally:
        if bar is not None:
            bar.close()

    _fill_joins(
        component,
        float(np.log(alpha)),
        fdtype,
        [tuple(int(v) for v in j) for j in part.joins],
        n,
        leaf_np,
        part.inner_stats,
        part.cnt,
        part.log_h1,
        part.log_d,
        part.log_pT,
        part.log_r,
        part.log_1mr,
    )
    del leaf_np, inner_np
    node_stats = jax.tree_util.tree_map(jnp.asarray, node_np)
    del node_np
    return result_from_nodes(
        component,
        alpha,
        part.children,
        part.log_r[n:],
        part.log_h1,
        part.log_d,
        part.log_pT,
        part.log_1mr,
        node_stats,
        validate=True,
    )


def _build_on_dask(client, component, alpha, Xh, leaf_np, key, subset_size, leaf_size, balance, bar, task_size, inner):
    """`_build` with the sides of at most ``task_size`` points built on the workers of
    ``client``: each is submitted as soon as the recursion here reaches it, and placed into
    the tree (`_place`) as it comes back."""
    from distributed import as_completed

    n = Xh.shape[0]
    x64 = bool(jax.config.jax_enable_x64)
    holes: list = []
    futures: dict = {}

    def on_hole(hole: _Hole):
        fut = client.submit(
            _solve_hole,
            component,
            alpha,
            Xh[hole.idx],
            _key_payload(hole.key),
            subset_size,
            leaf_size,
            balance,
            x64,
            pure=False,
        )
        futures[fut.key] = len(holes)
        holes.append((hole, fut))

    try:
        part = _build(
            component, alpha, Xh, leaf_np, key, subset_size, leaf_size, balance, bar, task_size, on_hole, inner
        )
        joins = [part.joins]
        for fut in as_completed([f for _, f in holes]):
            hole = holes[futures[fut.key]][0]
            sub = fut.result()
            _place(part, hole, sub, n)
            m = len(hole.idx)
            ids = np.concatenate([hole.idx, hole.first + np.arange(m - 1)])
            joins.append(ids[sub.joins])
            if bar is not None:
                bar.update(m)
            fut.release()
    finally:
        for _, f in holes:
            f.cancel()
    # the joins in id order, as the recursion in one process appends them
    all_joins = np.concatenate(joins, axis=0)
    return part._replace(joins=all_joins[np.argsort(all_joins[:, 0], kind="stable")])


def _fill_joins(comp, log_alpha, fdtype, joins, n, leaf_np, inner_stats, cnt, log_h1, log_d, log_pT, log_r, log_1mr):
    """The BHC terms and statistics of the split nodes, bottom-up in rounds (a round: every
    join whose two children are done), each round in batches of `_JOIN_BATCH` through one
    compiled program. Writes into the per-node arrays."""
    if not joins:
        return
    ready = np.ones(2 * n - 1, bool)
    ready[[j[0] for j in joins]] = False
    pending = list(joins)

    def stats_rows(ids):
        ids = np.asarray(ids)
        out = []
        for leaf, inner in zip(jax.tree_util.tree_leaves(leaf_np), jax.tree_util.tree_leaves(inner_stats)):
            out.append(
                np.where(
                    (ids < n).reshape((-1,) + (1,) * (leaf.ndim - 1)),
                    leaf[np.minimum(ids, n - 1)],
                    inner[np.maximum(ids - n, 0)],
                )
            )
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(leaf_np), out)

    la = jnp.asarray(log_alpha, dtype=fdtype)
    while pending:
        now = [j for j in pending if ready[j[1]] and ready[j[2]]]
        pending = [j for j in pending if not (ready[j[1]] and ready[j[2]])]
        for c0 in range(0, len(now), _JOIN_BATCH):
            part = np.asarray(now[c0 : c0 + _JOIN_BATCH], np.int64)
            k = len(part)
            pad = np.concatenate([part, np.repeat(part[:1], _JOIN_BATCH - k, 0)])
            a, b = pad[:, 1], pad[:, 2]
            args = []
            for ids in (a, b):
                args += [
                    _pad_rows(stats_rows(ids), _JOIN_BATCH),
                    jnp.asarray(cnt[ids], fdtype),
                    jnp.asarray(log_d[ids], fdtype),
                    jnp.asarray(log_pT[ids], fdtype),
                ]
            s, h1, ld, lp, lr, l1 = _join(comp, la, *args)
            node = part[:, 0]
            cnt[node] = cnt[part[:, 1]] + cnt[part[:, 2]]
            log_h1[node] = np.asarray(h1)[:k]
            log_d[node] = np.asarray(ld)[:k]
            log_pT[node] = np.asarray(lp)[:k]
            log_r[node] = np.asarray(lr)[:k]
            log_1mr[node] = np.asarray(l1)[:k]
            for dst, src in zip(jax.tree_util.tree_leaves(inner_stats), jax.tree_util.tree_leaves(s)):
                dst[node - n] = np.asarray(src)[:k]
        ready[[j[0] for j in now]] = True
