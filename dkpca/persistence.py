"""Fitted models as Zarr groups: arrays in Zarr, everything else as JSON attributes, no pickle.

:func:`save` and :func:`load` (``dkpca.save``/``dkpca.load``) sit above the estimators they
restore: this module imports :mod:`dkpca.decomposition`, :mod:`dkpca.linear`,
:mod:`dkpca.solvers` and :mod:`dkpca.kernels`, and nothing below it (:mod:`dkpca.io` above all)
imports it. ``import dkpca`` loads it on first use of ``dkpca.save``/``dkpca.load``, as it
does the estimators (they import scikit-learn).

Layout of a saved model::

    model.zarr/                  attrs["dkpca"] = {format, format_version, dkpca_version,
                                                   estimator, params, attributes, checksums}
      eigenvalues_               one array per array attribute
      basis_/                    a group per structured attribute (the KernelBasis)
        basis, coef, offset, ...
        basis/                   a scipy.sparse basis: a group of its CSR parts
          data, indices, indptr

A fitted :class:`dkpca.xarray.FieldModel` is a group whose ``attrs["dkpca"]`` names the
estimator ``"FieldModel"`` and holds a ``field`` description; its estimator is saved as above
in the subgroup ``estimator/``, beside its grids, land masks, weights and training scores (see
:mod:`dkpca.xarray._store`).

``attributes`` maps each fitted attribute to its encoding: ``{"value": <JSON>}``,
``{"array": <name>}``, ``{"sparse": <group>, "format": "csr", "shape": [m, d]}``,
``{"kernel": <kernel config>}`` or ``{"dataclass": <type>, "group": <name>, "fields": {...}}``.
Anything else is refused before anything is written, so a saved model never holds code, and a
model that cannot be saved leaves no trace at the destination.

Verification
------------
``checksums`` records, for every array of the group (by its path in the group), its shape,
dtype, chunk shape and the CRC-32 of each chunk's decoded values (little-endian bytes, C order,
chunks in C order of the chunk grid), and the CRC-32 of the rest of the description (its JSON
with sorted keys). Every chunk is written, even one equal to the fill value, so a missing chunk
is damage. :func:`load` checks them all and raises :class:`DamagedModelError` on any damage (see
its Notes). A FieldModel's group and its ``estimator/`` subgroup each have their own.

Format versions
---------------
``FORMAT_VERSION`` is bumped only when an older dkpca could not read a new file that any
model writes. 1: the first layout. 2: ``KernelBasis.mean_coef`` (the feature-space mean, for
pre-images). The ``sparse`` encoding (a ``scipy.sparse`` basis, from sparse training data) did
not bump it: models with dense arrays are written exactly as before, and only a model with a
sparse basis uses the new encoding, which a dkpca that predates it refuses with "unknown
attribute encoding". Nor did ``checksums``: an older dkpca ignores them, and a model without
them (saved by an older dkpca) is verified as far as it can be.

Examples
--------
>>> import numpy as np, dkpca
>>> X = np.random.default_rng(0).normal(size=(20, 3))
>>> dkpca.save(dkpca.KernelPCA(2).fit(X), "memory://doc/layout.zarr", overwrite=True)
>>> import zarr
>>> sorted(zarr.open_group("memory://doc/layout.zarr", mode="r").attrs["dkpca"])
['attributes', 'checksums', 'dkpca_version', 'estimator', 'format', 'format_version',
 'params']
"""

from __future__ import annotations

import dataclasses
import json
import logging
import numbers
import os
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import dask.array as da
import numpy as np
import scipy.sparse
import zarr
from dask.base import tokenize
from dask.utils import parse_bytes

from dkpca._validation import check_is_fitted, validate_params
from dkpca._version import __version__
from dkpca.blocked import compute
from dkpca.decomposition import KernelPCA
from dkpca.io import IncompleteResultError, Location, atomic_group, require_complete
from dkpca.kernels import Kernel, kernel_from_config
from dkpca.linear import PCA
from dkpca.solvers import KernelBasis
from dkpca.xarray import FieldModel
from dkpca.xarray._store import read_field, write_field

__all__ = ["FORMAT_VERSION", "DamagedModelError", "load", "save"]

logger = logging.getLogger(__name__)

#: Version of the on-disk layout; bumped when an older dkpca could not read a new file.
#: 2: ``KernelBasis.mean_coef`` (the feature-space mean, for pre-images).
FORMAT_VERSION = 2
_FORMAT = "dkpca.model"

#: The estimators and the fitted-state dataclasses that a saved model may name.
_ESTIMATORS: dict[str, type] = {"KernelPCA": KernelPCA, "PCA": PCA}
_DATACLASSES: dict[str, type] = {"KernelBasis": KernelBasis}

#: The CSR parts of a sparse matrix, each saved as an array of the sparse group.
_CSR_PARTS = ("data", "indices", "indptr")

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


def _damaged(location: Any, part: str, problem: str) -> DamagedModelError:
    """The one error for any damage: the model, the damaged ``part``, what is wrong, the fix."""
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
    """The checksum of each chunk of ``values`` in a Zarr array of chunk shape ``chunks``."""
    return [_crc(values[where]) for _, where in _chunk_slices(values.shape, chunks)]


def _block_crc(block: np.ndarray) -> np.ndarray:
    """One dask block's checksum, as a block of one element (see :meth:`_Writer.write`)."""
    return np.full((1,) * block.ndim, _crc(block), dtype=np.int64)


def _record(array: zarr.Array, crcs: list[int]) -> dict[str, Any]:
    """What is recorded of a saved array: its shape, dtype, chunk shape and chunk checksums."""
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
    """Records of every array under ``group`` but those under ``skip``, read back (small ones)."""
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


def _json_value(value: Any) -> Any:
    """``value`` as JSON builtins, or ``None`` when it has no JSON form."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, list | tuple) and all(_json_value(v) is not None for v in value):
        return [_json_value(v) for v in value]
    return None


def _is_sparse(value: Any) -> bool:
    """Whether ``value`` is a ``scipy.sparse`` matrix, or a dask array of them."""
    return scipy.sparse.issparse(value) or (
        isinstance(value, da.Array) and scipy.sparse.issparse(getattr(value, "_meta", None))
    )


def _kernel_config(kernel: Kernel, owner: str) -> dict[str, Any]:
    """``kernel``'s JSON config, checked to rebuild the kernel; a clear error when it cannot."""
    try:
        config = kernel.get_config()
        kernel_from_config(config)
    except ValueError as err:
        raise ValueError(
            f"save: cannot save {owner}={kernel!r}: {err}. dkpca saves a kernel as its name "
            f"and JSON parameters (never pickle); use a named kernel (such as 'rbf') or a "
            f"Kernel subclass registered with dkpca.kernels.register_kernel."
        ) from err
    return config


def _subgroup(root: zarr.Group, path: str) -> zarr.Group:
    """Return the group at ``path`` ("" for ``root``, "a/b" nested), created when missing."""
    group = root
    for part in filter(None, path.split("/")):
        group = group.require_group(part)
    return group


class _Writer:
    """Encode attributes as JSON, noting what to write; nothing is written until :meth:`write`.

    Encoding first and writing afterwards means that every refusal (an attribute without a
    JSON form, a kernel without a config) comes before the first byte is written.
    """

    def __init__(self) -> None:
        self.groups: list[str] = []
        self.arrays: list[tuple[str, str, np.ndarray | da.Array]] = []
        self.sparse: list[tuple[str, Any, dict[str, Any]]] = []

    def encode(self, value: Any, path: str, key: str, owner: str) -> dict[str, Any]:
        """Return the JSON encoding of ``value``, noting it for ``key`` in the group ``path``."""
        where = f"{path}/{key}" if path else key
        if isinstance(value, Kernel):
            return {"kernel": _kernel_config(value, owner)}
        if _is_sparse(value):
            self.groups.append(where)
            encoded = {"sparse": key, "format": "csr", "shape": None}  # shape: once computed
            self.sparse.append((where, value, encoded))
            return encoded
        if isinstance(value, np.ndarray | da.Array):
            self.arrays.append((path, key, value))
            return {"array": key}
        if dataclasses.is_dataclass(value) and _DATACLASSES.get(type(value).__name__) is type(
            value
        ):
            self.groups.append(where)
            fields = {
                f.name: self.encode(getattr(value, f.name), where, f.name, f"{owner}.{f.name}")
                for f in dataclasses.fields(value)
            }
            return {"dataclass": type(value).__name__, "group": key, "fields": fields}
        encoded = _json_value(value)
        if encoded is None and value is not None:
            raise TypeError(
                f"cannot save {owner} of type {type(value).__name__}: dkpca saves arrays, "
                f"kernels and JSON values only (never pickle)"
            )
        return {"value": encoded}

    def write(self, root: zarr.Group) -> dict[str, dict[str, Any]]:
        """Write the noted groups and arrays under ``root``, dask ones in one pass.

        Returns the record (shape, dtype, chunks, checksum of each chunk) of every array
        written, by its path under ``root``. A dask array's checksums are computed in the same
        pass as its chunks are written, so saving a large model reads its data once.
        """
        for path in self.groups:
            _subgroup(root, path)
        records: dict[str, dict[str, Any]] = {}
        pending, lazy_crcs, lazy_arrays = [], [], []
        for path, key, value in self.arrays:
            group, where = _subgroup(root, path), f"{path}/{key}" if path else key
            if not isinstance(value, da.Array) or value.ndim == 0:
                array, crcs = _create(group, key, np.asarray(value))
                records[where] = _record(array, crcs)
                continue
            rows = max(value.chunks[0]) if value.shape[0] else 1
            value = value.rechunk((rows, *value.shape[1:]))  # one Zarr chunk per dask block
            array = group.create_array(key, shape=value.shape, dtype=value.dtype,
                                       chunks=(rows, *value.shape[1:]), config=_WRITE_ALL)
            pending.append(da.store(value, array, lock=False, compute=False))
            lazy_crcs.append(value.map_blocks(
                _block_crc, chunks=tuple((1,) * len(c) for c in value.chunks), dtype=np.int64))
            lazy_arrays.append((where, array))
        lazy_sparse = [value for _, value, _ in self.sparse if isinstance(value, da.Array)]
        everything = (*pending, *lazy_crcs, *lazy_sparse)
        results = compute(*everything) if everything else ()
        crcs = results[len(pending):len(pending) + len(lazy_crcs)]
        for (where, array), block_crcs in zip(lazy_arrays, crcs, strict=True):
            records[where] = _record(array, np.asarray(block_crcs).ravel().tolist())
        computed = iter(results[len(pending) + len(lazy_crcs):])  # the sparse matrices
        for path, value, encoded in self.sparse:
            matrix = scipy.sparse.csr_matrix(
                next(computed) if isinstance(value, da.Array) else value
            )
            group = _subgroup(root, path)
            for part in _CSR_PARTS:
                array, part_crcs = _create(group, part, getattr(matrix, part))
                records[f"{path}/{part}"] = _record(array, part_crcs)
            encoded["shape"] = [int(n) for n in matrix.shape]
        return records


def _encode_params(model: Any) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for name, value in model.get_params(deep=False).items():
        if isinstance(value, Kernel):
            params[name] = {"kernel": _kernel_config(value, name)}
        elif (encoded := _json_value(value)) is not None or value is None:
            params[name] = {"value": encoded}
        else:  # a numpy Generator as random_state: the fitted state does not need it
            logger.warning("save: parameter %s=%r has no JSON form; saved as None", name, value)
            params[name] = {"value": None}
    return params


def save(
    model: KernelPCA | PCA | FieldModel,
    path: str | os.PathLike,
    *,
    overwrite: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> None:
    """Save a fitted estimator as a Zarr group (atomically; no pickle).

    Parameters
    ----------
    model : KernelPCA, PCA or dkpca.xarray.FieldModel
        A fitted estimator; a FieldModel is saved with its estimator, grids, land masks,
        weights and training scores (see :mod:`dkpca.xarray._store`).
    path : str or path
        A local path or an fsspec URL (``memory://``, ``s3://`` with s3fs, ...).
    overwrite : bool, default=False
        Replace an existing store at ``path``.
    storage_options : mapping, optional
        Options of a URL's fsspec file system.

    Raises
    ------
    sklearn.exceptions.NotFittedError
        The model is not fitted.
    FileExistsError
        ``path`` exists and ``overwrite`` is false.
    TypeError
        An estimator (or fitted attribute) that dkpca cannot save without pickle.
    ValueError
        A kernel that has no JSON configuration (a Python callable, an unregistered
        :class:`~dkpca.kernels.Kernel` subclass): use a named or registered kernel.

    See Also
    --------
    load : Read the model back.

    Notes
    -----
    Lazy fitted attributes, such as the Nyström solver's ``eigenvectors_`` after fitting on a
    dask array, are views of the training data and are not saved (the loaded model lacks
    them; ``transform`` of the training data gives the scores). The model appears at ``path``
    only when it is complete: it is written beside it and renamed into place, and a failure
    leaves ``path`` as it was; a model that cannot be saved (see Raises) is refused before
    anything is written. Large arrays (the training data that an exact or randomized kernel
    PCA keeps as its basis) are streamed chunk by chunk. A ``scipy.sparse`` basis (sparse
    training data) is saved as its CSR parts; a dask array of sparse chunks is computed first,
    so it must fit in memory.

    Examples
    --------
    >>> import numpy as np, dkpca
    >>> X = np.random.default_rng(0).normal(size=(30, 3))
    >>> kp = dkpca.KernelPCA(n_components=2).fit(X)
    >>> dkpca.save(kp, "memory://doc/model.zarr", overwrite=True)
    >>> again = dkpca.load("memory://doc/model.zarr")
    >>> bool(np.array_equal(again.transform(X), kp.transform(X)))
    True
    """
    if isinstance(model, FieldModel):
        check_is_fitted(model, "model_")
        writer, meta = _prepare(model.model_)  # every refusal before anything is written
        with atomic_group(path, overwrite=overwrite, storage_options=storage_options) as group:
            meta = _write(group.require_group("estimator"), writer, meta)
            field = write_field(model, group)
            described = {k: v for k, v in meta.items() if k != "checksums"}
            _seal(group, {**described, "estimator": "FieldModel", "field": field},
                  _checksum_arrays(group, skip="estimator"))
        logger.info("saved FieldModel to %s", path)
        return
    writer, meta = _prepare(model)
    with atomic_group(path, overwrite=overwrite, storage_options=storage_options) as group:
        _write(group, writer, meta)
    logger.info("saved %s to %s", meta["estimator"], path)


def _prepare(model: KernelPCA | PCA) -> tuple[_Writer, dict[str, Any]]:
    """Encode a fitted estimator: what to write, and its JSON description."""
    name = type(model).__name__
    if _ESTIMATORS.get(name) is not type(model):
        raise TypeError(f"save: {name} is not a dkpca estimator (known: {sorted(_ESTIMATORS)} "
                        f"and dkpca.xarray.FieldModel)")
    check_is_fitted(model, "n_features_in_")
    params = model.get_params(deep=False)
    state = {k: v for k, v in vars(model).items() if k not in params}
    # A lazy fitted attribute (Nyström's eigenvectors of lazy training data, n x k) is a view
    # of the training data, not needed to transform: saving it would be a second pass over
    # the data and an n-sized file. The basis's own lazy arrays (a training set kept as the
    # kernel basis) are part of the model and are saved.
    lazy = sorted(k for k, v in state.items() if isinstance(v, da.Array))
    if lazy:
        logger.info("save: not saving the lazy attributes %s (views of the training data)", lazy)
        state = {k: v for k, v in state.items() if k not in lazy}
    writer = _Writer()
    attributes = {key: writer.encode(value, "", key, key) for key, value in state.items()}
    return writer, {
        "format": _FORMAT,
        "format_version": FORMAT_VERSION,
        "dkpca_version": __version__,
        "estimator": name,
        "params": _encode_params(model),
        "attributes": attributes,
    }


def _write(group: zarr.Group, writer: _Writer, meta: dict[str, Any]) -> dict[str, Any]:
    """Write the arrays, then the description with its checksums (it fills in sparse shapes)."""
    return _seal(group, meta, writer.write(group))


class _VerifiedChunks:
    """A saved Zarr array whose chunks are checked as dask reads them (a lazily loaded array).

    ``dask.array.from_array`` reads it one whole chunk per block; a chunk that cannot be
    decoded, or whose checksum differs from the recorded one, raises
    :class:`DamagedModelError` when it is read.
    """

    def __init__(self, array: zarr.Array, shown: str, location: str,
                 crcs: list[int] | None) -> None:
        self.array, self.shown, self.location, self.crcs = array, shown, location, crcs
        self.shape, self.dtype, self.ndim = array.shape, np.dtype(array.dtype), array.ndim

    def __getitem__(self, key: tuple[slice, ...]) -> np.ndarray:
        index = tuple(s.start // c for s, c in zip(key, self.array.chunks, strict=True))
        chunk = f"chunk {_chunk_key(self.array, index)} of the array {self.shown}"
        try:
            block = np.asarray(self.array[key])
        except Exception as err:
            raise _damaged(self.location, chunk, f"cannot be decoded ({_describe(err)})") from err
        if self.crcs is not None:
            flat = int(np.ravel_multi_index(index, self.array.cdata_shape)) if index else 0
            if _crc(block) != self.crcs[flat]:
                raise _damaged(self.location, chunk, "does not match its checksum (altered)")
        return block


def _chunk_key(array: zarr.Array, index: tuple[int, ...]) -> str:
    """The store key of a chunk (``c/0/1``), as Zarr names it."""
    return array.metadata.chunk_key_encoding.encode_chunk_key(index)


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


class _Reader:
    """Read a saved estimator's (or a field's) arrays and values, verifying them.

    ``checksums`` is the group's recorded checksums (``None`` for a model written before dkpca
    recorded them); ``prefix`` is the group's path in the model, for messages.
    """

    def __init__(self, in_memory_bytes: int, location: Location, prefix: str = "",
                 checksums: Mapping[str, Any] | None = None) -> None:
        self.in_memory_bytes = in_memory_bytes
        self.location = location
        self.prefix = prefix
        self.checksums = checksums

    def child(self, prefix: str, checksums: Mapping[str, Any] | None) -> _Reader:
        """A reader of the group ``prefix`` whose checksums are ``checksums``."""
        return _Reader(self.in_memory_bytes, self.location, prefix, checksums)

    def node(self, group: zarr.Group, key: str, path: str, kind: str) -> Any:
        """The member ``key`` of ``group`` (at ``path`` in the model); damage when unreadable."""
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
        """An array in memory, or (above ``in_memory``) a dask array verified as it is read."""
        array, record, shown = self.open(group, key, path)
        if array.nbytes <= self.in_memory_bytes or array.ndim == 0:
            return self.read(group, key, path)
        crcs = None if record is None else list(record[_CHECKSUM])
        chunks = _VerifiedChunks(array, shown, str(self.location), crcs)
        name = "dkpca-model-" + tokenize(str(self.location), shown, array.shape, crcs)
        lazy = da.from_array(chunks, chunks=array.chunks, lock=False, name=name,
                             meta=np.empty((0,) * array.ndim, dtype=chunks.dtype))
        return lazy.rechunk((array.chunks[0], *array.shape[1:]))

    def decode(self, encoded: Mapping[str, Any], group: zarr.Group, path: str = "") -> Any:
        """Return the value that :meth:`_Writer.encode` encoded as ``encoded`` in ``group``."""
        if "value" in encoded:
            return encoded["value"]
        if "kernel" in encoded:
            return kernel_from_config(encoded["kernel"])
        if "sparse" in encoded:
            if encoded.get("format") != "csr":
                raise ValueError(f"unknown sparse format {encoded.get('format')!r}")
            sub = self.node(group, encoded["sparse"], path, "group")
            where = f"{path}/{encoded['sparse']}" if path else encoded["sparse"]
            parts = tuple(self.read(sub, part, where) for part in _CSR_PARTS)
            return scipy.sparse.csr_matrix(parts, shape=tuple(encoded["shape"]))
        if "array" in encoded:
            return self.array(group, encoded["array"], path)
        if "dataclass" in encoded:
            cls = _DATACLASSES[encoded["dataclass"]]
            sub = self.node(group, encoded["group"], path, "group")
            where = f"{path}/{encoded['group']}" if path else encoded["group"]
            fields = {k: self.decode(v, sub, where) for k, v in encoded["fields"].items()}
            if (cls is KernelBasis and "mean_coef" not in fields
                    and fields["basis"].shape[0] != fields["n_samples"]):
                # Format 1 did not record a landmark basis's feature-space mean: mark it
                # unknown, so that pre-images refuse instead of assuming a uniform mean.
                fields["mean_coef"] = np.empty(0)
            return cls(**fields)
        raise ValueError(f"unknown attribute encoding {sorted(encoded)}")

    def verify_description(self, meta: Mapping[str, Any]) -> None:
        """Check the group's JSON description against its recorded checksum."""
        if self.checksums is None:
            return
        if _description_crc(meta) != self.checksums.get("description"):
            raise _damaged(self.location, f"the description in {self.prefix}zarr.json "
                           f"(attributes['dkpca']: parameters and fitted values)",
                           "does not match its checksum (edited after it was saved)")


def load(
    path: str | os.PathLike,
    *,
    in_memory: int | str = "256MiB",
    storage_options: Mapping[str, Any] | None = None,
) -> KernelPCA | PCA | FieldModel:
    """Load an estimator (or a FieldModel) saved by :func:`save`, verifying it.

    Parameters
    ----------
    path : str or path
        A local path or an fsspec URL.
    in_memory : int or str, default="256MiB"
        Arrays up to this size are read into memory; larger ones (a large training set kept as
        the kernel basis) stay lazy dask arrays reading the store, which must then stay in place
        while the model is used. A sparse basis is always read into memory.
    storage_options : mapping, optional
        Options of a URL's fsspec file system.

    Returns
    -------
    KernelPCA, PCA or FieldModel
        Fitted, transforming exactly as the saved model did.

    Raises
    ------
    FileNotFoundError
        Nothing at ``path``.
    dkpca.io.IncompleteResultError
        A model still being copied to an object store, or whose writer was stopped doing so.
    DamagedModelError
        The model is damaged (see Notes): the message names the model, the damaged part (an
        array, a chunk, a parameter) and says to refit or restore it. A subclass of
        ``ValueError``, so the command line reports it as one line with exit status 2.
    ValueError
        Not a dkpca model, or one written by a newer dkpca.

    See Also
    --------
    save : Write a fitted model.

    Notes
    -----
    A saved model verifies itself, so that damage is an error, never a wrong answer. At load:
    every group and array the model needs exists and its metadata reads; parameters pass the
    estimator's own validation (the one ``fit`` runs); the arrays' shapes agree with each other.
    A model saved by this dkpca also records, in its description, the shape, dtype, chunk shape
    and a CRC-32 of every chunk of every array, and a CRC-32 of the description itself: at load
    each array's shape, dtype and chunks are compared, the store is listed for missing chunks
    (cheap: nothing is read), an array read into memory has each chunk's checksum compared as
    it is read (once), and an edited description is refused. An array larger than
    ``in_memory`` stays lazy: its chunks' presence is checked at load, and each chunk is
    decoded and checked against its checksum when it is read (at ``transform``), raising
    :class:`DamagedModelError` there; nothing is read twice. A model saved before dkpca
    recorded checksums (model formats 1 and 2 without ``checksums``) is verified as far as it
    can be: a chunk that cannot be decoded is an error, but a missing chunk cannot be told
    from one that Zarr did not write because it equalled the fill value.

    Examples
    --------
    >>> import numpy as np, dkpca
    >>> pca = dkpca.PCA(n_components=1).fit(np.arange(10.0).reshape(5, 2))
    >>> dkpca.save(pca, "memory://doc/pca.zarr", overwrite=True)
    >>> dkpca.load("memory://doc/pca.zarr").components_.shape
    (1, 2)
    """
    location = Location(path, storage_options)
    try:  # nothing there, a file, another folder, a half-copied result
        require_complete(location)
    except IncompleteResultError:
        raise
    except FileNotFoundError as err:
        raise FileNotFoundError(f"no saved model at {location}") from err
    try:
        group = zarr.open_group(store=location.store, mode="r", **location.open_options)
    except (FileNotFoundError, zarr.errors.NodeNotFoundError) as err:
        raise FileNotFoundError(f"no saved model at {location}") from err
    except zarr.errors.ContainsArrayError as err:
        raise ValueError(f"{location} is a Zarr array, not a saved dkpca model") from err
    except Exception as err:  # a zarr.json that is not JSON, or not Zarr metadata
        raise _damaged(location, "its metadata (zarr.json)",
                       f"cannot be read ({_describe(err)})") from err
    meta = group.attrs.get("dkpca")
    if not isinstance(meta, Mapping) or meta.get("format") != _FORMAT:
        raise ValueError(f"{location} is a Zarr group but not a saved dkpca model")
    version = meta.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise _damaged(location, "its format version", f"{version!r} is not an integer")
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{location} was written by dkpca {meta.get('dkpca_version')} in model format "
            f"{version}; this dkpca reads format {FORMAT_VERSION} and older. "
            f"Upgrade dkpca to load it."
        )
    reader = _Reader(parse_bytes(in_memory) if isinstance(in_memory, str) else int(in_memory),
                     location)
    root = reader.child("", _checksums(meta, location, ""))
    if meta.get("estimator") == "FieldModel":
        estimator_group = root.node(group, "estimator", "", "group")
        try:
            estimator_meta = estimator_group.attrs.get("dkpca")
        except Exception as err:
            raise _damaged(location, "the metadata of estimator (estimator/zarr.json)",
                           f"cannot be read ({_describe(err)})") from err
        if not isinstance(estimator_meta, Mapping):
            raise _damaged(location, "the estimator's description (estimator/zarr.json)",
                           "is missing")
        estimator = _read_estimator(
            estimator_group, estimator_meta,
            reader.child("estimator/", _checksums(estimator_meta, location, "estimator/")),
            location)
        try:
            model = read_field(group, meta["field"], estimator,
                               read=lambda sub, key: root.read(sub, key))
        except DamagedModelError:
            raise
        except Exception as err:
            raise _damaged(location, "the field description (attributes['dkpca']['field'] in "
                           "zarr.json)", f"cannot be restored ({_describe(err)})") from err
        root.verify_description(meta)
        return model
    return _read_estimator(group, meta, root, location)


def _checksums(meta: Mapping[str, Any], location: Location, prefix: str
               ) -> Mapping[str, Any] | None:
    """A description's recorded checksums; ``None`` for a model saved before they were."""
    checksums = meta.get("checksums")
    if checksums is None:
        return None
    if (not isinstance(checksums, Mapping) or checksums.get("algorithm") != _CHECKSUM
            or not isinstance(checksums.get("arrays"), Mapping)):
        raise _damaged(location, f"the checksums in {prefix}zarr.json", "are not readable")
    return checksums


def _read_estimator(group: zarr.Group, meta: Mapping[str, Any], reader: _Reader,
                    location: Location) -> KernelPCA | PCA:
    """Rebuild and verify the estimator that ``group`` holds."""
    name = meta.get("estimator")
    if name not in _ESTIMATORS:
        raise ValueError(f"{location} holds an unknown estimator {name!r}")
    where = f"{reader.prefix}zarr.json"
    for key in ("params", "attributes"):
        if not isinstance(meta.get(key), Mapping):
            raise _damaged(location, f"the {key} in {where}", "are missing")
    model = _ESTIMATORS[name]()
    known = model.get_params(deep=False)
    params = {}
    for param, encoded in meta["params"].items():
        if param not in known:
            raise _damaged(location, f"the parameter {param!r} in {where}",
                           f"is not a parameter of {name}")
        try:
            params[param] = reader.decode(encoded, group)
        except Exception as err:
            raise _damaged(location, f"the parameter {param} in {where}",
                           f"cannot be read ({_describe(err)})") from err
    model.set_params(**params)
    _validate(model, name, location)
    for key, encoded in meta["attributes"].items():
        try:
            setattr(model, key, reader.decode(encoded, group))
        except DamagedModelError:
            raise
        except Exception as err:
            raise _damaged(location, f"the fitted attribute {key} in {where}",
                           f"cannot be restored ({_describe(err)})") from err
    _check_shapes(model, reader.prefix, location)
    reader.verify_description(meta)
    return model


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
        if basis.mean_coef is not None and np.size(basis.mean_coef):
            expected["basis_/mean_coef"] = (basis.mean_coef, (m,))
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
