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
"""How long a step took ("(0.0s)" after indexing), which varies between runs."""
ADDRESS = re.compile(r"\b0x[0-9a-f]{6,}\b")
"""A memory address in a repr ("<... object at 0x7f3a...>"), which varies between runs."""


def steady(text: str) -> str:
    """``text`` without what varies from run to run (durations, memory addresses)."""
    return ADDRESS.sub("0x…", DURATION.sub("(<duration>s)", text))


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
        texts.append(steady("".join(parts)))
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


def merged(committed: Any, executed: Any, *, force: bool = False) -> Any:
    """What ``make notebooks`` saves: the committed notebook, each code cell's outputs
    replaced only when what it shows changed (or with ``force``).

    A cell that shows the same text keeps its committed outputs byte for byte, so re-running
    gives no diff for timings, memory addresses or a chart of measured latencies; execution
    timestamps are never saved, and memory addresses are saved as ``0x…``.
    """
    force = force or [c.source for c in committed.cells] != [c.source for c in executed.cells]
    before, after = shown(committed), shown(executed)
    if force:
        committed = nbformat.from_dict({**executed, "metadata": committed.metadata})
    code = [c for c in committed.cells if c.cell_type == "code"]
    ran = [c for c in executed.cells if c.cell_type == "code"]
    for number, (cell, new) in enumerate(zip(code, ran, strict=True)):
        if force or before[number] != after[number]:
            cell.outputs = _coalesced([_steady_output(output) for output in new.outputs])
            cell.execution_count = new.execution_count
        cell.metadata.pop("execution", None)
    for cell in committed.cells:
        cell.metadata.pop("execution", None)
    return committed


def _coalesced(outputs: list[Any]) -> list[Any]:
    """Consecutive chunks of one stream as one output (how output is chunked varies)."""
    joined: list[Any] = []
    for output in outputs:
        previous = joined[-1] if joined else None
        if (
            previous is not None
            and output.get("output_type") == previous.get("output_type") == "stream"
            and output.get("name") == previous.get("name")
        ):
            previous.text += output.text
        else:
            joined.append(output)
    return joined


def _steady_output(output: Any) -> Any:
    if output.get("output_type") == "stream":
        output.text = ADDRESS.sub("0x…", output.text)
    for key in ("text/plain", "text/html"):
        if key in output.get("data", {}):
            output.data[key] = ADDRESS.sub("0x…", output.data[key])
    return output


def write_all(force: bool = False) -> None:
    """Execute every notebook and save what changed (``make notebooks [FORCE=1]``)."""
    import os

    os.environ.pop("AGENTIC_RETRIEVAL_CHAT_MODEL", None)  # offline, as the test runs them
    for path in NOTEBOOKS:
        committed = nbformat.read(path, as_version=4)
        nbformat.write(merged(committed, execute(path), force=force), path)
        print(f"executed {path.name}")


def test_rewriting_keeps_outputs_that_only_differ_in_what_varies():
    def notebook(*outputs: dict, **metadata: Any) -> Any:
        cells = [
            nbformat.v4.new_code_cell("x", outputs=[nbformat.from_dict(o)], metadata=dict(m))
            for o, m in zip(outputs, [metadata] * len(outputs), strict=True)
        ]
        return nbformat.v4.new_notebook(cells=cells)

    def stream(text: str) -> dict:
        return {"output_type": "stream", "name": "stdout", "text": text}

    def image(text: str, png: str) -> dict:
        data = {"text/plain": text, "image/png": png}
        return {"output_type": "display_data", "data": data, "metadata": {}}

    timing = {"execution": {"iopub.status.idle": "2026-11-23T20:21:04Z"}}
    committed = notebook(stream("indexed (0.1s)\n"), image("<Image>", "AAA"), stream("3 hits\n"))
    executed = notebook(
        stream("indexed (0.4s)\n"), image("<Image>", "BBB"), stream("4 hits\n"), **timing
    )
    saved = merged(nbformat.from_dict(committed), nbformat.from_dict(executed))
    assert [c.outputs[0] for c in saved.cells[:2]] == [c.outputs[0] for c in committed.cells[:2]]
    assert saved.cells[2].outputs[0].text == "4 hits\n"  # what a reader sees changed
    assert all("execution" not in cell.metadata for cell in saved.cells)
    forced = merged(nbformat.from_dict(committed), nbformat.from_dict(executed), force=True)
    assert forced.cells[1].outputs[0].data["image/png"] == "BBB"
    chunked = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell("x", outputs=[nbformat.from_dict(stream(t)) for t in "ab"])
        ]
    )
    (joined,) = merged(nbformat.from_dict(notebook(stream("old"))), chunked).cells[0].outputs
    assert joined.text == "ab"
    address = notebook(stream("<Retriever object at 0x7f3a2b1c4d50>\n"))
    renamed = merged(nbformat.from_dict(notebook(stream("old\n"))), address)
    assert renamed.cells[0].outputs[0].text == "<Retriever object at 0x…>\n"


if __name__ == "__main__":
    if sys.argv[1:] not in (["--write"], ["--write", "--force"]):
        sys.exit("usage: python tests/test_notebooks.py --write [--force]")
    write_all(force="--force" in sys.argv)
