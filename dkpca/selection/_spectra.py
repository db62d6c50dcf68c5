"""Centred RBF kernel spectra over a grid of widths, from one squared-distance matrix.

Every model-selection method compares eigenvalue spectra of centred RBF kernel matrices
``exp(-r² / (2σ²))`` at many ``σ²``: the data's, and those of noise (MDD's drawn distance
matrices, kernel parallel analysis's permuted data). The distances do not depend on ``σ²``, so
each matrix of squared distances is computed once and reused across the whole grid.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dkpca._device import array_module, into, to_device, to_host, writes_in_place

__all__ = ["centred_rbf_eigenvalues", "squared_distances"]

#: numpy's eigensolvers release the GIL only when (matrices in the call) × order > 500.
_GIL_FREE_ROWS = 501

#: Most bytes of kernel matrices solved in one batched call on a GPU.
GPU_STACK_BYTES = 2**31


def squared_distances(X: np.ndarray) -> np.ndarray:
    """All squared Euclidean distances between the rows of ``X``, in float64.

    The rows are centred first (distances do not change) so that the GEMM expansion
    ``|x|² + |y|² - 2<x, y>`` does not cancel catastrophically for data far from the origin;
    rounding residue is clipped at zero and the diagonal is exactly zero.

    Examples
    --------
    >>> squared_distances(np.array([[0.0, 0.0], [3.0, 4.0]]))
    array([[ 0., 25.],
           [25.,  0.]])
    """
    X = np.asarray(X, dtype=np.float64)
    X = X - X.mean(axis=0)
    norms = np.einsum("ij,ij->i", X, X)
    D2 = X @ X.T
    D2 *= -2.0
    D2 += norms[:, None]
    D2 += norms[None, :]
    np.maximum(D2, 0.0, out=D2)
    np.fill_diagonal(D2, 0.0)
    return D2


def centred_rbf_eigenvalues(
    sq_distances: np.ndarray, sigma2_grid: np.ndarray, n_eigenvalues: int | np.ndarray,
    device: str = "cpu",
) -> np.ndarray:
    """Leading eigenvalues of ``H exp(-D / (2σ²)) H`` for every ``σ²`` of the grid.

    Parameters
    ----------
    sq_distances : (n, n) array
        Squared distances ``D`` (symmetric, zero diagonal).
    sigma2_grid : (g,) array
    n_eigenvalues : int
        How many leading eigenvalues to keep.
    device : {"cpu", "cuda"}, default="cpu"
        Where the kernels are formed and solved. On ``"cuda"`` ``D`` is copied to the GPU
        once and the grid's matrices are solved there in batches of up to
        :data:`GPU_STACK_BYTES` (CuPy's batched ``eigvalsh``); the eigenvalues come back.

    Returns
    -------
    (g, n_eigenvalues) float64 array, each row descending. Eigenvalues are those of the centred
    kernel matrix itself (not divided by ``n``), as in the MDD paper's eq. (4).

    Notes
    -----
    Each matrix gets a full LAPACK solve: on these matrices the partial solvers (``evr``/``evx``
    with an index range) were slower than the full one even for 50 of 1000 eigenvalues (the
    tridiagonal reduction dominates), and Lanczos crawls on the clustered spectra of noise
    kernels at small ``σ²``.

    Maintenance note: the draws run as tasks on threads, so the solve must release the GIL.
    :func:`scipy.linalg.eigh` holds it for the whole LAPACK call; :func:`numpy.linalg.eigvalsh`
    (LAPACK ``syevd``, the same eigenvalues as scipy's ``driver="evd"`` bit for bit) releases
    it, but only when its matrices times their order exceed 500 (numpy's threshold for small
    loops). Matrices of order ``n <= 500`` are therefore solved in stacks of
    ``⌈501 / n⌉`` widths; each matrix's eigenvalues do not depend on the stack.
    ``tests/test_selection.py`` checks that another thread runs during the solves.

    Examples
    --------
    At a tiny width the kernel matrix is the identity, and centring leaves ``n - 1`` unit
    eigenvalues:

    >>> D = squared_distances(np.array([[0.0], [1.0], [3.0]]))
    >>> centred_rbf_eigenvalues(D, np.array([1e-6]), 2)
    array([[1., 1.]])
    """
    n = sq_distances.shape[0]
    k = min(int(n_eigenvalues), n)
    out = np.empty((len(sigma2_grid), k))
    D = to_device(sq_distances, device)
    xp = array_module(D)
    if device == "cpu":
        stack = min(len(sigma2_grid), -(-_GIL_FREE_ROWS // n))
    else:
        stack = min(len(sigma2_grid), max(1, GPU_STACK_BYTES // (8 * n * n)))
    K = xp.empty((stack, n, n), dtype=xp.float64)
    for start in range(0, len(sigma2_grid), stack):
        widths = sigma2_grid[start : start + stack]
        kernels = K[: len(widths), ...]
        for s, sigma2 in enumerate(widths):
            _centred_rbf_into(kernels[s, ...], D, float(sigma2))
        values = _eigvalsh(kernels)
        out[start : start + len(widths)] = to_host(values)[:, ::-1][:, :k]
    return out


def _centred_rbf_into(K: Any, D: Any, sigma2: float) -> None:
    """Write ``H exp(-D / (2σ²)) H`` into ``K``, all of it.

    The standard's solvers may read either triangle; the upper one equals, bit for bit, what
    :func:`~dkpca.blocked.center_kernel_inplace` makes.
    """
    xp = array_module(K)
    into(xp, "multiply", D, -0.5 / sigma2, out=K)
    into(xp, "exp", K, out=K)
    row_means = xp.mean(K, axis=0)
    K -= row_means
    K -= xp.reshape(row_means, (-1, 1))
    K += float(xp.mean(row_means))


def _eigvalsh(kernels: Any) -> Any:
    """Return the ascending eigenvalues of a stack of symmetric matrices.

    From their upper triangles where the library lets one choose (numpy and CuPy).
    """
    xp = array_module(kernels)
    if writes_in_place(xp):
        return xp.linalg.eigvalsh(kernels, UPLO="U")
    return xp.linalg.eigvalsh(kernels)
