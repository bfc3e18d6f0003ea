"""The unmodified azure-search-documents 12.0.0 SDK drives an empty service end to end.

From an empty data directory: create an index, upload documents, create a ``searchIndex``
knowledge source and a knowledge base, check the status, retrieve (intents, a filter), update
and delete a document, delete the source, the base and the index; every list call reflects
each step. Only the SDK's public clients talk to the server.
"""

from __future__ import annotations

import pytest

pytest.importorskip("azure.search.documents.knowledgebases")

from azure.core import MatchConditions
from azure.core.credentials import AzureKeyCredential
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.search.documents import SearchClient
from azure.search.documents.indexes import SearchIndexClient
from azure.search.documents.indexes.models import (
    KnowledgeBase,
    KnowledgeSourceReference,
    SearchableField,
    SearchIndex,
    SearchIndexFieldReference,
    SearchIndexKnowledgeSource,
    SearchIndexKnowledgeSourceParameters,
    SemanticConfiguration,
    SemanticField,
    SemanticPrioritizedFields,
    SemanticSearch,
    SimpleField,
)
from azure.search.documents.knowledgebases import KnowledgeBaseRetrievalClient
from azure.search.documents.knowledgebases.models import (
    KnowledgeBaseRetrievalRequest,
    KnowledgeRetrievalSemanticIntent,
    SearchIndexKnowledgeSourceParams,
)
from tests.server_harness import running_server

from agentic_retrieval.kb.service import ServiceDirectory
from agentic_retrieval.server import ServerSettings, create_app

pytestmark = pytest.mark.integration
ADMIN = "admin-key"
QUERY = "query-key"

GUIDES = [
    {
        "id": "fares",
        "title": "Tram fares",
        "content": "A single tram ride costs 2 euros; a day pass costs 6 euros.",
        "category": "fares",
        "year": 2024,
    },
    {
        "id": "bikes",
        "title": "Bike late fees",
        "content": "Bikes docked after 30 minutes pay a late fee of 1 euro per 15 minutes.",
        "category": "bikes",
        "year": 2023,
    },
    {
        "id": "night",
        "title": "Night trams",
        "content": "Night trams run every 30 minutes between midnight and 5 am.",
        "category": "service",
        "year": 2024,
    },
    {
        "id": "lost",
        "title": "Lost property",
        "content": "Items left on a tram are kept for 30 days at Central Station.",
        "category": "service",
        "year": 2022,
    },
]


def guides_index() -> SearchIndex:
    return SearchIndex(
        name="guides",
        fields=[
            SimpleField(name="id", type="Edm.String", key=True),
            SearchableField(name="title"),
            SearchableField(name="content"),
            SimpleField(name="category", type="Edm.String", filterable=True),
            SimpleField(name="year", type="Edm.Int32", filterable=True),
        ],
        semantic_search=SemanticSearch(
            configurations=[
                SemanticConfiguration(
                    name="default",
                    prioritized_fields=SemanticPrioritizedFields(
                        title_field=SemanticField(field_name="title"),
                        content_fields=[SemanticField(field_name="content")],
                    ),
                )
            ]
        ),
    )


@pytest.fixture
def endpoint(tmp_path):
    settings = ServerSettings(api_keys=[ADMIN], query_keys=[QUERY], read_env_keys=False)
    app = create_app(service=ServiceDirectory(tmp_path / "data"), settings=settings)
    with running_server(app) as url:
        yield url


def retrieve_keys(url: str, text: str, **params) -> list[str]:
    client = KnowledgeBaseRetrievalClient(
        url, AzureKeyCredential(QUERY), knowledge_base_name="transit"
    )
    source_params = (
        [SearchIndexKnowledgeSourceParams(knowledge_source_name="guides-ks", **params)]
        if params
        else None
    )
    result = client.retrieve(
        KnowledgeBaseRetrievalRequest(
            intents=[KnowledgeRetrievalSemanticIntent(search=text)],
            knowledge_source_params=source_params,
        )
    )
    return [ref.doc_key for ref in result.references]


def test_sdk_manages_an_empty_service_end_to_end(endpoint):
    indexes = SearchIndexClient(endpoint, AzureKeyCredential(ADMIN))
    assert list(indexes.list_index_names()) == []
    assert [s.name for s in indexes.list_knowledge_sources()] == []
    assert [b.name for b in indexes.list_knowledge_bases()] == []

    created = indexes.create_index(guides_index())
    assert [f.name for f in created.fields] == ["id", "title", "content", "category", "year"]
    assert list(indexes.list_index_names()) == ["guides"]

    documents = SearchClient(endpoint, "guides", AzureKeyCredential(ADMIN))
    results = documents.upload_documents(GUIDES)
    assert [(r.key, r.succeeded, r.status_code) for r in results] == [
        ("fares", True, 201),
        ("bikes", True, 201),
        ("night", True, 201),
        ("lost", True, 201),
    ]
    assert documents.get_document_count() == 4
    assert documents.get_document("bikes") == GUIDES[1]
    assert [d["id"] for d in documents.search("late fee")] == ["bikes"]
    assert [d["id"] for d in documents.search("*", filter="year ge 2024")] == ["fares", "night"]
    assert indexes.get_index_statistics("guides").document_count == 4

    source = indexes.create_or_update_knowledge_source(
        SearchIndexKnowledgeSource(
            name="guides-ks",
            description="Harborline rider guides",
            search_index_parameters=SearchIndexKnowledgeSourceParameters(
                search_index_name="guides",
                source_data_fields=[SearchIndexFieldReference(name="category")],
            ),
        )
    )
    assert source.e_tag
    assert [s.name for s in indexes.list_knowledge_sources()] == ["guides-ks"]
    base = indexes.create_or_update_knowledge_base(
        KnowledgeBase(
            name="transit",
            description="Harborline",
            knowledge_sources=[KnowledgeSourceReference(name="guides-ks")],
        )
    )
    assert [b.name for b in indexes.list_knowledge_bases()] == ["transit"]
    assert indexes.get_knowledge_base("transit").e_tag == base.e_tag

    status = indexes.get_knowledge_source_status("guides-ks")
    assert status.synchronization_status == "active"
    assert status.last_synchronization_state.items_updates_processed == 4
    assert status.statistics.total_synchronization == 1
    assert status["documentCount"] == 4

    assert retrieve_keys(endpoint, "late fee for bikes")[0] == "bikes"
    filtered = retrieve_keys(endpoint, "tram trams", filter_add_on="category eq 'service'")
    assert sorted(filtered) == ["lost", "night"]
    assert sorted(retrieve_keys(endpoint, "tram trams")) == ["fares", "lost", "night"]

    documents.merge_documents([{"id": "lost", "content": "Lost umbrellas wait 90 days."}])
    assert documents.get_document("lost")["content"] == "Lost umbrellas wait 90 days."
    assert documents.get_document("lost")["title"] == "Lost property"
    assert retrieve_keys(endpoint, "umbrellas")[0] == "lost"

    documents.delete_documents([{"id": "bikes"}])
    assert documents.get_document_count() == 3
    with pytest.raises(ResourceNotFoundError):
        documents.get_document("bikes")
    assert "bikes" not in retrieve_keys(endpoint, "late fee for bikes")

    with pytest.raises(HttpResponseError) as used:
        indexes.delete_knowledge_source("guides-ks")
    assert used.value.status_code == 409
    assert "transit" in used.value.message

    indexes.delete_knowledge_base(base, match_condition=MatchConditions.IfNotModified)
    assert [b.name for b in indexes.list_knowledge_bases()] == []
    indexes.delete_knowledge_source("guides-ks")
    assert [s.name for s in indexes.list_knowledge_sources()] == []
    indexes.delete_index("guides")
    assert list(indexes.list_index_names()) == []


def test_a_query_key_retrieves_and_searches_but_cannot_manage(endpoint):
    admin = SearchIndexClient(endpoint, AzureKeyCredential(ADMIN))
    admin.create_index(guides_index())
    SearchClient(endpoint, "guides", AzureKeyCredential(ADMIN)).upload_documents(GUIDES)

    reader = SearchClient(endpoint, "guides", AzureKeyCredential(QUERY))
    # "pass" alone: "day" now also finds "days" (English word forms), so "day pass" matches
    # the lost-property guide's "30 days" too
    assert [d["id"] for d in reader.search("pass")] == ["fares"]
    assert reader.get_document_count() == 4
    with pytest.raises(HttpResponseError) as denied:
        reader.upload_documents([{"id": "x", "title": "x"}])
    assert denied.value.status_code == 403
    with pytest.raises(HttpResponseError) as denied:
        SearchIndexClient(endpoint, AzureKeyCredential(QUERY)).delete_index("guides")
    assert denied.value.status_code == 403
    assert reader.get_document_count() == 4
