"""The writer token: which process (on which host, since when) writes a temporary store.

A leaf module: :mod:`dkpca.io._location` names temporary siblings with it, and
:mod:`dkpca.io._temporaries` and :mod:`dkpca.io._completion` read it back to tell an abandoned
temporary store from one still being written.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time

__all__ = ["host_hash", "writer_token"]


def host_hash() -> str:
    """Eight hex digits naming this host (a hash of its name).

    Examples
    --------
    >>> len(host_hash())
    8
    """
    return hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]


def writer_token() -> str:
    """``HOST-PID-STARTED`` of this process, for the name of a temporary store.

    Examples
    --------
    >>> import os
    >>> writer_token().split("-")[1] == str(os.getpid())
    True
    """
    return f"{host_hash()}-{os.getpid()}-{int(time.time())}"
