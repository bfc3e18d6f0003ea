"""The ``agentic-retrieval`` command: every command registered here, in the order ``--help`` lists.

Each command lives in ``cli/commands/<command>.py`` as a plain function wrapped in
:func:`~agentic_retrieval.cli.errors.user_errors`; nothing registers itself on import, so this
module is the one list of what the command line offers. What the commands share lives beside
it: ``errors.py`` (one stderr line and an exit code), ``render.py`` (the consoles, progress,
a rendered response), ``options.py`` (options several commands take), and the option handling
of one command each (``indexing.py``, ``retrieving.py``, ``serving.py``).
"""

from __future__ import annotations

import typer

from agentic_retrieval.cli.commands import demo, index, manage, mcp, retrieve, serve
from agentic_retrieval.cli.commands import eval as eval_command

app = typer.Typer(
    name="agentic-retrieval",
    help="Agentic retrieval over your own knowledge bases: index, retrieve, serve.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # click's own help layout: rich's option table cuts long option names to fit 80 columns
    # ("--max-output-documen…"), and click wraps descriptions under whole names instead
    rich_markup_mode=None,
)
app.command()(index.index)
app.command()(retrieve.retrieve)
app.command()(serve.serve)
app.command()(mcp.mcp)
app.command()(demo.demo)
app.command("eval")(eval_command.eval_command)
app.add_typer(manage.kb_app, name="kb")
app.add_typer(manage.source_app, name="source")
