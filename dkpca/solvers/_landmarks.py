"""Landmark (working-set) selection for Nyström kernel PCA (tutorial §5.3).

Every sampler draws from one ``numpy.random.Generator`` seeded by the estimator's
``random_state``, over sample indices and probabilities that do not depend on how the data are
chunked, so the landmarks are the same on any cluster.
"""

from __future__ import annotations

import logging

import dask.array as da
import numpy as np
import scipy.sparse

from dkpca.blocked import compute, kernel_diagonal, kernel_matrix, worker_block_bytes
from dkpca.kernels import Kernel

__all__ = ["SAMPLINGS", "kmeans_sample", "sampling_probabilities", "select_landmarks"]

logger = logging.getLogger(__name__)

SAMPLINGS = ("uniform", "diagonal", "column_norm", "kmeans")

#: k-means runs on a uniform subsample of this many points per landmark (at least 10,000).
KMEANS_POINTS_PER_LANDMARK = 20


def sampling_probabilities(
    kernel: Kernel, X: da.Array, sampling: str, *, block_bytes: int, owner: str = "KernelPCA"
) -> np.ndarray | None:
    """Return the selection probabilities of the samples; ``None`` for uniform sampling.

    ``"diagonal"``: ``p_i ∝ k(x_i, x_i)²`` (Kumar et al. 2012; the tutorial's eq. (64) prints a
    row sum in the denominator, which does not normalise). ``"column_norm"`` (eq. 65):
    ``p_i ∝ Σ_j k(x_i, x_j)²``, one blocked pass over the kernel.

    Parameters
    ----------
    kernel : Kernel
    X : dask array, (n, d)
    sampling : {"uniform", "diagonal", "column_norm", "kmeans"}
    block_bytes : int
        Memory for one kernel tile (``"column_norm"``).
    owner : str, default="KernelPCA"
        The estimator that messages name.

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> from dkpca.kernels import Linear
    >>> X = da.from_array(np.array([[1.0], [2.0], [3.0]]))
    >>> sampling_probabilities(Linear(), X, "diagonal", block_bytes=2**20).round(3)
    array([0.01 , 0.163, 0.827])
    """
    if sampling in ("uniform", "kmeans"):
        return None
    if sampling == "diagonal":
        weights = kernel_diagonal(kernel, X).astype(np.float64) ** 2
    elif sampling == "column_norm":
        K = kernel_matrix(kernel, X, block_bytes=block_bytes)
        weights = (K.astype(np.float64) ** 2).sum(axis=1)
    else:
        raise ValueError(f"sampling must be one of {SAMPLINGS}, got {sampling!r}")
    (weights,) = compute(weights)
    total = weights.sum()
    if not np.isfinite(total) or total <= 0:
        raise ValueError(
            f"{owner}: {sampling} sampling needs finite, not all zero kernel values; "
            f"check X for NaN or use sampling='uniform'."
        )
    return weights / total


def kmeans_sample(
    X: da.Array, n_clusters: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """k-means centroids of a uniform subsample of ``X``, with that subsample.

    The subsample has :data:`KMEANS_POINTS_PER_LANDMARK` points per cluster (at least 10,000,
    at most all of ``X``). Returns ``(centroids, sample, index)``: ``sample = X[index]``,
    ``index`` ascending; a CSR matrix for sparse data.

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> X = da.from_array(np.arange(40.0).reshape(20, 2), chunks=7)
    >>> centroids, sample, index = kmeans_sample(X, 3, np.random.default_rng(0))
    >>> centroids.shape, sample.shape, index.shape
    ((3, 2), (20, 2), (20,))
    """
    from sklearn.cluster import KMeans

    n = X.shape[0]
    size = min(n, max(10_000, KMEANS_POINTS_PER_LANDMARK * n_clusters))
    index = np.sort(rng.choice(n, size=size, replace=False))
    (sample,) = compute(X[index])
    seed = int(rng.integers(2**31 - 1))
    model = KMeans(n_clusters, n_init=1, max_iter=50, random_state=seed).fit(sample)
    # A sparse sample stays sparse (k-means takes CSR); its centroids are dense.
    sample = sample.tocsr() if scipy.sparse.issparse(sample) else np.asarray(sample)
    return model.cluster_centers_.astype(X.dtype, copy=False), sample, index


def select_landmarks(
    kernel: Kernel,
    X: da.Array,
    n_landmarks: int,
    sampling: str,
    *,
    rng: np.random.Generator,
    block_bytes: int,
    owner: str = "KernelPCA",
) -> np.ndarray:
    """Choose ``n_landmarks`` landmarks among (or, for k-means, from) the rows of ``X``.

    Returns an ``(n_landmarks, d)`` numpy array (a CSR matrix for sparse data): distinct
    sampled rows in index order, or the k-means centroids of a uniform subsample.

    Parameters
    ----------
    kernel : Kernel
    X : dask array, (n, d)
    n_landmarks : int
    sampling : {"uniform", "diagonal", "column_norm", "kmeans"}
    rng : numpy Generator
    block_bytes : int
        Memory for one kernel tile.
    owner : str, default="KernelPCA"
        The estimator that messages name.

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> from dkpca.kernels import RBF
    >>> X = da.from_array(np.arange(20.0).reshape(10, 2), chunks=3)
    >>> select_landmarks(RBF(gamma=1.0), X, 3, "uniform", rng=np.random.default_rng(0),
    ...                  block_bytes=2**20).shape
    (3, 2)
    """
    n = X.shape[0]
    if sampling == "kmeans":
        centroids, _, _ = kmeans_sample(X, n_landmarks, rng)
        return centroids
    p = sampling_probabilities(kernel, X, sampling, block_bytes=worker_block_bytes(block_bytes),
                               owner=owner)
    if p is not None and np.count_nonzero(p) < n_landmarks:
        raise ValueError(
            f"{owner}: only {np.count_nonzero(p)} samples have a nonzero {sampling} "
            f"probability, fewer than n_landmarks={n_landmarks}"
        )
    index = np.sort(rng.choice(n, size=n_landmarks, replace=False, p=p))
    (landmarks,) = compute(X[index])
    logger.info("%d landmarks by %s sampling", n_landmarks, sampling)
    return landmarks if scipy.sparse.issparse(landmarks) else np.asarray(landmarks)
