"""Temporary stores of atomic writes: who writes each, and sweeping those nobody writes.

Every temporary store beside a destination is named after its writer:
``.NAME.dkpca-tmp-HOST-PID-STARTED-RANDOM``, with ``HOST`` a hash of the host name, ``PID``
the writing process and ``STARTED`` the second it started writing. The name is the record: it
is there from the store's first byte, needs no write of its own, and cannot be left half
written (a record inside the store would also stop zarr from creating its group there). A
process killed outright (SIGKILL, a lost pod) leaves its temporary store behind; the next
write to the same destination (any atomic write: ``dkpca.save``, every command's outputs)
removes the siblings whose writer is provably gone, and logs each:

- on this host, a writer whose process no longer exists, or whose process ID now belongs to
  a process started after the write began (the ID was reused: a container restarted with the
  same host name runs dkpca as the same process ID again);
- on another host (a replaced pod, another machine), a writer that started more than
  :data:`FOREIGN_WRITER_AGE` seconds ago, since its process cannot be seen from here;
- a sibling named before writers were recorded, last changed more than that age ago.

A live writer's temporary store is never touched. The ``.NAME.dkpca-old-*`` sibling that an
overwrite moves the previous version to is never swept: if its writer died between the two
renames, it is the only copy of that version.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from typing import TYPE_CHECKING, Any

import psutil

from dkpca.io._writer import host_hash

if TYPE_CHECKING:
    from dkpca.io._location import Location

__all__ = ["FOREIGN_WRITER_AGE", "sweep_stale_siblings", "writer_gone"]

logger = logging.getLogger(__name__)

#: Seconds after which the temporary store of another host's writer is taken as abandoned:
#: far longer than any write, while a killed run is usually rerun much later.
FOREIGN_WRITER_AGE = 24 * 3600.0

_WRITER = re.compile(r"-tmp-(?:(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-(?P<started>\d+)-)?[0-9a-f]+$")


#: Seconds a live process may seem to have started after its own token: the token's start is
#: rounded down to the second, and a process's start time is known to about a clock tick.
_START_SLACK = 2.0


def _process_started(pid: int) -> float | None:
    """When the live process ``pid`` started (seconds since the epoch); ``None`` if none lives.

    ``-inf`` when it lives but its start time cannot be read: then it may be the writer.
    """
    try:
        return psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:  # a zombie too: it has exited
        return None
    except (psutil.AccessDenied, OSError):
        return float("-inf")


def _abandoned(fs: Any, path: str, name: str, now: float, max_age: float) -> str | None:
    """Why the temporary store ``name`` is abandoned, or ``None`` if it may be in use."""
    match = _WRITER.search(name)
    if match is None:
        return None
    if match["host"] is None:  # named before writers were recorded: judge by its age
        try:
            age = now - fs.modified(path).timestamp()
        except (NotImplementedError, FileNotFoundError, OSError):
            return None  # no age to judge by: keep it
        return f"no writer recorded, last changed {age / 3600:.1f} h ago" if age > max_age else None
    return writer_gone(f'{match["host"]}-{match["pid"]}-{match["started"]}', now, max_age)


def writer_gone(token: str, now: float, max_age: float = FOREIGN_WRITER_AGE) -> str | None:
    """Say why the writer ``HOST-PID-STARTED`` is provably gone; ``None`` if it may be alive.

    The token is :func:`~dkpca.io._writer.writer_token`'s.

    Examples
    --------
    >>> import time
    >>> from dkpca.io._writer import writer_token
    >>> writer_gone(writer_token(), time.time()) is None  # this process: alive
    True
    """
    host, pid, started = token.split("-")
    if host == host_hash():
        created = _process_started(int(pid))
        if created is None:
            return f"its writer, process {pid}, is gone"
        if created > int(started) + _START_SLACK:  # the process ID was reused
            return (f"its writer, process {pid}, is gone: the process {pid} now running "
                    f"started after the write began")
        return None
    age = now - int(started)
    return f"its writer on another host started {age / 3600:.1f} h ago" if age > max_age else None


def sweep_stale_siblings(target: Location, max_age: float = FOREIGN_WRITER_AGE) -> list[str]:
    """Remove the abandoned temporary stores beside ``target``; return what was removed.

    Examples
    --------
    >>> from dkpca.io import Location
    >>> sweep_stale_siblings(Location("memory://doc/sweep/out.zarr"))
    []
    """
    fs, path = target.filesystem()
    parent = path.rstrip("/").rpartition("/")[0] or "/"
    prefix = f".{target.name}.dkpca-tmp-"
    try:
        siblings = fs.ls(parent, detail=False)
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed = []
    now = time.time()
    for sibling in siblings:
        name = sibling.rstrip("/").rpartition("/")[2]
        if not name.startswith(prefix):
            continue
        reason = _abandoned(fs, sibling, name, now, max_age)
        if reason is None:
            continue
        with contextlib.suppress(FileNotFoundError):  # another sweeper was first
            fs.rm(sibling, recursive=True)
            logger.warning("removed the abandoned temporary %s (%s)", sibling, reason)
            removed.append(sibling)
    return removed
