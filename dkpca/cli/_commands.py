"""One function per ``dkpca`` command; each returns its one-line summary.

``select``, ``fit``, ``update``, ``fields`` (in :mod:`dkpca.cli._fields`), ``transform``,
``denoise``, ``info`` and ``demo``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import time
from typing import Any

from dkpca._errors import (
    UsageError,
)
from dkpca.cli._shared import (
    check_figure_format,
    check_incremental,
    check_outputs,
    check_writable,
    client_options,
    cluster,
    explaining,
    first_line,
    fitted,
    indefinite,
    kernel_pca,
    load_array_model,
    model_description,
    open_input,
    or_unknown,
    print_eigenvalues,
    print_selection,
    same_place,
    storage,
    write_rows,
)
from dkpca.cli._signals import closing_clusters_on_interrupt, output_written

logger = logging.getLogger("dkpca")


def _fit(args: argparse.Namespace) -> str:
    from dkpca.persistence import save

    check_outputs(args, {"--out": args.out})
    model = kernel_pca(args)
    X, _ = open_input(args)
    options = client_options(args)
    started = time.perf_counter()
    with cluster(options):
        logger.info("fitting %s on %s (%d x %d)", model, args.input, *X.shape)
        model.fit(X)
        save(model, args.out, overwrite=args.overwrite, storage_options=storage(args, args.out))
        output_written(args.out)
    elapsed = time.perf_counter() - started
    if not args.quiet:
        print_eigenvalues(model.eigenvalues_, model.explained_variance_ratio_)
    return (f"fitted {model.kernel_!r} kernel PCA ({model.solver_}) on {X.shape[0]} x "
            f"{X.shape[1]}: {explaining(model.n_components_, model.explained_variance_ratio_)}, "
            f"in {elapsed:.1f} s; model: {args.out}")


def _update(args: argparse.Namespace) -> str:
    """Add the rows of ``args.input`` to the saved model; write it back atomically.

    Every refusal (the model, its solver, its statistics, the input's features, the
    destination) comes before the cluster starts. The model is read whole: ``partial_fit``
    merges its statistics in memory, and a lazily read array cannot be merged.
    """
    from dkpca._estimator import check_features
    from dkpca.persistence import load, save

    check_incremental(args)  # large arrays left unread: a refusal costs little
    in_place = args.out is None or same_place(args, args.out, args.model)
    destination = args.model if in_place else args.out
    if in_place:  # replaced, never refused for existing; but its folder must be writable
        check_writable(args, "MODEL", args.model)
    else:
        check_outputs(args, {"--out": args.out})
    model = load(args.model, in_memory=sys.maxsize,
                 storage_options=storage(args, args.model))
    X, _ = open_input(args)
    name = type(model).__name__
    check_features(X, model.n_features_in_, name)
    options = client_options(args)
    seen = model.n_samples_seen_
    started = time.perf_counter()
    with cluster(options):
        logger.info("adding %s (%d x %d) to %s (%s, %d rows seen)", args.input, *X.shape,
                    args.model, name, seen)
        model.partial_fit(X)
        # written beside and renamed into place: until then MODEL is the old model, whole
        save(model, destination, overwrite=in_place or args.overwrite,
             storage_options=storage(args, destination))
        output_written(destination)
    elapsed = time.perf_counter() - started
    variances = getattr(model, "eigenvalues_", model.explained_variance_)
    ratios = model.explained_variance_ratio_
    if not args.quiet:
        print_eigenvalues(variances, ratios)
    kind = (f"{model.kernel_!r} kernel PCA ({model.solver_})" if hasattr(model, "kernel_")
            else f"{name} ({model.solver_})")
    return (f"updated {kind} with {X.shape[0]} rows of {args.input}: "
            f"{model.n_samples_seen_} rows seen, {explaining(model.n_components_, ratios)}, in "
            f"{elapsed:.1f} s; model: {destination}")


def _select(args: argparse.Namespace) -> str:
    from dkpca._validation import validate_params
    from dkpca.selection import select_model
    from dkpca.selection.select import _CONSTRAINTS, _check_grid, check_counts

    plot = args.plot
    check_outputs(args, {"--plot": plot, "--table": args.table})
    check_figure_format("--plot", plot)
    if args.icf_tol is not None and args.training != "icf":  # refused, not ignored
        raise UsageError(f"--icf-tol applies to --training icf, not --training {args.training}")
    # select_model's own first checks, made before the cluster starts
    params = {"method": args.method, "n_components": args.n_components,
              "n_draws": args.n_draws, "percentile": args.percentile,
              "n_train": args.n_train, "icf_tol": args.icf_tol}
    validate_params(params, {name: _CONSTRAINTS[name] for name in params}, "select_model")
    if args.sigma2_grid is not None:
        _check_grid(args.sigma2_grid)
    X, _ = open_input(args)
    check_counts(X.shape[0], args.n_train, args.validation, args.n_components, args.training)
    started = time.perf_counter()
    with cluster(client_options(args)):
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
    result.plot(plot, storage_options=storage(args, plot))
    output_written(plot)
    if args.table is not None:
        from dkpca.io import atomic_location

        with atomic_location(args.table, overwrite=args.overwrite,
                             storage_options=storage(args, args.table)) as temp:
            result.table.to_zarr(temp.store, mode="w-", consolidated=False, zarr_format=3,
                                 storage_options=temp.storage_options or None)
        output_written(args.table)
    if not args.quiet:
        print_selection(result)
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
    from dkpca.cli._fields import run as run_fields

    return run_fields(args)


def _transform(args: argparse.Namespace) -> str:
    import numpy as np

    check_outputs(args, {"--out": args.out})
    model = load_array_model(args)
    X, array = open_input(args)
    scores = model.transform(X)  # lazy: a feature mismatch is reported here, before any work
    eigenvalues = np.asarray(
        getattr(model, "eigenvalues_", getattr(model, "explained_variance_", None)))
    extra = {"eigenvalues": (eigenvalues, ("component",)),
             "component": (np.arange(1, len(eigenvalues) + 1), ("component",))}
    elapsed, _ = write_rows(args, model, array, "scores", scores, "component",
                             {"eigenvalues": [float(v) for v in eigenvalues]}, extra)
    return (f"projected {X.shape[0]} x {X.shape[1]} on {len(eigenvalues)} components in "
            f"{elapsed:.1f} s; scores: {args.out}")


def _denoise(args: argparse.Namespace) -> str:
    from dkpca.options import preimage_options
    from dkpca.preimage import unconverged_message

    check_outputs(args, {"--out": args.out})
    model = load_array_model(args)
    if not hasattr(model, "denoise"):
        raise UsageError(f"{args.model} holds a {type(model).__name__}, which cannot denoise; "
                         f"fit a KernelPCA")
    X, array = open_input(args)
    # lazy; a mismatch or an impossible pre-image is reported here
    denoised, missed = model._denoise_counted(X)
    method = model._preimage_method()
    elapsed, missed = write_rows(args, model, array, "X", denoised, "feature",
                                  {"preimage": method}, {}, along=missed)
    unconverged = unconverged_message(int(missed or 0), X.shape[0],
                                      preimage_options(model.preimage).max_iter)
    return (f"denoised {X.shape[0]} x {X.shape[1]} with {model.n_components_} components "
            f"({method} pre-images) in {elapsed:.1f} s"
            f"{'; ' + unconverged if unconverged else ''}; output: {args.out}")


def _info(args: argparse.Namespace) -> str:
    from dkpca.persistence import load

    model = load(args.model, in_memory="16MiB", storage_options=storage(args, args.model))
    meta = model_description(args)
    say = print if not args.quiet else _silent  # --quiet: the summary line alone
    say(f"model:      {args.model}")
    say(f"written by: dkpca {meta.get('dkpca_version', '?')} (model format "
          f"{meta.get('format_version', '?')})")
    say(f"estimator:  {model!r}")
    layout = getattr(model, "layout_", None)  # a FieldModel: its estimator sees the grid
    if layout is not None:
        names = [str(v.name if v.name is not None else v.template.name)
                 for v in layout.variables
                 if v.name is not None or v.template.name is not None]
        say(f"fields:     {', '.join(names) or 'one field'}, samples along "
              f"{', '.join(layout.sample_dims)}; {int(layout.kept.sum())} grid points with data")
    n_samples = fitted(model, "n_samples_", getattr(fitted(model, "basis_"), "n_samples", None))
    say(f"trained on: {or_unknown(n_samples)} samples x "
          f"{or_unknown(fitted(model, 'n_features_in_'))} features")
    kernel = fitted(model, "kernel_")
    if kernel is not None:
        say(f"kernel:     {kernel!r}, solver {fitted(model, 'solver_')} "
              f"({or_unknown(fitted(model, 'n_iter_'))} passes)")
    eigenvalues = fitted(model, "eigenvalues_")
    ratios = fitted(model, "explained_variance_ratio_")
    if eigenvalues is not None and ratios is not None and not args.quiet:
        print_eigenvalues(eigenvalues, ratios)
    n_components = fitted(model, "n_components_")
    share = "" if ratios is None else f" ({ratios.sum():.1%} of the variance)"
    if indefinite(ratios):
        share = " (the kernel is indefinite: their shares of its trace exceed 100%)"
    return f"{type(model).__name__} with {or_unknown(n_components)} components{share}"


#: The figures ``dkpca demo`` writes in its ``--out`` folder (:func:`dkpca._demo.run_demo`).
DEMO_FIGURES = ("model-selection.png", "kpca-rings.png", "denoise-rings.png")


def _check_demo_folder(out: Any) -> None:
    """Check, before any work, that ``demo`` can write its figures in the folder ``out``.

    As every command checks its outputs (:func:`dkpca.io.check_destination`, which tries to
    write rather than trusting permission bits: root passes those even for ``/proc``): each
    figure in an existing folder may be replaced; a missing folder must be creatable where
    it would go. A file at ``out`` is left to the demo, which names it.
    """
    from pathlib import Path

    from dkpca.io import check_destination

    folder = Path(out)
    if folder.is_dir():
        targets, overwrite = [folder / name for name in DEMO_FIGURES], True
    elif not folder.exists():
        first = folder  # the first folder mkdir would create
        while not first.parent.exists() and first.parent != first:
            first = first.parent
        targets, overwrite = [first], False
    else:
        return
    for target in targets:
        try:
            check_destination(target, overwrite=overwrite)
        except OSError as err:
            raise type(err)(f"--out: {first_line(err)}") from err


def _silent(*_args: object) -> None:
    """Print nothing (``--quiet``)."""


def run_command(args: argparse.Namespace) -> str:
    from dkpca._progress import progress_bar

    if args.command == "info":
        return _info(args)
    if args.command == "demo":
        from dkpca._demo import run_demo

        _check_demo_folder(args.out)
        with closing_clusters_on_interrupt():
            model, summary = run_demo(args, client_options(args), written=output_written)
        if not args.quiet:
            print("eigenvalues of the centred kernel matrix:")
            print_eigenvalues(model.eigenvalues_, model.explained_variance_ratio_)
        return summary
    reporting = progress_bar(sys.stderr, phase=args.command, interval=args.progress_interval)
    with reporting if not args.quiet else contextlib.nullcontext():
        handlers = {"select": _select, "fit": _fit, "update": _update, "transform": _transform,
                    "denoise": _denoise, "fields": _fields}
        return handlers[args.command](args)
