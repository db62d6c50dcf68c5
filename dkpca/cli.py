"""The ``dkpca`` command.

``dkpca demo`` (what ``make run`` runs) fits kernel PCA on a generated data set on an embedded
Dask cluster, prints the eigenvalues and writes a scatter plot of the first two components.

A user error (bad option, missing input) prints one line to stderr and exits with status 2;
nothing is written.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main"]

logger = logging.getLogger("dkpca")


class UsageError(Exception):
    """A mistake of the user's, reported as one line and exit status 2."""


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="dkpca", description="Kernel PCA for data larger than memory, on Dask."
    )
    parser.add_argument("--version", action="version", version=f"dkpca {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo", help="fit kernel PCA on generated rings and plot the first two components"
    )
    demo.add_argument("--out", type=Path, default=Path("demo-output"),
                      help="folder for the figure (default: demo-output)")
    demo.add_argument("--n-samples", type=_positive_int, default=3000)
    demo.add_argument("--n-components", type=_positive_int, default=4)
    demo.add_argument("--random-state", type=int, default=0)
    cluster = demo.add_argument_group("cluster")
    cluster.add_argument("--scheduler", help="address of a running scheduler (default: embedded)")
    cluster.add_argument("--workers", type=_positive_int, default=None)
    cluster.add_argument("--threads-per-worker", type=_positive_int, default=None)
    demo.add_argument("--quiet", action="store_true", help="print only the summary")
    return parser


def _demo(args: argparse.Namespace) -> str:
    import dask.array as da
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .cluster import connect
    from .datasets import make_rings
    from .decomposition import KernelPCA

    if args.n_components < 2:
        raise UsageError("--n-components must be at least 2 for the scatter plot")
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out {args.out} exists and is not a folder")
    X, labels = make_rings(args.n_samples, n_rings=3, noise=0.08, random_state=args.random_state)
    started = time.perf_counter()
    with connect(args.scheduler, n_workers=args.workers,
                 threads_per_worker=args.threads_per_worker) as client:
        logger.info("cluster dashboard: %s", client.dashboard_link)
        Xd = da.from_array(X, chunks=(max(1, len(X) // 4), -1))
        kp = KernelPCA(args.n_components, kernel="rbf", sigma2=0.5,
                       random_state=args.random_state)
        scores = kp.fit(Xd).transform(Xd).compute()
    elapsed = time.perf_counter() - started
    logger.info("solver %s, %d passes, %.1f s", kp.solver_, kp.n_iter_, elapsed)
    print("eigenvalues of the centred kernel matrix:")
    for i, (value, ratio) in enumerate(zip(kp.eigenvalues_, kp.explained_variance_ratio_,
                                           strict=True), start=1):
        print(f"  {i:2d}  {value:12.4f}  ({ratio:6.2%} of the variance)")

    args.out.mkdir(parents=True, exist_ok=True)
    figure_path = args.out / "kpca-rings.png"
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
    return (f"kernel PCA on {len(X)} x {X.shape[1]}: {kp.n_components_} components "
            f"({kp.solver_}) in {elapsed:.1f} s; figure: {figure_path}")


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
    try:
        summary = _demo(args)
    except UsageError as err:
        print(f"dkpca: error: {err}", file=sys.stderr)
        return 2
    print(summary)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
