"""The management REST API: knowledge bases, knowledge sources, indexes, documents, files.

Served by :func:`agentic_retrieval.server.create_app` when it is given a
:class:`~agentic_retrieval.kb.service.ServiceDirectory` (``serve --data DIR``); without one,
knowledge bases from ``--kb`` directories are listed and readable and every change is a 400.
"""

from fastapi import FastAPI

from agentic_retrieval.server.management.common import Management
from agentic_retrieval.server.management.documents import add_document_routes
from agentic_retrieval.server.management.files import add_file_routes
from agentic_retrieval.server.management.indexes import add_index_routes
from agentic_retrieval.server.management.knowledge_bases import add_knowledge_base_routes
from agentic_retrieval.server.management.knowledge_sources import add_knowledge_source_routes
from agentic_retrieval.server.management.statistics import add_statistics_routes


def add_management_routes(app: FastAPI, management: Management) -> None:
    """Register every management route on ``app``.

    Their errors answer through :func:`agentic_retrieval.server.errors.install_error_handlers`.
    """
    add_knowledge_base_routes(app, management)
    add_knowledge_source_routes(app, management)
    add_index_routes(app, management)
    add_document_routes(app, management)
    add_file_routes(app, management)
    add_statistics_routes(app, management)


__all__ = ["Management", "add_management_routes"]
