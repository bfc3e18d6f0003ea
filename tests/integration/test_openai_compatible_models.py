"""``openAICompatible`` models (2026-11-01-preview) over REST against ``serve --data``.

A knowledge base pointed at an OpenAI-compatible endpoint (here a stand-in on 127.0.0.1)
plans with it through ``langchain-openai``, sending the stored headers; those headers (names
and values) appear in no response body (create, read, list, update, errors, retrieve) and in
no log record; an update keeps them only while the endpoint and model stay the same.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.integration.openai_standin import OpenAIStandIn
from tests.server_harness import GUIDES, GUIDES_INDEX

from agentic_retrieval.errors import InvalidDefinitionError
from agentic_retrieval.kb.model_connections import refuse_web_sources
from agentic_retrieval.kb.service import ServiceDirectory
from agentic_retrieval.server import ServerSettings, create_app

pytest.importorskip("langchain_openai")
pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
NEW = "api-version=2026-11-01-preview"
ADMIN = {"api-key": "admin-key"}
HEADER_NAME = "X-Tenant-Zqxv-Secret"
HEADER_VALUE = "hdr-value-8c1f2e"
TOKEN = "tok-5b7d9a"
SECRETS = (HEADER_NAME, HEADER_VALUE, TOKEN)
README = Path(__file__).resolve().parents[2] / "README.md"
PLAN = {
    "needs_retrieval": True,
    "assistant_message": "",
    "queries": [{"query": "harbor pass price", "goal": "fare", "knowledge_sources": []}],
}
ASK = {
    "messages": [{"role": "user", "content": [{"type": "text", "text": "Harbor pass price?"}]}],
    "retrievalReasoningEffort": {"kind": "low"},
    "includeActivity": True,
}


def model(uri: str, name: str = "local-qwen", headers: dict | None = None, **extra) -> dict:
    params: dict = {"uri": uri, "modelName": name, **extra}
    if headers is not None:
        params["headers"] = headers
    return {"kind": "openAICompatible", "openAICompatibleParameters": params}


def base(*models: dict) -> dict:
    return {"name": "local", "knowledgeSources": [{"name": "guides-ks"}], "models": list(models)}


SECRET_HEADERS = {HEADER_NAME: HEADER_VALUE, "Authorization": f"Bearer {TOKEN}"}


def leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s.lower() in text.lower()]


@pytest.fixture
def served(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    settings = ServerSettings(api_keys=["admin-key"], read_env_keys=False)
    app = create_app(service=ServiceDirectory(tmp_path / "data"), settings=settings)
    with TestClient(app, base_url="http://127.0.0.1:8080", raise_server_exceptions=False) as c:
        assert c.put(f"/indexes('guides')?{NEW}", json=GUIDES_INDEX, headers=ADMIN).is_success
        batch = {"value": [{"@search.action": "upload", **doc} for doc in GUIDES]}
        assert c.post(f"/indexes('guides')/docs/search.index?{NEW}", json=batch, headers=ADMIN)
        source = {
            "name": "guides-ks",
            "kind": "searchIndex",
            "searchIndexParameters": {"searchIndexName": "guides"},
        }
        assert c.put(f"/knowledgesources('guides-ks')?{NEW}", json=source, headers=ADMIN)
        yield c


def test_the_model_plans_with_its_headers_which_no_response_or_log_shows(served, caplog):
    c = served
    bodies: list[str] = []
    with OpenAIStandIn({"QueryPlan": [PLAN, PLAN]}) as server:
        uri = f"{server.base_url}/chat/completions"
        put = c.put(
            f"/knowledgebases('local')?{NEW}", json=base(model(uri, headers=SECRET_HEADERS)),
            headers=ADMIN,
        )  # fmt: skip
        assert put.status_code == 201, put.text
        params = put.json()["models"][0]["openAICompatibleParameters"]
        assert params == {"uri": uri, "modelName": "local-qwen"}  # headers left out, names too
        bodies.append(put.text)

        answer = c.post(f"/knowledgebases/local/retrieve?{NEW}", json=ASK, headers=ADMIN)
        assert answer.status_code == 200, answer.text
        bodies.append(answer.text)
        (planning,) = [r for r in answer.json()["activity"] if r["type"] == "modelQueryPlanning"]
        assert planning["inputTokens"] == 321  # the stand-in's usage: the call went there
        assert answer.json()["references"][0]["docKey"] == "pass"
        (sent,) = server.headers
        assert sent[HEADER_NAME.lower()] == HEADER_VALUE
        assert sent["authorization"] == f"Bearer {TOKEN}"
        assert server.requests[0]["model"] == "local-qwen"

        # an update that keeps endpoint and model may omit the headers: they are kept
        kept = c.put(f"/knowledgebases('local')?{NEW}", json=base(model(uri)), headers=ADMIN)
        assert kept.status_code == 204, kept.text
        bodies.append(kept.text)
        again = c.post(f"/knowledgebases/local/retrieve?{NEW}", json=ASK, headers=ADMIN)
        assert again.status_code == 200
        assert server.headers[1][HEADER_NAME.lower()] == HEADER_VALUE

    for path in ("/knowledgebases('local')", "/knowledgebases"):
        read = c.get(f"{path}?{NEW}", headers=ADMIN)
        assert read.status_code == 200
        assert "openAICompatibleParameters" in read.text and "headers" not in read.text
        bodies.append(read.text)
    for refused in (
        base(model(uri, name="another-model")),  # model changed: fresh credentials needed
        base(model("http://127.0.0.1:9/v1/chat/completions")),  # endpoint changed
        base(model(uri, headers={HEADER_NAME: f"{HEADER_VALUE}\r\nX-Injected: 1"})),
        base(model(uri, headers=SECRET_HEADERS, managedIdentityAudience="0000-1111")),
    ):
        error = c.put(f"/knowledgebases('local')?{NEW}", json=refused, headers=ADMIN)
        assert error.status_code == 400, error.text
        bodies.append(error.text)
    assert [leaks(text) for text in bodies] == [[]] * len(bodies)
    assert leaks(caplog.text) == []
    assert leaks(" ".join(str(r.args) for r in caplog.records)) == []


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (model("ftp://host/v1", headers={"A": "b"}), "uri: an absolute http or https URL"),
        (model("http://u:p@host/v1", headers={"A": "b"}), "uri: no credentials in the URL"),
        (model("http://h/v1", headers={}), "headers: a non-empty map"),
        (model("http://h/v1", name="", headers={"A": "b"}), "modelName: String should have"),
        (
            model("http://h/v1", headers={"A": "b"}, managedIdentityAudience="guid"),
            "managedIdentityAudience: cannot be combined with headers",
        ),
        (
            model("http://h/v1", managedIdentityAudience="guid"),
            "managedIdentityAudience: managed identity is not supported by this service",
        ),
        (
            model("http://h/v1", headers={"bad name": HEADER_VALUE}),
            "headers: header 1 has an invalid name",
        ),
        (model("http://h/v1"), "headers: required (a new model"),
        (
            {"kind": "openAICompatible", "openAICompatibleParameters": {"uri": "http://h/v1"}},
            "modelName: Field required",
        ),
    ],
)
def test_bad_models_are_400s_naming_the_field_not_the_secret(served, entry, message):
    response = served.put(f"/knowledgebases('local')?{NEW}", json=base(entry), headers=ADMIN)
    assert response.status_code == 400, response.text
    text = response.json()["error"]["message"]
    assert "models[0].openAICompatibleParameters." in text
    assert message in text
    assert leaks(response.text) == []


def test_older_versions_refuse_the_kind(served):
    entry = model("http://127.0.0.1:9/v1/chat/completions", headers=SECRET_HEADERS)
    for version in ("2026-10-01", "2026-08-01-preview"):
        response = served.put(
            f"/knowledgebases('local')?api-version={version}", json=base(entry), headers=ADMIN
        )
        assert response.status_code == 400
        assert "need api-version 2026-11-01-preview" in response.json()["error"]["message"]
        assert leaks(response.text) == []
    assert served.get(f"/knowledgebases('local')?{NEW}", headers=ADMIN).status_code == 404


def test_a_file_sources_ingestion_model_keeps_its_headers_secret(served, tmp_path):
    c = served
    uri = "http://127.0.0.1:9/v1/chat/completions"

    def source(entry: dict) -> dict:
        return {
            "name": "files",
            "kind": "file",
            "fileParameters": {"ingestionParameters": {"chatCompletionModel": entry}},
        }

    created = c.put(
        f"/knowledgesources('files')?{NEW}", json=source(model(uri, headers=SECRET_HEADERS)),
        headers=ADMIN,
    )  # fmt: skip
    assert created.status_code == 201, created.text
    kept = c.put(f"/knowledgesources('files')?{NEW}", json=source(model(uri)), headers=ADMIN)
    assert kept.status_code == 204, kept.text
    stored = ServiceDirectory(tmp_path / "data").get("knowledgeSource", "files")
    ingestion = stored.body["fileParameters"]["ingestionParameters"]
    assert ingestion["chatCompletionModel"]["openAICompatibleParameters"]["headers"] == (
        SECRET_HEADERS
    )
    changed = c.put(
        f"/knowledgesources('files')?{NEW}", json=source(model(uri, name="other")), headers=ADMIN
    )
    assert changed.status_code == 400
    assert "chatCompletionModel.openAICompatibleParameters.headers: required" in changed.text
    bodies = [created.text, kept.text, changed.text]
    bodies += [
        c.get(f"{p}?{NEW}", headers=ADMIN).text
        for p in ("/knowledgesources('files')", "/knowledgesources")
    ]
    assert "chatCompletionModel" in bodies[-1]
    # and the command line's views of the same data directory
    from typer.testing import CliRunner

    from agentic_retrieval.cli import app

    shown = CliRunner().invoke(app, ["source", "show", "files", "--data", str(tmp_path / "data")])
    assert shown.exit_code == 0, shown.output
    assert "chatCompletionModel" in shown.output
    bodies.append(shown.output)
    assert [leaks(text) for text in bodies] == [[]] * len(bodies)


def test_web_sources_refuse_an_openai_compatible_model():
    body = base(model("http://h/v1", headers={"A": "b"}))
    refuse_web_sources(body, ["searchIndex", "file"])  # fine without a web source
    with pytest.raises(InvalidDefinitionError, match="not supported for knowledge bases with web"):
        refuse_web_sources(body, ["searchIndex", "web"])


def test_the_readme_example_body_points_a_knowledge_base_at_a_local_model(served):
    """The README's ``local-kb.json``, its ``uri`` moved to the stand-in, as the curl sends it."""
    section = README.read_text().split("#### A knowledge base on your own model", 1)[1]
    section = section.split("\n### ", 1)[0]
    (body_text,) = re.findall(r"^```json\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    body = json.loads(body_text)
    curl = section.split("```bash notest\n", 1)[1].split("```", 1)[0]
    assert "api-version=2026-11-01-preview" in curl and "-d @local-kb.json" in curl
    with OpenAIStandIn({"QueryPlan": [PLAN]}) as server:
        params = body["models"][0]["openAICompatibleParameters"]
        written = dict(params["headers"])
        params["uri"] = params["uri"].replace("http://127.0.0.1:11434/v1", server.base_url)
        put = served.put(f"/knowledgebases/local-kb?{NEW}", json=body, headers=ADMIN)
        assert put.status_code == 201, put.text
        answer = served.post(f"/knowledgebases/local-kb/retrieve?{NEW}", json=ASK, headers=ADMIN)
        assert answer.status_code == 200, answer.text
        assert server.requests[0]["model"] == params["modelName"]
        assert all(server.headers[0][k.lower()] == v for k, v in written.items())
    assert "headers" not in put.text


def test_the_environments_openai_key_never_goes_to_a_definitions_endpoint(monkeypatch):
    from agentic_retrieval.kb.model_connections import chat_model

    monkeypatch.setenv("OPENAI_API_KEY", "sk-operator-7f3e")
    with OpenAIStandIn({"text": ["hello"]}) as server:
        uri = f"{server.base_url}/chat/completions?api-version=2025-01-01"
        reply = chat_model(model(uri, headers={"api-key": HEADER_VALUE})).invoke("hi")
        (sent,) = server.headers
        (path,) = server.paths
    assert reply.content == "hello"
    assert path == "/v1/chat/completions?api-version=2025-01-01"  # the query travels along
    assert sent["api-key"] == HEADER_VALUE
    assert sent["authorization"] == "Bearer unused"  # the client's placeholder
    assert "sk-operator-7f3e" not in str(sent)
