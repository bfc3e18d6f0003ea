"""The module-level ``graph`` that ``langgraph.json`` names for LangGraph Studio.

Built from the environment, with no network and no API key:

- ``AGENTIC_RETRIEVAL_KB``: a knowledge-base directory (``agentic-retrieval index``); else the
  bundled sample corpus, indexed once into ``<cache>/sample-kb`` (see
  :func:`agentic_retrieval.kb.loader.default_cache_dir`); if the cache cannot be written, an
  in-memory source over the same files.
- ``AGENTIC_RETRIEVAL_CHAT_MODEL``: the ``provider:model`` used at effort low/medium (runs at
  effort ``minimal`` need none; set it in Studio's configuration panel per run).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from agentic_retrieval.graph.builder import build_graph
from agentic_retrieval.kb.loader import (
    build_sample_kb,
    open_knowledge_base,
    sample_corpus_dir,
)
from agentic_retrieval.sources.memory import InMemoryKnowledgeSource

logger = logging.getLogger(__name__)

KB_ENV_VAR = "AGENTIC_RETRIEVAL_KB"


def make_graph() -> Any:
    """Build the graph Studio serves, from ``$AGENTIC_RETRIEVAL_KB`` or the sample corpus."""
    configured = os.environ.get(KB_ENV_VAR)
    if configured:
        return open_knowledge_base(configured).graph
    try:
        directory = build_sample_kb()
    except OSError as exc:
        logger.warning("cannot cache the sample knowledge base (%s); using memory", exc)
        return build_graph(_in_memory_sample_sources())
    return open_knowledge_base(directory.path, embeddings=False).graph


def _in_memory_sample_sources() -> list[InMemoryKnowledgeSource]:
    import json

    corpus = sample_corpus_dir()
    entries = json.loads((corpus / "sources.json").read_text(encoding="utf-8"))
    sources = []
    for entry in entries:
        files = sorted((corpus / entry["folder"]).glob("*.md"))
        documents = [_document(path, entry["folder"]) for path in files]
        sources.append(
            InMemoryKnowledgeSource(
                entry["name"], documents, description=entry["description"], kind="local"
            )
        )
    return sources


def _document(path: Path, folder: str) -> dict[str, str]:
    text = path.read_text(encoding="utf-8")
    title = next(
        (line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("#")), path.stem
    )
    return {"key": f"{folder}-{path.stem}", "title": title, "content": text}


graph = make_graph()
