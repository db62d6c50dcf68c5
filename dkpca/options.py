"""Solver and pre-image options: what ``KernelPCA(solver=...)`` and ``preimage=...`` take.

A string selects a solver with its defaults (``solver="nystrom"``); an options object selects
it with its own settings (``solver=Nystrom(n_landmarks=500, sampling="kmeans")``). Each object
is a small scikit-learn estimator of parameters only: ``get_params``/``set_params`` and
``clone`` see through it, so a grid search reaches ``solver__n_landmarks``, and a parameter
means one thing (``Randomized.tol`` is the Krylov solver's eigenvalue tolerance,
``FixedSize.tol`` the entropy's relative change).

==================  ==========================================================================
solver              options
==================  ==========================================================================
``"exact"``         :class:`Exact` (none)
``"randomized"``    :class:`Randomized` (``tol``, ``max_iter``, ``n_oversamples``,
                    ``cache_dtype``)
``"sketch"``        :class:`Sketch` (``kind``, ``dim``, ``n_hashes``, ``method``, ``refine``)
``"nystrom"``       :class:`Nystrom` (``n_landmarks``, ``landmarks``, ``sampling``, ``method``)
``"fixed_size"``    :class:`FixedSize` (``n_landmarks``, ``selection``, ``entropy_gamma``,
                    ``tol``, ``max_iter``)
``"icf"``           :class:`ICF` (``tol``, ``max_rank``)
==================  ==========================================================================

Pre-images: ``preimage="fixed_point"`` or :class:`FixedPoint` (``tol``, ``max_iter``);
``"learned"`` (the estimator's ``alpha``) and ``"auto"`` have no options of their own.

Examples
--------
>>> from sklearn.base import clone
>>> from dkpca import KernelPCA
>>> model = KernelPCA(5, solver=Nystrom(n_landmarks=200, sampling="kmeans"))
>>> model.set_params(solver__n_landmarks=400).get_params()["solver__n_landmarks"]
400
>>> clone(model).solver
Nystrom(n_landmarks=400, sampling='kmeans')
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import scipy.sparse
from sklearn.base import BaseEstimator

from ._validation import InstanceOf, Interval, Options, validate_params
from .solvers import SAMPLINGS, SELECTIONS
from .tiles import CACHE_DTYPES

__all__ = [
    "FLAT_NAMES",
    "FLAT_PARAMETERS",
    "ICF",
    "OPTIONS",
    "PREIMAGES",
    "SOLVERS",
    "Exact",
    "FixedPoint",
    "FixedSize",
    "Nystrom",
    "Randomized",
    "Sketch",
    "SolverOptions",
    "moved_parameters",
    "preimage_options",
    "solver_name",
    "solver_options",
]

_POSITIVE = [Interval("real", 0, None, closed="neither")]
_COUNT = [Interval("int", 1, None)]


class SolverOptions(BaseEstimator):
    """Base of the options objects: a solver's name, its parameters and their constraints.

    Examples
    --------
    >>> Randomized(tol=1e-8).validated("KernelPCA").name
    'randomized'
    """

    #: The string that selects the solver (``KernelPCA(solver=name)``).
    name: ClassVar[str]
    _parameter_constraints: ClassVar[dict[str, list]] = {}

    def validated(self, owner: str) -> SolverOptions:
        """Return ``self`` once every parameter is in range; ``ValueError`` names the bad one.

        Examples
        --------
        >>> ICF(max_rank=0).validated("KernelPCA")
        Traceback (most recent call last):
        ...
        ValueError: KernelPCA: invalid ICF max_rank=0; expected an int in [1, inf] or None.
        """
        constraints = {f"{type(self).__name__} {key}": value
                       for key, value in self._parameter_constraints.items()}
        params = {f"{type(self).__name__} {key}": value
                  for key, value in self.get_params(deep=False).items()}
        validate_params(params, constraints, owner)
        return self


class Exact(SolverOptions):
    """The exact solver: the whole ``n × n`` kernel, centred and decomposed by ``eigh``.

    It has no options; the estimator's ``max_memory`` bounds the kernel it may build.

    Examples
    --------
    >>> Exact().name
    'exact'
    """

    name = "exact"


class Randomized(SolverOptions):
    """The randomized (block Krylov) solver on the implicitly centred kernel.

    Parameters
    ----------
    tol : float, default=1e-6
        Stop when every eigenpair's residual ``||K_c u - λ u||`` is below ``tol · λ_1``.
    max_iter : int, default=30
        Most passes over the kernel (with the default block of 32 columns the Krylov basis
        holds at most 960 columns).
    n_oversamples : int, optional
        Extra columns in the Krylov block; by default ``n_components + 10`` columns widened
        to 32 (a pass with 32 columns costs little more than one with 20, and flat spectra
        converge in fewer passes).
    cache_dtype : {"auto", "float32", "float64"}, default="auto"
        Precision of the kernel tiles, cached or streamed. Products are accumulated in
        float64 and every tile is stored less its mean (restored exactly), so float32 tiles
        keep eigenvalues within about 1e-7 of float64 even for a nearly constant kernel; RBF
        tiles are then also evaluated with a float32 GEMM on data moved to the origin.
        ``"auto"`` takes float32 for float32 data and for ``tol >= 1e-6``, float64 otherwise.
        float32 halves the cache (a quarter of one float64 kernel matrix).

    References
    ----------
    C. Musco and C. Musco, "Randomized block Krylov methods for stronger and faster
    approximate singular value decomposition", Advances in Neural Information Processing
    Systems 28, 2015.

    Examples
    --------
    >>> Randomized(tol=1e-9, cache_dtype="float64")
    Randomized(cache_dtype='float64', tol=1e-09)
    """

    name = "randomized"
    _parameter_constraints = {
        "tol": _POSITIVE,
        "max_iter": _COUNT,
        "n_oversamples": [Interval("int", 0, None), None],
        "cache_dtype": [Options(set(CACHE_DTYPES))],
    }

    def __init__(self, tol: float = 1e-6, max_iter: int = 30, n_oversamples: int | None = None,
                 cache_dtype: str = "auto") -> None:
        self.tol = tol
        self.max_iter = max_iter
        self.n_oversamples = n_oversamples
        self.cache_dtype = cache_dtype


class Sketch(SolverOptions):
    """The sketch solver: kernel PCA of a dot-product preserving random projection.

    Parameters
    ----------
    kind : {"gaussian", "hashing"}, default="gaussian"
        Gaussian random projection (tutorial eq. 36) or signed feature hashing (eqs. 40, 46).
    dim : int, optional
        The sketch's dimension ``q``; by default ``max(200, 10 k)`` for ``k`` components (20
        when ``n_components`` is a fraction), at most ``n_samples``.
    n_hashes : int, default=1
        Hashing sketch: hash functions concatenated (``dim`` must be a multiple).
    method : {"auto", "nystrom", "covariance"}, default="auto"
        How eigenpairs are read from the sketch ``Y = K_c W``. ``"covariance"`` is the
        tutorial's Alg. 6 (eigenpairs of ``Yᵀ Y``, which approximate those of ``K_c²``);
        ``"nystrom"`` goes beyond it with the Nyström approximation ``Y (Wᵀ Y)⁺ Yᵀ`` of
        ``K_c`` from the same pass, far more accurate for eigenvectors but only justified for
        PSD kernels. ``"auto"`` picks ``"nystrom"`` when the kernel is positive
        semi-definite and ``"covariance"`` otherwise (sigmoid).
    refine : bool, default=False
        One more pass for the exact Rayleigh–Ritz projection on the sketched subspace (exact
        eigenvalues there; no mixing of close eigenvectors).

    References
    ----------
    S. Marukatat, "Tutorial on PCA and approximate PCA and approximate kernel PCA",
    Artificial Intelligence Review 56, 5445–5477, 2023 (the "tutorial": Algs. 1–6, §5.3).

    Examples
    --------
    >>> Sketch(kind="hashing", dim=400)
    Sketch(dim=400, kind='hashing')
    """

    name = "sketch"
    _parameter_constraints = {
        "kind": [Options({"gaussian", "hashing"})],
        "dim": [Interval("int", 1, None), None],
        "n_hashes": _COUNT,
        "method": [Options({"auto", "nystrom", "covariance"})],
        "refine": [InstanceOf(bool, "a bool")],
    }

    def __init__(self, kind: str = "gaussian", dim: int | None = None, n_hashes: int = 1,
                 method: str = "auto", refine: bool = False) -> None:
        self.kind = kind
        self.dim = dim
        self.n_hashes = n_hashes
        self.method = method
        self.refine = refine


_LANDMARKS = [InstanceOf((np.ndarray, list, tuple, scipy.sparse.spmatrix, scipy.sparse.sparray),
                         "an (m, n_features) array"), None]


class Nystrom(SolverOptions):
    """The Nyström solver: kernel PCA through ``m`` landmarks, one pass over the rows.

    Parameters
    ----------
    n_landmarks : int, optional
        The number of landmarks ``m``; by default ``min(n_samples, 1000)``.
    landmarks : array-like (m, n_features), optional
        Use these points as the landmarks instead of choosing them (``n_landmarks`` and
        ``sampling`` are then unused). Two models with the same landmarks are the same fit,
        whether by ``fit`` or by ``partial_fit`` over batches. A saved model keeps them as
        ``landmarks_`` (the parameter itself is saved as ``None``).
    sampling : {"uniform", "diagonal", "column_norm", "kmeans"}, default="uniform"
        How landmarks are chosen: uniformly, with probability ``∝ k(x, x)²`` (tutorial eq.
        64), ``∝ Σ_j k(x, x_j)²`` (eq. 65; one pass over the kernel), or as k-means centroids
        of a subsample.
    method : {"feature_map", "extension"}, default="feature_map"
        PCA of the feature map ``K(x, L) K_LL^{-1/2}`` centred on all the training points
        (one pass; exact for the approximated kernel, and continued by ``partial_fit``), or
        the tutorial's eigen-extension of the landmarks' eigenpairs (eqs. 62–63; no pass).

    References
    ----------
    C. K. I. Williams and M. Seeger, "Using the Nyström method to speed up kernel
    machines", Advances in Neural Information Processing Systems 13, 2001.

    Examples
    --------
    >>> Nystrom(n_landmarks=300, sampling="kmeans")
    Nystrom(n_landmarks=300, sampling='kmeans')
    """

    name = "nystrom"
    _parameter_constraints = {
        "n_landmarks": [Interval("int", 1, None), None],
        "landmarks": _LANDMARKS,
        "sampling": [Options(set(SAMPLINGS))],
        "method": [Options({"feature_map", "extension"})],
    }

    def __init__(self, n_landmarks: int | None = None, landmarks: Any = None,
                 sampling: str = "uniform", method: str = "feature_map") -> None:
        self.n_landmarks = n_landmarks
        self.landmarks = landmarks
        self.sampling = sampling
        self.method = method


class FixedSize(SolverOptions):
    """Fixed-size kernel PCA: Nyström on landmarks that maximise the quadratic Renyi entropy.

    Parameters
    ----------
    n_landmarks : int, optional
        The size of the working set; by default ``min(n_samples, 1000)``.
    selection : {"renyi_kmeans", "renyi"}, default="renyi_kmeans"
        FS2 (working set started at k-means centroids snapped to data points; the member
        most similar to the rest is replaced by the best of a batch of candidates) or FS
        (random start, random replacements kept when the entropy rises). Both keep only
        swaps that raise the entropy.
    entropy_gamma : float, optional
        The Parzen window ``exp(-entropy_gamma ||x - y||²)`` whose quadratic Renyi entropy is
        maximised; by default Scott's rule for ``n_landmarks`` points (see
        :mod:`dkpca.solvers.fixed_size`). The model's ``gamma`` is the paper's choice, but a
        window that wide favours isolated points.
    tol : float, default=1e-6
        Stop when an iteration raises the entropy by less than this fraction.
    max_iter : int, default=20
        Most iterations (candidate batches).

    References
    ----------
    C. Varon, C. Alzate and J. A. K. Suykens, "Noise level estimation for model selection in
    kernel PCA denoising", IEEE Trans. Neural Networks and Learning Systems 26(11),
    2650–2663, 2015 (the "MDD paper", §V).

    Examples
    --------
    >>> FixedSize(n_landmarks=100, selection="renyi")
    FixedSize(n_landmarks=100, selection='renyi')
    """

    name = "fixed_size"
    _parameter_constraints = {
        "n_landmarks": [Interval("int", 1, None), None],
        "selection": [Options(set(SELECTIONS))],
        "entropy_gamma": [*_POSITIVE, None],
        "tol": _POSITIVE,
        "max_iter": _COUNT,
    }

    def __init__(self, n_landmarks: int | None = None, selection: str = "renyi_kmeans",
                 entropy_gamma: float | None = None, tol: float = 1e-6,
                 max_iter: int = 20) -> None:
        self.n_landmarks = n_landmarks
        self.selection = selection
        self.entropy_gamma = entropy_gamma
        self.tol = tol
        self.max_iter = max_iter


class ICF(SolverOptions):
    """The incomplete Cholesky factorisation of the kernel, then Nyström on its pivots.

    Parameters
    ----------
    tol : float, optional
        ``η``: stop once the trace of ``K - G Gᵀ`` is below it; by default ``1e-3`` times the
        trace of ``K``.
    max_rank : int, optional
        The most pivots ``Q``; by default ``min(n_samples, 1000)``.

    References
    ----------
    S. Fine and K. Scheinberg, "Efficient SVM training using low-rank kernel
    representations", Journal of Machine Learning Research 2, 243–264, 2001.

    Examples
    --------
    >>> ICF(max_rank=50)
    ICF(max_rank=50)
    """

    name = "icf"
    _parameter_constraints = {"tol": [*_POSITIVE, None], "max_rank": [Interval("int", 1, None),
                                                                      None]}

    def __init__(self, tol: float | None = None, max_rank: int | None = None) -> None:
        self.tol = tol
        self.max_rank = max_rank


class FixedPoint(SolverOptions):
    """The fixed-point pre-image of RBF kernels (Mika et al.), with its stopping rule.

    Parameters
    ----------
    tol : float, default=1e-6
        Stop a point when a step moves it less than this times the kernel's length scale
        ``σ``.
    max_iter : int, default=300
        Iterations at most; points still moving are reported (logged) and keep their last
        iterate.

    References
    ----------
    S. Mika, B. Schölkopf, A. Smola, K.-R. Müller, M. Scholz and G. Rätsch, "Kernel PCA and
    de-noising in feature spaces", Advances in Neural Information Processing Systems 11, 1999.

    Examples
    --------
    >>> FixedPoint(max_iter=50).name
    'fixed_point'
    """

    name = "fixed_point"
    _parameter_constraints = {"tol": _POSITIVE, "max_iter": _COUNT}

    def __init__(self, tol: float = 1e-6, max_iter: int = 300) -> None:
        self.tol = tol
        self.max_iter = max_iter


#: Each solver's options class, by the name that selects it.
SOLVERS: dict[str, type[SolverOptions]] = {
    cls.name: cls for cls in (Exact, Randomized, Sketch, Nystrom, FixedSize, ICF)
}

#: Every options class by the name that selects it: the solvers and the fixed-point pre-image.
OPTIONS: dict[str, type[SolverOptions]] = {**SOLVERS, "fixed_point": FixedPoint}

#: The pre-image methods by name; ``None``: no options of its own.
PREIMAGES: dict[str, type[SolverOptions] | None] = {
    "auto": None, "fixed_point": FixedPoint, "learned": None,
}


def solver_name(solver: str | SolverOptions) -> str:
    """Return the name of the solver that ``solver`` (a name or an options object) selects.

    Examples
    --------
    >>> solver_name("auto"), solver_name(ICF())
    ('auto', 'icf')
    """
    return solver.name if isinstance(solver, SolverOptions) else solver


def solver_options(solver: str | SolverOptions, name: str) -> SolverOptions:
    """Return the options of the solver ``name`` that runs: those given, or its defaults.

    ``solver`` is the estimator's parameter; ``name`` the solver chosen (``"auto"`` resolved).

    Examples
    --------
    >>> solver_options("auto", "randomized")
    Randomized()
    """
    return solver if isinstance(solver, SolverOptions) else SOLVERS[name]()


def preimage_options(preimage: str | SolverOptions) -> FixedPoint:
    """Return the fixed-point pre-image's options: those given, or its defaults.

    Examples
    --------
    >>> preimage_options("auto").max_iter
    300
    """
    return preimage if isinstance(preimage, FixedPoint) else FixedPoint()


#: The flat ``KernelPCA`` parameters of model format 3 and older, for each solver (and the
#: fixed-point pre-image): ``{old parameter: its name in the options object}``.
FLAT_PARAMETERS: dict[str, dict[str, str]] = {
    "randomized": {"tol": "tol", "max_iter": "max_iter", "n_oversamples": "n_oversamples",
                   "cache_dtype": "cache_dtype"},
    "sketch": {"sketch": "kind", "sketch_dim": "dim", "n_hashes": "n_hashes",
               "sketch_method": "method", "refine": "refine"},
    "nystrom": {"n_landmarks": "n_landmarks", "landmarks": "landmarks", "sampling": "sampling",
                "nystrom_method": "method"},
    "fixed_size": {"n_landmarks": "n_landmarks", "selection": "selection",
                   "entropy_gamma": "entropy_gamma", "tol": "tol", "max_iter": "max_iter"},
    "icf": {"icf_tol": "tol", "max_rank": "max_rank"},
    "fixed_point": {"preimage_tol": "tol", "preimage_max_iter": "max_iter"},
}

#: Every flat parameter of model format 3 and older.
FLAT_NAMES = frozenset(name for names in FLAT_PARAMETERS.values() for name in names)


def moved_parameters(names: list[str]) -> str:
    """Say where each of the flat parameters ``names`` went: the options it now belongs to.

    Examples
    --------
    >>> moved_parameters(["n_landmarks", "preimage_max_iter"])
    'n_landmarks is now solver=Nystrom(n_landmarks=...) or FixedSize(n_landmarks=...); \
preimage_max_iter is now preimage=FixedPoint(max_iter=...) (see dkpca.options)'
    """
    hints = []
    for name in names:
        places = [f"{OPTIONS[owner].__name__}({params[name]}=...)"
                  for owner, params in FLAT_PARAMETERS.items() if name in params]
        key = "preimage" if name.startswith("preimage_") else "solver"
        hints.append(f"{name} is now {key}={' or '.join(places)}")
    return "; ".join(hints) + " (see dkpca.options)"
