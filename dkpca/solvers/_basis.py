"""The fitted state every kernel PCA solver ends in."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import dask.array as da
import numpy as np

from dkpca.blocked import DEFAULT_BLOCK_BYTES, compute, kernel_product
from dkpca.kernels import Kernel

__all__ = ["KernelBasis"]


@dataclass
class KernelBasis:
    """Enough to project new data: ``scores(x) = K(x, basis) @ coef - offset``.

    Every solver ends here, so ``transform``, pre-images, persistence and the command line never
    branch on the solver. For exact and randomized kernel PCA the basis is the training data,
    ``coef = V / sqrt(λ)`` (``V`` the eigenvectors of the centred training kernel) and
    ``offset = rᵀ coef`` with ``r`` the training kernel's row means, which carries the centring
    of new points (``coef``'s columns sum to zero, so no other centring term remains).

    Attributes
    ----------
    kernel : Kernel
        With all data-dependent parameters resolved.
    basis : (m, d) numpy or dask array
    coef : (m, k) array
    offset : (k,) array
    eigenvalues : (k,) array
        Eigenvalues of the centred training kernel matrix, descending.
    n_samples : int
        Training samples.
    total_variance : float
        Trace of the centred training kernel (the sum of all its eigenvalues).
    block_bytes : int
        Memory for one kernel tile when transforming.
    mean_coef : (m,) array or None
        The training mean in feature space as a combination of the basis points,
        ``φ̄ = Σ_i c_i φ(b_i)``, which pre-images need (a point's reconstruction is
        ``Σ_i (coef β + c)_i φ(b_i)``). ``None``: the uniform mean ``1/m`` (the basis is the
        training set, or the landmarks the model was centred on).

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> from dkpca.kernels import Linear
    >>> basis = KernelBasis(Linear(), np.eye(2), np.eye(2), np.zeros(2), np.ones(2), 2, 2.0)
    >>> basis.transform(da.ones((3, 2), chunks=2)).compute()
    array([[1., 1.],
           [1., 1.],
           [1., 1.]])
    """

    kernel: Kernel
    basis: np.ndarray | da.Array
    coef: np.ndarray
    offset: np.ndarray
    eigenvalues: np.ndarray
    n_samples: int
    total_variance: float
    block_bytes: int = DEFAULT_BLOCK_BYTES
    mean_coef: np.ndarray | None = None

    def mean_weights(self) -> np.ndarray | float:
        """``c``, the feature-space mean's coefficients (a scalar ``1/m`` when uniform)."""
        if self.mean_coef is None:
            return 1.0 / self.basis.shape[0]
        if self.mean_coef.size != self.basis.shape[0]:
            raise ValueError(
                "this model was saved by a dkpca without pre-images (model format 1) and does "
                "not record its feature-space mean; refit it to use inverse_transform/denoise"
            )
        return self.mean_coef

    def in_memory(self) -> KernelBasis:
        """Return the basis with its points in memory (pre-images iterate over them)."""
        if not isinstance(self.basis, da.Array):
            return self
        (points,) = compute(self.basis)
        return dataclasses.replace(self, basis=points)

    @property
    def n_components(self) -> int:
        """Number of components."""
        return self.coef.shape[1]

    def transform(self, X: da.Array) -> da.Array:
        """Lazy scores of ``X`` (``(n, d)`` dask array) on the components."""
        coef = self.coef.astype(np.result_type(X.dtype, np.float32), copy=False)
        scores = kernel_product(self.kernel, X, self.basis, coef, block_bytes=self.block_bytes)
        return scores - self.offset.astype(scores.dtype, copy=False)
