"""A served knowledge base picks up sources added, removed or re-described while it runs."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.fakes import write

from agentic_retrieval.kb import live
from agentic_retrieval.kb.directory import KnowledgeBaseDirectory
from agentic_retrieval.kb.loader import open_knowledge_base
from agentic_retrieval.server import ServerSettings, create_app

URL = "/knowledgebases/kb/retrieve?api-version=2026-04-01"


def minimal(text: str, **extra) -> dict:
    return {"intents": [{"search": text}], "retrievalReasoningEffort": {"kind": "minimal"}, **extra}


def add_source(root: Path, name: str, text: str, description: str = "") -> None:
    """What ``agentic-retrieval index --kb root/kb --source name`` does, from another process."""
    write(root / name / "doc.txt", text)
    directory = KnowledgeBaseDirectory(root / "kb").load()
    directory.add_or_update_source(name, description=description)
    directory.index(name, [root / name])
    directory.close()


@pytest.fixture
def root(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setattr(live, "CHECK_INTERVAL_SECONDS", 0.0)
    KnowledgeBaseDirectory(tmp_path / "kb").create(name="kb")
    add_source(tmp_path, "fares", "Bike fares: one dollar to unlock.")
    return tmp_path


def test_a_source_added_while_serving_is_searched_without_a_restart(root):
    app = create_app(open_knowledge_base(root / "kb"), settings=ServerSettings(read_env_keys=False))
    with TestClient(app) as client:
        before = client.post(URL, json=minimal("night tram"))
        assert [a["knowledgeSourceName"] for a in before.json()["activity"][:1]] == ["fares"]
        assert before.json()["references"] == []
        add_source(root, "hours", "The night tram runs every 30 minutes.", "Service hours")
        after = client.post(URL, json=minimal("night tram"))
        assert after.status_code == 200
        assert [r["docKey"] for r in after.json()["references"]] == ["hours-doc-txt-0"]
        named = client.post(
            URL,
            json=minimal(
                "night tram",
                knowledgeSourceParams=[{"knowledgeSourceName": "hours", "kind": "local"}],
            ),
        )
        assert named.status_code == 200  # not "unknown knowledge source"
        listing = client.get("/knowledgebases/kb?api-version=2026-04-01")
        sources = {s["name"]: s["description"] for s in listing.json()["knowledgeSources"]}
        assert sources == {"fares": None, "hours": "Service hours"}


def test_removed_and_redescribed_sources_are_followed(root):
    add_source(root, "hours", "The night tram runs every 30 minutes.")
    kb = open_knowledge_base(root / "kb")
    assert sorted(kb.sources) == ["fares", "hours"]
    manifest_path = root / "kb" / "knowledge-base.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["sources"] = [s for s in manifest["sources"] if s["name"] == "fares"]
    manifest["sources"][0]["description"] = "Tram and bike fares"
    manifest_path.write_text(json.dumps(manifest))
    assert sorted(kb.sources) == ["fares"]
    assert kb.sources["fares"].description == "Tram and bike fares"
    assert kb.retrieve(minimal("night tram")).references == []


def test_a_source_not_yet_openable_keeps_the_others_serving(root, caplog):
    kb = open_knowledge_base(root / "kb")
    manifest_path = root / "kb" / "knowledge-base.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["sources"].append({"name": "later", "database": "later.sqlite"})
    manifest_path.write_text(json.dumps(manifest))
    caplog.set_level(logging.WARNING)
    for _ in range(3):
        response = kb.retrieve(minimal("bike fares"))
        assert [r.doc_key for r in response.references] == ["fares-doc-txt-0"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "keeping its sources as they were" in warnings[0]


def test_an_explicit_source_list_stays_as_asked(root):
    kb = open_knowledge_base(root / "kb", sources=["fares"])
    add_source(root, "hours", "The night tram runs every 30 minutes.")
    assert list(kb.sources) == ["fares"]
