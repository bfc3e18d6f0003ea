"""The structured outputs the graph asks chat models for.

Their class names are the tool / JSON-schema names the model sees, so keep them stable:
scripted test models and OpenAI-compatible stand-ins answer by these names.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class PlannedQuery(BaseModel):
    """One focused search query."""

    query: str = Field(description="A standalone search query for one aspect of the question.")
    goal: str = Field(default="", description="What this query should find.")
    knowledge_sources: list[str] = Field(
        default_factory=list,
        description="Names of the knowledge sources to search; empty means all.",
    )
    filter: str = Field(
        default="",
        description="An OData filter for an explicit user constraint; empty if none.",
    )


class QueryPlan(BaseModel):
    """Whether to retrieve, and the queries to run."""

    needs_retrieval: bool = Field(
        description="False for greetings, small talk or questions the conversation answers."
    )
    assistant_message: str = Field(
        default="", description="The reply to send when no retrieval is needed."
    )
    queries: list[PlannedQuery] = Field(
        default_factory=list, description="The search queries, most important first."
    )


class SupportedPoint(BaseModel):
    """A key point and the passages that support it."""

    point: str
    ref_ids: list[int] = Field(default_factory=list)


class EvidenceAssessment(BaseModel):
    """Whether the passages suffice, and what to search next if not."""

    is_sufficient: bool
    confidence: float = Field(ge=0.0, le=1.0)
    key_points: list[SupportedPoint] = Field(default_factory=list)
    missing_information: list[str] = Field(default_factory=list)
    followup_queries: list[str] = Field(
        default_factory=list, description="New search queries for what is missing."
    )


class SynthesizedAnswer(BaseModel):
    """The final answer."""

    answer: str = Field(description="Markdown answer citing passages as [ref_id:N].")
