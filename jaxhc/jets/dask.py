"""The exact trellis over many jets on a Dask cluster (issue 24, part 2; the ``dask`` and
``hep`` extras: ``pip install "jaxhc[dask,hep]"``).

`solve_on_dask` sends partitions of jets to the workers of a ``distributed.Client`` and
returns one awkward record array per partition: a record for every jet, solved or not
(`jaxhc.jets.runs.solve_records`: `jaxhc.jets.to_awkward`'s compact per-jet results plus
``jet_id`` and ``status``). `JaxhcWorkerPlugin`, registered by `solve_on_dask` (or by you),
turns on float64 and JAX's persistent compilation cache in every worker, and counts the
programs each worker compiles (`worker_compile_counts`). Partitions are padded to shared
shapes (one leaf count ``n_max`` for all, bucketed batch layouts), so a worker compiles a
few programs for the whole run, not one per partition.

Works with any cluster a ``Client`` reaches: ``LocalCluster`` on one machine, or e.g.
``dask_jobqueue.SLURMCluster`` on a batch system (see the jets guide, docs/guides/jets.md,
"Scaling out").
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

__all__ = ["DASK_EXTRA_HINT", "JaxhcWorkerPlugin", "solve_on_dask", "worker_compile_counts"]

DASK_EXTRA_HINT = 'pip install "jaxhc[dask,hep]" (dask.distributed, awkward)'

_COMPILES = [0]  # per process: programs compiled since the plugin's setup

try:  # the plugin must be a WorkerPlugin for Client.register_plugin
    from distributed import WorkerPlugin as _WorkerPlugin
except ImportError:  # pragma: no cover - the extra is installed in CI
    _WorkerPlugin = object


def _distributed():
    try:
        import distributed
    except ImportError as e:
        raise ImportError(f"running on Dask needs the optional 'dask' extra: {DASK_EXTRA_HINT}") from e
    return distributed


def _count_compile(event, duration, **kw):
    if event == "/jax/core/compile/backend_compile_duration":
        _COMPILES[0] += 1


class JaxhcWorkerPlugin(_WorkerPlugin):
    """A ``distributed`` worker plugin: float64 on (``jax_enable_x64``; without it a worker
    would silently compute in float32), JAX's persistent compilation cache on
    (`jaxhc.enable_compilation_cache` with ``cache_dir``; ``False``: off), and a count of
    the programs the worker compiles. Register with ``client.register_plugin(...)``."""

    name = "jaxhc"

    def __init__(self, cache_dir=None):
        self.cache_dir = cache_dir

    def setup(self, worker=None):
        import jax

        jax.config.update("jax_enable_x64", True)
        if self.cache_dir is not False:
            import jaxhc

            jaxhc.enable_compilation_cache(self.cache_dir)
        from jax import monitoring

        if not getattr(JaxhcWorkerPlugin, "_listening", False):
            monitoring.register_event_duration_secs_listener(_count_compile)
            JaxhcWorkerPlugin._listening = True
        _COMPILES[0] = 0


def _as_padded(part):
    """A partition (awkward jets, a list of ``[N, 4]`` arrays, or ``(leaves_padded,
    n_leaves)``) as ``(leaves [B, N, 4], n_leaves)``, jets of any size."""
    from .hep import as_padded_jets as as_padded

    if isinstance(part, tuple) and len(part) == 2:
        lp, nl = as_padded(*part)
    else:
        lp, nl = as_padded(part, None)
    return np.asarray(lp, np.float64), np.asarray(nl).astype(np.int64)


def _solve_partition(energy, part, n_max, marginals, first_id, on_invalid="skip", min_leaves=1, max_leaves=None):
    """Worker task: one partition as awkward records, every jet of it once
    (`jaxhc.jets.runs.solve_records`: the jets in range solved, padded to ``n_max`` leaves;
    each other one with its ``status`` and ``reason``)."""
    from .runs import solve_records

    lp, nl = _as_padded(part)
    ids = np.arange(first_id, first_id + len(nl), dtype=np.int64) if first_id is not None else None
    rec = solve_records(
        energy,
        lp,
        nl,
        ids=ids,
        min_leaves=min_leaves,
        max_leaves=max_leaves,
        marginals=marginals,
        on_invalid=on_invalid,
        n_max=n_max,
    )
    return rec if ids is not None else rec[[f for f in rec.fields if f != "jet_id"]]


def solve_on_dask(
    client,
    energy,
    partitions: Sequence,
    *,
    n_max: Optional[int] = None,
    marginals: bool = False,
    cache_dir=None,
    register_plugin: bool = True,
    gather: bool = True,
    progress_bar: bool = True,
    on_invalid: str = "skip",
    min_leaves: int = 1,
    max_leaves: Optional[int] = None,
) -> List:
    """Solves the jets of every partition with the exact trellis on the Dask cluster of
    ``client``: every jet gets a record, solved or not (`jaxhc.jets.runs.solve_records`).

    Args:
      client: a ``distributed.Client``.
      energy: a `jaxhc.trellis.Energy` over four-momenta (it is pickled to the workers).
      partitions: a sequence of partitions, each a jagged awkward array of jets, a list of
        ``[N, 4]`` arrays or a ``(leaves_padded, n_leaves)`` pair, or ``dask.delayed`` objects
        producing one (e.g. reading a parquet file on the worker); or a ``dask.bag.Bag`` whose
        partitions are lists of jets; or a ``dask_awkward.Array`` of jets (its partitions are
        read on the workers through ``to_delayed``, never through ``map_partitions``, so no
        typetracer pass is involved; pass ``n_max``). dask-awkward pins an older dask than
        the ``dask`` extra installs, so it is not part of the extra: checked with dask
        2025.3.1 and dask-awkward 2026.2.1 (identical log Z to `solve_batch`).
      n_max: the leaf count the solved jets of every partition are padded to, so that all
        partitions share compiled programs (default: the largest jet in the leaf range when
        the partitions are concrete; with delayed partitions, pass it; a jet in range above
        it raises ``ValueError``).
      cache_dir: the workers' persistent compilation cache (`jaxhc.enable_compilation_cache`;
        ``False``: none).
      register_plugin: register `JaxhcWorkerPlugin` first (float64, cache, compile counts).
      gather: return the records (default); ``False``: the futures.
      progress_bar: with ``gather``, a tqdm bar over the partitions as they finish (on the
        client; the Dask dashboard shows the workers' side).
      on_invalid: ``"skip"`` (default): a jet in range that fails the energy's checks gets
        a record with ``valid=False``, ``status="invalid"``, NaN values and its ``reason``
        (the others are solved); ``"raise"``: its partition's task raises
        `jaxhc.trellis.InvalidProblemsError` naming every bad jet of that partition (as does
        a partition whose jets in range all fail, under both).
      min_leaves, max_leaves: the leaf range solved (default ``1 ..
        jaxhc.trellis.MAX_EXACT_LEAVES``); a jet outside it gets a record with
        ``status="outside_leaf_range"``, one above the exact limit ``"above_exact_limit"``.

    Returns:
      one awkward record array per partition, in order, a record per jet (the fields of
      `jaxhc.jets.runs.account_records`), with ``jet_id`` (the jet's index over all
      partitions, when the partition sizes are known on the client).
    """
    _distributed()
    from ..trellis import Energy
    from ..trellis.invalid import check_on_invalid
    from .runs import check_leaf_range

    check_on_invalid(on_invalid)
    lo, hi = check_leaf_range(min_leaves, max_leaves)

    if not isinstance(energy, Energy):
        raise TypeError(f"energy must be a jaxhc.trellis Energy, got {type(energy).__name__}")
    if hasattr(partitions, "to_delayed") and hasattr(partitions, "npartitions"):  # a dask bag / dask-awkward
        partitions = partitions.to_delayed()
    partitions = list(partitions)
    if not partitions:
        raise ValueError("partitions must hold at least one partition")
    delayed = [hasattr(p, "__dask_graph__") for p in partitions]
    first_ids: List[Optional[int]] = []
    if not any(delayed):
        sized = [_as_padded(p) for p in partitions]
        if n_max is None:
            in_range = [nl[(nl >= lo) & (nl <= hi)] for _, nl in sized]
            n_max = max([int(n.max()) for n in in_range if len(n)], default=1)
        starts = np.concatenate([[0], np.cumsum([len(nl) for _, nl in sized])[:-1]])
        first_ids = [int(s) for s in starts]
        partitions = [(lp, nl) for lp, nl in sized]
    else:
        if n_max is None:
            raise ValueError("n_max is required with delayed partitions (the largest number of leaves of a jet)")
        first_ids = [None] * len(partitions)
    if register_plugin:
        client.register_plugin(JaxhcWorkerPlugin(cache_dir))
    futures = []
    for part, first in zip(partitions, first_ids):
        if hasattr(part, "__dask_graph__"):
            part = client.compute(part)
        futures.append(
            client.submit(_solve_partition, energy, part, n_max, marginals, first, on_invalid, lo, hi, pure=False)
        )
    if not gather:
        return futures
    if progress_bar:
        from distributed import as_completed
        from tqdm.auto import tqdm

        with tqdm(total=len(futures), desc="partitions", unit="part", leave=False) as bar:
            for _ in as_completed(futures):
                bar.update(1)
    return client.gather(futures)


def worker_compile_counts(client) -> dict:
    """``{worker address: programs compiled}`` since `JaxhcWorkerPlugin` was set up there."""
    return client.run(_compile_count)


def _compile_count() -> int:
    return _COMPILES[0]
