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
