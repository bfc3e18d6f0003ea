"""``graphExtractionParameters`` of a file knowledge source (api-version ``2026-11-01-preview``).

A ``file`` source may carry an entity graph: its uploads are read by its ingestion model
(``chatCompletionModel``) against an inline JSON-LD ontology into triples::

    "fileParameters": {"ingestionParameters": {
        "chatCompletionModel": {"kind": "openAICompatible", "openAICompatibleParameters": {...}},
        "graphExtractionParameters": {
            "graphName": "companies",
            "ontology": {"kind": "inline", "name": "org-onto", "value": "<JSON-LD as a string>"}}}}

Azure does not publish where the parameters sit on a knowledge source; this service reads
them at ``fileParameters.ingestionParameters.graphExtractionParameters``. The rules Azure
states hold here:

- the ontology must be JSON-LD of the subset :func:`~agentic_retrieval.entitygraph.parse_ontology`
  reads (a 400 names what is wrong);
- graph extraction is refused together with ACL ingestion (``ingestionPermissionOptions``):
  a triple would carry facts from documents some callers may not see;
- once attached, the ontology cannot be removed or changed (nor the graph's name): the
  triples already written were read against it.

``grounding`` and ``pageDegreeOfParallelism`` are accepted and stored; extraction reads one
chunk at a time, paced (:class:`~agentic_retrieval.entitygraph.ExtractionLimits`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from agentic_retrieval.entitygraph import Ontology, parse_ontology
from agentic_retrieval.errors import InvalidDefinitionError, OntologyError
from agentic_retrieval.kb.model_connections import MODELS_VERSION, OPENAI_COMPATIBLE
from agentic_retrieval.wire.models import describe_validation_error

GRAPH_VERSION = MODELS_VERSION
"""The api-version that defines entity graphs."""
WHERE = "fileParameters.ingestionParameters.graphExtractionParameters"
MAX_ONTOLOGY_CHARS = 1_000_000


class InlineOntology(BaseModel):
    """``ontology``: ``{"kind": "inline", "name", "value"}`` (the JSON-LD as a string)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["inline"]
    name: str = Field(min_length=1, max_length=128)
    value: str = Field(min_length=1, max_length=MAX_ONTOLOGY_CHARS)


class GraphExtractionParameters(BaseModel):
    """``KnowledgeSourceGraphExtractionParameters``."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    graph_name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
    ontology: InlineOntology
    grounding: dict[str, Any] | None = None
    """Stored as given; this service grounds entities by their names."""
    page_degree_of_parallelism: int | None = Field(default=None, ge=1, le=64)
    """Stored as given; extraction reads one chunk at a time, paced."""

    def parsed_ontology(self) -> Ontology:
        """The ontology, parsed (it was checked when the definition was stored)."""
        return parse_ontology(self.ontology.value, self.ontology.name)


def graph_extraction(ingestion: Mapping[str, Any] | None) -> GraphExtractionParameters | None:
    """The stored graph extraction of a source's ``ingestionParameters`` (``None``: none)."""
    raw = (ingestion or {}).get("graphExtractionParameters")
    return GraphExtractionParameters.model_validate(raw) if raw is not None else None


def check_graph_extraction(ingestion: Mapping[str, Any] | None) -> None:
    """Validate ``graphExtractionParameters`` and the rules that come with it.

    Raises:
        InvalidDefinitionError: Naming the field (the ontology's own problem included).
    """
    raw = (ingestion or {}).get("graphExtractionParameters")
    if raw is None:
        return
    if not isinstance(raw, Mapping):
        raise InvalidDefinitionError(f"{WHERE}: an object")
    try:
        params = GraphExtractionParameters.model_validate(raw)
    except ValidationError as exc:
        raise InvalidDefinitionError(f"{WHERE}.{describe_validation_error(exc)}") from None
    try:
        params.parsed_ontology()
    except OntologyError as exc:
        raise InvalidDefinitionError(
            f"{WHERE}.ontology.value: not a valid JSON-LD ontology: {exc}"
        ) from None
    if (ingestion or {}).get("ingestionPermissionOptions"):
        raise InvalidDefinitionError(
            f"{WHERE}: graph extraction cannot be combined with ingestionPermissionOptions "
            "(ACL ingestion): a triple would carry facts some callers may not see"
        )
    model = (ingestion or {}).get("chatCompletionModel")
    if not isinstance(model, Mapping):
        raise InvalidDefinitionError(
            f"{WHERE}: graph extraction needs fileParameters.ingestionParameters."
            "chatCompletionModel (the model that reads the files)"
        )
    if model.get("kind") != OPENAI_COMPATIBLE:
        raise InvalidDefinitionError(
            "fileParameters.ingestionParameters.chatCompletionModel.kind: this service runs "
            f"graph extraction with an '{OPENAI_COMPATIBLE}' model"
        )


def require_graph_version(body: Mapping[str, Any], api_version: str | None) -> None:
    """Refuse ``graphExtractionParameters`` under an api-version that does not define them.

    Raises:
        InvalidDefinitionError: Naming the field and the version.
    """
    if api_version == GRAPH_VERSION:
        return
    file_parameters = body.get("fileParameters")
    ingestion = (
        file_parameters.get("ingestionParameters") if isinstance(file_parameters, Mapping) else None
    )
    if isinstance(ingestion, Mapping) and ingestion.get("graphExtractionParameters") is not None:
        raise InvalidDefinitionError(f"{WHERE}: entity graphs need api-version {GRAPH_VERSION}")


def check_ontology_kept(
    name: str, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None
) -> None:
    """Refuse an update that removes or changes an attached ontology (or the graph's name).

    Args:
        name: The knowledge source.
        before: Its stored ``ingestionParameters``.
        after: The update's.

    Raises:
        InvalidDefinitionError: As Azure: an ontology, once attached, stays.
    """
    old = graph_extraction(before)
    if old is None:
        return
    new = graph_extraction(after)
    if new is None:
        raise InvalidDefinitionError(
            f"{WHERE}: the knowledge source '{name}' has an ontology attached; it cannot be "
            "removed (delete and re-create the source)"
        )
    if new.ontology != old.ontology or new.graph_name != old.graph_name:
        raise InvalidDefinitionError(
            f"{WHERE}.ontology: the ontology (and graphName) of the knowledge source '{name}' "
            "cannot change once attached (delete and re-create the source)"
        )
