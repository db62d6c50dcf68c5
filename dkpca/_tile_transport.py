"""How a kernel product's bytes travel: ``V`` out to the tile holders, their partials back.

:class:`dkpca.tiles.KernelTiles` multiplies in place on its holders; this module decides
whether the client talks to the workers directly, sends each holder its copy of ``V``, gathers
the partials (cancelling them all when one fails) and sums the double-double partials into the
product.
"""

from __future__ import annotations

import asyncio
import ipaddress
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ._device import array_module, into
from ._tile_holders import two_sum_into
from .moments import available_cores

#: Bytes of one row band of the partials' sum: a band's TwoSum arrays stay in a core's cache.
SUM_BAND_BYTES = 1 << 20
#: Elements of partials to add, from which the bands are shared among this process's cores.
THREADED_SUM_ELEMENTS = 1 << 20


def _gather_or_cancel(client: Any, futures: list, **kwargs: Any) -> list:
    """``client.gather(futures)``; when that raises, cancel all of them first.

    The tasks still running on other holders stop. The error raised is the one a failed
    future holds, and raising it gives it a traceback whose frames hold the futures: the
    client would keep the error, and so the futures and all they depend on, for good.
    Cancelling replaces the error it keeps.
    """
    try:
        return client.gather(futures, **kwargs)
    except BaseException:
        client.cancel(futures)
        raise


def _direct_to_holders(client: Any, addresses: list[str]) -> bool:
    """Return whether ``V`` and the partials go between the client and the workers directly.

    The client's own ``direct_to_workers`` decides when set. By default they do when every
    holder is on this machine (a ``LocalCluster``: the scheduler would relay every byte of a
    pass, twice); on a remote cluster the client may not reach the workers (a gateway, a
    laptop outside Kubernetes), so the scheduler relays them. Set
    ``Client(direct_to_workers=True)`` where the workers are in reach.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> client = SimpleNamespace(direct_to_workers=None)
    >>> _direct_to_holders(client, ["tcp://127.0.0.1:4000"]), _direct_to_holders(
    ...     client, ["tcp://10.0.3.7:4000"])
    (True, False)
    """
    if client.direct_to_workers is not None:
        return bool(client.direct_to_workers)
    return all(_on_this_machine(address) for address in addresses)


def _on_this_machine(address: str) -> bool:
    from distributed.comm import get_address_host, parse_address

    if parse_address(address)[0] == "inproc":  # workers in this very process
        return True
    host = get_address_host(address)
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name, not an address
        return host == "localhost"


async def _scatter_to_each(client: Any, V: np.ndarray, addresses: list[str],
                           direct: bool) -> list:
    """Scatter one copy of ``V`` to each worker of ``addresses``, all at the same time."""
    return list(await asyncio.gather(*(
        client.scatter(V, workers=[address], hash=False, direct=direct, asynchronous=True)
        for address in addresses)))


def _sum_partials(n: int, partials: list[tuple[int, Any, Any]], reused: bool = False) -> Any:
    """Add the holders' double-double partials (rows ``lo:lo + len`` each) and round the total.

    A partial over rows no earlier one touched is copied (a sum into zeros would give it bit
    for bit, at the cost of a double-double pass): stripes, which do not overlap, are only
    placed. The others are added with :func:`two_sum_into`, so the result does not depend on
    their order. Partials rounded by their holders (``low`` is ``None``: no other overlaps
    them, see :func:`state_product`) are placed as they are; one over every row is the result.
    A first partial over every row (the symmetric layout's first holder) becomes the sum
    itself when it is writable (it is this pass's own memory): the same numbers, without two
    ``n × b`` arrays of zeros, a copy, and a third array for the rounded total. ``reused``:
    the partials' memory is written again by the next product, so the result is a new array.

    On the host the rows are added in bands of :data:`SUM_BAND_BYTES`, every partial in turn
    in each band, so that a band's arrays stay in cache; from :data:`THREADED_SUM_ELEMENTS`
    the bands are shared among this process's cores (the workers wait for the next pass
    meanwhile). Each row gets the same operations in the same order either way.
    """
    xp = array_module(partials[0][1])
    shape = (n, *partials[0][1].shape[1:])
    if all(part_low is None for _, _, part_low in partials):
        if len(partials) == 1 and partials[0][0] == 0 and partials[0][1].shape[0] == n:
            return partials[0][1].copy() if reused else partials[0][1]
        total = xp.zeros(shape, dtype=xp.float64)
        for lo, part, _ in partials:
            total[lo : lo + part.shape[0], ...] = part
        return total
    first_lo, first_high, first_low = partials[0]
    if first_lo == 0 and first_high.shape[0] == n and _writable(first_high, first_low):
        high, low, rest = first_high, first_low, partials[1:]
        touched = np.ones(n, dtype=bool)
    else:
        high, low = xp.zeros(shape, dtype=xp.float64), xp.zeros(shape, dtype=xp.float64)
        rest, touched = partials, np.zeros(n, dtype=bool)
    total = xp.empty(shape, dtype=xp.float64) if reused else high
    width = int(np.prod(shape[1:], dtype=np.int64))
    band = max(1, n if xp is not np else SUM_BAND_BYTES // (8 * max(1, width)))
    bands = [(start, min(start + band, n)) for start in range(0, n, band)]
    # one scratch a thread for every TwoSum, no taller than a band or the tallest partial
    scratch_rows = max(1, min(band, max((p[1].shape[0] for p in rest), default=0)))
    local = threading.local()

    def add_band(rows: tuple[int, int]) -> None:
        if not hasattr(local, "scratch"):
            local.scratch = [xp.empty((scratch_rows, *shape[1:]), dtype=xp.float64)
                             for _ in range(3)]
        _add_into_band(rows, rest, high, low, touched, local.scratch)
        a, b = rows
        into(xp, "add", high[a:b, ...], low[a:b, ...], out=total[a:b, ...])

    elements = width * sum(part_high.shape[0] for _, part_high, _ in rest)
    threads = min(len(bands), available_cores()) if elements >= THREADED_SUM_ELEMENTS else 1
    if threads == 1:
        for rows in bands:
            add_band(rows)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(add_band, bands))
    return total


def _add_into_band(rows: tuple[int, int], partials: list[tuple[int, Any, Any]], high: Any,
                   low: Any, touched: np.ndarray, scratch: list) -> None:
    """Add each partial's rows within ``rows`` to ``high + low``, in the partials' order.

    Rows no earlier partial touched (``touched``: rows the sum already holds) take the
    partial's values as they are; others are added by TwoSum.
    """
    a, b = rows
    seen = touched[a:b]  # this band's rows, which no other thread writes
    for lo, part_high, part_low in partials:
        start, stop = max(a, lo), min(b, lo + part_high.shape[0])
        if start >= stop:
            continue
        here, mine, theirs = slice(start, stop), slice(start - a, stop - a), \
            slice(start - lo, stop - lo)
        if seen[mine].any():
            two_sum_into(high[here, ...], low[here, ...], part_high[theirs, ...], scratch)
            low[here, ...] += part_low[theirs, ...]
        else:
            high[here, ...], low[here, ...] = part_high[theirs, ...], part_low[theirs, ...]
        seen[mine] = True


def _writable(*arrays: Any) -> bool:
    """Whether the arrays may be written (a read-only buffer from a socket may not)."""
    return all(getattr(getattr(a, "flags", None), "writeable", True) for a in arrays)
