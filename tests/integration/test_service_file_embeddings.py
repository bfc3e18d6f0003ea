"""File knowledge sources of ``serve --data`` rank by meaning by default (issue 28).

A real ``serve --data`` process embeds each upload's chunks with the bundled model, so a
question sharing no word with a file finds it; ``--no-embeddings`` (or its environment
variable) loads no model and ranks lexically; a source that holds chunks without vectors stays
lexical after an upgrade, and says so in its status, while a source created later follows the
server's model.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from tests.integration.service_process import KEY, VERSION, serve_process

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

FILES = {
    "rules.md": "# House rules\n\nDogs are not allowed on the premises.",
    "hours.md": "# Opening hours\n\nThe office opens at nine in the morning and closes at five.",
    "parking.md": "# Parking\n\nVisitors park in the north lot; spaces are marked in blue.",
}
PARAPHRASE = "Can I bring my pet?"
"""Shares no word (nor word form) with the rules file: only its vectors can find it."""


def client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"api-key": KEY}, params=VERSION, timeout=120)


def file_source(http: httpx.Client, name: str, files: dict[str, str]) -> None:
    assert http.put(f"/knowledgesources/{name}", json={"kind": "file"}).status_code == 201
    for file_name, text in files.items():
        parts = {
            "metadata": (None, json.dumps({"fileName": file_name}), "application/json"),
            "content": (file_name, text.encode(), "application/octet-stream"),
        }
        assert http.post(f"/knowledgesources/{name}/files", files=parts).status_code == 201


def knowledge_base(http: httpx.Client, name: str, source: str) -> None:
    body = {"knowledgeSources": [{"name": source}]}
    assert http.put(f"/knowledgebases/{name}", json=body).status_code == 201


def retrieve(http: httpx.Client, base: str, question: str) -> tuple[list[str], dict]:
    """The references' file names and the reranking record."""
    body = {"intents": [{"type": "semantic", "search": question}], "includeActivity": True}
    response = http.post(f"/knowledgebases/{base}/retrieve", json=body)
    assert response.status_code == 200, response.text
    found = response.json()
    names = [r["docKey"].partition("#")[0] for r in found["references"]]
    [reranking] = [a for a in found["activity"] if a["type"] == "semanticReranker"]
    return names, reranking


def status(http: httpx.Client, source: str) -> dict:
    return http.get(f"/knowledgesources/{source}/status").json()


def embedded(http: httpx.Client, source: str, timeout: float = 120) -> dict:
    """The source's status once its background embedding has no chunk left to do."""
    deadline = time.monotonic() + timeout
    while True:
        current = status(http, source)
        if current["embeddingProgress"]["pendingChunks"] == 0 or time.monotonic() > deadline:
            return current
        time.sleep(0.2)


def test_uploads_are_embedded_and_a_restart_keeps_ranking_by_meaning(tmp_path):
    data = tmp_path / "data"
    with serve_process(data) as (url, _):
        http = client(url)
        file_source(http, "rules", FILES)
        knowledge_base(http, "kb", "rules")
        assert embedded(http, "rules")["embeddingProgress"]["embeddedChunks"] == len(FILES)
        names, reranking = retrieve(http, "kb", PARAPHRASE)
        assert names == ["rules.md"]
        assert reranking["calibratedCount"] >= 1  # scored with the passages' vectors
        assert status(http, "rules")["retrievalMode"] == "hybrid"
        assert status(http, "rules")["embeddingModel"] == "local"
    with serve_process(data) as (url, _):  # the store records its model: a restart follows it
        http = client(url)
        assert retrieve(http, "kb", PARAPHRASE)[0] == ["rules.md"]
        file_source(http, "later", {"pets.md": "# Animals\n\nCats must stay indoors."})
        assert status(http, "later")["retrievalMode"] == "hybrid"


def test_no_embeddings_ranks_lexically_and_an_upgrade_keeps_lexical_sources_working(tmp_path):
    data = tmp_path / "data"
    with serve_process(data, extra=("--no-embeddings",)) as (url, _):
        http = client(url)
        file_source(http, "rules", FILES)
        knowledge_base(http, "kb", "rules")
        assert retrieve(http, "kb", PARAPHRASE)[0] == []  # no vectors: words only
        names, reranking = retrieve(http, "kb", "Are dogs allowed?")
        assert names == ["rules.md"]
        assert reranking["calibratedCount"] == 0  # lexical scores only order candidates
        current = status(http, "rules")
        assert (current["retrievalMode"], current["embeddingModel"]) == ("lexical", None)
        assert "--no-embeddings" in current["retrievalNote"]
    # the next version's server, embedding by default, over a store of lexical chunks: it stays
    # lexical (no crash, no silent re-embedding) and says why; a new source embeds
    with serve_process(data) as (url, _):
        http = client(url)
        assert retrieve(http, "kb", "Are dogs allowed?")[0] == ["rules.md"]
        assert retrieve(http, "kb", PARAPHRASE)[0] == []
        current = status(http, "rules")
        assert current["retrievalMode"] == "lexical"
        assert "stored without vectors" in current["retrievalNote"]
        file_source(http, "fresh", {"rules.md": FILES["rules.md"]})
        knowledge_base(http, "fresh-kb", "fresh")
        assert embedded(http, "fresh")["retrievalMode"] == "hybrid"
        assert retrieve(http, "fresh-kb", PARAPHRASE)[0] == ["rules.md"]


def runs_the_model(pid: int) -> bool:
    """Whether the process has the model's runtime (OpenVINO) loaded."""
    return "openvino" in Path(f"/proc/{pid}/maps").read_text()


def test_the_environment_variable_opts_out_as_the_flag_does(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTIC_RETRIEVAL_NO_EMBEDDINGS", "1")
    with serve_process(tmp_path / "data") as (url, process):
        http = client(url)
        file_source(http, "rules", FILES)
        knowledge_base(http, "kb", "rules")
        assert retrieve(http, "kb", PARAPHRASE)[0] == []
        assert status(http, "rules")["retrievalMode"] == "lexical"
        assert not runs_the_model(process.pid)  # the opt-out never loads it
    monkeypatch.delenv("AGENTIC_RETRIEVAL_NO_EMBEDDINGS")
    with serve_process(tmp_path / "other") as (url, process):
        assert runs_the_model(process.pid)  # loaded before the server reports ready


def upload(
    http: httpx.Client, source: str, name: str, text: str, file_id: str = ""
) -> httpx.Response:
    parts = {
        "metadata": (None, json.dumps({"fileName": name}), "application/json"),
        "content": (name, text.encode(), "application/octet-stream"),
    }
    if file_id:
        return http.put(f"/knowledgesources/{source}/files/{file_id}", files=parts)
    return http.post(f"/knowledgesources/{source}/files", files=parts)


def test_a_hybrid_source_refuses_files_from_a_server_without_its_model(tmp_path):
    data = tmp_path / "data"
    with serve_process(data) as (url, _):
        http = client(url)
        assert http.put("/knowledgesources/rules", json={"kind": "file"}).status_code == 201
        created = upload(http, "rules", "rules.md", FILES["rules.md"])
        assert created.status_code == 201
        file_id = created.json()["fileId"]
        knowledge_base(http, "kb", "rules")
        embedded(http, "rules")
        before = http.get("/knowledgesources/rules/files").json()["value"]
    with serve_process(data, extra=("--no-embeddings",)) as (url, _):
        http = client(url)
        writes = [
            upload(http, "rules", "hours.md", FILES["hours.md"]),  # a new file
            upload(http, "rules", "rules.md", "# House rules\n\nCats only.", file_id),  # update
            upload(http, "rules", "rules.md", FILES["rules.md"], file_id),  # re-ingest
        ]
        for refused in writes:
            assert refused.status_code == 409, refused.text
            message = refused.json()["error"]["message"]
            assert "'rules'" in message and "'local'" in message
            assert "restart the server without --no-embeddings" in message
        assert http.get("/knowledgesources/rules/files").json()["value"] == before
        assert retrieve(http, "kb", "Are dogs allowed?")[0] == ["rules.md"]  # by its words
        assert retrieve(http, "kb", "What time does the office open?")[0] == []
        current = status(http, "rules")
        assert current["retrievalMode"] == "lexical"
        assert "refused" in current["retrievalNote"]
        file_source(http, "fresh", {"hours.md": FILES["hours.md"]})  # a new source: lexical
        knowledge_base(http, "fresh-kb", "fresh")
        assert status(http, "fresh")["retrievalMode"] == "lexical"
        assert retrieve(http, "fresh-kb", "When does the office open?")[0] == ["hours.md"]
    with serve_process(data) as (url, _):
        http = client(url)
        current = status(http, "rules")
        assert (current["retrievalMode"], current["embeddingModel"]) == ("hybrid", "local")
        assert http.get("/knowledgesources/rules/files").json()["value"] == before
        assert retrieve(http, "kb", PARAPHRASE)[0] == ["rules.md"]  # its vectors, intact
        assert upload(http, "rules", "hours.md", FILES["hours.md"]).status_code == 201
        embedded(http, "rules")
        assert retrieve(http, "kb", "What time does the office open?")[0] == ["hours.md"]
