"""Randomized linear PCA passes as one task per group of stripes (dkpca/_pca_stripes.py)."""

import dask
import dask.array as da
import numpy as np
import pytest
import zarr

import dkpca._pca_randomized
import dkpca._pca_stripes
from dkpca import PCA


def _store(path, n, d, chunks, seed=0):
    rng = np.random.default_rng(seed)
    scales = 1.0 / np.arange(1, min(n, d) + 1) ** 0.7
    U = np.linalg.qr(rng.normal(size=(n, len(scales))))[0]
    V = np.linalg.qr(rng.normal(size=(d, len(scales))))[0]
    X = (U * scales * 100) @ V.T + rng.uniform(-5, 5, d)
    zarr.create_array(path, data=X, chunks=chunks)
    return X


def _exact(X, k):
    return np.linalg.svd(X - X.mean(axis=0), compute_uv=False)[:k] ** 2 / (len(X) - 1)


class _Calls:
    """Count the group tasks' calls (the tasks run in this process)."""

    def __init__(self, monkeypatch):
        self.count = 0
        for name in ("scatter_group", "gram_group"):
            original = getattr(dkpca._pca_stripes, name)

            def counted(*args, original=original):
                self.count += 1
                return original(*args)

            monkeypatch.setattr(dkpca._pca_randomized, name, counted)


@pytest.mark.parametrize(("n", "d", "chunks"), [
    (600, 90, (50, 40)),   # tall: row stripes of 3 blocks
    (80, 700, (30, 100)),  # wide: feature stripes of 3 blocks
])
def test_group_passes_equal_the_block_keys_passes(tmp_path, monkeypatch, n, d, chunks):
    X = _store(tmp_path / "x.zarr", n, d, chunks)
    data = da.from_zarr(str(tmp_path / "x.zarr"))
    calls = _Calls(monkeypatch)
    grouped = PCA(6, solver="randomized", tol=1e-10, random_state=0).fit(data)
    assert calls.count >= grouped.n_iter_ - 2  # every product pass went through the groups
    monkeypatch.setattr(dkpca._pca_randomized, "stripe_groups", lambda *args: None)
    calls.count = 0
    keyed = PCA(6, solver="randomized", tol=1e-10, random_state=0).fit(data)
    assert calls.count == 0
    assert grouped.n_iter_ == keyed.n_iter_
    np.testing.assert_allclose(grouped.explained_variance_, keyed.explained_variance_,
                               rtol=1e-12)
    np.testing.assert_allclose(grouped.components_, keyed.components_, atol=1e-10)
    np.testing.assert_allclose(grouped.explained_variance_, _exact(X, 6), rtol=1e-9)


def test_group_products_over_several_ragged_stripes_leave_the_source_alone():
    """Stripes of a group share their buffers (HeldStripe); the blocks read are never written."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(230, 70)) + rng.uniform(-5, 5, 70)
    source = X.copy()
    data = da.from_array(X, chunks=(40, 30))  # ragged last stripes; X's own memory in the graph
    rows, cols = (tuple(int(b) for b in np.cumsum((0, *chunks))) for chunks in data.chunks)
    mean, V, U = X.mean(axis=0), rng.normal(size=(70, 4)), rng.normal(size=(230, 4))
    Xc = X - mean
    row_groups = dkpca._pca_stripes.stripe_groups(data, by_rows=True, threads=1)
    col_groups = dkpca._pca_stripes.stripe_groups(data, by_rows=False, threads=1)
    assert max(len(group.stripes) for group in row_groups) >= 2  # 6 stripes in 4 groups
    scattered = sum(dkpca._pca_stripes.scatter_group(group, V, mean, cols, np.float64)
                    for group in row_groups)
    np.testing.assert_allclose(scattered, Xc.T @ (Xc @ V), rtol=1e-12)
    gram = sum(dkpca._pca_stripes.gram_group(group, U, mean, rows, cols, np.float64)
               for group in col_groups)
    np.testing.assert_allclose(gram, Xc @ (Xc.T @ U), rtol=1e-12)
    np.testing.assert_array_equal(X, source)


def test_tasks_of_a_pass_do_not_grow_with_the_blocks(tmp_path, monkeypatch):
    """Issue 30: a pass's tasks grow with the threads, not with the blocks."""
    tasks: dict[int, list[int]] = {}

    def counting(*collections, **kwargs):
        tasks[row_chunk].append(len(dask.delayed(collections).__dask_graph__()))
        return dask.compute(*collections, **kwargs)

    monkeypatch.setattr(dkpca._pca_randomized, "compute", counting)
    fits = {}
    for row_chunk in (40, 10):  # 10 and 40 row stripes of 2 blocks each
        path = tmp_path / f"rows{row_chunk}.zarr"
        X = _store(path, 400, 60, (row_chunk, 30))
        tasks[row_chunk] = []
        with dask.config.set(scheduler="threads", num_workers=2):
            fits[row_chunk] = PCA(4, solver="randomized", tol=1e-10, random_state=0).fit(
                da.from_zarr(str(path)))
        np.testing.assert_allclose(fits[row_chunk].explained_variance_, _exact(X, 4),
                                   rtol=1e-9)
    blocks = {40: 20, 10: 80}
    for row_chunk, counts in tasks.items():
        statistics, *passes = counts
        assert statistics > blocks[row_chunk]  # the statistics pass: tasks per block
        assert len(set(passes)) == 1  # every product pass: the same graph
    # 2 threads: at most 8 groups, so 10 and 40 stripes make graphs of the same size
    assert tasks[40][1] == tasks[10][1] < blocks[10] / 2


def test_graphs_whose_blocks_share_work_use_the_block_keys(tmp_path, monkeypatch):
    """A shared task (here the column means) would run once per group: no groups."""
    X = _store(tmp_path / "x.zarr", 300, 50, (60, 25))
    stored = da.from_zarr(str(tmp_path / "x.zarr"))
    calls = _Calls(monkeypatch)
    pca = PCA(4, solver="randomized", tol=1e-10, random_state=0).fit(
        stored - stored.mean(axis=0))
    assert calls.count == 0
    np.testing.assert_allclose(pca.explained_variance_, _exact(X, 4), rtol=1e-9)


def test_a_stripe_larger_than_the_free_memory_uses_the_block_keys(tmp_path, monkeypatch):
    X = _store(tmp_path / "x.zarr", 300, 50, (60, 25))
    calls = _Calls(monkeypatch)
    monkeypatch.setattr(dkpca._pca_randomized, "free_memory_per_thread", lambda: 1000)
    pca = PCA(4, solver="randomized", tol=1e-10, random_state=0).fit(
        da.from_zarr(str(tmp_path / "x.zarr")))
    assert calls.count == 0
    np.testing.assert_allclose(pca.explained_variance_, _exact(X, 4), rtol=1e-9)


@pytest.mark.distributed
def test_group_passes_on_a_distributed_cluster(client, tmp_path):
    distributed = pytest.importorskip("distributed")
    X = _store(tmp_path / "x.zarr", 500, 80, (50, 40))
    data = da.from_zarr(str(tmp_path / "x.zarr"))
    with distributed.get_task_stream() as stream:
        remote = PCA(5, solver="randomized", tol=1e-10, random_state=0).fit(data)
    groups = [task for task in stream.data if str(task["key"]).startswith("scatter_group")]
    assert len(groups) >= (remote.n_iter_ - 1) * 2  # 10 row stripes: 8 groups a pass
    with dask.config.set(scheduler="threads"):
        local = PCA(5, solver="randomized", tol=1e-10, random_state=0).fit(data)
    np.testing.assert_allclose(remote.explained_variance_, local.explained_variance_,
                               rtol=1e-12)
    np.testing.assert_allclose(remote.explained_variance_, _exact(X, 5), rtol=1e-9)
