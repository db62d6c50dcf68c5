"""Progress: silent by default; a bar on a terminal, log lines elsewhere, on any scheduler."""

import io
import re
import time

import dask
import dask.array as da
import numpy as np
import pytest

from dkpca._progress import progress_bar
from dkpca.blocked import compute


class Terminal(io.StringIO):
    def isatty(self):
        return True


def _work():
    return (da.ones((400, 400), chunks=100) @ da.ones((400, 400), chunks=100)).sum()


def _slow_work(blocks=12, seconds=0.05):
    def nap(block):
        time.sleep(seconds)
        return block

    return da.ones(blocks, chunks=1).map_blocks(nap, dtype=float).sum()


def test_silent_outside_a_progress_block(capsys):
    assert compute(_work())[0] == 400**3
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_terminal_gets_a_bar_redrawn_in_place():
    stream = Terminal()
    with progress_bar(stream, minimum=0.0):
        assert compute(_slow_work())[0] == 12
    drawn = stream.getvalue()
    assert drawn.startswith("\r[") and drawn.count("\n") == 1 and drawn.endswith("\n")
    assert re.fullmatch(r"\[#{40}\] \| 100% of \d+ tasks \| [\d.]+s\n", drawn.rsplit("\r", 1)[1])


def test_a_log_gets_lines_with_phase_tasks_and_time_left():
    stream = io.StringIO()  # not a terminal
    with progress_bar(stream, minimum=0.0, phase="fit", interval=0.1):
        assert compute(_slow_work(blocks=16, seconds=0.05), scheduler="sync")[0] == 16
        compute(_slow_work(blocks=2, seconds=0.0))
    text = stream.getvalue()
    assert "\r" not in text and text.endswith("\n")
    lines = text.splitlines()
    first = [line for line in lines if line.startswith("fit, step 1 ")]
    assert len(first) >= 3, text  # 0.8 s of work at one line per 0.1 s
    pattern = (r"fit, step 1 \(sum-aggregate\): (\d+)% of (\d+) tasks \((\d+) done\), "
               r"[\d.]+s elapsed, (about [\d.]+s left|done)")
    matches = [re.fullmatch(pattern, line) for line in first]
    assert all(matches), text
    assert [m[4] == "done" for m in matches] == [False] * (len(first) - 1) + [True]
    percents = [int(m[1]) for m in matches]
    assert percents == sorted(percents) and percents[-1] == 100 and percents[0] < 100
    assert lines[-1].startswith("fit, step 2 ")  # each computation numbered within the phase


def test_lines_are_throttled_to_the_interval():
    stream = io.StringIO()
    with progress_bar(stream, minimum=0.0, interval=60.0):
        compute(_slow_work(blocks=8, seconds=0.05), scheduler="sync")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2, lines  # the first report, due at once, and the final one
    assert lines[-1].endswith("done")


def test_short_work_draws_nothing():
    for stream in (io.StringIO(), Terminal()):
        with progress_bar(stream, minimum=60.0):
            compute(_work())
        assert stream.getvalue() == ""


@pytest.mark.distributed
def test_distributed_progress_counts_tasks_and_cancels_on_failure(client):
    stream = Terminal()
    with progress_bar(stream, minimum=0.0):
        assert compute(_work())[0] == 400**3
    drawn = stream.getvalue()
    assert "100% of" in drawn and "tasks" in drawn and drawn.endswith("\n")

    log = io.StringIO()
    with progress_bar(log, minimum=0.0, phase="transform", interval=0.1):
        assert compute(_slow_work(blocks=16))[0] == 16
    lines = log.getvalue().splitlines()
    assert len(lines) >= 2 and all(line.startswith("transform, step 1 (") for line in lines)
    assert lines[-1].endswith("elapsed, done") and "\r" not in log.getvalue()

    def fail(block):
        raise ZeroDivisionError("task failed")

    with progress_bar(io.StringIO(), minimum=0.0), pytest.raises(ZeroDivisionError):
        compute(da.ones(10, chunks=5).map_blocks(fail, dtype=float))
    assert compute(da.ones(3).sum())[0] == 3  # the client keeps working afterwards
    np.testing.assert_equal(compute(da.arange(3))[0], np.arange(3))


def test_plain_values_pass_through_the_distributed_progress(client):
    # As dask.compute does: `fit --fit-inverse-transform` computed numpy arrays this way, and
    # the client's progress display failed on them ("unhashable type: 'numpy.ndarray'").
    plain = np.arange(4.0)
    with progress_bar(io.StringIO(), minimum=0.0):
        first, total, again = compute(plain, da.ones(6, chunks=2).sum(), plain)
        assert compute(plain)[0] is plain
        # a list of collections is computed inside, as dask.compute does
        (inside,) = compute([dask.delayed(int)(2), da.ones(3, chunks=1).sum()])
    assert first is plain and again is plain and total == 6
    assert list(inside) == [2, 3]


def test_step_numbers_run_on_past_silent_computations():
    stream = io.StringIO()
    with progress_bar(stream, minimum=0.3, phase="fit", interval=0.1):
        compute(_slow_work(blocks=8, seconds=0.05), scheduler="sync")
        compute(da.ones(4, chunks=2).sum(), scheduler="sync")  # too short to report
        compute(_slow_work(blocks=8, seconds=0.05), scheduler="sync")
    steps = {re.match(r"fit, step (\d+) ", line)[1] for line in stream.getvalue().splitlines()}
    assert steps == {"1", "2"}, stream.getvalue()


def _synthetic_run(n_cheap=600, n_slow=60, cheap=0.001, slow=1.0):
    """``(elapsed, done)`` after each task of a run whose cheap tasks all finish first, as
    denoise's chunk reads do before its fixed-point pre-images, and the true time left."""
    costs = [cheap] * n_cheap + [slow] * n_slow
    ends = np.cumsum(costs)
    return [(0.0, 0)] + [(float(t), i + 1) for i, t in enumerate(ends)], float(ends[-1])


@pytest.mark.parametrize("at", [0.3, 0.5, 0.8])
def test_time_left_follows_the_recent_pace_not_the_cheap_start(at):
    from dkpca._progress import progress_line, recent_rate

    samples, finish = _synthetic_run()
    now = at * finish
    seen = [(t, d) for t, d in samples if t <= now]
    elapsed, done = now, seen[-1][1]
    truth = finish - now

    def left(line):
        minutes, seconds = re.search(r"about (?:(\d+)m )?([\d.]+)s left", line).groups()
        return 60 * int(minutes or 0) + float(seconds)

    average = left(progress_line("denoise", done, len(samples) - 1, elapsed))
    recent = left(progress_line("denoise", done, len(samples) - 1, elapsed,
                                recent_rate([*seen, (elapsed, done)])))
    assert average < truth / 2  # what the task average since the start says: far too soon
    assert abs(recent - truth) <= 0.1 * truth + 1.0
