"""Progress bars: silent by default, drawn inside progress_bar() on any scheduler."""

import io

import dask.array as da
import pytest

from dkpca._progress import progress_bar
from dkpca.blocked import compute


def _work():
    return (da.ones((400, 400), chunks=100) @ da.ones((400, 400), chunks=100)).sum()


def test_silent_outside_a_progress_block(capsys):
    assert compute(_work())[0] == 400**3
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_local_scheduler_bar():
    stream = io.StringIO()
    with progress_bar(stream, minimum=0.0):
        assert compute(_work())[0] == 400**3
    assert "100% Completed" in stream.getvalue()


def test_short_work_draws_nothing():
    stream = io.StringIO()
    with progress_bar(stream, minimum=60.0):
        compute(_work())
    assert stream.getvalue() == ""


@pytest.mark.distributed
def test_distributed_bar_counts_tasks_and_cancels_on_failure(client):
    stream = io.StringIO()
    with progress_bar(stream, minimum=0.0):
        assert compute(_work())[0] == 400**3
    drawn = stream.getvalue()
    assert "100% of" in drawn and "tasks" in drawn and drawn.endswith("\n")

    def fail(block):
        raise ZeroDivisionError("task failed")

    with progress_bar(io.StringIO(), minimum=0.0), pytest.raises(ZeroDivisionError):
        compute(da.ones(10, chunks=5).map_blocks(fail, dtype=float))
    assert compute(da.ones(3).sum())[0] == 3  # the client keeps working afterwards
