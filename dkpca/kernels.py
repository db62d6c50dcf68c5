"""Kernel functions evaluated on two in-memory (numpy) blocks.

Every kernel here is one matrix product (GEMM) on *augmented* operands followed by at most one
elementwise pass over the output, done in place. For the RBF kernel the squared distance
``||x||² - 2<x, y> + ||y||²`` is folded into the product by appending two columns to each
operand, so a block costs one GEMM plus one ``exp``: the unavoidable work.

Kernels keep ``float32`` inputs in ``float32`` and compute everything else in ``float64``. They
are registered by name and round-trip through a JSON-serialisable config::

    {"name": "rbf", "configuration": {"gamma": 0.5}}

Three RBF parameterisations appear in the source papers; :class:`RBF` keeps one canonical
``gamma`` and accepts the other two as conversions: ``exp(-gamma r²)``,
``exp(-r² / (2 sigma2))`` (``gamma = 1 / (2 sigma2)``) and ``exp(-r² / c)`` (``gamma = 1 / c``).
"""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

__all__ = [
    "RBF",
    "Kernel",
    "Linear",
    "Polynomial",
    "Sigmoid",
    "SumKernel",
    "get_kernel",
    "kernel_from_config",
    "register_kernel",
]

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


def _as_blocks(X: np.ndarray, Y: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Validate two blocks and bring them to a common floating dtype."""
    X = np.asarray(X)
    Y = X if Y is None else np.asarray(Y)
    if X.ndim != 2 or Y.ndim != 2:
        raise ValueError(f"kernel blocks must be 2-D, got shapes {X.shape} and {Y.shape}")
    if X.shape[1] != Y.shape[1]:
        raise ValueError(
            f"kernel blocks have different numbers of features: {X.shape[1]} and {Y.shape[1]}"
        )
    dtype = np.float32 if X.dtype == np.float32 and Y.dtype == np.float32 else np.float64
    return X.astype(dtype, copy=False), Y.astype(dtype, copy=False)


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


def _squared_norms(X: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", X, X)


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
    def pairwise(self, X: np.ndarray, Y: np.ndarray | None = None) -> np.ndarray:
        """Return the kernel matrix ``K[i, j] = k(X[i], Y[j])`` (``Y=None`` means ``X``)."""

    @abstractmethod
    def diag(self, X: np.ndarray) -> np.ndarray:
        """Return ``k(X[i], X[i])`` for every row, without forming the matrix."""

    def pairwise_offset(
        self, X: np.ndarray, Y: np.ndarray | None = None
    ) -> tuple[np.ndarray, float]:
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

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Kernel) and self.get_config() == other.get_config()

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

    def pairwise(self, X: np.ndarray, Y: np.ndarray | None = None) -> np.ndarray:  # noqa: D102
        K = self._exponent(X, Y)
        return np.exp(K, out=K)

    def _exponent(self, X: np.ndarray, Y: np.ndarray | None) -> np.ndarray:
        X, Y = _as_blocks(X, Y)
        g = _resolve_gamma(self.gamma, X.shape[1])
        # -g (|x|² - 2<x,y> + |y|²) as one product; distances are >= 0 up to rounding, so the
        # exponent is at most a few ulps above 0 and no clipping pass is needed.
        return _augmented_product(
            X, Y, 2.0 * g, [-g * _squared_norms(X), 1.0], [1.0, -g * _squared_norms(Y)]
        )

    def pairwise_offset(  # noqa: D102
        self, X: np.ndarray, Y: np.ndarray | None = None
    ) -> tuple[np.ndarray, float]:
        # Entries near 1 keep their digits as exp(z) - 1, entries near 0 as exp(z): take the
        # form that suits most of the block, judged on a subsample of its rows.
        K = self._exponent(X, Y)
        sample = K[:: max(1, K.shape[0] // 64)]
        if sample.size and float(np.exp(sample).mean()) > 0.5:
            return np.expm1(K, out=K), 1.0
        return np.exp(K, out=K), 0.0

    def diag(self, X: np.ndarray) -> np.ndarray:  # noqa: D102
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

    def pairwise(self, X: np.ndarray, Y: np.ndarray | None = None) -> np.ndarray:  # noqa: D102
        X, Y = _as_blocks(X, Y)
        g = _resolve_gamma(self.gamma, X.shape[1])
        K = _augmented_product(X, Y, g, [self.coef0], [1.0])
        with np.errstate(over="ignore"):  # overflow is reported by the solvers' finite check
            return np.power(K, self.degree, out=K)

    def diag(self, X: np.ndarray) -> np.ndarray:  # noqa: D102
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

    def pairwise(self, X: np.ndarray, Y: np.ndarray | None = None) -> np.ndarray:  # noqa: D102
        X, Y = _as_blocks(X, Y)
        g = _resolve_gamma(self.gamma, X.shape[1])
        K = _augmented_product(X, Y, g, [self.coef0], [1.0])
        return np.tanh(K, out=K)

    def diag(self, X: np.ndarray) -> np.ndarray:  # noqa: D102
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

    def pairwise(self, X: np.ndarray, Y: np.ndarray | None = None) -> np.ndarray:  # noqa: D102
        X, Y = _as_blocks(X, Y)
        return _augmented_product(X, Y, 1.0, [], [])

    def diag(self, X: np.ndarray) -> np.ndarray:  # noqa: D102
        X, _ = _as_blocks(X, None)
        return _squared_norms(X)


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

    def pairwise(self, X: np.ndarray, Y: np.ndarray | None = None) -> np.ndarray:  # noqa: D102
        K = self.kernels[0].pairwise(X, Y)
        for kernel in self.kernels[1:]:
            K += kernel.pairwise(X, Y)
        return K

    def diag(self, X: np.ndarray) -> np.ndarray:  # noqa: D102
        return sum(k.diag(X) for k in self.kernels)

    def pairwise_offset(  # noqa: D102
        self, X: np.ndarray, Y: np.ndarray | None = None
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

    def __repr__(self) -> str:
        return " + ".join(repr(k) for k in self.kernels)


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
    if name not in _REGISTRY:
        raise ValueError(f"unknown kernel {name!r}; known: {sorted(_REGISTRY)}")
    return _REGISTRY[name](**params)


def get_kernel(kernel: str | Kernel, **params: Any) -> Kernel:
    """Return a kernel from a name and parameters, or the kernel object itself.

    Parameters that the named kernel does not take are ignored (estimators pass ``gamma``,
    ``degree`` and ``coef0`` whatever the kernel), except that ``None`` means "not given".

    Examples
    --------
    >>> get_kernel("poly", degree=2, gamma=None, coef0=0.0, sigma2=None)
    Polynomial(degree=2, gamma=None, coef0=0.0)
    """
    if isinstance(kernel, Kernel):
        return kernel
    if not isinstance(kernel, str) or kernel not in _REGISTRY or kernel == SumKernel.name:
        names = sorted(n for n in _REGISTRY if n != SumKernel.name)
        raise ValueError(
            f"unknown kernel {kernel!r}; use one of {names} or a dkpca.kernels.Kernel instance"
        )
    cls = _REGISTRY[kernel]
    if cls is RBF:
        return RBF(gamma=params.get("gamma"), sigma2=params.get("sigma2"), c=params.get("c"))
    accepted = {p: params[p] for p in cls._params if params.get(p) is not None}
    return cls(**accepted)
