"""Steps shared by the solvers that decompose the full centred training kernel."""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
import scipy.sparse

from dkpca._device import configured_device
from dkpca.kernels import Kernel

from ._basis import KernelBasis
from ._components import ZERO_RATIO, ComponentRule, positive_part, zero_padded


def basis_from_eigenpairs(
    kernel: Kernel,
    X: np.ndarray | da.Array,
    eigenvalues: np.ndarray,
    eigenvectors: np.ndarray,
    row_means: np.ndarray,
    total_variance: float,
    rule: ComponentRule,
    block_bytes: int,
    owner: str,
    zero_ratio: float = ZERO_RATIO,
) -> tuple[KernelBasis, np.ndarray]:
    """Select components and build the :class:`KernelBasis` of a full-kernel decomposition.

    Returns the basis and the kept eigenvectors (``n × k``, for ``fit_transform``).
    """
    values, coef, offset, vectors = eigenpair_components(
        eigenvalues, eigenvectors, row_means, total_variance, rule, owner, zero_ratio)
    basis = KernelBasis(
        kernel=kernel,
        basis=X,
        coef=coef,
        offset=offset,
        eigenvalues=values,
        n_samples=vectors.shape[0],
        total_variance=float(total_variance),
        block_bytes=block_bytes,
    )
    return basis, vectors


def eigenpair_components(
    eigenvalues: np.ndarray,
    eigenvectors: np.ndarray,
    row_means: np.ndarray,
    total_variance: float,
    rule: ComponentRule,
    owner: str,
    zero_ratio: float = ZERO_RATIO,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Kept eigenvalues, ``coef``, ``offset`` and eigenvectors of a full-kernel decomposition.

    What :class:`KernelBasis` needs to project (``scores = K(x, train) @ coef - offset``),
    without the basis itself: exact leave-one-out refits project with kernel values they
    already hold. ``total_variance`` is the centred kernel's trace (for a variance-fraction
    rule).

    Examples
    --------
    >>> import numpy as np
    >>> from dkpca.solvers import ComponentRule
    >>> values, coef, offset, vectors = eigenpair_components(
    ...     np.array([4.0, 1.0]), np.array([[0.5, 0.5], [-0.5, 0.5]]), np.zeros(2), 5.0,
    ...     ComponentRule(count=1), "Demo")
    >>> values, coef.ravel()
    (array([4.]), array([ 0.25, -0.25]))
    """
    m = rule.select(eigenvalues, total_variance)
    # A decomposition that stops at the kernel's numerical rank (the sketch's) offers fewer
    # eigenvalues than the count asked for: the messages name the count asked for. Where a
    # variance fraction or min_relative_eigenvalue made the cut, the user's rule did: no
    # warning (as in the Nyström solvers).
    capped = rule.count is not None and m == len(eigenvalues) < rule.count
    keep = positive_part(eigenvalues[:m], rule, owner, zero_ratio,
                         requested=rule.count if capped else None)
    # keep_zero: exactly the count asked for, also where a solver's decomposition stops at
    # the kernel's numerical rank (the sketch's); directions beyond it are zero columns
    width = max(m, rule.count or 0) if rule.keep_zero else keep
    vectors = eigenvectors[:, :width]
    if vectors.shape[1] < width:
        vectors = np.pad(vectors, ((0, 0), (0, width - vectors.shape[1])))
    # The eigenvectors are orthogonal to the ones vector in exact arithmetic; removing the
    # rounding residue makes the single offset term the whole centring of new points.
    kept = vectors[:, :keep]
    values, coef = zero_padded(eigenvalues[:keep].astype(np.float64),
                               (kept - kept.mean(axis=0)) / np.sqrt(eigenvalues[:keep]), width)
    offset = row_means.astype(np.float64) @ coef
    return values, coef, offset, vectors


def _all_finite(block: Any) -> np.ndarray:
    values = block.data if scipy.sparse.issparse(block) else block  # sparse: stored entries
    return np.array([[np.isfinite(values).all()]])


def check_finite_kernel(row_means: np.ndarray, X: da.Array, owner: str) -> None:
    """Raise a precise error when the kernel's row means are not finite.

    NaN or infinity in the data reach the kernel, so checking the (small) row means costs no
    extra pass over lazy data; only on failure is ``X`` itself inspected, to tell bad input
    from a kernel that overflowed.
    """
    if np.isfinite(row_means).all():
        return
    if not bool(X.map_blocks(_all_finite, chunks=(1, 1), dtype=bool).all().compute()):
        raise ValueError(f"{owner}: X contains NaN or infinity; remove or impute those values.")
    raise ValueError(
        f"{owner}: the kernel matrix has non-finite entries (overflow); reduce gamma or degree, "
        f"or scale the data."
    )


def check_kernel_device(kernel: Kernel, owner: str) -> None:
    """Refuse, in one line, a kernel without GPU code when ``dkpca.device`` is ``"cuda"``.

    The solvers whose kernel tiles live on the holders' GPUs call this before any work.

    Examples
    --------
    >>> from dkpca.kernels import Laplacian
    >>> check_kernel_device(Laplacian(), "KernelPCA")  # on the CPU every kernel runs
    """
    if configured_device() == "cuda" and not kernel.runs_on_gpu:
        raise ValueError(f"{owner}: the {kernel.name} kernel has no GPU code (it needs scipy); "
                         f"fit it with dask.config dkpca.device='cpu'")


def in_memory_rows(X: da.Array, basis_data: Any) -> np.ndarray | None:
    """Return the caller's in-memory rows behind ``X``, or None where it has none.

    Tiles evaluated from them get their rows scattered to the workers in one call, where a dask
    array of them would send each row block inside a graph of its own.

    Examples
    --------
    >>> X = np.ones((4, 2))
    >>> in_memory_rows(da.from_array(X), X) is X, in_memory_rows(da.from_array(X), None)
    (True, None)
    """
    if (isinstance(basis_data, np.ndarray) and basis_data.shape == X.shape
            and basis_data.dtype == X.dtype):
        return basis_data
    return None
