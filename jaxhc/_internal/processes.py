"""JAX's multi-controller runtime (`jax.distributed.initialize`): each process's own rows of a
global array, sums over processes on the host, and a differentiable sum over processes inside
traced code (`sum_over_processes`, what `jaxhc.sample_lambda` uses so that NUTS on every
process sees the likelihood of all processes' jets; its values travel through the
coordination service's key-value store on the host, so a GPU held by the running
computation is never waited on)."""

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


#: how long a process waits for the others' values in `sum_over_processes` (they run in
#: lockstep, so a long wait means one of them stopped or took another path)
EXCHANGE_TIMEOUT_S = 600.0
_SEQ = [0]


def _kv_client():
    """The coordination service's client of `jax.distributed` (a key-value store on the
    host), or None where this JAX has none."""
    try:
        from jax._src import distributed

        return distributed.global_state.client
    except (ImportError, AttributeError):  # pragma: no cover - other JAX versions
        return None


def _exchange(x):
    """`allgather_sum` from inside a running computation (a host callback). Through the
    coordination service's key-value store where there is one: host memory only, so it
    cannot wait on a device that the blocked computation holds (a GPU stream). Each call
    is numbered; every process runs the same calls in the same order, writes its value under
    its number and sums everyone's in process order (the same sum, bit for bit, on all)."""
    x = np.array(x, order="C")  # (np.ascontiguousarray would make a scalar 1-d)
    client = _kv_client()
    if client is None:  # pragma: no cover - other JAX versions
        # JAX refuses to start a collective on the callback's own thread: a thread of its own
        return _POOL.submit(allgather_sum, x).result()
    seq = _SEQ[0]
    _SEQ[0] += 1
    me, P = jax.process_index(), jax.process_count()
    client.key_value_set_bytes(f"jaxhc/sum/{seq}/{me}", x.tobytes())
    total = np.zeros_like(x)
    for p in range(P):
        try:
            raw = client.blocking_key_value_get_bytes(f"jaxhc/sum/{seq}/{p}", int(EXCHANGE_TIMEOUT_S * 1000))
        except Exception as e:  # the service reports a timeout as a generic runtime error
            raise RuntimeError(
                f"sum_over_processes: process {p} did not send its value {seq} within {EXCHANGE_TIMEOUT_S:.0f} s; "
                "every process must evaluate the model the same number of times, in the same order "
                "(the same inference, keys and settings on all of them)"
            ) from e
        total = total + np.frombuffer(raw, x.dtype).reshape(x.shape)
    if seq >= 2:  # every process has read value seq - 2 before writing seq - 1
        try:
            client.key_value_delete(f"jaxhc/sum/{seq - 2}/{me}")
        except Exception:  # pragma: no cover - best effort
            pass
    return total.astype(x.dtype)


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
