"""How the command line fails: one line on stderr and an exit code, never a traceback.

User mistakes (unknown knowledge-base directory or source, bad filter, bad effort, no chat
model for low/medium...) print one line on stderr and exit with code 2; anything else is a bug
and exits with code 1. Every command is wrapped in :func:`user_errors`.
"""

from __future__ import annotations

import functools
import logging
import os
import sqlite3
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from agentic_retrieval.cli.render import err
from agentic_retrieval.errors import AgenticRetrievalError

EXIT_FAILED = 1
EXIT_USAGE = 2
TRACEBACK_ENV_VAR = "AGENTIC_RETRIEVAL_TRACEBACK"

F = TypeVar("F", bound=Callable[..., Any])


class UserError(Exception):
    """A mistake the user can fix; reported as one line and exit code 2.

    Not an :class:`~agentic_retrieval.errors.AgenticRetrievalError`: it is how the command
    line reports its own argument mistakes, raised and caught inside a command only.
    """


def user_errors(command: F) -> F:
    """Turn every failure into one stderr line: exit 2 for what the user can fix, else 1.

    The library's errors, missing extras, files and directories the system refuses (``OSError``)
    and unusable SQLite files are the user's to fix (exit 2). Anything else is a bug: one line
    naming it (exit 1), and the traceback only with ``$AGENTIC_RETRIEVAL_TRACEBACK=1``.
    """

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        # ImportError: a third-party package missing below a lazy import the library did not
        # wrap; its message names the package, which is enough to act on.
        except (AgenticRetrievalError, UserError, ImportError) as exc:
            _fail(f"error: {exc}", EXIT_USAGE)
        except OSError as exc:
            where = f": {exc.filename}" if exc.filename else ""
            _fail(f"error: {exc.strerror or exc}{where}", EXIT_USAGE)
        except sqlite3.Error as exc:
            _fail(f"error: an index file cannot be used ({exc}); index the source again", 2)
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:
            if os.environ.get(TRACEBACK_ENV_VAR):
                raise
            _fail(
                f"error: unexpected {type(exc).__name__}: {exc} (a bug: please report it; "
                f"{TRACEBACK_ENV_VAR}=1 shows the traceback)",
                EXIT_FAILED,
            )

    return wrapper  # type: ignore[return-value]


def _fail(message: str, code: int) -> None:
    err.print(message, markup=False, soft_wrap=True)
    raise typer.Exit(code) from None


def one_line_logging() -> None:
    """Show the library's warnings on stderr as one line each, never with a traceback.

    For the interactive commands (index, retrieve, demo): a failing source is already in the
    output; its traceback is for server logs, not for a terminal.
    """
    library = logging.getLogger("agentic_retrieval")
    if any(isinstance(h, _OneLineHandler) for h in library.handlers):
        return
    handler = _OneLineHandler()
    handler.setLevel(logging.WARNING)
    library.addHandler(handler)


class _OneLineHandler(logging.Handler):
    """``warning: <first line of the message>`` on the current ``sys.stderr``."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            lines = record.getMessage().splitlines() or [""]
            sys.stderr.write(f"warning: {lines[0]}\n")
        except Exception:  # logging must never raise into the command
            self.handleError(record)
