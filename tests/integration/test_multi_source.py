"""One knowledge base over three kinds of source: local SQLite, Azure (stand-in), LangChain.

A scripted planner sends one subquery to the local handbook and one to the Azure index;
``alwaysQuerySource`` adds the LangChain store to both. Checks that every reference links to the
activity record of the source that found it, that per-source ``filterAddOn``,
``includeReferences`` and ``includeReferenceSourceData`` apply to their own source only, and that
a failing source gives a partial (206) response with the others' results.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("azure.search.documents", reason="needs the [azure] extra")

from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore
from tests.fakes import EARTH_DOCUMENTS
from tests.integration.azure_standin import AzureSearchStandIn, index_definition

from agentic_retrieval import Context, KnowledgeBase, RetrieveResponse
from agentic_retrieval.sources.azure import AzureSearchKnowledgeSource
from agentic_retrieval.sources.langchain import LangChainKnowledgeSource
from agentic_retrieval.sources.local.source import LocalKnowledgeSource
from agentic_retrieval.testing import HashingEmbeddings, ScriptedChatModel

pytestmark = pytest.mark.integration

KEY = "multi-source-admin-key"

NOTES = [
    Document(
        id="volcano",
        page_content="Volcano eruptions spread ash over the island.",
        metadata={"title": "Volcanoes", "topic": "geology"},
    ),
    Document(
        id="reef",
        page_content="Coral reef bleaching follows warm ocean water.",
        metadata={"title": "Reefs", "topic": "ocean"},
    ),
    Document(
        id="ocean-ash",
        page_content="Volcanic ash and river silt fall into the ocean.",
        metadata={"title": "Ash at sea", "topic": "ocean"},
    ),
]

PLAN = {
    "needs_retrieval": True,
    "queries": [
        {"query": "vacation days carry over", "knowledge_sources": ["handbook"]},
        {"query": "river delta floods", "knowledge_sources": ["earth-index"]},
    ],
}

QUESTION = {
    "role": "user",
    "content": [
        {"type": "text", "text": "Do vacation days carry over, and where do rivers flood?"}
    ],
}


@pytest.fixture
def standin() -> Iterator[AzureSearchStandIn]:
    server = AzureSearchStandIn(KEY)
    server.add_index(
        index_definition(
            "earth",
            filterable={"category": "Edm.String", "year": "Edm.Int32"},
            semantic_configuration="earth-semantic",
        ),
        EARTH_DOCUMENTS,
    )
    with server:
        yield server


@pytest.fixture
def knowledge_base(tmp_path: Path, standin: AzureSearchStandIn) -> Iterator[KnowledgeBase]:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "vacation.txt").write_text(
        "Vacation policy\n\nEmployees accrue two vacation days per month. Unused vacation days "
        "carry over to the next year, up to ten days.",
        encoding="utf-8",
    )
    (docs / "expenses.txt").write_text(
        "Expense policy\n\nTravel expenses are reimbursed within thirty days.", encoding="utf-8"
    )
    handbook = LocalKnowledgeSource(
        "handbook",
        tmp_path / "handbook.sqlite",
        description="HR handbook: vacation, expenses",
        create=True,
    )
    assert handbook.index([docs]).ok
    index = AzureSearchKnowledgeSource(
        "earth-index",
        endpoint=standin.endpoint,
        index_name="earth",
        credential=KEY,
        description="Earth science index",
        semantic_configuration="earth-semantic",
        metadata_fields=("category", "year"),
        source_filter="year ge 2000",
        retry_total=0,
    )
    store = InMemoryVectorStore(HashingEmbeddings())
    store.add_documents(NOTES)
    notes = LangChainKnowledgeSource("earth-notes", store, description="Field notes")
    model = ScriptedChatModel(script={"QueryPlan": [PLAN]})
    # no threshold: these tests follow every hit, weak ones included, to the source that found it
    yield KnowledgeBase(
        [handbook, index, notes], chat_model=model, defaults=Context(reranker_threshold=None)
    )
    handbook.close()
    index.close()


def request(**params: dict[str, Any]) -> dict[str, Any]:
    return {
        "messages": [QUESTION],
        "includeActivity": True,
        "knowledgeSourceParams": [
            {"knowledgeSourceName": name, **options} for name, options in params.items()
        ],
    }


def sources_by_reference(response: RetrieveResponse) -> dict[str, tuple[str, str]]:
    """docKey -> (reference type, knowledgeSourceName of the activity it links to)."""
    activity = {record.id: record for record in response.activity or []}
    return {
        ref.doc_key: (
            activity[ref.activity_source].model_extra.get("knowledgeSourceKind", ref.type),
            activity[ref.activity_source].model_extra["knowledgeSourceName"],
        )
        for ref in response.references
    }


def test_references_link_to_the_activity_of_the_source_that_found_them(
    knowledge_base: KnowledgeBase, standin: AzureSearchStandIn
):
    response = knowledge_base.retrieve(
        request(
            **{
                "handbook": {"kind": "local"},
                "earth-index": {
                    "filterAddOn": "category eq 'earth'",
                    "includeReferenceSourceData": True,
                },
                "earth-notes": {"alwaysQuerySource": True, "filterAddOn": "topic eq 'ocean'"},
            }
        )
    )

    assert response.status_code == 200
    # every reference is a searchIndex reference on the wire (typed in the Azure SDK)
    assert {ref.type for ref in response.references} == {"searchIndex"}
    assert sources_by_reference(response) == {
        "river-1": ("searchIndex", "earth-index"),
        "docs-vacation-txt-0": ("local", "handbook"),
        "docs-expenses-txt-0": ("local", "handbook"),
        "ocean-ash": ("langchain", "earth-notes"),
        "reef": ("langchain", "earth-notes"),
    }
    searches = [r for r in response.activity or [] if "knowledgeSourceName" in r.model_extra]
    assert sorted(
        (
            r.model_extra["knowledgeSourceName"],
            r.model_extra.get("knowledgeSourceKind", r.type),
            r.model_extra["count"],
        )
        for r in searches
    ) == [
        ("earth-index", "searchIndex", 1),
        ("earth-notes", "langchain", 2),
        ("earth-notes", "langchain", 2),
        ("handbook", "local", 2),
    ]
    # The source's own filter and the caller's filterAddOn both reached the service.
    [sent] = standin.search_requests()
    assert sent.body["search"] == "river delta floods"
    assert sent.body["filter"] == "(year ge 2000) and (category eq 'earth')"
    assert sent.body["queryType"] == "semantic"
    # sourceData only where asked for, with the index's metadata fields and captions.
    with_data = {r.doc_key: r.source_data for r in response.references if r.source_data}
    assert with_data == {
        "river-1": {
            "docKey": "river-1",
            "title": "Rivers",
            "content": "The river floods the delta every spring.",
            "category": "earth",
            "year": 2021,
            "captions": ["Rivers The river floods the delta every spring."],
        }
    }
    river = next(r for r in response.references if r.doc_key == "river-1")
    assert river.reranker_score == 4.0  # Azure's semantic score passed through


async def test_failing_source_gives_a_partial_response(
    knowledge_base: KnowledgeBase, standin: AzureSearchStandIn
):
    standin.fail_next(403, code="Forbidden", message="caller lacks read access")

    response = await knowledge_base.aretrieve(
        request(
            **{
                "handbook": {"kind": "local"},
                "earth-index": {},
                "earth-notes": {"alwaysQuerySource": True, "includeReferences": False},
            }
        )
    )

    assert response.status_code == 206 and response.partial
    assert sources_by_reference(response) == {
        "docs-vacation-txt-0": ("local", "handbook"),
        "docs-expenses-txt-0": ("local", "handbook"),
    }
    [failed] = [r for r in response.activity or [] if r.error is not None]
    assert failed.type == "searchIndex"
    assert failed.model_extra["knowledgeSourceName"] == "earth-index"
    assert failed.error.code == "Forbidden"
    assert KEY not in failed.error.message
    # includeReferences=false hides the store's references, not its searches or its content.
    notes = [
        r
        for r in response.activity or []
        if r.model_extra.get("knowledgeSourceName") == "earth-notes"
    ]
    assert [r.model_extra["count"] for r in notes] == [3, 3]
    assert "Coral reef bleaching" in response.text
