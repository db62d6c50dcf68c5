"""A saved model's integrity: checksums recorded at save, and every check made at load.

:func:`dkpca.save` records, for every array of a model's group, its shape, dtype, chunk shape
and the CRC-32 of each chunk, and the CRC-32 of the rest of the description (see
:mod:`dkpca.persistence`, "Verification"); :func:`dkpca.load` reads arrays through
:class:`_VerifiedReader`, which compares them with the record, and runs the estimator's
parameter validation and a check that the arrays' shapes agree. Any damage is one
:class:`DamagedModelError` naming the model, the damaged part and the fix.

This module holds no knowledge of how attributes are encoded (:mod:`dkpca._model_encoding`)
or of the model's layout (:mod:`dkpca.persistence`).

Examples
--------
>>> import numpy as np
>>> _chunk_crcs(np.arange(5.0), (2,)) == [_crc(np.arange(5.0)[i:i + 2]) for i in (0, 2, 4)]
True
"""

from __future__ import annotations

import json
import sys
import zlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import dask.array as da
import numpy as np
import zarr
from dask.base import tokenize

from dkpca._validation import validate_params
from dkpca.moments import RowStatistics
from dkpca.solvers import KernelBasis

if TYPE_CHECKING:
    from dkpca.decomposition import KernelPCA
    from dkpca.io import Location
    from dkpca.linear import PCA

#: How a chunk is checksummed: CRC-32 of its decoded values' bytes (C order, little-endian).
_CHECKSUM = "crc32"

#: Every chunk is written, even one equal to the fill value, so that a missing chunk is damage.
_WRITE_ALL = {"write_empty_chunks": True}


class DamagedModelError(ValueError):
    """A saved model is damaged: an array, a chunk or a parameter is missing or altered.

    Raised by :func:`load` (or, for an array too large to read at load, when the damaged chunk
    is read) instead of returning a model that would give wrong answers. The message names the
    model, the damaged part and the fix: refit the model, or restore it from a copy.

    Examples
    --------
    >>> import numpy as np, dkpca
    >>> dkpca.save(dkpca.PCA(1).fit(np.eye(3)), "memory://doc/damaged.zarr", overwrite=True)
    >>> import zarr
    >>> group = zarr.open_group("memory://doc/damaged.zarr", mode="r+")
    >>> group.attrs["dkpca"] = {**group.attrs["dkpca"], "params": {
    ...     **group.attrs["dkpca"]["params"], "n_components": {"value": "three"}}}
    >>> try:
    ...     dkpca.load("memory://doc/damaged.zarr")
    ... except DamagedModelError as err:
    ...     print(str(err).split("model: ")[1].split(" (")[0])
    the parameter n_components='three' is invalid
    """

    # Public as dkpca.persistence.DamagedModelError (tracebacks, pickles, docs).
    __module__ = "dkpca.persistence"


def _damaged(location: Any, part: str, problem: str) -> DamagedModelError:
    """Return the one error for any damage: the model, the damaged ``part``, the problem, the fix."""
    return DamagedModelError(f"{location} is a damaged dkpca model: {part} {problem}. "
                             f"Refit or restore it (from a copy).")


def _crc(block: np.ndarray) -> int:
    """CRC-32 of ``block``'s values as little-endian bytes in C order."""
    block = np.ascontiguousarray(block)
    if block.dtype.byteorder == ">":
        block = block.astype(block.dtype.newbyteorder("<"))
    return zlib.crc32(block.data)


def _chunk_slices(shape: tuple[int, ...], chunks: tuple[int, ...]):
    """Yield each chunk's index in the chunk grid and its slices, in C order of the grid."""
    grid = [-(-n // c) if c else 0 for n, c in zip(shape, chunks, strict=True)]
    for index in np.ndindex(*grid):
        yield index, tuple(slice(i * c, min((i + 1) * c, n))
                           for i, c, n in zip(index, chunks, shape, strict=True))


def _chunk_crcs(values: np.ndarray, chunks: tuple[int, ...]) -> list[int]:
    """Return the checksum of each chunk of ``values`` in a Zarr array of chunk shape ``chunks``."""
    return [_crc(values[where]) for _, where in _chunk_slices(values.shape, chunks)]


def _block_crc(block: np.ndarray) -> np.ndarray:
    """One dask block's checksum, as a block of one element.

    See :meth:`dkpca._model_encoding._Writer.write`.
    """
    return np.full((1,) * block.ndim, _crc(block), dtype=np.int64)


def _record(array: zarr.Array, crcs: list[int]) -> dict[str, Any]:
    """Record a saved array: its shape, dtype, chunk shape and chunk checksums."""
    return {"shape": list(array.shape), "dtype": np.dtype(array.dtype).str,
            "chunks": list(array.chunks), _CHECKSUM: [int(c) for c in crcs]}


def _create(group: zarr.Group, name: str, values: np.ndarray) -> tuple[zarr.Array, list[int]]:
    """Write ``values`` as the array ``name`` of ``group``; return it and its chunk checksums."""
    values = np.asarray(values)
    array = group.create_array(name, data=values, config=_WRITE_ALL)
    return array, _chunk_crcs(values, array.chunks)


def _description_crc(meta: Mapping[str, Any]) -> int:
    """Checksum of a model's JSON description, its checksums left out."""
    text = json.dumps({k: v for k, v in meta.items() if k != "checksums"}, sort_keys=True,
                      separators=(",", ":"))
    return zlib.crc32(text.encode())


def _checksum_arrays(group: zarr.Group, skip: str) -> dict[str, dict[str, Any]]:
    """Return the records of every array under ``group`` but ``skip``, read back (small ones)."""
    return {path: _record(node, _chunk_crcs(np.asarray(node[...]), node.chunks))
            for path, node in group.members(max_depth=None)
            if isinstance(node, zarr.Array) and not path.startswith(f"{skip}/")}


def _seal(group: zarr.Group, meta: dict[str, Any], arrays: dict[str, Any]) -> dict[str, Any]:
    """Write ``meta`` as ``group``'s description with the checksums of it and its ``arrays``.

    The description is checksummed as it reads back (as JSON, through Zarr), so that the
    check at load compares like with like.
    """
    group.attrs["dkpca"] = meta
    written = dict(group.attrs["dkpca"])
    sealed = {**meta, "checksums": {"algorithm": _CHECKSUM, "arrays": arrays,
                                    "description": _description_crc(written)}}
    group.attrs["dkpca"] = sealed
    return sealed


def _checksums(meta: Mapping[str, Any], location: Location, prefix: str
               ) -> Mapping[str, Any] | None:
    """Return a description's recorded checksums; ``None`` for a model saved before them."""
    checksums = meta.get("checksums")
    if checksums is None:
        version = meta.get("format_version", 1)
        # Checksums came before format 3: every model of format 3 or later was saved with them
        if isinstance(version, int) and version >= 3:
            raise _damaged(location, f"the checksums in {prefix}zarr.json",
                           f"are missing (a model of format {version} is saved with them)")
        return None
    if (not isinstance(checksums, Mapping) or checksums.get("algorithm") != _CHECKSUM
            or not isinstance(checksums.get("arrays"), Mapping)):
        raise _damaged(location, f"the checksums in {prefix}zarr.json", "are not readable")
    return checksums


class _VerifiedChunks:
    """A saved Zarr array whose chunks are checked as dask reads them (a lazily loaded array).

    ``dask.array.from_array`` reads it one whole chunk per block; a chunk that cannot be
    decoded, or whose checksum differs from the recorded one, raises
    :class:`DamagedModelError` when it is read. When the model at ``location`` is no longer
    the one loaded (its description or this array's record changed: another model was saved
    over it), the error says so instead of calling the new model damaged.
    """

    def __init__(self, array: zarr.Array, name: str, location: Location, prefix: str,
                 crcs: list[int] | None, description: Any = None) -> None:
        self.array, self.name, self.location, self.prefix = array, name, location, prefix
        self.shown, self.crcs, self.description = prefix + name, crcs, description
        self.shape, self.dtype, self.ndim = array.shape, np.dtype(array.dtype), array.ndim

    def __getitem__(self, key: tuple[slice, ...]) -> np.ndarray:
        index = tuple(s.start // c for s, c in zip(key, self.array.chunks, strict=True))
        chunk = f"chunk {_chunk_key(self.array, index)} of the array {self.shown}"
        try:
            block = np.asarray(self.array[key])
        except Exception as err:
            raise self._error(chunk, f"cannot be decoded ({_describe(err)})") from err
        if self.crcs is not None:
            flat = int(np.ravel_multi_index(index, self.array.cdata_shape)) if index else 0
            if _crc(block) != self.crcs[flat]:
                raise self._error(chunk, "does not match its checksum (altered)")
        return block

    def _error(self, chunk: str, problem: str) -> ValueError:
        """Damage, or (when the store now holds another model) a store changed since load."""
        if self.crcs is None or not self._replaced():
            return _damaged(self.location, chunk, problem)
        return ValueError(f"{self.location} changed since this model was loaded from it "
                          f"(another model was saved there): {chunk} {problem}. Load the "
                          f"model again (dkpca.load), or load it in memory (in_memory=...) to "
                          f"keep using it while its store is replaced.")

    def _replaced(self) -> bool:
        """Whether the store's description or this array's record differs from those loaded."""
        try:
            group = zarr.open_group(store=self.location.store, mode="r",
                                    **self.location.open_options)
            if self.prefix:
                group = group[self.prefix.rstrip("/")]
            checksums = group.attrs["dkpca"]["checksums"]
            record = checksums["arrays"][self.name][_CHECKSUM]
        except Exception:  # noqa: BLE001 - unreadable: damage, as it would be at load
            return False
        return checksums.get("description") != self.description or list(record) != self.crcs


def _chunk_key(array: zarr.Array, index: tuple[int, ...]) -> str:
    """Return the store key of a chunk (``c/0/1``; ``0.1`` in Zarr v2), as Zarr names it.

    dkpca writes models in Zarr v3; one saved by an older dkpca while zarr's default format
    was 2 is a v2 group, whose arrays name chunks by their ``dimension_separator``.
    """
    encoding = getattr(array.metadata, "chunk_key_encoding", None)
    if encoding is not None:
        return encoding.encode_chunk_key(index)
    separator = getattr(array.metadata, "dimension_separator", None) or "."
    return separator.join(map(str, index)) if index else "0"


def _describe(err: BaseException) -> str:
    """One line about ``err``: its type and the first line of its message."""
    text = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _missing_chunks(array: zarr.Array) -> str:
    """Name the chunks of ``array`` missing from the store (a count when they cannot be named)."""
    try:  # a private Zarr helper lists the stored chunks; a count is the fallback
        from zarr.core.array import _shards_initialized
        from zarr.core.sync import sync

        present = set(sync(_shards_initialized(array.async_array)))
        missing = [key for key in (_chunk_key(array, index)
                                   for index in np.ndindex(*array.cdata_shape))
                   if key not in present]
    except Exception:  # noqa: BLE001 - naming the chunk is a courtesy
        missing = []
    if not missing:
        return f"{array.nchunks - array.nchunks_initialized} of its {array.nchunks} chunks"
    named = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
    return "chunk " + named if len(missing) == 1 else "chunks " + named


class _VerifiedReader:
    """Read a saved estimator's (or a field's) arrays, verifying them.

    ``checksums`` is the group's recorded checksums (``None`` for a model written before dkpca
    recorded them); ``prefix`` is the group's path in the model, for messages. Decoding the
    values is :class:`dkpca._model_encoding._Reader`'s.
    """

    def __init__(self, in_memory_bytes: int, location: Location, prefix: str = "",
                 checksums: Mapping[str, Any] | None = None) -> None:
        self.in_memory_bytes = in_memory_bytes
        self.location = location
        self.prefix = prefix
        self.checksums = checksums

    def child(self, prefix: str, checksums: Mapping[str, Any] | None) -> _VerifiedReader:
        """Return a reader of the group ``prefix`` whose checksums are ``checksums``."""
        return type(self)(self.in_memory_bytes, self.location, prefix, checksums)

    def whole(self) -> _VerifiedReader:
        """Return a reader of the same group that reads every array into memory."""
        return type(self)(sys.maxsize, self.location, self.prefix, self.checksums)

    def node(self, group: zarr.Group, key: str, path: str, kind: str) -> Any:
        """Return the member ``key`` of ``group`` (at ``path`` in the model); damage if unreadable."""
        shown = self.prefix + (f"{path}/{key}" if path else key)
        try:
            node = group[key]
        except KeyError:
            raise _damaged(self.location, f"the {kind} {shown}", "is missing") from None
        except Exception as err:
            raise _damaged(self.location, f"the metadata of {shown} ({shown}/zarr.json)",
                           f"cannot be read ({_describe(err)})") from err
        expected = zarr.Array if kind == "array" else zarr.Group
        if not isinstance(node, expected):
            raise _damaged(self.location, f"{shown}", f"is not a Zarr {kind}")
        return node

    def open(self, group: zarr.Group, key: str, path: str
             ) -> tuple[zarr.Array, dict[str, Any] | None, str]:
        """Open an array, checking its shape, dtype and chunks against what was recorded."""
        array = self.node(group, key, path, "array")
        name = f"{path}/{key}" if path else key
        shown = self.prefix + name
        if self.checksums is None:
            return array, None, shown
        record = self.checksums.get("arrays", {}).get(name)
        if not isinstance(record, Mapping):
            raise _damaged(self.location, f"the array {shown}", "has no recorded checksum")
        found = {"shape": list(array.shape), "dtype": np.dtype(array.dtype).str,
                 "chunks": list(array.chunks)}
        for what, value in found.items():
            if value != record.get(what):
                raise _damaged(self.location, f"the array {shown}",
                               f"has {what} {value}, but was saved with {what} {record.get(what)}")
        if array.nchunks_initialized != array.nchunks:  # a listing, not a read
            raise _damaged(self.location, f"{_missing_chunks(array)} of the array {shown}",
                           "missing")
        return array, record, shown

    def read(self, group: zarr.Group, key: str, path: str = "") -> np.ndarray:
        """Read an array into memory, verifying every chunk (it is read once)."""
        array, record, shown = self.open(group, key, path)
        try:
            values = np.asarray(array[...])
        except Exception as err:
            raise _damaged(self.location, f"{self._bad_chunk(array)} of the array {shown}",
                           f"cannot be decoded ({_describe(err)})") from err
        if record is not None:
            for (index, where), expected in zip(_chunk_slices(values.shape, array.chunks),
                                                record[_CHECKSUM], strict=True):
                if _crc(values[where]) != expected:
                    raise _damaged(self.location,
                                   f"chunk {_chunk_key(array, index)} of the array {shown}",
                                   "does not match its checksum (altered or truncated)")
        return values

    @staticmethod
    def _bad_chunk(array: zarr.Array) -> str:
        """Name the first chunk that cannot be decoded (read one by one: an error path)."""
        for index, where in _chunk_slices(array.shape, array.chunks):
            try:
                array[where]
            except Exception:  # noqa: BLE001 - looking for the failing chunk
                return f"chunk {_chunk_key(array, index)}"
        return "a chunk"

    def array(self, group: zarr.Group, key: str, path: str) -> np.ndarray | da.Array:
        """Return an array in memory, or (above ``in_memory``) a dask array verified as read."""
        array, record, shown = self.open(group, key, path)
        name = f"{path}/{key}" if path else key
        if array.nbytes <= self.in_memory_bytes or array.ndim == 0:
            return self.read(group, key, path)
        crcs = None if record is None else list(record[_CHECKSUM])
        chunks = _VerifiedChunks(array, name, self.location, self.prefix, crcs,
                                 (self.checksums or {}).get("description"))
        name = "dkpca-model-" + tokenize(str(self.location), shown, array.shape, crcs)
        lazy = da.from_array(chunks, chunks=array.chunks, lock=False, name=name,
                             meta=np.empty((0,) * array.ndim, dtype=chunks.dtype))
        return lazy.rechunk((array.chunks[0], *array.shape[1:]))

    def verify_description(self, meta: Mapping[str, Any]) -> None:
        """Check the group's JSON description against its recorded checksum."""
        if self.checksums is None:
            return
        if _description_crc(meta) != self.checksums.get("description"):
            raise _damaged(self.location, f"the description in {self.prefix}zarr.json "
                           f"(attributes['dkpca']: parameters and fitted values)",
                           "does not match its checksum (edited after it was saved)")


def _validate(model: KernelPCA | PCA, name: str, location: Location) -> None:
    """Run the parameter validation that the estimator's ``fit`` runs, one parameter at a time."""
    params = model.get_params(deep=False)
    for param, allowed in model._parameter_constraints.items():
        try:
            validate_params({param: params[param]}, {param: allowed}, name)
        except (ValueError, TypeError) as err:
            raise _damaged(location, f"the parameter {param}={params[param]!r}",
                           f"is invalid ({str(err).rstrip('.')})") from err


def _check_shapes(model: KernelPCA | PCA, prefix: str, location: Location) -> None:
    """Check that the arrays' shapes agree with each other (all a format-1 model offers).

    Shapes that disagree (an edited ``zarr.json``) would otherwise fail at ``transform`` with
    a broadcasting error, or give wrong scores.
    """
    state = vars(model)
    k = state.get("n_components_")
    d = state.get("n_features_in_")
    expected: dict[str, tuple[Any, tuple[int | None, ...]]] = {}
    for key in ("eigenvalues_", "explained_variance_", "explained_variance_ratio_",
                "singular_values_"):
        expected[key] = (state.get(key), (k,))
    expected["components_"] = (state.get("components_"), (k, d))
    expected["mean_"] = (state.get("mean_"), (d,))
    basis = state.get("basis_")
    if isinstance(basis, KernelBasis) and np.ndim(basis.coef) == 2:
        m, kb = basis.coef.shape
        expected["basis_/coef"] = (basis.coef, (None, k))
        expected["basis_/basis"] = (basis.basis, (m, None))
        expected["basis_/offset"] = (basis.offset, (kb,))
        expected["basis_/eigenvalues"] = (basis.eigenvalues, (kb,))
        if basis.mean_coef is not None and basis.mean_coef.size:  # .size: dask stays lazy
            expected["basis_/mean_coef"] = (basis.mean_coef, (m,))
    statistics = state.get("row_statistics_")
    if isinstance(statistics, RowStatistics):  # of the features (PCA) or of k(x, L) (Nyström)
        width = basis.basis.shape[0] if isinstance(basis, KernelBasis) else d
        expected["row_statistics_/mean"] = (statistics.mean, (width,))
        expected["row_statistics_/scatter"] = (statistics.scatter, (width, width))
    for key, (value, shape) in expected.items():
        if value is None or not hasattr(value, "shape"):
            continue
        found = tuple(value.shape)
        if len(found) != len(shape) or any(
                want is not None and got != want for got, want in zip(found, shape, strict=False)):
            wanted = "(" + ", ".join("any" if w is None else str(w) for w in shape) + ")"
            raise _damaged(location, f"the array {prefix}{key}",
                           f"has shape {found}, which does not fit the rest of the model "
                           f"(expected {wanted})")
