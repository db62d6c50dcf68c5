"""The four moments and the maximum of the distances from training points to other points.

MDD (§IV) summarises the distances ``r_ij = ||x_i - x_j||`` from every training point ``x_i`` to
every training or validation point ``x_j`` (``j ≠ i``) by their mean, standard deviation,
skewness and kurtosis, and their maximum. The training set is small (it is kept in memory),
the validation set may be any size: its row chunks are visited once, each task returning the
power sums of its distances, and the sums are combined in a tree. Sums are taken about a
shift near the mean (the training set's own mean distance), so the central moments do not
suffer from cancellation when distances concentrate (high dimensions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import dask
import dask.array as da
import numpy as np
from dask.delayed import Delayed

from dkpca.blocked import tree_reduce

__all__ = ["DistanceMoments", "distance_moments"]

#: Distance entries evaluated at once inside a task (bounds a task's temporary memory).
_TILE_ENTRIES = 2**21

#: Relative gap ``(β2 - γ² - 1) / β2`` at or below which the distances form a two-point law:
#: the moments' rounding (power sums about a shift near the mean, in float64) stays far below
#: it, so every two-valued sample is caught whatever the seed or the training set.
TWO_POINT_TOL = 1e-9


@dataclass(frozen=True)
class DistanceMoments:
    """Moments of a distance distribution (kurtosis is the plain, not the excess, kurtosis).

    Examples
    --------
    >>> DistanceMoments(1.0, 0.5, 0.2, 2.8, 3.0, 10).kurtosis
    2.8
    """

    mean: float
    std: float
    skewness: float
    kurtosis: float
    maximum: float
    count: int


def _power_sums(train: np.ndarray, Y: np.ndarray, center: np.ndarray, shift: float) -> np.ndarray:
    """``[count, Σ(r-s), Σ(r-s)², Σ(r-s)³, Σ(r-s)⁴, max r]`` over all pairs train × Y.

    ``train`` is already centred on ``center``; ``Y`` is centred here, in float64.
    """
    out = np.zeros(6)
    t_norms = np.einsum("ij,ij->i", train, train)
    step = max(1, _TILE_ENTRIES // max(1, train.shape[0]))
    for start in range(0, Y.shape[0], step):
        block = np.asarray(Y[start : start + step], dtype=np.float64) - center
        r = block @ train.T
        r *= -2.0
        r += np.einsum("ij,ij->i", block, block)[:, None]
        r += t_norms
        np.maximum(r, 0.0, out=r)
        np.sqrt(r, out=r)
        out[5] = max(out[5], float(r.max(initial=0.0)))
        out[:5] += _shifted_sums(r.ravel(), shift)[:5]
    return out


def _shifted_sums(r: np.ndarray, shift: float) -> np.ndarray:
    """``[count, Σ(r-s), Σ(r-s)², Σ(r-s)³, Σ(r-s)⁴, 0]``: the maximum is combined separately."""
    d = r - shift
    power = d.copy()
    sums = [float(d.size)]
    for p in range(1, 5):
        sums.append(float(power.sum()))
        if p < 4:
            power *= d
    return np.array([*sums, 0.0])


def _training_distances(sq_distances: np.ndarray) -> np.ndarray:
    """Return the off-diagonal training distances ``r_ij`` (``i ≠ j``), computed once."""
    return np.sqrt(sq_distances[~np.eye(sq_distances.shape[0], dtype=bool)])


def _mean_distance(r: np.ndarray) -> float:
    return float(r.mean()) if r.size else 0.0


def _training_sums(r: np.ndarray, shift: float) -> np.ndarray:
    sums = _shifted_sums(r, shift)
    sums[5] = float(r.max(initial=0.0))
    return sums


def _without_self_pairs(total: np.ndarray, n_t: int, shift: float) -> np.ndarray:
    # Each training point met itself at distance 0, i.e. at -shift after the shift.
    return total - np.array([n_t, -shift * n_t, shift**2 * n_t, -(shift**3) * n_t,
                             shift**4 * n_t, 0.0])


def _combine(*parts: np.ndarray) -> np.ndarray:
    total = np.sum(parts, axis=0)
    total[5] = max(part[5] for part in parts)
    return total


def _moments(sums: np.ndarray, shift: float) -> DistanceMoments:
    n = sums[0]
    m1, m2, m3, m4 = (sums[p] / n for p in range(1, 5))
    var = m2 - m1**2
    mu3 = m3 - 3 * m1 * m2 + 2 * m1**3
    mu4 = m4 - 4 * m1 * m3 + 6 * m1**2 * m2 - 3 * m1**4
    if var <= 0:
        raise ValueError("select_model: all distances are equal; the data have no spread.")
    skewness, kurtosis = float(mu3 / var**1.5), float(mu4 / var**2)
    # Every distribution has β2 >= γ² + 1, with equality exactly for two-point laws, which no
    # Pearson distribution reaches; rounding puts a two-valued sample on either side.
    if kurtosis - (skewness * skewness + 1) <= TWO_POINT_TOL * kurtosis:
        raise ValueError(
            f"select_model: the distances between points take only two values (kurtosis "
            f"{kurtosis:.6g} = skewness**2 + 1, a two-point law), as for repeated copies of a "
            f"few points (e.g. one-hot rows); MDD draws noise distances from a continuous "
            f"Pearson law with these moments, and none has them. Remove duplicated rows, use "
            f"validation data with more varied distances, or use method='kpa'.")
    return DistanceMoments(
        mean=float(shift + m1), std=math.sqrt(var), skewness=skewness,
        kurtosis=kurtosis, maximum=float(sums[5]), count=int(n),
    )


def distance_moments(
    train: np.ndarray | Delayed, sq_distances: np.ndarray | Delayed, n_train: int,
    others: da.Array | None = None, *, others_include_train: bool = False,
) -> Delayed:
    """Lazy :class:`DistanceMoments` of the distances from ``train`` to ``train ∪ others``.

    Parameters
    ----------
    train : (n_t, d) array or Delayed
        The training points (in memory, or a delayed gather sharing the pass over ``others``).
    sq_distances : (n_t, n_t) array or Delayed
        Their squared distances (:func:`~dkpca.selection._spectra.squared_distances`).
    n_train : int
        ``n_t``.
    others : (n_v, d) dask array, optional
        Validation points; visited chunk by chunk.
    others_include_train : bool, default=False
        ``others`` holds the training points too (the validation set is "the rest of the
        data"): then the training pairs come from ``others`` and only the ``n_t`` zero
        self-distances are taken out, which saves the in-memory training pass.

    Returns
    -------
    Delayed
        Computing it gives the :class:`DistanceMoments`; self-distances ``r_ii`` are excluded.

    Examples
    --------
    >>> from dkpca.selection._spectra import squared_distances
    >>> T = np.array([[0.0], [1.0], [3.0]])
    >>> m = distance_moments(T, squared_distances(T), 3).compute()
    >>> m.mean, m.maximum, m.count
    (2.0, 3.0, 6)
    """
    delayed = dask.delayed(pure=True)
    training = delayed(_training_distances)(sq_distances)
    shift = delayed(_mean_distance)(training)
    center = delayed(np.mean)(train, axis=0)
    local = delayed(np.subtract)(train, center)  # distances about the mean, for accuracy
    parts = []
    if others is None or not others_include_train:
        parts.append(delayed(_training_sums)(training, shift))
    if others is not None:
        parts += [delayed(_power_sums)(local, block, center, shift)
                  for block in others.to_delayed().ravel()]
    total = tree_reduce(parts, _combine)
    if others is not None and others_include_train:
        total = delayed(_without_self_pairs)(total, n_train, shift)
    return delayed(_moments)(total, shift)
