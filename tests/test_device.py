"""The ``dkpca.device`` setting without a GPU: its checks, errors and memory budget."""

from __future__ import annotations

import importlib.util
import itertools
import threading
import time

import dask
import numpy as np
import pytest

from dkpca import KernelPCA
from dkpca._device import (
    DeviceUnavailableError,
    array_module,
    configured_device,
    first_call_alone,
    gpu_alone,
    to_device,
)
from dkpca._tile_holders import HolderState, build_state, holders
from dkpca.kernels import RBF
from dkpca.solvers import randomized

HAS_CUPY = importlib.util.find_spec("cupy") is not None


def test_an_unknown_device_is_refused_in_one_line():
    with dask.config.set({"dkpca.device": "tpu"}), pytest.raises(ValueError) as err:
        configured_device()
    assert str(err.value) == "dkpca.device must be one of ('cpu', 'cuda'), got 'tpu'"


@pytest.mark.skipif(HAS_CUPY, reason="CuPy is installed: the error cannot be shown")
def test_cuda_without_cupy_fails_in_one_line_before_any_work():
    X = np.random.default_rng(0).normal(size=(300, 3))
    with dask.config.set({"dkpca.device": "cuda"}), pytest.raises(DeviceUnavailableError) as err:
        KernelPCA(2, solver="randomized").fit(X)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("device 'cuda' is not available: CuPy is not installed")
    assert "pip install 'dkpca[gpu]'" in message


def test_the_cpu_device_changes_nothing():
    X = np.random.default_rng(0).normal(size=(300, 3))
    default = KernelPCA(2, solver="randomized", random_state=0).fit(X)
    with dask.config.set({"dkpca.device": "cpu"}):
        cpu = KernelPCA(2, solver="randomized", random_state=0).fit(X)
    np.testing.assert_array_equal(cpu.eigenvalues_, default.eigenvalues_)
    assert [h.device for h in holders()] == ["cpu"]
    assert array_module(X) is np and to_device(X, "cpu") is X


def test_sparse_data_is_refused_on_the_gpu_in_one_line():
    import scipy.sparse

    with pytest.raises(ValueError, match="^device 'cuda' takes dense data; sparse input"):
        to_device(scipy.sparse.eye(3, format="csr"), "cuda")


def test_gpu_limits_take_large_tiles_and_the_gpus_memory(monkeypatch):
    assert randomized.device_limits(2**20, 2**30, 10**6) == (2**20, 2**30)  # cpu: unchanged
    monkeypatch.setattr(randomized, "device_memory", lambda: 10 * 2**30)
    with dask.config.set({"dkpca.device": "cuda"}):
        tile, cache = randomized.device_limits(2**20, None, 2**30)
        assert tile == randomized.GPU_TILE_BYTES
        # 80 % of the free GPU memory, less the data rows and two tiles of work space
        assert cache == int(0.8 * 10 * 2**30) - 2**30 - 2 * randomized.GPU_TILE_BYTES
        assert randomized.device_limits(2**20, 2**40, 2**30)[1] == cache  # the GPU's is less
        assert randomized.device_limits(2**20, 5, 2**30)[1] == 5  # the caller's cap is less
        monkeypatch.setattr(randomized, "device_memory", lambda: 2**20)
        assert randomized.device_limits(2**20, None, 2**30)[1] == 0  # nothing fits: streamed


def test_a_gpu_holders_state_is_not_counted_as_worker_memory():
    from dask.sizeof import sizeof

    X = np.random.default_rng(0).normal(size=(40, 2))
    state = build_state(RBF(gamma=0.5), np.dtype(np.float64), [(0, 20), (20, 40)],
                        [(0, 0), (0, 1), (1, 1)], [0, 1], X[:20], X[20:], cached=True,
                        threads=2)
    assert sizeof(state) == state.nbytes > 0 and state.threads is None
    gpu = HolderState(state.kernel, state.dtype, state.bounds, state.pairs, {}, state.tiles,
                      "cuda")
    assert sizeof(gpu) == 0 and gpu.threads == 1  # GPU memory is not the worker's RAM


@pytest.mark.parametrize("solver", ["randomized", "sketch"])
@pytest.mark.parametrize("kernel", ["laplacian", "chi2", "cosine"])
def test_a_kernel_without_gpu_code_is_refused_in_one_line(kernel, solver):
    X = np.abs(np.random.default_rng(0).normal(size=(300, 3)))
    with dask.config.set({"dkpca.device": "cuda"}), pytest.raises(ValueError) as err:
        KernelPCA(2, kernel=kernel, solver=solver).fit(X)
    assert str(err.value).startswith(f"KernelPCA: the {kernel} kernel has no GPU code")
    assert "\n" not in str(err.value)


def test_the_kernels_that_run_on_the_gpu():
    from dkpca.kernels import RBF, Laplacian, Linear, Polynomial, Sigmoid

    assert all(k.runs_on_gpu for k in (RBF(), Polynomial(), Sigmoid(), Linear(), RBF() + Linear()))
    assert not Laplacian().runs_on_gpu and not (RBF() + Laplacian()).runs_on_gpu


@pytest.mark.skipif(HAS_CUPY, reason="CuPy is installed: the error cannot be shown")
def test_the_command_line_refuses_cuda_without_cupy_in_one_line(tmp_path, capsys):
    from dkpca.cli import main

    status = main(["demo", "--device", "cuda", "--n-samples", "300", "--quiet", "--out",
                   str(tmp_path / "demo")])
    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith("dkpca: error: device 'cuda' is not available: CuPy is not installed")
    assert err.count("\n") == 1 and not (tmp_path / "demo").exists()  # nothing was started


def test_the_command_line_gives_one_worker_per_gpu_on_the_embedded_cluster():
    from dkpca.cli._arguments import build_parser
    from dkpca.cli._shared import client_options

    def workers(*argv):
        return client_options(build_parser().parse_args(["demo", *argv]))["n_workers"]

    assert workers("--device", "cuda") == 1
    assert workers("--device", "cuda", "--workers", "2") == 2  # the user's choice stands
    assert workers() is None  # cpu: the cluster's default


def _intervals_of_calls(key, device: str, calls: int = 6,
                        held=first_call_alone) -> list[tuple[float, float]]:
    """Start ``calls`` threads at once, each holding ``held(key, device)`` for 0.2 s."""
    intervals: list[tuple[float, float]] = []
    start = threading.Barrier(calls)

    def call() -> None:
        start.wait()
        with held(key, device):
            entered = time.perf_counter()
            time.sleep(0.2)
            intervals.append((entered, time.perf_counter()))

    threads = [threading.Thread(target=call) for _ in range(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(intervals)


def test_on_a_gpu_the_first_call_with_a_key_runs_alone_then_the_rest_together():
    # CuPy compiles a kernel on its first use in a process: threads that reach it together
    # would each compile it. The first call runs alone; the others wait, then run side by side.
    key = ("test", object())
    first, *rest = _intervals_of_calls(key, "cuda")
    assert all(entered >= first[1] for entered, _ in rest)
    assert min(done for _, done in rest) > max(entered for entered, _ in rest)  # overlapping
    again = _intervals_of_calls(key, "cuda")  # the first call is done: nobody waits now
    assert min(done for _, done in again) > max(entered for entered, _ in again)


def test_on_the_cpu_nothing_waits_for_a_first_call():
    intervals = _intervals_of_calls(("test", object()), "cpu")
    assert min(done for _, done in intervals) > max(entered for entered, _ in intervals)


def _gpu_alone(key, device: str):
    return gpu_alone(device)


def test_on_a_gpu_the_pass_tasks_take_the_gpu_one_at_a_time():
    intervals = _intervals_of_calls(None, "cuda", calls=4, held=_gpu_alone)
    assert all(entered >= done for (_, done), (entered, _) in itertools.pairwise(intervals))


def test_on_the_cpu_the_pass_tasks_run_side_by_side():
    intervals = _intervals_of_calls(None, "cpu", calls=4, held=_gpu_alone)
    assert min(done for _, done in intervals) > max(entered for entered, _ in intervals)
