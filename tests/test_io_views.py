"""dkpca.io._views: in-memory input becomes a dask array of views, never a copy of the input.

``dask.array.from_array`` copies its input whole (dask 2026.7 does), which held a second copy
of the caller's data for the length of a fit. The peaks below are measured with
``tracemalloc`` (which sees numpy and scipy buffers) relative to the input's own bytes, which
were allocated before the measurement starts.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable

import dask
import numpy as np
import pytest
import scipy.sparse

import dkpca
from dkpca import _pca_randomized
from dkpca.io import as_dask
from dkpca.io._views import row_view, view_blocks


def _nbytes(X: object) -> int:
    if scipy.sparse.issparse(X):
        return X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    return X.nbytes


def _block(A, *index: int) -> object:
    """One block as the library computes it (``A.blocks[i].compute()`` would copy it)."""
    return A.to_delayed()[index if len(index) == 2 else (*index, 0)].compute()


def _peak(work: Callable[[], object]) -> int:
    """Bytes allocated at the peak of ``work()``, above what was allocated before it."""
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def dense() -> np.ndarray:
    """16 MB of float64 data (50,000 x 40)."""
    return np.random.default_rng(0).normal(size=(50_000, 40))


@pytest.fixture(scope="module")
def csr() -> scipy.sparse.csr_matrix:
    """50,000 x 400 CSR, 40 entries a row (24 MB), canonical (sorted, no duplicates)."""
    rng = np.random.default_rng(0)
    n, d, per_row = 50_000, 400, 40
    columns = (rng.integers(0, d, size=(n, 1)) + 10 * np.arange(per_row)) % d  # distinct
    indptr = np.arange(0, n * per_row + 1, per_row)
    return scipy.sparse.csr_matrix(
        (rng.random(n * per_row), np.sort(columns, axis=1).ravel().astype(np.int32), indptr),
        shape=(n, d))


@pytest.fixture(params=["dense", "csr"])
def data(request) -> np.ndarray | scipy.sparse.csr_matrix:
    return request.getfixturevalue(request.param)


def test_numpy_blocks_share_memory_with_the_input(dense):
    A = view_blocks(dense, (7_000, -1))
    assert A.chunks[0][:2] == (7_000, 7_000) and A.chunks[1] == (40,)
    for block in (_block(A, 0), _block(A, 3)):
        assert np.shares_memory(block, dense)
    assert np.shares_memory(_block(as_dask(dense), 0), dense)
    columns = view_blocks(dense, (-1, 16))  # linear PCA's gram solver cuts columns
    assert columns.chunks == ((50_000,), (16, 16, 8))
    assert np.shares_memory(_block(columns, 0, 2), dense)
    np.testing.assert_array_equal(columns.compute(), dense)


def test_csr_blocks_share_memory_and_stay_sparse(csr):
    A = as_dask(csr, accept_sparse=True)
    block = _block(A, 0)
    assert type(block) is type(csr) and block.has_canonical_format
    assert np.shares_memory(block.data, csr.data)
    assert np.shares_memory(block.indices, csr.indices)
    assert type(A._meta) is type(csr)
    middle = _block(view_blocks(csr, (12_345, -1)), 2)
    assert (middle != csr[24_690:37_035]).nnz == 0
    assert np.shares_memory(middle.data, csr.data)


@pytest.mark.parametrize("kind", ["csr_array", "csc", "coo", "non-canonical", "columns"])
def test_other_sparse_input_is_sliced_when_its_task_runs(kind):
    S = scipy.sparse.random(30, 8, density=0.3, format="csr", random_state=1)
    chunks = (7, -1)
    if kind == "csr_array":
        S = scipy.sparse.csr_array(S)
    elif kind in ("csc", "coo"):
        S = S.asformat(kind)
    elif kind == "non-canonical":  # one entry stored twice: the sum is its value
        S = scipy.sparse.csr_matrix((np.array([1.0, 2.0, 3.0]), np.array([2, 2, 0]),
                                     np.array([0, 2, 2, 3])), shape=(3, 4))
        chunks = (2, -1)
    else:
        chunks = (7, 3)
    A = view_blocks(S, chunks)
    assert scipy.sparse.issparse(_block(A, 0, 0))
    np.testing.assert_array_equal(
        np.vstack([np.hstack([b.toarray() for b in row]) for row in
                   [[_block(A, i, j) for j in range(A.numblocks[1])]
                    for i in range(A.numblocks[0])]]),
        S.toarray())


def test_row_view_of_each_kind():
    X = np.arange(20.0).reshape(10, 2)
    assert np.shares_memory(row_view(X, 2, 5), X)
    S = scipy.sparse.csr_array(X)
    rows = row_view(S, 2, 5)
    assert type(rows) is scipy.sparse.csr_array and np.shares_memory(rows.data, S.data)
    np.testing.assert_array_equal(rows.toarray(), X[2:5])
    np.testing.assert_array_equal(row_view(S.tocsc(), 2, 5).toarray(), X[2:5])


def test_every_call_gets_a_fresh_name_and_no_lock(dense):
    first, second = view_blocks(dense, (10_000, -1)), view_blocks(dense, (10_000, -1))
    assert first.name != second.name
    assert "lock" not in str(dict(first.dask))


def test_as_dask_holds_no_copy_of_in_memory_input(data):
    """Computing every block of ``as_dask(X)`` allocates a small part of ``X`` (it was 1x).

    What remains is the finiteness check's mask, one byte per value.
    """

    def blocks():
        A = as_dask(data, accept_sparse=True)
        for block in A.to_delayed().ravel():
            block.compute(scheduler="sync")

    assert _peak(blocks) < 0.2 * _nbytes(data)


def test_randomized_pca_holds_no_copy_of_in_memory_input(data, monkeypatch):
    """``PCA(solver="randomized").fit`` peaks at a few blocks above ``X``.

    Blocks of 1 MiB, so that the data are many blocks; before, ``from_array`` copied the
    data whole (peaks of 1.1x ``X`` for this numpy array and 1.5x for the CSR matrix; 2.25x
    and 4x at the default block size).
    """
    monkeypatch.setattr(_pca_randomized, "_ROW_BLOCK_BYTES", 2**20)
    model = dkpca.PCA(5, solver="randomized", random_state=0)
    peak = _peak(lambda: model.fit(data))
    assert peak < 0.5 * _nbytes(data)
    exact = dkpca.PCA(5, solver="covariance").fit(data)
    np.testing.assert_allclose(model.explained_variance_, exact.explained_variance_, rtol=1e-6)


def test_fits_under_a_distributed_client_match_local_ones(client, csr, monkeypatch):
    """Under a client the view blocks travel as graph values; the fit is the local one."""
    X = csr[:2_000]
    monkeypatch.setattr(_pca_randomized, "_ROW_BLOCK_BYTES", 2**15)  # many blocks
    remote = dkpca.PCA(4, solver="randomized", random_state=0).fit(X)
    remote_dense = dkpca.PCA(4, solver="randomized", random_state=0).fit(X.toarray())
    with dask.config.set(scheduler="threads"):
        local = dkpca.PCA(4, solver="randomized", random_state=0).fit(X)
    np.testing.assert_allclose(remote.explained_variance_, local.explained_variance_,
                               rtol=1e-10)
    np.testing.assert_allclose(remote_dense.explained_variance_, local.explained_variance_,
                               rtol=1e-6)
    dense = as_dask(X, accept_sparse=True).map_blocks(
        lambda block: block.toarray(), meta=np.empty((0, 0)))
    np.testing.assert_allclose(dense.sum(axis=0).compute(), np.asarray(X.sum(axis=0)).ravel())
