"""Permissions from the command line: ``index --allow-user/--allow-group/--public``, sidecars,
record permission fields, ``retrieve --user/--group`` and ``serve``'s identity options."""

from __future__ import annotations

import json

import pytest
from tests.fakes import write
from typer.testing import CliRunner

from agentic_retrieval.cli import app

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def found(kb, *extra: str) -> list[str]:
    result = run("retrieve", "--kb", kb, "--effort", "minimal", "--json", "vacation", *extra)
    assert result.exit_code == 0, result.output
    return sorted(r["docKey"].rsplit("-", 1)[0] for r in json.loads(result.stdout)["references"])


@pytest.fixture
def kb(tmp_path):
    hr, board, open_ = tmp_path / "hr", tmp_path / "board", tmp_path / "open"
    write(hr / "leave.md", "# Leave\n\nStaff get 25 vacation days.")
    write(board / "memo.md", "# Memo\n\nBoard vacation rules.")
    write(board / "bonus.md", "# Bonus\n\nVacation bonus for the CFO.")
    write(board / "bonus.md.permissions.json", json.dumps({"userIds": ["cfo"]}))
    write(open_ / "holidays.md", "# Holidays\n\nHolidays are not vacation days.")
    kb = tmp_path / "kb"
    for folder, options in (
        (hr, ["--allow-group", "staff"]),
        (board, ["--allow-user", "alice", "--allow-group", "board"]),
        (open_, ["--public"]),
    ):
        result = run("index", "--kb", kb, "--source", "docs", *options, folder)
        assert result.exit_code == 0, result.output
    return kb


def test_index_permissions_and_retrieve_as_a_user(kb):
    assert found(kb) == ["open-holidays-md"]
    assert found(kb, "--group", "staff") == ["hr-leave-md", "open-holidays-md"]
    assert found(kb, "--user", "alice") == ["board-memo-md", "open-holidays-md"]
    assert found(kb, "--user", "cfo") == ["board-bonus-md", "open-holidays-md"]


def test_reindexing_without_permission_options_keeps_them(kb, tmp_path):
    result = run("index", "--kb", kb, "--source", "docs", tmp_path / "hr")
    assert result.exit_code == 0, result.output
    assert found(kb) == ["open-holidays-md"]


def test_enforcing_hides_documents_indexed_without_permissions(kb, tmp_path):
    write(tmp_path / "legacy" / "old.md", "# Old\n\nOld vacation rules.")
    assert run("index", "--kb", kb, "--source", "docs", tmp_path / "legacy").exit_code == 0
    assert found(kb) == ["legacy-old-md", "open-holidays-md"]
    assert found(kb, "--enforce-permissions") == ["open-holidays-md"]


def test_record_permission_fields(tmp_path):
    records = write(
        tmp_path / "people.jsonl",
        '{"id": "r1", "text": "vacation for acme", "teams": ["acme"]}\n'
        '{"id": "r2", "text": "vacation for everyone", "teams": "all"}\n',
    )
    kb = tmp_path / "kb"
    result = run(
        "index", "--kb", kb, "--source", "people", "--records", records,
        "--group-ids-field", "teams",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    answer = run("retrieve", "--kb", kb, "--effort", "minimal", "--json", "vacation")
    assert [r["docKey"] for r in json.loads(answer.stdout)["references"]] == ["r2#0"]
    answer = run(
        "retrieve", "--kb", kb, "--effort", "minimal", "--json", "--group", "acme", "vacation"
    )
    assert sorted(r["docKey"] for r in json.loads(answer.stdout)["references"]) == [
        "r1#0",
        "r2#0",
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--public", "--allow-group", "x"], "--public contradicts"),
        (["--allow-user", " "], "non-empty string"),
        (["--group-ids-field", "teams"], "apply to --records"),
    ],
)
def test_contradictory_permission_options_are_exit_2(tmp_path, options, message):
    write(tmp_path / "d" / "a.md", "vacation")
    result = run("index", "--kb", tmp_path / "kb", "--source", "s", *options, tmp_path / "d")
    assert result.exit_code == 2 and message in result.output
    assert not (tmp_path / "kb").exists()


def test_serve_refuses_a_partial_or_unsafe_token_configuration(kb, monkeypatch):
    for name in ("ISSUER", "AUDIENCE", "JWKS", "SECRET"):
        monkeypatch.delenv(f"AGENTIC_RETRIEVAL_JWT_{name}", raising=False)
    partial = run("serve", "--kb", kb, "--jwt-issuer", "https://issuer.example/")
    assert partial.exit_code == 2 and "give audience too" in partial.output
    monkeypatch.setenv("AGENTIC_RETRIEVAL_JWT_SECRET", "short")
    unsafe = run("serve", "--kb", kb, "--jwt-issuer", "i", "--jwt-audience", "a")
    assert unsafe.exit_code == 2 and "at least 32 bytes" in unsafe.output
    assert "short" not in unsafe.output
    monkeypatch.delenv("AGENTIC_RETRIEVAL_JWT_SECRET")
    missing = run("serve", "--kb", kb, "--jwt-issuer", "i", "--jwt-audience", "a",
                  "--jwt-jwks", kb / "no-such-jwks.json")  # fmt: skip
    assert missing.exit_code == 2 and "no-such-jwks.json" in missing.output
    plain_http = run("serve", "--kb", kb, "--jwt-issuer", "i", "--jwt-audience", "a",
                     "--jwt-jwks", "http://login.example/keys")  # fmt: skip
    assert plain_http.exit_code == 2 and "must be fetched over https://" in plain_http.output
    monkeypatch.setenv("AGENTIC_RETRIEVAL_JWT_JWKS", "http://login.example/keys")
    from_env = run("serve", "--kb", kb, "--jwt-issuer", "i", "--jwt-audience", "a")
    assert from_env.exit_code == 2 and "must be fetched over https://" in from_env.output
    monkeypatch.delenv("AGENTIC_RETRIEVAL_JWT_JWKS")
    no_tokens = run("serve", "--kb", kb, "--require-identity", "*")
    assert no_tokens.exit_code == 2 and "needs token validation" in no_tokens.output
    bad_env = run("serve", "--kb", kb, "--enforce-permissions", "--query-key-for", "nokey")
    assert bad_env.exit_code == 2 and "KNOWLEDGE_BASE:KEY" in bad_env.output
