"""Kernel PCA solvers; each ends in a :class:`KernelBasis`."""

from ._basis import KernelBasis
from ._components import ComponentRule
from ._sketches import Sketch
from .exact import fit_exact
from .randomized import fit_randomized
from .sketch import fit_pca_sketch, fit_sketch

__all__ = ["ComponentRule", "KernelBasis", "Sketch", "fit_exact", "fit_pca_sketch", "fit_randomized",
           "fit_sketch"]
