"""``dkpca demo``: model selection, kernel PCA and denoising of generated rings, with figures."""

from __future__ import annotations

import argparse
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["run_demo"]

logger = logging.getLogger("dkpca")

#: Training points for the demo's model selection (each draw decomposes DEMO_TRAIN² matrices).
DEMO_TRAIN = 300


def run_demo(args: argparse.Namespace, client_options: dict,
             written: Callable[[Path], None] = lambda path: None) -> tuple[Any, str]:
    """Choose σ² and the components by MDD, fit kernel PCA on three noisy rings, plot both.

    Writes ``model-selection.png`` (the data and noise spectra, and the structural information
    against σ²), ``kpca-rings.png`` (the rings, and their first two kernel principal
    components) and ``denoise-rings.png`` (the noisy rings before and after denoising by
    fixed-point pre-images). Returns the fitted model (the command prints its eigenvalues) and the one-line
    summary. ``args`` carries ``out``, ``n_samples``, ``n_components`` (``None``: chosen by
    MDD), ``n_draws`` and ``random_state``; ``client_options`` go to
    :func:`dkpca.cluster.connect`. ``written`` is called with each figure's path once it is
    in place (the command names them if it is then interrupted).

    Examples
    --------
    >>> import argparse
    >>> args = argparse.Namespace(out=Path("demo-output"), n_samples=300, n_components=None,
    ...                           n_draws=20, random_state=0)
    >>> run_demo(args, {"processes": False})[1]  # doctest: +SKIP
    'MDD chose sigma2 = 1.78 and 16 components in 0.9 s; kernel PCA on 300 x 2 (exact) in ...'
    """
    import dask.array as da
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dkpca._errors import UsageError
    from dkpca.cluster import connect
    from dkpca.datasets import make_rings
    from dkpca.selection import select_model

    out = Path(args.out)
    if args.n_components is not None and args.n_components < 2:
        raise UsageError("--n-components must be at least 2 for the scatter plot")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a folder")
    writable = next(p for p in (out, *out.parents) if p.exists())  # what mkdir would write in
    if not os.access(writable, os.W_OK):
        raise PermissionError(f"--out {out}: cannot write in {writable}")
    X, labels = make_rings(args.n_samples, n_rings=3, noise=0.08, random_state=args.random_state)
    clock = [time.perf_counter()]  # the start, then the end of each phase

    def lap() -> float:
        clock.append(time.perf_counter())
        return clock[-1] - clock[-2]

    with connect(**client_options) as client:
        logger.info("cluster dashboard: %s", client.dashboard_link)
        lap()
        Xd = da.from_array(X, chunks=(max(1, len(X) // 4), -1))
        logger.info("model selection by MDD: %d draws", args.n_draws)
        selection = select_model(Xd, n_components=args.n_components, n_draws=args.n_draws,
                                 n_train=min(DEMO_TRAIN, len(X) // 2),
                                 random_state=args.random_state)
        logger.info("%s", selection)
        if selection.n_components < 2:
            raise UsageError(f"{selection}: fewer than 2 components, nothing to plot")
        selecting = lap()
        kp = selection.to_kpca(random_state=args.random_state)
        scores = kp.fit(Xd).transform(Xd).compute()
        fitting = lap()
        logger.info("kernel PCA: solver %s, %d passes, %.1f s (fit and transform)",
                    kp.solver_, kp.n_iter_, fitting)
        logger.info("denoising by fixed-point pre-images")
        denoised = kp.denoise(Xd).compute()
        denoising = lap()
    elapsed = time.perf_counter() - clock[0]
    out.mkdir(parents=True, exist_ok=True)
    plt.close(selection.plot(out / "model-selection.png"))
    written(out / "model-selection.png")
    figure_path = out / "kpca-rings.png"
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
    for ring in range(3):
        mask = labels == ring
        axes[0].scatter(X[mask, 0], X[mask, 1], s=4, label=f"ring {ring + 1}")
        axes[1].scatter(scores[mask, 0], scores[mask, 1], s=4)
    axes[0].set(title="input: three noisy rings", xlabel="x1", ylabel="x2", aspect="equal")
    axes[0].legend(loc="upper right", markerscale=3)
    axes[1].set(title=f"RBF kernel PCA, chosen by MDD (σ² = {kp.sigma2:.3g})",
                xlabel="component 1", ylabel="component 2")
    fig.tight_layout()
    partial = figure_path.with_suffix(".partial.png")
    fig.savefig(partial, dpi=110)
    partial.replace(figure_path)  # never leave a half-written figure behind
    written(figure_path)
    plt.close(fig)
    _plot_denoising(X, denoised, labels, out / "denoise-rings.png", plt)
    written(out / "denoise-rings.png")
    summary = (f"MDD chose sigma2 = {kp.sigma2:.3g} and {kp.n_components_} components in "
               f"{selecting:.1f} s; kernel PCA on {len(X)} x {X.shape[1]} ({kp.solver_}) in "
               f"{fitting:.1f} s, denoising in {denoising:.1f} s, {elapsed:.1f} s with the "
               f"cluster's start and stop; figures: {figure_path}, "
               f"{out / 'model-selection.png'}, {out / 'denoise-rings.png'}")
    return kp, summary


def _plot_denoising(X, denoised, labels, path: Path, plt: Any) -> None:
    """Noisy rings beside their pre-images, written atomically."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5), sharex=True, sharey=True)
    for ring in range(labels.max() + 1):
        mask = labels == ring
        axes[0].scatter(X[mask, 0], X[mask, 1], s=3)
        axes[1].scatter(denoised[mask, 0], denoised[mask, 1], s=3)
    axes[0].set(title="before: noisy rings", xlabel="x1", ylabel="x2", aspect="equal")
    axes[1].set(title="after: kernel PCA pre-images (fixed point)", xlabel="x1", aspect="equal")
    fig.tight_layout()
    partial = path.with_suffix(".partial.png")
    fig.savefig(partial, dpi=110)
    partial.replace(path)
    plt.close(fig)
