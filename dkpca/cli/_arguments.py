"""The ``dkpca`` command's arguments: value types, option groups and the parser.

Choices and defaults of the model options come from the library (the estimator's parameter
constraints and defaults, the kernel registry), so the command offers what the library does.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from dkpca._device import DEVICES
from dkpca._errors import (
    EXIT_INTERRUPTED,
    EXIT_TRANSIENT,
    EXIT_USAGE,
)


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


def json_object(text: str) -> dict[str, Any]:
    """``--storage-options``: a JSON object, or a usage error that quotes the text.

    Examples
    --------
    >>> json_object('{"anon": true}')
    {'anon': True}
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"not valid JSON ({err.msg}): {text}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {text}")
    return value


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
    for flag, (solvers, param, text) in SOLVER_FLAGS.items():
        _solver_option(group, flag, solvers, param, text)
    group.add_argument("--preimage", default=_default("preimage"), choices=_choices("preimage"),
                       help="pre-images for denoise: fixed-point (RBF) or learned (any kernel)")
    group.add_argument("--fit-inverse-transform", action="store_true",
                       help="learn the kernel ridge pre-image (needed for non-RBF kernels)")
    group.add_argument("--alpha", type=float, default=_default("alpha"),
                       help="ridge penalty of the learned pre-image (default: %(default)s)")


#: The solver options the command offers: ``flag: (solvers, parameter, help)``, the
#: parameter being that of the solvers' :mod:`dkpca.options` classes (the first one's
#: constraints and default). ``fields --method pca`` also reads ``--sketch``/``--sketch-dim``.
SOLVER_FLAGS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "--cache-dtype": (("randomized",), "cache_dtype",
                      ("randomized: precision of the kernel tiles (products are accumulated in "
                      "float64)")),
    "--n-landmarks": (("nystrom", "fixed_size"), "n_landmarks",
                      "nystrom, fixed_size: landmarks (default: min(n, 1000))"),
    "--sampling": (("nystrom",), "sampling", "nystrom: how landmarks are chosen"),
    "--selection": (("fixed_size",), "selection",
                    "fixed_size: FS2 (k-means start) or FS (random start)"),
    "--icf-tol": (("icf",), "tol",
                  ("icf: stop when the residual trace is below this (default: 1e-3 of the "
                  "kernel's trace)")),
    "--max-rank": (("icf",), "max_rank", "icf: most pivots (default: min(n, 1000))"),
    "--sketch": (("sketch",), "kind", "sketch: the dot-product preserving transform"),
    "--sketch-dim": (("sketch",), "dim", "sketch: its dimension q"),
}


def _solver_option(group: Any, flag: str, solvers: tuple[str, ...], param: str,
                   text: str) -> None:
    """Add ``flag``: its type or choices from the options class's constraint, its default shown.

    The value is ``None`` unless given, so that a flag the chosen solver does not take is
    refused rather than ignored (:func:`dkpca.cli._shared.solver_from_args`).
    """
    from dkpca.options import SOLVERS

    cls = SOLVERS[solvers[0]]
    constraints = cls._parameter_constraints[param]
    default = cls().get_params()[param]
    kinds = [c for c in constraints if c is not None]
    choices = sorted(kinds[0].values) if hasattr(kinds[0], "values") else None
    if choices is not None and default in choices:
        choices = [default, *(c for c in choices if c != default)]
    value_type = None
    if choices is None:
        value_type = _positive_int if kinds[0].kind == "int" else _positive_float
    shown = "" if default is None or "default:" in text else f" (default: {default})"
    group.add_argument(flag, type=value_type, choices=choices, default=None, help=text + shown)


def _choices(param: str) -> list[str]:
    """Return the values :class:`~dkpca.KernelPCA` accepts by name for ``param`` (default first).

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
    """Every kernel name in the library's registry, so the command offers what it can fit.

    Not ``precomputed``: the command fits data, never a kernel matrix. (It joins the registry
    when :mod:`dkpca._precomputed` is imported, so the choices would otherwise depend on what
    was imported first: the generated docs listed it.)
    """
    from dkpca.kernels._base import _named_kernels as registered

    return [name for name in registered() if name != "precomputed"]


def _fields_parser(commands: Any, parents: list) -> None:
    """Add the ``fields`` subcommand: its own options, then the model's and the cluster's."""
    from dkpca.xarray import NAN_POLICIES

    fields = commands.add_parser(
        "fields", parents=parents,
        help="PCA or kernel PCA of gridded fields in a Zarr group (xarray)",
        description="Fit PCA (EOFs) or kernel PCA on the variables of INPUT, a Zarr group "
                    "written by xarray: grid points NaN at every sample (land) are left out "
                    "and come back as NaN; write the scores, explained variance and the "
                    "components (PCA) or patterns (kernel PCA) on the grid to --out.",
    )
    fields.add_argument("input", help="Zarr group (path or URL) written by xarray")
    fields.add_argument("--out", required=True, help="Zarr path or URL to write")
    fields.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    group = fields.add_argument_group("fields")
    group.add_argument("--variable", action="append", default=None, metavar="NAME",
                       help="a data variable to fit (repeatable; default: every variable "
                            "with the sample dimensions)")
    group.add_argument("--sample-dim", action="append", default=None, metavar="DIM",
                       help="a sample dimension (repeatable; default: the first dimension)")
    group.add_argument("--weights", choices=["coslat", "none"], default="none",
                       help="coslat: sqrt(cos(latitude)) area weights")
    group.add_argument("--standardize", action="store_true",
                       help="divide each grid point by its standard deviation")
    group.add_argument("--nan-policy", choices=NAN_POLICIES, default="raise",
                       help="NaNs scattered among valid data: raise (default), leave out "
                            "their samples, or their grid points")
    group.add_argument("--method", choices=["pca", "kpca"], default="pca",
                       help="pca (EOFs, default; --solver auto, randomized or sketch, with "
                            "--sketch, --sketch-dim, --whiten) or kpca (kernel PCA: every "
                            "model option)")
    group.add_argument("--whiten", action="store_true",
                       help="pca: scores of unit variance (scikit-learn's whiten)")
    group.add_argument("--patterns", action="store_true",
                       help="also write PCA's patterns at ±1, ±2 standard deviations "
                            "(always written for kpca)")
    group.add_argument("--save-model", metavar="PATH",
                       help="also save the fitted model (dkpca.load reads it back)")
    group.add_argument("--storage-options", type=json_object, default=None, metavar="JSON",
                       help="fsspec options for URLs")
    _model_options(fields)
    _cluster_options(fields)


def _select_parser(commands: Any, parents: list) -> None:
    """Add ``dkpca select``: the model-selection method, its training set and its outputs."""
    select = commands.add_parser(
        "select", parents=parents, help="choose the RBF width and number of components",
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


def _fit_parser(commands: Any, parents: list) -> None:
    """Add ``dkpca fit``: the input, the model options, the output."""
    fit = commands.add_parser("fit", parents=parents, help="fit kernel PCA on a Zarr array",
                              description="Fit kernel PCA on INPUT and save the model.")
    fit.add_argument("input", help="Zarr array (path or URL), or a group with --component")
    _output_options(fit)
    _input_options(fit)
    _model_options(fit)
    _cluster_options(fit)


def _update_parser(commands: Any, parents: list) -> None:
    """Add ``dkpca update``: a saved model and the new rows to add to it."""
    update = commands.add_parser(
        "update", parents=parents, help="add the rows of a Zarr array to a saved model",
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


def _model_on_rows_parser(commands: Any, parents: list, name: str, model: str, **texts: str
                          ) -> None:
    """Add a command that applies a saved model (``model``: its help) to the rows of INPUT."""
    command = commands.add_parser(name, parents=parents, **texts)
    command.add_argument("model", help=model)
    command.add_argument("input", help="Zarr array (path or URL), or a group with --component")
    _output_options(command)
    _input_options(command)
    _cluster_options(command)


def _transform_parser(commands: Any, parents: list) -> None:
    """Add ``dkpca transform``: a saved model and the rows to project."""
    _model_on_rows_parser(
        commands, parents, "transform", "saved model (from dkpca fit)",
        help="project a Zarr array with a saved model",
        description="Project INPUT on the components of MODEL and write the scores.",
    )


def _denoise_parser(commands: Any, parents: list) -> None:
    """Add ``dkpca denoise``: a saved kernel PCA model and the rows to denoise."""
    _model_on_rows_parser(
        commands, parents, "denoise", "saved KernelPCA model (from dkpca fit)",
        help="denoise a Zarr array with a saved model",
        description="Project INPUT on the components of MODEL and map it back to the input "
                    "space (pre-images), writing the denoised points.",
    )


def _info_parser(commands: Any, parents: list) -> None:
    """Add ``dkpca info``: a saved model to describe."""
    info = commands.add_parser("info", parents=parents, help="describe a saved model")
    info.add_argument("model", help="saved model (from dkpca fit)")
    info.add_argument("--storage-options", type=json_object, default=None, metavar="JSON")


def _demo_parser(commands: Any, parents: list) -> None:
    """Add ``dkpca demo``: what ``make run`` runs."""
    demo = commands.add_parser(
        "demo", parents=parents,
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


def build_parser() -> argparse.ArgumentParser:
    """Return the ``dkpca`` parser: the options every command shares, then each command."""
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
    _select_parser(commands, [common])
    _fit_parser(commands, [common])
    _update_parser(commands, [common])
    _fields_parser(commands, [common])
    _transform_parser(commands, [common])
    _denoise_parser(commands, [common])
    _info_parser(commands, [common])
    _demo_parser(commands, [common])
    return parser
