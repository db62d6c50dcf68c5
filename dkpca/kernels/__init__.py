"""Kernel functions evaluated on two in-memory blocks (numpy arrays or ``scipy.sparse``).

Kernels
-------
Named kernels, registered by name (aliases in parentheses), with scikit-learn's formulas:

- :class:`RBF` ``"rbf"`` (``"gaussian"``): ``exp(-gamma ||x - y||²)``
- :class:`Polynomial` ``"polynomial"`` (``"poly"``): ``(gamma <x, y> + coef0) ** degree``
- :class:`Sigmoid` ``"sigmoid"``: ``tanh(gamma <x, y> + coef0)``
- :class:`Linear` ``"linear"``: ``<x, y>``
- :class:`Laplacian` ``"laplacian"``: ``exp(-gamma ||x - y||_1)``
- :class:`Cosine` ``"cosine"``: ``<x, y> / (||x|| ||y||)`` (0 for a zero row)
- :class:`Chi2` ``"chi2"``: ``exp(-gamma Σ (x_k - y_k)² / (x_k + y_k))``, non-negative data
- :class:`AdditiveChi2` ``"additive_chi2"``: ``-Σ (x_k - y_k)² / (x_k + y_k)`` (not PSD)
- :class:`SumKernel` ``"sum"``: a sum of kernels, built with ``+``

and :class:`CallableKernel`, a user's Python function (see below), which has no config.

The product kernels (RBF, polynomial, sigmoid, linear) are one matrix product (GEMM) on
*augmented* operands followed by at most one elementwise pass over the output, done in place.
For the RBF kernel the squared distance ``||x||² - 2<x, y> + ||y||²`` is folded into the
product by appending two columns to each operand, so a block costs one GEMM plus one ``exp``:
the unavoidable work. The L1 and chi² kernels work on bounded row chunks instead.

Kernels keep ``float32`` inputs in ``float32`` and compute everything else in ``float64``. They
are registered by name and round-trip through a JSON-serialisable config::

    {"name": "rbf", "configuration": {"gamma": 0.5}}

Three RBF parameterisations appear in the source papers; :class:`RBF` keeps one canonical
``gamma`` and accepts the other two as conversions: ``exp(-gamma r²)``,
``exp(-r² / (2 sigma2))`` (``gamma = 1 / (2 sigma2)``) and ``exp(-r² / c)`` (``gamma = 1 / c``).

Sparse blocks
-------------
``pairwise``, ``pairwise_offset`` and ``diag`` of every named kernel accept CSR/CSC
``scipy.sparse`` matrices or arrays for either block, in any mix with dense numpy arrays, and
return a dense numpy array. A sparse operand is never densified whole: inner products are a
sparse product and squared norms come from ``X.multiply(X)``; the L1 and chi² kernels densify
row chunks of at most ~32 MiB at a time.

Callable kernels
----------------
:func:`get_kernel` wraps any Python callable in a :class:`CallableKernel`. Two conventions are
accepted and told apart by one small probe per call: a *block* function ``f(X, Y, **params)``
returning the ``(len(X), len(Y))`` matrix (fast; sparse blocks are passed as given), or
scikit-learn's *per-pair* function ``f(x, y, **params)`` on two dense 1-D rows returning a
scalar (one Python call per pair of rows: slow). A model with a callable kernel cannot be
saved; register a :class:`Kernel` subclass with :func:`register_kernel` for that.
"""

from ._base import Kernel, SumKernel, kernel_from_config, register_kernel
from ._composite import CallableKernel
from ._distance import AdditiveChi2, Chi2, Laplacian
from ._dot import RBF, Cosine, Linear, Polynomial, Sigmoid
from ._lookup import get_kernel

__all__ = [
    "RBF",
    "AdditiveChi2",
    "CallableKernel",
    "Chi2",
    "Cosine",
    "Kernel",
    "Laplacian",
    "Linear",
    "Polynomial",
    "Sigmoid",
    "SumKernel",
    "get_kernel",
    "kernel_from_config",
    "register_kernel",
]
