"""The Zarr data a model reads lazily, checked before the model is saved.

A model fitted on a Zarr path keeps lazy references to that data (its kernel basis, for
instance), and a model loaded lazily reads its own store. Saving over either would leave the
model in memory reading chunks that are gone, which Zarr reads as its fill value; saving a
model whose data was deleted would seal such values with valid checksums. :func:`lazy_sources`
finds the arrays, :func:`refuse_overlap` and :func:`require_present` refuse those saves.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import dask
import numpy as np
import zarr

from dkpca._model_integrity import _describe, _VerifiedChunks
from dkpca.io._location import Location, filesystem_place

__all__ = ["lazy_sources", "refuse_overlap", "require_present"]


def lazy_sources(*values: Any) -> list[zarr.Array]:
    """Return the Zarr arrays that the lazy (dask) arrays within ``values`` read from.

    Walks fitted attributes (estimators' ``vars``, dataclasses such as the kernel basis,
    mappings and sequences) for dask collections, and finds in their graphs the Zarr arrays
    that ``dask.array.from_zarr`` (training data given as a Zarr path) and a lazily loaded
    model (:class:`_VerifiedChunks`) keep as graph values.
    """
    found: dict[int, zarr.Array] = {}
    seen: set[int] = set()

    def walk(value: Any) -> None:
        if id(value) in seen or value is None or isinstance(value, str | np.ndarray):
            return
        seen.add(id(value))
        if dask.is_dask_collection(value):
            for node in dict(value.__dask_graph__()).values():
                node = getattr(node, "value", node)  # a graph's DataNode holds the array
                if isinstance(node, _VerifiedChunks):
                    node = node.array
                if isinstance(node, zarr.Array):
                    found[id(node)] = node
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            for field in dataclasses.fields(value):
                walk(getattr(value, field.name))
        elif isinstance(value, Mapping):
            for item in value.values():
                walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)
        elif hasattr(value, "get_params"):  # an estimator (a FieldModel's model_)
            walk(vars(value))

    for value in values:
        walk(value)
    return list(found.values())


def _source_place(array: zarr.Array) -> str | None:
    """Where ``array`` is stored, as :attr:`dkpca.io.Location.place` writes it (``None``: in memory)."""
    root = getattr(array.store, "root", None)  # a LocalStore
    if root is not None:
        return Location(os.path.join(str(root), array.path)).place
    fs, path = getattr(array.store, "fs", None), getattr(array.store, "path", None)
    if fs is None or path is None:  # a zarr.storage.MemoryStore: no path to write over
        return None
    return filesystem_place(fs, f"{path.rstrip('/')}/{array.path}")


def refuse_overlap(sources: list[zarr.Array], target: Location) -> None:
    """Refuse to save where the model's lazy data lives (the same place, above or inside it).

    Replacing it would leave the model in memory reading chunks that are gone, which Zarr
    reads as its fill value: wrong answers, and a later save would write them.
    """
    destination = target.place
    for array in sources:
        place = _source_place(array)
        if place is None:
            continue
        if (place == destination or place.startswith(destination.rstrip("/") + "/")
                or destination.startswith(place.rstrip("/") + "/")):
            raise ValueError(
                f"save: cannot save the model at {target}: this model reads its data lazily "
                f"from the Zarr array {place}, which saving there would replace or alter (the "
                f"model in memory would then read chunks that are gone). Save it elsewhere, or load "
                f"the data in memory first (refit on it in memory; for a model loaded "
                f"lazily, dkpca.load it with a larger in_memory).")


def require_present(sources: list[zarr.Array]) -> None:
    """Refuse to save a model whose lazy data is gone, or has changed shape, since it was read.

    Zarr reads a missing chunk as its fill value, so saving would seal wrong values with
    valid checksums. The arrays' metadata are read again, nothing else. A chunk deleted on its
    own cannot be told from one never written because it equals the fill value (Zarr skips
    writing such chunks by default), so it is not looked for.
    """
    for array in sources:
        place = _source_place(array) or repr(array.store)
        try:
            now = zarr.open_array(store=array.store, path=array.path, mode="r")
        except Exception as err:  # any failure: the data is not there
            raise ValueError(
                f"save: the data this model refers to lazily, the Zarr array {place}, cannot "
                f"be opened any more ({_describe(err)}; deleted or moved?). Restore it there, "
                f"or refit the model.") from err
        if now.shape != array.shape or now.dtype != array.dtype:
            raise ValueError(
                f"save: the data this model refers to lazily, the Zarr array {place}, has "
                f"changed since it was read (shape {now.shape}, dtype {now.dtype}; it was "
                f"{array.shape}, {array.dtype}). Restore it, or refit the model.")
