"""Topic graphs over a store's vectors: built deterministically and within bounds, kept
current incrementally, and sampled by ``diverse`` and ``balanced`` searches.

The corpus has known clusters: 8 files, each 30 chunks whose vectors lie around one random
centre. A query near cluster 0 finds only cluster 0 in its top 10 when ranked plainly; a
topic-sampled search must bring other clusters in, and keep the best hit first.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from agentic_retrieval.sources.base import SearchQuery, TopicSamplingKnowledgeSource
from agentic_retrieval.sources.local import LocalKnowledgeSource, LocalStore
from agentic_retrieval.sources.local.store import ChunkRecord, FileState, topics
from agentic_retrieval.sources.topic_graph import (
    TopicGraphSetting,
    TopicLimits,
    build_communities,
)

DIM = 16
CLUSTERS = 8
PER_CLUSTER = 30


def centres(seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    data = rng.normal(size=(CLUSTERS, DIM))
    return data / np.linalg.norm(data, axis=1, keepdims=True)


def add_cluster(
    store: LocalStore, cluster: int, rng: np.random.Generator, *, key: str = ""
) -> None:
    key = key or f"c{cluster}"
    chunks = [
        ChunkRecord(f"{key}#{n}", n, key, f"cluster {cluster} passage {n}")
        for n in range(PER_CLUSTER)
    ]
    vectors = [(centres()[cluster] + 0.15 * rng.normal(size=DIM)).tolist() for _ in chunks]
    state = FileState(f"/virtual/{key}", key, key, key, 0.0, 10, PER_CLUSTER)
    store.replace_file(state, {}, chunks, vectors)


def clustered_store(path: Path) -> LocalStore:
    store = LocalStore(path, create=True)
    rng = np.random.default_rng(3)
    for cluster in range(CLUSTERS):
        add_cluster(store, cluster, rng)
    return store


def query_near_cluster_0() -> list[float]:
    c = centres()
    return (c[0] + 0.1 * c[1]).tolist()


def clusters_in(hits) -> set[str]:
    return {hit.id.split("#")[0] for hit in hits}


def test_plain_ranking_stays_in_one_cluster_and_sampling_spreads_the_top_10(tmp_path):
    store = clustered_store(tmp_path / "s.sqlite")
    query = query_near_cluster_0()
    plain = store.search("*", top=10, query_vector=query)
    diverse = store.search(
        "*",
        top=10,
        query_vector=query,
        topic_graph=TopicGraphSetting(kind="diverse", diversity_factor=0.5),
    )
    balanced = store.search(
        "*", top=10, query_vector=query, topic_graph=TopicGraphSetting(kind="balanced")
    )
    assert clusters_in(plain) == {"c0"}
    assert len(clusters_in(diverse)) >= 4
    assert len(clusters_in(balanced)) >= 5
    # relevance holds where it matters most: the best match still leads
    assert diverse[0].id == balanced[0].id == plain[0].id
    # diverse at the default factor trades little: cluster 0 still holds most of the top 10
    mild = store.search(
        "*", top=10, query_vector=query, topic_graph=TopicGraphSetting(kind="diverse")
    )
    assert 1 < len(clusters_in(mild)) < len(clusters_in(diverse))
    assert sum(h.id.startswith("c0#") for h in mild) >= 6
    none = store.search("*", top=10, query_vector=query, topic_graph=TopicGraphSetting(kind="none"))
    assert [h.id for h in none] == [h.id for h in plain]


def test_the_first_sampled_search_builds_the_topic_index_in_the_store(tmp_path):
    store = clustered_store(tmp_path / "s.sqlite")
    assert store.topic_state().generation is None
    store.search("*", top=5, query_vector=query_near_cluster_0())  # plain: builds nothing
    assert store.topic_state().generation is None
    store.search(
        "*",
        top=5,
        query_vector=query_near_cluster_0(),
        topic_graph=TopicGraphSetting(kind="balanced"),
    )
    state = store.topic_state()
    assert state.generation == store.generation()
    assert state.vectors == CLUSTERS * PER_CLUSTER
    assert 2 <= state.broad_topics <= TopicLimits().broad_max
    store.close()
    reopened = LocalStore(tmp_path / "s.sqlite")  # kept in the store file
    assert reopened.topic_state() == state


def test_topic_builds_are_deterministic(tmp_path):
    first = clustered_store(tmp_path / "a.sqlite")
    second = clustered_store(tmp_path / "b.sqlite")
    first.refresh_topics()
    second.refresh_topics()
    rows = "SELECT rid, broad, fine FROM topic_assignments ORDER BY rid"
    assert (
        first._connection().execute(rows).fetchall()
        == second._connection().execute(rows).fetchall()
    )
    vectors = np.random.default_rng(5).normal(size=(500, DIM)).astype(np.float32)
    one, two = build_communities(vectors), build_communities(vectors)
    assert np.array_equal(one.fine_centroids, two.fine_centroids)
    assert np.array_equal(one.assign(vectors)[1], two.assign(vectors)[1])


def test_topic_builds_are_bounded():
    vectors = np.random.default_rng(9).normal(size=(20_000, 32)).astype(np.float32)
    limits = TopicLimits(fit_sample=2_000, broad_max=6, fine_max=3, iterations=5)
    started = time.perf_counter()
    communities = build_communities(vectors, limits=limits)
    broad, fine = communities.assign(vectors, batch=1_000)
    elapsed = time.perf_counter() - started
    assert len(communities.broad_centroids) <= 6
    assert len(communities.fine_centroids) <= 6 * 3
    assert set(np.unique(broad)) <= set(range(6))
    assert (communities.fine_parent[fine] == broad).all()
    assert elapsed < 10  # a sample, a few rounds: well under a second on one core


def test_new_vectors_are_assigned_until_the_change_is_large_then_the_topics_are_rebuilt(tmp_path):
    store = clustered_store(tmp_path / "s.sqlite")
    built = store.refresh_topics()
    assert built.rebuilt and built.built_from == 240
    rng = np.random.default_rng(11)
    add_cluster(store, 2, rng, key="more")  # 30 new vectors: 12.5% of 240
    incremental = store.refresh_topics()
    assert not incremental.rebuilt
    assert incremental.vectors == 270 and incremental.changed == 30
    # the new chunks joined the topic of cluster 2's chunks
    with_topics = topics.topics_of(
        store._connection(), [r for (r,) in store._connection().execute("SELECT rid FROM chunks")]
    )
    ids = dict(store._connection().execute("SELECT rid, id FROM chunks").fetchall())
    broad_of = {ids[rid].split("#")[0]: b for rid, (b, _) in with_topics.items()}
    assert broad_of["more"] == broad_of["c2"]
    store.delete_file("/virtual/c5")  # 30 more changed: 60 > 20% of 240
    rebuilt = store.refresh_topics()
    assert rebuilt.rebuilt and rebuilt.vectors == 240 and rebuilt.changed == 0


def test_a_setting_takes_what_it_leaves_unset_from_the_profile_default():
    default = TopicGraphSetting(kind="diverse", diversity_factor=0.6, min_diversity_pool_size=200)
    assert TopicGraphSetting(kind="diverse").over(default).factor == 0.6
    balanced = TopicGraphSetting(kind="balanced").over(default)
    assert balanced.diversity_factor is None and balanced.pool(10) == 200
    assert TopicGraphSetting(kind="diverse").pool(10) == 1000  # Azure's default
    with pytest.raises(ValidationError, match="diversityFactor applies to kind 'diverse'"):
        TopicGraphSetting.model_validate({"kind": "balanced", "diversityFactor": 0.3})
    with pytest.raises(ValidationError, match="minDiversityPoolSize"):
        TopicGraphSetting.model_validate({"kind": "none", "minDiversityPoolSize": 10})
    with pytest.raises(ValidationError):
        TopicGraphSetting.model_validate({"kind": "wide"})


def test_a_local_source_samples_by_its_default_and_a_query_overrides_it(tmp_path):
    clustered_store(tmp_path / "s.sqlite").close()
    source = LocalKnowledgeSource(
        "clusters",
        tmp_path / "s.sqlite",
        topic_graph=TopicGraphSetting(kind="balanced"),
        preload=False,
    )
    assert isinstance(source, TopicSamplingKnowledgeSource)
    vector = query_near_cluster_0()

    def keys(setting: TopicGraphSetting | None) -> set[str]:
        query = SearchQuery(text="*", top=10, topic_graph=setting)
        hits = source.search_sync("*", 10, None, None, query.access, source.topic_setting(query))
        return {h.doc_key.split("#")[0] for h in hits}

    # no embeddings: a "*" query browses in file order; balanced still spreads it
    assert len(keys(None)) >= 5
    assert keys(TopicGraphSetting(kind="none")) == {"c0"}
    hits = asyncio.run(source.search(SearchQuery(text="*", top=10)))
    assert len({h.doc_key.split("#")[0] for h in hits}) >= 5
    assert vector  # the store's vectors, not the query's, define the topics


def test_a_knowledge_base_retrieve_overrides_the_source_default_and_records_it(tmp_path):
    from agentic_retrieval import KnowledgeBase

    clustered_store(tmp_path / "s.sqlite").close()
    source = LocalKnowledgeSource(
        "clusters", tmp_path / "s.sqlite", topic_graph=TopicGraphSetting(kind="balanced")
    )
    kb = KnowledgeBase([source])

    def run(params: list[dict]) -> tuple[set[str], dict]:
        response = kb.retrieve(
            {
                "intents": [{"type": "semantic", "search": "*"}],
                "retrievalReasoningEffort": {"kind": "minimal"},
                "includeActivity": True,
                "knowledgeSourceParams": params,
            }
        ).to_wire()
        [record] = [a for a in response["activity"] if a.get("knowledgeSourceName") == "clusters"]
        keys = {r["docKey"].split("#")[0] for r in response["references"]}
        return keys, record

    sampled, record = run([])
    # a local source reads as searchIndex on the wire (knowledgeSourceKind: local)
    assert record["searchIndexArguments"]["topicGraph"] == {
        "kind": "balanced",
        "minDiversityPoolSize": 1000,
    }
    plain, record = run(
        [{"knowledgeSourceName": "clusters", "kind": "local", "topicGraph": {"kind": "none"}}]
    )
    assert record["searchIndexArguments"]["topicGraph"] == {"kind": "none"}
    assert plain == {"c0"} and len(sampled) >= 5


def test_a_large_store_refreshes_its_topics_behind_the_search(tmp_path, monkeypatch):
    from agentic_retrieval.sources.local.store import local_store

    monkeypatch.setattr(local_store, "TOPICS_INLINE_MAX", 10)  # 240 chunks count as large
    store = clustered_store(tmp_path / "s.sqlite")
    balanced = TopicGraphSetting(kind="balanced")
    first = store.search("*", top=10, query_vector=query_near_cluster_0(), topic_graph=balanced)
    assert len(first) == 10  # answered whether or not the topics were ready
    assert store._topic_refresher is not None  # the refresh ran on a thread of its own
    store.wait_for_topics(30)
    assert store.topic_state().generation == store.generation()
    later = store.search("*", top=10, query_vector=query_near_cluster_0(), topic_graph=balanced)
    assert len(clusters_in(later)) >= 5


def test_a_stopped_build_writes_nothing(tmp_path):
    from agentic_retrieval.errors import TopicBuildStopped

    vectors = np.random.default_rng(2).normal(size=(300, DIM)).astype(np.float32)
    with pytest.raises(TopicBuildStopped):
        build_communities(vectors, stop=lambda: True)
    store = clustered_store(tmp_path / "s.sqlite")
    with pytest.raises(TopicBuildStopped):
        topics.refresh(store._connection(), store._write, store.generation(), stop=lambda: True)
    assert store.topic_state().generation is None
    assert store._connection().execute("SELECT count(*) FROM topic_assignments").fetchone() == (0,)
