"""The kernel base class, the registry of names, and helpers on dense or sparse blocks."""

from __future__ import annotations

import copy
import numbers
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any, ClassVar, TypeVar

import numpy as np
import scipy.sparse as sp

from dkpca._device import array_module, astype, elementwise_in_place

#: A kernel block: a dense numpy array or a CSR/CSC ``scipy.sparse`` matrix or array.
Block = Any

# Bound on the bytes of a temporary that the chunked kernels (L1 distances, chi², densified
# sparse rows, callable diagonals) allocate at once.
_TEMP_BYTES = 32 * 2**20

_REGISTRY: dict[str, type[Kernel]] = {}

K = TypeVar("K", bound="Kernel")


def register_kernel(cls: type[Kernel]) -> type[Kernel]:
    """Register a kernel class under its ``name`` (usable as a decorator).

    Examples
    --------
    >>> from dkpca.kernels import RBF, Linear, Sigmoid, get_kernel
    >>> get_kernel("rbf", gamma=0.5)
    RBF(gamma=0.5)
    """
    _REGISTRY[cls.name] = cls
    for alias in cls.aliases:
        _REGISTRY[alias] = cls
    return cls


def _as_operand(A: Block) -> Block:
    """Return a numpy or CuPy array, or a CSR/CSC sparse block (other formats become CSR).

    An array of another array API library stays as it is: the GEMM kernels compute with its
    namespace.
    """
    if sp.issparse(A):
        return A if A.format in ("csr", "csc") else A.tocsr()
    return A if array_module(A) is not np else np.asarray(A)


def _check_shapes(X: Block, Y: Block) -> None:
    if X.ndim != 2 or Y.ndim != 2:
        raise ValueError(f"kernel blocks must be 2-D, got shapes {X.shape} and {Y.shape}")
    if X.shape[1] != Y.shape[1]:
        raise ValueError(
            f"kernel blocks have different numbers of features: {X.shape[1]} and {Y.shape[1]}"
        )


def _result_dtype(X: Block, Y: Block) -> Any:
    xp = array_module(X, Y)
    return xp.float32 if X.dtype == xp.float32 and Y.dtype == xp.float32 else xp.float64


def _as_blocks(X: Block, Y: Block | None) -> tuple[Block, Block]:
    """Validate two blocks and bring them to a common floating dtype (sparse stays sparse)."""
    X = _as_operand(X)
    Y = X if Y is None else _as_operand(Y)
    _check_shapes(X, Y)
    dtype = _result_dtype(X, Y)
    return astype(X, dtype), astype(Y, dtype)


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
    xp = array_module(X, Y)  # the same code on numpy, CuPy and array API blocks
    Xa = xp.empty((n, d + extra), dtype=X.dtype)
    Xa[:, :d] = X * x_scale if x_scale != 1.0 else X
    Ya = xp.empty((m, d + extra), dtype=Y.dtype)
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
    xp = array_module(X)
    if hasattr(xp, "einsum"):  # numpy, CuPy: no n × d temporary
        return xp.einsum("ij,ij->i", X, X)
    return xp.sum(X * X, axis=1)


def _exp_with_offset(Z: np.ndarray) -> tuple[np.ndarray, float]:
    """Return ``(exp(Z) - c, c)`` in place, with ``c`` 1 when most entries are near 1, else 0.

    Entries near 1 keep their digits as ``exp(z) - 1``, entries near 0 as ``exp(z)``: take the
    form that suits most of the block, judged on a subsample of its rows.
    """
    xp = array_module(Z)
    sample = Z[:: max(1, Z.shape[0] // 64), :]
    if sample.shape[0] * sample.shape[1] and float(xp.mean(xp.exp(sample))) > 0.5:
        return elementwise_in_place(xp, "expm1", Z), 1.0
    return elementwise_in_place(xp, "exp", Z), 0.0


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


def _with_gamma(kernel: K, n_features: int) -> K:
    """Return a copy of ``kernel`` (its own class: a subclass stays itself) with ``gamma`` set."""
    resolved = copy.copy(kernel)
    resolved.gamma = _resolve_gamma(kernel.gamma, n_features)
    return resolved


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
    #: Whether its blocks can be CuPy arrays (``dkpca.device = "cuda"``): numpy calls that
    #: dispatch to CuPy only, no scipy.
    runs_on_gpu: ClassVar[bool] = False
    _params: ClassVar[tuple[str, ...]] = ()

    @property
    def positive_semidefinite(self) -> bool:
        """Whether every kernel matrix of this kernel is PSD (``False`` when not known).

        Examples
        --------
        >>> from dkpca.kernels import RBF, Linear, Sigmoid, get_kernel
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
        >>> from dkpca.kernels import RBF, Linear, Sigmoid, get_kernel
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
        >>> from dkpca.kernels import RBF, Linear, Sigmoid, get_kernel
        >>> import numpy as np
        >>> K, c = RBF(gamma=1e-8).pairwise_offset(np.zeros((1, 1)), np.ones((1, 1)))
        >>> c, K.dtype, bool(K[0, 0] == np.expm1(-1e-8))
        (1.0, dtype('float64'), True)
        """
        return self.pairwise(X, Y), 0.0

    def with_defaults(self, n_features: int) -> Kernel:
        """Return a copy whose data-dependent defaults (``gamma=None``) are resolved.

        The copy has the kernel's own class, so a subclass of a built-in kernel keeps its
        overrides; a kernel without such defaults returns itself.

        Examples
        --------
        >>> from dkpca.kernels import RBF
        >>> Wide = type("Wide", (RBF,), {})
        >>> Wide().with_defaults(4)
        Wide(gamma=0.25)
        """
        return self

    def get_config(self) -> dict[str, Any]:
        """Return ``{"name": ..., "configuration": {...}}`` holding JSON builtins only.

        Examples
        --------
        >>> from dkpca.kernels import RBF, Linear, Sigmoid, get_kernel
        >>> RBF(gamma=0.25).get_config()
        {'name': 'rbf', 'configuration': {'gamma': 0.25}}
        """
        return {"name": self.name, "configuration": {p: getattr(self, p) for p in self._params}}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Kernel:
        """Build a kernel from :meth:`get_config` output.

        Examples
        --------
        >>> from dkpca.kernels import RBF, Linear, Sigmoid, get_kernel
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


def _dense_row(A: Block, i: int) -> np.ndarray:
    """Row ``i`` of a block as a dense 1-D array."""
    row = A[i : i + 1]
    return (row.toarray() if sp.issparse(row) else np.asarray(row))[0]


class ExponentialKernel(Kernel):
    """A kernel ``exp(E(x, y))`` with ``E(x, x) = 0``: RBF, Laplacian, chi².

    Subclasses give the exponent block (:meth:`_exponent`); the kernel, its offset form (the
    exponent's ``expm1`` where the entries crowd around 1) and its unit diagonal follow.
    ``_diag_blocks`` checks a block for :meth:`diag` as :meth:`_exponent` does.
    """

    @abstractmethod
    def _exponent(self, X: Block, Y: Block | None) -> np.ndarray:
        """Return the exponent block ``E(X[i], Y[j])`` (a new array)."""

    def _diag_blocks(self, X: Block) -> Block:
        return _as_blocks(X, None)[0]

    def pairwise(self, X: Block, Y: Block | None = None) -> np.ndarray:
        """Return ``exp(E(X[i], Y[j]))``.

        Examples
        --------
        >>> import numpy as np
        >>> from dkpca.kernels import RBF
        >>> RBF(gamma=1.0).pairwise(np.zeros((1, 1)), np.ones((1, 1))).round(4)
        array([[0.3679]])
        """
        K = self._exponent(X, Y)
        return elementwise_in_place(array_module(K), "exp", K)

    def pairwise_offset(self, X: Block, Y: Block | None = None) -> tuple[np.ndarray, float]:
        """Return ``exp(E) - c`` and ``c`` (1 where most entries are near 1, else 0)."""
        return _exp_with_offset(self._exponent(X, Y))

    def exponent(self, X: Block, Y: Block | None = None) -> np.ndarray:
        """Return the exponent block ``E(X[i], Y[j])``, so that ``K = exp(E)``.

        For callers that fuse ``exp`` with later steps (the GPU's streamed tiles).

        Examples
        --------
        >>> import numpy as np
        >>> from dkpca.kernels import RBF
        >>> RBF(gamma=0.5).exponent(np.zeros((1, 1)), np.full((1, 1), 2.0))
        array([[-2.]])
        """
        return self._exponent(X, Y)

    def diag(self, X: Block) -> np.ndarray:
        """Return ones: ``exp(E(x, x)) = exp(0)``."""
        X = self._diag_blocks(X)
        return array_module(X).ones(X.shape[0], dtype=X.dtype)


@register_kernel
class SumKernel(Kernel):
    """Sum of kernels, usually built with ``+``.

    Examples
    --------
    >>> from dkpca.kernels import RBF, Linear, Sigmoid, get_kernel
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
    def positive_semidefinite(self) -> bool:
        return all(k.positive_semidefinite for k in self.kernels)

    @property
    def translation_invariant(self) -> bool:
        return all(k.translation_invariant for k in self.kernels)

    @property
    def runs_on_gpu(self) -> bool:  # type: ignore[override]
        return all(k.runs_on_gpu for k in self.kernels)

    def with_defaults(self, n_features: int) -> SumKernel:
        resolved = copy.copy(self)
        resolved.kernels = tuple(k.with_defaults(n_features) for k in self.kernels)
        return resolved

    def pairwise(self, X: Block, Y: Block | None = None) -> np.ndarray:
        K = self.kernels[0].pairwise(X, Y)
        for kernel in self.kernels[1:]:
            K += kernel.pairwise(X, Y)
        return K

    def diag(self, X: Block) -> np.ndarray:
        return sum(k.diag(X) for k in self.kernels)

    def pairwise_offset(
        self, X: Block, Y: Block | None = None
    ) -> tuple[np.ndarray, float]:
        K, c = self.kernels[0].pairwise_offset(X, Y)
        for kernel in self.kernels[1:]:
            part, offset = kernel.pairwise_offset(X, Y)
            K += part
            c += offset
        return K, c

    def get_config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "configuration": {"kernels": [k.get_config() for k in self.kernels]},
        }

    def _key(self) -> Any:
        # The members compare as kernels, so a sum holding a CallableKernel compares too.
        return (self.name, self.kernels)

    def __repr__(self) -> str:
        return " + ".join(repr(k) for k in self.kernels)


def _named_kernels() -> list[str]:
    return sorted(n for n in _REGISTRY if n != SumKernel.name)


def kernel_from_config(config: dict[str, Any]) -> Kernel:
    """Rebuild a kernel from its JSON config.

    Examples
    --------
    >>> from dkpca.kernels import RBF, Linear, Sigmoid, get_kernel
    >>> kernel_from_config(RBF(gamma=2.0).get_config())
    RBF(gamma=2.0)
    """
    try:
        name, params = config["name"], dict(config.get("configuration", {}))
    except (TypeError, KeyError) as err:
        raise ValueError(f"not a kernel config: {config!r}") from err
    if name == SumKernel.name:
        return SumKernel(*(kernel_from_config(c) for c in params["kernels"]))
    if name == "callable":  # CallableKernel: a function, no config
        raise ValueError(
            "a callable kernel has no config and cannot be loaded; save the model with a named "
            "kernel or a Kernel subclass registered with dkpca.kernels.register_kernel"
        )
    if name not in _REGISTRY:
        raise ValueError(f"unknown kernel {name!r}; known: {sorted(_REGISTRY)}")
    return _REGISTRY[name](**params)
