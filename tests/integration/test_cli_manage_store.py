"""``agentic-retrieval kb`` / ``source`` on the state ``serve --store postgresql://...`` keeps.

The management commands open the service state as ``serve`` does (``--store URL`` or
``$AGENTIC_RETRIEVAL_STORE``): what a replica was told, they list; what they delete, every
replica stops serving; a URL that is wrong or unreachable is the same one line as ``serve``'s.
"""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest
from tests.integration.service_process import KEY, VERSION, serve_process
from typer.testing import CliRunner

from agentic_retrieval.cli import app
from agentic_retrieval.kb.management import put_index, put_knowledge_base, put_knowledge_source
from agentic_retrieval.kb.service_state import open_service

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
runner = CliRunner()
INDEX = {
    "name": "guides",
    "fields": [
        {"name": "id", "type": "Edm.String", "key": True},
        {"name": "content", "type": "Edm.String", "searchable": True},
    ],
}
SOURCE = {
    "name": "guides-ks",
    "kind": "searchIndex",
    "description": "Rider guides",
    "searchIndexParameters": {"searchIndexName": "guides"},
}


def run(*args: str, env: dict[str, str] | None = None):
    return runner.invoke(app, list(args), env=env)


def where(data, store: str | None) -> list[str]:
    """The options that name the service state: ``--data DIR`` (and ``--store URL``)."""
    return ["--data", str(data), *(["--store", store] if store else [])]


def test_the_commands_list_show_and_delete_either_store(
    tmp_path, open_service_state, service_store
):
    data = tmp_path / "data"
    service = open_service_state(data)
    put_index(service, INDEX)
    put_knowledge_source(service, SOURCE)
    put_knowledge_base(service, {"name": "transit", "knowledgeSources": [{"name": "guides-ks"}]})
    service.close()
    options = where(data, service_store)

    listed = run("kb", "list", *options, "--json")
    assert listed.exit_code == 0, listed.output
    assert [b["name"] for b in json.loads(listed.output)] == ["transit"]
    shown = run("source", "show", "guides-ks", *options)
    assert shown.exit_code == 0, shown.output
    assert (json.loads(shown.output)["description"], json.loads(shown.output)["documents"]) == (
        "Rider guides",
        0,
    )
    refused = run("source", "delete", "guides-ks", *options)
    assert refused.exit_code == 2 and "used by knowledge base(s) transit" in refused.output
    assert run("kb", "delete", "transit", *options).exit_code == 0
    assert run("source", "delete", "guides-ks", *options).exit_code == 0

    after = open_service(data, service_store)
    try:
        assert after.definitions("knowledgeBase") == []
        assert after.definitions("knowledgeSource") == []
        assert [d.name for d in after.definitions("index")] == ["guides"]
    finally:
        after.close()
    missing = run("kb", "show", "transit", *options)
    assert missing.exit_code == 2 and "no knowledge base named 'transit'" in missing.output


@pytest.mark.slow
def test_what_a_replica_created_is_listed_and_deleted_through_the_store(tmp_path, postgres_url):
    """No data directory of the replica's: the URL (here from the environment) is enough."""
    extra = ("--store", postgres_url, "--no-embeddings")
    with (
        serve_process(tmp_path / "replica", extra=extra) as (url, _),
        httpx.Client(base_url=url, headers={"api-key": KEY}, params=VERSION, timeout=60) as http,
    ):
        assert http.put("/indexes('guides')", json=INDEX).status_code == 201
        doc = {"id": "ferry", "content": "the Gull Island ferry leaves hourly"}
        assert http.post("/indexes('guides')/docs/index", json={"value": [doc]}).status_code == 200
        assert http.put("/knowledgesources('guides-ks')", json=SOURCE).status_code == 201
        base = {"name": "transit", "knowledgeSources": [{"name": "guides-ks"}]}
        assert http.put("/knowledgebases('transit')", json=base).status_code == 201

        env = {"AGENTIC_RETRIEVAL_STORE": postgres_url}
        sources = run("source", "list", "--json", env=env)
        assert sources.exit_code == 0, sources.output
        assert [(s["name"], s["documents"]) for s in json.loads(sources.output)] == [
            ("guides-ks", 1)
        ]
        table = run("kb", "list", env=env)
        assert "transit" in table.output and "guides-ks" in table.output

        deleted = run("kb", "delete", "transit", "--store", postgres_url)
        assert deleted.exit_code == 0, deleted.output
        assert http.get("/knowledgebases('transit')").status_code == 404
        assert http.get("/knowledgebases").json()["value"] == []


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgresql://nobody@127.0.0.1:1/none", "unreachable"),
        ("mysql://127.0.0.1/db", "not a PostgreSQL URL"),
        ("postgresql://h:notaport/db", "invalid PostgreSQL URL"),
    ],
)
def test_a_bad_url_is_one_line_as_serve_says_it(tmp_path, url, says):
    argv = [sys.executable, "-m", "agentic_retrieval.cli", "kb", "list", "--store", url]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: --store: ") and says in lines[0]
    assert "Traceback" not in result.stderr


def test_a_knowledge_base_directory_is_not_a_store(tmp_path, postgres_url):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "ferry.md").write_text("# Ferry\n\nThe Gull Island ferry leaves hourly.\n")
    kb = str(tmp_path / "kb")
    assert run("index", "--kb", kb, "--source", "ferries", str(docs)).exit_code == 0
    both = run("source", "list", "--kb", kb, "--store", postgres_url)
    assert both.exit_code == 2 and "give one of them" in both.output
    # a deployment's $AGENTIC_RETRIEVAL_STORE does not hijack --kb
    listed = run("source", "list", "--kb", kb, "--json", env={"AGENTIC_RETRIEVAL_STORE": "x"})
    assert listed.exit_code == 0, listed.output
    assert [s["name"] for s in json.loads(listed.output)] == ["ferries"]


def test_kb_update_refuses_a_service_in_one_line(postgres_url, tmp_path):
    """Only a knowledge-base directory's settings change from the command line."""
    refused = run("kb", "update", "--store", postgres_url, "--max-runtime", "30")
    assert refused.exit_code == 2
    assert refused.output.count("\n") == 1, refused.output
    assert "--store URL changes over REST: PUT /knowledgebases('NAME')" in refused.output
    from_data = run("kb", "update", "--data", str(tmp_path), "--max-runtime", "30")
    assert from_data.exit_code == 2 and "--data DIR changes over REST" in from_data.output
