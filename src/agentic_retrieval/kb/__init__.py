"""Knowledge bases on disk: directories of sources, loading them, the bundled sample corpus."""

from agentic_retrieval.errors import KnowledgeBaseDirectoryError
from agentic_retrieval.kb.directory import KnowledgeBaseDirectory
from agentic_retrieval.kb.loader import open_knowledge_base

__all__ = ["KnowledgeBaseDirectory", "KnowledgeBaseDirectoryError", "open_knowledge_base"]
