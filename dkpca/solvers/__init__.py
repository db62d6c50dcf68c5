"""Kernel PCA solvers; each ends in a :class:`KernelBasis`."""

from ._basis import KernelBasis
from ._components import ComponentRule
from ._landmarks import SAMPLINGS, select_landmarks
from ._sketches import Sketch
from .exact import centred_top_eigh, fit_exact
from .fixed_size import SELECTIONS, FixedSizeResult, select_fixed_size
from .icf import IncompleteCholesky, incomplete_cholesky
from .nystrom import as_landmarks, fit_nystrom, landmark_statistics, nystrom_basis
from .randomized import fit_randomized
from .sketch import fit_pca_sketch, fit_sketch

__all__ = [
    "SAMPLINGS",
    "SELECTIONS",
    "ComponentRule",
    "FixedSizeResult",
    "IncompleteCholesky",
    "KernelBasis",
    "Sketch",
    "as_landmarks",
    "centred_top_eigh",
    "fit_exact",
    "fit_nystrom",
    "fit_pca_sketch",
    "fit_randomized",
    "fit_sketch",
    "incomplete_cholesky",
    "landmark_statistics",
    "nystrom_basis",
    "select_fixed_size",
    "select_landmarks",
]
