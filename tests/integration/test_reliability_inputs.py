"""One document cannot exhaust the service: huge fields and collections are refused or bounded.

Issue 19 (2, 5): a 0.5 MiB filterable field cost 232 MB of store (every chunk carried the
whole field), 15 MiB ran the kernel out of memory, and one document with 200,000 values in a
string collection took 40 s, 2.6 GB of memory and 5 GB of disk, after which every search of
the index failed. Here ``serve --data`` gets each of those inputs: each is refused with a
400 naming the field, or stored with the server's resident memory growing by less than
300 MB; the index keeps answering afterwards. A store whose statement failed (and SQLite
rolled its transaction back) keeps serving too.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import httpx
import pytest
from tests.integration.service_process import KEY, VERSION, serve_process
from tests.server_harness import running_server

from agentic_retrieval.kb.service import ServiceDirectory
from agentic_retrieval.server import ServerSettings, create_app
from agentic_retrieval.sources.local import store as store_module

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]

MAX_RSS_GROWTH = 300 * 1024 * 1024
INDEX = {
    "name": "big",
    "fields": [
        {"name": "id", "type": "Edm.String", "key": True},
        {"name": "content", "type": "Edm.String"},  # Azure's defaults: filterable too
        {"name": "body", "type": "Edm.String", "filterable": False},
        {"name": "tags", "type": "Collection(Edm.String)"},
    ],
}
WORDS = "harbour tram ferry pass fare zone night bus ticket route timetable".split()


def text(size: int) -> str:
    return " ".join(f"{WORDS[n % len(WORDS)]}{n % 1009}" for n in range(size // 6))[:size]


def memory(pid: int) -> tuple[int, int]:
    """The process's resident set and its peak (bytes)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) * 1024
    return fields["VmRSS"], fields["VmHWM"]


def upload(http: httpx.Client, document: dict) -> httpx.Response:
    return http.post("/indexes('big')/docs/index", json={"value": [document]})


def test_huge_fields_and_collections_are_refused_or_bounded(tmp_path):
    with serve_process(tmp_path / "data") as (url, process):
        http = httpx.Client(base_url=url, headers={"api-key": KEY}, params=VERSION, timeout=120)
        assert http.put("/indexes('big')", json=INDEX).status_code == 201
        assert upload(http, {"id": "small", "body": "harbour tram notes"}).status_code == 200
        assert http.post("/indexes('big')/docs/search", json={"search": "tram"}).status_code == 200
        baseline, _ = memory(process.pid)

        started = time.monotonic()
        refused = upload(http, {"id": "f", "content": text(15 * 1024 * 1024)})
        assert refused.status_code == 400, refused.text[:300]
        message = refused.json()["error"]["message"]
        assert "value[0].content" in message and "32766" in message
        refused = upload(http, {"id": "c", "tags": [f"tag{n}" for n in range(200_000)]})
        assert refused.status_code == 400, refused.text[:300]
        assert "value[0].tags" in refused.json()["error"]["message"]
        assert time.monotonic() - started < 30  # refused before they cost anything

        # within the bounds: stored, linear, searchable
        assert upload(http, {"id": "long", "body": text(15 * 1024 * 1024)}).status_code == 200
        tags = {"id": "tagged", "tags": [f"tag{n}" for n in range(3_000)], "content": "x" * 32_000}
        assert upload(http, tags).status_code == 200
        for search in (
            {"search": "*"},
            {"search": "timetable7"},
            {"filter": "tags/any(t: t eq 'tag2999')"},
        ):
            found = http.post("/indexes('big')/docs/search", json={**search, "select": "id"})
            assert found.status_code == 200, found.text[:300]
            assert found.json()["value"]
        rss, peak = memory(process.pid)
        assert peak - baseline < MAX_RSS_GROWTH, (baseline, rss, peak)
        stores = list((tmp_path / "data" / "stores").glob("index-big-*.sqlite*"))
        assert sum(p.stat().st_size for p in stores) < 12 * 15 * 1024 * 1024  # linear in input

        too_big = upload(http, {"id": "huge", "body": text(17 * 1024 * 1024)})
        assert too_big.status_code == 413
        assert http.get("/indexes('big')/docs/$count").text == "3"
        assert process.poll() is None


ADMIN = {"api-key": "admin-key"}


def failed(request) -> bool:
    """Whether a request failed as an internal error (a 500, or the connection dropped)."""
    try:
        return request().status_code == 500
    except httpx.RemoteProtocolError:  # the server's handling of unexpected errors, not ours
        return True


def test_a_store_whose_statement_failed_keeps_serving(tmp_path, monkeypatch, caplog):
    """SQLite rolls a transaction back itself on some errors (no memory, a full disk).

    The failed request is an internal error whose log names the real cause (not "cannot
    commit - no transaction is active", which hid it); every later request is served.
    """
    settings = ServerSettings(api_keys=["admin-key"], read_env_keys=False)
    app = create_app(service=ServiceDirectory(tmp_path / "data"), settings=settings)
    failures = {"read": 1, "write": 1}
    lexical = store_module.LocalStore._lexical
    delete_rows = store_module.LocalStore._delete_file_rows

    def failing_read(self, *args):
        if failures["read"]:
            failures["read"] -= 1
            self._connection().execute("ROLLBACK")  # what SQLite did on SQLITE_NOMEM
            raise sqlite3.OperationalError("out of memory")
        return lexical(self, *args)

    def failing_write(self, conn, path):
        if failures["write"] and path.endswith("doomed"):
            failures["write"] -= 1
            conn.execute("ROLLBACK")  # what SQLite did on SQLITE_FULL
            raise sqlite3.OperationalError("database or disk is full")
        return delete_rows(self, conn, path)

    monkeypatch.setattr(store_module.LocalStore, "_lexical", failing_read)
    monkeypatch.setattr(store_module.LocalStore, "_delete_file_rows", failing_write)
    with running_server(app) as url:
        http = httpx.Client(
            base_url=url,
            headers=ADMIN,
            params=VERSION,
            timeout=30,
            limits=httpx.Limits(max_keepalive_connections=0),  # the failure may drop one
        )
        assert http.put("/indexes('big')", json=INDEX).status_code == 201
        assert upload(http, {"id": "a", "body": "harbour tram"}).status_code == 200
        search = {"search": "harbour"}
        assert failed(lambda: http.post("/indexes('big')/docs/search", json=search))
        for _ in range(10):  # every thread's connection is usable again
            found = http.post("/indexes('big')/docs/search", json=search)
            assert found.status_code == 200 and found.json()["value"][0]["id"] == "a"
        batch = {"value": [{"id": "b", "body": "ferry"}, {"id": "doomed", "body": "x"}]}
        assert failed(lambda: http.post("/indexes('big')/docs/index", json=batch))
        assert http.get("/indexes('big')/docs/$count").text == "1"  # the batch left nothing
        assert http.post("/indexes('big')/docs/index", json=batch).status_code == 200
        assert http.get("/indexes('big')/docs/$count").text == "3"
        assert http.post("/indexes('big')/docs/search", json={"search": "ferry"}).json()["value"]
    logged = [str(r.exc_info[1]) for r in caplog.records if r.exc_info]
    assert logged == ["out of memory", "database or disk is full"]
    assert not [r for r in caplog.records if "no transaction is active" in r.getMessage()]
