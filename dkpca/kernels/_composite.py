"""Kernels built from others: sums, and a user's Python function."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp

from ._base import (
    Block,
    Kernel,
    _as_operand,
    _check_shapes,
    _dense_row,
    _named_kernels,
    _result_dtype,
    _row_chunks,
    _rows_within,
)


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

    def pairwise(self, X: Block, Y: Block | None = None) -> np.ndarray:
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

    def diag(self, X: Block) -> np.ndarray:
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
