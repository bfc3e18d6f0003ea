"""``serve --data DIR --store postgresql://...``: replicas sharing one PostgreSQL database.

Real ``serve`` processes, each with a data directory of its own, against one embedded
PostgreSQL (tests/postgres_harness.py): what one replica is told, the other serves; a replica
killed mid-upload loses nothing it acknowledged; a database that goes away is a 503 until it
is back, and the replica recovers by itself; a bad URL fails at start in one line.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import subprocess
import sys
import threading
import time

import httpx
import pytest
from tests.integration.service_process import KEY, VERSION, kill_hard, serve_process
from tests.postgres_harness import RunningPostgres

from agentic_retrieval.errors import ResourceConflictError
from agentic_retrieval.kb.postgres_service import PostgresServiceDirectory
from agentic_retrieval.kb.service import DefinitionView, StoredDefinition

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]
HEADERS = {"api-key": KEY}
INDEX = {
    "name": "guides",
    "fields": [
        {"name": "id", "type": "Edm.String", "key": True},
        {"name": "content", "type": "Edm.String", "searchable": True},
        {"name": "team", "type": "Edm.String", "filterable": True},
    ],
}


def replica(data, url: str):
    """``serve`` on ``data`` with its state in ``url`` (lexical: no model to load)."""
    return serve_process(data, extra=("--store", url, "--no-embeddings"))


def client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers=HEADERS, params=VERSION, timeout=60)


def create_base(http: httpx.Client) -> None:
    assert http.put("/indexes('guides')", json=INDEX).status_code == 201
    source = {"name": "ks", "kind": "searchIndex"}
    source["searchIndexParameters"] = {"searchIndexName": "guides"}
    assert http.put("/knowledgesources('ks')", json=source).status_code == 201
    base = {"name": "kb", "knowledgeSources": [{"name": "ks"}]}
    assert http.put("/knowledgebases('kb')", json=base).status_code == 201


def retrieve_keys(http: httpx.Client, text: str) -> list[str]:
    response = http.post(
        "/knowledgebases('kb')/retrieve",
        json={"intents": [{"type": "semantic", "search": text}]},
    )
    assert response.status_code == 200, response.text
    return [r["docKey"] for r in response.json()["references"]]


def test_two_replicas_share_definitions_and_documents(tmp_path, postgres_url):
    with (
        replica(tmp_path / "a", postgres_url) as (url_a, _),
        replica(tmp_path / "b", postgres_url) as (url_b, _),
        client(url_a) as a,
        client(url_b) as b,
    ):
        create_base(a)
        assert [i["name"] for i in b.get("/indexes").json()["value"]] == ["guides"]
        assert [s["name"] for s in b.get("/knowledgesources").json()["value"]] == ["ks"]
        assert [k["name"] for k in b.get("/knowledgebases").json()["value"]] == ["kb"]
        assert (
            b.get("/knowledgebases('kb')").json()["@odata.etag"]
            == (a.get("/knowledgebases('kb')").json()["@odata.etag"])
        )

        doc = {"id": "lighthouse", "content": "the lighthouse keeper logs the tides"}
        assert a.post("/indexes('guides')/docs/index", json={"value": [doc]}).status_code == 200
        written = time.monotonic()
        keys: list[str] = []
        while time.monotonic() - written < 3 and keys != ["lighthouse"]:
            keys = retrieve_keys(b, "lighthouse keeper tides")
        assert keys == ["lighthouse"]

        assert b.delete("/knowledgebases('kb')").status_code == 204
        assert a.get("/knowledgebases('kb')").status_code == 404


def test_the_index_limit_holds_across_replicas(tmp_path, postgres_url):
    """Creating on two replicas at once cannot beat ``--max-indexes``."""
    extra = ("--store", postgres_url, "--no-embeddings", "--max-indexes", "3")
    with (
        serve_process(tmp_path / "a", extra=extra) as (url_a, _),
        serve_process(tmp_path / "b", extra=extra) as (url_b, _),
    ):

        def create(n: int) -> int:
            with client(url_a if n % 2 else url_b) as http:
                return http.put(f"/indexes('i{n}')", json={**INDEX, "name": f"i{n}"}).status_code

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            statuses = sorted(pool.map(create, range(8)))
        assert statuses == [201, 201, 201, 429, 429, 429, 429, 429]
        with client(url_a) as http:
            assert len(http.get("/indexes").json()["value"]) == 3


def test_a_killed_replica_loses_no_acknowledged_document(tmp_path, postgres_url):
    acknowledged: list[str] = []
    with replica(tmp_path / "b", postgres_url) as (url_b, _), client(url_b) as b:
        with replica(tmp_path / "a", postgres_url) as (url_a, process_a), client(url_a) as a:
            create_base(a)

            def upload() -> None:
                for batch in range(1000):
                    docs = [{"id": f"d{batch}-{n}", "content": f"note {n}"} for n in range(20)]
                    try:
                        response = a.post("/indexes('guides')/docs/index", json={"value": docs})
                    except httpx.TransportError:
                        return
                    if response.status_code != 200:
                        return
                    acknowledged.extend(d["id"] for d in docs)

            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                running = pool.submit(upload)
                deadline = time.monotonic() + 30
                while len(acknowledged) < 100 and time.monotonic() < deadline:
                    time.sleep(0.05)
                kill_hard(process_a)
                running.result(30)
        assert len(acknowledged) >= 100
        count = int(b.get("/indexes('guides')/docs/$count").text)
        assert count >= len(acknowledged)
        for key in acknowledged[:: max(1, len(acknowledged) // 25)] + acknowledged[-3:]:
            assert b.get(f"/indexes('guides')/docs('{key}')").status_code == 200, key


def test_a_stopped_database_is_a_503_and_the_replica_recovers(
    tmp_path, postgres_server: RunningPostgres, postgres_url
):
    with replica(tmp_path / "a", postgres_url) as (url, _), client(url) as http:
        create_base(http)
        postgres_server.stop()
        try:
            down = http.get("/indexes")
            assert down.status_code == 503
            assert "database is unavailable" in down.json()["error"]["message"]
            assert "Retry-After" in down.headers
            assert (
                http.post(
                    "/knowledgebases('kb')/retrieve",
                    json={"intents": [{"type": "semantic", "search": "tides"}]},
                ).status_code
                == 503
            )
        finally:
            postgres_server.start()
        deadline = time.monotonic() + 20
        status = 0
        while time.monotonic() < deadline and status != 200:
            status = http.get("/indexes").status_code
        assert status == 200
        assert [i["name"] for i in http.get("/indexes").json()["value"]] == ["guides"]


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgresql://nobody@127.0.0.1:1/none", "unreachable"),
        ("mysql://127.0.0.1/db", "not a PostgreSQL URL"),
        ("postgresql://h:notaport/db", "invalid PostgreSQL URL"),
    ],
)
def test_a_bad_url_fails_at_start_in_one_line(tmp_path, url, says):
    argv = [sys.executable, "-m", "agentic_retrieval.cli", "serve", "--data", str(tmp_path)]
    result = subprocess.run(
        [*argv, "--store", url, "--port", "0"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert says in lines[0] and "--store" in lines[0]
    assert "Traceback" not in result.stderr


def test_definition_writes_are_serialised_across_replicas(tmp_path, postgres_url):
    """Two replicas checking a limit at once: the second checks only after the first commits.

    Each check counts, then waits (up to 2 s) for the other to have counted too: without the
    definitions lock both count 0 and both create; with it the second is still waiting for the
    lock when the first's wait ends, and counts 1.
    """
    replicas = [PostgresServiceDirectory(tmp_path / n, postgres_url) for n in "ab"]
    both_counted = threading.Barrier(2, timeout=2)

    def at_most_one(view: DefinitionView, current: StoredDefinition | None) -> None:
        seen = view.count("index")
        with contextlib.suppress(threading.BrokenBarrierError):
            both_counted.wait()
        if seen >= 1:
            raise ResourceConflictError("one index at most")

    def create(n: int) -> str:
        try:
            replicas[n].put("index", f"i{n}", {"name": f"i{n}"}, check=at_most_one)
        except ResourceConflictError:
            return "refused"
        return "created"

    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            assert sorted(pool.map(create, range(2))) == ["created", "refused"]
        assert len(replicas[1].definitions("index")) == 1
    finally:
        for state in replicas:
            state.close()


def test_the_data_directory_holds_no_state_and_a_new_replica_serves_it(tmp_path, postgres_url):
    with replica(tmp_path / "a", postgres_url) as (url_a, _), client(url_a) as a:
        create_base(a)
        doc = {"id": "tide", "content": "spring tides follow the full moon"}
        assert a.post("/indexes('guides')/docs/index", json={"value": [doc]}).status_code == 200
    assert not (tmp_path / "a" / "service.sqlite").exists()
    assert not list((tmp_path / "a").rglob("*.sqlite"))
    with replica(tmp_path / "fresh", postgres_url) as (url, _), client(url) as fresh:
        assert retrieve_keys(fresh, "spring tides") == ["tide"]


def test_a_stores_writers_wait_for_each_other_across_replicas(tmp_path, postgres_url):
    """A write batch holds the store as the embedded store's one writer does, on every
    replica: what a batch checks (a file name is free, the document a merge changes) cannot
    be changed by another replica before it commits."""
    from agentic_retrieval.sources.postgres import Database, PostgresStore

    databases = [Database(postgres_url), Database(postgres_url)]  # two replicas' pools
    stores = [PostgresStore(databases[0], "docs", create=True), PostgresStore(databases[1], "docs")]
    first_in = threading.Event()
    times: dict[str, float] = {}

    def first() -> None:
        with stores[0].transaction():
            first_in.set()
            time.sleep(1.0)
            times["first out"] = time.monotonic()

    def second() -> None:
        first_in.wait(10)
        with stores[1].transaction():
            times["second in"] = time.monotonic()

    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            for done in [pool.submit(first), pool.submit(second)]:
                done.result(30)
        assert times["second in"] >= times["first out"]
    finally:
        for database in databases:
            database.close()


def test_a_process_holds_at_most_its_pool_of_connections(postgres_url, monkeypatch):
    """Many request threads share a bounded pool: the database sees at most its size."""
    import psycopg

    from agentic_retrieval.sources.postgres import Database

    monkeypatch.setenv("AGENTIC_RETRIEVAL_POSTGRES_POOL", "3")
    database = Database(postgres_url)
    dbname = postgres_url.rsplit("/", 1)[1]
    seen: list[int] = []

    def busy(_: int) -> None:
        with database.connection() as conn:
            conn.execute("SELECT pg_sleep(0.2)")

    def connections() -> int:
        # the probes name themselves: a previous probe's backend may still be exiting
        with psycopg.connect(postgres_url, autocommit=True, application_name="probe") as probe:
            row = probe.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> "
                "pg_backend_pid() AND application_name <> 'probe'",
                (dbname,),
            ).fetchone()
        return int(row[0]) if row else 0

    try:
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            running = pool.map(busy, range(24))
            for _ in range(5):
                time.sleep(0.15)
                seen.append(connections())
            list(running)
        assert 1 <= max(seen) <= 3
    finally:
        database.close()


def test_filters_and_permission_trimming_match_the_embedded_store(tmp_path, postgres_url):
    """The same documents, searches, filters and identities through a service on the embedded
    store and one on PostgreSQL: the same documents come back."""
    from fastapi.testclient import TestClient
    from tests.fakes import AUDIENCE, ISSUER, JWT_SECRET, TokenMint

    from agentic_retrieval.kb.service_state import open_service
    from agentic_retrieval.server import ServerSettings, create_app
    from agentic_retrieval.server.tokens import HEADER, TokenSettings

    mint = TokenMint()
    alice = {HEADER: f"Bearer {mint.hs256('alice', ['acme'])}"}
    bob = {HEADER: f"Bearer {mint.hs256('bob', ['globex'])}"}
    index = {
        "name": "policies",
        "fields": [
            {"name": "id", "type": "Edm.String", "key": True},
            {"name": "content", "type": "Edm.String", "searchable": True},
            {"name": "year", "type": "Edm.Int32", "filterable": True},
            {"name": "tags", "type": "Collection(Edm.String)", "filterable": True},
            {"name": "readers", "type": "Collection(Edm.String)", "permissionFilter": "userIds"},
            {"name": "teams", "type": "Collection(Edm.String)", "permissionFilter": "groupIds"},
        ],
        "permissionFilterOption": "enabled",
    }
    docs = [
        {"id": "acme", "content": "Acme vacation policy: 25 vacation days", "year": 2024,
         "tags": ["hr"], "teams": ["acme"]},
        {"id": "globex", "content": "Globex vacation policy and travel", "year": 2023,
         "tags": ["hr", "travel"], "teams": ["globex"]},
        {"id": "memo", "content": "Board memo on vacation carry-over", "year": 2024,
         "tags": ["board"], "readers": ["alice"]},
        {"id": "public", "content": "Public holidays and vacation days", "year": 2022,
         "tags": ["hr"], "teams": ["all"]},
        {"id": "travel", "content": "Travel expenses policy", "year": 2024,
         "tags": ["travel"], "teams": ["acme", "globex"]},
    ]  # fmt: skip
    cases = [
        ({"search": "vacation days"}, {}),
        ({"search": "policy", "filter": "year ge 2023"}, {}),
        ({"search": "vacation", "filter": "tags/any(t: t eq 'hr')"}, {}),
        ({"search": "*", "filter": "year eq 2024 and not tags/any(t: t eq 'board')"}, {}),
        ({"search": "vacation policy"}, alice),
        ({"search": "vacation policy"}, bob),
        ({"search": "policy", "filter": "year eq 2024"}, alice),
        ({"search": "travel"}, bob),
    ]
    settings = ServerSettings(
        api_keys=["admin-key"],
        query_keys=["query-key"],
        read_env_keys=False,
        embeddings=False,
        tokens=TokenSettings(issuer=ISSUER, audience=AUDIENCE, secret=JWT_SECRET),
    )
    results = []
    for store in (None, postgres_url):
        service = open_service(tmp_path / ("pg" if store else "embedded"), store)
        try:
            with TestClient(create_app(service=service, settings=settings)) as http:
                http.params = {"api-version": "2026-10-01"}
                assert http.put("/indexes('policies')", json=index, headers=HEADERS).is_success
                batch = {"value": [{"@search.action": "upload", **d} for d in docs]}
                assert http.post("/indexes('policies')/docs/index", json=batch, headers=HEADERS)
                found = []
                for body, identity in cases:
                    response = http.post(
                        "/indexes('policies')/docs/search.post.search",
                        json=body,
                        # an admin key sees everything: the filter alone decides
                        headers={"api-key": "query-key", **identity} if identity else HEADERS,
                    )
                    assert response.status_code == 200, response.text
                    found.append([v["id"] for v in response.json()["value"]])
                results.append(found)
        finally:
            service.close()
    embedded, postgres = results
    assert all(embedded), embedded  # every case finds something: the comparison means a thing
    # the same documents; the order of near-equal BM25 scores may differ (5 documents)
    assert [sorted(found) for found in postgres] == [sorted(found) for found in embedded]


def test_a_file_source_on_postgresql_is_hybrid_as_soon_as_its_upload_answers(
    postgres_url, tmp_path
):
    """Replicas share no lock directory for a background embedder, so a PostgreSQL store's
    uploads are embedded before their write: searchable by meaning the moment they answer."""
    from agentic_retrieval.kb.catalog import ServiceCatalog
    from agentic_retrieval.kb.files import FileUpload, SourceFiles
    from agentic_retrieval.kb.management import put_knowledge_source
    from agentic_retrieval.kb.service_state import open_service
    from agentic_retrieval.sources.local.documents import EmbeddingProgress
    from agentic_retrieval.testing import HashingEmbeddings

    state = open_service(tmp_path / "data", postgres_url)
    try:
        put_knowledge_source(state, {"name": "docs", "kind": "file"})
        catalog = ServiceCatalog(state, embeddings=HashingEmbeddings(size=64))
        documents = catalog.file_documents("docs")
        assert documents is not None
        files = SourceFiles(documents, max_file_bytes=100_000, max_files=10)
        files.upload(FileUpload("trams.md", b"# Trams\n\nThe tram depot opens at six.", {}))
        chunks = documents.store.count_chunks()
        assert documents.embedding_progress() == EmbeddingProgress(0, chunks)
        assert documents.embed_pending() == 0  # nothing left for a background embedder
        mode = documents.retrieval_mode()
        assert (mode.mode, mode.note) == ("hybrid", None)
        [hit] = documents.search("depot", top=1, vector=documents.query_vector("depot"))
        assert hit.chunk.similarity is not None  # its vector was written with it
    finally:
        state.close()


def test_a_postgresql_store_refuses_chunks_whose_vectors_would_come_later(postgres_url, tmp_path):
    """Nothing embeds a PostgreSQL store's pending chunks, so it takes none: a unit prepared
    to be embedded after its write is refused whole rather than left without vectors."""
    from agentic_retrieval.errors import StoreError
    from agentic_retrieval.kb.catalog import ServiceCatalog
    from agentic_retrieval.kb.management import put_knowledge_source
    from agentic_retrieval.kb.service_state import open_service
    from agentic_retrieval.sources.local.documents import PreparedUnit
    from agentic_retrieval.sources.local.loaders import Section
    from agentic_retrieval.testing import HashingEmbeddings

    state = open_service(tmp_path / "data", postgres_url)
    try:
        put_knowledge_source(state, {"name": "docs", "kind": "file"})
        catalog = ServiceCatalog(state, embeddings=HashingEmbeddings(size=64))
        documents = catalog.file_documents("docs")
        assert documents is not None
        sections = [Section("The tram depot opens at six.")]
        prepared = documents.prepare("trams", title="Trams", sections=sections, fields={})
        assert not prepared.embed and prepared.vectors  # embedded here, before the write
        later = PreparedUnit(prepared.chunks, embed=True)
        with pytest.raises(StoreError, match="with their vectors"):
            documents.put(
                "trams", stored={}, title="Trams", sections=sections, fields={}, prepared=later
            )
        assert documents.store.count_chunks() == 0  # nothing half-written
    finally:
        state.close()
