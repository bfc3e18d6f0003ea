"""The 2026-08-01-preview reference examples (``../shared/reference``) against our models:
their request bodies validate, their knowledge-base settings apply, and our new response
fields have their shapes. Skipped when the reference is absent (a fresh clone)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agentic_retrieval import InMemoryKnowledgeSource, KnowledgeBase
from agentic_retrieval.kb.catalog import defaults_for
from agentic_retrieval.kb.definitions import parse_knowledge_base
from agentic_retrieval.testing import Script, ScriptedChatModel
from agentic_retrieval.wire.models import RetrieveResponse
from agentic_retrieval.wire.retrieve import parse_request

EXAMPLES = (
    Path(__file__).resolve().parents[2].parent
    / "shared"
    / "reference"
    / "azure-2026-08-01-preview"
    / "examples"
)
RETRIEVE_EXAMPLES = (
    "KnowledgeBaseRetrieve.json",
    "KnowledgeBaseRetrieveWithIntents.json",
    "KnowledgeBaseRetrieveWithSourceExclusion.json",
)


def example(name: str) -> dict:
    path = EXAMPLES / name
    if not path.is_file():
        pytest.skip("../shared/reference is absent (fresh clone)")
    return json.loads(path.read_text())


@pytest.mark.parametrize("name", RETRIEVE_EXAMPLES)
def test_every_reference_retrieve_request_validates_and_its_responses_parse(name):
    data = example(name)
    request = parse_request(data["parameters"]["retrievalRequest"])
    assert request.knowledge_source_params
    for body in (r["body"] for r in data["responses"].values()):
        assert RetrieveResponse.model_validate(body).to_wire()["activity"]


def test_the_reference_request_carries_the_preview_source_controls():
    request = parse_request(example("KnowledgeBaseRetrieve.json")["parameters"]["retrievalRequest"])
    (params,) = request.knowledge_source_params or []
    assert (params.never_query_source, params.fail_on_error) == (False, False)
    assert (params.results_processing, request.max_output_documents) == ("rerank", 50)
    excluded = parse_request(
        example("KnowledgeBaseRetrieveWithSourceExclusion.json")["parameters"]["retrievalRequest"]
    )
    never = [
        p.knowledge_source_name
        for p in excluded.knowledge_source_params or []
        if p.never_query_source
    ]
    assert never == ["troubleshooting-ks", "release-notes-web"]


def test_the_reference_knowledge_base_settings_apply():
    body = example("SearchServiceCreateKnowledgeBase.json")["parameters"]["knowledgeBase"]
    context = defaults_for(parse_knowledge_base(body))
    assert context.retrieval_instructions == "Instructions for retrieval for the knowledge base."
    assert context.answer_instructions == "Instructions for answer synthesis."
    assert (context.max_runtime_seconds, context.max_output_documents) == (45.0, 8)
    assert context.max_output_tokens == 12000


def test_our_model_record_and_citation_url_have_the_reference_shapes():
    reference = example("KnowledgeBaseRetrieve.json")["responses"]["200"]["body"]
    (planning,) = [r for r in reference["activity"] if r["type"] == "modelQueryPlanning"]
    script = Script({"QueryPlan": [{"needs_retrieval": True, "queries": [{"query": "hello"}]}]})
    kb = KnowledgeBase(
        [InMemoryKnowledgeSource("docs", [{"key": "k", "content": "hello world"}])],
        chat_model=ScriptedChatModel(script=script, model_name="gpt-4o"),
    )
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]}
    ours = kb.retrieve(body).to_wire()
    (our_planning,) = [r for r in ours["activity"] if r["type"] == "modelQueryPlanning"]
    assert set(our_planning["model"]) <= set(planning["model"])
    shape = re.compile(r"^https?://[^/]+/indexes/[^/]+/docs/[^?]+\?\$select=[^&]+&api-version=.+$")
    assert all(shape.match(r["citationUrl"]) for r in reference["references"])
