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
    strides = property(lambda self: self._data.strides)
    flags = property(lambda self: self._data.flags)
    #: ``data.ptr``: the address of the first value, as CuPy's memory pointer gives it.
    data = property(lambda self: types.SimpleNamespace(ptr=self._data.ctypes.data))
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


def _exp_minus(function: Any) -> Any:
    """The numpy form of dkpca's ``exp``-and-shift kernel, checking its launch arguments."""
    def run(z: np.ndarray, n: np.int64, head: np.int64, shift: np.ndarray,
            *near_one: np.ndarray) -> None:
        # CUDA reads each argument as the kernel declares it: a wrong type is a silent bug there
        if not (isinstance(n, np.int64) and isinstance(head, np.int64)
                and shift.dtype == z.dtype and [f.dtype for f in near_one] in ([], [np.bool_])):
            raise TypeError(f"argument types {[type(n), type(head), shift.dtype]} for {z.dtype}")
        values = z.reshape(-1, order="A")  # a contiguous array: a view of its buffer
        if not (np.shares_memory(values, z) and n == values.size and 0 <= head < 4):
            raise ValueError(f"bad launch arguments n={n}, head={head} for {z.shape}")
        with np.errstate(over="ignore"):
            np.subtract(function(values, *near_one), shift, out=values)
    return run


#: The CUDA kernels dkpca compiles, by name, as numpy functions of their arguments (the arrays
#: written in place).
_KERNELS = {
    "dkpca_exp_minus": _exp_minus(lambda z, near_one: np.where(near_one, np.expm1(z), np.exp(z))),
    "dkpca_exp_minus_exp": _exp_minus(np.exp),
    "dkpca_exp_minus_expm1": _exp_minus(np.expm1),
}


class RawKernel:
    """CuPy's ``RawKernel`` for the kernels of ``_KERNELS``: device arrays and numpy scalars.

    Like a CUDA launch, it takes a grid and a block of at most 1,024 threads; the source must
    define the named function.
    """

    def __init__(self, code: str, name: str) -> None:
        if name not in _KERNELS or f" {name}(" not in code:
            raise NotImplementedError(f"the stand-in has no numpy form of kernel {name!r}")
        self.code, self.name = code, name

    def __call__(self, grid: tuple, block: tuple, args: tuple) -> None:
        if not (1 <= int(np.prod(block)) <= 1024 and min(grid) >= 1):
            raise ValueError(f"invalid launch configuration grid={grid}, block={block}")
        for arg in args:
            if not isinstance(arg, (ndarray, np.generic)):
                raise TypeError(f"a device array or a numpy scalar is needed, got {type(arg)}")
        _KERNELS[self.name](*(_unwrap(arg) for arg in args))


#: ``cupy.cuda``: one "GPU" with 8 GiB free.
cuda = types.SimpleNamespace(
    runtime=types.SimpleNamespace(
        getDeviceCount=lambda: 1,
        memGetInfo=lambda: (8 * 2**30, 16 * 2**30),
        CUDARuntimeError=_CUDARuntimeError,
    ),
    Device=lambda *args: types.SimpleNamespace(synchronize=lambda: None),
)
