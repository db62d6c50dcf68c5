"""Exceptions shared by the command line and the modules it runs (``dkpca demo``).

A module of its own so that :mod:`dkpca._demo` can raise :class:`UsageError` without importing
:mod:`dkpca.cli`, which imports it (``dkpca.cli.UsageError`` stays importable).

Examples
--------
>>> from dkpca._errors import UsageError
>>> str(UsageError("--n-components must be at least 2"))
'--n-components must be at least 2'
"""

from __future__ import annotations

__all__ = ["UsageError"]


class UsageError(Exception):
    """A mistake of the user's, reported as one line and exit status 2."""
