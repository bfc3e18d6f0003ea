"""A BEIR corpus indexed once into a cached knowledge base (one ``corpus`` source of records).

The cache lives under ``<cache>/eval/<dataset>-<hash of the corpus path>/`` and remembers the
corpus file's size and modification time and the embedding model: a later run over the same
unchanged corpus does not re-read it. Vectors are only computed when a hybrid configuration
asks for them, and are then kept for later runs (lexical configurations ignore them). Asking
for another embedding model rebuilds the cache.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentic_retrieval.eval.datasets import EvalDataset
from agentic_retrieval.kb.directory import KnowledgeBaseDirectory
from agentic_retrieval.kb.loader import default_cache_dir
from agentic_retrieval.sources.local import IndexProgress

SOURCE = "corpus"
STATE_FILE = "eval-cache.json"
MAX_LISTED = 5

IndexingProgress = Callable[[IndexProgress], None]


@dataclass
class CachedCorpus:
    """Where the indexed corpus is, and what indexing reported."""

    path: Path
    indexed_now: bool
    failed: list[tuple[str, str]] = field(default_factory=list)
    """Corpus documents that could not be indexed: ``(id or FILE:LINE, reason)``."""
    embedding_model: str | None = None

    def notes(self) -> list[str]:
        """What a report should say about the corpus."""
        if not self.failed:
            return []
        listed = ", ".join(f"{key} ({reason})" for key, reason in self.failed[:MAX_LISTED])
        more = " ..." if len(self.failed) > MAX_LISTED else ""
        return [
            f"{len(self.failed)} corpus documents could not be indexed and can never be "
            f"retrieved: {listed}{more}"
        ]


def cache_path(dataset: EvalDataset, cache_dir: str | Path | None) -> Path:
    """The knowledge-base directory that caches ``dataset``'s corpus."""
    if dataset.corpus is None:
        raise ValueError("the dataset has no corpus file")
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir() / "eval"
    digest = hashlib.sha1(str(dataset.corpus.resolve()).encode(), usedforsecurity=False)
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", dataset.name).strip("-") or "dataset"
    return root / f"{name}-{digest.hexdigest()[:10]}"


def index_corpus(
    dataset: EvalDataset,
    *,
    cache_dir: str | Path | None = None,
    embedding_model: str | None = None,
    progress: IndexingProgress | None = None,
) -> CachedCorpus:
    """Index (or reuse) the dataset's corpus.

    Args:
        dataset: A BEIR dataset (with ``corpus``).
        cache_dir: Where caches live (default: ``<cache>/eval``).
        embedding_model: ``local`` or ``provider:model`` when hybrid retrieval is evaluated.
        progress: Called after each record while indexing.

    Returns:
        The cached knowledge base.
    """
    path = cache_path(dataset, cache_dir)
    assert dataset.corpus is not None  # checked by cache_path
    stat = dataset.corpus.stat()
    state = _read_state(path)
    have = state.get("embedding_model")
    if embedding_model is not None and have is not None and embedding_model != have:
        shutil.rmtree(path)  # another model's vectors: start again
        state, have = {}, None
    model = embedding_model or have
    fresh = {"corpus": str(dataset.corpus.resolve()), "size": stat.st_size}
    fresh["mtime_ns"] = stat.st_mtime_ns
    if state and all(state.get(k) == v for k, v in fresh.items()) and model == have:
        failed = [(str(k), str(r)) for k, r in state.get("failed", [])]
        return CachedCorpus(path, False, failed, model)
    directory = KnowledgeBaseDirectory(path)
    if directory.manifest_path.exists():
        directory.load()
    else:
        directory.create(name=path.name, description=f"{dataset.name} (BEIR corpus)")
    directory.add_or_update_source(
        SOURCE, description=f"{dataset.name} corpus", embeddings=model if model else None
    )
    report = directory.index_records(SOURCE, dataset.corpus, progress=progress)
    directory.close()
    failed = [(failure.path, failure.reason) for failure in report.failed]
    _write_state(path, {**fresh, "embedding_model": model, "failed": failed})
    return CachedCorpus(path, True, failed, model)


def _read_state(path: Path) -> dict[str, Any]:
    try:
        data = json.loads((path / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_state(path: Path, state: dict[str, Any]) -> None:
    temporary = path / (STATE_FILE + ".tmp")
    temporary.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    temporary.replace(path / STATE_FILE)
