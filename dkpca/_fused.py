"""Elementwise steps over a whole tile, fused into one pass on a GPU.

A streamed tile of an exponential kernel (RBF and the other ``exp(E)`` kernels) is made of its
exponent ``E`` (one GEMM for RBF), ``exp`` or ``expm1`` of it, and a shift by the tile's mean.
On the CPU each step runs on the cores at memory speed and the GEMMs dominate. On a GPU every
step over a 1 GiB tile is a full read and write of GPU memory, and each scalar the host reads
(the form of ``exp``, the mean) stops the GPU until the host has queued the next work. So on a
GPU the form and the shift stay on the device as 0-d arrays and
:func:`exp_minus_in_place` does both steps in a single CUDA kernel: the tile is written once by
the GEMM and once by this pass, then read by the two products.

The kernel moves 16 bytes per load and store (``float4``, ``double2``). With one 4-byte value
per thread, as CuPy's elementwise kernels move them, an H100 keeps too few bytes in flight to
fill its memory bandwidth: CuPy's ``exp`` over a 1 GiB float32 tile ran at 1.7 TB/s.

The numpy path does the same arithmetic (``exp`` or ``expm1`` rounded to the tile's dtype, then
the shift subtracted in that dtype), so both devices store the same numbers.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ._device import array_module, import_cupy, into, is_device_array

__all__ = ["exp_minus_in_place"]

#: The CUDA kernel's name (also the key of the CuPy stand-in the tests run it on).
EXP_MINUS_KERNEL = "dkpca_exp_minus"

#: Per dtype: the C type, its 16-byte vector type, the values in one vector, the math suffix.
_VECTORS = {"float32": ("float", "float4", 4, "f"), "float64": ("double", "double2", 2, "")}
_THREADS = 256
_MAX_BLOCKS = 65_536

_SOURCE = r"""
extern "C" __global__ void NAME(T* __restrict__ z, const long long n, const long long head,
                                const T* __restrict__ shift_at FLAG_PARAMETER) {
  // z[0:head] one by one (the start of z to 16 bytes), then 16-byte vectors, then the tail.
  const T shift = *shift_at;
  FLAG_LOAD
  const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long stride = (long long)gridDim.x * blockDim.x;
  if (first < head) z[first] = F(z[first]) - shift;
  VECTOR* body = reinterpret_cast<VECTOR*>(z + head);
  const long long vectors = (n - head) / WIDTH;
  for (long long i = first; i < vectors; i += stride) {
    VECTOR v = body[i];
    EACH_LANE
    body[i] = v;
  }
  const long long tail = head + vectors * WIDTH + first;
  if (tail < n) z[tail] = F(z[tail]) - shift;
}
"""


@functools.cache
def _cuda_exp_minus(form: str, dtype: str) -> Any:
    """Compile (once per process) the pass for CuPy: ``exp``, ``expm1`` or either by a flag.

    Given on the host, the form picks a kernel that computes one function; a flag on the device
    makes the kernel evaluate the choice (the compiler may compute both functions).
    """
    scalar, vector, width, suffix = _VECTORS[dtype]
    function = {"exp": f"exp{suffix}(x)", "expm1": f"expm1{suffix}(x)",
                "either": f"(near_one ? expm1{suffix}(x) : exp{suffix}(x))"}[form]
    name = EXP_MINUS_KERNEL if form == "either" else f"{EXP_MINUS_KERNEL}_{form}"
    lanes = "xyzw"[:width]
    source = (_SOURCE.replace("FLAG_PARAMETER", ", const bool* __restrict__ near_one_at"
                              if form == "either" else "")
              .replace("FLAG_LOAD", "const bool near_one = *near_one_at;"
                       if form == "either" else "")
              .replace("EACH_LANE", " ".join(f"v.{c} = F(v.{c}) - shift;" for c in lanes))
              .replace("NAME", name).replace("VECTOR", vector).replace("WIDTH", str(width)))
    source = f"#define T {scalar}\n#define F(x) {function}\n{source}"
    return import_cupy().RawKernel(source, name), width


def _on_device(Z: Any, near_one: Any, shift: Any) -> None:
    """Run the CUDA pass over the contiguous device array ``Z``."""
    if not (Z.flags.c_contiguous or Z.flags.f_contiguous):
        raise ValueError(f"exp_minus_in_place needs a contiguous device array, got strides "
                         f"{Z.strides} for shape {Z.shape}")
    on_host = isinstance(near_one, (bool, np.bool_))
    kernel, width = _cuda_exp_minus(("expm1" if near_one else "exp") if on_host else "either",
                                    Z.dtype.name)
    n = Z.size
    head = min(n, (-(Z.data.ptr // Z.itemsize)) % width)  # values before a 16-byte boundary
    blocks = max(1, min(_MAX_BLOCKS, -(-(n // width) // _THREADS)))
    arguments = (Z, np.int64(n), np.int64(head), shift)
    if not on_host:
        arguments += (array_module(Z).asarray(near_one, dtype=bool),)
    kernel((blocks,), (_THREADS,), arguments)


def exp_minus_in_place(Z: Any, near_one: Any, shift: Any) -> Any:
    """Replace ``Z`` by ``expm1(Z) - shift`` where ``near_one``, else ``exp(Z) - shift``.

    ``near_one`` (bool) and ``shift`` (of ``Z``'s dtype) may be 0-d arrays on ``Z``'s device,
    so that a GPU tile needs no value from the host; a form known on the host runs a kernel
    with only that function. One pass over ``Z`` on a GPU, two on the CPU; the same numbers
    on both. On a GPU, ``Z`` must be contiguous (a tile, or a copy of some of its rows).

    Parameters
    ----------
    Z : numpy or CuPy array
        The exponent, overwritten.
    near_one : bool or 0-d bool array
        Whether most entries are near 1 (then ``expm1`` keeps their digits).
    shift : float or 0-d array
        Subtracted from every entry, in ``Z``'s dtype.

    Returns
    -------
    The array ``Z``.

    Raises
    ------
    ValueError
        If ``Z`` is a device array that is not contiguous.

    Examples
    --------
    >>> import numpy as np
    >>> Z = np.array([[0.0, -1e-8]], dtype=np.float32)
    >>> bool(exp_minus_in_place(Z, True, 0.0)[0, 1] == np.float32(np.expm1(-1e-8)))
    True
    """
    xp = array_module(Z)
    shift = xp.asarray(shift, dtype=Z.dtype)
    if not is_device_array(Z):  # numpy, or another library of the standard
        into(xp, "expm1" if bool(near_one) else "exp", Z, out=Z)
        Z -= shift
        return Z
    _on_device(Z, near_one, shift)
    return Z
