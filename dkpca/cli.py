"""The ``dkpca`` command: select, fit, update, fields, transform, denoise, info and demo.

``dkpca select INPUT`` chooses the RBF width and the number of components (MDD, kernel parallel
analysis or Shannon entropy), prints the choice and writes its figure; ``dkpca fit INPUT --out
MODEL`` fits kernel PCA on a Zarr array (a path or URL, or a group and ``--component``) and
saves the model; ``dkpca update MODEL NEW`` adds the rows of the Zarr array NEW to a saved
model that can continue (``partial_fit``) and replaces it atomically, or writes it to
``--out``; ``dkpca fields INPUT --out RESULT`` fits PCA (EOFs) or kernel PCA on the
gridded variables of a Zarr group written by xarray (land masks, ``--weights coslat``,
``--nan-policy``; see :mod:`dkpca._cli_fields`); ``dkpca transform MODEL INPUT --out SCORES`` writes the scores as a Zarr group
that xarray opens as a Dataset; ``dkpca denoise MODEL INPUT --out OUTPUT`` writes the
pre-images of INPUT's projections; ``dkpca info MODEL`` describes a saved model; ``dkpca demo`` is
what ``make run`` runs. ``select``, ``fit``, ``update``, ``fields``, ``transform`` and ``denoise``
start an embedded ``LocalCluster`` unless ``--scheduler`` names a running one.

A user error (a missing input, a bad parameter, a wrong shape, an existing output, a refused
certificate) prints one line to stderr and exits with status 2, before anything is written;
``--debug`` shows the traceback instead. A failure that may pass (a scheduler not reachable
within ``--scheduler-timeout``, a connection to it lost mid-run) prints one line and exits with
status 75, for a batch system to retry; Ctrl-C or SIGTERM exits with 130. Outputs are written
atomically: an interrupted run leaves none (``update`` leaves MODEL as it was). Progress goes
to stderr: a bar on a terminal, a line every ``--progress-interval`` seconds elsewhere.
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

import dask

from dkpca._cli_fields import json_object
from dkpca._device import DEVICES, DeviceUnavailableError
from dkpca._errors import (  # UsageError re-exported: dkpca.cli.UsageError predates _errors
    EXIT_INTERRUPTED,
    EXIT_TRANSIENT,
    EXIT_USAGE,
    TransientError,
    UsageError,
)

__all__ = ["UsageError", "main"]

logger = logging.getLogger("dkpca")

#: Exceptions that mean the user asked for something impossible, reported in one line: an
#: output that cannot be written (a read-only folder, a file where a folder should be) too.
_USER_ERRORS = (ValueError, TypeError, FileNotFoundError, FileExistsError, PermissionError,
                NotADirectoryError, IsADirectoryError, ImportError, ConnectionError,
                DeviceUnavailableError)


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


def _memory_limit(text: str) -> str | int:
    """Parse ``auto`` or a size (``4GiB``), so that a bad one is reported with its option."""
    from dask.utils import parse_bytes

    if text == "auto":
        return text
    try:
        return parse_bytes(text)
    except (ValueError, TypeError):
        raise argparse.ArgumentTypeError(f"must be auto or a size such as 4GiB, got {text}") \
            from None


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
    group.add_argument("--storage-options", type=json_object, default=None, metavar="JSON",
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
    group.add_argument("--memory-limit", type=_memory_limit, default="auto",
                       help="embedded cluster: memory per worker, e.g. 4GiB (default: auto)")
    group.add_argument("--scheduler-timeout", type=_positive_float, default=None,
                       metavar="SECONDS",
                       help="--scheduler: how long to wait for it to come up, retrying with "
                            "backoff (default: 600); then exit with status 75")
    group.add_argument("--device", choices=DEVICES, default="cpu",
                       help="where the kernel work runs: cuda = each worker's NVIDIA GPU, "
                            "through CuPy (the randomized and sketch solvers' tiles, Nystrom's "
                            "pass, transform, pre-images, model selection's eigenproblems; "
                            "default: cpu; the embedded cluster then has one worker, for one "
                            "GPU)")
    group.add_argument("--tls-ca-file", help="TLS: certificate authority (PEM)")
    group.add_argument("--tls-cert", help="TLS: certificate of this client (PEM)")
    group.add_argument("--tls-key", help="TLS: private key of --tls-cert (PEM)")


def _model_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model")
    group.add_argument("--kernel", default="rbf", choices=_named_kernels(),
                       help="a registered kernel (default: rbf)")
    group.add_argument("--gamma", type=float, help="kernel coefficient (default: 1/n_features)")
    group.add_argument("--sigma2", type=float, help="RBF width, exp(-|x-y|^2 / (2 sigma2))")
    group.add_argument("--degree", type=int, default=_default("degree"),
                       help="polynomial degree")
    group.add_argument("--coef0", type=float, default=_default("coef0"),
                       help="poly/sigmoid offset")
    group.add_argument("--solver", default=_default("solver"), choices=_choices("solver"))
    group.add_argument("--n-components", type=_n_components, default=None,
                       help="a count, or a variance fraction in (0, 1)")
    group.add_argument("--min-relative-eigenvalue", type=float, default=None)
    group.add_argument("--random-state", type=int, default=None)
    group.add_argument("--max-memory", default="auto",
                       help="memory the kernel may take, e.g. 8GiB (default: auto: for the "
                            "randomized solver's cached tiles, the workers' free memory)")
    group.add_argument("--cache-dtype", default=_default("cache_dtype"),
                       choices=_choices("cache_dtype"),
                       help="randomized: precision of the kernel tiles (products are "
                            "accumulated in float64)")
    group.add_argument("--n-landmarks", type=_positive_int, default=None,
                       help="nystrom, fixed_size: landmarks (default: min(n, 1000))")
    group.add_argument("--sampling", default=_default("sampling"), choices=_choices("sampling"),
                       help="nystrom: how landmarks are chosen")
    group.add_argument("--selection", default=_default("selection"), choices=_choices("selection"),
                       help="fixed_size: FS2 (k-means start) or FS (random start)")
    group.add_argument("--icf-tol", type=float, default=None,
                       help="icf: stop when the residual trace is below this "
                            "(default: 1e-3 of the kernel's trace)")
    group.add_argument("--max-rank", type=_positive_int, default=None,
                       help="icf: most pivots (default: min(n, 1000))")
    group.add_argument("--sketch", default=_default("sketch"), choices=_choices("sketch"),
                       help="sketch: the dot-product preserving transform")
    group.add_argument("--sketch-dim", type=_positive_int, default=None,
                       help="sketch: its dimension q")
    group.add_argument("--preimage", default=_default("preimage"), choices=_choices("preimage"),
                       help="pre-images for denoise: fixed-point (RBF) or learned (any kernel)")
    group.add_argument("--fit-inverse-transform", action="store_true",
                       help="learn the kernel ridge pre-image (needed for non-RBF kernels)")
    group.add_argument("--alpha", type=float, default=_default("alpha"),
                       help="ridge penalty of the learned pre-image (default: %(default)s)")


def _choices(param: str) -> list[str]:
    """Return the values :class:`~dkpca.KernelPCA` accepts for ``param`` (default first).

    Read from the estimator's parameter constraints, so the command offers exactly what the
    library fits (``tests/test_cli.py`` checks every option against them).
    """
    from dkpca.decomposition import KernelPCA

    (options,) = (c for c in KernelPCA._parameter_constraints[param] if hasattr(c, "values"))
    default = _default(param)
    return [default, *sorted(v for v in options.values if v != default)]


def _default(param: str) -> Any:
    """Return :class:`~dkpca.KernelPCA`'s default for ``param``."""
    from dkpca.decomposition import KernelPCA

    return KernelPCA().get_params()[param]


def _named_kernels() -> list[str]:
    """Every kernel name in the library's registry, so the command offers what it can fit."""
    from dkpca.kernels._base import _named_kernels as registered

    return registered()


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

    update = commands.add_parser(
        "update", parents=[common], help="add the rows of a Zarr array to a saved model",
        description="Add the rows of NEW to the model saved at MODEL (partial_fit): the model "
                    "becomes the fit on every row it has seen. MODEL is replaced atomically "
                    "(an interrupted update leaves it as it was), or --out writes the updated "
                    "model elsewhere. For PCA (covariance solver) and kernel PCA with "
                    "--solver nystrom or fixed_size.",
    )
    update.add_argument("model", help="saved model to continue (from dkpca fit or dkpca.save)")
    update.add_argument("input", metavar="new",
                        help="Zarr array of new rows (path or URL), or a group with --component")
    update.add_argument("--out", default=None,
                        help="Zarr path or URL to write the updated model to (default: replace "
                             "MODEL)")
    update.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    _input_options(update)
    _cluster_options(update)

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
    info.add_argument("--storage-options", type=json_object, default=None, metavar="JSON")

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
    """Build the :class:`dkpca.KernelPCA` the model options describe, its parameters checked.

    The checks are those ``fit`` makes first (the parameters' ranges, then their combination,
    such as ``--gamma`` with ``--sigma2``), made here so that a mistake is reported before
    the cluster starts.
    """
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
    model._resolve_kernel(1)  # n_features only fills in the default gamma; nothing checks it
    return model


def _check_outputs(args: argparse.Namespace, outputs: dict[str, Any]) -> None:
    """Check every output the command will write (``{option: destination}``), before any work.

    A destination that exists without ``--overwrite``, a folder that does not exist or cannot
    be written: each stops the command here, in one line that names the option.
    """
    from dkpca.io import check_destination

    for option, destination in outputs.items():
        if destination is None:
            continue
        try:
            check_destination(destination, overwrite=args.overwrite,
                              storage_options=_storage(args, destination))
        except OSError as err:  # exists, unwritable, not a folder: name the option to change
            raise type(err)(f"{option}: {_first_line(err)}") from err


def _first_line(err: BaseException) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def _fit(args: argparse.Namespace) -> str:
    from dkpca.persistence import save

    _check_outputs(args, {"--out": args.out})
    model = _kernel_pca(args)
    X, _ = _open_input(args)
    options = _client_options(args)
    started = time.perf_counter()
    with _cluster(options):
        logger.info("fitting %s on %s (%d x %d)", model, args.input, *X.shape)
        model.fit(X)
        save(model, args.out, overwrite=args.overwrite, storage_options=_storage(args, args.out))
    elapsed = time.perf_counter() - started
    if not args.quiet:
        _print_eigenvalues(model.eigenvalues_, model.explained_variance_ratio_)
    return (f"fitted {model.kernel_!r} kernel PCA ({model.solver_}) on {X.shape[0]} x "
            f"{X.shape[1]}: {model.n_components_} components explaining "
            f"{model.explained_variance_ratio_.sum():.1%} of the variance, in {elapsed:.1f} s; "
            f"model: {args.out}")


def _update(args: argparse.Namespace) -> str:
    """Add the rows of ``args.input`` to the saved model; write it back atomically.

    Every refusal (the model, its solver, its statistics, the input's features, the
    destination) comes before the cluster starts. The model is read whole: ``partial_fit``
    merges its statistics in memory, and a lazily read array cannot be merged.
    """
    from dkpca._estimator import check_features
    from dkpca.persistence import load, save

    _check_incremental(args)  # large arrays left unread: a refusal costs little
    in_place = args.out is None or _same_place(args, args.out, args.model)
    destination = args.model if in_place else args.out
    if in_place:  # replaced, never refused for existing; but its folder must be writable
        _check_writable(args, "MODEL", args.model)
    else:
        _check_outputs(args, {"--out": args.out})
    model = load(args.model, in_memory=sys.maxsize,
                 storage_options=_storage(args, args.model))
    X, _ = _open_input(args)
    name = type(model).__name__
    check_features(X, model.n_features_in_, name)
    options = _client_options(args)
    seen = model.n_samples_seen_
    started = time.perf_counter()
    with _cluster(options):
        logger.info("adding %s (%d x %d) to %s (%s, %d rows seen)", args.input, *X.shape,
                    args.model, name, seen)
        model.partial_fit(X)
        # written beside and renamed into place: until then MODEL is the old model, whole
        save(model, destination, overwrite=in_place or args.overwrite,
             storage_options=_storage(args, destination))
    elapsed = time.perf_counter() - started
    variances = getattr(model, "eigenvalues_", model.explained_variance_)
    ratios = model.explained_variance_ratio_
    if not args.quiet:
        _print_eigenvalues(variances, ratios)
    kind = (f"{model.kernel_!r} kernel PCA ({model.solver_})" if hasattr(model, "kernel_")
            else f"{name} ({model.solver_})")
    return (f"updated {kind} with {X.shape[0]} rows of {args.input}: "
            f"{model.n_samples_seen_} rows seen, {model.n_components_} components explaining "
            f"{ratios.sum():.1%} of the variance, in {elapsed:.1f} s; model: {destination}")


def _check_incremental(args: argparse.Namespace) -> None:
    """Refuse a saved model that ``partial_fit`` cannot continue, in one line.

    It is loaded as ``dkpca info`` loads it (large arrays only checked, not read): what
    decides is its class, its parameters and whether it kept row statistics.
    """
    from dkpca.persistence import load
    from dkpca.xarray import FieldModel

    model = load(args.model, in_memory="16MiB", storage_options=_storage(args, args.model))
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
        raise UsageError(f"{_first_line(err)} {args.model} cannot be updated.") from err
    if getattr(model, "row_statistics_", None) is None:
        version = _model_description(args).get("format_version")
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


def _same_place(args: argparse.Namespace, first: Any, second: Any) -> bool:
    """Tell whether two paths or URLs name the same store (``--out`` may name MODEL itself)."""
    from dkpca.io import Location

    return (Location(first, _storage(args, first)).store
            == Location(second, _storage(args, second)).store)


def _check_writable(args: argparse.Namespace, name: str, destination: Any) -> None:
    """Check, before any work, that ``destination`` can be replaced; name it in the error."""
    from dkpca.io import check_destination

    try:
        check_destination(destination, overwrite=True,
                          storage_options=_storage(args, destination))
    except OSError as err:
        raise type(err)(f"{name}: {_first_line(err)}") from err


def _model_description(args: argparse.Namespace) -> Any:
    """Return the JSON description (``attrs["dkpca"]``) of the saved model at ``args.model``."""
    import zarr

    from dkpca.io import Location

    location = Location(args.model, _storage(args, args.model))
    return zarr.open_group(store=location.store, mode="r", **location.open_options) \
        .attrs["dkpca"]


def _select(args: argparse.Namespace) -> str:
    from dkpca._validation import validate_params
    from dkpca.selection import select_model
    from dkpca.selection.select import _CONSTRAINTS, _check_grid

    plot = args.plot
    _check_outputs(args, {"--plot": plot, "--table": args.table})
    # select_model's own first checks, made before the cluster starts
    params = {"method": args.method, "n_components": args.n_components,
              "n_draws": args.n_draws, "percentile": args.percentile,
              "n_train": args.n_train, "icf_tol": args.icf_tol}
    validate_params(params, {name: _CONSTRAINTS[name] for name in params}, "select_model")
    if args.sigma2_grid is not None:
        _check_grid(args.sigma2_grid)
    X, _ = _open_input(args)
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
                 f"; next: {_next_fit(args, result)}")
    return f"{result} in {elapsed:.1f} s; figure: {plot}{next_step}"


def _next_fit(args: argparse.Namespace, result: Any) -> str:
    """Return the ``dkpca fit`` command, quoted, that fits what ``select`` chose on its input."""
    import shlex

    argv = ["dkpca", "fit", str(args.input)]
    for option, value in (("--component", args.component), ("--sample-dim", args.sample_dim),
                          ("--storage-options", args.storage_options)):
        if value is not None:
            argv += [option, json.dumps(value) if isinstance(value, dict) else str(value)]
    argv += ["--sigma2", f"{result.sigma2:.6g}", "--n-components", str(result.n_components)]
    return shlex.join(argv) + " --out MODEL.zarr"


def _fields(args: argparse.Namespace) -> str:
    from dkpca import _cli_fields

    return _cli_fields.run(args, lambda: _cluster(_client_options(args)), _kernel_pca,
                           _check_outputs)


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


def _print_eigenvalues(eigenvalues: Any, ratios: Any) -> None:
    print("component  eigenvalue  variance")
    for i, (value, ratio) in enumerate(zip(eigenvalues, ratios, strict=True), start=1):
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
        if along is None:
            compute(pending)
        else:
            _, along = compute(pending, along)
    return time.perf_counter() - started, along


def _load_array_model(args: argparse.Namespace) -> Any:
    """Load ``args.model``, refusing a model of fields, which needs its grid, not an array."""
    from dkpca.persistence import load
    from dkpca.xarray import FieldModel

    model = load(args.model, storage_options=_storage(args, args.model))
    if isinstance(model, FieldModel):
        raise UsageError(
            f"{args.model} holds a FieldModel (from dkpca fields), which applies to gridded "
            f"fields, not to a Zarr array: open the fields with xarray and use "
            f"dkpca.load({str(args.model)!r}).transform(...) in Python")
    return model


def _transform(args: argparse.Namespace) -> str:
    import numpy as np

    _check_outputs(args, {"--out": args.out})
    model = _load_array_model(args)
    X, array = _open_input(args)
    scores = model.transform(X)  # lazy: a feature mismatch is reported here, before any work
    eigenvalues = np.asarray(
        getattr(model, "eigenvalues_", getattr(model, "explained_variance_", None)))
    extra = {"eigenvalues": (eigenvalues, ("component",)),
             "component": (np.arange(1, len(eigenvalues) + 1), ("component",))}
    elapsed, _ = _write_rows(args, model, array, "scores", scores, "component",
                             {"eigenvalues": [float(v) for v in eigenvalues]}, extra)
    return (f"projected {X.shape[0]} x {X.shape[1]} on {len(eigenvalues)} components in "
            f"{elapsed:.1f} s; scores: {args.out}")


def _denoise(args: argparse.Namespace) -> str:
    from dkpca.preimage import unconverged_message

    _check_outputs(args, {"--out": args.out})
    model = _load_array_model(args)
    if not hasattr(model, "denoise"):
        raise UsageError(f"{args.model} holds a {type(model).__name__}, which cannot denoise; "
                         f"fit a KernelPCA")
    X, array = _open_input(args)
    # lazy; a mismatch or an impossible pre-image is reported here
    denoised, missed = model._denoise_counted(X)
    method = model._preimage_method()
    elapsed, missed = _write_rows(args, model, array, "X", denoised, "feature",
                                  {"preimage": method}, {}, along=missed)
    unconverged = unconverged_message(int(missed or 0), X.shape[0], model.preimage_max_iter)
    return (f"denoised {X.shape[0]} x {X.shape[1]} with {model.n_components_} components "
            f"({method} pre-images) in {elapsed:.1f} s"
            f"{'; ' + unconverged if unconverged else ''}; output: {args.out}")


def _info(args: argparse.Namespace) -> str:
    from dkpca.persistence import load

    model = load(args.model, in_memory="16MiB", storage_options=_storage(args, args.model))
    meta = _model_description(args)
    print(f"model:      {args.model}")
    print(f"written by: dkpca {meta.get('dkpca_version', '?')} (model format "
          f"{meta.get('format_version', '?')})")
    print(f"estimator:  {model!r}")
    layout = getattr(model, "layout_", None)  # a FieldModel: its estimator sees the grid
    if layout is not None:
        names = [str(v.name if v.name is not None else v.template.name)
                 for v in layout.variables
                 if v.name is not None or v.template.name is not None]
        print(f"fields:     {', '.join(names) or 'one field'}, samples along "
              f"{', '.join(layout.sample_dims)}; {int(layout.kept.sum())} grid points with data")
    n_samples = _fitted(model, "n_samples_", getattr(_fitted(model, "basis_"), "n_samples", None))
    print(f"trained on: {_or_unknown(n_samples)} samples x "
          f"{_or_unknown(_fitted(model, 'n_features_in_'))} features")
    kernel = _fitted(model, "kernel_")
    if kernel is not None:
        print(f"kernel:     {kernel!r}, solver {_fitted(model, 'solver_')} "
              f"({_or_unknown(_fitted(model, 'n_iter_'))} passes)")
    eigenvalues = _fitted(model, "eigenvalues_")
    ratios = _fitted(model, "explained_variance_ratio_")
    if eigenvalues is not None and ratios is not None:
        _print_eigenvalues(eigenvalues, ratios)
    n_components = _fitted(model, "n_components_")
    share = f" ({ratios.sum():.1%} of the variance)" if ratios is not None else ""
    return f"{type(model).__name__} with {_or_unknown(n_components)} components{share}"


def _fitted(model: Any, name: str, default: Any = None) -> Any:
    """Return a fitted attribute of ``model``, else of the estimator it wraps, else ``default``.

    A FieldModel wraps its estimator; ``info`` describes whatever a saved model holds.
    """
    for owner in (model, getattr(model, "model_", None)):
        value = getattr(owner, name, None) if owner is not None else None
        if value is not None:
            return value
    return default


def _or_unknown(value: Any) -> str:
    return "unknown" if value is None else str(value)


def _run(args: argparse.Namespace) -> str:
    from dkpca._progress import progress_bar

    if args.command == "info":
        return _info(args)
    if args.command == "demo":
        from dkpca._demo import run_demo

        model, summary = run_demo(args, _client_options(args))
        print("eigenvalues of the centred kernel matrix:")
        _print_eigenvalues(model.eigenvalues_, model.explained_variance_ratio_)
        return summary
    reporting = progress_bar(sys.stderr, phase=args.command, interval=args.progress_interval)
    with reporting if not args.quiet else contextlib.nullcontext():
        handlers = {"select": _select, "fit": _fit, "update": _update, "transform": _transform,
                    "denoise": _denoise, "fields": _fields}
        return handlers[args.command](args)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``dkpca`` command; return its exit status.

    Examples
    --------
    >>> main(["demo", "--n-samples", "300", "--quiet"])  # doctest: +SKIP
    0
    """
    args = _parser().parse_args(argv)
    device = getattr(args, "device", "cpu")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", datefmt="%H:%M:%S"))
    logger.addHandler(handler)  # dkpca's progress only; dask's own logs stay at their level
    logger.setLevel(logging.WARNING if args.quiet else logging.INFO)
    previous_sigterm = _interrupt_on_sigterm()
    try:
        if device == "cuda" and getattr(args, "scheduler", None) is None:
            # before the embedded cluster starts (its workers use this machine's GPU): a
            # missing one is a one-line error; a running cluster's workers answer for theirs
            from dkpca._device import import_cupy

            import_cupy()
        with dask.config.set({"dkpca.device": device}):
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
