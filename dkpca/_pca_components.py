"""How many linear-PCA components to keep, and an orthonormal basis of exactly that width.

scikit-learn's rules for ``n_components`` (an int, a variance fraction with the "> t" tie rule
of gh-15669, ``None`` for ``min(n_samples, n_features)``), the threshold
``min_relative_eigenvalue``, and the completion of a basis whose last directions carry no
variance (the Gram and sketch solvers only find directions with positive variance).
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = ["complete_basis", "fraction_count", "orthonormal_tail", "select_count"]

#: Converted vectors ``X_cᵀ v / sqrt(λ)`` are orthonormal to about ``eps λ₁ / λ``: from this
#: fraction of the first eigenvalue down (errors above about 2e-10) they are orthonormalised.
TAIL_RATIO = 1e-6


def fraction_count(variances: np.ndarray, total: float, fraction: float) -> int:
    """Fewest leading components whose variance ratio sums to *more than* ``fraction``.

    scikit-learn's rule (gh-15669): a cumulative ratio that equals ``fraction`` exactly is
    not enough, the next component is kept too.

    Parameters
    ----------
    variances : (m,) array
        Explained variances, descending (the whole spectrum).
    total : float
        Total variance (the trace of the covariance).
    fraction : float
        In ``(0, 1)``.

    Returns
    -------
    int
        Between 1 and ``m``.

    Examples
    --------
    >>> import numpy as np
    >>> v = np.array([2.0, 1.0, 1.0])
    >>> fraction_count(v, 4.0, 0.5), fraction_count(v, 4.0, 0.75), fraction_count(v, 4.0, 0.7)
    (2, 3, 2)
    """
    ratio_cumsum = np.cumsum(variances / total) if total > 0 else np.zeros(len(variances))
    count = int(np.searchsorted(ratio_cumsum, fraction, side="right")) + 1
    return max(1, min(count, len(variances)))


def select_count(
    variances: np.ndarray, total: float, n_components: object, min_relative: float | None
) -> int:
    """Components to keep under an integer or fractional ``n_components`` and a threshold.

    Parameters
    ----------
    variances : (m,) array
        Leading explained variances, descending (all of them for a fraction).
    total : float
        Total variance.
    n_components : int, float or None
        ``None`` keeps all ``m``.
    min_relative : float or None
        Keep only variances at least this fraction of the first (the stricter rule wins).

    Examples
    --------
    >>> import numpy as np
    >>> select_count(np.array([4.0, 2.0, 0.1]), 6.1, None, 0.1)
    2
    """
    m = len(variances)
    if isinstance(n_components, numbers.Integral):
        m = min(m, int(n_components))
    elif isinstance(n_components, numbers.Real):
        m = fraction_count(variances, total, float(n_components))
    if min_relative is not None and len(variances) and variances[0] > 0:
        m = min(m, max(1, int(np.count_nonzero(variances >= min_relative * variances[0]))))
    return m


def complete_basis(vectors: np.ndarray, width: int) -> np.ndarray:
    """Orthonormal columns: ``vectors`` followed by directions orthogonal to them, ``width`` in all.

    Directions without variance are arbitrary, as in any SVD; they are drawn from a fixed
    seed, so a fit is reproducible.

    Examples
    --------
    >>> import numpy as np
    >>> W = complete_basis(np.eye(4)[:, :2], 3)
    >>> W.shape, bool(np.allclose(W.T @ W, np.eye(3)))
    ((4, 3), True)
    """
    d, k = vectors.shape
    missing = width - k
    if missing <= 0:
        return vectors[:, :width]
    extra = np.random.default_rng(0).standard_normal((d, missing))
    span = np.linalg.qr(vectors)[0] if k else vectors  # approximate vectors (sketch) too
    for _ in range(2):  # twice is enough (Kahan's "twice is enough" for Gram–Schmidt)
        extra -= span @ (span.T @ extra)
        extra, _ = np.linalg.qr(extra)
    return np.hstack([vectors, extra])


def orthonormal_tail(vectors: np.ndarray, eigenvalues: np.ndarray) -> np.ndarray:
    """Orthonormalise, in place and in order, the columns of small eigenvalues.

    The gram and wide randomized solvers convert dual eigenvectors to directions,
    ``w = X_cᵀ v / sqrt(λ)``; the rounding of ``λ`` (an absolute ``eps λ₁``, from forming and
    diagonalising the ``n × n`` matrix) leaves ``w`` a length and overlaps of about
    ``eps λ₁ / λ``: nothing for the leading directions, a few per cent near the rounding
    floor. Columns below :data:`TAIL_RATIO` of the first eigenvalue lose their components
    along the earlier columns (twice, Kahan's "twice is enough") and are orthonormalised by
    QR, each keeping its side; the earlier columns, accurate, are left as they are.

    Parameters
    ----------
    vectors : (d, k) float64 array
        Converted directions, in the order of ``eigenvalues``.
    eigenvalues : (k,) array
        Descending and positive.

    Returns
    -------
    (d, k) array
        ``vectors``, its tail orthonormal.

    Examples
    --------
    >>> import numpy as np
    >>> W = np.array([[1.0, 0.01], [0.0, 1.02]])
    >>> W = orthonormal_tail(W, np.array([1.0, 1e-12]))
    >>> bool(np.allclose(W, np.eye(2)))
    True
    """
    if not len(eigenvalues):
        return vectors
    start = int(np.searchsorted(-eigenvalues, -eigenvalues[0] * TAIL_RATIO, side="right"))
    if start >= vectors.shape[1]:
        return vectors
    head, tail = vectors[:, :start], vectors[:, start:]
    for _ in range(2 if start else 0):
        tail -= head @ (head.T @ tail)
    Q, R = np.linalg.qr(tail)
    vectors[:, start:] = Q * np.where(np.diag(R) < 0, -1.0, 1.0)
    return vectors
