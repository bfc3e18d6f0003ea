"""One writer per source at a time, and no source lost when several are added at once."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.fakes import write

from agentic_retrieval.errors import StoreBusyError
from agentic_retrieval.kb.directory import KnowledgeBaseDirectory
from agentic_retrieval.sources.local import IndexProgress

BUSY = "is being written by another indexing run; try again when it finishes"


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    write(tmp_path / "docs" / "a.txt", "Bike fares cost one dollar.")
    write(tmp_path / "docs" / "b.txt", "The night tram runs every 30 minutes.")
    return tmp_path / "docs"


def test_a_second_run_on_the_same_source_is_refused_while_the_first_writes(tmp_path, docs):
    directory = KnowledgeBaseDirectory(tmp_path / "kb").create(name="kb")
    directory.add_or_update_source("guides")
    second: list[BaseException] = []

    def during_the_first_run(event: IndexProgress) -> None:
        if event.done == 1:  # the first run holds the lock: a second one starts now
            other = KnowledgeBaseDirectory(tmp_path / "kb").load()
            try:
                other.index("guides", [docs], metadata={"year": 2024})
            except StoreBusyError as exc:
                second.append(exc)
            finally:
                other.close()

    report = directory.index(
        "guides", [docs], metadata={"year": 2025}, progress=during_the_first_run
    )
    assert len(report.indexed) == 2
    assert len(second) == 1 and BUSY in str(second[0])
    hits = directory.open_source("guides").store.search("", top=10)
    assert {h.metadata["year"] for h in hits} == {2025}  # no mix of both runs
    directory.close()
    # and once the first run is over, the next one goes ahead
    again = KnowledgeBaseDirectory(tmp_path / "kb").load()
    assert len(again.index("guides", [docs], metadata={"year": 2024}).indexed) == 2
    again.close()


def test_the_command_line_says_so_in_one_line_and_exits_2(tmp_path, docs):
    directory = KnowledgeBaseDirectory(tmp_path / "kb").create(name="kb")
    directory.add_or_update_source("guides")
    store = directory.open_source("guides", create=True).store
    with store.exclusive_writer():  # as if another `index` were running
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "agentic_retrieval.cli",
                "index",
                "--kb",
                str(tmp_path / "kb"),
                "--source",
                "guides",
                str(docs),
            ],
            capture_output=True,
            text=True,
            timeout=90,
            env={**os.environ, "COLUMNS": "200"},
        )
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and BUSY in result.stderr
    assert store.count_chunks() == 0
    directory.close()


def _add_source(root: str, name: str, barrier) -> None:
    barrier.wait(10)
    directory = KnowledgeBaseDirectory(root).load_or_create(name="kb")
    directory.add_or_update_source(name, description=f"source {name}")
    directory.close()


@pytest.mark.skipif(sys.platform == "win32", reason="fork start method")
def test_sources_added_at_once_by_several_processes_are_all_kept(tmp_path):
    context = multiprocessing.get_context("fork")
    names = [f"s{i}" for i in range(6)]
    barrier = context.Barrier(len(names))
    workers = [
        context.Process(target=_add_source, args=(str(tmp_path / "kb"), name, barrier))
        for name in names
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    assert [w.exitcode for w in workers] == [0] * len(names)
    directory = KnowledgeBaseDirectory(tmp_path / "kb").load()
    assert sorted(directory.source_names) == names
    assert all((tmp_path / "kb" / f"{name}.sqlite").exists() for name in names)
