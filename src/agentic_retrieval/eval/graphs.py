"""Entity graphs for an evaluation: attached to a knowledge base's sources and extracted once.

A configuration with ``graph`` searches each source's entity graph beside the source. For a
knowledge-base directory or a BEIR corpus, the graph is built here from a
:class:`GraphSetup` (the ontology and the extraction model): each local source is wrapped in
an :class:`~agentic_retrieval.sources.graph.EntityGraphSource` whose edge list lives in the
evaluation cache, never in the knowledge base's own files, under a name that depends on the
ontology and the model, so a graph read by one model is never scored as another's. Reading is
incremental: an unchanged document is not read again by the same model.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from langchain_core.language_models import BaseChatModel

from agentic_retrieval.context import Context
from agentic_retrieval.entitygraph import ExtractionLimits, ExtractionReport
from agentic_retrieval.errors import EvalConfigurationError
from agentic_retrieval.eval.standin import OntologyStandInModel
from agentic_retrieval.kb.loader import default_cache_dir
from agentic_retrieval.llm.chat_models import ChatModels, model_identity
from agentic_retrieval.sources.graph import EntityGraphSource
from agentic_retrieval.sources.local import LocalKnowledgeSource

STAND_IN = "stand-in"
"""The model name that chooses :class:`~agentic_retrieval.eval.standin.OntologyStandInModel`."""


@dataclass
class GraphSetup:
    """How an evaluation builds its entity graphs.

    Args:
        ontology: The JSON-LD ontology (its text).
        model: The extraction model: an object, ``provider:model``, ``"stand-in"`` (the
            ontology's rule-based stand-in), or ``None`` for the evaluation's chat model.
        limits: What extraction may spend (default: 60 chunks a minute, no token cap; none
            for the stand-in, which costs nothing).
        ontology_name: The ontology's name in errors.
    """

    ontology: str
    model: BaseChatModel | str | None = None
    limits: ExtractionLimits | None = None
    ontology_name: str = "ontology"
    reports: list[ExtractionReport] = field(default_factory=list)
    """Every document read, over every source (filled by :func:`extract_graphs`)."""

    @classmethod
    def from_file(cls, path: str | Path, model: BaseChatModel | str | None = None) -> GraphSetup:
        """The setup for the ontology in ``path``.

        Raises:
            EvalConfigurationError: ``path`` cannot be read.
        """
        source = Path(path)
        try:
            text = source.read_text(encoding="utf-8")
        except OSError as exc:
            raise EvalConfigurationError(f"graph ontology {source}: {exc.strerror}") from None
        return cls(text, model, ontology_name=source.stem)

    def resolve_model(self, chat_model: BaseChatModel | str | None) -> BaseChatModel:
        """The extraction model (see ``model``).

        Raises:
            OntologyError: The stand-in was asked for and the ontology is not valid.
            ModelNotConfiguredError: No model is given and none is configured.
        """
        chosen = self.model if self.model is not None else chat_model
        if chosen == STAND_IN:
            return OntologyStandInModel.from_ontology(self.ontology, self.ontology_name)
        return ChatModels(default=chosen).resolve("planning", Context())

    def extraction_limits(self, model: BaseChatModel) -> ExtractionLimits:
        """The limits given, or the defaults for ``model``."""
        if self.limits is not None:
            return self.limits
        if isinstance(model, OntologyStandInModel):
            return ExtractionLimits(chunks_per_minute=None, max_tokens=None)
        return ExtractionLimits(max_tokens=None)


def graph_path(cache_dir: str | Path | None, store: Path, setup: GraphSetup, model: str) -> Path:
    """Where the edge list of ``store``'s graph by ``model`` under ``setup`` is cached."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir() / "eval"
    digest = hashlib.sha256(f"{store.resolve()}\0{setup.ontology}\0{model}".encode()).hexdigest()
    return root / "graphs" / f"{store.stem}-{digest[:16]}.sqlite"


def with_graphs(
    sources: Sequence[object], setup: GraphSetup, model: BaseChatModel, cache_dir: str | Path | None
) -> list[object]:
    """``sources`` with each local source wrapped in an entity graph (others unchanged)."""
    name = model_identity(model).model_name or type(model).__name__
    wrapped: list[object] = []
    for source in sources:
        if isinstance(source, LocalKnowledgeSource):
            path = graph_path(cache_dir, source.store.path, setup, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            wrapped.append(
                EntityGraphSource.open(
                    source,
                    setup.ontology,
                    graph_name=f"{source.name}-graph",
                    ontology_name=setup.ontology_name,
                    path=path,
                )
            )
        else:
            wrapped.append(source)
    return wrapped


async def extract_graphs(
    sources: Sequence[EntityGraphSource], setup: GraphSetup, model: BaseChatModel
) -> list[str]:
    """Bring each graph up to date (once per edge list); notes on what was read.

    Returns:
        One note per graph: the documents read, triples written, documents that failed.
    """
    notes: list[str] = []
    done: set[tuple[Path, str]] = set()
    limits = setup.extraction_limits(model)
    label = model_identity(model).model_name or type(model).__name__
    for source in sources:
        key = (source.graph.store.path, source.graph.graph_name)
        if key in done:
            continue
        done.add(key)
        reports = await source.extract(model, limits)
        setup.reports.extend(reports)
        notes.append(_note(source, reports, label))
    return notes


def _note(source: EntityGraphSource, reports: list[ExtractionReport], model: str) -> str:
    failed = [r for r in reports if not r.written]
    written = sum(r.triples_written for r in reports)
    size = source.graph.store.count(source.graph.graph_name)
    note = (
        f"graph of {source.name!r} extracted by {model!r}: {len(reports)} documents read now "
        f"({written} triples written), {size} assertions in all"
    )
    if failed:
        listed = ", ".join(f"{r.parent_id} ({r.failures[0].message})" for r in failed[:3])
        note += f"; {len(failed)} documents could not be read and have no facts: {listed}"
    return note
