"""Model selection for RBF kernel PCA: the width ``σ²`` and the number of components.

:func:`select_model` runs MDD (the default), kernel parallel analysis or the Shannon entropy
criterion and returns a :class:`ModelSelection`; the rules of thumb and the Pearson system the
MDD noise is drawn from are public too.
"""

from .pearson import PearsonDistribution, fit_pearson, pearson_sample, pearson_type
from .result import ModelSelection
from .rules import default_sigma2_grid, distance_percentile_sigma2, rule_of_thumb_sigma2
from .select import select_model

__all__ = [
    "ModelSelection",
    "PearsonDistribution",
    "default_sigma2_grid",
    "distance_percentile_sigma2",
    "fit_pearson",
    "pearson_sample",
    "pearson_type",
    "rule_of_thumb_sigma2",
    "select_model",
]
