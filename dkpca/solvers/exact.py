"""Exact kernel PCA: gather the kernel matrix and solve the dense eigenproblem."""

from __future__ import annotations

import logging

import dask.array as da
import numpy as np

from dkpca.blocked import center_kernel_inplace, gather_kernel
from dkpca.kernels import Kernel
from dkpca.linalg import top_eigh

from ._basis import KernelBasis
from ._common import basis_from_eigenpairs, check_finite_kernel
from ._components import FLOAT32_ZERO_RATIO, ZERO_RATIO, ComponentRule

__all__ = ["centred_top_eigh", "fit_exact"]

logger = logging.getLogger(__name__)


def fit_exact(
    kernel: Kernel,
    X: da.Array,
    rule: ComponentRule,
    *,
    block_bytes: int,
    basis_data: np.ndarray | da.Array | None = None,
    owner: str = "KernelPCA",
) -> tuple[KernelBasis, np.ndarray]:
    """Exact kernel PCA.

    The upper triangle of the kernel matrix is gathered from its tiles into one array, centred
    in place and handed to LAPACK (``syevr``) as workspace without a copy, so peak memory is
    one ``n × n`` matrix (plus two tiles per thread while gathering, LAPACK's ``O(n)``
    workspace and the eigenvectors).

    Parameters
    ----------
    kernel : Kernel
        With resolved parameters.
    X : dask array, (n, d)
    rule : ComponentRule
    block_bytes : int
        Memory for one kernel tile.
    basis_data : array, optional
        What the fitted basis keeps as training data (default ``X``); the estimator passes the
        user's numpy array so that transforms of numpy input stay cheap.
    owner : str, default="KernelPCA"
        The estimator that messages name.

    Returns
    -------
    basis : KernelBasis
    eigenvectors : (n, k) array

    Notes
    -----
    Time ``O(n² d)`` for the kernel (half of it, by symmetry) and ``O(n³)`` for the
    eigendecomposition; memory ``n² × itemsize``.

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> from dkpca.kernels import Linear
    >>> X = da.from_array(np.random.default_rng(0).normal(size=(20, 3)))
    >>> basis, _ = fit_exact(Linear(), X, ComponentRule(count=2), block_bytes=2**20)
    >>> basis.coef.shape
    (20, 2)
    """
    K, row_sums = gather_kernel(kernel, X, block_bytes=block_bytes)
    check_finite_kernel(row_sums / K.shape[0], X, owner)
    logger.info("exact eigendecomposition of a %d x %d kernel", *K.shape)
    zero_ratio = FLOAT32_ZERO_RATIO if K.dtype == np.float32 else ZERO_RATIO
    decomposition = centred_top_eigh(K, row_sums, rule)
    del K
    return basis_from_eigenpairs(kernel, X if basis_data is None else basis_data,
                                 *decomposition, rule, block_bytes, owner, zero_ratio)


def centred_top_eigh(
    K: np.ndarray, row_sums: np.ndarray, rule: ComponentRule
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Centre the training kernel ``K`` in place and return the eigenpairs ``rule`` needs.

    ``K``'s upper triangle is read (and destroyed: it is LAPACK's workspace); ``row_sums`` is
    ``K @ 1``. Returns ``(eigenvalues, eigenvectors, row_means, total_variance)``, the
    eigenvalues descending and the total the centred kernel's trace: the arguments that
    :func:`~dkpca.solvers._common.basis_from_eigenpairs` takes after the data.

    Examples
    --------
    >>> import numpy as np
    >>> K = np.array([[2.0, 1.0, 0.0], [1.0, 2.0, 1.0], [0.0, 1.0, 2.0]])
    >>> values, vectors, means, total = centred_top_eigh(K.copy(), K.sum(axis=1),
    ...                                                  ComponentRule(count=1))
    >>> values.round(6), round(total, 6)
    (array([2.]), 2.666667)
    """
    row_means = row_sums / K.shape[0]
    center_kernel_inplace(K, row_means, float(row_means.mean()))
    total = float(np.trace(K, dtype=np.float64))
    k = None if rule.needs_full_spectrum else rule.count
    eigenvalues, eigenvectors = top_eigh(K, k, overwrite=True)
    return eigenvalues, eigenvectors, row_means, total
