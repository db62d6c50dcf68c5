"""The accurate randomized solver of :class:`dkpca.PCA`: block Krylov on implicitly centred data.

The data ``X`` (``n × d``: numpy, ``scipy.sparse``, or a dask array of dense or sparse blocks,
chunked along rows, features or both) is never centred in place and never densified whole.
Every product is blocked over its chunks, and a pass is one ``dask.compute`` that reads every
block once:

* pass 0 (statistics): the mean ``μ`` and the total variance, per block then combined
  (Chan's pairwise update, so a large mean does not cancel the variance);
* the leading eigenpairs of the smaller of the two Gram-type matrices come from
  :func:`dkpca.linalg.block_krylov_eigh` (block Lanczos with full reorthogonalisation and
  thick restarts), started from a seeded Gaussian block:

  - tall data (``d <= n``): the ``d × d`` scatter ``C = X_cᵀ X_c``; a pass gives ``C V`` by
    ``P_i = X_c,i V`` then ``Σ_i X_c,iᵀ P_i`` within one graph (a row stripe of blocks is held
    while its ``P_i`` forms), so the data are read once per product;
  - wide data (``n < d``): the ``n × n`` matrix ``X_c X_cᵀ``; a pass gives ``X_c (X_cᵀ U)`` by
    ``T_j = Σ_i X_c,ijᵀ U_i`` then ``X_c,ij T_j`` (a feature stripe of blocks is held while its
    ``T_j`` forms), and the components ``X_cᵀ U / sqrt(λ)`` take one more pass.

Where the blocks are read by tasks of their own (a Zarr store, say) and a stripe fits in the
memory a worker's thread has free, such a pass is one task per group of stripes, which reads its
blocks itself (:mod:`dkpca._pca_stripes`): a pass's tasks then grow with the cluster's threads,
not with the blocks. Otherwise each block is a key of the pass's graph. A stripe larger than
half a worker's memory per thread (wide data chunked by rows only: a feature stripe is the whole
array) is not held: each product then takes two passes, ``X_c V`` then ``X_cᵀ P`` (tall) or
``X_cᵀ U`` then ``X_c T`` (wide), one chunk at a time.

Each block's products, centred explicitly (dense, slab by slab, in float32 where the tolerance
allows) or implicitly (sparse), are :mod:`dkpca._pca_products`'s. A pass that lost a worker
(with ``V``'s scattered pieces) is run again, as the kernel tiles' passes are.

A little over 500 lines, for one reason: the pass forms (a key per block, a task per group of
stripes, in-memory strips) share the stripe budget, the retry and the tree helpers.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import dask
import dask.array as da
import numpy as np
import psutil
import scipy.sparse
from sklearn.exceptions import ConvergenceWarning

from ._pca_components import orthonormal_tail
from ._pca_covariance import check_finite_statistics
from ._pca_products import centred_rtimes, centred_slabs, centred_times, product_dtype
from ._pca_stripes import (
    HELD_SHARE,
    StripeGroup,
    free_memory_per_thread,
    gram_group,
    scatter_group,
    stripe_groups,
)
from ._tile_holders import active_client
from ._worker_loss import recovering
from .blocked import compute, scheduler_threads, tree_sum, worker_memory_per_thread
from .io._views import row_view, view_blocks
from .linalg import block_krylov_eigh, flip_signs, single_threaded_blas
from .moments import available_cores

__all__ = ["RandomizedResult", "block_statistics", "fit_randomized_pca", "product_dtype"]

logger = logging.getLogger(__name__)

#: Bytes of one block (or strip) of rows when in-memory data are cut up.
_ROW_BLOCK_BYTES = 32 * 2**20

#: Stored entries of a sparse block summed at a time (bounds the temporaries).
_ENTRIES_PIECE = 2**20

#: Share of a worker's memory per thread that one held stripe of blocks may take; a larger
#: stripe makes each product two passes instead of one.
_STRIPE_SHARE = 0.5

#: Up to this many rows (``min(n, d)``), the Krylov basis may grow to the whole space.
_FULL_BASIS = 2048


def _as_chunked(X: np.ndarray | scipy.sparse.sparray | da.Array) -> da.Array:
    """Return ``X`` as a dask array of blocks; in-memory data are cut into row views, not copied."""
    if isinstance(X, da.Array):
        return X
    n, d = X.shape
    width = d if not scipy.sparse.issparse(X) else max(1, X.nnz // max(n, 1))
    rows = max(1, min(n, _ROW_BLOCK_BYTES // (8 * max(width, 1))))
    return view_blocks(X, (rows, -1))


def _block_moments(block: object) -> tuple[int, np.ndarray, np.ndarray]:
    """Rows, column mean and column sum of squared deviations of one block (float64)."""
    if scipy.sparse.issparse(block):
        r, d = block.shape
        if block.format == "csr" and block.has_canonical_format:  # one entry per position:
            # column sums by bincount over pieces of the entries, without the copy of the
            # block that multiply() makes
            sums, squares = np.zeros(d), np.zeros(d)
            for lo in range(0, block.nnz, _ENTRIES_PIECE):
                columns = block.indices[lo : lo + _ENTRIES_PIECE]
                values = block.data[lo : lo + _ENTRIES_PIECE].astype(np.float64, copy=False)
                sums += np.bincount(columns, weights=values, minlength=d)
                squares += np.bincount(columns, weights=np.square(values), minlength=d)
        else:
            sums = np.asarray(block.sum(axis=0), dtype=np.float64).ravel()
            squares = np.asarray(block.multiply(block).sum(axis=0), dtype=np.float64).ravel()
        mean = sums / r
        return r, mean, np.maximum(squares - r * mean**2, 0.0)
    block = np.asarray(block)
    m2 = np.zeros(block.shape[1])
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite data: fit reports it
        mean = block.mean(axis=0, dtype=np.float64)
        for _, slab in centred_slabs(block, mean):  # no temporary the size of the block
            m2 += np.square(slab, out=slab).sum(axis=0)
    return len(block), mean, m2


def _combine_moments(
    *parts: tuple[int, np.ndarray, np.ndarray],
) -> tuple[int, np.ndarray, np.ndarray]:
    """Chan, Golub and LeVeque's pairwise update of counts, means and squared deviations."""
    n, mean, m2 = parts[0]
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite data: fit reports it
        for r, mean_r, m2_r in parts[1:]:
            delta = mean_r - mean
            total = n + r
            mean = mean + delta * (r / total)
            m2 = m2 + m2_r + delta**2 * (n * r / total)
            n = total
    return n, mean, m2


def block_statistics(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Column means, column sums of squared deviations and each block's bytes: one pass.

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> X = np.random.default_rng(0).normal(size=(30, 4)) + 1e6
    >>> mean, m2, sizes = block_statistics(da.from_array(X, chunks=(7, 3)).to_delayed())
    >>> bool(np.allclose(mean, X.mean(0)) and np.allclose(m2, X.var(0) * 30))
    True
    >>> sizes.shape, int(sizes[0, 0])
    ((5, 2), 168)
    """
    columns = []
    for j in range(blocks.shape[1]):
        parts = [dask.delayed(_block_moments)(b) for b in blocks[:, j]]
        columns.append(_tree(parts, _combine_moments))
    sizes = [dask.delayed(_block_bytes)(b) for b in blocks.ravel()]
    *combined, block_bytes = compute(*columns, sizes)
    mean = np.concatenate([c[1] for c in combined])
    m2 = np.concatenate([c[2] for c in combined])
    return mean, m2, np.asarray(block_bytes).reshape(blocks.shape)


def _block_bytes(block: object) -> int:
    """Bytes of a block as held: its entries, or the arrays a sparse block stores.

    Not dask's ``sizeof``: on a worker short of memory it returned 128 bytes for blocks that
    had been spilled and read back.
    """
    if scipy.sparse.issparse(block):
        return sum(a.nbytes for a in vars(block).values() if isinstance(a, np.ndarray))
    return int(np.asarray(block).nbytes)


def _stripe_budget() -> int:
    """Bytes of one stripe of blocks that a worker may hold while its partial product forms.

    Half the memory per thread of the cluster's workers (their limit), or of this machine's
    available memory shared by the scheduler's threads.
    """
    per_thread = worker_memory_per_thread()
    if per_thread is None:
        per_thread = psutil.virtual_memory().available // scheduler_threads()
    return int(_STRIPE_SHARE * per_thread)


def _tree(parts: list, combine: Callable, split_every: int = 8) -> object:
    """Combine delayed parts in a tree of ``split_every``-way ``combine`` calls."""
    step = dask.delayed(combine, pure=True)
    while len(parts) > 1:
        parts = [step(*parts[i : i + split_every]) for i in range(0, len(parts), split_every)]
    return parts[0]


def _retried(product: Callable) -> Callable:
    """Run a pass again when a worker died with what it needed (``V``'s scattered pieces)."""
    def run(self: _CentredOperator, V: np.ndarray) -> np.ndarray:
        passes = self.passes

        def uncount() -> None:
            self.passes = passes

        return recovering(lambda: product(self, V), uncount, logger, "a randomized PCA pass",
                          "running it again")
    return run


def _graph_values(values: list) -> list:
    """Each value one key of the next graph: scattered beside it under a distributed client."""
    client = active_client()
    if client is not None:
        return client.scatter(values, hash=False)
    return [dask.delayed(value, traverse=False) for value in values]


class _CentredOperator:
    """Blocked products with ``X_c = X - 1 μᵀ`` over a grid of delayed blocks."""

    def __init__(self, blocks: np.ndarray, row_chunks: tuple, col_chunks: tuple,
                 mean: np.ndarray, dtype: np.dtype):
        self.blocks = blocks
        self.rows = np.cumsum((0, *row_chunks))
        self.cols = np.cumsum((0, *col_chunks))
        self.mean = mean
        self.dtype = dtype
        self._mean_keys: list | None = None
        self.groups: list[StripeGroup] = []  # set where the blocks can be read in the tasks
        self.passes = 0

    def _means(self, j: int) -> object:
        if self._mean_keys is None:  # one graph key per feature stripe, shared by its tasks
            self._mean_keys = [dask.delayed(self.mean[a:b], traverse=False)
                               for a, b in itertools.pairwise(self.cols)]
        return self._mean_keys[j]

    def _pieces(self, V: np.ndarray, bounds: np.ndarray) -> list:
        """Cut ``V`` at ``bounds`` (feature or row stripes), each piece one key of the graph.

        A piece goes to a worker once, not once per task, in the products' precision (float32
        products: half the bytes). Under a distributed client the pieces are scattered
        beside the graph, not embedded in it: ``V`` has a row per sample or feature, and a
        graph of many MiB stalls the scheduler (and draws its "large graph" warning).
        """
        V = V.astype(self.dtype, copy=False)
        return _graph_values([V[a:b] for a, b in itertools.pairwise(bounds)])

    def _times(self, i: int, j: int, V: object) -> object:
        return dask.delayed(centred_times)(self.blocks[i, j], V, self._means(j), self.dtype)

    def _rtimes(self, i: int, j: int, U: object) -> object:
        return dask.delayed(centred_rtimes)(self.blocks[i, j], U, self._means(j), self.dtype)

    @_retried
    def times(self, V: np.ndarray) -> np.ndarray:
        """``X_c V`` (``n × b``): one pass."""
        stripes, pieces = [], self._pieces(V, self.cols)
        for i in range(self.blocks.shape[0]):
            parts = [self._times(i, j, pieces[j]) for j in range(self.blocks.shape[1])]
            stripes.append(tree_sum(parts))
        self.passes += 1
        return np.vstack(compute(*stripes))

    @_retried
    def rtimes(self, U: np.ndarray) -> np.ndarray:
        """``X_cᵀ U`` (``d × b``): one pass."""
        stripes, pieces = [], self._pieces(U, self.rows)
        for j in range(self.blocks.shape[1]):
            parts = [self._rtimes(i, j, pieces[i]) for i in range(self.blocks.shape[0])]
            stripes.append(tree_sum(parts))
        self.passes += 1
        return np.vstack(compute(*stripes))

    @_retried
    def scatter_times(self, V: np.ndarray) -> np.ndarray:
        """``X_cᵀ (X_c V)`` (``d × b``): one pass, each block read once.

        A row stripe of blocks is held while its ``P_i = X_c,i V`` forms; then each block
        gives its ``X_c,ijᵀ P_i`` where it lies.
        """
        n_rows, n_cols = self.blocks.shape
        outputs: list[list] = [[] for _ in range(n_cols)]
        pieces = self._pieces(V, self.cols)
        for i in range(n_rows):
            P = tree_sum([self._times(i, j, pieces[j]) for j in range(n_cols)])
            for j in range(n_cols):
                outputs[j].append(self._rtimes(i, j, P))
        self.passes += 1
        return np.vstack(compute(*[tree_sum(parts) for parts in outputs]))

    @_retried
    def gram_times(self, U: np.ndarray) -> np.ndarray:
        """``X_c (X_cᵀ U)`` (``n × b``): one pass, each block read once.

        The transpose of :meth:`scatter_times`: a feature stripe of blocks is held while its
        ``T_j = X_c,:jᵀ U`` forms; then each block gives its ``X_c,ij T_j``.
        """
        n_rows, n_cols = self.blocks.shape
        outputs: list[list] = [[] for _ in range(n_rows)]
        pieces = self._pieces(U, self.rows)
        for j in range(n_cols):
            T = tree_sum([self._rtimes(i, j, pieces[i]) for i in range(n_rows)])
            for i in range(n_rows):
                outputs[i].append(self._times(i, j, T))
        self.passes += 1
        return np.vstack(compute(*[tree_sum(parts) for parts in outputs]))

    def _shared(self, V: np.ndarray) -> tuple[object, object]:
        """``V`` (in the products' precision) and ``μ``, each one key for all the group tasks."""
        return tuple(_graph_values([V.astype(self.dtype, copy=False), self.mean]))

    def _group_pass(self, product: Callable, V: np.ndarray, *bounds: tuple) -> np.ndarray:
        V_key, mean_key = self._shared(V)
        parts = [dask.delayed(product)(dask.delayed(group, traverse=False), V_key, mean_key,
                                       *bounds, self.dtype) for group in self.groups]
        self.passes += 1
        return compute(tree_sum(parts))[0]

    @_retried
    def scatter_groups(self, V: np.ndarray) -> np.ndarray:
        """:meth:`scatter_times` as one task per group of row stripes (:mod:`dkpca._pca_stripes`)."""
        return self._group_pass(scatter_group, V, tuple(map(int, self.cols)))

    @_retried
    def gram_groups(self, U: np.ndarray) -> np.ndarray:
        """:meth:`gram_times` as one task per group of feature stripes."""
        return self._group_pass(gram_group, U, tuple(map(int, self.rows)),
                                tuple(map(int, self.cols)))


class _InMemoryOperator:
    """The same products on in-memory data, strips of rows on a pool of threads.

    Strips run on one thread per core, each on one BLAS thread (a slab is too small for
    several); scipy's sparse products release the GIL too. Each thread holds a ``d × b``
    partial of ``X_cᵀ U``. On two cores a sparse 1,000,000 × 100,000 fit took 34 s against
    55–60 s on one thread (BENCHMARKS.md §11).
    """

    def __init__(self, X: object, mean: np.ndarray, dtype: np.dtype):
        self.X, self.mean, self.dtype, self.passes = X, mean, dtype, 0
        n, d = X.shape
        width = max(1, X.nnz // max(n, 1)) if scipy.sparse.issparse(X) else d
        self.threads = available_cores()
        self.step = max(1, min(_ROW_BLOCK_BYTES // (8 * width), -(-n // self.threads)))

    def _map(self, strip_product: Callable[[slice, object], np.ndarray]) -> Iterator[np.ndarray]:
        """``strip_product(rows, X[rows])`` for every strip of rows (views, not copies), in order.

        Results are yielded as they come, so a sum over strips holds a few partials, not all.
        """
        n = self.X.shape[0]
        strips = [slice(a, min(a + self.step, n)) for a in range(0, n, self.step)]
        self.passes += 1
        with single_threaded_blas(), ThreadPoolExecutor(min(self.threads, len(strips))) as pool:
            yield from pool.map(
                lambda rows: strip_product(rows, row_view(self.X, rows.start, rows.stop)), strips)

    def times(self, V: np.ndarray) -> np.ndarray:
        return np.vstack(list(self._map(
            lambda rows, block: centred_times(block, V, self.mean, self.dtype))))

    def rtimes(self, U: np.ndarray) -> np.ndarray:
        return sum(self._map(lambda rows, block: centred_rtimes(block, U[rows], self.mean, self.dtype)))

    def scatter_times(self, V: np.ndarray) -> np.ndarray:
        return sum(self._map(lambda rows, block: centred_rtimes(
            block, centred_times(block, V, self.mean, self.dtype), self.mean, self.dtype)))

    def gram_times(self, U: np.ndarray) -> np.ndarray:
        return self.times(self.rtimes(U))  # rows in memory: two sweeps cost no reading


@dataclass
class RandomizedResult:
    """Mean, eigenvalues of ``X_cᵀ X_c``, unit directions and total variance, with diagnostics.

    Unpacks as ``mean, eigenvalues, vectors, total``.

    Attributes
    ----------
    mean : (d,) array
    eigenvalues : (k,) array, descending
    vectors : (d, k) array
    total : float
        Trace of the covariance (``n - 1`` in the denominator).
    n_passes : int
        Passes over the data, the statistics pass included.
    converged : bool
    residual : float
        Largest relative residual of the returned pairs (see
        :func:`dkpca.linalg.block_krylov_eigh`).
    """

    mean: np.ndarray
    eigenvalues: np.ndarray
    vectors: np.ndarray
    total: float
    n_passes: int
    converged: bool
    residual: float

    def __iter__(self) -> Iterator:
        return iter((self.mean, self.eigenvalues, self.vectors, self.total))


def fit_randomized_pca(
    X: np.ndarray | scipy.sparse.sparray | da.Array,
    k: int,
    *,
    seed: np.random.SeedSequence,
    tol: float = 1e-6,
    max_iter: int = 100,
    oversampling: int | None = None,
    max_basis: int | None = None,
) -> RandomizedResult:
    """Leading ``k`` principal directions of ``X`` by block Krylov on the centred data.

    Parameters
    ----------
    X : numpy array, scipy.sparse matrix or dask array (dense or sparse blocks), (n, d)
        Any chunking; never copied whole nor densified.
    k : int
        Components wanted, at most ``min(n, d)``.
    seed : numpy.random.SeedSequence
        Seeds the Gaussian starting block.
    tol : float, default=1e-6
        Largest residual ``||A u - θ u||``, relative to the first eigenvalue ``θ_1``. Every
        returned eigenvalue is then within ``tol · θ_1`` of a true one (and, with a gap
        ``g`` to the rest of the spectrum, within ``tol² θ_1² / g``).
    max_iter : int, default=100
        Most products with the operator.
    oversampling : int, optional
        Extra columns in the block: by default ``max(10, k // 2)``.
    max_basis : int, optional
        Most basis columns kept on the client (thick restart beyond); by default
        the whole space when ``min(n, d) <= 2048``, else ``12 b``.

    Returns
    -------
    RandomizedResult
        Unpacks as ``mean, eigenvalues, vectors, total``.

    Notes
    -----
    Memory on the client: two ``m × max_basis`` arrays (``m = min(n, d)``) and one
    ``max(n, d) × b`` block; on a worker, one stripe of blocks while its partial product
    forms (a row stripe for tall data, a feature stripe for wide), and per task a slab
    of about 1 MiB. Work: ``O(nnz(X) · b)`` per pass, ``O(m · max_basis · b)`` on the client.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.random.default_rng(0).normal(size=(300, 40)) * np.linspace(5, 1, 40)
    >>> result = fit_randomized_pca(X, 3, seed=np.random.SeedSequence(0), tol=1e-10)
    >>> exact = np.linalg.eigvalsh(np.cov(X, rowvar=False) * 299)[::-1][:3]
    >>> bool(np.allclose(result.eigenvalues, exact, rtol=1e-10))
    True
    """
    n, d = X.shape
    chunked = _as_chunked(X)
    blocks = chunked.to_delayed()
    in_memory = not isinstance(X, da.Array)
    # in-memory data stay in this process, whose threads run the products: under a
    # distributed client the statistics must not ship them to the workers inside a graph
    with dask.config.set(scheduler="threads") if in_memory else contextlib.nullcontext():
        mean, m2, block_bytes = block_statistics(blocks)
    check_finite_statistics(mean, m2)
    total = float(m2.sum()) / (n - 1)
    dtype = product_dtype(np.dtype(X.dtype), tol)
    if in_memory:
        operator = _InMemoryOperator(X, mean, dtype)
    else:
        operator = _CentredOperator(blocks, chunked.chunks[0], chunked.chunks[1], mean, dtype)
    operator.passes = 1
    side = min(n, d)
    width = min(side, k + (oversampling if oversampling is not None else max(10, k // 2)))
    if max_basis is not None:
        basis_cap = max(max_basis, min(side, 2 * width))
    elif side <= _FULL_BASIS:  # small: the basis may span the whole space (no restart)
        basis_cap = side
    else:
        basis_cap = min(side, 12 * width)
    start = np.random.default_rng(seed).standard_normal((side, width))
    # One pass a product holds a row (tall) or feature (wide) stripe of blocks on a worker;
    # stripes larger than its budget take two passes a product and hold one block at a time.
    stripe_bytes = int(block_bytes.sum(axis=1 if d <= n else 0).max())
    if in_memory:
        matmul = operator.scatter_times if d <= n else operator.gram_times
    elif stripe_bytes <= min(budget := _stripe_budget(), HELD_SHARE * free_memory_per_thread()) \
            and (groups := stripe_groups(chunked, d <= n, scheduler_threads())) is not None:
        operator.groups = groups
        logger.info("randomized PCA: a pass is %d tasks, each reading its blocks", len(groups))
        matmul = operator.scatter_groups if d <= n else operator.gram_groups
    elif stripe_bytes > budget:
        logger.info("randomized PCA: stripes of %d bytes exceed the budget, two passes a "
                    "product", stripe_bytes)
        if d <= n:
            def matmul(V: np.ndarray) -> np.ndarray:
                return operator.rtimes(operator.times(V))
        else:
            def matmul(U: np.ndarray) -> np.ndarray:
                return operator.times(operator.rtimes(U))
    else:
        matmul = operator.scatter_times if d <= n else operator.gram_times
    result = block_krylov_eigh(matmul, start, k, tol=tol, max_iter=max_iter,
                               max_basis=basis_cap if basis_cap < side else None)
    eigenvalues = np.maximum(result.eigenvalues, 0.0)
    if d <= n:
        vectors = result.eigenvectors
    else:  # w = X_cᵀ u / sqrt(λ); directions without variance are completed by the caller
        # Maintenance note: a Ritz vector u keeps a component of about r·θ₁/(θ₁ - θ) ≈ r
        # (r the relative residual) along the leading eigenvectors, which X_cᵀ u / sqrt(θ)
        # magnifies to r·sqrt(θ₁ / θ): below r²·θ₁ that exceeds the direction itself. Below
        # about n·eps·θ₁ (the rounding of the n × n products, as in the gram solver) θ is
        # rounding itself. Above both the pair is kept; orthonormal_tail removes what the
        # rounding left of the leading directions in the small ones.
        floor = max(side * np.finfo(np.float64).eps, float(result.residual) ** 2)
        positive = eigenvalues > max(eigenvalues[0], 0.0) * floor if len(eigenvalues) else []
        vectors = operator.rtimes(result.eigenvectors[:, positive]) / np.sqrt(
            eigenvalues[positive])
        eigenvalues = eigenvalues[positive]
        vectors = flip_signs(orthonormal_tail(vectors, eigenvalues))
    if not result.converged:
        warnings.warn(
            f"PCA: the randomized solver did not reach tol={tol:g} in max_iter={max_iter} "
            f"passes (residual {result.residual:.3g}); raise max_iter or tol.",
            ConvergenceWarning, stacklevel=3)
    logger.info("randomized PCA: %d passes over the data, residual %.3g",
                operator.passes, result.residual)
    return RandomizedResult(mean, eigenvalues, vectors, total, operator.passes,
                            result.converged, float(result.residual))

