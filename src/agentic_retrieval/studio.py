"""The module-level ``graph`` that ``langgraph.json`` names for LangGraph Studio.

Built from the environment, with no network and no API key:

- ``AGENTIC_RETRIEVAL_KB``: a knowledge-base directory (``agentic-retrieval index``), a
  relative path being relative to the directory ``langgraph dev`` was started in; else the
  bundled sample corpus, indexed once into ``<cache>/sample-kb`` (see
  :func:`agentic_retrieval.kb.loader.default_cache_dir`); if the cache cannot be written, an
  in-memory source over the same files.
- ``AGENTIC_RETRIEVAL_CHAT_MODEL``: the ``provider:model`` used at effort low/medium (or set
  ``chat_model`` in Studio's configuration panel per run). Without one, a run with no effort
  set takes the model-free tier (``minimal``) and its ``agenticReasoning`` record says so.

When the configuration cannot work (no knowledge base at that path, an unknown reranker...),
the dev server stops with one line saying why, instead of a traceback and a server whose
worker is dead.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
from pathlib import Path
from typing import Any, NoReturn

from agentic_retrieval.context import DEFAULTS_KEY, settings_of
from agentic_retrieval.errors import AgenticRetrievalError, KnowledgeBaseDirectoryError
from agentic_retrieval.kb.loader import (
    build_sample_kb,
    open_knowledge_base,
    sample_corpus_dir,
)
from agentic_retrieval.knowledge_base import KnowledgeBase
from agentic_retrieval.sources.memory import InMemoryKnowledgeSource
from agentic_retrieval.wiring.builder import build_graph

logger = logging.getLogger(__name__)

KB_ENV_VAR = "AGENTIC_RETRIEVAL_KB"


def make_graph() -> Any:
    """Build the graph Studio serves, from ``$AGENTIC_RETRIEVAL_KB`` or the sample corpus.

    Raises:
        AgenticRetrievalError: The configuration cannot work; the message says what to fix.
    """
    configured = os.environ.get(KB_ENV_VAR)
    if configured:
        path = Path(configured).expanduser().resolve()  # against the user's directory
        try:
            return with_settings(open_knowledge_base(path))
        except KnowledgeBaseDirectoryError as exc:
            raise KnowledgeBaseDirectoryError(
                f"{KB_ENV_VAR}={configured}: {exc} (a relative path is relative to the "
                f"directory langgraph dev was started in, here {Path.cwd()}; create one with "
                f"'agentic-retrieval index --kb {path} --source NAME FILES...')"
            ) from exc
    try:
        directory = build_sample_kb()
    except OSError as exc:
        logger.warning("cannot cache the sample knowledge base (%s); using memory", exc)
        return build_graph(_in_memory_sample_sources())
    return with_settings(open_knowledge_base(directory.path, embeddings=False))


def with_settings(kb: KnowledgeBase) -> Any:
    """``kb``'s graph, applying the knowledge base's settings where a run is silent.

    Studio sends its configuration panel as the run's context; the directory's settings
    (instructions, retrieve defaults, reranker threshold...) fill in what it leaves unset,
    as they do for the CLI and the server.
    """
    return kb.graph.with_config(configurable={DEFAULTS_KEY: settings_of(kb.defaults)})


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


def _stop_serving(reason: str) -> NoReturn:
    """Print one line, last, and stop the dev server (not only this worker) with a failure.

    Raising would print the server's traceback and leave ``langgraph dev``'s reloader running
    a dead worker; exiting here leaves one line, with exit status 2. Under the reloader
    (``langgraph dev`` without ``--no-reload``) this process is a worker and its parent, the
    ``langgraph dev`` process, must stop too: asked politely (SIGTERM) it shuts down cleanly
    and exits 0, so a script could not tell a broken configuration from a stopped server.
    It is killed instead (SIGKILL: exit status 137); it holds nothing that needs a clean
    shutdown, since this worker has not started serving.
    """
    sys.stderr.write(f"agentic-retrieval Studio: {reason}\n")
    sys.stderr.flush()
    if multiprocessing.parent_process() is not None:
        os.kill(os.getppid(), signal.SIGKILL)
    os._exit(2)


def _graph_for_server() -> Any:
    try:
        return make_graph()
    except AgenticRetrievalError as exc:
        if "langgraph_api" not in sys.modules:  # imported directly (a test, a script): raise
            raise
        _stop_serving(str(exc))


graph = _graph_for_server()
