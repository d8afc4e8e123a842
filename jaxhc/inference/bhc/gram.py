"""Greedy BHC under the Normal-inverse-Wishart family in high dimension: every log marginal
from the points' Gram matrix, ``O(k^3)`` (and less, by block updates) for a node of ``k``
points instead of the ``O(d^3)`` of a ``d x d`` factorisation.

The identity. With the prior scale ``S0 = L0 L0^T`` and whitened points ``w_i = L0^-1 (x_i
- m0)``, a node ``A`` of ``k`` points has the posterior scale (DESIGN.md, NIW marginal)

    S_n = S0 + scatter + kappa k / (kappa + k) (xbar - m0)(xbar - m0)^T
        = L0 (I_d + W_A M W_A^T) L0^T,      M = I_k - 1 1^T / (kappa + k),

where ``W_A [d, k]`` holds the node's whitened points. Sylvester's identity turns the
``d x d`` determinant into a ``k x k`` one, and ``M^-1 = I_k + 1 1^T / kappa``,
``det M = kappa / (kappa + k)``, so

    log|S_n| = log|S0| + log kappa - log(kappa + k) + log det(I_k + G_AA),
    G = W^T W + 1 / kappa                                  (the Gram matrix, [n, n], once).

So after ``O(n^2 d)`` for ``G`` (and ``O(n d^2)`` to whiten, ``O(n d)`` for a diagonal
``S0``) the search never touches ``d`` again.

Block updates. Every node ``A`` keeps the Cholesky factor ``L_A`` of ``P_A = I + G_AA`` and
``Z_A = L_A^-1 G[A, :]`` (its rows against all points). Joining ``A`` and ``B`` needs only
the Schur complement of the larger one's block,

    log det P_{A+B} = log det P_A + log det(I + G_BB - X^T X),    X = Z_A[:, B],

``O(k_A k_B^2 + k_B^3)`` for ``k_B <= k_A``; the merged node's factor and ``Z`` extend the
larger one's by ``k_B`` rows. A merge scores the new node against every other node with
one batched factorisation per size class.

The search is the same greedy algorithm as `jaxhc.inference.bhc.greedy` (pair log-odds,
cached best partner per row, the merged node in the smaller slot, ties to the first index),
run from the host in NumPy/LAPACK: the work per merge depends on the node sizes, which a
fixed-shape compiled loop cannot follow. Trees equal the ``d x d`` path's; log marginals
agree to rounding (tests/test_bhc_gram.py).
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import solve_triangular
from scipy.linalg.blas import dger as _dger
from scipy.linalg.blas import dtrsm as _dtrsm
from scipy.special import multigammaln

from ...components import GaussianStats, NormalInverseWishart
from .terms import merge_log

__all__ = ["GRAM_MIN_D", "use_gram", "bhc_gram"]

# the d from which a NormalInverseWishart search over single points runs here. Measured on 2
# cores against the compiled search's run time after compilation (8 Gaussian clusters, the
# same trees): n = 1000: d = 12 1.9 vs 1.7 s, 16: 2.1 vs 2.0 s, 20: 1.5 vs 4.4 s, 24: 1.7
# vs 5.4 s; n = 2000, d = 16: 7.6 vs 9.6 s; n = 4000: d = 12 67 s (the compiled search ~30 s),
# d = 16 36 vs 40 s. Below 16 the compiled search's O(d^3) pairs are cheaper than the
# O(k n) row updates here once nodes grow large; from 16 up this search wins, and it
# compiles nothing.
GRAM_MIN_D = 16

_LOG_PI = float(np.log(np.pi))


def use_gram(comp, leaf_stats, n: int) -> bool:
    """Whether `bhc_from_stats` runs the Gram search: a `NormalInverseWishart` component, at
    least `GRAM_MIN_D` dimensions, and every real slot one point (``leaf_stats=None``: the
    rows of a data matrix)."""
    if type(comp) is not NormalInverseWishart or comp.dim < GRAM_MIN_D or n < 2:
        return False
    return leaf_stats is None or bool(np.all(np.asarray(leaf_stats.n)[:n] == 1))


def _whiten(comp, X):
    """``(W [n, d], log|S0|)``: ``W = (X - m0) L0^-T`` (a diagonal ``S0`` by division)."""
    S0 = np.asarray(comp.scale, dtype=np.float64)
    Y = X - np.asarray(comp.mean, dtype=np.float64)
    diag = np.diagonal(S0)
    if np.count_nonzero(S0 - np.diag(diag)) == 0:
        return Y / np.sqrt(diag), float(np.sum(np.log(diag)))
    L0 = np.linalg.cholesky(S0)
    W = solve_triangular(L0, Y.T, lower=True).T
    return W, float(2.0 * np.sum(np.log(np.diagonal(L0))))


def _logdet_pd_batch(P):
    """``log det(I + P)`` of a stack ``[m, s, s]`` (``I + P`` symmetric positive definite;
    ``P`` is overwritten)."""
    i = np.arange(P.shape[-1])
    P[:, i, i] += 1.0
    L = np.linalg.cholesky(P)
    return 2.0 * np.sum(np.log(np.diagonal(L, axis1=-2, axis2=-1)), axis=-1)


def _solve_lower(L, B):
    """``L^-1 B`` for lower-triangular ``L [k, k]`` and C-ordered ``B [k, m]`` (BLAS trsm
    on the transposed, Fortran-ordered views: no copies, and none of the per-call overhead
    that `scipy.linalg.solve_triangular` has on small systems)."""
    if L.shape[0] == 1:
        return B / L[0, 0]
    return _dtrsm(1.0, L.T, B.T, side=1, lower=0).T


class _Terms:
    """The NIW log marginal of a node from the log det of its ``P``, and the BHC merge
    quantities (`merge_log`)."""

    def __init__(self, comp, alpha, n):
        d = comp.dim
        k0, nu0 = float(comp.kappa), float(comp.dof)
        k = np.arange(n + 1, dtype=np.float64)
        self.log_alpha = float(np.log(alpha))
        self.nu0 = nu0
        # log_h1(k) = const[k] - (nu0 + k) / 2 log det P   (log|S0| cancels but for -k/2 log|S0|)
        self._const_no_s0 = (
            -0.5 * k * d * _LOG_PI
            + np.array([multigammaln(0.5 * (nu0 + m), d) for m in range(n + 1)])
            - multigammaln(0.5 * nu0, d)
            - 0.5 * (nu0 + k) * (np.log(k0) - np.log(k0 + k))
            + 0.5 * d * (np.log(k0) - np.log(k0 + k))
        )

    def set_logdet_s0(self, logdet_s0):
        k = np.arange(self._const_no_s0.shape[0], dtype=np.float64)
        self.const = self._const_no_s0 - 0.5 * k * logdet_s0

    def log_h1(self, k, logdet_p):
        return self.const[k] - 0.5 * (self.nu0 + k) * logdet_p

    def merge(self, k, log_h1, log_da, log_pTa, log_db, log_pTb):
        """``(log_d, log_pT, log_r, log_1mr, logit)`` of merging a and b into ``k`` points
        (broadcast; `jaxhc.inference.bhc.terms.merge_log`)."""
        return merge_log(self.log_alpha, k, 0, log_da, log_db, log_pTa, log_pTb, log_h1)


def bhc_gram(comp, alpha, X, progress_bar: bool = False):
    """The greedy search on points ``X [n, d]`` (host arrays). Returns ``(children,
    node_stats, log_h1, log_d, log_pT, log_r, log_1mr, leaf_log_h1)`` as NumPy arrays: the
    per-merge outputs of `jaxhc.inference.bhc.greedy.bhc_core` (node ids ``0 .. 2n-2``), but
    the statistics of all ``2n - 1`` nodes, leaves first."""
    X = np.asarray(X, dtype=np.float64)
    n, d = X.shape
    W, logdet_s0 = _whiten(comp, X)
    G = W @ W.T + 1.0 / float(comp.kappa)
    G = 0.5 * (G + G.T)
    del W
    T = _Terms(comp, alpha, n)
    T.set_logdet_s0(logdet_s0)
    neg_inf = -np.inf
    idx = np.arange(n)

    # leaves: P = 1 + G_ii
    s1 = 1.0 + np.diagonal(G).copy()
    leaf_ldp = np.log(s1)
    leaf_lh = T.log_h1(1, leaf_ldp)
    # every pair of points: det P = (1 + G_ii)(1 + G_jj) - G_ij^2 (symmetric to the bit)
    ldp2 = np.log(s1[:, None] * s1[None, :] - G * G)
    lh2 = T.log_h1(2, ldp2)
    la = T.log_alpha
    *_, S = T.merge(2, lh2, la, leaf_lh[:, None], la, leaf_lh[None, :])
    S[idx, idx] = neg_inf

    # per slot: members in factor order, log det P, count, log d, log p(D|T), node id
    members = [np.array([i]) for i in range(n)]
    ldp = leaf_ldp.copy()
    cnt = np.ones(n, np.int64)
    log_d = np.full(n, la)
    log_pT = leaf_lh.copy()
    node = idx.copy()
    active = np.ones(n, bool)
    # Z rows by point: the row of Z_A (A the point's node) at the point's place in A's factor
    Z = G / np.sqrt(s1)[:, None]
    best_idx = np.argmax(S, axis=1)
    best_val = S[idx, best_idx]

    children = np.zeros((n - 1, 2), np.int64)
    out = {k: np.zeros(n - 1) for k in ("log_h1", "log_d", "log_pT", "log_r", "log_1mr")}
    bar = None
    if progress_bar:
        from tqdm.auto import tqdm

        bar = tqdm(total=2 * n - 1, desc="BHC", unit="step", leave=False)
        bar.update(n)
    try:
        for t in range(n - 1):
            i = int(np.argmax(best_val))
            j = int(best_idx[i])
            a, b = min(i, j), max(i, j)
            A, B = members[a], members[b]
            # the larger node leads the merged factor; the smaller one's Schur block extends it
            big, small = (a, b) if A.shape[0] >= B.shape[0] else (b, a)
            Ab, As = members[big], members[small]
            Xb = Z[np.ix_(Ab, As)]  # [k_big, k_small]
            Sch = np.eye(As.shape[0]) + G[np.ix_(As, As)] - Xb.T @ Xb
            Ls = np.linalg.cholesky(Sch)
            Z[As] = _solve_lower(Ls, G[As] - Xb.T @ Z[Ab])
            kb, ks = Ab.shape[0], As.shape[0]
            C = np.concatenate([Ab, As])
            ldp_c = ldp[big] + 2.0 * np.sum(np.log(np.diagonal(Ls)))
            k = kb + ks
            lh = T.log_h1(k, ldp_c)
            m_log_d, m_log_pT, m_log_r, m_log_1mr, _ = T.merge(k, lh, log_d[a], log_pT[a], log_d[b], log_pT[b])
            na, nb = node[a], node[b]
            children[t] = (min(na, nb), max(na, nb))
            for key, v in zip(out, (lh, m_log_d, m_log_pT, m_log_r, m_log_1mr)):
                out[key][t] = v
            members[a], ldp[a] = C, ldp_c
            members[b] = None
            cnt[a], log_d[a], log_pT[a], node[a] = k, m_log_d, m_log_pT, n + t
            active[b] = False
            S[b, :] = neg_inf
            S[:, b] = neg_inf
            best_val[b] = neg_inf
            # the new node's row: one batched factorisation per size class of partners
            r = np.full(n, neg_inf)
            others = np.flatnonzero(active)
            others = others[others != a]
            if others.size:
                sizes = cnt[others]
                ZC = Z[C]  # [k, n]
                for s in np.unique(sizes):
                    grp = others[sizes == s]
                    if s == 1:  # a singleton slot holds its own point: a scalar Schur complement
                        col = ZC[:, grp]
                        ld = ldp_c + np.log(1.0 + G[grp, grp] - np.einsum("km,km->m", col, col))
                    else:
                        mem = np.stack([members[g] for g in grp])  # [m, s]
                        if s <= k:
                            # Schur block of the partner against the new node's factor
                            Xg = np.moveaxis(ZC[:, mem], 0, -1)  # [m, s, k]
                            P = G[mem[:, :, None], mem[:, None, :]] - np.matmul(Xg, np.swapaxes(Xg, 1, 2))
                            ld = ldp_c + _logdet_pd_batch(P)
                        else:
                            # Schur block of the new node against the (larger) partner's factor
                            Yg = Z[mem[:, :, None], C[None, None, :]]  # [m, s, k]
                            P = G[np.ix_(C, C)][None] - np.matmul(np.swapaxes(Yg, 1, 2), Yg)
                            ld = ldp[grp] + _logdet_pd_batch(P)
                    kk = k + s
                    *_, logit = T.merge(kk, T.log_h1(kk, ld), m_log_d, m_log_pT, log_d[grp], log_pT[grp])
                    r[grp] = logit
            S[a, :] = r
            S[:, a] = r
            # row caches: rows whose best partner was a or b are rescanned; others may take a
            lost = active & ((best_idx == a) | (best_idx == b))
            lost[a] = False
            take_r = active & ~lost & ((r > best_val) | ((r == best_val) & (a < best_idx)))
            take_r[a] = False
            best_val[take_r] = r[take_r]
            best_idx[take_r] = a
            rows = np.flatnonzero(lost)
            if rows.size:
                bi = np.argmax(S[rows], axis=1)
                best_idx[rows] = bi
                best_val[rows] = S[rows, bi]
            best_idx[a] = int(np.argmax(r))
            best_val[a] = r[best_idx[a]]
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    per_merge = tuple(out[k] for k in ("log_h1", "log_d", "log_pT", "log_r", "log_1mr"))
    return children, _node_stats(X, children), *per_merge, leaf_lh


def _node_stats(X, children):
    """`GaussianStats` (NumPy) of all ``2n - 1`` nodes, leaves first, by the pairwise merge
    rule of `NormalInverseWishart.merge` (each scatter written once: the children's sum, then
    an in-place BLAS rank-1 update)."""
    n, d = X.shape
    cnt = np.zeros(2 * n - 1)
    mean = np.zeros((2 * n - 1, d))
    cnt[:n] = 1.0
    mean[:n] = X
    scatter = np.zeros((2 * n - 1, d, d))  # the leaves' rows stay zero
    for t, (p, q) in enumerate(children):
        c = n + t
        npq = cnt[p] + cnt[q]
        cnt[c] = npq
        mean[c] = (cnt[p] / npq) * mean[p] + (cnt[q] / npq) * mean[q]
        diff = mean[p] - mean[q]
        sc = scatter[c]
        if p >= n and q >= n:
            np.add(scatter[p], scatter[q], out=sc)
        elif p >= n or q >= n:
            sc[...] = scatter[max(p, q)]
        # sc += w diff diff^T in place (sc.T is the Fortran-ordered view of a symmetric matrix)
        _dger(cnt[p] * cnt[q] / npq, diff, diff, a=sc.T, overwrite_a=True)
    return GaussianStats(cnt, mean, scatter)
