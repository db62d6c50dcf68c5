"""Approximate kernel PCA against exact kernel PCA on digits: the tutorial's Figs. 8 and 9.

The tutorial's §5.5 compares the first 10 eigenpairs of exact kernel PCA with those of two
approximations, at sketch size / working-set size ``q``:

- approx-KPCA (its Alg. 6, ``Sketch(method="covariance")``) with a Gaussian random projection,
  "(g)", or feature hashing, "(f)", of the centred kernel map (``solver=Sketch(...)``). dkpca's
  default reads the same Gaussian sketch as a Nyström approximation of the kernel
  (``Sketch(method="auto")``: for PSD kernels; tanh and the sum fall back to Alg. 6), added as
  "(g), dkpca default";
- Nyström with uniform "(r)", diagonal "(d)" or column-norm "(c)" landmarks. dkpca's default
  (``Nystrom(method="feature_map")``) is exact PCA of the Nyström kernel centred on all points;
  k-means landmarks are added. The tutorial's own eigen-extension (eqs. 62-63, the method its
  figures plot) is ``Nystrom(method="extension")``, shown with uniform landmarks by default
  (``--extension-sampling uniform diagonal column_norm`` adds the other two).

Eigenvectors are scored by eq. (66), ``|vᵀv'| / (‖v‖ ‖v'‖)`` (1 is perfect; the sign is
arbitrary), eigenvalues by eq. (67), ``|λ - λ'| / λ`` (0 is perfect), per component index and
averaged over repeats with ``random_state`` 0, 1, ... The tutorial used the 400 ORL faces; this
example uses scikit-learn's 1,797 8 x 8 digits, so it runs offline, in under three minutes on
two cores with the default 10 repeats.

Reading the figures: eq. (66) compares components index by index, so two nearly equal exact
eigenvalues (RBF's first two differ by 2 %, the polynomial kernel's 10th and 11th by 3 %) let an
approximation rotate their eigenvectors into each other and score low on both though it found
their plane. The polynomial kernel's leading components are driven by a few digits of large
norm (``(<x, y>/d)⁵`` reaches 26 where the median is 0), which uniform landmarks often miss. With
the indefinite tanh kernel the Nyström feature map sometimes gains a spurious component (a
landmark kernel eigenvalue near zero, whose inverse square root it keeps, inflates the
approximate kernel): its tanh curves dip from that index on, and its first eigenvalue can be
twice too large.

Run: ``.venv/bin/python examples/approximations_digits.py [--out FOLDER] [--repeats R]``
(default ``examples-output/``); it prints the table and writes ``approximations-similarity.png``
(Fig. 8) and ``approximations-eigenvalues.png`` (Fig. 9) there.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from sklearn.base import clone
from sklearn.datasets import load_digits

import dkpca
from dkpca.kernels import RBF, Kernel, Polynomial, Sigmoid
from dkpca.options import Nystrom, Sketch, SolverOptions

N_COMPONENTS = 10
SIZES = (100, 200, 400)  # q: sketch dimension and number of landmarks alike, as in the tutorial
SAMPLING_TAGS = {"uniform": "r", "diagonal": "d", "column_norm": "c", "kmeans": "k-means"}


def load_data() -> np.ndarray:
    """Digits, centred and scaled by one pooled standard deviation: mean ``‖x‖² = d``.

    The tutorial standardised every ORL pixel (its code uses ``StandardScaler``). Per-pixel
    scaling would blow up digits' near-constant border pixels (one is nonzero in 1 image of
    1,797, which would then sit 42 standard deviations out and dominate the polynomial kernel),
    so all 64 pixels share one scale instead; the sizes that set the kernels' regimes are then
    those of the tutorial's data: mean ``‖x‖² = d`` and mean squared distance ``2d``.
    """
    X = load_digits().data
    X = X - X.mean(axis=0)
    return X / np.sqrt((X**2).sum(axis=1).mean() / X.shape[1])


def make_kernels(n_features: int) -> dict[str, Kernel]:
    """Build the tutorial's four kernels, its parameters carried over to ``d`` features.

    The tutorial used ``tanh(a <x, y>)`` and ``exp(-γ ‖x - y‖²)`` with ``a = γ = 1e-4`` on
    ``d = 10,304`` standardised pixels, that is ``a d = γ d = 1.03``: the sigmoid's argument on
    the diagonal is about 1 (its nonlinear but unsaturated range) and the RBF kernel at the
    mean squared distance ``2d`` is ``exp(-2.06)``. The same products with ``d = 64`` give
    ``a = γ = 1.03 / 64``. Its polynomial kernel was ``<x, y>⁵``; a homogeneous kernel's
    scale changes no eigenvector and no relative eigenvalue error, so ``gamma = 1/d`` keeps it
    at ``(<x, y>/d)⁵``, of order 1 like the other two. That matters for the sum only: the
    tutorial's unscaled ``<x, y>⁵`` (about 1e20 against at most 1) made its "sum" kernel
    the polynomial kernel in all but name, while here all three terms count.

    The sigmoid kernel is not positive semi-definite: its centred matrix has negative
    eigenvalues (``main`` prints the most negative), but its top 10 are positive and well
    separated from them, so no kernel PCA here drops a component.
    """
    scale = 1e-4 * 10_304 / n_features
    tanh = Sigmoid(gamma=scale, coef0=0.0)
    rbf = RBF(gamma=scale)
    poly = Polynomial(degree=5, gamma=1.0 / n_features, coef0=0.0)
    return {"tanh": tanh, "RBF": rbf, "polynomial": poly, "sum": tanh + rbf + poly}


def make_methods(n_hashes: int, extension_samplings: list[str]) -> dict[str, SolverOptions]:
    """Label -> the ``KernelPCA`` solver's options; ``q`` and the seed are added per run."""
    methods: dict[str, SolverOptions] = {
        "Approx-KPCA (g)": Sketch(kind="gaussian", method="covariance"),
        "Approx-KPCA (f)": Sketch(kind="hashing", n_hashes=n_hashes, method="covariance"),
        "Approx-KPCA (g), dkpca default": Sketch(kind="gaussian"),
    }
    for sampling, tag in SAMPLING_TAGS.items():
        methods[f"Nyström feature map ({tag})"] = Nystrom(sampling=sampling)
    for sampling in extension_samplings:
        methods[f"Nyström ({SAMPLING_TAGS[sampling]}), eqs. 62–63"] = Nystrom(
            sampling=sampling, method="extension")
    return methods


def sized(options: SolverOptions, q: int) -> SolverOptions:
    """Return a copy of ``options`` with its sketch dimension or landmark count set to ``q``."""
    size = "dim" if isinstance(options, Sketch) else "n_landmarks"
    return clone(options).set_params(**{size: q})


def similarity(V: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Eq. (66) for each column pair: ``|vᵀw| / (‖v‖ ‖w‖)``."""
    return np.abs((V * W).sum(axis=0)) / (np.linalg.norm(V, axis=0) * np.linalg.norm(W, axis=0))


def eigenvalue_difference(exact: np.ndarray, approx: np.ndarray) -> np.ndarray:
    """Eq. (67) for each index: ``|λ - λ'| / λ``."""
    return np.abs(exact - approx) / exact


def padded(values: np.ndarray) -> np.ndarray:
    """Keep the first ``N_COMPONENTS`` entries (or columns), padding with NaN if fewer."""
    out = np.full((*values.shape[:-1], N_COMPONENTS), np.nan)
    out[..., : values.shape[-1]] = values[..., :N_COMPONENTS]
    return out


def centred_spectrum(kernel: Kernel, X: np.ndarray) -> np.ndarray:
    """All eigenvalues of the centred kernel matrix, descending (numpy, for the report)."""
    K = kernel.pairwise(X)
    row_means = K.mean(axis=0)
    K -= row_means[:, None] + row_means[None, :] - row_means.mean()
    return np.linalg.eigvalsh(K)[::-1]


def run(
    X: np.ndarray, kernels: dict[str, Kernel], methods: dict[str, SolverOptions], repeats: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[str, str]]]:
    """Fit the exact reference and every approximation, each ``repeats`` times.

    Returns the similarity and eigenvalue difference, ``(kernel, method, q, repeat,
    component)`` arrays, the fit seconds, ``(kernel, method, q, repeat)``, and the warnings
    raised, as (run, message) pairs.
    """
    shape = (len(kernels), len(methods), len(SIZES), repeats)
    sim, diff = np.empty((*shape, N_COMPONENTS)), np.empty((*shape, N_COMPONENTS))
    seconds = np.empty(shape)
    caught: list[tuple[str, str]] = []
    for a, (kname, kernel) in enumerate(kernels.items()):
        exact = dkpca.KernelPCA(N_COMPONENTS, kernel=kernel, solver="exact").fit(X)
        for b, (label, options) in enumerate(methods.items()):
            for c, q in enumerate(SIZES):
                for r in range(repeats):
                    model = dkpca.KernelPCA(N_COMPONENTS, kernel=kernel, random_state=r,
                                            solver=sized(options, q))
                    # Record rather than print warnings, to list them once, with their run.
                    with warnings.catch_warnings(record=True) as records:
                        warnings.simplefilter("always")
                        start = time.perf_counter()
                        model.fit(X)
                        seconds[a, b, c, r] = time.perf_counter() - start
                    caught += [(f"{kname}, {label}, q={q}, seed {r}", str(w.message))
                               for w in records]
                    sim[a, b, c, r] = similarity(exact.eigenvectors_,
                                                 padded(model.eigenvectors_))
                    diff[a, b, c, r] = eigenvalue_difference(exact.eigenvalues_,
                                                             padded(model.eigenvalues_))
    return sim, diff, seconds, caught


def print_table(kernels: list[str], methods: list[str], sim: np.ndarray,
                diff: np.ndarray) -> None:
    """Means over repeats and the 10 components: similarity (eq. 66) / eigenvalue diff (67)."""
    width = max(map(len, methods)) + 2
    for c, q in enumerate(SIZES):
        print(f"\nq = {q}: mean similarity (eq. 66, 1 is best) / mean eigenvalue difference "
              f"(eq. 67, 0 is best) over the top {N_COMPONENTS} components")
        print(" " * width + "".join(f"{k:>18}" for k in kernels))
        for b, label in enumerate(methods):
            cells = "".join(f"{np.nanmean(sim[a, b, c]):9.3f} {np.nanmean(diff[a, b, c]):8.4f}"
                            for a in range(len(kernels)))
            print(f"{label:<{width}}{cells}")


def style(label: str) -> dict:
    """Colour and marker by method; dashed for the eigen-extension, dotted for sketches.

    dkpca's default sketch estimate is dash-dotted.
    """
    colours = {"(g)": "tab:blue", "(f)": "tab:orange", "(r)": "tab:green", "(d)": "tab:red",
               "(c)": "tab:purple", "(k-means)": "tab:brown"}
    tag = next(t for t in colours if t in label)
    if "eqs." in label:
        return {"color": colours[tag], "ls": "--", "marker": "x", "lw": 2.2}
    if "default" in label:
        return {"color": colours[tag], "ls": "-.", "marker": "*", "lw": 1.6}
    markers = {"(g)": "o", "(f)": "s", "(r)": "^", "(d)": "v", "(c)": "D", "(k-means)": "P"}
    return {"color": colours[tag], "ls": ":" if "Approx" in label else "-",
            "marker": markers[tag], "lw": 1.6}


def plot(values: np.ndarray, kernels: list[str], methods: list[str], ylabel: str, title: str,
         path: Path, log: bool) -> None:
    """One panel per (q, kernel), a line per method: component index against the mean."""
    mean = np.nanmean(values, axis=3)  # over repeats: (kernel, method, q, component)
    index = np.arange(1, N_COMPONENTS + 1)
    fig, axes = plt.subplots(len(SIZES), len(kernels), figsize=(17, 11), sharex=True,
                             sharey=True, layout="constrained")
    for c, q in enumerate(SIZES):
        for a, kname in enumerate(kernels):
            ax = axes[c, a]
            for b, label in enumerate(methods):
                ax.plot(index, mean[a, b, c], label=label, ms=5, **style(label))
            ax.set_title(f"{kname} kernel, q = {q}")
            ax.grid(alpha=0.3)
            if log:
                ax.set_yscale("log")
            if c == len(SIZES) - 1:
                ax.set(xlabel="component index", xticks=index)
            if a == 0:
                ax.set_ylabel(ylabel)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=4, fontsize=11)
    fig.suptitle(title, fontsize=14)
    fig.savefig(path, dpi=80)
    print(f"figure: {path}")


def main() -> None:
    """Fit, print the spectra and the table, write both figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("examples-output"))
    parser.add_argument("--repeats", type=int, default=10,
                        help="random_state 0 .. repeats-1 for each approximation (default 10)")
    parser.add_argument("--n-hashes", type=int, default=5,
                        help="hash functions of the hashing sketch; 5 as in the tutorial's code")
    parser.add_argument("--extension-sampling", nargs="+", default=["uniform"],
                        choices=["uniform", "diagonal", "column_norm"],
                        help="landmark samplings for the eqs. 62-63 eigen-extension")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()

    X = load_data()
    kernels = make_kernels(X.shape[1])
    methods = make_methods(args.n_hashes, args.extension_sampling)
    print(f"digits: {X.shape[0]} x {X.shape[1]}; centred kernel spectra (numpy):")
    for kname, kernel in kernels.items():
        w = centred_spectrum(kernel, X)
        print(f"  {kname:<11} {kernel!r}")
        print(f"  {'':<11} λ1 = {w[0]:.4g}, λ10/λ1 = {w[9] / w[0]:.3f}, "
              f"λ11/λ10 = {w[10] / w[9]:.3f}, most negative λ/λ1 = {w[-1] / w[0]:.2e}")

    sim, diff, seconds, caught = run(X, kernels, methods, args.repeats)
    print_table(list(kernels), list(methods), sim, diff)

    print("\nmean fit seconds (over kernels and repeats)")
    print(" " * 36 + "".join(f"{'q = ' + str(q):>10}" for q in SIZES))
    for b, label in enumerate(methods):
        print(f"{label:<36}" + "".join(f"{seconds[:, b, c].mean():10.3f}"
                                       for c in range(len(SIZES))))
    print(f"\ndkpca warnings: {len(caught) or 'none'}")
    for run_name, message in caught:
        print(f"  {run_name}: {message}")

    matplotlib.use("Agg")  # files only, no display
    names, labels = list(kernels), list(methods)
    plot(sim, names, labels, "similarity, eq. (66)",
         f"Mean similarity of the first {N_COMPONENTS} eigenvectors to exact kernel PCA "
         f"(digits, {args.repeats} repeats; cf. tutorial Fig. 8)",
         args.out / "approximations-similarity.png", log=False)
    plot(diff, names, labels, "eigenvalue difference, eq. (67)",
         f"Mean relative difference of the first {N_COMPONENTS} eigenvalues from exact kernel "
         f"PCA (digits, {args.repeats} repeats; cf. tutorial Fig. 9)",
         args.out / "approximations-eigenvalues.png", log=True)
    print(f"total time: {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
