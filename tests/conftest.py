"""Shared fixtures: data sets, seeds, a no-compute guard and an in-process cluster."""

from __future__ import annotations

import contextlib
import os

os.environ.setdefault("DASK_ARRAY__QUERY_PLANNING", "False")

import dask
import numpy as np
import pytest
from sklearn.datasets import load_digits, make_moons
from sklearn.preprocessing import StandardScaler


@pytest.fixture(scope="session")
def digits() -> np.ndarray:
    """scikit-learn's digits (1797 x 64), standardised."""
    return StandardScaler().fit_transform(load_digits().data)


@pytest.fixture(scope="session")
def moons() -> np.ndarray:
    """Two moons with a little noise (600 x 2)."""
    X, _ = make_moons(n_samples=600, noise=0.08, random_state=0)
    return X


@pytest.fixture(params=[pytest.param("stand-in"), pytest.param("cupy", marks=pytest.mark.gpu)])
def cupy(request, monkeypatch):
    """The device module a GPU test runs on: ``_cupy_standin`` everywhere, CuPy on a GPU.

    The real-CuPy case is marked ``gpu`` and skipped where CuPy or a GPU is missing.
    """
    import sys

    import _cupy_standin

    from dkpca._device import DeviceUnavailableError, import_cupy

    if request.param == "cupy":
        try:
            return import_cupy()
        except DeviceUnavailableError as err:
            pytest.skip(str(err))
    monkeypatch.setitem(sys.modules, "cupy", _cupy_standin)
    return _cupy_standin


@pytest.fixture(params=[0, 1, 2])
def global_random_seed(request) -> int:
    """A few seeds, so that no test depends on one lucky draw."""
    return request.param


@contextlib.contextmanager
def raise_if_dask_computes():
    """Fail if anything inside the block computes a dask graph."""

    def refuse(*args, **kwargs):
        raise AssertionError("a dask graph was computed where none should be")

    with dask.config.set(scheduler=refuse):
        yield


@pytest.fixture
def no_compute():
    """The :func:`raise_if_dask_computes` guard as a fixture."""
    return raise_if_dask_computes


@pytest.fixture
def client():
    """An in-process distributed cluster (2 workers, 1 thread each)."""
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c


@pytest.fixture(scope="module")
def process_client():
    """Two worker processes (one thread, 2 GiB each) and a client in this process."""
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                 memory_limit="2GiB", dashboard_address=":0") as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c


@pytest.fixture
def sockets_only(monkeypatch):
    """Kernel products through tasks and sockets, as for workers off the client's machine."""
    monkeypatch.setitem(dask.config.config.setdefault("dkpca", {}), "shared-memory", False)


def tasks_run(client, action) -> int:
    """Tasks the scheduler moved to ``processing`` while ``action()`` ran (distinct keys)."""
    def counter(dask_scheduler):
        return dask_scheduler.transition_counter

    def processed_since(dask_scheduler, start):
        log = list(dask_scheduler.transition_log)
        log = log[len(log) - (dask_scheduler.transition_counter - start):]
        return len({entry[0] for entry in log if entry[2] == "processing"})

    start = client.run_on_scheduler(counter)
    action()
    return client.run_on_scheduler(processed_since, start=start)


def match_signs(A: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Flip ``A``'s columns to agree in sign with ``reference``'s."""
    signs = np.sign(np.sum(A * reference, axis=0))
    signs[signs == 0] = 1
    return A * signs


def centred_eigenvalues(K: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` largest eigenvalues of the centred kernel matrix ``H K H``, descending."""
    n = len(K)
    H = np.eye(n) - 1.0 / n
    return np.linalg.eigvalsh(H @ K @ H)[::-1][:k]


def similarity(V: np.ndarray, V_ref: np.ndarray) -> np.ndarray:
    """Tutorial eq. (66), per column: ``|vᵀv'| / (|v| |v'|)``."""
    return np.abs(np.sum(V * V_ref, axis=0)) / (
        np.linalg.norm(V, axis=0) * np.linalg.norm(V_ref, axis=0)
    )


def pytest_collection_modifyitems(items) -> None:
    """Mark scikit-learn's tests that dkpca fails by design strict xfail, with the reason."""
    for item in items:
        if "sklearn_suite" not in item.keywords:
            continue
        deliberate = item.module.DELIBERATE
        reason = deliberate.get(item.name) or deliberate.get(item.originalname)
        if reason:
            item.add_marker(pytest.mark.xfail(strict=True, reason=reason))


#: The scikit-learn test file each suite module runs, for the summary.
SKLEARN_SUITES = {"test_sklearn_suite.py": "test_kernel_pca.py on dkpca.KernelPCA",
                  "test_sklearn_pca_suite.py": "test_pca.py on dkpca.PCA",
                  "test_sklearn_incremental_suite.py": "test_incremental_pca.py on dkpca.PCA"}


def pytest_terminal_summary(terminalreporter) -> None:
    """Print the tally of each of scikit-learn's own test files run against dkpca."""
    tallies: dict[str, dict[str, list[str]]] = {}
    for outcome in ("passed", "failed", "xfailed", "xpassed", "skipped", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            if "sklearn_suite" in getattr(report, "keywords", {}):
                module = report.nodeid.split("::")[0].rpartition("/")[2]
                tally = tallies.setdefault(SKLEARN_SUITES.get(module, module), {})
                tally.setdefault(outcome, []).append(report.nodeid.split("::")[-1])
    for suite, tally in sorted(tallies.items()):
        counts = ", ".join(f"{len(names)} {outcome}" for outcome, names in tally.items())
        terminalreporter.write_sep("-", f"scikit-learn's {suite}: {counts}")
        for outcome in ("failed", "xfailed", "xpassed", "error"):
            for name in tally.get(outcome, []):
                terminalreporter.write_line(f"{outcome.upper()}: {name}")
