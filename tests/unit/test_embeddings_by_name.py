"""Embedding models by name: recorded in the manifest, checked on open, never mixed."""

from __future__ import annotations

import json

import pytest
from tests.fakes import ConceptEmbeddings, NamedConcepts, write
from typer.testing import CliRunner

import agentic_retrieval.embeddings as embeddings_module
from agentic_retrieval.cli import app
from agentic_retrieval.embeddings import check_embeddings_name, embeddings_by_name
from agentic_retrieval.errors import EmbeddingsConfigError, KnowledgeBaseDirectoryError
from agentic_retrieval.kb.directory import KnowledgeBaseDirectory
from agentic_retrieval.sources.base import SearchQuery

runner = CliRunner()


@pytest.fixture
def provider(monkeypatch):
    """``init_embeddings`` for a provider without network: records what it was asked for."""
    import langchain.embeddings

    built: list[str] = []

    def init_embeddings(name: str, **kwargs):
        built.append(name)
        return NamedConcepts(name.partition(":")[2])

    monkeypatch.setattr(langchain.embeddings, "init_embeddings", init_embeddings)
    return built


@pytest.fixture
def docs(tmp_path):
    write(tmp_path / "docs" / "car.txt", "The car needs new tires.")
    write(tmp_path / "docs" / "fee.txt", "The late fee is five euros.")
    return tmp_path / "docs"


def test_names_are_local_or_provider_model():
    assert check_embeddings_name(" LOCAL ") == "local"
    assert check_embeddings_name("openai: text-embedding-3-small") == (
        "openai:text-embedding-3-small"
    )
    for bad in ("minilm", "openai:", ":model", ""):
        with pytest.raises(EmbeddingsConfigError, match="use 'local'"):
            check_embeddings_name(bad)


def test_unbuildable_models_are_one_clear_line(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(EmbeddingsConfigError) as unknown:
        embeddings_by_name("nosuch:model")
    assert "Provider 'nosuch' is not supported" in str(unknown.value)
    assert "\n" not in str(unknown.value)
    with pytest.raises(EmbeddingsConfigError, match="OPENAI_API_KEY"):
        embeddings_by_name("openai:text-embedding-3-small")


async def test_the_model_and_dimension_are_recorded_and_used_on_open(tmp_path, docs, provider):
    kb_dir = tmp_path / "kb"
    result = runner.invoke(
        app,
        [
            "index",
            "--kb",
            str(kb_dir),
            "--source",
            "s",
            "--embeddings",
            "fakeprov:concepts",
            str(docs),
        ],
    )
    assert result.exit_code == 0, result.output
    entry = json.loads((kb_dir / "knowledge-base.json").read_text())["sources"][0]
    assert entry["embeddings"] is True
    assert entry["embedding_model"] == "fakeprov:concepts" and entry["embedding_dimension"] == 4

    source = KnowledgeBaseDirectory(kb_dir).load().open_source("s")
    assert provider == ["fakeprov:concepts", "fakeprov:concepts"]  # index, then open by name
    hits = await source.search(SearchQuery(text="automobile", top=1))
    assert [h.doc_key for h in hits] == ["docs-car-txt-0"]
    source.close()

    with pytest.raises(KnowledgeBaseDirectoryError, match="indexed with embedding model"):
        KnowledgeBaseDirectory(kb_dir).load().open_source("s", NamedConcepts("other-model"))
    same = KnowledgeBaseDirectory(kb_dir).load().open_source("s", NamedConcepts("concepts"))
    same.close()


def test_another_model_never_mixes_vectors_into_a_source(tmp_path, docs, provider):
    kb_dir = tmp_path / "kb"
    base = ["index", "--kb", str(kb_dir), "--source", "s"]
    assert runner.invoke(app, [*base, "--embeddings", "fakeprov:a", str(docs)]).exit_code == 0
    result = runner.invoke(app, [*base, "--embeddings", "fakeprov:b", str(docs)])
    assert result.exit_code == 2
    assert "holds vectors of embedding model 'fakeprov:a'" in result.stderr
    manifest = json.loads((kb_dir / "knowledge-base.json").read_text())
    assert manifest["sources"][0]["embedding_model"] == "fakeprov:a"
    # the same model again is an ordinary incremental run
    again = runner.invoke(app, [*base, "--embeddings", "fakeprov:a", str(docs)])
    assert again.exit_code == 0 and "│ 2" in again.stdout


def test_a_replaced_index_with_another_dimension_is_refused(tmp_path, docs, provider):
    kb = KnowledgeBaseDirectory(tmp_path / "kb").create(name="kb")
    kb.add_or_update_source("s", embeddings="fakeprov:concepts")
    kb.index("s", [docs])
    kb.close()
    manifest_path = tmp_path / "kb" / "knowledge-base.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["sources"][0]["embedding_dimension"] = 768
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(KnowledgeBaseDirectoryError, match="holds 4-dimensional vectors"):
        KnowledgeBaseDirectory(tmp_path / "kb").load().open_source("s")
    # lexical search needs no vectors, so it still opens
    KnowledgeBaseDirectory(tmp_path / "kb").load().open_source("s", embeddings=False).close()


async def test_knowledge_bases_indexed_with_the_old_flag_keep_opening(tmp_path, docs, monkeypatch):
    kb = KnowledgeBaseDirectory(tmp_path / "kb").create(name="kb")
    kb.add_or_update_source("s", embeddings=True)
    kb.index("s", [docs], embeddings=ConceptEmbeddings())
    kb.close()
    manifest_path = tmp_path / "kb" / "knowledge-base.json"
    old = json.loads(manifest_path.read_text())
    for key in ("embedding_model", "embedding_dimension"):
        del old["sources"][0][key]  # the manifest as the first release wrote it
    manifest_path.write_text(json.dumps(old))

    monkeypatch.setattr(embeddings_module, "local_embeddings", ConceptEmbeddings)
    reopened = KnowledgeBaseDirectory(tmp_path / "kb").load()
    assert reopened.sources[0].embedding_model == "local"
    source = reopened.open_source("s")
    assert [h.doc_key for h in await source.search(SearchQuery(text="automobile", top=1))] == [
        "docs-car-txt-0"
    ]
    source.close()

    monkeypatch.setattr(embeddings_module, "local_embeddings_available", lambda: False)
    lexical = KnowledgeBaseDirectory(tmp_path / "kb").load().open_source("s")
    assert lexical.embeddings is None  # searched lexically, with a warning
    lexical.close()


def test_provider_models_without_credentials_change_nothing(tmp_path, docs, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    kb_dir = tmp_path / "kb"
    result = runner.invoke(
        app,
        [
            "index",
            "--kb",
            str(kb_dir),
            "--source",
            "s",
            "--embeddings",
            "openai:text-embedding-3-small",
            str(docs),
        ],
    )
    assert result.exit_code == 2 and "OPENAI_API_KEY" in result.stderr
    assert not kb_dir.exists()


def test_the_old_flag_before_a_path_still_means_local(tmp_path, docs, monkeypatch):
    monkeypatch.setattr(embeddings_module, "local_embeddings_available", lambda: True)
    monkeypatch.setattr(embeddings_module, "local_embeddings", ConceptEmbeddings)
    kb_dir = tmp_path / "kb"
    result = runner.invoke(
        app, ["index", "--kb", str(kb_dir), "--source", "s", "--embeddings", str(docs)]
    )
    assert result.exit_code == 0, result.output
    assert "takes a model name now" in result.stderr
    entry = json.loads((kb_dir / "knowledge-base.json").read_text())["sources"][0]
    assert entry["embedding_model"] == "local" and entry["embedding_dimension"] == 4


def test_the_help_names_the_extra_the_local_model_needs():
    shown = runner.invoke(app, ["index", "--help"]).output
    words = " ".join(shown.replace("\u2502", " ").split())  # without the panel's borders
    assert "'local' (the bundled all-MiniLM-L6-v2, the default for a new source;" in words
    assert "--no-embeddings Index without vectors (lexical only; no model is loaded)." in words
