"""Serve knowledge bases over HTTP: the retrieve REST API and an MCP endpoint per KB.

Needs the ``[server]`` extra (FastAPI, uvicorn, mcp)::

    from agentic_retrieval.server import ServerSettings, create_app

    app = create_app(knowledge_base, settings=ServerSettings(api_keys=["secret"]))
"""

from agentic_retrieval.server.app import create_app
from agentic_retrieval.server.auth import ApiKeys
from agentic_retrieval.server.settings import ServerSettings

__all__ = ["ApiKeys", "ServerSettings", "create_app"]
