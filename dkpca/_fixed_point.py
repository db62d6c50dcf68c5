"""The fixed-point pre-image of RBF kernel PCA (Mika et al. 1999; the MDD paper's §II).

Minimise ``||φ(z) - P φ(x)||²`` by iterating ``z ← Σ γ_i k(z, b_i) b_i / Σ γ_i k(z, b_i)``
from a start, vectorised over a block of points (:func:`fixed_point_preimage`, in memory) or one
task per row chunk (:func:`fixed_point_blocks`, lazy). :mod:`dkpca.preimage` holds the other
method, the learned pre-image, and wires both into ``KernelPCA``; it re-exports the public names
here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dask
import dask.array as da
import numpy as np

from dkpca._device import array_module, astype, namespace_dtype, to_device, to_host
from dkpca._scattered import shared
from dkpca._validation import Options, validate_params
from dkpca.blocked import kernel_device
from dkpca.kernels import RBF, Kernel
from dkpca.kernels._base import _squared_norms
from dkpca.options import FixedPoint

__all__ = ["PreimageResult", "fixed_point_blocks", "fixed_point_preimage", "unconverged_message"]

#: A denominator below this share of ``Σ |γ_i k(z, b_i)|`` counts as vanished.
DENOMINATOR_FLOOR = 1e-10


@dataclass(frozen=True)
class PreimageResult:
    """Outcome of :func:`fixed_point_preimage` on in-memory points.

    Attributes
    ----------
    points : (p, d) array
    converged : (p,) bool array
    n_iter : int
        Iterations of the slowest converged point (``max_iter`` when some did not converge).
    """

    points: np.ndarray
    converged: np.ndarray
    n_iter: int


def _weights(basis: Any, scores: np.ndarray) -> np.ndarray:
    """``Γ = scores coefᵀ + c_μ``: each point's reconstruction over the basis points."""
    gamma = scores @ basis.coef.T
    gamma += basis.mean_weights()
    return gamma


def _linear_preimage(weights: np.ndarray, B: np.ndarray) -> np.ndarray:
    xp = array_module(weights, B)
    total = xp.sum(weights, axis=1, keepdims=True)
    safe = xp.where(xp.abs(total) > DENOMINATOR_FLOOR, total, 1.0)
    return (weights @ B) / safe


def _restart(weights: np.ndarray, B: np.ndarray, from_linear: bool) -> np.ndarray:
    """Where a point whose denominator vanished starts again.

    The linear pre-image ``Σ γ_i b_i / Σ γ_i``, unless the iteration already started there
    (``from_linear``: no start given), in which case the basis point of largest weight
    ``γ_i``: ``k(z, b_i) = 1`` there, so the denominator is at least that weight.
    """
    if not from_linear:
        return _linear_preimage(weights, B)
    xp = array_module(weights, B)
    return xp.take(B, xp.argmax(weights, axis=1), axis=0)


def _within(rows: Any, selected: Any) -> Any:
    """Return the mask of the points ``selected`` among those of the mask ``rows``."""
    xp = array_module(rows)
    full = xp.zeros(rows.shape, dtype=rows.dtype)
    full[rows] = selected
    return full


def _fixed_point_block(
    weights: np.ndarray, B: np.ndarray, start: np.ndarray | None, gamma: float, tol: float,
    max_iter: int,
) -> PreimageResult:
    """Run the iteration for one block of points (``weights``: ``p × m``).

    On the library of ``weights`` and ``B`` (numpy, CuPy on a GPU, or another written to the
    array API standard: points are picked by boolean masks alone, which it allows); the result
    is on the host. Points that converged or gave up drop out of the later iterations.
    """
    xp = array_module(weights, B)
    z = (_linear_preimage(weights, B) if start is None
         else astype(start, xp.float64, copy=True))
    p = z.shape[0]
    boolean = namespace_dtype(xp, np.bool_)
    active = xp.ones(p, dtype=boolean)
    converged = xp.zeros(p, dtype=boolean)
    restarted = xp.zeros(p, dtype=boolean)
    step_tol = float(tol / np.sqrt(2.0 * gamma))  # relative to the kernel's length scale σ
    b_norms = _squared_norms(B)
    last = 0
    for iteration in range(1, max_iter + 1):
        if not bool(xp.any(active)):
            break
        rows = active
        zi = z[rows]
        d2 = xp.reshape(_squared_norms(zi), (-1, 1)) - 2.0 * (zi @ B.T) + b_norms
        W = xp.exp(-gamma * xp.maximum(d2, 0.0)) * weights[rows]
        denominator = xp.sum(W, axis=1)
        vanished = xp.abs(denominator) <= DENOMINATOR_FLOOR * xp.sum(xp.abs(W), axis=1)
        vanished |= ~xp.isfinite(denominator)
        if bool(xp.any(vanished)):  # restart once (see _restart), then give up
            before = restarted[rows]
            again = _within(rows, vanished & ~before)
            z[again] = _restart(weights[again], B, start is None)
            restarted |= again
            active = active & ~_within(rows, vanished & before)
        ok = ~vanished
        new = (W[ok] @ B) / xp.reshape(denominator[ok], (-1, 1))
        moved = xp.sqrt(xp.sum((new - zi[ok]) ** 2, axis=1))
        stepped = _within(rows, ok)
        z[stepped] = new
        done = _within(stepped, moved <= step_tol)
        converged |= done
        active = active & ~done
        if bool(xp.any(done)):
            last = iteration
    n_iter = max_iter if not bool(xp.all(converged)) else last
    return PreimageResult(points=to_host(z), converged=to_host(converged), n_iter=n_iter)


def fixed_point_preimage(
    basis: Any, scores: np.ndarray, start: np.ndarray | None = None, *, tol: float = 1e-6,
    max_iter: int = 300, device: str = "cpu",
) -> PreimageResult:
    """Pre-images of in-memory ``scores`` on an RBF kernel basis by the fixed-point iteration.

    Parameters
    ----------
    basis : KernelBasis
        With an RBF kernel and its basis points in memory.
    scores : (p, k) array
    start : (p, d) array, optional
        Where each point's iteration starts (the noisy points, to denoise them); default the
        linear pre-image ``Σ γ_i b_i / Σ γ_i``.
    tol : float, default=1e-6
        A point has converged when a step moves it less than ``tol`` times the kernel's length
        scale ``σ``.
    max_iter : int, default=300
    device : {"cpu", "cuda"}, default="cpu"
        Where the iteration runs: on ``"cuda"`` the basis points, the weights and the starts
        are copied to the GPU; the pre-images come back to the host.

    Returns
    -------
    PreimageResult

    Raises
    ------
    ValueError
        ``tol`` not in (0, inf), ``max_iter`` not an int >= 1, ``device`` not "cpu" or
        "cuda", a kernel other than RBF, ``scores`` not 2-D with one column per component of
        ``basis``, ``start`` not of shape ``(len(scores), n_features)``, or NaN or infinity
        in ``scores`` or ``start``.

    Examples
    --------
    A training point projected on all components is its own pre-image:

    >>> import numpy as np
    >>> from dkpca import KernelPCA
    >>> X = np.random.default_rng(0).normal(size=(30, 2))
    >>> kp = KernelPCA(kernel="rbf", sigma2=0.5).fit(X)
    >>> result = fixed_point_preimage(kp.basis_, kp.transform(X[:1]), X[:1] + 0.01)
    >>> bool(result.converged.all()), bool(np.allclose(result.points, X[:1], atol=1e-5))
    (True, True)
    """
    owner = "fixed_point_preimage"
    validate_params({"tol": tol, "max_iter": max_iter, "device": device},
                    {**FixedPoint._parameter_constraints, "device": [Options({"cpu", "cuda"})]},
                    owner)
    _rbf(basis.kernel)
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 2 or scores.shape[1] != basis.n_components:
        raise ValueError(
            f"{owner}: scores has shape {scores.shape}; expected (n_points, "
            f"{basis.n_components}): one column per component of the basis (model.transform's "
            f"output).")
    n_features = basis.basis.shape[1]
    if start is not None:
        start = np.asarray(start, dtype=np.float64)
        if start.shape != (scores.shape[0], n_features):
            raise ValueError(
                f"{owner}: start has shape {start.shape}; expected {(scores.shape[0], n_features)}"
                f": one row per row of scores, with the basis points' {n_features} features.")
    for name, values in (("scores", scores), ("start", start)):
        if values is not None and not np.isfinite(values).all():
            raise ValueError(f"{owner}: {name} contains NaN or infinity; remove or impute "
                             f"those rows.")
    return _fixed_point_preimage(basis, scores, start, tol, max_iter, device)


def _fixed_point_preimage(
    basis: Any, scores: np.ndarray, start: np.ndarray | None, tol: float, max_iter: int,
    device: str,
) -> PreimageResult:
    """:func:`fixed_point_preimage` on checked arguments (a dask task's block)."""
    kernel = _rbf(basis.kernel)
    B = to_device(np.asarray(basis.basis, dtype=np.float64), device)
    weights = to_device(_weights(basis, np.asarray(scores, dtype=np.float64)), device)
    start = None if start is None else to_device(np.asarray(start, dtype=np.float64), device)
    return _fixed_point_block(weights, B, start, kernel.gamma, tol, max_iter)


def _rbf(kernel: Kernel) -> RBF:
    if not isinstance(kernel, RBF):
        raise ValueError(  # noqa: TRY004 - a parameter choice, like scikit-learn's
            f"the fixed-point pre-image needs an RBF kernel, not {kernel!r}; use "
            f"preimage='learned' with fit_inverse_transform=True"
        )
    return kernel


def _fixed_point_task(basis, scores, start, tol, max_iter, dtype, device):
    result = _fixed_point_preimage(basis, scores, start, tol, max_iter, device)
    return result.points.astype(dtype, copy=False), int((~result.converged).sum())


def fixed_point_blocks(
    basis: Any, scores: da.Array, start: da.Array | None, *, tol: float, max_iter: int,
    dtype: np.dtype,
) -> tuple[da.Array, da.Array]:
    """:func:`fixed_point_preimage` lazily, one task per row chunk of ``scores``.

    Returns the pre-images and the number of points that did not converge (a lazy scalar);
    computed together, the pre-images are computed once. The tasks iterate on the device of
    the ``dkpca.device`` setting.
    """
    device = kernel_device(basis.kernel, basis.basis)
    model = shared(basis, kept=True)  # one key, on a cluster sent once while the model lives
    score_blocks = scores.rechunk({1: -1}).to_delayed().ravel()
    start_blocks = (start.rechunk({0: scores.chunks[0], 1: -1}).to_delayed().ravel()
                    if start is not None else [None] * len(score_blocks))
    d = basis.basis.shape[1]
    tasks = [dask.delayed(_fixed_point_task, pure=True)(model, s, x, tol, max_iter, dtype,
                                                        device)
             for s, x in zip(score_blocks, start_blocks, strict=True)]
    # named functions, not task[0]: dask's array optimisation would take a getitem for a slice
    points = da.concatenate([
        da.from_delayed(dask.delayed(_points, pure=True)(task), shape=(rows, d), dtype=dtype)
        for task, rows in zip(tasks, scores.chunks[0], strict=True)
    ], axis=0)
    missed = da.concatenate([da.from_delayed(dask.delayed(_missed, pure=True)(task), shape=(1,),
                                             dtype=np.int64) for task in tasks])
    return points, missed.sum()


def _points(result: tuple[np.ndarray, int]) -> np.ndarray:
    return result[0]


def _missed(result: tuple[np.ndarray, int]) -> np.ndarray:
    return np.array([result[1]], dtype=np.int64)


def unconverged_message(missed: int, total: int, max_iter: int) -> str | None:
    """Say, once for a whole computation, how many fixed-point pre-images did not converge.

    ``None`` when all converged.

    Examples
    --------
    >>> unconverged_message(0, 100, 300) is None
    True
    >>> unconverged_message(3, 100, 300)
    '3 of 100 pre-images did not converge in 300 iterations (they keep their last iterate)'
    """
    if not missed:
        return None
    return (f"{missed} of {total} pre-images did not converge in {max_iter} iterations "
            f"(they keep their last iterate)")
