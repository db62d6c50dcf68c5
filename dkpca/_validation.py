"""Parameter constraints, input checks and random-state handling.

A small, declarative replacement for scikit-learn's private parameter validation:
an estimator lists ``_parameter_constraints`` and calls :func:`validate_params` at the
top of ``fit``.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._typing import RandomStateLike


@dataclass(frozen=True)
class Interval:
    """A numeric interval constraint.

    Parameters
    ----------
    kind : {"int", "real"}
        ``"int"`` accepts integers only (not bools); ``"real"`` accepts any real number.
    low, high : float or None
        Bounds; ``None`` means unbounded.
    closed : {"both", "left", "right", "neither"}
        Which bounds are included.

    Examples
    --------
    >>> Interval("real", 0, 1, closed="neither").accepts(0.5)
    True
    """

    kind: str
    low: float | None
    high: float | None
    closed: str = "both"

    def accepts(self, value: Any) -> bool:
        """Return whether ``value`` lies in the interval."""
        if isinstance(value, bool | np.bool_):
            return False
        if self.kind == "int" and not isinstance(value, numbers.Integral):
            return False
        if not isinstance(value, numbers.Real) or not np.isfinite(value):
            return False
        lo_ok = self.low is None or (
            value >= self.low if self.closed in ("both", "left") else value > self.low
        )
        hi_ok = self.high is None or (
            value <= self.high if self.closed in ("both", "right") else value < self.high
        )
        return bool(lo_ok and hi_ok)

    def __str__(self) -> str:
        left = "[" if self.closed in ("both", "left") else "("
        right = "]" if self.closed in ("both", "right") else ")"
        low = "-inf" if self.low is None else self.low
        high = "inf" if self.high is None else self.high
        return f"{'an int' if self.kind == 'int' else 'a float'} in {left}{low}, {high}{right}"


@dataclass(frozen=True)
class Options:
    """A constraint that accepts one of a fixed set of values.

    Examples
    --------
    >>> Options({"auto", "exact"}).accepts("exact")
    True
    """

    values: frozenset | set

    def accepts(self, value: Any) -> bool:
        """Return whether ``value`` is one of the options."""
        try:
            return value in self.values
        except TypeError:
            return False

    def __str__(self) -> str:
        return "one of " + ", ".join(repr(v) for v in sorted(self.values, key=str))


@dataclass(frozen=True)
class InstanceOf:
    """A constraint that accepts instances of the given types."""

    types: type | tuple[type, ...]
    description: str

    def accepts(self, value: Any) -> bool:
        """Return whether ``value`` is an instance of the types."""
        return isinstance(value, self.types)

    def __str__(self) -> str:
        return self.description


Constraint = Interval | Options | InstanceOf | None


def validate_params(
    params: Mapping[str, Any], constraints: Mapping[str, Iterable[Constraint]], owner: str
) -> None:
    """Check every parameter against its list of constraints.

    ``None`` inside a constraint list means that ``None`` is allowed.

    Raises
    ------
    ValueError
        Naming the parameter, the bad value and what is accepted.

    Examples
    --------
    >>> validate_params({"n": 3}, {"n": [Interval("int", 1, None)]}, "Demo")
    >>> validate_params({"n": 0}, {"n": [Interval("int", 1, None)]}, "Demo")
    Traceback (most recent call last):
    ...
    ValueError: Demo: invalid n=0; expected an int in [1, inf].
    """
    for name, allowed in constraints.items():
        value = params[name]
        allowed = list(allowed)
        if value is None and None in allowed:
            continue
        if any(c is not None and c.accepts(value) for c in allowed):
            continue
        described = " or ".join("None" if c is None else str(c) for c in allowed)
        raise ValueError(f"{owner}: invalid {name}={value!r}; expected {described}.")


def check_random_state(random_state: RandomStateLike) -> np.random.SeedSequence:
    """Turn any accepted random state into a :class:`numpy.random.SeedSequence`.

    Independent streams for parallel tasks come from ``SeedSequence.spawn``, so a result
    does not depend on the scheduler, the number of workers or the task order.

    Examples
    --------
    >>> check_random_state(0).entropy
    0
    """
    if random_state is None:
        return np.random.SeedSequence()
    if isinstance(random_state, bool | np.bool_):
        raise TypeError("random_state must be an int, a numpy Generator, RandomState or None")
    if isinstance(random_state, numbers.Integral):
        if random_state < 0:
            raise ValueError(f"random_state must be non-negative, got {random_state}")
        return np.random.SeedSequence(int(random_state))
    if isinstance(random_state, np.random.Generator):
        return np.random.SeedSequence(int(random_state.integers(2**63)))
    if isinstance(random_state, np.random.RandomState):
        return np.random.SeedSequence(int(random_state.randint(2**31)))
    raise TypeError(
        f"random_state must be an int, a numpy Generator, RandomState or None, "
        f"got {type(random_state).__name__}"
    )


def check_n_components(
    n_components: Any, n_max: int, owner: str
) -> None:
    """Check that an integer number of components does not exceed ``n_max``.

    Examples
    --------
    >>> check_n_components(5, 10, "PCA")
    >>> check_n_components(20, 10, "PCA")
    Traceback (most recent call last):
    ...
    ValueError: PCA: n_components=20 is larger than possible (at most 10 for this data).
    """
    if isinstance(n_components, numbers.Integral) and n_components > n_max:
        raise ValueError(
            f"{owner}: n_components={n_components} is larger than possible "
            f"(at most {n_max} for this data)."
        )


def check_is_fitted(estimator: Any, attribute: str, fit_name: Callable | str = "fit") -> None:
    """Raise scikit-learn's ``NotFittedError`` when ``attribute`` is missing."""
    from sklearn.exceptions import NotFittedError

    if not hasattr(estimator, attribute):
        raise NotFittedError(
            f"This {type(estimator).__name__} instance is not fitted yet. Call "
            f"'{fit_name}' with appropriate arguments before using this estimator."
        )
