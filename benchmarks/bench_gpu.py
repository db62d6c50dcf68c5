"""Kernel PCA on a CUDA GPU beside the same fit on every CPU core, and scikit-learn's arpack.

Issue 31. The data are a 10-centre Gaussian mixture in ``d`` dimensions
(``sklearn.datasets.make_blobs``, ``random_state=0``), standardised per feature; the fit is
``KernelPCA(10, solver="randomized")`` with the RBF kernel, ``gamma = 1/d``, ``random_state=0``
and the default tiles (float32 where ``tol`` allows: the default ``1e-6`` does). Each fit runs in
a fresh (spawned) process, which first fits once untimed on a tenth of the rows (imports, CUDA
context, CuPy's kernel compilation), then times the fit:

- ``gpu``: ``dask.config.set({"dkpca.device": "cuda"})`` on the threaded scheduler: the tiles
  are evaluated and kept on the GPU (streamed when they do not fit in its memory);
- ``cpu``: the threaded scheduler on all cores (dkpca's default);
- ``arpack``: scikit-learn's ``KernelPCA(eigen_solver="arpack")`` (sizes up to ``--sklearn-max``:
  it holds the whole ``n × n`` float64 kernel);
- ``gpu64`` and ``cpu64``: the ``gpu`` and ``cpu`` fits with ``solver=Randomized(tol=1e-10)``,
  which stores float64 tiles: the accuracy references of the issue.

Reported per fit: seconds, Krylov passes, the median pass (from the solver's log), whether the
tiles were cached or streamed, the eigenvalues' largest relative difference from the reference
fit of the same size (the first of ``cpu64``, ``gpu64``, ``cpu``, ``gpu`` that ran), the host's
peak RSS and
the GPU memory CuPy's pool held at the end (its peak: the pool does not shrink). The speed-ups
are ``cpu`` / ``gpu`` and ``arpack`` / ``gpu``. A GPU fit also measures the GPU's float32 GEMM
rate (the best of five ``8192 × 8192 × 8192`` products, CuPy's default: no TF32) and reports its
pass's bound: the flops of one pass (``n² (d + 2)`` for the distance GEMMs of the upper tiles
when they are streamed, plus ``2 n² b`` for their products with the ``n × b`` block, ``b = 32``)
at that rate. For the ``gpu`` fit, the model's scores of the
first 10,000 rows computed on the GPU and on the CPU are compared (largest difference relative
to the largest score).

``--solver nystrom`` fits ``KernelPCA(10, solver=Nystrom(n_landmarks=M))`` instead (``M`` from
``--landmarks``, 2,000 by default; uniform landmarks), whose one pass over the data evaluates
``k(x, L)`` on the GPU; ``arpack`` is skipped. ``--zarr PATH`` writes the standardised data
(float32 with ``--float32``) to a Zarr store there once, and every fit reads it from there
(``dask.array.from_zarr``, 100,000-row chunks): the fit time includes reading it. A second
table splits each Nyström fit: the seconds until the landmarks were chosen (sampling them reads
every chunk), the pass over the data (its own log line), the rest (``K_LL``, its inverse square
root, the small eigenproblem), and, measured after the fit, one plain threaded read of the store.

``--stream-probe`` instead times one streamed tile of the GPU's size (1 GiB float32, off the
diagonal) step by step: the whole tile as a pass handles it, the host's time to queue it, the
distance GEMM (and its parts), the fused ``exp`` and shift (and CuPy's own ``exp`` beside it),
the two products and a double-double sum, and distance-shaped GEMMs with the inner dimension
padded (``d + 2`` is what RBF uses).

``--tile-probe N`` instead times one cached pass on the GPU at ``N × d`` for several tile sizes
(what :data:`dkpca.solvers.randomized.GPU_TILE_BYTES` was chosen from): the whole
``KernelTiles.matmul`` (``V`` to the GPU, the product, the partial back and summed on the host),
the holder's product alone, and the float32 GEMMs of its tiles alone (no shift, no
double-double sums), each the second of two calls, timed with the GPU synchronised.

Usage::

    python benchmarks/bench_gpu.py                          # 20,000 and 100,000 x 64
    python benchmarks/bench_gpu.py --sizes 1000000 --only gpu --timeout 900
    python benchmarks/bench_gpu.py --tile-probe 100000
    python benchmarks/bench_gpu.py --solver nystrom --sizes 10000000 --float32 \
        --zarr benchmarks/results/blobs.zarr --only gpu cpu
"""

from __future__ import annotations

import argparse
import logging
import resource
import statistics
import sys
import time

import numpy as np
from _common import environment, markdown_table, print_environment, run_in_child

METHODS = ("gpu", "cpu", "arpack", "gpu64", "cpu64")
#: ``tol`` of the float64 fits (``gpu64``, ``cpu64``): float64 tiles, the accuracy reference.
REFERENCE_TOL = 1e-10
#: Width of the Krylov block for 10 components (``dkpca.solvers.randomized.block_width``).
BLOCK_WIDTH = 32


def _data(n: int, d: int) -> np.ndarray:
    from sklearn.datasets import make_blobs
    from sklearn.preprocessing import StandardScaler

    X, _ = make_blobs(n_samples=n, n_features=d, centers=10, random_state=0)
    return StandardScaler().fit_transform(X)


class _Log(logging.Handler):
    """Collects the randomized solver's pass times and whether it cached its tiles.

    For Nyström, it notes when the landmarks were chosen and the pass's own time.
    """

    def __init__(self) -> None:
        super().__init__()
        self.passes: list[float] = []
        self.mode = "?"
        self.landmarks_at = self.nystrom_pass = float("nan")

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.endswith("sampling"):  # "... landmarks by uniform sampling"
            self.landmarks_at = time.perf_counter()
        elif message.startswith("Nyström pass"):
            self.nystrom_pass = float(message.rsplit(" in ", 1)[1].split()[0])
        elif message.startswith("kernel pass"):
            self.passes.append(float(message.rsplit(":", 1)[1].split()[0]))
        elif message.startswith(("cached", "streaming")):
            self.mode = message.split()[0]


def _fit_once(method: str, X, solver: str, landmarks: int):
    if method == "arpack":
        from sklearn.decomposition import KernelPCA

        return KernelPCA(10, kernel="rbf", gamma=1.0 / X.shape[1], eigen_solver="arpack",
                         random_state=0).fit(X)
    import dask

    import dkpca
    from dkpca.options import Nystrom, Randomized

    device = {"dkpca.device": "cuda"} if method.startswith("gpu") else {}
    if solver == "nystrom":
        options = Nystrom(n_landmarks=landmarks)
    else:
        options = Randomized(tol=REFERENCE_TOL) if method.endswith("64") else Randomized()
    with dask.config.set({"scheduler": "threads", **device}):
        return dkpca.KernelPCA(10, solver=options, random_state=0).fit(X)


def _child(method: str, n: int, d: int, solver: str, landmarks: int, zarr: str | None,
           results) -> None:
    if zarr:
        import dask.array as da

        X = da.from_zarr(zarr)
    else:
        X = _data(n, d)
    log = _Log()
    for name in ("dkpca.solvers.randomized", "dkpca.tiles", "dkpca.solvers._landmarks",
                 "dkpca.solvers.nystrom"):
        logging.getLogger(name).addHandler(log)
        logging.getLogger(name).setLevel(logging.INFO)
    _fit_once(method, X[: max(2100, n // 10)], solver, landmarks)
    log.passes.clear()
    start = time.perf_counter()
    model = _fit_once(method, X, solver, landmarks)
    seconds = time.perf_counter() - start
    eigenvalues = model.eigenvalues_
    transform_diff = _transform_difference(model, X) if method == "gpu" else float("nan")
    pool = rate = float("nan")
    if method.startswith("gpu"):
        import cupy

        pool = cupy.get_default_memory_pool().total_bytes() / 2**30
        rate = _gpu_gemm_rate()
    landmarks_s = log.landmarks_at - start
    read_s = _read_seconds(zarr) if zarr else float("nan")
    results.put({"seconds": seconds, "passes": len(log.passes),
                 "landmarks_s": landmarks_s, "nystrom_pass_s": log.nystrom_pass,
                 "read_s": read_s,
                 "pass_s": statistics.median(log.passes) if log.passes else float("nan"),
                 "mode": log.mode if method != "arpack" else "dense",
                 "eigenvalues": np.asarray(eigenvalues).tolist(),
                 "transform_diff": transform_diff,
                 "host_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                 "gpu_gib": pool, "gemm_rate": rate})


def _read_seconds(zarr: str) -> float:
    """Seconds to read (and decompress) the whole store on the threaded scheduler, summed."""
    import dask.array as da

    start = time.perf_counter()
    da.from_zarr(zarr).sum(axis=0, dtype=np.float64).compute(scheduler="threads")
    return time.perf_counter() - start


def _gpu_gemm_rate() -> float:
    """Return the GPU's float32 GEMM rate in flop/s: the best of five 8192³ products."""
    import cupy

    a = cupy.asarray(np.random.default_rng(0).standard_normal((8192, 8192), dtype=np.float32))
    best = min(_gpu_seconds(lambda: a @ a) for _ in range(5))
    return 2 * 8192**3 / best


def _pass_bound(n: int, d: int, mode: str, rate: float) -> float:
    """Seconds of one pass's flops at ``rate``: the streamed tiles' GEMMs, then the products."""
    flops = 2.0 * n * n * BLOCK_WIDTH + (n * n * (d + 2.0) if mode == "streaming" else 0.0)
    return flops / rate


def _transform_difference(model, X) -> float:
    """Return how far the GPU's scores of 10,000 rows are from the CPU's (relative).

    One model, its kernel evaluated on each device; the largest difference over the largest
    score.
    """
    import dask

    rows = np.asarray(X[:10_000])
    with dask.config.set({"scheduler": "threads", "dkpca.device": "cuda"}):
        on_gpu = model.transform(rows)
    with dask.config.set({"scheduler": "threads", "dkpca.device": "cpu"}):
        on_cpu = model.transform(rows)
    return float(np.abs(on_gpu - on_cpu).max() / np.abs(on_cpu).max())


def _gpu_seconds(function) -> float:
    """Seconds of the second of two calls, the GPU synchronised around it."""
    import cupy

    synchronize = cupy.cuda.Device().synchronize
    function()
    synchronize()
    start = time.perf_counter()
    function()
    synchronize()
    return time.perf_counter() - start


def _probe_tiles(X: np.ndarray, V: np.ndarray, tile_bytes: int) -> list:
    import cupy
    import dask

    from dkpca._tile_holders import state_product
    from dkpca.kernels import RBF
    from dkpca.tiles import KernelTiles

    with dask.config.set({"dkpca.device": "cuda", "scheduler": "threads"}):
        tiles = KernelTiles(RBF(gamma=1.0 / X.shape[1]), X, block_bytes=tile_bytes,
                            dtype=np.dtype(np.float32))
        state = tiles.states[0]
        V_gpu = cupy.asarray(V)

        def gemms() -> None:
            for (i, j), tile in zip(state.pairs, state.tiles, strict=True):
                tile.values @ V_gpu[slice(*state.bounds[j])].astype(np.float32)
                if i != j:
                    tile.values.T @ V_gpu[slice(*state.bounds[i])].astype(np.float32)

        return [f"{tile_bytes >> 20} MiB", tiles.n_tiles,
                f"{_gpu_seconds(lambda: tiles.matmul(V)):.3f}",
                f"{_gpu_seconds(lambda: state_product(state, V, 1)):.3f}",
                f"{_gpu_seconds(gemms):.3f}"]


def _tile_probe(n: int, d: int) -> None:
    import cupy

    X = _data(n, d)
    V = np.random.default_rng(0).standard_normal((n, 32))
    rows = []
    for tile_bytes in (2**26, 2**28, 2**30):
        rows.append(_probe_tiles(X, V, tile_bytes))
        cupy.get_default_memory_pool().free_all_blocks()
    print(f"\nOne cached pass on the GPU, RBF, {n} x {d}, float32 tiles, V {n} x 32\n")
    print(markdown_table(["tile", "tiles", "matmul (s)", "holder's product (s)",
                          "GEMMs alone (s)"], rows))


def _stream_probe(d: int, repeats: int = 5) -> None:
    """Time one streamed GPU tile (``GPU_TILE_BYTES``, float32) step by step."""
    import time

    import cupy

    from dkpca._fused import exp_minus_in_place
    from dkpca._tile_holders import two_sum_into
    from dkpca._tile_values import StoredTile, _moved_blocks
    from dkpca.kernels import RBF
    from dkpca.solvers.randomized import GPU_TILE_BYTES

    m = int(np.sqrt(GPU_TILE_BYTES // 4))
    X = cupy.asarray(_data(2 * m, d))
    Xi, Xj = X[:m], X[m:]
    kernel, f32 = RBF(gamma=1.0 / d), np.dtype(np.float32)
    V = cupy.asarray(np.random.default_rng(0).standard_normal((2 * m, 32)))
    high, low = cupy.zeros((2 * m, 32)), cupy.zeros((2 * m, 32))

    def tile() -> None:  # what state_product does for one off-diagonal streamed tile
        t = StoredTile.evaluate(kernel, Xi, Xj, f32, False, statistics=False)
        two_sum_into(high[:m], low[:m], t.product(V[m:]))
        two_sum_into(high[m:], low[m:], t.product(V[:m], transposed=True))

    def each(function) -> float:
        return _gpu_seconds(lambda: [function() for _ in range(repeats)]) / repeats

    synchronize = cupy.cuda.Device().synchronize
    tile()
    synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        tile()
    queued = (time.perf_counter() - start) / repeats  # the host's time to queue a tile
    synchronize()
    moved = _moved_blocks(kernel, Xi, Xj, f32)
    Z = kernel.exponent(*moved)
    stored = StoredTile.evaluate(kernel, Xi, Xj, f32, False, statistics=False)
    V32 = V[m:].astype(np.float32)
    rows = [["whole tile (evaluate, 2 products, 2 double-double sums)", each(tile)],
            ["  host time to queue it (no wait)", queued],
            ["exponent (moved blocks, norms, distance GEMM)", each(
                lambda: kernel.exponent(*_moved_blocks(kernel, Xi, Xj, f32)))],
            ["  moved blocks alone", each(lambda: _moved_blocks(kernel, Xi, Xj, f32))],
            ["    their centre (a float64 sum down the columns)", each(
                lambda: cupy.sum(Xi, axis=0, dtype=np.float64))],
            ["    the same centre as a product with a row of ones", each(
                lambda: cupy.ones((1, m)) @ Xi)],
            ["  distance GEMM on the moved blocks (norms, operands, GEMM)", each(
                lambda: kernel.exponent(*moved))],
            ["exp and shift, fused (one pass)", each(lambda: exp_minus_in_place(Z, False, 0.0))],
            ["  CuPy's elementwise exp, for comparison", each(lambda: cupy.exp(Z, out=Z))],
            ["product K V (float64 out, shift term)", each(lambda: stored.product(V[m:]))],
            ["product Kᵀ V", each(lambda: stored.product(V[:m], transposed=True))],
            ["GEMM alone K V (float32, b = 32)", each(lambda: stored.values @ V32)],
            ["double-double sum of one product", each(
                lambda: two_sum_into(high[:m], low[:m], V[m:]))]]
    for k in (d + 2, d + 4, d + 8, d + 16):
        A = cupy.random.standard_normal((m, k), dtype=np.float32)
        B = cupy.random.standard_normal((m, k), dtype=np.float32)
        rows.append([f"distance-shaped GEMM {m} x {k} x {m}", each(lambda A=A, B=B: A @ B.T)])
    print(f"\nOne streamed tile on the GPU, {m} x {m} float32, RBF, d = {d}, V width 32 "
          f"(mean of {repeats})\n")
    print(markdown_table(["step", "ms"], [[name, f"{1e3 * sec:.3f}"] for name, sec in rows]))


def _write_zarr(path: str, n: int, d: int, float32: bool) -> None:
    import os

    import dask.array as da

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

    X = _data(n, d).astype(np.float32 if float32 else np.float64)
    da.from_array(X, chunks=(100_000, d)).to_zarr(path, overwrite=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--only", nargs="+", choices=METHODS, default=["gpu", "cpu", "arpack"])
    parser.add_argument("--sklearn-max", type=int, default=20_000,
                        help="largest n given to scikit-learn (its kernel is n x n float64)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per fit")
    parser.add_argument("--tile-probe", type=int, metavar="N",
                        help="time one cached GPU pass at N rows for several tile sizes instead")
    parser.add_argument("--stream-probe", action="store_true",
                        help="time one streamed GPU tile step by step instead")
    parser.add_argument("--solver", choices=("randomized", "nystrom"), default="randomized")
    parser.add_argument("--landmarks", type=int, default=2000, help="Nystrom's n_landmarks")
    parser.add_argument("--float32", action="store_true", help="float32 data (with --zarr)")
    parser.add_argument("--zarr", default=None,
                        help="write the data to this Zarr store once and fit from it")
    args = parser.parse_args()
    print_environment(environment(), sys.argv)
    if args.tile_probe:
        _tile_probe(args.tile_probe, args.d)
        return
    if args.stream_probe:
        _stream_probe(args.d)
        return
    rows = []
    for n in args.sizes:
        if args.zarr:
            _write_zarr(args.zarr, n, args.d, args.float32)
        runs = {}
        for method in args.only:
            if method == "arpack" and (n > args.sklearn_max or args.solver != "randomized"):
                continue
            runs[method] = run_in_child(
                _child, (method, n, args.d, args.solver, args.landmarks, args.zarr), args.timeout)
            print(f"{n} {method}: {runs[method]}", flush=True)
        done = {m: r for m, r in runs.items() if r["status"] == "ok"}
        reference = next((done[m] for m in ("cpu64", "gpu64", "cpu", "gpu") if m in done), None)
        for method, r in runs.items():
            if r["status"] != "ok":
                rows.append([n, method, r["status"], *[""] * 10])
                continue
            error = max(abs(a - b) / abs(b) for a, b in
                        zip(r["eigenvalues"], reference["eigenvalues"], strict=True))
            speedup = (f"{r['seconds'] / done['gpu']['seconds']:.1f}x"
                       if "gpu" in done and method != "gpu" else "")
            bound = (_pass_bound(n, args.d, r["mode"], r["gemm_rate"])
                     if method.startswith("gpu") and args.solver == "randomized" else None)
            rows.append([n, method, f"{r['seconds']:.2f}", r["passes"] or "",
                         f"{r['pass_s']:.3f}" if r["passes"] else "", r["mode"],
                         f"{error:.1e}",
                         f"{r['transform_diff']:.1e}" if method == "gpu" else "",
                         f"{r['host_gib']:.1f}",
                         f"{r['gpu_gib']:.1f}" if method.startswith("gpu") else "",
                         f"{r['gemm_rate'] / 1e12:.1f}" if bound else "",
                         f"{r['pass_s'] / bound:.1f}" if bound and r["passes"] else "",
                         speedup])
    if args.solver == "nystrom":
        _print_nystrom_phases(runs)
    solver = (f"nystrom, {args.landmarks} landmarks" if args.solver == "nystrom"
              else "randomized")
    source = f", from Zarr ({'float32' if args.float32 else 'float64'})" if args.zarr else ""
    print(f"\nKernelPCA(10, solver={solver}), RBF, n x {args.d} Gaussian mixture{source}\n")
    print(markdown_table(["n", "method", "fit (s)", "passes", "pass (s)", "tiles",
                          "eigenvalue diff", "transform gpu vs cpu", "host peak GiB",
                          "GPU pool GiB", "GEMM TFLOP/s", "pass / bound",
                          "time / gpu time"], rows))


def _print_nystrom_phases(runs: dict) -> None:
    """Where each Nyström fit of the last size spent its time, beside a plain read of X."""
    rows = [[method, f"{r['seconds']:.2f}", f"{r['landmarks_s']:.2f}",
             f"{r['nystrom_pass_s']:.2f}",
             f"{r['seconds'] - r['landmarks_s'] - r['nystrom_pass_s']:.2f}",
             f"{r['read_s']:.2f}"]
            for method, r in runs.items() if r["status"] == "ok"]
    print("\nNyström phases (s): landmarks chosen (a read of X), the pass, the rest; and a "
          "plain read of the store\n")
    print(markdown_table(["method", "fit", "landmarks", "pass", "rest", "read alone"], rows))


if __name__ == "__main__":
    main()
