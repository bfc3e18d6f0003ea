"""Open a knowledge-base directory as a :class:`KnowledgeBase`, and build the bundled sample.

The sample knowledge base indexes ``sample_corpus/`` (Harborline Transit: ``riders`` and
``operations``) lexically into a directory under the user's cache, once; later calls only
re-check file hashes. It needs no network, no API key and no optional extra.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel

from agentic_retrieval.embeddings import CACHE_ENV_VAR as CACHE_ENV_VAR
from agentic_retrieval.embeddings import LOCAL, library_cache_dir
from agentic_retrieval.errors import KnowledgeBaseDirectoryError
from agentic_retrieval.kb.directory import EmbeddingsChoice, KnowledgeBaseDirectory
from agentic_retrieval.kb.live import LiveSources
from agentic_retrieval.knowledge_base import KnowledgeBase
from agentic_retrieval.rerankers.base import Reranker
from agentic_retrieval.rerankers.registry import reranker_by_name
from agentic_retrieval.sources.base import KnowledgeSource
from agentic_retrieval.sources.local import ProgressCallback

SAMPLE_KB_NAME = "harborline"
SAMPLE_KB_DESCRIPTION = "Harborline Transit (Port Calloway): rider guides and staff procedures."


def open_knowledge_base(
    path: str | Path,
    *,
    sources: Sequence[str] | None = None,
    chat_model: BaseChatModel | str | None = None,
    embeddings: EmbeddingsChoice = None,
    reranker: Reranker | str | None = None,
    enforce_permissions: bool = False,
) -> KnowledgeBase:
    """Open the knowledge base stored in directory ``path``.

    Args:
        path: A directory created by ``agentic-retrieval index`` or
            :class:`KnowledgeBaseDirectory`.
        sources: Only these sources (default: all of them).
        chat_model: The chat model (default: ``$AGENTIC_RETRIEVAL_CHAT_MODEL`` when needed).
        embeddings: Embeddings for sources indexed with vectors (see
            :data:`~agentic_retrieval.kb.directory.EmbeddingsChoice`).
        reranker: A reranker, or a name from :data:`~agentic_retrieval.rerankers.registry.
            RERANKER_NAMES` (default: ``$AGENTIC_RETRIEVAL_RERANKER``, else ``default``).
        enforce_permissions: Fail closed on document permissions (see
            :class:`~agentic_retrieval.KnowledgeBase`).

    Without ``sources``, the knowledge base follows its directory's manifest: a source that
    ``agentic-retrieval index`` adds while a server runs is searched within a second, a
    removed one no longer is (see :mod:`agentic_retrieval.kb.live`).

    Raises:
        KnowledgeBaseDirectoryError: No knowledge base there, it has no sources, or an
            unknown source name.
    """
    directory = KnowledgeBaseDirectory(path).load()
    names = list(sources) if sources else directory.source_names
    if not names:
        raise KnowledgeBaseDirectoryError(
            f"knowledge base {directory.name!r} at {directory.path} has no sources yet: "
            "add one with 'agentic-retrieval index'"
        )
    chosen = reranker if isinstance(reranker, Reranker) else reranker_by_name(reranker)
    # without a choice of sources, the graph reads the manifest's current ones on every run
    opened: Mapping[str, KnowledgeSource] | list[KnowledgeSource] = (
        [directory.open_source(n, embeddings) for n in names]
        if sources
        else LiveSources(directory, embeddings)
    )
    return KnowledgeBase(
        opened,
        name=directory.name,
        description=directory.description,
        chat_model=chat_model,
        reranker=chosen,
        defaults=directory.settings.context(),
        enforce_permissions=enforce_permissions,
    )


def default_cache_dir() -> Path:
    """Where cached knowledge bases live.

    ``$AGENTIC_RETRIEVAL_CACHE``, else ``$XDG_CACHE_HOME/agentic-retrieval``, else
    ``~/.cache/agentic-retrieval``.
    """
    return library_cache_dir()


def sample_corpus_dir() -> Path:
    """The sample corpus shipped inside the package."""
    return Path(str(resources.files("agentic_retrieval.kb") / "sample_corpus"))


def sample_questions() -> list[dict[str, Any]]:
    """The demo questions: ``id``, ``question``, ``files`` (expected), ``expected`` (text)."""
    questions: list[dict[str, Any]] = json.loads(
        (sample_corpus_dir() / "questions.json").read_text(encoding="utf-8")
    )
    return questions


def build_sample_kb(
    path: str | Path | None = None,
    progress: ProgressCallback | None = None,
    embeddings: bool = False,
) -> KnowledgeBaseDirectory:
    """Create (once) and refresh the sample knowledge base directory.

    Args:
        path: Where to keep it (default: ``<cache>/sample-kb``).
        progress: Called after each file while indexing.
        embeddings: Index vectors of the bundled model too (hybrid, as ``index`` does by
            default); ``False`` keeps the sample lexical (the tests' and Studio's fixture).

    Returns:
        The loaded directory; indexing is incremental, so a second call only re-hashes files.

    Raises:
        KnowledgeBaseDirectoryError: ``path`` holds another knowledge base (the sample is
            never written into a user's knowledge base).
    """
    target = Path(path) if path is not None else default_cache_dir() / "sample-kb"
    directory = KnowledgeBaseDirectory(target)
    if directory.manifest_path.exists():
        directory.load()
        if directory.name != SAMPLE_KB_NAME:
            raise KnowledgeBaseDirectoryError(
                f"{target} holds the knowledge base {directory.name!r}, not the sample; "
                "choose an empty directory for the demo"
            )
    else:
        directory.create(name=SAMPLE_KB_NAME, description=SAMPLE_KB_DESCRIPTION)
    corpus = sample_corpus_dir()
    for entry in json.loads((corpus / "sources.json").read_text(encoding="utf-8")):
        directory.add_or_update_source(
            entry["name"],
            description=entry["description"],
            embeddings=LOCAL if embeddings else None,
        )
        directory.index(
            entry["name"],
            [corpus / entry["folder"]],
            progress=progress,
            embeddings=None if embeddings else False,
        )
    return directory
