"""Symmetric eigen-solvers: dense top-k ``eigh`` and a block Krylov method on an operator.

Dask has no ``eigh``; kernel PCA needs the leading eigenpairs of a symmetric matrix that may
only exist as a blocked operator (``V -> K_c V``). :func:`block_krylov_eigh` needs nothing but
that product.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg
from threadpoolctl import ThreadpoolController

from ._device import array_module, is_device_array

__all__ = [
    "FLOAT32_MIN_TOL",
    "KrylovResult",
    "blas_controller",
    "blas_single_threaded",
    "block_krylov_eigh",
    "column_sums",
    "crossproduct",
    "flip_signs",
    "single_threaded_blas",
    "small_eigh_threads",
    "top_eigh",
]

logger = logging.getLogger(__name__)

#: Tolerances at least this loose are reached with float32 products summed in float64 (kernel
#: tiles, linear PCA's blocks): such products are accurate to about 1e-7 of the first
#: eigenvalue, and a Krylov residual is relative to the first eigenvalue.
FLOAT32_MIN_TOL = 1e-6


def flip_signs(vectors: np.ndarray) -> np.ndarray:
    """Make the largest-magnitude entry of every column positive (in place), as ``svd_flip``.

    Examples
    --------
    >>> import numpy as np
    >>> flip_signs(np.array([[1.0], [-3.0]])).ravel()
    array([-1.,  3.])
    """
    if vectors.shape[0] and vectors.shape[1]:
        xp = array_module(vectors)
        rows = xp.argmax(xp.abs(vectors), axis=0)
        signs = xp.sign(xp.take_along_axis(vectors, rows[None, :], axis=0))
        vectors *= xp.where(signs == 0, xp.ones_like(signs), signs)
    return vectors


def blas_controller() -> ThreadpoolController:
    """Return a cached ``threadpoolctl`` controller of the process's BLAS libraries.

    Building a controller scans every loaded library (a quarter of a MiB of transient objects
    and a few milliseconds); the cache is rebuilt when modules were imported since, which is
    when a new BLAS can appear.

    Examples
    --------
    >>> with blas_controller().limit(limits=1, user_api="blas"):
    ...     blas_single_threaded()
    True
    """
    return _controller_for(len(sys.modules))


@functools.lru_cache(maxsize=1)
def _controller_for(module_count: int) -> ThreadpoolController:
    return ThreadpoolController()


_limit_lock = threading.Lock()
_limit_depth = 0
_limiter: object | None = None


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Hold BLAS to one thread while the block runs, from any number of threads at once.

    BLAS thread counts are process-wide. Parallel tasks that each call BLAS must run it on one
    thread (their own parallelism supplies the cores; more BLAS threads oversubscribe them),
    and such blocks overlap: tasks on several dask threads, several workers of an in-process
    cluster. Plain nested ``threadpool_limits`` from several threads race (one restores the
    count while another still needs one thread, or leaves BLAS at one thread for good), so the
    limit is counted: the first block entered sets it, the last one left restores it.

    Examples
    --------
    >>> with single_threaded_blas():
    ...     blas_single_threaded()
    True
    """
    global _limit_depth, _limiter
    with _limit_lock:
        if _limit_depth == 0:
            _limiter = blas_controller().limit(limits=1, user_api="blas")
        _limit_depth += 1
    try:
        yield
    finally:
        with _limit_lock:
            _limit_depth -= 1
            if _limit_depth == 0:
                _limiter.restore_original_limits()
                _limiter = None


def blas_single_threaded() -> bool:
    """Whether BLAS runs on one thread now (inside dkpca's tasks, or under a threadpool limit).

    Examples
    --------
    >>> from threadpoolctl import threadpool_limits
    >>> with threadpool_limits(1, user_api="blas"):
    ...     blas_single_threaded()
    True
    """
    threads = [
        lib.get_num_threads() for lib in blas_controller().select(user_api="blas").lib_controllers
    ]
    return bool(threads) and max(threads) == 1


def crossproduct(A: np.ndarray) -> np.ndarray:
    """Return ``Aᵀ A`` of a 2-D array, through BLAS ``syrk`` (half a GEMM's work) when safe.

    numpy multiplies a buffer by its own transpose with ``syrk`` and releases the GIL while it
    runs, so tasks on several threads overlap (scipy's ``syrk`` wrapper holds the GIL, which
    serialised them). OpenBLAS's multithreaded ``syrk`` can crash or return garbage on large
    products (OpenBLAS 0.3.31 on two threads: from about 15,500 × 128 float64 rows up), so
    that path is taken only while BLAS runs on one thread, as
    inside dkpca's tasks (see :func:`dkpca.blocked.compute`); otherwise the product is a GEMM
    on a copy, which never reaches ``syrk``.

    Examples
    --------
    >>> import numpy as np
    >>> crossproduct(np.array([[1.0, 2.0], [3.0, 4.0]]))
    array([[10., 14.],
           [14., 20.]])
    """
    if is_device_array(A):
        return _device_crossproduct(A)
    if not isinstance(A, np.ndarray):  # another array API library: its own product
        return A.T @ A
    if A.dtype in (np.float32, np.float64) and blas_single_threaded():
        return A.T @ A
    return A.T @ A.copy()


def _device_crossproduct(A: Any) -> Any:
    """``Aᵀ A`` of a CuPy array through cuBLAS ``syrk``: CuPy's ``@`` always runs a GEMM."""
    if A.dtype not in (np.float32, np.float64):
        return A.T @ A
    from cupy import cublas  # only ever reached with CuPy imported

    upper = cublas.syrk("N", A.T)  # A.T of a C-ordered strip is F-ordered: no copy
    return upper + array_module(A).triu(upper, 1).T


def column_sums(A: Any) -> Any:
    """Return the sums of a 2-D array's columns, in float64.

    On a GPU the sum is a product with a row of ones, in ``A``'s precision, then cast: CuPy's
    reduction along the rows of a C-ordered array reads it with a stride, and on an H100 took
    0.86 ms for a 33,554 × 2,000 float32 strip against 0.12 ms for the product (cuBLAS sums
    in blocks, so a float32 sum of 33,554 values loses about as much as the strip's float32
    ``syrk`` beside it). Elsewhere each value is cast and summed in float64.

    Examples
    --------
    >>> import numpy as np
    >>> column_sums(np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32))
    array([4., 6.])
    """
    xp = array_module(A)
    if is_device_array(A) and A.dtype in (np.float32, np.float64):
        return (xp.ones(A.shape[0], dtype=A.dtype) @ A).astype(np.float64)
    return xp.sum(A, axis=0, dtype=xp.float64)


def top_eigh(
    A: np.ndarray, k: int | None = None, *, overwrite: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Return the ``k`` largest eigenpairs of a symmetric matrix, in descending order.

    Parameters
    ----------
    A : (n, n) array
        Symmetric; only its upper triangle (in C order) is read.
    k : int, optional
        Number of eigenpairs; ``None`` for all of them.
    overwrite : bool, default=False
        Let LAPACK use ``A`` as workspace (saves one n×n copy; ``A`` is destroyed).

    Examples
    --------
    >>> import numpy as np
    >>> w, V = top_eigh(np.diag([1.0, 3.0, 2.0]), 2)
    >>> w
    array([3., 2.])
    """
    n = A.shape[0]
    subset = None if k is None or k >= n else (n - k, n - 1)
    # Maintenance note: LAPACK wants Fortran order; a C-ordered A would be copied whole. Its
    # transpose is a Fortran-ordered view, and its lower triangle is A's upper one.
    with small_eigh_threads(n):
        w, V = scipy.linalg.eigh(
            A.T, lower=True, subset_by_index=subset, overwrite_a=overwrite, check_finite=False
        )
    return w[::-1].copy(), flip_signs(V[:, ::-1].copy())


#: Symmetric eigenproblems up to this size run on one BLAS thread (:func:`small_eigh_threads`).
SMALL_EIGH_ONE_THREAD = 1024


def small_eigh_threads(n: int) -> contextlib.AbstractContextManager:
    """One BLAS thread for an ``n × n`` eigenproblem up to :data:`SMALL_EIGH_ONE_THREAD`.

    Multithreaded LAPACK gains little at these sizes, and when the cores are busy (dask
    workers, another job) its threads wait on each other: an eigh of 256 × 256 took 0.5 s on
    two loaded cores against 13 ms on one thread, and a covariance ``top_eigh`` of 560 × 560
    4.5 s against 0.03 s. Larger problems keep every thread.

    Examples
    --------
    >>> with small_eigh_threads(100):
    ...     blas_single_threaded()
    True
    """
    return single_threaded_blas() if n <= SMALL_EIGH_ONE_THREAD else contextlib.nullcontext()


@dataclass
class KrylovResult:
    """Outcome of :func:`block_krylov_eigh`.

    Attributes
    ----------
    eigenvalues : (k,) array, descending
    eigenvectors : (n, k) array, orthonormal columns
    n_passes : int
        Products with the operator.
    converged : bool
        Whether every residual reached the tolerance.
    residual : float
        Largest ``||A u - θ u|| / |θ_1|`` over the returned pairs.
    """

    eigenvalues: np.ndarray
    eigenvectors: np.ndarray
    n_passes: int
    converged: bool
    residual: float


#: Directions of a new block whose squared singular value (columns normalised) falls below
#: this fraction of the largest are linearly dependent on the others and dropped.
DEPENDENT_GRAM = 1e-14

#: Rayleigh–Ritz matrices up to this size are decomposed whole.
_SMALL_EIGH = 256


def _column_norms(xp: Any, W: Any) -> Any:
    """Euclidean norms of ``W``'s columns, in the functions every array library has."""
    return xp.sqrt(xp.sum(W * W, axis=0))


def _columns(xp: Any, shape: tuple[int, int]) -> Any:
    """Return an empty float64 matrix, its columns contiguous where the library can say so.

    The Krylov basis grows and is read by column blocks; numpy and CuPy take ``order="F"``,
    which the array API standard leaves out.
    """
    if hasattr(xp, "asfortranarray"):
        return xp.empty(shape, order="F")
    return xp.empty(shape, dtype=xp.float64)


def _contiguous(xp: Any, x: Any) -> Any:
    """Return a contiguous copy of ``x`` (numpy and CuPy multiply strided views slowly)."""
    if hasattr(xp, "ascontiguousarray"):
        return xp.ascontiguousarray(x)
    return xp.asarray(x, copy=True)


def _orthonormal_complement(
    W: np.ndarray, basis: np.ndarray, threshold: float, coefficients: np.ndarray | None = None
) -> np.ndarray:
    """Orthonormal basis of ``W``'s part outside the span of ``basis``, minus tiny directions.

    Classical Gram–Schmidt against the whole basis at once, columns below ``threshold``
    dropped, SVQB (orthonormalisation through the eigendecomposition of the small Gram
    matrix, dropping dependent directions), and both steps once more: orthogonal to working
    precision, in GEMMs only (tall-skinny QR and SVD run far slower on this kind of machine).
    ``coefficients``, if given, is ``basisᵀ W``, already known to the caller.

    References
    ----------
    A. Stathopoulos and K. Wu, "A block orthogonalization procedure with constant
    synchronization requirements", SIAM J. Sci. Comput. 23(6), 2002.
    """
    xp = array_module(W)
    if basis.shape[1]:
        W = W - basis @ (basis.T @ W if coefficients is None else coefficients)
    norms = _column_norms(xp, W)
    kept = xp.nonzero(norms > threshold)[0]
    W = xp.take(W, kept, axis=1) / xp.take(norms, kept)
    for sweep in range(2):
        if W.shape[1] == 0:
            break
        with small_eigh_threads(W.shape[1]):
            lam, V = xp.linalg.eigh(crossproduct(W))
        good = xp.nonzero(lam > DEPENDENT_GRAM * lam[-1])[0]
        W = W @ (xp.take(V, good, axis=1) / xp.sqrt(xp.take(lam, good)))
        if sweep == 0 and basis.shape[1]:
            W = W - basis @ (basis.T @ W)
    return W


def _top_eigh(B: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Return the ``k`` largest eigenpairs of a small symmetric matrix, in descending order.

    On one BLAS thread up to :data:`SMALL_EIGH_ONE_THREAD` (:func:`small_eigh_threads`; a
    Krylov fit on two loaded cores spent a quarter of its time here on all threads). On a GPU
    ``B`` stays there and is decomposed whole.
    """
    m = B.shape[0]
    xp = array_module(B)
    with small_eigh_threads(m):
        if m <= _SMALL_EIGH or xp is not np:
            theta, S = xp.linalg.eigh(B)
        else:  # a few eigenpairs of a larger matrix: MRRR on an index range is 3x faster
            theta, S = scipy.linalg.eigh(
                B, subset_by_index=(m - k, m - 1), driver="evr", check_finite=False
            )
    # Contiguous copies: numpy multiplies a negatively strided operand without BLAS.
    return _contiguous(xp, theta[::-1][:k]), _contiguous(xp, S[:, ::-1][:, :k])


def block_krylov_eigh(
    matmul: Callable[[np.ndarray], np.ndarray],
    start: np.ndarray,
    k: int,
    *,
    tol: float = 1e-6,
    max_iter: int = 20,
    max_basis: int | None = None,
) -> KrylovResult:
    """Leading eigenpairs of a symmetric operator by block Lanczos with full reorthogonalisation.

    Starting from the block ``start`` (``n × b``, ``b >= k``), every pass multiplies the newest
    orthonormal block ``Q_j`` by the operator and orthogonalises the product against all
    previous blocks to get ``Q_{j+1}``. Because ``A Q`` is known for the whole basis, the
    Rayleigh–Ritz step and the residuals ``||A u - θ u||`` cost no extra pass. Iteration stops
    when every one of the ``k`` leading residuals is below ``tol · |θ_1|``, when the Krylov
    space becomes invariant, or after ``max_iter`` passes.

    When the next block would take the basis past ``max_basis`` columns, the iteration
    restarts *thick*: the basis shrinks to the ``b`` leading Ritz vectors (their images are
    combinations of the known ones, so no pass is spent) and continues from their residuals.

    Parameters
    ----------
    matmul : callable
        ``V -> A @ V`` for an ``(n, b)`` array ``V``, returned on ``V``'s device.
    start : (n, b) array
        Starting block (random, for a randomized method). A CuPy block keeps the iteration
        on its GPU: the basis, its image, the orthogonalisation and the Rayleigh–Ritz step;
        only scalars (the scale and residual of each pass) come to the host.
    k : int
        Number of eigenpairs wanted.
    tol : float, default=1e-6
        Relative residual tolerance.
    max_iter : int, default=20
        Maximum number of operator passes.
    max_basis : int, optional
        Most columns the basis may hold (at least twice the block width); unbounded
        (``max_iter · b``) by default.

    Returns
    -------
    KrylovResult
        Its eigenpairs on ``start``'s device.

    Notes
    -----
    Memory is two ``n × min(max_iter · b, max_basis)`` arrays (the basis and its image, their
    pages committed as they fill); the client-side work per pass grows with the basis,
    ``O(n · columns · b)``. The residual bounds
    the error: eigenvalue errors are at most ``residual² / gap`` and eigenvector angles
    ``residual / gap``, relative to ``|θ_1|``.

    References
    ----------
    C. Musco and C. Musco, "Randomized block Krylov methods for stronger and faster
    approximate singular value decomposition", NeurIPS 2015.

    Examples
    --------
    >>> import numpy as np
    >>> A = np.diag(np.arange(1.0, 101.0))
    >>> start = np.random.default_rng(0).normal(size=(100, 8))
    >>> res = block_krylov_eigh(lambda V: A @ V, start, 3, tol=1e-10, max_iter=30)
    >>> np.round(res.eigenvalues, 8)
    array([100.,  99.,  98.])
    """
    n, width = start.shape
    if not 1 <= k <= min(n, width):
        raise ValueError(f"need 1 <= k <= block width ({width}) and n ({n}), got {k}")
    capacity = min(n, max_iter * width)
    if max_basis is not None:
        if max_basis < 2 * width:
            raise ValueError(f"max_basis={max_basis} must be at least twice the block width "
                             f"({width})")
        capacity = min(capacity, max_basis)
    restartable = capacity < min(n, max_iter * width)
    xp = array_module(start)
    # The basis and its image, filled block by block (pages are committed as columns fill).
    basis, images = _columns(xp, (n, capacity)), _columns(xp, (n, capacity))
    first = _orthonormal_complement(start, basis[:, :0],
                                    1e-12 * float(xp.sqrt(xp.sum(start * start))))
    low, m = 0, first.shape[1]
    basis[:, :m] = first
    B = xp.zeros((0, 0), dtype=xp.float64)
    converged, residual = False, np.inf
    for n_pass in range(1, max_iter + 1):
        images[:, low:m] = matmul(basis[:, low:m])
        # B = Qᵀ A Q grows by one block column (and, A being symmetric, its transpose).
        column = basis[:, :m].T @ images[:, low:m]
        grown = xp.empty((m, m), dtype=xp.float64)
        grown[:low, :low] = B
        grown[:, low:] = column
        grown[low:, :low] = column[:low, :].T
        B = (grown + grown.T) / 2
        # a thick restart keeps `width` Ritz pairs; without one only the k wanted are needed
        theta_all, S_all = _top_eigh(B, min(m, max(k, width) if restartable else k))
        theta, S = theta_all[:k], S_all[:, :k]
        scale = max(abs(float(theta[0])), np.finfo(float).tiny)
        vectors, image = basis[:, :m] @ S, images[:, :m] @ S
        residual = float(xp.max(_column_norms(xp, image - vectors * theta)) / scale)
        logger.info(
            "Krylov pass %d of at most %d: residual %.3g (tol %.3g)",
            n_pass,
            max_iter,
            residual,
            tol,
        )
        if residual <= tol:
            converged = True
            break
        if n_pass == max_iter:
            break
        if m + width > capacity and capacity < n:  # thick restart on the leading Ritz vectors
            kept = S_all.shape[1]
            ritz, ritz_images = basis[:, :m] @ S_all, images[:, :m] @ S_all
            basis[:, :kept], images[:, :kept] = ritz, ritz_images
            B = column = xp.eye(kept, dtype=xp.float64) * theta_all
            low, m = 0, kept
            logger.info("Krylov restart on %d Ritz vectors", kept)
        new = _orthonormal_complement(images[:, low:m], basis[:, :m], 1e-12 * scale, column)
        if new.shape[1] == 0 or m + new.shape[1] > capacity:
            converged = True  # invariant subspace (or the whole space): Ritz pairs are exact
            break
        low, m = m, m + new.shape[1]
        basis[:, low:m] = new
    return KrylovResult(
        eigenvalues=theta,
        eigenvectors=flip_signs(vectors),
        n_passes=n_pass,
        converged=converged,
        residual=residual,
    )
