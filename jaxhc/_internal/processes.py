"""JAX's multi-controller runtime (`jax.distributed.initialize`): each process's own rows of a
global array, sums over processes on the host, and a differentiable sum over processes inside
traced code (`sum_over_processes`, what `jaxhc.sample_lambda` uses so that NUTS on every
process sees the likelihood of all processes' jets)."""

from __future__ import annotations

import concurrent.futures

import jax
import numpy as np

__all__ = ["process_local", "allgather_sum", "sum_over_processes"]

# one thread for the exchanges made from inside a running computation (see `_exchange`)
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="jaxhc-processes")


def process_local(x, name: str):
    """``x`` as given, or, for a `jax.Array` spanning devices of other processes (e.g. from
    ``jax.make_array_from_process_local_data``), this process's rows as a host array: the
    addressable shards in row order, replicas read once. Only a split along the first axis
    (rows: jets) is supported."""
    if not isinstance(x, jax.Array) or isinstance(x, jax.core.Tracer) or x.is_fully_addressable:
        return x
    if x.is_fully_replicated:
        return np.asarray(x.addressable_shards[0].data)
    rows = {}
    for s in x.addressable_shards:
        idx = s.index
        if any(not (sl.start in (None, 0) and sl.stop in (None, x.shape[k + 1])) for k, sl in enumerate(idx[1:])):
            raise ValueError(
                f"{name}: a global jax.Array must be split across processes along its first axis (rows) only, "
                f"got a shard with index {idx}"
            )
        rows.setdefault(idx[0].start or 0, s.data)
    return np.concatenate([np.asarray(rows[k]) for k in sorted(rows)], axis=0)


def allgather_sum(x) -> np.ndarray:
    """The element-wise sum of ``x`` (a host array of the same shape on every process) over
    all processes; ``x`` itself with one process. Every process must call it, in the same
    order."""
    x = np.asarray(x)
    if jax.process_count() == 1:
        return x
    from jax.experimental import multihost_utils

    return np.sum(np.asarray(multihost_utils.process_allgather(x)), axis=0).astype(x.dtype)


def _exchange(x):
    # called from inside a running computation (a host callback): JAX refuses to start a
    # cross-process collective on that thread (it is still inside the outer program's
    # dispatch), so the exchange runs on a thread of its own while this one waits
    return _POOL.submit(allgather_sum, np.asarray(x)).result()


def _exchange_after(_previous, x):
    return _exchange(x)


def _callback(fn, like, *args):
    return jax.pure_callback(fn, jax.ShapeDtypeStruct(like.shape, like.dtype), *args, vmap_method="expand_dims")


@jax.custom_jvp
def sum_over_processes(x):
    """``x`` summed element-wise over the processes of `jax.distributed` (identity with one
    process), usable inside ``jit``, ``vmap`` and forward-mode differentiation: the tangent
    is summed too. A host callback exchanges the values, so every process must evaluate it
    the same number of times in the same order (processes running the same program on the
    same keys do: an MCMC chain whose potential is this sum stays identical on all of them).
    Not for reverse mode."""
    if jax.process_count() == 1:
        return x
    return _callback(_exchange, x, x)


@sum_over_processes.defjvp
def _sum_over_processes_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    if jax.process_count() == 1:
        return x, t
    y = _callback(_exchange, x, x)
    # the tangent's exchange takes the value's result as an input, so it runs second on
    # every process (two independent callbacks could run in either order)
    return y, _callback(_exchange_after, t, y, t)
