"""Probabilistic PCA for :class:`dkpca.PCA`: noise variance, covariance, likelihood, Minka's rank.

The model is Tipping and Bishop's: ``x = W z + μ + ε`` with isotropic noise ``ε ~ N(0, σ² I)``,
whose maximum-likelihood fit keeps the leading principal directions and sets ``σ²`` to the
mean variance of the discarded ones. Its covariance is

``C = Aᵀ diag(max(λ - σ², 0)) A + σ² I``,

``A`` the components (each scaled by ``sqrt(λ)`` when ``whiten``, scikit-learn's convention) and
``λ`` the explained variances. Nothing here forms ``C`` to score data: with ``B =
diag(sqrt(δ)) A`` (``δ = max(λ - σ², 0)``), ``C = σ² I + Bᵀ B`` and

* ``C⁻¹ = σ⁻² (I - Bᵀ M⁻¹ B)`` with the small ``M = σ² I + B Bᵀ`` (``k × k``),
* ``log det C = (d - k) log σ² + log det M``,

so a sample's log-likelihood costs ``O(d k)`` and the memory stays ``O(d k)`` however many
features there are. Only a model without noise (``σ² = 0``: as many components as
``min(n_samples, n_features)``) needs the dense ``d × d`` covariance; with fewer components
with variance than features that covariance is singular, and every log-likelihood is
``-inf`` (scikit-learn's value), with no matrix inverted.

References
----------
M. E. Tipping and C. M. Bishop, "Probabilistic principal component analysis", J. R. Statist.
Soc. B 61(3), 1999. T. P. Minka, "Automatic choice of dimensionality for PCA", NIPS 2000.
"""

from __future__ import annotations

import math
import warnings

import dask.array as da
import numpy as np
import scipy.linalg
import scipy.special

from ._device import array_module, is_device_array, to_host
from ._estimator import check_features, like_input
from ._feature_names import check_feature_names
from ._typing import ArrayLike
from ._validation import check_is_fitted
from .io import as_array, as_dask, is_sparse
from .io._views import view_blocks
from .solvers._components import _outside_dkpca

__all__ = ["ProbabilisticMixin", "minka_log_evidence", "minka_rank", "noise_variance"]

#: Eigenvalues below this fraction of the first are zero in Minka's evidence.
_ZERO = 1e-15


def noise_variance(variances: np.ndarray, kept: int, limit: int, total: float) -> float:
    """Maximum-likelihood ``σ²``: the mean variance of the directions not kept.

    Parameters
    ----------
    variances : (m,) array
        Explained variances, descending; all ``limit`` of them when known, else the kept ones.
    kept : int
        Components kept.
    limit : int
        ``min(n_samples, n_features)``: the directions with variance.
    total : float
        Total variance (the trace of the covariance), used when the discarded variances were
        not computed.

    Examples
    --------
    >>> import numpy as np
    >>> noise_variance(np.array([4.0, 2.0, 1.0, 1.0]), 2, 4, 8.0)
    1.0
    >>> noise_variance(np.array([4.0, 2.0]), 2, 4, 8.0)
    1.0
    """
    if kept >= limit:
        return 0.0
    if len(variances) >= limit:
        return float(np.mean(variances[kept:limit]))
    return max(float(total - np.sum(variances[:kept])), 0.0) / (limit - kept)


def minka_log_evidence(spectrum: np.ndarray, rank: int, n_samples: int) -> float:
    """Laplace approximation of the log evidence of a rank-``rank`` PPCA model (Minka 2000).

    Parameters
    ----------
    spectrum : (d,) array
        All eigenvalues of the sample covariance, descending.
    rank : int
        In ``[1, d - 1]``.
    n_samples : int

    Returns
    -------
    float
        ``-inf`` when the ``rank``-th eigenvalue is zero (no such model).

    Notes
    -----
    With ``λ`` the spectrum, ``k`` the rank, ``v`` the mean of the ``d - k`` smallest
    eigenvalues and ``m = d k - k (k + 1) / 2``, Minka's eq. (30) is

    ``log p(U) - n/2 Σ_{i≤k} log λ_i - n (d - k)/2 log v + (m + k)/2 log 2π
    - 1/2 log |A_Z| - k/2 log n``,

    ``log p(U) = -k log 2 + Σ_{i≤k} [log Γ((d - i + 1)/2) - (d - i + 1)/2 log π]`` and
    ``log |A_Z| = Σ_{i≤k} Σ_{j>i} log((λ̂_j⁻¹ - λ̂_i⁻¹)(λ_i - λ_j) n)`` with ``λ̂_j = λ_j`` for
    ``j ≤ k`` and ``v`` beyond. Eigenvalues below ``1e-15`` of the first count as zero; ``v``
    is kept above that floor.

    Examples
    --------
    >>> import numpy as np
    >>> spectrum = np.array([10.0, 1.0, 0.9, 1.1])[np.argsort([-10, -1, -0.9, -1.1])]
    >>> bool(minka_log_evidence(spectrum, 1, 100) > minka_log_evidence(spectrum, 2, 100))
    True
    """
    spectrum = np.asarray(spectrum, dtype=np.float64)
    d, k, n = len(spectrum), int(rank), n_samples
    if not 1 <= k <= d - 1:
        raise ValueError(f"rank={rank} should be in [1, n_features - 1] = [1, {d - 1}]")
    floor = _ZERO * max(float(spectrum[0]), np.finfo(float).tiny)
    if spectrum[k - 1] <= floor:
        return -np.inf
    kept = spectrum[:k]
    v = max(float(np.mean(spectrum[k:])), floor)
    i = np.arange(1, k + 1)
    log_p_u = -k * math.log(2.0) + float(np.sum(
        scipy.special.gammaln((d - i + 1) / 2.0) - (d - i + 1) / 2.0 * math.log(math.pi)))
    m = d * k - k * (k + 1) / 2.0
    hat = np.concatenate([kept, np.full(d - k, v)])
    # log |A_Z|: the pairs (i, j), i ≤ k, j > i, as a k × d upper-triangular block
    rows, cols = np.triu_indices(k, 1, d)
    with np.errstate(divide="ignore"):
        log_az = float(np.sum(np.log((1.0 / hat[cols] - 1.0 / hat[rows])
                                     * (spectrum[rows] - spectrum[cols]))))
    log_az += len(rows) * math.log(n)
    return (log_p_u - n / 2.0 * float(np.sum(np.log(kept))) - n * (d - k) / 2.0 * math.log(v)
            + (m + k) / 2.0 * math.log(2.0 * math.pi) - log_az / 2.0 - k / 2.0 * math.log(n))


def minka_rank(spectrum: np.ndarray, n_samples: int) -> int:
    """Return the rank in ``[1, d - 1]`` that maximises :func:`minka_log_evidence`.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(500, 5)) * 0.1 + rng.normal(size=(500, 1)) * [3, 4, 5, 1, 2]
    >>> spectrum = np.linalg.eigvalsh(np.cov(X, rowvar=False))[::-1]
    >>> minka_rank(spectrum, 500)
    1
    """
    d = len(spectrum)
    if d < 2:
        return 1
    evidence = [minka_log_evidence(spectrum, rank, n_samples) for rank in range(1, d)]
    return int(np.argmax(evidence)) + 1


def _dense_blocks(X: object) -> da.Array:
    """Sparse rows as a dask array of dense row blocks (one block densified at a time)."""
    if not isinstance(X, da.Array):
        rows = max(1, 2**22 // max(X.shape[1], 1))
        X = view_blocks(X, (rows, -1))
    X = X.rechunk({1: -1})
    return X.map_blocks(lambda block: block.toarray(), dtype=X.dtype,
                        meta=np.empty((0, 0), dtype=X.dtype))


def _singular_without_noise(B: np.ndarray, d: int, k: int) -> bool:
    """Whether a noise-free model's covariance ``Bᵀ B`` is singular; warn that it is.

    Without noise (``σ² = 0``) the covariance has rank at most the number of components with
    variance: below ``d`` the model is a degenerate Gaussian, whose log-likelihood
    scikit-learn reports as ``-inf`` (its ``fast_logdet`` of the precision, with a
    ``LinAlgWarning`` from inverting the covariance); so does :meth:`score_samples`,
    without inverting a singular matrix.
    """
    with_variance = int(np.count_nonzero(np.any(B != 0.0, axis=1)))
    if with_variance >= d:
        return False
    warnings.warn(
        f"PCA: the model's covariance is singular (noise_variance_=0 and {with_variance} "
        f"component(s) with variance among n_components_={k}, n_features_in_={d}): every "
        f"log-likelihood is -inf, as in scikit-learn. For a model with noise, keep fewer "
        f"components than the training data's rank (their variance is then the noise).",
        scipy.linalg.LinAlgWarning, stacklevel=_outside_dkpca())
    return True


class ProbabilisticMixin:
    """``get_covariance``, ``get_precision``, ``score_samples`` and ``score`` of a fitted PCA.

    Needs ``components_``, ``explained_variance_``, ``noise_variance_``, ``mean_``,
    ``whiten`` and ``n_features_in_``.
    """

    def _low_rank(self) -> tuple[np.ndarray, float]:
        """``B = diag(sqrt(max(λ - σ², 0))) A`` in float64, and ``σ²`` (module docstring)."""
        A = self.components_.astype(np.float64)
        variances = self.explained_variance_.astype(np.float64)
        if self.whiten:
            A = A * np.sqrt(variances)[:, None]
        sigma2 = float(self.noise_variance_)
        return A * np.sqrt(np.maximum(variances - sigma2, 0.0))[:, None], sigma2

    def get_covariance(self) -> np.ndarray:
        """Covariance of the data under the fitted generative model.

        ``C = Aᵀ diag(max(λ - σ², 0)) A + σ² I`` (see :mod:`dkpca._pca_probabilistic`).

        Returns
        -------
        (n_features, n_features) array

        Examples
        --------
        >>> import numpy as np
        >>> from dkpca import PCA
        >>> X = np.random.default_rng(0).normal(size=(200, 3))
        >>> pca = PCA(3).fit(X)
        >>> bool(np.allclose(pca.get_covariance(), np.cov(X, rowvar=False)))
        True
        """
        check_is_fitted(self, "components_")
        B, sigma2 = self._low_rank()
        cov = B.T @ B
        cov.flat[:: len(cov) + 1] += sigma2
        return cov.astype(self.components_.dtype, copy=False)

    def get_precision(self) -> np.ndarray:
        """Inverse of :meth:`get_covariance`, by the matrix inversion lemma.

        Returns
        -------
        (n_features, n_features) array

        Examples
        --------
        >>> import numpy as np
        >>> from dkpca import PCA
        >>> pca = PCA(2).fit(np.random.default_rng(0).normal(size=(100, 4)))
        >>> bool(np.allclose(pca.get_precision() @ pca.get_covariance(), np.eye(4)))
        True
        """
        check_is_fitted(self, "components_")
        B, sigma2 = self._low_rank()
        if sigma2 == 0.0:  # no noise: the covariance itself, inverted as scikit-learn does
            return np.linalg.inv(self.get_covariance().astype(np.float64)).astype(
                self.components_.dtype, copy=False)
        M = sigma2 * np.eye(len(B)) + B @ B.T
        precision = -(B.T @ np.linalg.solve(M, B))
        precision.flat[:: len(precision) + 1] += 1.0
        return (precision / sigma2).astype(self.components_.dtype, copy=False)

    def score_samples(self, X: ArrayLike) -> np.ndarray | da.Array:
        """Log-likelihood of every sample under the fitted model.

        Lazy for dask input, numpy otherwise (CuPy for CuPy input, computed on the host).
        Sparse input is densified one block of rows at a time.

        Parameters
        ----------
        X : array-like, sparse matrix or dask array, (n_samples, n_features)

        Returns
        -------
        (n_samples,) array
            ``-inf`` everywhere, with a :class:`scipy.linalg.LinAlgWarning`, when the model's
            covariance is singular: no noise (``noise_variance_ == 0``) and fewer components
            with variance than features, as scikit-learn reports it. A noise-free model whose
            precision has no positive determinant scores ``-inf`` too (``fast_logdet``).

        Examples
        --------
        >>> import numpy as np
        >>> from dkpca import PCA
        >>> X = np.random.default_rng(0).normal(size=(100, 4))
        >>> PCA(2).fit(X).score_samples(X[:3]).shape
        (3,)
        """
        check_is_fitted(self, "components_")
        check_feature_names(self, X, reset=False)
        if is_device_array(X):
            return array_module(X).asarray(self.score_samples(to_host(X)))
        Xd = _dense_blocks(as_array(X, accept_sparse=True)) if is_sparse(X) else as_dask(X)
        check_features(Xd, self.n_features_in_, "PCA")
        d = self.n_features_in_
        residual = Xd.astype(np.float64) - self.mean_.astype(np.float64)
        B, sigma2 = self._low_rank()
        if sigma2 == 0.0 and _singular_without_noise(B, d, self.n_components_):
            log_like = residual[:, 0].map_blocks(np.full_like, -np.inf, dtype=np.float64)
        elif sigma2 == 0.0:  # dense: the precision as it is
            precision = self.get_precision().astype(np.float64)
            quadratic = (residual * (residual @ precision)).sum(axis=1)
            sign, logdet = np.linalg.slogdet(precision)
            if not sign > 0:  # scikit-learn's fast_logdet: no positive determinant, -inf
                logdet = -np.inf
            log_like = -0.5 * quadratic - 0.5 * (d * math.log(2 * math.pi) - logdet)
        else:  # low rank: x ᵀC⁻¹x = (|x|² - (Bx)ᵀ M⁻¹ (Bx)) / σ²
            M = sigma2 * np.eye(len(B)) + B @ B.T
            factor = np.linalg.cholesky(M)
            projected = residual @ np.linalg.solve(factor, B).T  # (L⁻¹ B x)ᵀ per row
            quadratic = ((residual**2).sum(axis=1) - (projected**2).sum(axis=1)) / sigma2
            logdet = (d - len(B)) * math.log(sigma2) + 2 * float(np.sum(np.log(np.diag(factor))))
            log_like = -0.5 * quadratic - 0.5 * (d * math.log(2 * math.pi) + logdet)
        return like_input(log_like.astype(Xd.dtype), X)

    def score(self, X: ArrayLike, y: object = None) -> float:
        """Mean log-likelihood of the samples under the fitted model.

        Parameters
        ----------
        X : array-like or dask array, (n_samples, n_features)
        y : ignored

        Returns
        -------
        float

        Examples
        --------
        >>> import numpy as np
        >>> from dkpca import PCA
        >>> X = np.random.default_rng(0).normal(size=(100, 4))
        >>> isinstance(PCA(2).fit(X).score(X), float)
        True
        """
        log_like = self.score_samples(X)
        if isinstance(log_like, da.Array):
            log_like = log_like.compute()
        return float(np.mean(log_like, dtype=np.float64))
