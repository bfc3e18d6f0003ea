"""``/servicestats`` and ``/indexstats``: the SDK's statistics calls read the service."""

from __future__ import annotations

import httpx
import pytest

pytest.importorskip("azure.search.documents.indexes")

from azure.core.credentials import AzureKeyCredential
from azure.search.documents import SearchClient
from azure.search.documents.indexes import SearchIndexClient
from azure.search.documents.indexes.models import (
    KnowledgeBase,
    KnowledgeSourceReference,
    SearchableField,
    SearchIndex,
    SearchIndexKnowledgeSource,
    SearchIndexKnowledgeSourceParameters,
    SimpleField,
)
from tests.server_harness import running_server

from agentic_retrieval.kb.service import ServiceDirectory
from agentic_retrieval.server import ServerSettings, create_app

pytestmark = pytest.mark.integration
ADMIN, QUERY = "stats-admin", "stats-query"


@pytest.fixture
def endpoint(tmp_path):
    settings = ServerSettings(api_keys=[ADMIN], query_keys=[QUERY], read_env_keys=False)
    app = create_app(service=ServiceDirectory(tmp_path / "data"), settings=settings)
    with running_server(app) as url:
        yield url


def fill(url: str) -> None:
    indexes = SearchIndexClient(url, AzureKeyCredential(ADMIN))
    for name, documents in (("fares", 2), ("hours", 1)):
        indexes.create_index(
            SearchIndex(
                name=name,
                fields=[
                    SimpleField(name="id", type="Edm.String", key=True),
                    SearchableField(name="content"),
                ],
            )
        )
        SearchClient(url, name, AzureKeyCredential(ADMIN)).upload_documents(
            [{"id": f"d{n}", "content": f"{name} document {n}"} for n in range(documents)]
        )
    indexes.create_or_update_knowledge_source(
        SearchIndexKnowledgeSource(
            name="fares-ks",
            search_index_parameters=SearchIndexKnowledgeSourceParameters(search_index_name="fares"),
        )
    )
    indexes.create_or_update_knowledge_base(
        KnowledgeBase(name="transit", knowledge_sources=[KnowledgeSourceReference(name="fares-ks")])
    )


def test_the_sdk_reads_the_service_statistics(endpoint):
    fill(endpoint)
    statistics = SearchIndexClient(endpoint, AzureKeyCredential(ADMIN)).get_service_statistics()
    counters = statistics.counters
    assert (counters.document_counter.usage, counters.index_counter.usage) == (3, 2)
    assert counters.indexer_counter.usage == 0 and counters.indexer_counter.quota == 0
    assert counters.storage_size_counter.usage > 0
    raw = httpx.get(
        f"{endpoint}/servicestats", params={"api-version": "2026-10-01"}, headers={"api-key": ADMIN}
    ).json()["counters"]
    assert raw["knowledgeSourcesCount"]["usage"] == 1 and raw["knowledgeBasesCount"]["usage"] == 1


def test_index_summaries_page_and_need_an_admin_key(endpoint):
    fill(endpoint)
    params = {"api-version": "2026-10-01", "pageSize": "1"}
    with httpx.Client(base_url=endpoint, params=params, timeout=30) as http:
        first = http.get("/indexstats", headers={"api-key": ADMIN}).json()
        second = httpx.get(first["@odata.nextLink"], headers={"api-key": ADMIN}).json()
        refused = http.get("/indexstats", headers={"api-key": QUERY})
        stats_refused = http.get("/servicestats", headers={"api-key": QUERY})
    assert [v["name"] for v in first["value"] + second["value"]] == ["fares", "hours"]
    assert first["value"][0]["documentCount"] == 2 and "@odata.nextLink" not in second
    assert refused.status_code == 403 and stats_refused.status_code == 403
