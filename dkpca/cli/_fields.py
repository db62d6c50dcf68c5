"""``dkpca fields``: PCA or kernel PCA of the fields of a Zarr group written by xarray.

The group is opened with xarray (lazily), the chosen variables are fitted with a
:class:`dkpca.xarray.FieldModel` (land masks, weights, NaN policy), and the scores, explained
variance, components or patterns are written as one Zarr group, atomically. The command's
cluster and model options are those of ``dkpca fit``; :mod:`dkpca.cli` passes its helpers in,
so that this module does not import it.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable
from typing import Any

__all__ = ["add_parser", "json_object", "run"]

#: The ``--solver`` values linear PCA takes: its own choice (covariance, Gram, or randomized
#: when neither fits), the accurate randomized solver for very wide grids, or a sketch.
PCA_SOLVERS = ("auto", "randomized", "sketch")

def add_parser(commands: Any, parents: list, options: list[Callable]) -> None:
    """Add the ``fields`` subcommand to ``commands``, with the shared ``options`` adders."""
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
    for add in options:
        add(fields)


def json_object(text: str) -> dict[str, Any]:
    """``--storage-options``: a JSON object, or a usage error that quotes the text.

    Examples
    --------
    >>> json_object('{"anon": true}')
    {'anon': True}
    """
    import json

    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"not valid JSON ({err.msg}): {text}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {text}")
    return value


def _estimator(args: argparse.Namespace, kernel_pca: Callable[[argparse.Namespace], Any]) -> Any:
    """PCA from the options it shares with kernel PCA, or the kernel PCA ``kernel_pca`` builds."""
    from dkpca._errors import UsageError
    from dkpca._validation import validate_params
    from dkpca.linear import PCA

    if args.method == "kpca":
        if args.whiten:
            raise UsageError("--whiten applies to --method pca")
        return kernel_pca(args)
    if args.solver not in PCA_SOLVERS:
        raise UsageError(f"--solver {args.solver} is a kernel PCA solver (--method kpca); "
                         f"--method pca takes --solver {' or '.join(PCA_SOLVERS)}")
    model = PCA(n_components=args.n_components, solver=args.solver, whiten=args.whiten,
                min_relative_eigenvalue=args.min_relative_eigenvalue, sketch=args.sketch,
                sketch_dim=args.sketch_dim, random_state=args.random_state)
    validate_params(model.get_params(), model._parameter_constraints, "PCA")  # as fit would
    return model


def _fields(args: argparse.Namespace) -> Any:
    """Open the input group (lazily) and return the variables to fit."""
    import xarray as xr
    import zarr

    from dkpca._errors import UsageError
    from dkpca.io import Location, require_complete, url_options

    options = url_options(args.input, args.storage_options)
    require_complete(Location(args.input, options))
    try:
        ds = xr.open_zarr(args.input, consolidated=False, storage_options=options)
    except zarr.errors.ContainsArrayError:
        raise UsageError(f"{args.input} is a Zarr array; dkpca fields needs a group written by "
                         f"xarray (Dataset.to_zarr), with dimension names; for a plain array "
                         f"use dkpca fit") from None
    sample_dims = args.sample_dim
    if args.variable:
        missing = [v for v in args.variable if v not in ds.data_vars]
        if missing:
            raise UsageError(f"no variable {missing} in {args.input} (it has "
                             f"{sorted(map(str, ds.data_vars))})")
        names = args.variable
    else:
        first = sample_dims[0] if sample_dims else None
        names = [str(n) for n, v in ds.data_vars.items()
                 if v.ndim >= 2 and (first is None or first in v.dims)]
        if first is None and names:
            first = ds[names[0]].dims[0]
            names = [n for n in names if first in ds[n].dims]
    if not names:
        raise UsageError(f"{args.input} has no data variable with the sample dimension(s)")
    return ds[names[0]] if len(names) == 1 else ds[names]


def _result(model: Any, patterns: bool) -> Any:
    import xarray as xr

    variables = {"scores": model.scores_, "explained_variance": model.explained_variance(),
                 "explained_variance_ratio": model.explained_variance_ratio()}
    for name, getter in (("components", model.components), ("patterns", model.patterns)):
        if name == "components" and not hasattr(model.model_, "components_"):
            continue
        if name == "patterns" and not patterns:
            continue
        maps = getter()
        if isinstance(maps, xr.Dataset):
            variables |= {f"{name}_{var}": maps[var] for var in maps.data_vars}
        else:
            variables[name] = maps
    return xr.Dataset(variables, attrs=model.scores_.attrs)


def run(args: argparse.Namespace, cluster: Callable[[], contextlib.AbstractContextManager],
        kernel_pca: Callable[[argparse.Namespace], Any],
        check_outputs: Callable[[argparse.Namespace, dict[str, Any]], None]) -> str:
    """Fit and write; return the summary line.

    ``cluster()`` enters the Dask cluster; ``kernel_pca(args)`` builds ``dkpca fit``'s model;
    ``check_outputs(args, {option: destination})`` checks the outputs before any work.
    """
    from dkpca.io import atomic_location, url_options
    from dkpca.persistence import save
    from dkpca.xarray import FieldModel

    out_options = url_options(args.out, args.storage_options)
    model_options = url_options(args.save_model or "", args.storage_options)
    check_outputs(args, {"--out": args.out, "--save-model": args.save_model})
    estimator = _estimator(args, kernel_pca)
    data = _fields(args)
    model = FieldModel(estimator, args.sample_dim,
                       weights=None if args.weights == "none" else args.weights,
                       standardize=args.standardize, nan_policy=args.nan_policy)
    started = time.perf_counter()
    with cluster():
        model.fit(data)
        result = _result(model, args.patterns or args.method == "kpca").assign_attrs(
            input=str(args.input))
        with atomic_location(args.out, overwrite=args.overwrite,
                             storage_options=out_options) as temp:
            result.to_zarr(temp.store, mode="w-", consolidated=False)
        if args.save_model:
            save(model, args.save_model, overwrite=args.overwrite,
                 storage_options=model_options)
    elapsed = time.perf_counter() - started
    ratios = ", ".join(f"{r:.1%}" for r in model.explained_variance_ratio().values[:4])
    kept = int(model.layout_.kept.sum())
    total = sum(v.size for v in model.layout_.variables)
    return (f"fitted {type(model.model_).__name__} on {args.input}: {kept} of {total} grid "
            f"points with data; modes 1-{min(4, model.model_.n_components_)} explain "
            f"{ratios}, in {elapsed:.1f} s; result: {args.out}")
