"""What the ``dkpca`` commands share.

The cluster, the input, the estimator, the checks made before anything is written, and the
results they print or write.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

from dkpca._errors import (
    UsageError,
)
from dkpca.cli._signals import closing_clusters_on_interrupt, output_written

logger = logging.getLogger("dkpca")


def client_options(args: argparse.Namespace) -> dict[str, Any]:
    from dkpca.cluster import SCHEDULER_TIMEOUT, tls_security

    if args.scheduler is not None:
        embedded = {"--workers": args.workers, "--threads-per-worker": args.threads_per_worker,
                    "--memory-limit": None if args.memory_limit == "auto" else args.memory_limit}
        given = [name for name, value in embedded.items() if value is not None]
        if given:
            raise UsageError(f"{', '.join(given)} apply to the embedded cluster, not --scheduler")
    elif args.scheduler_timeout is not None:
        raise UsageError("--scheduler-timeout applies to --scheduler, not the embedded cluster")
    one_gpu = args.device == "cuda" and args.scheduler is None and args.workers is None
    return {
        "scheduler": args.scheduler,
        "n_workers": 1 if one_gpu else args.workers,
        "threads_per_worker": args.threads_per_worker,
        "memory_limit": args.memory_limit,
        "security": tls_security(args.tls_ca_file, args.tls_cert, args.tls_key),
        "timeout": args.scheduler_timeout or SCHEDULER_TIMEOUT,
    }


@contextlib.contextmanager
def cluster(options: dict[str, Any]) -> Iterator[None]:
    from dkpca.cluster import connect
    from dkpca.io import stop_writers_before_cleanup

    with closing_clusters_on_interrupt(), connect(**options) as client:
        logger.info("dashboard: %s", client.dashboard_link)
        # An interrupted or failed write closes an embedded cluster before it removes its
        # partial output, so that no task still running can write into it afterwards.
        stopping = (contextlib.nullcontext() if options["scheduler"] is not None
                    else stop_writers_before_cleanup(client.cluster.close))
        try:
            with stopping:
                yield
        finally:
            # A progress feed still sleeping on the scheduler is cancelled at shutdown and
            # logged as an error by distributed; nothing is wrong, so keep it off the screen.
            logging.getLogger("distributed.scheduler").setLevel(logging.CRITICAL)


def storage(args: argparse.Namespace, place: Any) -> Any:
    """``--storage-options`` where ``place`` is a URL; nothing for a local path."""
    from dkpca.io import url_options

    return url_options(place, args.storage_options)


def open_input(args: argparse.Namespace) -> tuple[Any, Any]:
    """Return the input as a dask array, and the Zarr array it reads.

    A read that fails on a damaged chunk, and metadata that is not JSON, are reported as a
    ``ValueError`` that names the chunk or the metadata file (:mod:`dkpca.cli._reading`).
    """
    from dkpca.cli._reading import InputArray, damaged_metadata
    from dkpca.io import Location, as_dask, open_zarr

    options = storage(args, args.input)
    try:
        array = open_zarr(args.input, component=args.component, storage_options=options)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        fs, root = Location(args.input, options).filesystem()
        raise damaged_metadata(fs, root, args.input, args.component, err) from err
    label = str(args.input).rstrip("/")
    if args.component is not None:
        label = f"{label}/{args.component.strip('/')}"
    array = InputArray(array, label)
    return as_dask(array, sample_dim=args.sample_dim), array


def kernel_pca(args: argparse.Namespace) -> Any:
    """Build the :class:`dkpca.KernelPCA` the model options describe, its parameters checked.

    The checks are those ``fit`` makes first (the parameters' ranges, then their combination,
    such as ``--gamma`` with ``--sigma2``), made here so that a mistake is reported before
    the cluster starts; and ``--preimage learned`` without ``--fit-inverse-transform``, or
    ``--preimage fixed_point`` with a kernel other than RBF, which ``fit`` accepts but whose
    model could never denoise, and ``--alpha`` without ``--fit-inverse-transform``, which
    nothing would use.
    """
    from dkpca._estimator import parse_size
    from dkpca.cli._arguments import _default
    from dkpca.decomposition import KernelPCA
    from dkpca.kernels import RBF

    model = KernelPCA(
        args.n_components, kernel=args.kernel, gamma=args.gamma, sigma2=args.sigma2,
        degree=args.degree, coef0=args.coef0, solver=solver_from_args(args),
        min_relative_eigenvalue=args.min_relative_eigenvalue, random_state=args.random_state,
        max_memory=args.max_memory, preimage=args.preimage,
        fit_inverse_transform=args.fit_inverse_transform, alpha=args.alpha,
    )
    model._validate_params()
    if args.preimage == "learned" and not args.fit_inverse_transform:
        # the learned pre-image is fitted with the model: without it, it can never denoise
        raise UsageError("--preimage learned needs --fit-inverse-transform, which fits it with "
                         "the model; add it, or leave --preimage auto")
    kernel = model._resolve_kernel(1)  # n_features only fills in the default gamma
    if args.preimage == "fixed_point" and not isinstance(kernel, RBF):
        raise UsageError(f"--preimage fixed_point needs the rbf kernel, not {args.kernel}; use "
                         f"--preimage learned with --fit-inverse-transform")
    if args.alpha != _default("alpha") and not args.fit_inverse_transform:
        raise UsageError("--alpha is the learned pre-image's ridge penalty and applies with "
                         "--fit-inverse-transform; add it, or leave --alpha out")
    if args.max_memory != "auto":  # a size fit would parse only after the cluster starts
        parse_size(args.max_memory, "max_memory", "KernelPCA")
    return model


def solver_from_args(args: argparse.Namespace) -> Any:
    """Return ``--solver`` with the solver options given: a name, or a :mod:`dkpca.options` object.

    A solver option that the chosen solver does not take (``--n-landmarks`` with
    ``--solver randomized``, or any with ``--solver auto``, which decides the solver later)
    is refused rather than ignored.

    Examples
    --------
    >>> from argparse import Namespace
    >>> from dkpca.cli._arguments import SOLVER_FLAGS
    >>> args = Namespace(solver="nystrom", **{f[2:].replace("-", "_"): None for f in SOLVER_FLAGS})
    >>> args.n_landmarks = 50
    >>> solver_from_args(args)
    Nystrom(n_landmarks=50)
    """
    from dkpca.cli._arguments import SOLVER_FLAGS
    from dkpca.options import SOLVERS

    options = {}
    for flag, (solvers, param, _) in SOLVER_FLAGS.items():
        value = getattr(args, flag[2:].replace("-", "_"))
        if value is None:
            continue
        if args.solver not in solvers:
            raise UsageError(f"{flag} applies to --solver {' or '.join(solvers)}, not "
                             f"--solver {args.solver}")
        options[param] = value
    return args.solver if args.solver == "auto" else SOLVERS[args.solver](**options)


def check_outputs(args: argparse.Namespace, outputs: dict[str, Any]) -> None:
    """Check every output the command will write (``{option: destination}``), before any work.

    A destination that exists without ``--overwrite``, a folder that does not exist or cannot
    be written, two outputs at the same place (or one inside the other), an output at the
    place of what the command reads (INPUT, with its ``--component``, or MODEL; or one inside
    the other), which ``--overwrite`` would replace while it is read: each stops the command
    here, in one line that names the option. (``update`` writes MODEL in place on purpose: it
    checks that case itself, before calling this.)
    """
    from dkpca.io import check_destination

    given = {option: place for option, place in outputs.items() if place is not None}
    places = {option: _place(args, place) for option, place in given.items()}
    for i, (option, place) in enumerate(places.items()):
        for other, there in list(places.items())[i + 1:]:
            how = _overlap(place, there)
            if how:
                raise UsageError(f"{option} {given[option]} and {other} {given[other]} name "
                                 f"{how}; give each output a place of its own")
    for name, (shown, there) in _read_places(args).items():
        for option, place in places.items():
            how = _overlap(place, there)
            if how:
                raise UsageError(f"{option} {given[option]} and {name} {shown} name {how}: "
                                 f"the output would replace what the command reads; give "
                                 f"{option} another place")
    for option, destination in outputs.items():
        if destination is None:
            continue
        try:
            check_destination(destination, overwrite=args.overwrite,
                              storage_options=storage(args, destination))
        except OSError as err:  # exists, unwritable, not a folder: name the option to change
            raise type(err)(f"{option}: {first_line(err)}") from err


def _overlap(place: str, there: str) -> str:
    """Say how two places overlap: the same place, one inside the other, or not (``""``)."""
    if place == there:
        return "the same place"
    if there.startswith(place + "/") or place.startswith(there + "/"):
        return "one inside the other"
    return ""


def _read_places(args: argparse.Namespace) -> dict[str, tuple[str, str]]:
    """Return what the command reads: ``{name: (as given, normalised place)}``.

    INPUT's place is that of the array it reads (``--component`` inside the group), so that
    an output beside it in the same group is allowed, and one over it is not.
    """
    read = {}
    model = getattr(args, "model", None)
    if model is not None:
        read["MODEL"] = (str(model), _place(args, model))
    source = getattr(args, "input", None)
    if source is not None:
        component = (getattr(args, "component", None) or "").strip("/")
        place = _place(args, source)
        shown = f"{source} --component {component}" if component else str(source)
        read["INPUT"] = (shown, f"{place}/{component}" if component else place)
    return read


def check_figure_format(option: str, path: Any) -> None:
    """Refuse a figure path whose suffix matplotlib cannot write, before any work.

    The format is the suffix's, PNG without one, as :meth:`dkpca.ModelSelection.plot` writes
    it; the formats are matplotlib's (``FigureCanvasBase.get_supported_filetypes``).

    Examples
    --------
    >>> check_figure_format("--plot", "selection.svg")
    >>> check_figure_format("--plot", "selection")  # PNG
    >>> check_figure_format("--plot", "selection.xyz")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    dkpca._errors.UsageError: --plot selection.xyz: matplotlib cannot write .xyz figures; ...
    """
    import posixpath

    from matplotlib.backend_bases import FigureCanvasBase

    suffix = posixpath.splitext(os.fspath(path))[1].lstrip(".").lower()
    formats = FigureCanvasBase.get_supported_filetypes()
    if (suffix or "png") not in formats:
        raise UsageError(f"{option} {path}: matplotlib cannot write .{suffix} figures; end it "
                         f"in one of {', '.join('.' + f for f in sorted(formats))} (no "
                         f"suffix: PNG)")


def _place(args: argparse.Namespace, destination: Any) -> str:
    """Return where ``destination`` is, normalised (:attr:`dkpca.io.Location.place`)."""
    from dkpca.io import Location

    return Location(destination, storage(args, destination)).place


def first_line(err: BaseException) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def check_incremental(args: argparse.Namespace) -> None:
    """Refuse a saved model that ``partial_fit`` cannot continue, in one line.

    It is loaded as ``dkpca info`` loads it (large arrays only checked, not read): what
    decides is its class, its parameters and whether it kept row statistics.
    """
    from dkpca.persistence import load
    from dkpca.xarray import FieldModel

    model = load(args.model, in_memory="16MiB", storage_options=storage(args, args.model))
    name = type(model).__name__
    if isinstance(model, FieldModel):
        # The new rows of a FieldModel are fields on its grid, which an array does not give.
        how = ("update it in Python: FieldModel.partial_fit on the new fields opened with "
               "xarray, then dkpca.save" if hasattr(model, "partial_fit") else
               "which dkpca update does not support; fit it again with dkpca fields on all "
               "the fields")
        raise UsageError(f"{args.model} holds a FieldModel (from dkpca fields): {how}")
    try:
        model.partial_fit  # noqa: B018 - the attribute exists only for incremental solvers
    except AttributeError as err:  # one line that names the solvers that can continue
        raise UsageError(f"{first_line(err)} {args.model} cannot be updated.") from err
    if getattr(model, "row_statistics_", None) is None:
        version = model_description(args).get("format_version")
        if isinstance(version, int) and version < 3:
            why = (f"was saved in model format {version}, before dkpca kept the row "
                   f"statistics that an update continues from")
        else:
            why = (f"holds a {name} fitted by solver={model.solver_!r}, which keeps no row "
                   f"statistics to continue from")
        refit = ("PCA(solver='covariance')" if name == "PCA" else
                 f"dkpca fit --solver {model.solver_}")
        raise UsageError(f"{args.model} {why}; fit it again on all its rows ({refit}) to "
                         f"update it later")


def same_place(args: argparse.Namespace, first: Any, second: Any) -> bool:
    """Tell whether two paths or URLs name the same store (``--out`` may name MODEL itself).

    However spelled: ``./m.zarr``, ``m.zarr/``, a symbolic link to it (see :func:`_place`).
    """
    return _place(args, first) == _place(args, second)


def check_writable(args: argparse.Namespace, name: str, destination: Any) -> None:
    """Check, before any work, that ``destination`` can be replaced; name it in the error."""
    from dkpca.io import check_destination

    try:
        check_destination(destination, overwrite=True,
                          storage_options=storage(args, destination))
    except OSError as err:
        raise type(err)(f"{name}: {first_line(err)}") from err


def model_description(args: argparse.Namespace) -> Any:
    """Return the JSON description (``attrs["dkpca"]``) of the saved model at ``args.model``."""
    import zarr

    from dkpca.io import Location

    location = Location(args.model, storage(args, args.model))
    return zarr.open_group(store=location.store, mode="r", **location.open_options) \
        .attrs["dkpca"]


def print_selection(result: Any) -> None:
    table = result.table
    print(f"rule of thumb sigma2 (eq. 20): {table.attrs['rule_of_thumb']:.4g}; training "
          f"{table.attrs['n_train']} points, validation {table.attrs['n_validation']}")
    print("    sigma2  components  information")
    for sigma2, count, info in zip(table["sigma2"].values, table["n_components"].values,
                                   table["information"].values, strict=True):
        if count >= 0:
            mark = "  <- chosen" if sigma2 == result.sigma2 else ""
            print(f"{sigma2:10.4g}  {count:10d}  {info:11.4g}{mark}")


def explaining(n_components: Any, ratios: Any) -> str:
    """Return ``"N components explaining P% of the variance"`` for a summary line.

    An indefinite kernel (sigmoid, for instance) has negative eigenvalues, so the leading
    ones can add up to more than its trace, and their "shares of the variance" to more than
    100%: that is said instead of a share that cannot be one.

    Examples
    --------
    >>> import numpy as np
    >>> explaining(2, np.array([0.5, 0.25]))
    '2 components explaining 75.0% of the variance'
    >>> explaining(2, np.array([0.9, 0.4]))
    '2 components (the kernel is indefinite: their shares of its trace exceed 100%)'
    """
    if indefinite(ratios):
        return (f"{n_components} components (the kernel is indefinite: their shares of its "
                f"trace exceed 100%)")
    share = "" if ratios is None else f" explaining {float(sum(ratios)):.1%} of the variance"
    return f"{n_components} components{share}"


def indefinite(ratios: Any) -> bool:
    """Tell whether the shares of the trace add up to more than 1: an indefinite kernel."""
    return ratios is not None and float(sum(ratios)) > 1 + 1e-6


def print_eigenvalues(eigenvalues: Any, ratios: Any) -> None:
    print("component  eigenvalue  variance")
    for i, (value, ratio) in enumerate(zip(eigenvalues, ratios, strict=True), start=1):
        print(f"{i:9d}  {value:10.4g}  {ratio:8.2%}")


def sample_coordinate(args: argparse.Namespace, n_samples: int, sample_dim: str) -> Any:
    """Return the input group's coordinate array of the sample dimension, if it has one.

    ``n_samples`` is the output's row count: the input's sample axis need not be its first
    (``--sample-dim``), so its coordinate is matched against the rows, not the first axis.
    """
    import zarr

    from dkpca.io import Location

    if args.component is None:
        return None
    location = Location(args.input, storage(args, args.input))
    group = zarr.open_group(store=location.store, mode="r", **location.open_options)
    parent = group[args.component.rpartition("/")[0]] if "/" in args.component else group
    coordinate = parent.get(sample_dim)
    if isinstance(coordinate, zarr.Array) and coordinate.shape == (n_samples,):
        return coordinate
    return None


def write_rows(
    args: argparse.Namespace, model: Any, array: Any, name: str, rows: Any, column_dim: str,
    attributes: dict[str, Any], extra: dict[str, tuple[Any, tuple[str, ...]]],
    along: Any = None,
) -> tuple[float, Any]:
    """Write the lazy ``rows`` of a model applied to the input as a Zarr group, atomically.

    The group holds ``name`` (sample × ``column_dim``), the ``extra`` arrays and the input's
    sample coordinate (when its group has one), so xarray opens it as a Dataset. Returns the
    seconds taken, and ``along`` (a lazy value that shares the rows' tasks) computed with them.
    """
    from dkpca.blocked import compute
    from dkpca.io import atomic_group, store_array
    from dkpca.io._input import _dimension_names
    from dkpca.xarray import describe_model as _description

    names = _dimension_names(array)
    sample_dim = args.sample_dim or (names[0] if names else "sample")
    options = client_options(args)
    attributes = {**_description(model), **attributes, "model": str(args.model),
                  "input": str(args.input)}
    started = time.perf_counter()
    with cluster(options):
        with atomic_group(args.out, attributes=attributes, overwrite=args.overwrite,
                          storage_options=storage(args, args.out)) as group:
            pending = store_array(group, name, rows, dimension_names=(sample_dim, column_dim))
            for key, (values, dims) in extra.items():
                store_array(group, key, values, dimension_names=dims)
            coordinate = sample_coordinate(args, rows.shape[0], sample_dim)
            if coordinate is not None:
                store_array(group, sample_dim, coordinate[...], dimension_names=(sample_dim,),
                            attributes=dict(coordinate.attrs))
            if along is None:
                compute(pending)
            else:
                _, along = compute(pending, along)
        output_written(args.out)  # the cluster's shutdown may still be interrupted
    return time.perf_counter() - started, along


def load_array_model(args: argparse.Namespace) -> Any:
    """Load ``args.model``, refusing a model of fields, which needs its grid, not an array."""
    from dkpca.persistence import load
    from dkpca.xarray import FieldModel

    model = load(args.model, storage_options=storage(args, args.model))
    if isinstance(model, FieldModel):
        raise UsageError(
            f"{args.model} holds a FieldModel (from dkpca fields), which applies to gridded "
            f"fields, not to a Zarr array: open the fields with xarray and use "
            f"dkpca.load({str(args.model)!r}).transform(...) in Python")
    return model


def fitted(model: Any, name: str, default: Any = None) -> Any:
    """Return a fitted attribute of ``model``, else of the estimator it wraps, else ``default``.

    A FieldModel wraps its estimator; ``info`` describes whatever a saved model holds.
    """
    for owner in (model, getattr(model, "model_", None)):
        value = getattr(owner, name, None) if owner is not None else None
        if value is not None:
            return value
    return default


def or_unknown(value: Any) -> str:
    return "unknown" if value is None else str(value)
