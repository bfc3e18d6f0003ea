"""Links in responses (``citationUrl``, ``@odata.nextLink``) point at the service, whoever asks.

They were built from the request's ``Host`` header, so ``Host: evil.example`` made the service
hand out links to evil.example (and a client following a ``nextLink`` sends its key there).
They now come from ``--public-url`` / ``ServerSettings.public_url``, else from the address
the server is bound to.
"""

from __future__ import annotations

import json

import httpx
import pytest
from tests.server_harness import intents_body, running_server
from typer.testing import CliRunner

from agentic_retrieval.cli import app as cli
from agentic_retrieval.kb.service import ServiceDirectory
from agentic_retrieval.server import ServerSettings, create_app

pytestmark = pytest.mark.integration
VERSION = {"api-version": "2026-04-01"}
ADMIN = {"api-key": "admin-key"}
EVIL = {"Host": "evil.example"}
INDEX = {
    "name": "guides",
    "fields": [
        {"name": "id", "type": "Edm.String", "key": True},
        {"name": "content", "type": "Edm.String"},
    ],
}


def serve(tmp_path, **settings):
    service = ServiceDirectory(tmp_path / "data")
    app = create_app(
        service=service,
        settings=ServerSettings(api_keys=["admin-key"], read_env_keys=False, **settings),
    )
    return running_server(app)


def with_guides(http: httpx.Client) -> None:
    for name in ("guides", "notes"):
        assert http.put(f"/indexes/{name}", json={**INDEX, "name": name}).status_code == 201
    batch = {"value": [{"@search.action": "upload", "id": "pass", "content": "A day pass."}]}
    assert http.post("/indexes/guides/docs/index", json=batch).status_code == 200
    source = {"name": "guides-ks", "kind": "searchIndex"}
    source["searchIndexParameters"] = {"searchIndexName": "guides"}
    assert http.put("/knowledgesources/guides-ks", json=source).status_code == 201
    base = {"name": "transit", "knowledgeSources": [{"name": "guides-ks"}]}
    assert http.put("/knowledgebases/transit", json=base).status_code == 201


def links(http: httpx.Client, headers: dict[str, str]) -> tuple[str, str]:
    """The citationUrl of a retrieve and the nextLink of a one-per-page index list."""
    retrieved = http.post(
        "/knowledgebases/transit/retrieve", json=intents_body("day pass"), headers=headers
    )
    assert retrieved.status_code == 200, retrieved.text
    listed = http.get("/indexes", params={**VERSION, "pageSize": 1}, headers=headers)
    assert listed.status_code == 200, listed.text
    return retrieved.json()["references"][0]["citationUrl"], listed.json()["@odata.nextLink"]


def test_links_point_at_the_bound_address_whatever_the_host_header(tmp_path):
    with serve(tmp_path) as url, httpx.Client(base_url=url, headers=ADMIN, params=VERSION) as http:
        with_guides(http)
        citation, next_link = links(http, EVIL)
        assert citation.startswith(f"{url}/indexes/guides/docs/pass?"), citation
        assert next_link.startswith(f"{url}/indexes?"), next_link
        # the links work: they lead back here
        assert httpx.get(citation, headers=ADMIN).json()["id"] == "pass"
        assert httpx.get(next_link, headers=ADMIN).json()["value"][0]["name"] == "notes"


def test_links_point_at_the_configured_public_url(tmp_path):
    public = "https://search.example.com/base/"
    with (
        serve(tmp_path, public_url=public) as url,
        httpx.Client(base_url=url, headers=ADMIN, params=VERSION) as http,
    ):
        with_guides(http)
        for headers in ({}, EVIL):
            citation, next_link = links(http, headers)
            assert citation.startswith("https://search.example.com/base/indexes/guides/docs/pass?")
            assert next_link.startswith("https://search.example.com/base/indexes?")
            assert next_link.endswith("%24skipToken=guides")


def mcp_citation(http: httpx.Client) -> str:
    """The citationUrl of the first reference of an MCP tool call."""
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "knowledge_base_retrieve", "arguments": {"query": "day pass"}},
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }
    reply = http.post("/knowledgebases/transit/mcp", json=call, headers=headers)
    assert reply.status_code == 200, reply.text
    result = json.loads(reply.text.split("data: ", 1)[1])["result"]
    assert not result["isError"], result
    [reference] = result["structuredContent"]["references"]
    return str(reference["citationUrl"])


def test_mcp_references_carry_the_same_citation_url_as_rest(tmp_path):
    with serve(tmp_path) as url, httpx.Client(base_url=url, headers=ADMIN, params=VERSION) as http:
        with_guides(http)
        citation = mcp_citation(http)
        assert citation.startswith(f"{url}/indexes/guides/docs/pass?"), citation
        assert httpx.get(citation, headers=ADMIN).json()["id"] == "pass"
    public = "https://search.example.com/base"
    with (
        serve(tmp_path, public_url=public) as url,
        httpx.Client(base_url=url, headers=ADMIN, params=VERSION) as http,
    ):
        citation = mcp_citation(http)
        assert citation.startswith(f"{public}/indexes/guides/docs/pass?"), citation


@pytest.mark.parametrize(
    "bad", ["ftp://x.example", "search.example.com", "https://", "https://x?a=1", "https://u:p@x"]
)
def test_a_public_url_that_is_no_base_url_is_refused(bad):
    with pytest.raises(ValueError, match="public URL"):
        ServerSettings(public_url=bad)


def test_serve_takes_the_public_url_from_its_option_or_the_environment(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(
        "agentic_retrieval.server.serving.serve", lambda app, **kw: started.append(app)
    )
    runner = CliRunner()
    argv = ["serve", "--data", str(tmp_path / "data"), "--port", "0", "--api-key", "k"]
    monkeypatch.setenv("AGENTIC_RETRIEVAL_PUBLIC_URL", "https://env.example/")
    assert runner.invoke(cli, argv).exit_code == 0
    assert started[-1].state.settings.public_url == "https://env.example"
    result = runner.invoke(cli, [*argv, "--public-url", "https://flag.example"])
    assert result.exit_code == 0, result.output
    assert started[-1].state.settings.public_url == "https://flag.example"
    refused = runner.invoke(cli, [*argv, "--public-url", "ftp://flag.example"])
    assert refused.exit_code == 2 and "public URL 'ftp://flag.example'" in refused.output
