"""In-memory data as a dask array of views: the caller's array is cut up, never copied.

``dask.array.from_array`` copies array-like input whole before cutting it into chunks (the
installed dask, 2026.7, does ``x = x.copy()`` for anything with a ``copy`` method), so a fit on
an in-memory array held a second copy of it for as long as the graph lived.
:func:`view_blocks` builds the same graph from the caller's own array instead:

* numpy: every block is a slice (a view) of the array, placed in the graph as a value, as
  ``from_array`` does for numpy; under a ``distributed.Client`` each block is sent once, as its
  own bytes.
* CSR with row chunks only (and canonical: sorted, no duplicates): every block is a CSR matrix
  of the same type whose ``data`` and ``indices`` are views of the caller's; only its
  ``indptr`` (one integer per row) is new.
* any other sparse chunking or format: the matrix is one value of the graph, referenced once
  by name, and each task slices its block from it when it runs (a copy of one block, freed
  with it).

The blocks share memory with the caller's array: the library never writes to a block, and a
caller who changes the array before the result is computed changes the result.

Examples
--------
>>> import numpy as np
>>> X = np.arange(12.0).reshape(6, 2)
>>> A = view_blocks(X, (4, -1))
>>> A.chunks
((4, 2), (2,))
>>> bool(np.shares_memory(A.to_delayed()[1, 0].compute(), X))  # as the library reads it
True
"""

from __future__ import annotations

import itertools
import operator
import uuid
from typing import Any

import dask.array as da
import numpy as np
import scipy.sparse
from dask.array.core import normalize_chunks

__all__ = ["row_view", "view_blocks"]


def row_view(X: Any, start: int, stop: int) -> Any:
    """Rows ``start:stop`` of in-memory ``X``, sharing its memory where the format allows.

    numpy: the slice (a view). Canonical CSR (sorted, no duplicates): a CSR matrix of ``X``'s
    type on views of its ``data`` and ``indices`` (only ``indptr`` is new). Other sparse
    input: ``X[start:stop]``, a copy of those rows.

    Examples
    --------
    >>> import numpy as np, scipy.sparse
    >>> S = scipy.sparse.csr_matrix(np.eye(4))
    >>> rows = row_view(S, 1, 3)
    >>> rows.toarray().tolist(), bool(np.shares_memory(rows.data, S.data))
    ([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]], True)
    """
    if not (scipy.sparse.issparse(X) and X.format == "csr" and X.has_canonical_format):
        return X[start:stop]
    lo, hi = int(X.indptr[start]), int(X.indptr[stop])
    # Empty, then given its arrays: the constructor would copy views of a larger array.
    block = type(X)((stop - start, X.shape[1]), dtype=X.dtype)
    block.indptr = X.indptr[start : stop + 1] - X.indptr[start]
    block.indices, block.data = X.indices[lo:hi], X.data[lo:hi]
    block.has_canonical_format = True  # a row range of a canonical matrix; spares a scan
    return block


def view_blocks(X: Any, chunks: Any, prefix: str = "view") -> da.Array:
    """Return in-memory ``X`` as a dask array whose blocks are views of it, not copies.

    The replacement for ``da.from_array(X, chunks=chunks, name=False)`` (and
    ``asarray=False`` for sparse input) on data the caller holds in memory.

    Parameters
    ----------
    X : numpy.ndarray or scipy.sparse matrix or array
        The data. Sparse input keeps its blocks sparse (of ``X``'s own type); a format that
        cannot be sliced (COO, ...) is made CSR first.
    chunks : tuple
        As for ``dask.array.from_array``: ``(rows, -1)`` for row blocks, ``(-1, width)`` for
        column blocks, or explicit block sizes.
    prefix : str, default="view"
        The start of the array's name: :data:`dkpca._scattered.MODEL_VIEW` marks a model's
        own array, whose blocks a cluster keeps between computations.

    Returns
    -------
    dask.array.Array
        With a fresh name on every call (as ``from_array(..., name=False)``: no hash of the
        data is computed), no lock (reading numpy or scipy.sparse arrays is thread-safe), and
        ``meta`` of ``X``'s type.

    Notes
    -----
    Memory: numpy and row-chunked canonical CSR input take no copy of the data (the CSR blocks
    add one index per row); other sparse input copies a block when its task runs. Time:
    ``O(number of blocks)`` to build (plus ``O(nnz)`` once to check that a CSR matrix is
    canonical).

    Examples
    --------
    >>> import numpy as np, scipy.sparse
    >>> S = scipy.sparse.csr_matrix(np.eye(5))
    >>> A = view_blocks(S, (2, -1))
    >>> blocks = [block.compute() for block in A.to_delayed().ravel()]
    >>> A.chunks, type(blocks[2]).__name__
    (((2, 2, 1), (5,)), 'csr_matrix')
    >>> bool(np.shares_memory(blocks[1].data, S.data))
    True
    """
    sparse = scipy.sparse.issparse(X)
    if sparse and X.format not in ("csr", "csc"):
        X = X.tocsr()
    chunks = normalize_chunks(chunks, X.shape, dtype=X.dtype)
    name = f"{prefix}-{uuid.uuid4().hex}"
    bounds = [list(itertools.pairwise(np.cumsum((0, *c)).tolist())) for c in chunks]
    blocks = itertools.product(*(enumerate(b) for b in bounds))
    graph: dict[Any, Any] = {}
    if not sparse:
        meta = np.empty((0,) * X.ndim, dtype=X.dtype)
        for block in blocks:
            index = tuple(slice(a, b) for _, (a, b) in block)
            graph[(name, *(i for i, _ in block))] = X[index]
    elif X.format == "csr" and len(chunks[1]) == 1 and X.has_canonical_format:
        meta = type(X)((0, 0), dtype=X.dtype)
        for (i, (start, stop)), _ in blocks:
            graph[(name, i, 0)] = row_view(X, start, stop)
    else:
        meta = type(X)((0, 0), dtype=X.dtype)
        whole = f"whole-{name}"
        graph[whole] = X
        for block in blocks:
            index = tuple(slice(a, b) for _, (a, b) in block)
            graph[(name, *(i for i, _ in block))] = (operator.getitem, whole, index)
    return da.Array(graph, name, chunks, meta=meta)
