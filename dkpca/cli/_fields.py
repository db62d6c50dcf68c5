"""``dkpca fields``: PCA or kernel PCA of the fields of a Zarr group written by xarray.

The group is opened with xarray (lazily), the chosen variables are fitted with a
:class:`dkpca.xarray.FieldModel` (land masks, weights, NaN policy), and the scores, explained
variance, components or patterns are written as one Zarr group, atomically. The command's
cluster and model options are those of ``dkpca fit`` (the parser is in
:mod:`dkpca.cli._arguments`).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from dkpca.cli._shared import check_outputs, client_options, cluster, kernel_pca
from dkpca.cli._signals import output_written

__all__ = ["PCA_SOLVERS", "run"]

#: The ``--solver`` values linear PCA takes: its own choice (covariance, Gram, or randomized
#: when neither fits), the accurate randomized solver for very wide grids, or a sketch.
PCA_SOLVERS = ("auto", "randomized", "sketch")

def _estimator(args: argparse.Namespace) -> Any:
    """PCA from the options it shares with kernel PCA, or ``dkpca fit``'s kernel PCA."""
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
    _refuse_kernel_options(args)
    model = PCA(n_components=args.n_components, solver=args.solver, whiten=args.whiten,
                min_relative_eigenvalue=args.min_relative_eigenvalue,
                sketch=args.sketch or PCA().sketch, sketch_dim=args.sketch_dim,
                random_state=args.random_state)
    validate_params(model.get_params(), model._parameter_constraints, "PCA")  # as fit would
    return model


def _refuse_kernel_options(args: argparse.Namespace) -> None:
    """Refuse, rather than ignore, what ``--method pca`` does not take.

    Kernel options, and solver options other than the sketch's (those only with ``--solver
    sketch``).
    """
    from dkpca._errors import UsageError
    from dkpca.cli._arguments import SOLVER_FLAGS
    from dkpca.decomposition import KernelPCA

    defaults = KernelPCA().get_params()
    given = [flag for flag, value, default in (
        ("--kernel", args.kernel, "rbf"), ("--gamma", args.gamma, None),
        ("--sigma2", args.sigma2, None), ("--degree", args.degree, defaults["degree"]),
        ("--coef0", args.coef0, defaults["coef0"]), ("--alpha", args.alpha, defaults["alpha"]),
        ("--fit-inverse-transform", args.fit_inverse_transform, False),
        ("--preimage", args.preimage, defaults["preimage"]),
    ) if value != default]
    if given:
        raise UsageError(f"{given[0]} applies to --method kpca, not --method pca")
    for flag in SOLVER_FLAGS:
        if getattr(args, flag[2:].replace("-", "_")) is None:
            continue
        if flag not in ("--sketch", "--sketch-dim"):
            raise UsageError(f"{flag} applies to --method kpca, not --method pca")
        if args.solver != "sketch":
            raise UsageError(f"{flag} applies to --solver sketch, not --solver {args.solver}")


def _fields(args: argparse.Namespace) -> Any:
    """Open the input group (lazily) and return the variables to fit."""
    import json

    import xarray as xr
    import zarr

    from dkpca._errors import UsageError
    from dkpca.cli._reading import damaged_metadata
    from dkpca.io import Location, require_complete, url_options

    options = url_options(args.input, args.storage_options)
    location = Location(args.input, options)
    require_complete(location)
    try:
        ds = xr.open_zarr(args.input, consolidated=False, storage_options=options)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:  # name the file at fault
        raise damaged_metadata(*location.filesystem(), args.input, None, err) from err
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


def run(args: argparse.Namespace) -> str:
    """Fit and write; return the summary line."""
    from dkpca.io import atomic_location, url_options
    from dkpca.persistence import save
    from dkpca.xarray import FieldModel

    out_options = url_options(args.out, args.storage_options)
    model_options = url_options(args.save_model or "", args.storage_options)
    check_outputs(args, {"--out": args.out, "--save-model": args.save_model})
    estimator = _estimator(args)
    data = _fields(args)
    model = FieldModel(estimator, args.sample_dim,
                       weights=None if args.weights == "none" else args.weights,
                       standardize=args.standardize, nan_policy=args.nan_policy)
    started = time.perf_counter()
    with cluster(client_options(args)):
        model.fit(data)
        result = _result(model, args.patterns or args.method == "kpca").assign_attrs(
            input=str(args.input))
        with atomic_location(args.out, overwrite=args.overwrite,
                             storage_options=out_options) as temp:
            result.to_zarr(temp.store, mode="w-", consolidated=False, zarr_format=3,
                           storage_options=temp.storage_options or None)
        output_written(args.out)
        if args.save_model:
            save(model, args.save_model, overwrite=args.overwrite,
                 storage_options=model_options)
            output_written(args.save_model)
    elapsed = time.perf_counter() - started
    ratios = ", ".join(f"{r:.1%}" for r in model.explained_variance_ratio().values[:4])
    kept = int(model.layout_.kept.sum())
    total = sum(v.size for v in model.layout_.variables)
    return (f"fitted {type(model.model_).__name__} on {args.input}: {kept} of {total} grid "
            f"points with data; modes 1-{min(4, model.model_.n_components_)} explain "
            f"{ratios}, in {elapsed:.1f} s; result: {args.out}")
