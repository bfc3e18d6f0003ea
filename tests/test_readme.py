"""README.md stays honest: its Python examples run, its Quickstart is the two make targets."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(language: str) -> list[str]:
    return [
        body for lang, info, body in FENCE.findall(README.read_text())
        if lang == language and "notest" not in info
    ]


def test_quickstart_is_exactly_make_demo_and_make_test():
    quickstart = README.read_text().split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    commands = [
        line.split("#", 1)[0].strip()
        for body in FENCE.findall(quickstart) for line in body[2].splitlines()
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
