"""The store's vectors in memory: exact cosine search, and a faiss HNSW graph once they are many.

:class:`VectorRows` holds every live chunk vector (normalised float32), one row each, with the
chunk's rid as its label. Rows are appended as chunks are written; a deleted or rewritten
chunk's old row is only marked dead (excluded from every search) until dead rows pass
:data:`REBUILD_DEAD_SHARE` of the total, when the rows are compacted and the graph rebuilt.

Search is exact (one matrix product) below :data:`ANN_MIN_VECTORS` and wherever a filter or
permission trimming leaves at most :data:`EXACT_MAX_ALLOWED` candidates, so filters always
apply before top-k. Otherwise, with ``faiss-cpu`` installed (the ``local`` and ``ann`` extras),
an ``IndexHNSWFlat`` (inner product, M = :data:`HNSW_M`) answers: unfiltered, or restricted by
an ``IDSelectorBitmap`` of the allowed rows. Its search breadth (``efSearch``,
:func:`ef_search`) grows with the graph's size, so that recall against exact search holds as
the store grows, and as the allowed share shrinks; if the graph yields fewer hits than asked
while more rows are allowed, the exact product answers instead, so a search never returns fewer
than ``depth`` while more match. The graph keeps the only copy of its vectors (its flat storage
is read as the matrix). Vectors written after the graph was built wait in an exact tail
(:data:`FRESH_MAX` at most) until merged, so writes never wait for graph insertion.

Without faiss every search is exact, as before.

The rows and graph are saved to one file (:func:`save` / :func:`load`, temp file + rename)
with a header naming what they cover; the store decides whether a saved file still fits.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import threading
from collections.abc import Sequence
from importlib.util import find_spec
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

logger = logging.getLogger(__name__)

ANN_MIN_VECTORS = 50_000
"""Below this many live vectors every search is exact (a product over at most 77 MB)."""
EXACT_MAX_ALLOWED = 20_000
"""A filtered search with at most this many allowed rows is exact over them."""
HNSW_M = 32
EF_CONSTRUCTION = 256
"""Candidates weighed per insertion when building. 256 rather than 128 costs 1.8x the build
CPU (1M: 1,754 s against 987) and lifts recall@10 at the same search breadth: with
:func:`ef_search` at 1M, 0.969 on held-out and on fresh queries, against 0.956 and 0.936
(benchmarks/README.md, "How wide the graph searches"). Graphs saved earlier keep theirs until
rebuilt."""
EF_SEARCH = 512
"""The least search breadth (``efSearch``) of an unfiltered query: a graph of up to
:data:`EF_BASE_SIZE` vectors is searched this wide; :func:`ef_search` widens it beyond."""
EF_BASE_SIZE = 25_000
EF_GROWTH = 0.7
"""A graph of ``n`` vectors is searched ``EF_SEARCH * (n / EF_BASE_SIZE) ** EF_GROWTH`` wide
(1,350 at 100k, 6,800 at 1M): a fixed breadth finds less of the exact top 10 as the graph
grows (512 finds 0.94 of it at 100k real vectors and 0.82 at 1M). Fitted to the breadths
real and composed sets of 25k-1M vectors need for recall@10 0.97 on half their queries
(benchmarks/README.md, "How wide the graph searches"), so that unseen queries get 0.95."""
MAX_EF_SEARCH = 8_192
"""The widest search (a filtered one widens by 1/sqrt(allowed share), up to this)."""
FRESH_MAX = 20_000
"""New rows searched exactly beside the graph until they are this many, then merged in."""
REBUILD_DEAD_SHARE = 0.2
"""Compact and rebuild once this share of the rows is dead (deleted or rewritten)."""
_GATHER_SHARE = 4
"""Exact search over at least 1/this of the rows computes every row's product (no gather)."""
_MAGIC = b"ARVEC001"
_ADD_BATCH = 1_024


def ef_search(size: int) -> int:
    """The search breadth of an unfiltered query over a graph of ``size`` vectors."""
    grown = EF_SEARCH * (max(size, 1) / EF_BASE_SIZE) ** EF_GROWTH
    return int(min(MAX_EF_SEARCH, max(EF_SEARCH, round(grown))))


def _faiss() -> Any:
    """The faiss module (untyped: its SWIG bindings carry no usable type information)."""
    import faiss

    return faiss


def faiss_available() -> bool:
    """Whether ``faiss-cpu`` can be imported (without importing it)."""
    return find_spec("faiss") is not None


class VectorRows:
    """Live vectors by row with their rids, searchable exactly or through an HNSW graph.

    Rows ``0 .. graphed - 1`` live in the graph (its flat storage is their only copy); later
    rows are the *fresh* tail, a plain matrix searched exactly beside the graph, so that a
    write never waits for graph insertion (several ms per vector). :meth:`merge` moves the
    tail into the graph: after indexing (:meth:`VectorIndex.refresh`), and by itself once the
    tail passes :data:`FRESH_MAX` rows.

    Not thread-safe: the store serialises access.

    Args:
        dimension: The vectors' dimension.
        use_ann: Build a graph once there are :data:`ANN_MIN_VECTORS` live rows (needs faiss).
    """

    def __init__(self, dimension: int, *, use_ann: bool | None = None) -> None:
        self.dimension = dimension
        self.use_ann = faiss_available() if use_ann is None else use_ann
        self.labels = np.zeros(0, dtype=np.int64)
        self.alive = np.zeros(0, dtype=bool)
        self._buffer = np.zeros((0, dimension), dtype=np.float32)
        """Rows from ``graphed`` on (all rows while there is no graph)."""
        self._count = 0
        self.graph: Any = None
        self.builds = 0
        """Graphs built so far (each one differs from any saved before it)."""
        self._sorted_labels = np.zeros(0, dtype=np.int64)
        self._sorted_rows = np.zeros(0, dtype=np.int64)

    # ------------------------------------------------------------------ contents

    @property
    def size(self) -> int:
        """Rows held, dead ones included."""
        return self._count

    @property
    def live(self) -> int:
        """Rows that searches may return."""
        return int(self._sorted_rows.shape[0])

    @property
    def graphed(self) -> int:
        """Rows held by the graph (0 without one)."""
        return int(self.graph.ntotal) if self.graph is not None else 0

    @property
    def fresh(self) -> int:
        """Rows of the exact tail not yet in the graph."""
        return self._count - self.graphed

    def _graph_matrix(self) -> np.ndarray:
        """The graph's rows (a view of its storage)."""
        faiss = _faiss()
        storage = faiss.downcast_index(self.graph.storage)
        flat = faiss.rev_swig_ptr(storage.get_xb(), self.graphed * self.dimension)
        matrix: np.ndarray = np.asarray(flat).reshape(self.graphed, self.dimension)
        return matrix

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        """The vectors of ``rows`` (a copy)."""
        graphed = self.graphed
        if not graphed:
            picked: np.ndarray = self._buffer[rows]
            return picked
        out = np.empty((len(rows), self.dimension), dtype=np.float32)
        old = rows < graphed
        if old.any():
            out[old] = self._graph_matrix()[rows[old]]
        if not old.all():
            out[~old] = self._buffer[rows[~old] - graphed]
        return out

    def rows_of(self, rids: np.ndarray) -> np.ndarray:
        """The live rows holding ``rids`` (rids without one are left out)."""
        if not self._sorted_labels.shape[0] or not rids.shape[0]:
            return np.zeros(0, dtype=np.int64)
        at = np.minimum(np.searchsorted(self._sorted_labels, rids), len(self._sorted_labels) - 1)
        found = self._sorted_labels[at] == rids
        rows: np.ndarray = self._sorted_rows[at[found]]
        return rows

    def add(self, rids: Sequence[int] | np.ndarray, vectors: np.ndarray) -> None:
        """Append rows (vectors are normalised here); a rid already live is replaced."""
        rids = np.asarray(rids, dtype=np.int64)
        if not rids.shape[0]:
            return
        self.remove(rids)
        vectors = normalised(np.asarray(vectors, dtype=np.float32).reshape(-1, self.dimension))
        tail = self.fresh
        if tail + len(rids) > self._buffer.shape[0]:
            capacity = max(2 * self._buffer.shape[0], tail + len(rids))
            grown = np.zeros((capacity, self.dimension), dtype=np.float32)
            grown[:tail] = self._buffer[:tail]
            self._buffer = grown
        self._buffer[tail : tail + len(rids)] = vectors
        self._count += len(rids)
        self.labels = np.concatenate([self.labels, rids])
        self.alive = np.concatenate([self.alive, np.ones(len(rids), dtype=bool)])
        self._index()

    def remove(self, rids: Sequence[int] | np.ndarray) -> None:
        """Mark the rows of ``rids`` dead (searches skip them from now on)."""
        rows = self.rows_of(np.asarray(rids, dtype=np.int64))
        if not rows.shape[0]:
            return
        self.alive[rows] = False
        self._index()

    # ------------------------------------------------------------------ the graph

    @property
    def wants_graph(self) -> bool:
        """Whether a graph should be built, or rebuilt over the live rows.

        Due when there is none and :data:`ANN_MIN_VECTORS` rows are live, when dead rows pass
        :data:`REBUILD_DEAD_SHARE`, or when the fresh tail passes :data:`FRESH_MAX`. Building
        is slow (milliseconds per vector), so the store does it off the query path.
        """
        if not self.use_ann or self.live < ANN_MIN_VECTORS:
            return False
        if self.graph is None:
            return True
        return self.size - self.live > REBUILD_DEAD_SHARE * self.size or self.fresh > FRESH_MAX

    def snapshot(self) -> VectorRows:
        """A copy of the live rows, without a graph (cheap next to building one)."""
        keep = self._sorted_rows
        copy = VectorRows(self.dimension, use_ann=self.use_ann)
        copy._buffer, copy._count = self.vectors(keep), len(keep)
        copy.labels, copy.alive = self.labels[keep], np.ones(len(keep), dtype=bool)
        copy._index()
        copy.builds = self.builds
        return copy

    def build(self, cancel: threading.Event | None = None) -> VectorRows | None:
        """Put every row in a new graph (dead rows dropped first); returns ``self``.

        Returns ``None`` when ``cancel`` was set (checked every :data:`_ADD_BATCH` vectors):
        the rows are then unusable.
        """
        if self.size > self.live:
            fresh = self.snapshot()
            self.__dict__.update(fresh.__dict__)
        faiss = _faiss()
        graph = faiss.IndexHNSWFlat(self.dimension, HNSW_M, faiss.METRIC_INNER_PRODUCT)
        graph.hnsw.efConstruction = EF_CONSTRUCTION
        if self.graph is not None:  # live rows held by the old graph, then the tail
            vectors = self.vectors(np.arange(self._count))
        else:
            vectors = self._buffer[: self._count]
        for start in range(0, len(vectors), _ADD_BATCH):
            if cancel is not None and cancel.is_set():
                return None
            graph.add(vectors[start : start + _ADD_BATCH])
        self.graph = graph
        self.builds += 1
        self._buffer = np.zeros((0, self.dimension), dtype=np.float32)  # the graph holds them
        return self

    def merge(self) -> None:
        """Insert the fresh tail into the graph (several ms per vector)."""
        if self.graph is not None and self.fresh:
            self.graph.add(self._buffer[: self.fresh])
            self._buffer = np.zeros((0, self.dimension), dtype=np.float32)

    def _index(self) -> None:
        rows = np.flatnonzero(self.alive)
        order = np.argsort(self.labels[rows], kind="stable")
        self._sorted_rows = rows[order]
        self._sorted_labels = self.labels[self._sorted_rows]

    # ------------------------------------------------------------------ search

    def search(
        self, query: np.ndarray, depth: int, allowed: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        """The ``depth`` live rows most similar to ``query`` as (rid, cosine), best first.

        Args:
            query: A normalised query vector.
            depth: How many to return at most.
            allowed: The rids that may be returned (``None``: every live row).
        """
        if depth <= 0 or not self.live:
            return []
        rows = self._sorted_rows if allowed is None else self.rows_of(np.unique(allowed))
        if not rows.shape[0]:
            return []
        graphed = self.graphed
        in_graph = int(np.count_nonzero(rows < graphed))
        if not graphed or in_graph <= EXACT_MAX_ALLOWED:
            return self._exact(query, depth, rows)
        everything = allowed is None and self.size == self.live
        found = self._graph_search(query, depth, None if everything else rows, in_graph)
        if len(found) < min(depth, in_graph):
            # the graph ran out before finding enough allowed rows: never fewer than asked
            return self._exact(query, depth, rows)
        tail = rows[rows >= graphed]
        if tail.shape[0]:
            found = sorted(found + self._exact(query, depth, tail), key=lambda hit: -hit[1])
        return found[:depth]

    def similarities(self, query: np.ndarray, rids: np.ndarray) -> dict[int, float]:
        """The cosine of each live rid's vector and ``query`` (rids without one are left out)."""
        rows = self.rows_of(rids)
        if not rows.shape[0]:
            return {}
        cosines = self._products(query, rows)
        return {int(self.labels[r]): float(c) for r, c in zip(rows, cosines, strict=True)}

    def _products(self, query: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``query``'s inner product with each of ``rows``.

        Many rows (a quarter of all or more) take one product over every row, read where it
        lies (the graph's storage, the tail), then the rows' values: gathering them into a
        copy first cost 15 times the product itself (120k rows: 109 ms against 7.5 ms).
        """
        if rows.shape[0] * _GATHER_SHARE < self._count:
            picked: np.ndarray = self.vectors(rows) @ query
            return picked
        graphed = self.graphed
        every = np.empty(self._count, dtype=np.float32)
        if graphed:
            every[:graphed] = self._graph_matrix() @ query
        every[graphed:] = self._buffer[: self._count - graphed] @ query
        chosen: np.ndarray = every[rows]
        return chosen

    def _exact(self, query: np.ndarray, depth: int, rows: np.ndarray) -> list[tuple[int, float]]:
        similarities = self._products(query, rows)
        count = min(depth, similarities.shape[0])
        best = np.argpartition(-similarities, count - 1)[:count]
        best = best[np.argsort(-similarities[best], kind="stable")]
        return [(int(self.labels[rows[b]]), float(similarities[b])) for b in best]

    def _graph_search(
        self, query: np.ndarray, depth: int, rows: np.ndarray | None, candidates: int
    ) -> list[tuple[int, float]]:
        """Search the graph; ``rows`` (any, the tail's are ignored) restricts it."""
        faiss = _faiss()
        graphed = self.graphed
        breadth = int(
            min(MAX_EF_SEARCH, max(ef_search(graphed), depth) / np.sqrt(candidates / graphed))
        )
        options: dict[str, Any] = {"efSearch": max(breadth, depth)}
        if rows is not None:
            mask = np.zeros(graphed, dtype=bool)
            mask[rows[rows < graphed]] = True
            bitmap = np.packbits(mask, bitorder="little")
            options["sel"] = faiss.IDSelectorBitmap(graphed, faiss.swig_ptr(bitmap))
        params = faiss.SearchParametersHNSW(**options)
        scores, found = self.graph.search(query.reshape(1, -1), depth, params=params)
        return [
            (int(self.labels[r]), float(s))
            for r, s in zip(found[0], scores[0], strict=True)
            if r >= 0
        ]


def normalised(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.where(norms == 0, 1, norms)).astype(np.float32, copy=False)


# ---------------------------------------------------------------------- the file


def save(rows: VectorRows, path: Path, header: dict[str, Any]) -> None:
    """Write ``rows`` (with their graph) and ``header`` to ``path`` atomically.

    Raises:
        ValueError: ``rows`` have no graph, or rows outside it (merge them first).
    """
    if rows.graph is None or rows.fresh:
        raise ValueError("only rows held entirely by a graph are saved")
    faiss = _faiss()

    temporary = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with temporary.open("wb") as out:
            meta = json.dumps({**header, "dimension": rows.dimension, "size": rows.size}).encode()
            out.write(_MAGIC + struct.pack("<Q", len(meta)) + meta)
            out.write(rows.labels.astype("<i8").tobytes())
            out.write(np.packbits(rows.alive, bitorder="little").tobytes())
            writer = faiss.PyCallbackIOWriter(out.write)
            faiss.write_index(rows.graph, writer)
            del writer
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def load(path: Path) -> tuple[VectorRows, dict[str, Any]] | None:
    """Read a file written by :func:`save`; ``None`` when it is missing or unreadable."""
    try:
        with path.open("rb") as source:
            return _read(source)
    except FileNotFoundError:
        return None
    except Exception as exc:  # a damaged file is rebuilt from SQLite, never trusted
        logger.warning("ignoring the vector index %s (%s): rebuilding it", path, exc)
        return None


def _read(source: BinaryIO) -> tuple[VectorRows, dict[str, Any]] | None:
    faiss = _faiss()

    if source.read(len(_MAGIC)) != _MAGIC:
        raise ValueError("not a vector index file")
    (length,) = struct.unpack("<Q", source.read(8))
    header = json.loads(source.read(length))
    size, dimension = int(header["size"]), int(header["dimension"])
    labels = np.frombuffer(source.read(8 * size), dtype="<i8").astype(np.int64)
    packed = np.frombuffer(source.read((size + 7) // 8), dtype=np.uint8)
    alive = np.unpackbits(packed, bitorder="little")[:size].astype(bool)
    reader = faiss.PyCallbackIOReader(source.read)
    graph = faiss.read_index(reader)
    del reader
    if labels.shape[0] != size or graph.ntotal != size or graph.d != dimension:
        raise ValueError("the file's parts disagree")
    rows = VectorRows(dimension, use_ann=True)
    rows.graph, rows._count = graph, size
    rows.labels, rows.alive = labels, alive
    rows._index()
    return rows, header
