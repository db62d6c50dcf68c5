"""Renormalisation of test projections against variance inflation (Abrahamsen & Hansen, §3).

A kernel PCA fitted on few samples over-fits: the training projections are spread wider than
the projections of new points. :class:`Renormalizer` maps test projections, one component at a
time, back onto the training distribution. It offers three maps:

* ``"histogram"`` — the paper's Algorithm 1 (eq. 4), histogram equalisation of a test *batch*:
  the test point of rank ``r`` gets the training value of rank ``r``;
* ``"affine"`` — Kjems et al. (2001): multiply by ``std(train) / std(loo)``, the ratio of the
  spreads of the training and leave-one-out (LOO) projections;
* ``"quantile"`` — an extension: the monotone map ``F_train⁻¹ ∘ F_loo`` fitted on the training
  and LOO projections, which renormalises any number of points, even one at a time.

Renormalising coordinate-wise assumes the components are independent; test that first with
:func:`dkpca.generalization.independence.independence_test`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.interpolate import PchipInterpolator
from sklearn.base import BaseEstimator, OneToOneFeatureMixin, TransformerMixin

from dkpca._estimator import clear_fitted
from dkpca._feature_names import check_feature_names
from dkpca._typing import ArrayLike
from dkpca._validation import Options, check_is_fitted, validate_params
from dkpca.io import as_array

__all__ = ["Renormalizer", "histogram_equalize"]

# Fewest test points histogram_equalize takes. Algorithm 1 spreads the batch's ranks
# evenly from the first to the last training rank (``linspace(1, n_train, m)``); that takes two
# points, and one point has no rank (``linspace(1, n, 1)`` is ``[1]``: always the training
# minimum).
_MIN_BATCH = 2


def _check_scores(X: ArrayLike, name: str, n_components: int | None = None) -> np.ndarray:
    """Return ``X`` as a finite 2-D floating array (its own float dtype) of ``n_components``."""
    X = np.asarray(as_array(X, name=name))
    if n_components is not None and X.shape[1] != n_components:
        raise ValueError(f"X has {X.shape[1]} features, but Renormalizer is expecting "
                         f"{n_components} features as input ({name} must have the "
                         f"{n_components} components it was fitted on).")
    return X


def histogram_equalize(train_sorted: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Give each test value the sorted training value of its rank (Algorithm 1, eq. 4).

    Per column, ``out[I(k)] = h[k]`` where ``I`` sorts the test values (stably, so ties keep
    their order) and ``h`` is the sorted training column, or, when the test batch has ``m``
    rows and the training set ``n != m``, the sorted training column interpolated at
    ``linspace(1, n, m)`` over the positions ``1..n``. The paper interpolates with a "spline";
    this uses the monotone PCHIP interpolant, which cannot overshoot, so ``h`` stays sorted and
    within the training range.

    A batch needs at least two points: the positions ``linspace(1, n, m)`` spread its ranks
    from the smallest to the largest training value, and a single point has no rank to spread
    (it would always get the training minimum). A batch of two gets the training minimum and
    maximum. To renormalise single points or very small batches, use
    ``Renormalizer(method="quantile")``, which maps each point on its own.

    Parameters
    ----------
    train_sorted : ndarray of shape (n, q)
        The training projections, each column sorted ascending; ``n >= 2``.
    scores : ndarray of shape (m, q)
        The test batch, ``m >= 2``.

    Returns
    -------
    ndarray of shape (m, q)
        float64.

    Raises
    ------
    ValueError
        If the batch has fewer than two points.

    Examples
    --------
    >>> train = np.array([[-2.0], [-1.0], [1.0], [2.0]])
    >>> histogram_equalize(train, np.array([[0.3], [-0.1], [0.5], [0.0]]))
    array([[ 1.],
           [-2.],
           [ 2.],
           [-1.]])
    """
    n = train_sorted.shape[0]
    m = scores.shape[0]
    if m < _MIN_BATCH:
        raise ValueError(
            f"histogram equalisation needs a batch of at least {_MIN_BATCH} points to "
            f"rank, got {m} (scores shape {scores.shape}); pass the test points together, or use "
            f"Renormalizer(method='quantile'), which maps single points."
        )
    if m == n:
        h = train_sorted
    else:
        h = PchipInterpolator(np.arange(1, n + 1), train_sorted, axis=0)(np.linspace(1, n, m))
    out = np.empty_like(scores, dtype=np.float64)
    order = np.argsort(scores, axis=0, kind="stable")
    np.put_along_axis(out, order, h, axis=0)
    return out


def _quantile_knots(train: np.ndarray, loo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Knots ``(x, y)`` of the piecewise-linear map ``F_train⁻¹(F_loo(x))`` for one component.

    Both CDFs interpolate the sorted values at positions ``(i - 0.5) / n``; tied LOO values
    share the mean of their positions, so the knots in ``x`` are strictly increasing. The knots
    are the LOO values and the LOO quantiles at the training positions (the break points of
    both interpolants), so the composition is exact.
    """
    t = np.sort(train)
    p_train = (np.arange(1, t.size + 1) - 0.5) / t.size
    values, start, counts = np.unique(loo, return_index=True, return_counts=True)
    # np.unique sorts; ``start`` indexes the sorted LOO values here since ``loo`` is sorted
    p_loo = (start + (counts + 1) / 2 - 0.5) / loo.size
    inside = (p_train > p_loo[0]) & (p_train < p_loo[-1])
    x = np.union1d(values, np.interp(p_train[inside], p_loo, values))
    y = np.interp(np.interp(x, values, p_loo), p_train, t)
    return x, y


class Renormalizer(OneToOneFeatureMixin, TransformerMixin, BaseEstimator):
    """Renormalise kernel PCA test projections onto the training distribution.

    Parameters
    ----------
    method : {"histogram", "affine", "quantile"}, default="histogram"
        ``"histogram"`` (Algorithm 1, eq. 4) — histogram equalisation of the batch passed to
        :meth:`transform`: per component, the test value of rank ``r`` (ties in stable order)
        becomes the ``r``-th smallest training value; for a batch of ``m != n_train`` points the
        sorted training values are first interpolated at ``linspace(1, n_train, m)`` by the
        monotone PCHIP spline (:func:`histogram_equalize`). A point's output depends on the
        rest of its batch (declared to scikit-learn as ``non_deterministic``, see
        :meth:`__sklearn_tags__`); ``loo_scores`` is not used. The batch needs at least two
        points: one point has no rank to equalise (a batch of two gets the training minimum
        and maximum); use ``"quantile"`` for single points.

        ``"affine"`` (Kjems et al., 2001) — ``transform(x) = x * scale_`` with
        ``scale_ = std(train) / std(loo)`` per component (sample standard deviations). Kernel
        PCA projections are centred (the training mean is zero), so no shift is needed.

        ``"quantile"`` — the monotone map ``F_train⁻¹(F_loo(x))``, both empirical CDFs
        piecewise linear through the sorted values at positions ``(i - 0.5) / n``. It maps each
        point on its own, so any batch size works, a single point included. Within the range of
        the LOO projections it is piecewise linear; beyond it, it continues linearly with slope
        ``scale_ = std(train) / std(loo)`` (the affine factor) rather than the end slopes of
        the interpolant, which rest on one or two extreme points and can be near zero or huge.
        The map is strictly increasing outside the LOO range and non-decreasing inside it.

        All three compute in float64 and return the dtype of the scores passed to
        :meth:`transform` (float32 stays float32).

    Attributes
    ----------
    n_features_in_ : int
        Number of components ``q``.
    feature_names_in_ : ndarray of shape (q,)
        The column names of ``train_scores``, defined only when it was a DataFrame with string
        column names (e.g. the pandas output of a preceding pipeline step). :meth:`transform`
        then refuses columns with other names or in another order, and
        :meth:`get_feature_names_out` returns them (one output per input component, which also
        makes ``set_output(transform="pandas")`` work).
    n_train_ : int
        Number of training projections.
    train_sorted_ : ndarray of shape (n_train, q)
        The training projections, each column sorted ascending.
    scale_ : ndarray of shape (q,)
        ``std(train) / std(loo)`` (``"affine"`` and ``"quantile"`` only).
    knots_ : list of (ndarray, ndarray)
        Per component, the knots ``(x, y)`` of the quantile map (``"quantile"`` only).

    References
    ----------
    T. J. Abrahamsen and L. K. Hansen, "A cure for variance inflation in high dimensional
    kernel principal component analysis", Journal of Machine Learning Research 12,
    2027–2044, 2011 (the "LOO paper").

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> train = rng.normal(scale=2.0, size=(200, 2))
    >>> loo = rng.normal(scale=1.0, size=(200, 2))
    >>> r = Renormalizer("affine").fit(train, loo_scores=loo)
    >>> np.round(r.scale_, 2)
    array([1.91, 2.04])
    >>> Renormalizer("quantile").fit(train, loo_scores=loo).transform(np.zeros((1, 2))).shape
    (1, 2)
    """

    _parameter_constraints: dict = {
        "method": [Options({"histogram", "affine", "quantile"})],
    }

    def __sklearn_tags__(self) -> Any:
        """scikit-learn's tags: histogram equalisation maps a batch, not each point alone.

        Its output for a point depends on the rest of the batch by design (the paper's
        Algorithm 1), so it is declared ``non_deterministic``, which tells scikit-learn's
        estimator checks not to expect batch-independent results.
        """
        tags = super().__sklearn_tags__()
        tags.non_deterministic = self.method == "histogram"
        return tags

    def __init__(self, method: str = "histogram"):
        self.method = method

    def fit(
        self, train_scores: ArrayLike, y: Any = None, *, loo_scores: ArrayLike | None = None
    ) -> Renormalizer:
        """Fit on the training projections and, for ``"affine"``/``"quantile"``, LOO ones.

        Parameters
        ----------
        train_scores : array-like of shape (n_train, q)
            The projections of the training points (``n_train >= 2``).
        y : None
            Ignored.
        loo_scores : array-like of shape (n_loo, q), optional
            The leave-one-out projections (each training point projected by the model fitted
            without it). Required by ``"affine"`` and ``"quantile"``; ignored by
            ``"histogram"``.

        Returns
        -------
        self : Renormalizer

        Examples
        --------
        >>> Renormalizer().fit(np.array([[1.0], [3.0], [2.0]])).train_sorted_.ravel()
        array([1., 2., 3.])
        """
        validate_params(self.get_params(), self._parameter_constraints, "Renormalizer")
        clear_fitted(self)  # nothing from an earlier fit with another method
        check_feature_names(self, train_scores, reset=True)
        train = _check_scores(train_scores, "train_scores").astype(np.float64, copy=False)
        n, q = train.shape
        if n < 2:
            raise ValueError(f"Renormalizer: need at least 2 training projections, got "
                             f"n_samples={n}")
        fitted: dict[str, Any] = {}
        if self.method != "histogram":
            if loo_scores is None:
                raise ValueError(f"Renormalizer: method={self.method!r} needs loo_scores")
            loo = _check_scores(loo_scores, "loo_scores", q).astype(np.float64, copy=False)
            if loo.shape[0] < 2:
                raise ValueError("Renormalizer: need at least 2 LOO projections, "
                                 f"got {loo.shape[0]}")
            loo_std = loo.std(axis=0, ddof=1)
            if np.any(loo_std == 0):
                raise ValueError("Renormalizer: a component of loo_scores is constant "
                                 f"(components {np.flatnonzero(loo_std == 0).tolist()})")
            fitted["scale_"] = train.std(axis=0, ddof=1) / loo_std
            if self.method == "quantile":
                loo_sorted = np.sort(loo, axis=0)
                fitted["knots_"] = [_quantile_knots(train[:, d], loo_sorted[:, d])
                                    for d in range(q)]
        self.train_sorted_ = np.sort(train, axis=0)
        self.n_train_ = n
        self.n_features_in_ = q
        for name, value in fitted.items():
            setattr(self, name, value)
        return self

    def transform(self, scores: ArrayLike) -> np.ndarray:
        """Renormalise test projections.

        Parameters
        ----------
        scores : array-like of shape (m, q)
            Test projections. For ``"histogram"`` the batch is equalised as a whole and needs
            ``m >= 2`` points; ``"affine"`` and ``"quantile"`` take any ``m``.

        Returns
        -------
        ndarray of shape (m, q)
            Computed in float64, returned in the dtype of ``scores``.

        Raises
        ------
        ValueError
            For ``"histogram"``, if ``m < 2``: use ``method="quantile"`` for single points. If
            :meth:`fit` saw column names (``feature_names_in_``) and ``scores`` has other
            names, or the same names in another order.

        Examples
        --------
        >>> r = Renormalizer().fit(np.array([[-1.0], [0.0], [1.0]]))
        >>> r.transform(np.array([[0.2], [0.1], [-0.3]])).ravel()
        array([ 1.,  0., -1.])
        """
        check_is_fitted(self, "train_sorted_")
        check_feature_names(self, scores, reset=False)
        scores = _check_scores(scores, "scores", self.n_features_in_)
        X = scores.astype(np.float64, copy=False)
        if self.method == "histogram":
            return histogram_equalize(self.train_sorted_, X).astype(scores.dtype, copy=False)
        if self.method == "affine":
            return (X * self.scale_).astype(scores.dtype, copy=False)
        out = np.empty_like(X)
        for d, (x, y) in enumerate(self.knots_):
            col = X[:, d]
            out[:, d] = np.interp(col, x, y)
            low, high = col < x[0], col > x[-1]
            out[low, d] = y[0] + self.scale_[d] * (col[low] - x[0])
            out[high, d] = y[-1] + self.scale_[d] * (col[high] - x[-1])
        return out.astype(scores.dtype, copy=False)
