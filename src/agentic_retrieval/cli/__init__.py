"""The ``agentic-retrieval`` command line."""

from agentic_retrieval.cli import eval as _eval_command  # noqa: F401  (registers ``eval``)
from agentic_retrieval.cli import manage as _manage  # noqa: F401  (registers kb / source)
from agentic_retrieval.cli.app import app

__all__ = ["app"]
