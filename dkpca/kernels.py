"""Kernel functions evaluated on two in-memory blocks (numpy arrays or ``scipy.sparse``).

Kernels
-------
Named kernels, registered by name (aliases in parentheses), with scikit-learn's formulas:

- :class:`RBF` ``"rbf"`` (``"gaussian"``): ``exp(-gamma ||x - y||²)``
- :class:`Polynomial` ``"polynomial"`` (``"poly"``): ``(gamma <x, y> + coef0) ** degree``
- :class:`Sigmoid` ``"sigmoid"``: ``tanh(gamma <x, y> + coef0)``
- :class:`Linear` ``"linear"``: ``<x, y>``
- :class:`Laplacian` ``"laplacian"``: ``exp(-gamma ||x - y||_1)``
- :class:`Cosine` ``"cosine"``: ``<x, y> / (||x|| ||y||)`` (0 for a zero row)
- :class:`Chi2` ``"chi2"``: ``exp(-gamma Σ (x_k - y_k)² / (x_k + y_k))``, non-negative data
- :class:`AdditiveChi2` ``"additive_chi2"``: ``-Σ (x_k - y_k)² / (x_k + y_k)`` (not PSD)
- :class:`SumKernel` ``"sum"``: a sum of kernels, built with ``+``

and :class:`CallableKernel`, a user's Python function (see below), which has no config.

The product kernels (RBF, polynomial, sigmoid, linear) are one matrix product (GEMM) on
*augmented* operands followed by at most one elementwise pass over the output, done in place.
For the RBF kernel the squared distance ``||x||² - 2<x, y> + ||y||²`` is folded into the
product by appending two columns to each operand, so a block costs one GEMM plus one ``exp``:
the unavoidable work. The L1 and chi² kernels work on bounded row chunks instead.

Kernels keep ``float32`` inputs in ``float32`` and compute everything else in ``float64``. They
are registered by name and round-trip through a JSON-serialisable config::

    {"name": "rbf", "configuration": {"gamma": 0.5}}

Three RBF parameterisations appear in the source papers; :class:`RBF` keeps one canonical
``gamma`` and accepts the other two as conversions: ``exp(-gamma r²)``,
``exp(-r² / (2 sigma2))`` (``gamma = 1 / (2 sigma2)``) and ``exp(-r² / c)`` (``gamma = 1 / c``).

Sparse blocks
-------------
``pairwise``, ``pairwise_offset`` and ``diag`` of every named kernel accept CSR/CSC
``scipy.sparse`` matrices or arrays for either block, in any mix with dense numpy arrays, and
return a dense numpy array. A sparse operand is never densified whole: inner products are a
sparse product and squared norms come from ``X.multiply(X)``; the L1 and chi² kernels densify
row chunks of at most ~32 MiB at a time.

Callable kernels
----------------
:func:`get_kernel` wraps any Python callable in a :class:`CallableKernel`. Two conventions are
accepted and told apart by one small probe per call: a *block* function ``f(X, Y, **params)``
returning the ``(len(X), len(Y))`` matrix (fast; sparse blocks are passed as given), or
scikit-learn's *per-pair* function ``f(x, y, **params)`` on two dense 1-D rows returning a
scalar (one Python call per pair of rows: slow). A model with a callable kernel cannot be
saved; register a :class:`Kernel` subclass with :func:`register_kernel` for that.
"""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
from scipy.spatial.distance import cdist

__all__ = [
    "RBF",
    "AdditiveChi2",
    "CallableKernel",
    "Chi2",
    "Cosine",
    "Kernel",
    "Laplacian",
    "Linear",
    "Polynomial",
    "Sigmoid",
    "SumKernel",
    "get_kernel",
    "kernel_from_config",
    "register_kernel",
]

#: A kernel block: a dense numpy array or a CSR/CSC ``scipy.sparse`` matrix or array.
Block = Any

# Bound on the bytes of a temporary that the chunked kernels (L1 distances, chi², densified
# sparse rows, callable diagonals) allocate at once.
_TEMP_BYTES = 32 * 2**20

_REGISTRY: dict[str, type[Kernel]] = {}


def register_kernel(cls: type[Kernel]) -> type[Kernel]:
    """Register a kernel class under its ``name`` (usable as a decorator).

    Examples
    --------
    >>> get_kernel("rbf", gamma=0.5)
    RBF(gamma=0.5)
    """
    _REGISTRY[cls.name] = cls
    for alias in cls.aliases:
        _REGISTRY[alias] = cls
    return cls


def _as_operand(A: Block) -> Block:
    """Return a numpy array, or a CSR/CSC sparse block (other sparse formats become CSR)."""
    if sp.issparse(A):
        return A if A.format in ("csr", "csc") else A.tocsr()
    return np.asarray(A)


def _check_shapes(X: Block, Y: Block) -> None:
    if X.ndim != 2 or Y.ndim != 2:
        raise ValueError(f"kernel blocks must be 2-D, got shapes {X.shape} and {Y.shape}")
    if X.shape[1] != Y.shape[1]:
        raise ValueError(
            f"kernel blocks have different numbers of features: {X.shape[1]} and {Y.shape[1]}"
        )


def _result_dtype(X: Block, Y: Block) -> type[np.floating]:
    return np.float32 if X.dtype == np.float32 and Y.dtype == np.float32 else np.float64


def _as_blocks(X: Block, Y: Block | None) -> tuple[Block, Block]:
    """Validate two blocks and bring them to a common floating dtype (sparse stays sparse)."""
    X = _as_operand(X)
    Y = X if Y is None else _as_operand(Y)
    _check_shapes(X, Y)
    dtype = _result_dtype(X, Y)
    return X.astype(dtype, copy=False), Y.astype(dtype, copy=False)


def _row_chunks(A: Block, rows: int) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(start, A[start:start + rows])`` as dense arrays (views when ``A`` is dense)."""
    for start in range(0, A.shape[0], rows):
        part = A[start : start + rows]
        yield start, part.toarray() if sp.issparse(part) else part


def _rows_within(bytes_per_row: int) -> int:
    """Return how many rows of ``bytes_per_row`` fit in the temporary budget (at least 1)."""
    return max(1, _TEMP_BYTES // max(1, bytes_per_row))


def _augmented_product(
    X: np.ndarray,
    Y: np.ndarray,
    x_scale: float,
    x_cols: list[np.ndarray | float],
    y_cols: list[np.ndarray | float],
) -> np.ndarray:
    """Return ``[x_scale X, x_cols] @ [Y, y_cols]ᵀ`` as one GEMM.

    Maintenance note: the operands are always fresh buffers, so numpy never routes the product
    to ``syrk`` on a buffer times its own transpose (which crashes some OpenBLAS builds for
    large blocks, see the project's API notes).
    """
    n, d = X.shape
    m = Y.shape[0]
    extra = len(x_cols)
    Xa = np.empty((n, d + extra), dtype=X.dtype)
    np.multiply(X, x_scale, out=Xa[:, :d])
    Ya = np.empty((m, d + extra), dtype=Y.dtype)
    Ya[:, :d] = Y
    for k, (xc, yc) in enumerate(zip(x_cols, y_cols, strict=True)):
        Xa[:, d + k] = xc
        Ya[:, d + k] = yc
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite input: the solvers report it
        return Xa @ Ya.T


def _product(X: Block, Y: Block) -> np.ndarray:
    """Return ``X @ Y.T`` as a fresh C-ordered numpy array when ``X`` or ``Y`` is sparse."""
    with np.errstate(invalid="ignore", over="ignore"):
        P = X @ Y.T
    if sp.issparse(P):
        P = P.toarray()
    return np.ascontiguousarray(P, dtype=_result_dtype(X, Y))


def _affine_product(
    X: Block,
    Y: Block,
    x_scale: float,
    x_cols: list[np.ndarray | float],
    y_cols: list[np.ndarray | float],
) -> np.ndarray:
    """Return ``x_scale X Yᵀ + Σ_k x_cols[k] y_cols[k]ᵀ`` for dense or sparse blocks.

    Dense blocks take the single-GEMM path of :func:`_augmented_product`. With a sparse block
    the product is a sparse product made dense, and the rank-one terms are added in place
    (each broadcast from a column or a row unless both sides are vectors).
    """
    if not (sp.issparse(X) or sp.issparse(Y)):
        return _augmented_product(X, Y, x_scale, x_cols, y_cols)
    K = _product(X, Y)
    with np.errstate(invalid="ignore", over="ignore"):
        if x_scale != 1.0:
            K *= x_scale
        for xc, yc in zip(x_cols, y_cols, strict=True):
            K += np.reshape(np.asarray(xc, K.dtype), (-1, 1)) * np.reshape(
                np.asarray(yc, K.dtype), (1, -1)
            )
    return K


def _squared_norms(X: Block) -> np.ndarray:
    if sp.issparse(X):
        return np.asarray(X.multiply(X).sum(axis=1), dtype=X.dtype).ravel()
    return np.einsum("ij,ij->i", X, X)


def _exp_with_offset(Z: np.ndarray) -> tuple[np.ndarray, float]:
    """Return ``(exp(Z) - c, c)`` in place, with ``c`` 1 when most entries are near 1, else 0.

    Entries near 1 keep their digits as ``exp(z) - 1``, entries near 0 as ``exp(z)``: take the
    form that suits most of the block, judged on a subsample of its rows.
    """
    sample = Z[:: max(1, Z.shape[0] // 64)]
    if sample.size and float(np.exp(sample).mean()) > 0.5:
        return np.expm1(Z, out=Z), 1.0
    return np.exp(Z, out=Z), 0.0


def _check_non_negative(A: Block, owner: str, kernel: str, which: str) -> None:
    values = A.data if sp.issparse(A) else A
    if values.size and values.min() < 0:
        raise ValueError(
            f"{owner}: the {kernel} kernel needs non-negative data (histograms, counts), but "
            f"{which} of shape {A.shape} has negative values (minimum {float(values.min())!r}); "
            f"shift or clip the features, or use another kernel"
        )


def _resolve_gamma(gamma: float | None, n_features: int) -> float:
    return 1.0 / n_features if gamma is None else float(gamma)


def _check_positive(name: str, value: Any, owner: str) -> None:
    if value is None:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not np.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"{owner}: {name} must be a positive finite number, got {value!r}")


def _check_real(name: str, value: Any, owner: str) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not np.isfinite(value):
        raise ValueError(f"{owner}: {name} must be a finite real number, got {value!r}")


class Kernel(ABC):
    """Base class of all kernels.

    Subclasses implement :meth:`pairwise` and :meth:`diag` on numpy blocks and list their
    parameters in ``_params`` so that ``get_config``/``from_config``, equality and ``repr``
    work without further code.
    """

    name: ClassVar[str]
    aliases: ClassVar[tuple[str, ...]] = ()
    _params: ClassVar[tuple[str, ...]] = ()

    @property
    def positive_semidefinite(self) -> bool:
        """Whether every kernel matrix of this kernel is PSD (``False`` when not known).

        Examples
        --------
        >>> RBF().positive_semidefinite, Sigmoid().positive_semidefinite
        (True, False)
        """
        return False

    @property
    def translation_invariant(self) -> bool:
        """Whether ``k(x + c, y + c) = k(x, y)`` for every shift ``c``.

        Such kernels can be evaluated on data moved near the origin, which keeps a float32
        distance expansion accurate (see :mod:`dkpca.tiles`).

        Examples
        --------
        >>> RBF().translation_invariant, Linear().translation_invariant
        (True, False)
        """
        return False

    @abstractmethod
    def pairwise(self, X: Block, Y: Block | None = None) -> np.ndarray:
        """Return the kernel matrix ``K[i, j] = k(X[i], Y[j])`` (``Y=None`` means ``X``).

        ``X`` and ``Y`` are numpy arrays or CSR/CSC ``scipy.sparse`` blocks; ``K`` is dense.
        """

    @abstractmethod
    def diag(self, X: Block) -> np.ndarray:
        """Return ``k(X[i], X[i])`` for every row, without forming the matrix."""

    def pairwise_offset(self, X: Block, Y: Block | None = None) -> tuple[np.ndarray, float]:
        """Return ``K - c`` and a constant ``c`` such that entries near ``c`` keep their digits.

        A kernel whose values crowd around a constant (an RBF kernel with a small ``gamma`` is
        ``1 - O(gamma r²)`` everywhere) loses those digits when it is rounded, to float32
        above all; computing ``K - c`` directly keeps them. The default is ``c = 0``.

        Examples
        --------
        >>> import numpy as np
        >>> K, c = RBF(gamma=1e-8).pairwise_offset(np.zeros((1, 1)), np.ones((1, 1)))
        >>> c, K.dtype, bool(K[0, 0] == np.expm1(-1e-8))
        (1.0, dtype('float64'), True)
        """
        return self.pairwise(X, Y), 0.0

    def with_defaults(self, n_features: int) -> Kernel:
        """Return a copy whose data-dependent defaults (``gamma=None``) are resolved."""
        return self

    def get_config(self) -> dict[str, Any]:
        """Return ``{"name": ..., "configuration": {...}}`` holding JSON builtins only.

        Examples
        --------
        >>> RBF(gamma=0.25).get_config()
        {'name': 'rbf', 'configuration': {'gamma': 0.25}}
        """
        return {"name": self.name, "configuration": {p: getattr(self, p) for p in self._params}}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Kernel:
        """Build a kernel from :meth:`get_config` output.

        Examples
        --------
        >>> Kernel.from_config({"name": "polynomial", "configuration": {"degree": 2}})
        Polynomial(degree=2, gamma=None, coef0=1.0)
        """
        return kernel_from_config(config)

    def __add__(self, other: Kernel) -> SumKernel:
        if not isinstance(other, Kernel):
            return NotImplemented
        left = self.kernels if isinstance(self, SumKernel) else (self,)
        right = other.kernels if isinstance(other, SumKernel) else (other,)
        return SumKernel(*left, *right)

    def _key(self) -> Any:
        """Return what equality compares: the config, for kernels that have one."""
        return self.get_config()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Kernel) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(repr(self))

    def __repr__(self) -> str:
        args = ", ".join(f"{p}={getattr(self, p)!r}" for p in self._params)
        return f"{type(self).__name__}({args})"


@register_kernel
class RBF(Kernel):
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
    Squared distances come from the GEMM expansion ``||x||² - 2<x, y> + ||y||²``. In float32
    this loses precision when the norms are large compared with the distances; centre the
    data first in that case (the kernel is translation invariant).

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

    def with_defaults(self, n_features: int) -> RBF:  # noqa: D102
        return RBF(gamma=_resolve_gamma(self.gamma, n_features))

    def pairwise(self, X: Block, Y: Block | None = None) -> np.ndarray:  # noqa: D102
        K = self._exponent(X, Y)
        return np.exp(K, out=K)

    def _exponent(self, X: Block, Y: Block | None) -> np.ndarray:
        X, Y = _as_blocks(X, Y)
        g = _resolve_gamma(self.gamma, X.shape[1])
        # -g (|x|² - 2<x,y> + |y|²) as one product; distances are >= 0 up to rounding, so the
        # exponent is at most a few ulps above 0 and no clipping pass is needed.
        return _affine_product(
            X, Y, 2.0 * g, [-g * _squared_norms(X), 1.0], [1.0, -g * _squared_norms(Y)]
        )

    def pairwise_offset(  # noqa: D102
        self, X: Block, Y: Block | None = None
    ) -> tuple[np.ndarray, float]:
        return _exp_with_offset(self._exponent(X, Y))

    def diag(self, X: Block) -> np.ndarray:  # noqa: D102
        X, _ = _as_blocks(X, None)
        return np.ones(X.shape[0], dtype=X.dtype)


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

    def __init__(self, degree: int = 3, gamma: float | None = None, coef0: float = 1.0) -> None:
        if isinstance(degree, bool) or not isinstance(degree, numbers.Integral) or degree < 1:
            raise ValueError(f"Polynomial: degree must be an int >= 1, got {degree!r}")
        _check_positive("gamma", gamma, "Polynomial")
        _check_real("coef0", coef0, "Polynomial")
        self.degree = int(degree)
        self.gamma = None if gamma is None else float(gamma)
        self.coef0 = float(coef0)

    @property
    def positive_semidefinite(self) -> bool:  # noqa: D102
        # A polynomial with non-negative coefficients in <x, y>; coef0 < 0 breaks that.
        return self.coef0 >= 0

    def with_defaults(self, n_features: int) -> Polynomial:  # noqa: D102
        return Polynomial(self.degree, _resolve_gamma(self.gamma, n_features), self.coef0)

    def pairwise(self, X: Block, Y: Block | None = None) -> np.ndarray:  # noqa: D102
        X, Y = _as_blocks(X, Y)
        g = _resolve_gamma(self.gamma, X.shape[1])
        K = _affine_product(X, Y, g, [self.coef0], [1.0])
        with np.errstate(over="ignore"):  # overflow is reported by the solvers' finite check
            return np.power(K, self.degree, out=K)

    def diag(self, X: Block) -> np.ndarray:  # noqa: D102
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

    def __init__(self, gamma: float | None = None, coef0: float = 1.0) -> None:
        _check_positive("gamma", gamma, "Sigmoid")
        _check_real("coef0", coef0, "Sigmoid")
        self.gamma = None if gamma is None else float(gamma)
        self.coef0 = float(coef0)

    def with_defaults(self, n_features: int) -> Sigmoid:  # noqa: D102
        return Sigmoid(_resolve_gamma(self.gamma, n_features), self.coef0)

    def pairwise(self, X: Block, Y: Block | None = None) -> np.ndarray:  # noqa: D102
        X, Y = _as_blocks(X, Y)
        g = _resolve_gamma(self.gamma, X.shape[1])
        K = _affine_product(X, Y, g, [self.coef0], [1.0])
        return np.tanh(K, out=K)

    def diag(self, X: Block) -> np.ndarray:  # noqa: D102
        X, _ = _as_blocks(X, None)
        g = _resolve_gamma(self.gamma, X.shape[1])
        return np.tanh(g * _squared_norms(X) + self.coef0)


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

    positive_semidefinite = True

    def pairwise(self, X: Block, Y: Block | None = None) -> np.ndarray:  # noqa: D102
        X, Y = _as_blocks(X, Y)
        return _affine_product(X, Y, 1.0, [], [])

    def diag(self, X: Block) -> np.ndarray:  # noqa: D102
        X, _ = _as_blocks(X, None)
        return _squared_norms(X)


def _l1_distances(X: Block, Y: Block) -> np.ndarray:
    """Return the L1 (cityblock) distances between the rows of two validated blocks.

    Dense blocks go to ``cdist`` whole: it needs no temporary beyond the output (and float64
    copies of float32 operands). A sparse block is densified in row chunks under the budget.
    """
    dtype = _result_dtype(X, Y)
    if not (sp.issparse(X) or sp.issparse(Y)):
        return cdist(X, Y, "cityblock").astype(dtype, copy=False)
    K = np.empty((X.shape[0], Y.shape[0]), dtype=dtype)
    rows = _rows_within(8 * X.shape[1])  # cdist works on float64 copies of the chunks
    for j, Yc in _row_chunks(Y, rows):
        for i, Xc in _row_chunks(X, rows):
            K[i : i + Xc.shape[0], j : j + Yc.shape[0]] = cdist(Xc, Yc, "cityblock")
    return K


def _chi2_distances(X: Block, Y: Block) -> np.ndarray:
    """Return ``D[i, j] = Σ_k (x_ik - y_jk)² / (x_ik + y_jk)`` for non-negative blocks.

    Row chunks of ``X`` and ``Y`` are broadcast into ``(a, b, d)`` temporaries of at most
    ``_TEMP_BYTES`` together; sparse chunks are densified inside the loop.

    Maintenance note: a term with ``x_k + y_k == 0`` is 0 (scikit-learn's convention). With
    non-negative data that means ``x_k = y_k = 0``, so the squared difference is already 0
    and the masked division simply leaves it there. NaN input gives a NaN sum (``NaN != 0``),
    which the solvers' finite check reports.
    """
    n, d = X.shape
    m = Y.shape[0]
    dtype = _result_dtype(X, Y)
    K = np.empty((n, m), dtype=dtype)
    per_pair = d * (2 * np.dtype(dtype).itemsize + 1)  # sum, squared difference, mask
    y_rows = min(max(m, 1), _rows_within(per_pair))
    x_rows = _rows_within(per_pair * y_rows)
    for j, Yc in _row_chunks(Y, y_rows):
        for i, Xc in _row_chunks(X, x_rows):
            total = Xc[:, None, :] + Yc[None, :, :]
            terms = Xc[:, None, :] - Yc[None, :, :]
            np.square(terms, out=terms)
            np.divide(terms, total, out=terms, where=total != 0)
            K[i : i + Xc.shape[0], j : j + Yc.shape[0]] = terms.sum(axis=2)
    return K


def _checked_chi2_blocks(X: Block, Y: Block | None, owner: str, kernel: str) -> tuple[Block, Block]:
    """:func:`_as_blocks`, then the non-negativity check of the chi² kernels."""
    same = Y is None
    X, Y = _as_blocks(X, Y)
    _check_non_negative(X, owner, kernel, "X")
    if not same:
        _check_non_negative(Y, owner, kernel, "Y")
    return X, Y


def _inverse_norms(X: Block) -> np.ndarray:
    """Return ``1 / ||x||`` per row, 0 for zero rows (NaN rows stay NaN)."""
    norms = np.sqrt(_squared_norms(X))
    inverse = np.zeros_like(norms)
    np.divide(1.0, norms, out=inverse, where=norms != 0)
    return inverse


@register_kernel
class Laplacian(Kernel):
    """Laplacian kernel ``exp(-gamma ||x - y||_1)``, with the L1 (cityblock) distance.

    Parameters
    ----------
    gamma : float, optional
        Inverse length scale. ``None`` resolves to ``1 / n_features`` at fit time.

    Notes
    -----
    There is no GEMM form of the L1 distance: a block costs ``O(n m d)`` scalar operations,
    several times an :class:`RBF` block of the same size. Dense blocks use
    ``scipy.spatial.distance.cdist(metric="cityblock")`` in float64 (float32 results are
    rounded back), with no temporary beyond the output. Sparse blocks are densified in row
    chunks of at most ~32 MiB.

    Examples
    --------
    >>> import numpy as np
    >>> Laplacian(gamma=0.5).pairwise(np.zeros((1, 2)), np.ones((1, 2))).round(4)
    array([[0.3679]])
    >>> Laplacian().with_defaults(4)
    Laplacian(gamma=0.25)
    """

    name = "laplacian"
    _params = ("gamma",)

    positive_semidefinite = True
    translation_invariant = True

    def __init__(self, gamma: float | None = None) -> None:
        _check_positive("gamma", gamma, "Laplacian")
        self.gamma = None if gamma is None else float(gamma)

    def with_defaults(self, n_features: int) -> Laplacian:  # noqa: D102
        return Laplacian(_resolve_gamma(self.gamma, n_features))

    def _exponent(self, X: Block, Y: Block | None) -> np.ndarray:
        X, Y = _as_blocks(X, Y)
        K = _l1_distances(X, Y)
        K *= -_resolve_gamma(self.gamma, X.shape[1])
        return K

    def pairwise(self, X: Block, Y: Block | None = None) -> np.ndarray:  # noqa: D102
        K = self._exponent(X, Y)
        return np.exp(K, out=K)

    def pairwise_offset(  # noqa: D102
        self, X: Block, Y: Block | None = None
    ) -> tuple[np.ndarray, float]:
        return _exp_with_offset(self._exponent(X, Y))

    def diag(self, X: Block) -> np.ndarray:  # noqa: D102
        X, _ = _as_blocks(X, None)
        return np.ones(X.shape[0], dtype=X.dtype)


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

    def pairwise(self, X: Block, Y: Block | None = None) -> np.ndarray:  # noqa: D102
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

    def diag(self, X: Block) -> np.ndarray:  # noqa: D102
        X, _ = _as_blocks(X, None)
        squared = _squared_norms(X)
        out = np.zeros_like(squared)
        return np.divide(squared, squared, out=out, where=squared != 0)


@register_kernel
class Chi2(Kernel):
    """Exponentiated chi-squared kernel ``exp(-gamma Σ_k (x_k - y_k)² / (x_k + y_k))``.

    For histograms and other non-negative features (bag of words, colour histograms); terms
    with ``x_k + y_k = 0`` count as 0.

    Parameters
    ----------
    gamma : float, default=1.0
        Scale of the exponent. ``None`` also means 1.0 (scikit-learn's default; unlike the
        other kernels, *not* ``1 / n_features``).

    Raises
    ------
    ValueError
        From :meth:`pairwise` and :meth:`diag` when a block has negative values.

    Notes
    -----
    A block costs ``O(n m d)`` operations (no GEMM form) on row chunks broadcast into
    temporaries of at most ~32 MiB; sparse chunks are densified inside the loop.

    Examples
    --------
    >>> import numpy as np
    >>> Chi2(gamma=0.5).pairwise(np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]])).round(4)
    array([[0.3679]])
    """

    name = "chi2"
    _params = ("gamma",)

    positive_semidefinite = True

    def __init__(self, gamma: float | None = 1.0) -> None:
        _check_positive("gamma", gamma, "Chi2")
        self.gamma = 1.0 if gamma is None else float(gamma)

    def _exponent(self, X: Block, Y: Block | None) -> np.ndarray:
        X, Y = _checked_chi2_blocks(X, Y, "Chi2", "chi2")
        K = _chi2_distances(X, Y)
        K *= -self.gamma
        return K

    def pairwise(self, X: Block, Y: Block | None = None) -> np.ndarray:  # noqa: D102
        K = self._exponent(X, Y)
        return np.exp(K, out=K)

    def pairwise_offset(  # noqa: D102
        self, X: Block, Y: Block | None = None
    ) -> tuple[np.ndarray, float]:
        return _exp_with_offset(self._exponent(X, Y))

    def diag(self, X: Block) -> np.ndarray:  # noqa: D102
        X, _ = _checked_chi2_blocks(X, None, "Chi2", "chi2")
        return np.ones(X.shape[0], dtype=X.dtype)


@register_kernel
class AdditiveChi2(Kernel):
    """Additive chi-squared kernel ``-Σ_k (x_k - y_k)² / (x_k + y_k)`` on non-negative data.

    Only *conditionally* positive semi-definite (``positive_semidefinite`` is False): the
    centred kernel matrix is PSD, the raw one is not, and its diagonal is 0. Terms with
    ``x_k + y_k = 0`` count as 0. :class:`Chi2` is ``exp(gamma * AdditiveChi2)``.

    Raises
    ------
    ValueError
        From :meth:`pairwise` and :meth:`diag` when a block has negative values.

    Notes
    -----
    Same cost and memory as :class:`Chi2`.

    Examples
    --------
    >>> import numpy as np
    >>> AdditiveChi2().pairwise(np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]]))
    array([[-2.]])
    """

    name = "additive_chi2"

    def pairwise(self, X: Block, Y: Block | None = None) -> np.ndarray:  # noqa: D102
        X, Y = _checked_chi2_blocks(X, Y, "AdditiveChi2", "additive chi2")
        K = _chi2_distances(X, Y)
        return np.negative(K, out=K)

    def diag(self, X: Block) -> np.ndarray:  # noqa: D102
        X, _ = _checked_chi2_blocks(X, None, "AdditiveChi2", "additive chi2")
        return np.zeros(X.shape[0], dtype=X.dtype)


@register_kernel
class SumKernel(Kernel):
    """Sum of kernels, usually built with ``+``.

    Examples
    --------
    >>> import numpy as np
    >>> k = RBF(gamma=1.0) + Linear()
    >>> k.pairwise(np.zeros((1, 2))).item()
    1.0
    """

    name = "sum"

    def __init__(self, *kernels: Kernel) -> None:
        if len(kernels) < 2 or not all(isinstance(k, Kernel) for k in kernels):
            raise ValueError("SumKernel needs at least two Kernel instances")
        self.kernels = tuple(kernels)

    @property
    def positive_semidefinite(self) -> bool:  # noqa: D102
        return all(k.positive_semidefinite for k in self.kernels)

    @property
    def translation_invariant(self) -> bool:  # noqa: D102
        return all(k.translation_invariant for k in self.kernels)

    def with_defaults(self, n_features: int) -> SumKernel:  # noqa: D102
        return SumKernel(*(k.with_defaults(n_features) for k in self.kernels))

    def pairwise(self, X: Block, Y: Block | None = None) -> np.ndarray:  # noqa: D102
        K = self.kernels[0].pairwise(X, Y)
        for kernel in self.kernels[1:]:
            K += kernel.pairwise(X, Y)
        return K

    def diag(self, X: Block) -> np.ndarray:  # noqa: D102
        return sum(k.diag(X) for k in self.kernels)

    def pairwise_offset(  # noqa: D102
        self, X: Block, Y: Block | None = None
    ) -> tuple[np.ndarray, float]:
        K, c = self.kernels[0].pairwise_offset(X, Y)
        for kernel in self.kernels[1:]:
            part, offset = kernel.pairwise_offset(X, Y)
            K += part
            c += offset
        return K, c

    def get_config(self) -> dict[str, Any]:  # noqa: D102
        return {
            "name": self.name,
            "configuration": {"kernels": [k.get_config() for k in self.kernels]},
        }

    def _key(self) -> Any:
        # The members compare as kernels, so a sum holding a CallableKernel compares too.
        return (self.name, self.kernels)

    def __repr__(self) -> str:
        return " + ".join(repr(k) for k in self.kernels)


def _describe(value: Any) -> str:
    """Say what a kernel function returned, for error messages."""
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"a {type(value).__name__} of shape {tuple(shape)}"
    text = repr(value)
    return f"a {type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _is_scalar(value: Any) -> bool:
    if sp.issparse(value):
        return False
    array = np.asarray(value)
    return array.ndim == 0 and array.dtype.kind in "biuf"


def _same_value(a: Any, b: Any) -> bool:
    """Equality of two kernel parameters, arrays included."""
    if a is b:
        return True
    try:
        return bool(a == b)
    except (TypeError, ValueError):  # arrays: an elementwise result has no truth value
        return bool(np.array_equal(a, b))


class CallableKernel(Kernel):
    """A kernel given as a Python function (scikit-learn's ``kernel=callable``).

    Two conventions are accepted, told apart on every :meth:`pairwise` call by a small probe:

    - a *block* function ``function(X, Y, **kernel_params)`` that returns the
      ``(len(X), len(Y))`` kernel matrix of two blocks of rows (fast);
    - scikit-learn's *per-pair* function ``function(x, y, **kernel_params)`` that takes two
      1-D rows and returns a scalar (slow: one Python call per pair of rows).

    Parameters
    ----------
    function : callable
        The kernel function, in either convention.
    **kernel_params
        Keyword arguments passed to every call of ``function`` (scikit-learn's
        ``kernel_params``).

    Attributes
    ----------
    function : callable
    kernel_params : dict

    Raises
    ------
    ValueError
        From :meth:`pairwise` and :meth:`diag` when ``function`` fits neither convention, and
        from :meth:`get_config`: a model with a callable kernel cannot be saved.

    See Also
    --------
    get_kernel : Wraps a callable in this class.
    register_kernel : Makes a :class:`Kernel` subclass savable and loadable by name.

    Notes
    -----
    The probe calls ``function`` on the first ``min(2, len(X))`` rows of ``X`` and the first
    ``min(3, len(Y))`` rows of ``Y``. An array of exactly that shape marks a block function;
    anything else (a scalar, another shape, an exception) leads to the per-pair check that
    ``function(X[0], Y[0])`` is a scalar. A per-pair function that happens to return a
    ``(2, 3)`` array on two 2-D blocks (``x @ y`` with 3 features) is read as a block function:
    write such a kernel in the block convention.

    A block function gets the blocks as given, so a sparse block stays sparse; it may return a
    dense or a sparse matrix. A per-pair function gets dense 1-D rows and costs ``n m`` Python
    calls per block, ``n (n + 1) / 2`` when ``Y`` is None (the kernel is taken to be
    symmetric, as scikit-learn does): use it on small data or write a block function.
    :meth:`diag` calls a block function on chunks of 64 rows and keeps each chunk's diagonal
    (64 times the diagonal's work, memory for a 64 × 64 matrix).

    Whether the kernel is positive semi-definite is not known, so ``positive_semidefinite``
    is False. The kernel pickles when ``function`` does (a module-level function, not a
    lambda), which dask's distributed workers need.

    Examples
    --------
    >>> import numpy as np
    >>> def histogram_intersection(x, y):
    ...     return np.minimum(x, y).sum()
    >>> k = CallableKernel(histogram_intersection)
    >>> k
    CallableKernel(histogram_intersection)
    >>> k.pairwise(np.array([[1.0, 2.0], [0.0, 3.0]]))
    array([[3., 2.],
           [2., 3.]])
    >>> def scaled_linear(X, Y, scale):
    ...     return scale * (X @ Y.T)
    >>> CallableKernel(scaled_linear, scale=2.0).pairwise(np.ones((1, 2)), np.ones((3, 2)))
    array([[4., 4., 4.]])
    """

    name = "callable"

    _DIAG_ROWS = 64

    def __init__(self, function: Callable[..., Any], **kernel_params: Any) -> None:
        if not callable(function) or isinstance(function, Kernel):
            raise TypeError(
                f"CallableKernel: function must be a callable kernel function, got "
                f"{function!r}; pass Kernel instances directly"
            )
        self.function = function
        self.kernel_params = dict(kernel_params)

    @property
    def _function_name(self) -> str:
        return getattr(self.function, "__name__", None) or repr(self.function)

    def _call(self, X: Block, Y: Block) -> Any:
        return self.function(X, Y, **self.kernel_params)

    def _is_block_function(self, X: Block, Y: Block) -> bool:
        """Probe ``function`` on a few rows: True for a block function, False for per-pair."""
        px, py = X[: min(2, X.shape[0])], Y[: min(3, Y.shape[0])]
        block_error: Exception | None = None
        try:
            probe = self._call(px, py)
        # Whatever a user's function raises is a possible answer: a per-pair function fails
        # to broadcast two blocks. The error is chained if neither convention fits.
        except Exception as err:  # noqa: BLE001
            block_error = err
            block_got = f"raised {type(err).__name__}: {err}"
        else:
            if np.shape(probe) == (px.shape[0], py.shape[0]):
                return True
            block_got = f"returned {_describe(probe)}"
        pair_error: Exception | None = None
        try:
            value = self._call(_dense_row(X, 0), _dense_row(Y, 0))
        except Exception as err:  # noqa: BLE001
            pair_error = err
            pair_got = f"raised {type(err).__name__}: {err}"
        else:
            if _is_scalar(value):
                return False
            pair_got = f"returned {_describe(value)}"
        d = X.shape[1]
        raise ValueError(
            f"{self!r}: the kernel function fits neither accepted convention. Write it either "
            f"as a block function f(X, Y, **kernel_params) that takes two 2-D blocks of shapes "
            f"(n, {d}) and (m, {d}) and returns the (n, m) kernel matrix, or as scikit-learn's "
            f"per-pair function f(x, y, **kernel_params) that takes two 1-D rows of shape "
            f"({d},) and returns a scalar. Called on blocks of shapes {px.shape} and "
            f"{py.shape} it {block_got} (expected shape {(px.shape[0], py.shape[0])}); called "
            f"on two rows it {pair_got} (expected a real scalar)."
        ) from (block_error or pair_error)

    def _block_result(self, X: Block, Y: Block, dtype: type[np.floating]) -> np.ndarray:
        result = self._call(X, Y)
        if sp.issparse(result):
            result = result.toarray()
        if np.shape(result) != (X.shape[0], Y.shape[0]):
            raise ValueError(
                f"{self!r}: the block kernel function returned {_describe(result)} for blocks "
                f"of shapes {X.shape} and {Y.shape}; expected shape {(X.shape[0], Y.shape[0])}"
            )
        return np.require(np.asarray(result, dtype=dtype), requirements=["C", "W"])

    def pairwise(self, X: Block, Y: Block | None = None) -> np.ndarray:  # noqa: D102
        symmetric = Y is None
        X = _as_operand(X)
        Y = X if Y is None else _as_operand(Y)
        _check_shapes(X, Y)
        dtype = _result_dtype(X, Y)
        n, m = X.shape[0], Y.shape[0]
        if n == 0 or m == 0:
            return np.empty((n, m), dtype=dtype)
        if self._is_block_function(X, Y):
            return self._block_result(X, Y, dtype)
        K = np.empty((n, m), dtype=dtype)
        rows = _rows_within(8 * X.shape[1])
        for i0, Xc in _row_chunks(X, rows):
            for j0, Yc in _row_chunks(Y, rows):
                if symmetric and j0 + Yc.shape[0] <= i0:
                    continue  # below the diagonal: mirrored at the end
                for a, x in enumerate(Xc):
                    first = max(0, i0 + a - j0) if symmetric else 0
                    for b in range(first, Yc.shape[0]):
                        K[i0 + a, j0 + b] = self._call(x, Yc[b])
        if symmetric:
            lower = np.tril_indices(n, -1)
            K[lower] = K.T[lower]
        return K

    def diag(self, X: Block) -> np.ndarray:  # noqa: D102
        X = _as_operand(X)
        _check_shapes(X, X)
        dtype = _result_dtype(X, X)
        n = X.shape[0]
        out = np.empty(n, dtype=dtype)
        if n == 0:
            return out
        if self._is_block_function(X, X):
            for start in range(0, n, self._DIAG_ROWS):
                part = X[start : start + self._DIAG_ROWS]
                out[start : start + part.shape[0]] = np.diagonal(
                    self._block_result(part, part, dtype)
                )
            return out
        for start, Xc in _row_chunks(X, _rows_within(8 * X.shape[1])):
            for a, x in enumerate(Xc):
                out[start + a] = self._call(x, x)
        return out

    def get_config(self) -> dict[str, Any]:
        """Raise: a Python function has no JSON config, so the kernel cannot be saved.

        Examples
        --------
        >>> CallableKernel(min).get_config()  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: CallableKernel(min): a model with a callable kernel cannot be saved ...
        """
        raise ValueError(
            f"{self!r}: a model with a callable kernel cannot be saved (a Python function has "
            f"no JSON config). To save it, use a named kernel ({_named_kernels()}), or write "
            f"a dkpca.kernels.Kernel subclass, register it with "
            f"dkpca.kernels.register_kernel and pass an instance of it as the kernel"
        )

    def _key(self) -> Any:
        return self  # compared by __eq__ below

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, CallableKernel)
            and self.function is other.function
            and self.kernel_params.keys() == other.kernel_params.keys()
            and all(_same_value(v, other.kernel_params[k]) for k, v in self.kernel_params.items())
        )

    def __hash__(self) -> int:
        return hash(repr(self))

    def __repr__(self) -> str:
        args = [self._function_name]
        args += [f"{k}={v!r}" for k, v in self.kernel_params.items()]
        return f"CallableKernel({', '.join(args)})"


def _dense_row(A: Block, i: int) -> np.ndarray:
    """Row ``i`` of a block as a dense 1-D array."""
    row = A[i : i + 1]
    return (row.toarray() if sp.issparse(row) else np.asarray(row))[0]


def _named_kernels() -> list[str]:
    return sorted(n for n in _REGISTRY if n != SumKernel.name)


def kernel_from_config(config: dict[str, Any]) -> Kernel:
    """Rebuild a kernel from its JSON config.

    Examples
    --------
    >>> kernel_from_config(RBF(gamma=2.0).get_config())
    RBF(gamma=2.0)
    """
    try:
        name, params = config["name"], dict(config.get("configuration", {}))
    except (TypeError, KeyError) as err:
        raise ValueError(f"not a kernel config: {config!r}") from err
    if name == SumKernel.name:
        return SumKernel(*(kernel_from_config(c) for c in params["kernels"]))
    if name == CallableKernel.name:
        raise ValueError(
            "a callable kernel has no config and cannot be loaded; save the model with a named "
            "kernel or a Kernel subclass registered with dkpca.kernels.register_kernel"
        )
    if name not in _REGISTRY:
        raise ValueError(f"unknown kernel {name!r}; known: {sorted(_REGISTRY)}")
    return _REGISTRY[name](**params)


def get_kernel(
    kernel: str | Kernel | Callable[..., Any],
    *,
    kernel_params: dict[str, Any] | None = None,
    **params: Any,
) -> Kernel:
    """Return a kernel from a name and parameters, a kernel object, or a Python function.

    Parameters
    ----------
    kernel : str, Kernel or callable
        A registered name (``"rbf"``, ``"laplacian"``, ...), a :class:`Kernel` instance
        (returned as is), or a kernel function, wrapped in a :class:`CallableKernel`: either a
        block function ``f(X, Y, **kernel_params)`` returning the ``(len(X), len(Y))`` matrix
        or scikit-learn's per-pair ``f(x, y, **kernel_params)`` returning a scalar.
    kernel_params : dict, optional
        Keyword arguments for a callable kernel, and only those: ``gamma``, ``degree`` and
        ``coef0`` are not passed to a callable (scikit-learn does the same).
    **params
        ``gamma``, ``degree``, ``coef0`` (and ``sigma2``, ``c`` for RBF) for named kernels.
        Parameters that the named kernel does not take are ignored (estimators pass them
        whatever the kernel), and ``None`` means "not given".

    Returns
    -------
    Kernel

    Raises
    ------
    ValueError
        For an unknown name, or ``kernel_params`` given with anything but a callable.
    TypeError
        For a Kernel class where an instance is needed.

    Examples
    --------
    >>> get_kernel("poly", degree=2, gamma=None, coef0=0.0, sigma2=None)
    Polynomial(degree=2, gamma=None, coef0=0.0)
    >>> get_kernel("chi2", gamma=None, degree=3, coef0=1.0)
    Chi2(gamma=1.0)
    >>> def intersection(x, y, p=1.0):
    ...     return (abs(x) ** p).sum() + (abs(y) ** p).sum()
    >>> get_kernel(intersection, kernel_params={"p": 2.0}, gamma=0.5)
    CallableKernel(intersection, p=2.0)
    """
    if isinstance(kernel, type) and issubclass(kernel, Kernel):
        raise TypeError(
            f"get_kernel: got the class {kernel.__name__}; pass an instance such as "
            f"{kernel.__name__}(...) or a kernel name"
        )
    if callable(kernel) and not isinstance(kernel, Kernel):
        return CallableKernel(kernel, **(kernel_params or {}))
    if not isinstance(kernel, Kernel) and (
        not isinstance(kernel, str) or kernel not in _REGISTRY or kernel == SumKernel.name
    ):
        raise ValueError(
            f"unknown kernel {kernel!r}; use one of {_named_kernels()}, a "
            f"dkpca.kernels.Kernel instance, or a callable: a block function f(X, Y) returning "
            f"the (len(X), len(Y)) kernel matrix, or scikit-learn's per-pair function "
            f"f(x, y) on two 1-D rows returning a scalar"
        )
    if kernel_params:
        raise ValueError(
            f"kernel_params applies to callable kernels; set gamma/degree/coef0 for named "
            f"kernels (got kernel={kernel!r}, kernel_params={kernel_params!r})"
        )
    if isinstance(kernel, Kernel):
        return kernel
    cls = _REGISTRY[kernel]
    if cls is RBF:
        return RBF(gamma=params.get("gamma"), sigma2=params.get("sigma2"), c=params.get("c"))
    accepted = {p: params[p] for p in cls._params if params.get(p) is not None}
    return cls(**accepted)
