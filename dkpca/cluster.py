"""Dask clusters for the command line: an embedded ``LocalCluster`` or a running scheduler.

The library itself never starts a cluster; it uses whatever scheduler is active. The ``dkpca``
command calls :func:`connect` to get one.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

__all__ = ["connect"]

logger = logging.getLogger(__name__)

#: Worker environment: BLAS single-threaded, dask threads supply the parallelism.
WORKER_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@contextlib.contextmanager
def connect(
    scheduler: str | None = None,
    *,
    n_workers: int | None = None,
    threads_per_worker: int | None = None,
    memory_limit: str | int = "auto",
    processes: bool = True,
) -> Iterator[object]:
    """Yield a ``distributed.Client``: to ``scheduler`` if given, else to an embedded cluster.

    Parameters
    ----------
    scheduler : str, optional
        Address of a running scheduler (``tcp://host:8786``). ``None`` starts a
        ``LocalCluster`` on this machine and closes it on exit.
    n_workers, threads_per_worker, memory_limit, processes
        Embedded cluster settings (``LocalCluster``'s parameters).

    Examples
    --------
    >>> with connect(n_workers=1, processes=False) as client:  # doctest: +SKIP
    ...     print(client)
    """
    from distributed import Client, LocalCluster

    if scheduler is not None:
        with Client(scheduler) as client:
            logger.info("connected to scheduler %s", scheduler)
            yield client
        return
    nanny_options = {"env": WORKER_ENV} if processes else {}  # in-process workers share ours
    with (
        LocalCluster(
            n_workers=n_workers,
            threads_per_worker=threads_per_worker,
            memory_limit=memory_limit,
            processes=processes,
            dashboard_address=":0",
            **nanny_options,
        ) as cluster,
        Client(cluster) as client,
    ):
        logger.info("embedded cluster: %s", cluster)
        yield client
