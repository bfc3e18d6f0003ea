"""The store's lexical index (tantivy beside SQLite): migration, rebuilds, readers, kill -9."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentic_retrieval.odata import parse_filter
from agentic_retrieval.permissions import Access, Identity, Permissions
from agentic_retrieval.sources.local.store import (
    SCHEMA_VERSION,
    ChunkRecord,
    FileState,
    LocalStore,
    fts_segment,
    lexical_directory,
)
from agentic_retrieval.sources.local.store import local_store as local_store_module

REPO = Path(__file__).resolve().parents[2]

SCHEMA_V3 = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL UNIQUE,
    slug TEXT NOT NULL UNIQUE,
    content_hash TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    mtime REAL NOT NULL,
    size INTEGER NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    chunk_count INTEGER NOT NULL,
    indexed_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS chunks (
    rid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    file_id INTEGER NOT NULL REFERENCES files(id),
    ordinal INTEGER NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    content TEXT NOT NULL,
    page INTEGER,
    metadata TEXT NOT NULL DEFAULT '{}',
    vector BLOB
);
CREATE INDEX IF NOT EXISTS chunks_by_file ON chunks(file_id, ordinal);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    title, content, content='chunks', content_rowid='rid',
    tokenize='unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS chunks_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts(rowid, title, content)
    VALUES (new.rid, fts_segment(new.title), fts_segment(new.content));
END;
CREATE TRIGGER IF NOT EXISTS chunks_ad AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, title, content)
    VALUES ('delete', old.rid, fts_segment(old.title), fts_segment(old.content));
END;
CREATE TRIGGER IF NOT EXISTS chunks_au AFTER UPDATE OF title, content ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, title, content)
    VALUES ('delete', old.rid, fts_segment(old.title), fts_segment(old.content));
    INSERT INTO chunks_fts(rowid, title, content)
    VALUES (new.rid, fts_segment(new.title), fts_segment(new.content));
END;
CREATE TABLE IF NOT EXISTS fields (
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    PRIMARY KEY (name, kind)
) WITHOUT ROWID;
INSERT OR IGNORE INTO meta(key, value) VALUES ('generation', '0');
INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', '1');

ALTER TABLE files ADD COLUMN access TEXT;
CREATE TABLE IF NOT EXISTS file_principals (
    file_id INTEGER NOT NULL,
    principal TEXT NOT NULL,
    PRIMARY KEY (file_id, principal)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS file_principals_by_principal ON file_principals(principal, file_id);
CREATE INDEX IF NOT EXISTS files_by_access ON files(access);
UPDATE meta SET value = '2' WHERE key = 'schema_version';
UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation';

ALTER TABLE files ADD COLUMN fields TEXT NOT NULL DEFAULT '{}';
CREATE TABLE IF NOT EXISTS document_fields (
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    PRIMARY KEY (name, kind)
) WITHOUT ROWID;
UPDATE meta SET value = '3' WHERE key = 'schema_version';
UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation';
"""
"""The tables of schema version 3 (FTS5 inside the file), as release 0.2 wrote them."""


def add(
    store: LocalStore,
    key: str,
    content: str,
    permissions: Permissions | None = None,
    **metadata: object,
) -> None:
    state = FileState(f"/virtual/{key}", key, key, key, 0.0, len(content), 1)
    chunk = ChunkRecord(key, 0, "", content, None, dict(metadata))
    store.replace_file(state, {}, [chunk], permissions=permissions)


def ids(hits) -> list[str]:
    return [hit.id for hit in hits]


def lexical_docs(store: LocalStore) -> int:
    index = store._lexical_index
    return index._searcher(store._connection()).num_docs


def make_v3_store(path: Path, documents: dict[str, str]) -> None:
    conn = sqlite3.connect(path)
    conn.create_function("fts_segment", 1, fts_segment, deterministic=True)
    conn.executescript(SCHEMA_V3)
    conn.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('rank', 'bm25(3.0, 1.0)')")
    for number, (key, content) in enumerate(documents.items(), start=1):
        conn.execute(
            "INSERT INTO files(id, path, slug, content_hash, fingerprint, mtime, size, "
            "chunk_count, indexed_at) VALUES (?, ?, ?, 'h', 'f', 0, 1, 1, 'now')",
            (number, f"/virtual/{key}", key),
        )
        conn.execute(
            "INSERT INTO chunks(id, file_id, ordinal, content) VALUES (?, ?, 0, ?)",
            (key, number, content),
        )
    conn.commit()
    conn.close()


VECTOR_LOG_TRIGGERS = ["chunks_vector_ad", "chunks_vector_ai", "chunks_vector_au"]
"""The only triggers a version-4 store keeps: the vector log's (no lexical state in them)."""


def test_a_version_3_store_migrates_on_open(tmp_path):
    path = tmp_path / "old.sqlite"
    make_v3_store(path, {"leave": "员工每个月累积两天带薪休假", "bikes": "bike fares on trams"})
    store = LocalStore(path)
    assert store._schema_version() == SCHEMA_VERSION == 4
    assert ids(store.search("带薪休假")) == ["leave"]
    assert ids(store.search("tram fares bike")) == ["bikes"]
    conn = store._connection()
    triggers = conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall()
    assert sorted(t for (t,) in triggers) == VECTOR_LOG_TRIGGERS  # FTS5's are gone
    assert conn.execute("SELECT * FROM chunks_fts").fetchone()[0].startswith("schema version 4")
    assert (lexical_directory(path) / "current").is_file()
    add(store, "new", "new bike lanes")  # rids continue after the old ones
    assert ids(store.search("bike")) == ["bikes", "new"] or set(ids(store.search("bike"))) == {
        "bikes",
        "new",
    }
    store.close()


def test_an_old_release_refuses_a_version_4_store_and_its_triggers_are_dropped(tmp_path):
    path = tmp_path / "s.sqlite"
    store = LocalStore(path, create=True)
    add(store, "a", "alpha words")
    store.close()
    conn = sqlite3.connect(path)  # what release 0.2's LocalStore does first on open
    conn.create_function("fts_segment", 1, fts_segment, deterministic=True)
    conn.executescript(SCHEMA_V3.split("ALTER TABLE")[0])
    with pytest.raises(sqlite3.OperationalError, match="chunks_fts_config"):
        conn.execute("SELECT v FROM chunks_fts_config WHERE k = 'rank'")
    conn.close()
    reopened = LocalStore(path)
    add(reopened, "b", "alpha beta")
    assert sorted(ids(reopened.search("alpha"))) == ["a", "b"]
    triggers = reopened._connection().execute(
        "SELECT name FROM sqlite_master WHERE type = 'trigger'"
    )
    assert sorted(t for (t,) in triggers.fetchall()) == VECTOR_LOG_TRIGGERS
    reopened.close()


def test_a_missing_or_damaged_lexical_index_is_rebuilt_from_sqlite(tmp_path):
    path = tmp_path / "s.sqlite"
    store = LocalStore(path, create=True)
    for i in range(5):
        add(store, f"d{i}", f"alpha note number{i}")
    store.close()
    directory = lexical_directory(path)
    shutil.rmtree(directory)  # missing
    store = LocalStore(path)
    assert sorted(ids(store.search("alpha"))) == [f"d{i}" for i in range(5)]
    store.close()
    current = json.loads((directory / "current").read_text())
    for file in (directory / current["name"]).iterdir():  # damaged: every file garbage
        file.write_bytes(b"\xff" * 64)
    store = LocalStore(path)
    assert sorted(ids(store.search("alpha"))) == [f"d{i}" for i in range(5)]
    # damaged under an open store: the next search rebuilds it and answers
    shutil.rmtree(directory)
    assert ids(store.search("number3")) == ["d3"]
    add(store, "d5", "alpha note number5")  # and a write rebuilds it
    assert ids(store.search("number5")) == ["d5"]
    store.close()
    current = json.loads((directory / "current").read_text())
    # an index of another store (a file restored or copied over this one)
    (directory / "current").write_text(json.dumps({**current, "store": "another"}))
    store = LocalStore(path)
    assert ids(store.search("number4")) == ["d4"]
    assert lexical_docs(store) == 6
    store.close()


def test_readers_see_every_write_of_another_store_object(tmp_path):
    path = tmp_path / "s.sqlite"
    writer, reader = LocalStore(path, create=True), None
    add(writer, "a", "alpha")
    reader = LocalStore(path)
    assert ids(reader.search("alpha")) == ["a"]
    add(writer, "b", "alpha beta")
    assert ids(reader.search("beta")) == ["b"]
    writer.delete_file("/virtual/a")
    assert ids(reader.search("alpha")) == ["b"]
    with writer.transaction():  # a batch: one tantivy commit when it commits
        add(writer, "c", "gamma")
        add(writer, "d", "gamma delta")
        assert ids(reader.search("gamma")) == []
    assert sorted(ids(reader.search("gamma"))) == ["c", "d"]
    writer.close()
    reader.close()


def test_row_ids_are_never_reused(tmp_path):
    store = LocalStore(tmp_path / "s.sqlite", create=True)
    add(store, "a", "alpha")
    add(store, "b", "beta")
    rid = store._connection().execute("SELECT rid FROM chunks WHERE id = 'b'").fetchone()[0]
    store.delete_file("/virtual/b")
    add(store, "c", "gamma")
    new = store._connection().execute("SELECT rid FROM chunks WHERE id = 'c'").fetchone()[0]
    assert new > rid
    store.close()


@pytest.mark.parametrize("rid_set_max", [100_000, 3], ids=["rid set", "verified pages"])
def test_filters_and_permissions_restrict_candidates_before_top_k(
    tmp_path, monkeypatch, rid_set_max
):
    monkeypatch.setattr(local_store_module, "RID_SET_MAX", rid_set_max)
    store = LocalStore(tmp_path / "s.sqlite", create=True)
    rng = random.Random(7)
    documents = {}
    for i in range(80):
        words = " ".join(rng.choice(["alpha", "beta", "gamma", "filler"]) for _ in range(8))
        kind = "rare" if i % 10 == 3 else "common"
        group = "g1" if i % 7 == 0 else "g2"
        documents[f"d{i:02d}"] = (f"alpha {words}", kind, group)
        add(store, f"d{i:02d}", f"alpha {words}", Permissions(group_ids=(group,)), kind=kind)
    everything = store.search("alpha beta", top=1000, access=Access(elevated=True))
    ranked = [hit.id for hit in everything]
    want = [key for key in ranked if documents[key][1] == "rare"][:5]
    got = store.search(
        "alpha beta",
        top=5,
        filter_expr=parse_filter("kind eq 'rare'"),
        access=Access(elevated=True),
    )
    assert ids(got) == want and len(want) == 5
    caller = Access(Identity(user_id="u", groups=["g1"]), enforce=True)
    want = [key for key in ranked if documents[key][2] == "g1"][:5]
    assert ids(store.search("alpha beta", top=5, access=caller)) == want and len(want) == 5
    store.close()


CHILD = """
import os, signal, sys
from agentic_retrieval.sources.local.store import ChunkRecord, FileState, LocalStore
from agentic_retrieval.sources.local.store import lexical_index

path, mode, start = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = LocalStore(path, create=True)
if mode == "before-flush":  # killed right after SQLite committed, before tantivy did
    lexical_index.LexicalIndex._apply_outbox = lambda self, conn: os.kill(os.getpid(), 9)
for batch in range(start, start + 400):
    with store.transaction():
        for i in range(5):
            key = f"b{batch}-{i}"
            content = f"alpha token{batch} number{i}"
            state = FileState(f"/virtual/{key}", key, key, key, 0.0, len(content), 1)
            store.replace_file(state, {}, [ChunkRecord(key, 0, "", content)])
        if batch % 3 == 0:  # deletes and re-writes go through the outbox too
            store.delete_file(f"/virtual/b{batch - 1}-0")
    print(batch, flush=True)
"""


def run_child(path: Path, mode: str, start: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), mode, str(start)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def assert_consistent(path: Path) -> None:
    store = LocalStore(path)
    keys = {r[0] for r in store._connection().execute("SELECT id FROM chunks")}
    assert set(ids(store.search("alpha", top=100_000))) == keys
    assert lexical_docs(store) == len(keys)
    outbox = store._connection().execute("SELECT count(*) FROM lexical_outbox").fetchone()[0]
    assert outbox == 0
    store.close()


def test_kill_9_leaves_sqlite_and_the_lexical_index_consistent(tmp_path):
    path = tmp_path / "s.sqlite"
    child = run_child(path, "before-flush", 1)
    assert child.wait(timeout=120) == -signal.SIGKILL
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM lexical_outbox").fetchone()[0] == 5
    conn.close()
    assert_consistent(path)  # the open replayed the outbox
    rng = random.Random(21)
    for round_ in range(3):  # killed at a moment nobody chose
        child = run_child(path, "run", 1000 * (round_ + 1))
        assert child.stdout is not None
        child.stdout.readline()  # it has written at least one batch
        time.sleep(rng.uniform(0.0, 0.5))
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=60) in (-signal.SIGKILL, 0)
        child.stdout.close()
        assert_consistent(path)
