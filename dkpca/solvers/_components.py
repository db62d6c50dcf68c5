"""How many components to keep (tutorial §2.5): a number, a variance fraction, a threshold."""

from __future__ import annotations

import logging
import numbers
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["ComponentRule", "positive_part", "warn_if_fraction_missed", "zero_padded"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ComponentRule:
    """A rule for the number of components.

    Parameters
    ----------
    count : int or None
        Keep this many (the first approach of the tutorial's §2.5). ``None``: no fixed count.
    fraction : float or None
        Keep the fewest components whose eigenvalues sum to at least this fraction of the total
        variance (second approach).
    min_relative : float or None
        Keep components whose eigenvalue is at least this fraction of the first (third
        approach). Combined with a count or a fraction, the stricter rule wins.
    keep_zero : bool
        With a count: keep exactly that many components even when some have a zero eigenvalue
        (they become zero columns, as scikit-learn's ``remove_zero_eig=False``); otherwise
        components without a positive eigenvalue are dropped.

    Examples
    --------
    >>> import numpy as np
    >>> rule = ComponentRule.from_params(0.9, None)
    >>> rule.select(np.array([5.0, 3.0, 1.0, 1.0]), total=10.0)
    3
    """

    count: int | None = None
    fraction: float | None = None
    min_relative: float | None = None
    keep_zero: bool = False

    @classmethod
    def from_params(
        cls, n_components: float | None, min_relative: float | None,
        remove_zero_eig: bool = True,
    ) -> ComponentRule:
        """Build from an estimator's ``n_components`` (int or fraction) and threshold."""
        if isinstance(n_components, numbers.Integral):
            return cls(count=int(n_components), min_relative=min_relative,
                       keep_zero=not remove_zero_eig and min_relative is None)
        return cls(fraction=n_components, min_relative=min_relative)

    @property
    def needs_full_spectrum(self) -> bool:
        """Whether the count depends on eigenvalues not yet known."""
        return self.count is None

    def select(self, eigenvalues: np.ndarray, total: float) -> int:
        """Return how many leading ``eigenvalues`` (descending) to keep."""
        m = len(eigenvalues) if self.count is None else min(self.count, len(eigenvalues))
        if self.fraction is not None:
            reached = np.nonzero(np.cumsum(eigenvalues) >= self.fraction * total)[0]
            m = min(m, int(reached[0]) + 1 if reached.size else len(eigenvalues))
        if self.min_relative is not None and len(eigenvalues):
            m = min(m, int(np.count_nonzero(eigenvalues >= self.min_relative * eigenvalues[0])))
        return max(m, 1)

    def satisfied_by(self, eigenvalues: np.ndarray, total: float) -> bool:
        """Whether ``eigenvalues`` (the leading ones only) are enough to apply the rule."""
        if self.count is not None and self.fraction is None and self.min_relative is None:
            return len(eigenvalues) >= self.count
        m = self.select(eigenvalues, total)
        return m < len(eigenvalues)


#: Eigenvalues below this fraction of the first are zero (rounding of a rank-deficient kernel).
ZERO_RATIO = 1e-12

#: The same for products with float32 kernel tiles, accurate to about 1e-7 of the first
#: eigenvalue (see :mod:`dkpca.tiles`): what lies below is rounding noise.
FLOAT32_ZERO_RATIO = 1e-6

#: A negative eigenvalue below ``-NEGATIVE_RATIO`` times the first is significant: the kernel
#: matrix is not PSD there (scikit-learn's threshold for float64).
NEGATIVE_RATIO = 1e-5


def positive_part(
    eigenvalues: np.ndarray, rule: ComponentRule, owner: str, zero_ratio: float = ZERO_RATIO,
    requested: int | None = None,
) -> int:
    """How many leading eigenvalues are clearly positive; warn when fewer than requested.

    Components with zero or negative eigenvalues (rank-deficient or indefinite kernels, such as
    the sigmoid kernel) carry no variance and cannot be scaled by ``1 / sqrt(λ)``: they are
    dropped with a warning, or, under ``rule.keep_zero``, kept as zero columns (see
    :func:`zero_padded`; the width asked for, so only logged). A
    significantly negative eigenvalue among the requested ones is an error, as in
    scikit-learn: a count that reaches into an indefinite kernel's negative part. Eigenvalues
    up to ``zero_ratio`` times the first are zero. ``requested`` is the count the messages
    name when the caller had fewer eigenvalues than ``rule.count`` to offer (a Nyström feature
    map of lower rank); by default ``len(eigenvalues)``.

    Examples
    --------
    >>> positive_part(np.array([4.0, 1e-15]), ComponentRule(count=2, keep_zero=True), "Demo")
    1
    """
    scale = max(float(eigenvalues[0]), 0.0) if len(eigenvalues) else 0.0
    keep = int(np.count_nonzero(eigenvalues > scale * zero_ratio)) if scale > 0 else 0
    if requested is None:
        requested = rule.count if rule.keep_zero else len(eigenvalues) if rule.count else 0
    if rule.keep_zero and len(eigenvalues) and eigenvalues[-1] < -NEGATIVE_RATIO * scale:
        raise ValueError(
            f"{owner}: There are significant negative eigenvalues ({eigenvalues[-1]:.3g} "
            f"against {scale:.3g}) among the {len(eigenvalues)} requested components: the "
            f"kernel matrix is not positive semi-definite there. Ask for fewer components or "
            f"use a positive semi-definite kernel."
        )
    if keep == 0 and not rule.keep_zero:
        warnings.warn(
            f"{owner}: the centred kernel matrix has no positive eigenvalue (constant data or "
            f"degenerate kernel parameters); the model has no components.",
            UserWarning,
            stacklevel=_outside_dkpca(),
        )
    elif keep < requested and rule.keep_zero:  # the width asked for, eigenvalues_ shows 0
        logger.info("%s: only %d of the %d requested components have a positive eigenvalue; "
                    "the other %d are zero columns", owner, keep, requested, requested - keep)
    elif keep < requested:
        warnings.warn(
            f"{owner}: only {keep} of the {requested} requested components have a positive "
            f"eigenvalue; keeping {keep} (remove_zero_eig=True).",
            UserWarning,
            stacklevel=_outside_dkpca(),
        )
    return keep


def _outside_dkpca() -> int:
    """Return the ``stacklevel`` of the first caller outside dkpca, seen from the caller.

    The solvers reach :func:`positive_part` through paths of different depths; a warning
    should point at the user's ``fit``.
    """
    package = str(Path(__file__).resolve().parents[1])
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def zero_padded(values: np.ndarray, coef: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Pad eigenvalues with zeros and coefficients with zero columns up to ``width``.

    Examples
    --------
    >>> values, coef = zero_padded(np.array([2.0]), np.ones((3, 1)), 2)
    >>> values.tolist(), coef[:, 1].tolist()
    ([2.0, 0.0], [0.0, 0.0, 0.0])
    """
    missing = width - len(values)
    if missing <= 0:
        return values, coef
    return (np.concatenate([values, np.zeros(missing)]),
            np.hstack([coef, np.zeros((coef.shape[0], missing), dtype=coef.dtype)]))


def warn_if_fraction_missed(variances: np.ndarray, total: float, fraction: float | None, *,
                            owner: str, found: str, limit: str, instead: str) -> None:
    """Warn that an approximate solver's components explain no more than the fraction asked for.

    A fraction keeps the fewest components explaining *more* than it (scikit-learn's rule);
    when every component the solver found stays at or below it, all are kept, and the
    solver's rank (``limit``, the parameter to raise) is what limits the fit, not the data.

    Examples
    --------
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_if_fraction_missed(np.array([3.0, 1.0]), 10.0, 0.9, owner="PCA",
    ...                             found="directions the sketch", limit="sketch_dim=2",
    ...                             instead="'covariance'")
    >>> str(caught[0].message)[:50]
    'PCA: the 2 directions the sketch found explain 0.4'
    """
    if fraction is None:
        return
    reached = float(np.sum(variances)) / total if total > 0 else 1.0
    if reached <= fraction:
        warnings.warn(
            f"{owner}: the {len(variances)} {found} found explain {reached:.3g} of the "
            f"variance, not more than n_components={fraction}; all of them are kept. {limit} "
            f"is too small for that fraction: raise it, or use solver={instead}.",
            UserWarning, stacklevel=_outside_dkpca())
