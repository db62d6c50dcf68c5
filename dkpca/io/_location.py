"""Where a Zarr store lives: a local path or an fsspec URL, and the moves atomic writes need."""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import time
import uuid
from collections.abc import Mapping
from typing import Any, Literal

import fsspec

from dkpca.io._writer import writer_token

__all__ = ["ZARR_METADATA", "Location", "PathKind", "url_options"]

#: What is at a place, as readers and writers tell it apart (:meth:`Location.kind`).
PathKind = Literal["missing", "zarr", "file", "folder", "other"]

#: The keys whose presence makes a folder a Zarr store (v3, then v2 and its consolidated form).
ZARR_METADATA = ("zarr.json", ".zgroup", ".zarray", ".zmetadata")


def url_options(
    destination: str | os.PathLike, storage_options: Mapping[str, Any] | None
) -> Mapping[str, Any] | None:
    """Return ``storage_options`` for a URL and ``None`` for a local path.

    A command line takes one ``--storage-options`` for all its URLs, while some of its paths
    may be local; :class:`Location` refuses options for a local path.

    Examples
    --------
    >>> url_options("s3://bucket/fig.png", {"anon": True}), url_options("fig.png", {"anon": True})
    ({'anon': True}, None)
    """
    text = os.fspath(destination)
    return storage_options if "://" in text and not text.startswith("file://") else None


class Location:
    """A Zarr store's place: a local path (``file://`` URLs included) or an fsspec URL.

    Parameters
    ----------
    source : str or path
    storage_options : mapping, optional
        Options of the fsspec file system (URLs only).

    Examples
    --------
    >>> Location("file:///tmp/data.zarr").is_local, Location("memory://data.zarr").is_local
    (True, False)
    >>> Location("memory://out/scores.zarr").sibling("tmp").store.startswith("memory://out/.scores")
    True
    """

    def __init__(self, source: str | os.PathLike, storage_options: Mapping[str, Any] | None = None):
        text = os.fspath(source)
        text = text.removeprefix("file://")
        self.is_local = "://" not in text
        self.storage_options = dict(storage_options or {})
        if self.is_local and self.storage_options:
            raise ValueError(f"storage_options apply to URLs only, not to the local path {text}")
        self.store = os.path.abspath(text) if self.is_local else text.rstrip("/")
        self._text = os.fspath(source)

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"Location({self._text!r})"

    @property
    def open_options(self) -> dict[str, Any]:
        """Keyword arguments for ``zarr.open*`` beside ``store=``."""
        return {"storage_options": self.storage_options} if self.storage_options else {}

    @property
    def name(self) -> str:
        """The last path element (``scores.zarr``)."""
        return posixpath.basename(self.store.replace(os.sep, "/"))

    @property
    def place(self) -> str:
        """Where this is, normalised so that two spellings of one store compare equal.

        ``./r.zarr``, ``r.zarr/``, ``file://$PWD/r.zarr`` and a symbolic link to it give the
        same place (``file://`` and the resolved path); a URL gives the protocol and the path
        its file system sees (:func:`filesystem_place`).

        Examples
        --------
        >>> Location("memory://doc/a.zarr/").place == Location("memory:///doc/a.zarr").place
        True
        """
        if self.is_local:
            return "file://" + os.path.realpath(self.store)
        return filesystem_place(*fsspec.core.url_to_fs(self.store, **self.storage_options))

    def filesystem(self) -> tuple[fsspec.AbstractFileSystem, str]:
        """Return the fsspec file system of this location and the path within it.

        Listings are read afresh (s3fs and gcsfs cache them).

        Examples
        --------
        >>> fs, path = Location("memory://doc/fs/out.zarr").filesystem()
        >>> type(fs).__name__, path
        ('MemoryFileSystem', '/doc/fs/out.zarr')
        """
        fs, path = fsspec.core.url_to_fs(self.store, **self.storage_options)
        # s3fs and gcsfs cache listings: another writer (or this one) may have changed them
        fs.invalidate_cache(path)
        return fs, path

    def sibling(self, tag: str) -> Location:
        """Return a fresh hidden location beside this one: ``.NAME.dkpca-TAG-WRITER-RANDOM``.

        ``WRITER`` names this process (:func:`dkpca.io._writer.writer_token`), so that a
        later write can tell an abandoned sibling from one still being written.
        """
        hidden = f".{self.name}.dkpca-{tag}-{writer_token()}-{uuid.uuid4().hex[:8]}"
        if self.is_local:
            return Location(os.path.join(os.path.dirname(self.store), hidden))
        parent = self.store.rpartition("/")[0]  # "memory:/" for "memory://x.zarr": still right
        return Location(f"{parent}/{hidden}", self.storage_options)

    def exists(self) -> bool:
        """Whether anything (a file, a folder, any key) is at this place."""
        return self.kind() != "missing"

    def kind(self) -> PathKind:
        """Tell what is at this place.

        ``"missing"``, ``"zarr"`` (a store), ``"file"``, ``"folder"`` (a folder, or an
        object-store prefix, that is not a Zarr store) or ``"other"`` (a device, a socket...).

        Every reader and writer asks this first, so that each kind gets its documented
        behaviour rather than whatever error the first file operation happens to raise.

        Examples
        --------
        >>> import fsspec
        >>> fsspec.filesystem("memory").pipe({"/doc/kind/a.zarr/zarr.json": b"{}",
        ...                                   "/doc/kind/fig.png": b"PNG"})
        >>> [Location(f"memory://doc/kind/{name}").kind() for name in ("a.zarr", "fig.png", "no")]
        ['zarr', 'file', 'missing']
        """
        fs, path = self.filesystem()
        try:
            info = fs.info(path)
        except (FileNotFoundError, NotADirectoryError):  # the latter: a parent is a file
            return "missing"
        if info["type"] == "file":
            return "file"
        if info["type"] != "directory":
            return "other"
        if any(fs.isfile(f"{path.rstrip('/')}/{key}") for key in ZARR_METADATA):
            return "zarr"
        return "folder"

    def is_empty_folder(self) -> bool:
        """Whether this place is a folder with nothing in it."""
        fs, path = self.filesystem()
        return fs.isdir(path) and not fs.ls(path, detail=False)

    def is_folder(self) -> bool:
        """Whether this place holds a folder (a store of several keys) rather than one file."""
        fs, path = self.filesystem()
        return fs.isdir(path)

    def parent_exists(self) -> bool:
        """Whether the folder this place would go in exists (always true for object stores)."""
        if not self.is_local:
            return True
        return os.path.isdir(os.path.dirname(self.store))

    def check_writable(self) -> None:
        """Raise :class:`PermissionError` if nothing can be written beside this place.

        A local folder is probed by creating (and removing) a hidden folder in it, since
        permission bits alone do not tell: root passes every ``access`` check, yet cannot write
        in ``/proc`` or on a read-only mount. Object stores are not probed (a probe would need
        delete rights the run may not need); their errors come at the write.
        """
        if not self.is_local:
            return
        parent = os.path.dirname(self.store)
        probe = os.path.join(parent, f".{self.name}.dkpca-probe-{uuid.uuid4().hex[:8]}")
        try:
            os.mkdir(probe)
        except OSError as err:
            raise PermissionError(
                f"cannot write {self}: the folder {parent} is not writable ({err.strerror})"
            ) from err
        os.rmdir(probe)

    def remove(self, settle: float = 0.2) -> None:
        """Delete whatever is here, and make sure it stays deleted for ``settle`` seconds.

        After a failed computation, tasks still running on other threads may write a chunk or
        two more; deleting again until the place stays empty catches them.
        """
        fs, path = self.filesystem()
        deadline, quiet_since = time.monotonic() + 10 * settle, None
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):  # a straggler may be writing as we delete
                if fs.exists(path):
                    fs.rm(path, recursive=True)
                    quiet_since = None
                    continue
            now = time.monotonic()
            quiet_since = quiet_since or now
            if now - quiet_since >= settle:
                return
            time.sleep(settle / 4)

    def move_to(self, destination: Location) -> None:
        """Rename this store to ``destination`` (one ``rename`` on a local file system).

        Raises
        ------
        FileExistsError
            ``destination`` appeared meanwhile (another writer was first): a local rename
            never replaces a folder that has content.
        """
        if self.is_local:
            try:
                if os.path.isdir(self.store):
                    os.rename(self.store, destination.store)
                else:  # a rename would silently replace a file that appeared meanwhile
                    os.link(self.store, destination.store)
                    os.unlink(self.store)
            except OSError as err:
                if err.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                raise FileExistsError(
                    f"{destination} appeared while the results were being written (another "
                    "writer was first); pass --overwrite to replace it") from err
            return
        fs, path = self.filesystem()
        fs.mv(path, destination.filesystem()[1], recursive=True)


def filesystem_place(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """Return ``protocol://path`` of ``path`` on ``fs``, as :attr:`Location.place` writes it.

    Examples
    --------
    >>> import fsspec
    >>> filesystem_place(fsspec.filesystem("memory"), "/doc/b.zarr/")
    'memory:///doc/b.zarr'
    """
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return f"{protocol}://{fs._strip_protocol(path).rstrip('/')}"
