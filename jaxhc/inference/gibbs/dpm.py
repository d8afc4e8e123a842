"""DPM collapsed Gibbs with split-merge moves (see `jaxhc.inference.gibbs`)."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln
from numpyro.infer.mcmc import MCMCKernel

from ..._internal.chain import chunk_size, collect_chunk, run_chunks
from ..._internal.validation import check_key
from ...components import Component
from ..mh import mh_accept, tree_select
from .common import (
    KernelState,
    check_int,
    check_labels,
    check_leaf_scores,
    check_no_nan,
    check_run,
    crp_draw_jit,
    crp_log_prob_counts,
    int_dtype,
    log_marginal,
    segment_stats,
    select_rows,
    sub_stats,
    take_slots,
    validate,
    zeros_stats,
)

_tmap = jax.tree_util.tree_map


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
    stats = segment_stats(leaves, labels, N)
    counts = jax.ops.segment_sum(jnp.ones(N, f), labels, num_segments=N)
    lm = jnp.where(counts > 0, log_marginal(component, stats, cache), 0.0)
    stats = select_rows(counts > 0, stats, zeros_stats(stats))
    return DPMGibbsState(labels, stats, counts, lm, crp_log_prob_counts(counts, alpha) + jnp.sum(lm))


def _set_row(s, k, v):
    return _tmap(lambda a, b: a.at[k].set(b), s, v)


def _gibbs_sweep(key, state, leaves, component, alpha, cache):
    """One Algorithm-3 sweep over the rows in order."""
    N = state.labels.shape[0]
    log_alpha = jnp.log(alpha)
    ar = jnp.arange(N)

    def body(st, inp):
        i, k = inp
        leaf = take_slots(leaves, i)
        c = st.labels[i]
        counts = st.counts.at[c].add(-1.0)
        alive = counts[c] > 0
        s_c = sub_stats(take_slots(st.stats, c), leaf)
        s_c = tree_select(alive, s_c, zeros_stats(s_c))
        stats = _set_row(st.stats, c, s_c)
        lms = st.log_marginals.at[c].set(jnp.where(alive, log_marginal(component, s_c, cache), 0.0))
        merged = component.merge(stats, leaf)
        lm_merged = log_marginal(component, merged, cache)
        occ = counts > 0
        e = jnp.argmin(occ)
        prior = jnp.where(occ, jnp.log(jnp.where(occ, counts, 1.0)), jnp.where(ar == e, log_alpha, -jnp.inf))
        knew = jax.random.categorical(k, prior + lm_merged - lms).astype(jnp.int32)
        stats = _set_row(stats, knew, take_slots(merged, knew))
        lms = lms.at[knew].set(lm_merged[knew])
        return DPMGibbsState(st.labels.at[i].set(knew), stats, counts.at[knew].add(1.0), lms, st.log_joint), None

    state, _ = jax.lax.scan(body, state, (ar, jax.random.split(key, N)))
    return state


def _masked_sum_stats(leaves, mask):
    return segment_stats(leaves, jnp.where(mask, 0, 1), 2)


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
    sA = take_slots(_masked_sum_stats(leaves, mA), 0)
    sB = take_slots(_masked_sum_stats(leaves, mB), 0)
    nA, nB = jnp.sum(mA).astype(f), jnp.sum(mB).astype(f)

    def restricted_scan(carry, inp):
        """One restricted Gibbs scan over ``S``; the last one (``final``) accumulates ``log
        q`` and, for a merge proposal, is forced to the current split."""
        key, final = inp
        forced = final & ~same

        def update(carry, r, k):
            side, sA, sB, nA, nB, logq = carry
            leaf = take_slots(leaves, r)
            onB = side[r]
            sAm = tree_select(onB, sA, sub_stats(sA, leaf))
            sBm = tree_select(onB, sub_stats(sB, leaf), sB)
            nAm, nBm = nA - (~onB), nB - onB
            mgA, mgB = component.merge(sAm, leaf), component.merge(sBm, leaf)
            lA = jnp.log(nAm) + log_marginal(component, mgA, cache) - log_marginal(component, sAm, cache)
            lB = jnp.log(nBm) + log_marginal(component, mgB, cache) - log_marginal(component, sBm, cache)
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
        0, num_scans + 1, lambda t, c: restricted_scan(c, (jax.random.fold_in(k_scans, t), t == num_scans))[0], carry
    )
    side, sA, sB, nA, nB, logq = carry

    log_a = jnp.log(alpha)
    lms = state.log_marginals
    # split: A -> a new slot e, B keeps cj
    lmA, lmB = log_marginal(component, sA, cache), log_marginal(component, sB, cache)
    split_ratio = -logq + log_a + gammaln(nA) + gammaln(nB) - gammaln(nA + nB) + lmA + lmB - lms[ci]
    e = jnp.argmin(state.counts > 0).astype(jnp.int32)
    to_A = (in_S & ~side) | (ar == i)
    split_state = DPMGibbsState(
        jnp.where(to_A, e, labels).astype(jnp.int32),
        _set_row(_set_row(state.stats, e, sA), cj, sB),
        state.counts.at[e].set(nA).at[cj].set(nB),
        lms.at[e].set(lmA).at[cj].set(lmB),
        state.log_joint,
    )
    # merge: everything in ci joins cj
    s_m = component.merge(take_slots(state.stats, ci), take_slots(state.stats, cj))
    lm_m = log_marginal(component, s_m, cache)
    n_i, n_j = state.counts[ci], state.counts[cj]
    merge_ratio = logq - log_a - gammaln(n_i) - gammaln(n_j) + gammaln(n_i + n_j) + lm_m - lms[ci] - lms[cj]
    empty = zeros_stats(s_m)
    merge_state = DPMGibbsState(
        jnp.where(labels == ci, cj, labels).astype(jnp.int32),
        _set_row(_set_row(state.stats, ci, empty), cj, s_m),
        state.counts.at[ci].set(0.0).at[cj].set(n_i + n_j),
        lms.at[ci].set(0.0).at[cj].set(lm_m),
        state.log_joint,
    )
    proposal = tree_select(same, split_state, merge_state)
    log_ratio = jnp.where(same, split_ratio, merge_ratio)
    accepted = mh_accept(k_acc, log_ratio)
    return tree_select(accepted, proposal, state), accepted, same


def _dpm_step(key, state, leaves, component, alpha, cache, num_split_merge, num_restricted_scans, gibbs_sweep=True):
    k_sweep, k_sm = jax.random.split(key)
    if isinstance(gibbs_sweep, (bool, np.bool_)):
        if gibbs_sweep:
            state = _gibbs_sweep(k_sweep, state, leaves, component, alpha, cache)
    else:  # a traced flag: one program with and without the sweep
        state = jax.lax.cond(
            gibbs_sweep, lambda s: _gibbs_sweep(k_sweep, s, leaves, component, alpha, cache), lambda s: s, state
        )

    def sm(st, k):
        st, a, s = _split_merge(k, st, leaves, component, alpha, cache, num_restricted_scans)
        return st, (a, s)

    state, (acc, spl) = jax.lax.scan(sm, state, jax.random.split(k_sm, num_split_merge))
    log_joint = crp_log_prob_counts(state.counts, alpha) + jnp.sum(state.log_marginals)
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
    Xa, alpha = validate(X, component, alpha)
    N = Xa.shape[0]
    if labels is None:
        if key is None:
            raise ValueError("key is required when labels is None (labels are drawn from the CRP)")
        labels = crp_draw_jit(key, N, N, jnp.asarray(alpha, Xa.dtype))[0]
    else:
        labels = check_labels(labels, N)
    return _dpm_init_jit(labels, Xa, component, jnp.asarray(alpha, Xa.dtype))


@jax.jit
def _dpm_init_jit(labels, X, component, alpha):
    leaves, cache = _dpm_setup(X, component)
    return _dpm_state(labels, leaves, component, alpha, cache)


def _dpm_template(X, num_split_merge):
    """One zero row of the kept-sample buffers: labels, log joint, `DPMGibbsInfo`."""
    b = jnp.zeros(num_split_merge, bool)
    return (jnp.zeros(X.shape[0], jnp.int32), jnp.zeros((), X.dtype), DPMGibbsInfo(b, b, jnp.zeros((), int_dtype())))


def _dpm_size(X, num_split_merge):
    return chunk_size(4 * X.shape[0] + X.dtype.itemsize + 2 * num_split_merge + 4)


@functools.partial(jax.jit, static_argnames=("num_split_merge", "size", "progress"))
def _dpm_chunk(
    key,
    state,
    X,
    component,
    alpha,
    num_warmup,
    num_kept,
    thin,
    num_split_merge,
    num_restricted_scans,
    gibbs_sweep,
    size,
    progress,
    token,
):
    """`collect_chunk` over DPM steps; counts, ``num_restricted_scans`` and ``gibbs_sweep`` are
    traced (one program per data shape, component and ``num_split_merge``)."""
    leaves, cache = _dpm_setup(X, component)

    def step(k, s):
        return _dpm_step(k, s, leaves, component, alpha, cache, num_split_merge, num_restricted_scans, gibbs_sweep)

    def extract(s, info):
        return s.labels, s.log_joint, info

    return collect_chunk(
        step, extract, _dpm_template(X, num_split_merge), key, state, num_warmup, num_kept, thin, size, progress, token
    )


def dpm_gibbs_step(
    key,
    state: DPMGibbsState,
    X,
    component: Component,
    alpha,
    *,
    num_split_merge: int = 3,
    num_restricted_scans: int = 5,
    gibbs_sweep: bool = True,
):
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
    Xa, alpha = validate(X, component, alpha)
    num_split_merge = check_int(num_split_merge, "num_split_merge", 0)
    num_restricted_scans = check_int(num_restricted_scans, "num_restricted_scans", 0)
    state, (_, _, info) = _dpm_chunk(
        key,
        state,
        Xa,
        component,
        jnp.asarray(alpha, Xa.dtype),
        0,
        1,
        1,
        num_split_merge,
        num_restricted_scans,
        jnp.asarray(bool(gibbs_sweep)),
        _dpm_size(Xa, num_split_merge),
        False,
        0,
    )
    return state, _tmap(lambda a: a[0], info)


def dpm_gibbs(
    key,
    X,
    component: Component,
    alpha,
    *,
    num_samples: int,
    num_warmup: int = 0,
    thin: int = 1,
    init_labels=None,
    num_split_merge: int = 3,
    num_restricted_scans: int = 5,
    gibbs_sweep: bool = True,
    progress_bar: bool = True,
) -> DPMGibbsSamples:
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
    Xa, alpha = validate(X, component, alpha)
    num_samples, num_warmup, thin = check_run(num_samples, num_warmup, thin)
    num_split_merge = check_int(num_split_merge, "num_split_merge", 0)
    num_restricted_scans = check_int(num_restricted_scans, "num_restricted_scans", 0)
    check_key(key, "key")
    check_leaf_scores(component, Xa, "dpm_gibbs")
    k_init, k_run = jax.random.split(key)
    state = dpm_gibbs_init(k_init, Xa, component, alpha, init_labels)
    a, sweep = jnp.asarray(alpha, Xa.dtype), jnp.asarray(bool(gibbs_sweep))
    size = _dpm_size(Xa, num_split_merge)

    def chunk(c, st, warm, n, token):  # chunk c uses fold_in(k_run, c), its step t fold_in(that, t)
        return _dpm_chunk(
            jax.random.fold_in(k_run, c),
            st,
            Xa,
            component,
            a,
            warm,
            n,
            thin,
            num_split_merge,
            num_restricted_scans,
            sweep,
            size,
            bool(token),
            token,
        )

    state, (labels, lj, info) = run_chunks(
        chunk,
        state,
        num_warmup=num_warmup,
        num_samples=num_samples,
        thin=thin,
        size=size,
        progress_bar=progress_bar,
        name="DPM Gibbs",
        device_ticks=True,
    )
    check_no_nan(lj, "dpm_gibbs", Xa)
    rate = jnp.sum(info.split_merge_accepted) / max(num_samples * num_split_merge, 1)
    return DPMGibbsSamples(labels, lj, info.num_clusters, rate, state)


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
        self.X, self.alpha = validate(X, component, alpha)
        self.component = component
        self.num_split_merge = check_int(num_split_merge, "num_split_merge", 0)
        self.num_restricted_scans = check_int(num_restricted_scans, "num_restricted_scans", 0)
        self.init_labels = init_labels
        self._setup = _dpm_setup(self.X, component)

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        k_init, k = jax.random.split(rng_key)
        labels = init_params if init_params is not None else self.init_labels
        st = dpm_gibbs_init(k_init, self.X, self.component, self.alpha, labels)
        return KernelState(st.labels, st, k)

    def sample(self, state, model_args, model_kwargs):
        k, k_next = jax.random.split(state.rng_key)
        leaves, cache = self._setup
        st, _ = _dpm_step(
            k,
            state.state,
            leaves,
            self.component,
            jnp.asarray(self.alpha, self.X.dtype),
            cache,
            self.num_split_merge,
            self.num_restricted_scans,
        )
        return KernelState(st.labels, st, k_next)
