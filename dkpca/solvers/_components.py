"""How many components to keep (tutorial §2.5): a number, a variance fraction, a threshold."""

from __future__ import annotations

import numbers
import warnings
from dataclasses import dataclass

import numpy as np

__all__ = ["ComponentRule"]


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

    @classmethod
    def from_params(cls, n_components: float | None, min_relative: float | None) -> ComponentRule:
        """Build from an estimator's ``n_components`` (int or fraction) and threshold."""
        if isinstance(n_components, numbers.Integral):
            return cls(count=int(n_components), min_relative=min_relative)
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


def positive_part(eigenvalues: np.ndarray, requested: int, owner: str) -> int:
    """How many leading eigenvalues are clearly positive; warn when fewer than requested.

    Components with zero or negative eigenvalues (rank-deficient or indefinite kernels, such as
    the sigmoid kernel) carry no variance and cannot be scaled by ``1 / sqrt(λ)``.
    """
    scale = max(float(eigenvalues[0]), 0.0) if len(eigenvalues) else 0.0
    keep = int(np.count_nonzero(eigenvalues > scale * 1e-12)) if scale > 0 else 0
    if keep == 0:
        raise ValueError(
            f"{owner}: the centred kernel matrix has no positive eigenvalue; the data may be "
            f"constant or the kernel parameters degenerate."
        )
    if keep < requested:
        warnings.warn(
            f"{owner}: only {keep} of the {requested} requested components have a positive "
            f"eigenvalue; keeping {keep}.",
            UserWarning,
            stacklevel=5,  # the user's fit(), through the solver and basis_from_eigenpairs
        )
    return keep
