import dask.array as da
import numpy as np
import pytest
import xarray as xr

from dkpca._validation import (
    InstanceOf,
    Interval,
    Options,
    check_n_components,
    check_random_state,
    validate_params,
)
from dkpca.io import as_dask


def test_interval_bounds_and_types():
    closed = Interval("int", 1, 3)
    assert closed.accepts(1) and closed.accepts(3) and not closed.accepts(4)
    assert not closed.accepts(2.0) and not closed.accepts(True)
    open_ = Interval("real", 0, 1, closed="neither")
    assert open_.accepts(0.5) and not open_.accepts(0) and not open_.accepts(float("nan"))
    assert str(open_) == "a float in (0, 1)"


def test_validate_params_message_lists_options():
    constraints = {"solver": [Options({"a", "b"})], "n": [Interval("int", 1, None), None]}
    validate_params({"solver": "a", "n": None}, constraints, "Demo")
    with pytest.raises(ValueError, match=r"Demo: invalid solver='c'; expected one of 'a', 'b'"):
        validate_params({"solver": "c", "n": 1}, constraints, "Demo")
    with pytest.raises(ValueError, match="an int in \\[1, inf\\] or None"):
        validate_params({"solver": "a", "n": -1}, constraints, "Demo")
    assert InstanceOf(str, "a string").accepts("x")


def test_check_random_state_kinds():
    assert check_random_state(3).entropy == 3
    a = check_random_state(np.random.default_rng(1))
    b = check_random_state(np.random.default_rng(1))
    assert a.entropy == b.entropy
    assert isinstance(check_random_state(np.random.RandomState(0)), np.random.SeedSequence)
    assert isinstance(check_random_state(None), np.random.SeedSequence)
    with pytest.raises(ValueError, match="non-negative"):
        check_random_state(-1)
    with pytest.raises(TypeError, match="random_state must be"):
        check_random_state("seed")


def test_check_n_components():
    check_n_components(0.5, 3, "X")  # fractions are checked by the parameter constraints
    check_n_components(3, 3, "X")
    with pytest.raises(ValueError, match="n_components=4 is larger than possible"):
        check_n_components(4, 3, "X")


def test_as_dask_kinds_and_dtypes():
    assert as_dask([[1, 2], [3, 4]]).dtype == np.float64
    assert as_dask(np.ones((2, 2), dtype=np.float16)).dtype == np.float32
    assert as_dask(np.ones((2, 2), dtype=bool)).dtype == np.float64
    lazy = da.ones((10, 6), chunks=(5, 2), dtype=np.int32)
    out = as_dask(lazy)
    assert out.dtype == np.float64 and out.chunks == ((5, 5), (6,))
    assert as_dask(xr.DataArray(np.ones((3, 2)), dims=("s", "f"))).shape == (3, 2)


def test_as_dask_leaves_lazy_nan_for_fit():
    X = da.from_array(np.array([[np.nan, 1.0], [1.0, 2.0]]))
    assert as_dask(X).shape == (2, 2)  # no compute here; fit reports it
    with pytest.raises(ValueError, match="NaN"):
        as_dask(X.compute())
