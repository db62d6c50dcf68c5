"""The command's input: reads that fail on a damaged chunk or damaged metadata name the input.

A chunk whose bytes its codecs cannot decode fails in a worker, mid-computation, deep inside
zarr and numcodecs (``RuntimeError: Zstd decompression error: invalid input data``), and a
``zarr.json`` that is not JSON fails with the bare parser message. Here both become one
``ValueError`` (a user error: exit status 2) that names the file to look at.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import zarr

__all__ = ["InputArray", "damaged_metadata"]

#: The metadata documents of a Zarr node, format 3 then format 2.
_METADATA = ("zarr.json", ".zarray", ".zgroup", ".zattrs")


class InputArray(zarr.Array):
    """The input's :class:`zarr.Array`; a read that fails on a damaged chunk names that chunk.

    Only reads of this array are translated, and only when reading one chunk (one shard) of
    the failed selection on its own fails too: a genuine bug elsewhere keeps its type and
    traceback. ``OSError`` (a file that cannot be opened, a lost connection) passes unchanged.

    Parameters
    ----------
    array : zarr.Array
        The input, as :func:`dkpca.io.open_zarr` opened it.
    label : str
        The input as the user named it, with ``/COMPONENT`` for an array in a group: the
        failing chunk is named ``label/KEY``.

    Examples
    --------
    >>> import numpy as np
    >>> array = zarr.create_array("memory://doc/reading.zarr", data=np.ones((4, 2)),
    ...                           chunks=(2, 2))
    >>> InputArray(array, "reading.zarr")[1:3].sum()
    np.float64(4.0)
    """

    def __init__(self, array: zarr.Array, label: str) -> None:
        super().__init__(array.async_array)
        self.label = label

    def __getitem__(self, selection: Any) -> Any:
        try:
            return super().__getitem__(selection)
        except OSError:
            raise
        except Exception as err:
            key, cause = self._failing_chunk(selection)
            if key is None:
                raise
            raise ValueError(
                f"cannot read {self.label}/{key}, a chunk of the input ({type(cause).__name__}: "
                f"{_first_line(cause)}): it is damaged, or not encoded as its zarr.json says; "
                f"write the input again") from err

    def _failing_chunk(self, selection: Any) -> tuple[str | None, BaseException | None]:
        """Return the key of the first stored chunk of ``selection`` that fails on its own.

        ``(None, None)`` when ``selection`` is not a tuple of slices (dask reads blocks as
        slices) or when every chunk reads: then the failure was not a damaged chunk.
        """
        if not isinstance(selection, tuple) or len(selection) != self.ndim or not all(
                isinstance(s, slice) and s.step in (None, 1) for s in selection):
            return None, None
        unit = self.shards or self.chunks  # a shard is what is stored under one key
        ranges = []
        for part, size, length in zip(selection, unit, self.shape, strict=True):
            start, stop, _ = part.indices(length)
            ranges.append(range(start // size, -(-stop // size)))
        for coords in itertools.product(*ranges):
            region = tuple(slice(c * s, min((c + 1) * s, n))
                           for c, s, n in zip(coords, unit, self.shape, strict=True))
            try:
                super().__getitem__(region)
            except OSError:
                raise
            except Exception as err:  # noqa: BLE001 - whatever the codecs raise
                return self.metadata.encode_chunk_key(coords), err
        return None, None


def damaged_metadata(fs: Any, root: str, label: str, component: str | None,
                     err: ValueError) -> ValueError:
    """Return the error for metadata that is not JSON, naming the document at fault.

    The metadata of the store at ``root`` (on the fsspec file system ``fs``) and of the
    groups down to ``component`` is read again; the first document that does not parse is
    named as ``label/...``. ``err`` is what zarr raised (a :class:`json.JSONDecodeError`, or
    a :class:`UnicodeDecodeError` for binary bytes).

    Examples
    --------
    >>> import fsspec
    >>> fs = fsspec.filesystem("memory")
    >>> fs.pipe("/doc/damaged.zarr/zarr.json", b"{bad json")
    >>> damaged_metadata(fs, "/doc/damaged.zarr", "damaged.zarr", None, ValueError("..."))
    ValueError('damaged.zarr/zarr.json is not valid Zarr metadata (...); write the input again')
    """
    parts = [p for p in (component or "").split("/") if p]
    for depth in range(len(parts) + 1):
        folder = "/".join([root.rstrip("/"), *parts[:depth]])
        for name in _METADATA:
            try:
                text = fs.cat_file(f"{folder}/{name}")
            except OSError:
                continue
            try:
                json.loads(text)
            except ValueError:
                shown = "/".join([str(label).rstrip("/"), *parts[:depth], name])
                return ValueError(f"{shown} is not valid Zarr metadata ({_first_line(err)}); "
                                  f"write the input again")
    return ValueError(f"{label} holds Zarr metadata that is not valid JSON "
                      f"({_first_line(err)})")


def _first_line(err: BaseException) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__
