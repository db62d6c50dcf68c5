"""``dkpca``'s entry point: parse, run the command, turn errors and signals into exit statuses."""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Sequence

import dask

from dkpca._device import DeviceUnavailableError
from dkpca._errors import (
    EXIT_INTERRUPTED,
    EXIT_TRANSIENT,
    EXIT_USAGE,
    TransientError,
    UsageError,
)
from dkpca.cli._arguments import build_parser
from dkpca.cli._commands import run_command
from dkpca.cli._signals import forget_outputs, interrupt_on_sigterm, interrupted_message

logger = logging.getLogger("dkpca")

#: Exceptions that mean the user asked for something impossible, reported in one line: an
#: output that cannot be written (a read-only folder, a file where a folder should be) too.
_USER_ERRORS = (ValueError, TypeError, FileNotFoundError, FileExistsError, PermissionError,
                NotADirectoryError, IsADirectoryError, ImportError, ConnectionError,
                DeviceUnavailableError)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``dkpca`` command; return its exit status.

    SIGTERM is treated as Ctrl-C from the first line on, before the parser's imports (a
    second or so), so that from then on it ends the command with status 130, not 143.

    Examples
    --------
    >>> main(["demo", "--n-samples", "300", "--quiet"])  # doctest: +SKIP
    0
    """
    previous_sigterm = interrupt_on_sigterm()
    forget_outputs()
    try:
        return _parse_and_run(argv)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM
        print(interrupted_message(), file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)


def _parse_and_run(argv: Sequence[str] | None) -> int:
    """Parse ``argv``, run the command, print its summary; return the exit status."""
    args = build_parser().parse_args(argv)
    device = getattr(args, "device", "cpu")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", datefmt="%H:%M:%S"))
    logger.addHandler(handler)  # dkpca's progress only; dask's own logs stay at their level
    logger.setLevel(logging.WARNING if args.quiet else logging.INFO)
    try:
        if device == "cuda" and getattr(args, "scheduler", None) is None:
            # before the embedded cluster starts (its workers use this machine's GPU): a
            # missing one is a one-line error; a running cluster's workers answer for theirs
            from dkpca._device import import_cupy

            import_cupy()
        with dask.config.set({"dkpca.device": device}):
            summary = run_command(args)
    except (TransientError, UsageError, *_USER_ERRORS) as err:
        if args.debug:
            raise
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"dkpca: error: {message}", file=sys.stderr)
        return EXIT_TRANSIENT if isinstance(err, TransientError) else EXIT_USAGE
    finally:
        logger.removeHandler(handler)
    print(summary)
    return 0
