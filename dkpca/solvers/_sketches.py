"""Dot-product preserving sketches: Gaussian random projection and signed feature hashing.

A sketch maps a vector of length ``n_rows`` to ``sketch_dim`` numbers so that dot products are
preserved in expectation (tutorial §4.3): ``E[<f(x), f(y)>] = <x, y>``. Both are a dense
``(n_rows, sketch_dim)`` matrix ``W`` applied as ``x ↦ Wᵀ x``:

- Gaussian (eq. 36): ``W`` has independent ``N(0, 1/q)`` entries.
- Hashing (eqs. 40 and 46): ``l`` hash functions, each sending row ``i`` to one of ``q / l``
  buckets with a random sign; their outputs are concatenated and scaled by ``1/sqrt(l)``.
  (The tutorial's eq. (46) scales by ``1/l``, which gives ``<x, y>/l``: each of the ``l``
  sketches preserves ``<x, y>`` in expectation, so their concatenation needs ``1/sqrt(l)``.)

Rows of ``W`` are drawn in fixed blocks of :data:`BLOCK_ROWS`, each from its own child of the
seed, so ``W`` is the same however the data are chunked, and the first ``m`` rows of a taller
``W`` are those of the shorter one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import dask.array as da
import numpy as np

__all__ = ["BLOCK_ROWS", "Sketch"]

#: Rows of the sketch matrix drawn from one child seed.
BLOCK_ROWS = 4096

_KINDS = ("gaussian", "hashing")


@dataclass(frozen=True)
class Sketch:
    """A dot-product preserving sketch to ``sketch_dim`` dimensions.

    Parameters
    ----------
    kind : {"gaussian", "hashing"}
    sketch_dim : int
        Output dimension ``q``.
    seed : numpy.random.SeedSequence
        The source of all randomness.
    n_hashes : int, default=1
        Hashing only: hash functions concatenated; each hashes into ``sketch_dim // n_hashes``
        buckets, so ``sketch_dim`` must be a multiple of it.

    Examples
    --------
    >>> import numpy as np
    >>> sketch = Sketch("gaussian", 3, np.random.SeedSequence(0))
    >>> sketch.matrix(5).shape
    (5, 3)
    >>> W = Sketch("hashing", 4, np.random.SeedSequence(0), n_hashes=2).matrix(3)
    >>> (W != 0).sum(axis=1), np.unique(np.abs(W[W != 0])).round(4)  # one ±1/√2 per hash
    (array([2, 2, 2]), array([0.7071]))
    """

    kind: str
    sketch_dim: int
    seed: np.random.SeedSequence
    n_hashes: int = 1

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"sketch must be one of {_KINDS}, got {self.kind!r}")
        if self.sketch_dim < 1:
            raise ValueError(f"sketch_dim must be a positive integer, got {self.sketch_dim}")
        if self.n_hashes < 1 or self.sketch_dim % self.n_hashes:
            raise ValueError(
                f"sketch_dim={self.sketch_dim} must be a multiple of n_hashes={self.n_hashes}"
            )

    def _block_rng(self, block: int) -> np.random.Generator:
        # Addressed, not spawned in sequence: block b has the same child whatever came before.
        child = np.random.SeedSequence(self.seed.entropy,
                                       spawn_key=(*self.seed.spawn_key, block))
        return np.random.default_rng(child)

    def _block(self, block: int, rows: int) -> np.ndarray:
        rng = self._block_rng(block)
        q = self.sketch_dim
        if self.kind == "gaussian":
            return rng.standard_normal((rows, q)) / math.sqrt(q)
        width = q // self.n_hashes
        W = np.zeros((rows, q))
        buckets = rng.integers(0, width, size=(rows, self.n_hashes))
        signs = rng.choice(np.array([-1.0, 1.0]), size=(rows, self.n_hashes))
        columns = buckets + width * np.arange(self.n_hashes)
        np.put_along_axis(W, columns, signs / math.sqrt(self.n_hashes), axis=1)
        return W

    def matrix(self, n_rows: int, start: int = 0, dtype: np.dtype | type = np.float64) -> np.ndarray:
        """Rows ``start`` to ``start + n_rows`` of the sketch matrix ``W``.

        Examples
        --------
        >>> import numpy as np
        >>> s = Sketch("gaussian", 2, np.random.SeedSequence(1))
        >>> bool(np.array_equal(s.matrix(3, start=5000), s.matrix(5003)[5000:]))
        True
        """
        stop = start + n_rows
        first, last = start // BLOCK_ROWS, (stop - 1) // BLOCK_ROWS if n_rows else -1
        parts = []
        for block in range(first, last + 1):
            lo, hi = block * BLOCK_ROWS, min((block + 1) * BLOCK_ROWS, stop)
            full = self._block(block, BLOCK_ROWS)
            parts.append(full[max(start, lo) - lo : hi - lo])
        if not parts:
            return np.zeros((0, self.sketch_dim), dtype=dtype)
        return np.concatenate(parts).astype(dtype, copy=False)

    def apply(self, X: da.Array) -> da.Array:
        """Sketch each row of ``X`` (``(n, d)``): the lazy ``(n, sketch_dim)`` array ``X W``.

        Examples
        --------
        >>> import numpy as np, dask.array as da
        >>> s = Sketch("hashing", 2, np.random.SeedSequence(0))
        >>> s.apply(da.ones((3, 4), chunks=2)).shape
        (3, 2)
        """
        X = X.rechunk({1: -1})
        W = self.matrix(X.shape[1], dtype=np.result_type(X.dtype, np.float32))
        return X.map_blocks(
            np.matmul, W, chunks=(X.chunks[0], (self.sketch_dim,)), dtype=W.dtype
        )
