"""Indexing commits files and records in batches, each still all-or-nothing (issue 19).

A commit per file or record rewrote the same FTS5 and b-tree pages through the WAL for every
one of them (11x the database's size written per run); batches cut that under 3x
(benchmarks/bench_store_writes.py). What must not change: a file that fails is reported
alone, names never collide inside a batch, and a process killed mid-run leaves every file
either entirely indexed or not at all.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from langchain_core.embeddings import Embeddings
from tests.fakes import write

from agentic_retrieval.sources.local import LocalStore, StoreError, index_paths
from agentic_retrieval.sources.local import ingest as ingest_module
from agentic_retrieval.sources.local.record_ingest import delete_records, index_records

REPO = Path(__file__).resolve().parents[2]


def commits_while(store: LocalStore, run) -> tuple[object, int]:
    """Run ``run()`` and count the transactions this thread's connection committed.

    The small transaction after each tantivy commit that empties the lexical outbox is not
    a write of the data, and is not counted.
    """
    seen: list[str] = []
    conn = store._connection()
    conn.set_trace_callback(seen.append)
    try:
        result = run()
    finally:
        conn.set_trace_callback(None)
    commits, statements = 0, []
    for sql in seen:
        statements.append(sql)
        if sql.strip().upper() == "COMMIT":
            commits += not any("DELETE FROM lexical_outbox" in s for s in statements)
            statements = []
    return result, commits


def test_a_folder_is_written_in_a_few_transactions(tmp_path, monkeypatch):
    monkeypatch.setattr(ingest_module, "WRITE_BATCH_FILES", 16)
    for n in range(40):
        write(tmp_path / "docs" / f"note{n:02d}.txt", f"Harbour note {n}.\n\nTrams at dawn {n}.")
    store = LocalStore(tmp_path / "s.sqlite", create=True)
    report, commits = commits_while(store, lambda: index_paths(store, [tmp_path / "docs"]))
    assert len(report.indexed) == 40 and not report.failed
    assert commits == 3 + 1  # batches of 16, 16 and 8, then the (empty) removal pass
    assert store.count_files() == 40


def test_records_are_written_in_a_few_transactions(tmp_path, monkeypatch):
    monkeypatch.setattr(ingest_module, "WRITE_BATCH_FILES", 50)
    store = LocalStore(tmp_path / "r.sqlite", create=True)
    records = [{"id": f"r{n}", "text": f"harbour record {n}"} for n in range(120)]
    report, commits = commits_while(store, lambda: index_records(store, records))
    assert len(report.indexed) == 120
    assert commits == 3
    _, commits = commits_while(store, lambda: delete_records(store, [f"r{n}" for n in range(60)]))
    assert commits == 1
    assert store.count_files() == 60


def test_names_that_slug_alike_in_one_batch_get_their_own_slugs(tmp_path):
    write(tmp_path / "docs" / "harbour notes.txt", "Trams at dawn.")
    write(tmp_path / "docs" / "harbour-notes.txt", "Ferries at dusk.")
    store = LocalStore(tmp_path / "s.sqlite", create=True)
    report = index_paths(store, [tmp_path / "docs"])
    assert len(report.indexed) == 2 and not report.failed
    slugs = {store.file_state(path).slug for path in store.indexed_paths()}
    assert len(slugs) == 2


class DimensionByText(Embeddings):
    """Embeds text mentioning "odd" with 3 dimensions, anything else with 4."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[1.0] * (3 if "odd" in text else 4) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0] * 4


def test_a_file_whose_write_fails_is_reported_alone(tmp_path):
    for n in range(5):
        write(tmp_path / "docs" / f"a{n}.txt", f"even note {n}")
    write(tmp_path / "docs" / "b.txt", "the odd one out")
    store = LocalStore(tmp_path / "s.sqlite", create=True)
    report = index_paths(store, [tmp_path / "docs"], embeddings=DimensionByText())
    assert [Path(f.path).name for f in report.failed] == ["b.txt"]
    assert "dimension" in report.failed[0].reason
    assert len(report.indexed) == 5 and store.count_files() == 5


INDEXER = """
import sys
from pathlib import Path
from agentic_retrieval.sources.local import LocalStore, StoreError, index_paths
from agentic_retrieval.sources.local import ingest
ingest.WRITE_BATCH_FILES = 7
index_paths(LocalStore(sys.argv[1], create=True), [Path(sys.argv[2])])
"""


def indexed_files(db: Path) -> int:
    """Files committed to ``db`` so far (0 while the indexer is still creating it)."""
    try:
        store = LocalStore(db)
    except StoreError:
        return 0
    try:
        return store.count_files()
    finally:
        store.close()


@pytest.mark.slow
def test_a_run_killed_mid_batch_leaves_whole_files_only(tmp_path):
    docs = tmp_path / "docs"
    for n in range(400):
        write(
            docs / f"doc{n:03d}.txt", "\n\n".join(f"Part {p} of note {n}. " * 60 for p in range(6))
        )
    db = tmp_path / "s.sqlite"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    indexer = subprocess.Popen([sys.executable, "-c", INDEXER, str(db), str(docs)], env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and indexer.poll() is None:
        if indexed_files(db) >= 30:
            break
        time.sleep(0.05)
    indexer.send_signal(signal.SIGKILL)
    indexer.wait(10)
    store = LocalStore(db)
    counts = (
        store._connection()
        .execute(
            "SELECT f.chunk_count, count(c.rid) FROM files f JOIN chunks c ON c.file_id = f.id "
            "GROUP BY f.id"
        )
        .fetchall()
    )
    assert 30 <= len(counts) < 400  # killed mid-run, after some batches
    assert all(expected == found for expected, found in counts)  # whole files only
