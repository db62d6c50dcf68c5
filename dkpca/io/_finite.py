"""NaN and infinity in input data: the checks that name the first row holding them.

In-memory input is checked whole (:func:`nonfinite_message` names the row); lazy input block
by block, in the tasks that read it (:func:`finite_block`), so the check costs no pass of its
own.
"""

from __future__ import annotations

from typing import Any

import dask
import dask.array as da
import numpy as np
import scipy.sparse

__all__ = ["finite_block", "nonfinite_message"]


def nonfinite_message(X: Any, name: str = "X") -> str:
    """Return the error message for ``X`` holding NaN or infinity, naming the first such row.

    Lazy data is read once more for it: this is for the error path of a fit whose statistics
    showed non-finite values. Where every value is finite the statistics overflowed, and
    the message says so.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.ones((5, 2))
    >>> X[3, 1] = np.nan
    >>> nonfinite_message(X)[:44]
    'X contains NaN or infinity at row 3 (the fir'
    """
    if isinstance(X, da.Array):
        bad = X.map_blocks(_nonfinite_rows, drop_axis=1, dtype=bool, meta=np.zeros(0, bool))
        first, found = dask.compute(bad.argmax(), bad.any())
        row = int(first) if found else None
    else:
        rows = np.flatnonzero(_nonfinite_rows(X))
        row = int(rows[0]) if rows.size else None
    if row is None:
        return (f"{name} is finite, but its sums overflowed: its values are too large for "
                f"{np.dtype(X.dtype).name}; rescale them (StandardScaler, say).")
    return (f"{name} contains NaN or infinity at row {row} (the first such row); remove or "
            "impute those values first.")


def _nonfinite_rows(block: Any) -> np.ndarray:
    """Return one flag per row of ``block`` (dense or sparse): does it hold NaN or infinity."""
    if scipy.sparse.issparse(block):
        block = scipy.sparse.csr_matrix(block)
        flags = np.zeros(block.shape[0], dtype=bool)
        rows = np.repeat(np.arange(block.shape[0]), np.diff(block.indptr))
        flags[rows[~np.isfinite(block.data)]] = True
        return flags
    return ~np.isfinite(np.asarray(block)).all(axis=1)


def finite_block(block: Any, label: str, block_info: dict | None = None) -> Any:
    """Return ``block`` unchanged, or raise naming its first row with NaN or infinity.

    Lazy input is checked as its chunks are computed, in the task that reads them, so the
    check costs no pass of its own and catches what numpy input's check catches. Which block
    fails first depends on the order the tasks ran in, so the row named is the first of its
    block, not necessarily of the data.
    """
    flags = _nonfinite_rows(block)
    if not flags.any():
        return block
    first = int(np.flatnonzero(flags)[0])
    start, stop = block_info[0]["array-location"][0] if block_info else (0, block.shape[0])
    raise ValueError(f"{label} contains NaN or infinity at row {start + first} (the first in "
                     f"rows {start} to {stop - 1}; other rows may hold more); remove or impute "
                     "those values first.")
