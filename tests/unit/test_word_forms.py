"""Word forms in the lexical index: "dog" finds "Dogs", and old indexes are rebuilt to match.

BM25 over the analysed words is checked against Lucene's formula in test_local_store.py.
"""

from __future__ import annotations

import json

import pytest
import tantivy
from typer.testing import CliRunner

from agentic_retrieval.cli import app
from agentic_retrieval.odata import parse_filter
from agentic_retrieval.sources.local.store import (
    ChunkRecord,
    FileState,
    LocalStore,
    lexical_directory,
    lexical_index,
)

runner = CliRunner()


def add(store: LocalStore, key: str, content: str) -> None:
    state = FileState(f"/virtual/{key}", key, key, key, 0.0, len(content), 1)
    store.replace_file(state, {}, [ChunkRecord(key, 0, "", content)])


def ids(hits) -> list[str]:
    return [hit.id for hit in hits]


@pytest.fixture
def house_rules(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "pets.md").write_text(
        "# Pets\n\nDogs are not allowed in the apartments, except guide dogs on a leash.\n"
    )
    (folder / "garden.md").write_text(
        "# Garden\n\nHoses may only be used before 8 am while the summer watering ban lasts.\n"
    )
    (folder / "ferries.md").write_text(
        "# Ferries\n\nThe harbour ferry to Gull Island leaves every 40 minutes from Pier 3.\n"
    )
    kb = tmp_path / "kb"
    result = runner.invoke(app, ["index", "--kb", str(kb), "--source", "rules", str(folder)])
    assert result.exit_code == 0, result.output
    return kb


@pytest.mark.parametrize(
    ("question", "answer"),
    [
        ("Is it OK to bring my dog?", "docs-pets-md-0"),
        ("When can I use a hose?", "docs-garden-md-0"),
    ],
)
def test_a_question_finds_the_plural_the_document_uses(house_rules, question, answer):
    result = runner.invoke(
        app, ["retrieve", "--kb", str(house_rules), "--effort", "minimal", "--json", question]
    )
    assert result.exit_code == 0, result.output
    references = json.loads(result.stdout)["references"]
    assert [ref["docKey"] for ref in references][:1] == [answer]


def test_a_store_indexed_with_the_old_analyzer_is_rebuilt_on_open(tmp_path, monkeypatch):
    path = tmp_path / "s.sqlite"
    old = (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(255))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
        .build()
    )
    with monkeypatch.context() as patch:  # what stores wrote before: format 2, exact word forms
        patch.setattr(lexical_index, "_ANALYZER", old)
        patch.setattr(lexical_index, "LEXICAL_FORMAT", 2)
        store = LocalStore(path, create=True)
        add(store, "pets", "Dogs are not allowed in the apartments")
        add(store, "garden", "Hoses may only be used before 8 am")
        assert ids(store.search("dog")) == [] and ids(store.search("hose")) == []
        store.close()
    current = json.loads((lexical_directory(path) / "current").read_text())
    assert current["format"] == 2
    store = LocalStore(path)
    assert ids(store.search("dog")) == ["pets"]
    assert ids(store.search("hose")) == ["garden"]
    rebuilt = json.loads((lexical_directory(path) / "current").read_text())
    assert rebuilt["format"] == lexical_index.LEXICAL_FORMAT > 2
    assert rebuilt["name"] != current["name"]
    assert not (lexical_directory(path) / current["name"]).exists()  # the old one removed
    store.close()


def test_filters_match_keyword_values_exactly_whatever_the_text_analysis(tmp_path):
    store = LocalStore(tmp_path / "s.sqlite", create=True)
    for key, kind in (("a", "dogs"), ("b", "dog")):
        state = FileState(f"/virtual/{key}", key, key, key, 0.0, 1, 1)
        chunk = ChunkRecord(key, 0, "", "pets are welcome", None, {"kind": kind})
        store.replace_file(state, {}, [chunk])
    assert ids(store.search("pets", filter_expr=parse_filter("kind eq 'dog'"))) == ["b"]
    assert ids(store.search("pets", filter_expr=parse_filter("kind eq 'dogs'"))) == ["a"]
    store.close()
