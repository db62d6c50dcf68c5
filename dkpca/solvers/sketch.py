"""Approx-KPCA (tutorial §5.2, its Alg. 6): kernel PCA from a sketch of the kernel map.

Each training point's centred empirical kernel map ``k_t = K_c[:, t]`` (length ``n``, whose
covariance is ``K_c²``) is sketched to ``q`` dimensions, ``Z = Wᵀ K_c`` (see
:class:`~dkpca.solvers._sketches.Sketch`). One blocked pass over the kernel's upper tiles gives
``K_c W = H K (H W)`` without storing ``K``. The ``q × q`` matrix ``Z Zᵀ`` has eigenvalues
``μ ≈`` those of ``K_c²``, so ``K_c``'s eigenvalues are ``sqrt(μ)`` and its eigenvectors
``v = Zᵀ u / sqrt(μ)`` (unit length, summing to zero).

That estimate squares the kernel, so the sketch's ``O(1/sqrt(q))`` error mixes eigenvectors
whose eigenvalues are close (on digits, λ₂/λ₁ = 0.97). For a PSD kernel the same sketch
gives a better one with no further pass: the Nyström approximation ``K_c W (Wᵀ K_c W)⁺ Wᵀ K_c``
(Tropp, Yurtsever, Udell and Cevher, "Fixed-rank approximation of a positive-semidefinite
matrix from streaming data", 2017), whose eigenvectors need only ``q × q`` work besides a
thin QR of the ``n × q`` image.
"""

from __future__ import annotations

import logging

import dask
import dask.array as da
import numpy as np

from dkpca._pca_covariance import check_finite_statistics
from dkpca._scattered import shared
from dkpca.blocked import center_columns, compute, kernel_diagonal, tree_sum
from dkpca.kernels import Kernel
from dkpca.linalg import flip_signs, top_eigh
from dkpca.tiles import KernelTiles, storage_dtype

from ._basis import KernelBasis
from ._common import (
    basis_from_eigenpairs,
    check_finite_kernel,
    check_kernel_device,
    in_memory_rows,
)
from ._components import ComponentRule
from ._feature_map import RCOND
from ._sketches import Sketch

__all__ = ["fit_pca_sketch", "fit_sketch"]

logger = logging.getLogger(__name__)


def fit_sketch(
    kernel: Kernel,
    X: da.Array,
    rule: ComponentRule,
    *,
    sketch: Sketch,
    block_bytes: int,
    method: str = "covariance",
    refine: bool = False,
    basis_data: np.ndarray | da.Array | None = None,
    owner: str = "KernelPCA",
) -> tuple[KernelBasis, np.ndarray]:
    """Approximate kernel PCA from a ``sketch.sketch_dim``-dimensional sketch of the kernel map.

    Parameters
    ----------
    kernel : Kernel
    X : dask array, (n, d)
    rule : ComponentRule
        Which components to keep; at most ``sketch_dim``.
    sketch : Sketch
        Gaussian or hashing, with its seed.
    block_bytes : int
        Memory for one kernel tile.
    method : {"covariance", "nystrom"}, default="covariance"
        Eigenpairs of the sketched kernel map's covariance (the tutorial's Alg. 6), or of the
        single-pass Nyström approximation built from the same sketch (for PSD kernels; see
        the module docstring). The covariance estimates ``|λ|``: for a kernel not declared
        positive semi-definite, the pairs whose sketched Rayleigh quotient ``uᵀ Wᵀ K_c W u``
        is not positive (the kernel's negative eigenvalues) are dropped.
    refine : bool, default=False
        Go beyond the tutorial: a second pass computes the exact Rayleigh–Ritz projection of
        ``K_c`` on the sketched subspace ``span(K_c W)``, so the eigenvalues are exact on that
        subspace and nearly equal eigenvalues no longer mix their eigenvectors.
    basis_data : array, optional
        What the fitted basis keeps of the training data (``X`` by default).
    owner : str, default="KernelPCA"
        The estimator that messages name.

    Returns
    -------
    basis : KernelBasis
    eigenvectors : (n, k) array

    Notes
    -----
    One pass over the kernel's upper tiles (``O(n² d)``), memory ``O(n q)`` for the sketch and
    its image, then a ``q × q`` eigenproblem. The eigenvalues are biased when ``q`` is small
    (tutorial Fig. 9): use the exact or randomized solver where they must be precise.

    References
    ----------
    S. Marukatat, "Tutorial on PCA and approximate PCA and approximate kernel PCA",
    Artificial Intelligence Review 56, 5445–5477, 2023 (the "tutorial": Algs. 1–6, §5.3).

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> from dkpca.kernels import RBF
    >>> X = da.from_array(np.random.default_rng(0).normal(size=(60, 3)))
    >>> sketch = Sketch("gaussian", 40, np.random.SeedSequence(0))
    >>> basis, vectors = fit_sketch(RBF(gamma=0.5), X, ComponentRule.from_params(2, None),
    ...                             sketch=sketch, block_bytes=2**20)
    >>> vectors.shape, bool(np.allclose(vectors.T @ vectors, np.eye(2)))
    ((60, 2), True)
    """
    check_kernel_device(kernel, owner)
    n, q = X.shape[0], sketch.sketch_dim
    W = sketch.matrix(n)
    W -= W.mean(axis=0)  # H W: the sketch of the centred kernel map, K_c W = H K (H W)
    rows = in_memory_rows(X, basis_data)
    source = X if rows is None else rows  # in-memory rows are scattered, not sent in graphs
    # One set of tiles for both products: the rows go to the workers once.
    tiles = KernelTiles(kernel, source, block_bytes=block_bytes,
                        dtype=storage_dtype(source, None), cached=False)
    try:
        image = tiles.matmul(np.hstack([W, np.full((n, 1), 1.0 / n)]))
        row_means = np.asarray(image[:, -1], dtype=np.float64)  # the 1/n column: K's row means
        check_finite_kernel(row_means, X, owner)
        Y = np.array(image[:, :-1], dtype=np.float64)
        center_columns(Y)  # Y = K_c W = Zᵀ
        if refine:
            Q, _ = np.linalg.qr(Y)
            Q -= Q.mean(axis=0)  # range(K_c) ⟂ 1; drop the rounding residue
            image = np.array(tiles.matmul(Q), dtype=np.float64)
    finally:  # the data rows leave the workers now, whether a product failed or not
        tiles.release()
    if rows is None:
        (diagonal_sum,) = compute(kernel_diagonal(kernel, X).sum(dtype=np.float64))
    else:  # the rows are here: their diagonal needs no trip to the cluster
        diagonal_sum = kernel.diag(rows).sum(dtype=np.float64)
    total_variance = float(diagonal_sum) - n * float(row_means.mean())
    if refine:
        center_columns(image)  # K_c Q = H K H Q
        eigenvalues, S = top_eigh(Q.T @ image, None, overwrite=True)
        vectors = flip_signs(Q @ S)
    elif method == "nystrom":
        eigenvalues, vectors = _nystrom_eigenpairs(Y, W)
    else:
        mu, U = top_eigh(Y.T @ Y, None, overwrite=True)
        keep = mu > max(mu[0], 0.0) * 1e-12
        if not kernel.positive_semidefinite:
            # Maintenance note: sqrt(μ) is |λ|, so an indefinite kernel's most negative
            # eigenpairs would come first. The sketch's own Wᵀ K_c W = Wᵀ Y gives each pair's
            # sign with no further pass, u ᵀ Wᵀ Y u (the pair's Rayleigh quotient of K_c
            # seen through W); the negative ones are dropped, the order stays by sqrt(μ).
            keep &= np.einsum("ij,ij->j", U, (W.T @ Y) @ U) > 0
        mu, U = mu[keep], U[:, keep]
        eigenvalues = np.sqrt(mu)
        vectors = flip_signs(Y @ U / eigenvalues)  # v = Zᵀ u / sqrt(μ)
    logger.info(
        "approx-KPCA: %s sketch of %d x %d kernel to q = %d, %s estimate%s",
        sketch.kind,
        n,
        n,
        q,
        method,
        " refined" if refine else "",
    )
    return basis_from_eigenpairs(
        kernel,
        X if basis_data is None else basis_data,
        eigenvalues,
        vectors,
        row_means,
        total_variance,
        rule,
        block_bytes,
        owner,
    )


def _nystrom_eigenpairs(Y: np.ndarray, W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenpairs of ``Y C⁺ Yᵀ`` with ``C = Wᵀ Y``, given the sketch ``Y = K_c W``.

    With ``C = V D Vᵀ`` (directions with ``|d|`` below ``RCOND`` of the largest dropped, as
    rounding noise) and ``Y V = Q T``, the approximation is ``Q (T D⁻¹ Tᵀ) Qᵀ``: a small
    eigenproblem. ``C`` is symmetric in exact arithmetic; its rounding asymmetry is removed.
    """
    C = W.T @ Y
    d, V = np.linalg.eigh((C + C.T) / 2)
    keep = np.abs(d) > RCOND * np.abs(d).max()
    Q, T = np.linalg.qr(Y @ V[:, keep])
    Q -= Q.mean(axis=0)  # range(K_c) ⟂ 1; drop the rounding residue
    inner = (T / d[keep]) @ T.T
    eigenvalues, S = top_eigh((inner + inner.T) / 2, None, overwrite=True)
    return eigenvalues, flip_signs(Q @ S)


def _sketch_moments(block: np.ndarray, W: np.ndarray, origin: np.ndarray) -> np.ndarray:
    """Stack ``[Σ x; Σ x∘x; Σ s; Sᵀ S]`` of one row chunk shifted by ``origin``, ``S = x W``.

    The shift (a training row) keeps the moments near the data's spread: raw sums around
    zero would cancel when the mean is subtracted, far from the origin.
    """
    q, d = W.shape[1], block.shape[1]
    out = np.zeros((3 + q, max(d, q)))
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite data: the fit reports it
        B = np.asarray(block, dtype=np.float64) - origin
        S = B @ W
        out[0, :d], out[1, :d], out[2, :q] = B.sum(axis=0), (B * B).sum(axis=0), S.sum(axis=0)
        out[3:, :q] = S.T @ S
    return out


def _back_projection(
    block: np.ndarray, W: np.ndarray, origin: np.ndarray, shift: np.ndarray, U: np.ndarray
) -> np.ndarray:
    """``Bᵀ ((B W - shift) U)``, ``B = block - origin``: eq. (21)'s ``X_cᵀ v`` unscaled."""
    B = np.asarray(block, dtype=np.float64) - origin
    return B.T @ ((B @ W - shift) @ U)


def _scatter_product(block: np.ndarray, origin: np.ndarray, V: np.ndarray) -> np.ndarray:
    """``Bᵀ (B V)`` of one row chunk, ``B = block - origin``."""
    B = np.asarray(block, dtype=np.float64) - origin
    return B.T @ (B @ V)


def fit_pca_sketch(
    X: da.Array, rule: ComponentRule, *, sketch: Sketch, refine: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Approximate linear PCA (tutorial Alg. 4): PCA of the sketched samples, converted back.

    Pass 1 sketches every sample to ``q`` dimensions (``S = X W``) and accumulates the
    ``q × q`` scatter of ``S`` (whose eigenpairs ``(s, u)`` approximate those of the dot matrix
    ``X_c X_cᵀ``: ``v = S_c u / sqrt(s)``). Pass 2 converts them to the input space,
    ``w = X_cᵀ v / sqrt(s)`` (eq. 21). With ``refine``, pass 3 computes the exact
    Rayleigh–Ritz projection of the scatter matrix on ``span(w)``.

    Returns
    -------
    mean : (d,) array
    eigenvalues : (k,) array
        Of the scatter matrix ``X_cᵀ X_c`` (PCA divides by ``n - 1``): its Rayleigh
        quotients at the sketched sample directions ``v``, or on ``span(w)`` with ``refine``.
    vectors : (d, k) array
        Unit principal directions.
    total : float
        Trace of the covariance (``n - 1`` denominator).

    References
    ----------
    S. Marukatat, "Tutorial on PCA and approximate PCA and approximate kernel PCA",
    Artificial Intelligence Review 56, 5445–5477, 2023 (the "tutorial": Algs. 1–6, §5.3).

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> X = np.random.default_rng(0).normal(size=(200, 30)) * np.linspace(3, 0.1, 30)
    >>> sketch = Sketch("gaussian", 25, np.random.SeedSequence(0))
    >>> mean, values, vectors, total = fit_pca_sketch(
    ...     da.from_array(X, chunks=50), ComponentRule.from_params(2, None), sketch=sketch,
    ...     refine=True)
    >>> vectors.shape, bool(np.allclose(vectors.T @ vectors, np.eye(2)))
    ((30, 2), True)
    """
    n, d = X.shape
    q = sketch.sketch_dim
    W = sketch.matrix(d)
    X = X.rechunk({1: -1})  # whole rows, so that every block is shifted by the same row
    blocks = X.to_delayed().ravel()
    # Moments around the first row, as the covariance and gram solvers take them: exact
    # zeros where nothing varies, and no cancellation far from the origin.
    (origin,) = compute(X[0])
    origin = np.asarray(origin, dtype=np.float64)
    W, origin_key = shared(W), shared(origin)  # one key each, not a copy in every task
    parts = [dask.delayed(_sketch_moments)(b, W, origin_key) for b in blocks]
    (moments,) = compute(tree_sum(parts))
    check_finite_statistics(moments)
    offset = moments[0, :d] / n  # the mean, less the origin
    mean = origin + offset
    total = float(moments[1, :d].sum() - n * offset @ offset) / (n - 1)
    sketch_mean = moments[2, :q] / n
    scatter = moments[3:, :q] - n * np.outer(sketch_mean, sketch_mean)
    s, U = top_eigh(scatter, None if rule.needs_full_spectrum else rule.count, overwrite=True)
    keep = s > max(s[0], 0.0) * 1e-12
    s, U = s[keep], U[:, keep]
    parts = [dask.delayed(_back_projection)(b, W, origin_key, sketch_mean, shared(U))
             for b in blocks]
    (back,) = compute(tree_sum(parts))
    # back = X_cᵀ S_c U (X_cᵀ = (X - origin)ᵀ on S_c's zero-sum columns). The sketched
    # eigenvectors v = S_c u / sqrt(s) are orthonormal samples' directions, and
    # ||X_cᵀ v||² = ||back||² / s is the scatter's Rayleigh quotient there: at most the top
    # eigenvalue, summing to at most the trace (Ky Fan), where the sketch's own s can
    # exceed both (twice the total variance at d = 1).
    rayleigh = np.einsum("ij,ij->j", back, back) / s
    order = np.argsort(-rayleigh, kind="stable")
    vectors, independent = _orthonormal(back[:, order])
    eigenvalues = rayleigh[order][independent]
    if refine:
        Q = vectors
        Q_key = shared(Q)
        parts = [dask.delayed(_scatter_product)(b, origin_key, Q_key) for b in blocks]
        (product,) = compute(tree_sum(parts))
        product -= n * np.outer(offset, offset @ Q)  # X_cᵀ X_c Q = Bᵀ B Q - n m mᵀ Q
        eigenvalues, S = top_eigh(Q.T @ product, None, overwrite=True)
        vectors = Q @ S
    return mean, eigenvalues, flip_signs(vectors), total


def _orthonormal(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Orthonormalise the back-projected directions in their order (Gram–Schmidt by QR).

    Eq. (21)'s vectors are orthogonal only approximately, and those of rounding-noise
    eigenvalues nearly repeat a leading direction; a column with almost nothing left after
    removing the earlier ones is dropped (``complete_basis`` fills it with a zero-variance
    direction). Returns the orthonormal columns (each on its vector's side) and which were kept.
    """
    if vectors.shape[1] == 0:
        return vectors, np.zeros(0, dtype=bool)
    Q, R = np.linalg.qr(vectors / np.linalg.norm(vectors, axis=0))
    diagonal = np.diag(R)
    independent = np.abs(diagonal) > 1e-6
    Q = Q * np.where(diagonal < 0, -1.0, 1.0)
    return Q[:, independent], independent
