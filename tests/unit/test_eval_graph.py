"""``eval`` with and without ``graphParameters`` on a tiny multi-hop corpus, offline.

The answer to "where is the company Acme Corp acquired?" spans two records joined by Beta
Labs: ``d1`` (Acme Corp acquired Beta Labs) and ``d2`` (Beta Labs' offices are in Oslo),
which shares no word with the question, so no lexical search finds it. The graph is read by
the ontology stand-in (names and cue words of the ontology; no LLM).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.fakes import MULTIHOP_ONTOLOGY as ONTOLOGY
from tests.fakes import write, write_multihop_toy
from typer.testing import CliRunner

from agentic_retrieval.cli import app
from agentic_retrieval.errors import EvalConfigurationError, OntologyError
from agentic_retrieval.eval import Configuration, evaluate
from agentic_retrieval.eval.standin import Gazetteer, OntologyStandInModel

runner = CliRunner()


@pytest.fixture
def toy(tmp_path) -> Path:
    return write_multihop_toy(tmp_path / "toy")


def run(toy: Path, tmp_path: Path, *configurations: Configuration, **options):
    return evaluate(
        toy,
        list(configurations),
        questions=toy / "questions.jsonl",
        embeddings=False,
        cache_dir=tmp_path / "cache",
        graph=options.pop("graph", toy / "ontology.jsonld"),
        chat_model=options.pop("chat_model", "stand-in"),
        **options,
    )


def test_the_graph_run_finds_the_second_hop_the_graphless_run_misses(toy, tmp_path):
    report = run(toy, tmp_path, Configuration(top_n=10), Configuration(top_n=10, graph=True))
    without, with_graph = report.results
    (plain,), (graphed,) = without.queries, with_graph.queries
    assert plain.evidence == [True, False] and "d2" not in plain.documents
    assert graphed.evidence == [True, True] and "d2" in graphed.documents
    # a row is a fact: it counts as the documents it was read from, never as a document
    assert set(graphed.documents) == {"d1", "d2", "d3"}
    # both phrases came through the graph's own references (d2 only through them)
    assert graphed.graph_evidence == [True, True] and plain.graph_evidence is None
    assert with_graph.summary["graph_evidence_recall"] == 1.0
    assert without.summary["evidence_recall"] == 0.5
    assert with_graph.summary["evidence_recall"] == 1.0
    assert with_graph.configuration.name == "minimal/lexical/default/top10/graph"
    # minimal effort calls no model: entity matching answers the graph search
    assert with_graph.summary["graph_searches"] == 1.0
    assert with_graph.summary["graph_fallback_rate"] == 1.0
    assert with_graph.summary["graph_query_rate"] == 0.0
    assert without.summary["graph_searches"] is None
    assert any(
        "graph of 'corpus' extracted by 'ontology-stand-in': 4 documents read now (3 " in note
        for note in report.notes
    )
    assert report.info["models"]["graph extraction"] == "ontology-stand-in"


def test_the_report_shows_with_and_without_side_by_side_with_the_graphs_activity(toy, tmp_path):
    report = run(
        toy,
        tmp_path,
        Configuration(effort="low", top_n=10),
        Configuration(effort="low", top_n=10, graph=True),
    )
    table = report.markdown().splitlines()
    header = table[0]
    for heading in ("evidence", "graph/q", "gql ran", "fallback", "gql calls", "chunks/q"):
        assert f"| {heading} |" in header
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table[2:4]}
    columns = [c.strip() for c in header.strip("|").split("|")]
    cells = {name: [c.strip() for c in row.strip("|").split("|")] for name, row in rows.items()}
    graphed = dict(zip(columns, cells["low/lexical/default/top10/graph"], strict=True))
    plain = dict(zip(columns, cells["low/lexical/default/top10"], strict=True))
    assert (plain["evidence"], graphed["evidence"]) == ("0.500", "1.000")
    # at low effort the stand-in planner writes the query, which runs at the first attempt
    assert (graphed["gql ran"], graphed["fallback"], graphed["gql calls"]) == (
        "1.00",
        "0.00",
        "1.00",
    )
    assert plain["graph/q"] == "-" and graphed["graph/q"] == "1.00"
    assert report.info["models"]["low/lexical/default/top10/graph"] == "ontology-stand-in"
    assert any("models: " in n and "'ontology-stand-in'" in n for n in report.notes)
    comparison = next(c for c in report.comparisons if c.metric == "evidence_recall")
    assert comparison.delta == 0.5


def test_a_second_run_reads_no_document_again(toy, tmp_path):
    run(toy, tmp_path, Configuration(top_n=10, graph=True))
    again = run(toy, tmp_path, Configuration(top_n=10, graph=True))
    assert any("0 documents read now (0 triples written), 3 assertions" in n for n in again.notes)
    assert again.results[0].queries[0].evidence == [True, True]


def test_the_cli_runs_each_configuration_without_and_with_the_graph(toy, tmp_path):
    args = ["eval", "--dataset", str(toy), "--questions", str(toy / "questions.jsonl")]
    args += ["--cache", str(tmp_path / "cache"), "--no-embeddings", "--top-n", "10"]
    args += ["--graph", str(toy / "ontology.jsonld"), "--chat-model", "stand-in"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "minimal/lexical/default/top10 " in result.stdout
    assert "minimal/lexical/default/top10/graph" in result.stdout
    assert "fallback" in result.stdout and "ontology-stand-in" in result.stdout


def test_a_graph_configuration_without_an_ontology_is_refused(toy, tmp_path):
    with pytest.raises(EvalConfigurationError, match="searches an entity graph: give"):
        run(toy, tmp_path, Configuration(graph=True), graph=None, chat_model=None)


def test_the_stand_in_needs_an_ontology(toy, tmp_path):
    with pytest.raises(EvalConfigurationError, match="stand-in chat model is built from an"):
        run(toy, tmp_path, Configuration(), graph=None)


def test_bad_ontology_input_gives_a_clear_error(toy, tmp_path):
    missing = toy / "nowhere.jsonld"
    with pytest.raises(EvalConfigurationError, match=r"nowhere\.jsonld"):
        run(toy, tmp_path, Configuration(graph=True), graph=missing)
    write(toy / "bad.jsonld", '{"@graph": [{"@id": "ex:x", "@type": "ex:Thing"}]}')
    with pytest.raises(OntologyError, match="declares no class"):
        run(toy, tmp_path, Configuration(graph=True), graph=toy / "bad.jsonld")
    args = ["eval", "--dataset", str(toy), "--questions", str(toy / "questions.jsonl")]
    args += ["--no-embeddings", "--graph", str(toy / "bad.jsonld"), "--chat-model", "stand-in"]
    result = runner.invoke(app, [*args, "--cache", str(tmp_path / "cache")])
    assert result.exit_code == 2 and "declares no class" in result.stderr


def test_the_stand_in_links_named_entities_by_cue_words_within_a_sentence():
    gazetteer = Gazetteer.from_ontology(json.dumps(ONTOLOGY))
    text = "Acme Corp bought Beta. Beta has offices in Oslo; Lyon is far away."
    triples = {(t["subject"], t["predicate"], t["object"]) for t in gazetteer.triples(text)}
    # aliases fold to the label; Lyon is in another sentence (split at ';'); City->City
    # links and links against the property's domain are never made
    assert triples == {("Acme Corp", "acquired", "Beta Labs"), ("Beta Labs", "locatedIn", "Oslo")}
    assert gazetteer.graph_query("Who bought beta labs?") == (
        'MATCH (a:Organization {name: "Beta Labs"})-[]-(b)-[]-(c) '
        "RETURN a.name, b.name, c.name LIMIT 20"
    )
    assert gazetteer.graph_query("Nothing known here") == ""


def test_the_stand_in_refuses_what_it_cannot_do():
    model = OntologyStandInModel.from_ontology(json.dumps(ONTOLOGY))
    with pytest.raises(NotImplementedError, match="cannot answer free text"):
        model.invoke("Write an answer")


def test_a_graph_configuration_is_compared_with_its_twin_without_the_graph(toy, tmp_path):
    report = run(
        toy,
        tmp_path,
        Configuration(top_n=1),
        Configuration(top_n=10),
        Configuration(top_n=10, graph=True),
    )
    baselines = {(c.configuration, c.baseline) for c in report.comparisons}
    assert baselines == {
        ("minimal/lexical/default/top10", "minimal/lexical/default/top1"),
        ("minimal/lexical/default/top10/graph", "minimal/lexical/default/top10"),
    }
    graphed = next(
        c
        for c in report.comparisons
        if c.configuration.endswith("/graph") and c.metric == "evidence_recall"
    )
    assert (graphed.baseline_mean, graphed.mean) == (0.5, 1.0)
    assert "| minimal/lexical/default/top10/graph (vs minimal/lexical/default/top10) |" in (
        report.markdown()
    )
