"""A pass of randomized linear PCA as one task per group of stripes, its blocks read inside.

:mod:`dkpca._pca_randomized` gives ``X_cᵀ (X_c V)`` (tall data) in one pass by holding each
row stripe of blocks while its ``P_i = X_c,i V`` forms. Built from one graph key per block, a
pass costs several tasks per block (the read, two products, their sums): at 100 blocks of
2,500 × 2,500 float32 on two single-threaded workers, the scheduler and the workers' event loops
took about a quarter of the machine's CPU (BENCHMARKS.md §11).

Where each block is *read* by tasks of its own (a Zarr store or any other source: no task is
shared between blocks, and the graph carries at most :data:`CARRIED_BYTES` of literal data), a
pass is instead one task per group of stripes. Each task runs the graph of each of its blocks
itself (``dask.local.get_sync``), one block at a time, holds the stripe while the stripe's
partial product forms, and returns its share of the pass; the shares are summed in a tree. The
tasks of a pass grow with the threads of the cluster (:data:`GROUPS_PER_THREAD` each), not with
the blocks; ``V`` and the means go to a worker once a pass. Wide data (``X_c (X_cᵀ U)``) use
feature stripes the same way.

Memory: a task holds one stripe (in buffers it reuses for each of its stripes:
:class:`HeldStripe`; while it reads, the blocks it frees stay in its heap for the next one:
:func:`dkpca._heap.freed_blocks_reused`), so a stripe must fit in :data:`HELD_SHARE` of the memory a
worker's thread can fill before the worker pauses (:func:`free_memory_per_thread`); otherwise
the block-per-key pass is used.
A failed task (a worker lost) is recomputed from the source like any other.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import dask
import numpy as np
import psutil
from dask._task_spec import Alias, DataNode, convert_legacy_graph
from dask.local import get_sync
from dask.sizeof import sizeof

from ._cluster_workers import cluster_workers
from ._device import aligned_operand
from ._heap import freed_blocks_reused
from ._pca_products import centred_rtimes, centred_times
from ._tile_holders import active_client
from .blocked import scheduler_threads

__all__ = ["CARRIED_BYTES", "GROUPS_PER_THREAD", "HELD_SHARE", "HeldStripe", "StripeGroup",
           "free_memory_per_thread", "gram_group", "scatter_group", "stripe_groups"]

#: Most bytes of literal data a graph may carry for its blocks to be read inside the tasks:
#: blocks held as values (``from_array``, a persisted array) are sent, not read.
CARRIED_BYTES = 2**20

#: Share of :func:`free_memory_per_thread` that a task's stripe may take (the rest: the
#: block being decoded, the vectors, the partial product and the products' buffers).
HELD_SHARE = 0.7

#: Groups of stripes a pass makes per thread of the cluster: a few, so that a slow group does
#: not leave the other threads idle at the end of the pass.
GROUPS_PER_THREAD = 4


@dataclass(frozen=True)
class StripeGroup:
    """The stripes one task multiplies: for each of their blocks, its key and the graph that reads it.

    ``keys[s][t]`` is block ``t`` of stripe ``s`` (along the stripe: the feature blocks of a
    row stripe, the row blocks of a feature stripe) and ``graphs[s][t]`` the tasks it needs;
    ``stripes[s]`` is the stripe's index.

    Examples
    --------
    >>> import dask.array as da
    >>> groups = stripe_groups(da.ones((6, 4), chunks=(2, 2)), by_rows=True, threads=1)
    >>> [g.stripes for g in groups], groups[0].read(0, 1).shape
    ([(0,), (1,), (2,)], (2, 2))
    """

    graphs: tuple[tuple[dict, ...], ...]
    keys: tuple[tuple[Hashable, ...], ...]
    stripes: tuple[int, ...]

    def read(self, s: int, t: int) -> object:
        """Block ``t`` of stripe ``s``, computed here from the source."""
        return get_sync(self.graphs[s][t], self.keys[s][t])


def _is_future(value: object) -> bool:
    distributed = sys.modules.get("distributed")
    return distributed is not None and isinstance(value, distributed.Future)


def _reachable(graph: dict, key: Hashable) -> set:
    """Keys that computing ``key`` runs or reads, itself included (and any outside ``graph``)."""
    seen, stack = set(), [key]
    while stack:
        k = stack.pop()
        if k not in seen:
            seen.add(k)
            if k in graph:
                stack.extend(graph[k].dependencies)
    return seen


def stripe_groups(array: object, by_rows: bool, threads: int) -> list[StripeGroup] | None:
    """Group ``array``'s row (or feature) stripes, or return ``None`` if its blocks are not read.

    ``None`` when a task of the graph serves more than one block (a rechunk, a shared
    reduction: it would run once per group), when the graph carries more than
    :data:`CARRIED_BYTES` of literal data, or when it refers to futures (a persisted array:
    its blocks already lie on the workers). At most ``GROUPS_PER_THREAD * threads`` groups of
    consecutive stripes, of as equal counts as can be.

    Examples
    --------
    >>> import dask.array as da
    >>> X = da.ones((100, 4), chunks=(10, 2))
    >>> len(stripe_groups(X, by_rows=True, threads=2))  # 10 row stripes in 8 groups
    8
    >>> stripe_groups(X - X.mean(axis=0), by_rows=True, threads=2) is None  # a shared mean
    True
    """
    graph = dict(array.__dask_graph__())
    if any(_is_future(value) for value in graph.values()):
        return None
    graph = convert_legacy_graph(graph)
    carried = sum(sizeof(node.value) for node in graph.values() if isinstance(node, DataNode))
    if carried > CARRIED_BYTES:
        return None
    keys = array.__dask_keys__()
    grid = [list(row) for row in keys] if by_rows else [list(col) for col in zip(*keys, strict=True)]
    owners: dict = {}
    graphs = []
    for stripe in grid:
        graphs.append([])
        for key in stripe:
            reached = _reachable(graph, key)
            if not reached <= graph.keys():
                return None  # computed elsewhere
            for k in reached:
                node = graph[k]
                if not isinstance(node, DataNode | Alias) and owners.setdefault(k, key) != key:
                    return None  # a task shared by two blocks
            graphs[-1].append({k: graph[k] for k in reached})
    count = min(len(grid), GROUPS_PER_THREAD * max(1, threads))
    return [StripeGroup(tuple(tuple(graphs[s]) for s in members),
                        tuple(tuple(grid[s]) for s in members),
                        tuple(int(s) for s in members))
            for members in np.array_split(np.arange(len(grid)), count)]


class HeldStripe:
    """Buffers that a task copies its stripes' blocks into, reused from one stripe to the next.

    A block read from its source lands in newly mapped memory, which the kernel must find and
    zero (Dask's workers return freed blocks to the system). A plain read frees each block at
    once, and the next one reuses its pages. A task that holds a stripe of blocks while it reads
    the next does not: the stripe's freed pages are taken by the page cache in the meantime,
    and on a machine whose memory is full of it, numpy's huge-page requests stall in
    compaction (BENCHMARKS.md §11: at 40 GB, 24 times the stalls of a plain read, and a pass
    1.5-1.7 times as long as the read). Copying each block into its slot of the stripe before
    keeps one stripe's pages for the whole task, at the price of one copy of each block.
    Blocks that are not numpy arrays (sparse, another device's) are held as read.

    Examples
    --------
    >>> held = HeldStripe()
    >>> first = held.hold(0, np.ones((2, 2)))
    >>> held.hold(0, np.zeros((2, 2))) is first, float(first.sum())
    (True, 0.0)
    """

    def __init__(self) -> None:
        self._slots: dict[int, np.ndarray] = {}

    def hold(self, slot: int, block: object) -> object:
        """``block``'s values in slot ``slot``'s buffer (a new one where the shape changed)."""
        if type(block) is not np.ndarray:
            return block
        buffer = self._slots.get(slot)
        if buffer is None or buffer.shape != block.shape or buffer.dtype != block.dtype:
            buffer = self._slots[slot] = np.empty(block.shape, dtype=block.dtype)
        np.copyto(buffer, block)
        return buffer


def scatter_group(group: StripeGroup, V: np.ndarray, mean: np.ndarray, cols: Sequence[int],
                  dtype: np.dtype) -> np.ndarray:
    """``Σ_i X_c,iᵀ (X_c,i V)`` over the group's row stripes ``i``: ``d × b``, float64.

    ``cols`` are the feature blocks' bounds. Each block is read once; a stripe's blocks are
    held until its ``P_i`` is complete.
    """
    V, mean = aligned_operand(V, dtype), aligned_operand(mean)
    bounds = list(itertools.pairwise(cols))
    out = np.zeros((len(mean), V.shape[1]))
    held = HeldStripe()
    with freed_blocks_reused():
        for s in range(len(group.keys)):
            blocks, P = [], 0.0
            for t, (a, b) in enumerate(bounds):
                blocks.append(held.hold(t, group.read(s, t)))
                P = P + centred_times(blocks[-1], V[a:b], mean[a:b], dtype)
            for block, (a, b) in zip(blocks, bounds, strict=True):
                out[a:b] += centred_rtimes(block, P, mean[a:b], dtype)
    return out


def gram_group(group: StripeGroup, U: np.ndarray, mean: np.ndarray, rows: Sequence[int],
               cols: Sequence[int], dtype: np.dtype) -> np.ndarray:
    """``Σ_j X_c,:j (X_c,:jᵀ U)`` over the group's feature stripes ``j``: ``n × b``, float64.

    ``rows`` and ``cols`` are the blocks' bounds. Each block is read once; a stripe's blocks
    are held until its ``T_j`` is complete.
    """
    mean = aligned_operand(mean)
    bounds = list(itertools.pairwise(rows))
    out = np.zeros(U.shape)
    held = HeldStripe()
    with freed_blocks_reused():
        for s, j in enumerate(group.stripes):
            mu = mean[cols[j] : cols[j + 1]]
            blocks, T = [], 0.0
            for t, (a, b) in enumerate(bounds):
                blocks.append(held.hold(t, group.read(s, t)))
                T = T + centred_rtimes(blocks[-1], U[a:b], mu, dtype)
            for block, (a, b) in zip(blocks, bounds, strict=True):
                out[a:b] += centred_times(block, T, mu, dtype)
    return out


def free_memory_per_thread() -> int:
    """Memory per thread that the active cluster's workers can still fill before they pause.

    The least, over the workers with a memory limit, of (``pause`` × limit - the process's
    memory) / threads, with distributed's ``distributed.worker.memory.pause`` fraction (0.8 by
    default; 0.95, where the workers terminate, if pausing is off). Without a distributed
    client or limits: this machine's available memory shared by the scheduler's threads.

    Examples
    --------
    >>> free_memory_per_thread() > 0
    True
    """
    client = active_client()
    workers = cluster_workers(client) if client is not None else {}
    pause = dask.config.get("distributed.worker.memory.pause", 0.8) or 0.95
    free = [(pause * w["memory_limit"] - w.get("metrics", {}).get("memory", 0))
            // max(1, w["nthreads"]) for w in workers.values() if w.get("memory_limit")]
    if free:
        return max(0, int(min(free)))
    return psutil.virtual_memory().available // scheduler_threads()
