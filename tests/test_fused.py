"""The fused elementwise pass over a tile: the same numbers on the CPU and on the device."""

from __future__ import annotations

import numpy as np
import pytest

from dkpca._fused import exp_minus_in_place


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("near_one", [True, False])
def test_the_device_pass_gives_the_host_numbers(cupy, dtype, near_one):
    # On the device the form and the shift are 0-d device arrays (nothing read back); the
    # result is the host's two steps, f(Z) rounded and less the shift: bit for bit on the
    # stand-in, to an ulp on a GPU (CUDA's exp is not numpy's).
    Z = -np.random.default_rng(0).exponential(size=(70, 50)).astype(dtype)
    shift = dtype(0.01)
    want = (np.expm1(Z) if near_one else np.exp(Z)) - shift
    host = exp_minus_in_place(Z.copy(), near_one, 0.01)
    on_device = cupy.asarray(Z)
    got = exp_minus_in_place(on_device, cupy.asarray(near_one), cupy.asarray(0.01))
    assert got is on_device and got.dtype == dtype
    np.testing.assert_array_equal(host, want)
    ulp = 0 if cupy.__name__ == "_cupy_standin" else 2 * np.finfo(dtype).eps
    np.testing.assert_allclose(got.get(), want, rtol=ulp, atol=ulp)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("rows", "cols", "width", "diagonal"),
                         [(300, 170, 3, False), (1100, 1100, 33, True), (129, 2000, 32, False)])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("form", ["host", "device"])
def test_the_fused_product_equals_the_product_of_the_stored_tile(cupy, dtype, rows, cols, width,
                                                                 diagonal, transposed, form):
    # The values of a streamed tile are formed inside each product and never stored; the
    # products must equal those of the tile the elementwise pass stores (the reference: in
    # float64 from the same float values). Shapes off the kernel's blocks of 128 rows and slabs
    # of 32 columns, several splits of the reduction (2,000 and 1,100 entries), a diagonal tile,
    # and the form of exp given on the host or left on the device.
    from dkpca._fused import exp_product

    rng = np.random.default_rng(0)
    Z = -rng.exponential(0.05, size=(rows, cols)).astype(dtype)
    if diagonal:
        Z = np.minimum(Z, Z.T)
    W = rng.standard_normal((rows if transposed else cols, width)).astype(dtype)
    near_one, shift = True, dtype(-0.04)
    F = exp_minus_in_place(Z.copy(), near_one, shift)
    if diagonal:
        np.fill_diagonal(F, 0 - shift)
    want = (F.T if transposed else F).astype(np.float64) @ W.astype(np.float64)
    flag = near_one if form == "host" else cupy.asarray(near_one)
    got = exp_product(cupy.asarray(Z), flag, cupy.asarray(shift), diagonal, cupy.asarray(W),
                      transposed)
    assert got.shape == (cols if transposed else rows, width) and got.dtype == np.float64
    scale = abs(F).max() * abs(W).max() * np.sqrt(F.shape[0 if transposed else 1])
    np.testing.assert_allclose(got.get(), want, rtol=0, atol=20 * np.finfo(dtype).eps * scale)
    host = exp_product(Z, near_one, shift, diagonal, W, transposed)
    np.testing.assert_allclose(host, want, rtol=0, atol=20 * np.finfo(dtype).eps * scale)
