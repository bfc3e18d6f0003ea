"""File knowledge sources: uploads of every supported format, through the SDK and raw HTTP.

The SDK (12.0.0) has no typed file operations: files go through its own ``send_request``
with the multipart body of the 2026-10-01 GA; everything else uses its typed clients.
"""

from __future__ import annotations

import io
import json
import sys
import zipfile
from pathlib import Path

import httpx
import pytest

pytest.importorskip("azure.search.documents.knowledgebases")

from azure.core.credentials import AzureKeyCredential
from azure.core.exceptions import HttpResponseError
from azure.core.rest import HttpRequest
from azure.search.documents.indexes import SearchIndexClient
from azure.search.documents.indexes.models import KnowledgeBase, KnowledgeSourceReference
from azure.search.documents.knowledgebases import KnowledgeBaseRetrievalClient
from azure.search.documents.knowledgebases.models import (
    KnowledgeBaseRetrievalRequest,
    KnowledgeRetrievalSemanticIntent,
    SearchIndexKnowledgeSourceParams,
)
from tests.office_files import docx, pptx, xlsx
from tests.server_harness import running_server

from agentic_retrieval.kb.service import ServiceDirectory
from agentic_retrieval.server import ServerSettings, create_app

pytestmark = pytest.mark.integration
KEY = "admin-key"
VERSION = "2026-10-01"
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


@pytest.fixture
def endpoint(tmp_path):
    settings = ServerSettings(api_keys=[KEY], read_env_keys=False, max_upload_bytes=2_000_000)
    app = create_app(service=ServiceDirectory(tmp_path / "data"), settings=settings)
    with running_server(app) as url:
        yield url


def upload(client: SearchIndexClient, source: str, name: str, data: bytes, file_id=None, **meta):
    path = f"/knowledgesources('{source}')/files" + (f"('{file_id}')" if file_id else "")
    request = HttpRequest(
        "PUT" if file_id else "POST",
        path,
        params={"api-version": VERSION},
        files={
            "metadata": (
                None,
                json.dumps({"fileName": name, "metadata": meta}),
                "application/json",
            ),
            "content": (name.rpartition("/")[2], data, "application/octet-stream"),
        },
    )
    return client.send_request(request)


def files_of(client: SearchIndexClient, source: str, **params) -> list[str]:
    request = HttpRequest(
        "GET", f"/knowledgesources('{source}')/files", params={"api-version": VERSION, **params}
    )
    return [f["fileName"] for f in client.send_request(request).json()["value"]]


def retrieve(endpoint: str, base: str, text: str) -> list:
    client = KnowledgeBaseRetrievalClient(
        endpoint, AzureKeyCredential(KEY), knowledge_base_name=base
    )
    params = [
        SearchIndexKnowledgeSourceParams(
            knowledge_source_name="docs", include_reference_source_data=True
        )
    ]
    result = client.retrieve(
        KnowledgeBaseRetrievalRequest(
            intents=[KnowledgeRetrievalSemanticIntent(search=text)], knowledge_source_params=params
        )
    )
    return result.references


def with_file_source(client: SearchIndexClient) -> None:
    client.create_or_update_knowledge_source(
        {"name": "docs", "kind": "file", "description": "Uploaded documents", "fileParameters": {}}
    )
    client.create_or_update_knowledge_base(
        KnowledgeBase(name="library", knowledge_sources=[KnowledgeSourceReference(name="docs")])
    )


@pytest.mark.shared_data
@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data is absent")
def test_a_file_source_of_real_documents_end_to_end(endpoint):
    client = SearchIndexClient(endpoint, AzureKeyCredential(KEY))
    with_file_source(client)
    uploads = {
        "northwind/PerksPlus.pdf": SHARED / "northwind" / "PerksPlus.pdf",
        "northwind/Benefit_Options.pdf": SHARED / "northwind" / "Benefit_Options.pdf",
        "earth/page-43.txt": SHARED / "earth-book" / "pages" / "page-43.txt",
    }
    ids = {}
    for name, path in uploads.items():
        response = upload(client, "docs", name, path.read_bytes(), team="benefits")
        assert response.status_code == 201, response.text()
        ids[name] = response.json()["fileId"]
        assert response.json()["prefix"] == name.rpartition("/")[0] + "/"
    assert files_of(client, "docs") == sorted(uploads)
    assert files_of(client, "docs", prefix="northwind/") == [
        "northwind/Benefit_Options.pdf",
        "northwind/PerksPlus.pdf",
    ]
    status = client.get_knowledge_source_status("docs")
    assert (
        status["fileCapacity"]["remainingFileCount"] == status["fileCapacity"]["maxFileCount"] - 3
    )
    assert status.statistics.total_synchronization == 3

    top = retrieve(endpoint, "library", "PerksPlus fitness reimbursement")[0]
    assert top.source_data["file_name"] == "northwind/PerksPlus.pdf"
    assert isinstance(top.source_data["page"], int)

    replaced = upload(
        client,
        "docs",
        "earth/page-43.txt",
        b"Auroras glow green over Tromso in winter.",
        file_id=ids["earth/page-43.txt"],
    )
    assert replaced.status_code == 200
    assert retrieve(endpoint, "library", "auroras Tromso")[0].source_data["file_name"] == (
        "earth/page-43.txt"
    )
    deleted = client.send_request(
        HttpRequest(
            "DELETE",
            f"/knowledgesources('docs')/files('{ids['northwind/PerksPlus.pdf']}')",
            params={"api-version": VERSION},
        )
    )
    assert deleted.status_code == 204
    names = {r.source_data["file_name"] for r in retrieve(endpoint, "library", "PerksPlus")}
    assert "northwind/PerksPlus.pdf" not in names

    with pytest.raises(HttpResponseError) as used:
        client.delete_knowledge_source("docs")
    assert used.value.status_code == 409
    client.delete_knowledge_base("library")
    client.delete_knowledge_source("docs")
    assert [s.name for s in client.list_knowledge_sources()] == []


OFFICE_AND_TEXT = {
    "guide.docx": docx("Parking rules", "Park and ride at Saltmarsh costs 4 dollars a day."),
    "deck.pptx": pptx(
        ("Timetable", "The ferry leaves hourly."), ("Gulls", "Gull Island is a bird sanctuary.")
    ),
    "fares.xlsx": xlsx("Fares", [["zone", "price"], ["Kestrel", 2.6], ["Osprey", 3.1]]),
    "stops.csv": b"stop,line\nPelican Quay,Harbour Line\nHeron Park,Hill Line\n",
    "lines.json": json.dumps({"lines": [{"name": "Harbour", "colour": "teal"}]}).encode(),
    "about.html": b"<html><head><title>About</title></head>"
    b"<body><p>Founded in 1887 by the Kittiwake family.</p></body></html>",
    "notes.md": b"# Notes\n\nLighthouse tours on Saturdays.\n",
    "plain.txt": b"Cormorant ferries carry bicycles for free.",
}


@pytest.mark.parametrize(
    ("name", "words", "page"),
    [
        ("guide.docx", "Saltmarsh park ride", None),
        ("deck.pptx", "Gull Island bird sanctuary", 2),
        ("fares.xlsx", "Osprey", None),
        ("stops.csv", "Heron Park", None),
        ("lines.json", "teal", None),
        ("about.html", "Kittiwake", None),
        ("notes.md", "lighthouse tours", None),
        ("plain.txt", "cormorant bicycles", None),
    ],
)
def test_every_supported_format_is_converted_and_retrievable(endpoint, name, words, page):
    client = SearchIndexClient(endpoint, AzureKeyCredential(KEY))
    with_file_source(client)
    for each, data in OFFICE_AND_TEXT.items():
        assert upload(client, "docs", each, data).status_code == 201, each
    top = retrieve(endpoint, "library", words)[0]
    assert top.source_data["file_name"] == name
    assert top.source_data.get("page") == page


@pytest.fixture
def http(endpoint):
    with httpx.Client(
        base_url=endpoint, headers={"api-key": KEY}, params={"api-version": VERSION}, timeout=30
    ) as client:
        client.put("/knowledgesources('docs')", json={"name": "docs", "kind": "file"})
        yield client


def zip_of(members: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in members.items():
            archive.writestr(name, text)
    return buffer.getvalue()


def post_file(http: httpx.Client, name: str, data: bytes) -> httpx.Response:
    metadata = json.dumps({"fileName": name})
    return http.post(
        "/knowledgesources('docs')/files",
        files={"metadata": (None, metadata, "application/json"), "content": (name, data)},
    )


def test_the_raw_octet_stream_upload_of_the_preview(http):
    response = http.post(
        "/knowledgesources('docs')/files",
        content=b"# Build notes\n\nKnowledge retrieval ships in May.",
        headers={
            "Content-Type": "application/octet-stream",
            "Content-Disposition": 'attachment; filename="notes/build26/kr-features.md"',
        },
    )
    assert response.status_code == 201
    assert (response.json()["fileName"], response.json()["prefix"]) == (
        "notes/build26/kr-features.md",
        "notes/build26/",
    )
    assert response.json()["parsingMode"] == "markdown"


def test_bad_uploads_get_clear_errors_and_keep_what_is_stored(http, monkeypatch):
    assert post_file(http, "kept.md", b"# Kept\n\nStill here.").status_code == 201
    unsupported = post_file(http, "tool.exe", b"MZ\x90\x00")
    assert unsupported.status_code == 415
    assert "'.exe'" in unsupported.json()["error"]["message"]
    corrupt = post_file(http, "broken.pdf", b"%PDF-1.4 this is not really a pdf")
    assert corrupt.status_code == 400
    assert corrupt.json()["error"]["message"] == (
        "could not read 'broken.pdf': unreadable PDF (damaged, truncated or not a PDF)"
    )
    assert post_file(http, "fake.docx", b"not a zip at all").status_code == 400
    damaged = post_file(http, "damaged.docx", zip_of({"readme.txt": "no document inside"}))
    assert damaged.status_code == 400
    assert damaged.json()["error"]["message"] == (
        "could not read 'damaged.docx': unreadable .docx file (damaged, or not a .docx document)"
    )
    assert post_file(http, "empty.txt", b"   \n").status_code == 400
    assert post_file(http, "kept.md", b"# Again").status_code == 409
    assert post_file(http, "big.txt", b"x" * 2_000_001).status_code == 413
    assert post_file(http, "../escape.txt", b"text").status_code == 400

    # as if not installed (the server finds that out without importing it)
    monkeypatch.setitem(sys.modules, "markitdown", None)
    missing = post_file(http, "guide.docx", OFFICE_AND_TEXT["guide.docx"])
    assert missing.status_code == 415
    assert "[office]" in missing.json()["error"]["message"]

    listed = http.get("/knowledgesources('docs')/files").json()["value"]
    assert [f["fileName"] for f in listed] == ["kept.md"]
    status = http.get("/knowledgesources('docs')/status").json()
    assert status["lastSynchronizationState"]["itemsUpdatesFailed"] == 1
    assert status["documentCount"] == 1


def test_files_belong_to_file_sources_only(http):
    http.put(
        "/indexes('g')",
        json={"name": "g", "fields": [{"name": "id", "type": "Edm.String", "key": True}]},
    )
    http.put(
        "/knowledgesources('idx')",
        json={
            "name": "idx",
            "kind": "searchIndex",
            "searchIndexParameters": {"searchIndexName": "g"},
        },
    )
    response = http.post(
        "/knowledgesources('idx')/files",
        files={"metadata": (None, '{"fileName": "a.md"}'), "content": ("a.md", b"# A")},
    )
    assert response.status_code == 400
    assert "kind 'file'" in response.json()["error"]["message"]
    assert http.get("/knowledgesources('nope')/files").status_code == 404
