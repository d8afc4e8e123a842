"""MCMC baselines of the cross-clustering paper: DPM collapsed Gibbs with split-merge moves,
and CDPM (CrossCat) MCMC with Metropolis-coupled chains (Li & Shafto, Sec. 8.2).

**DPM** (`dpm_gibbs_init` / `dpm_gibbs_step` / `dpm_gibbs`): the state is the row labels
``z [N]`` with the statistics of every cluster slot (capacity ``K = N``, so it is exact; an
empty slot holds the statistics of the empty set). One step is

1. a collapsed Gibbs sweep (Neal 2000, Algorithm 3): for each row ``i`` in turn,
   ``p(z_i = k | z_-i, X) ∝ n_k^{-i} p(x_i | X_k^{-i})`` for an occupied cluster ``k`` and
   ``∝ alpha p(x_i)`` for a new one, with ``p(x | D) = exp(log_marginal(D + x) -
   log_marginal(D))`` from the component;
2. ``num_split_merge`` split-merge proposals (Jain & Neal 2004, restricted Gibbs sampling):
   pick two rows ``i != j``; the other rows ``S`` of their clusters are split at random
   between ``i``'s and ``j``'s side and ``num_restricted_scans`` restricted Gibbs scans over
   ``S`` give the launch state. If ``z_i = z_j`` a split is proposed by one more restricted
   scan (probability ``q``), accepted with ``alpha Gamma(n_A) Gamma(n_B) / Gamma(n_A + n_B)
   * p(X_A) p(X_B) / p(X_A+B) / q``; otherwise the merge is proposed and accepted with the
   inverse ratio, ``q`` being the probability of the current split from the launch state.

**CDPM** (`cdpm_mcmc_init` / `cdpm_mcmc_step` / `cdpm_mcmc`): the state is the view of
every column ``u [J]`` (capacity ``V = J``) and the row labels of every view slot
``Z [N, V]`` (capacity ``K = N`` clusters per view). Statistics are kept per column: entry
``[k, j]`` holds the statistics of column ``j`` over the rows of cluster ``k`` of ``j``'s own
view, so a column's likelihood ``sum_k G_j(stats[k, j])`` (Eq. 5) is a sum of per-column log
marginals of the component restricted to column ``j``. This needs a column-separable
component (`BetaBernoulli`, `BetaBinomial`, `NormalKnownCov` with diagonal covariances).
One step updates two chains, the cold one targeting ``p(u, Z | X)`` and a heated one
targeting ``p(u, Z | X)^heat`` (Geyer 1991; the paper uses ``heat = 0.8``):

a. every column's view by Gibbs with ``m`` auxiliary views (Neal 2000, Algorithm 8): the
   ``m`` auxiliary row partitions are drawn from ``CRP(alpha)`` (when the column is alone in
   its view, the first one is that view's partition), and ``u_j`` is drawn with weights
   ``[m_v^{-j} p(X_j | Z_v)]^beta`` for an occupied view and ``alpha^beta / m * CRP(Z_a)^(beta
   - 1) p(X_j | Z_a)^beta`` for an auxiliary one (``beta = 1`` for the cold chain: Algorithm 8
   exactly; the ``CRP^(beta-1)`` factor makes it exact for the tempered target too);
b. every row's cluster within every view by collapsed Gibbs (all views at once, since the
   row's labels in different views are conditionally independent), the conditionals raised to
   ``beta``;
c. a swap of the two chains' states, accepted with ``(1 - heat) (log p(X, s_hot) - log p(X,
   s_cold))``. The cold chain is the output.

Missing entries (NaN in ``X``) are supported where the component's statistics skip them
(`BetaBernoulli`, `BetaBinomial`): held-out cells are predicted by `dpm_predict_cells` and
`cdpm_predict_cells`. `DPMGibbs` and `CDPMGibbs` wrap the kernels as NumPyro ``MCMCKernel``s.

Compilation: the runs and the single steps go through one jitted chunk program per data
shape, component and static option (``num_split_merge``; ``num_aux``): chain lengths,
``thin``, ``num_restricted_scans``, ``gibbs_sweep`` and ``heat`` are traced, and kept samples
go to buffers of a length fixed by the shape (`_chunk_size`), longer runs taking several calls.
"""
from __future__ import annotations

import functools
import itertools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln, logsumexp
from numpyro.infer.mcmc import MCMCKernel

from ..components import (
    BetaBernoulli,
    BetaBinomial,
    Component,
    CountStats,
    GaussianStats,
    MultinomialStats,
    NormalKnownCov,
)
from .._internal.validation import check_key
from .._internal.validation import check_alpha, check_component
from .mh import mh_accept, tree_select
from .._internal.dtypes import float_dtype as _float

__all__ = [
    "DPMGibbsState",
    "DPMGibbsInfo",
    "DPMGibbsSamples",
    "dpm_gibbs_init",
    "dpm_gibbs_step",
    "dpm_gibbs",
    "dpm_predict_cells",
    "CDPMState",
    "CDPMInfo",
    "CDPMSamples",
    "cdpm_mcmc_init",
    "cdpm_mcmc_step",
    "cdpm_mcmc",
    "cdpm_predict_cells",
    "DPMGibbs",
    "CDPMGibbs",
]

_tmap = jax.tree_util.tree_map
_BLOCK = 8  # cluster / view slots evaluated together by the CDPM sweeps


# ==========================================================================================
# statistics bookkeeping (removal and segment sums; merge itself is the component's)
# ==========================================================================================
def _to_additive(s):
    """Statistics as quantities that add over disjoint data sets. Count and multinomial
    statistics already do (their ``merge`` is a sum); Gaussian ``(n, mean, scatter)`` become
    the raw moments ``(n, n mean, scatter + n mean mean^T)``."""
    if isinstance(s, GaussianStats):
        sm = s.n[..., None] * s.mean
        return (s.n, sm, s.scatter + sm[..., :, None] * s.mean[..., None, :])
    return s


def _from_additive(a, like):
    if isinstance(like, GaussianStats):
        n, sm, sq = a
        safe = jnp.where(n > 0, n, 1.0)[..., None]
        mean = jnp.where(n[..., None] > 0, sm / safe, 0.0)
        return GaussianStats(n, mean, sq - sm[..., :, None] * mean[..., None, :])
    return a


def _sub(s, t):
    """Statistics of ``D \\ D_t`` from those of ``D`` and of the subset ``D_t`` (the inverse
    of ``merge``)."""
    a, b = _to_additive(s), _to_additive(t)
    return _from_additive(_tmap(lambda x, y: x - y, a, b), s)


def _segment_stats(leaves, ids, num):
    """Statistics of ``num`` groups from per-item statistics ``leaves`` (leading axis over
    items, ids ``[items]`` in ``0..num-1``)."""
    a = _to_additive(leaves)
    out = _tmap(lambda x: jax.ops.segment_sum(x, ids, num_segments=num), a)
    return _from_additive(out, leaves)


def _take(s, idx):
    return _tmap(lambda a: a[idx], s)


def _zeros_like(s):
    return _tmap(jnp.zeros_like, s)


def _check_stats_type(component, X):
    s = component.stats(jnp.asarray(X[:1]))
    if not isinstance(s, (CountStats, GaussianStats, MultinomialStats)):
        raise TypeError(
            f"the Gibbs samplers need statistics whose merge can be undone (CountStats, "
            f"GaussianStats, MultinomialStats); {type(component).__name__} gives {type(s).__name__}")


def _log_marginal(component, s, cache):
    return component.log_marginal(s) if cache is None else component.log_marginal(s, cache)


def _crp_log_prob_counts(counts, alpha):
    """``log CRP`` of a partition given its cluster sizes ``counts [..., K]`` (0 = empty)."""
    occ = counts > 0
    n = jnp.sum(counts, axis=-1)
    return (jnp.sum(occ, axis=-1) * jnp.log(alpha)
            + jnp.sum(jnp.where(occ, gammaln(jnp.where(occ, counts, 1.0)), 0.0), axis=-1)
            + gammaln(alpha) - gammaln(alpha + n))


def _crp_draw(key, n, K, alpha, batch=(), dtype=jnp.float32):
    """Sequential CRP draws over ``n`` items, ``batch`` independent ones: labels ``[*batch,
    n]`` in first-appearance order and cluster sizes ``[*batch, K]``."""
    def step(counts, k):
        occ = counts > 0
        new = jnp.arange(K) == jnp.sum(occ, axis=-1, keepdims=True)
        logits = jnp.where(occ, jnp.log(jnp.where(occ, counts, 1.0)),
                           jnp.where(new, jnp.log(alpha), -jnp.inf))
        z = jax.random.categorical(k, logits, axis=-1)
        return counts + jax.nn.one_hot(z, K, dtype=counts.dtype), z

    counts, z = jax.lax.scan(step, jnp.zeros(tuple(batch) + (K,), dtype), jax.random.split(key, n))
    return jnp.moveaxis(z, 0, -1).astype(jnp.int32), counts


# ==========================================================================================
# validation
# ==========================================================================================
def _check_int(v, name, minimum):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {v!r}")
    return int(v)


def _validate(X, component, alpha, name="X"):
    check_component(component)
    alpha = check_alpha(alpha)
    Xa = component.validate_data(X, name)
    _check_stats_type(component, Xa)
    return jnp.asarray(Xa, _float()), alpha


def _check_leaf_scores(component, Xa, who):
    """Raises a ``ValueError`` (as `jaxhc.bhc` does) when a single row's log marginal is not
    finite, e.g. for data at a scale the prior was not fitted on; the sampler's scores would
    be NaN."""
    leaf = component.leaf_stats(Xa)
    lm = np.asarray(component.log_marginal(leaf))
    if np.all(np.isfinite(lm)):
        return
    from .bhc.greedy import check_finite_scores

    try:
        check_finite_scores(component, leaf, Xa.shape[0], leaf_log_h1=lm)
    except ValueError as e:
        msg = str(e)
        raise ValueError(f"{who}{msg[3:]}" if msg.startswith("bhc:") else msg) from None


def _check_no_nan(log_joint, who, X):
    if np.any(np.isnan(np.asarray(log_joint))):
        raise ValueError(
            f"{who}: the log joint of the samples became NaN; X's entries reach "
            f"{float(np.nanmax(np.abs(np.asarray(X)))):.3g}: check that the component's prior fits the data's "
            f"scale (refit it with from_data(X), or standardise X's columns)")


def _check_labels(labels, n, name="labels"):
    from ..models.dpm import _check_labels as check
    if isinstance(labels, jax.core.Tracer):
        return labels.astype(jnp.int32)
    return jnp.asarray(check(labels, n, name), jnp.int32)


def _check_heat(heat):
    try:
        h = float(heat)
    except (TypeError, ValueError):
        raise TypeError(f"heat must be a scalar in (0, 1], got {heat!r}") from None
    if np.ndim(heat) != 0 or not (0.0 < h <= 1.0):
        raise ValueError(f"heat must be a scalar in (0, 1], got {heat!r}")
    return h


# ==========================================================================================
# chain driver (lax.scan, optional tqdm progress through a host callback)
# ==========================================================================================
_BARS: dict = {}


def _tick(token, n):
    bar = _BARS.get(int(token))
    if bar is not None:
        bar.update(int(n))


def _drive(step, extract, template, key, state, num_warmup, num_kept, thin, size, progress, token):
    """Runs ``num_warmup + num_kept * thin`` steps in one loop, writing ``extract(state,
    info)`` after every ``thin``-th step past the warm-up into buffers of static length
    ``size >= num_kept`` (``template``: one zero row). The counts are traced, so one
    compiled program serves every chain length; step ``t`` uses ``fold_in(key, t)``.
    Returns ``(last_state, buffers)`` (rows past ``num_kept`` stay zero)."""
    buf = _tmap(lambda a: jnp.zeros((size,) + jnp.shape(a), jnp.asarray(a).dtype), template)

    def body(t, carry):
        s, buf = carry
        s, info = step(jax.random.fold_in(key, t), s)
        if progress:
            jax.debug.callback(_tick, token, 1)
        r = t + 1 - num_warmup
        idx = jnp.where((r > 0) & (r % thin == 0), r // thin - 1, size)
        buf = _tmap(lambda b, x: b.at[idx].set(x, mode="drop"), buf, extract(s, info))
        return s, buf

    return jax.lax.fori_loop(0, num_warmup + num_kept * thin, body, (state, buf))


def _int():
    """The integer dtype ``jnp.sum`` of booleans gives (int64 under x64)."""
    return jax.dtypes.canonicalize_dtype(jnp.int64)


_KEEP_BYTES = 1 << 22  # kept-sample buffers of one compiled chunk: at most 4 MiB ...
_KEEP_MAX = 4096  # ... and 4096 rows


def _chunk_size(row_bytes):
    """Static buffer length of the compiled chunk: the largest power of two ``<= 4096``
    whose buffers fit in 4 MiB (at least 1). It depends on the problem's shape only, so
    single steps, short and long runs all reuse one compiled program."""
    c = 1
    while c < _KEEP_MAX and 2 * c * row_bytes <= _KEEP_BYTES:
        c *= 2
    return c


def _run_chunks(chunk, key, state, num_warmup, num_samples, thin, size):
    """Drives ``chunk(key, state, num_warmup, num_kept) -> (state, buffers)`` over
    ``ceil(num_samples / size)`` calls (the warm-up in the first) and concatenates the kept
    rows on the host."""
    outs, done, c = [], 0, 0
    while done < num_samples:
        n = min(size, num_samples - done)
        state, buf = chunk(jax.random.fold_in(key, c), state, num_warmup if c == 0 else 0, n)
        outs.append(_tmap(lambda a: np.asarray(a)[:n], buf))
        done, c = done + n, c + 1
    return state, _tmap(lambda *a: jnp.asarray(np.concatenate(a)), *outs)


_TOKENS = itertools.count(1)


def _with_bar(progress_bar, total, desc, fn):
    if not progress_bar:
        return fn(False, 0)
    from tqdm.auto import tqdm
    token = next(_TOKENS)
    _BARS[token] = tqdm(total=total, desc=desc)
    try:
        out = fn(True, token)
        jax.block_until_ready(out)
        return out
    finally:
        _BARS.pop(token).close()


def _check_run(num_samples, num_warmup, thin):
    return (_check_int(num_samples, "num_samples", 1), _check_int(num_warmup, "num_warmup", 0),
            _check_int(thin, "thin", 1))


# ==========================================================================================
# DPM collapsed Gibbs with split-merge
# ==========================================================================================
class DPMGibbsState(NamedTuple):
    """State of the DPM Gibbs sampler (cluster slots ``0..K-1``, ``K = N``).

    Attributes:
      labels: int32 ``[N]``, the cluster slot of every row.
      stats: component statistics of every slot (pytree, leading axis ``K``; empty-set
        statistics in an empty slot).
      counts: ``[K]`` rows per slot.
      log_marginals: ``[K]`` ``log p(X_k)`` of every slot (0 when empty).
      log_joint: ``log p(X, z) = log CRP(z | alpha) + sum_k log p(X_k)``.
    """

    labels: jax.Array
    stats: Any
    counts: jax.Array
    log_marginals: jax.Array
    log_joint: jax.Array


class DPMGibbsInfo(NamedTuple):
    """What one `dpm_gibbs_step` did: ``split_merge_accepted [num_split_merge]`` (bool),
    ``split_proposed [num_split_merge]`` (True for a split, False for a merge) and
    ``num_clusters`` after the step."""

    split_merge_accepted: jax.Array
    split_proposed: jax.Array
    num_clusters: jax.Array


class DPMGibbsSamples(NamedTuple):
    """Output of `dpm_gibbs`: ``labels [S, N]`` (cluster slots; only the partition matters),
    ``log_joint [S]``, ``num_clusters [S]``, ``split_merge_rate`` (fraction of split-merge
    proposals accepted in the kept steps) and the final `DPMGibbsState`."""

    labels: jax.Array
    log_joint: jax.Array
    num_clusters: jax.Array
    split_merge_rate: jax.Array
    state: DPMGibbsState


def _dpm_state(labels, leaves, component, alpha, cache):
    N = labels.shape[0]
    f = jax.tree_util.tree_leaves(leaves)[0].dtype
    stats = _segment_stats(leaves, labels, N)
    counts = jax.ops.segment_sum(jnp.ones(N, f), labels, num_segments=N)
    lm = jnp.where(counts > 0, _log_marginal(component, stats, cache), 0.0)
    stats = _select_rows(counts > 0, stats, _zeros_like(stats))
    return DPMGibbsState(labels, stats, counts, lm, _crp_log_prob_counts(counts, alpha) + jnp.sum(lm))


def _select_rows(mask, a, b):
    """Leaf-wise ``where(mask[k], a[k], b[k])`` over the leading axis."""
    return _tmap(lambda x, y: jnp.where(mask.reshape(mask.shape + (1,) * (x.ndim - mask.ndim)), x, y), a, b)


def _set_row(s, k, v):
    return _tmap(lambda a, b: a.at[k].set(b), s, v)


def _gibbs_sweep(key, state, leaves, component, alpha, cache):
    """One Algorithm-3 sweep over the rows in order."""
    N = state.labels.shape[0]
    log_alpha = jnp.log(alpha)
    ar = jnp.arange(N)

    def body(st, inp):
        i, k = inp
        leaf = _take(leaves, i)
        c = st.labels[i]
        counts = st.counts.at[c].add(-1.0)
        alive = counts[c] > 0
        s_c = _sub(_take(st.stats, c), leaf)
        s_c = tree_select(alive, s_c, _zeros_like(s_c))
        stats = _set_row(st.stats, c, s_c)
        lms = st.log_marginals.at[c].set(jnp.where(alive, _log_marginal(component, s_c, cache), 0.0))
        merged = component.merge(stats, leaf)
        lm_merged = _log_marginal(component, merged, cache)
        occ = counts > 0
        e = jnp.argmin(occ)
        prior = jnp.where(occ, jnp.log(jnp.where(occ, counts, 1.0)), jnp.where(ar == e, log_alpha, -jnp.inf))
        knew = jax.random.categorical(k, prior + lm_merged - lms).astype(jnp.int32)
        stats = _set_row(stats, knew, _take(merged, knew))
        lms = lms.at[knew].set(lm_merged[knew])
        return DPMGibbsState(st.labels.at[i].set(knew), stats, counts.at[knew].add(1.0), lms,
                             st.log_joint), None

    state, _ = jax.lax.scan(body, state, (ar, jax.random.split(key, N)))
    return state


def _masked_sum_stats(leaves, mask):
    return _segment_stats(leaves, jnp.where(mask, 0, 1), 2)


def _split_merge(key, state, leaves, component, alpha, cache, num_scans):
    """One Jain-Neal split-merge proposal (restricted Gibbs launch state)."""
    labels = state.labels
    N = labels.shape[0]
    ar = jnp.arange(N)
    f = state.counts.dtype
    k_i, k_j, k_launch, k_scans, k_acc = jax.random.split(key, 5)
    i = jax.random.randint(k_i, (), 0, N)
    j = jax.random.randint(k_j, (), 0, N - 1)
    j = j + (j >= i)
    ci, cj = labels[i], labels[j]
    same = ci == cj
    in_S = ((labels == ci) | (labels == cj)) & (ar != i) & (ar != j)
    orig_B = labels == cj  # the current split (merge proposals): side B is j's cluster
    side = jax.random.bernoulli(k_launch, 0.5, (N,))
    side = jnp.where(ar == i, False, jnp.where(ar == j, True, side))
    mA = (in_S & ~side) | (ar == i)
    mB = (in_S & side) | (ar == j)
    sA = _take(_masked_sum_stats(leaves, mA), 0)
    sB = _take(_masked_sum_stats(leaves, mB), 0)
    nA, nB = jnp.sum(mA).astype(f), jnp.sum(mB).astype(f)

    def restricted_scan(carry, inp):
        """One restricted Gibbs scan over ``S``; the last one (``final``) accumulates ``log
        q`` and, for a merge proposal, is forced to the current split."""
        key, final = inp
        forced = final & ~same

        def update(carry, r, k):
            side, sA, sB, nA, nB, logq = carry
            leaf = _take(leaves, r)
            onB = side[r]
            sAm = tree_select(onB, sA, _sub(sA, leaf))
            sBm = tree_select(onB, _sub(sB, leaf), sB)
            nAm, nBm = nA - (~onB), nB - onB
            mgA, mgB = component.merge(sAm, leaf), component.merge(sBm, leaf)
            lA = jnp.log(nAm) + _log_marginal(component, mgA, cache) - _log_marginal(component, sAm, cache)
            lB = jnp.log(nBm) + _log_marginal(component, mgB, cache) - _log_marginal(component, sBm, cache)
            log_pB = lB - jnp.logaddexp(lA, lB)
            log_pA = lA - jnp.logaddexp(lA, lB)
            newB = jnp.where(forced, orig_B[r], jnp.log(jax.random.uniform(k, dtype=f)) < log_pB)
            logq = logq + jnp.where(final, jnp.where(newB, log_pB, log_pA), 0.0)
            sA = tree_select(newB, sAm, mgA)
            sB = tree_select(newB, mgB, sBm)
            return (side.at[r].set(newB), sA, sB, nAm + (~newB), nBm + newB, logq)

        def body(carry, inp):
            r, k = inp
            return jax.lax.cond(in_S[r], update, lambda c, r, k: c, carry, r, k), None

        carry, _ = jax.lax.scan(body, carry, (ar, jax.random.split(key, N)))
        return carry, None

    carry = (side, sA, sB, nA, nB, jnp.zeros((), f))
    # num_scans may be traced: scan t uses fold_in(k_scans, t), the last one is final
    carry = jax.lax.fori_loop(
        0, num_scans + 1, lambda t, c: restricted_scan(c, (jax.random.fold_in(k_scans, t), t == num_scans))[0],
        carry)
    side, sA, sB, nA, nB, logq = carry

    log_a = jnp.log(alpha)
    lms = state.log_marginals
    # split: A -> a new slot e, B keeps cj
    lmA, lmB = _log_marginal(component, sA, cache), _log_marginal(component, sB, cache)
    split_ratio = (-logq + log_a + gammaln(nA) + gammaln(nB) - gammaln(nA + nB) + lmA + lmB - lms[ci])
    e = jnp.argmin(state.counts > 0).astype(jnp.int32)
    to_A = (in_S & ~side) | (ar == i)
    split_state = DPMGibbsState(
        jnp.where(to_A, e, labels).astype(jnp.int32),
        _set_row(_set_row(state.stats, e, sA), cj, sB),
        state.counts.at[e].set(nA).at[cj].set(nB),
        lms.at[e].set(lmA).at[cj].set(lmB),
        state.log_joint)
    # merge: everything in ci joins cj
    s_m = component.merge(_take(state.stats, ci), _take(state.stats, cj))
    lm_m = _log_marginal(component, s_m, cache)
    n_i, n_j = state.counts[ci], state.counts[cj]
    merge_ratio = logq - log_a - gammaln(n_i) - gammaln(n_j) + gammaln(n_i + n_j) + lm_m - lms[ci] - lms[cj]
    empty = _zeros_like(s_m)
    merge_state = DPMGibbsState(
        jnp.where(labels == ci, cj, labels).astype(jnp.int32),
        _set_row(_set_row(state.stats, ci, empty), cj, s_m),
        state.counts.at[ci].set(0.0).at[cj].set(n_i + n_j),
        lms.at[ci].set(0.0).at[cj].set(lm_m),
        state.log_joint)
    proposal = tree_select(same, split_state, merge_state)
    log_ratio = jnp.where(same, split_ratio, merge_ratio)
    accepted = mh_accept(k_acc, log_ratio)
    return tree_select(accepted, proposal, state), accepted, same


def _dpm_step(key, state, leaves, component, alpha, cache, num_split_merge, num_restricted_scans,
              gibbs_sweep=True):
    k_sweep, k_sm = jax.random.split(key)
    if isinstance(gibbs_sweep, (bool, np.bool_)):
        if gibbs_sweep:
            state = _gibbs_sweep(k_sweep, state, leaves, component, alpha, cache)
    else:  # a traced flag: one program with and without the sweep
        state = jax.lax.cond(gibbs_sweep, lambda s: _gibbs_sweep(k_sweep, s, leaves, component, alpha, cache),
                             lambda s: s, state)

    def sm(st, k):
        st, a, s = _split_merge(k, st, leaves, component, alpha, cache, num_restricted_scans)
        return st, (a, s)

    state, (acc, spl) = jax.lax.scan(sm, state, jax.random.split(k_sm, num_split_merge))
    log_joint = _crp_log_prob_counts(state.counts, alpha) + jnp.sum(state.log_marginals)
    state = state._replace(log_joint=log_joint)
    info = DPMGibbsInfo(acc, spl, jnp.sum(state.counts > 0))
    return state, info


def _dpm_setup(X, component):
    leaves = component.leaf_stats(X)
    return leaves, component.count_cache(X.shape[0])


def dpm_gibbs_init(key, X, component: Component, alpha, labels=None) -> DPMGibbsState:
    """Returns the initial `DPMGibbsState`.

    Args:
      key: PRNG key, used to draw the labels from ``CRP(alpha)`` when ``labels`` is None
        (may be None when ``labels`` is given).
      X: data ``[N, d]`` (NaN = missing, for the Beta families).
      component: any `jaxhc.components` family.
      alpha: CRP concentration (> 0).
      labels: optional initial labels ``[N]`` (any integers; only the partition matters).
    """
    Xa, alpha = _validate(X, component, alpha)
    N = Xa.shape[0]
    if labels is None:
        if key is None:
            raise ValueError("key is required when labels is None (labels are drawn from the CRP)")
        labels = _crp_draw_jit(key, N, N, jnp.asarray(alpha, Xa.dtype))[0]
    else:
        labels = _check_labels(labels, N)
    return _dpm_init_jit(labels, Xa, component, jnp.asarray(alpha, Xa.dtype))


_crp_draw_jit = jax.jit(_crp_draw, static_argnums=(1, 2, 4, 5))


@jax.jit
def _dpm_init_jit(labels, X, component, alpha):
    leaves, cache = _dpm_setup(X, component)
    return _dpm_state(labels, leaves, component, alpha, cache)


def _dpm_template(X, num_split_merge):
    """One zero row of the kept-sample buffers: labels, log joint, `DPMGibbsInfo`."""
    b = jnp.zeros(num_split_merge, bool)
    return (jnp.zeros(X.shape[0], jnp.int32), jnp.zeros((), X.dtype), DPMGibbsInfo(b, b, jnp.zeros((), _int())))


def _dpm_size(X, num_split_merge):
    return _chunk_size(4 * X.shape[0] + X.dtype.itemsize + 2 * num_split_merge + 4)


@functools.partial(jax.jit, static_argnames=("num_split_merge", "size", "progress"))
def _dpm_chunk(key, state, X, component, alpha, num_warmup, num_kept, thin, num_split_merge,
               num_restricted_scans, gibbs_sweep, size, progress, token):
    """`_drive` over DPM steps; counts, ``num_restricted_scans`` and ``gibbs_sweep`` are
    traced (one program per data shape, component and ``num_split_merge``)."""
    leaves, cache = _dpm_setup(X, component)

    def step(k, s):
        return _dpm_step(k, s, leaves, component, alpha, cache, num_split_merge, num_restricted_scans,
                         gibbs_sweep)

    def extract(s, info):
        return s.labels, s.log_joint, info

    return _drive(step, extract, _dpm_template(X, num_split_merge), key, state, num_warmup, num_kept, thin,
                  size, progress, token)


def dpm_gibbs_step(key, state: DPMGibbsState, X, component: Component, alpha, *, num_split_merge: int = 3,
                   num_restricted_scans: int = 5, gibbs_sweep: bool = True):
    """One step of DPM collapsed Gibbs with split-merge (see the module docstring).

    Args:
      key: PRNG key.
      state: current `DPMGibbsState`.
      X, component, alpha: as in `dpm_gibbs_init`.
      num_split_merge: split-merge proposals after the sweep (default 3).
      num_restricted_scans: intermediate restricted Gibbs scans building the launch state
        (Jain & Neal's ``t``, default 5).
      gibbs_sweep: False skips the Algorithm-3 sweep (split-merge moves only).

    Returns:
      ``(new_state, DPMGibbsInfo)``.
    """
    Xa, alpha = _validate(X, component, alpha)
    num_split_merge = _check_int(num_split_merge, "num_split_merge", 0)
    num_restricted_scans = _check_int(num_restricted_scans, "num_restricted_scans", 0)
    state, (_, _, info) = _dpm_chunk(key, state, Xa, component, jnp.asarray(alpha, Xa.dtype), 0, 1, 1,
                                     num_split_merge, num_restricted_scans, jnp.asarray(bool(gibbs_sweep)),
                                     _dpm_size(Xa, num_split_merge), False, 0)
    return state, _tmap(lambda a: a[0], info)


def dpm_gibbs(key, X, component: Component, alpha, num_samples: int, num_warmup: int = 0, thin: int = 1, *,
              init_labels=None, num_split_merge: int = 3, num_restricted_scans: int = 5,
              gibbs_sweep: bool = True, progress_bar: bool = True) -> DPMGibbsSamples:
    """Runs DPM collapsed Gibbs with split-merge moves and returns the kept samples.

    The paper's baseline (Sec. 8.2) is ``num_warmup=50, num_samples=10, thin=5``.

    Args:
      key: PRNG key.
      X: data ``[N, d]`` (NaN = missing for the Beta families).
      component, alpha: the DPM (any `jaxhc.components` family; concentration > 0).
      num_samples: samples kept; num_warmup: steps discarded first; thin: steps per sample.
      init_labels: initial labels ``[N]`` (default: a draw from ``CRP(alpha)``).
      num_split_merge, num_restricted_scans, gibbs_sweep: as in `dpm_gibbs_step`.
      progress_bar: show a tqdm bar (one tick per step).

    Returns:
      `DPMGibbsSamples` (labels ``[num_samples, N]`` of the kept steps).
    """
    Xa, alpha = _validate(X, component, alpha)
    num_samples, num_warmup, thin = _check_run(num_samples, num_warmup, thin)
    num_split_merge = _check_int(num_split_merge, "num_split_merge", 0)
    num_restricted_scans = _check_int(num_restricted_scans, "num_restricted_scans", 0)
    check_key(key, "key")
    _check_leaf_scores(component, Xa, "dpm_gibbs")
    k_init, k_run = jax.random.split(key)
    state = dpm_gibbs_init(k_init, Xa, component, alpha, init_labels)
    a, sweep = jnp.asarray(alpha, Xa.dtype), jnp.asarray(bool(gibbs_sweep))
    size = _dpm_size(Xa, num_split_merge)

    def run(prog, token):
        def chunk(k, st, warm, n):
            return _dpm_chunk(k, st, Xa, component, a, warm, n, thin, num_split_merge, num_restricted_scans,
                              sweep, size, prog, token)
        return _run_chunks(chunk, k_run, state, num_warmup, num_samples, thin, size)

    state, (labels, lj, info) = _with_bar(progress_bar, num_warmup + num_samples * thin, "DPM Gibbs", run)
    _check_no_nan(lj, "dpm_gibbs", Xa)
    rate = jnp.sum(info.split_merge_accepted) / max(num_samples * num_split_merge, 1)
    return DPMGibbsSamples(labels, lj, info.num_clusters, rate, state)


# ==========================================================================================
# CDPM MCMC (column-wise statistics, Algorithm-8 view moves, Metropolis coupling)
# ==========================================================================================
class CDPMState(NamedTuple):
    """State of the CDPM sampler: every field has a leading chain axis ``[2]``, chain 0 the
    cold chain (target ``p(u, Z | X)``) and chain 1 the heated one (``p(u, Z | X)^heat``).
    Capacities: ``V = J`` view slots, ``K = N`` row-cluster slots per view.

    Attributes:
      column_views: int32 ``[2, J]``, the view slot ``u_j`` of every column.
      row_labels: int32 ``[2, N, V]``, ``Z[i, v]`` the cluster slot of row ``i`` in view
        slot ``v`` (slots no column uses hold a partition that is ignored).
      stats: per-column statistics, leaves ``[2, K, J, ...]``: entry ``[k, j]`` is the
        statistics of column ``j`` over the rows in cluster ``k`` of view ``u_j``.
      row_counts: ``[2, V, K]`` rows per cluster of every view slot.
      view_sizes: ``[2, V]`` columns per view slot.
      log_marginals: ``[2, K, J]`` ``log G_j(stats[k, j])`` (0 for empty clusters).
      log_joint: ``[2]`` the untempered ``log p(X, u, Z)`` (Eq. 1, 2, 5) of each chain.
    """

    column_views: jax.Array
    row_labels: jax.Array
    stats: Any
    row_counts: jax.Array
    view_sizes: jax.Array
    log_marginals: jax.Array
    log_joint: jax.Array


class CDPMInfo(NamedTuple):
    """What one `cdpm_mcmc_step` did: ``swap_accepted`` (bool), ``swap_log_ratio``, and the
    cold chain's ``num_views``."""

    swap_accepted: jax.Array
    swap_log_ratio: jax.Array
    num_views: jax.Array


class CDPMSamples(NamedTuple):
    """Output of `cdpm_mcmc` (cold chain): ``column_views [S, J]``, ``row_labels [S, N, V]``,
    ``log_joint [S]``, ``num_views [S]``, ``swap_rate`` and the final `CDPMState`."""

    column_views: jax.Array
    row_labels: jax.Array
    log_joint: jax.Array
    num_views: jax.Array
    swap_rate: jax.Array
    state: CDPMState


class _Columns(NamedTuple):
    """Per-column model: stacked one-column components (leading axis ``J``), their count
    caches (or None) and the statistics of every cell (leaves ``[N, J, ...]``)."""

    comps: Any
    cache: Any
    cells: Any


def _column_components(component, J):
    """The component restricted to each column, stacked (leading axis ``J``)."""
    from ..models.cdpm import restrict_columns
    if not isinstance(component, (BetaBernoulli, BetaBinomial, NormalKnownCov)):
        raise TypeError(
            f"CDPM MCMC needs a column-separable component (BetaBernoulli, BetaBinomial, or "
            f"NormalKnownCov with diagonal covariances); got {type(component).__name__}")
    if isinstance(component, NormalKnownCov):
        for nm in ("prior_cov", "noise_cov"):
            m = np.asarray(getattr(component, nm))
            if np.any(m - np.diag(np.diag(m))):
                raise ValueError(f"component.{nm} must be diagonal for CDPM MCMC (columns are "
                                 f"conditionally independent given their cluster)")
    if isinstance(component, BetaBinomial) and not isinstance(component.trials, int):
        if len(set(component.trials)) != 1:
            raise ValueError("CDPM MCMC needs the same number of trials in every column of a BetaBinomial")
        component = BetaBinomial(component.a, component.b, component.trials[0])
    if isinstance(component, (BetaBernoulli, BetaBinomial)):
        a = jnp.broadcast_to(component.a, (J,))
        b = jnp.broadcast_to(component.b, (J,))
        if isinstance(component, BetaBernoulli):
            return jax.vmap(BetaBernoulli)(a, b)
        return jax.vmap(lambda a, b: BetaBinomial(a, b, component.trials))(a, b)
    cols = [restrict_columns(component, [j]) for j in range(J)]
    return _tmap(lambda *xs: jnp.stack(xs), *cols)


def _columns(X, comps):
    N = X.shape[0]
    cells = jax.vmap(lambda c, x: c.leaf_stats(x[:, None]), in_axes=(0, 1), out_axes=1)(comps, X)
    has_cache = jax.eval_shape(lambda c: c.count_cache(N), comps) is not None
    cache = jax.vmap(lambda c: c.count_cache(N))(comps) if has_cache else None
    return _Columns(comps, cache, cells)


def _col_lm(cols, s, axis):
    """``log G_j`` of per-column statistics whose column axis is ``axis`` (leaves ``[...,
    J, ...]``); returns ``[..., J]``."""
    def one(c, cache, sj):
        return _log_marginal(c, sj, cache)

    return jax.vmap(one, in_axes=(0, 0 if cols.cache is not None else None, axis), out_axes=axis)(
        cols.comps, cols.cache, s)


def _col_merge(cols, s, t, axis):
    """Merge per-column statistics ``s`` (column axis ``axis``) with ``t [J, ...]``."""
    return jax.vmap(lambda c, a, b: c.merge(a, b), in_axes=(0, axis, 0), out_axes=axis)(cols.comps, s, t)


def _col_lm_j(cols, j, s):
    """``log G_j`` of statistics of column ``j`` (any batch shape)."""
    c = _take(cols.comps, j)
    cache = None if cols.cache is None else _take(cols.cache, j)
    return _log_marginal(c, s, cache)


def _cdpm_chain_state(u, Z, cols, alpha):
    """`CDPMState` fields of one chain from its labels."""
    N, J = _stat_shape(cols.cells)
    V = J
    f = cols.cells.n.dtype
    ar_J = jnp.arange(J)
    zc = Z[:, u]  # [N, J] cluster of each cell in its column's view
    ids = (zc * J + ar_J[None, :]).reshape(-1)
    flat = _tmap(lambda a: a.reshape((N * J,) + a.shape[2:]), cols.cells)
    stats = _segment_stats(flat, ids, N * J)
    stats = _tmap(lambda a: a.reshape((N, J) + a.shape[1:]), stats)
    counts = jax.vmap(lambda z: jax.ops.segment_sum(jnp.ones(N, f), z, num_segments=N), in_axes=1)(Z)
    sizes = jax.ops.segment_sum(jnp.ones(J, f), u, num_segments=V)
    occ = counts[u, :].T > 0  # [K, J]
    stats = _select_rows(occ, stats, _zeros_like(stats))
    lms = jnp.where(occ, _col_lm(cols, stats, 1), 0.0)
    return stats, counts, sizes, lms, _cdpm_log_joint(u, counts, sizes, lms, alpha)


def _stat_shape(cells):
    n = cells.n
    return n.shape[0], n.shape[1]


def _cdpm_log_joint(u, counts, sizes, lms, alpha):
    view_occ = sizes > 0
    return (_crp_log_prob_counts(sizes, alpha)
            + jnp.sum(jnp.where(view_occ, _crp_log_prob_counts(counts, alpha), 0.0)) + jnp.sum(lms))


def _row_sweep(key, st, cols, alpha, beta):
    """Collapsed Gibbs of every row's cluster in every view (conditionals ^ beta)."""
    u, Z, stats, counts, sizes, lms, lj = st
    N, V = Z.shape
    J = u.shape[0]
    K = N
    ar_J, ar_V, ar_K = jnp.arange(J), jnp.arange(V), jnp.arange(K)
    log_alpha = jnp.log(alpha)
    BK = min(_BLOCK, K)

    def body(carry, inp):
        Z, stats, counts, lms = carry
        i, k = inp
        cell = _take(cols.cells, i)  # [J, ...]
        zi = Z[i]
        c_col = zi[u]
        counts = counts.at[ar_V, zi].add(-1.0)
        alive = counts[u, c_col] > 0
        s_m = _sub(_take(stats, (c_col, ar_J)), cell)
        s_m = _select_rows(alive, s_m, _zeros_like(s_m))
        stats = _tmap(lambda a, b: a.at[c_col, ar_J].set(b), stats, s_m)
        lms = lms.at[c_col, ar_J].set(jnp.where(alive, _col_lm(cols, s_m, 0), 0.0))
        occ = counts > 0
        e = jnp.argmin(occ, axis=1)
        # candidates are the occupied slots and each view's first empty one, all below
        # k_hi (new clusters take the lowest free slot): only blocks of BK slots below k_hi
        # are evaluated (`fori_loop` with a dynamic trip count)
        k_hi = jnp.maximum(jnp.max(jnp.where(occ, ar_K[None, :], 0)), jnp.max(e)) + 1

        def block(b, vd):
            start = jnp.minimum(b * BK, K - BK)
            sb = _tmap(lambda a: jax.lax.dynamic_slice_in_dim(a, start, BK, 0), stats)
            lmm = _col_lm(cols, _col_merge(cols, sb, cell, 1), 1)  # [BK, J]
            d = lmm - jax.lax.dynamic_slice_in_dim(lms, start, BK, 0)
            return jax.lax.dynamic_update_slice_in_dim(vd, jax.ops.segment_sum(d.T, u, num_segments=V), start, 1)

        view_delta = jax.lax.fori_loop(0, (k_hi + BK - 1) // BK, block, jnp.zeros((V, K), lms.dtype))
        prior = jnp.where(occ, jnp.log(jnp.where(occ, counts, 1.0)),
                          jnp.where(ar_K[None, :] == e[:, None], log_alpha, -jnp.inf))
        znew = jax.random.categorical(k, beta * (prior + view_delta), axis=-1).astype(jnp.int32)
        c_new = znew[u]
        s_new = _col_merge(cols, _take(stats, (c_new, ar_J)), cell, 0)
        stats = _tmap(lambda a, b: a.at[c_new, ar_J].set(b), stats, s_new)
        lms = lms.at[c_new, ar_J].set(_col_lm(cols, s_new, 0))
        counts = counts.at[ar_V, znew].add(1.0)
        return (Z.at[i].set(znew), stats, counts, lms), None

    (Z, stats, counts, lms), _ = jax.lax.scan(body, (Z, stats, counts, lms),
                                              (jnp.arange(N), jax.random.split(key, N)))
    return (u, Z, stats, counts, sizes, lms, lj)


def _column_sweep(key, st, cols, alpha, beta, num_aux):
    """Gibbs of every column's view with ``num_aux`` auxiliary views (Algorithm 8)."""
    u, Z, stats, counts, sizes, lms, lj = st
    N, V = Z.shape
    J = u.shape[0]
    K = N
    f = counts.dtype
    m = num_aux
    log_alpha = jnp.log(alpha)
    BV = min(_BLOCK, V)
    k_aux, k_cols = jax.random.split(key)
    aux_Z, aux_counts = _crp_draw(k_aux, N, K, alpha, (J, m), f)  # [J, m, N], [J, m, K]

    def body(carry, inp):
        u, Z, stats, counts, sizes, lms = carry
        j, k, aZ, ac = inp
        v_old = u[j]
        sizes = sizes.at[v_old].add(-1.0)
        single = sizes[v_old] == 0
        aZ = aZ.at[0].set(jnp.where(single, Z[:, v_old], aZ[0]))
        ac = ac.at[0].set(jnp.where(single, counts[v_old], ac[0]))
        cell = _take(cols.cells, (slice(None), j))  # [N, ...]
        # view likelihoods sum_k G_j(X[Z_v = k, j]), only for blocks of BV view slots below
        # the highest occupied one (new views take the lowest free slot)
        v_hi = jnp.max(jnp.where(sizes > 0, jnp.arange(V), 0)) + 1
        rep = _tmap(lambda a: jnp.repeat(a, BV, axis=0), cell)

        def block(b, lv):
            start = jnp.minimum(b * BV, V - BV)
            Zb = jax.lax.dynamic_slice_in_dim(Z, start, BV, 1)
            S = _segment_stats(rep, (Zb + jnp.arange(BV)[None, :] * K).reshape(-1), BV * K)
            S = _tmap(lambda a: a.reshape((BV, K) + a.shape[1:]), S)
            return jax.lax.dynamic_update_slice_in_dim(lv, jnp.sum(_col_lm_j(cols, j, S), -1), start, 0)

        lm_v = jax.lax.fori_loop(0, (v_hi + BV - 1) // BV, block, jnp.zeros(V, counts.dtype))
        rep_a = _tmap(lambda a: jnp.tile(a, (m,) + (1,) * (a.ndim - 1)), cell)
        ids_a = (aZ + jnp.arange(m)[:, None] * K).reshape(-1)
        S_a = _tmap(lambda a: a.reshape((m, K) + a.shape[1:]), _segment_stats(rep_a, ids_a, m * K))
        lm_a = _col_lm_j(cols, j, S_a)  # [m, K]
        lv = jnp.where(sizes > 0, beta * (jnp.log(jnp.where(sizes > 0, sizes, 1.0)) + lm_v), -jnp.inf)
        la = (beta * log_alpha - jnp.log(m) + (beta - 1.0) * _crp_log_prob_counts(ac, alpha)
              + beta * jnp.sum(lm_a, -1))
        choice = jax.random.categorical(k, jnp.concatenate([lv, la]))
        is_aux = choice >= V
        a_idx = jnp.clip(choice - V, 0, m - 1)
        e = jnp.argmin(sizes > 0)
        v_new = jnp.where(is_aux, e, choice).astype(jnp.int32)
        Z = jnp.where(is_aux, Z.at[:, e].set(aZ[a_idx]), Z)
        counts = jnp.where(is_aux, counts.at[e].set(ac[a_idx]), counts)
        s_new = _segment_stats(cell, Z[:, v_new], K)  # column j under its new view's partition
        lm_new = _col_lm_j(cols, j, s_new)
        occ_new = counts[v_new] > 0
        stats = _tmap(lambda a, b: a.at[:, j].set(b), stats, s_new)
        lms = lms.at[:, j].set(jnp.where(occ_new, lm_new, 0.0))
        return (u.at[j].set(v_new), Z, stats, counts, sizes.at[v_new].add(1.0), lms), None

    (u, Z, stats, counts, sizes, lms), _ = jax.lax.scan(
        body, (u, Z, stats, counts, sizes, lms), (jnp.arange(J), jax.random.split(k_cols, J), aux_Z, aux_counts))
    return (u, Z, stats, counts, sizes, lms, lj)


def _cdpm_chain_step(key, st, cols, alpha, beta, num_aux):
    k_col, k_row = jax.random.split(key)
    st = _column_sweep(k_col, st, cols, alpha, beta, num_aux)
    st = _row_sweep(k_row, st, cols, alpha, beta)
    u, Z, stats, counts, sizes, lms, _ = st
    return (u, Z, stats, counts, sizes, lms, _cdpm_log_joint(u, counts, sizes, lms, alpha))


def _cdpm_step(key, state, cols, alpha, heat, num_aux):
    k_chains, k_swap = jax.random.split(key)
    betas = jnp.stack([jnp.ones((), heat.dtype), heat])
    st = jax.vmap(_cdpm_chain_step, in_axes=(0, 0, None, None, 0, None))(
        jax.random.split(k_chains, 2), tuple(state), cols, alpha, betas, num_aux)
    state = CDPMState(*st)
    log_ratio = (1.0 - heat) * (state.log_joint[1] - state.log_joint[0])
    acc = mh_accept(k_swap, log_ratio)
    swapped = _tmap(lambda a: a[::-1], state)
    state = tree_select(acc, swapped, state)
    return state, CDPMInfo(acc, log_ratio, jnp.sum(state.view_sizes[0] > 0))


def _cdpm_validate(X, component, alpha, heat=None, num_aux=1):
    Xa, alpha = _validate(X, component, alpha)
    comps = _column_components(component, Xa.shape[1])
    if heat is not None:
        heat = _check_heat(heat)
    num_aux = _check_int(num_aux, "num_aux", 1)
    return Xa, alpha, comps, heat, num_aux


def cdpm_mcmc_init(key, X, component: Component, alpha, column_views=None, row_labels=None) -> CDPMState:
    """Returns the initial `CDPMState` (both chains start from the same labels).

    Args:
      key: PRNG key; labels not given are drawn from the prior (``u ~ CRP(alpha)``, each
        view's ``Z[:, v] ~ CRP(alpha)``). May be None when both labels are given.
      X: data ``[N, J]`` (NaN = missing for the Beta families).
      component: `BetaBernoulli`, `BetaBinomial` (one number of trials), or `NormalKnownCov`
        with diagonal covariances.
      alpha: concentration of every CRP (> 0).
      column_views: optional ``[J]`` view labels (any integers).
      row_labels: optional ``[N, V']`` row labels; column ``v`` is used for view label ``v``
        (after relabelling ``column_views`` to ``0..`` in order of first appearance, with
        ``V' >= number of views``), or ``[N]`` for the same partition in every view.
    """
    Xa, alpha, comps, _, _ = _cdpm_validate(X, component, alpha)
    N, J = Xa.shape
    f = Xa.dtype
    if (column_views is None or row_labels is None) and key is None:
        raise ValueError("key is required unless column_views and row_labels are both given")
    k_u, k_z = jax.random.split(key) if key is not None else (None, None)
    if column_views is None:
        u = _crp_draw_jit(k_u, J, J, jnp.asarray(alpha, f), (), f)[0]
        u_orig = None
    else:
        u = _check_labels(column_views, J, "column_views")
        u_orig = None if isinstance(column_views, jax.core.Tracer) else np.asarray(column_views)
    if row_labels is None:
        Z = _crp_draw_jit(k_z, N, N, jnp.asarray(alpha, f), (J,), f)[0].T
    elif isinstance(row_labels, jax.core.Tracer):
        Z = row_labels.astype(jnp.int32)
        Z = jnp.broadcast_to(Z[:, None], (N, J)) if Z.ndim == 1 else Z
    else:
        arr = np.asarray(row_labels)
        if arr.ndim not in (1, 2) or arr.shape[0] != N:
            raise ValueError(f"row_labels must have shape [{N}] or [{N}, V], got {arr.shape}")
        if arr.ndim == 1:
            Zc = [_check_labels(arr, N, "row_labels")] * J
        else:
            # view slot w (first-appearance order of column_views) takes the column of its
            # original label
            uo = np.asarray(u) if u_orig is None else u_orig.astype(np.int64)
            _, first = np.unique(uo, return_index=True)
            originals = uo[np.sort(first)]
            if originals.min() < 0 or originals.max() >= arr.shape[1]:
                raise ValueError(f"row_labels has {arr.shape[1]} columns but column_views uses view labels "
                                 f"{sorted(set(originals.tolist()))}")
            Zc = [_check_labels(arr[:, v], N, f"row_labels[:, {v}]") for v in originals]
            Zc += [jnp.zeros(N, jnp.int32)] * (J - len(Zc))
        Z = jnp.stack(Zc, axis=1)
    return _cdpm_init_jit(u, Z, Xa, comps, jnp.asarray(alpha, f))


@jax.jit
def _cdpm_init_jit(u, Z, X, comps, alpha):
    one = (u,) + (Z,) + _cdpm_chain_state(u, Z, _columns(X, comps), alpha)
    return CDPMState(*_tmap(lambda x: jnp.stack([x, x]), one))


def _cdpm_template(X):
    """One zero row of the kept-sample buffers: the cold chain's labels and log joint, and
    `CDPMInfo`."""
    N, J = X.shape
    z = jnp.zeros((), X.dtype)
    return (jnp.zeros(J, jnp.int32), jnp.zeros((N, J), jnp.int32), z,
            CDPMInfo(jnp.zeros((), bool), z, jnp.zeros((), _int())))


def _cdpm_size(X):
    N, J = X.shape
    return _chunk_size(4 * J * (N + 1) + 2 * X.dtype.itemsize + 5)


@functools.partial(jax.jit, static_argnames=("num_aux", "size", "progress"))
def _cdpm_chunk(key, state, X, comps, alpha, heat, num_warmup, num_kept, thin, num_aux, size, progress, token):
    """`_drive` over CDPM steps; counts and ``heat`` are traced (one program per data shape,
    component family and ``num_aux``)."""
    cols = _columns(X, comps)

    def step(k, s):
        return _cdpm_step(k, s, cols, alpha, heat, num_aux)

    def extract(s, info):
        return (s.column_views[0], s.row_labels[0], s.log_joint[0], info)

    return _drive(step, extract, _cdpm_template(X), key, state, num_warmup, num_kept, thin, size, progress, token)


def cdpm_mcmc_step(key, state: CDPMState, X, component: Component, alpha, *, heat=0.8, num_aux: int = 1):
    """One step of CDPM MCMC: column-view Gibbs (Algorithm 8), row Gibbs in every view, both
    for the cold and the heated chain, then a swap proposal (see the module docstring).

    Args:
      key: PRNG key.
      state: current `CDPMState`.
      X, component, alpha: as in `cdpm_mcmc_init`.
      heat: power of the heated chain's posterior, in (0, 1] (paper: 0.8).
      num_aux: auxiliary views ``m`` per column update (default 1).

    Returns:
      ``(new_state, CDPMInfo)``.
    """
    Xa, alpha, comps, heat, num_aux = _cdpm_validate(X, component, alpha, heat, num_aux)
    f = Xa.dtype
    state, (_, _, _, info) = _cdpm_chunk(key, state, Xa, comps, jnp.asarray(alpha, f), jnp.asarray(heat, f), 0, 1,
                                         1, num_aux, _cdpm_size(Xa), False, 0)
    return state, _tmap(lambda a: a[0], info)


def cdpm_mcmc(key, X, component: Component, alpha, num_samples: int, num_warmup: int = 0, thin: int = 1, *,
              heat=0.8, num_aux: int = 1, init_column_views=None, init_row_labels=None,
              progress_bar: bool = True) -> CDPMSamples:
    """Runs Metropolis-coupled CDPM MCMC and returns the cold chain's kept samples.

    The paper's baseline (Sec. 8.2) is ``num_warmup=50, num_samples=10, thin=5, heat=0.8``.

    Args:
      key: PRNG key.
      X: data ``[N, J]`` (NaN = missing for the Beta families).
      component, alpha: as in `cdpm_mcmc_init`.
      num_samples: samples kept; num_warmup: steps discarded first; thin: steps per sample.
      heat, num_aux: as in `cdpm_mcmc_step`.
      init_column_views, init_row_labels: initial labels (default: prior draws).
      progress_bar: show a tqdm bar (one tick per step).

    Returns:
      `CDPMSamples`: ``column_views [S, J]``, ``row_labels [S, N, J]`` (view slots) ...
    """
    Xa, alpha, comps, heat, num_aux = _cdpm_validate(X, component, alpha, heat, num_aux)
    num_samples, num_warmup, thin = _check_run(num_samples, num_warmup, thin)
    check_key(key, "key")
    _check_leaf_scores(component, Xa, "cdpm_mcmc")
    f = Xa.dtype
    k_init, k_run = jax.random.split(key)
    state = cdpm_mcmc_init(k_init, Xa, component, alpha, init_column_views, init_row_labels)
    a, h = jnp.asarray(alpha, f), jnp.asarray(heat, f)
    size = _cdpm_size(Xa)

    def run(prog, token):
        def chunk(k, st, warm, n):
            return _cdpm_chunk(k, st, Xa, comps, a, h, warm, n, thin, num_aux, size, prog, token)
        return _run_chunks(chunk, k_run, state, num_warmup, num_samples, thin, size)

    state, (u, Z, lj, info) = _with_bar(progress_bar, num_warmup + num_samples * thin, "CDPM MCMC", run)
    _check_no_nan(lj, "cdpm_mcmc", Xa)
    return CDPMSamples(u, Z, lj, info.num_views, jnp.mean(info.swap_accepted), state)


# ==========================================================================================
# held-out cells
# ==========================================================================================
def _check_cells(rows, cols, values, N, J):
    out = []
    for name, v, hi in (("rows", rows, N), ("cols", cols, J)):
        a = np.asarray(v)
        if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"{name} must be a 1-D integer array, got shape {a.shape} dtype {a.dtype}")
        if a.size and (a.min() < 0 or a.max() >= hi):
            raise ValueError(f"{name} must lie in [0, {hi}), got range [{a.min()}, {a.max()}]")
        out.append(jnp.asarray(a, jnp.int32))
    vals = np.asarray(values, dtype=float)
    if vals.shape != out[0].shape or out[1].shape != out[0].shape:
        raise ValueError(f"rows, cols and values must have the same shape [M], got {out[0].shape}, "
                         f"{out[1].shape}, {vals.shape}")
    if not np.all(np.isfinite(vals)):
        raise ValueError("values must be finite")
    return out[0], out[1], jnp.asarray(vals, _float())


@jax.jit
def _predict_cells(X, comps, U, Zs, rows, cols, values):
    C = _columns(X, comps)

    def one(u, Z):
        v = u[cols]  # [M]
        c = Z[rows, v]  # [M]
        member = Z[:, v].T == c[:, None]  # [M, N]
        cell_j = _tmap(lambda a: a[:, cols], C.cells)  # [N, M, ...]
        s = _tmap(lambda a: jnp.einsum("mn,nm...->m...", member.astype(a.dtype), a), _to_additive(cell_j))
        s = _from_additive(s, cell_j)
        comp_m = _take(C.comps, cols)
        return jax.vmap(lambda cm, sm, x: cm.log_predictive(x[None], sm))(comp_m, s, values)

    lp = jax.lax.map(lambda uz: one(*uz), (U, Zs))  # [S, M]
    return logsumexp(lp, axis=0) - jnp.log(lp.shape[0])


def cdpm_predict_cells(X, component: Component, column_view_samples, row_label_samples, rows, cols, values):
    """Log posterior predictive of held-out cells under CDPM samples.

    ``log (1/S) sum_s p(x_ij = value | X[rows in the cluster of i in view u_j, j])``: for
    sample ``s`` the cell ``(i, j)`` uses the view ``u_j`` of its column and the row's
    cluster ``Z[i, u_j]`` in that view, with the component restricted to column ``j``
    (observed cells only; NaN cells of ``X`` are skipped).

    Args:
      X: training data ``[N, J]``, held-out cells NaN.
      component: as in `cdpm_mcmc_init`.
      column_view_samples: ``[S, J]``; row_label_samples: ``[S, N, V]`` (as in `CDPMSamples`).
      rows, cols: integer ``[M]`` cell coordinates; values: ``[M]`` the values to score.

    Returns:
      ``[M]`` log predictive densities / probabilities.
    """
    Xa, _ = _validate(X, component, 1.0)
    N, J = Xa.shape
    comps = _column_components(component, J)
    U = jnp.asarray(column_view_samples, jnp.int32)
    Zs = jnp.asarray(row_label_samples, jnp.int32)
    if U.ndim != 2 or U.shape[1] != J:
        raise ValueError(f"column_view_samples must have shape [S, {J}], got {U.shape}")
    if Zs.ndim != 3 or Zs.shape[0] != U.shape[0] or Zs.shape[1] != N or Zs.shape[2] < int(jnp.max(U)) + 1:
        raise ValueError(f"row_label_samples must have shape [{U.shape[0]}, {N}, V], got {Zs.shape}")
    r, c, v = _check_cells(rows, cols, values, N, J)
    return _predict_cells(Xa, comps, U, Zs, r, c, v)


def dpm_predict_cells(X, component: Component, label_samples, rows, cols, values):
    """Log posterior predictive of held-out cells under DPM samples.

    ``log (1/S) sum_s p(x_ij = value | X[rows in the cluster of i in sample s, j])`` (the
    component restricted to column ``j``; NaN cells skipped). Needs a column-separable
    component (`BetaBernoulli`, `BetaBinomial`, diagonal `NormalKnownCov`).

    Args:
      X: training data ``[N, d]``, held-out cells NaN.
      component: the DPM's component.
      label_samples: ``[S, N]`` row labels (as in `DPMGibbsSamples`).
      rows, cols: integer ``[M]`` cell coordinates; values: ``[M]`` the values to score.

    Returns:
      ``[M]`` log predictive densities / probabilities.
    """
    L = jnp.asarray(label_samples, jnp.int32)
    if L.ndim != 2:
        raise ValueError(f"label_samples must have shape [S, N], got {L.shape}")
    d = np.asarray(X).shape[-1] if np.ndim(X) == 2 else 0
    return cdpm_predict_cells(X, component, jnp.zeros((L.shape[0], d), jnp.int32), L[:, :, None],
                              rows, cols, values)


# ==========================================================================================
# NumPyro MCMCKernel adapters
# ==========================================================================================
class _KernelState(NamedTuple):
    sample: Any
    state: Any
    rng_key: jax.Array


class DPMGibbs(MCMCKernel):
    """DPM collapsed Gibbs with split-merge as a NumPyro kernel: ``MCMC(DPMGibbs(X, component,
    alpha), num_warmup=..., num_samples=...).run(key)`` collects the row labels ``[N]`` of
    every kept step (``get_samples()`` returns ``[num_samples, N]``).

    Args:
      X, component, alpha: the DPM (see `dpm_gibbs_init`).
      num_split_merge, num_restricted_scans: see `dpm_gibbs_step`.
      init_labels: initial labels (default: a draw from the CRP; ``init_params`` of
        ``MCMC.run`` overrides it).
    """

    sample_field = "sample"

    def __init__(self, X, component, alpha=1.0, *, num_split_merge=3, num_restricted_scans=5, init_labels=None):
        self.X, self.alpha = _validate(X, component, alpha)
        self.component = component
        self.num_split_merge = _check_int(num_split_merge, "num_split_merge", 0)
        self.num_restricted_scans = _check_int(num_restricted_scans, "num_restricted_scans", 0)
        self.init_labels = init_labels
        self._setup = _dpm_setup(self.X, component)

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        k_init, k = jax.random.split(rng_key)
        labels = init_params if init_params is not None else self.init_labels
        st = dpm_gibbs_init(k_init, self.X, self.component, self.alpha, labels)
        return _KernelState(st.labels, st, k)

    def sample(self, state, model_args, model_kwargs):
        k, k_next = jax.random.split(state.rng_key)
        leaves, cache = self._setup
        st, _ = _dpm_step(k, state.state, leaves, self.component, jnp.asarray(self.alpha, self.X.dtype), cache,
                          self.num_split_merge, self.num_restricted_scans)
        return _KernelState(st.labels, st, k_next)


class CDPMGibbs(MCMCKernel):
    """Metropolis-coupled CDPM MCMC as a NumPyro kernel; each kept sample is the cold
    chain's ``{"column_views": [J], "row_labels": [N, J]}``.

    Args:
      X, component, alpha: the CDPM (see `cdpm_mcmc_init`).
      heat, num_aux: see `cdpm_mcmc_step`.
    """

    sample_field = "sample"

    def __init__(self, X, component, alpha=1.0, *, heat=0.8, num_aux=1):
        self.X, self.alpha, self.comps, self.heat, self.num_aux = _cdpm_validate(X, component, alpha, heat,
                                                                                 num_aux)
        self.component = component
        self._cols = _columns(self.X, self.comps)

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        k_init, k = jax.random.split(rng_key)
        u, Z = (None, None) if init_params is None else (init_params["column_views"], init_params["row_labels"])
        st = cdpm_mcmc_init(k_init, self.X, self.component, self.alpha, u, Z)
        return _KernelState({"column_views": st.column_views[0], "row_labels": st.row_labels[0]}, st, k)

    def sample(self, state, model_args, model_kwargs):
        k, k_next = jax.random.split(state.rng_key)
        f = self.X.dtype
        st, _ = _cdpm_step(k, state.state, self._cols, jnp.asarray(self.alpha, f),
                           jnp.asarray(self.heat, f), self.num_aux)
        return _KernelState({"column_views": st.column_views[0], "row_labels": st.row_labels[0]}, st, k_next)
