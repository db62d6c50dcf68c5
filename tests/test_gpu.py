"""Kernel PCA on a CUDA GPU (``dkpca.device = "cuda"``) against the same fit on the CPU.

Every test runs twice: on ``tests/_cupy_standin.py`` (numpy behind CuPy's strictness: no
implicit conversion to numpy, no numpy operands; it runs everywhere, CI included, and catches a
numpy-only call on the device path), and on real CuPy, marked ``gpu`` and skipped where CuPy or
a GPU is missing (run them with ``pytest -m gpu tests/test_gpu.py``). The GPU path is the CPU's
code on device arrays, so its results must equal the CPU's to the tiles' precision.
"""

from __future__ import annotations

import sys

import _cupy_standin
import dask
import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sklearn.preprocessing import StandardScaler

from dkpca import KernelPCA
from dkpca.options import Nystrom, Randomized, Sketch


@pytest.fixture(scope="module")
def blobs() -> np.ndarray:
    X, _ = make_blobs(n_samples=3000, n_features=16, centers=10, random_state=0)
    return StandardScaler().fit_transform(X)


def _fit(X, device: str, *, cache_dtype: str, **params) -> KernelPCA:
    tol = 1e-6 if cache_dtype == "float32" else 1e-8  # float32 tiles: 1e-6 at best
    with dask.config.set({"dkpca.device": device, "scheduler": "threads"}):
        return KernelPCA(8, solver=Randomized(tol=tol, cache_dtype=cache_dtype), random_state=0,
                         **params).fit(X)


def _record_copies_to_gpu(cupy, monkeypatch) -> list[tuple[int, ...]]:
    """The shapes of the arrays copied to the device from now on (``cupy.asarray`` calls)."""
    shapes: list[tuple[int, ...]] = []
    asarray = cupy.asarray
    monkeypatch.setattr(cupy, "asarray", lambda a, *args, **kwargs:
                        shapes.append(np.shape(a)) or asarray(a, *args, **kwargs))
    return shapes


def _record_copies_to_host(cupy, monkeypatch) -> list[tuple[int, ...]]:
    """The shapes of the device arrays copied to the host from now on (``ndarray.get``)."""
    shapes: list[tuple[int, ...]] = []
    module = _cupy_standin if cupy is _cupy_standin else cupy
    get = module.ndarray.get
    monkeypatch.setattr(module.ndarray, "get",
                        lambda self, *a, **k: shapes.append(self.shape) or get(self, *a, **k))
    return shapes


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_device_crossproduct_is_symmetric_and_equals_the_gemm(cupy, dtype):
    # cuBLAS syrk fills one triangle: the other must be mirrored, not left at zero.
    A = np.random.default_rng(0).normal(size=(300, 40)).astype(dtype)
    from dkpca.linalg import crossproduct

    G = crossproduct(cupy.asarray(A)).get()
    assert G.dtype == dtype
    np.testing.assert_array_equal(G, G.T)
    np.testing.assert_allclose(G, A.T.astype(np.float64) @ A, rtol=1e-5 if dtype == np.float32
                               else 1e-12, atol=1e-3 if dtype == np.float32 else 1e-10)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_device_column_sums_equal_the_float64_sums(cupy, dtype):
    # On the GPU the sums are a product with ones (CuPy's row-wise reduction is slow).
    from dkpca.linalg import column_sums

    A = np.random.default_rng(0).normal(size=(5000, 30)).astype(dtype)
    got = column_sums(cupy.asarray(A))
    assert got.dtype == np.float64
    np.testing.assert_allclose(got.get(), A.astype(np.float64).sum(axis=0),
                               atol=1e-4 if dtype == np.float32 else 1e-10)


def _assert_same_fit(got: KernelPCA, want: KernelPCA, rtol: float) -> None:
    np.testing.assert_allclose(got.eigenvalues_, want.eigenvalues_, rtol=rtol)
    got_vectors, want_vectors = np.asarray(got.eigenvectors_), np.asarray(want.eigenvectors_)
    signs = np.sign(np.sum(got_vectors * want_vectors, axis=0))
    np.testing.assert_allclose(got_vectors * signs, want_vectors,
                               atol=1e3 * rtol * np.abs(want_vectors).max())


@pytest.mark.parametrize(("cache_dtype", "rtol"), [("float32", 1e-6), ("float64", 1e-10)])
@pytest.mark.parametrize("cached", [True, False])
def test_the_gpu_fit_equals_the_cpu_fit(cupy, blobs, cache_dtype, rtol, cached):
    memory = {} if cached else {"max_memory": 1}  # streamed: tiles evaluated every pass
    want = _fit(blobs, "cpu", cache_dtype=cache_dtype, **memory)
    got = _fit(blobs, "cuda", cache_dtype=cache_dtype, **memory)
    _assert_same_fit(got, want, rtol)
    np.testing.assert_allclose(got.transform(blobs[:50]), want.transform(blobs[:50]) *
                               np.sign(np.sum(got.eigenvectors_ * want.eigenvectors_, axis=0)),
                               rtol=1e3 * rtol, atol=1e3 * rtol)


@pytest.mark.parametrize("kernel", ["poly", "sigmoid", "linear"])
def test_other_kernels_on_the_gpu(cupy, blobs, kernel):
    params = {"kernel": kernel, "cache_dtype": "float64"}
    if kernel == "sigmoid":
        params["gamma"] = 0.01
    _assert_same_fit(_fit(blobs, "cuda", **params), _fit(blobs, "cpu", **params), 1e-9)


def test_a_sum_of_kernels_on_the_gpu(cupy, blobs):
    from dkpca.kernels import RBF, Linear

    params = {"kernel": RBF(gamma=0.05) + Linear(), "cache_dtype": "float64"}
    _assert_same_fit(_fit(blobs, "cuda", **params), _fit(blobs, "cpu", **params), 1e-9)


def test_a_worker_per_gpu_gives_the_threaded_result(cupy, blobs):
    from distributed import Client, LocalCluster

    want = _fit(blobs, "cpu", cache_dtype="float64")
    # the stand-in lives in this process only: its workers run in this process too
    processes = cupy is not _cupy_standin
    with (LocalCluster(n_workers=1, threads_per_worker=2, processes=processes,
                       dashboard_address=":0") as cluster, Client(cluster),
          dask.config.set({"dkpca.device": "cuda"})):
        got = KernelPCA(8, solver=Randomized(tol=1e-8, cache_dtype="float64"),
                        random_state=0).fit(blobs)
    _assert_same_fit(got, want, 1e-10)


def test_cupy_input_fits_on_the_gpu_and_transforms_to_cupy(cupy, blobs):
    want = _fit(blobs, "cpu", cache_dtype="float64")
    with dask.config.set(scheduler="threads"):
        model = KernelPCA(8, solver=Randomized(tol=1e-8, cache_dtype="float64"),
                          random_state=0).fit(cupy.asarray(blobs))
        scores = model.transform(cupy.asarray(blobs[:20]))
    _assert_same_fit(model, want, 1e-10)
    assert isinstance(model.eigenvectors_, np.ndarray)  # the model is kept on the host
    assert isinstance(scores, cupy.ndarray)
    np.testing.assert_allclose(np.abs(scores.get()), np.abs(want.transform(blobs[:20])),
                               atol=1e-8)


def test_a_model_fitted_on_the_gpu_saves_and_loads_as_any_other(cupy, blobs, tmp_path):
    from dkpca import load, save

    model = _fit(blobs, "cuda", cache_dtype="float64")
    save(model, tmp_path / "model.zarr")
    loaded = load(tmp_path / "model.zarr")
    np.testing.assert_array_equal(loaded.eigenvalues_, model.eigenvalues_)
    np.testing.assert_allclose(loaded.transform(blobs[:20]), model.transform(blobs[:20]))


@pytest.mark.parametrize("cached", [True, False])
def test_the_krylov_basis_stays_on_the_gpu(cupy, blobs, monkeypatch, cached):
    # Per pass only scalars come back to the host (the residual, the scale); the n-row arrays
    # that do are the kernel's row means and the final eigenvectors, whatever the passes.
    copies = _record_copies_to_host(cupy, monkeypatch)
    memory = {} if cached else {"max_memory": 1}
    model = _fit(blobs, "cuda", cache_dtype="float64", **memory)
    tall = [shape for shape in copies if shape and shape[0] == len(blobs)]  # not scalars
    assert model.n_iter_ >= 4
    assert len(tall) <= 3, tall
    _assert_same_fit(model, _fit(blobs, "cpu", cache_dtype="float64", **memory), 1e-10)


@pytest.mark.parametrize("solver", ["exact", "randomized", "nystrom"])
def test_gpu_and_cpu_transforms_of_one_model_agree(cupy, blobs, monkeypatch, solver):
    # One model (fitted on the CPU), projected with its kernel evaluated on the GPU and on the
    # CPU; the GPU path must run (its blocks copied to the device), and agree to 1e-10.
    model = KernelPCA(6, solver=solver, random_state=0).fit(blobs[:1500])
    X_new = blobs[1500:2100] + 0.05
    want = model.transform(X_new)
    to_gpu = _record_copies_to_gpu(cupy, monkeypatch)
    with dask.config.set({"dkpca.device": "cuda", "scheduler": "threads"}):
        got = model.transform(X_new)
    assert isinstance(got, np.ndarray)
    assert (len(X_new), blobs.shape[1]) in to_gpu
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    float32 = model.transform(X_new.astype(np.float32))
    with dask.config.set({"dkpca.device": "cuda", "scheduler": "threads"}):
        got32 = model.transform(X_new.astype(np.float32))
    np.testing.assert_allclose(got32, float32, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("dtype", "rtol"), [("float64", 1e-10), ("float32", 1e-5)])
def test_the_nystrom_pass_runs_on_the_gpu(cupy, blobs, monkeypatch, dtype, rtol):
    # The pass over the data (k(x, L) in strips, its sums and scatter) runs on the GPU, each
    # task's rows copied there; the tasks' sums are added there and come back once; the model
    # equals the CPU fit.
    X = da.from_array(blobs.astype(dtype), chunks=len(blobs) // 4)
    m = 300
    kwargs = {"solver": Nystrom(n_landmarks=m), "random_state": 0}
    want = KernelPCA(6, **kwargs).fit(X)
    to_gpu = _record_copies_to_gpu(cupy, monkeypatch)
    to_host = _record_copies_to_host(cupy, monkeypatch)
    with dask.config.set({"dkpca.device": "cuda", "scheduler": "threads"}):
        got = KernelPCA(6, **kwargs).fit(X)
    assert sum(shape[0] for shape in to_gpu if shape[1:] == (X.shape[1],)) >= len(X)
    assert to_host.count((m + 2, m)) == 1, to_host
    _assert_same_fit(got, want, rtol)


def test_a_gpu_nystrom_strip_is_sized_for_the_gpu_not_the_host(cupy, blobs, monkeypatch):
    # The host's block size budgets host memory; on the GPU small strips waste it on per-strip
    # steps, so the strip is the GPU's (at most GPU_FLOAT32_STRIP_ROWS rows in float32, for
    # accuracy) whatever block_size says.
    from dkpca.solvers import nystrom

    strips: dict[str, list[int]] = {"cpu": [], "cuda": []}
    moments = nystrom._kernel_moments

    def recording(block, landmarks, kernel, strip, shift, device="cpu"):
        strips[device].append(strip)
        return moments(block, landmarks, kernel, strip, shift, device)

    monkeypatch.setattr(nystrom, "_kernel_moments", recording)
    m, X = 100, da.from_array(blobs.astype(np.float32), chunks=1000)
    for device in ("cpu", "cuda"):
        with dask.config.set({"dkpca.device": device, "scheduler": "threads"}):
            KernelPCA(4, solver=Nystrom(n_landmarks=m), block_size="1MiB",
                      random_state=0).fit(X)
    assert set(strips["cpu"]) == {2**20 // 4 // (m * 4)}
    assert set(strips["cuda"]) == {nystrom.gpu_strip_rows(m, np.dtype(np.float32))}
    assert nystrom.gpu_strip_rows(m, np.dtype(np.float32)) == nystrom.GPU_FLOAT32_STRIP_ROWS


@pytest.mark.parametrize("method", ["mdd", "kpa"])
def test_model_selection_solves_its_spectra_on_the_gpu(cupy, monkeypatch, method):
    # Every draw's grid of centred kernels (and the data's) is formed and solved on the GPU in
    # batches; the choice and the spectra equal the CPU's.
    from dkpca.datasets import make_two_rings
    from dkpca.selection import select_model

    X = make_two_rings(300, random_state=0)[0]
    kwargs = {"n_draws": 6, "n_train": 120, "random_state": 0}
    with dask.config.set(scheduler="threads"):
        want = select_model(X, method, **kwargs)
    solved = []
    eigvalsh = cupy.linalg.eigvalsh
    monkeypatch.setattr(cupy.linalg, "eigvalsh", lambda a, *args, **kw:
                        solved.append(a.shape) or eigvalsh(a, *args, **kw))
    with dask.config.set({"dkpca.device": "cuda", "scheduler": "threads"}):
        got = select_model(X, method, **kwargs)
    grid = want.table.sizes["sigma2"]
    assert sum(shape[0] for shape in solved) == grid * (kwargs["n_draws"] + 1)
    assert {shape[1:] for shape in solved} == {(120, 120)}
    assert (got.sigma2, got.n_components) == (want.sigma2, want.n_components)
    for spectra in ("data_eigenvalues", "noise_eigenvalues"):
        np.testing.assert_allclose(got.table[spectra], want.table[spectra], rtol=1e-9,
                                   atol=1e-12)


def test_fixed_point_preimages_iterate_on_the_gpu(cupy, blobs, monkeypatch):
    # Denoising by the fixed-point iteration: each block's weights and the basis points go to
    # the GPU, and the pre-images equal the CPU's.
    model = KernelPCA(8, kernel="rbf", sigma2=4.0, solver="exact").fit(blobs[:600])
    noisy = blobs[600:900] + 0.1 * np.random.default_rng(0).normal(size=(300, 16))
    want = model.denoise(noisy)
    to_gpu = _record_copies_to_gpu(cupy, monkeypatch)
    with dask.config.set({"dkpca.device": "cuda", "scheduler": "threads"}):
        got = model.denoise(noisy)
    assert (600, 16) in to_gpu  # the basis points
    assert sum(shape[0] for shape in to_gpu if shape[1:] == (600,)) == len(noisy)  # weights
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("method", ["covariance", "nystrom"])
def test_the_sketch_solver_multiplies_its_kernel_on_the_gpu(cupy, blobs, monkeypatch, method):
    # approx-KPCA's pass (K times the sketch, tiles evaluated and dropped) runs on the GPU's
    # holder; the model equals the CPU's.
    kwargs = {"solver": Sketch(dim=60, method=method), "random_state": 0}
    want = KernelPCA(6, **kwargs).fit(blobs[:1500])
    to_gpu = _record_copies_to_gpu(cupy, monkeypatch)
    with dask.config.set({"dkpca.device": "cuda", "scheduler": "threads"}):
        got = KernelPCA(6, **kwargs).fit(blobs[:1500])
    assert (1500, 16) in to_gpu or sum(s[0] for s in to_gpu if s[1:] == (16,)) >= 1500
    _assert_same_fit(got, want, 1e-9)


def test_linear_pca_takes_cupy_input(cupy, blobs):
    # Fitted on the host (the same model as from numpy); projections of CuPy data are computed
    # on the GPU and returned as CuPy, as KernelPCA's are.
    from dkpca import PCA

    want = PCA(5, whiten=True).fit(blobs)
    got = PCA(5, whiten=True).fit(cupy.asarray(blobs))
    np.testing.assert_allclose(got.components_, want.components_, rtol=1e-12, atol=1e-14)
    scores = got.transform(cupy.asarray(blobs[:40]))
    assert isinstance(scores, cupy.ndarray)
    np.testing.assert_allclose(scores.get(), want.transform(blobs[:40]), rtol=1e-10,
                               atol=1e-12)
    back = got.inverse_transform(scores)
    assert isinstance(back, cupy.ndarray)
    np.testing.assert_allclose(back.get(), want.inverse_transform(want.transform(blobs[:40])),
                               rtol=1e-10, atol=1e-12)
    likelihood = got.score_samples(cupy.asarray(blobs[:40]))
    assert isinstance(likelihood, cupy.ndarray)
    np.testing.assert_allclose(likelihood.get(), want.score_samples(blobs[:40]), rtol=1e-10)
    assert got.score(cupy.asarray(blobs)) == pytest.approx(want.score(blobs), rel=1e-10)
    batches = PCA(5)
    for half in np.array_split(blobs, 2):
        batches.partial_fit(cupy.asarray(half))
    np.testing.assert_allclose(batches.explained_variance_, PCA(5).fit(blobs).explained_variance_,
                               rtol=1e-10)


def test_a_streamed_pass_reads_nothing_back_from_the_gpu(monkeypatch):
    # Every host read of a device value (float(), bool(), int(), .item(), .get()) stops the GPU
    # until the host has queued the next work. A streamed pass of six tiles reads back once,
    # after its last tile: each tile's form of exp (it read two values a tile when the form and
    # the shift were read on the host). Later passes read nothing, and run the one-function
    # kernel of each tile's known form.
    monkeypatch.setitem(sys.modules, "cupy", _cupy_standin)
    from dkpca._device import to_device
    from dkpca.kernels import RBF
    from dkpca.tiles import KernelTiles

    X = np.random.default_rng(0).normal(size=(600, 5))
    reads: list[str] = []
    for name in ("__float__", "__bool__", "__int__", "item", "get"):
        method = getattr(_cupy_standin.ndarray, name)
        monkeypatch.setattr(_cupy_standin.ndarray, name,
                            lambda self, *a, _method=method, _name=name, **k:
                            reads.append(_name) or _method(self, *a, **k))
    kernels: list[str] = []
    run = _cupy_standin.RawKernel.__call__
    monkeypatch.setattr(_cupy_standin.RawKernel, "__call__",
                        lambda self, *args: kernels.append(self.name) or run(self, *args))
    V = np.ones((600, 3))
    expected = RBF(gamma=0.2).pairwise(X) @ V
    with dask.config.set({"dkpca.device": "cuda", "scheduler": "threads"}):
        tiles = KernelTiles(RBF(gamma=0.2), X, block_bytes=200 * 200 * 4,
                            dtype=np.dtype(np.float32), cached=False)
        assert tiles.n_tiles == 6
        for expected_reads, expected_kernels in ((["get"], {"dkpca_exp_minus"}),
                                                 ([], {"dkpca_exp_minus_exp"})):
            reads.clear()
            kernels.clear()
            product = tiles.matmul(to_device(V, "cuda"))
            assert reads == expected_reads and set(kernels) == expected_kernels
            np.testing.assert_allclose(product.get(), expected, rtol=1e-5)
