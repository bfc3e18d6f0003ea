"""Every notebook in notebooks/ runs top to bottom, offline, and shows the outputs committed.

Notebooks are committed executed, so a reader sees the results without running them. Their
outputs are deterministic (no timings, temporary paths or timestamps), and executing a
notebook must reproduce the committed text exactly: a change that alters what a notebook
shows has to re-run it (``make notebooks``, i.e. ``python tests/test_notebooks.py --write``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def execute(path: Path) -> Any:
    """Run the notebook; keep what a reader sees (stdout, results, errors), drop stderr."""
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        timeout=120,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if o.get("name") != "stderr"]
    return notebook


DURATION = re.compile(r"\(\d+(?:\.\d+)?s\)")
"""How long a step took ("(0.0s)" after indexing): the one output that varies between runs."""


def shown(notebook: Any) -> list[str]:
    """Per code cell, the text a reader sees (stream chunks joined: their split varies)."""
    texts = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        parts = []
        for output in cell.get("outputs", []):
            if output.output_type == "stream" and output.name == "stdout":
                parts.append(output.text)
            elif output.output_type == "error":
                parts.append(f"{output.ename}: {output.evalue}")
            elif "data" in output:
                parts.append(str(output.data.get("text/plain", "")))
        texts.append(DURATION.sub("(<duration>s)", "".join(parts)))
    return texts


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes_and_shows_its_committed_outputs(path: Path, monkeypatch):
    monkeypatch.delenv("AGENTIC_RETRIEVAL_CHAT_MODEL", raising=False)
    notebook = execute(path)
    errors = [
        f"{output.ename}: {output.evalue}"
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.output_type == "error"
    ]
    assert not errors
    executed = shown(notebook)
    committed = shown(nbformat.read(path, as_version=4))
    assert any(committed), f"{path.name} is committed without outputs: run make notebooks"
    for number, (now, before) in enumerate(zip(executed, committed, strict=True), 1):
        assert now == before, f"{path.name} code cell {number} changed: run make notebooks"


def test_there_is_a_quickstart_notebook():
    assert any(p.name == "01_quickstart.ipynb" for p in NOTEBOOKS)


def write_all() -> None:
    """Execute every notebook and save it with its outputs (``make notebooks``)."""
    import os

    os.environ.pop("AGENTIC_RETRIEVAL_CHAT_MODEL", None)  # offline, as the test runs them
    for path in NOTEBOOKS:
        nbformat.write(execute(path), path)
        print(f"executed {path.name}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_notebooks.py --write")
    write_all()
