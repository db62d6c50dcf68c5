"""Exceptions shared by the command line and the modules it runs, and its exit statuses.

A module of its own so that :mod:`dkpca._demo` and :mod:`dkpca.cluster` can raise these without
importing :mod:`dkpca.cli`, which imports them (``dkpca.cli.UsageError`` stays importable).
The exit statuses let a batch system tell what to retry: a user error never succeeds on a
rerun, a transient failure of the infrastructure may, and an interrupted run was stopped.

Examples
--------
>>> from dkpca._errors import UsageError
>>> str(UsageError("--n-components must be at least 2"))
'--n-components must be at least 2'
"""

from __future__ import annotations

__all__ = ["EXIT_INTERRUPTED", "EXIT_TRANSIENT", "EXIT_USAGE", "TransientError", "UsageError"]

#: A mistake of the user's: a rerun of the same command fails the same way.
EXIT_USAGE = 2
#: The infrastructure failed and may recover (``EX_TEMPFAIL`` of ``sysexits.h``): retry.
EXIT_TRANSIENT = 75
#: Stopped by Ctrl-C or SIGTERM (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A mistake of the user's, reported as one line and exit status 2."""


class TransientError(ConnectionError):
    """A failure that may pass: the scheduler unreachable, or the connection to it lost.

    Reported as one line and exit status 75, which the deployment's Jobs retry.
    """
