"""Nyström kernel PCA (tutorial §5.3): landmarks, their feature map, and a one-pass PCA.

The Nyström approximation of the kernel through ``m`` landmarks ``L`` is
``K̃ = K(X, L) K_LL⁻¹ K(L, X) = Φ Φᵀ`` with the feature map ``Φ(x) = K(x, L) K_LL^{-1/2}``.
Kernel PCA of ``K̃``, centred with respect to all ``n`` training points, is linear PCA of the
features: one pass over the data accumulates their sum and ``m × m`` scatter, and the scores of
any point are ``(Φ(x) - mean Φ) U``. So the fitted basis is the landmarks, with
``coef = K_LL^{-1/2} U`` and ``offset = (mean Φ) U``; only ``m × d``, ``m × m`` and ``m × k``
objects are ever gathered, and ``X`` streams through chunk by chunk.

``method="extension"`` gives instead the tutorial's eigen-extension (eqs. 62–63): eigenpairs of
the centred ``K_LL`` scaled to the whole data set (``λ n/m``), with eigenvectors extended by
``K(x, L)``; it costs no pass over the data but is centred on the landmarks only.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from typing import Any

import dask
import dask.array as da
import numpy as np
import scipy.sparse

from dkpca._device import array_module, astype, gpu_alone, to_device, to_host
from dkpca._scattered import shared
from dkpca.blocked import (
    STRIP_BYTES,
    compute,
    kernel_device,
    kernel_diagonal,
    scheduler_threads,
    tree_sum,
    worker_block_bytes,
)
from dkpca.kernels import Kernel
from dkpca.linalg import (
    column_sums,
    crossproduct,
    flip_signs,
    top_eigh,
)
from dkpca.moments import RowStatistics

from ._basis import KernelBasis
from ._components import ComponentRule, positive_part, zero_padded
from ._feature_map import (
    _check_positive_part,
    _warn_if_indefinite_cut,
    feature_map_rcond,
    inverse_sqrt,
)

__all__ = ["as_landmarks", "feature_map_rcond", "fit_nystrom", "inverse_sqrt", "landmark_statistics",
           "nystrom_basis"]

logger = logging.getLogger(__name__)

def _kernel_moments(
    block: np.ndarray, landmarks: np.ndarray, kernel: Kernel, strip: int, shift: np.ndarray,
    device: str = "cpu",
) -> np.ndarray:
    """``[Σ (k - s); Σ (k - s)(k - s)ᵀ; Σ k(x, x)]`` of one row chunk, ``k = k(x, L)``.

    Evaluated in row strips. The last row carries the sum of the kernel's diagonal (in its
    first entry), so the total variance needs no pass of its own over the data.

    The features ``φ = k R`` need not be formed: their moments follow from these, which saves
    an ``n m²`` product. Subtracting ``s`` (close to the mean of ``k``) first keeps the
    centred scatter free of cancellation, so the products may run in the data's precision
    (float32 GEMMs are twice as fast); the sums are accumulated in float64.

    On ``device="cuda"`` the chunk, the landmarks and the shift are copied to the GPU, the
    strips are evaluated and summed there, and the sums stay there (the caller adds the
    chunks' sums on the GPU and brings back only the total). One task at a time issues its
    GPU work (:func:`~dkpca._device.gpu_alone`); the other threads read the next chunks. The
    arithmetic is written against the array API standard (``tests/test_array_api.py``).
    """
    with gpu_alone(device):  # the GPU's work is one task at a time; reading chunks is not
        block, landmarks, shift = (to_device(a, device) for a in (block, landmarks, shift))
        m = landmarks.shape[0]
        xp = array_module(block)
        out = xp.zeros((m + 2, m), dtype=xp.float64)
        for start in range(0, block.shape[0], strip):
            rows = block[start : min(start + strip, block.shape[0]), :]
            K = kernel.pairwise(rows, landmarks)
            K -= astype(shift, K.dtype)
            out[0, :] += column_sums(K)
            out[1 : m + 1, :] += crossproduct(K)
            out[m + 1, 0] += xp.sum(kernel.diag(rows), dtype=xp.float64)
    return out


def landmark_statistics(
    kernel: Kernel, X: da.Array, landmarks: np.ndarray, *, block_bytes: int,
    landmark_kernel: np.ndarray | None = None, owner: str = "KernelPCA",
) -> RowStatistics:
    """One pass over ``X``: the count, mean and scatter of ``k(x, L)``, and ``Σ k(x, x)``.

    This is all that Nyström kernel PCA needs from the data once the landmarks are fixed, and
    a sum over rows: statistics of two batches merge (:meth:`RowStatistics.merge`) into those
    of both, which is how ``partial_fit`` continues a fit.

    Parameters
    ----------
    kernel : Kernel
    X : dask array, (n, d)
    landmarks : (m, d) array or CSR matrix, in ``X``'s dtype
    block_bytes : int
        Memory for one strip of ``K(X, L)`` inside a task.
    landmark_kernel : (m, m) float64 array, optional
        ``K(L, L)``, when the caller has it (evaluated here otherwise).
    owner : str, default="KernelPCA"
        The estimator that messages name.

    Returns
    -------
    RowStatistics
        Of the ``m`` kernel features, with ``diagonal_sum``.

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> from dkpca.kernels import RBF
    >>> X = np.random.default_rng(0).normal(size=(50, 2))
    >>> statistics = landmark_statistics(RBF(gamma=0.5), da.from_array(X, chunks=20), X[:4],
    ...                                  block_bytes=2**20)
    >>> statistics.count, statistics.scatter.shape, statistics.diagonal_sum
    (50, (4, 4), 50.0)
    """
    n, m = X.shape[0], landmarks.shape[0]
    # On the host a strip of k(x, L) and a copy (where syrk is unsafe) take at most half a
    # tile, and at most STRIP_BYTES: the strip is read four times (exp, shift, sum, syrk), from
    # the shared cache while it fits there, and products on a thousand rows already run at
    # full speed. A GPU strip lives in the GPU's memory, not the worker's: its size is the
    # GPU's, whatever block_bytes allows on the host.
    device = kernel_device(kernel, X, landmarks)
    if device == "cuda":
        strip = gpu_strip_rows(m, X.dtype)
    else:
        strip = max(1, min(worker_block_bytes(block_bytes) // 4, STRIP_BYTES)
                    // (m * X.dtype.itemsize))
    # The landmarks' mean kernel row: near the data's mean k(x, L), so nothing cancels.
    K_LL = _landmark_kernel(kernel, landmarks) if landmark_kernel is None else landmark_kernel
    shift = K_LL.mean(axis=0)
    landmark_rows = shared(landmarks)  # one key, not a copy in every task
    parts = [
        dask.delayed(_kernel_moments)(b, landmark_rows, kernel, strip, shift, device)
        for b in _split_for_threads(X.rechunk({1: -1})).to_delayed().ravel()
    ]
    # On a GPU the chunks' (m + 2) × m sums are added there: one copy to the host in all,
    # not one per chunk (10 million rows in 100 chunks, 2,000 landmarks: 3.2 GB).
    start = time.perf_counter()
    (moments,) = compute(dask.delayed(to_host)(tree_sum(parts)))
    logger.info("Nyström pass over %d rows (%d landmarks, %s) in %.2f s", n, m, device,
                time.perf_counter() - start)
    if not np.isfinite(moments).all():
        raise ValueError(f"{owner}: X contains NaN or infinity (or the kernel overflowed).")
    return RowStatistics.from_moments(moments[: m + 1], shift, n, diagonal_sum=moments[m + 1, 0])


#: Largest strip of ``k(x, L)`` on a GPU, in bytes.
GPU_STRIP_BYTES = 2**28

#: Most rows in a float32 strip on a GPU. Each entry of a strip's scatter is a float32 sum
#: over its rows (cuBLAS ``syrk``), and ``K_LL^(-1/2)`` magnifies that error in its smallest
#: directions: 4,000,000 × 64, 2,000 landmarks, on an H200, the largest relative error of
#: ten eigenvalues against a float64 fit was 1.1e-6 with 4,194 rows, 1.8e-6 with 8,388,
#: 5.7e-5 with 16,777 and 1.9 with 33,554 (``benchmarks/probe_nystrom_strips.py``). The CPU's
#: float32 fit: 7.1e-7.
GPU_FLOAT32_STRIP_ROWS = 8192


def gpu_strip_rows(n_landmarks: int, dtype: np.dtype) -> int:
    """Rows of ``k(x, L)`` a Nyström pass evaluates at once on a GPU.

    Large strips keep the GPU busy: each strip costs a few fixed steps (the mirrored
    triangle, the float64 sums). With the host's strips (4,194 rows at 2,000 landmarks, from
    ``block_bytes``) a pass over 4,000,000 rows in memory took 1.67 s on an H200, against
    0.76 s with 8,388 rows. Float32 strips stop at :data:`GPU_FLOAT32_STRIP_ROWS` for
    accuracy.

    Examples
    --------
    >>> gpu_strip_rows(2000, np.dtype(np.float32)), gpu_strip_rows(2000, np.dtype(np.float64))
    (8192, 16777)
    """
    rows = max(1, GPU_STRIP_BYTES // (n_landmarks * np.dtype(dtype).itemsize))
    return min(rows, GPU_FLOAT32_STRIP_ROWS) if np.dtype(dtype) == np.float32 else rows


#: Fewest rows per task when a pass is split for the scheduler's threads.
MIN_TASK_ROWS = 4096


def _split_for_threads(X: da.Array) -> da.Array:
    """``X`` in at least one row chunk per scheduler thread, where its rows allow.

    A numpy batch of up to ``block_size`` is one chunk, hence one task on one core: a
    100,000-row batch took 1.1 s where two chunks take 0.65 s on two cores.
    """
    threads, n = scheduler_threads(), X.shape[0]
    if X.numblocks[0] >= threads or n < 2 * MIN_TASK_ROWS:
        return X
    return X.rechunk({0: max(MIN_TASK_ROWS, -(-n // threads))})


def _landmark_kernel(kernel: Kernel, landmarks: Any) -> np.ndarray:
    return kernel.pairwise(landmarks).astype(np.float64)


def fit_nystrom(
    kernel: Kernel,
    X: da.Array,
    landmarks: np.ndarray,
    rule: ComponentRule,
    *,
    block_bytes: int,
    method: str = "feature_map",
    feature_map: np.ndarray | None = None,
    owner: str = "KernelPCA",
) -> tuple[KernelBasis, RowStatistics | None]:
    """Nyström kernel PCA with the given landmarks.

    Parameters
    ----------
    kernel : Kernel
    X : dask array, (n, d)
    landmarks : (m, d) array
    rule : ComponentRule
        Which components to keep; at most ``m``.
    block_bytes : int
        Memory for one strip of ``K(X, L)`` inside a task.
    method : {"feature_map", "extension"}, default="feature_map"
    feature_map : (m, r) array, optional
        ``R`` with ``R Rᵀ = K_LL⁺``, so that ``φ(x) = k(x, L) R``; by default
        :func:`inverse_sqrt` of ``K_LL``. Any such ``R`` gives the same kernel PCA (incomplete
        Cholesky passes ``L⁻ᵀ``).
    owner : str, default="KernelPCA"
        The estimator that messages name.

    Returns
    -------
    basis : KernelBasis
        Its basis is the landmarks. The training eigenvectors are ``basis.transform(X) /
        sqrt(eigenvalues)`` (lazy: an ``n × k`` array is never required).
    statistics : RowStatistics or None
        ``feature_map``: the :func:`landmark_statistics` of ``X`` (what ``partial_fit``
        continues from); ``None`` for ``extension``, which makes no such pass.

    Notes
    -----
    ``feature_map``: one pass (the kernel diagonal comes with it), ``O(n m d + n m²)`` time
    (one ``n m²`` product: the moments of ``k(x, L)`` are accumulated and mapped to the
    features' at the end); memory per task one strip of ``K(X, L)``; gathered ``O(m²)``.
    ``extension``: ``O(m² d + m³)``, no pass over ``X`` beyond the kernel diagonal (for the
    total variance).

    References
    ----------
    C. K. I. Williams and M. Seeger, "Using the Nyström method to speed up kernel
    machines", Advances in Neural Information Processing Systems 13, 2001.

    S. Kumar, M. Mohri and A. Talwalkar, "Sampling methods for the Nyström method", Journal
    of Machine Learning Research 13, 981–1006, 2012.

    S. Marukatat, "Tutorial on PCA and approximate PCA and approximate kernel PCA",
    Artificial Intelligence Review 56, 5445–5477, 2023 (the "tutorial": Algs. 1–6, §5.3).

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> from dkpca.kernels import RBF
    >>> X = np.random.default_rng(0).normal(size=(50, 2))
    >>> basis, statistics = fit_nystrom(RBF(gamma=0.5), da.from_array(X, chunks=20), X[:10],
    ...                                 ComponentRule.from_params(2, None), block_bytes=2**20)
    >>> basis.coef.shape, basis.n_samples, statistics.count
    ((10, 2), 50, 50)
    """
    landmarks = as_landmarks(landmarks, X.dtype)
    if method == "extension":
        (diagonal_sum,) = compute(kernel_diagonal(kernel, X).sum(dtype=np.float64))
        K_LL = _landmark_kernel(kernel, landmarks)
        basis = _fit_extension(kernel, landmarks, K_LL, X.shape[0], float(diagonal_sum), rule,
                               block_bytes, owner)
        return basis, None
    K_LL = _landmark_kernel(kernel, landmarks)  # once: the shift and the feature map
    with concurrent.futures.ThreadPoolExecutor(1) as beside_the_pass:
        # A GPU pass leaves the host idle: K_LL^(-1/2), an m × m eigh (0.3-0.4 s at m = 2,000
        # on 16 cores), is computed meanwhile. On the CPU it would only take cores from the pass.
        later = (beside_the_pass.submit(inverse_sqrt, K_LL, feature_map_rcond(landmarks.dtype))
                 if feature_map is None and kernel_device(kernel, X, landmarks) == "cuda"
                 else None)
        statistics = landmark_statistics(kernel, X, landmarks, block_bytes=block_bytes,
                                         landmark_kernel=K_LL, owner=owner)
        feature_map = feature_map if later is None else later.result()
    basis = nystrom_basis(kernel, landmarks, statistics, rule, block_bytes=block_bytes,
                          feature_map=feature_map, landmark_kernel=K_LL, owner=owner)
    return basis, statistics


def as_landmarks(landmarks: Any, dtype: np.dtype) -> Any:
    """Landmarks in the data's dtype; sparse ones (rows of sparse data) stay sparse.

    Examples
    --------
    >>> as_landmarks([[1, 2]], np.dtype("float32")).dtype
    dtype('float32')
    """
    if scipy.sparse.issparse(landmarks):  # the kernels multiply sparse blocks
        return landmarks.astype(dtype)
    return np.asarray(landmarks, dtype=dtype)


def nystrom_basis(
    kernel: Kernel,
    landmarks: Any,
    statistics: RowStatistics,
    rule: ComponentRule,
    *,
    block_bytes: int,
    feature_map: np.ndarray | None = None,
    landmark_kernel: np.ndarray | None = None,
    owner: str = "KernelPCA",
) -> KernelBasis:
    """Nyström kernel PCA from the :func:`landmark_statistics` of the training rows.

    The features ``φ = k R`` have mean ``Rᵀ mean(k)`` and scatter ``Rᵀ S R``; their PCA is
    the kernel PCA of the Nyström approximation, centred on all the rows counted.

    Parameters
    ----------
    kernel : Kernel
    landmarks : (m, d) array or CSR matrix
    statistics : RowStatistics
        Of ``k(x, L)`` over the training rows.
    rule : ComponentRule
    block_bytes : int
        Memory for one kernel strip when the basis transforms.
    feature_map : (m, r) array, optional
        As in :func:`fit_nystrom`.
    landmark_kernel : (m, m) float64 array, optional
        ``K(L, L)``, when the caller has it (evaluated here otherwise).
    owner : str, default="KernelPCA"
        The estimator that messages name.

    Returns
    -------
    KernelBasis

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> from dkpca.kernels import RBF
    >>> X = np.random.default_rng(0).normal(size=(50, 2))
    >>> statistics = landmark_statistics(RBF(gamma=0.5), da.from_array(X), X[:5],
    ...                                  block_bytes=2**20)
    >>> nystrom_basis(RBF(gamma=0.5), X[:5], statistics, ComponentRule.from_params(2, None),
    ...               block_bytes=2**20).eigenvalues.shape
    (2,)
    """
    m, n = landmarks.shape[0], statistics.count
    K_LL = landmark_kernel  # the landmarks' kernel, evaluated at most once
    if feature_map is None:
        K_LL = _landmark_kernel(kernel, landmarks) if K_LL is None else K_LL
        R = inverse_sqrt(K_LL, feature_map_rcond(landmarks.dtype))
    else:  # a GPU fit passes its own inverse_sqrt
        R = feature_map
    short = (rule.count is not None and R.shape[1] < rule.count
             and not kernel.positive_semidefinite)
    if K_LL is None and (R.shape[1] == 0 or short):
        K_LL = _landmark_kernel(kernel, landmarks)
    if R.shape[1] == 0:
        _check_positive_part(K_LL, kernel, owner)
    if short:
        _warn_if_indefinite_cut(K_LL, R.shape[1], rule.count, feature_map_rcond(landmarks.dtype),
                                kernel, owner)
    scatter = R.T @ statistics.scatter @ R
    mean = R.T @ statistics.mean  # the mean feature
    scatter = (scatter + scatter.T) / 2
    k = None if rule.needs_full_spectrum else min(rule.count, R.shape[1])
    eigenvalues, U = top_eigh(scatter, k, overwrite=True)
    # The true kernel's centred trace, sum(k(x, x)) - n mean(K), with mean(K) estimated by the
    # approximation's |mean φ|²: explained_variance_ratio_ shares are of the real variance.
    total_variance = statistics.diagonal_sum - n * float(mean @ mean)
    count = rule.select(eigenvalues, total_variance)
    # A feature map of lower rank than the count offers fewer eigenvalues: the messages name
    # the count asked for.
    capped = rule.count is not None and count == R.shape[1] < rule.count
    keep = positive_part(eigenvalues[:count], rule, owner,
                         requested=rule.count if capped else None)
    # A rank-deficient K_LL leaves fewer features than the count asked for: zero columns too.
    values, U = zero_padded(
        eigenvalues[:keep], flip_signs(U[:, :keep]), rule.count if rule.keep_zero else keep
    )
    logger.info("Nyström: %d landmarks (rank %d), %d components", m, R.shape[1], len(values))
    return KernelBasis(
        kernel=kernel,
        basis=landmarks,
        coef=R @ U,
        offset=mean @ U,
        eigenvalues=values,
        n_samples=n,
        total_variance=total_variance,
        block_bytes=block_bytes,
        mean_coef=R @ mean,  # the mean feature, mapped back onto the landmarks
    )


def _fit_extension(
    kernel: Kernel,
    landmarks: np.ndarray,
    K_LL: np.ndarray,
    n: int,
    diagonal_sum: float,
    rule: ComponentRule,
    block_bytes: int,
    owner: str,
) -> KernelBasis:
    """Eqs. (62)–(63) on the landmark-centred kernel, as a KernelBasis."""
    m = K_LL.shape[0]
    row_means = K_LL.mean(axis=0)
    centred = K_LL - row_means[:, None] - row_means[None, :] + row_means.mean()
    values, vectors = top_eigh(
        centred, None if rule.needs_full_spectrum else rule.count, overwrite=True
    )
    eigenvalues = values * n / m  # eq. (62)
    total_variance = diagonal_sum - n * float(row_means.mean())
    count = rule.select(eigenvalues, total_variance)
    keep = positive_part(eigenvalues[:count], rule, owner)
    vectors = flip_signs(vectors[:, :keep])
    # Scores of x: k_c(x, L) u / sqrt(λ_L) (the landmarks' kernel PCA), centred on L.
    kept, coef = zero_padded(eigenvalues[:keep],
                             (vectors - vectors.mean(axis=0)) / np.sqrt(values[:keep]),
                             rule.count if rule.keep_zero else keep)
    return KernelBasis(
        kernel=kernel,
        basis=landmarks,
        coef=coef,
        offset=row_means @ coef,
        eigenvalues=kept,
        n_samples=n,
        total_variance=total_variance,
        block_bytes=block_bytes,
    )
