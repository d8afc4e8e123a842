"""The one chain driver of jaxhc's samplers (PYDT, BHMC, DPM Gibbs, CDPM MCMC).

A run is ``num_warmup + num_samples * thin`` iterations of a compiled step; iteration ``t``
(0-based) is kept when ``r = t + 1 - num_warmup > 0`` and ``r % thin == 0`` (`is_kept`). The
driver never touches random keys: each sampler's step derives its key from the iteration
(or chunk) index it is given, so moving a sampler onto the driver leaves its samples
unchanged. Two drivers share that schedule and the progress bar (`jaxhc._internal.progress`):

- `run_steps`: a host loop calling ``step(t, state) -> (state, info)`` once per iteration (a
  compiled step, or a Python function calling one per chain); ``collect(t, state, info)`` is
  called on the kept iterations only (and on the warm-up with ``collect_warmup``), so nothing
  is copied to the host on the others. Used by `pydt_mcmc` and `bhmc`.
- `run_chunks`: calls ``chunk(c, state, num_warmup_c, num_kept_c, token)`` for chunks
  ``c = 0, 1, ...``, each a compiled ``fori_loop`` over many iterations (`collect_chunk`,
  in the spirit of NumPyro's ``fori_collect``) writing the kept samples to device buffers of a
  static length (`chunk_size`); the first chunk runs the warm-up. Used by `dpm_gibbs` and
  `cdpm_mcmc`.

Several chains (``num_chains > 1``): with ``chain_method="vectorized"`` the sampler's step is
one ``vmap``-ed program over a stacked state; with ``"sequential"`` or ``"parallel"`` the state
is a list of per-chain states (`unstack_chains` / `stack_chains`) and the step runs
``map_chains(fn, keys, states, chain_method)`` (in the shared thread pool for
``"parallel"``, `jaxhc._internal.pool`). The sampler splits the iteration's key into the
chains' keys (chain ``i`` gets the ``i``-th split), so all three make the same random draws
(``"sequential"`` and ``"parallel"`` identical results; ``vmap`` may round differently).
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from .pool import pool_map
from .progress import progress, tick

__all__ = [
    "CHAIN_METHODS",
    "is_kept",
    "num_iterations",
    "run_steps",
    "run_chunks",
    "collect_chunk",
    "chunk_size",
    "check_chains",
    "unstack_chains",
    "stack_chains",
    "map_chains",
]

CHAIN_METHODS = ("vectorized", "sequential", "parallel")

_tmap = jax.tree_util.tree_map


def num_iterations(num_warmup: int, num_samples: int, thin: int = 1) -> int:
    """Iterations of a run: ``num_warmup + num_samples * thin``."""
    return int(num_warmup) + int(num_samples) * int(thin)


def is_kept(t: int, num_warmup: int, thin: int = 1) -> bool:
    """Whether iteration ``t`` (0-based) is kept: ``r = t + 1 - num_warmup > 0`` and ``r % thin
    == 0`` (the last of every ``thin`` iterations past the warm-up)."""
    r = t + 1 - num_warmup
    return r > 0 and r % thin == 0


# ------------------------------------------------------------------------------------------
# host loop, one compiled step per iteration
# ------------------------------------------------------------------------------------------
def run_steps(
    step: Callable[[int, Any], Tuple[Any, Any]],
    state,
    *,
    num_warmup: int,
    num_samples: int,
    thin: int = 1,
    collect: Optional[Callable[[int, Any, Any], Any]] = None,
    collect_warmup: bool = False,
    progress_bar: bool = True,
    name: str = "sample",
    postfix: Optional[Callable[[int, Any, Any], dict]] = None,
    postfix_every: int = 10,
) -> Tuple[Any, List]:
    """Runs ``num_warmup + num_samples * thin`` iterations of ``state, info = step(t, state)``.

    Args:
      step: ``(t, state) -> (state, info)`` for iteration ``t`` (it derives its key from
        ``t``, e.g. ``jax.random.fold_in(key, t)``; it may redo an iteration itself, e.g. after
        growing its buffers).
      state: the initial state (any pytree, or a list of per-chain states).
      num_warmup, num_samples, thin: run length (see `is_kept`).
      collect: ``(t, state, info) -> row`` called on every kept iteration (and every warm-up
        iteration when ``collect_warmup``); the rows are returned in order. Copy to the host
        here (``jax.device_get``) only what must be read there.
      collect_warmup: also collect the warm-up iterations.
      progress_bar: show a bar (`jaxhc._internal.progress`), one tick per iteration.
      name: the bar's name (``"<name> warmup"`` / ``"<name> sample"``).
      postfix: ``(t, state, info) -> dict`` shown beside the bar every ``postfix_every``
        iterations (only evaluated when the bar is shown).

    Returns:
      ``(last_state, rows)``.
    """
    rows: list = []
    total = num_iterations(num_warmup, num_samples, thin)
    with progress(total, name, enabled=progress_bar, num_warmup=num_warmup) as bar:
        for t in range(total):
            state, info = step(t, state)
            if collect is not None and ((collect_warmup and t < num_warmup) or is_kept(t, num_warmup, thin)):
                rows.append(collect(t, state, info))
            bar.update(1)
            if postfix is not None and bar.enabled and t % postfix_every == 0:
                bar.set_postfix(**postfix(t, state, info))
    return state, rows


# ------------------------------------------------------------------------------------------
# chunks of compiled fori_loops writing the kept samples to device buffers
# ------------------------------------------------------------------------------------------
_KEEP_BYTES = 1 << 22  # kept-sample buffers of one compiled chunk: at most 4 MiB ...
_KEEP_MAX = 4096  # ... and 4096 rows


def chunk_size(row_bytes: int) -> int:
    """Static buffer length of a compiled chunk whose kept rows take ``row_bytes`` each: the
    largest power of two ``<= 4096`` whose buffers fit in 4 MiB (at least 1). It depends on the
    problem's shape only, so single steps, short and long runs all reuse one compiled program."""
    c = 1
    while c < _KEEP_MAX and 2 * c * row_bytes <= _KEEP_BYTES:
        c *= 2
    return c


def collect_chunk(step, extract, template, key, state, num_warmup, num_kept, thin, size, progress_bar=False, token=0):
    """Device side of `run_chunks` (call it inside ``jit``): runs ``num_warmup + num_kept *
    thin`` steps in one ``fori_loop``, writing ``extract(state, info)`` after every ``thin``-th
    step past the warm-up into buffers of static length ``size >= num_kept`` (``template``: one
    zero row). The counts may be traced, so one compiled program serves every chain length;
    step ``t`` uses ``step(fold_in(key, t), state)``. With ``progress_bar`` (static) each step
    ticks the bar ``token`` through ``jax.debug.callback``.

    Returns ``(last_state, buffers)`` (rows past ``num_kept`` stay zero)."""
    buf = _tmap(lambda a: jnp.zeros((size,) + jnp.shape(a), jnp.asarray(a).dtype), template)

    def body(t, carry):
        s, buf = carry
        s, info = step(jax.random.fold_in(key, t), s)
        if progress_bar:
            jax.debug.callback(tick, token, 1)
        r = t + 1 - num_warmup
        idx = jnp.where((r > 0) & (r % thin == 0), r // thin - 1, size)
        buf = _tmap(lambda b, x: b.at[idx].set(x, mode="drop"), buf, extract(s, info))
        return s, buf

    return jax.lax.fori_loop(0, num_warmup + num_kept * thin, body, (state, buf))


def run_chunks(
    chunk: Callable,
    state,
    *,
    num_warmup: int,
    num_samples: int,
    thin: int = 1,
    size: int,
    progress_bar: bool = True,
    name: str = "sample",
    device_ticks: bool = False,
):
    """Runs ``ceil(num_samples / size)`` calls of ``state, buffers = chunk(c, state, warm, n,
    token)`` (chunk ``c`` keeps ``n <= size`` samples; the first also runs the ``warm =
    num_warmup`` warm-up steps) and concatenates the kept rows ``buffers[:n]`` on the host.

    Args:
      chunk: ``(c, state, num_warmup_c, num_kept_c, token) -> (state, buffers)``; it derives
        its key from ``c`` (e.g. ``fold_in(key, c)``); ``token`` names the progress bar for
        ticks from compiled code (0 when no bar is shown).
      size: the static buffer length of ``chunk`` (`chunk_size`).
      device_ticks: the chunk ticks the bar itself, every step (`collect_chunk` with
        ``progress_bar``); otherwise the bar advances once per chunk.

    Returns:
      ``(last_state, buffers)`` with ``num_samples`` rows (``jnp`` arrays).
    """
    outs, done, c = [], 0, 0
    total = num_iterations(num_warmup, num_samples, thin)
    with progress(total, name, enabled=progress_bar, num_warmup=num_warmup) as bar:
        while done < num_samples:
            n = min(size, num_samples - done)
            warm = num_warmup if c == 0 else 0
            state, buf = chunk(c, state, warm, n, bar.token)
            outs.append(_tmap(lambda a: np.asarray(a)[:n], buf))
            if not device_ticks:
                bar.update(warm + n * thin)
            done, c = done + n, c + 1
        if bar.enabled:
            jax.block_until_ready(state)  # every tick delivered before the bar closes
    return state, _tmap(lambda *a: jnp.asarray(np.concatenate(a)), *outs)


# ------------------------------------------------------------------------------------------
# several chains
# ------------------------------------------------------------------------------------------
def check_chains(num_chains, chain_method, methods: Sequence[str] = CHAIN_METHODS) -> int:
    """``num_chains`` as an int >= 1 and ``chain_method`` one of ``methods``; ValueError
    otherwise."""
    if isinstance(num_chains, bool) or not isinstance(num_chains, (int, np.integer)) or num_chains < 1:
        raise ValueError(f"num_chains must be an int >= 1, got {num_chains!r}")
    if chain_method not in methods:
        names = ", ".join(repr(m) for m in methods[:-1]) + f" or {methods[-1]!r}"
        raise ValueError(f"chain_method must be {names}, got {chain_method!r}")
    return int(num_chains)


def unstack_chains(state, num_chains: int) -> list:
    """A stacked state (leading chain axis) -> a list of ``num_chains`` per-chain states."""
    return [_tmap(lambda a, i=i: a[i], state) for i in range(num_chains)]


def stack_chains(states: Sequence) -> Any:
    """Per-chain states -> one state with a leading chain axis (``None`` fields kept)."""
    return _tmap(lambda *a: jnp.stack(a), *states)


def map_chains(fn: Callable, keys, states: Sequence, chain_method: str = "sequential") -> list:
    """``[fn(keys[i], states[i]) for i]``, one chain after the other (``"sequential"``) or in
    the shared thread pool (``"parallel"``: JAX runs compiled programs outside the GIL, so the
    chains' steps overlap on a multi-core CPU)."""
    n = len(states)
    if chain_method == "parallel":
        return pool_map(lambda i: fn(keys[i], states[i]), range(n))
    return [fn(keys[i], states[i]) for i in range(n)]
