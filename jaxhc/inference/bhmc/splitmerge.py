"""Split-merge moves on the nodes of one level of the BHMC tree (Metropolis-Hastings with the
level's weights integrated out), run inside the table-count update of the weights
(`updates.update_weights_exact`).

At level ``l`` the *items* are the level-``l + 1`` nodes (``l < L``) or the points (``l =
L``). A move picks two items ``i != j`` uniformly; when they sit under the same level-``l``
node it proposes to split that node in two (``i`` and ``j`` apart, the other items allocated
one by one in a random order, each by the target's conditional given the items placed so
far: Dahl's sequentially-allocated split), when they sit under two sibling nodes it proposes
to merge them, otherwise nothing. Subtrees below move with their item; the component of every
point, ``theta`` and every other node stay.

The target. With the weights of levels ``l .. L`` integrated out, the table counts of levels
``l + 1 .. L`` drawn bottom-up (as `update_weights_exact` does) and the weights of the levels
above held, the density of the tree at level ``l`` is

    p(V | alpha) * prod_{z at level l} DM(n_z | gamma beta_pa(z)),
    DM(n | a) = Gamma(gamma) / Gamma(gamma + n.) prod_k Gamma(a_k + n_k) / Gamma(a_k),

where ``n_z`` are the node's customers (its children's table counts; its points'
components at the leaves) and ``sum_k a_k = gamma`` (the rest ``beta*`` included). Nothing else
depends on how level ``l`` groups its items: the tables below keep their Stirling terms and
the data enter only through the components. So splitting node ``z`` into ``z1, z2`` has the
target ratio

    alpha Gamma(n1) Gamma(n2) / Gamma(n)                   (one more child of the parent)
    * Gamma(alpha) Gamma(alpha + n) / (Gamma(alpha + n1) Gamma(alpha + n2))   (l < L only)
    * DM(n_z1) DM(n_z2) / DM(n_z)

(``n``: points through the node), and the MH ratio divides by the allocation's probability
(a merge multiplies by the probability that the allocation would rebuild the split it undoes;
the pair is chosen the same way in both directions). After the moves of level ``l`` its tables
are drawn and the pass goes up; the weights of every level are then drawn top-down from their
table counts, which completes the partially collapsed Gibbs step (the weights integrated out
for the move are drawn afresh after it).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.special import gammaln

from ..mh import mh_accept
from .state import NEG_INF, OVERFLOW_NODES, BHMCState

__all__ = ["split_merge_level"]


def _log_rising(la, n, v):
    """``log Gamma(a + n + v) - log Gamma(a + n)`` with ``a = exp(la)`` (``n, v >= 0``
    integers as floats), stable for ``a -> 0``: ``Gamma(a + v) / Gamma(a) = a Gamma(a + v) /
    Gamma(a + 1)``."""
    a = jnp.exp(la)
    at0 = la + gammaln(a + v) - gammaln(a + 1.0)
    gen = gammaln(a + n + v) - gammaln(jnp.where(n > 0, a + n, 1.0))
    return jnp.where(v > 0, jnp.where(n > 0, gen, at0), 0.0)


def _log_dm(la, n, gamma):
    """``log DM(n | a)`` over the components ``[K]`` (the rest holds no customer)."""
    return jnp.sum(_log_rising(la, 0.0, n)) - (gammaln(gamma + jnp.sum(n)) - gammaln(gamma))


def _log_ncrp_split(cA, cB, alpha, internal):
    """``log`` nCRP ratio of two sibling nodes with ``cA, cB`` points against one node."""
    r = jnp.log(alpha) + gammaln(cA) + gammaln(cB) - gammaln(cA + cB)
    if internal:
        r = r + gammaln(alpha) + gammaln(alpha + cA + cB) - gammaln(alpha + cA) - gammaln(alpha + cB)
    return r


def split_merge_level(key, st: BHMCState, l: int, tables, num_moves: int, mask=None):
    """``num_moves`` split-merge proposals at level ``l`` (module docstring).

    Args:
      key: random key.
      st: the state; the weights of level ``l - 1`` (the nodes' parents) are used, those of
        levels ``l .. L`` are not (they are redrawn afterwards by the caller).
      l: the level (static, ``1 .. L``).
      tables: int ``[M, K]`` table counts of the level-``l + 1`` nodes (their customers at
        their parent), ignored at ``l = L`` (the points' components are the customers).
      num_moves: proposals (static).
      mask: bool ``[N]`` the real points of a padded state (padding rows are never items).

    Returns:
      ``(state, accepted)``: the state with the new structure at level ``l`` (``path``,
      ``parent``, ``level``, ``count``; weights of new nodes not set) and the number of
      accepted moves.
    """
    M, K1 = st.logb.shape
    K = K1 - 1
    N, L1 = st.path.shape
    L = L1 - 1
    f = st.logb.dtype
    leaf = l == L
    internal = not leaf
    lg = jnp.log(st.gamma)
    I = N if leaf else M
    slots = jnp.arange(M)
    if leaf:
        vec_of = jax.nn.one_hot(st.c, K, dtype=f)  # [N, K]
    else:
        vec_of = tables.astype(f)

    def items(s):
        if leaf:
            return s.path[:, L], jnp.ones(N, bool) if mask is None else mask, jnp.ones(N, f)
        valid = (s.level == l + 1) & (s.count > 0) & (s.parent >= 0)
        return s.parent, valid, s.count.astype(f)

    def one(t, carry):
        s, nacc = carry
        k = jax.random.fold_in(key, t)
        ki, kj, kperm, kalloc, kacc = jax.random.split(k, 5)
        owner, valid, w = items(s)
        nvalid = jnp.sum(valid)
        i = jax.random.categorical(ki, jnp.where(valid, 0.0, NEG_INF)).astype(jnp.int32)
        j = jax.random.categorical(kj, jnp.where(valid & (jnp.arange(I) != i), 0.0, NEG_INF)).astype(jnp.int32)
        zi, zj = owner[i], owner[j]
        split = zi == zj
        sib = s.parent[zi] == s.parent[zj]
        la = lg + s.logb[jnp.maximum(s.parent[zi], 0), :K]
        members = valid & ((owner == zi) | (owner == zj)) & (jnp.arange(I) != i) & (jnp.arange(I) != j)
        nmem = jnp.sum(members)
        order = jnp.argsort(jnp.where(members, jax.random.uniform(kperm, (I,), f), 2.0))

        def inc(n, c, it):
            v = vec_of[it]
            lp = jnp.sum(_log_rising(la, n, v)) - (
                gammaln(st.gamma + jnp.sum(n) + jnp.sum(v)) - gammaln(st.gamma + jnp.sum(n))
            )
            lp = lp + gammaln(c + w[it]) - gammaln(c)
            if internal:
                lp = lp + gammaln(st.alpha + c) - gammaln(st.alpha + c + w[it])
            return lp

        def body(r, c):
            nA, nB, cA, cB, logq, side = c
            it = order[r]
            lA, lB = inc(nA, cA, it), inc(nB, cB, it)
            lpB = lB - jnp.logaddexp(lA, lB)
            lpA = lA - jnp.logaddexp(lA, lB)
            u = jax.random.uniform(jax.random.fold_in(kalloc, r), (), f)
            toB = jnp.where(split, jnp.log(u) < lpB, owner[it] == zj)
            logq = logq + jnp.where(toB, lpB, lpA)
            v, wi = vec_of[it], w[it]
            nA = jnp.where(toB, nA, nA + v)
            nB = jnp.where(toB, nB + v, nB)
            cA = jnp.where(toB, cA, cA + wi)
            cB = jnp.where(toB, cB + wi, cB)
            return nA, nB, cA, cB, logq, side.at[it].set(toB)

        init = (vec_of[i], vec_of[j], w[i], w[j], jnp.zeros((), f), jnp.zeros(I, bool).at[j].set(True))
        nA, nB, cA, cB, logq, side = jax.lax.fori_loop(0, nmem, body, init)
        delta = _log_dm(la, nA, st.gamma) + _log_dm(la, nB, st.gamma) - _log_dm(la, nA + nB, st.gamma)
        delta = delta + _log_ncrp_split(cA, cB, st.alpha, internal)
        log_r = jnp.where(split, delta - logq, logq - delta)
        free = (s.count == 0) & (slots > 0)
        has_free = jnp.any(free)
        new = jnp.argmax(free).astype(jnp.int32)
        ok = (nvalid >= 2) & (split | sib) & mh_accept(kacc, log_r)
        over = ok & split & ~has_free
        ok = ok & ~over
        dest = jnp.where(split, new, zi)
        src = jnp.where(split, zi, zj)
        moved = ok & side & (owner == jnp.where(split, zi, zj))
        if leaf:
            path = s.path.at[:, L].set(jnp.where(moved, dest, s.path[:, L]))
            parent, level = s.parent, s.level
        else:
            parent = jnp.where(moved, dest, s.parent)
            path = s.path.at[:, l].set(jnp.where(moved[s.path[:, l + 1]], dest, s.path[:, l]))
            level = s.level
        grow = ok & split
        parent = parent.at[new].set(jnp.where(grow, s.parent[zi], parent[new]))
        level = level.at[new].set(jnp.where(grow, l, level[new]))
        cmov = jnp.where(ok, cB, 0.0).astype(s.count.dtype)
        count = s.count.at[dest].add(jnp.where(ok, cmov, 0)).at[src].add(-cmov)
        s = s._replace(
            path=path,
            parent=parent,
            level=level,
            count=count,
            overflow=s.overflow | jnp.where(over, OVERFLOW_NODES, 0),
        )
        return s, nacc + ok.astype(jnp.int32)

    return jax.lax.fori_loop(0, num_moves, one, (st, jnp.int32(0)))
