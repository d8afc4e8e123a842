"""Counting the XLA programs a process compiles (or loads from the persistent compilation
cache): the test of "compile once, fit many" and the benchmarks' trace/compile/run split.

JAX reports each step of getting a program ready through `jax.monitoring`: tracing to a
jaxpr, lowering to MLIR, and the backend compile (timed around ``compile_or_get_cached``, so
it fires for a program loaded from the persistent cache as for one compiled). One listener,
registered on first use, adds them up for the whole process; `count_compilations` reads the
totals before and after a block.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Dict, Iterator, Union

__all__ = ["CompileCount", "count_compilations", "compile_totals"]

_TRACE = "/jax/core/compile/jaxpr_trace_duration"
_LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"
_COMPILE = "/jax/core/compile/backend_compile_duration"
_EVENTS = {_TRACE: "trace", _LOWER: "lower", _COMPILE: "compile"}

_lock = threading.Lock()
_totals: Dict[str, list] = {k: [0, 0.0] for k in _EVENTS.values()}
_registered = [False]


def _listener(event: str, duration_secs: float, **kwargs: Union[str, int]) -> None:
    kind = _EVENTS.get(event)
    if kind is not None:
        with _lock:
            t = _totals[kind]
            t[0] += 1
            t[1] += duration_secs


def _ensure_listener() -> None:
    if not _registered[0]:
        with _lock:
            if not _registered[0]:
                from jax import monitoring

                monitoring.register_event_duration_secs_listener(_listener)
                _registered[0] = True


def compile_totals() -> Dict[str, tuple]:
    """``{"trace" | "lower" | "compile": (count, seconds)}`` since the listener was registered."""
    _ensure_listener()
    with _lock:
        return {k: (v[0], v[1]) for k, v in _totals.items()}


@dataclass
class CompileCount:
    """What a `count_compilations` block cost: ``compiled`` programs built by XLA or loaded
    from the persistent cache (``compile_s`` seconds), ``traced`` functions traced to jaxprs
    (``trace_s``), ``lowered`` modules lowered to MLIR (``lower_s``). Filled in on exit."""

    compiled: int = 0
    compile_s: float = 0.0
    traced: int = 0
    trace_s: float = 0.0
    lowered: int = 0
    lower_s: float = 0.0
    _start: Dict[str, tuple] = field(default_factory=dict, repr=False)


@contextlib.contextmanager
def count_compilations() -> Iterator[CompileCount]:
    """Counts the programs compiled inside the block (process-wide, every thread)::

    with count_compilations() as c:
        jaxhc.bhc(X, comp)
    assert c.compiled == 0
    """
    c = CompileCount(_start=compile_totals())
    try:
        yield c
    finally:
        end = compile_totals()
        s = c._start
        c.compiled, c.compile_s = end["compile"][0] - s["compile"][0], end["compile"][1] - s["compile"][1]
        c.traced, c.trace_s = end["trace"][0] - s["trace"][0], end["trace"][1] - s["trace"][1]
        c.lowered, c.lower_s = end["lower"][0] - s["lower"][0], end["lower"][1] - s["lower"][1]
