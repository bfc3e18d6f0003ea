"""The ``agentic-retrieval`` command: index, retrieve (readable and --json), demo, user errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agentic_retrieval.cli import app
from agentic_retrieval.sources.local.loaders import SUPPORTED_EXTENSIONS
from agentic_retrieval.wire.models import RetrieveResponse

runner = CliRunner()


@pytest.fixture
def docs(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "ferries.md").write_text(
        "# Ferries\n\nThe harbour ferry to Gull Island leaves every 40 minutes from Pier 3.\n"
    )
    (folder / "parking.md").write_text(
        "# Parking\n\nPark and ride at Saltmarsh costs 4 dollars a day, free on Sundays.\n"
    )
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4 this is not really a pdf")
    return folder


@pytest.fixture
def kb(tmp_path, docs):
    result = runner.invoke(
        app,
        [
            "index",
            "--kb",
            str(tmp_path / "kb"),
            "--source",
            "guides",
            "--description",
            "Ferry and parking guides",
            # these tests check the command line's output on exact lexical results (the
            # default hybrid index is tested in test_bundled_model.py)
            "--no-embeddings",
            str(docs),
        ],
    )
    assert result.exit_code == 0, result.output
    return tmp_path / "kb"


def test_index_reports_files_and_chunks(tmp_path, docs):
    kb_dir = tmp_path / "kb"
    first = runner.invoke(app, ["index", "--kb", str(kb_dir), "--source", "guides", str(docs)])
    assert first.exit_code == 0
    lines = {line.strip("│ ").split("│")[0].strip(): line for line in first.stdout.splitlines()}
    assert "│ 2" in lines["files indexed"] and "│ 1" in lines["files failed"]
    assert f"failed: {docs / 'broken.pdf'}: " in first.stderr and "failed:" not in first.stdout
    again = runner.invoke(app, ["index", "--kb", str(kb_dir), "--source", "guides", str(docs)])
    lines = {line.strip("│ ").split("│")[0].strip(): line for line in again.stdout.splitlines()}
    assert "│ 0" in lines["files indexed"] and "│ 2" in lines["files unchanged (skipped)"]
    manifest = json.loads((kb_dir / "knowledge-base.json").read_text())
    assert manifest["name"] == "kb" and [s["name"] for s in manifest["sources"]] == ["guides"]


def test_retrieve_json_prints_exactly_the_wire_response(kb):
    result = runner.invoke(
        app,
        [
            "retrieve",
            "--kb",
            str(kb),
            "--effort",
            "minimal",
            "--json",
            "When does the Gull Island ferry leave?",
        ],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)  # nothing else on stdout
    response = RetrieveResponse.model_validate(payload)
    assert [ref.doc_key for ref in response.references] == ["docs-ferries-md-0"]
    assert set(payload) == {"response", "activity", "references"}


def test_retrieve_readable_view_shows_searches_references_and_grounding(kb):
    result = runner.invoke(
        app, ["retrieve", "--kb", str(kb), "--effort", "minimal", "park and ride price"]
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "no LLM planning" in out
    assert "Searches" in out and "guides" in out
    assert "docs-parking-md-0" in out and "Parking" in out
    assert "Grounding data: 1 chunks" in out


def test_retrieve_filter_restricts_results(kb):
    result = runner.invoke(
        app,
        [
            "retrieve",
            "--kb",
            str(kb),
            "--effort",
            "minimal",
            "--json",
            "--filter",
            "file_name eq 'parking.md'",
            "parking",
        ],
    )
    assert result.exit_code == 0, result.output
    refs = json.loads(result.stdout)["references"]
    assert [ref["docKey"] for ref in refs] == ["docs-parking-md-0"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--effort", "high"], "--effort must be one of minimal, low, medium"),
        (["--output-mode", "poem"], "--output-mode must be one of"),
        (["--effort", "minimal", "--output-mode", "answerSynthesis"], "answerSynthesis"),
        (["--effort", "minimal", "--filter", "title eq"], "--filter"),
        (["--effort", "minimal", "--source", "ghost"], "no source 'ghost'"),
        (["--effort", "low"], "AGENTIC_RETRIEVAL_CHAT_MODEL"),
    ],
    ids=[
        "bad-effort",
        "bad-output-mode",
        "answer-with-minimal",
        "bad-filter",
        "unknown-source",
        "no-model-for-low",
    ],
)
def test_user_mistakes_are_one_line_and_exit_2(kb, monkeypatch, args, needle):
    monkeypatch.delenv("AGENTIC_RETRIEVAL_CHAT_MODEL", raising=False)
    result = runner.invoke(app, ["retrieve", "--kb", str(kb), *args, "ferry"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert needle in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_kb_dir_is_exit_2(tmp_path):
    result = runner.invoke(app, ["retrieve", "--kb", str(tmp_path / "nope"), "x"])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: no knowledge base directory at {tmp_path / 'nope'}"


def test_index_missing_path_is_exit_2(tmp_path):
    result = runner.invoke(
        app, ["index", "--kb", str(tmp_path / "kb"), "--source", "s", str(tmp_path / "missing")]
    )
    assert result.exit_code == 2 and "no such file or folder" in result.stderr


def test_demo_builds_once_and_finds_the_expected_files(tmp_path):
    kb_dir = tmp_path / "sample"
    first = runner.invoke(app, ["demo", "--kb", str(kb_dir), "--questions", "4"])
    assert first.exit_code == 0, first.output
    assert "expected file in the top 5 for 4 of 4 questions" in first.stdout
    assert "Service Hours" in first.stdout  # the expected document is shown
    second = runner.invoke(app, ["demo", "--kb", str(kb_dir), "--questions", "1"])
    assert second.exit_code == 0
    assert "for 1 of 1 questions" in second.stdout


def test_index_meta_is_typed_and_filterable(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    new.mkdir()
    (old / "ferry.md").write_text("# Ferry\n\nThe ferry leaves at 7 am.\n")
    (new / "ferry.md").write_text("# Ferry\n\nThe ferry now leaves at 8 am.\n")
    kb_dir = tmp_path / "kb"
    for folder, year in ((old, "2023"), (new, "2025")):
        result = runner.invoke(
            app,
            [
                "index",
                "--kb",
                str(kb_dir),
                "--source",
                "notes",
                "--meta",
                f"year={year}",
                "--meta",
                "draft=false",
                str(folder),
            ],
        )
        assert result.exit_code == 0, result.output
    result = runner.invoke(
        app,
        [
            "retrieve",
            "--kb",
            str(kb_dir),
            "--effort",
            "minimal",
            "--json",
            "--filter",
            "year ge 2024 and draft eq false",
            "ferry leaves",
        ],
    )
    response = RetrieveResponse.model_validate(json.loads(result.stdout))
    assert [r.doc_key for r in response.references] == ["new-ferry-md-0"]


def test_index_meta_without_equals_is_exit_2(tmp_path, docs):
    result = runner.invoke(
        app, ["index", "--kb", str(tmp_path / "kb"), "--source", "s", "--meta", "year", str(docs)]
    )
    assert result.exit_code == 2
    assert "KEY=VALUE" in result.output


def test_corrupt_or_missing_index_is_one_line_and_exit_2(kb):
    victim = next(kb.glob("*.sqlite"))
    victim.write_bytes(b"\x00garbage" * 512)
    result = runner.invoke(app, ["retrieve", "--kb", str(kb), "--effort", "minimal", "ferry"])
    assert result.exit_code == 2
    assert "not a readable index" in result.output
    victim.unlink()
    result = runner.invoke(app, ["retrieve", "--kb", str(kb), "--effort", "minimal", "ferry"])
    assert result.exit_code == 2 and "is missing" in result.output
    assert not victim.exists()  # reading never recreates it


def test_reserved_meta_key_is_exit_2(tmp_path, docs):
    result = runner.invoke(
        app, ["index", "--kb", str(tmp_path / "kb"), "--source", "s", "--meta", "page=3", str(docs)]
    )
    assert result.exit_code == 2
    assert "reserved" in result.output


def test_demo_refuses_a_users_knowledge_base(kb):
    result = runner.invoke(app, ["demo", "--kb", str(kb), "--questions", "1"])
    assert result.exit_code == 2
    assert "not the sample" in result.output


def test_demo_with_an_unwritable_cache_is_exit_2(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("AGENTIC_RETRIEVAL_CACHE", str(blocker / "cache"))
    result = runner.invoke(app, ["demo", "--questions", "1"])
    assert result.exit_code == 2
    assert "cannot write the sample knowledge base" in result.output


def test_serve_rejects_the_same_knowledge_base_twice_and_a_busy_port(kb):
    import socket

    result = runner.invoke(app, ["serve", "--kb", str(kb), "--kb", str(kb)])
    assert result.exit_code == 2 and "same name" in result.output
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = runner.invoke(app, ["serve", "--kb", str(kb), "--port", str(port)])
    assert result.exit_code == 2 and "cannot listen" in result.output
    result = runner.invoke(app, ["serve", "--kb", str(kb), "--port", "99999"])
    assert result.exit_code == 2


def test_reindexing_a_deleted_folder_removes_its_chunks(tmp_path):
    import shutil

    folder = tmp_path / "other"
    folder.mkdir()
    (folder / "ferry.md").write_text("# Ferry\n\nThe Gull Island ferry leaves hourly.\n")
    kb_dir = tmp_path / "kb"
    assert (
        runner.invoke(app, ["index", "--kb", str(kb_dir), "--source", "s", str(folder)]).exit_code
        == 0
    )
    shutil.rmtree(folder)
    result = runner.invoke(app, ["index", "--kb", str(kb_dir), "--source", "s", str(folder)])
    assert result.exit_code == 0, result.output
    assert "deleted" in result.output.lower()
    result = runner.invoke(
        app, ["retrieve", "--kb", str(kb_dir), "--effort", "minimal", "--json", "Gull Island ferry"]
    )
    assert RetrieveResponse.model_validate(json.loads(result.stdout)).references == []
    never = runner.invoke(
        app, ["index", "--kb", str(kb_dir), "--source", "s", str(tmp_path / "never-existed")]
    )
    assert never.exit_code == 2 and "no such file or folder" in never.output


def test_reranker_is_chosen_by_name_from_the_environment(kb, monkeypatch):
    from agentic_retrieval.kb.loader import open_knowledge_base
    from agentic_retrieval.rerankers import LexicalReranker, PassthroughReranker

    assert isinstance(open_knowledge_base(kb).bindings.reranker, PassthroughReranker)
    monkeypatch.setenv("AGENTIC_RETRIEVAL_RERANKER", "lexical")
    assert isinstance(open_knowledge_base(kb).bindings.reranker, LexicalReranker)
    result = runner.invoke(
        app, ["retrieve", "--kb", str(kb), "--effort", "minimal", "--json", "ferry"]
    )
    reranking = [
        a for a in json.loads(result.stdout)["activity"] if a["type"] == "semanticReranker"
    ]
    assert reranking[0]["reranker"] == "lexical-coverage"
    monkeypatch.setenv("AGENTIC_RETRIEVAL_RERANKER", "magic")
    result = runner.invoke(app, ["retrieve", "--kb", str(kb), "--effort", "minimal", "ferry"])
    assert result.exit_code == 2 and "unknown reranker 'magic'" in result.stderr


def test_embeddings_without_the_extra_changes_nothing(tmp_path, docs, monkeypatch):
    import agentic_retrieval.embeddings as embeddings

    monkeypatch.setattr(embeddings, "local_embeddings_available", lambda: False)
    kb_dir = tmp_path / "kb"
    result = runner.invoke(
        app, ["index", "--kb", str(kb_dir), "--source", "s", "--embeddings", str(docs)]
    )
    assert result.exit_code == 2 and "nothing was changed" in result.stderr
    assert not kb_dir.exists()


def test_index_of_only_failing_files_exits_1_and_leaves_no_knowledge_base(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4 this is not really a pdf")
    kb_dir = tmp_path / "kb"
    result = runner.invoke(app, ["index", "--kb", str(kb_dir), "--source", "guides", str(docs)])
    assert result.exit_code == 1
    assert f"failed: {docs / 'broken.pdf'}: " in result.stderr
    assert "error: nothing was indexed: every file failed (1, see above)" in result.stderr
    assert not kb_dir.exists()


def test_index_names_unsupported_files_and_exits_1_when_none_is_supported(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "photo.png").write_bytes(b"\x89PNG not supported")
    (docs / "tool.exe").write_bytes(b"MZ not supported")
    kb_dir = tmp_path / "kb"
    result = runner.invoke(app, ["index", "--kb", str(kb_dir), "--source", "guides", str(docs)])
    assert result.exit_code == 1
    assert f"skipped (unsupported type): {docs / 'photo.png'}" in result.stderr
    assert f"skipped (unsupported type): {docs / 'tool.exe'}" in result.stderr
    supported = ", ".join(sorted(SUPPORTED_EXTENSIONS))
    assert f"nothing was indexed: no file of a supported type ({supported})" in result.stderr
    assert not kb_dir.exists()


def test_a_failed_new_source_is_removed_from_an_existing_knowledge_base(kb, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "broken.pdf").write_bytes(b"%PDF-1.4 nope")
    result = runner.invoke(app, ["index", "--kb", str(kb), "--source", "extra", str(bad)])
    assert result.exit_code == 1
    manifest = json.loads((kb / "knowledge-base.json").read_text())
    assert [s["name"] for s in manifest["sources"]] == ["guides"]
    assert sorted(p.name for p in kb.glob("extra*")) == []


def test_index_partial_failure_exits_0_and_strict_exits_1(tmp_path, docs):
    (docs / "photo.png").write_bytes(b"\x89PNG")
    args = ["index", "--kb", str(tmp_path / "kb"), "--source", "guides", str(docs)]
    assert runner.invoke(app, args).exit_code == 0
    strict = runner.invoke(app, [*args, "--strict"])
    assert strict.exit_code == 1
    assert "error: --strict: some files were not indexed (see above)" in strict.stderr
    assert "broken.pdf" in strict.stderr and "photo.png" in strict.stderr


def test_a_wrong_id_field_lists_the_columns_found(tmp_path):
    records = tmp_path / "stops.csv"
    records.write_text("doc,title,body\n1,Tram,The night tram\n2,Bike,Bikes are free\n")
    kb_dir = tmp_path / "kb"
    args = ["index", "--kb", str(kb_dir), "--source", "stops", "--records", str(records)]
    result = runner.invoke(app, [*args, "--id-field", "key", "--text-field", "body"])
    assert result.exit_code == 1
    assert (
        "failed: stops.csv:2: no id field (key); the record's fields are: doc, title, body"
        in result.stderr
    )
    assert "error: nothing was indexed: every record failed (2, see above)" in result.stderr


def test_an_office_file_without_the_extra_gives_the_checkout_form_too(tmp_path, monkeypatch):
    import sys

    from tests.office_files import docx

    monkeypatch.setitem(sys.modules, "markitdown", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "markitdown.converters", None)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.docx").write_bytes(docx("Parking", "Saltmarsh park and ride."))
    result = runner.invoke(
        app, ["index", "--kb", str(tmp_path / "kb"), "--source", "guides", str(docs)]
    )
    assert result.exit_code == 1
    assert (
        f"failed: {docs / 'guide.docx'}: reading .docx files needs the [office] extra: "
        "pip install 'agentic-retrieval[office]' (in a checkout: .venv/bin/pip install -e "
        "'.[office]')"
    ) in " ".join(result.stderr.split())
