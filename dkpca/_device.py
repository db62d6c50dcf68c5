"""Where the kernel tiles live: host memory (numpy) or a CUDA GPU (CuPy).

The kernel code is written once: kernels, tiles and holders take their array module from the
arrays they are given (:func:`array_module`), so numpy blocks compute on the CPU and CuPy
blocks on the GPU. Which one a fit uses is chosen by ``dask.config`` (``dkpca.device``:
``"cpu"``, the default, or ``"cuda"``) or by CuPy input, which implies ``"cuda"``. On
``"cuda"`` each tile holder (this process, or each Dask worker: one worker per GPU, as
``dask-cuda`` starts them) copies its data rows to its GPU once and keeps its tiles there.

CuPy is imported only when a GPU is asked for: ``import dkpca`` stays light, and a machine
without CuPy runs everything else.
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
from collections.abc import Hashable, Iterator
from types import ModuleType
from typing import Any

import dask
import numpy as np
from dask.sizeof import sizeof

__all__ = [
    "DEVICES",
    "DeviceUnavailableError",
    "aligned_operand",
    "array_module",
    "astype",
    "c_float64",
    "configured_device",
    "device_free_bytes",
    "elementwise_in_place",
    "first_call_alone",
    "gpu_alone",
    "import_cupy",
    "into",
    "is_device_array",
    "namespace_dtype",
    "nbytes",
    "numpy_dtype",
    "set_diagonal",
    "to_device",
    "to_host",
    "writes_in_place",
]

#: The values of the ``dkpca.device`` setting.
DEVICES = ("cpu", "cuda")

#: The ``dask.config`` key that chooses the device.
CONFIG_KEY = "dkpca.device"


class DeviceUnavailableError(RuntimeError):
    """The GPU asked for cannot be used: CuPy is missing, or no CUDA device is visible."""


def is_device_array(x: Any) -> bool:
    """Return whether ``x`` is a CuPy array (without importing CuPy).

    Examples
    --------
    >>> import numpy as np
    >>> is_device_array(np.ones(3))
    False
    """
    return "cupy" in sys.modules and type(x).__module__.split(".")[0] == "cupy"


def array_module(*arrays: Any) -> ModuleType:
    """Return the array module of ``arrays``: ``cupy`` if any of them is a CuPy array.

    Arrays of another library that implements the array API standard (``__array_namespace__``,
    as ``array_api_strict`` does) give that library's namespace: the code written against the
    standard (the block Krylov solver of :mod:`dkpca.linalg`, the kernels that run on a GPU)
    runs on them unchanged, which is how the tests keep numpy-only calls out of it. Anything
    else (numpy arrays, scalars, sparse matrices) is numpy's.

    Examples
    --------
    >>> import numpy as np
    >>> array_module(np.ones(2), 3.0).__name__
    'numpy'
    """
    if any(is_device_array(a) for a in arrays):
        return sys.modules["cupy"]
    for a in arrays:
        if hasattr(a, "__array_namespace__") and not isinstance(a, (np.ndarray, np.generic)):
            return a.__array_namespace__()
    return np


def writes_in_place(xp: ModuleType) -> bool:
    """Return whether ``xp``'s functions take ``out=`` (numpy and CuPy; the standard has none).

    Examples
    --------
    >>> import numpy as np
    >>> writes_in_place(np)
    True
    """
    return xp is np or xp is sys.modules.get("cupy")


def into(xp: ModuleType, name: str, *operands: Any, out: Any) -> Any:
    """Write ``xp.<name>(*operands)`` into ``out`` and return it.

    numpy and CuPy compute into ``out`` (``out=``: no temporary); another library computes a
    new array, which is then copied in.

    Examples
    --------
    >>> import numpy as np
    >>> out = np.zeros(2)
    >>> into(np, "add", np.ones(2), 1.0, out=out) is out, out
    (True, array([2., 2.]))
    """
    function = getattr(xp, name)
    if writes_in_place(xp):
        return function(*operands, out=out)
    out[...] = function(*operands)
    return out


def astype(x: Any, dtype: Any, copy: bool = False) -> Any:
    """Return ``x`` in ``dtype`` (of ``x``'s library), not copied if it is in it already.

    ``copy=True``: a new array always.

    The standard has ``astype`` as a function; numpy, CuPy and scipy's sparse matrices have
    the method.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.ones(2)
    >>> astype(x, np.float64) is x, astype(x, np.float32).dtype
    (True, dtype('float32'))
    """
    if hasattr(x, "astype"):
        return x.astype(dtype, copy=copy)
    return array_module(x).astype(x, dtype, copy=copy)


def c_float64(x: Any) -> Any:
    """Return ``x`` in float64, C-ordered where its library has an order (numpy, CuPy).

    Not copied when it is so already. The standard has neither order nor
    ``ascontiguousarray``: another library's array is only cast.

    Examples
    --------
    >>> import numpy as np
    >>> c_float64(np.ones((2, 3), dtype=np.float32, order="F")).flags.c_contiguous
    True
    """
    xp = array_module(x)
    if hasattr(xp, "ascontiguousarray"):
        return xp.ascontiguousarray(x, dtype=np.float64)
    return astype(x, xp.float64)


def aligned_operand(a: np.ndarray, dtype: np.dtype | type = np.float64) -> np.ndarray:
    """Return ``a`` as an aligned C-contiguous numpy array of ``dtype``, copied only if it is not one.

    An array unpickled in a worker process can start at any byte of its message, and numpy
    multiplies a large misaligned operand slowly: a misaligned 500 × 500 kernel times a
    500 × 15 block took 2.2 ms against 0.48 ms aligned (a small misaligned operand beside a
    large aligned one cost nothing measurable).

    Examples
    --------
    >>> import numpy as np
    >>> raw = np.zeros(8 * 6 + 1, dtype=np.uint8)[1:]  # one byte off
    >>> a = raw.view(np.float64).reshape(2, 3)
    >>> a.flags.aligned, aligned_operand(a).flags.aligned
    (False, True)
    >>> b = np.ones((2, 3))
    >>> aligned_operand(b) is b
    True
    """
    if a.dtype == dtype and a.flags.aligned and a.flags.c_contiguous:
        return a
    return np.array(a, dtype=dtype, order="C")


def namespace_dtype(xp: ModuleType, dtype: Any) -> Any:
    """Return ``xp``'s dtype of the same name as numpy's ``dtype`` (numpy's own for CuPy).

    Examples
    --------
    >>> import numpy as np
    >>> namespace_dtype(np, np.dtype("float32"))
    <class 'numpy.float32'>
    """
    name = np.dtype(dtype).name
    return getattr(xp, name, None) or getattr(xp, name + "_")  # CuPy before 14: ``bool_``


def numpy_dtype(dtype: Any) -> np.dtype:
    """Return numpy's dtype of an array's ``dtype``, whatever its library (by name otherwise).

    Examples
    --------
    >>> import numpy as np
    >>> numpy_dtype(np.float32)
    dtype('float32')
    """
    try:
        return np.dtype(dtype)
    except TypeError:  # another library's dtype object, printed as "library.float32"
        return np.dtype(str(dtype).rsplit(".", 1)[-1])


def nbytes(x: Any) -> int:
    """Return the memory of an array's values, whatever its library (sparse matrices too).

    The standard has no ``nbytes``: another library's array counts its elements times their
    size; numpy's, CuPy's and scipy's sparse blocks count as ``dask.sizeof`` counts them.

    Examples
    --------
    >>> import numpy as np
    >>> nbytes(np.ones((2, 3), dtype=np.float32))
    24
    """
    if hasattr(x, "__array_namespace__") and not hasattr(x, "nbytes"):
        return math.prod(x.shape) * numpy_dtype(x.dtype).itemsize
    return int(sizeof(x))


def set_diagonal(K: Any, values: Any, step: int = 1) -> Any:
    """Set ``K[r, r * step]`` to ``values`` (one value, or one a row) for every row ``r``.

    In place; ``step`` is that of a row subsample ``K[::step]`` of a square tile, whose
    diagonal entries then lie ``step`` columns apart. The standard has no integer-array
    assignment, so another library's ``K`` is rewritten through a mask.

    Examples
    --------
    >>> import numpy as np
    >>> set_diagonal(np.zeros((2, 4)), 1.0, step=2)
    array([[1., 0., 0., 0.],
           [0., 0., 1., 0.]])
    """
    xp = array_module(K)
    rows = xp.arange(K.shape[0])
    if writes_in_place(xp):
        K[rows, rows * step] = values
        return K
    values = xp.asarray(values, dtype=K.dtype)
    mask = xp.reshape(rows * step, (-1, 1)) == xp.reshape(xp.arange(K.shape[1]), (1, -1))
    K[...] = xp.where(mask, xp.reshape(values, (-1, 1)) if values.ndim else values, K)
    return K


def elementwise_in_place(xp: ModuleType, name: str, x: Any) -> Any:
    """Return ``xp.<name>(x)``, written into ``x`` where the library can (numpy, CuPy).

    numpy's and CuPy's elementwise functions take ``out=``: a kernel tile's ``exp`` then needs
    no second tile of memory. The array API standard has no ``out=``; other libraries return a
    new array.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.zeros(2)
    >>> elementwise_in_place(np, "exp", x) is x, x
    (True, array([1., 1.]))
    """
    function = getattr(xp, name)
    if writes_in_place(xp):
        return function(x, out=x)
    return function(x)


def configured_device() -> str:
    """Return the device the ``dkpca.device`` setting names (``"cpu"`` when unset).

    Examples
    --------
    >>> import dask
    >>> configured_device()
    'cpu'
    >>> with dask.config.set({"dkpca.device": "cuda"}):
    ...     configured_device()
    'cuda'
    """
    device = str(dask.config.get(CONFIG_KEY, "cpu")).lower()
    if device not in DEVICES:
        raise ValueError(f"dkpca.device must be one of {DEVICES}, got {device!r}")
    return device


def import_cupy() -> ModuleType:
    """Return the ``cupy`` module, or raise a one-line error saying what is missing.

    Examples
    --------
    >>> try:
    ...     import_cupy()
    ... except DeviceUnavailableError as err:
    ...     print(str(err).split(":")[0])
    device 'cuda' is not available
    """
    try:
        import cupy
    except ImportError as err:
        raise DeviceUnavailableError(
            f"device 'cuda' is not available: CuPy is not installed ({err}); install it with "
            f"pip install 'dkpca[gpu]' (CUDA 13) or the cupy-cuda12x wheel"
        ) from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError as err:  # no driver, or a broken one
        raise DeviceUnavailableError(
            f"device 'cuda' is not available: no usable CUDA driver ({type(err).__name__}: "
            f"{err})"
        ) from None
    if count < 1:
        raise DeviceUnavailableError("device 'cuda' is not available: no CUDA GPU is visible")
    return cupy


def to_device(x: Any, device: str) -> Any:
    """Return ``x`` on ``device``: unchanged for ``"cpu"``, a CuPy array for ``"cuda"``.

    Sparse blocks are refused on the GPU (the kernels' sparse paths are scipy's).

    Examples
    --------
    >>> import numpy as np
    >>> to_device(np.ones(2), "cpu")
    array([1., 1.])
    """
    if device == "cpu" or is_device_array(x):
        return x
    import scipy.sparse

    if scipy.sparse.issparse(x):
        raise ValueError("device 'cuda' takes dense data; sparse input runs on device 'cpu'")
    return import_cupy().asarray(x)


def to_host(x: Any) -> Any:
    """Return ``x`` as a numpy array (copied from the GPU if it is there).

    An array of another library of the standard is converted too: on ``array_api_strict``
    the tests then cross the same boundary between device and host that a GPU run does.

    Examples
    --------
    >>> import numpy as np
    >>> to_host(np.zeros(1))
    array([0.])
    """
    if is_device_array(x):
        return x.get()
    return x if array_module(x) is np else np.asarray(x)


def device_free_bytes() -> int:
    """Return the GPU memory this process can still take: free on the card and in CuPy's pool.

    Examples
    --------
    >>> try:
    ...     device_free_bytes() > 0
    ... except DeviceUnavailableError:
    ...     True
    True
    """
    cupy = import_cupy()
    free, _ = cupy.cuda.runtime.memGetInfo()
    return int(free + cupy.get_default_memory_pool().free_bytes())


_gpu_in_use = threading.RLock()


def gpu_alone(device: str) -> contextlib.AbstractContextManager:
    """On a GPU, let one thread of this process at a time run the enclosed GPU work.

    Work that is all GPU gains nothing from sharing the GPU between threads, and loses: the
    threads share CuPy's default stream, so each one's copies and allocations wait on the
    others' kernels. A Nyström pass over 4,000,000 rows (2,000 landmarks, an H100 beside 16
    cores) took 3.53 s with 16 tasks side by side and 1.87 s with one task at a time (dask's
    synchronous scheduler). Under this lock the host work around it (reading and decoding the
    chunks) still runs on every thread. On the CPU this does nothing.

    Examples
    --------
    >>> with gpu_alone("cpu"):
    ...     pass
    """
    return contextlib.nullcontext() if device == "cpu" else _gpu_in_use


_first_calls: dict[Hashable, threading.Event] = {}
_first_calls_lock = threading.Lock()


@contextlib.contextmanager
def first_call_alone(key: Hashable, device: str) -> Iterator[None]:
    """On a GPU, run the first call with ``key`` in this process alone; the others wait for it.

    CuPy compiles each elementwise and reduction kernel the first time it runs in a process.
    When a pass fans out over many threads, they all reach the same uncompiled kernels at once
    and each compiles them: on an H100 beside 16 cores, the first Nyström pass (200,000 rows,
    2,000 landmarks, 16 threads) took 90.6 s, the next one over 4,000,000 rows 1.9 s. So the
    first call compiles, once, while the others wait. ``key`` names the work and whatever
    changes the kernels it runs (the dtypes, the kernel function). On the CPU this does nothing.

    Examples
    --------
    >>> with first_call_alone(("example", "float32"), "cpu"):
    ...     pass
    """
    if device == "cpu":
        yield
        return
    with _first_calls_lock:
        done = _first_calls.get(key)
        first = done is None
        if first:
            done = _first_calls[key] = threading.Event()
    if not first:
        done.wait()
        yield
        return
    try:
        yield
    finally:
        done.set()
