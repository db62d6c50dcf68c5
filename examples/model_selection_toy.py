"""Model selection on the MDD paper's toy sets: the (σ², n_c) of its Table I, and its Fig. 7.

Varon, Alzate & Suykens (2015) choose the RBF width ``σ²`` and the number of kernel principal
components ``n_c`` by MDD (noise spectra from distance matrices drawn from the Pearson law with
the data's distance moments), and compare it with the Shannon entropy of the kernel matrix (for
``σ²``, then MDD for ``n_c``) and kernel parallel analysis (kPA), on three noisy toy sets (SNR
10): semicircles (N = 500, d = 2), a square (N = 2000, d = 2) and two interlocked rings (N =
3000, d = 3), each with three training sets. This example runs ``dkpca.selection.select_model``
in the same settings and prints its (σ², n_c) beside the paper's; the MSE columns of Table I
(denoising) are in `denoising_toy_digits.py`. The splits, as ``training / validation``:

- "All points": the paper does not say; here a random half of the points trains (at most
  1000, for run time: every draw decomposes n_t × n_t matrices) and the rest validates;
- FS2: 50 fixed-size support vectors (quadratic Renyi entropy, k-means start); N_v = 250 for
  the semicircles, 1000 for the others, as in the paper;
- ICF: σ² fixed at the rule of thumb eq. (20), only n_c chosen; the pivots of an incomplete
  Cholesky factorisation at η = 1e-2 (the paper's, given for the semicircles), capped at the
  paper's pivot counts 70, 98 and 493, since η = 1e-2 alone (residual trace, of a kernel matrix
  of trace N) takes about 140, 210 and 980 pivots here; same N_v. Shannon is not run with ICF.

The σ² grids are ``select_model``'s defaults: 20 log-spaced values from 0.1 to 10 times the rule
of thumb (MDD, kPA), 41 from 0.01 to 100 times (Shannon). Fig. 7 is redone on 200 semicircle
points (the paper's Fig. 7(a) set is not specified), N_t = N_v = 100: (a) the data, (b) the
density of the data's distances (Silverman KDE) and the Pearson noise density truncated to
``[0, r_max]``, (c-d) the spectra and ``I_s(σ²)``. A figure of the evidence of every Table I run
(spectra and ``I_s(σ²)``, cf. the paper's Figs. 9-10) is written as well.

Reading the table: the semicircles' all-points Shannon choice and MDD's σ² on the whole square
agree with the paper; most other cells do not. The main cause is the noise's first eigenvalue: the
appendix's ordered fill (largest distances in the first column, smallest in the last) makes
the last points a tight cluster in every noise matrix, so ``τ_1`` is 3-4 times that of the
same distances placed at random and exceeds ``λ_1`` up to 2-6 times the rule of thumb. So
``I_s(σ²)`` is 0 below that, jumps to its maximum at the first σ² with ``λ_1 > τ_1`` (MDD's
choice in 5 of the 6 runs) and falls after; MDD never picks the paper's smaller widths, and at
the rule of thumb (the ICF column) nothing rises above the noise. kPA, with the 95th
percentile of 100 permutations of 1000 points, finds a few components on the square and the
rings, where the paper's found none.

Run: ``.venv/bin/python examples/model_selection_toy.py [--n-draws 100] [--random-state 0]
[--quick] [--out examples-output/model-selection]``; with 100 draws it takes 9-11 minutes
on 2 cores, nearly all in the "All points" MDD and kPA runs of the square and the rings
(1000 × 1000 matrices); ``--quick`` (20 draws) about 2 minutes.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import scipy.stats
from scipy.spatial.distance import cdist

from dkpca.datasets import make_semicircles, make_square, make_two_rings
from dkpca.selection import fit_pearson, rule_of_thumb_sigma2, select_model

METHODS = {"mdd": "MDD", "shannon": "Shannon+MDD", "kpa": "kPA"}
COLUMNS = ("All points", "FS2", "ICF")
ICF_ETA = 1e-2
# name: (generator, N, N_v for FS2 and ICF, the paper's ICF pivots, the paper's rule of thumb)
DATASETS = {
    "Semicircles": (make_semicircles, 500, 250, 70, 1.13),
    "Square": (make_square, 2000, 1000, 98, 0.13),
    "Rings": (make_two_rings, 3000, 1000, 493, 1.25),
}
# Table I, (σ², n_c) per column; σ² None: nothing selected ("-"); a missing entry: not run
PAPER = {
    ("Semicircles", "mdd"): [(0.8, 33), (2.19, 9), (1.13, 24)],
    ("Semicircles", "shannon"): [(11.6, 7), (11.8, 4)],
    ("Semicircles", "kpa"): [(3.11, 1), (12.91, 4), (1.13, 6)],
    ("Square", "mdd"): [(0.28, 22), (0.18, 10), (0.13, 34)],
    ("Square", "shannon"): [(0.66, 12), (0.66, 6)],
    ("Square", "kpa"): [(None, 0), (None, 0), (0.13, 0)],
    ("Rings", "mdd"): [(1.25, 71), (2.51, 13), (1.25, 71)],
    ("Rings", "shannon"): [(2.51, 45), (2.51, 13)],
    ("Rings", "kpa"): [(None, 0), (None, 0), (1.25, 0)],
}


NOTES: list[str] = []  # dkpca's warnings during the current run


class Collect(logging.Handler):
    """Keep dkpca's warnings (choice at the edge of the grid, nothing above the noise)."""

    def emit(self, record: logging.LogRecord) -> None:
        """Append the message to :data:`NOTES`."""
        NOTES.append(record.getMessage())


def cell(sigma2: float | None, n_c: int, fmt: str = ".3g") -> str:
    """Format ``(σ², n_c)`` as Table I does, ``(-, 0)`` when nothing was selected."""
    return f"({'-' if sigma2 is None else format(sigma2, fmt)}, {n_c})"


def splits(N: int, n_valid: int, pivots: int) -> list[dict]:
    """``select_model`` keywords of the three columns: all points, FS2, ICF."""
    n_all = min(N // 2, 1000)
    return [{"training": "random", "n_train": n_all, "validation": "rest"},
            {"training": "fs2", "n_train": 50, "validation": n_valid},
            {"training": "icf", "n_train": pivots, "icf_tol": ICF_ETA, "validation": n_valid}]


def run_dataset(name: str, args: argparse.Namespace) -> None:
    """Run the three methods on the three training sets of one data set; print its rows."""
    make, N, n_valid, pivots, paper_rule = DATASETS[name]
    start = time.perf_counter()
    X, _, _ = make(N, random_state=args.random_state)
    rule = rule_of_thumb_sigma2(X)
    print(f"\n{name} (N = {N}, d = {X.shape[1]}): rule of thumb eq. (20) = {rule:.3g} "
          f"(paper {paper_rule})")
    results, notes = {}, {}
    for method in METHODS:
        for col, kwargs in zip(COLUMNS, splits(N, n_valid, pivots), strict=True):
            if method == "shannon" and col == "ICF":
                continue
            t0 = time.perf_counter()
            NOTES.clear()
            res = select_model(X, method, n_draws=args.n_draws, random_state=args.random_state,
                               **kwargs)
            results[method, col] = res, time.perf_counter() - t0
            notes[method, col] = list(NOTES)
            slug = f"{name}-{col.split()[0]}-{method}".lower()
            plt.close(res.plot(args.out / f"table1-{slug}.png"))
    print("  training / validation sizes (ICF: pivots / validation): " + ", ".join(
        f"{col} {results['mdd', col][0].table.attrs['n_train']}/"
        f"{results['mdd', col][0].table.attrs['n_validation']}" for col in COLUMNS))
    print(f"  {'':<19}" + "".join(f"{col:<16}" for col in COLUMNS).rstrip())
    for method, label in METHODS.items():
        ours = [results.get((method, col)) for col in COLUMNS]
        paper = PAPER[name, method]
        print(f"  {label:<12}{'ours':<7}" + "".join(
            f"{cell(o[0].sigma2, o[0].n_components) if o else '--':<16}" for o in ours).rstrip())
        print(f"  {'':<12}{'paper':<7}" + "".join(
            f"{cell(*p, 'g') if p else '--':<16}" for p in paper + [None] * (3 - len(paper))
        ).rstrip())
        print(f"  {'':<12}{'time':<7}" + "".join(
            f"{f'{o[1]:.1f} s' if o else '--':<16}" for o in ours).rstrip())
    for (method, col), messages in notes.items():
        for message in messages:
            print(f"  note, {METHODS[method]} / {col}: {message}")
    print(f"  {name}: {time.perf_counter() - start:.0f} s")


def fig7(args: argparse.Namespace) -> None:
    """Fig. 7 on 200 semicircle points, N_t = N_v = 100: (a-b) one figure, (c-d) another."""
    t0 = time.perf_counter()
    X, _, _ = make_semicircles(200, random_state=args.random_state)
    res = select_model(X, "mdd", n_train=100, validation="rest", n_draws=args.n_draws,
                       random_state=args.random_state)
    a = res.table.attrs
    train = res.training_index
    r = cdist(X[train], X)  # training to training ∪ validation, as the moments
    r = r[np.arange(X.shape[0])[None, :] != train[:, None]]
    moments = [a[f"distance_{k}"] for k in ("mean", "std", "skewness", "kurtosis")]
    print(f"\nFig. 7: semicircles N = 200, N_t = {a['n_train']}, N_v = {a['n_validation']}: "
          f"{res}; rule of thumb {a['rule_of_thumb']:.3g}")
    print("  distance moments (mean, std, skewness, kurtosis, max): library "
          + ", ".join(f"{v:.4g}" for v in [*moments, a["distance_maximum"]]) + "; recomputed "
          + ", ".join(f"{v:.4g}" for v in [r.mean(), r.std(), scipy.stats.skew(r),
                                           scipy.stats.kurtosis(r, fisher=False), r.max()]))
    law = fit_pearson(*moments)
    r_max = a["distance_maximum"]
    grid = np.linspace(0.0, r_max, 400)
    noise = law.pdf(grid) / (law.cdf(r_max) - law.cdf(0.0))
    print(f"  Pearson type {law.type}; paper: nine components (Fig. 7(c)), σ² not given")
    fig, (ax_a, ax_b) = plt.subplots(1, 2, figsize=(10, 4))
    valid = np.setdiff1d(np.arange(X.shape[0]), train)
    ax_a.plot(*X[train].T, "k.", label=f"training ({len(train)})")
    ax_a.plot(*X[valid].T, ".", color="0.6", label=f"validation ({len(valid)})")
    ax_a.set(title="(a) data", aspect="equal")
    ax_a.legend()
    ax_b.plot(grid, scipy.stats.gaussian_kde(r, bw_method="silverman")(grid), "k-",
              label="data $f_D(r)$")
    ax_b.plot(grid, noise, "k--", label=f"noise $f_N(r)$ (Pearson {law.type})")
    ax_b.set(title="(b) distance densities", xlabel="r", ylabel="density", xlim=(0, r_max))
    ax_b.legend()
    fig.tight_layout()
    fig.savefig(args.out / "fig7-ab.png", dpi=110)
    plt.close(fig)
    plt.close(res.plot(args.out / "fig7-cd.png"))
    print(f"  Fig. 7: {time.perf_counter() - t0:.0f} s")


def main() -> None:
    """Parse the options, run Fig. 7 and the three data sets, print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-draws", type=int, default=100,
                        help="MDD draws / kPA permutations per run (default 100, the paper's q)")
    parser.add_argument("--random-state", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="20 draws, for a smoke run")
    parser.add_argument("--out", type=Path, default=Path("examples-output/model-selection"))
    args = parser.parse_args()
    if args.quick:
        args.n_draws = min(args.n_draws, 20)
    args.out.mkdir(parents=True, exist_ok=True)
    matplotlib.use("Agg")  # files only, no display
    logging.getLogger("dkpca").addHandler(Collect(logging.WARNING))
    logging.getLogger("dkpca").propagate = False
    print(f"MDD paper Table I (σ², n_c) and Fig. 7; {args.n_draws} draws, 95th percentile, "
          f"random_state {args.random_state}")
    start = time.perf_counter()
    fig7(args)
    for name in DATASETS:
        run_dataset(name, args)
    print(f"\nfigures in {args.out}/; total time: {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
