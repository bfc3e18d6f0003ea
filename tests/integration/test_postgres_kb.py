"""A knowledge-base directory whose sources live in PostgreSQL: the CLI and Python unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.fakes import write
from typer.testing import CliRunner

from agentic_retrieval.cli import app
from agentic_retrieval.kb.directory import KnowledgeBaseDirectory
from agentic_retrieval.kb.loader import open_knowledge_base

pytest.importorskip("psycopg")

runner = CliRunner()


def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    write(folder / "bikes.md", "# Bikes\n\nBikes ride on trams outside rush hour for 1 euro.\n")
    write(folder / "lost.md", "# Lost property\n\nItems left on a tram are kept for 30 days.\n")
    return folder


def index(kb: Path, *args: str) -> object:
    return runner.invoke(app, ["index", "--kb", str(kb), "--source", "guides", *args])


def test_index_and_retrieve_through_postgres_from_the_cli(postgres_url, tmp_path) -> None:
    kb = tmp_path / "kb"
    folder = docs(tmp_path)
    first = index(kb, "--no-embeddings", "--database", postgres_url, str(folder))
    assert first.exit_code == 0, first.output
    assert [p.name for p in kb.iterdir() if p.suffix == ".sqlite"] == []  # nothing on disk
    entry = json.loads((kb / "knowledge-base.json").read_text())["sources"][0]
    assert entry["database"] == f"{postgres_url}#kb-guides"
    again = index(kb, str(folder))  # incremental, and the source keeps its database
    assert again.exit_code == 0 and "files unchanged (skipped)        │ 2" in again.output
    answer = runner.invoke(
        app, ["retrieve", "--kb", str(kb), "--effort", "minimal", "--json", "lost items kept"]
    )
    assert answer.exit_code == 0, answer.output
    response = json.loads(answer.output)
    grounding = json.loads(response["response"][0]["content"][0]["text"])
    assert grounding[0]["title"] == "Lost property"
    assert response["activity"][0]["knowledgeSourceKind"] == "postgres"


def test_the_graph_and_python_read_the_same_store(postgres_url, tmp_path) -> None:
    directory = KnowledgeBaseDirectory(tmp_path / "kb").create("handbook")
    directory.add_or_update_source("guides", database=postgres_url)
    directory.index("guides", [docs(tmp_path)])
    kb = open_knowledge_base(tmp_path / "kb")
    response = kb.retrieve(
        {
            "intents": [{"type": "semantic", "search": "bikes on trams"}],
            "retrievalReasoningEffort": {"kind": "minimal"},
        }
    )
    grounding = json.loads(response.response[0].content[0].text)
    assert grounding[0]["title"] == "Bikes"
    assert directory.open_source("guides").kind == "postgres"


def test_a_database_that_is_down_is_one_clear_line(tmp_path) -> None:
    from tests.postgres_harness import free_port

    url = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    result = index(tmp_path / "kb", "--no-embeddings", "--database", url, str(docs(tmp_path)))
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: source 'guides': {url}: the database is unreachable (Is the server running "
        "on that host and accepting TCP/IP connections?)"
    ]
    assert not (tmp_path / "kb").exists()  # the run left nothing behind


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("postgresql://a b", "invalid PostgreSQL URL: unexpected spaces"),
        ("postgresql://127.0.0.1:notaport/db", "invalid PostgreSQL URL"),
        ("postgresql://127.0.0.1/db#x", "--database expects postgresql://"),
        ("mysql://127.0.0.1/db", "--database expects postgresql://"),
    ],
)
def test_a_bad_url_fails_with_one_line(url: str, reason: str, tmp_path) -> None:
    result = index(tmp_path / "kb", "--no-embeddings", "--database", url, str(docs(tmp_path)))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and reason in lines[0]
    assert not (tmp_path / "kb").exists()
