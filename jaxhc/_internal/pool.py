"""The library's one thread pool: created on first use, shared by every caller (parallel
chains, BHCC's column jobs, the CLI's jobs), shut down at interpreter exit.

JAX compiles and runs outside the GIL, so threads overlap compilations and the runs of
independent programs on a multi-core CPU. Tasks run in this pool must not themselves wait on
other tasks of the pool (that could deadlock once every worker waits); `pool_map` called
from a pool thread therefore runs its items in the calling thread.
"""

from __future__ import annotations

import atexit
import os
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import Callable, Iterable, List, Optional

__all__ = ["num_workers", "get_pool", "pool_map", "shutdown"]

_POOL: Optional[ThreadPoolExecutor] = None
_LOCK = threading.Lock()
_PREFIX = "jaxhc-pool"
_MAX_WORKERS = 32


def num_workers() -> int:
    """Worker threads of the shared pool: the CPU cores this process may use (its affinity
    mask where the OS has one), at least 1 and at most 32."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, _MAX_WORKERS))


def get_pool() -> ThreadPoolExecutor:
    """The shared ``ThreadPoolExecutor`` (``num_workers()`` threads), created on the first call
    and shut down at exit (`shutdown`)."""
    global _POOL
    with _LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=num_workers(), thread_name_prefix=_PREFIX)
        return _POOL


def shutdown(wait_: bool = True) -> None:
    """Shuts the shared pool down (a later `get_pool` makes a new one). Registered with
    ``atexit``."""
    global _POOL
    with _LOCK:
        pool, _POOL = _POOL, None
    if pool is not None:
        pool.shutdown(wait=wait_)


atexit.register(shutdown)


def _in_pool_thread() -> bool:
    return threading.current_thread().name.startswith(_PREFIX)


def pool_map(fn: Callable, items: Iterable, *, max_workers: Optional[int] = None) -> List:
    """``[fn(x) for x in items]`` computed in the shared pool, at most ``max_workers`` (default:
    all the pool's workers) at a time; results in the items' order, the first exception
    re-raised. One item, ``max_workers=1`` or a call from a pool thread runs in the calling
    thread."""
    items = list(items)
    limit = num_workers() if max_workers is None else max(1, int(max_workers))
    if len(items) <= 1 or limit <= 1 or _in_pool_thread():
        return [fn(x) for x in items]
    pool = get_pool()
    if limit >= len(items):
        return list(pool.map(fn, items))
    out: list = [None] * len(items)
    running = {}
    it = iter(enumerate(items))
    try:
        for i, x in it:
            running[pool.submit(fn, x)] = i
            if len(running) >= limit:
                break
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in done:
                out[running.pop(f)] = f.result()
                nxt = next(it, None)
                if nxt is not None:
                    running[pool.submit(fn, nxt[1])] = nxt[0]
    finally:
        for f in running:
            f.cancel()
    return out
