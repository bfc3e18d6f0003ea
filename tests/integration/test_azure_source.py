"""The Azure AI Search source driven through the real SDK against a local REST stand-in."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("azure.search.documents", reason="needs the [azure] extra")

from azure.core.credentials import AccessToken, AzureKeyCredential
from tests.fakes import EARTH_DOCUMENTS
from tests.integration.azure_standin import AzureSearchStandIn, index_definition

from agentic_retrieval.errors import SourceError
from agentic_retrieval.sources.azure import (
    AzureSearchKnowledgeSource,
    AzureSourceConfigurationError,
)
from agentic_retrieval.sources.azure.index import (
    build_index,
    document_key,
    ensure_index,
    upload_chunks,
)
from agentic_retrieval.sources.base import Hit, KnowledgeSource, SearchQuery

pytestmark = pytest.mark.integration

KEY = "standin-admin-key"


@pytest.fixture
def standin() -> Iterator[AzureSearchStandIn]:
    server = AzureSearchStandIn(KEY)
    server.add_index(
        index_definition(
            "earth",
            filterable={"category": "Edm.String", "year": "Edm.Int32"},
            vector_fields=["contentVector"],
            semantic_configuration="earth-semantic",
        ),
        EARTH_DOCUMENTS,
    )
    with server:
        yield server


def make_source(standin: AzureSearchStandIn, **overrides: Any) -> AzureSearchKnowledgeSource:
    options: dict[str, Any] = {
        "endpoint": standin.endpoint,
        "index_name": "earth",
        "credential": AzureKeyCredential(KEY),
        "metadata_fields": ("category", "year"),
        "retry_total": 2,
        "retry_backoff_factor": 0.01,
        "retry_backoff_max": 0.05,
        "validate": False,  # most tests exercise query-time behaviour
    }
    options.update(overrides)
    return AzureSearchKnowledgeSource("earth-index", **options)


async def test_hybrid_semantic_query_sends_the_intended_request(standin: AzureSearchStandIn):
    source = make_source(
        standin,
        semantic_configuration="earth-semantic",
        vector_fields=("contentVector",),
        source_filter="year ge 2000",
    )
    assert isinstance(source, KnowledgeSource)
    assert source.kind == "searchIndex"

    hits = await source.search(
        SearchQuery(text="river delta floods", filter="category eq 'earth' or year gt 2010", top=5)
    )

    [request] = standin.search_requests()
    assert request.path == "/indexes('earth')/docs/search.post.search"
    assert request.auth == "api-key"
    assert request.body == {
        "search": "river delta floods",
        "filter": "(year ge 2000) and (category eq 'earth' or year gt 2010)",
        "queryType": "semantic",
        "semanticConfiguration": "earth-semantic",
        "captions": "extractive",
        "select": "id,title,content,category,year",
        "top": 5,
        "vectorQueries": [
            {"kind": "text", "text": "river delta floods", "k": 5, "fields": "contentVector"}
        ],
    }
    # river-2 (1999) is excluded by the source filter even though it matches the caller's.
    assert [h.doc_key for h in hits] == ["river-1", "ice-1"]
    top = hits[0]
    assert top == Hit(
        doc_key="river-1",
        content="The river floods the delta every spring.",
        title="Rivers",
        source="earth-index",
        score=3.0,
        reranker_score=4.0,
        metadata={
            "category": "earth",
            "year": 2021,
            "captions": ["Rivers The river floods the delta every spring."],
        },
    )
    assert hits[1].reranker_score == pytest.approx(4 / 3, abs=1e-3)


async def test_text_only_query_omits_semantic_and_vector_parts(standin: AzureSearchStandIn):
    source = make_source(standin, top=2)

    hits = await source.search(SearchQuery(text="river delta", top=10))

    [request] = standin.search_requests()
    assert request.body == {
        "search": "river delta",
        "select": "id,title,content,category,year",
        "top": 2,
    }
    assert [h.doc_key for h in hits] == ["river-1", "river-2"]
    assert all(h.reranker_score is None for h in hits)
    assert "captions" not in hits[0].metadata


async def test_source_filter_alone_is_sent_unparenthesised_when_no_caller_filter(
    standin: AzureSearchStandIn,
):
    source = make_source(standin, source_filter="category eq 'ice'")

    hits = await source.search(SearchQuery(text="river"))

    assert standin.search_requests()[0].body["filter"] == "category eq 'ice'"
    assert [h.doc_key for h in hits] == ["ice-1"]


async def test_field_mapping_reads_an_index_with_its_own_field_names():
    with AzureSearchStandIn(KEY) as server:
        server.add_index(
            index_definition(
                "legacy",
                key="chunk_id",
                text_fields=("heading", "body"),
                filterable={"path": "Edm.String"},
            ),
            [
                {
                    "chunk_id": "c-7",
                    "heading": "Benefits",
                    "body": "Dental plan covers cleanings.",
                    "path": "/hr/benefits.pdf",
                }
            ],
        )
        source = AzureSearchKnowledgeSource(
            "hr",
            endpoint=server.endpoint,
            index_name="legacy",
            credential=KEY,
            key_field="chunk_id",
            title_field="heading",
            content_field="body",
            metadata_fields=("path",),
            validate=True,
        )

        [hit] = await source.search(SearchQuery(text="dental"))

        assert server.search_requests()[0].body["select"] == "chunk_id,heading,body,path"
        assert (hit.doc_key, hit.title, hit.content, hit.metadata) == (
            "c-7",
            "Benefits",
            "Dental plan covers cleanings.",
            {"path": "/hr/benefits.pdf"},
        )


async def test_concurrent_searches_from_fresh_event_loops(standin: AzureSearchStandIn):
    source = make_source(standin)

    def run_in_new_loop(text: str) -> list[str]:
        hits = asyncio.run(source.search(SearchQuery(text=text)))
        return [h.doc_key for h in hits]

    # The graph's sync invoke runs nodes in fresh loops on worker threads; one source object
    # must serve them all.
    results = await asyncio.gather(
        asyncio.to_thread(run_in_new_loop, "hurricanes"),
        asyncio.to_thread(run_in_new_loop, "glaciers"),
        source.search(SearchQuery(text="delta")),
    )
    assert results[0] == ["storm-1"]
    assert results[1] == ["ice-1"]
    assert [h.doc_key for h in results[2]] == ["river-1", "river-2"]
    assert len(standin.search_requests()) == 3


async def test_wrong_key_is_unauthorized_and_the_message_holds_no_key(standin: AzureSearchStandIn):
    source = make_source(standin, credential="not-the-right-key-123")

    with pytest.raises(SourceError) as info:
        await source.search(SearchQuery(text="river"))

    assert info.value.code == "Unauthorized"
    assert "not-the-right-key-123" not in str(info.value)
    assert KEY not in str(info.value)
    assert len(standin.search_requests()) == 1  # 401 is not retried


async def test_forbidden_maps_to_forbidden(standin: AzureSearchStandIn):
    source = make_source(standin)
    standin.fail_next(403, code="Forbidden", message="Principal lacks Search Index Data Reader")

    with pytest.raises(SourceError) as info:
        await source.search(SearchQuery(text="river"))

    assert info.value.code == "Forbidden"
    assert "Search Index Data Reader" in info.value.message


async def test_missing_index_at_query_time_is_index_not_found(standin: AzureSearchStandIn):
    source = make_source(standin, index_name="no-such-index")

    with pytest.raises(SourceError) as info:
        await source.search(SearchQuery(text="river"))

    assert info.value.code == "IndexNotFound"
    assert "no-such-index" in info.value.message


def test_validate_rejects_a_missing_index_at_construction(standin: AzureSearchStandIn):
    with pytest.raises(AzureSourceConfigurationError) as info:
        make_source(standin, index_name="no-such-index", validate=True)

    assert info.value.code == "IndexNotFound"
    assert [(r.method, r.path) for r in standin.requests] == [("GET", "/indexes('no-such-index')")]


def test_validate_rejects_unknown_fields_and_semantic_configuration(standin: AzureSearchStandIn):
    with pytest.raises(AzureSourceConfigurationError) as info:
        make_source(standin, metadata_fields=("category", "author"), validate=True)
    assert info.value.code == "FieldNotFound"
    assert "author" in info.value.message

    with pytest.raises(AzureSourceConfigurationError) as info:
        make_source(standin, semantic_configuration="nope", validate=True)
    assert info.value.code == "SemanticConfigurationNotFound"

    make_source(standin, semantic_configuration="earth-semantic", validate=True)


async def test_throttling_is_retried_then_reported(standin: AzureSearchStandIn):
    source = make_source(standin, retry_total=2)
    standin.fail_next(429, count=10, headers={"Retry-After": "0"})

    with pytest.raises(SourceError) as info:
        await source.search(SearchQuery(text="river"))

    assert info.value.code == "Throttled"
    assert len(standin.search_requests()) == 3  # the first try and two retries


async def test_throttling_honours_retry_after_and_recovers(standin: AzureSearchStandIn):
    source = make_source(standin, retry_total=3)
    standin.fail_next(429, headers={"Retry-After": "1"})

    started = time.monotonic()
    hits = await source.search(SearchQuery(text="hurricanes"))
    elapsed = time.monotonic() - started

    assert [h.doc_key for h in hits] == ["storm-1"]
    assert len(standin.search_requests()) == 2
    assert elapsed >= 0.95


async def test_service_unavailable_is_retried_then_throttled(standin: AzureSearchStandIn):
    source = make_source(standin, retry_total=1)
    standin.fail_next(503, count=2, headers={"retry-after-ms": "10"})

    with pytest.raises(SourceError) as info:
        await source.search(SearchQuery(text="river"))

    assert info.value.code == "Throttled"
    assert len(standin.search_requests()) == 2


async def test_bad_filter_field_is_an_invalid_request(standin: AzureSearchStandIn):
    source = make_source(standin, metadata_fields=("category", "author"))

    with pytest.raises(SourceError) as info:
        await source.search(SearchQuery(text="river"))

    assert info.value.code == "InvalidRequest"
    assert "author" in info.value.message


def _self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


class StaticTokenCredential:
    """A token credential (what DefaultAzureCredential is) that records the scopes asked for."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.scopes: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        self.scopes.append(scopes)
        return AccessToken(self.token, int(time.time()) + 3600)


async def test_token_credential_over_https(tmp_path: Path):
    # The SDK's bearer-token policy refuses plain http, so this stand-in serves https with a
    # certificate generated here and trusted through connection_verify.
    cert_path, key_path = _self_signed_certificate(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    credential = StaticTokenCredential("entra-token")
    with AzureSearchStandIn(KEY, bearer_token="entra-token", ssl_context=context) as server:
        server.add_index(
            index_definition("earth", filterable={"category": "Edm.String"}), EARTH_DOCUMENTS
        )
        source = AzureSearchKnowledgeSource(
            "earth-index",
            endpoint=server.endpoint,
            index_name="earth",
            credential=credential,
            metadata_fields=("category",),
            client_kwargs={"connection_verify": str(cert_path)},
        )

        hits = await source.search(SearchQuery(text="hurricanes"))

        assert server.endpoint.startswith("https://127.0.0.1:")
        assert [h.doc_key for h in hits] == ["storm-1"]
        assert server.search_requests()[0].auth == "bearer"
        assert set(credential.scopes) == {("https://search.azure.com/.default",)}


async def test_indexing_helper_creates_index_uploads_chunks_and_the_source_finds_them():
    from azure.search.documents.indexes.models import (
        AzureOpenAIVectorizer,
        AzureOpenAIVectorizerParameters,
    )

    vectorizer = AzureOpenAIVectorizer(
        vectorizer_name="embedder",
        parameters=AzureOpenAIVectorizerParameters(
            resource_url="https://example.openai.azure.com",
            deployment_name="embeddings",
            model_name="text-embedding-3-small",
        ),
    )
    chunks = [
        {
            "id": "handbook.pdf#p1-c0",
            "title": "Handbook",
            "content": "Vacation requests go to HR.",
            "metadata": {"category": "hr", "page": 1, "not_in_index": "dropped"},
        },
        {
            "id": "plan-a",
            "title": "Plan A",
            "content": "Plan A covers dental and vision.",
            "metadata": {"category": "benefits", "page": 4},
        },
    ]
    with AzureSearchStandIn(KEY) as server:
        index = build_index(
            "chunks",
            metadata_fields={"category": "Edm.String", "page": "Edm.Int32"},
            semantic_configuration="default",
            vector_field="vector",
            vector_dimensions=2,
            vectorizer=vectorizer,
        )
        assert ensure_index(server.endpoint, KEY, index) is True
        assert ensure_index(server.endpoint, KEY, index) is False

        report = upload_chunks(
            server.endpoint,
            "chunks",
            KEY,
            chunks,
            metadata_fields=("category", "page"),
            vector_field="vector",
            embed=lambda texts: [[float(len(t)), 1.0] for t in texts],
        )

        encoded = document_key("handbook.pdf#p1-c0")
        assert report.succeeded == [encoded, "plan-a"] and report.failed == []
        definition = server.indexes["chunks"].definition
        assert definition["semantic"]["configurations"][0]["name"] == "default"
        assert definition["vectorSearch"]["profiles"][0]["vectorizer"] == "embedder"
        assert server.indexes["chunks"].documents[encoded] == {
            "id": encoded,
            "title": "Handbook",
            "content": "Vacation requests go to HR.",
            "category": "hr",
            "page": 1,
            "vector": [27.0, 1.0],
        }

        source = AzureSearchKnowledgeSource(
            "hr",
            endpoint=server.endpoint,
            index_name="chunks",
            credential=KEY,
            semantic_configuration="default",
            vector_fields=("vector",),
            metadata_fields=("category", "page"),
            validate=True,
        )
        hits = await source.search(SearchQuery(text="dental plan", filter="page ge 2"))
        assert [(h.doc_key, h.reranker_score) for h in hits] == [("plan-a", 4.0)]


def test_missing_azure_extra_is_named(monkeypatch, standin: AzureSearchStandIn):
    monkeypatch.setitem(sys.modules, "azure.search.documents", None)

    with pytest.raises(ImportError, match=r"\[azure\] extra"):
        make_source(standin)


def test_no_credential_without_azure_identity_names_the_package(
    monkeypatch, standin: AzureSearchStandIn
):
    monkeypatch.setitem(sys.modules, "azure.identity", None)

    with pytest.raises(ImportError, match="azure-identity"):
        make_source(standin, credential=None)


def test_standin_also_serves_the_older_search_url(standin: AzureSearchStandIn):
    # Older SDKs and REST clients POST to /indexes/{name}/docs/search; keep both forms honest.
    import httpx

    response = httpx.post(
        f"{standin.endpoint}/indexes/earth/docs/search?api-version=2024-07-01",
        headers={"api-key": KEY},
        json={"search": "hurricanes", "select": "id,title", "top": 3},
    )

    assert response.status_code == 200
    assert [v["id"] for v in response.json()["value"]] == ["storm-1"]
    assert httpx.post(f"{standin.endpoint}/indexes/earth/docs/search", json={}).status_code == 401


def test_a_missing_index_is_a_configuration_error_by_default(standin: AzureSearchStandIn):
    with pytest.raises(AzureSourceConfigurationError):
        AzureSearchKnowledgeSource(
            "missing",
            endpoint=standin.endpoint,
            index_name="no-such-index",
            credential=AzureKeyCredential(KEY),
        )
