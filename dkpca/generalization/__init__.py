"""Generalization of kernel PCA projections: the cure for variance inflation (LOO paper).

:func:`loo_projections` (exact refits as parallel tasks, or the one-inverse approximation),
:class:`Renormalizer` (histogram equalisation, Kjems' affine scale, a fitted quantile map),
:func:`independence_test` (pairwise mutual information with permutation tests) and
:func:`loocv_renormalization` (renormalise only where the leave-one-out error says so).
"""

from .independence import IndependenceResult, independence_test
from .loo import LoocvDecision, loo_projections, loocv_renormalization, orthogonal_residuals
from .renormalize import Renormalizer

__all__ = [
    "IndependenceResult",
    "LoocvDecision",
    "Renormalizer",
    "independence_test",
    "loo_projections",
    "loocv_renormalization",
    "orthogonal_residuals",
]
