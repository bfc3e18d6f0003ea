"""The store's lexical index: tantivy beside the SQLite file, kept in step by an outbox.

SQLite stays the source of truth (documents, metadata, permissions, vectors); the tantivy
index only answers "which chunks best match these terms", with block-max WAND skipping the
postings that cannot reach the top k (FTS5's ``bm25()`` scored every match before the
``LIMIT``: 158 ms per query at 1M chunks against tantivy's 1.1 ms, benchmarks/README.md).

Crash safety (an outbox): the transaction that writes a document's rows also writes its path
to ``lexical_outbox``. After the transaction commits, :meth:`LexicalIndex.flush` deletes the
document's tantivy entries, adds its chunks as SQLite now holds them, commits tantivy (one
commit per batch), then deletes the outbox rows it applied. A kill -9 at any point leaves rows
in the outbox, and the next flush (every open does one) applies them again: applying a path
is idempotent because it always re-reads SQLite.

On disk, beside ``<store>``: a directory ``<store>.lexical/`` holding ``current`` (which index
generation is live, in which format, for which store) and one tantivy index directory named
in it. A missing, damaged or outdated index (another format, another store, or a chunk count
that differs from SQLite's with nothing pending) is rebuilt from SQLite into a new directory,
which ``current`` then names (an atomic rename): readers never see a half-built index.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tantivy
from filelock import FileLock, Timeout
from tantivy import Occur, Query

from agentic_retrieval.errors import LexicalIndexDamagedError as LexicalIndexDamaged
from agentic_retrieval.errors import StoreError
from agentic_retrieval.sources.local.store.lexical import fts_segment, query_terms
from agentic_retrieval.sources.local.store.schema import lexical_pending
from agentic_retrieval.sources.local.store.tantivy_filters import (
    PRINCIPALS_FIELD,
    add_filter_fields,
    add_filter_values,
    principal_terms,
)

logger = logging.getLogger(__name__)

LEXICAL_FORMAT = 3
"""Version of what a chunk's tantivy document holds; an index in another format is rebuilt
from SQLite when its store opens (2: the filterable fields and principals of
:mod:`.tantivy_filters`; 3: English word forms folded by the stemmer of :func:`_analyzer`)."""
DIRECTORY_SUFFIX = ".lexical"
FOLD_TOKENIZER = "fold"
RID_FIELD = "rid"
DOC_FIELD = "doc"
TEXT_FIELDS = ("title", "content")
WRITER_HEAP_BYTES = 64_000_000
"""The tantivy writer's indexing buffer for a rebuild: past it, tantivy writes a segment."""
OUTBOX_WRITER_HEAP_BYTES = 16_000_000
"""The buffer for applying the outbox (a server's uploads): little above tantivy's minimum."""
FLUSH_LOCK_SECONDS = 600.0
"""How long a writer waits for another process's flush or rebuild before leaving its own
changes in the outbox (the process holding the lock applies them before releasing it)."""
_CURRENT = "current"
_STATUS = "lexical_status"


def lexical_directory(store_path: Path) -> Path:
    """The directory of the tantivy index of the store file ``store_path``."""
    return Path(f"{store_path}{DIRECTORY_SUFFIX}")


def _analyzer() -> tantivy.TextAnalyzer:
    """How the text fields and the query terms are analysed (the same for both).

    Words of letters and digits, lower case, diacritics folded (FTS5's ``unicode61
    remove_diacritics 2``, as near as tantivy's parts go; CJK runs arrive as bigrams, see
    :func:`~.lexical.fts_segment`), then English word forms folded by the Porter2 (Snowball
    English) stemmer, so "dog" finds "Dogs" and "hose" finds "Hoses". Every word is indexed:
    stop words are dropped from queries only (:data:`~.lexical.QUERY_STOPWORDS`). Chosen
    against a plural-only stemmer and stop words in the index, and checked against a
    Lucene-style BM25 with English analysis (benchmarks/README.md, "Word forms").
    """
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(255))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


_ANALYZER = _analyzer()


def index_words(text: str) -> list[str]:
    """The words the index holds for ``text`` (and a query looks up): ``Hoses`` is ``hose``."""
    return list(_ANALYZER.analyze(text))


def build_schema() -> tantivy.Schema:
    """The fields of a chunk's document: its row id, its document's path, its text, access.

    Filters and permissions restrict by the fields of :func:`.tantivy_filters.add_filter_fields`.
    """
    builder = tantivy.SchemaBuilder()
    builder.add_unsigned_field(RID_FIELD, stored=False, indexed=True, fast=True)
    builder.add_text_field(DOC_FIELD, stored=False, tokenizer_name="raw", index_option="basic")
    for name in TEXT_FIELDS:
        builder.add_text_field(name, stored=False, tokenizer_name=FOLD_TOKENIZER)
    add_filter_fields(builder)
    return builder.build()


SCHEMA = build_schema()


def text_query(text: str) -> Query | None:
    """The user's text as a tantivy query, or ``None`` when it has no word at all.

    The store's own query terms (:func:`~.lexical.query_terms`: stopwords dropped unless
    nothing else is left, at most ``MAX_QUERY_TERMS``), each matched in the title or the
    content, scored by BM25 summed over the matching fields; no field is boosted (a title
    boost measured worse on Cranfield). A CJK term is the phrase of its bigrams.
    """
    clauses: list[tuple[Occur, Query]] = []
    for term in query_terms(text):
        words = _ANALYZER.analyze(term)
        phrase: list[str | tuple[int, str]] = list(words)
        for name in TEXT_FIELDS:
            if len(words) == 1:
                clauses.append((Occur.Should, Query.term_query(SCHEMA, name, words[0])))
            elif words:
                clauses.append((Occur.Should, Query.phrase_query(SCHEMA, name, phrase)))
    return Query.boolean_query(clauses) if clauses else None


@dataclass(frozen=True, slots=True)
class _Live:
    """The index ``current`` names, opened, and what the reader last loaded."""

    name: str
    index: tantivy.Index
    searcher: tantivy.Searcher
    key: tuple[int, int]


class LexicalIndex:
    """The tantivy index of one store file.

    Args:
        store_path: The SQLite file the index belongs to.
        store_id: The random id the SQLite file records (``meta.store_id``): an index built
            for another file at the same path is rebuilt.
    """

    def __init__(self, store_path: Path, store_id: str) -> None:
        self.path = lexical_directory(store_path)
        self._store_path = store_path
        self._store_id = store_id
        self._lock = threading.Lock()  # the reader's state (_live)
        self._write_lock = threading.Lock()  # this process's one writer (flush, rebuild)
        self._file_lock = FileLock(str(self.path / "writer.lock"), thread_local=False)
        self._live: _Live | None = None

    # ------------------------------------------------------------------ reading

    def search(self, conn: sqlite3.Connection, query: Query, limit: int) -> list[tuple[int, float]]:
        """The ``limit`` best chunks for ``query``, as (rid, score), best first.

        Raises:
            LexicalIndexDamaged: The index's files are missing or damaged.
        """
        searcher = self._searcher(conn)
        try:
            hits = searcher.search(query, limit, count=False).hits
            if not hits:
                return []
            rids = searcher.fast_field_values(RID_FIELD, [address for _, address in hits])
        except (OSError, ValueError) as exc:  # tantivy's errors for unreadable files
            raise LexicalIndexDamaged(str(exc)) from exc
        ranked = [(_rid(rid), float(score)) for (score, _), rid in zip(hits, rids, strict=True)]
        # equal scores in the order the chunks were written, as every run gives them
        return sorted(ranked, key=lambda hit: (-hit[1], hit[0]))

    def matching_rids(self, conn: sqlite3.Connection, query: Query) -> list[int]:
        """Every chunk matching ``query`` (for counts: as costly as the matches are many).

        Raises:
            LexicalIndexDamaged: The index's files are missing or damaged.
        """
        _, rids = self.matches(conn, query, None)
        return rids or []

    def matches(
        self, conn: sqlite3.Connection, query: Query, at_most: int | None
    ) -> tuple[int, list[int] | None]:
        """How many chunks match ``query``, and which when at most ``at_most`` do.

        Counting visits every match without scoring it (tantivy's count collector); the
        rids are collected only when they are few enough (``None``: any number).

        Raises:
            LexicalIndexDamaged: The index's files are missing or damaged.
        """
        searcher = self._searcher(conn)
        try:
            # SearchResult.count is missing from tantivy's type stubs
            total = int(getattr(searcher.search(query, 1, count=True), "count", 0) or 0)
            if not total:
                return 0, []
            if at_most is not None and total > at_most:
                return total, None
            hits = searcher.search(query, total, count=False).hits
            rids = searcher.fast_field_values(RID_FIELD, [a for _, a in hits])
        except (OSError, ValueError) as exc:
            raise LexicalIndexDamaged(str(exc)) from exc
        return total, [_rid(r) for r in rids]

    def size(self, conn: sqlite3.Connection) -> int:
        """How many chunks the index holds (as of ``conn``'s snapshot, outbox applied).

        Raises:
            LexicalIndexDamaged: The index's files are missing or damaged.
        """
        return int(self._searcher(conn).num_docs)

    def _searcher(self, conn: sqlite3.Connection) -> tantivy.Searcher:
        """A searcher that sees at least every flush committed before ``conn``'s snapshot."""
        key = _status(conn)
        live = self._live
        if live is not None and live.key == key:
            return live.searcher
        with self._lock:
            live = self._live
            try:
                if live is None or _read_current(self.path).get("name") != live.name:
                    self._live = live = self._open_live(key)
                elif live.key != key:
                    live.index.reload()
                    self._live = live = _Live(live.name, live.index, live.index.searcher(), key)
            except (OSError, ValueError) as exc:
                raise LexicalIndexDamaged(str(exc)) from exc
            return live.searcher

    def _load(self, conn: sqlite3.Connection) -> None:
        """Load the searcher now (at open, after a flush), not at the next search.

        A store deleted while a search is under way keeps its SQLite file open, and that
        search finishes on the searcher already loaded: the index's files are gone by then.
        """
        try:
            self._searcher(conn)
        except LexicalIndexDamaged as exc:  # the next search rebuilds it
            logger.warning("could not load the lexical index %s: %s", self.path, exc)

    def _open_live(self, key: tuple[int, int]) -> _Live:
        current = _read_current(self.path)
        if not self._usable(current):
            raise LexicalIndexDamaged(f"{self.path} holds no usable index")
        index = _open_index(self.path / current["name"])
        return _Live(current["name"], index, index.searcher(), key)

    def _usable(self, current: dict[str, Any]) -> bool:
        return (
            current.get("format") == LEXICAL_FORMAT
            and current.get("store") == self._store_id
            and isinstance(current.get("name"), str)
            and (self.path / current["name"]).is_dir()
        )

    def close(self) -> None:
        """Drop the open index (its files stay)."""
        with self._lock:
            self._live = None

    # ------------------------------------------------------------------ writing

    @contextmanager
    def _exclusive(self, timeout: float) -> Iterator[bool]:
        """This process's and every other process's only writer of the index, if it can be.

        Readers never wait for it: a search keeps the searcher it has until a flush commits.
        """
        if not self._write_lock.acquire(timeout=timeout if timeout > 0 else 0):
            yield False
            return
        try:
            if not self._store_path.exists():  # deleted: never re-create its directory
                raise FileNotFoundError(2, "the store file is gone", str(self._store_path))
            self.path.mkdir(parents=True, exist_ok=True)
            try:
                self._file_lock.acquire(timeout=timeout)
            except Timeout:
                yield False
                return
            try:
                yield True
            finally:
                self._file_lock.release()
                self._remove_if_deleted()
        finally:
            self._write_lock.release()

    def _remove_if_deleted(self) -> None:
        """Remove the directory once its store file is gone (deleted while this wrote).

        The check before writing cannot close the race alone: another process may delete the
        store (its file, then this directory) between that check and the writes, which then
        re-create the directory for a store that no longer exists (an orphan, seen with
        ``serve --workers 2`` under delete/re-create churn). The deleter removes the file
        before the directory, so a writer that finds the file gone after writing removes
        what it wrote; one that finds it still there wrote before the deleter's removal.
        """
        if not self._store_path.exists():
            shutil.rmtree(self.path, ignore_errors=True)

    def ensure(self, conn: sqlite3.Connection, *, rebuild: bool = False) -> None:
        """Make the index usable: rebuild it if missing, damaged or outdated; apply the outbox.

        Args:
            conn: A connection to the store outside any transaction.
            rebuild: Rebuild it whatever its state.

        Raises:
            StoreError: Another process held the index for longer than
                :data:`FLUSH_LOCK_SECONDS` (a rebuild of a very large store).
        """
        with self._exclusive(FLUSH_LOCK_SECONDS) as owned:
            if not owned:
                raise StoreError(
                    f"{self.path} is being rebuilt by another process; try again when it finishes"
                )
            if rebuild or self._needs_rebuild(conn):
                self._rebuild(conn)
            self._apply_outbox(conn)
            self._load(conn)

    def flush(self, conn: sqlite3.Connection, *, wait: bool = True) -> None:
        """Apply the outbox to the index: one tantivy commit for everything pending.

        Called after every committed write (and, not waiting, before every search: what a
        killed writer left is applied by the next reader); a single read when nothing is
        pending. When another process holds the index longer than
        :data:`FLUSH_LOCK_SECONDS` (or at all, not waiting), the changes stay in the outbox
        for it (or the next flush) to apply.
        """
        if conn.in_transaction or not lexical_pending(conn):
            return
        with self._exclusive(FLUSH_LOCK_SECONDS if wait else 0) as owned:
            if not owned:
                if wait:
                    logger.warning("%s is busy: its changes stay in the outbox", self.path)
                return
            self._apply_outbox(conn)

    def _needs_rebuild(self, conn: sqlite3.Connection) -> bool:
        current = _read_current(self.path)
        if not self._usable(current):
            return True
        try:
            index = _open_index(self.path / current["name"])
            index.reload()
            docs = index.searcher().num_docs
        except (OSError, ValueError) as exc:  # tantivy's errors for unreadable files
            logger.warning("the lexical index %s is damaged (%s): rebuilding it", self.path, exc)
            return True
        if lexical_pending(conn):
            return False  # counts differ until the outbox is applied
        chunks = int(conn.execute("SELECT count(*) FROM chunks").fetchone()[0])
        if docs != chunks:
            logger.warning(
                "the lexical index %s holds %d chunks, the store %d: rebuilding it",
                self.path,
                docs,
                chunks,
            )
            return True
        return False

    def _rebuild(self, conn: sqlite3.Connection) -> None:
        """Build a new index from every chunk in SQLite, then make it the live one."""
        name = f"index-{secrets.token_hex(4)}"
        target = self.path / name
        target.mkdir(parents=True)
        logger.info("building the lexical index %s from the store", target)
        index = _open_index(target, create=True)
        writer = index.writer(WRITER_HEAP_BYTES, 1)
        try:
            conn.execute("BEGIN")  # one snapshot; later writes are in the outbox
            try:
                for document in _documents(conn, None):
                    writer.add_document(document)
            finally:
                conn.execute("ROLLBACK")
            writer.commit()
            writer.wait_merging_threads()
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        old = _read_current(self.path).get("name")
        _write_current(self.path, {"name": name, "format": LEXICAL_FORMAT, "store": self._store_id})
        for leftover in self.path.iterdir():
            if leftover.is_dir() and leftover.name != name:
                shutil.rmtree(leftover, ignore_errors=True)
        if old:
            logger.info("replaced the lexical index %s/%s by %s", self.path, old, name)
        self._live = None
        _bump_status(conn)

    def _apply_outbox(self, conn: sqlite3.Connection) -> None:
        """Re-write every document named in the outbox from SQLite, commit, empty the outbox.

        The chunks stream from SQLite into the writer one at a time, and the writer's buffer
        is small (:data:`OUTBOX_WRITER_HEAP_BYTES`): a batch of uploads costs the server the
        buffer, not a copy of every chunk it names.
        """
        conn.execute("BEGIN")
        try:
            rows = conn.execute("SELECT seq, doc FROM lexical_outbox ORDER BY seq").fetchall()
            if not rows:
                return
            applied = int(rows[-1][0])
            usable = self._usable(_read_current(self.path))
            written = usable and self._write_documents(conn, rows)
        finally:
            conn.execute("ROLLBACK")
        if not written:  # removed while the store was open, or damaged: SQLite has it all
            self._rebuild(conn)  # from SQLite as it is now: the outbox is in it
        _bump_status(conn, applied=applied)
        if written or usable:
            self._load(conn)

    def _write_documents(self, conn: sqlite3.Connection, rows: list[Any]) -> bool:
        """Delete and re-add the chunks of each document the outbox names; False: damaged."""
        paths = list(dict.fromkeys(doc for _, doc in rows))
        try:
            index = _open_index(self.path / _read_current(self.path)["name"])
            writer = index.writer(OUTBOX_WRITER_HEAP_BYTES, 1)
            writer.garbage_collect_files()  # what a writer killed mid-commit left behind
            for path in paths:
                writer.delete_documents_by_term(DOC_FIELD, path)
                for document in _documents(conn, path):
                    writer.add_document(document)
            writer.commit()
            writer.wait_merging_threads()
        except (OSError, ValueError) as exc:
            # SQLite holds every chunk: an index that cannot take a commit is built again
            logger.warning("the lexical index %s is damaged (%s): rebuilding it", self.path, exc)
            return False
        return True


def _rid(value: object) -> int:
    if not isinstance(value, int):  # every document has one: a missing one is damage
        raise LexicalIndexDamaged(f"a document without a row id ({value!r})")
    return value


def _open_index(path: Path, *, create: bool = False) -> tantivy.Index:
    index = tantivy.Index(SCHEMA, path=str(path), reuse=not create)
    # tokenizers live in memory only: registered again on every open
    index.register_tokenizer(FOLD_TOKENIZER, _ANALYZER)
    return index


def _documents(conn: sqlite3.Connection, path: str | None) -> Iterator[tantivy.Document]:
    """The tantivy documents of the chunks of ``path`` (``None``: of every file).

    Each carries the chunk's filterable fields (its own over its file's, as the SQL path reads
    them) and its file's principals, so filters and permissions restrict inside tantivy.
    """
    sql = (
        "SELECT c.rid, c.title, c.content, c.metadata, f.id, f.path, f.access, f.fields "
        "FROM chunks c JOIN files f ON f.id = c.file_id"
    )
    rows = (
        conn.execute(sql + " WHERE f.path = ?", (path,))
        if path is not None
        else conn.execute(sql + " ORDER BY c.file_id")
    )
    principals: tuple[int, list[str]] = (-1, [])
    for rid, title, content, metadata, file_id, file_path, access, fields in rows:
        if principals[0] != file_id:
            names = [] if access != "restricted" else _principals(conn, file_id)
            principals = (file_id, principal_terms(access, names))
        document = tantivy.Document()
        document.add_unsigned(RID_FIELD, int(rid))
        document.add_text(DOC_FIELD, file_path)
        document.add_text("title", fts_segment(title) or "")
        document.add_text("content", fts_segment(content) or "")
        for term in principals[1]:
            document.add_text(PRINCIPALS_FIELD, term)
        add_filter_values(document, metadata, fields)
        yield document


def _principals(conn: sqlite3.Connection, file_id: int) -> list[str]:
    rows = conn.execute("SELECT principal FROM file_principals WHERE file_id = ?", (file_id,))
    return [row[0] for row in rows]


def _bump_status(conn: sqlite3.Connection, applied: int | None = None) -> None:
    """Tell readers the index changed; forget the outbox rows up to ``applied``."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if applied is not None:
            conn.execute("DELETE FROM lexical_outbox WHERE seq <= ?", (applied,))
        conn.execute(
            "INSERT INTO meta(key, value) VALUES (?, '1') "
            "ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1",
            (_STATUS,),
        )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _status(conn: sqlite3.Connection) -> tuple[int, int]:
    """(write generation, flushes): a reader reloads the index when either changes."""
    rows = dict(
        conn.execute(
            "SELECT key, value FROM meta WHERE key IN ('generation', ?)", (_STATUS,)
        ).fetchall()
    )
    return int(rows.get("generation", 0)), int(rows.get(_STATUS, 0))


def _read_current(path: Path) -> dict[str, Any]:
    try:
        current = json.loads((path / _CURRENT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return current if isinstance(current, dict) else {}


def _write_current(path: Path, current: dict[str, Any]) -> None:
    """Replace ``current`` atomically (a crash leaves the old or the new one, whole)."""
    temporary = path / f"{_CURRENT}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(current, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path / _CURRENT)
    directory = os.open(path, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
