"""Entity graphs over REST (2026-11-01-preview) against a real ``serve --data`` process.

A file knowledge source with ``graphExtractionParameters`` reads its uploads into triples
with its OpenAI-compatible ingestion model (a stand-in on 127.0.0.1, scripted with the
triples a model would read) in the background; its status then shows ``triplesWritten``;
a retrieve with ``graphParameters`` runs a graph search whose query the knowledge base's
model writes, and returns the ``graphSearch`` record and references hydrated with their
chunks. Bad definitions are 400s naming the problem; header values never come back.
"""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from tests.fakes import COMPANY_ONTOLOGY, triple
from tests.integration.openai_standin import OpenAIStandIn
from tests.integration.service_process import KEY, serve_process

pytest.importorskip("langchain_openai")
pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
NEW = {"api-version": "2026-11-01-preview"}
OLD = {"api-version": "2026-10-01"}
SECRET = "hdr-graph-7d2c91"
HEADERS = {"X-Graph-Secret": SECRET, "Authorization": f"Bearer {SECRET}-token"}
FILES = {
    "acme.md": "# Acme news\n\nAcme Corp acquired Beta Labs in 2021.\n",
    "beta.md": "# Beta Labs\n\nBeta Labs has its offices in Oslo, where forty engineers "
    "build sensors.\n",
}
TRIPLES = {
    "acme.md": [triple("Acme Corp", "Organization", "acquired", "Beta Labs", "Organization")],
    "beta.md": [
        triple("Beta Labs", "Organization", "locatedIn", "Oslo", "City"),
        triple("Beta Labs", "Organization", "worksWith", "Gamma", "Organization"),  # unknown
    ],
}
QUESTION = "Where is the company that Acme Corp acquired located?"
GQL = (
    'MATCH (a:Organization {name: "Acme Corp"})-[:acquired]->(b:Organization)'
    "-[:locatedIn]->(c:City) RETURN b.name, c.name"
)
PLAN = {
    "needs_retrieval": True,
    "assistant_message": "",
    "queries": [{"query": QUESTION, "goal": "location", "knowledge_sources": ["news"]}],
}


def model(uri: str) -> dict:
    params = {"uri": uri, "modelName": "local-extractor", "headers": HEADERS}
    return {"kind": "openAICompatible", "openAICompatibleParameters": params}


def source(uri: str, ontology: str = COMPANY_ONTOLOGY, **ingestion) -> dict:
    graph = {
        "graphName": "news-graph",
        "ontology": {"kind": "inline", "name": "org-onto", "value": ontology},
    }
    parameters = {"chatCompletionModel": model(uri), "graphExtractionParameters": graph}
    return {"kind": "file", "fileParameters": {"ingestionParameters": {**parameters, **ingestion}}}


def upload(http: httpx.Client, name: str, text: str) -> httpx.Response:
    files = {
        "metadata": (None, json.dumps({"fileName": name}), "application/json"),
        "content": (name, text.encode(), "application/octet-stream"),
    }
    return http.post("/knowledgesources/news/files", files=files)


def graph_statistics(http: httpx.Client, name: str = "news", after: dict | None = None) -> dict:
    """The source's graphStatistics once no synchronisation is under way (and, given
    ``after``, once one newer than it has finished: an upload answers before its sync starts)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = http.get(f"/knowledgesources/{name}/status")
        assert status.status_code == 200, status.text
        graph = status.json()["graphStatistics"]
        newer = after is None or graph["endTime"] != after["endTime"]
        if graph["endTime"] and not graph["synchronizing"] and newer:
            return graph
        time.sleep(0.1)
    raise AssertionError(f"no graph synchronisation finished: {graph}")


def test_a_file_source_extracts_a_graph_that_a_retrieve_searches(tmp_path):
    bodies: list[str] = []
    script = {
        "ExtractedTriples": [{"triples": TRIPLES[name]} for name in FILES],
        "QueryPlan": [PLAN],
        "GraphQueryPlan": [{"gql": GQL}],
    }
    with OpenAIStandIn(script) as server, serve_process(tmp_path / "data") as (url, _):
        uri = f"{server.base_url}/chat/completions"
        http = httpx.Client(base_url=url, headers={"api-key": KEY}, params=NEW, timeout=60)
        created = http.put("/knowledgesources/news", json=source(uri))
        assert created.status_code == 201, created.text
        graph = created.json()["fileParameters"]["ingestionParameters"]
        assert graph["graphExtractionParameters"]["ontology"]["name"] == "org-onto"
        assert "headers" not in graph["chatCompletionModel"]["openAICompatibleParameters"]
        bodies.append(created.text)

        written = 0
        for name, text in FILES.items():  # one synchronisation after each upload
            stored = upload(http, name, text)
            assert stored.status_code == 201, stored.text
            statistics = graph_statistics(http)
            assert statistics["ontologyName"] == "org-onto"
            assert statistics["errors"] == [] and statistics["filesRead"] == 1
            written += statistics["triplesWritten"]
        assert written == 2  # worksWith is no property of the ontology: dropped
        extractions = [r for r in server.requests if "ExtractedTriples" in json.dumps(r)]
        assert "has its offices in Oslo" in json.dumps(extractions[1])
        assert server.headers[0]["x-graph-secret"] == SECRET  # the stored headers were sent

        base = {"knowledgeSources": [{"name": "news"}], "models": [model(uri)]}
        assert http.put("/knowledgebases/kb", json=base).status_code == 201
        ask = {
            "messages": [{"role": "user", "content": [{"type": "text", "text": QUESTION}]}],
            "retrievalReasoningEffort": {"kind": "low"},
            "includeActivity": True,
            "knowledgeSourceParams": [
                {
                    "knowledgeSourceName": "news",
                    "kind": "file",
                    "graphParameters": {
                        "includeQuery": True,
                        "provenance": {"kind": "hydrate", "hydrateDocuments": {"top": 5}},
                    },
                }
            ],
        }
        answer = http.post("/knowledgebases/kb/retrieve", json=ask)
        assert answer.status_code == 200, answer.text
        bodies.append(answer.text)
        body = answer.json()
        (record,) = [r for r in body["activity"] if r["type"] == "graphSearch"]
        arguments = record["graphSearchArguments"]
        assert (arguments["gql"], arguments["attempts"], arguments["outcome"]) == (
            GQL,
            1,
            "Success",
        )
        assert arguments["graphIndexName"] == "news-graph"
        assert "elapsedInMs" in record  # the version's timestamps
        references = [r for r in body["references"] if r["type"] == "graphSearch"]
        rows = [r["sourceData"]["row"] for r in references if "row" in r["sourceData"]]
        assert rows == [{"b.name": "Beta Labs", "c.name": "Oslo"}]
        hydrated = [r["sourceData"] for r in references if "row" not in r["sourceData"]]
        assert any("offices in Oslo" in d["content"] for d in hydrated), body["references"]

        # a model that cannot read a file: the failure is listed by file, nothing is written
        failing = upload(http, "gamma.md", "# Gamma\n\nGamma Works bakes bread in Lyon.\n")
        assert failing.status_code == 201  # the file itself is stored and searchable
        statistics = graph_statistics(http)
        assert statistics["triplesWritten"] == 0 and statistics["filesRead"] == 1
        assert {e["fileName"] for e in statistics["errors"]} == {"gamma.md"}
        bodies.append(json.dumps(statistics))

        # an older api-version does not know graph search
        old = http.post("/knowledgebases/kb/retrieve", json=ask, params=OLD)
        assert old.status_code == 400 and "graphParameters" in old.text, old.text

        # the ontology stays as attached; deleting the file removes its triples
        changed = source(uri, COMPANY_ONTOLOGY.replace("A company or lab", "A firm"))
        refused = http.put("/knowledgesources/news", json=changed)
        assert refused.status_code == 400 and "cannot change" in refused.text, refused.text
        removed = http.put(
            "/knowledgesources/news",
            json={"kind": "file", "fileParameters": {"ingestionParameters": {}}},
        )
        assert removed.status_code == 400 and "cannot be removed" in removed.text
        bodies += [refused.text, removed.text]

        # an ontology attached to a source that already holds a file reads it at once
        plain = {"kind": "file", "fileParameters": {"ingestionParameters": {}}}
        assert http.put("/knowledgesources/later", json=plain).status_code == 201
        files = {
            "metadata": (None, json.dumps({"fileName": "acme.md"}), "application/json"),
            "content": ("acme.md", FILES["acme.md"].encode(), "application/octet-stream"),
        }
        assert http.post("/knowledgesources/later/files", files=files).status_code == 201
        server.script["ExtractedTriples"].append({"triples": TRIPLES["acme.md"]})
        attached = http.put("/knowledgesources/later", json=source(uri))
        assert attached.status_code in (200, 204), attached.text
        assert graph_statistics(http, "later")["triplesWritten"] == 1
        for listed in ("/knowledgesources", "/knowledgesources/news", "/knowledgebases/kb"):
            bodies.append(http.get(listed).text)
        bodies.append(http.get("/knowledgesources/news/status").text)
    assert [b for b in bodies if SECRET in b] == []


@pytest.mark.parametrize(
    ("body", "params", "message"),
    [
        (source("http://127.0.0.1:9/v1", ontology="{not json"), NEW, "is not JSON"),
        (
            source("http://127.0.0.1:9/v1", ontology='{"@context": "https://schema.org/"}'),
            NEW,
            "ontology.value: not a valid JSON-LD ontology",
        ),
        (
            source("http://127.0.0.1:9/v1", ingestionPermissionOptions=["userIds"]),
            NEW,
            "cannot be combined with ingestionPermissionOptions",
        ),
        (source("http://127.0.0.1:9/v1"), OLD, "need api-version 2026-11-01-preview"),
    ],
)
def test_bad_graph_definitions_are_400s_naming_the_problem(tmp_path, body, params, message):
    from fastapi.testclient import TestClient

    from agentic_retrieval.kb.service import ServiceDirectory
    from agentic_retrieval.server import ServerSettings, create_app

    if params is OLD:  # the kind of model is refused first under an older version
        body["fileParameters"]["ingestionParameters"].pop("chatCompletionModel")
    settings = ServerSettings(api_keys=[KEY], read_env_keys=False)
    app = create_app(service=ServiceDirectory(tmp_path / "data"), settings=settings)
    with TestClient(app, base_url="http://127.0.0.1:8080") as client:
        answer = client.put(
            "/knowledgesources/news", json=body, params=params, headers={"api-key": KEY}
        )
    assert answer.status_code == 400, answer.text
    assert message in answer.json()["error"]["message"]
    assert SECRET not in answer.text


def fresh(url: str) -> httpx.Client:
    """A client whose every request opens a new connection (so either worker may answer)."""
    return httpx.Client(
        base_url=url,
        headers={"api-key": KEY, "Connection": "close"},
        params=NEW,
        timeout=60,
        limits=httpx.Limits(max_keepalive_connections=0),
    )


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_graph_statistics_are_the_same_from_every_worker_and_survive_a_restart(tmp_path):
    data = tmp_path / "data"
    with OpenAIStandIn({"ExtractedTriples": [{"triples": TRIPLES["acme.md"]}]}) as server:
        uri = f"{server.base_url}/chat/completions"
        gate = threading.Event()
        answer = server._answer

        def held(body: dict) -> tuple[int, dict]:  # the model answers once the test lets it
            gate.wait(60)
            return answer(body)

        server._answer = held  # type: ignore[method-assign]
        with serve_process(data, workers=2) as (url, _), fresh(url) as http:
            assert http.put("/knowledgesources/news", json=source(uri)).status_code == 201
            assert upload(http, "acme.md", FILES["acme.md"]).status_code == 201
            while not server.headers:  # the extraction is waiting for its model
                time.sleep(0.05)
            seen = [
                http.get("/knowledgesources/news/status").json()["graphStatistics"]
                for _ in range(12)
            ]
            assert {g["synchronizing"] for g in seen} == {True}  # whichever worker answers
            gate.set()
            first = graph_statistics(http)
            assert first["triplesWritten"] == 1

            # a model that cannot read a file: its error is the last synchronisation's
            failing = upload(http, "gamma.md", "# Gamma\n\nGamma Works bakes bread.\n")
            assert failing.status_code == 201, failing.text
            last = graph_statistics(http, after=first)
            assert last["filesRead"] == 1 and last["endTime"]
            assert [e["fileName"] for e in last["errors"]] == ["gamma.md"]
            seen = [
                http.get("/knowledgesources/news/status").json()["graphStatistics"]
                for _ in range(12)
            ]
            assert [g for g in seen if g != last] == []

        with serve_process(data) as (url, _), fresh(url) as http:  # the same data, restarted
            status = http.get("/knowledgesources/news/status")
            assert status.status_code == 200, status.text
            assert status.json()["graphStatistics"] == last
