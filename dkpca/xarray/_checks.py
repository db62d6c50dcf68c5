"""Checks that new fields agree with a fitted :class:`~dkpca.xarray.FieldModel`, and their messages.

Shared by ``fit`` (user weights on the field's grid, NaNs among valid data), ``transform``
and ``partial_fit`` (the model's grid, its NaN pattern); each error names a few offending
coordinates (:func:`positions`) and the fix.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import xarray as xr

from ._grid import GridLayout, float_dtype, per_variable_weights

__all__ = [
    "NAMED",
    "Describer",
    "check_grids",
    "check_nan_pattern",
    "check_weights_grid",
    "clean_block",
    "coordinate_labels",
    "positions",
]

#: At most this many offending coordinates are named in an error.
NAMED = 5


def check_nan_pattern(wet: np.ndarray, partial: np.ndarray, gaps: np.ndarray,
                      land: np.ndarray, kept: np.ndarray, drop: bool,
                      describe: Callable | None, land_hint: str = "") -> None:
    """Raise unless new rows are NaN exactly where the model has no data.

    ``wet`` flags the land points (``land``) with a value in some row; ``partial`` the rows
    NaN at some kept point (``kept``) but not everywhere, allowed under ``drop``; ``gaps``
    the kept points NaN in such a row. ``describe(rows, columns)`` names them by coordinates.
    """
    if wet.any():
        where = (describe(None, _columns(land, wet)) if describe else
                 f"{int(wet.sum())} grid points")
        raise ValueError(
            f"the new field has values where the model has no data (NaN at every training "
            f"sample, e.g. land): {where}{land_hint}"
        )
    if partial.any() and not drop:
        where = (describe(partial, _columns(kept, gaps)) if describe else
                 f"{int(partial.sum())} samples of this block")
        raise ValueError(
            f"the new field is NaN where the model has data: {where}. Fill them, or fit with "
            f"nan_policy='drop_samples' to give such samples NaN scores."
        )


def _columns(mask: np.ndarray, hits: np.ndarray) -> np.ndarray:
    """Turn a mask over the ``mask`` grid points into one over all grid points."""
    out = np.zeros(mask.size, dtype=bool)
    out[np.flatnonzero(mask)[hits]] = True
    return out


def check_grids(layout: GridLayout, pairs: list) -> None:
    """Refuse fields whose grid coordinates differ from the model's, naming both and the fix."""
    for i, ((name, array), variable) in enumerate(zip(pairs, layout.variables, strict=True)):
        fitted = variable.template
        for dim in variable.feature_dims:
            if dim not in fitted.indexes:
                continue
            given = array.indexes.get(dim)
            if given is not None and fitted.indexes[dim].equals(given):
                continue
            raise ValueError(
                f"{name or 'the field'} is on another grid than the model along {dim!r}: the "
                f"model's {dim} is {coordinate_labels(fitted.coords[dim], fitted.sizes[dim])}, the "
                f"field's {coordinate_labels(array.coords.get(dim), array.sizes[dim])}. Put the field on "
                f"the model's grid first, e.g. field.interp_like(grid) or "
                f"field.reindex_like(grid, method='nearest') with "
                f"grid = model.layout_.variables[{i}].template."
            )


def coordinate_labels(coord: xr.DataArray | None, size: int) -> str:
    """At most a few of a coordinate's values, for an error message."""
    if coord is None:
        return f"{size} points without coordinates"
    values = coord.values.tolist()
    shown = ", ".join(str(v) for v in values[:NAMED])
    return f"[{shown}{', ...' if len(values) > NAMED else ''}] ({size} points)"


def check_weights_grid(pairs: list, sample_dims: tuple[str, ...], weights: Any) -> None:
    """Refuse user weights on another grid than the field's, naming both grids and the fix.

    Weights may cover more of a dimension than the field (they are selected at the field's
    coordinates); every point of the field needs a weight.
    """
    for (name, array), w in zip(pairs, per_variable_weights(weights, pairs), strict=True):
        if not isinstance(w, xr.DataArray):
            continue
        for dim in w.dims:
            if dim not in array.dims or dim in sample_dims:
                continue  # a dimension the field lacks is reported by the layout
            field_coord = array.coords[dim] if dim in array.indexes else None
            weight_coord = w.coords[dim] if dim in w.indexes else None
            if field_coord is not None and weight_coord is not None:
                missing = int((~np.isin(field_coord.values, weight_coord.values)).sum())
            else:
                missing = 0 if array.sizes[dim] == w.sizes[dim] else array.sizes[dim]
            if not missing:
                continue
            which = f"weights for {name!r}" if name is not None else "weights"
            raise ValueError(
                f"the {which} are on another grid than the field along {dim!r}: the weights' "
                f"{dim} is {coordinate_labels(weight_coord, w.sizes[dim])}, the field's {dim} is "
                f"{coordinate_labels(field_coord, array.sizes[dim])}, and {missing} of the field's "
                f"points have no weight. Give weights on the field's grid, e.g. "
                f"weights.interp_like(field) or weights.reindex_like(field, method='nearest')."
            )


def positions(mask: np.ndarray, shape: tuple[int, ...], dims: Sequence[str],
               coords: dict[str, Any]) -> str:
    """Name the first few ``True`` entries of a flat mask by coordinates (``(lat=10.0, ...)``)."""
    named = []
    for flat in np.flatnonzero(mask)[:NAMED]:
        index = np.unravel_index(flat, shape)
        parts = []
        for dim, i in zip(dims, index, strict=True):
            label = coords[dim].values[i] if dim in coords else i
            parts.append(f"{dim}={label}")
        named.append("(" + ", ".join(parts) + ")")
    more = int(mask.sum()) - len(named)
    return ", ".join(named) + (f" and {more} more" if more > 0 else "")


class Describer:
    """Name flat masks over the rows (samples) and columns (grid points) by coordinates.

    ``describe(rows, columns)`` gives ``"samples (time=3); sst points (lat=1, lon=1)"`` for the
    ``True`` entries, either mask may be ``None``. It holds the coordinates only (no data), so
    it travels to dask workers; :meth:`at` gives one for a block of rows starting at a row of
    the whole matrix, which names that block's rows at their place in the whole.

    Parameters
    ----------
    sample_shape, sample_dims, sample_coords
        The samples' shape, dimensions and index coordinates (the rows, flattened row-major).
    grids : list of (label, shape, dims, coords)
        Per variable, in the order of the columns: its label (``"sst"``, ``"grid"``), its grid's
        shape, dimensions and index coordinates.

    Examples
    --------
    >>> describe = Describer((4,), ("time",), {}, [("grid", (2, 3), ("lat", "lon"), {})])
    >>> describe.at(2)(np.array([False, True]), np.eye(6, dtype=bool)[4])
    'samples (time=3); grid points (lat=1, lon=1)'
    """

    def __init__(self, sample_shape: tuple[int, ...], sample_dims: Sequence[str],
                 sample_coords: dict[str, Any], grids: list[tuple], start: int = 0) -> None:
        self.sample_shape = tuple(sample_shape)
        self.sample_dims = tuple(sample_dims)
        self.sample_coords = sample_coords
        self.grids = grids
        self.start = start

    def at(self, start: int) -> Describer:
        """Return the describer of a block of rows that begins at row ``start``."""
        return Describer(self.sample_shape, self.sample_dims, self.sample_coords, self.grids,
                         start)

    def __call__(self, rows: np.ndarray | None, columns: np.ndarray | None) -> str:
        """Name the ``True`` rows and columns by their coordinates."""
        parts = []
        if rows is not None:
            whole = np.zeros(int(np.prod(self.sample_shape)), dtype=bool)
            whole[self.start:self.start + rows.size] = rows
            parts.append("samples " + positions(whole, self.sample_shape, self.sample_dims,
                                                 self.sample_coords))
        if columns is not None:
            start = 0
            for label, shape, dims, coords in self.grids:
                size = int(np.prod(shape))
                part = columns[start:start + size]
                start += size
                if part.any():
                    parts.append(f"{label} points " + positions(part, shape, dims, coords))
        return "; ".join(parts)


def clean_block(block: np.ndarray, kept: np.ndarray, land: np.ndarray, scale: np.ndarray,
                drop: bool, describe: Callable | None,
                block_info: dict | None = None) -> np.ndarray:
    """Check one block of new rows; return the scaled kept values and a last column of flags.

    Rows NaN everywhere (or with any NaN under ``drop``) are flagged 0 and zero-filled. Under
    ``map_blocks`` (``block_info`` given), a :class:`Describer` names the block's rows at
    their place in the whole array.
    """
    if block_info is not None and isinstance(describe, Describer):
        describe = describe.at(int(block_info[0]["array-location"][0][0]))
    isnan = np.isnan(block)
    gaps = isnan[:, kept]
    partial = gaps.any(axis=1) & ~isnan.all(axis=1)
    check_nan_pattern((~isnan[:, land]).any(axis=0), partial, gaps[partial].any(axis=0),
                      land, kept, drop, describe)
    ok = ~gaps.any(axis=1)
    dtype = float_dtype(block.dtype)  # as the training matrix: float32 stays float32
    values = np.where(ok[:, None], block[:, kept].astype(dtype), dtype.type(0))
    values *= scale.astype(dtype)
    return np.hstack([values, ok[:, None].astype(dtype)])
