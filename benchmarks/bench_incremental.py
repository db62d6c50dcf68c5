"""Incremental fitting (issue 33): ``partial_fit`` over batches beside one ``fit``, and landmarks.

Data: a mixture of 10 Gaussian clusters in ``d = 64`` dimensions with unequal weights (centres
``N(0, 2²)``, unit spread, weights ``Dirichlet(2)``, all seeded), standardised with the
mixture's own mean and standard deviation (known in closed form, so every batch is
standardised alike without a pass over the data). Batch ``i`` of the stream is drawn from
``default_rng([0, i])``, so any batch can be made again on its own: the stream never holds
more than one batch, and the same rows can be written to Zarr for a single ``fit``.

**Part a, partial_fit against fit.** ``N`` rows (default 10,000,000, the issue's figure) in
batches of 100,000 rows:

* ``PCA(10, solver="covariance")``: the stream calls ``partial_fit`` on each float64 batch,
  made in memory just before the call; the single ``fit`` reads the same rows from a Zarr array
  on disk (float64, one 100,000-row chunk per batch, zstd; ``benchmarks/results/``, written
  once and reused) as a dask array, one task per chunk.
* ``KernelPCA(10, kernel="rbf", gamma=1/64, solver=Nystrom(n_landmarks=1000))`` on the float32
  rounding of the same rows (as ``bench_nystrom.py``: the kernel products run in float32, the
  statistics in float64): the stream's first call picks 1,000 landmarks uniformly in the first
  batch (``random_state=0``); the single ``fit`` is given those landmarks
  (``Nystrom(landmarks=...)``), so the two are the same model, and reads the Zarr array cast
  to float32.

Each runs in its own spawned process after an untimed call on 2,000 rows (lazy imports).
*time* is the time inside the ``partial_fit`` calls (making the batches is excluded, and
printed beside) or of ``fit`` (reading and decompressing Zarr included); *peak* is the peak
resident set size during the loop or the fit minus the one before it (psutil, every 5 ms; the
stream's includes the batch being made, 51 MB of float64 and its temporaries). The accuracy
columns compare the stream's model with the fit's: the largest relative difference of the 10
eigenvalues, and the largest ``1 - |cos|`` between matching components (PCA's
``components_``; for kernel PCA the score columns of 2,000 rows). With ``--chunk R`` each batch
goes to ``partial_fit`` as a dask array of ``R``-row chunks instead of a numpy array (a numpy
batch this small is one task, so the kernel pass of one call runs on one core).

**Part b, landmarks on a stream.** ``n = 10,000`` rows of the same mixture in batches of 1,000,
``KernelPCA(10, solver="nystrom")`` with ``m = 300`` landmarks, RBF with ``gamma = 1/64``,
float64. The landmarks come from:

1. ``first batch, uniform``: ``partial_fit``'s own choice, uniform in the first batch;
2. ``all rows, uniform (fit)``: ``fit`` on all the rows, uniform among them (two passes);
3. ``first batch, k-means``: ``partial_fit`` with ``Nystrom(sampling="kmeans")`` (in the first
   batch);
4. ``reservoir over a first pass``: a uniform reservoir sample of ``m`` rows (algorithm R, here
   below) over a first pass of all batches, given as ``Nystrom(landmarks=...)`` to a second
   pass of ``partial_fit``;
5. ``all rows, k-means (fit)``: ``fit`` with ``sampling="kmeans"``, for comparison.

The same rows arrive in two orders: ``shuffled`` (in the order drawn: every batch represents
the data) and ``by cluster`` (sorted by cluster, so the first batch holds one or two clusters:
a stream whose first batch is not representative). Each is measured for ``--seeds`` seeds of
the landmark choice (and of the reservoir), as the mean (and worst) over seeds. The reference
is **exact** kernel PCA of the same 10,000 rows: ``scipy.linalg.eigh`` of the centred
``10,000 × 10,000`` kernel (float64, its 10 leading eigenpairs). Every model is fitted on
exactly these rows, so their Nyström eigenvalues and eigenvectors (the score columns on the
rows, normalised) estimate the reference's directly: *eigenvalue error* is the mean over the
10 components of ``|λ - λ_ref| / λ_ref`` (tutorial eq. 67), *similarity* the mean of
``|vᵀ v_ref|`` (eq. 66), *subspace* ``‖V_refᵀ V‖²_F / 10`` (the mean squared cosine of the
principal angles between the two 10-dimensional subspaces: 1 when they are equal, whatever the
order of close eigenvalues). *clusters* counts the clusters the landmarks fall in.

Usage::

    python benchmarks/bench_incremental.py                        # a at N = 10,000,000, then b
    python benchmarks/bench_incremental.py --part a --n-samples 1000000
    python benchmarks/bench_incremental.py --part a --n-samples 1000000 --chunk 50000
    python benchmarks/bench_incremental.py --part b --seeds 5
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    Monitor,
    dkpca_source,
    environment,
    markdown_table,
    print_environment,
    run_in_child,
    wait_for_quiet,
)

D, K, CENTRES, SEED = 64, 10, 10, 0
RESULTS = Path(__file__).parent / "results"


@dataclass(frozen=True)
class Mixture:
    """A Gaussian mixture standardised by its own moments; batch ``i`` is reproducible alone."""

    centres: np.ndarray
    weights: np.ndarray
    mean: np.ndarray
    scale: np.ndarray

    @classmethod
    def make(cls, d: int = D, seed: int = SEED) -> Mixture:
        """Centres ``N(0, 2²)``, weights ``Dirichlet(2)``, unit spread in every cluster."""
        rng = np.random.default_rng(seed)
        centres = rng.normal(scale=2.0, size=(CENTRES, d))
        weights = rng.dirichlet(np.full(CENTRES, 2.0))
        mean = weights @ centres
        scale = np.sqrt(weights @ (centres - mean) ** 2 + 1.0)  # between + within variance
        return cls(centres, weights, mean, scale)

    def batch(self, i: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows and cluster labels of batch ``i`` (float64, standardised)."""
        rng = np.random.default_rng([SEED, i])
        labels = rng.choice(CENTRES, size=rows, p=self.weights)
        X = self.centres[labels]
        X += rng.standard_normal(X.shape)
        X -= self.mean
        X /= self.scale
        return X, labels


def batch_sizes(n: int, batch: int) -> Iterator[tuple[int, int]]:
    """``(index, rows)`` of each batch of an ``n``-row stream."""
    for i, start in enumerate(range(0, n, batch)):
        yield i, min(batch, n - start)


def zarr_store(n: int, batch: int) -> tuple[Path, float]:
    """The stream's rows in a Zarr array (written once), and the seconds writing took now."""
    import zarr

    path = RESULTS / f"incremental-{n}-{batch}.zarr"
    if (path / "zarr.json").exists():
        return path, 0.0
    RESULTS.mkdir(exist_ok=True)
    start = time.perf_counter()
    mixture = Mixture.make()
    array = zarr.create_array(path, shape=(n, D), dtype="float64", chunks=(batch, D),
                              overwrite=True)
    for i, rows in batch_sizes(n, batch):
        array[i * batch : i * batch + rows] = mixture.batch(i, rows)[0]
    return path, time.perf_counter() - start


# --- part a: partial_fit against fit ----------------------------------------------------------

def _model(kind: str, m: int, landmarks: np.ndarray | None = None) -> Any:
    import dkpca
    from dkpca.options import Nystrom

    if kind == "pca":
        return dkpca.PCA(K, solver="covariance")
    return dkpca.KernelPCA(K, kernel="rbf", gamma=1 / D,
                           solver=Nystrom(n_landmarks=m, landmarks=landmarks), random_state=0)


def _summary(kind: str, model: Any, probe: np.ndarray) -> dict[str, Any]:
    """What the comparison needs: eigenvalues, and components or unit score columns."""
    if kind == "pca":
        return {"values": np.asarray(model.explained_variance_, dtype=np.float64),
                "vectors": np.asarray(model.components_, dtype=np.float64).T}
    scores = np.asarray(model.transform(probe), dtype=np.float64)
    return {"values": np.asarray(model.eigenvalues_, dtype=np.float64),
            "vectors": scores / np.linalg.norm(scores, axis=0),
            "landmarks": np.asarray(model.landmarks_)}


def _stream(kind: str, n: int, batch: int, m: int, chunk: int | None) -> dict[str, Any]:
    import dask.array as da

    mixture = Mixture.make()
    dtype = np.float64 if kind == "pca" else np.float32
    probe = mixture.batch(0, 2000)[0].astype(dtype)
    _model(kind, min(m, 500)).partial_fit(probe)  # lazy imports
    inside = 0.0
    with Monitor() as monitor:
        model = _model(kind, m)
        for i, rows in batch_sizes(n, batch):
            X = mixture.batch(i, rows)[0].astype(dtype, copy=False)
            if chunk:
                X = da.from_array(X, chunks=(chunk, -1))
            start = time.perf_counter()
            model.partial_fit(X)
            inside += time.perf_counter() - start
    assert model.n_samples_seen_ == n
    return {"time": inside, "wall": monitor.elapsed, "peak": monitor.peak_increase,
            "other_load": monitor.other_load, **_summary(kind, model, probe)}


def _fit(kind: str, n: int, batch: int, m: int, landmarks: np.ndarray | None) -> dict[str, Any]:
    import dask.array as da

    path, _ = zarr_store(n, batch)
    X = da.from_zarr(str(path))
    if kind != "pca":
        X = X.astype(np.float32)
    probe = Mixture.make().batch(0, 2000)[0].astype(X.dtype)
    warm = landmarks[: min(m, 500)] if landmarks is not None else None
    _model(kind, min(m, 500), warm).fit(probe)  # lazy imports
    with Monitor() as monitor:
        model = _model(kind, m, landmarks).fit(X)
    return {"time": monitor.elapsed, "wall": monitor.elapsed, "peak": monitor.peak_increase,
            "other_load": monitor.other_load, **_summary(kind, model, probe)}


def _child(task: str, args: tuple, results: mp.Queue) -> None:
    results.put((_stream if task == "stream" else _fit)(*args))


def measure(task: str, args: tuple, timeout: float) -> dict[str, Any]:
    """One stream or fit in a spawned process; a crash or a timeout becomes the status."""
    return run_in_child(_child, (task, args), timeout)


def _largest_differences(a: dict[str, Any], b: dict[str, Any]) -> tuple[float, float]:
    """Largest relative eigenvalue difference and largest ``1 - |cos|`` between components."""
    values = float(np.max(np.abs(a["values"] / b["values"] - 1)))
    cosines = np.abs(np.sum(a["vectors"] * b["vectors"], axis=0))
    return values, float(np.max(1 - cosines))


def part_a(n: int, batch: int, m: int, chunk: int | None, timeout: float) -> str:
    """Stream and fit for PCA and Nyström kernel PCA; return the markdown table."""
    path, seconds = zarr_store(n, batch)
    print(f"Zarr store {path.name}: " + (f"written in {seconds:.1f} s" if seconds else "reused"),
          file=sys.stderr, flush=True)
    rows = []
    for kind, label in (("pca", "PCA"), ("nystrom", f"KernelPCA nystrom, m = {m}")):
        wait_for_quiet(0.2)
        stream = measure("stream", (kind, n, batch, m, chunk), timeout)
        landmarks = stream.get("landmarks")
        if stream["status"] != "ok" or (kind != "pca" and landmarks is None):
            rows.append([f"{n:,}", label, "partial_fit", "", stream["status"], "", "", "", ""])
            continue
        wait_for_quiet(0.2)
        whole = measure("fit", (kind, n, batch, m, landmarks), timeout)
        values, vectors = (_largest_differences(stream, whole) if whole["status"] == "ok"
                           else (float("nan"), float("nan")))
        feed = f"dask, {chunk:,}-row chunks" if chunk else "numpy"
        for name, record, how in (("partial_fit", stream, f"{n // batch:,} batches ({feed})"),
                                  ("fit", whole, "Zarr, one pass")):
            ok = record["status"] == "ok"
            rows.append([
                f"{n:,}", label, name, how,
                f"{record['time']:.1f}" if ok else record["status"],
                f"{record['wall'] - record['time']:.1f}" if ok and name == "partial_fit" else "",
                f"{record['peak'] / 2**20:,.0f}" if ok else "",
                f"{values:.1e}" if name == "partial_fit" else "",
                f"{vectors:.1e}" if name == "partial_fit" else "",
                f"{record.get('other_load', float('nan')):.2f}",
            ])
            print(rows[-1], file=sys.stderr, flush=True)
    return markdown_table(
        ["N", "model", "method", "input", "time s", "making batches s", "peak MiB",
         "max λ rel. diff", "max 1 - |cos|", "other load"], rows)


# --- part b: landmarks on a stream ------------------------------------------------------------

def reservoir_sample(batches: Iterator[np.ndarray], m: int,
                     rng: np.random.Generator) -> np.ndarray:
    """Uniform sample of ``m`` rows of a stream of batches, in one pass (algorithm R).

    Row ``t`` (counted from 0) replaces a random slot with probability ``m / (t + 1)``, so
    after any number of rows every ``m``-subset seen is equally likely. Memory: ``m`` rows.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> stream = (np.arange(i, i + 10)[:, None] for i in range(0, 100, 10))
    >>> sample = reservoir_sample(stream, 5, rng)
    >>> sample.shape, len(np.unique(sample))
    ((5, 1), 5)
    """
    reservoir, seen = None, 0
    for X in batches:
        if reservoir is None:
            reservoir = np.empty((m, X.shape[1]), dtype=X.dtype)
        fill = max(0, min(m - seen, X.shape[0]))
        reservoir[seen : seen + fill] = X[:fill]
        t = seen + np.arange(fill, X.shape[0])  # the rows' positions in the stream
        slots = rng.integers(0, t + 1)  # one draw per row, as the row-by-row algorithm
        for row in np.flatnonzero(slots < m):  # in order: a later row wins its slot
            reservoir[slots[row]] = X[fill + row]
        seen += X.shape[0]
    if reservoir is None or seen < m:
        raise ValueError(f"the stream had {seen} rows, fewer than m = {m}")
    return reservoir


def exact_reference(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 10 leading eigenpairs of the centred RBF kernel of ``X`` (``scipy.linalg.eigh``)."""
    import scipy.linalg
    from sklearn.metrics.pairwise import rbf_kernel

    n = X.shape[0]
    Kx = rbf_kernel(X, gamma=1 / D)
    means = Kx.mean(axis=0)
    Kx -= means[:, None]
    Kx -= means[None, :]
    Kx += means.mean()
    values, vectors = scipy.linalg.eigh(Kx, subset_by_index=(n - K, n - 1), overwrite_a=True,
                                        driver="evr")
    return values[::-1], vectors[:, ::-1]


def _accuracy(model: Any, X: np.ndarray, values: np.ndarray,
              vectors: np.ndarray) -> tuple[float, float, float]:
    """Eigenvalue error (eq. 67), similarity (eq. 66) and subspace agreement with the reference."""
    scores = np.asarray(model.transform(X), dtype=np.float64)
    V = scores / np.linalg.norm(scores, axis=0)
    error = float(np.mean(np.abs(model.eigenvalues_ / values - 1)))
    similarity = float(np.mean(np.abs(np.sum(V * vectors, axis=0))))
    subspace = float(np.linalg.norm(vectors.T @ V) ** 2 / K)
    return error, similarity, subspace


def _clusters(landmarks: np.ndarray, X: np.ndarray, labels: np.ndarray) -> int:
    """How many clusters the landmarks fall in (each landmark takes its nearest row's label)."""
    from sklearn.metrics import pairwise_distances_argmin

    return len(np.unique(labels[pairwise_distances_argmin(landmarks, X)]))


def landmark_runs(X: np.ndarray, batch: int, m: int,
                  seed: int) -> dict[str, tuple[Any, int]]:
    """The five landmark choices on the stream ``X`` (in its order): model and passes each."""
    import dkpca
    from dkpca.options import Nystrom

    def model(**params: Any) -> dkpca.KernelPCA:
        return dkpca.KernelPCA(K, kernel="rbf", gamma=1 / D,
                               solver=Nystrom(n_landmarks=m, **params), random_state=seed)

    def stream(estimator: dkpca.KernelPCA) -> dkpca.KernelPCA:
        for start in range(0, X.shape[0], batch):
            estimator.partial_fit(X[start : start + batch])
        return estimator

    rng = np.random.default_rng([seed, 1])
    reservoir = reservoir_sample((X[s : s + batch] for s in range(0, len(X), batch)), m, rng)
    return {
        "first batch, uniform": (stream(model()), 1),
        "all rows, uniform (fit)": (model().fit(X), 2),
        "first batch, k-means": (stream(model(sampling="kmeans")), 1),
        "reservoir over a first pass": (stream(model(landmarks=reservoir)), 2),
        "all rows, k-means (fit)": (model(sampling="kmeans").fit(X), 2),
    }


def part_b(n: int, batch: int, m: int, seeds: int) -> str:
    """Accuracy of each landmark choice, shuffled and by cluster; return the markdown table."""
    X, labels = (np.concatenate(parts) for parts in zip(
        *(Mixture.make().batch(i, rows) for i, rows in batch_sizes(n, batch)), strict=True))
    wait_for_quiet(0.2)
    start = time.perf_counter()
    values, vectors = exact_reference(X)
    print(f"reference: exact eigh of the {n:,} x {n:,} centred kernel in "
          f"{time.perf_counter() - start:.1f} s; λ = {np.round(values, 1)}",
          file=sys.stderr, flush=True)
    by_cluster = np.argsort(labels, kind="stable")
    orders = {"shuffled": np.arange(n), "by cluster": by_cluster}
    rows = []
    for order, index in orders.items():
        first = np.unique(labels[index[:batch]])
        print(f"{order}: the first batch holds clusters {first.tolist()} of {CENTRES}",
              file=sys.stderr, flush=True)
        results: dict[str, list[tuple[float, ...]]] = {}
        passes: dict[str, int] = {}
        for seed in range(seeds):
            for method, (model, n_passes) in landmark_runs(X[index], batch, m, seed).items():
                error, similarity, subspace = _accuracy(model, X, values, vectors)
                clusters = _clusters(model.landmarks_, X, labels)
                results.setdefault(method, []).append((error, similarity, subspace, clusters))
                passes[method] = n_passes
        for method, records in results.items():
            error, similarity, subspace, clusters = np.array(records).T
            rows.append([order, f"{len(first)} of {CENTRES}", method, passes[method],
                         f"{error.mean():.2e}", f"{error.max():.2e}",
                         f"{similarity.mean():.4f}", f"{subspace.mean():.4f}",
                         f"{subspace.min():.4f}", f"{clusters.mean():.1f}"])
            print(rows[-1], file=sys.stderr, flush=True)
    return markdown_table(
        ["order", "clusters in batch 1", "landmarks", "passes", "eigenvalue error (eq. 67)",
         "worst seed", "similarity (eq. 66)", "subspace", "worst seed", "clusters hit"], rows)


def main(argv: list[str] | None = None) -> int:
    """Run the parts asked for and print their markdown tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("a", "b", "both"), default="both")
    parser.add_argument("--n-samples", type=int, default=10_000_000, help="part a: rows")
    parser.add_argument("--batch", type=int, default=100_000, help="part a: rows per batch")
    parser.add_argument("--m", type=int, default=1000, help="part a: landmarks")
    parser.add_argument("--chunk", type=int, help="part a: give partial_fit dask batches")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--stream-n", type=int, default=10_000, help="part b: rows")
    parser.add_argument("--stream-batch", type=int, default=1000, help="part b: rows per batch")
    parser.add_argument("--stream-m", type=int, default=300, help="part b: landmarks")
    parser.add_argument("--seeds", type=int, default=5, help="part b: landmark draws")
    args = parser.parse_args(argv)
    print_environment(environment(), [sys.executable, *sys.argv])
    print(f"dkpca: {dkpca_source()}\n", flush=True)
    if args.part in ("a", "both"):
        start = time.perf_counter()
        table = part_a(args.n_samples, args.batch, args.m, args.chunk, args.timeout)
        print(f"### partial_fit against fit ({time.perf_counter() - start:.0f} s)\n\n{table}\n",
              flush=True)
    if args.part in ("b", "both"):
        start = time.perf_counter()
        table = part_b(args.stream_n, args.stream_batch, args.stream_m, args.seeds)
        print(f"### Landmarks on a stream ({time.perf_counter() - start:.0f} s)\n\n{table}\n",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
