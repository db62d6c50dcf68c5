"""How a fitted model's attributes are encoded as JSON and Zarr arrays, and decoded back.

:class:`_Writer` encodes each fitted attribute (``{"value": ...}``, ``{"array": ...}``,
``{"sparse": ...}``, ``{"kernel": ...}``, ``{"dataclass": ...}``, ``{"strings": ...}``; see
:mod:`dkpca.persistence`)
and then writes the arrays, with their checksums; :class:`_Reader` decodes them, reading arrays
through :class:`dkpca._model_integrity._VerifiedReader`. Anything without an encoding is refused
before anything is written, so a saved model never holds code.

Examples
--------
>>> import numpy as np
>>> writer = _Writer()
>>> writer.encode(np.float64(0.5), "", "gamma_", "gamma_")
{'value': 0.5}
>>> writer.encode(np.ones(3), "", "mean_", "mean_"), writer.arrays[0][1]
({'array': 'mean_'}, 'mean_')
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping
from typing import Any

import dask.array as da
import numpy as np
import scipy.sparse
import zarr

from dkpca._model_integrity import (
    _WRITE_ALL,
    _block_crc,
    _create,
    _record,
    _VerifiedReader,
)
from dkpca.blocked import compute
from dkpca.io import is_sparse
from dkpca.kernels import Kernel, kernel_from_config
from dkpca.moments import RowStatistics
from dkpca.solvers import KernelBasis

#: The fitted-state dataclasses that a saved model may name (its estimators: dkpca.persistence).
_DATACLASSES: dict[str, type] = {"KernelBasis": KernelBasis, "RowStatistics": RowStatistics}

#: The CSR parts of a sparse matrix, each saved as an array of the sparse group.
_CSR_PARTS = ("data", "indices", "indptr")


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
        if is_sparse(value):
            self.groups.append(where)
            encoded = {"sparse": key, "format": "csr", "shape": None}  # shape: once computed
            self.sparse.append((where, value, encoded))
            return encoded
        if isinstance(value, np.ndarray) and value.dtype == object:
            if value.ndim == 1 and all(isinstance(v, str) for v in value):
                return {"strings": value.tolist()}  # feature names: JSON, not a Zarr array
        elif isinstance(value, np.ndarray | da.Array):
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


class _Reader(_VerifiedReader):
    """Read a saved estimator's (or a field's) arrays and values, verifying them."""

    def decode(self, encoded: Mapping[str, Any], group: zarr.Group, path: str = "") -> Any:
        """Return the value that :meth:`_Writer.encode` encoded as ``encoded`` in ``group``."""
        if "value" in encoded:
            return encoded["value"]
        if "strings" in encoded:
            return np.asarray(encoded["strings"], dtype=object)
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
            if cls is RowStatistics:  # merged in memory by partial_fit: never left lazy
                fields = {k: np.asarray(v) if isinstance(v, da.Array) else v
                          for k, v in fields.items()}
            return cls(**fields)
        raise ValueError(f"unknown attribute encoding {sorted(encoded)}")
