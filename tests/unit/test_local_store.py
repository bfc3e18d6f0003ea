"""The local SQLite store and source: BM25 against a reference, filters, hybrid, concurrency."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rank_bm25 import BM25Okapi
from tests.fakes import ConceptEmbeddings, stemmed_words, write

from agentic_retrieval.errors import FilterNotSupportedError
from agentic_retrieval.odata import compile_predicate, parse_filter
from agentic_retrieval.sources.base import KnowledgeSource, SearchQuery
from agentic_retrieval.sources.local import (
    LocalKnowledgeSource,
    LocalStore,
    StoreError,
    StoreNotFoundError,
)
from agentic_retrieval.sources.local.store import (
    ChunkRecord,
    FileState,
    fts_match_expression,
    reciprocal_rank_fusion,
)

REPO = Path(__file__).resolve().parents[2]

BM25_CORPUS = {
    "d0": "solar panels convert sunlight into electricity for homes",
    "d1": "wind turbines convert wind into electricity on farms and hills",
    "d2": "the hydro dam stores water and releases it through turbines",
    "d3": "electricity prices rise in winter when demand for heating peaks",
    "d4": "heat pumps move heat from outside air into homes in winter",
    "d5": "batteries store electricity from solar panels for use at night",
    "d6": "the grid operator balances supply and demand every second",
    "d7": "coal plants burn coal to boil water and drive steam turbines",
    "d8": "nuclear reactors split atoms to make steam for turbines",
    "d9": "tidal power uses the rise and fall of the sea",
    "d10": "geothermal plants tap heat from deep underground rock",
    "d11": "insulation keeps heat inside homes and lowers heating bills",
}


def add_raw(store: LocalStore, key: str, content: str, title: str = "", **metadata) -> None:
    state = FileState(f"/virtual/{key}", key, key, key, 0.0, len(content), 1)
    chunk = ChunkRecord(key, 0, title, content, None, {"title": title, **metadata})
    store.replace_file(state, {}, [chunk])


@pytest.fixture
def bm25_store(tmp_path: Path) -> LocalStore:
    store = LocalStore(tmp_path / "bm25.sqlite", create=True)
    for key, text in BM25_CORPUS.items():
        add_raw(store, key, text)
    yield store
    store.close()


@pytest.mark.parametrize(
    "query",
    ["solar electricity", "turbines steam", "heat homes winter", "wind farms", "coal water"],
)
def test_bm25_matches_rank_bm25(bm25_store: LocalStore, query: str) -> None:
    keys = list(BM25_CORPUS)
    reference = BM25Okapi([stemmed_words(BM25_CORPUS[k]) for k in keys], k1=1.2, b=0.75)
    matching = {
        k for k, s in zip(keys, reference.get_scores(stemmed_words(query)), strict=True) if s > 0
    }
    assert {h.id for h in bm25_store.search(query, top=100)} == matching
    # the order is Lucene's: rank_bm25's Okapi idf, ln((N - n + 0.5) / (n + 0.5)), weighs
    # a frequent word less ("heat homes winter": d3 above d11 there, below it here)
    expected = sorted(matching, key=lambda key: (-lucene_bm25(query, key), keys.index(key)))
    hits = bm25_store.search(query, top=5)
    assert [h.id for h in hits] == expected[:5]
    for hit in hits:  # tantivy's BM25 is Lucene's: idf = ln(1 + (N - n + 0.5) / (n + 0.5))
        assert math.isclose(hit.score, lucene_bm25(query, hit.id), rel_tol=1e-5)


def lucene_bm25(query: str, key: str, k1: float = 1.2, b: float = 0.75) -> float:
    docs = {k: stemmed_words(text) for k, text in BM25_CORPUS.items()}
    average = sum(map(len, docs.values())) / len(docs)
    score = 0.0
    for term in stemmed_words(query):
        having = sum(term in words for words in docs.values())
        idf = math.log(1 + (len(docs) - having + 0.5) / (having + 0.5))
        tf = docs[key].count(term)
        score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(docs[key]) / average))
    return score


def test_titles_are_searched_like_content(tmp_path: Path) -> None:
    # no title boost: tantivy with the title weighted 3x ranked Cranfield worse (nDCG@10
    # 0.335 against 0.357 unboosted, benchmarks/README.md "Scale: research for issue 21")
    store = LocalStore(tmp_path / "t.sqlite", create=True)
    add_raw(store, "in-content", "a note that mentions pensions once among many other words")
    add_raw(store, "in-title", "a note about many other words entirely", title="pensions")
    assert sorted(h.id for h in store.search("pensions")) == ["in-content", "in-title"]


@pytest.mark.parametrize(
    "query",
    [
        '"',
        "*",
        "-",
        ":",
        "()",
        ")(",
        "NEAR",
        "NEAR(solar wind, 2)",
        "AND OR NOT",
        "solar AND",
        "content:solar",
        '"unbalanced solar',
        "solar*",
        "-solar",
        "^solar",
        "{solar}",
        "'; DROP TABLE chunks; --",
        "ünïcödé 日本語 ☃",
        "",
        "   ",
        "a\x00b",
        "solar + wind = ?",
        "'''",
        "\\",
        "%_",
    ],
)
def test_fts_special_characters_never_raise(bm25_store: LocalStore, query: str) -> None:
    hits = bm25_store.search(query, top=3)
    assert len(hits) <= 3
    assert bm25_store.count_chunks() == len(BM25_CORPUS)


def test_operators_in_queries_are_plain_words(bm25_store: LocalStore) -> None:
    assert fts_match_expression('solar AND -"wind" NEAR(x)') == (
        '"solar" OR "wind" OR "near" OR "x"'
    )
    assert [h.id for h in bm25_store.search("NOT solar*", top=2)] == ["d0", "d5"]
    assert fts_match_expression("the and of") == '"the" OR "and" OR "of"'  # all stopwords
    assert fts_match_expression("?!") is None


def test_query_without_words_browses_in_order(bm25_store: LocalStore) -> None:
    assert [h.id for h in bm25_store.search("*", top=3)] == ["d0", "d1", "d2"]
    assert all(h.score == 0.0 for h in bm25_store.search("", top=3))
    assert bm25_store.search("^", top=3) == []
    assert bm25_store.search("((( )))", top=3) == []


FILTER_RECORDS = {
    "r1": {
        "category": "guide",
        "year": 2019,
        "tags": ["hr", "benefits"],
        "active": True,
        "published": "2019-05-01T10:00:00Z",
    },
    "r2": {
        "category": "policy",
        "year": 2021,
        "tags": ["legal"],
        "active": False,
        "published": "2021-06-01T00:00:00Z",
    },
    "r3": {"category": "guide", "year": 2023, "tags": [], "rating": 4.5},
    "r4": {"category": "it's", "year": 2024, "tags": ["hr"], "owner": {"name": "ann"}},
}
FILTERS = [
    "category eq 'guide'",
    "category ne 'guide' and year ge 2021",
    "year gt 2020 or active",
    "not active",
    "tags/any(t: t eq 'hr')",
    "tags/any()",
    "tags/all(t: t ne 'legal')",
    "search.in(category, 'policy,it''s')",
    "published ge 2020-01-01T00:00:00Z",
    "rating eq null",
    "owner/name eq 'ann'",
    "category eq 'guide' or year eq 2021 and active eq false",
    "title eq 'Guide r3'",
    "chunk eq 0 and year lt 2022",
]


@pytest.fixture
def filter_store(tmp_path: Path) -> LocalStore:
    store = LocalStore(tmp_path / "filters.sqlite", create=True)
    for key, meta in FILTER_RECORDS.items():
        add_raw(store, key, f"document {key} about guides", title=f"Guide {key}", chunk=0, **meta)
    yield store
    store.close()


@pytest.mark.parametrize("text", FILTERS)
def test_sql_filter_equals_python_evaluator(filter_store: LocalStore, text: str) -> None:
    everything = filter_store.search("", top=100)
    predicate = compile_predicate(text)
    expected = sorted(h.id for h in everything if predicate(h.metadata))
    lexical = filter_store.search("document guides", top=100, filter_expr=parse_filter(text))
    browsed = filter_store.search("", top=100, filter_expr=parse_filter(text))
    assert sorted(h.id for h in lexical) == expected
    assert sorted(h.id for h in browsed) == expected


def test_filter_results_are_the_expected_ids(filter_store: LocalStore) -> None:
    def ids(text: str) -> list[str]:
        return sorted(h.id for h in filter_store.search("", filter_expr=parse_filter(text)))

    assert ids("category eq 'guide'") == ["r1", "r3"]
    assert ids("category eq 'guide' or year eq 2021 and active eq false") == ["r1", "r2", "r3"]
    assert ids("tags/all(t: t ne 'legal')") == ["r1", "r3", "r4"]
    assert ids("published ge 2020-01-01T00:00:00Z") == ["r2"]


@pytest.mark.parametrize(
    "value", ["'; DROP TABLE chunks; --", "x') OR 1=1 --", '" OR ""="', "Ωμέγα ☃"]
)
async def test_filter_injection_is_a_literal(tmp_path: Path, value: str) -> None:
    source = LocalKnowledgeSource("s", tmp_path / "s.sqlite", create=True)
    add_raw(source.store, "k1", "injection target text", category="safe")
    literal = value.replace("'", "''")
    hits = await source.search(SearchQuery(text="target", filter=f"category eq '{literal}'"))
    assert hits == []
    assert source.store.chunk_ids() == ["k1"]
    assert [h.doc_key for h in await source.search(SearchQuery(text="target"))] == ["k1"]


async def test_invalid_filter_raises_filter_error(tmp_path: Path) -> None:
    source = LocalKnowledgeSource("s", tmp_path / "s.sqlite", create=True)
    with pytest.raises(FilterNotSupportedError) as info:
        await source.search(SearchQuery(text="x", filter="year eq"))
    assert "position 7" in str(info.value)


async def test_hybrid_search_finds_synonyms_lexical_misses(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    write(docs / "car.txt", "The car needs new tires before winter.")
    write(docs / "auto.txt", "Automobile insurance rules for drivers.")
    write(docs / "fee.txt", "The late fee is five euros per day.")
    lexical = LocalKnowledgeSource("lex", tmp_path / "lex.sqlite", create=True)
    lexical.index([docs])
    hybrid = LocalKnowledgeSource(
        "hyb", tmp_path / "hyb.sqlite", embeddings=ConceptEmbeddings(), create=True
    )
    hybrid.index([docs])
    query = SearchQuery(text="automobile", top=2)
    assert [h.doc_key for h in await lexical.search(query)] == ["docs-auto-txt-0"]
    hits = await hybrid.search(query)
    assert [h.doc_key for h in hits] == ["docs-auto-txt-0", "docs-car-txt-0"]
    assert hits[0].score == pytest.approx(1 / 61 + 1 / 61)  # first in both lists
    filtered = await hybrid.search(
        SearchQuery(text="automobile", filter="file_name ne 'auto.txt'", top=2)
    )
    assert [h.doc_key for h in filtered] == ["docs-car-txt-0", "docs-fee-txt-0"]


async def test_vector_cache_refreshes_after_indexing(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    write(docs / "fee.txt", "The late fee is five euros per day.")
    source = LocalKnowledgeSource(
        "hyb", tmp_path / "h.sqlite", embeddings=ConceptEmbeddings(), create=True
    )
    source.index([docs])
    first = await source.search(SearchQuery(text="storm", top=5))
    assert [h.doc_key for h in first] == ["docs-fee-txt-0"]
    write(docs / "weather.txt", "Heavy rain expected tonight.")
    source.index([docs])
    second = await source.search(SearchQuery(text="storm", top=5))
    assert [h.doc_key for h in second] == ["docs-weather-txt-0", "docs-fee-txt-0"]


def test_vector_dimension_mismatch_is_reported(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "v.sqlite", create=True)
    state = FileState("/v/a", "a", "h", "f", 0.0, 1, 1)
    store.replace_file(state, {}, [ChunkRecord("a-0", 0, "", "text")], [[1.0, 0.0]])
    other = FileState("/v/b", "b", "h", "f", 0.0, 1, 1)
    with pytest.raises(StoreError, match="dimension"):
        store.replace_file(other, {}, [ChunkRecord("b-0", 0, "", "text")], [[1.0, 0.0, 0.0]])
    with pytest.raises(StoreError, match="dimension"):
        store.search("text", query_vector=[1.0, 0.0, 0.0])


def test_reciprocal_rank_fusion() -> None:
    fused = reciprocal_rank_fusion([[(1, 9.0), (2, 8.0)], [(2, 0.9), (3, 0.8)], None])
    assert fused == [(2, 1 / 62 + 1 / 61), (1, 1 / 61), (3, 1 / 62)]


async def test_many_concurrent_searches(tmp_path: Path) -> None:
    source = LocalKnowledgeSource(
        "energy", tmp_path / "e.sqlite", description="energy notes", create=True
    )
    assert isinstance(source, KnowledgeSource)
    for key, text in BM25_CORPUS.items():
        add_raw(source.store, key, text)
    queries = {
        "solar": "d0",
        "tidal sea": "d9",
        "geothermal rock": "d10",
        "nuclear atoms": "d8",
        "grid operator": "d6",
        "insulation bills": "d11",
    }
    tasks = [source.search(SearchQuery(text=q, top=1)) for q in queries for _ in range(10)]
    results = await asyncio.gather(*tasks)
    expected = [key for key in queries.values() for _ in range(10)]
    assert [r[0].doc_key for r in results] == expected
    assert all(r[0].source == "energy" for r in results)


def test_search_from_fresh_event_loops_in_threads(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    source = LocalKnowledgeSource("energy", tmp_path / "e.sqlite", create=True)
    for key, text in BM25_CORPUS.items():
        add_raw(source.store, key, text)

    def run(query: str) -> str:
        return asyncio.run(source.search(SearchQuery(text=query, top=1)))[0].doc_key

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(run, ["solar", "tidal", "coal"] * 4)) == ["d0", "d9", "d7"] * 4
    source.close()


def test_lexical_only_is_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="agentic_retrieval.sources.local.source")
    source = LocalKnowledgeSource("plain", tmp_path / "p.sqlite", create=True)
    for _ in range(3):
        source.search_sync("anything")
    messages = [r.getMessage() for r in caplog.records if "lexical" in r.getMessage()]
    assert messages == ["local source 'plain' has no embeddings: lexical (BM25) search only"]


INDEXER = """
import sys
from pathlib import Path
from agentic_retrieval.sources.local import LocalStore, index_paths
store = LocalStore(sys.argv[1], create=True)
for i in range(int(sys.argv[3])):
    index_paths(store, [Path(sys.argv[2]) / f"doc{i:03d}.txt"])
"""


@pytest.mark.slow
def test_reader_while_another_process_indexes(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    count = 120
    for i in range(count):
        write(docs / f"doc{i:03d}.txt", f"Report {i}\n\nThe shared keyword zephyr appears. " * 3)
    db = tmp_path / "shared.sqlite"
    store = LocalStore(db, create=True)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    indexer = subprocess.Popen(
        [sys.executable, "-c", INDEXER, str(db), str(docs), str(count)], env=env
    )
    seen: list[int] = []
    deadline = time.monotonic() + 120
    try:
        while indexer.poll() is None and time.monotonic() < deadline:
            seen.append(len(store.search("zephyr", top=500)))
        assert indexer.wait(timeout=max(1.0, deadline - time.monotonic())) == 0
    finally:
        if indexer.poll() is None:
            indexer.kill()
    assert seen == sorted(seen)  # every read saw whole committed files, never fewer
    assert len(store.search("zephyr", top=500)) == count
    assert len(seen) > 1


def test_metadata_json_is_stored_with_sorted_keys(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "m.sqlite", create=True)
    add_raw(store, "k", "text", zeta=1, alpha=2)
    raw = store._connection().execute("SELECT metadata FROM chunks").fetchone()[0]
    assert list(json.loads(raw)) == ["alpha", "title", "zeta"]


def test_words_inside_unspaced_cjk_text_are_found(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "leave.txt").write_text("员工每个月累积两天带薪休假。\n", encoding="utf-8")
    (docs / "remote.txt").write_text("员工可以每周远程工作三天。\n", encoding="utf-8")
    (docs / "tokyo.txt").write_text("東京オフィスは午前九時に開きます。\n", encoding="utf-8")
    source = LocalKnowledgeSource("hr", tmp_path / "hr.sqlite", create=True)
    source.index([docs])
    assert [h.doc_key for h in source.search_sync("带薪休假")] == ["docs-leave-txt-0"]
    assert [h.doc_key for h in source.search_sync("远程工作")] == ["docs-remote-txt-0"]
    assert [h.doc_key for h in source.search_sync("東京オフィス")] == ["docs-tokyo-txt-0"]
    # re-indexing a changed file deletes the old segmented terms consistently
    (docs / "leave.txt").write_text("员工每年有十五天年假。\n", encoding="utf-8")
    source.index([docs])
    assert source.search_sync("带薪休假") == []
    assert [h.doc_key for h in source.search_sync("年假")] == ["docs-leave-txt-0"]
    source.close()


def test_a_directory_is_not_a_source_file(tmp_path):
    with pytest.raises(StoreError, match="is a directory"):
        LocalKnowledgeSource("handbook", tmp_path)


def test_opening_a_mistyped_path_creates_nothing_and_names_it(tmp_path):
    typo = tmp_path / "typo" / "nope.sqlite"
    with pytest.raises(StoreNotFoundError) as info:
        LocalKnowledgeSource("x", typo)
    assert str(typo) in str(info.value) and "create=True" in str(info.value)
    assert isinstance(info.value, FileNotFoundError)
    assert list(tmp_path.iterdir()) == []  # no directory, no empty index


def test_opening_a_foreign_sqlite_file_leaves_it_untouched(tmp_path):
    import sqlite3

    other = tmp_path / "app.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
    with pytest.raises(StoreError, match="not a local source index"):
        LocalKnowledgeSource("x", other)
    with sqlite3.connect(other) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    assert tables == ["users"]


def test_an_existing_index_opens_without_create(tmp_path):
    path = tmp_path / "s.sqlite"
    LocalKnowledgeSource("s", path, create=True).close()
    source = LocalKnowledgeSource("s", path)
    assert source.search_sync("anything") == []
    source.close()
