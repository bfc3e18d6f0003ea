"""A store's life: closed only after its last reader, and never left inside a transaction.

A server shares one :class:`LocalStore` between request threads; deleting an index closes
it while others may be searching it. Closing a SQLite connection under a running statement
crashes the process (SIGSEGV), so the close waits for the operations under way (leases), and
what comes after it fails cleanly. A failed statement (interrupted, or rolled back by SQLite
itself) must never leave a connection inside a transaction: every later search would fail.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from agentic_retrieval.errors import StoreClosedError, StoreError, StoreUnavailableError
from agentic_retrieval.kb.directory import KnowledgeBaseDirectory
from agentic_retrieval.kb.service import STORES_DIR, ServiceDirectory
from agentic_retrieval.sources.local import LocalStore
from agentic_retrieval.sources.local.store import ChunkRecord, FileState


def put(store: LocalStore, key: str, content: str) -> None:
    state = FileState(f"record:{key}", f"record:{key}", key, key, 0.0, len(content), 1)
    store.replace_file(state, {}, [ChunkRecord(f"{key}#0", 0, key, content, None, {})])


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    opened = LocalStore(tmp_path / "s.sqlite", create=True)
    for n in range(40):
        put(opened, f"d{n}", f"harbour tram note {n} " * 20)
    return opened


def test_a_close_waits_for_the_operation_under_way(store):
    with store.lease():
        store.close()
        assert store.closed
        # the connections stay open for the lease holder's reads
        assert len(store.search("harbour", top=5)) == 5
    with pytest.raises(StoreClosedError):
        store.search("harbour")
    with pytest.raises(StoreClosedError):
        store.count_chunks()


def test_closing_under_concurrent_searches_never_crashes(store):
    """Searches from 4 threads while the store closes: each finishes or fails cleanly."""
    outcomes: list[str] = []
    started = threading.Barrier(5)

    def search() -> None:
        started.wait()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                store.search("harbour tram", top=20)
                store.file_state("record:d1")
                outcomes.append("ok")
            except StoreClosedError:
                outcomes.append("closed")
                return

    threads = [threading.Thread(target=search) for _ in range(4)]
    for thread in threads:
        thread.start()
    started.wait()
    time.sleep(0.05)
    store.close()
    for thread in threads:
        thread.join(10)
    assert outcomes.count("closed") == 4
    assert store._connections == []  # the last lease closed every connection


def test_a_transaction_keeps_the_store_open_until_it_ends(store):
    with store.transaction():
        put(store, "late", "written inside the batch")
        store.close()
        put(store, "later", "still inside the batch")
    reopened = LocalStore(store.path)
    assert reopened.file_state("record:later") is not None


def test_a_store_deleted_by_another_process_is_not_recreated(tmp_path, store):
    path = store.path
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)

    errors: list[BaseException] = []

    def fresh_thread() -> None:  # a thread with no connection yet opens a new one
        try:
            store.file_state("record:d1")
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=fresh_thread)
    thread.start()
    thread.join()
    assert isinstance(errors[0], StoreUnavailableError)
    assert not path.exists()  # no empty database appeared in its place


def test_an_interrupted_write_leaves_no_transaction_open(store):
    """SQLite rolls an interrupted write's whole transaction back itself; we go on cleanly."""
    conn = store._connection()
    with pytest.raises(sqlite3.OperationalError, match="interrupted"):
        with store.transaction():
            put(store, "kept", "first")
            conn.set_progress_handler(lambda: 1, 1)
            try:
                put(store, "lost", "second " * 200)
            finally:
                conn.set_progress_handler(None, 0)
    assert not conn.in_transaction
    assert store.file_state("record:kept") is None  # the batch is all-or-nothing
    put(store, "after", "the store takes writes again")
    assert store.search("takes writes", top=1)[0].id == "after#0"


def test_a_batch_that_goes_on_after_sqlite_rolled_it_back_is_refused(store):
    """Some errors (a full disk, no memory) make SQLite roll back the whole transaction."""
    conn = store._connection()
    with pytest.raises(StoreError, match="rolled back"):
        with store.transaction():
            put(store, "lost", "first")
            conn.execute("ROLLBACK")  # what SQLite does itself on such an error
            with pytest.raises(StoreError, match="rolled back"):
                put(store, "orphan", "a caller that swallowed the error went on")
    assert not conn.in_transaction
    assert store.file_state("record:lost") is None
    assert store.file_state("record:orphan") is None  # never committed on its own


def test_a_failed_search_leaves_the_store_serving(store):
    conn = store._connection()
    conn.set_progress_handler(lambda: 1, 1)  # every statement is interrupted
    try:
        with pytest.raises(sqlite3.OperationalError, match="interrupted"):
            store.search("harbour tram")
    finally:
        conn.set_progress_handler(None, 0)
    assert not conn.in_transaction
    for _ in range(3):
        assert len(store.search("harbour tram", top=3)) == 3


def test_deleting_a_definition_closes_its_store_after_its_readers(tmp_path):
    service = ServiceDirectory(tmp_path / "data")
    index = {"name": "i", "fields": [{"name": "id", "type": "Edm.String", "key": True}]}
    stored, _ = service.put("index", "i", index, with_store=True)
    store = service.store(stored)
    put(store, "d", "harbour")
    with store.lease():
        service.delete("index", "i")
        assert not (tmp_path / "data" / STORES_DIR / str(stored.store)).exists()
        assert store.search("harbour")[0].id == "d#0"  # a search under way finishes
    with pytest.raises(StoreClosedError):
        store.search("harbour")
    with pytest.raises(StoreClosedError):  # this process never opens it again
        service.store(stored)


def test_a_directory_closes_the_sources_another_process_removed(tmp_path):
    serving = KnowledgeBaseDirectory(tmp_path / "kb").create("kb")
    serving.add_or_update_source("a")
    serving.add_or_update_source("b")
    opened = serving.open_source("a")
    kept = serving.open_source("b")
    KnowledgeBaseDirectory(tmp_path / "kb").load().remove_source("a")  # the other process
    serving.load()
    assert opened.store.closed
    assert not kept.store.closed
    assert serving.source_names == ["b"]
