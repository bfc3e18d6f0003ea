"""What a new user reads from the command line: help, piped output, banners, mistakes."""

from __future__ import annotations

import pytest
from tests.fakes import write
from typer.testing import CliRunner

from agentic_retrieval import InMemoryKnowledgeSource, KnowledgeBase
from agentic_retrieval.cli import app
from agentic_retrieval.errors import InvalidRequestError

runner = CliRunner()
LONG_NAME = "northwind-standard-benefits-details-and-exclusions"


def _plans_kb(tmp_path, *index_options):
    docs = tmp_path / "docs"
    for i in range(4):
        write(
            docs / f"{LONG_NAME}-{i}.md",
            # the body differs too: identical bodies are one passage to the reranker's dedupe
            f"# Deductible {i}\n\nPlan {i}. "
            + "The yearly deductible is 2000 dollars per person. " * 20,
        )
    result = runner.invoke(
        app,
        ["index", "--kb", str(tmp_path / "kb"), "--source", "plans", *index_options, str(docs)],
    )
    assert result.exit_code == 0, result.output
    return tmp_path / "kb"


@pytest.fixture
def kb(tmp_path):
    """Hybrid: the default index."""
    return _plans_kb(tmp_path)


@pytest.fixture
def lexical_kb(tmp_path):
    """Lexical only: its scores rank the passages but do not judge them."""
    return _plans_kb(tmp_path, "--no-embeddings")


@pytest.mark.parametrize("command", [[], ["index"], ["retrieve"], ["serve"], ["eval"]])
def test_help_shows_no_type_placeholders(command):
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0
    assert "<bool>" not in result.stdout and "<str>" not in result.stdout
    assert "{paths}" not in result.stdout and "<list[" not in result.stdout


def every_command():
    import typer.main

    def walk(command, path):
        subcommands = getattr(command, "commands", {})
        if not subcommands:
            yield path, command
        for name, sub in subcommands.items():
            yield from walk(sub, [*path, name])

    return list(walk(typer.main.get_command(app), []))


@pytest.mark.parametrize(
    ("path", "command"), every_command(), ids=[" ".join(p) for p, _ in every_command()]
)
def test_help_at_80_columns_shows_every_option_name_whole(path, command):
    import re

    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    names = [n for p in command.params for n in (*p.opts, *p.secondary_opts) if n.startswith("-")]
    assert names, path
    for name in names:  # whole: followed by a space, a comma or the line's end
        assert re.search(rf"(^|[ ,/]){re.escape(name)}([ ,]|$)", result.stdout, re.M), name
    assert "…" not in result.stdout


def test_piped_output_keeps_doc_keys_whole_and_previews_every_chunk(kb):
    result = runner.invoke(
        app,
        ["retrieve", "--kb", str(kb), "--effort", "minimal", "yearly deductible per person"],
        env={"COLUMNS": "80"},  # what a pipe gets
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    keys = [f"docs-{LONG_NAME}-{i}-md-0" for i in range(4)]
    for key in keys:  # each on one line, unbroken
        assert any(line.strip().endswith(key) for line in lines), key
    previews = [line for line in lines if line.startswith("  [") and "deductible" in line]
    assert len(previews) == 4  # every chunk, not the first 3
    assert all(len(line) <= len("  [0] ") + 400 + 2 for line in previews)
    assert all(line.endswith(" …") for line in previews)  # cut at a word, and says so
    assert "(--json prints the whole grounding text)" in lines


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["  "], "error: QUESTION is empty: give the question to retrieve for\n"),
        (
            ["--effort", "minimal", "--output-mode", "answerSynthesis", "deductible?"],
            "error: --output-mode answerSynthesis writes an answer with a chat model: it cannot "
            "run with --effort minimal (use low or medium)\n",
        ),
    ],
)
def test_mistakes_speak_the_command_lines_language(kb, args, message):
    result = runner.invoke(app, ["retrieve", "--kb", str(kb), *args])
    assert result.exit_code == 2
    assert result.stderr == message
    assert "'messages'" not in result.stderr and "retrievalReasoningEffort" not in result.stderr


def test_serve_names_the_urls_to_call(kb, monkeypatch):
    from agentic_retrieval.server import serving

    calls = []
    monkeypatch.setattr(serving, "serve", lambda *a, **k: calls.append(k))
    result = runner.invoke(app, ["serve", "--kb", str(kb), "--port", "0", "--api-key", "k1"])
    assert result.exit_code == 0, result.output
    assert calls and calls[0]["port"] == 0
    assert (
        "serving kb: POST http://127.0.0.1:0/knowledgebases/kb/retrieve?api-version=2026-04-01 "
        "(MCP: http://127.0.0.1:0/knowledgebases/kb/mcp)"
    ) in result.stderr
    assert (
        "OpenAI-compatible: GET http://127.0.0.1:0/v1/models, "
        "POST http://127.0.0.1:0/v1/chat/completions"
    ) in result.stderr
    assert "<name>" not in result.stderr


def test_the_retriever_names_its_own_argument():
    kb = KnowledgeBase([InMemoryKnowledgeSource("a", [{"key": "k", "content": "x"}])])
    with pytest.raises(InvalidRequestError) as info:
        kb.as_retriever().invoke("  ")
    assert str(info.value) == "query is empty: give the text to retrieve documents for"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--api-key", ""], "error: --api-key is empty (is the variable you passed set?)"),
        (["--query-key", "  "], "error: --query-key is empty"),
        (["--query-key-for", "kb:"], "error: --query-key-for is empty"),
        (["--api-key", "k1 "], "error: --api-key has spaces around the key"),
    ],
)
def test_serve_refuses_a_key_no_request_could_present(kb, monkeypatch, args, message):
    from agentic_retrieval.server import serving

    monkeypatch.setattr(serving, "serve", lambda *a, **k: pytest.fail("the server started"))
    result = runner.invoke(app, ["serve", "--kb", str(kb), "--port", "0", *args])
    assert result.exit_code == 2
    assert result.stderr.startswith(message), result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_nothing_found_is_said_plainly_with_why(lexical_kb):
    result = runner.invoke(
        app, ["retrieve", "--kb", str(lexical_kb), "--effort", "minimal", "quantum chromodynamics"]
    )
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert "Grounding data" not in out and "0 chunks" not in out
    assert (
        "Nothing found: no passage is returned for this question. Why: the searches matched "
        "no passage. Try other words; a --filter narrows the search, and documents indexed "
        "with permissions are searched only for a --user or --group they allow."
    ) in out


def test_an_unrelated_question_on_a_hybrid_kb_is_cut_by_the_default_threshold(kb):
    result = runner.invoke(
        app, ["retrieve", "--kb", str(kb), "--effort", "minimal", "quantum chromodynamics"]
    )
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert "Grounding data" not in out
    assert "Nothing found: no passage is returned for this question." in out
    assert "all scored under the default threshold 2.5" in out
    assert "the knowledge base may not answer this" in out


def test_an_explicit_threshold_is_said_to_apply_and_to_explain_an_empty_result(lexical_kb):
    kb = lexical_kb
    result = runner.invoke(
        app,
        ["retrieve", "--kb", str(kb), "--effort", "minimal", "--threshold", "3.99", "deductible"],
    )
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert "the default threshold does not cut them" not in out
    assert (
        "they are ranked, not judged, yet the threshold 3.99 applies to them all the same: " in out
    )
    assert "0 of 4 kept" in out
    assert (
        "Why: the searches found 4 candidate(s), but they all scored under the threshold 3.99"
    ) in out
    none = runner.invoke(
        app,
        ["retrieve", "--kb", str(kb), "--effort", "minimal", "--threshold", "none", "deductible"],
    )
    assert "ranked, not judged, and no threshold applies (it is none)" in " ".join(
        none.stdout.split()
    )


def test_the_demo_says_how_many_references_it_shows(tmp_path):
    result = runner.invoke(app, ["demo", "--kb", str(tmp_path / "sample"), "--questions", "1"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    [header] = [line for line in lines if line.startswith("References (ranked):")]
    assert header == "References (ranked): 10, the top 5 shown (--top shows more)"
    start = lines.index(header)
    listed = [line for line in lines[start + 1 : start + 11] if line.startswith("  [")]
    assert len(listed) == 5
    wide = runner.invoke(
        app, ["demo", "--kb", str(tmp_path / "sample"), "--questions", "1", "--top", "10"]
    )
    assert "References (ranked): 10\n" in wide.stdout
