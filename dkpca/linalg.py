"""Symmetric eigen-solvers: dense top-k ``eigh`` and a block Krylov method on an operator.

Dask has no ``eigh``; kernel PCA needs the leading eigenpairs of a symmetric matrix that may
only exist as a blocked operator (``V -> K_c V``). :func:`block_krylov_eigh` needs nothing but
that product.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.linalg
from threadpoolctl import ThreadpoolController

__all__ = ["KrylovResult", "block_krylov_eigh", "crossproduct", "flip_signs", "top_eigh"]

logger = logging.getLogger(__name__)


def flip_signs(vectors: np.ndarray) -> np.ndarray:
    """Make the largest-magnitude entry of every column positive (in place), as ``svd_flip``.

    Examples
    --------
    >>> import numpy as np
    >>> flip_signs(np.array([[1.0], [-3.0]])).ravel()
    array([-1.,  3.])
    """
    if vectors.size:
        rows = np.argmax(np.abs(vectors), axis=0)
        signs = np.sign(vectors[rows, np.arange(vectors.shape[1])])
        signs[signs == 0] = 1.0
        vectors *= signs
    return vectors


@functools.cache
def _blas_controller() -> ThreadpoolController:
    return ThreadpoolController()


def _blas_single_threaded() -> bool:
    threads = [
        lib.get_num_threads() for lib in _blas_controller().select(user_api="blas").lib_controllers
    ]
    return bool(threads) and max(threads) == 1


def crossproduct(A: np.ndarray) -> np.ndarray:
    """Return ``Aᵀ A`` of a 2-D array, through BLAS ``syrk`` (half a GEMM's work) when safe.

    OpenBLAS's multithreaded ``syrk`` can crash or return garbage on large products (API-NOTES
    §9.5), so it is used only while BLAS runs on one thread, as inside dkpca's tasks (see
    :func:`dkpca.blocked.compute`); otherwise the product is a GEMM on a copy, which never
    reaches ``syrk``.

    Examples
    --------
    >>> import numpy as np
    >>> crossproduct(np.array([[1.0, 2.0], [3.0, 4.0]]))
    array([[10., 14.],
           [14., 20.]])
    """
    if A.dtype not in (np.float32, np.float64) or not _blas_single_threaded():
        return A.T @ A.copy()
    syrk = scipy.linalg.get_blas_funcs("syrk", (A,))
    # syrk(a, trans=0) is a aᵀ, trans=1 is aᵀ a; hand it whichever is Fortran-ordered (no copy).
    G = syrk(1.0, A.T, trans=0) if A.flags.c_contiguous else syrk(1.0, A, trans=1)
    G += np.triu(G, 1).T  # syrk fills the upper triangle only; the lower one is zero
    return G


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
    w, V = scipy.linalg.eigh(
        A.T, lower=True, subset_by_index=subset, overwrite_a=overwrite, check_finite=False
    )
    return w[::-1].copy(), flip_signs(V[:, ::-1].copy())


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


def _combine(blocks: list[np.ndarray], S: np.ndarray) -> np.ndarray:
    """``[B_0 B_1 ...] @ S`` without stacking the blocks."""
    out, row = 0.0, 0
    for block in blocks:
        out = out + block @ S[row : row + block.shape[1]]
        row += block.shape[1]
    return out


def _orthonormal_complement(
    W: np.ndarray, blocks: list[np.ndarray] | None, threshold: float
) -> np.ndarray:
    """Orthonormal basis of ``W``'s part outside the span of ``blocks``, minus tiny directions."""
    for _ in range(2 if blocks else 0):  # block Gram–Schmidt twice: stable to working precision
        for Q in blocks:
            W = W - Q @ (Q.T @ W)
    U, s, _ = np.linalg.svd(W, full_matrices=False)
    return U[:, s > threshold]


def block_krylov_eigh(
    matmul: Callable[[np.ndarray], np.ndarray],
    start: np.ndarray,
    k: int,
    *,
    tol: float = 1e-6,
    max_iter: int = 20,
) -> KrylovResult:
    """Leading eigenpairs of a symmetric operator by block Lanczos with full reorthogonalisation.

    Starting from the block ``start`` (``n × b``, ``b >= k``), every pass multiplies the newest
    orthonormal block ``Q_j`` by the operator and orthogonalises the product against all
    previous blocks to get ``Q_{j+1}``. Because ``A Q`` is known for the whole basis, the
    Rayleigh–Ritz step and the residuals ``||A u - θ u||`` cost no extra pass. Iteration stops
    when every one of the ``k`` leading residuals is below ``tol · |θ_1|``, when the Krylov
    space becomes invariant, or after ``max_iter`` passes.

    Parameters
    ----------
    matmul : callable
        ``V -> A @ V`` for an ``(n, b)`` array ``V``.
    start : (n, b) array
        Starting block (random, for a randomized method).
    k : int
        Number of eigenpairs wanted.
    tol : float, default=1e-6
        Relative residual tolerance.
    max_iter : int, default=20
        Maximum number of operator passes.

    Returns
    -------
    KrylovResult

    Notes
    -----
    Memory is two ``n × (passes · b)`` arrays (the basis and its image). The residual bounds
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
    n = start.shape[0]
    if not 1 <= k <= min(n, start.shape[1]):
        raise ValueError(f"need 1 <= k <= block width ({start.shape[1]}) and n ({n}), got {k}")
    blocks = [_orthonormal_complement(start, None, 1e-12 * np.linalg.norm(start, 2))]
    images: list[np.ndarray] = []
    B = np.zeros((0, 0))
    converged, residual = False, np.inf
    for n_pass in range(1, max_iter + 1):
        images.append(matmul(blocks[-1]))
        # B = Qᵀ A Q grows by one block column (and, A being symmetric, its transpose).
        column = np.vstack([Qj.T @ images[-1] for Qj in blocks])
        m = column.shape[0]
        grown = np.empty((m, m))
        grown[: B.shape[0], : B.shape[0]] = B
        grown[:, B.shape[0] :] = column
        grown[B.shape[0] :, : B.shape[0]] = column[: B.shape[0]].T
        B = (grown + grown.T) / 2
        theta, S = np.linalg.eigh(B)
        order = np.argsort(theta)[::-1][:k]
        theta, S = theta[order], S[:, order]
        scale = max(abs(theta[0]), np.finfo(float).tiny)
        vectors, image = _combine(blocks, S), _combine(images, S)
        residual = float(np.linalg.norm(image - vectors * theta, axis=0).max() / scale)
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
        new = _orthonormal_complement(images[-1], blocks, 1e-12 * scale)
        if new.shape[1] == 0 or m >= n:  # invariant subspace: Ritz pairs are exact
            converged = True
            break
        blocks.append(new)
    return KrylovResult(
        eigenvalues=theta,
        eigenvectors=flip_signs(vectors),
        n_passes=n_pass,
        converged=converged,
        residual=residual,
    )
