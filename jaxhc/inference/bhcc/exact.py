"""The CDPM's exact criterion of a column partition on small tables: ``log p(u, X) = log
CRP(u; alpha) + sum_v log p_DPM(X_v)``, each view's DPM marginal likelihood summed exactly
over all Bell(N) row partitions by a dynamic program over row subsets (``O(3^N)`` per column
set), against which BHCC's criterion (the same with each view's row-BHC lower bound,
`BHCCResult.views_log_joint`) is checked (``benchmarks/bhcc_bound_vs_exact.py``), and with
which candidate column partitions can be ranked by the model itself where that is affordable
(``N <= MAX_EXACT_ROWS``; `ExactSetEvidence` is the exact twin of the search's evidence
cache)."""

from __future__ import annotations

from functools import lru_cache

import jax.numpy as jnp
import numpy as np

from ...components.base import Component
from .hostmath import host_gammaln
from .refine import SetEvidence

__all__ = [
    "MAX_EXACT_ROWS",
    "ExactSetEvidence",
    "column_subset_tables",
    "dpm_log_evidence_exact",
    "cdpm_log_joint_exact",
]

#: the exact criterion's row limit: 3^12 = 531 441 (subset, sub-subset) pairs per column set
MAX_EXACT_ROWS = 12


def _check_rows(n: int):
    if n > MAX_EXACT_ROWS:
        raise ValueError(f"X has {n} rows; the exact CDPM criterion is limited to {MAX_EXACT_ROWS} rows (O(3^N))")


def column_subset_tables(X, component: Component) -> np.ndarray:
    """``[J, 2^N]``: ``log p(X[S, c])`` of every column ``c`` and row subset ``S`` (bitmask;
    0 for the empty set), from the family's own ``leaf_stats``, ``merge`` and
    ``log_marginal`` (a column-separable family: `Component.restrict_columns`)."""
    import jax

    Xh = np.asarray(X, float)
    n, J = Xh.shape
    _check_rows(n)
    out = np.zeros((J, 1 << n))
    for c in range(J):
        comp = component.restrict_columns(np.array([c]), name="the exact CDPM criterion")
        leaf = comp.leaf_stats(jnp.asarray(Xh[:, [c]]))
        stats = comp.empty_stats((1,))
        for b in range(n):  # subsets whose highest row is b: those below, each with row b added
            lb = jax.tree_util.tree_map(lambda x: x[b], leaf)
            stats = jax.tree_util.tree_map(
                lambda a, m: jnp.concatenate([a, m]),
                stats,
                comp.merge(stats, jax.tree_util.tree_map(lambda x: x[None], lb)),
            )
        lm = np.array(comp.log_marginal(stats), float)
        lm[0] = 0.0
        out[c] = lm
    return out


@lru_cache(maxsize=4)
def _submask_tables(n: int):
    """For every subset ``S`` (bitmask, ``S > 0``): the subsets ``B`` of ``S`` that hold its
    lowest element (the block of that element in a partition of ``S``), as one flat index
    array with offsets."""
    blocks, starts = [], [0]
    for S in range(1 << n):
        if S == 0:
            starts.append(0)
            continue
        low = S & -S
        rest = S ^ low
        subs = []
        B = rest
        while True:  # every subset of the rest, plus the lowest element
            subs.append(B | low)
            if B == 0:
                break
            B = (B - 1) & rest
        blocks.append(np.array(subs, np.int64))
        starts.append(starts[-1] + len(subs))
    flat = np.concatenate(blocks) if blocks else np.zeros(0, np.int64)
    return flat, np.array(starts, np.int64)


def dpm_log_evidence_exact(tables, alpha: float) -> np.ndarray:
    """``[M]`` exact ``log p_DPM(X)`` of ``M`` problems over the same ``N`` rows given their
    subset log marginals ``tables [M, 2^N]`` (e.g. `column_subset_tables` summed over a column
    set): ``log sum_z CRP(z; alpha) prod_k p(X_k)``, the sum over all Bell(N) partitions by
    ``f(S) = log sum_{B ⊆ S, B ∋ min S} alpha Gamma(|B|) p(X_B) f(S \\ B)``."""
    tables = np.atleast_2d(np.asarray(tables, float))
    M, T = tables.shape
    n = T.bit_length() - 1
    _check_rows(n)
    la = float(np.log(alpha))
    size = np.array([bin(s).count("1") for s in range(T)], float)
    w = la + host_gammaln(np.maximum(size, 1.0))[None, :] + tables  # block weights
    flat, starts = _submask_tables(n)
    f = np.full((M, T), -np.inf)
    f[:, 0] = 0.0
    for S in range(1, T):
        B = flat[starts[S] : starts[S + 1]]
        t = w[:, B] + f[:, S ^ B]
        m = np.max(t, axis=1, keepdims=True)
        f[:, S] = (m + np.log(np.sum(np.exp(t - m), axis=1, keepdims=True)))[:, 0]
    return f[:, T - 1] + float(host_gammaln(alpha) - host_gammaln(n + alpha))


class ExactSetEvidence(SetEvidence):
    """``log p_DPM(X[:, S])`` (exact, all row partitions) of column sets ``S``: the exact twin
    of `jaxhc.inference.bhcc.refine.SetEvidence` (its cache by ``frozenset``, the sets not yet
    cached evaluated together by `dpm_log_evidence_exact`)."""

    def __init__(self, X, component: Component, alpha: float):
        self.tables = column_subset_tables(X, component)
        self.alpha = float(alpha)
        self.cache: dict = {}
        self.n_evaluated = 0

    def _evaluate(self, keys):
        self.n_evaluated += len(keys)
        tabs = np.stack([self.tables[sorted(k)].sum(axis=0) for k in keys])
        for k, v in zip(keys, dpm_log_evidence_exact(tabs, self.alpha)):
            self.cache[k] = float(v)


def cdpm_log_joint_exact(X, component: Component, alpha: float, column_labels, evidence=None) -> float:
    """``log p(u, X)`` under the CDPM of the column partition ``column_labels`` (``[J]``
    integers): ``log CRP(u; alpha) + sum_v log p_DPM(X_v)``, rows summed out exactly
    (``N <= MAX_EXACT_ROWS``). ``evidence``: an `ExactSetEvidence` to reuse."""
    u = np.asarray(column_labels)
    ev = ExactSetEvidence(X, component, alpha) if evidence is None else evidence
    views = [tuple(np.flatnonzero(u == g).tolist()) for g in np.unique(u)]
    J, a = len(u), float(alpha)
    crp = len(views) * np.log(a) + float(np.sum(host_gammaln(np.array([len(v) for v in views], float))))
    crp += float(host_gammaln(a) - host_gammaln(J + a))
    return float(crp + np.sum(ev(views)))
