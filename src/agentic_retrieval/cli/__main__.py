"""``python -m agentic_retrieval.cli``: the command line without the console script."""

from agentic_retrieval.cli.app import app

app()
