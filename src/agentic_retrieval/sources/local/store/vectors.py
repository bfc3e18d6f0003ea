"""Dense vectors: checked on the way in, searched exactly (cosine) from an in-memory matrix.

The matrix of every chunk's normalised vector is read once per write generation and shared
by the store's threads.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from agentic_retrieval.errors import StoreError


@dataclass(slots=True)
class _VectorCache:
    generation: int = -1
    rids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    matrix: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))


def vector_blobs(
    vectors: Sequence[Sequence[float]] | None, count: int, expected: int | None
) -> list[bytes | None]:
    """One float32 blob per chunk (``None`` each without vectors), checked against the index.

    Raises:
        StoreError: Not one vector per chunk, ragged vectors, or a dimension other than
            ``expected`` (the index's, once it has any).
    """
    if vectors is None:
        return [None] * count
    if len(vectors) != count:
        raise StoreError(f"{len(vectors)} vectors for {count} chunks")
    array = np.asarray(vectors, dtype=np.float32)
    if count and array.ndim != 2:
        raise StoreError("vectors must all have the same dimension")
    if count and expected is not None and array.shape[1] != expected:
        raise StoreError(
            f"embedding dimension {array.shape[1]} differs from the index's {expected}; "
            "re-create the index to change embedding models"
        )
    return [row.tobytes() for row in array]


class VectorIndex:
    """Exact cosine search over the store's vectors, cached per write generation."""

    def __init__(self) -> None:
        self._cache = _VectorCache()
        self._lock = threading.Lock()

    def reset(self) -> None:
        """Forget the cached matrix (a restored file may repeat an old generation)."""
        with self._lock:
            self._cache = _VectorCache()

    def search(
        self,
        conn: sqlite3.Connection,
        generation: int,
        query_vector: Sequence[float],
        depth: int,
        allowed: Sequence[int] | None,
    ) -> list[tuple[int, float]]:
        """The ``depth`` chunks most similar to the query, as (rid, cosine), best first.

        Args:
            conn: A connection to read the vectors with (when the cache is stale).
            generation: The store's write generation the read sees.
            query_vector: The embedded query.
            depth: How many to return at most.
            allowed: The rids that may be returned (``None``: every chunk).

        Raises:
            StoreError: The query's dimension is not the index's.
        """
        cache = self._matrix(conn, generation)
        if cache.matrix.shape[0] == 0:
            return []
        query = np.asarray(query_vector, dtype=np.float32)
        if query.shape != (cache.matrix.shape[1],):
            raise StoreError(
                f"query vector has dimension {query.shape} but the index has "
                f"{cache.matrix.shape[1]}: use the embedding model the index was built with"
            )
        norm = float(np.linalg.norm(query))
        similarities = cache.matrix @ (query / norm if norm else query)
        if allowed is not None:
            mask = np.isin(cache.rids, np.asarray(allowed, dtype=np.int64))
            similarities = np.where(mask, similarities, -np.inf)
        count = min(depth, similarities.shape[0])
        best = np.argpartition(-similarities, count - 1)[:count]
        best = best[np.argsort(-similarities[best], kind="stable")]
        return [
            (int(cache.rids[i]), float(similarities[i]))
            for i in best
            if np.isfinite(similarities[i])
        ]

    def similarities(
        self,
        conn: sqlite3.Connection,
        generation: int,
        query_vector: Sequence[float],
        ranked: Sequence[tuple[int, float]],
    ) -> dict[int, float]:
        """The cosine of each ranked chunk's vector and the query's, by rid.

        Hybrid hits found by BM25 alone get theirs too, so a reranker can weigh meaning for
        every candidate without embedding the passages again. Chunks without a vector are left
        out.
        """
        cache = self._matrix(conn, generation)
        if cache.matrix.shape[0] == 0 or not ranked:
            return {}
        query = np.asarray(query_vector, dtype=np.float32)
        norm = float(np.linalg.norm(query))
        rids = np.asarray([rid for rid, _ in ranked], dtype=np.int64)
        rows = np.minimum(np.searchsorted(cache.rids, rids), len(cache.rids) - 1)
        present = cache.rids[rows] == rids
        cosines = cache.matrix[rows] @ (query / norm if norm else query)
        return {
            int(rid): float(cosine)
            for rid, cosine, ok in zip(rids, cosines, present, strict=True)
            if ok
        }

    def _matrix(self, conn: sqlite3.Connection, generation: int) -> _VectorCache:
        with self._lock:
            if self._cache.generation == generation:
                return self._cache
            rows = conn.execute(
                "SELECT rid, vector FROM chunks WHERE vector IS NOT NULL ORDER BY rid"
            ).fetchall()
            if rows:
                matrix = np.vstack([np.frombuffer(blob, dtype=np.float32) for _, blob in rows])
                norms = np.linalg.norm(matrix, axis=1, keepdims=True)
                matrix = (matrix / np.where(norms == 0, 1, norms)).astype(np.float32)
            else:
                matrix = np.zeros((0, 0), dtype=np.float32)
            rids = np.asarray([r for r, _ in rows], dtype=np.int64)
            self._cache = _VectorCache(generation, rids, matrix)
            return self._cache
