"""A knowledge base directory's sources as a running server sees them: following the manifest.

``agentic-retrieval index --kb DIR --source new ...`` while ``serve --kb DIR`` runs adds a
source to the manifest. :class:`LiveSources` is the sources mapping of a knowledge base opened
from a directory: at most once per ``interval`` seconds, an access compares the manifest's
identity (a ``stat``) with the one it read, and when it changed, reads it again: new sources
are opened and searched from the next request on, removed ones are no longer searched,
changed descriptions are what the planner reads. Sources that stay keep their open store
(and its caches); runs already under way keep the set they started with.

The knowledge base's own name and its routes do not change without a restart.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping

from agentic_retrieval.errors import AgenticRetrievalError
from agentic_retrieval.kb.directory import EmbeddingsChoice, KnowledgeBaseDirectory
from agentic_retrieval.sources.base import KnowledgeSource

logger = logging.getLogger(__name__)

CHECK_INTERVAL_SECONDS = 1.0
"""How often (at most) the manifest is checked for changes."""


class LiveSources(Mapping[str, KnowledgeSource]):
    """The sources of ``directory``, re-read when its manifest changes.

    Args:
        directory: The loaded knowledge-base directory (its sources are opened from it).
        embeddings: As for :meth:`KnowledgeBaseDirectory.open_sources`.
        interval: Least time between two checks of the manifest (default:
            ``CHECK_INTERVAL_SECONDS``).
    """

    def __init__(
        self,
        directory: KnowledgeBaseDirectory,
        embeddings: EmbeddingsChoice = None,
        interval: float | None = None,
    ) -> None:
        self.directory = directory
        self.embeddings = embeddings
        self.interval = CHECK_INTERVAL_SECONDS if interval is None else interval
        self._lock = threading.Lock()
        self._identity = _identity(directory.manifest_path)
        self._sources: dict[str, KnowledgeSource] = {
            name: directory.open_source(name, embeddings) for name in directory.source_names
        }
        self._checked = time.monotonic()
        self._failure = ""

    def __getitem__(self, name: str) -> KnowledgeSource:
        return self._current()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._current())

    def __len__(self) -> int:
        return len(self._current())

    def _current(self) -> dict[str, KnowledgeSource]:
        if time.monotonic() - self._checked < self.interval:
            return self._sources
        with self._lock:
            self._checked = time.monotonic()
            identity = _identity(self.directory.manifest_path)
            if identity != self._identity:
                self._identity = identity
                self._reload()
        return self._sources

    def _reload(self) -> None:
        try:
            self.directory.load()
            fresh: dict[str, KnowledgeSource] = {}
            for entry in self.directory.sources:
                source = self.directory.open_source(entry.name, self.embeddings)
                source.description = entry.description
                fresh[entry.name] = source
        except AgenticRetrievalError as exc:
            # e.g. a new source whose index is not written yet: keep serving what works
            if str(exc) != self._failure:
                self._failure = str(exc)
                logger.warning(
                    "knowledge base %s: keeping its sources as they were: %s",
                    self.directory.path,
                    exc,
                )
            self._identity = None  # so the next check tries again
            return
        self._failure = ""
        added = sorted(set(fresh) - set(self._sources))
        removed = sorted(set(self._sources) - set(fresh))
        if added or removed:
            logger.info(
                "knowledge base %s: sources added: %s; removed: %s",
                self.directory.path,
                ", ".join(added) or "none",
                ", ".join(removed) or "none",
            )
        self._sources = fresh  # swapped whole: a run iterating the old mapping is unaffected


def _identity(path: os.PathLike[str]) -> tuple[int, int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns)
