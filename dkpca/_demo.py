"""``dkpca demo``: kernel PCA on generated rings, on an embedded cluster, with a figure."""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Any

__all__ = ["run_demo"]

logger = logging.getLogger("dkpca")


def run_demo(args: argparse.Namespace, client_options: dict) -> tuple[Any, str]:
    """Fit kernel PCA on three noisy rings and write a scatter plot of two components.

    Returns the fitted model (the command prints its eigenvalues) and the one-line summary. ``args`` carries ``out``, ``n_samples``, ``n_components`` and
    ``random_state``; ``client_options`` go to :func:`dkpca.cluster.connect`.

    Examples
    --------
    >>> import argparse
    >>> args = argparse.Namespace(out=Path("demo-output"), n_samples=300, n_components=2,
    ...                           random_state=0)
    >>> run_demo(args, {"processes": False})[1]  # doctest: +SKIP
    'kernel PCA on 300 x 2: 2 components (exact) in 1.2 s; figure: demo-output/kpca-rings.png'
    """
    import dask.array as da
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dkpca.cli import UsageError
    from dkpca.cluster import connect
    from dkpca.datasets import make_rings
    from dkpca.decomposition import KernelPCA

    out = Path(args.out)
    if args.n_components < 2:
        raise UsageError("--n-components must be at least 2 for the scatter plot")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a folder")
    X, labels = make_rings(args.n_samples, n_rings=3, noise=0.08, random_state=args.random_state)
    started = time.perf_counter()
    with connect(**client_options) as client:
        logger.info("cluster dashboard: %s", client.dashboard_link)
        Xd = da.from_array(X, chunks=(max(1, len(X) // 4), -1))
        kp = KernelPCA(args.n_components, kernel="rbf", sigma2=0.5,
                       random_state=args.random_state)
        scores = kp.fit(Xd).transform(Xd).compute()
    elapsed = time.perf_counter() - started
    logger.info("solver %s, %d passes, %.1f s", kp.solver_, kp.n_iter_, elapsed)
    out.mkdir(parents=True, exist_ok=True)
    figure_path = out / "kpca-rings.png"
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
    for ring in range(3):
        mask = labels == ring
        axes[0].scatter(X[mask, 0], X[mask, 1], s=4, label=f"ring {ring + 1}")
        axes[1].scatter(scores[mask, 0], scores[mask, 1], s=4)
    axes[0].set(title="input: three noisy rings", xlabel="x1", ylabel="x2", aspect="equal")
    axes[0].legend(loc="upper right", markerscale=3)
    axes[1].set(title="RBF kernel PCA (σ² = 0.5)", xlabel="component 1", ylabel="component 2")
    fig.tight_layout()
    partial = figure_path.with_suffix(".partial.png")
    fig.savefig(partial, dpi=110)
    partial.replace(figure_path)  # never leave a half-written figure behind
    plt.close(fig)
    summary = (f"kernel PCA on {len(X)} x {X.shape[1]}: {kp.n_components_} components "
               f"({kp.solver_}) in {elapsed:.1f} s; figure: {figure_path}")
    return kp, summary
