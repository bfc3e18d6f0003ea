"""The store itself: one SQLite file and its lexical index, BM25 optionally fused with vectors.

:class:`LocalStore` ties the concerns of this package together: its connections and
transactions (:mod:`.connections`), what it holds and how that changes (:mod:`.contents`,
the class it extends with searching), its tables (:mod:`.schema`), query terms (:mod:`.lexical`)
and the tantivy index beside the file (:mod:`.lexical_index`), vectors (:mod:`.vectors`),
filters (:mod:`.filters`), permission trimming (:mod:`.permissions`) and reading hits back
(:mod:`.search`, :mod:`.fusion`).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from agentic_retrieval.errors import LexicalIndexDamagedError as LexicalIndexDamaged
from agentic_retrieval.errors import (
    StoreError,
    StoreNotFoundError,
    StoreUnavailableError,
    TopicBuildStopped,
)
from agentic_retrieval.odata import Expr
from agentic_retrieval.permissions import ANONYMOUS, ELEVATED, Access
from agentic_retrieval.sources.local.health import StoreHealth, is_damage
from agentic_retrieval.sources.local.store import ann, lexical, schema
from agentic_retrieval.sources.local.store.connections import leased
from agentic_retrieval.sources.local.store.contents import StoreContents
from agentic_retrieval.sources.local.store.fusion import reciprocal_rank_fusion
from agentic_retrieval.sources.local.store.lexical_index import SCHEMA as LEXICAL_SCHEMA
from agentic_retrieval.sources.local.store.lexical_index import LexicalIndex, text_query
from agentic_retrieval.sources.local.store.restriction import RID_SET_MAX, Restriction
from agentic_retrieval.sources.local.store.rows import (
    StoredHit,
)
from agentic_retrieval.sources.local.store.search import (
    allowed_rids,
    browse,
    existing_rids,
    fetch_hits,
)
from agentic_retrieval.sources.local.store.tantivy_filters import (
    constraint_clauses,
    restrict,
    rid_set_query,
)
from agentic_retrieval.sources.local.store.topics import (
    TOPICS_SCHEMA,
    TopicIndexState,
    read_state,
    topics_of,
)
from agentic_retrieval.sources.local.store.topics import refresh as refresh_topic_index
from agentic_retrieval.sources.local.store.vectors import (
    VectorIndex,
)
from agentic_retrieval.sources.topic_graph import (
    TopicGraphSetting,
    TopicLimits,
    sample_by_topic,
)

logger = logging.getLogger(__name__)

_CANCEL_CHECK_STEPS = 10_000
DENSE_PROBE_FACTOR = 4
"""A restricted dense search first takes this many times ``depth`` nearest chunks and keeps
those passing; most filters and permission checks keep enough of them."""
TOPICS_INLINE_MAX = 2_000
"""A search that finds the topic index behind refreshes it before answering while the store
holds at most this many chunks (tens of milliseconds); beyond, a background thread does and
the search answers with the topics as they are."""


class LocalStore(StoreContents):
    """A SQLite-backed chunk index with BM25 and optional dense-vector search.

    Args:
        path: The database file.
        create: Create the file (and its parent directories) when it is missing. Without it,
            opening never creates anything: a mistyped path is an error, not a new empty
            index.

    Raises:
        StoreNotFoundError: ``path`` does not exist and ``create`` is false.
        StoreError: ``path`` is a directory, or a file that is not a local source index.

    """

    def __init__(self, path: str | Path, *, create: bool = False) -> None:
        path = Path(path)
        if path.is_dir():
            raise StoreError(
                f"{path} is a directory: a local source is one SQLite file (e.g. "
                f"{path / 'handbook.sqlite'}); for a knowledge-base directory use "
                "KnowledgeBaseDirectory or kb.loader.open_knowledge_base"
            )
        if not path.exists():
            if not create:
                raise StoreNotFoundError(
                    f"no local source index at {path} (nothing was created): check the "
                    "path, or pass create=True to start a new one"
                )
            path.parent.mkdir(parents=True, exist_ok=True)
        super().__init__(path, create=create)
        self._vectors = VectorIndex(path)
        self.vectors_made_with: str | None = None
        """How the vectors this object writes were made (``local@bf16``; see
        :func:`~agentic_retrieval.embeddings.vectors_made_with`): recorded with them by
        :meth:`replace_file`. The source that embeds sets it."""
        if not create and not schema.is_store(self._connection()):
            raise StoreError(
                f"{self.path} is not a local source index (it has no chunks table); "
                "nothing was changed"
            )
        self._connection().executescript(schema.SCHEMA)
        self._connection().executescript(schema.VECTOR_LOG_SCHEMA)
        self._connection().executescript(TOPICS_SCHEMA)
        self._topic_refresher: threading.Thread | None = None
        self._topic_lock = threading.Lock()
        schema.migrate(self.path, self._connection(), self._write)
        rebuild = schema.drop_old_triggers(self._connection(), self._write)
        self._health = StoreHealth(self.path)
        with self._write() as conn:
            schema.record_fields_once(conn)
        store_id = schema.read_meta(self._connection(), "store_id") or ""
        self._lexical_index = LexicalIndex(self.path, store_id)
        try:
            self._lexical_index.ensure(self._connection(), rebuild=rebuild)
        except OSError as exc:
            if self.path.exists():
                self.close()
                raise StoreError(f"cannot open the lexical index of {self.path}: {exc}") from exc
            # deleted by another process while this one opened it: open as before, its
            # searches report the file missing (StoreHealth)
        self._creating = False  # from now on a missing file was deleted: never re-create it

    def _prepare(self, conn: sqlite3.Connection) -> None:
        # the FTS5 triggers of a store before schema version 4 call it until it migrates
        conn.create_function("fts_segment", 1, lexical.fts_segment, deterministic=True)

    def _committed(self, conn: sqlite3.Connection) -> None:
        """Bring the lexical index up to the write just committed (one commit per batch)."""
        index = getattr(self, "_lexical_index", None)
        if index is None:  # still opening: ensure() applies the outbox once migrations ran
            return
        try:
            index.flush(conn)
        except (OSError, ValueError, sqlite3.Error) as exc:
            # committed in SQLite and named in the outbox: the next flush or open applies it
            logger.warning("could not update the lexical index of %s yet: %s", self.path, exc)

    def _close_connections(self) -> None:
        """Close the connections, the lexical index and a graph build, once no lease is out."""
        super()._close_connections()
        index = getattr(self, "_lexical_index", None)
        if index is not None:
            index.close()
        self._vectors.close()  # a graph being built in the background stops, saving nothing

    def _schema_version(self) -> int:
        return schema.schema_version(self._connection())

    # ------------------------------------------------------------------ reads

    @leased
    def search(
        self,
        text: str,
        *,
        top: int = 50,
        filter_expr: Expr | None = None,
        query_vector: Sequence[float] | None = None,
        cancel: threading.Event | None = None,
        access: Access = ANONYMOUS,
        topic_graph: TopicGraphSetting | None = None,
    ) -> list[StoredHit]:
        """Search the index: BM25 alone, or BM25 and cosine fused by reciprocal rank.

        Args:
            text: The user's query; any characters are allowed.
            top: Maximum number of hits.
            filter_expr: A parsed OData filter over the chunk metadata.
            query_vector: The embedded query; enables hybrid search when the index has vectors.
            cancel: Set from another thread to abort the search mid-query (its caller has
                gone); the search then raises ``sqlite3.OperationalError`` (interrupted).
            access: Who is asking: only chunks of documents they may see are candidates
                (see :mod:`agentic_retrieval.permissions`); the default is an anonymous
                caller, permissions not enforced.
            topic_graph: ``diverse`` or ``balanced``: rank a pool of
                ``minDiversityPoolSize`` candidates, then sample ``top`` of them across the
                topics of the store's topic index (see
                :mod:`agentic_retrieval.sources.topic_graph`);
                ``None`` or ``none``: the ranking as it is.

        Returns:
            Hits, best first. Scores are BM25 (higher is better) for lexical search and
            RRF sums for hybrid search; a hybrid search's hits also carry the cosine of their
            vector and the query's (``similarity``), whichever list found them. For ``*``, an
            empty text or a filter-only query, the first chunks (in file order) that pass the
            filter, scored 0; for text with no word at all (only punctuation), nothing.

        Raises:
            StoreUnavailableError: The file is damaged or missing (see
                :mod:`~agentic_retrieval.sources.local.health`).
            PermissionsNotEnforceableError: ``access`` enforces permissions and no document of
                this store has any (it was indexed without permissions).

        """
        if top <= 0:
            return []
        sampling = topic_graph if topic_graph is not None and topic_graph.kind != "none" else None
        if sampling is not None and self.has_vectors():
            self._keep_topics_current()
        health = self._health
        assert health is not None  # set by __init__
        if not self._closed:  # closed (deleted) under this lease: not damage, finish reading
            health.check(self._recover)
        conn = self._connection()
        if cancel is not None:
            # SQLite calls this every few thousand steps; non-zero aborts the statement
            conn.set_progress_handler(cancel.is_set, _CANCEL_CHECK_STEPS)
        try:
            # normally a no-op: applies what a writer killed before its flush left in the outbox
            self._lexical_index.flush(conn, wait=False)
            try:
                return self._search(text, top, filter_expr, query_vector, access, sampling)
            except LexicalIndexDamaged as exc:
                # SQLite holds every chunk: build the index again from it, then answer
                logger.warning(
                    "the lexical index of %s is damaged (%s): rebuilding", self.path, exc
                )
                self._lexical_index.ensure(conn, rebuild=True)
                return self._search(text, top, filter_expr, query_vector, access, sampling)
        except sqlite3.Error as exc:
            if is_damage(exc):
                raise health.damaged(exc) from None
            raise
        except OSError:
            if not self.path.exists():  # deleted under this search by another process
                raise StoreUnavailableError(self.path, "its index file is missing") from None
            raise
        finally:
            if cancel is not None:
                conn.set_progress_handler(None, 0)

    def _search(
        self,
        text: str,
        top: int,
        filter_expr: Expr | None,
        query_vector: Sequence[float] | None,
        access: Access,
        sampling: TopicGraphSetting | None = None,
    ) -> list[StoredHit]:
        wanted = top
        if sampling is not None:  # a pool to sample from
            top = sampling.pool(top)
        depth = max(top, 50)
        with self._snapshot():  # the permission check and the query see the same data
            restriction = self._restriction(filter_expr, access)
            where, params = restriction.where, restriction.params
            lexical_ranking = self._lexical(text, depth, restriction)
            if query_vector is not None and self.has_vectors():
                dense = self._dense(query_vector, depth, restriction)
                pending = self._without_vectors(query_vector, lexical_ranking)
                fused = reciprocal_rank_fusion([lexical_ranking, dense], stand_ins=pending)
                ranked = fused[:top]
                similarities = self._similarities(query_vector, ranked)
                return self._fetch(self._sampled(ranked, sampling, wanted), similarities)
            elif lexical_ranking is None:
                # "*" or "" (Azure's match-all) or a filter-only query browses; words that
                # are all punctuation ("^", "((( )))") match nothing rather than any chunk
                browse_all = text.strip() in ("", "*") or filter_expr is not None
                ranked = browse(self._connection(), top, where, params) if browse_all else []
                ranked = self._sampled(ranked, sampling, wanted)
            else:
                ranked = self._sampled(lexical_ranking[:top], sampling, wanted)
            return self._fetch(ranked[:wanted])

    def _sampled(
        self,
        ranked: list[tuple[int, float]],
        sampling: TopicGraphSetting | None,
        top: int,
    ) -> list[tuple[int, float]]:
        """``top`` of the pool ``ranked``, sampled across its topics (``None``: the first)."""
        if sampling is None:
            return ranked[:top]
        topics = topics_of(self._connection(), [rid for rid, _ in ranked])
        return sample_by_topic(ranked, topics, sampling, top)

    # ------------------------------------------------------------------ topics

    @leased
    def refresh_topics(
        self, limits: TopicLimits | None = None, *, stoppable: bool = False
    ) -> TopicIndexState:
        """Bring the topic index up to the store's current contents, here and now.

        New vectors are assigned to the existing topics, deleted ones dropped; past
        :data:`~.topics.REBUILD_SHARE` of change since the last full build, the topics are
        fitted again. One refresh at a time; searches meanwhile read the index as it was.

        Raises:
            TopicBuildStopped: ``stoppable`` and the store was closed meanwhile (a refresh
                in the background stops rather than keep a deleted store open).
        """
        stop = (lambda: self._closed) if stoppable else None
        with self._topic_lock:
            conn = self._connection()
            with self._snapshot():
                generation = self.generation()
            return refresh_topic_index(conn, self._write, generation, limits, stop)

    @leased
    def topic_state(self) -> TopicIndexState:
        """What the topic index reflects (its generation, vectors, topics)."""
        return read_state(self._connection())

    def wait_for_topics(self, timeout: float | None = None) -> None:
        """Wait for a topic refresh running in the background (tests, benchmarks)."""
        refresher = self._topic_refresher
        if refresher is not None:
            refresher.join(timeout)

    def _keep_topics_current(self) -> None:
        """Refresh the topic index when a write made it stale: inline while small, else behind."""
        if read_state(self._connection()).generation == self.generation():
            return
        if self.count_chunks() <= TOPICS_INLINE_MAX:
            self.refresh_topics()
            return
        refresher = self._topic_refresher
        if refresher is not None and refresher.is_alive():
            return
        refresher = threading.Thread(
            target=self._refresh_topics_behind, name="topic-index", daemon=True
        )
        self._topic_refresher = refresher
        refresher.start()

    def _refresh_topics_behind(self) -> None:
        try:
            state = self.refresh_topics(stoppable=True)
            logger.info(
                "topic index of %s: %d vectors, %d topics",
                self.path,
                state.vectors,
                state.fine_topics,
            )
        except TopicBuildStopped:
            logger.info("topic index of %s: refresh stopped, the store was closed", self.path)
        except (StoreError, sqlite3.Error, OSError) as exc:  # the next stale search retries
            logger.warning("could not refresh the topic index of %s: %s", self.path, exc)

    def _without_vectors(
        self, query_vector: Sequence[float], lexical_ranking: list[tuple[int, float]] | None
    ) -> dict[int, int]:
        """Lexical hits still waiting for their vectors, by lexical rank (see the fusion).

        Only in a store whose chunks get their vectors after they are written (a file source
        of ``serve --data``), while some are pending; elsewhere a chunk without a vector has
        none by design and ranks as before.
        """
        if not lexical_ranking or not self._vectors_pending():
            return {}
        embedded = self._similarities(query_vector, lexical_ranking)
        return {
            rid: rank
            for rank, (rid, _) in enumerate(lexical_ranking, start=1)
            if rid not in embedded
        }

    def _restriction(self, filter_expr: Expr | None, access: Access) -> Restriction:
        """What this search's candidates must pass, for its lexical and dense parts alike.

        Raises:
            PermissionsNotEnforceableError: ``access`` enforces permissions and no document of
                this store has any.
        """
        conn = self._connection()
        where, params = self._where(filter_expr, access)
        pending = schema.lexical_pending(conn)
        restriction = Restriction(conn, self._lexical_index, where, params, pending)
        if where != "1" and not pending:
            clauses, residual = constraint_clauses(
                LEXICAL_SCHEMA, filter_expr, access, self.access_summary()
            )
            restriction.clauses = clauses
            if residual is not None:
                # the whole filter, not just its residual: SQL reads every chunk either way,
                # and the allow-list is then the shortest it can be (measured at 120k: a
                # residual passing 51% against the filter's 7.6% cost 480 ms against 324);
                # no permission check here: the tantivy clauses hold it
                restriction.residual = self._where(filter_expr, ELEVATED)
        return restriction

    def _lexical(
        self, text: str, depth: int, restriction: Restriction
    ) -> list[tuple[int, float]] | None:
        """The ``depth`` best chunks for ``text`` that pass the restriction, from tantivy.

        A filter and the permission check restrict the candidates before top-k, never after:
        tantivy answers them from each chunk's indexed fields and principals
        (:mod:`.tantivy_filters`, checked equal to the SQL path); a filter with a part it has
        no exact equivalent for is also read the SQL way, as a set of row ids. When the rows
        passing the SQL way number more than :data:`~.restriction.RID_SET_MAX`, or when
        documents are still in the outbox (written, not yet in tantivy, whose indexed fields
        may be the previous ones: only after a crash or during a concurrent write), tantivy's
        best are checked against the SQL condition instead, paging deeper until ``depth``
        pass or no match is left.
        """
        query = text_query(text)
        if query is None:
            return None
        conn = self._connection()
        index = self._lexical_index
        if restriction.unrestricted and not restriction.pending:
            return index.search(conn, query, depth)
        passing: set[int] | frozenset[int] | None
        if not restriction.pending:
            query = restriction.restrict(query)
            if restriction.residual is None:
                return index.search(conn, query, depth)
            # what tantivy cannot answer exactly: the rows passing it, this snapshot's own
            allowed = restriction.residual_rids()
            if len(allowed) <= RID_SET_MAX:
                if not allowed:
                    return []
                allowed_query = restrict(query, [rid_set_query(LEXICAL_SCHEMA, allowed)])
                return index.search(conn, allowed_query, depth)
            passing = frozenset(allowed)
        else:
            rids = allowed_rids(conn, restriction.where, restriction.params)
            passing = set(rids) if rids is not None else None
        limit = depth
        while True:
            ranked = index.search(conn, query, limit)
            present = passing if passing is not None else existing_rids(conn, ranked)
            kept = [hit for hit in ranked if hit[0] in present]
            if len(kept) >= depth or len(ranked) < limit:
                return kept[:depth]
            limit *= 4

    def _recover(self) -> None:
        """Check a changed file on a fresh connection and drop what was cached from the old.

        Raises:
            sqlite3.Error: The file is still not a usable index.
        """
        conn = self._connection()
        verdict = conn.execute("PRAGMA quick_check(1)").fetchone()
        if not verdict or verdict[0] != "ok":
            raise sqlite3.DatabaseError(f"quick_check: {verdict[0] if verdict else 'no answer'}")
        conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        conn.execute("SELECT rid, file_id FROM chunks LIMIT 1").fetchone()
        self._vectors.reset()  # a restored file may repeat an old generation
        self._lexical_index.close()
        self._lexical_index.ensure(conn)  # a restored file needs the index of its own chunks

    def _dense(
        self, query_vector: Sequence[float], depth: int, restriction: Restriction
    ) -> list[tuple[int, float]]:
        """The ``depth`` chunks nearest the query that pass the restriction, nearest first.

        The restriction applies before the top ``depth`` are taken, never after, without
        reading every chunk the SQL way: the nearest chunks are searched first and kept when
        they pass (checked in tantivy, or SQL for the residual, for just those rids); when
        too few pass, tantivy counts the chunks that do. At most
        :data:`~.ann.EXACT_MAX_ALLOWED` are collected and searched exactly; more are a broad
        share, searched for deeper (as deep as that share predicts, then 4 times deeper
        each round) until ``depth`` pass or every vector has been seen. Only while the outbox
        holds documents is the whole condition read the SQL way first, as before.
        """
        conn = self._connection()
        generation = self.generation()

        def nearest(limit: int, allowed: Sequence[int] | None = None) -> list[tuple[int, float]]:
            return self._vectors.search(conn, generation, query_vector, limit, allowed)

        if restriction.unrestricted:
            return nearest(depth)
        if restriction.pending:
            return nearest(depth, allowed_rids(conn, restriction.where, restriction.params))
        limit = depth * DENSE_PROBE_FACTOR
        ranked = nearest(limit)
        kept = _kept(ranked, restriction)
        if len(kept) >= depth or len(ranked) < limit:
            return kept[:depth]
        count, subset = restriction.subset(ann.EXACT_MAX_ALLOWED)
        if subset is not None:
            return nearest(depth, subset) if subset else []
        total = max(self._lexical_index.size(conn), 1)
        limit = max(4 * limit, int(depth * total / max(count, 1) * 2))
        while True:
            ranked = nearest(limit)
            kept = _kept(ranked, restriction)
            if len(kept) >= depth or len(ranked) < limit:
                return kept[:depth]
            limit *= 4

    @leased
    def refresh_vectors(self) -> None:
        """Bring the in-memory vectors up to date and save their graph, if they have one.

        Called after indexing, so that the next process to open the store loads the graph
        instead of building it on its first query. Does nothing where search stays exact (no
        faiss, or fewer chunks than :data:`~.ann.ANN_MIN_VECTORS`).
        """
        if not ann.faiss_available() or self.count_chunks() < ann.ANN_MIN_VECTORS:
            return
        with self._snapshot():
            self._vectors.refresh(self._connection(), self.generation())

    @leased
    def load_vectors(self) -> None:
        """Read the vectors (and the saved graph) into memory now, not on the first search.

        A hybrid source calls it in the background when it opens, so that the first dense
        search of a large store does not wait for the load (a million vectors: ~1.8 GB of
        graph). A search meanwhile waits for the load rather than starting another.

        Raises:
            StoreClosedError: The store was closed.
            StoreUnavailableError: The index file is damaged or missing.
        """
        if self.has_vectors():
            with self._snapshot():
                self._vectors.load(self._connection(), self.generation())

    def chunks_by_id(self, ids: Sequence[str], access: Access = ANONYMOUS) -> list[StoredHit]:
        """The chunks named ``ids`` that ``access`` may see, in ``ids`` order, scored 0."""
        rids = self.visible_chunk_rids(ids, access)
        return self._fetch([(rid, 0.0) for rid in rids])

    def _similarities(
        self, query_vector: Sequence[float], ranked: Sequence[tuple[int, float]]
    ) -> dict[int, float]:
        return self._vectors.similarities(
            self._connection(), self.generation(), query_vector, ranked
        )

    def _fetch(
        self, ranked: Sequence[tuple[int, float]], similarities: Mapping[int, float] | None = None
    ) -> list[StoredHit]:
        return fetch_hits(self._connection(), ranked, similarities)


def _kept(ranked: list[tuple[int, float]], restriction: Restriction) -> list[tuple[int, float]]:
    """The ranked chunks that pass ``restriction``, in rank order."""
    passing = restriction.passing([rid for rid, _ in ranked])
    return [hit for hit in ranked if hit[0] in passing]
