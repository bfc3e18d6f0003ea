"""``agentic-retrieval kb`` / ``source``: list, show and delete without the SDK."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agentic_retrieval.cli import app
from agentic_retrieval.kb.management import put_index, put_knowledge_base, put_knowledge_source
from agentic_retrieval.kb.service import ServiceDirectory

runner = CliRunner()


@pytest.fixture
def data(tmp_path):
    service = ServiceDirectory(tmp_path / "data")
    put_index(
        service,
        {"name": "guides", "fields": [{"name": "id", "type": "Edm.String", "key": True}]},
    )
    put_knowledge_source(
        service,
        {
            "name": "guides-ks",
            "kind": "searchIndex",
            "description": "Rider guides",
            "searchIndexParameters": {"searchIndexName": "guides"},
        },
    )
    put_knowledge_source(service, {"name": "uploads", "kind": "file"})
    put_knowledge_base(
        service,
        {
            "name": "transit",
            "knowledgeSources": [{"name": "guides-ks"}],
            "models": [{"kind": "azureOpenAI", "azureOpenAIParameters": {"apiKey": "secret"}}],
        },
    )
    service.close()
    return tmp_path / "data"


def run(*args: str):
    return runner.invoke(app, list(args))


def test_list_and_show_a_data_directory(data):
    listed = run("kb", "list", "--data", str(data), "--json")
    assert listed.exit_code == 0, listed.output
    assert [b["name"] for b in json.loads(listed.output)] == ["transit"]
    shown = json.loads(run("kb", "show", "transit", "--data", str(data)).output)
    assert shown["knowledgeSources"] == [{"name": "guides-ks"}]
    assert shown["models"][0]["azureOpenAIParameters"]["apiKey"] == "<redacted>"
    sources = json.loads(run("source", "list", "--data", str(data), "--json").output)
    assert [(s["name"], s["kind"], s["documents"]) for s in sources] == [
        ("guides-ks", "searchIndex", 0),
        ("uploads", "file", 0),
    ]
    table = run("source", "list", "--data", str(data))
    assert "guides-ks" in table.output and "Rider guides" in table.output


def test_delete_follows_the_rest_rules(data):
    refused = run("source", "delete", "guides-ks", "--data", str(data))
    assert refused.exit_code == 2
    assert "used by knowledge base(s) transit" in refused.output
    assert run("kb", "delete", "transit", "--data", str(data)).exit_code == 0
    assert run("source", "delete", "guides-ks", "--data", str(data)).exit_code == 0
    assert json.loads(run("kb", "list", "--data", str(data), "--json").output) == []
    names = [
        s["name"] for s in json.loads(run("source", "list", "--data", str(data), "--json").output)
    ]
    assert names == ["uploads"]
    missing = run("kb", "show", "transit", "--data", str(data))
    assert missing.exit_code == 2 and "no knowledge base named 'transit'" in missing.output
    none = run("kb", "show", "--data", str(data))
    assert none.exit_code == 2 and "give the knowledge base's name" in none.output


def test_show_needs_no_name_when_the_directory_holds_one_knowledge_base(data, tmp_path):
    only = json.loads(run("kb", "show", "--data", str(data)).output)
    assert only["name"] == "transit"
    service = ServiceDirectory(data)
    put_knowledge_base(service, {"name": "ferries", "knowledgeSources": [{"name": "guides-ks"}]})
    service.close()
    two = run("kb", "show", "--data", str(data))
    assert two.exit_code == 2
    assert "give the knowledge base's name: " in two.output and "2: ferries, transit" in two.output
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "ferry.md").write_text("# Ferry\n\nThe Gull Island ferry leaves hourly.\n")
    kb = str(tmp_path / "kb")
    assert run("index", "--kb", kb, "--source", "ferries", str(docs)).exit_code == 0
    shown = run("kb", "show", "--kb", kb)
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["knowledgeSources"] == [{"name": "ferries"}]


def test_a_knowledge_base_directory_lists_shows_and_deletes_its_sources(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "ferry.md").write_text("# Ferry\n\nThe Gull Island ferry leaves hourly.\n")
    for source in ("ferries", "spare"):
        indexed = run("index", "--kb", str(tmp_path / "kb"), "--source", source, str(docs))
        assert indexed.exit_code == 0, indexed.output
    kb = str(tmp_path / "kb")
    assert [b["name"] for b in json.loads(run("kb", "list", "--kb", kb, "--json").output)] == ["kb"]
    shown = json.loads(run("source", "show", "ferries", "--kb", kb).output)
    assert (shown["documents"], shown["chunks"]) == (1, 1)
    assert run("source", "delete", "spare", "--kb", kb).exit_code == 0
    assert not (tmp_path / "kb" / "spare.sqlite").exists()
    listed = json.loads(run("source", "list", "--kb", kb, "--json").output)
    assert [s["name"] for s in listed] == ["ferries"]
    unknown = run("source", "show", "spare", "--kb", kb)
    assert unknown.exit_code == 2 and "no source 'spare'" in unknown.output


def test_management_commands_need_a_directory_and_serve_needs_something_to_serve(tmp_path):
    assert run("kb", "list").exit_code == 2
    not_data = run("kb", "list", "--data", str(tmp_path))
    assert not_data.exit_code == 2 and "not a service data directory" in not_data.output
    nothing = run("serve")
    assert nothing.exit_code == 2 and "--data DIR" in nothing.output
