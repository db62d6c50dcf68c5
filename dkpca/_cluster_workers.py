"""What the scheduler knows of a distributed cluster's workers, asked afresh."""

from __future__ import annotations

from typing import Any

__all__ = ["cluster_workers"]


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
