"""The newest azure-search-documents (12.1 previews) drives our server where 12.0.0 cannot.

The typed ``retrieve_stream`` events (sync and async), ``query_source_authorization`` on
``retrieve``, ``retrieve_stream`` and ``SearchClient.search``, the ``list_*`` calls with
``search``, ``page_size`` and a file ``prefix`` (the SDK follows ``@odata.nextLink``, which
12.0.0 never does), and the typed file-source calls. Only the SDK's public clients talk to the
server. ``tests/integration/test_sdk_versions.py`` runs this module (and the other SDK test
modules) in a subprocess against the newest release; under the pinned 12.0.0 it is skipped.
"""

from __future__ import annotations

import pytest

pytest.importorskip("azure.search.documents.knowledgebases")

from azure.search.documents.knowledgebases import KnowledgeBaseRetrievalClient

if not hasattr(KnowledgeBaseRetrievalClient, "retrieve_stream"):
    pytest.skip(
        "needs azure-search-documents 12.1+ (tests/integration/test_sdk_versions.py runs it)",
        allow_module_level=True,
    )

from azure.core.credentials import AzureKeyCredential
from azure.core.exceptions import ClientAuthenticationError
from azure.search.documents import SearchClient
from azure.search.documents.indexes import SearchIndexClient
from azure.search.documents.indexes.models import (
    FileKnowledgeSource,
    FileKnowledgeSourceParameters,
    FileUploadMetadata,
    KnowledgeBase,
    KnowledgeSourceReference,
    SearchableField,
    SearchField,
    SearchIndex,
    SearchIndexKnowledgeSource,
    SearchIndexKnowledgeSourceParameters,
    SimpleField,
    UpdateKnowledgeSourceFileRequest,
    UploadKnowledgeSourceFileMultipartRequest,
)
from azure.search.documents.knowledgebases.aio import (
    KnowledgeBaseRetrievalClient as AsyncKnowledgeBaseRetrievalClient,
)
from azure.search.documents.knowledgebases.models import (
    KnowledgeBaseActivityRecord,
    KnowledgeBaseActivityStartedEvent,
    KnowledgeBaseAnswerCompletedEvent,
    KnowledgeBaseMessage,
    KnowledgeBaseMessageTextContent,
    KnowledgeBaseReference,
    KnowledgeBaseResponseCompletedEvent,
    KnowledgeBaseRetrievalRequest,
    KnowledgeBaseRetrievalStartedEvent,
    KnowledgeBaseRetrievalStatusCode,
    KnowledgeBaseStreamErrorEvent,
    KnowledgeRetrievalLowReasoningEffort,
    KnowledgeRetrievalSemanticIntent,
    SearchIndexKnowledgeSourceParams,
)
from tests.fakes import AUDIENCE, ISSUER, JWT_SECRET, FailingSource, TokenMint
from tests.server_harness import running_server, transit_kb

from agentic_retrieval import InMemoryKnowledgeSource
from agentic_retrieval import KnowledgeBase as LocalKnowledgeBase
from agentic_retrieval.errors import SourceError
from agentic_retrieval.kb.service import ServiceDirectory
from agentic_retrieval.server import ServerSettings, create_app
from agentic_retrieval.server.tokens import TokenSettings
from agentic_retrieval.testing import Script, ScriptedChatModel

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
ADMIN, QUERY = "newest-admin", "newest-query"
MINT = TokenMint()
PLAN = {"needs_retrieval": True, "queries": [{"query": "last tram Sunday"}]}
ANSWER = {"answer": "The last Hillcrest Line tram leaves at 23:00 on Sunday [ref_id:0]."}
BROKEN = FailingSource("broken", SourceError("ServiceUnavailable", "the index is unreachable"))
STAFF, CFO, EVERYONE = {"groupIds": ["staff"]}, {"userIds": ["cfo"]}, {"groupIds": ["all"]}
HANDBOOK = [
    {"key": "leave", "content": "Staff get 25 vacation days.", "permissions": STAFF},
    {"key": "bonus", "content": "Board vacation bonus.", "permissions": CFO},
    {"key": "holidays", "content": "Holidays are not vacation days.", "permissions": EVERYONE},
]


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    script = Script({"QueryPlan": [PLAN] * 20, "SynthesizedAnswer": [ANSWER] * 20})
    handbook = InMemoryKnowledgeSource("handbook", HANDBOOK, description="Staff handbook")
    bases = [
        transit_kb(chat_model=ScriptedChatModel(script=script)),
        transit_kb(BROKEN, name="partial"),
        LocalKnowledgeBase([handbook], name="hr", enforce_permissions=True),
    ]
    settings = ServerSettings(
        api_keys=[ADMIN],
        query_keys=[QUERY],
        read_env_keys=False,
        tokens=TokenSettings(issuer=ISSUER, audience=AUDIENCE, secret=JWT_SECRET),
        enforce_permissions=False,  # the fixed knowledge bases decide; the service's indexes trim
    )
    service = ServiceDirectory(tmp_path_factory.mktemp("newest") / "data")
    with running_server(create_app(bases, settings=settings, service=service)) as base:
        yield base


def retrieval(url: str, name: str, key: str = QUERY) -> KnowledgeBaseRetrievalClient:
    return KnowledgeBaseRetrievalClient(url, AzureKeyCredential(key), knowledge_base_name=name)


def question(text: str, **extra) -> KnowledgeBaseRetrievalRequest:
    message = KnowledgeBaseMessage(
        role="user", content=[KnowledgeBaseMessageTextContent(text=text)]
    )
    return KnowledgeBaseRetrievalRequest(messages=[message], include_activity=True, **extra)


def intents(text: str, **extra) -> KnowledgeBaseRetrievalRequest:
    return KnowledgeBaseRetrievalRequest(
        intents=[KnowledgeRetrievalSemanticIntent(search=text)], include_activity=True, **extra
    )


# --- retrieve_stream -----------------------------------------------------------------------


def test_retrieve_stream_yields_typed_events_in_the_contracts_order(url):
    request = question(
        "When does the last tram leave on Sunday?",
        retrieval_reasoning_effort=KnowledgeRetrievalLowReasoningEffort(),
        output_mode="answerSynthesis",
    )
    with retrieval(url, "transit") as client:
        events = list(client.retrieve_stream(request))
    names = [e.event_type for e in events]
    assert names[0] == "retrieval.started"
    assert names[-3:] == ["answer.completed", "references.completed", "response.completed"]
    started = events[0].data
    assert isinstance(started, KnowledgeBaseRetrievalStartedEvent)
    assert started.knowledge_base_name == "transit"
    assert (started.output_mode, started.reasoning_effort.kind) == ("answerSynthesis", "low")
    begun = [e.data for e in events if e.event_type == "activity.started"]
    done = [e.data for e in events if e.event_type == "activity.completed"]
    assert all(isinstance(b, KnowledgeBaseActivityStartedEvent) for b in begun)
    assert all(isinstance(d, KnowledgeBaseActivityRecord) for d in done)
    assert sorted(b.id for b in begun) == sorted(d.id for d in done) and len(begun) >= 3
    assert {"modelQueryPlanning", "searchIndex", "modelAnswerSynthesis"} <= {d.type for d in done}
    answer = events[-3].data
    assert isinstance(answer, KnowledgeBaseAnswerCompletedEvent)
    assert "[ref_id:0]" in answer.message.content[0].text
    references = events[-2].data
    assert all(isinstance(r, KnowledgeBaseReference) for r in references)
    assert references[0].doc_key == "hours-sunday"
    final = events[-1].data
    assert isinstance(final, KnowledgeBaseResponseCompletedEvent)
    assert final.status_code == KnowledgeBaseRetrievalStatusCode.OK
    assert [r.doc_key for r in final.response.references] == [r.doc_key for r in references]


async def test_async_retrieve_stream_reports_a_partial_response(url):
    async with AsyncKnowledgeBaseRetrievalClient(
        url, AzureKeyCredential(QUERY), knowledge_base_name="partial"
    ) as client:
        stream = await client.retrieve_stream(intents("night tram"))
        events = [event async for event in stream]
    final = events[-1].data
    assert isinstance(final, KnowledgeBaseResponseCompletedEvent)
    assert final.status_code == KnowledgeBaseRetrievalStatusCode.PARTIAL_CONTENT
    assert final.response.references[0].doc_key == "hours-night"
    failed = [e.data for e in events if e.event_type == "activity.completed" and e.data.error]
    assert [(r["knowledgeSourceName"], r.error.code) for r in failed] == [
        ("broken", "ServiceUnavailable")
    ]


def test_retrieve_stream_ends_with_a_typed_error_when_a_fail_on_error_source_fails(url):
    params = [SearchIndexKnowledgeSourceParams(knowledge_source_name="broken", fail_on_error=True)]
    with retrieval(url, "partial") as client:
        events = list(client.retrieve_stream(intents("night tram", knowledge_source_params=params)))
    assert events[-1].event_type == "error"
    error = events[-1].data
    assert isinstance(error, KnowledgeBaseStreamErrorEvent)
    assert (error.error.code, error.error.target) == ("KnowledgeSourceFailed", "broken")


# --- query_source_authorization ------------------------------------------------------------


def test_query_source_authorization_trims_retrieve_and_retrieve_stream(url):
    staff = MINT.hs256("ann", ["staff"])
    with retrieval(url, "hr") as client:
        anonymous = client.retrieve(intents("vacation days"))
        as_staff = client.retrieve(intents("vacation days"), query_source_authorization=staff)
        streamed = list(
            client.retrieve_stream(intents("vacation days"), query_source_authorization=staff)
        )
        with pytest.raises(ClientAuthenticationError):
            client.retrieve(intents("vacation days"), query_source_authorization="not-a-jwt")
    assert [r.doc_key for r in anonymous.references] == ["holidays"]
    assert sorted(r.doc_key for r in as_staff.references) == ["holidays", "leave"]
    final = streamed[-1].data
    assert sorted(r.doc_key for r in final.response.references) == ["holidays", "leave"]


def test_query_source_authorization_trims_a_search(url):
    indexes = SearchIndexClient(url, AzureKeyCredential(ADMIN))
    indexes.create_or_update_index(
        SearchIndex(
            name="policies",
            fields=[
                SimpleField(name="id", type="Edm.String", key=True),
                SearchableField(name="content"),
                SearchField(  # SimpleField drops permission_filter
                    name="teams", type="Collection(Edm.String)", permission_filter="groupIds"
                ),
            ],
            permission_filter_option="enabled",
        )
    )
    SearchClient(url, "policies", AzureKeyCredential(ADMIN)).upload_documents(
        [
            {"id": "acme", "content": "Acme vacation policy", "teams": ["acme"]},
            {"id": "globex", "content": "Globex vacation policy", "teams": ["globex"]},
            {"id": "public", "content": "Public vacation days", "teams": ["all"]},
        ]
    )
    reader = SearchClient(url, "policies", AzureKeyCredential(QUERY))
    acme = MINT.hs256("alice", ["acme"])
    trimmed = reader.search("vacation", query_source_authorization=acme)
    assert sorted(d["id"] for d in trimmed) == ["acme", "public"]
    assert sorted(d["id"] for d in reader.search("vacation")) == ["public"]
    counted = reader.search("vacation", include_total_count=True, query_source_authorization=acme)
    assert counted.get_count() == 2


# --- listing with search, page_size and prefix ---------------------------------------------


def test_lists_narrow_by_prefix_and_follow_next_links(url):
    indexes = SearchIndexClient(url, AzureKeyCredential(ADMIN))
    for name in ("ferry-a", "ferry-b", "ferry-c", "tram"):
        indexes.create_or_update_index(
            SearchIndex(name=name, fields=[SimpleField(name="id", type="Edm.String", key=True)])
        )
        indexes.create_or_update_knowledge_source(
            SearchIndexKnowledgeSource(
                name=f"{name}-ks",
                search_index_parameters=SearchIndexKnowledgeSourceParameters(
                    search_index_name=name
                ),
            )
        )
        indexes.create_or_update_knowledge_base(
            KnowledgeBase(
                name=f"{name}-kb", knowledge_sources=[KnowledgeSourceReference(name=f"{name}-ks")]
            )
        )
    ferries = ["ferry-a", "ferry-b", "ferry-c"]
    assert list(indexes.list_index_names(search="ferry", page_size=2)) == ferries
    assert [i.name for i in indexes.list_indexes(search="ferry-", page_size=1)] == ferries
    every = [i.name for i in indexes.list_indexes(page_size=2)]
    assert {"ferry-a", "ferry-b", "ferry-c", "tram"} <= set(every)
    assert len(every) == len(set(every))  # no page repeats or skips an item
    sources = indexes.list_knowledge_sources(search="ferry", page_size=2, search_type="prefix")
    assert [s.name for s in sources] == [f"{n}-ks" for n in ferries]
    bases = indexes.list_knowledge_bases(search="ferry", page_size=1)
    assert [b.name for b in bases] == [f"{n}-kb" for n in ferries]
    assert [b.name for b in indexes.list_knowledge_bases(search="tram")] == ["tram-kb"]
    summaries = {s.name: s for s in indexes.list_index_stats_summary()}
    assert {"ferry-a", "ferry-b", "ferry-c", "tram"} <= set(summaries)
    assert summaries["tram"].document_count == 0
    counters = indexes.get_service_statistics().counters
    assert counters.index_counter.usage == len(summaries)
    assert counters.knowledge_base_counter.usage >= 4


# --- file knowledge sources ----------------------------------------------------------------


def test_the_typed_file_calls_upload_list_update_and_delete(url):
    indexes = SearchIndexClient(url, AzureKeyCredential(ADMIN))
    indexes.create_or_update_knowledge_source(
        FileKnowledgeSource(
            name="uploads",
            description="Uploaded notes",
            file_parameters=FileKnowledgeSourceParameters(),
        )
    )
    names = ["notes/a b.md", "notes/c#d.md", "notes/e.md", "other/f.md"]
    uploaded = {  # the preview's raw octet-stream upload
        name: indexes.upload_knowledge_source_file(
            "uploads", f"# {name}\n\nHarbor ferries leave from Pier {n}.".encode(), filename=name
        )
        for n, name in enumerate(names[:3])
    }
    uploaded["other/f.md"] = indexes.upload_knowledge_source_file_multipart(  # the GA's form
        "uploads",
        UploadKnowledgeSourceFileMultipartRequest(
            metadata=FileUploadMetadata(file_name="other/f.md", metadata={"team": "docs"}),
            content=("f.md", b"# F\n\nTram depots close at midnight.", "text/markdown"),
        ),
    )
    assert all(f.file_id and f.file_name == name for name, f in uploaded.items())
    assert uploaded["other/f.md"].metadata == {"team": "docs"}
    listed = indexes.list_knowledge_source_files("uploads", prefix="notes/", page_size=1)
    assert [f.file_name for f in listed] == names[:3]
    assert [f.file_name for f in indexes.list_knowledge_source_files("uploads")] == names
    searched = indexes.list_knowledge_source_files("uploads", search="c#", page_size=1)
    assert [f.file_name for f in searched] == ["notes/c#d.md"]
    replaced = indexes.update_knowledge_source_file(
        "uploads",
        uploaded["notes/e.md"].file_id,
        UpdateKnowledgeSourceFileRequest(
            metadata=FileUploadMetadata(file_name="notes/e.md", metadata={"team": "ops"}),
            content=("e.md", b"# E\n\nGull Island ferries carry bikes.", "text/markdown"),
        ),
    )
    assert replaced.metadata == {"team": "ops"}
    indexes.create_or_update_knowledge_base(
        KnowledgeBase(name="notes", knowledge_sources=[KnowledgeSourceReference(name="uploads")])
    )
    with retrieval(url, "notes") as client:
        result = client.retrieve(intents("Gull Island bikes"))
    assert result.references[0].doc_key == "notes/e.md#0"
    indexes.delete_knowledge_source_file("uploads", uploaded["other/f.md"].file_id)
    assert [f.file_name for f in indexes.list_knowledge_source_files("uploads")] == names[:3]
