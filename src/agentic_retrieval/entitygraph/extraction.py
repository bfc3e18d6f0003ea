"""Triples from text: the chat model reads each chunk against the ontology.

The output schema is built from the ontology (:func:`extraction_schema`): the model is
shown the classes and properties as enumerations, so a model with constrained decoding
cannot leave them. The reply is still checked triple by triple (:func:`check_triple`): an
unknown class or property, a subject outside the property's domain, an object outside its
range or a value that is not of the property's kind is dropped and counted by reason.

Bounded: chunks are paced to :attr:`ExtractionLimits.chunks_per_minute`, every model call
is retried at most :attr:`ExtractionLimits.attempts` times in all (a reply that is not the
schema counts as a failed attempt), and once :attr:`ExtractionLimits.max_tokens` are spent the
remaining chunks fail without a call. A chunk whose attempts all fail is a
:class:`ChunkFailure` of its document: the document's assertions are then not written at all
(:func:`sync_document`), so the graph never holds half a document.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel, Field, create_model

from agentic_retrieval.entitygraph.ontology import Ontology, Property
from agentic_retrieval.entitygraph.store import Assertion, EdgeStore
from agentic_retrieval.llm.chat_models import Usage, structured_call
from agentic_retrieval.llm.prompts import GRAPH_EXTRACTION_PROMPT

EXTRACTION_SCHEMA_NAME = "ExtractedTriples"
"""The structured-output schema's name (a scripted model's script key)."""


@dataclass(frozen=True)
class ExtractionLimits:
    """What one extraction run may spend."""

    chunks_per_minute: float | None = 60.0
    """Most chunks sent to the model per minute (``None``: no pacing)."""
    max_tokens: int | None = 200_000
    """Input plus output tokens for the whole run; chunks past it fail without a call."""
    attempts: int = 3
    """Model calls per chunk at most (the first and the retries)."""
    timeout_seconds: float = 60.0
    """Per chunk, over all its attempts."""


@dataclass(frozen=True)
class Chunk:
    """A chunk to read: its id, its document's id and its text."""

    chunk_id: str
    parent_id: str
    text: str


@dataclass(frozen=True)
class ChunkFailure:
    """A chunk the model could not read within the limits."""

    chunk_id: str
    code: str
    message: str


@dataclass
class DocumentExtraction:
    """What the model read from one document."""

    parent_id: str
    assertions: list[Assertion] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)
    """Triples left out, by reason (``unknownProperty``, ``unknownClass``...)."""
    failures: list[ChunkFailure] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)


def extraction_schema(ontology: Ontology) -> type[BaseModel]:
    """The structured-output schema: triples whose classes and properties are enumerations."""
    classes = list(ontology.classes)
    properties = list(ontology.properties)

    def one_of(names: list[str], doc: str) -> Any:
        enum: list[Any] = list(names)
        return Field(description=doc, json_schema_extra={"enum": enum})

    triple = create_model(
        "ExtractedTriple",
        subject=(str, Field(description="The subject entity's name, as the passage gives it")),
        subject_type=(str, one_of(classes, "The subject's class")),
        predicate=(str, one_of(properties, "The property")),
        object=(str, Field(description="The object entity's name, or the value")),
        object_type=(str | None, Field(default=None, description="The object's class")),
        confidence=(Annotated[float, Field(ge=0, le=1)], 1.0),
    )
    return create_model(EXTRACTION_SCHEMA_NAME, triples=(list[triple], Field(default_factory=list)))  # type: ignore[valid-type]


def check_triple(
    ontology: Ontology, graph: str, chunk: Chunk, triple: dict[str, Any]
) -> Assertion | str:
    """The triple as an assertion, or the reason it is dropped."""
    subject_type, predicate = triple.get("subject_type"), triple.get("predicate")
    subject, value = str(triple.get("subject") or "").strip(), triple.get("object")
    prop = ontology.properties.get(str(predicate))
    if prop is None:
        return "unknownProperty"
    if subject_type not in ontology.classes:
        return "unknownClass"
    if not subject or value in (None, ""):
        return "missingValue"
    if not ontology.fits(prop.domain, str(subject_type)):
        return "domainMismatch"
    confidence = float(triple.get("confidence", 1.0))
    subject_at = (subject, str(subject_type))
    if prop.kind == "datatype":
        literal = _literal(prop, value)
        if literal is None:
            return "invalidValue"
        return Assertion.create(
            graph,
            subject_at,
            prop.name,
            None,
            literal=literal,
            chunk_id=chunk.chunk_id,
            parent_id=chunk.parent_id,
            confidence=confidence,
        )
    object_type = triple.get("object_type")
    if object_type not in ontology.classes:
        return "unknownClass"
    if not ontology.fits(prop.range, str(object_type)):
        return "rangeMismatch"
    return Assertion.create(
        graph,
        subject_at,
        prop.name,
        (str(value).strip(), str(object_type)),
        chunk_id=chunk.chunk_id,
        parent_id=chunk.parent_id,
        confidence=confidence,
    )


def _literal(prop: Property, value: Any) -> str | float | bool | None:
    text = str(value).strip()
    if prop.literal == "double":
        try:
            return float(text)
        except ValueError:
            return None
    if prop.literal == "bool":
        return {"true": True, "false": False}.get(text.casefold())
    if prop.literal == "dateTime":
        try:
            return datetime.fromisoformat(text).isoformat()
        except ValueError:
            return None
    return text


class GraphExtractor:
    """Reads chunks into assertions of one graph, within :class:`ExtractionLimits`.

    Args:
        ontology: What may be extracted.
        model: The chat model (``with_structured_output`` support).
        graph_name: The graph the assertions belong to.
        limits: Pacing, token and retry bounds.
    """

    def __init__(
        self,
        ontology: Ontology,
        model: BaseChatModel,
        graph_name: str,
        limits: ExtractionLimits | None = None,
    ) -> None:
        self.ontology, self.model, self.graph_name = ontology, model, graph_name
        self.limits = limits or ExtractionLimits()
        self.schema = extraction_schema(ontology)
        self.tokens_spent = 0
        self._next_call = 0.0

    async def extract(self, parent_id: str, chunks: Sequence[Chunk]) -> DocumentExtraction:
        """Read every chunk of one document; failures are recorded, never raised."""
        result = DocumentExtraction(parent_id)
        for chunk in chunks:
            if self.limits.max_tokens is not None and self.tokens_spent >= self.limits.max_tokens:
                message = f"the extraction's token budget ({self.limits.max_tokens}) is spent"
                result.failures.append(
                    ChunkFailure(chunk.chunk_id, "TokenBudgetExhausted", message)
                )
                continue
            await self._pace()
            await self._read(chunk, result)
        return result

    async def _pace(self) -> None:
        if not self.limits.chunks_per_minute:
            return
        now = time.monotonic()
        wait = self._next_call - now
        self._next_call = max(now, self._next_call) + 60.0 / self.limits.chunks_per_minute
        if wait > 0:
            await asyncio.sleep(wait)

    async def _read(self, chunk: Chunk, result: DocumentExtraction) -> None:
        messages = [
            SystemMessage(GRAPH_EXTRACTION_PROMPT.format(ontology=self.ontology.describe())),
            HumanMessage(chunk.text),
        ]
        reply = await structured_call(
            self.model,
            self.schema,
            messages,
            timeout=self.limits.timeout_seconds,
            attempts=self.limits.attempts,
        )
        result.usage += reply.usage
        self.tokens_spent += reply.usage.input_tokens + reply.usage.output_tokens
        if reply.value is None:
            message = reply.error or "the model gave no triples"
            result.failures.append(ChunkFailure(chunk.chunk_id, reply.error_code, message))
            return
        for triple in reply.value.model_dump()["triples"]:
            checked = check_triple(self.ontology, self.graph_name, chunk, triple)
            if isinstance(checked, str):
                result.dropped[checked] += 1
            else:
                result.assertions.append(checked)


@dataclass
class ExtractionReport:
    """One document's extraction as written (or not) to the edge list."""

    parent_id: str
    triples_written: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    failures: list[ChunkFailure] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)

    @property
    def written(self) -> bool:
        """Whether the document's assertions were replaced (no chunk failed)."""
        return not self.failures


async def sync_document(
    store: EdgeStore,
    extractor: GraphExtractor,
    parent_id: str,
    chunks: Sequence[Chunk],
    content_hash: str | None = None,
) -> ExtractionReport:
    """Extract one document and replace its assertions, all or nothing.

    When any chunk fails, the document's earlier assertions stay as they were and the report
    lists the failures; otherwise they are swapped for the new ones in one transaction.
    """
    extraction = await extractor.extract(parent_id, chunks)
    report = ExtractionReport(
        parent_id, dropped=extraction.dropped, failures=extraction.failures, usage=extraction.usage
    )
    if not extraction.failures:
        report.triples_written = store.replace_document(
            extractor.graph_name, parent_id, extraction.assertions, content_hash
        )
    return report
