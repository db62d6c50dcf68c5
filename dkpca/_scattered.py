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
  released after it; inside :func:`inputs_sent_once` (a fit), the input's blocks are sent
  once for all its computations.

Values that many tasks share (a model's basis in its pre-image tasks, the folds of a
leave-one-out) go the same way when the graph holds them once, under a key from
:func:`shared`. Blocks under :data:`SCATTER_BYTES` in all stay in the graph (a scatter costs
a round trip). A scattered block has one copy, on one worker: a computation that fails after
one of its blocks was lost with a worker is run again, the lost blocks sent again (at most
:data:`~dkpca._worker_loss.MAX_RECOVERIES` times); an error with every block still in place
is raised at once.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import uuid
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import dask
import numpy as np
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer
from dask.sizeof import sizeof

from ._tile_holders import active_client
from ._worker_loss import MAX_RECOVERIES

__all__ = ["MODEL_VIEW", "SCATTER_BYTES", "computed_with_blocks_scattered", "inputs_sent_once",
           "shared"]

logger = logging.getLogger(__name__)

#: Name prefix of a model's own view blocks (kept on the cluster between computations).
MODEL_VIEW = "model-view"
#: In-memory blocks of a computation, in bytes, from which they are scattered.
SCATTER_BYTES = 1 << 20

_VIEWS = ("view-", MODEL_VIEW + "-")

#: A model's scattered blocks: (client, the array's memory, the block's place in it) → a weak
#: reference to the array, and the future.
_kept: dict[tuple, Any] = {}
_kept_lock = threading.RLock()  # a collected array's entry is dropped from inside a lookup
#: Inside :func:`inputs_sent_once`: the input's scattered blocks, as in :data:`_kept`.
_inputs: contextvars.ContextVar[dict | None] = contextvars.ContextVar("dkpca_inputs",
                                                                      default=None)


def computed_with_blocks_scattered(collections: tuple, compute: Callable[..., tuple],
                                   **kwargs: Any) -> tuple:
    """Return ``compute(*collections, **kwargs)``, their in-memory blocks scattered under a client.

    ``compute`` is called on the collections, changed or not, as ``dask.compute`` is. Without
    a ``distributed.Client`` (see :func:`~dkpca._tile_holders.active_client`), with a
    ``scheduler`` of the caller's choice in ``kwargs``, and for collections with fewer than
    :data:`SCATTER_BYTES` of in-memory blocks, they are computed as they are.

    Examples
    --------
    >>> import dask, numpy as np
    >>> from distributed import Client, LocalCluster
    >>> from dkpca.io._views import view_blocks
    >>> X = view_blocks(np.ones((100_000, 4)), (50_000, -1))  # 3 MiB in two blocks
    >>> with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster:
    ...     with Client(cluster):
    ...         computed_with_blocks_scattered((X.sum(),), dask.compute)
    (np.float64(400000.0),)
    """
    client = active_client()
    if client is None or "scheduler" in kwargs:
        return compute(*collections, **kwargs)
    for _ in range(MAX_RECOVERIES):
        sent, futures = _scattered(client, collections)
        try:
            return compute(*sent, **kwargs)
        except Exception as err:
            lost = [f for f in futures if f.status != "finished"]
            if not lost:
                raise
            logger.warning("%d in-memory blocks lost with a worker (%s: %s); sending them "
                           "again", len(lost), type(err).__name__, err)
    sent, _ = _scattered(client, collections)
    return compute(*sent, **kwargs)


def shared(value: Any, *, kept: bool = False) -> Any:
    """Return ``value`` as one key of the next graph, which every task using it refers to.

    Passed to ``dask.delayed`` calls, a value is otherwise copied into each task. Under a
    client the key's value is scattered beside the graph (see the module); ``kept`` marks a
    model's own value, kept on the cluster while it lives.

    Examples
    --------
    >>> import dask, numpy as np
    >>> table = shared(np.arange(4))
    >>> dask.compute([dask.delayed(np.sum)(table), dask.delayed(np.max)(table)])
    ([np.int64(6), np.int64(3)],)
    """
    prefix = MODEL_VIEW if kept else "view"
    return dask.delayed(value, name=f"{prefix}-{uuid.uuid4().hex}", traverse=False)


def _scattered(client: Any, collections: tuple) -> tuple[tuple, list]:
    """Return the collections with their view blocks replaced by futures, and the futures."""
    layers = {name: blocks for c in collections if dask.is_dask_collection(c)
              for name, blocks in _view_blocks(c.__dask_graph__())}
    if sum(_nbytes(block) for blocks in layers.values() for block in blocks.values()) \
            < SCATTER_BYTES:
        return collections, []
    futures = _futures(client, layers)
    return (tuple(_with_futures(c, layers, futures) if dask.is_dask_collection(c) else c
                  for c in collections), list(futures.values()))


def _view_blocks(graph: Any) -> list[tuple[str, dict]]:
    """Return each layer's in-memory values to scatter, by key.

    ``view_blocks``'s numpy blocks and :func:`shared`'s values, found by their keys' names: an
    optimised graph (``to_delayed``) renames the layer and wraps each value in a ``DataNode``.
    """
    if not isinstance(graph, HighLevelGraph):
        return []
    found = []
    for name, layer in graph.layers.items():
        if not isinstance(layer, MaterializedLayer):
            continue
        blocks = {key: _value(key, value) for key, value in layer.items()
                  if _name(key).startswith(_VIEWS)}
        blocks = {key: block for key, block in blocks.items() if block is not None}
        if blocks:
            found.append((name, blocks))
    return found


def _name(key: Any) -> str:
    """Return a graph key's name: an array block's ``("name", i, j)`` or a delayed's own."""
    return str(key[0] if isinstance(key, tuple) else key)


def _value(key: Any, value: Any) -> Any:
    """Return the value a graph holds under ``key`` (bare or in a ``DataNode``), or None.

    None for a task: ``view_blocks``'s sparse blocks are tasks on a whole matrix.
    """
    if type(value).__name__ == "DataNode":
        value = value.value
    if type(value) is np.ndarray or (isinstance(key, str) and not callable(value)
                                     and type(value).__name__ not in ("Task", "Alias")):
        return value
    return None


def _nbytes(value: Any) -> int:
    """Bytes of an array, or of an object's attributes (``sizeof`` alone sees its shell)."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    return sizeof(getattr(value, "__dict__", value))


def _futures(client: Any, layers: dict[str, dict]) -> dict:
    """One future per block key: found where it was kept, else scattered (and kept if it may)."""
    futures, send, keep_in = {}, {}, {}
    # An in-process worker holds the very array scattered to it, which would keep the model's
    # array, and so its entry here, alive for ever; a scatter there moves nothing anyway.
    local = str(client.scheduler.address).startswith("inproc://")
    inputs = _inputs.get()
    with _kept_lock:
        for blocks in layers.values():
            for key, block in blocks.items():
                name, place = _name(key), _place(client, block)
                store = (_kept if name.startswith(MODEL_VIEW) and not local
                         else inputs if isinstance(key, tuple) and name.startswith("view-")
                         else None)
                if store is None or place is None:  # sent with this computation alone
                    send[key] = block
                    continue
                owner, found = store.get(place, (None, None))
                # the same array (its identity not taken over), the same client (likewise), and
                # the block still on the cluster
                if (found is not None and owner() is _root(block) and found.client is client
                        and found.status == "finished"):
                    futures[key] = found
                else:
                    send[key], keep_in[key] = block, (store, place)
        if send:
            keys = list(send)
            for key, future in zip(keys, client.scatter([send[k] for k in keys], hash=False),
                                   strict=True):
                futures[key] = future
                if key in keep_in:
                    _keep(*keep_in[key], future, send[key])
    return futures


@contextlib.contextmanager
def inputs_sent_once() -> Iterator[None]:
    """Keep the input's blocks that computations in the block scatter, until the block ends.

    A fit computes over its data several times (incomplete Cholesky once per round of pivots,
    Nyström three times): inside this block in-memory rows go to the cluster once, and are
    released at its end. Only ``view_blocks``'s blocks: values from :func:`shared` may change
    between computations, and go with each.

    Examples
    --------
    >>> with inputs_sent_once():
    ...     _inputs.get()
    {}
    """
    outer = _inputs.get()
    token = _inputs.set({} if outer is None else outer)
    try:
        yield
    finally:
        _inputs.reset(token)


def _root(value: Any) -> Any:
    """Return the object whose life a kept value follows: an array's memory owner, or itself."""
    while isinstance(value, np.ndarray) and isinstance(value.base, np.ndarray):
        value = value.base
    return value


def _place(client: Any, value: Any) -> tuple | None:
    """Where ``value`` lies: its owner's identity, and an array's address, shape and dtype.

    None for an object that no weak reference can follow (its identity could be reused).
    """
    root = _root(value)
    try:
        weakref.ref(root)
    except TypeError:
        return None
    if not isinstance(value, np.ndarray):
        return (id(client), id(root))
    return (id(client), id(root), value.__array_interface__["data"][0], value.shape,
            value.strides, value.dtype.str)


def _keep(store: dict, place: tuple, future: Any, value: Any) -> None:
    """Keep ``future`` in ``store`` beside a weak reference to the object holding ``value``.

    A model's entry (in :data:`_kept`) goes when that object is collected, which releases the
    block on the cluster; a fit's inputs go with the fit's :func:`inputs_sent_once`.
    """
    root = _root(value)
    if store is _kept and place not in store:
        weakref.finalize(root, _forget, place)
    store[place] = weakref.ref(root), future


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
