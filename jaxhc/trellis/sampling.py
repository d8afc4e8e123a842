"""Exact samples from the cluster trellis: ``P(H | X) = phi(H) / Z`` drawn top-down with
``p(L | S) = psi(S, L, R) Z(L) Z(R) / Z(S)`` (Alg. 2, Eq. 3 of the trellis paper), the ``log Z``
table from the size class's program of `jaxhc.trellis.exact`."""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..tree import Tree
from .classes import class_call
from .energies import Energy
from .exact import prepare_leaves, run_dp, tree_from_splits
from .subsets import take_rows

__all__ = ["SampledTrees", "sample"]


class SampledTrees(NamedTuple):
    """Hierarchies sampled by `sample`: the ``N - 1`` splits of each, top-down.

    Fields: ``parent``, ``left``, ``right``: ``[num_samples, N-1]`` bitmasks;
    ``log_phi``: ``[num_samples]`` log potential of each sample; ``n_leaves``.
    """

    parent: Any
    left: Any
    right: Any
    log_phi: Any
    n_leaves: int

    def tree(self, i: int) -> Tree:
        """Sample ``i`` as a `Tree`."""
        p, l, r = (np.asarray(x[i]) for x in (self.parent, self.left, self.right))
        return tree_from_splits(list(zip(p.tolist(), l.tolist(), r.tolist())), self.n_leaves)

    def trees(self) -> list:
        return [self.tree(i) for i in range(np.shape(self.parent)[0])]

    def keys(self) -> list:
        """A hashable canonical key per sample (its set of inner clusters)."""
        p = np.sort(np.asarray(self.parent), axis=1)
        return [tuple(row) for row in p.tolist()]


@partial(jax.jit, static_argnames=("n", "num_samples"))
def _sample_core(key, energy, leaves, n, num_samples):
    return _sample_from(
        key, energy, leaves, run_dp(energy, energy.features(leaves), n, with_map=False)[0], n, num_samples
    )


@partial(jax.jit, static_argnames=("n", "num_samples"))
def _sample_given(key, energy, leaves, log_z, n, num_samples):
    """`_sample_core` with the ``log Z`` table given (from the size class's program, so
    only this small sampling program is compiled per ``n``)."""
    return _sample_from(key, energy, leaves, log_z, n, num_samples)


def _sample_from(key, energy, leaves, log_z, n, num_samples):
    feats = energy.features(leaves)
    P = 2 ** (n - 1) - 1
    j = jnp.arange(P, dtype=jnp.int32)
    bits = jnp.arange(n, dtype=jnp.int32)

    def split_one(key, S):
        inS = ((S >> bits) & 1).astype(bool)
        k = jnp.sum(inS)
        order = jnp.argsort(~inS, stable=True).astype(jnp.int32)  # positions of S's bits first
        L = jnp.left_shift(jnp.int32(1), order[0])
        for b in range(n - 1):
            L = L | (((j >> b) & 1) << order[b + 1]) * (b + 1 < k)
        valid = j < (jnp.left_shift(1, k - 1) - 1)
        R = S ^ L
        fP = take_rows(feats, S)
        lp = energy.log_psi(fP, take_rows(feats, L), take_rows(feats, R))
        score = jnp.where(valid, lp + log_z[L] + log_z[R], -jnp.inf)
        g = jax.random.gumbel(key, (P,), score.dtype)
        a = jnp.argmax(score + g)
        return L[a], R[a], lp[a]

    def one_tree(key):
        keys = jax.random.split(key, n - 1)
        queue = jnp.zeros((n - 1,), jnp.int32).at[0].set(2**n - 1)

        def step(carry, t):
            queue, tail = carry
            S = queue[t]
            L, R, lp = split_one(keys[t], S)
            addL = (L & (L - 1)) != 0
            queue = jnp.where(addL, queue.at[tail].set(L), queue)
            tail = tail + addL
            addR = (R & (R - 1)) != 0
            queue = jnp.where(addR, queue.at[jnp.minimum(tail, n - 2)].set(R), queue)
            tail = tail + addR
            return (queue, tail), (S, L, R, lp)

        _, (S, L, R, lp) = jax.lax.scan(step, (queue, jnp.int32(1)), jnp.arange(n - 1))
        return S, L, R, jnp.sum(lp)

    return jax.lax.map(one_tree, jax.random.split(key, num_samples), batch_size=min(num_samples, 256))


def sample(key, energy: Energy, leaves, num_samples: int) -> SampledTrees:
    """Exact samples from ``P(H | X) = phi(H) / Z`` (Alg. 2, Eq. 3 of the trellis paper),
    vectorised over samples. Same key, same samples.

    Returns `SampledTrees` (``.tree(i)``, ``.trees()``, ``.keys()``).
    """
    if not (isinstance(num_samples, (int, np.integer)) and num_samples >= 1):
        raise ValueError(f"num_samples must be a positive integer, got {num_samples!r}")
    from .._internal.validation import check_key

    check_key(key, "key")
    leaves, n = prepare_leaves(energy, leaves, None, None)
    if n == 1:
        z = jnp.zeros((num_samples, 0), jnp.int32)
        return SampledTrees(z, z, z, jnp.zeros((num_samples,)), 1)
    res = class_call(energy, leaves, n, False, False)
    if res is None:
        S, L, R, lp = _sample_core(key, energy, leaves, n, int(num_samples))
    else:
        S, L, R, lp = _sample_given(key, energy, leaves, res[3], n, int(num_samples))
    if not np.all(np.isfinite(np.asarray(lp))):
        raise ValueError(
            "leaves: cannot sample, log Z is not finite: no hierarchy of these leaves has positive "
            "probability under the energy (log Z = -inf; for Ginkgo, jets whose masses are below "
            "t_cut), or the potentials overflow"
        )
    return SampledTrees(S, L, R, lp, n)
