"""Shape buckets of the PYDT entry points ("compile once, fit many"; `jaxhc._internal.buckets`).

`pydt_mcmc` and `pydt_em` run their compiled programs on ``Nb = bucket(N)`` leaf slots instead
of ``N``: the data gain ``Nb - N`` zero rows, and the fixed-capacity trees ``m_b = 2 Nb - 1``
slots laid out as

    [ leaves 0..N-1 | padding leaves N..Nb-1 (always FREE) | internal slots Nb..2Nb-2 ]

so the tree over the real leaves is an exact-size tree whose internal slots are shifted by
``Nb - N``. A padding leaf is never active, so every masked sum, message and count of the
programs skips it, and the free internal slot they pick (the first free one) is always the
exact-size choice shifted by ``Nb - N``: the padded tree maps onto the exact-size tree slot for
slot (`unpad_tree`, on the host). Random draws stay those of the exact size: JAX's
(partitionable) threefry draws an array element by element from its flat index, so a draw of
``[Nb, D]`` agrees with one of ``[N, D]`` on the real rows, and a draw over the node slots
(`slot_categorical`, backward sampling) is indexed by the exact-size slot number.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..._internal.buckets import bucket
from ...models.pydt_math import FREE

__all__ = ["leaf_capacity", "pad_tree", "real_leaves", "slot_categorical", "unpad_tree"]


def leaf_capacity(n: int, on: bool = True) -> int:
    """The leaf slots of the padded programs: ``bucket(n)`` (``n`` itself when ``on`` is False)."""
    return bucket(n) if on else int(n)


def _slots(n: int, nb: int) -> np.ndarray:
    """Padded slot of each exact-size slot ``0..2n-2``."""
    return np.concatenate([np.arange(n), np.arange(nb, nb + n - 1)])


def pad_tree(parent, times, n: int, nb: int):
    """Exact-size trees ``[..., 2n - 1]`` (host arrays) onto ``2 nb - 1`` slots: padding leaves
    ``n..nb-1`` free (time 1, as the leaves), internal slots shifted by ``nb - n``."""
    parent = np.asarray(parent)
    times = np.asarray(times)
    if nb == n:
        return parent, times
    lead = parent.shape[:-1]
    par = np.full(lead + (2 * nb - 1,), FREE, parent.dtype)
    tim = np.zeros(lead + (2 * nb - 1,), times.dtype)
    tim[..., :nb] = 1.0
    idx = _slots(n, nb)
    par[..., idx] = np.where(parent >= n, parent + (nb - n), parent)
    tim[..., idx] = times
    return par, tim


def unpad_tree(parent, times, n: int, nb: int):
    """The inverse of `pad_tree`: padded trees ``[..., 2 nb - 1]`` back onto ``2n - 1`` slots."""
    parent = np.asarray(parent)
    times = np.asarray(times)
    if nb == n:
        return parent, times
    idx = _slots(n, nb)
    par = parent[..., idx]
    return np.where(par >= nb, par - (nb - n), par).astype(parent.dtype), times[..., idx]


def real_leaves(parent, n_cap):
    """The number of active leaves (the real ``N`` of a padded tree; in jit)."""
    return jnp.sum(parent[:n_cap] != FREE).astype(jnp.int32)


def slot_categorical(key, logits, n_cap, n):
    """``jax.random.categorical(key, logits)`` over the node slots ``[2 n_cap - 1]`` of a padded
    tree with ``n`` active leaves (traced), drawn as the exact-size call draws it: slot ``k``'s
    Gumbel noise is the one of its exact-size slot (``k`` for a leaf, ``k - (n_cap - n)`` for an
    internal slot), so the choice does not depend on the padding (padding leaves need ``-inf``
    logits). With ``n == n_cap`` it is ``jax.random.categorical`` itself."""
    slots = jnp.arange(logits.shape[0])
    canon = jnp.where(slots < n_cap, slots, slots - (n_cap - n))
    g = jax.random.gumbel(key, logits.shape, logits.dtype)
    return jnp.argmax(g[canon] + logits).astype(jnp.int32)
