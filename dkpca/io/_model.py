"""Fitted models as Zarr groups: arrays in Zarr, everything else as JSON attributes, no pickle.

Layout of a saved model::

    model.zarr/                  attrs["dkpca"] = {format, format_version, dkpca_version,
                                                   estimator, params, attributes}
      eigenvalues_               one array per array attribute
      basis_/                    a group per structured attribute (the KernelBasis)
        basis, coef, offset, ...

``attributes`` maps each fitted attribute to its encoding: ``{"value": <JSON>}``,
``{"array": <name>}``, ``{"kernel": <kernel config>}`` or ``{"dataclass": <type>, "group":
<name>, "fields": {...}}``. Anything else is refused at save time, so a saved model never holds
code.
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
import zarr
from dask.utils import parse_bytes

from dkpca.io._location import Location
from dkpca.io._zarr import atomic_group, store_array

__all__ = ["FORMAT_VERSION", "load", "save"]

logger = logging.getLogger(__name__)

#: Version of the on-disk layout; bumped when an older dkpca could not read a new file.
#: 2: ``KernelBasis.mean_coef`` (the feature-space mean, for pre-images).
FORMAT_VERSION = 2
_FORMAT = "dkpca.model"


def _estimators() -> dict[str, type]:
    from dkpca.decomposition import KernelPCA
    from dkpca.linear import PCA

    return {"KernelPCA": KernelPCA, "PCA": PCA}


def _dataclasses() -> dict[str, type]:
    from dkpca.solvers import KernelBasis

    return {"KernelBasis": KernelBasis}


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


class _Writer:
    """Encode attributes into a group, collecting the lazy stores of dask arrays."""

    def __init__(self) -> None:
        self.pending: list[da.Array] = []

    def encode(self, value: Any, group: zarr.Group, key: str, owner: str) -> dict[str, Any]:
        from dkpca.kernels import Kernel

        if isinstance(value, Kernel):
            return {"kernel": value.get_config()}
        if isinstance(value, np.ndarray | da.Array):
            lazy = store_array(group, key, value)
            if lazy is not None:
                self.pending.append(lazy)
            return {"array": key}
        if dataclasses.is_dataclass(value) and type(value).__name__ in _dataclasses():
            sub = group.create_group(key)
            fields = {
                f.name: self.encode(getattr(value, f.name), sub, f.name, f"{owner}.{f.name}")
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


def _encode_params(model: Any) -> dict[str, Any]:
    from dkpca.kernels import Kernel

    params: dict[str, Any] = {}
    for name, value in model.get_params(deep=False).items():
        if isinstance(value, Kernel):
            params[name] = {"kernel": value.get_config()}
        elif (encoded := _json_value(value)) is not None or value is None:
            params[name] = {"value": encoded}
        else:  # a numpy Generator as random_state: the fitted state does not need it
            logger.warning("save: parameter %s=%r has no JSON form; saved as None", name, value)
            params[name] = {"value": None}
    return params


def save(
    model: Any,
    path: str | os.PathLike,
    *,
    overwrite: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> None:
    """Save a fitted estimator as a Zarr group (atomically; no pickle).

    Parameters
    ----------
    model : KernelPCA or PCA
        A fitted estimator.
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

    Notes
    -----
    Lazy fitted attributes, such as the Nyström solver's ``eigenvectors_`` after fitting on a
    dask array, are views of the training data and are not saved (the loaded model lacks
    them; ``transform`` of the training data gives the scores). The model appears at ``path``
    only when it is complete: it is written beside it and renamed
    into place, and a failure leaves ``path`` as it was. Large arrays (the training data that an
    exact or randomized kernel PCA keeps as its basis) are streamed chunk by chunk.

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
    from dkpca import __version__
    from dkpca._validation import check_is_fitted
    from dkpca.blocked import compute

    name = type(model).__name__
    if _estimators().get(name) is not type(model):
        raise TypeError(f"save: {name} is not a dkpca estimator (known: {sorted(_estimators())})")
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
    check_is_fitted(model, "n_features_in_")
    writer = _Writer()
    with atomic_group(path, overwrite=overwrite, storage_options=storage_options) as group:
        attributes = {key: writer.encode(value, group, key, key) for key, value in state.items()}
        if writer.pending:
            compute(*writer.pending)
        group.attrs["dkpca"] = {
            "format": _FORMAT,
            "format_version": FORMAT_VERSION,
            "dkpca_version": __version__,
            "estimator": name,
            "params": _encode_params(model),
            "attributes": attributes,
        }
    logger.info("saved %s to %s", name, path)


class _Reader:
    def __init__(self, in_memory_bytes: int) -> None:
        self.in_memory_bytes = in_memory_bytes

    def decode(self, encoded: Mapping[str, Any], group: zarr.Group) -> Any:
        from dkpca.kernels import kernel_from_config

        if "value" in encoded:
            return encoded["value"]
        if "kernel" in encoded:
            return kernel_from_config(encoded["kernel"])
        if "array" in encoded:
            array = group[encoded["array"]]
            if array.nbytes <= self.in_memory_bytes:
                return array[...]
            return da.from_zarr(array, chunks=(array.chunks[0], *array.shape[1:]))
        if "dataclass" in encoded:
            cls = _dataclasses()[encoded["dataclass"]]
            sub = group[encoded["group"]]
            fields = {k: self.decode(v, sub) for k, v in encoded["fields"].items()}
            if (cls.__name__ == "KernelBasis" and "mean_coef" not in fields
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
) -> Any:
    """Load an estimator saved by :func:`save`.

    Parameters
    ----------
    path : str or path
        A local path or an fsspec URL.
    in_memory : int or str, default="256MiB"
        Arrays up to this size are read into memory; larger ones (a large training set kept as
        the kernel basis) stay lazy dask arrays reading the store, which must then stay in place
        while the model is used.
    storage_options : mapping, optional
        Options of a URL's fsspec file system.

    Returns
    -------
    KernelPCA or PCA
        Fitted, transforming exactly as the saved model did.

    Raises
    ------
    FileNotFoundError
        Nothing at ``path``.
    ValueError
        Not a dkpca model, or one written by a newer dkpca.

    Examples
    --------
    >>> import numpy as np, dkpca
    >>> pca = dkpca.PCA(n_components=1).fit(np.arange(10.0).reshape(5, 2))
    >>> dkpca.save(pca, "memory://doc/pca.zarr", overwrite=True)
    >>> dkpca.load("memory://doc/pca.zarr").components_.shape
    (1, 2)
    """
    location = Location(path, storage_options)
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
    estimators = _estimators()
    if meta["estimator"] not in estimators:
        raise ValueError(f"{location} holds an unknown estimator {meta['estimator']!r}")
    reader = _Reader(parse_bytes(in_memory) if isinstance(in_memory, str) else int(in_memory))
    params = {name: reader.decode(value, group) for name, value in meta["params"].items()}
    model = estimators[meta["estimator"]]()
    model.set_params(**params)
    for key, encoded in meta["attributes"].items():
        setattr(model, key, reader.decode(encoded, group))
    return model
