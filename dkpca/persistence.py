"""Fitted models as Zarr groups: arrays in Zarr, everything else as JSON attributes, no pickle.

:func:`save` and :func:`load` (``dkpca.save``/``dkpca.load``) sit above the estimators they
restore: this module imports :mod:`dkpca.decomposition`, :mod:`dkpca.linear`,
:mod:`dkpca.solvers` and :mod:`dkpca.kernels`, and nothing below it (:mod:`dkpca.io` above all)
imports it. ``import dkpca`` loads it on first use of ``dkpca.save``/``dkpca.load``, as it
does the estimators (they import scikit-learn).

Layout of a saved model::

    model.zarr/                  attrs["dkpca"] = {format, format_version, dkpca_version,
                                                   estimator, params, attributes}
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

Format versions
---------------
``FORMAT_VERSION`` is bumped only when an older dkpca could not read a new file that any
model writes. 1: the first layout. 2: ``KernelBasis.mean_coef`` (the feature-space mean, for
pre-images). The ``sparse`` encoding (a ``scipy.sparse`` basis, from sparse training data) did
not bump it: models with dense arrays are written exactly as before, and only a model with a
sparse basis uses the new encoding, which a dkpca that predates it refuses with "unknown
attribute encoding".

Examples
--------
>>> import numpy as np, dkpca
>>> X = np.random.default_rng(0).normal(size=(20, 3))
>>> dkpca.save(dkpca.KernelPCA(2).fit(X), "memory://doc/layout.zarr", overwrite=True)
>>> import zarr
>>> sorted(zarr.open_group("memory://doc/layout.zarr", mode="r").attrs["dkpca"])
['attributes', 'dkpca_version', 'estimator', 'format', 'format_version', 'params']
"""

from __future__ import annotations

import dataclasses
import logging
import numbers
import os
from collections.abc import Mapping
from typing import Any

import dask.array as da
import numpy as np
import scipy.sparse
import zarr
from dask.utils import parse_bytes

from dkpca._validation import check_is_fitted
from dkpca._version import __version__
from dkpca.blocked import compute
from dkpca.decomposition import KernelPCA
from dkpca.io import Location, atomic_group, require_complete, store_array
from dkpca.kernels import Kernel, kernel_from_config
from dkpca.linear import PCA
from dkpca.solvers import KernelBasis
from dkpca.xarray import FieldModel
from dkpca.xarray._store import read_field, write_field

__all__ = ["FORMAT_VERSION", "load", "save"]

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

    def write(self, root: zarr.Group) -> None:
        """Write the noted groups and arrays under ``root``, dask ones in one pass."""
        for path in self.groups:
            _subgroup(root, path)
        pending = []
        for path, key, value in self.arrays:
            lazy = store_array(_subgroup(root, path), key, value)
            if lazy is not None:
                pending.append(lazy)
        lazy_sparse = [value for _, value, _ in self.sparse if isinstance(value, da.Array)]
        results = compute(*pending, *lazy_sparse) if pending or lazy_sparse else ()
        computed = iter(results[len(pending):])  # the sparse matrices, in order
        for path, value, encoded in self.sparse:
            matrix = scipy.sparse.csr_matrix(
                next(computed) if isinstance(value, da.Array) else value
            )
            group = _subgroup(root, path)
            for part in _CSR_PARTS:
                group.create_array(part, data=getattr(matrix, part))
            encoded["shape"] = [int(n) for n in matrix.shape]


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
            _write(group.require_group("estimator"), writer, meta)
            group.attrs["dkpca"] = {**meta, "estimator": "FieldModel",
                                    "field": write_field(model, group)}
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


def _write(group: zarr.Group, writer: _Writer, meta: dict[str, Any]) -> None:
    writer.write(group)
    group.attrs["dkpca"] = meta  # after write(): it fills in the sparse shapes


class _Reader:
    def __init__(self, in_memory_bytes: int) -> None:
        self.in_memory_bytes = in_memory_bytes

    def decode(self, encoded: Mapping[str, Any], group: zarr.Group) -> Any:
        """Return the value that :meth:`_Writer.encode` encoded as ``encoded`` in ``group``."""
        if "value" in encoded:
            return encoded["value"]
        if "kernel" in encoded:
            return kernel_from_config(encoded["kernel"])
        if "sparse" in encoded:
            if encoded.get("format") != "csr":
                raise ValueError(f"unknown sparse format {encoded.get('format')!r}")
            sub = group[encoded["sparse"]]
            parts = tuple(sub[part][...] for part in _CSR_PARTS)
            return scipy.sparse.csr_matrix(parts, shape=tuple(encoded["shape"]))
        if "array" in encoded:
            array = group[encoded["array"]]
            if array.nbytes <= self.in_memory_bytes:
                return array[...]
            return da.from_zarr(array, chunks=(array.chunks[0], *array.shape[1:]))
        if "dataclass" in encoded:
            cls = _DATACLASSES[encoded["dataclass"]]
            sub = group[encoded["group"]]
            fields = {k: self.decode(v, sub) for k, v in encoded["fields"].items()}
            if (cls is KernelBasis and "mean_coef" not in fields
                    and fields["basis"].shape[0] != fields["n_samples"]):
                # Format 1 did not record a landmark basis's feature-space mean: mark it
                # unknown, so that pre-images refuse instead of assuming a uniform mean.
                fields["mean_coef"] = np.empty(0)
            return cls(**fields)
        raise ValueError(f"unknown attribute encoding {sorted(encoded)}")


def load(
    path: str | os.PathLike,
    *,
    in_memory: int | str = "256MiB",
    storage_options: Mapping[str, Any] | None = None,
) -> KernelPCA | PCA | FieldModel:
    """Load an estimator (or a FieldModel) saved by :func:`save`.

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
    ValueError
        Not a dkpca model, or one written by a newer dkpca.

    See Also
    --------
    save : Write a fitted model.

    Examples
    --------
    >>> import numpy as np, dkpca
    >>> pca = dkpca.PCA(n_components=1).fit(np.arange(10.0).reshape(5, 2))
    >>> dkpca.save(pca, "memory://doc/pca.zarr", overwrite=True)
    >>> dkpca.load("memory://doc/pca.zarr").components_.shape
    (1, 2)
    """
    location = Location(path, storage_options)
    require_complete(location)
    try:
        group = zarr.open_group(store=location.store, mode="r", **location.open_options)
    except (FileNotFoundError, zarr.errors.NodeNotFoundError) as err:
        raise FileNotFoundError(f"no saved model at {location}") from err
    except zarr.errors.ContainsArrayError as err:
        raise ValueError(f"{location} is a Zarr array, not a saved dkpca model") from err
    meta = group.attrs.get("dkpca")
    if not isinstance(meta, Mapping) or meta.get("format") != _FORMAT:
        raise ValueError(f"{location} is a Zarr group but not a saved dkpca model")
    if meta["format_version"] > FORMAT_VERSION:
        raise ValueError(
            f"{location} was written by dkpca {meta['dkpca_version']} in model format "
            f"{meta['format_version']}; this dkpca reads format {FORMAT_VERSION} and older. "
            f"Upgrade dkpca to load it."
        )
    reader = _Reader(parse_bytes(in_memory) if isinstance(in_memory, str) else int(in_memory))
    if meta["estimator"] == "FieldModel":
        estimator = group["estimator"]
        return read_field(group, meta["field"],
                          _read_estimator(estimator, estimator.attrs["dkpca"], reader, location))
    return _read_estimator(group, meta, reader, location)


def _read_estimator(group: zarr.Group, meta: Mapping[str, Any], reader: _Reader,
                    location: Location) -> KernelPCA | PCA:
    if meta["estimator"] not in _ESTIMATORS:
        raise ValueError(f"{location} holds an unknown estimator {meta['estimator']!r}")
    params = {name: reader.decode(value, group) for name, value in meta["params"].items()}
    model = _ESTIMATORS[meta["estimator"]]()
    model.set_params(**params)
    for key, encoded in meta["attributes"].items():
        setattr(model, key, reader.decode(encoded, group))
    return model
