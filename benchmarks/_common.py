"""Helpers shared by the benchmark scripts: environment report, markdown tables, monitoring.

The scripts run as ``python benchmarks/<script>.py``, which puts this folder on ``sys.path``.
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Self

import dask
import numpy as np
import psutil
import scipy
import sklearn
from threadpoolctl import threadpool_info

import dkpca

__all__ = [
    "Monitor",
    "best_time",
    "dkpca_source",
    "environment",
    "markdown_table",
    "print_environment",
    "wait_for_quiet",
]


def dkpca_source() -> str:
    """Fingerprint of the imported dkpca: git commit (``+dirty`` if changed) and source hash.

    The hash covers every ``.py`` file of the package, so results taken while the code changes
    can be told apart.
    """
    package = Path(dkpca.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode())
        digest.update(path.read_bytes())
    try:
        commit = subprocess.run(
            ["git", "describe", "--always", "--dirty=+dirty", "--exclude=*"],
            cwd=package,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "no git"
    return f"{commit}, sources {digest.hexdigest()[:12]}"


def environment() -> dict[str, object]:
    """Machine and library versions, for the record.

    Returns
    -------
    dict
        Python, numpy, scipy, scikit-learn, dask and dkpca versions, the BLAS libraries loaded
        (with their thread counts), logical cores and total memory.
    """
    blas = [
        f"{info['internal_api']} {info.get('version')} ({info.get('architecture')}, "
        f"{info['num_threads']} threads, {os.path.basename(info['filepath'])})"
        for info in threadpool_info()
        if info["user_api"] == "blas"
    ]
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "scikit-learn": sklearn.__version__,
        "dask": dask.__version__,
        "dkpca": f"{dkpca.__version__} from {Path(dkpca.__file__).parent} ({dkpca_source()})",
        "blas": blas,
    }


def print_environment(env: dict[str, object], command: Sequence[str]) -> None:
    """Print ``env`` and the command line as a markdown list."""
    print("## Environment\n")
    for key, value in env.items():
        print(f"- {key}: {value}")
    print(f"- command: {' '.join(command)}\n", flush=True)


def best_time(function: Callable[[], object], repeat: int = 3) -> float:
    """Shortest of ``repeat`` timed calls of ``function``, in seconds.

    Examples
    --------
    >>> best_time(lambda: None) >= 0
    True
    """
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Format rows as a GitHub markdown table.

    Examples
    --------
    >>> print(markdown_table(["a", "b"], [[1, 2]]))
    | a | b |
    |---|---|
    | 1 | 2 |
    """
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _busy_cpu_seconds() -> float:
    """CPU seconds the machine's processes have spent running since boot (steal time aside)."""
    times = psutil.cpu_times()
    return sum(getattr(times, field, 0.0) for field in ("user", "nice", "system", "irq", "softirq"))


def _stolen_cpu_seconds() -> float:
    """CPU seconds the hypervisor has given to other guests since boot (0 where not reported)."""
    return getattr(psutil.cpu_times(), "steal", 0.0)


def _other_cpu_seconds() -> float:
    """CPU seconds spent by processes other than this one, machine-wide, since boot."""
    own = psutil.Process().cpu_times()
    return _busy_cpu_seconds() - own.user - own.system


def wait_for_quiet(max_other_load: float, *, patience: float = 60.0, window: float = 1.0) -> float:
    """Wait until other processes keep at most ``max_other_load`` cores busy.

    The load is averaged over windows of ``window`` seconds; after ``patience`` seconds the
    wait ends whatever the load.

    Returns
    -------
    float
        Seconds waited.
    """
    start = time.perf_counter()
    while time.perf_counter() - start < patience:
        before = _other_cpu_seconds()
        time.sleep(window)
        if (_other_cpu_seconds() - before) / window <= max_other_load:
            break
    return time.perf_counter() - start


class Monitor:
    """Context manager measuring peak memory and other processes' CPU load over a block.

    A daemon thread samples this process's resident set size every ``interval`` seconds.

    Attributes
    ----------
    elapsed : float
        Wall time of the block, in seconds.
    peak_increase : int
        Peak resident set size during the block minus the one at entry, in bytes.
    other_load : float
        Average number of cores kept busy by *other* processes during the block (machine busy
        time minus this process's CPU time, over the wall time). Near 0 on a quiet machine; a
        value near 1 or more means the timing was taken under contention.
    steal : float
        Average number of cores the hypervisor gave to other guests during the block (the
        ``steal`` of ``/proc/stat``; 0 off a virtual machine). A read or fit on a VM whose cores
        are partly stolen is slower for it.

    Examples
    --------
    >>> with Monitor() as monitor:
    ...     buffer = np.ones(2**24)
    >>> monitor.peak_increase > 0
    True
    """

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.elapsed = 0.0
        self.peak_increase = 0
        self.other_load = 0.0
        self.steal = 0.0
        self._process = psutil.Process()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._baseline = self._peak = 0
        self._start = self._busy = self._own = self._stolen = 0.0

    def _rss(self) -> int:
        return self._process.memory_info().rss

    def _own_cpu(self) -> float:
        times = self._process.cpu_times()
        return times.user + times.system

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self._peak = max(self._peak, self._rss())

    def __enter__(self) -> Self:
        self._baseline = self._peak = self._rss()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        self._busy, self._own = _busy_cpu_seconds(), self._own_cpu()
        self._stolen = _stolen_cpu_seconds()
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.elapsed = time.perf_counter() - self._start
        busy, own = _busy_cpu_seconds() - self._busy, self._own_cpu() - self._own
        self._stop.set()
        self._thread.join()
        self._peak = max(self._peak, self._rss())
        self.peak_increase = self._peak - self._baseline
        self.other_load = max(0.0, busy - own) / max(self.elapsed, 1e-9)
        self.steal = (_stolen_cpu_seconds() - self._stolen) / max(self.elapsed, 1e-9)


class TreeMonitor(Monitor):
    """:class:`Monitor` over this process's children: their summed RSS, and their CPU as own."""

    def _children(self) -> list[psutil.Process]:
        return self._process.children(recursive=True)

    def _rss(self) -> int:
        total = 0
        for child in self._children():
            try:
                total += child.memory_info().rss
            except psutil.Error:
                pass
        return total

    def _own_cpu(self) -> float:
        total = super()._own_cpu()
        for child in self._children():
            try:
                times = child.cpu_times()
                total += times.user + times.system
            except psutil.Error:
                pass
        return total


def timed_on_cluster(
    workers: bool, func: Any, *args: Any, **kwargs: Any
) -> tuple[Any, dict[str, float]]:
    """Time ``func`` once a quiet machine allows: client and workers' memory, other load."""
    wait_for_quiet(0.2, patience=30.0)
    with Monitor() as client, TreeMonitor(interval=0.05) as tree:
        result = func(*args, **kwargs)
    return result, {"seconds": client.elapsed, "client_mib": client.peak_increase / 2**20,
                    "workers_mib": tree.peak_increase / 2**20 if workers else float("nan"),
                    "other_load": tree.other_load, "steal": tree.steal}


def run_in_child(target: Callable[..., None], args: tuple, timeout: float) -> dict[str, Any]:
    """Run ``target(*args, results)`` in a spawned process; return the dict it puts.

    A measurement in a fresh process owns its memory and imports; a crash or a timeout becomes
    the record's ``status`` instead of ending the benchmark.
    """
    import multiprocessing
    import queue

    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    child = context.Process(target=target, args=(*args, results))
    child.start()
    deadline = time.monotonic() + timeout
    record = None
    while record is None:  # polled, so that a child that died is seen at once
        try:
            record = {"status": "ok", **results.get(timeout=1.0)}
        except queue.Empty:
            if not child.is_alive():
                record = {"status": f"died (exit {child.exitcode}; out of memory?)"}
            elif time.monotonic() > deadline:
                child.kill()
                record = {"status": f"timeout (> {timeout:g} s)"}
    child.join()
    return record
