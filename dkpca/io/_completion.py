"""Results on object stores: readable only once whole, claimed by one writer at a time.

A local file system renames a finished store into place in one step. An object store (``s3://``,
``gs://``) has no rename: the keys are copied one by one, so a reader could open a half-copied
result, and a writer killed during the copy would leave one behind. So a store is published on
an object store as follows (:func:`publish`):

1. the marker key ``.dkpca-incomplete`` is created at the destination, exclusively where the
   store supports it (AWS S3 and compatible servers, ``memory://``); it names its writer. A
   second writer finds it there and stops with :class:`FileExistsError`;
2. an overwrite deletes the previous version's keys (from here on it is gone);
3. the keys are copied, the top-level metadata (``zarr.json``, ``.zgroup``...) last, so that a
   reader that knows nothing of the marker does not even see a group before the end;
4. the marker is deleted, last.

Every reader of dkpca (:func:`dkpca.load`, :func:`dkpca.io.open_zarr` and so
:func:`dkpca.io.as_dask`, the command line's inputs) calls :func:`require_complete` and refuses
a marked store with :class:`IncompleteResultError`. A marked store whose writer is provably gone
(as for temporary stores, :mod:`dkpca.io._temporaries`) is removed by the next write to the
same destination (:func:`sweep_abandoned_result`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import posixpath
import time
from typing import TYPE_CHECKING, Any

from dkpca.io._temporaries import writer_gone
from dkpca.io._writer import writer_token

if TYPE_CHECKING:
    from dkpca.io._location import Location

__all__ = [
    "MARKER",
    "IncompleteResultError",
    "NotAZarrStoreError",
    "publish",
    "require_complete",
    "sweep_abandoned_result",
]

logger = logging.getLogger(__name__)

#: The key that marks a store being copied into place (or abandoned during the copy).
MARKER = ".dkpca-incomplete"


class NotAZarrStoreError(ValueError):
    """What is at a place is not a Zarr store: a plain file, another folder, a device.

    A :class:`ValueError`, as for any input of the wrong kind; the command line reports it as
    one line with exit status 2.
    """


class IncompleteResultError(FileNotFoundError):
    """The result at a place is not complete: its writer is copying it, or died doing so.

    A :class:`FileNotFoundError`, since no complete result is there; the command line reports
    it as one line with exit status 2.
    """


def _marker_writer(fs: Any, root: str) -> str | None:
    """Return the writer token in the marker at ``root``: ``""`` if unreadable, ``None`` if none."""
    try:
        return str(json.loads(fs.cat_file(f"{root}/{MARKER}"))["writer"])
    except (FileNotFoundError, NotADirectoryError):  # the latter: ``root`` is a file
        return None
    except (ValueError, KeyError, TypeError, IsADirectoryError):
        return ""


def require_complete(location: Location) -> None:
    """Raise unless a complete Zarr store (a group or an array) is at ``location``.

    The completion marker is looked for at ``location`` and above it, since the store may be
    an array inside a result being copied; then what is there is classified
    (:meth:`~dkpca.io.Location.kind`), so that a plain file or a folder of something else is
    named as such rather than failing somewhere inside Zarr.

    Raises
    ------
    IncompleteResultError
        A result still being copied to an object store, or whose writer was stopped doing so.
    FileNotFoundError
        Nothing is at ``location``.
    NotAZarrStoreError
        Something other than a Zarr store is there (a :class:`ValueError`).

    Examples
    --------
    >>> import fsspec
    >>> from dkpca.io import Location
    >>> fsspec.filesystem("memory").pipe({"/doc/complete/scores.zarr/zarr.json": b"{}",
    ...                                   "/doc/complete/notes.txt": b"hello"})
    >>> require_complete(Location("memory://doc/complete/scores.zarr"))
    >>> require_complete(Location("memory://doc/complete/notes.txt"))
    Traceback (most recent call last):
    ...
    dkpca.io._completion.NotAZarrStoreError: memory://doc/complete/notes.txt is a file, not a Zarr store
    """
    fs, path = location.filesystem()
    root = path.rstrip("/")
    while root:
        writer = _marker_writer(fs, root)
        if writer is not None:
            owner = f" (writer {writer})" if writer else ""
            raise IncompleteResultError(
                f"{location} is not a complete result: it is being written or its writer "
                f"was stopped while copying it{owner}; rerun the command that writes it")
        parent = posixpath.dirname(root)
        root = "" if parent in (root, "/") else parent
    kind = location.kind()
    if kind == "missing":
        raise FileNotFoundError(f"no Zarr array or group at {location}")
    if kind != "zarr":
        what = {"file": "a file", "folder": "a folder"}.get(kind, "neither a file nor a folder")
        raise NotAZarrStoreError(f"{location} is {what}, not a Zarr store")


def sweep_abandoned_result(target: Location) -> str | None:
    """Remove the incomplete store at ``target`` if its writer is provably gone.

    Returns why it was removed, or ``None`` if there was no incomplete store.

    Raises
    ------
    FileExistsError
        A writer that may still be alive is copying a result to ``target``.

    Examples
    --------
    >>> from dkpca.io import Location
    >>> sweep_abandoned_result(Location("memory://doc/nothing-here.zarr")) is None
    True
    """
    fs, path = target.filesystem()
    writer = _marker_writer(fs, path)
    if writer is None:
        return None
    reason = writer_gone(writer, time.time()) if writer else "its marker names no writer"
    if reason is None:
        raise FileExistsError(
            f"{target} is being written by another writer ({writer}); wait for it to finish")
    with contextlib.suppress(FileNotFoundError):  # another sweeper was first
        fs.rm(path, recursive=True)
    logger.warning("removed the incomplete result %s (%s)", target, reason)
    return reason


def publish(temp: Location, target: Location, *, overwrite: bool) -> None:
    """Copy the store at ``temp`` to ``target`` behind a completion marker, then delete ``temp``.

    Raises
    ------
    FileExistsError
        Another writer holds ``target``, or (without ``overwrite``) a result appeared there.

    Examples
    --------
    >>> import fsspec
    >>> from dkpca.io import Location
    >>> fs = fsspec.filesystem("memory")
    >>> fs.pipe({"/doc/pub/.x.tmp/zarr.json": b"{}", "/doc/pub/.x.tmp/a/zarr.json": b"{}"})
    >>> publish(Location("memory://doc/pub/.x.tmp"), Location("memory://doc/pub/x.zarr"),
    ...         overwrite=False)
    >>> sorted(fs.find("/doc/pub"))
    ['/doc/pub/x.zarr/a/zarr.json', '/doc/pub/x.zarr/zarr.json']
    """
    fs, source = temp.filesystem()
    _, root = target.filesystem()
    marker = f"{root}/{MARKER}"
    try:
        fs.pipe_file(marker, json.dumps({"writer": writer_token()}).encode(), mode="create")
    except FileExistsError as err:
        raise FileExistsError(
            f"{target} is being written by another writer; wait for it to finish") from err
    touched = False  # whether anything but the marker changed at the destination
    try:
        previous = [key for key in fs.find(root) if key != marker]
        if previous and not overwrite:
            raise FileExistsError(
                f"{target} appeared while the results were being written (another writer was "
                "first); pass --overwrite to replace it")
        touched = True
        if previous:
            fs.rm(previous)
        keys = fs.find(source)
        nested = [key for key in keys if "/" in key[len(source) + 1:]]
        top_level = [key for key in keys if "/" not in key[len(source) + 1:]]
        for batch in (nested, top_level):  # two batches: the group's own metadata lands last
            if batch:
                fs.copy(batch, [root + key[len(source):] for key in batch])
        fs.rm_file(marker)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            fs.rm(root if touched else marker, recursive=touched)
        raise
    fs.rm(source, recursive=True)
