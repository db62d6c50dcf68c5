"""Elementwise steps over a whole tile, fused into one pass on a GPU.

A streamed tile of an exponential kernel (RBF and the other ``exp(E)`` kernels) is made of its
exponent ``E`` (one GEMM for RBF), ``exp`` or ``expm1`` of it, and a shift by the tile's mean.
On the CPU each step runs on the cores at memory speed and the GEMMs dominate. On a GPU every
step over a 1 GiB tile is a full read and write of GPU memory, and each scalar the host reads
(the form of ``exp``, the mean) stops the GPU until the host has queued the next work. So on a
GPU the form and the shift stay on the device as 0-d arrays and
:func:`exp_minus_in_place` does both steps in a single CUDA kernel: the tile is written once by
the GEMM and once by this pass, then read by the two products.

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


@functools.cache
def _cuda_exp_minus(form: str) -> Any:
    """Compile (once per process) the pass for CuPy: ``exp``, ``expm1`` or either by a flag.

    Given on the host, the form picks a kernel that computes one function; a flag on the device
    makes the kernel evaluate the choice (the compiler may compute both functions).
    """
    if form == "either":
        return import_cupy().ElementwiseKernel(
            "bool near_one, T shift", "T k",
            "k = (near_one ? expm1(k) : exp(k)) - shift", EXP_MINUS_KERNEL)
    return import_cupy().ElementwiseKernel(
        "T shift", "T k", f"k = {form}(k) - shift", f"{EXP_MINUS_KERNEL}_{form}")


def exp_minus_in_place(Z: Any, near_one: Any, shift: Any) -> Any:
    """Replace ``Z`` by ``expm1(Z) - shift`` where ``near_one``, else ``exp(Z) - shift``.

    ``near_one`` (bool) and ``shift`` (of ``Z``'s dtype) may be 0-d arrays on ``Z``'s device,
    so that a GPU tile needs no value from the host; a form known on the host runs a kernel
    with only that function. One pass over ``Z`` on a GPU, two on the CPU; the same numbers
    on both.

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
    if isinstance(near_one, (bool, np.bool_)):
        _cuda_exp_minus("expm1" if near_one else "exp")(shift, Z)
    else:
        _cuda_exp_minus("either")(xp.asarray(near_one, dtype=bool), shift, Z)
    return Z
