"""``agentic-retrieval mcp``: one knowledge base as an MCP server over stdio."""

from __future__ import annotations

from agentic_retrieval.cli.errors import user_errors
from agentic_retrieval.cli.options import KbOption
from agentic_retrieval.cli.serving import server_extra


@user_errors
def mcp(kb: KbOption) -> None:
    """Serve the knowledge base in DIR as an MCP server over stdio (for desktop clients)."""
    from agentic_retrieval.kb.loader import open_knowledge_base

    server_extra()
    from agentic_retrieval.server.mcp import run_stdio

    run_stdio(open_knowledge_base(kb))
