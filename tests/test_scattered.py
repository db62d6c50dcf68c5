"""In-memory blocks under a client: scattered beside the graph, a model's kept between calls."""

from __future__ import annotations

import gc
import os
import signal
import time
import warnings

import dask
import dask.array as da
import numpy as np
import pytest

import dkpca
from dkpca import _scattered
from dkpca._cluster_workers import live_workers
from dkpca.cluster import connect
from dkpca.io._views import view_blocks
from dkpca.options import ICF, Nystrom, Sketch

distributed = pytest.importorskip("distributed")

pytestmark = pytest.mark.distributed

#: Graphs above this size make distributed warn; the model below is larger.
THRESHOLD = {"distributed.admin.large-graph-warning-threshold": "1MB"}


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(3000, 64)), rng.normal(size=(2500, 64))  # 1.5 MB and 1.3 MB


def _large_graphs(caught):
    return [str(w.message).splitlines()[0] for w in caught if "large graph" in str(w.message)]


def _kept_futures():
    return {place: future for place, (_, future) in _scattered._kept.items()}


def _kept_keys():
    return {future.key for future in _kept_futures().values()}


def test_a_transform_sends_the_model_once_and_no_large_graph(data):
    X, new = data
    with dask.config.set(scheduler="threads"):
        model = dkpca.KernelPCA(4, solver="exact").fit(X)
        reference = model.transform(new)
    with (connect(n_workers=2, threads_per_worker=1, processes=True,
                  memory_limit="1GiB") as client, dask.config.set(THRESHOLD)):
        # the model's rows inside the graph: what a lazy result still carries, and warns of
        with pytest.warns(UserWarning, match="Sending large graph"):
            client.compute(model.transform(da.from_array(new, chunks=500))).result()
        before = _kept_keys()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            first = model.transform(new)
            kept = _kept_keys() - before
            second = model.transform(new[:100])
        assert _large_graphs(caught) == []
        assert kept, "the model's rows were not kept on the cluster"
        assert kept <= _kept_keys(), "the second transform sent the model again"
        assert set(client.who_has(list(_kept_futures().values()))) >= kept
        np.testing.assert_allclose(first, reference, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(second, reference[:100], rtol=1e-12, atol=1e-12)
        del model
        gc.collect()
        assert not kept & _kept_keys(), "the model's blocks outlived it"


def test_an_in_process_cluster_keeps_nothing(data):
    """Its workers hold the very arrays scattered: kept, a model would never be freed."""
    X, new = data
    model = dkpca.KernelPCA(4, solver="exact").fit(X)
    before = _kept_keys()
    with (connect(n_workers=1, threads_per_worker=2, processes=False),
          dask.config.set(THRESHOLD), warnings.catch_warnings(record=True) as caught):
        warnings.simplefilter("always")
        model.transform(new)
    assert _large_graphs(caught) == []
    assert _kept_keys() == before


def test_a_nystrom_fit_of_in_memory_rows_sends_no_large_graph(data):
    X, _ = data
    options = Nystrom(n_landmarks=100)
    with dask.config.set(scheduler="threads"):
        reference = dkpca.KernelPCA(4, solver=options, random_state=0).fit(X)
    with (connect(n_workers=2, threads_per_worker=1, processes=False),
          dask.config.set(THRESHOLD), warnings.catch_warnings(record=True) as caught):
        warnings.simplefilter("always")
        model = dkpca.KernelPCA(4, solver=options, random_state=0).fit(X)
    assert _large_graphs(caught) == []
    np.testing.assert_allclose(model.eigenvalues_, reference.eigenvalues_, rtol=1e-10)


def test_small_blocks_stay_in_the_graph():
    small = view_blocks(np.ones((100, 4)), (50, -1)).sum()
    seen = []
    with connect(n_workers=1, threads_per_worker=1, processes=False):
        (total,) = _scattered.computed_with_blocks_scattered(
            (small,), lambda *sent: seen.append(sent) or dask.compute(*sent))
    assert seen == [(small,)] and total == 400.0


def test_a_scheduler_of_the_callers_choice_gets_the_graph_as_it_is(data):
    """Futures in a graph computed by the threaded scheduler would fail."""
    X, _ = data
    blocks = view_blocks(X, (1000, -1)).sum(axis=0)  # 1.5 MB: scattered under a client
    with connect(n_workers=1, threads_per_worker=1, processes=False):
        (total,) = _scattered.computed_with_blocks_scattered((blocks,), dask.compute,
                                                             scheduler="threads")
    np.testing.assert_allclose(total, X.sum(axis=0), rtol=1e-12)


def test_a_kept_block_lost_with_its_worker_is_sent_again(data):
    X, new = data
    with dask.config.set(scheduler="threads"):
        model = dkpca.KernelPCA(4, solver="exact").fit(X)
        reference = model.transform(new)
    with connect(n_workers=2, threads_per_worker=1, processes=True, memory_limit="1GiB") as client:
        live_workers(client, 2, 120.0)
        before = _kept_keys()
        model.transform(new)
        kept = {key: future for key, future in _kept_futures().items()
                if future.key not in before}
        holders = {w for ws in client.who_has(list(kept.values())).values() for w in ws}
        pids = client.run(os.getpid)
        for worker in holders:
            os.kill(pids[worker], signal.SIGKILL)
        deadline = time.monotonic() + 60
        while all(f.status == "finished" for f in kept.values()):  # the scheduler sees the loss
            assert time.monotonic() < deadline, "the killed worker's blocks were never lost"
            time.sleep(0.05)
        live_workers(client, 1, 120.0)
        np.testing.assert_allclose(model.transform(new), reference, rtol=1e-12, atol=1e-12)
        assert all(_kept_futures()[place].key != future.key for place, future in kept.items())


def test_a_computation_that_lost_its_blocks_is_run_again():
    """A worker killed after the scatter, before the computation: sent again, then computed."""
    X = np.random.default_rng(1).normal(size=(40_000, 8))  # 2.4 MiB
    total = view_blocks(X, (10_000, -1)).sum(axis=0)
    attempts = []
    with connect(n_workers=2, threads_per_worker=1, processes=True, memory_limit="1GiB") as client:
        live_workers(client, 2, 120.0)
        pids = client.run(os.getpid)

        def compute(*sent):
            attempts.append(futures := distributed.futures_of(sent))
            if len(attempts) == 1:
                holders = {w for ws in client.who_has(futures).values() for w in ws}
                for worker in holders:
                    os.kill(pids[worker], signal.SIGKILL)
                deadline = time.monotonic() + 60
                while all(f.status == "finished" for f in futures):
                    assert time.monotonic() < deadline, "the killed worker's blocks were never lost"
                    time.sleep(0.05)
                live_workers(client, 1, 120.0)
            return dask.compute(*sent)

        (result,) = _scattered.computed_with_blocks_scattered((total,), compute)
    assert len(attempts) == 2 and len(attempts[0]) == 4
    assert not {f.key for f in attempts[0]} & {f.key for f in attempts[1]}
    np.testing.assert_allclose(result, X.sum(axis=0), rtol=1e-12)


def _sketch_fit(X):
    return dkpca.KernelPCA(4, solver=Sketch(), random_state=0).fit(X).eigenvalues_


def _denoised(X):
    with dask.config.set(scheduler="threads"):  # one model: only its pre-images are compared
        model = dkpca.KernelPCA(4, solver="randomized", random_state=0).fit(X)
    return model.denoise(X[:100])


def _loo(X):
    from dkpca.generalization import loo_projections

    rows = X[:600]  # its folds hold the 600 x 600 kernel: 2.9 MB
    return loo_projections(dkpca.KernelPCA(3, solver="exact").fit(rows), rows)


@pytest.mark.parametrize("call", [_sketch_fit, _denoised, _loo], ids=["sketch fit", "denoise",
                                                                      "leave-one-out"])
def test_values_shared_by_tasks_go_beside_the_graph(call, data):
    """A sketch's rows, a model's basis in its pre-image tasks, the leave-one-out folds."""
    X, _ = data
    with dask.config.set(scheduler="threads"):
        reference = call(X)
    with (connect(n_workers=2, threads_per_worker=1, processes=False),
          dask.config.set(THRESHOLD), warnings.catch_warnings(record=True) as caught):
        warnings.simplefilter("always")
        got = call(X)
    assert _large_graphs(caught) == []
    np.testing.assert_allclose(got, reference, rtol=1e-9, atol=1e-12)


def test_a_shared_value_is_one_key_for_every_task():
    value = np.arange(1000.0)
    key = _scattered.shared(value)
    tasks = [dask.delayed(np.sum)(key), dask.delayed(np.max)(key)]
    graph = dict(dask.delayed(tuple)(tasks).__dask_graph__())
    held = [k for k, v in graph.items() if getattr(v, "value", None) is value]
    assert held == [key.key] and str(key.key).startswith("view-")
    assert str(_scattered.shared(value, kept=True).key).startswith(_scattered.MODEL_VIEW)
    assert dask.compute(tasks, scheduler="sync") == ([499500.0, 999.0],)


@pytest.fixture
def sent(monkeypatch):
    """Every value the client scatters, as it was given."""
    values, scatter = [], distributed.Client.scatter

    def counted(client, data, **kwargs):
        values.extend(data if isinstance(data, list | tuple) else [data])
        return scatter(client, data, **kwargs)

    monkeypatch.setattr(distributed.Client, "scatter", counted)
    return values


def _rows_sent(sent, X):
    """Rows of ``X`` among the scattered values (its blocks are views of it)."""
    return sum(block.shape[0] for block in sent
               if isinstance(block, np.ndarray) and _scattered._root(block).shape == X.shape)


@pytest.mark.parametrize("solver", [ICF(max_rank=40), Nystrom(n_landmarks=100),
                                    Sketch("gaussian", dim=200, refine=True)],
                         ids=["icf", "nystrom", "refined sketch"])
def test_a_fit_sends_its_rows_once(solver, data, sent, monkeypatch):
    """Incomplete Cholesky computes over the rows once per round of pivots, Nyström three
    times: the rows are scattered for the first and kept until the fit ends. A refined
    sketch's two products share one set of tiles, and its trace needs no pass."""
    X, _ = data
    with dask.config.set(scheduler="threads"):
        reference = dkpca.KernelPCA(4, solver=solver, random_state=0).fit(X)
    computations, computed = [], dkpca.blocked.computed_with_blocks_scattered

    def computing(*args, **kwargs):
        computations.append(1)
        return computed(*args, **kwargs)

    monkeypatch.setattr(dkpca.blocked, "computed_with_blocks_scattered", computing)
    with connect(n_workers=2, threads_per_worker=1, processes=True, memory_limit="1GiB"):
        model = dkpca.KernelPCA(4, solver=solver, random_state=0).fit(X)
        assert _rows_sent(sent, X) == X.shape[0]  # each row once
        assert _scattered._inputs.get() is None
    assert len(computations) > 2 or isinstance(solver, Sketch)
    np.testing.assert_allclose(model.eigenvalues_, reference.eigenvalues_, rtol=1e-9)
    np.testing.assert_allclose(model.explained_variance_ratio_,
                               reference.explained_variance_ratio_, rtol=1e-9)


@pytest.mark.parametrize("solver", ["gram", "sketch"])
def test_a_linear_pca_fit_sends_its_rows_once(solver, data, sent):
    """The gram solver passes over the rows twice, a refined sketch three times."""
    X, _ = data
    options = {"solver": solver, "refine": True, "random_state": 0}
    with dask.config.set(scheduler="threads"):
        reference = dkpca.PCA(4, **options).fit(X)
    with connect(n_workers=2, threads_per_worker=1, processes=True, memory_limit="1GiB"):
        model = dkpca.PCA(4, **options).fit(X)
        assert _rows_sent(sent, X) == X.shape[0]  # each row once
    assert model.n_iter_ > 1
    np.testing.assert_allclose(model.explained_variance_, reference.explained_variance_,
                               rtol=1e-9)
