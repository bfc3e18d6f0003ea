"""Optional capabilities declared in the protocols: what the graph does when a plug-in has them."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import SystemMessage
from tests.fakes import TOY_DOCS, user

from agentic_retrieval import InMemoryKnowledgeSource, KnowledgeBase
from agentic_retrieval.rerankers import LexicalReranker, LLMGraderReranker
from agentic_retrieval.rerankers.base import Reranker, UsageReportingReranker
from agentic_retrieval.sources.base import FilterableKnowledgeSource, Hit, KnowledgeSource
from agentic_retrieval.testing import ScriptedChatModel

PLAN = {"needs_retrieval": True, "queries": [{"query": "day pass price"}]}


class FilterableToySource(InMemoryKnowledgeSource):
    """The toy corpus, naming its filterable fields as a plain attribute."""

    filterable_fields = ("category", "year")


class PropertyFilterableSource(InMemoryKnowledgeSource):
    """The toy corpus, naming its filterable fields through a property."""

    @property
    def filterable_fields(self) -> Sequence[str]:
        return ["category"]


class CountingReranker:
    """Scores by position and reports a fixed token cost per call."""

    name = "counting"

    def __init__(self) -> None:
        self.calls = 0

    async def ascore(self, query: str, hits: Sequence[Hit]) -> list[float]:
        return [4.0 - min(i, 4) for i in range(len(hits))]

    async def ascore_with_usage(
        self, query: str, hits: Sequence[Hit]
    ) -> tuple[list[float], dict[str, int]]:
        self.calls += 1
        return await self.ascore(query, hits), {"inputTokens": 70, "outputTokens": 5}


def planning_prompt(model: ScriptedChatModel) -> str:
    (name, messages), *_ = model.script.calls
    assert name == "QueryPlan"
    system = next(m for m in messages if isinstance(m, SystemMessage))
    return str(system.content)


def test_protocol_checks_recognise_the_optional_capabilities():
    plain = InMemoryKnowledgeSource("plain", TOY_DOCS)
    attribute = FilterableToySource("transit", TOY_DOCS)
    prop = PropertyFilterableSource("transit", TOY_DOCS)
    assert isinstance(plain, KnowledgeSource)
    assert not isinstance(plain, FilterableKnowledgeSource)
    assert isinstance(attribute, FilterableKnowledgeSource)
    assert isinstance(prop, FilterableKnowledgeSource)

    grader = LLMGraderReranker(ScriptedChatModel(script={}))
    assert isinstance(grader, UsageReportingReranker)
    assert isinstance(CountingReranker(), UsageReportingReranker)
    assert isinstance(LexicalReranker(), Reranker)
    assert not isinstance(LexicalReranker(), UsageReportingReranker)


def test_planner_sees_the_filterable_fields_a_source_declares():
    sources = [
        FilterableToySource("transit", TOY_DOCS, description="Tram and bike rules"),
        InMemoryKnowledgeSource("faq", TOY_DOCS[:1], description="Customer FAQ"),
    ]
    model = ScriptedChatModel(script={"QueryPlan": [PLAN]})
    KnowledgeBase(sources, chat_model=model).retrieve({"messages": [user("day pass price?")]})
    prompt = planning_prompt(model)
    assert "- transit: Tram and bike rules (filterable fields: category, year)" in prompt
    assert "- faq: Customer FAQ\n" in prompt + "\n"
    assert "faq: Customer FAQ (filterable" not in prompt


def test_reranker_usage_reaches_the_semantic_reranker_record():
    reranker = CountingReranker()
    kb = KnowledgeBase([InMemoryKnowledgeSource("transit", TOY_DOCS)], reranker=reranker)
    response = kb.retrieve(
        {"intents": [{"search": "day pass"}, {"search": "bike late fee"}]},
    )
    record = next(r for r in response.activity if r.type == "semanticReranker")
    # one scoring call per subquery, each reporting 70 + 5 tokens
    assert reranker.calls == 2
    assert (record.model_extra["inputTokens"], record.model_extra["outputTokens"]) == (140, 10)


def test_reranker_without_usage_reports_no_tokens():
    kb = KnowledgeBase([InMemoryKnowledgeSource("transit", TOY_DOCS)], reranker=LexicalReranker())
    response = kb.retrieve({"intents": [{"search": "day pass"}]})
    record = next(r for r in response.activity if r.type == "semanticReranker")
    assert "inputTokens" not in record.model_extra
    assert "outputTokens" not in record.model_extra
