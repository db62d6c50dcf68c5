"""What the estimators share: size parsing, input checks, output kind, parameter constraints."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from types import MethodType
from typing import Any

import dask.array as da
import numpy as np
from dask.utils import parse_bytes

from ._typing import RandomStateLike
from ._validation import InstanceOf, Interval, Options, check_random_state
from .blocked import compute
from .io import is_lazy, require_known_rows
from .solvers import ComponentRule, Sketch

__all__ = [
    "N_COMPONENTS",
    "RANDOM_STATE",
    "SIZE",
    "SKETCH_CONSTRAINTS",
    "available_when",
    "check_features",
    "check_samples",
    "like_input",
    "make_sketch",
    "parse_size",
    "warn_if_no_variance",
]


def parse_size(value: int | str, name: str, owner: str) -> int:
    try:
        size = parse_bytes(value) if isinstance(value, str) else int(value)
    except (ValueError, TypeError) as err:
        raise ValueError(f"{owner}: {name}={value!r} is not a size (e.g. '128MiB')") from err
    if size <= 0:
        raise ValueError(f"{owner}: {name} must be positive, got {value!r}")
    return size


def check_samples(X: da.Array, owner: str) -> None:
    """Refuse fewer than two samples (nothing varies).

    Examples
    --------
    >>> check_samples(da.ones((1, 3)), "PCA")
    Traceback (most recent call last):
    ...
    ValueError: PCA needs at least 2 samples, got n_samples=1 (X has shape (1, 3)).
    """
    require_known_rows(X, owner=owner)
    if X.shape[0] < 2:
        raise ValueError(
            f"{owner} needs at least 2 samples, got n_samples={X.shape[0]} (X has shape "
            f"{X.shape})."
        )


def warn_if_no_variance(varies: bool, owner: str, space: str) -> None:
    """Warn that the training data did not vary (constant rows): every component is arbitrary.

    The fit succeeds, as scikit-learn's does, but its eigenvalues are zero and its scores carry
    nothing, which a user should hear of rather than find out downstream.

    Examples
    --------
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_if_no_variance(False, "PCA", "")
    >>> str(caught[0].message)[:52]
    'PCA: the training data do not vary (every row is the'
    """
    if not varies:
        warnings.warn(
            f"{owner}: the training data do not vary (every row is the same{space}); all "
            "eigenvalues are zero and the components are arbitrary. Check the input.",
            UserWarning, stacklevel=3)


def clear_fitted(estimator: Any) -> None:
    """Remove every fitted attribute (``name_``, and ``_n_features_out``) a previous fit left.

    A refit with other parameters sets only what its solver makes: without this, an older
    fit's ``dual_coef_``, ``residual_trace_`` or ``row_statistics_`` would linger, be used
    (pre-images test ``dual_coef_``) and be saved with the model.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> model = SimpleNamespace(alpha=1.0, dual_coef_=[1.0], _n_features_out=2)
    >>> clear_fitted(model)
    >>> vars(model)
    {'alpha': 1.0}
    """
    fitted = [name for name in vars(estimator)
              if (name.endswith("_") and not name.startswith("__")) or name == "_n_features_out"]
    for name in fitted:
        delattr(estimator, name)


def check_features(X: da.Array, n_features: int, owner: str) -> None:
    """Refuse data with another number of features than the model was fitted with.

    Examples
    --------
    >>> check_features(da.ones((2, 3)), 4, "PCA")
    Traceback (most recent call last):
    ...
    ValueError: X has 3 features, but PCA is expecting 4 features as input (it was fitted with 4).
    """
    if X.shape[1] != n_features:
        raise ValueError(
            f"X has {X.shape[1]} features, but {owner} is expecting {n_features} features as "
            f"input (it was fitted with {n_features})."
        )


def like_input(result: da.Array, original: Any) -> np.ndarray | da.Array:
    """Lazy output for lazy input (dask, Zarr); computed numpy output otherwise."""
    if is_lazy(original):
        return result
    (value,) = compute(result)
    return value


SIZE = [Interval("int", 1, None), InstanceOf(str, "a size string such as '128MiB'")]
N_COMPONENTS = [Interval("int", 1, None), Interval("real", 0, 1, closed="neither"), None]

#: The constraint of ``random_state``, shared by every estimator.
RANDOM_STATE: list = [Interval("int", 0, None), InstanceOf(
    (np.random.Generator, np.random.RandomState), "a numpy Generator or RandomState"
), None]

#: Constraints of linear PCA's sketch parameters.
SKETCH_CONSTRAINTS: dict = {
    "sketch": [Options({"gaussian", "hashing"})],
    "sketch_dim": [Interval("int", 1, None), None],
    "n_hashes": [Interval("int", 1, None)],
    "refine": [InstanceOf(bool, "a bool")],
    "random_state": RANDOM_STATE,
}


def make_sketch(
    kind: str, dim: int | None, n_hashes: int, random_state: RandomStateLike, *, n_max: int,
    rule: ComponentRule, owner: str, dim_name: str = "sketch_dim",
) -> Sketch:
    """Build a :class:`Sketch` of dimension ``dim``, or ``max(200, 10 k)`` up to ``n_max``.

    ``k`` is the requested number of components (20 for a variance fraction); ``dim_name``
    is the parameter the messages name.

    Examples
    --------
    >>> rule = ComponentRule.from_params(5, None)
    >>> make_sketch("gaussian", None, 1, 0, n_max=10_000, rule=rule, owner="PCA").sketch_dim
    200
    """
    wanted = rule.count if rule.count is not None else 20
    q = dim if dim is not None else min(n_max, max(200, 10 * wanted))
    if rule.count is not None and rule.count > q:
        raise ValueError(
            f"{owner}: n_components={rule.count} exceeds {dim_name}={q}; the sketch yields "
            f"at most {q} components."
        )
    return Sketch(kind, q, check_random_state(random_state), n_hashes)


class available_when:
    """A method that exists only when ``check(instance)`` passes; ``check`` raises otherwise.

    scikit-learn's ``available_if`` does the same but replaces the check's message with "has
    no attribute"; here the ``AttributeError`` that ``check`` raises reaches the caller as it
    is, so ``hasattr`` is false and a call says why and what to do instead.

    Examples
    --------
    >>> class Model:
    ...     solver = "exact"
    ...     def _incremental(self):
    ...         if self.solver != "nystrom":
    ...             raise AttributeError("partial_fit needs solver='nystrom'")
    ...     @available_when(_incremental)
    ...     def partial_fit(self, X):
    ...         return self
    >>> hasattr(Model(), "partial_fit")
    False
    >>> Model().partial_fit
    Traceback (most recent call last):
    ...
    AttributeError: partial_fit needs solver='nystrom'
    """

    def __init__(self, check: Callable[[Any], Any]):
        self.check = check

    def __call__(self, method: Callable) -> available_when:
        self.method = method
        functools.update_wrapper(self, method)
        return self

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:  # on the class: the plain function (docs, introspection)
            return self.method
        self.check(instance)
        return MethodType(self.method, instance)
