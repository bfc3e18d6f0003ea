"""mypy refuses a misspelt destination: a node's ``Command[Literal[...]]`` is checked.

docs/ARCHITECTURE.md's recipe promises it ("mypy refuses a name the ``Literal`` does not
list"): here a real deciding node is copied twice, once as it is and once with one ``goto``
misspelt, and mypy runs on both with the project's strictness.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command
from mypy import api

import agentic_retrieval
from agentic_retrieval.state import RetrievalState, Update
from agentic_retrieval.wiring.runtime import destinations

PACKAGE = Path(agentic_retrieval.__file__).resolve().parent
PYPROJECT = PACKAGE.parent.parent / "pyproject.toml"
NODE = PACKAGE / "nodes" / "judge_results.py"
RIGHT = 'goto="assess_evidence"'
WRONG = 'goto="assess_evidense"'


def mypy_config(tmp_path: Path) -> Path:
    """The project's mypy settings, reading only the two modules that define ``Command``.

    Everything else the node imports is skipped (taken as ``Any``), so a cold run takes
    seconds, not the minutes of checking LangChain and the package. ``Command``'s base class
    (``ToolOutputMixin``) is read too: a class derived from ``Any`` would accept any ``goto``.
    """
    settings = {"strict": True, "python_version": "3.11"}
    if PYPROJECT.is_file():  # a source checkout: the project's own settings
        project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["mypy"]
        settings = {key: project[key] for key in settings if key in project}
    lines = ["[mypy]", *(f"{key} = {value}" for key, value in settings.items())]
    lines += ["follow_imports = skip", "[mypy-langgraph.types,langchain_core.messages.tool]"]
    lines += ["follow_imports = normal"]
    path = tmp_path / "mypy.ini"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_mypy_refuses_a_destination_the_nodes_literal_does_not_list(tmp_path):
    source = NODE.read_text(encoding="utf-8")
    assert source.count(RIGHT) == 1, "judge_results no longer sends the run to assess_evidence"
    (tmp_path / "spelt_right.py").write_text(source, encoding="utf-8")
    (tmp_path / "misspelt.py").write_text(source.replace(RIGHT, WRONG), encoding="utf-8")
    stdout, stderr, status = api.run(
        [
            "--config-file",
            str(mypy_config(tmp_path)),
            "--cache-dir",
            str(tmp_path / "mypy-cache"),
            "--no-error-summary",
            str(tmp_path / "spelt_right.py"),
            str(tmp_path / "misspelt.py"),
        ]
    )
    errors = [line for line in stdout.splitlines() if ": error:" in line]
    assert status == 1, stdout + stderr
    assert [line for line in errors if "spelt_right.py" in line] == []
    misspelt = [line for line in errors if "misspelt.py" in line]
    assert len(misspelt) == 1, errors
    assert '"goto"' in misspelt[0] and "'assess_evidense'" in misspelt[0]
    assert "'assess_evidence'" in misspelt[0]  # the Literal says what it may be


async def decide(state: RetrievalState) -> Command[Literal["assess_evidense"]]:
    return Command(goto="assess_evidense")


async def assess_evidence(state: RetrievalState) -> Update:
    return Update()


def test_a_literal_naming_no_node_is_refused_when_the_graph_is_compiled():
    """The other half: a misspelt name in the ``Literal`` itself (mypy cannot know the
    graph's nodes) stops the graph from compiling, as the builder registers each node with
    the destinations its annotation lists."""
    assert destinations(decide) == ("assess_evidense",)
    builder = StateGraph(RetrievalState)
    builder.add_node("decide", decide, destinations=destinations(decide))
    builder.add_node("assess_evidence", assess_evidence)
    builder.add_edge(START, "decide")
    builder.add_edge("assess_evidence", END)
    with pytest.raises(ValueError, match="unknown node `assess_evidense`"):
        builder.compile()
