"""Fitted models as Zarr groups: arrays in Zarr, everything else as JSON attributes, no pickle.

:func:`save` and :func:`load` (``dkpca.save``/``dkpca.load``) sit above the estimators they
restore: this module imports :mod:`dkpca.decomposition`, :mod:`dkpca.linear`,
:mod:`dkpca.solvers` and :mod:`dkpca.kernels`, and nothing below it (:mod:`dkpca.io` above all)
imports it. ``import dkpca`` loads it on first use of ``dkpca.save``/``dkpca.load``, as it
does the estimators (they import scikit-learn).

How each attribute is encoded and decoded is :mod:`dkpca._model_encoding`; the checksums
recorded at save and every check made at load (and :class:`DamagedModelError`) are
:mod:`dkpca._model_integrity`. This module is the layout: what a model's group holds.

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
``{"kernel": <kernel config>}``, ``{"dataclass": <type>, "group": <name>, "fields": {...}}``
or ``{"strings": [...]}`` (``feature_names_in_``, the columns of a DataFrame fitted on).
``feature_dims_in_`` (the feature dimensions of a DataArray fitted on) is a ``value``, a list
of ``[name, size]`` pairs, restored as a tuple of tuples.
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
pre-images). 3: the ``RowStatistics`` dataclass (``row_statistics_``: the count, mean and
scatter that ``partial_fit`` continues from, kept by linear PCA's covariance solver and the
Nyström and fixed-size kernel solvers). 4: ``KernelPCA``'s solver and pre-image options as
:mod:`dkpca.options` objects (``{"options": <class>, "params": {...}}``) instead of one
parameter each; a model of format 3 or older loads with its options gathered into the object of
its solver. Models of formats 1 and 2 load and transform as before; ``partial_fit`` refuses to
continue them (they lack the statistics). The ``sparse`` encoding (a ``scipy.sparse`` basis, from sparse training data) did
not bump it: models with dense arrays are written exactly as before, and only a model with a
sparse basis uses the new encoding, which a dkpca that predates it refuses with "unknown
attribute encoding". The same holds for ``strings``, used only by a model fitted on a DataFrame, and for
``feature_dims_in_``, which an older dkpca loads as a plain attribute that it does not use. Nor did ``checksums``: an older dkpca ignores them, and a model of format 1 or 2 without
them (saved by an older dkpca) is verified as far as it can be. They came before format 3, so
a model of format 3 or later without them has been altered and is refused as damaged. Models
are Zarr v3 groups whatever zarr's default format; a model saved as a v2 group (by a dkpca that
followed zarr's default) loads as well.

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

import logging
import os
from collections.abc import Mapping
from typing import Any

import dask.array as da
import zarr
from dask.utils import parse_bytes

from dkpca._model_encoding import _json_value, _kernel_config, _Reader, _Writer
from dkpca._model_integrity import (
    DamagedModelError,
    _check_shapes,
    _checksum_arrays,
    _checksums,
    _damaged,
    _describe,
    _seal,
    _validate,
)
from dkpca._model_sources import lazy_sources, refuse_overlap, require_present
from dkpca._validation import check_is_fitted
from dkpca._version import __version__
from dkpca.decomposition import KernelPCA
from dkpca.io import IncompleteResultError, Location, atomic_group, require_complete
from dkpca.kernels import Kernel
from dkpca.linear import PCA
from dkpca.options import FLAT_NAMES, FLAT_PARAMETERS, OPTIONS, SolverOptions
from dkpca.xarray import FieldModel
from dkpca.xarray._store import read_field, write_field

__all__ = ["FORMAT_VERSION", "DamagedModelError", "load", "save"]

logger = logging.getLogger(__name__)

#: Version of the on-disk layout; bumped when an older dkpca could not read a new file.
#: 2: ``KernelBasis.mean_coef`` (the feature-space mean, for pre-images). 3: ``RowStatistics``.
#: 4: solver and pre-image options objects.
FORMAT_VERSION = 4
_FORMAT = "dkpca.model"

#: The estimators that a saved model may name (its fitted-state dataclasses:
#: :mod:`dkpca._model_encoding`).
_ESTIMATORS: dict[str, type] = {"KernelPCA": KernelPCA, "PCA": PCA}

#: The fitted attributes that may stay lazy above ``in_memory``: those with a row per training
#: point (the kernel basis and its coefficients, the training scores, the learned pre-image's
#: coefficients). Every other array (eigenvalues; all of a PCA's, k x d at most) is read into
#: memory, since the estimators compute with it as numpy.
_LAZY_ATTRIBUTES: dict[str, frozenset[str]] = {
    "KernelPCA": frozenset({"basis_", "eigenvectors_", "dual_coef_", "X_transformed_fit_"}),
    "PCA": frozenset(),
}


def _encode_params(model: Any) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for name, value in model.get_params(deep=False).items():
        if isinstance(value, SolverOptions):
            params[name] = {"options": type(value).__name__, "params": _encode_params(value)}
        elif name == "landmarks":  # Nystrom's given points: the fitted landmarks_ keep them
            params[name] = {"value": None}
        elif isinstance(value, Kernel):
            params[name] = {"kernel": _kernel_config(value, name)}
        elif (encoded := _json_value(value)) is not None or value is None:
            params[name] = {"value": encoded}
        else:  # a numpy Generator as random_state: the fitted state does not need it
            logger.warning("save: parameter %s=%r has no JSON form; saved as None", name, value)
            params[name] = {"value": None}
    return params


#: The options classes a saved model may name, by class name.
_OPTIONS: dict[str, type[SolverOptions]] = {cls.__name__: cls for cls in OPTIONS.values()}


#: What ``"auto"`` ran when it ran an iteration: whose options a format-3 model may have set.
_AUTO_ITERATIVE = {"solver": "randomized", "preimage": "fixed_point"}


def _legacy_options(params: dict[str, Any], where: str) -> dict[str, Any]:
    """Gather a format-3 model's solver and pre-image parameters into options objects.

    Each goes into the options of the solver (or pre-image) the model names, kept as the
    name when they are all defaults; those of another solver were unused by the fit. Under
    ``"auto"`` the solver that ran cannot be named, so non-default options of its iteration
    are dropped with a warning: they only matter to a refit.
    """
    legacy = {name: params.pop(name) for name in FLAT_NAMES & set(params)}
    for key, iterative in _AUTO_ITERATIVE.items():
        chosen = params.get(key)
        target = iterative if chosen == "auto" else chosen
        if target not in FLAT_PARAMETERS:
            continue
        cls = OPTIONS[target]
        options = cls(**{new: legacy[old] for old, new in FLAT_PARAMETERS[target].items()
                         if legacy.get(old) is not None})
        changed = sorted(name for name, value in options.get_params().items()
                         if value != cls().get_params()[name])
        if chosen != "auto" and changed:
            params[key] = options
        elif changed:
            logger.warning("load: %s was saved with %s='auto' and non-default %s options "
                           "(%s); they now belong to %s(...) and are dropped: they only "
                           "matter to a refit", where, key, target, ", ".join(changed),
                           cls.__name__)
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
        :class:`~dkpca.kernels.Kernel` subclass): use a named or registered kernel. Or
        ``path`` is, contains or lies inside a Zarr array that the model reads lazily (its
        training data given as a Zarr path, or the store of a model loaded lazily): saving
        there would leave the model in memory reading chunks that are gone. Or data that the
        arrays to be saved read lazily is gone or changed shape (Zarr would read missing
        chunks as its fill value): restore it, or refit.

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
        field = {key: value for key, value in vars(model).items() if key != "model_"}
        _check_sources(model, path, storage_options, writer, field)
        with atomic_group(path, overwrite=overwrite, storage_options=storage_options) as group:
            meta = _write(group.require_group("estimator"), writer, meta)
            field = write_field(model, group)
            described = {k: v for k, v in meta.items() if k != "checksums"}
            _seal(group, {**described, "estimator": "FieldModel", "field": field},
                  _checksum_arrays(group, skip="estimator"))
        logger.info("saved FieldModel to %s", path)
        return
    writer, meta = _prepare(model)
    _check_sources(model, path, storage_options, writer)
    with atomic_group(path, overwrite=overwrite, storage_options=storage_options) as group:
        _write(group, writer, meta)
    logger.info("saved %s to %s", meta["estimator"], path)


def _check_sources(model: Any, path: str | os.PathLike, storage_options: Mapping[str, Any] | None,
                   writer: _Writer, *more: Any) -> None:
    """Refuse to save over the Zarr data the model reads lazily, or data that is gone.

    Every lazy attribute counts for the first check (replacing its data breaks the model in
    memory); only the arrays to be written (``writer``'s, and ``more``) for the second.
    """
    refuse_overlap(lazy_sources(vars(model)), Location(path, storage_options))
    require_present(lazy_sources(*(value for _, _, value in writer.arrays),
                                 *(value for _, value, _ in writer.sparse), *more))


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
        Arrays up to this size are read into memory; larger ones with a row per training point
        (a large training set kept as a kernel PCA's basis, its coefficients and training
        scores) stay lazy dask arrays reading the store, which must then stay in place while
        the model is used (a chunk read after another model was saved there raises a
        ``ValueError`` saying that the store changed since the model was loaded). Every other array (eigenvalues; all of a PCA's arrays, k x d at
        most) and a sparse basis are always read into memory.
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
    recorded checksums (model formats 1 and 2 without ``checksums``; a later format without
    them is damaged) is verified as far as it can be: a chunk that cannot be decoded is an error, but a missing chunk cannot be told
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


#: Fitted attributes saved as JSON values whose Python type JSON does not keep: how to restore
#: it (a malformed value raises, and the model is refused as damaged).
_RESTORE = {
    # the feature dimensions of a DataArray fitted on, ((name, size), ...): JSON lists
    "feature_dims_in_": lambda value: tuple((str(name), int(size)) for name, size in value),
}


def _decode_param(reader: _Reader, encoded: Mapping[str, Any], group: zarr.Group) -> Any:
    """Decode one parameter: an options object's own parameters, or a value or kernel."""
    if "options" not in encoded:
        return reader.decode(encoded, group)
    cls = _OPTIONS[encoded["options"]]
    return cls(**{key: reader.decode(value, group) for key, value in encoded["params"].items()})


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
    legacy = name == "KernelPCA" and meta.get("format_version", 1) < 4
    params = {}
    for param, encoded in meta["params"].items():
        if param not in known and not (legacy and param in FLAT_NAMES):
            raise _damaged(location, f"the parameter {param!r} in {where}",
                           f"is not a parameter of {name}")
        try:
            params[param] = _decode_param(reader, encoded, group)
        except Exception as err:
            raise _damaged(location, f"the parameter {param} in {where}",
                           f"cannot be read ({_describe(err)})") from err
    if legacy:
        params = _legacy_options(params, str(location))
    model.set_params(**params)
    _validate(model, name, location)
    whole = reader.whole()
    for key, encoded in meta["attributes"].items():
        try:
            value = (reader if key in _LAZY_ATTRIBUTES[name] else whole).decode(encoded, group)
            setattr(model, key, _RESTORE[key](value) if key in _RESTORE else value)
        except DamagedModelError:
            raise
        except Exception as err:
            raise _damaged(location, f"the fitted attribute {key} in {where}",
                           f"cannot be restored ({_describe(err)})") from err
    _check_shapes(model, reader.prefix, location)
    reader.verify_description(meta)
    return model
