"""Freed blocks reused inside a task, in processes started the way distributed's nanny starts workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from dkpca import _heap

glibc = pytest.mark.skipif(_heap._glibc() is None, reason="glibc's mallopt only")

# Faults of 8 blocks of 24 MiB, each written through, freed, and allocated again: in the
# context, then after it (each count in 4 KiB pages: transparent huge pages are off for the
# process, PR_SET_THP_DISABLE, whatever the machine's setting).
_FAULTS = """
import ctypes, json, resource, numpy as np
from dkpca._heap import freed_blocks_reused

ctypes.CDLL("libc.so.6").prctl(41, 1, 0, 0, 0)

def faults_of_blocks():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(8):
        block = np.empty(3 * 2**20)
        block[:] = 1.0
        del block
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

with freed_blocks_reused():
    inside = faults_of_blocks()
print(json.dumps({"inside": inside, "after": faults_of_blocks()}))
"""


def _faults(environment: dict[str, str]) -> dict[str, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.update(NUMPY_MADVISE_HUGEPAGE="0", **environment)
    done = subprocess.run([sys.executable, "-c", _FAULTS], env=env, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout)


@glibc
def test_a_worker_started_by_a_nanny_reuses_freed_blocks_only_inside():
    pages = 8 * 3 * 2**20 * 8 // 4096  # every page of every block
    faults = _faults({"MALLOC_TRIM_THRESHOLD_": "65536"})  # distributed's nanny's setting
    assert faults["inside"] < pages / 4, faults  # the first block's pages, then reused
    assert faults["after"] > 0.9 * pages, faults  # the worker's own setting is back


@glibc
def test_a_process_whose_glibc_adapts_is_left_alone(monkeypatch):
    calls = []
    monkeypatch.setattr(_heap, "_glibc", lambda: _Recorder(calls))
    for name in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_"):
        monkeypatch.delenv(name, raising=False)
    with _heap.freed_blocks_reused():
        pass
    assert calls == []


def test_thresholds_are_raised_once_and_the_process_own_put_back(monkeypatch):
    calls = []
    monkeypatch.setattr(_heap, "_glibc", lambda: _Recorder(calls))
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    entered, leave = threading.Barrier(3), threading.Event()

    def task():
        with _heap.freed_blocks_reused():
            entered.wait()
            leave.wait()

    threads = [threading.Thread(target=task) for _ in range(2)]
    for thread in threads:
        thread.start()
    entered.wait()  # both inside at once
    assert calls == [("mallopt", -3, 64 * 2**20), ("mallopt", -1, 2**30)]
    leave.set()
    for thread in threads:
        thread.join()
    assert calls[2:] == [("mallopt", -3, 128 * 1024), ("mallopt", -1, 65536),
                         ("malloc_trim", 0)]


def test_a_threshold_too_large_for_mallopt_is_capped(monkeypatch):
    calls = []
    monkeypatch.setattr(_heap, "_glibc", lambda: _Recorder(calls))
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", str(2**32))
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "not a number")
    with _heap.freed_blocks_reused():
        pass
    assert calls[2:4] == [("mallopt", -3, 128 * 1024), ("mallopt", -1, 2**31 - 1)]


class _Recorder:
    """Stands in for glibc: records each call."""

    def __init__(self, calls: list) -> None:
        self.calls = calls

    def mallopt(self, parameter: int, value: int) -> int:
        self.calls.append(("mallopt", parameter, value))
        return 1

    def malloc_trim(self, pad: int) -> int:
        self.calls.append(("malloc_trim", pad))
        return 1
