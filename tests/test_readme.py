"""README.md stays honest: its Python examples run, its Quickstart is the two make targets."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(language: str) -> list[str]:
    return [
        body
        for lang, info, body in FENCE.findall(README.read_text())
        if lang == language and "notest" not in info
    ]


def test_quickstart_is_exactly_make_demo_and_make_test():
    quickstart = README.read_text().split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    commands = [
        line.split("#", 1)[0].strip()
        for body in FENCE.findall(quickstart)
        for line in body[2].splitlines()
        if line.strip()
    ]
    assert commands == ["make demo", "make test"]


def test_make_targets_exist():
    makefile = (README.parent / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.MULTILINE)
    assert re.search(r"^test:", makefile, re.MULTILINE)
    ci = (README.parent / ".ci" / "run").read_text()
    assert "make test" in ci


def test_python_examples_run(monkeypatch):
    monkeypatch.delenv("AGENTIC_RETRIEVAL_CHAT_MODEL", raising=False)
    code = blocks("python")
    assert code, "the README should have runnable Python examples"
    namespace: dict = {}
    for body in code:
        exec(compile(body, str(README), "exec"), namespace)
    response = namespace["response"]
    assert response.references[0].doc_key == "remote"


@pytest.mark.parametrize("snippet", ["from agentic_retrieval import", "as_retriever"])
def test_readme_mentions_the_public_api(snippet):
    assert snippet in README.read_text()


def cli_lines() -> list[str]:
    return [
        line.strip()
        for body in blocks("bash")
        for line in body.splitlines()
        if line.strip().startswith("agentic-retrieval ")
    ]


def test_readme_cli_commands_run(tmp_path, monkeypatch):
    import json
    import shlex
    import subprocess
    import sys

    from agentic_retrieval.wire.models import RetrieveResponse

    monkeypatch.delenv("AGENTIC_RETRIEVAL_CHAT_MODEL", raising=False)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "vacation.md").write_text(
        "# Vacation\n\nFull-time employees get 25 vacation days a year.\n"
    )
    (docs / "travel.md").write_text("# Travel\n\nBook trains for trips under 600 km.\n")
    (tmp_path / "questions.jsonl").write_text(
        '{"id": "v", "question": "vacation days", "relevant": ["docs/vacation.md"]}\n'
    )
    (tmp_path / "products.csv").write_text(
        "sku,name,description,price\nA-1,Red kettle,A red kettle.,29.9\nB-2,Blue mug,A mug.,7\n"
    )
    script = Path(sys.executable).with_name("agentic-retrieval")
    lines = cli_lines()
    assert len(lines) >= 3
    outputs = {}
    for line in lines:
        argv = [str(script), *shlex.split(line)[1:]]
        done = subprocess.run(
            argv, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, (line, done.stderr)
        outputs[line] = done.stdout
    vacation = next(line for line in lines if "--json" in line and "vacation" in line)
    response = RetrieveResponse.model_validate(json.loads(outputs[vacation]))
    assert response.references[0].doc_key.startswith("docs-vacation-md")
    assert "25 vacation days" in response.text
    mug = next(line for line in lines if "--json" in line and "mug" in line)
    products = RetrieveResponse.model_validate(json.loads(outputs[mug]))
    assert [r.doc_key for r in products.references] == ["B-2#0"]
    evaluated = json.loads((tmp_path / "eval-report" / "report.json").read_text())
    assert [c["summary"]["nDCG@10"] for c in evaluated["configurations"]] == [1.0, 1.0]
