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
@pytest.mark.parametrize("start, size", [(0, 1), (1, 2), (3, 7), (1, 4099), (2, 16384)])
@pytest.mark.parametrize("near_one", [True, False, "on device"])
def test_every_value_is_done_once_wherever_the_array_starts(cupy, dtype, start, size, near_one):
    # The GPU pass does the values before a 16-byte boundary one by one, then 16-byte vectors,
    # then the tail: a view that starts inside a vector, and sizes that are no multiple of a
    # vector, must still have each value replaced exactly once (a value done twice would be
    # exp(exp(z) - shift) - shift, one skipped would stay z).
    host = -np.random.default_rng(1).exponential(size=start + size).astype(dtype)
    buffer = cupy.asarray(host)
    Z = buffer[start:]
    form = cupy.asarray(True) if near_one == "on device" else near_one
    exp_minus_in_place(Z, form, cupy.asarray(0.25, dtype=dtype))
    f = np.expm1 if near_one in (True, "on device") else np.exp
    ulp = 0 if cupy.__name__ == "_cupy_standin" else 2 * np.finfo(dtype).eps
    np.testing.assert_array_equal(buffer.get()[:start], host[:start])
    np.testing.assert_allclose(Z.get(), f(host[start:]) - dtype(0.25), rtol=ulp, atol=ulp)


def test_a_fortran_ordered_tile_is_contiguous_and_a_strided_view_is_refused(cupy):
    Z = -np.random.default_rng(2).exponential(size=(33, 17)).astype(np.float32)
    on_device = cupy.asarray(np.asfortranarray(Z))
    exp_minus_in_place(on_device, False, 0.0)
    ulp = 0 if cupy.__name__ == "_cupy_standin" else 2 * np.finfo(np.float32).eps
    np.testing.assert_allclose(on_device.get(), np.exp(Z), rtol=ulp, atol=ulp)
    with pytest.raises(ValueError, match="contiguous"):
        exp_minus_in_place(cupy.asarray(Z)[:, ::2], False, 0.0)
