"""In-memory blocks sent to a cluster beside a task graph, not inside it.

Under a ``distributed.Client``, an in-memory array made into a dask array
(:func:`~dkpca.io._views.view_blocks`) travels inside every graph that uses it: pickled with the
graph, held by the scheduler, and sent again with each computation. A transform of 30,000 rows
by a model fitted on 30,000 sent a 30 MiB graph each call (distributed warns: "Sending large
graph"), the model's training rows among it. :func:`computed_with_blocks_scattered` scatters
such blocks in one call beside the graph instead:

- a model's own arrays (its training rows and coefficients: blocks named by
  :data:`MODEL_VIEW`) are sent once per client and kept on the cluster while the array lives,
  so that the next transform finds them there (on worker processes: an in-process cluster's
  scatter moves nothing, and it is made each time);
- other blocks (new rows to transform, data being fitted) are sent with the computation and
  released after it.

Blocks under :data:`SCATTER_BYTES` in all stay in the graph (a scatter costs a round trip). A
scattered block has one copy, on one worker: a computation that fails after one of its blocks
was lost with a worker is run again, the lost blocks sent again (at most
:data:`~dkpca._worker_loss.MAX_RECOVERIES` times); an error with every block still in place is
raised at once.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

import dask
import numpy as np
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from ._tile_holders import active_client
from ._worker_loss import MAX_RECOVERIES

__all__ = ["MODEL_VIEW", "SCATTER_BYTES", "computed_with_blocks_scattered"]

logger = logging.getLogger(__name__)

#: Name prefix of a model's own view blocks (kept on the cluster between computations).
MODEL_VIEW = "model-view"
#: In-memory blocks of a computation, in bytes, from which they are scattered.
SCATTER_BYTES = 1 << 20

_VIEWS = ("view-", MODEL_VIEW + "-")

#: A model's scattered blocks: (client, the array's memory, the block's place in it) → future.
_kept: dict[tuple, Any] = {}
_kept_lock = threading.RLock()  # a collected array's entry is dropped from inside a lookup


def computed_with_blocks_scattered(collections: tuple, compute: Callable[[tuple], tuple]) -> tuple:
    """Return ``compute(collections)``, their in-memory blocks scattered under a client.

    ``compute`` takes the collections, changed or not, and computes them. Without a
    ``distributed.Client`` (see :func:`~dkpca._tile_holders.active_client`), and for
    collections with fewer than :data:`SCATTER_BYTES` of in-memory blocks, they are computed
    as they are.

    Examples
    --------
    >>> import dask, numpy as np
    >>> from distributed import Client, LocalCluster
    >>> from dkpca.io._views import view_blocks
    >>> X = view_blocks(np.ones((100_000, 4)), (50_000, -1))  # 3 MiB in two blocks
    >>> with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster:
    ...     with Client(cluster):
    ...         computed_with_blocks_scattered((X.sum(),), lambda c: dask.compute(*c))
    (np.float64(400000.0),)
    """
    client = active_client()
    if client is None:
        return compute(collections)
    for _ in range(MAX_RECOVERIES):
        sent, futures = _scattered(client, collections)
        try:
            return compute(sent)
        except Exception as err:
            lost = [f for f in futures if f.status != "finished"]
            if not lost:
                raise
            logger.warning("%d in-memory blocks lost with a worker (%s: %s); sending them "
                           "again", len(lost), type(err).__name__, err)
    sent, _ = _scattered(client, collections)
    return compute(sent)


def _scattered(client: Any, collections: tuple) -> tuple[tuple, list]:
    """Return the collections with their view blocks replaced by futures, and the futures."""
    layers = {name: blocks for c in collections if dask.is_dask_collection(c)
              for name, blocks in _view_blocks(c.__dask_graph__())}
    if sum(block.nbytes for blocks in layers.values() for block in blocks.values()) < SCATTER_BYTES:
        return collections, []
    futures = _futures(client, layers)
    return (tuple(_with_futures(c, layers, futures) if dask.is_dask_collection(c) else c
                  for c in collections), list(futures.values()))


def _view_blocks(graph: Any) -> list[tuple[str, dict]]:
    """Return each layer's in-memory numpy blocks made by ``view_blocks``, by key.

    Found by their keys' names: an optimised graph (``to_delayed``) renames the layer and wraps
    each block in a ``DataNode``.
    """
    if not isinstance(graph, HighLevelGraph):
        return []
    found = []
    for name, layer in graph.layers.items():
        if not isinstance(layer, MaterializedLayer):
            continue
        blocks = {key: _block(value) for key, value in layer.items()
                  if isinstance(key, tuple) and str(key[0]).startswith(_VIEWS)}
        blocks = {key: block for key, block in blocks.items() if block is not None}
        if blocks:
            found.append((name, blocks))
    return found


def _block(value: Any) -> np.ndarray | None:
    """Return the numpy array a graph holds as ``value`` (bare or in a ``DataNode``), or None."""
    if type(value).__name__ == "DataNode":
        value = value.value
    return value if type(value) is np.ndarray else None


def _futures(client: Any, layers: dict[str, dict]) -> dict:
    """One future per block key: a model's found in :data:`_kept` or kept there, the rest new."""
    futures, send, places = {}, {}, {}
    # An in-process worker holds the very array scattered to it, which would keep the model's
    # array, and so its entry here, alive for ever; a scatter there moves nothing anyway.
    keeps = not str(client.scheduler.address).startswith("inproc://")
    with _kept_lock:
        for name, blocks in layers.items():
            for key, block in blocks.items():
                if not (keeps and name.startswith(MODEL_VIEW)):
                    send[key] = block
                    continue
                place = (id(client), *_memory(block))
                kept = _kept.get(place)
                if kept is not None and kept.status == "finished":
                    futures[key] = kept
                else:
                    send[key], places[key] = block, place
        if send:
            keys = list(send)
            for key, future in zip(keys, client.scatter([send[k] for k in keys], hash=False),
                                   strict=True):
                futures[key] = future
                if key in places:
                    _keep(places[key], future, send[key])
    return futures


def _root(block: np.ndarray) -> np.ndarray:
    """Return the array that owns ``block``'s memory (``block`` itself if it owns it)."""
    while isinstance(block.base, np.ndarray):
        block = block.base
    return block


def _memory(block: np.ndarray) -> tuple:
    """Where ``block`` lies: its array's identity, and its address, shape, strides and dtype."""
    return (id(_root(block)), block.__array_interface__["data"][0], block.shape, block.strides,
            block.dtype.str)


def _keep(place: tuple, future: Any, block: np.ndarray) -> None:
    """Keep ``future`` while the array holding ``block`` lives (its identity is in ``place``)."""
    if place not in _kept:
        weakref.finalize(_root(block), _forget, place)
    _kept[place] = future


def _forget(place: tuple) -> None:
    with _kept_lock:
        _kept.pop(place, None)


def _with_futures(collection: Any, layers: dict[str, dict], futures: dict) -> Any:
    """Return ``collection`` with the blocks of ``layers`` replaced by their ``futures``."""
    graph = collection.__dask_graph__()
    if not isinstance(graph, HighLevelGraph) or not layers.keys() & graph.layers.keys():
        return collection
    replaced = {name: (MaterializedLayer({**dict(layer), **{key: futures[key]
                                                            for key in layers[name]}})
                       if name in layers else layer)
                for name, layer in graph.layers.items()}
    rebuild, args = collection.__dask_postpersist__()
    return rebuild(HighLevelGraph(replaced, graph.dependencies), *args)
