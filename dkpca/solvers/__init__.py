"""Kernel PCA solvers; each ends in a :class:`KernelBasis`."""

from ._basis import KernelBasis
from ._components import ComponentRule
from .exact import fit_exact
from .randomized import fit_randomized

__all__ = ["ComponentRule", "KernelBasis", "fit_exact", "fit_randomized"]
