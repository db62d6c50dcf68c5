"""Synthetic data sets from the source papers.

``_mdd``: concentric rings and the MDD paper's toy sets (semicircles, a square, two rings); ``_loo``: the LOO
paper's four-signal model and unbalanced semicircles; ``_noise``: noise at a signal-to-noise
ratio and the argument checks they share.
"""

# the geometry constants are public (tests and users check against them), not in __all__
from ._loo import UNBALANCED_CLUSTER_NOISE as UNBALANCED_CLUSTER_NOISE
from ._loo import make_signal_in_noise, make_unbalanced_semicircles
from ._mdd import RING_RADIUS as RING_RADIUS
from ._mdd import SEMICIRCLE_RADIUS as SEMICIRCLE_RADIUS
from ._mdd import SQUARE_SIDE as SQUARE_SIDE
from ._mdd import (
    make_rings,
    make_semicircles,
    make_square,
    make_two_rings,
)
from ._noise import add_noise

__all__ = [
    "add_noise",
    "make_rings",
    "make_semicircles",
    "make_signal_in_noise",
    "make_square",
    "make_two_rings",
    "make_unbalanced_semicircles",
]
