"""Which tiles each holder keeps: the tile size, the two layouts, and the deal.

The training kernel's row blocks (:func:`balanced_tile_rows`) make tiles, of which the upper
ones are used. They are dealt to the holders (workers, or this process) in one of two layouts
(:func:`tile_layout`): **symmetric**, each upper tile held once in contiguous runs of the
row-major order (:func:`deal_tiles`), or **stripes**, each holder owning whole row blocks and
holding every upper tile that touches them (:func:`deal_stripes`, :func:`stripe_pairs`).
:func:`plan_tiles` makes the choice and the deal for a fit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import dask
import numpy as np

from ._tile_holders import Holder, tile_areas
from .blocked import scheduler_threads, tile_rows, upper_pairs

__all__ = [
    "LAYOUT_KEY",
    "STRIPES_MIN_HOLDERS",
    "TILE_LAYOUTS",
    "WORK_DEAL_MAX_SHARE",
    "TilePlan",
    "balanced_tile_rows",
    "cached_kernel_bytes",
    "deal_stripes",
    "deal_tiles",
    "plan_tiles",
    "stripe_pairs",
    "striped_kernel_bytes",
    "tile_layout",
]

#: Values of the ``dkpca.tile-layout`` setting (see :func:`tile_layout`).
TILE_LAYOUTS = ("auto", "symmetric", "stripes")

#: The ``dask.config`` key that chooses the layout of cached tiles on several holders.
LAYOUT_KEY = "dkpca.tile-layout"

#: Fewest holders for which the ``"auto"`` layout uses stripes, where the partials come back
#: through sockets. On 16 cores (100,000 × 64, BENCHMARKS.md §8) the symmetric layout kept
#: 2 × 8 and 4 × 4 within 1.10 of the threaded fit and pass, while stripes made the 4 × 4 fit
#: 1.22 (the tiles between stripes evaluated twice); at 8 × 2, partials through sockets and
#: summed on one thread, stripes brought the pass from 1.72 to 1.19 and the fit from 1.58 to
#: 1.34. With the partials in shared memory and summed on the client's cores, symmetric 8 × 2
#: took 1.07 (fit) and 1.11 (pass), stripes 1.33 and 1.13 (H200 machine, 2026-11-29).
STRIPES_MIN_HOLDERS = 8

#: Most that a holder may cache, as a multiple of its share of the tiles' bytes, for the
#: tiles to be dealt by a pass's work rather than by area (:func:`deal_tiles`): with the cache
#: at half a worker's memory (``tiles.WORKER_CACHE_SHARE``), 55 % of it, below the 60 % at
#: which distributed starts to spill. At 100,000 rows (18 row blocks) on 8 holders the busiest
#: holder's work falls from 1.062 to 1.012 times the mean, its bytes rise to 1.076 times.
WORK_DEAL_MAX_SHARE = 1.1

#: Tiles per scheduler thread that the cache and the streamed product aim for (smaller tiles
#: than ``block_bytes`` allows when ``n`` is small), so that every thread stays busy.
TILES_PER_THREAD = 3

#: Smallest tile side chosen for balance: below it, per-task overheads start to show.
MIN_BALANCED_ROWS = 1024


def balanced_tile_rows(n: int, itemsize: int, block_bytes: int, multiple: int = 1) -> int:
    """Tile side for ``n`` rows: at most ``block_bytes`` a tile, enough tiles for every thread.

    ``multiple``: make the number of row blocks a multiple of it where ``n`` allows (equal
    stripes for that many holders).

    Examples
    --------
    >>> balanced_tile_rows(100_000, 4, 128 * 2**20)  # 18 equal tiles of at most 5792 rows
    5556
    >>> balanced_tile_rows(10_000, 4, 128 * 2**20) < 5792  # more, smaller tiles
    True
    >>> -(-100_000 // balanced_tile_rows(100_000, 4, 128 * 2**20, multiple=8))  # row blocks
    24
    """
    t = min(n, tile_rows(itemsize, block_bytes))
    wanted = TILES_PER_THREAD * scheduler_threads()
    r = -(-n // t)
    while r * (r + 1) // 2 < wanted and -(-n // (r + 1)) >= MIN_BALANCED_ROWS:
        r += 1
    r = min(n, -(-r // multiple) * multiple)
    return -(-n // r)



@dataclasses.dataclass
class TilePlan:
    """The layout, the row blocks and each holder's tiles (and stripe) for one kernel.

    ``kept`` lists ``(holder, pairs, stripe)`` for the holders that get tiles; ``stripe`` is
    ``None`` in the symmetric layout.
    """

    layout: str
    bounds: list[tuple[int, int]]
    kept: list[tuple[Holder, list[tuple[int, int]], range | None]]


def plan_tiles(n: int, itemsize: int, block_bytes: int, found: list[Holder], cached: bool,
               budget: Callable[[], int], *, partials_by_socket: bool = True) -> TilePlan:
    """Choose the layout (see :func:`tile_layout`), cut the row blocks and deal the tiles.

    ``budget`` gives the memory the cached tiles may take, asked only when stripes are
    considered. ``partials_by_socket``: whether the holders' partial products would come
    back through sockets (else through shared memory, where ``"auto"`` keeps the symmetric
    layout).

    Examples
    --------
    >>> plan = plan_tiles(100, 8, 50 * 50 * 8, [Holder(None, 1)], True, lambda: 0)
    >>> plan.layout, plan.bounds, plan.kept[0][1]
    ('symmetric', [(0, 50), (50, 100)], [(0, 0), (0, 1), (1, 1)])
    """
    weights = [h.nthreads for h in found]
    rows = balanced_tile_rows(n, itemsize, block_bytes)
    layout = tile_layout()
    if layout == "stripes":
        striped = cached and len(found) >= 2
    else:
        striped = (layout == "auto" and cached and partials_by_socket
                   and len(found) >= STRIPES_MIN_HOLDERS)
    if striped:  # whole row blocks: as many as equal stripes need
        striped_rows = balanced_tile_rows(n, itemsize, block_bytes, multiple=len(found))
        striped = (layout == "stripes"
                   or striped_kernel_bytes(n, striped_rows, weights, itemsize) <= budget())
        rows = striped_rows if striped else rows
    bounds = [(start, min(start + rows, n)) for start in range(0, n, rows)]
    if striped:
        stripes = deal_stripes(bounds, weights)
        return TilePlan("stripes", bounds, [
            (h, stripe_pairs(stripe, len(bounds)), stripe)
            for h, stripe in zip(found, stripes, strict=True) if len(stripe)])
    pairs = upper_pairs(len(bounds))
    dealt = _deal_symmetric(pairs, bounds, weights, cached)
    return TilePlan("symmetric", bounds, [(h, [pairs[k] for k in ids], None)
                                          for h, ids in zip(found, dealt, strict=True) if ids])


def _deal_symmetric(pairs: list[tuple[int, int]], bounds: list[tuple[int, int]],
                    weights: list[int], cached: bool) -> list[list[int]]:
    """Deal cached tiles by a pass's work where no holder then exceeds its share, else by area.

    A streamed tile's evaluation, proportional to its area, is most of its work: by area.
    """
    by_area = deal_tiles(pairs, bounds, weights)
    if not cached or len(weights) == 1:
        return by_area
    by_work = deal_tiles(pairs, bounds, weights, by_work=True)
    areas = tile_areas(bounds, pairs)
    shares = np.asarray(weights, dtype=np.float64) / sum(weights) * areas.sum()
    held = np.array([areas[ids].sum() for ids in by_work])
    return by_work if np.all(held <= WORK_DEAL_MAX_SHARE * shares) else by_area


def cached_kernel_bytes(n: int, itemsize: int, block_bytes: int) -> int:
    """Memory of the upper tiles of an ``n × n`` kernel (diagonal tiles whole).

    Examples
    --------
    >>> round(cached_kernel_bytes(10_000, 8, 128 * 2**20) / 2**20)  # 763 MiB for all of K
    509
    """
    t = balanced_tile_rows(n, itemsize, block_bytes)
    sizes = [t] * (n // t) + ([n % t] if n % t else [])
    return (n * n + sum(s * s for s in sizes)) // 2 * itemsize  # sum over i <= j of s_i s_j


def striped_kernel_bytes(n: int, rows: int, weights: list[int], itemsize: int) -> int:
    """Memory of the tiles in stripes: each tile once per holder whose rows it touches.

    Examples
    --------
    >>> striped_kernel_bytes(100, 50, [1], 8) == cached_kernel_bytes(100, 8, 50 * 50 * 8)
    True
    >>> striped_kernel_bytes(100, 50, [1, 1], 8)  # all of K
    80000
    """
    bounds = [(start, min(start + rows, n)) for start in range(0, n, rows)]
    owner = np.zeros(len(bounds), dtype=int)
    for h, stripe in enumerate(deal_stripes(bounds, weights)):
        owner[list(stripe)] = h
    sizes = [stop - start for start, stop in bounds]
    return itemsize * sum(sizes[i] * sizes[j] * (1 if owner[i] == owner[j] else 2)
                          for i, j in upper_pairs(len(bounds)))


def tile_layout() -> str:
    """Return the ``dkpca.tile-layout`` setting: how cached tiles are dealt to holders.

    * ``"symmetric"``: each upper tile is held once; a holder returns the products of every
      row its tiles touch, and the client adds the overlapping partials (double-double sums).
      Memory ``n²/2`` entries; per pass about ``2/3 · W · n · b`` values come back from ``W``
      holders, and the client adds them up.
    * ``"stripes"``: each holder owns a stripe of whole row blocks and holds every upper tile
      that touches it, so the tiles between two stripes are evaluated and held twice; it
      returns only its own rows, which the client places. Memory up to ``n²`` entries (once
      more the tiles' evaluation); per pass ``n · b`` values come back, nothing to add.
      Asked for by name, stripes are used for cached tiles on any number of holders above
      one, without checking them against the memory budget.
    * ``"auto"`` (the default): stripes when there are at least
      :data:`STRIPES_MIN_HOLDERS` holders (workers), their partials would come back through
      sockets (not all on this machine, or shared memory turned off) and the striped tiles
      fit the memory budget, else symmetric. One holder (the threaded scheduler) and
      streamed tiles always use the symmetric layout.

    Examples
    --------
    >>> import dask
    >>> tile_layout()
    'auto'
    >>> with dask.config.set({"dkpca.tile-layout": "symmetric"}):
    ...     tile_layout()
    'symmetric'
    """
    layout = str(dask.config.get(LAYOUT_KEY, "auto")).lower()
    if layout not in TILE_LAYOUTS:
        raise ValueError(f"{LAYOUT_KEY} must be one of {TILE_LAYOUTS}, got {layout!r}")
    return layout


def deal_stripes(bounds: Sequence[tuple[int, int]], weights: Sequence[int]) -> list[range]:
    """Deal the row blocks ``bounds`` to holders in contiguous stripes, balanced by rows.

    ``weights`` are the holders' shares (their thread counts). A holder's work in a pass is
    its rows times ``n`` whatever the stripe, so rows are what is balanced.

    Examples
    --------
    >>> deal_stripes([(0, 10), (10, 20), (20, 30), (30, 40)], [1, 1])
    [range(0, 2), range(2, 4)]
    """
    rows = np.array([stop - start for start, stop in bounds], dtype=np.float64)
    shares = np.cumsum(np.asarray(weights, dtype=np.float64))
    targets = shares / shares[-1] * rows.sum()
    ends = np.cumsum(rows) - rows / 2  # a block goes where its middle falls
    owner = np.minimum(np.searchsorted(targets, ends, side="right"), len(weights) - 1)
    firsts = np.searchsorted(owner, np.arange(len(weights)), side="left")
    stops = np.searchsorted(owner, np.arange(len(weights)), side="right")
    return [range(int(a), int(b)) for a, b in zip(firsts, stops, strict=True)]


def stripe_pairs(stripe: range, n_blocks: int) -> list[tuple[int, int]]:
    """Return the upper tiles ``(i, j)`` that touch the row blocks of ``stripe``, row by row.

    Examples
    --------
    >>> stripe_pairs(range(1, 2), 3)
    [(0, 1), (1, 1), (1, 2)]
    """
    return [(i, j) for i in range(n_blocks) for j in range(i, n_blocks)
            if i in stripe or j in stripe]


def deal_tiles(
    pairs: Sequence[tuple[int, int]], bounds: Sequence[tuple[int, int]], weights: Sequence[int],
    *, by_work: bool = False,
) -> list[list[int]]:
    """Deal the tiles ``pairs`` to holders in contiguous runs, balanced by area or by work.

    ``weights`` are the holders' shares (their thread counts). A run of the row-major order
    keeps the rows each holder touches contiguous (``lo:n``), so its partial product is one slice.
    ``by_work``: balance a pass's products instead, for cached tiles: an off-diagonal tile
    serves two (``K_ij V_j`` and ``K_ijᵀ V_i``), a diagonal one a single product. Dealt by area,
    the late runs, one diagonal tile in every few, do less a pass than the early ones.

    Examples
    --------
    >>> pairs = [(0, 0), (0, 1), (1, 1)]
    >>> deal_tiles(pairs, [(0, 10), (10, 20)], [1, 1])
    [[0], [1, 2]]
    """
    costs = tile_areas(bounds, pairs)
    if by_work:  # an off-diagonal tile's two products
        costs *= [1 if i == j else 2 for i, j in pairs]
    shares = np.cumsum(np.asarray(weights, dtype=np.float64))
    targets = shares / shares[-1] * costs.sum()
    ends = np.cumsum(costs) - costs / 2  # a tile goes where its middle falls
    owner = np.minimum(np.searchsorted(targets, ends, side="right"), len(weights) - 1)
    return [np.flatnonzero(owner == h).tolist() for h in range(len(weights))]
