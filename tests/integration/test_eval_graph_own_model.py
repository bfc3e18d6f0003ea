"""``eval --graph`` with a user's own model: an OpenAI-compatible server on 127.0.0.1.

The documented command (README, "What an entity graph buys") points ``openai:NAME`` at the
server through ``OPENAI_BASE_URL``; the real ``langchain-openai`` client extracts the graph.
"""

from __future__ import annotations

from tests.fakes import triple, write_multihop_toy
from tests.integration.openai_standin import OpenAIStandIn
from typer.testing import CliRunner

from agentic_retrieval.cli import app

runner = CliRunner()

EXTRACTED = [
    {"triples": [triple("Acme Corp", "Organization", "acquired", "Beta Labs", "Organization")]},
    {"triples": [triple("Beta Labs", "Organization", "locatedIn", "Oslo", "City")]},
    {"triples": [triple("Acme Corp", "Organization", "locatedIn", "Lyon", "City")]},
    {"triples": []},
]


def test_the_graph_is_extracted_by_the_users_model_and_named_in_the_report(tmp_path, monkeypatch):
    toy = write_multihop_toy(tmp_path / "toy")
    with OpenAIStandIn({"ExtractedTriples": list(EXTRACTED)}) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "unused")
        args = ["eval", "--dataset", str(toy), "--questions", str(toy / "questions.jsonl")]
        args += ["--cache", str(tmp_path / "cache"), "--no-embeddings", "--top-n", "10"]
        args += ["--graph", str(toy / "ontology.jsonld"), "--chat-model", "openai:own-model"]
        result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert len(server.requests) == 4  # one extraction call per record; minimal asks nothing
    assert {r["model"] for r in server.requests} == {"own-model"}
    assert "extracted by 'own-model': 4 documents read now (3 triples written)" in result.stdout
    rows = [line for line in result.stdout.splitlines() if "top10" in line and "│" in line]
    plain = next(r for r in rows if "/graph" not in r)
    graphed = next(r for r in rows if "/graph" in r)
    assert "0.500" in plain and "1.000" in graphed  # evidence recall, without and with
