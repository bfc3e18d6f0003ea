"""A damaged index file is noticed once and answered consistently; a repaired one comes back.

The store is read by a long-running process (the server) while its file is overwritten,
deleted, restored or rebuilt underneath it, as an operator or a disk might do.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import sqlite3
import threading
from pathlib import Path

import pytest
from tests.fakes import write

from agentic_retrieval import KnowledgeBase, SearchQuery, SourceError
from agentic_retrieval.errors import StoreUnavailableError
from agentic_retrieval.kb.directory import KnowledgeBaseDirectory

REQUEST = {"intents": [{"search": "tram fares"}], "retrievalReasoningEffort": {"kind": "minimal"}}
UNAVAILABLE = (
    "knowledge source 'fares' is unavailable: its index file is damaged (not an SQLite "
    "database); index it again (or restore its file) to bring it back"
)


def build(
    root: Path, text: str = "A single tram fare costs 2.60 dollars."
) -> KnowledgeBaseDirectory:
    write(root / "docs" / "fares.txt", text)
    directory = KnowledgeBaseDirectory(root / "kb").create(name="kb")
    directory.add_or_update_source("fares", description="Fares.")
    directory.index("fares", [root / "docs"])
    directory.close()
    return directory


def checkpointed_copy(database: Path, target: Path) -> None:
    """A consistent copy of the index (its WAL folded into the main file)."""
    with sqlite3.connect(database) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copyfile(database, target)


def overwrite_header(database: Path) -> None:
    with open(database, "r+b") as file:
        file.write(b"\x00garbage" * 8)
    shm = Path(f"{database}-shm")
    if shm.exists():
        with open(shm, "r+b") as file:
            file.write(b"\xff" * 64)


@pytest.fixture
def served(tmp_path: Path):
    directory = build(tmp_path)
    source = KnowledgeBaseDirectory(directory.path).open_source("fares")
    kb = KnowledgeBase([source], name="kb")
    yield directory, source, kb
    source.close()


async def test_damage_is_detected_once_and_every_request_gets_the_same_206(served, caplog):
    directory, _source, kb = served
    assert (await kb.aretrieve(REQUEST)).status_code == 200  # pages now cached
    overwrite_header(directory.path / "fares.sqlite")
    caplog.set_level(logging.WARNING)
    responses = await asyncio.gather(*(kb.aretrieve(REQUEST) for _ in range(40)))
    assert {r.status_code for r in responses} == {206}
    assert all(r.references == [] for r in responses)
    errors = {
        (record.error.code, record.error.message)
        for r in responses
        for record in r.activity or []
        if record.error
    }
    assert errors == {("KnowledgeSourceUnavailable", UNAVAILABLE)}
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and warnings[0].exc_info is None
    assert "fares.sqlite: its index file is damaged" in warnings[0].getMessage()


async def test_a_restored_file_is_served_again(served, tmp_path, caplog):
    directory, _source, kb = served
    database = directory.path / "fares.sqlite"
    checkpointed_copy(database, tmp_path / "backup.sqlite")
    overwrite_header(database)
    assert (await kb.aretrieve(REQUEST)).status_code == 206
    for leftover in (Path(f"{database}-wal"), Path(f"{database}-shm")):
        leftover.unlink(missing_ok=True)
    shutil.copyfile(tmp_path / "backup.sqlite", database)
    caplog.set_level(logging.WARNING)
    response = await kb.aretrieve(REQUEST)
    assert response.status_code == 200
    assert [r.doc_key for r in response.references] == ["docs-fares-txt-0"]
    assert "readable again" in caplog.text


async def test_a_rebuilt_index_is_served_without_a_restart(served, tmp_path):
    directory, _source, kb = served
    database = directory.path / "fares.sqlite"
    overwrite_header(database)
    assert (await kb.aretrieve(REQUEST)).status_code == 206
    # the operator deletes the damaged file and indexes the folder again
    for path in (database, Path(f"{database}-wal"), Path(f"{database}-shm")):
        path.unlink(missing_ok=True)
    write(tmp_path / "docs" / "fares.txt", "Tram fares: a day pass costs 7 dollars.")
    rebuilt = KnowledgeBaseDirectory(directory.path).load()
    rebuilt.index("fares", [tmp_path / "docs"])
    rebuilt.close()
    response = await kb.aretrieve(REQUEST)
    assert response.status_code == 200
    assert "day pass" in response.text


async def test_a_replaced_file_is_read_afresh_not_from_the_old_pages(served, tmp_path):
    directory, _source, kb = served
    assert "2.60" in (await kb.aretrieve(REQUEST)).text
    other = build(tmp_path / "other", "Tram fares went up: a single fare is 3 dollars.")
    replacement = tmp_path / "replacement.sqlite"
    checkpointed_copy(other.path / "fares.sqlite", replacement)
    database = directory.path / "fares.sqlite"
    replacement.replace(database)  # atomically, as a deployment would
    Path(f"{database}-wal").unlink(missing_ok=True)
    response = await kb.aretrieve(REQUEST)
    assert response.status_code == 200
    assert "3 dollars" in response.text and "2.60" not in response.text


async def test_a_deleted_file_is_unavailable_not_a_crash(served):
    directory, _source, kb = served
    for path in directory.path.glob("fares.sqlite*"):
        shutil.rmtree(path) if path.is_dir() else path.unlink()  # its lexical index too
    response = await kb.aretrieve(REQUEST)
    assert response.status_code == 206
    [error] = [record.error for record in response.activity or [] if record.error]
    assert error.code == "KnowledgeSourceUnavailable"
    assert error.message.startswith(
        "knowledge source 'fares' is unavailable: its index file is missing"
    )


def test_damage_found_by_a_query_marks_the_store_too(served):
    directory, source, _ = served
    with sqlite3.connect(directory.path / "fares.sqlite") as conn:
        conn.execute("DROP TABLE files")
    with pytest.raises(StoreUnavailableError, match="its index file is damaged"):
        source.search_sync("tram")
    with pytest.raises(StoreUnavailableError):  # and stays so, without querying again
        source.search_sync("tram")


async def test_other_sqlite_failures_are_a_plain_error_record(served, monkeypatch):
    _directory, source, _ = served

    def locked(*args, **kwargs):
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(source.store, "_search", locked)
    with pytest.raises(SourceError) as failure:
        await source.search(SearchQuery(text="tram"))
    assert failure.value.code == "KnowledgeSourceError"
    assert failure.value.message == "knowledge source 'fares' could not be searched"


async def test_cancelling_a_search_stops_its_sqlite_statement(served, monkeypatch):
    _directory, source, _ = served
    entered, stopped = threading.Event(), threading.Event()

    def endless(text, top, filter_expr, query_vector, access, sampling=None):
        conn = source.store._connection()
        entered.set()
        try:  # a statement that never ends unless interrupted
            conn.execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
                "SELECT count(*) FROM n"
            ).fetchone()
        except sqlite3.OperationalError as exc:
            assert "interrupted" in str(exc)
            stopped.set()
            raise

    monkeypatch.setattr(source.store, "_search", endless)
    task = asyncio.create_task(source.search(SearchQuery(text="tram")))
    assert await asyncio.to_thread(entered.wait, 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(stopped.wait, 5), "the worker thread kept querying"


def test_a_healthy_store_checks_its_file_with_a_stat_only(served, monkeypatch):
    _directory, source, _ = served
    source.search_sync("tram")
    opened = []
    monkeypatch.setattr(
        "agentic_retrieval.sources.local.health.has_sqlite_header",
        lambda path: opened.append(path) or True,
    )
    for _ in range(20):
        source.search_sync("tram")
    assert opened == []  # the header is read only when the file changed
