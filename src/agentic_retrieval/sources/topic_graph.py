"""Topic graphs (Azure's ``2026-11-01-preview``): communities over vectors, sampled by topic.

A topic graph groups a store's chunks into communities by their vectors alone (no model
call): a two-level hierarchy of spherical k-means clusters of the normalised vectors, broad
topics first and each split into finer ones (:func:`build_communities`). Deterministic (a
fixed seed, k-means++ started from it) and bounded (:class:`TopicLimits`: the centroids are
fitted on a sample, with a bounded number of topics and iterations; every vector is then
assigned to its nearest centroid in batches).

A search then samples its candidates by topic (:func:`sample_by_topic`), as a vector query's
topic-graph setting asks (:class:`TopicGraphSetting`):

- ``none``: the ranking as it is;
- ``diverse``: a maximal-marginal-relevance trade-off: each next result maximises
  ``(1 - diversityFactor) * relevance + diversityFactor * novelty``, where relevance is the
  candidate's score relative to the best (BM25, or the fused rank of BM25 and cosine) and novelty
  is 1 for a broad topic not yet shown, 0.5 for a fine topic not yet shown within a broad one
  already shown, 0 otherwise;
- ``balanced``: round-robin over the broad topics of the pool, each topic's candidates in
  relevance order, the topics in the order of their best candidate.

Both look at a pool of ``minDiversityPoolSize`` candidates (at least the results asked for).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from agentic_retrieval.errors import TopicBuildStopped

TopicKind = Literal["none", "diverse", "balanced"]
"""``VectorSearchTopicGraphKind``: plain vector search, diverse or balanced sampling."""
DEFAULT_DIVERSITY_FACTOR = 0.2
"""Azure's default ``diversityFactor``."""
DEFAULT_POOL_SIZE = 1000
"""Azure's default ``minDiversityPoolSize``."""
MAX_POOL_SIZE = 10_000
"""The largest pool a query may ask for (this service's bound: the pool is ranked in full)."""
NOVEL_BROAD = 1.0
NOVEL_FINE = 0.5
Stop = Callable[[], bool]
"""Asked between rounds of a build: true stops it (:class:`TopicBuildStopped`)."""
TopicOf = Callable[[int], tuple[int, int]]
"""A candidate's (broad, fine) topic, by rid."""


class TopicGraphSetting(BaseModel):
    """A vector query's (or a source's) topic-graph setting: ``{"kind": ..., ...}``.

    ``diversityFactor`` belongs to ``diverse`` only, ``minDiversityPoolSize`` to ``diverse``
    and ``balanced`` (as Azure's models define them); unset values come from the index's
    topic graph profile, then Azure's defaults.
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    kind: TopicKind
    diversity_factor: float | None = Field(default=None, ge=0.0, le=1.0)
    min_diversity_pool_size: int | None = Field(default=None, ge=1, le=MAX_POOL_SIZE)

    @model_validator(mode="after")
    def _fields_of_kind(self) -> TopicGraphSetting:
        if self.diversity_factor is not None and self.kind != "diverse":
            raise ValueError(f"diversityFactor applies to kind 'diverse' only, not {self.kind!r}")
        if self.min_diversity_pool_size is not None and self.kind == "none":
            raise ValueError("minDiversityPoolSize applies to kinds 'diverse' and 'balanced'")
        return self

    def over(self, default: TopicGraphSetting | None) -> TopicGraphSetting:
        """This setting with what it leaves unset taken from ``default`` (a profile's)."""
        if default is None or self.kind == "none":
            return self
        factor = self.diversity_factor
        if factor is None and self.kind == "diverse":
            factor = default.diversity_factor
        pool = self.min_diversity_pool_size or default.min_diversity_pool_size
        return TopicGraphSetting(
            kind=self.kind, diversity_factor=factor, min_diversity_pool_size=pool
        )

    @property
    def factor(self) -> float:
        """The diversity factor that applies."""
        return DEFAULT_DIVERSITY_FACTOR if self.diversity_factor is None else self.diversity_factor

    def pool(self, top: int) -> int:
        """How many candidates are ranked before sampling (at least ``top``)."""
        return max(top, self.min_diversity_pool_size or DEFAULT_POOL_SIZE)

    def to_wire(self) -> dict[str, object]:
        """The JSON shape, with the values that apply filled in."""
        body: dict[str, object] = {"kind": self.kind}
        if self.kind == "diverse":
            body["diversityFactor"] = self.factor
        if self.kind != "none":
            body["minDiversityPoolSize"] = self.min_diversity_pool_size or DEFAULT_POOL_SIZE
        return body


# --- building communities -------------------------------------------------------------------


@dataclass(frozen=True)
class TopicLimits:
    """Bounds of a topic build (time and memory grow with these, not with the store).

    Attributes:
        fit_sample: Most vectors the centroids are fitted on (a seeded sample of the rest).
        broad_max: Most broad topics.
        fine_max: Most fine topics within one broad topic.
        iterations: Most k-means rounds per level.
        batch: Vectors assigned at once (memory: ``batch x topics`` floats).
    """

    fit_sample: int = 20_000
    broad_max: int = 32
    fine_max: int = 16
    iterations: int = 20
    batch: int = 16_384


@dataclass(frozen=True)
class Communities:
    """A two-level topic hierarchy: each vector's broad and fine topic, and the centroids.

    Fine topic ids are unique across broad topics; ``fine_parent[f]`` is the broad topic of
    fine topic ``f``.
    """

    broad_centroids: np.ndarray
    fine_centroids: np.ndarray
    fine_parent: np.ndarray

    def assign(self, vectors: np.ndarray, batch: int = 16_384) -> tuple[np.ndarray, np.ndarray]:
        """Each vector's (broad, fine) topic: its nearest fine centroid, and that one's parent."""
        fine = _nearest(_normalised(vectors), self.fine_centroids, batch)
        return self.fine_parent[fine], fine


def topic_counts(count: int, limit: int) -> int:
    """How many clusters ``count`` vectors are split into: ``sqrt(count / 2)``, bounded."""
    if count < 4:
        return 1
    return max(1, min(limit, round(math.sqrt(count / 2))))


def build_communities(
    vectors: np.ndarray,
    *,
    seed: int = 0,
    limits: TopicLimits | None = None,
    stop: Stop | None = None,
) -> Communities:
    """Fit the topic hierarchy of ``vectors`` (one row each); deterministic for a seed.

    Broad topics are spherical k-means clusters of a sample of at most ``fit_sample``
    vectors; each is split again into fine topics the same way. Assigning the vectors is a
    separate step (:meth:`Communities.assign`), so a caller may stream them in batches.

    Raises:
        TopicBuildStopped: ``stop`` answered true between two k-means rounds.
    """
    limits = limits or TopicLimits()
    rng = np.random.default_rng(seed)
    data = _normalised(np.asarray(vectors, dtype=np.float32))
    if len(data) > limits.fit_sample:
        data = data[np.sort(rng.choice(len(data), limits.fit_sample, replace=False))]
    broad, labels = _spherical_kmeans(
        data, topic_counts(len(data), limits.broad_max), rng, limits.iterations, stop
    )
    fine_centroids: list[np.ndarray] = []
    parents: list[int] = []
    for topic in range(len(broad)):
        members = data[labels == topic]
        if len(members) == 0:
            fine_centroids.append(broad[topic : topic + 1])
            parents.append(topic)
            continue
        k = topic_counts(len(members), limits.fine_max)
        centres, _ = _spherical_kmeans(members, k, rng, limits.iterations, stop)
        fine_centroids.append(centres)
        parents.extend([topic] * len(centres))
    return Communities(
        broad_centroids=broad,
        fine_centroids=np.concatenate(fine_centroids).astype(np.float32),
        fine_parent=np.asarray(parents, dtype=np.int64),
    )


def _normalised(vectors: np.ndarray) -> np.ndarray:
    data = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(data, axis=1, keepdims=True)
    return data / np.where(norms == 0, 1.0, norms)


def _nearest(data: np.ndarray, centroids: np.ndarray, batch: int) -> np.ndarray:
    out = np.empty(len(data), dtype=np.int64)
    for start in range(0, len(data), batch):
        out[start : start + batch] = np.argmax(data[start : start + batch] @ centroids.T, axis=1)
    return out


def _spherical_kmeans(
    data: np.ndarray,
    k: int,
    rng: np.random.Generator,
    iterations: int,
    stop: Stop | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``k`` unit centroids of ``data`` (unit rows) by cosine, and each row's cluster."""
    k = min(k, len(data))
    centroids = _plus_plus(data, k, rng)
    labels = _nearest(data, centroids, 16_384)
    for _ in range(iterations):
        if stop is not None and stop():
            raise TopicBuildStopped("the topic build was stopped")
        sums = np.zeros_like(centroids)
        np.add.at(sums, labels, data)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        # an emptied cluster keeps its centroid rather than vanishing
        centroids = np.where(norms > 0, sums / np.where(norms == 0, 1.0, norms), centroids)
        updated = _nearest(data, centroids, 16_384)
        if np.array_equal(updated, labels):
            break
        labels = updated
    return centroids.astype(np.float32), labels


def _plus_plus(data: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding on cosine distance (from ``rng``: the same data, the same seeds)."""
    chosen = [int(rng.integers(len(data)))]
    distance = np.clip(1.0 - data @ data[chosen[0]], 0.0, None)
    while len(chosen) < k:
        weights = distance.astype(np.float64) ** 2
        total = weights.sum()
        if total <= 0:  # fewer distinct points than k
            break
        chosen.append(int(rng.choice(len(data), p=weights / total)))
        distance = np.minimum(distance, np.clip(1.0 - data @ data[chosen[-1]], 0.0, None))
    return data[chosen].copy()


# --- sampling by topic ----------------------------------------------------------------------


def sample_by_topic(
    ranked: Sequence[tuple[int, float]],
    topics: Mapping[int, tuple[int, int]],
    setting: TopicGraphSetting,
    top: int,
) -> list[tuple[int, float]]:
    """The ``top`` candidates of ``ranked`` (best first) sampled by topic as ``setting`` asks.

    Args:
        ranked: The pool: (rid, score), best first.
        topics: The (broad, fine) topic of each rid that has one; a candidate without one
            is a topic of its own.
        setting: ``none``, ``diverse`` or ``balanced``.
        top: How many to return.

    Returns:
        (rid, score) pairs with their original scores, in the sampled order.
    """
    if setting.kind == "none" or len(ranked) <= 1:
        return list(ranked[:top])

    def topic_of(rid: int) -> tuple[int, int]:
        return topics.get(rid, (-1 - rid, -1 - rid))

    if setting.kind == "balanced":
        return _round_robin(ranked, topic_of, top)
    return _diverse(ranked, topic_of, setting.factor, top, _relevance(ranked))


def _relevance(ranked: Sequence[tuple[int, float]]) -> list[float]:
    """Each candidate's score relative to the best (the search's own judgement).

    BM25, or the fused rank of BM25 and cosine: the best match stays first.
    """
    values = [score for _, score in ranked]
    best = max(values)
    if best <= 0:  # unscored (a browse): rank alone
        return [1.0 / (1.0 + rank / 10) for rank in range(len(ranked))]
    return [max(v, 0.0) / best for v in values]


def _diverse(
    ranked: Sequence[tuple[int, float]],
    topic_of: TopicOf,
    factor: float,
    top: int,
    relevance: list[float],
) -> list[tuple[int, float]]:
    """Greedy MMR over topic novelty, as arrays: ``top`` rounds over the pool."""
    pairs = [topic_of(rid) for rid, _ in ranked]
    broad = np.asarray([b for b, _ in pairs], dtype=np.int64)
    fine = np.asarray([f for _, f in pairs], dtype=np.int64)
    gain = (1.0 - factor) * np.asarray(relevance, dtype=np.float64)
    broad_seen = np.zeros(len(ranked), dtype=bool)
    fine_seen = np.zeros(len(ranked), dtype=bool)
    taken = np.zeros(len(ranked), dtype=bool)
    chosen: list[tuple[int, float]] = []
    for _ in range(min(top, len(ranked))):
        novelty = np.where(broad_seen, np.where(fine_seen, 0.0, NOVEL_FINE), NOVEL_BROAD)
        value = np.where(taken, -np.inf, gain + factor * novelty)
        index = int(np.argmax(value))  # the first of equals: ties keep the better-ranked
        taken[index] = True
        broad_seen |= broad == broad[index]
        fine_seen |= fine == fine[index]
        chosen.append(ranked[index])
    return chosen


def _round_robin(
    ranked: Sequence[tuple[int, float]], topic_of: TopicOf, top: int
) -> list[tuple[int, float]]:
    groups: dict[int, list[tuple[int, float]]] = {}
    for hit in ranked:  # topics in the order of their best candidate
        groups.setdefault(topic_of(hit[0])[0], []).append(hit)
    queues = list(groups.values())
    chosen: list[tuple[int, float]] = []
    depth = 0
    while len(chosen) < top and any(depth < len(q) for q in queues):
        chosen.extend(q[depth] for q in queues if depth < len(q))
        depth += 1
    return chosen[:top]
