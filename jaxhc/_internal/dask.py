"""What running on Dask needs below the algorithms: the ``dask`` extra imported with an error
naming it, and a client checked (``distributed`` is imported only here, lazily)."""

from __future__ import annotations

__all__ = ["DASK_HINT", "check_client", "distributed"]

DASK_HINT = 'pip install "jaxhc[dask]"'


def distributed():
    """The ``distributed`` module, or an ImportError naming the ``dask`` extra."""
    try:
        import distributed as dist
    except ImportError as e:
        raise ImportError(f"running on Dask needs the optional 'dask' extra: {DASK_HINT}") from e
    return dist


def check_client(client, name: str = "client") -> int:
    """The number of workers of a ``distributed.Client`` (at least 1); ``TypeError`` naming
    ``name`` for anything else."""
    dist = distributed()
    if not isinstance(client, dist.Client):
        raise TypeError(f"{name} must be a distributed.Client, got {type(client).__name__}")
    workers = len(client.scheduler_info().get("workers", {}))
    return max(workers, 1)
