"""``vectorSearch.topicGraphProfiles`` of an index (api-version ``2026-11-01-preview``).

A profile (Azure's ``VectorSearchTopicGraphProfile``) names the topic index of the index's
vector field and how its vector searches sample topics where a query says nothing::

    "vectorSearch": {"topicGraphProfiles": [{
        "name": "themes", "indexName": "docs-topics",
        "defaultKind": "balanced", "defaultMinDiversityPoolSize": 500}]}

Azure prepares the topic index offline and links it by ``indexName``; this service builds it
itself from the stored vectors, in tables of the index's own store (see
:mod:`agentic_retrieval.sources.local.store.topics`), so ``indexName`` is stored and read back
as given. The rules of Azure's model hold: ``defaultDiversityFactor`` only with ``defaultKind``
``diverse``, ``defaultMinDiversityPoolSize`` only with ``diverse`` or ``balanced``. This
service runs one vector field per index, hence one profile per index, and an index with a
profile must have that vector field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from agentic_retrieval.errors import InvalidDefinitionError
from agentic_retrieval.kb.model_connections import MODELS_VERSION
from agentic_retrieval.sources.topic_graph import (
    MAX_POOL_SIZE,
    TopicGraphSetting,
    TopicKind,
)
from agentic_retrieval.wire.models import describe_validation_error

TOPIC_GRAPH_VERSION = MODELS_VERSION
"""The api-version that defines topic graphs."""
WHERE = "vectorSearch.topicGraphProfiles"


class TopicGraphProfile(BaseModel):
    """``VectorSearchTopicGraphProfile``."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
    index_name: str = Field(min_length=1, max_length=128, pattern=r"^[a-z0-9][a-z0-9-]*$")
    default_kind: TopicKind
    default_diversity_factor: float | None = Field(default=None, ge=0.0, le=1.0)
    default_min_diversity_pool_size: int | None = Field(default=None, ge=1, le=MAX_POOL_SIZE)

    @model_validator(mode="after")
    def _fields_of_kind(self) -> TopicGraphProfile:
        if self.default_diversity_factor is not None and self.default_kind != "diverse":
            raise ValueError("defaultDiversityFactor can only be used when defaultKind is diverse")
        if self.default_min_diversity_pool_size is not None and self.default_kind == "none":
            raise ValueError(
                "defaultMinDiversityPoolSize can only be used when defaultKind is diverse or "
                "balanced"
            )
        return self

    @property
    def setting(self) -> TopicGraphSetting:
        """What a query that says nothing gets."""
        return TopicGraphSetting(
            kind=self.default_kind,
            diversity_factor=self.default_diversity_factor,
            min_diversity_pool_size=self.default_min_diversity_pool_size,
        )


def topic_graph_profiles(vector_search: Mapping[str, Any] | None) -> list[TopicGraphProfile]:
    """The profiles of an index's ``vectorSearch`` (validated when the index was stored)."""
    raw = (vector_search or {}).get("topicGraphProfiles") or []
    return [TopicGraphProfile.model_validate(p) for p in raw]


def topic_graph_default(vector_search: Mapping[str, Any] | None) -> TopicGraphSetting | None:
    """The setting the index's profile gives its searches (``None``: no profile)."""
    profiles = topic_graph_profiles(vector_search)
    return profiles[0].setting if profiles else None


def check_topic_graph_profiles(
    vector_search: Mapping[str, Any] | None, *, has_vector_field: bool
) -> None:
    """Validate ``vectorSearch.topicGraphProfiles``.

    Raises:
        InvalidDefinitionError: Naming the profile and the field.
    """
    raw = (vector_search or {}).get("topicGraphProfiles")
    if raw is None:
        return
    if not isinstance(raw, list):
        raise InvalidDefinitionError(f"{WHERE}: a list of topic graph profiles")
    if len(raw) > 1:
        raise InvalidDefinitionError(
            f"{WHERE}: this service supports one vector field per index, so one topic graph "
            f"profile; found {len(raw)}"
        )
    for position, entry in enumerate(raw):
        try:
            TopicGraphProfile.model_validate(entry)
        except ValidationError as exc:
            detail = describe_validation_error(exc)
            joined = f".{detail}" if ": " in detail else f": {detail}"
            raise InvalidDefinitionError(f"{WHERE}[{position}]{joined}") from exc
    if raw and not has_vector_field:
        raise InvalidDefinitionError(
            f"{WHERE}: a topic graph groups the vectors of a vector field; this index has none"
        )


def require_topic_graph_version(body: Mapping[str, Any], api_version: str | None) -> None:
    """Refuse ``topicGraphProfiles`` under an api-version that does not define them.

    Raises:
        InvalidDefinitionError: Naming the field and the version.
    """
    if api_version == TOPIC_GRAPH_VERSION:
        return
    vector_search = body.get("vectorSearch")
    if isinstance(vector_search, Mapping) and vector_search.get("topicGraphProfiles") is not None:
        raise InvalidDefinitionError(
            f"{WHERE}: topic graphs need api-version {TOPIC_GRAPH_VERSION}"
        )
