"""A kernel from a name and parameters, a kernel object or a Python function."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._base import _REGISTRY, Kernel, SumKernel, _named_kernels
from ._composite import CallableKernel
from ._dot import RBF


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
