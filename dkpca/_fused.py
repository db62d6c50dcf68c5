"""A streamed tile's elementwise steps, and its products, fused on a GPU.

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

A streamed tile need not be stored at all: :func:`exp_product` reads the exponent once for
each product, forms each value on chip and multiplies it into ``V`` there (one CUDA kernel for
``K V`` and one for ``Kᵀ V``), so the tile's values are never written to GPU memory. Each
product is summed in the tile's dtype within a split of the reduction, as a GEMM sums, and the
splits' partials in float64.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ._device import array_module, import_cupy

__all__ = ["exp_minus_in_place", "exp_product"]

#: The CUDA kernel's name (also the key of the CuPy stand-in the tests run it on).
EXP_MINUS_KERNEL = "dkpca_exp_minus"

#: The fused products' CUDA source: one template, instantiated by dtype, side and form.
EXP_PRODUCT_SOURCE = r"""
// The streamed tile's values and their product with a block of V, in one read of the exponent.
//
// Z (rows x cols, C order) holds the exponent of an exponential kernel. Each block makes BM
// output rows of P = F(Z) W (or F(Z)^T W when TRANS) for one slab of BN columns of W, over one
// split of the reduction, where F(z) = f(z) - shift with f = expm1 or exp (FORM 1 or 0, or
// read from the device when FORM is 2), and F = f(0) - shift exactly on a diagonal tile's
// diagonal. The values are rounded as the elementwise pass rounds them (f(z) in T, then less
// the shift in T), so the tile is the one the unfused pass would store; each split's partial
// is written to its own slice of `out` (no atomics: the same numbers on every run).
#define DK_BM 128
#define DK_BK 32
#define DK_BN 32
#define DK_TM 4
#define DK_TN 8
#define DK_THREADS 128

template <typename T, bool TRANS, int FORM>
__global__ void __launch_bounds__(DK_THREADS) dkpca_exp_product(
    const T* __restrict__ Z, long long rows, long long cols,
    const T* __restrict__ W, int width,
    const bool* __restrict__ near_one, const T* __restrict__ shift,
    int diagonal, long long span, T* __restrict__ out)
{
    const long long out_rows = TRANS ? cols : rows;
    const long long depth = TRANS ? rows : cols;
    const long long r0 = (long long)blockIdx.x * DK_BM;
    const int c0 = blockIdx.z * DK_BN;
    const long long k_begin = (long long)blockIdx.y * span;
    const long long k_end = min(k_begin + span, depth);

    __shared__ T values[DK_BK][DK_BM + 1];  // F(Z) of the chunk, reduction index first
    __shared__ T block[DK_BK][DK_BN];       // the chunk's rows of W

    const int t = threadIdx.x;
    const int tx = t % (DK_BN / DK_TN);
    const int ty = t / (DK_BN / DK_TN);
    const bool expm1_form = FORM == 1 || (FORM == 2 && *near_one);
    const T s = *shift;
    const T on_diagonal = (expm1_form ? T(0) : T(1)) - s;

    T acc[DK_TM][DK_TN];
#pragma unroll
    for (int i = 0; i < DK_TM; ++i)
#pragma unroll
        for (int j = 0; j < DK_TN; ++j) acc[i][j] = T(0);

    for (long long k0 = k_begin; k0 < k_end; k0 += DK_BK) {
        if (!TRANS) {  // a warp reads 32 consecutive entries of one row of Z
            const int kk = t % DK_BK;
            const long long zc = k0 + kk;
#pragma unroll 8
            for (int rr = t / DK_BK; rr < DK_BM; rr += DK_THREADS / DK_BK) {
                const long long zr = r0 + rr;
                T v = T(0);
                if (zr < rows && zc < k_end) {
                    const T z = Z[zr * cols + zc];
                    v = diagonal && zr == zc ? on_diagonal : (expm1_form ? expm1(z) : exp(z)) - s;
                }
                values[kk][rr] = v;
            }
        } else {  // a warp reads 32 consecutive entries of one row of Z, across the outputs
            const int rr = t;
            const long long zc = r0 + rr;
#pragma unroll 8
            for (int kk = 0; kk < DK_BK; ++kk) {
                const long long zr = k0 + kk;
                T v = T(0);
                if (zc < cols && zr < k_end) {
                    const T z = Z[zr * cols + zc];
                    v = diagonal && zr == zc ? on_diagonal : (expm1_form ? expm1(z) : exp(z)) - s;
                }
                values[kk][rr] = v;
            }
        }
        {
            const int cc = t % DK_BN;
#pragma unroll
            for (int kk = t / DK_BN; kk < DK_BK; kk += DK_THREADS / DK_BN) {
                const long long wr = k0 + kk;
                block[kk][cc] = wr < k_end ? W[wr * width + c0 + cc] : T(0);
            }
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < DK_BK; ++kk) {
            T a[DK_TM], b[DK_TN];
#pragma unroll
            for (int i = 0; i < DK_TM; ++i) a[i] = values[kk][ty * DK_TM + i];
#pragma unroll
            for (int j = 0; j < DK_TN; ++j) b[j] = block[kk][tx * DK_TN + j];
#pragma unroll
            for (int i = 0; i < DK_TM; ++i)
#pragma unroll
                for (int j = 0; j < DK_TN; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    T* part = out + (long long)blockIdx.y * out_rows * width;
#pragma unroll
    for (int i = 0; i < DK_TM; ++i) {
        const long long r = r0 + ty * DK_TM + i;
        if (r < out_rows) {
#pragma unroll
            for (int j = 0; j < DK_TN; ++j) part[r * width + c0 + tx * DK_TN + j] = acc[i][j];
        }
    }
}
"""

#: The source's block shape: output rows per CUDA block, columns of ``V`` per slab, reduction
#: entries per chunk, threads per block (``DK_BM``, ``DK_BN``, ``DK_BK``, ``DK_THREADS``).
_BLOCK_ROWS, _SLAB, _CHUNK, _THREADS = 128, 32, 32, 128

#: CUDA blocks a product aims for (enough to fill a GPU); splits of the reduction make them up.
_TARGET_BLOCKS = 1024

#: The fewest reduction entries a split sums.
_MIN_SPLIT = 256

#: Each form's template argument: ``exp``, ``expm1``, or read from the device.
_FORMS = {"exp": 0, "expm1": 1, "either": 2}


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
    if xp is np:
        (np.expm1 if bool(near_one) else np.exp)(Z, out=Z)
        Z -= shift
        return Z
    if isinstance(near_one, (bool, np.bool_)):
        _cuda_exp_minus("expm1" if near_one else "exp")(shift, Z)
    else:
        _cuda_exp_minus("either")(xp.asarray(near_one, dtype=bool), shift, Z)
    return Z


def _exp_product_name(dtype: np.dtype, transposed: bool, form: str) -> str:
    """Return the template instance's name expression (also the CuPy stand-in's key)."""
    ctype = {"float32": "float", "float64": "double"}[np.dtype(dtype).name]
    return f"dkpca_exp_product<{ctype},{str(transposed).lower()},{_FORMS[form]}>"


@functools.cache
def _cuda_exp_products(dtype_name: str) -> Any:
    """Compile (once per process and dtype) every side and form of the fused product."""
    names = [_exp_product_name(np.dtype(dtype_name), transposed, form)
             for transposed in (False, True) for form in _FORMS]
    return import_cupy().RawModule(code=EXP_PRODUCT_SOURCE, options=("-std=c++17",),
                                   name_expressions=names)


@functools.cache
def _cuda_exp_product(dtype_name: str, transposed: bool, form: str) -> Any:
    """Return one side and form of the fused product, compiled (see :func:`_cuda_exp_products`)."""
    return _cuda_exp_products(dtype_name).get_function(
        _exp_product_name(np.dtype(dtype_name), transposed, form))


def _splits(out_rows: int, slabs: int, depth: int) -> tuple[int, int]:
    """Return ``(splits, span)``: the reduction cut so that the product fills the GPU."""
    row_blocks = -(-out_rows // _BLOCK_ROWS)
    splits = max(1, min(-(-_TARGET_BLOCKS // (row_blocks * slabs)), depth // _MIN_SPLIT))
    span = -(-depth // splits)
    span = -(-span // _CHUNK) * _CHUNK
    return -(-depth // span), span


def exp_product(Z: Any, near_one: Any, shift: Any, diagonal: bool, W: Any,
                transposed: bool = False) -> Any:
    """Return ``F W`` (or ``Fᵀ W``) in float64, ``F`` the tile :func:`exp_minus_in_place` makes.

    ``F = f(Z) - shift`` with ``f`` as there, and, on a diagonal tile, its exact diagonal
    ``f(0) - shift``. On a GPU the values are made on chip and never stored; on the CPU (the
    reference) ``F`` is made in a copy of ``Z``.

    Parameters
    ----------
    Z : numpy or CuPy array
        The tile's exponent, C-ordered; it is not changed.
    near_one : bool or 0-d bool array
        The form of ``exp``, as in :func:`exp_minus_in_place`.
    shift : 0-d array or float
        Subtracted from every value, in ``Z``'s dtype.
    diagonal : bool
        Whether the tile lies on the kernel's diagonal (its rows are its columns).
    W : array of ``Z``'s dtype
        The block to multiply: ``Z.shape[1]`` rows (``Z.shape[0]`` when ``transposed``).
    transposed : bool
        Multiply by ``Fᵀ``.

    Returns
    -------
    float64 array of ``Z.shape[1 if transposed else 0]`` rows and ``W``'s columns.

    Examples
    --------
    >>> import numpy as np
    >>> Z = -np.array([[0.0, 1.0], [1.0, 0.0]], dtype=np.float32)
    >>> exp_product(Z, False, 0.0, True, np.ones((2, 1), np.float32)).round(4)
    array([[1.3679],
           [1.3679]])
    """
    xp = array_module(Z)
    if xp is np:
        F = exp_minus_in_place(Z.copy(), near_one, shift)
        if diagonal:
            np.fill_diagonal(F, (0.0 if bool(near_one) else 1.0) - F.dtype.type(shift))
        return ((F.T if transposed else F) @ W).astype(np.float64)
    Z = xp.ascontiguousarray(Z)
    width = W.shape[1]
    padded = -(-width // _SLAB) * _SLAB
    if padded != width:
        W = xp.concatenate([W, xp.zeros((W.shape[0], padded - width), W.dtype)], axis=1)
    W = xp.ascontiguousarray(W, dtype=Z.dtype)
    rows, cols = Z.shape
    out_rows, depth = (cols, rows) if transposed else (rows, cols)
    splits, span = _splits(out_rows, padded // _SLAB, depth)
    form = ("expm1" if near_one else "exp") if isinstance(near_one, (bool, np.bool_)) else "either"
    flag = Z if form != "either" else xp.asarray(near_one, dtype=bool)  # unread unless "either"
    kernel = _cuda_exp_product(Z.dtype.name, transposed, form)
    partial = xp.empty((splits, out_rows, padded), dtype=Z.dtype)
    grid = (-(-out_rows // _BLOCK_ROWS), splits, padded // _SLAB)
    kernel(grid, (_THREADS,), (Z, np.int64(rows), np.int64(cols), W, np.int32(padded), flag,
                               xp.asarray(shift, dtype=Z.dtype), np.int32(diagonal),
                               np.int64(span), partial))
    return partial.sum(axis=0, dtype=np.float64)[:, :width]
