"""A stand-in for CuPy built on numpy, as strict as CuPy about where arrays live.

CI has no GPU, yet the GPU code paths must not let a numpy-only call slip in. This module
imitates the part of CuPy that dkpca uses and, like CuPy:

* its arrays refuse implicit conversion to numpy (``np.asarray(a)`` raises ``TypeError``); the
  host copy is ``a.get()``;
* its ufuncs and the numpy functions dispatched to it refuse numpy arrays as operands (CuPy
  raises on mixed operands), while Python and numpy scalars are accepted;
* ``asarray`` copies host data "to the device".

Installed as ``sys.modules["cupy"]`` by a test (``monkeypatch.setitem``), it makes
``dask.config.set({"dkpca.device": "cuda"})`` run the device code on the CPU. It proves the
code's array discipline, not its speed or CuPy's numerics: ``tests/test_gpu.py`` runs the same
tests on real CuPy where a GPU is there.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np

__version__ = "0.0+stand.in"  # a valid version: xarray parses it when "cupy" is imported

_REFUSED = ("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to "
            "construct a NumPy array explicitly.")


def _unwrap(value: Any) -> Any:
    """The numpy value inside ``value``; a numpy array operand is refused, as CuPy does."""
    if isinstance(value, ndarray):
        return value._data
    if isinstance(value, np.ndarray):
        raise TypeError(f"Unsupported type {type(value)}")
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(v) for v in value)
    if isinstance(value, dict):
        return {k: _unwrap(v) for k, v in value.items()}
    return value


def _wrap(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return ndarray(value)
    if isinstance(value, np.generic):  # CuPy's reductions give 0-d arrays on the device
        return ndarray(np.asarray(value))
    if isinstance(value, tuple):
        return tuple(_wrap(v) for v in value)
    return value


class ndarray(np.lib.mixins.NDArrayOperatorsMixin):  # CuPy's name
    """A device array: a numpy array that only this module's code may see."""

    __module__ = "cupy"

    def __init__(self, data: np.ndarray) -> None:
        self._data = data

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise TypeError(_REFUSED)

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        out = kwargs.get("out")
        if out is not None:
            kwargs["out"] = tuple(_unwrap(o) for o in out)
        result = getattr(ufunc, method)(*(_unwrap(x) for x in inputs), **kwargs)
        if out is not None:
            return out[0] if len(out) == 1 else out
        return _wrap(result)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        return _wrap(func(*_unwrap(args), **_unwrap(kwargs)))

    def __getitem__(self, key: Any) -> Any:
        return _wrap(self._data[_unwrap(key)])

    def __setitem__(self, key: Any, value: Any) -> None:
        self._data[_unwrap(key)] = _unwrap(value)

    def __len__(self) -> int:
        return len(self._data)

    def __float__(self) -> float:
        return float(self._data)

    def __int__(self) -> int:
        return int(self._data)

    def __bool__(self) -> bool:
        return bool(self._data)

    def __repr__(self) -> str:
        return f"stand-in cupy {self._data!r}"

    shape = property(lambda self: self._data.shape)
    dtype = property(lambda self: self._data.dtype)
    ndim = property(lambda self: self._data.ndim)
    size = property(lambda self: self._data.size)
    nbytes = property(lambda self: self._data.nbytes)
    itemsize = property(lambda self: self._data.itemsize)
    T = property(lambda self: ndarray(self._data.T))

    def get(self) -> np.ndarray:
        """The host copy."""
        return self._data.copy()

    def astype(self, dtype: Any, copy: bool = True) -> ndarray:
        return ndarray(self._data.astype(dtype, copy=copy))

    def copy(self) -> ndarray:
        return ndarray(self._data.copy())

    def item(self) -> Any:
        return self._data.item()

    def _reduce(name: str):  # builds methods
        def method(self, *args: Any, **kwargs: Any) -> Any:
            return _wrap(getattr(self._data, name)(*_unwrap(args), **_unwrap(kwargs)))
        method.__name__ = name
        return method

    any = _reduce("any")
    all = _reduce("all")
    sum = _reduce("sum")
    mean = _reduce("mean")
    min = _reduce("min")
    max = _reduce("max")
    reshape = _reduce("reshape")
    ravel = _reduce("ravel")
    del _reduce


def asarray(a: Any, dtype: Any = None, order: Any = None) -> ndarray:
    """Host data copied "to the device"; device data unchanged where no conversion is asked."""
    if isinstance(a, ndarray):
        return ndarray(np.asarray(a._data, dtype=dtype, order=order))
    return ndarray(np.array(a, dtype=dtype, order=order or "K", copy=True))


def ascontiguousarray(a: Any, dtype: Any = None) -> ndarray:
    return ndarray(np.ascontiguousarray(_unwrap(a), dtype=dtype))


def empty(shape: Any, dtype: Any = float, order: str = "C") -> ndarray:
    return ndarray(np.empty(shape, dtype=dtype, order=order))


def zeros(shape: Any, dtype: Any = float, order: str = "C") -> ndarray:
    return ndarray(np.zeros(shape, dtype=dtype, order=order))


def ones(shape: Any, dtype: Any = float) -> ndarray:
    return ndarray(np.ones(shape, dtype=dtype))


def _device_function(function: Any) -> Any:
    """``function`` on device arrays, as CuPy has it: numpy operands refused, results wrapped."""
    def on_device(*args: Any, **kwargs: Any) -> Any:
        return _wrap(function(*_unwrap(args), **_unwrap(kwargs)))
    on_device.__name__ = function.__name__
    return on_device


#: The module functions dkpca's device code calls, each as CuPy has it (``abs`` shadows the
#: builtin here, as in CuPy).
_FUNCTIONS = ("abs", "add", "all", "any", "arange", "argmax", "asfortranarray", "diag", "einsum",
              "exp", "expm1", "eye", "isfinite", "max", "maximum", "mean", "multiply", "nonzero",
              "ones_like", "reshape", "result_type", "sign", "sqrt", "stack", "subtract", "sum",
              "take", "take_along_axis", "tanh", "trace", "triu", "where")
globals().update({name: _device_function(getattr(np, name)) for name in _FUNCTIONS})
float32, float64, bool_ = np.float32, np.float64, np.bool_  # CuPy's dtypes are numpy's


def array(a: Any, dtype: Any = None, copy: bool = True) -> ndarray:
    """A device copy of device data (host data is refused, as ``asarray`` is the way in)."""
    return ndarray(np.array(_unwrap(a), dtype=dtype, copy=copy))
linalg = types.SimpleNamespace(eigh=_device_function(np.linalg.eigh),
                               eigvalsh=_device_function(np.linalg.eigvalsh),
                               norm=_device_function(np.linalg.norm))


def _syrk(trans: str, a: ndarray, out: Any = None, alpha: float = 1.0, beta: float = 0.0,
          lower: bool = False) -> ndarray:
    """cuBLAS ``syrk`` as CuPy wraps it: one triangle of ``op(a) op(a)ᵀ``, the other zeros."""
    if out is not None or alpha != 1.0 or beta != 0.0 or a.dtype.char not in "fd":
        raise NotImplementedError("the stand-in's syrk takes a float array and trans only")
    data = _unwrap(a)
    product = data @ data.T if trans == "N" else data.T @ data
    return ndarray(np.asfortranarray(np.tril(product) if lower else np.triu(product)))


#: ``cupy.cublas``: the routines CuPy's ``@`` does not reach.
cublas = types.SimpleNamespace(syrk=_syrk)


class _Pool:
    def free_bytes(self) -> int:
        return 0

    def total_bytes(self) -> int:
        return 0

    def free_all_blocks(self) -> None:
        return None


_POOL = _Pool()


def get_default_memory_pool() -> _Pool:
    return _POOL


class _CUDARuntimeError(RuntimeError):
    pass


#: The CUDA kernels dkpca compiles, by name, as numpy functions of their parameters (in the
#: order of the kernel's in and out parameters; the out parameters are written in place).
_ELEMENTWISE = {
    "dkpca_exp_minus": lambda near_one, shift, k: np.subtract(
        np.where(near_one, np.expm1(k), np.exp(k)), shift, out=k),
    "dkpca_exp_minus_exp": lambda shift, k: np.subtract(np.exp(k), shift, out=k),
    "dkpca_exp_minus_expm1": lambda shift, k: np.subtract(np.expm1(k), shift, out=k),
}


class ElementwiseKernel:
    """CuPy's ``ElementwiseKernel`` for the kernels of ``_ELEMENTWISE``.

    As CuPy does, it takes device arrays only and needs every parameter of one type letter
    (``T``) to have the same dtype.
    """

    def __init__(self, in_params: str, out_params: str, operation: str, name: str) -> None:
        if name not in _ELEMENTWISE:
            raise NotImplementedError(f"the stand-in has no numpy form of kernel {name!r}")
        self.params = [p.split() for p in f"{in_params}, {out_params}".split(",")]
        self.function = _ELEMENTWISE[name]
        self.name = name

    def __call__(self, *args: Any) -> Any:
        if len(args) != len(self.params):
            raise TypeError(f"wrong number of arguments: {len(args)}, {len(self.params)} wanted")
        types: dict[str, Any] = {}
        for (kind, name), arg in zip(self.params, args, strict=True):
            if not isinstance(arg, ndarray):
                raise TypeError(f"{name}: a device array is needed, got {type(arg)}")
            wanted = types.setdefault(kind, arg.dtype) if kind.isupper() else np.dtype(kind)
            if arg.dtype != wanted:
                raise TypeError(f"Type is mismatched. {name} {arg.dtype} {wanted}")
        self.function(*(arg._data for arg in args))
        return args[-1]


#: ``cupy.cuda``: one "GPU" with 8 GiB free.
cuda = types.SimpleNamespace(
    runtime=types.SimpleNamespace(
        getDeviceCount=lambda: 1,
        memGetInfo=lambda: (8 * 2**30, 16 * 2**30),
        CUDARuntimeError=_CUDARuntimeError,
    ),
    Device=lambda *args: types.SimpleNamespace(synchronize=lambda: None),
)
