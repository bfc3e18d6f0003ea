"""The command line under hostile or broken input: one line on stderr, a meaningful exit code.

Exit 2: something the user can fix (a path that is not a directory, a filter out of bounds).
Exit 1: something failed that the user did not cause (a source, the time limit); whatever
was retrieved is still printed. Never a traceback, never exit 0 on a failure. These run the
real command in a subprocess, as a shell user would.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentic_retrieval.cli", *args],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "200"},
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: ") and text in result.stderr


@pytest.fixture(scope="module")
def kb(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cli")
    docs = root / "docs"
    docs.mkdir()
    (docs / "fares.txt").write_text("Bike fares: one dollar to unlock, 15 cents a minute.")
    (docs / "hours.txt").write_text("The night tram runs every 30 minutes from midnight.")
    result = run(
        "index", "--kb", str(root / "kb"), "--source", "guides", "--meta", "year=2025", str(docs)
    )
    assert result.returncode == 0, result.stderr
    return root / "kb"


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("regular-file", "exists and is not a directory"),
        ("/dev/null", "/dev/null exists and is not a directory"),
        ("/proc/self/kbx", "cannot create a knowledge base at /proc/self/kbx"),
    ],
)
def test_index_into_a_place_that_cannot_hold_a_knowledge_base(tmp_path, where, message):
    (tmp_path / "regular-file").write_text("not a directory")
    (tmp_path / "doc.txt").write_text("some text")
    result = run("index", "--kb", where, "--source", "s", "doc.txt", cwd=tmp_path)
    assert_one_line_error(result, 2, message)


@pytest.mark.parametrize(
    ("filter_text", "message"),
    [
        ("(" * 5000 + "page eq 1" + ")" * 5000, "more than 32 levels deep"),
        ("not " * 1500 + "page", "more than 32 levels deep"),
        (" or ".join(f"page eq {i}" for i in range(1200)), "more than 100 conditions"),
        ("page eq 99999999999999999999999", "integer 99999999999999999999999 is out of range"),
    ],
    ids=["parentheses", "nots", "or-chain", "huge-integer"],
)
@pytest.mark.parametrize("json_output", [False, True], ids=["readable", "json"])
def test_filters_out_of_bounds_exit_2(kb, filter_text, message, json_output):
    args = ["retrieve", "--kb", str(kb), "--effort", "minimal", "--filter", filter_text]
    result = run(*args, *(["--json"] if json_output else []), "bike fares")
    assert_one_line_error(result, 2, message)
    assert result.stdout == ""


@pytest.mark.parametrize("json_output", [False, True], ids=["readable", "json"])
def test_a_damaged_source_prints_what_it_has_and_exits_1(kb, tmp_path, json_output):
    damaged = tmp_path / "kb"
    damaged.mkdir()
    for item in kb.iterdir():
        if item.is_dir():  # the lexical index beside each store
            shutil.copytree(item, damaged / item.name)
        else:
            (damaged / item.name).write_bytes(item.read_bytes())
    database = damaged / "guides.sqlite"
    with sqlite3.connect(database) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        [root] = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'files'").fetchone()
    with open(database, "r+b") as file:
        # one table's pages only: the file opens, the search finds the damage
        file.seek((root - 1) * page_size)
        file.write(b"\xff" * page_size)
    args = ["retrieve", "--kb", str(damaged), "--effort", "minimal"]
    result = run(*args, *(["--json"] if json_output else []), "bike fares")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    message = (
        "knowledge source 'guides' is unavailable: its index file is damaged; index it again "
        "(or restore its file) to bring it back"
    )
    assert result.stderr.splitlines()[-1] == f"warning: guides: {message}"
    if json_output:  # the wire response is printed all the same
        response = json.loads(result.stdout)
        [error] = [a["error"] for a in response["activity"] if "error" in a]
        assert (error["code"], error["message"]) == ("KnowledgeSourceUnavailable", message)
    else:
        out = " ".join(result.stdout.split())
        assert (
            "Nothing found: no passage is returned for this question. "
            "Why: every search failed (the errors are in the table above)."
        ) in out


def test_a_complete_answer_exits_0(kb):
    result = run("retrieve", "--kb", str(kb), "--effort", "minimal", "--json", "bike fares")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["references"][0]["docKey"] == "docs-fares-txt-0"
