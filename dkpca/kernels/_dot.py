"""Kernels of inner products: one GEMM on augmented operands and one elementwise pass."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import scipy.sparse as sp

from dkpca._device import array_module, astype, elementwise_in_place

from ._base import (
    Block,
    ExponentialKernel,
    Kernel,
    _affine_product,
    _as_blocks,
    _check_positive,
    _check_real,
    _product,
    _resolve_gamma,
    _squared_norms,
    _with_gamma,
    register_kernel,
)

# A float64 block pair is moved when the common centre's squared norm exceeds this many times
# the blocks' mean squared distance to it. The expansion rounds ``r²`` with an absolute error of
# ~eps (|x|² + |y|²) ~ 2 eps (|c|² + s), s that mean squared distance, while a typical ``r²`` is
# ~2 s: a relative error of ~eps (1 + |c|² / s). Below the ratio that is under ~17 eps (about
# one digit, as near the origin); above it the lost digits grow as log10(|c|² / s), 12 of 16 at
# an offset of 1e6 on unit-spread data, so the move (two O((n + m) d) passes) pays for itself.
_FLOAT64_MOVE_RATIO = 16.0


def _moved_to_common_centre(X: Block, Y: Block) -> tuple[Block, Block, Any, Any]:
    """Move two dense blocks by one common point near both; return them and their squared norms.

    The point is the mean of the two blocks' means (summed in float64), so it is the same
    whichever block comes first, and ``X`` alone (``Y is X``) is moved by its own mean. A
    translation-invariant kernel is unchanged by the move, while its distance expansion
    ``||x||² - 2<x, y> + ||y||²`` then sees norms of the data's spread instead of its offset.
    Costs ``O((n + m) d)`` beside the ``O(n m d)`` product.

    Float32 blocks are always moved. Float64 numpy blocks are moved only when the point's
    squared norm is more than ``_FLOAT64_MOVE_RATIO`` times the blocks' mean squared distance
    to it, so that data near the origin cost two column sums and no copies; the test reuses
    the squared norms, which are returned for the product either way. Float64 blocks of other
    array modules (CuPy) are always moved, as the test would make the device wait for the host.

    Maintenance note: the point needs no extra accuracy, only to be the *same* for both
    blocks, so for float32 it is rounded to float32 and subtracted in float32 (no float64
    copies); the rounding of ``x - c`` is then relative to the spread. The mean squared
    distance is ``(mean ||x||² + mean ||y||²) / 2 - ||c||²``: it cancels only where ``||c||²``
    dominates, which is where the move is taken anyway, and a NaN in it also leads to the
    move. A feature whose mean is not finite (NaN or inf data) is not moved, so a bad row
    spoils only its own row and column. Sparse blocks stay as they are (moving them would
    densify them; sparse data sit near 0).
    """
    xp = array_module(X, Y)
    sparse = sp.issparse(X) or sp.issparse(Y)
    if not sparse and X.dtype == xp.float64 and xp is np:
        x_norms = _squared_norms(X)
        y_norms = x_norms if Y is X else _squared_norms(Y)
        centre = _common_centre(xp, X, Y)
        mean_squares = (
            float(x_norms.sum()) / max(1, X.shape[0]) + float(y_norms.sum()) / max(1, Y.shape[0])
        ) / 2
        squared_centre = float(centre @ centre)
        # spread = mean_squares - squared_centre; keep the blocks while
        # squared_centre <= ratio * spread, written without the subtraction.
        if (1 + _FLOAT64_MOVE_RATIO) * squared_centre <= _FLOAT64_MOVE_RATIO * mean_squares:
            return X, Y, x_norms, y_norms
    elif not sparse and X.dtype == xp.float32:
        centre = astype(_common_centre(xp, X, Y), xp.float32)
    elif not sparse and X.dtype == xp.float64:
        centre = _common_centre(xp, X, Y)
    else:
        return X, Y, _squared_norms(X), _squared_norms(Y)
    moved = X - centre
    other = moved if Y is X else Y - centre
    norms = _squared_norms(moved)
    return moved, other, norms, norms if Y is X else _squared_norms(other)


def _common_centre(xp: Any, X: Block, Y: Block) -> Any:
    """Return the float64 mean of the two blocks' means, with non-finite features set to 0."""
    centre = xp.sum(X, axis=0, dtype=xp.float64) / max(1, X.shape[0])
    if Y is not X:
        centre = (centre + xp.sum(Y, axis=0, dtype=xp.float64) / max(1, Y.shape[0])) / 2
    return xp.where(xp.isfinite(centre), centre, 0.0)


@register_kernel
class RBF(ExponentialKernel):
    """Gaussian (radial basis function) kernel ``exp(-gamma ||x - y||²)``.

    Parameters
    ----------
    gamma : float, optional
        Inverse length scale. ``None`` resolves to ``1 / n_features`` at fit time.
    sigma2 : float, optional
        Alternative parameterisation ``exp(-||x - y||² / (2 sigma2))`` (MDD paper).
    c : float, optional
        Alternative parameterisation ``exp(-||x - y||² / c)`` (LOO paper).

    Notes
    -----
    Squared distances come from the GEMM expansion ``||x||² - 2<x, y> + ||y||²``, which loses
    digits when the norms are large compared with the distances. Blocks are therefore first
    moved by a common point (the mean of the two blocks' means; the kernel is translation
    invariant): float32 blocks always, so the float32 GEMM keeps ~1e-6 accuracy for data far
    from the origin, and float64 blocks when that point's squared norm exceeds 16 times the
    blocks' mean squared distance to it, so float64 keeps ~1e-15 relative accuracy of typical
    distances at any offset (scikit-learn expands about the origin and keeps ~1e-16 of the
    offset's squared norm instead). Data near the origin are not copied.

    Examples
    --------
    >>> import numpy as np
    >>> k = RBF(sigma2=2.0)
    >>> k.gamma
    0.25
    >>> k.pairwise(np.zeros((1, 2)), np.ones((1, 2))).round(4)
    array([[0.6065]])
    """

    name = "rbf"
    aliases = ("gaussian",)
    _params = ("gamma",)
    runs_on_gpu = True

    positive_semidefinite = True
    translation_invariant = True

    def __init__(
        self, gamma: float | None = None, *, sigma2: float | None = None, c: float | None = None
    ) -> None:
        given = [p for p, v in (("gamma", gamma), ("sigma2", sigma2), ("c", c)) if v is not None]
        if len(given) > 1:
            raise ValueError(f"RBF: give at most one of gamma, sigma2 and c, got {given}")
        for name, value in (("gamma", gamma), ("sigma2", sigma2), ("c", c)):
            _check_positive(name, value, "RBF")
        if sigma2 is not None:
            gamma = 1.0 / (2.0 * sigma2)
        elif c is not None:
            gamma = 1.0 / c
        self.gamma = None if gamma is None else float(gamma)

    @property
    def sigma2(self) -> float | None:
        """The width in ``exp(-r² / (2 sigma2))``."""
        return None if self.gamma is None else 1.0 / (2.0 * self.gamma)

    @property
    def c(self) -> float | None:
        """The scale in ``exp(-r² / c)``."""
        return None if self.gamma is None else 1.0 / self.gamma

    def with_defaults(self, n_features: int) -> RBF:
        return _with_gamma(self, n_features)

    def _exponent(self, X: Block, Y: Block | None) -> np.ndarray:
        X, Y, x_norms, y_norms = _moved_to_common_centre(*_as_blocks(X, Y))
        g = _resolve_gamma(self.gamma, X.shape[1])
        # -g (|x|² - 2<x,y> + |y|²) as one product; distances are >= 0 up to rounding, so the
        # exponent is at most a few ulps above 0 and no clipping pass is needed.
        return _affine_product(X, Y, 2.0 * g, [-g * x_norms, 1.0], [1.0, -g * y_norms])


@register_kernel
class Polynomial(Kernel):
    """Polynomial kernel ``(gamma <x, y> + coef0) ** degree``.

    Parameters
    ----------
    degree : int, default=3
    gamma : float, optional
        ``None`` resolves to ``1 / n_features`` at fit time.
    coef0 : float, default=1.0

    Examples
    --------
    >>> import numpy as np
    >>> Polynomial(degree=2, gamma=1.0, coef0=1.0).pairwise(np.ones((1, 2)))
    array([[9.]])
    """

    name = "polynomial"
    aliases = ("poly",)
    _params = ("degree", "gamma", "coef0")
    runs_on_gpu = True

    def __init__(self, degree: int = 3, gamma: float | None = None, coef0: float = 1.0) -> None:
        if isinstance(degree, bool) or not isinstance(degree, numbers.Integral) or degree < 1:
            raise ValueError(f"Polynomial: degree must be an int >= 1, got {degree!r}")
        _check_positive("gamma", gamma, "Polynomial")
        _check_real("coef0", coef0, "Polynomial")
        self.degree = int(degree)
        self.gamma = None if gamma is None else float(gamma)
        self.coef0 = float(coef0)

    @property
    def positive_semidefinite(self) -> bool:
        # A polynomial with non-negative coefficients in <x, y>; coef0 < 0 breaks that.
        return self.coef0 >= 0

    def with_defaults(self, n_features: int) -> Polynomial:
        return _with_gamma(self, n_features)

    def pairwise(self, X: Block, Y: Block | None = None) -> np.ndarray:
        X, Y = _as_blocks(X, Y)
        g = _resolve_gamma(self.gamma, X.shape[1])
        K = _affine_product(X, Y, g, [self.coef0], [1.0])
        with np.errstate(over="ignore"):  # overflow is reported by the solvers' finite check
            K **= self.degree
        return K

    def diag(self, X: Block) -> np.ndarray:
        X, _ = _as_blocks(X, None)
        g = _resolve_gamma(self.gamma, X.shape[1])
        return (g * _squared_norms(X) + self.coef0) ** self.degree


@register_kernel
class Sigmoid(Kernel):
    """Sigmoid (hyperbolic tangent) kernel ``tanh(gamma <x, y> + coef0)``.

    Not positive semi-definite in general: the centred matrix can have negative eigenvalues,
    which kernel PCA drops.

    Examples
    --------
    >>> import numpy as np
    >>> Sigmoid(gamma=1.0, coef0=0.0).pairwise(np.zeros((1, 2))).item()
    0.0
    """

    name = "sigmoid"
    _params = ("gamma", "coef0")
    runs_on_gpu = True

    def __init__(self, gamma: float | None = None, coef0: float = 1.0) -> None:
        _check_positive("gamma", gamma, "Sigmoid")
        _check_real("coef0", coef0, "Sigmoid")
        self.gamma = None if gamma is None else float(gamma)
        self.coef0 = float(coef0)

    def with_defaults(self, n_features: int) -> Sigmoid:
        return _with_gamma(self, n_features)

    def pairwise(self, X: Block, Y: Block | None = None) -> np.ndarray:
        X, Y = _as_blocks(X, Y)
        g = _resolve_gamma(self.gamma, X.shape[1])
        K = _affine_product(X, Y, g, [self.coef0], [1.0])
        return elementwise_in_place(array_module(K), "tanh", K)

    def diag(self, X: Block) -> np.ndarray:
        X, _ = _as_blocks(X, None)
        g = _resolve_gamma(self.gamma, X.shape[1])
        return array_module(X).tanh(g * _squared_norms(X) + self.coef0)


@register_kernel
class Linear(Kernel):
    """Linear kernel ``<x, y>``; kernel PCA with it equals linear PCA.

    Examples
    --------
    >>> import numpy as np
    >>> Linear().pairwise(np.array([[1.0, 2.0]]), np.array([[3.0, 4.0]]))
    array([[11.]])
    """

    name = "linear"
    runs_on_gpu = True

    positive_semidefinite = True

    def pairwise(self, X: Block, Y: Block | None = None) -> np.ndarray:
        X, Y = _as_blocks(X, Y)
        return _affine_product(X, Y, 1.0, [], [])

    def diag(self, X: Block) -> np.ndarray:
        X, _ = _as_blocks(X, None)
        return _squared_norms(X)


def _inverse_norms(X: Block) -> np.ndarray:
    """Return ``1 / ||x||`` per row, 0 for zero rows (NaN rows stay NaN)."""
    norms = np.sqrt(_squared_norms(X))
    inverse = np.zeros_like(norms)
    np.divide(1.0, norms, out=inverse, where=norms != 0)
    return inverse


@register_kernel
class Cosine(Kernel):
    """Cosine similarity ``<x, y> / (||x|| ||y||)``; a row of zeros gives 0 against anything.

    The linear kernel on rows scaled to unit length, hence positive semi-definite. It has no
    parameters.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    >>> Cosine().pairwise(X).round(4)
    array([[1.    , 0.7071, 0.    ],
           [0.7071, 1.    , 0.    ],
           [0.    , 0.    , 0.    ]])
    >>> Cosine().diag(X)
    array([1., 1., 0.])
    """

    name = "cosine"

    positive_semidefinite = True

    def pairwise(self, X: Block, Y: Block | None = None) -> np.ndarray:
        X, Y = _as_blocks(X, Y)
        x_scale, y_scale = _inverse_norms(X), _inverse_norms(Y)
        if sp.issparse(X) or sp.issparse(Y):
            K = _product(X, Y)
            K *= x_scale[:, None]
            K *= y_scale[None, :]
            return K
        # Scaling the operands costs (n + m) d, scaling K would cost 2 n m; the scaled copies
        # are distinct buffers, so X @ X.T never reaches syrk (see _augmented_product).
        with np.errstate(invalid="ignore", over="ignore"):
            return (X * x_scale[:, None]) @ (Y * y_scale[:, None]).T

    def diag(self, X: Block) -> np.ndarray:
        X, _ = _as_blocks(X, None)
        squared = _squared_norms(X)
        out = np.zeros_like(squared)
        return np.divide(squared, squared, out=out, where=squared != 0)
