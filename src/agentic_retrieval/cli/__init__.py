"""The ``agentic-retrieval`` command line."""

from agentic_retrieval.cli.app import app

__all__ = ["app"]
