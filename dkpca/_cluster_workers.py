"""What the scheduler knows of a distributed cluster's workers, asked afresh."""

from __future__ import annotations

import time
from typing import Any

__all__ = ["cluster_workers", "live_workers"]

#: Worker states that hold their data and take tasks (a paused worker resumes by itself).
_LIVE = ("running", "paused")


def cluster_workers(client: Any) -> dict[str, dict[str, Any]]:
    """Return the scheduler's current information on every worker, by address.

    Asked of the scheduler on each call. ``client.scheduler_info(n_workers=-1)["workers"]``
    is not safe for this: it returns the client's cached copy after refreshing it, and the
    client's own periodic refresh (every ``distributed.client.scheduler-info-interval``,
    without the workers) can replace that copy in between, leaving no worker at all.

    Examples
    --------
    >>> from distributed import Client, LocalCluster
    >>> with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
    ...                   dashboard_address=None) as cluster, Client(cluster) as client:
    ...     [info["nthreads"] for info in cluster_workers(client).values()]
    [1]
    """
    return client.sync(client.scheduler.identity, n_workers=-1)["workers"]


def live_workers(client: Any, n_workers: int = 1, timeout: float = 60.0) -> dict[str, Any]:
    """Wait until the scheduler has ``n_workers`` live workers; return them, by address.

    Live: running, or paused for memory (it keeps its data and resumes by itself).

    ``client.wait_for_workers`` is not used: on a client of a ``LocalCluster`` it refreshes
    the cluster object's copy of the workers, and a worker that died just before, whose
    removal the cluster has not processed yet, then makes distributed's own status watcher
    fail (``KeyError`` on the dead address): the cluster stops tracking its workers and its
    ``close`` raises. This asks the scheduler alone.

    Raises
    ------
    TimeoutError
        When fewer than ``n_workers`` are live after ``timeout`` seconds.

    Examples
    --------
    >>> from distributed import Client, LocalCluster
    >>> with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
    ...                   dashboard_address=None) as cluster, Client(cluster) as client:
    ...     len(live_workers(client, 1, timeout=10))
    1
    """
    deadline = time.monotonic() + timeout
    while True:
        workers = {address: info for address, info in cluster_workers(client).items()
                   if info.get("status", "running") in _LIVE}
        if len(workers) >= n_workers:
            return workers
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(workers)} of {n_workers} Dask workers live after "
                               f"{timeout:g} s")
        time.sleep(0.1)
