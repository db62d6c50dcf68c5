"""The ``dkpca`` command: ``select``, ``fit``, ``fields``, ``transform``, ``denoise``, ``info``, ``demo``.

``dkpca select INPUT`` chooses the RBF width and the number of components (MDD, kernel parallel
analysis or Shannon entropy), prints the choice and writes its figure; ``dkpca fit INPUT --out
MODEL`` fits kernel PCA on a Zarr array (a path or URL, or a group and ``--component``) and
saves the model; ``dkpca fields INPUT --out RESULT`` fits PCA (EOFs) or kernel PCA on the
gridded variables of a Zarr group written by xarray (land masks, ``--weights coslat``,
``--nan-policy``; see :mod:`dkpca._cli_fields`); ``dkpca transform MODEL INPUT --out SCORES`` writes the scores as a Zarr group
that xarray opens as a Dataset; ``dkpca denoise MODEL INPUT --out OUTPUT`` writes the
pre-images of INPUT's projections; ``dkpca info MODEL`` describes a saved model; ``dkpca demo`` is
what ``make run`` runs. ``select``, ``fit``, ``fields``, ``transform`` and ``denoise`` start an embedded
``LocalCluster`` unless ``--scheduler`` names a running one.

A user error (a missing input, a bad parameter, a wrong shape, an existing output, a refused
certificate) prints one line to stderr and exits with status 2, before anything is written;
``--debug`` shows the traceback instead. A failure that may pass (a scheduler not reachable
within ``--scheduler-timeout``, a connection to it lost mid-run) prints one line and exits with
status 75, for a batch system to retry; Ctrl-C or SIGTERM exits with 130. Outputs are written
atomically: an interrupted run leaves none. Progress goes to stderr: a bar on a terminal, a
line every ``--progress-interval`` seconds elsewhere.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from dkpca._errors import (  # UsageError re-exported: dkpca.cli.UsageError predates _errors
    EXIT_INTERRUPTED,
    EXIT_TRANSIENT,
    EXIT_USAGE,
    TransientError,
    UsageError,
)

__all__ = ["UsageError", "main"]

logger = logging.getLogger("dkpca")

#: Exceptions that mean the user asked for something impossible, reported in one line.
_USER_ERRORS = (ValueError, TypeError, FileNotFoundError, FileExistsError, ImportError,
                ConnectionError)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def _count_or_fraction(text: str, expected: str) -> int | float:
    """Parse an int, else a float; ``expected`` describes both in the error."""
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {expected}, got {text}") from None


def _n_components(text: str) -> int | float:
    """Parse a count (an int) or a variance fraction (a float in (0, 1))."""
    return _count_or_fraction(text, "a count (10) or a variance fraction (0.9)")


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"not valid JSON ({err.msg}): {text}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {text}")
    return value


def _sigma2_grid(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated numbers, got {text}") from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"must be positive numbers, got {text}")
    return values


def _validation(text: str) -> str | int | float | None:
    """Parse ``rest``, ``none``, a count or a fraction in (0, 1]."""
    if text in ("rest", "none"):
        return None if text == "none" else text
    return _count_or_fraction(text, "rest, none, a count (500) or a fraction (0.5)")


def _input_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("input")
    group.add_argument("--component", help="array inside the input Zarr group")
    group.add_argument("--sample-dim",
                       help="sample dimension of an input with dimension names (default: first)")
    group.add_argument("--storage-options", type=_json_object, default=None, metavar="JSON",
                       help='fsspec options for URLs, e.g. \'{"anon": true}\'')


def _output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="Zarr path or URL to write")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")


def _cluster_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cluster")
    group.add_argument("--scheduler", metavar="ADDRESS",
                       help="address of a running scheduler (default: an embedded LocalCluster)")
    group.add_argument("--workers", type=_positive_int, default=None,
                       help="embedded cluster: worker processes")
    group.add_argument("--threads-per-worker", type=_positive_int, default=None,
                       help="embedded cluster: threads per worker")
    group.add_argument("--memory-limit", default="auto",
                       help="embedded cluster: memory per worker, e.g. 4GiB (default: auto)")
    group.add_argument("--scheduler-timeout", type=_positive_float, default=None,
                       metavar="SECONDS",
                       help="--scheduler: how long to wait for it to come up, retrying with "
                            "backoff (default: 600); then exit with status 75")
    group.add_argument("--tls-ca-file", help="TLS: certificate authority (PEM)")
    group.add_argument("--tls-cert", help="TLS: certificate of this client (PEM)")
    group.add_argument("--tls-key", help="TLS: private key of --tls-cert (PEM)")


def _model_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model")
    group.add_argument("--kernel", default="rbf", choices=["rbf", "poly", "sigmoid", "linear"])
    group.add_argument("--gamma", type=float, help="kernel coefficient (default: 1/n_features)")
    group.add_argument("--sigma2", type=float, help="RBF width, exp(-|x-y|^2 / (2 sigma2))")
    group.add_argument("--degree", type=int, default=3, help="polynomial degree")
    group.add_argument("--coef0", type=float, default=1.0, help="poly/sigmoid offset")
    group.add_argument("--solver", default="auto",
                       choices=["auto", "exact", "randomized", "sketch", "nystrom", "fixed_size",
                                "icf"])
    group.add_argument("--n-components", type=_n_components, default=None,
                       help="a count, or a variance fraction in (0, 1)")
    group.add_argument("--min-relative-eigenvalue", type=float, default=None)
    group.add_argument("--random-state", type=int, default=None)
    group.add_argument("--max-memory", default="auto",
                       help="memory the kernel may take, e.g. 8GiB (default: auto: for the "
                            "randomized solver's cached tiles, the workers' free memory)")
    group.add_argument("--cache-dtype", default="auto", choices=["auto", "float32", "float64"],
                       help="randomized: precision of the kernel tiles (products are "
                            "accumulated in float64)")
    group.add_argument("--n-landmarks", type=_positive_int, default=None,
                       help="nystrom, fixed_size: landmarks (default: min(n, 1000))")
    group.add_argument("--sampling", default="uniform",
                       choices=["uniform", "diagonal", "column_norm", "kmeans"],
                       help="nystrom: how landmarks are chosen")
    group.add_argument("--selection", default="renyi_kmeans", choices=["renyi_kmeans", "renyi"],
                       help="fixed_size: FS2 (k-means start) or FS (random start)")
    group.add_argument("--icf-tol", type=float, default=None,
                       help="icf: stop when the residual trace is below this "
                            "(default: 1e-3 of the kernel's trace)")
    group.add_argument("--max-rank", type=_positive_int, default=None,
                       help="icf: most pivots (default: min(n, 1000))")
    group.add_argument("--sketch", default="gaussian", choices=["gaussian", "hashing"],
                       help="sketch: the dot-product preserving transform")
    group.add_argument("--sketch-dim", type=_positive_int, default=None,
                       help="sketch: its dimension q")
    group.add_argument("--preimage", default="auto", choices=["auto", "fixed_point", "learned"],
                       help="pre-images for denoise: fixed-point (RBF) or learned (any kernel)")
    group.add_argument("--fit-inverse-transform", action="store_true",
                       help="learn the kernel ridge pre-image (needed for non-RBF kernels)")
    group.add_argument("--alpha", type=float, default=1.0,
                       help="ridge penalty of the learned pre-image (default: 1.0)")


def _parser() -> argparse.ArgumentParser:
    from dkpca._version import __version__

    parser = argparse.ArgumentParser(
        prog="dkpca", description="Kernel PCA for data larger than memory, on Dask.",
        epilog=f"exit status: 0 done; {EXIT_USAGE} user error (a rerun fails the same way); "
               f"{EXIT_TRANSIENT} transient failure: scheduler unreachable or lost (retry); "
               f"{EXIT_INTERRUPTED} interrupted (Ctrl-C, SIGTERM)",
    )
    parser.add_argument("--version", action="version", version=f"dkpca {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--quiet", action="store_true", help="print only the summary")
    common.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    common.add_argument("--progress-interval", type=_positive_float, default=None,
                        metavar="SECONDS",
                        help="seconds between progress lines when stderr is not a terminal "
                             "(logs, kubectl logs; default 10); a terminal gets a bar")
    commands = parser.add_subparsers(dest="command", required=True)

    select = commands.add_parser(
        "select", parents=[common], help="choose the RBF width and number of components",
        description="Choose sigma2 and the number of components for RBF kernel PCA on INPUT "
                    "(MDD, kernel parallel analysis or Shannon entropy), print the choice and "
                    "write the figure of the data and noise spectra.",
    )
    select.add_argument("input", help="Zarr array (path or URL), or a group with --component")
    _input_options(select)
    group = select.add_argument_group("model selection")
    group.add_argument("--method", default="mdd", choices=["mdd", "kpa", "shannon"])
    group.add_argument("--n-components", type=_positive_int, default=None,
                       help="fix the number of components and choose sigma2 only")
    group.add_argument("--n-draws", type=_positive_int, default=100,
                       help="Monte Carlo draws or permutations (default: 100)")
    group.add_argument("--percentile", type=float, default=95.0,
                       help="noise spectrum percentile over the draws (default: 95)")
    group.add_argument("--sigma2-grid", type=_sigma2_grid, default=None, metavar="S1,S2,...",
                       help="widths to try (default: 20 from 0.1x to 10x the rule of thumb)")
    group.add_argument("--training", default="random", choices=["random", "fs2", "icf"],
                       help="training set: random rows, FS2 landmarks or ICF pivots")
    group.add_argument("--n-train", type=_positive_int, default=None,
                       help="training-set size (default: half the rows, at most 1000)")
    group.add_argument("--validation", type=_validation, default="rest",
                       help="rest (default), none, a count or a fraction of the other rows")
    group.add_argument("--icf-tol", type=float, default=None,
                       help="--training icf: residual trace at which pivoting stops")
    group.add_argument("--random-state", type=int, default=None)
    group = select.add_argument_group("output")
    group.add_argument("--plot", default="model-selection.png",
                       help="figure to write, a path or URL (s3://…), atomically (default: "
                            "model-selection.png)")
    group.add_argument("--table", default=None,
                       help="also write the spectra and criteria as a Zarr group (xarray), "
                            "a path or URL")
    group.add_argument("--overwrite", action="store_true", help="replace existing outputs")
    _cluster_options(select)

    fit = commands.add_parser("fit", parents=[common], help="fit kernel PCA on a Zarr array",
                              description="Fit kernel PCA on INPUT and save the model.")
    fit.add_argument("input", help="Zarr array (path or URL), or a group with --component")
    _output_options(fit)
    _input_options(fit)
    _model_options(fit)
    _cluster_options(fit)

    from dkpca import _cli_fields

    _cli_fields.add_parser(commands, [common], [_model_options, _cluster_options])

    transform = commands.add_parser(
        "transform", parents=[common], help="project a Zarr array with a saved model",
        description="Project INPUT on the components of MODEL and write the scores.",
    )
    transform.add_argument("model", help="saved model (from dkpca fit)")
    transform.add_argument("input", help="Zarr array (path or URL), or a group with --component")
    _output_options(transform)
    _input_options(transform)
    _cluster_options(transform)

    denoise = commands.add_parser(
        "denoise", parents=[common], help="denoise a Zarr array with a saved model",
        description="Project INPUT on the components of MODEL and map it back to the input "
                    "space (pre-images), writing the denoised points.",
    )
    denoise.add_argument("model", help="saved KernelPCA model (from dkpca fit)")
    denoise.add_argument("input", help="Zarr array (path or URL), or a group with --component")
    _output_options(denoise)
    _input_options(denoise)
    _cluster_options(denoise)

    info = commands.add_parser("info", parents=[common], help="describe a saved model")
    info.add_argument("model", help="saved model (from dkpca fit)")
    info.add_argument("--storage-options", type=_json_object, default=None, metavar="JSON")

    demo = commands.add_parser(
        "demo", parents=[common],
        help="choose the model by MDD, fit kernel PCA on generated rings, plot both",
    )
    demo.add_argument("--out", type=Path, default=Path("demo-output"),
                      help="folder for the figure (default: demo-output)")
    demo.add_argument("--n-samples", type=_positive_int, default=3000)
    demo.add_argument("--n-components", type=_positive_int, default=None,
                      help="fix the number of components (default: chosen by MDD)")
    demo.add_argument("--n-draws", type=_positive_int, default=50,
                      help="MDD Monte Carlo draws (default: 50)")
    demo.add_argument("--random-state", type=int, default=0)
    _cluster_options(demo)
    return parser


def _client_options(args: argparse.Namespace) -> dict[str, Any]:
    from dkpca.cluster import SCHEDULER_TIMEOUT, tls_security

    if args.scheduler is not None:
        embedded = {"--workers": args.workers, "--threads-per-worker": args.threads_per_worker,
                    "--memory-limit": None if args.memory_limit == "auto" else args.memory_limit}
        given = [name for name, value in embedded.items() if value is not None]
        if given:
            raise UsageError(f"{', '.join(given)} apply to the embedded cluster, not --scheduler")
    elif args.scheduler_timeout is not None:
        raise UsageError("--scheduler-timeout applies to --scheduler, not the embedded cluster")
    return {
        "scheduler": args.scheduler,
        "n_workers": args.workers,
        "threads_per_worker": args.threads_per_worker,
        "memory_limit": args.memory_limit,
        "security": tls_security(args.tls_ca_file, args.tls_cert, args.tls_key),
        "timeout": args.scheduler_timeout or SCHEDULER_TIMEOUT,
    }


@contextlib.contextmanager
def _cluster(options: dict[str, Any]) -> Iterator[None]:
    from dkpca.cluster import connect
    from dkpca.io import stop_writers_before_cleanup

    with connect(**options) as client:
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


def _storage(args: argparse.Namespace, place: Any) -> Any:
    """``--storage-options`` where ``place`` is a URL; nothing for a local path."""
    from dkpca.io import url_options

    return url_options(place, args.storage_options)


def _open_input(args: argparse.Namespace) -> tuple[Any, Any]:
    """Return the input as a dask array, and the Zarr array it reads."""
    from dkpca.io import as_dask, open_zarr

    array = open_zarr(args.input, component=args.component,
                      storage_options=_storage(args, args.input))
    return as_dask(array, sample_dim=args.sample_dim), array


def _kernel_pca(args: argparse.Namespace) -> Any:
    """Build the :class:`dkpca.KernelPCA` the model options describe, its parameters checked."""
    from dkpca._validation import validate_params
    from dkpca.decomposition import KernelPCA

    model = KernelPCA(
        args.n_components, kernel=args.kernel, gamma=args.gamma, sigma2=args.sigma2,
        degree=args.degree, coef0=args.coef0, solver=args.solver,
        min_relative_eigenvalue=args.min_relative_eigenvalue, random_state=args.random_state,
        max_memory=args.max_memory, cache_dtype=args.cache_dtype, n_landmarks=args.n_landmarks,
        sampling=args.sampling, sketch=args.sketch, sketch_dim=args.sketch_dim,
        selection=args.selection, icf_tol=args.icf_tol, max_rank=args.max_rank,
        preimage=args.preimage, fit_inverse_transform=args.fit_inverse_transform,
        alpha=args.alpha,
    )
    validate_params(model.get_params(), model._parameter_constraints, "KernelPCA")
    return model


def _fit(args: argparse.Namespace) -> str:
    from dkpca.io import check_destination
    from dkpca.persistence import save

    model = _kernel_pca(args)
    X, _ = _open_input(args)
    check_destination(args.out, overwrite=args.overwrite, storage_options=_storage(args, args.out))
    options = _client_options(args)
    started = time.perf_counter()
    with _cluster(options):
        logger.info("fitting %s on %s (%d x %d)", model, args.input, *X.shape)
        model.fit(X)
        save(model, args.out, overwrite=args.overwrite, storage_options=_storage(args, args.out))
    elapsed = time.perf_counter() - started
    if not args.quiet:
        _print_eigenvalues(model)
    return (f"fitted {model.kernel_!r} kernel PCA ({model.solver_}) on {X.shape[0]} x "
            f"{X.shape[1]}: {model.n_components_} components explaining "
            f"{model.explained_variance_ratio_.sum():.1%} of the variance, in {elapsed:.1f} s; "
            f"model: {args.out}")


def _select(args: argparse.Namespace) -> str:
    from dkpca.io import check_destination
    from dkpca.selection import select_model

    X, _ = _open_input(args)
    plot = args.plot
    for option, destination in (("--plot", plot), ("--table", args.table)):
        if destination is None:
            continue
        try:
            check_destination(destination, overwrite=args.overwrite,
                              storage_options=_storage(args, destination))
        except FileExistsError:
            raise UsageError(f"{option} {destination} exists; pass --overwrite to replace "
                             "it") from None
    started = time.perf_counter()
    with _cluster(_client_options(args)):
        logger.info("selecting the model for %s (%d x %d) by %s", args.input, *X.shape,
                    args.method)
        result = select_model(
            X, args.method, sigma2_grid=args.sigma2_grid, n_components=args.n_components,
            n_draws=args.n_draws, percentile=args.percentile, training=args.training,
            n_train=args.n_train, validation=args.validation, icf_tol=args.icf_tol,
            random_state=args.random_state,
        )
    elapsed = time.perf_counter() - started
    import matplotlib

    matplotlib.use("Agg")
    result.plot(plot, storage_options=_storage(args, plot))
    if args.table is not None:
        from dkpca.io import atomic_location

        with atomic_location(args.table, overwrite=args.overwrite,
                             storage_options=_storage(args, args.table)) as temp:
            result.table.to_zarr(temp.store, mode="w-", consolidated=False)
    if not args.quiet:
        _print_selection(result)
    next_step = ("" if result.sigma2 is None or not result.n_components else
                 f"; next: dkpca fit {args.input} --sigma2 {result.sigma2:.6g} "
                 f"--n-components {result.n_components} --out MODEL")
    return f"{result} in {elapsed:.1f} s; figure: {plot}{next_step}"


def _fields(args: argparse.Namespace) -> str:
    from dkpca import _cli_fields

    return _cli_fields.run(args, lambda: _cluster(_client_options(args)), _kernel_pca)


def _print_selection(result: Any) -> None:
    table = result.table
    print(f"rule of thumb sigma2 (eq. 20): {table.attrs['rule_of_thumb']:.4g}; training "
          f"{table.attrs['n_train']} points, validation {table.attrs['n_validation']}")
    print("    sigma2  components  information")
    for sigma2, count, info in zip(table["sigma2"].values, table["n_components"].values,
                                   table["information"].values, strict=True):
        if count >= 0:
            mark = "  <- chosen" if sigma2 == result.sigma2 else ""
            print(f"{sigma2:10.4g}  {count:10d}  {info:11.4g}{mark}")


def _print_eigenvalues(model: Any) -> None:
    print("component  eigenvalue  variance")
    for i, (value, ratio) in enumerate(
        zip(model.eigenvalues_, model.explained_variance_ratio_, strict=True), start=1
    ):
        print(f"{i:9d}  {value:10.4g}  {ratio:8.2%}")


def _sample_coordinate(args: argparse.Namespace, array: Any, sample_dim: str) -> Any:
    """Return the input group's coordinate array of the sample dimension, if it has one."""
    import zarr

    from dkpca.io import Location

    if args.component is None:
        return None
    location = Location(args.input, _storage(args, args.input))
    group = zarr.open_group(store=location.store, mode="r", **location.open_options)
    parent = group[args.component.rpartition("/")[0]] if "/" in args.component else group
    coordinate = parent.get(sample_dim)
    if isinstance(coordinate, zarr.Array) and coordinate.shape == (array.shape[0],):
        return coordinate
    return None


def _write_rows(
    args: argparse.Namespace, model: Any, array: Any, name: str, rows: Any, column_dim: str,
    attributes: dict[str, Any], extra: dict[str, tuple[Any, tuple[str, ...]]],
) -> float:
    """Write the lazy ``rows`` of a model applied to the input as a Zarr group, atomically.

    The group holds ``name`` (sample × ``column_dim``), the ``extra`` arrays and the input's
    sample coordinate (when its group has one), so xarray opens it as a Dataset. Returns the
    seconds taken.
    """
    from dkpca.blocked import compute
    from dkpca.io import atomic_group, check_destination, store_array
    from dkpca.io._input import _dimension_names
    from dkpca.xarray import describe_model as _description

    check_destination(args.out, overwrite=args.overwrite, storage_options=_storage(args, args.out))
    names = _dimension_names(array)
    sample_dim = args.sample_dim or (names[0] if names else "sample")
    options = _client_options(args)
    attributes = {**_description(model), **attributes, "model": str(args.model),
                  "input": str(args.input)}
    started = time.perf_counter()
    with (
        _cluster(options),
        atomic_group(args.out, attributes=attributes, overwrite=args.overwrite,
                     storage_options=_storage(args, args.out)) as group,
    ):
        pending = store_array(group, name, rows, dimension_names=(sample_dim, column_dim))
        for key, (values, dims) in extra.items():
            store_array(group, key, values, dimension_names=dims)
        coordinate = _sample_coordinate(args, array, sample_dim)
        if coordinate is not None:
            store_array(group, sample_dim, coordinate[...], dimension_names=(sample_dim,),
                        attributes=dict(coordinate.attrs))
        compute(pending)
    return time.perf_counter() - started


def _transform(args: argparse.Namespace) -> str:
    import numpy as np

    from dkpca.persistence import load

    model = load(args.model, storage_options=_storage(args, args.model))
    X, array = _open_input(args)
    scores = model.transform(X)  # lazy: a feature mismatch is reported here, before any work
    eigenvalues = np.asarray(
        getattr(model, "eigenvalues_", getattr(model, "explained_variance_", None)))
    extra = {"eigenvalues": (eigenvalues, ("component",)),
             "component": (np.arange(1, len(eigenvalues) + 1), ("component",))}
    elapsed = _write_rows(args, model, array, "scores", scores, "component",
                          {"eigenvalues": [float(v) for v in eigenvalues]}, extra)
    return (f"projected {X.shape[0]} x {X.shape[1]} on {len(eigenvalues)} components in "
            f"{elapsed:.1f} s; scores: {args.out}")


def _denoise(args: argparse.Namespace) -> str:
    from dkpca.persistence import load

    model = load(args.model, storage_options=_storage(args, args.model))
    if not hasattr(model, "denoise"):
        raise UsageError(f"{args.model} holds a {type(model).__name__}, which cannot denoise; "
                         f"fit a KernelPCA")
    X, array = _open_input(args)
    denoised = model.denoise(X)  # lazy; a mismatch or an impossible pre-image is reported here
    method = model._preimage_method()
    elapsed = _write_rows(args, model, array, "X", denoised, "feature",
                          {"preimage": method}, {})
    return (f"denoised {X.shape[0]} x {X.shape[1]} with {model.n_components_} components "
            f"({method} pre-images) in {elapsed:.1f} s; output: {args.out}")


def _info(args: argparse.Namespace) -> str:
    import zarr

    from dkpca.io import Location
    from dkpca.persistence import load

    model = load(args.model, in_memory="16MiB", storage_options=_storage(args, args.model))
    location = Location(args.model, _storage(args, args.model))
    meta = zarr.open_group(store=location.store, mode="r", **location.open_options).attrs["dkpca"]
    print(f"model:      {args.model}")
    print(f"written by: dkpca {meta['dkpca_version']} (model format {meta['format_version']})")
    print(f"estimator:  {model!r}")
    n_samples = getattr(getattr(model, "basis_", None), "n_samples", None)
    n_samples = getattr(model, "n_samples_", n_samples)
    print(f"trained on: {n_samples} samples x {model.n_features_in_} features")
    if hasattr(model, "kernel_"):
        print(f"kernel:     {model.kernel_!r}, solver {model.solver_} ({model.n_iter_} passes)")
    if hasattr(model, "eigenvalues_"):
        _print_eigenvalues(model)
    return (f"{type(model).__name__} with {model.n_components_} components "
            f"({model.explained_variance_ratio_.sum():.1%} of the variance)")


def _run(args: argparse.Namespace) -> str:
    from dkpca._progress import progress_bar

    if args.command == "info":
        return _info(args)
    if args.command == "demo":
        from dkpca._demo import run_demo

        model, summary = run_demo(args, _client_options(args))
        print("eigenvalues of the centred kernel matrix:")
        _print_eigenvalues(model)
        return summary
    reporting = progress_bar(sys.stderr, phase=args.command, interval=args.progress_interval)
    with reporting if not args.quiet else contextlib.nullcontext():
        handlers = {"select": _select, "fit": _fit, "transform": _transform, "denoise": _denoise,
                    "fields": _fields}
        return handlers[args.command](args)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``dkpca`` command; return its exit status.

    Examples
    --------
    >>> main(["demo", "--n-samples", "300", "--quiet"])  # doctest: +SKIP
    0
    """
    args = _parser().parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", datefmt="%H:%M:%S"))
    logger.addHandler(handler)  # dkpca's progress only; dask's own logs stay at their level
    logger.setLevel(logging.WARNING if args.quiet else logging.INFO)
    previous_sigterm = _interrupt_on_sigterm()
    try:
        summary = _run(args)
    except (TransientError, UsageError, *_USER_ERRORS) as err:
        if args.debug:
            raise
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"dkpca: error: {message}", file=sys.stderr)
        return EXIT_TRANSIENT if isinstance(err, TransientError) else EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM
        print("dkpca: interrupted; no output was written", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        logger.removeHandler(handler)
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)
    print(summary)
    return 0


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _interrupt_on_sigterm() -> Any:
    """Treat SIGTERM (Kubernetes, batch systems) like Ctrl-C, so outputs are cleaned up.

    Returns the previous handler, or ``None`` where handlers cannot be set (not the main
    thread).
    """
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _raise_interrupt)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
