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
    bucket_floor,
    check_int,
    check_labels,
    check_leaf_scores,
    check_no_nan,
    check_run,
    crp_draw_jit,
    crp_log_prob_counts,
    int_dtype,
    log_marginal,
    pad_axis,
    padded_size,
    segment_stats,
    select_rows,
    sub_stats,
    take_front,
    take_slots,
    to_device,
    validate,
    zeros_stats,
)

_tmap = jax.tree_util.tree_map


# ==========================================================================================
# DPM collapsed Gibbs with split-merge
# ==========================================================================================
class DPMGibbsState(NamedTuple):
    """State of the DPM Gibbs sampler (cluster slots ``0..K-1``, ``K = N``; inside the
    compiled programs ``N`` and ``K`` are the padded size, padding rows labelled ``K``).

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


def _gibbs_sweep(key, state, leaves, component, alpha, cache, n):
    """One Algorithm-3 sweep over the ``n`` real rows in order (row ``i`` draws with the
    ``i``-th key of ``split(key, K)``, whatever the padding)."""
    K = state.labels.shape[0]
    log_alpha = jnp.log(alpha)
    ar = jnp.arange(K)
    keys = jax.random.split(key, K)

    def body(i, st):
        k = keys[i]
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
        return DPMGibbsState(st.labels.at[i].set(knew), stats, counts.at[knew].add(1.0), lms, st.log_joint)

    return jax.lax.fori_loop(0, n, body, state)


def _masked_sum_stats(leaves, mask):
    return segment_stats(leaves, jnp.where(mask, 0, 1), 2)


def _split_merge(key, state, leaves, component, alpha, cache, num_scans, n):
    """One Jain-Neal split-merge proposal (restricted Gibbs launch state) over the ``n`` real
    rows (padding rows, labelled ``K``, are in no cluster)."""
    labels = state.labels
    K = labels.shape[0]
    ar = jnp.arange(K)
    f = state.counts.dtype
    k_i, k_j, k_launch, k_scans, k_acc = jax.random.split(key, 5)
    i = jax.random.randint(k_i, (), 0, n)
    j = jax.random.randint(k_j, (), 0, n - 1)
    j = j + (j >= i)
    ci, cj = labels[i], labels[j]
    same = ci == cj
    in_S = ((labels == ci) | (labels == cj)) & (ar != i) & (ar != j)
    orig_B = labels == cj  # the current split (merge proposals): side B is j's cluster
    side = jax.random.bernoulli(k_launch, 0.5, (K,))  # element r depends on r only
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

        keys = jax.random.split(key, K)

        def body(r, carry):
            return jax.lax.cond(in_S[r], update, lambda c, r, k: c, carry, r, keys[r])

        return jax.lax.fori_loop(0, n, body, carry), None

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
    accepted = mh_accept(k_acc, log_ratio) & (n > 1)
    return tree_select(accepted, proposal, state), accepted, same


def _dpm_step(key, state, leaves, component, alpha, cache, num_split_merge, num_restricted_scans, n, gibbs_sweep=True):
    k_sweep, k_sm = jax.random.split(key)
    if isinstance(gibbs_sweep, (bool, np.bool_)):
        if gibbs_sweep:
            state = _gibbs_sweep(k_sweep, state, leaves, component, alpha, cache, n)
    else:  # a traced flag: one program with and without the sweep
        state = jax.lax.cond(
            gibbs_sweep, lambda s: _gibbs_sweep(k_sweep, s, leaves, component, alpha, cache, n), lambda s: s, state
        )

    def sm(st, k):
        st, a, s = _split_merge(k, st, leaves, component, alpha, cache, num_restricted_scans, n)
        return st, (a, s)

    state, (acc, spl) = jax.lax.scan(sm, state, jax.random.split(k_sm, num_split_merge))
    log_joint = crp_log_prob_counts(state.counts, alpha) + jnp.sum(state.log_marginals)
    state = state._replace(log_joint=log_joint)
    info = DPMGibbsInfo(acc, spl, jnp.sum(state.counts > 0))
    return state, info


def _dpm_setup(X, component, n):
    """Leaf statistics (those of the padding rows ``n..K-1`` zeroed: the statistics of the
    empty set) and the component's count cache for ``K`` rows."""
    K = X.shape[0]
    leaves = component.leaf_stats(X)
    if not (isinstance(n, int) and n == K):
        leaves = select_rows(jnp.arange(K) < n, leaves, zeros_stats(leaves))
    return leaves, component.count_cache(K)


def _dpm_prepare(X, component, alpha):
    """Validated data: ``(host X [N, d], device X padded to [K, d] with zero rows, alpha, N, K)``
    (``K = padded_size(N)``)."""
    Xa, alpha = validate(X, component, alpha)
    N = Xa.shape[0]
    K = padded_size(N)
    return Xa, to_device(pad_axis(Xa, K, 0.0)), alpha, N, K


def _dpm_init(key, Xp, N, component, alpha, labels):
    """The padded initial state (labels ``[K]``, padding rows labelled ``K``) and every row's
    log marginal ``[K]`` (the data check of `check_leaf_scores`)."""
    K = Xp.shape[0]
    a = jnp.asarray(alpha, Xp.dtype)
    if labels is None:
        if key is None:
            raise ValueError("key is required when labels is None (labels are drawn from the CRP)")
        z = crp_draw_jit(key, N, K, K, a)[0]  # draws of the real rows: those of crp_draw(key, N, N, N)
    else:
        z = to_device(pad_axis(check_labels(labels, N), K, K))
    return _dpm_init_jit(z, Xp, component, a, N)


def _unpad_dpm_state(st, N):
    """The public state: rows and cluster slots ``0..N-1`` (the real rows only ever use
    slots below ``N``: a new cluster takes the lowest free slot)."""
    return DPMGibbsState(
        to_device(take_front(st.labels, (N,))),
        to_device(_tmap(lambda a: take_front(a, (N,)), st.stats)),
        to_device(take_front(st.counts, (N,))),
        to_device(take_front(st.log_marginals, (N,))),
        st.log_joint,
    )


def _pad_dpm_state(st, K):
    """A public state padded to ``K`` rows and slots (rows labelled ``K``, empty slots)."""
    if st.labels.shape[0] == K:
        return st
    return DPMGibbsState(
        to_device(pad_axis(st.labels, K, K)),
        to_device(_tmap(lambda a: pad_axis(a, K, 0), st.stats)),
        to_device(pad_axis(st.counts, K, 0)),
        to_device(pad_axis(st.log_marginals, K, 0)),
        st.log_joint,
    )


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
    _, Xp, alpha, N, _ = _dpm_prepare(X, component, alpha)
    return _unpad_dpm_state(_dpm_init(key, Xp, N, component, alpha, labels)[0], N)


@jax.jit
def _dpm_init_jit(labels, X, component, alpha, n):
    leaves, cache = _dpm_setup(X, component, n)
    leaf_lm = component.log_marginal(component.leaf_stats(X))
    return _dpm_state(labels, leaves, component, alpha, cache), leaf_lm


def _dpm_template(X, num_split_merge):
    """One zero row of the kept-sample buffers: labels, log joint, `DPMGibbsInfo`."""
    b = jnp.zeros(num_split_merge, bool)
    return (jnp.zeros(X.shape[0], jnp.int32), jnp.zeros((), X.dtype), DPMGibbsInfo(b, b, jnp.zeros((), int_dtype())))


def _dpm_sizes(N, K, itemsize, num_split_merge):
    """``(samples a chunk keeps, static buffer length)``: the first as before padding (from
    ``N``, so chunk boundaries and keys do not depend on the padding), the second the first's
    largest value over the sizes padded to ``K`` (one program per bucket)."""
    row = lambda n: chunk_size(4 * n + itemsize + 2 * num_split_merge + 4)  # noqa: E731
    return row(N), row(bucket_floor(K, N))


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
    n,
    size,
    progress,
    token,
):
    """`collect_chunk` over DPM steps; counts, ``num_restricted_scans``, ``gibbs_sweep`` and the
    number of real rows ``n`` are traced (one program per padded data shape, component and
    ``num_split_merge``)."""
    leaves, cache = _dpm_setup(X, component, n)

    def step(k, s):
        return _dpm_step(k, s, leaves, component, alpha, cache, num_split_merge, num_restricted_scans, n, gibbs_sweep)

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
    Xa, Xp, alpha, N, K = _dpm_prepare(X, component, alpha)
    num_split_merge = check_int(num_split_merge, "num_split_merge", 0)
    num_restricted_scans = check_int(num_restricted_scans, "num_restricted_scans", 0)
    state, (_, _, info) = _dpm_chunk(
        key,
        _pad_dpm_state(state, K),
        Xp,
        component,
        jnp.asarray(alpha, Xp.dtype),
        0,
        1,
        1,
        num_split_merge,
        num_restricted_scans,
        jnp.asarray(bool(gibbs_sweep)),
        N,
        _dpm_sizes(N, K, Xp.dtype.itemsize, num_split_merge)[1],
        False,
        0,
    )
    return _unpad_dpm_state(state, N), to_device(_tmap(lambda a: np.asarray(a)[0], info))


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

    Compilation: the rows are padded to the next size of the library's bucket grid
    (`jaxhc._internal.buckets`) with rows in no cluster (zero statistics, never visited, out
    of every move), so one compiled program serves every ``N`` of a bucket and the samples
    equal those of the unpadded computation (the same key gives the same samples).

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
    Xa, Xp, alpha, N, K = _dpm_prepare(X, component, alpha)
    num_samples, num_warmup, thin = check_run(num_samples, num_warmup, thin)
    num_split_merge = check_int(num_split_merge, "num_split_merge", 0)
    num_restricted_scans = check_int(num_restricted_scans, "num_restricted_scans", 0)
    check_key(key, "key")
    k_init, k_run = jax.random.split(key)
    state, leaf_lm = _dpm_init(k_init, Xp, N, component, alpha, init_labels)
    check_leaf_scores(component, Xa, "dpm_gibbs", take_front(leaf_lm, (N,)))
    a, sweep = jnp.asarray(alpha, Xp.dtype), jnp.asarray(bool(gibbs_sweep))
    per_chunk, size = _dpm_sizes(N, K, Xp.dtype.itemsize, num_split_merge)

    def chunk(c, st, warm, n, token):  # chunk c uses fold_in(k_run, c), its step t fold_in(that, t)
        return _dpm_chunk(
            jax.random.fold_in(k_run, c),
            st,
            Xp,
            component,
            a,
            warm,
            n,
            thin,
            num_split_merge,
            num_restricted_scans,
            sweep,
            N,
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
        size=per_chunk,
        progress_bar=progress_bar,
        name="DPM Gibbs",
        device_ticks=True,
    )
    check_no_nan(lj, "dpm_gibbs", Xa)
    rate = np.sum(np.asarray(info.split_merge_accepted)) / max(num_samples * num_split_merge, 1)
    labels = to_device(take_front(labels, (num_samples, N)))
    return DPMGibbsSamples(labels, lj, info.num_clusters, jnp.asarray(rate), _unpad_dpm_state(state, N))


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
        Xa, self.alpha = validate(X, component, alpha)
        self.X = jnp.asarray(Xa)  # NumPyro's MCMC compiles its own programs: not padded
        self.component = component
        self.num_split_merge = check_int(num_split_merge, "num_split_merge", 0)
        self.num_restricted_scans = check_int(num_restricted_scans, "num_restricted_scans", 0)
        self.init_labels = init_labels
        self._setup = _dpm_setup(self.X, component, Xa.shape[0])

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
            self.X.shape[0],
        )
        return KernelState(st.labels, st, k_next)
