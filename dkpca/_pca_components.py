"""How many linear-PCA components to keep, and an orthonormal basis of exactly that width.

scikit-learn's rules for ``n_components`` (an int, a variance fraction with the "> t" tie rule
of gh-15669, ``None`` for ``min(n_samples, n_features)``), the threshold
``min_relative_eigenvalue``, and the completion of a basis whose last directions carry no
variance (the Gram and sketch solvers only find directions with positive variance).
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = ["complete_basis", "fraction_count", "select_count"]


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
