"""Atomic output, Zarr stores and single files: written beside the destination, then renamed.

A failed or interrupted run (an exception, Ctrl-C) removes its temporary store and leaves the
destination as it was: absent, or the previous complete version. A process killed outright
(SIGKILL, a lost pod) cannot clean up: its hidden ``.NAME.dkpca-tmp-*`` sibling stays until the
next write to the same destination sweeps it (:mod:`dkpca.io._temporaries`), but the
destination itself is never half-written. On object stores, which cannot rename, a store is
copied into place behind a completion marker that readers respect (:mod:`dkpca.io._completion`). While the command line writes, an interrupted write
first stops its embedded cluster's workers, then cleans up (:func:`stop_writers_before_cleanup`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import dask.array as da
import fsspec
import numpy as np
import zarr

from dkpca.io._completion import publish, sweep_abandoned_result
from dkpca.io._location import Location
from dkpca.io._temporaries import sweep_stale_siblings

__all__ = [
    "atomic_group",
    "atomic_location",
    "check_destination",
    "stop_writers_before_cleanup",
    "store_array",
    "write_file",
]

logger = logging.getLogger(__name__)


def check_destination(
    destination: str | os.PathLike,
    *,
    overwrite: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> Location:
    """Check that results can be written to ``destination`` before any work starts.

    What is there decides: nothing (written), a Zarr store or a file (replaced with
    ``overwrite``, refused without it), an empty folder (replaced with ``overwrite``), or
    anything else: a folder that is not a Zarr store, a device (refused either way, since
    replacing it could destroy what is not ours). An incomplete result there whose writer is
    provably gone (a writer killed while copying to an object store,
    :mod:`dkpca.io._completion`) is removed first.

    Raises
    ------
    FileExistsError
        Something is already there and ``overwrite`` is false, or another writer is copying
        its result there now, or what is there is not a result ``overwrite`` may replace, or
        (a local path) ``destination`` lies inside a Zarr array's folder, among its chunks.
    FileNotFoundError
        The folder it would go in does not exist.
    PermissionError
        The folder it would go in cannot be written.

    Examples
    --------
    >>> check_destination("memory://doc/new.zarr").exists()
    False
    >>> import fsspec
    >>> fsspec.filesystem("memory").pipe("/doc/old.png", b"PNG")
    >>> check_destination("memory://doc/old.png")
    Traceback (most recent call last):
    ...
    FileExistsError: memory://doc/old.png already exists; pass overwrite=True (--overwrite) to replace it
    >>> check_destination("memory://doc/old.png", overwrite=True).kind()
    'file'
    """
    target = Location(destination, storage_options)
    _refuse_inside_array(target)
    if not target.parent_exists():
        parent = os.path.dirname(target.store)
        what = "is a file, not a folder" if os.path.exists(parent) else "does not exist"
        raise FileNotFoundError(f"cannot write {target}: {parent} {what}")
    kind = target.kind()
    if kind in ("zarr", "folder"):  # perhaps a result abandoned mid-copy (a marker inside)
        sweep_abandoned_result(target)
        kind = target.kind()
    if kind == "missing":
        target.check_writable()
        return target
    if not overwrite:
        raise FileExistsError(
            f"{target} already exists; pass overwrite=True (--overwrite) to replace it")
    if kind == "folder" and not target.is_empty_folder():
        raise FileExistsError(
            f"{target} is a folder that is not a Zarr store; dkpca replaces only its own "
            "results (Zarr stores and files): choose another destination or remove it")
    if kind == "other":
        raise FileExistsError(
            f"{target} is neither a file nor a folder (a device or a socket); choose another "
            "destination")
    target.check_writable()
    return target


def _refuse_inside_array(target: Location) -> None:
    """Refuse a local destination inside a Zarr array's folder (v3 ``zarr.json``, v2 ``.zarray``).

    Writing there would put foreign keys among the array's chunks. URLs are not checked (one
    listing per level of an object store's prefix).
    """
    if not target.is_local:
        return
    folder = os.path.dirname(target.store)
    while True:
        metadata = os.path.join(folder, "zarr.json")
        if os.path.isfile(os.path.join(folder, ".zarray")) or (
                os.path.isfile(metadata) and _is_array_metadata(metadata)):
            raise FileExistsError(
                f"cannot write {target} inside the Zarr array {folder} (among its chunks); "
                "choose a destination outside it")
        parent = os.path.dirname(folder)
        if parent == folder:
            return
        folder = parent


def _is_array_metadata(path: str) -> bool:
    """Whether the ``zarr.json`` at ``path`` describes an array (unreadable: not one)."""
    try:
        with open(path, "rb") as file:
            return json.load(file).get("node_type") == "array"
    except (OSError, ValueError, AttributeError):
        return False


#: What a failed write calls, newest first, before it removes its temporary store.
_writer_stoppers: list[Callable[[], None]] = []


@contextlib.contextmanager
def stop_writers_before_cleanup(stop: Callable[[], None]) -> Iterator[None]:
    """While the block runs, a failed atomic write calls ``stop()`` before it cleans up.

    Cancelling a computation does not stop the tasks already running: one may still write a
    chunk into the temporary store after it was removed, and so recreate it. The command line
    passes a ``stop`` that closes its embedded cluster, so that no worker is left to write.

    Examples
    --------
    >>> calls = []
    >>> with stop_writers_before_cleanup(lambda: calls.append("stopped")):
    ...     try:
    ...         with atomic_location("memory://doc/failed.zarr", overwrite=True):
    ...             raise RuntimeError("the write failed")
    ...     except RuntimeError:
    ...         pass
    >>> calls
    ['stopped']
    """
    _writer_stoppers.append(stop)
    try:
        yield
    finally:
        _writer_stoppers.remove(stop)


def _stop_writers() -> None:
    for stop in reversed(_writer_stoppers[:]):
        try:
            stop()
        except Exception:  # cleaning up matters more than a clean stop
            logger.warning("could not stop the writers before cleaning up", exc_info=True)


def _commit(temp: Location, target: Location, overwrite: bool) -> None:
    if not temp.is_local and temp.is_folder():  # no rename: copied behind a marker
        publish(temp, target, overwrite=overwrite)
        return
    if not target.exists():
        temp.move_to(target)
        return
    if not overwrite:
        raise FileExistsError(
            f"{target} appeared while the results were being written (another writer was "
            "first); pass --overwrite to replace it")
    previous = target.sibling("old")
    target.move_to(previous)
    try:
        temp.move_to(target)
    except BaseException:
        previous.move_to(target)
        raise
    previous.remove()


@contextlib.contextmanager
def atomic_location(
    destination: str | os.PathLike,
    *,
    overwrite: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> Iterator[Location]:
    """Yield a temporary location beside ``destination``; rename it into place on success.

    Whatever the block writes at the yielded location becomes ``destination`` only when the
    block finishes without an exception. On an exception (``KeyboardInterrupt`` included) the
    temporary store is deleted and the exception propagates.

    Examples
    --------
    >>> import zarr
    >>> with atomic_location("memory://doc/atomic.zarr", overwrite=True) as temp:
    ...     _ = zarr.open_group(temp.store, mode="w")
    >>> Location("memory://doc/atomic.zarr").exists()
    True
    """
    target = check_destination(destination, overwrite=overwrite, storage_options=storage_options)
    sweep_stale_siblings(target)  # what killed writers left behind
    temp = target.sibling("tmp")
    try:
        yield temp
        _commit(temp, target, overwrite)
    except BaseException:
        _stop_writers()
        temp.remove()
        raise
    logger.debug("wrote %s", target)


def write_file(
    destination: str | os.PathLike,
    data: bytes,
    *,
    overwrite: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> None:
    r"""Write ``data`` as one file at ``destination``, a local path or an fsspec URL, atomically.

    The bytes go to a hidden sibling first, which is renamed into place (on an object store a
    copy of one object, which readers see whole or not at all).

    Examples
    --------
    >>> import fsspec
    >>> write_file("memory://doc/figure.png", b"\x89PNG...", overwrite=True)
    >>> fsspec.filesystem("memory").cat("memory://doc/figure.png")
    b'\x89PNG...'
    """
    with atomic_location(destination, overwrite=overwrite,
                         storage_options=storage_options) as temp:
        fs, path = fsspec.core.url_to_fs(temp.store, **temp.storage_options)
        fs.pipe_file(path, data)


@contextlib.contextmanager
def atomic_group(
    destination: str | os.PathLike,
    *,
    attributes: Mapping[str, Any] | None = None,
    overwrite: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> Iterator[zarr.Group]:
    """Yield a new Zarr group that appears at ``destination`` only once the block succeeds.

    The group is Zarr format 3 whatever zarr's default format, and so are the arrays created
    in it. See :func:`atomic_location` for the failure semantics.

    Examples
    --------
    >>> import numpy as np
    >>> with atomic_group("memory://doc/group.zarr", attributes={"a": 1}, overwrite=True) as g:
    ...     _ = g.create_array("x", data=np.arange(3.0))
    >>> zarr.open_group("memory://doc/group.zarr", mode="r")["x"][:]
    array([0., 1., 2.])
    """
    with atomic_location(
        destination, overwrite=overwrite, storage_options=storage_options
    ) as temp:
        # Zarr v3 whatever zarr's default format (``zarr.config``, ``ZARR_DEFAULT_ZARR_FORMAT``):
        # dimension names and the chunk keys dkpca's checks name are v3 only.
        yield zarr.open_group(
            store=temp.store, mode="w-", attributes=dict(attributes or {}), zarr_format=3,
            **temp.open_options,
        )


def store_array(
    group: zarr.Group,
    name: str,
    data: np.ndarray | da.Array,
    *,
    dimension_names: Sequence[str] | None = None,
    attributes: Mapping[str, Any] | None = None,
) -> da.Array | None:
    """Create array ``name`` in ``group`` holding ``data``.

    numpy data is written now and ``None`` returned. Dask data gets one Zarr chunk per row chunk
    (rows made regular first) and a lazy store is returned: compute it (with the other stores
    of the same result, in one pass) to write. Each task writes whole Zarr chunks, so a task
    recomputed after a lost worker rewrites the same bytes.

    Raises
    ------
    ValueError
        Dask data with unknown chunk sizes (from boolean indexing): the message gives the fix,
        ``data = data.compute_chunk_sizes()``.

    Examples
    --------
    >>> import dask.array as da
    >>> group = zarr.open_group("memory://doc/store.zarr", mode="w")
    >>> pending = store_array(group, "x", da.ones((6, 2), chunks=(4, 2)))
    >>> _ = pending.compute()
    >>> group["x"].chunks, float(group["x"][:].sum())
    ((4, 2), 12.0)
    """
    options: dict[str, Any] = {"attributes": dict(attributes or {})}
    if dimension_names is not None:
        options["dimension_names"] = tuple(dimension_names)
    if not isinstance(data, da.Array):
        group.create_array(name, data=np.asarray(data), **options)
        return None
    if any(math.isnan(size) for sizes in data.chunks for size in sizes):
        raise ValueError(
            f"store_array: cannot store {name!r}: data has unknown chunk sizes (shape "
            f"{data.shape}, chunks {data.chunks}), as boolean indexing gives; compute them "
            f"first with data = data.compute_chunk_sizes() (one pass over the data).")
    rows = max(data.chunks[0]) if data.shape[0] else 1
    data = data.rechunk((rows, *data.shape[1:]))  # regular chunks, one per task
    array = group.create_array(
        name, shape=data.shape, dtype=data.dtype, chunks=(rows, *data.shape[1:]), **options
    )
    return da.store(data, array, lock=False, compute=False)
