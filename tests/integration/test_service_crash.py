"""Kill -9 the service in the middle of a large upload batch, restart it: every document is
either fully present (all its fields, all its chunks) or absent, and the service answers.

A batch commits as one transaction (each document a savepoint within it), so the batch the
kill interrupted is absent as a whole and every batch acknowledged before it is present."""

from __future__ import annotations

import sqlite3
import threading
import time

import httpx
import pytest
from tests.integration.service_process import KEY, VERSION, kill_hard, serve_process

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]
BATCHES = 8
BATCH = 500
WORDS = "tram ferry harbour quay pier lighthouse gull heron osprey kestrel".split()

INDEX = {
    "name": "bulk",
    "fields": [
        {"name": "id", "type": "Edm.String", "key": True},
        {"name": "content", "type": "Edm.String", "searchable": True},
        {"name": "n", "type": "Edm.Int32", "filterable": True},
    ],
}


def document(n: int) -> dict:
    # ~3,000 characters: several chunks, so a half-written document would show
    sentence = " ".join(WORDS[(n + k) % len(WORDS)] for k in range(12))
    body = " ".join(f"Doc{n} part {p}: {sentence}." for p in range(40))
    return {"id": f"d{n}", "content": body, "n": n}


def upload_batches(url: str, stop: threading.Event, sent: list[int]) -> None:
    with httpx.Client(base_url=url, headers={"api-key": KEY}, params=VERSION, timeout=60) as http:
        for batch in range(BATCHES):
            if stop.is_set():
                return
            docs = [document(batch * BATCH + i) for i in range(BATCH)]
            sent.append(batch)
            try:
                http.post("/indexes('bulk')/docs/index", json={"value": docs})
            except httpx.TransportError:
                return  # the server was killed under us


def test_a_killed_batch_leaves_whole_documents_only(tmp_path):
    data = tmp_path / "data"
    sent: list[int] = []
    with serve_process(data) as (url, process):
        admin = {"api-key": KEY}
        assert (
            httpx.put(
                f"{url}/indexes('bulk')", json=INDEX, headers=admin, params=VERSION
            ).status_code
            == 201
        )
        stop = threading.Event()
        uploader = threading.Thread(target=upload_batches, args=(url, stop, sent), daemon=True)
        uploader.start()
        deadline = time.monotonic() + 120
        count = 0
        while time.monotonic() < deadline and count < BATCH:
            count = int(
                httpx.get(f"{url}/indexes('bulk')/docs/$count", headers=admin, params=VERSION).text
            )
            time.sleep(0.05)
        # the response to the first batch comes once the lexical index has taken it in, which
        # under load can take longer than a fixed pause: wait for the next batch to be sent
        while time.monotonic() < deadline and len(sent) <= count // BATCH:
            time.sleep(0.01)
        time.sleep(0.3)  # the next batch is being written now
        kill_hard(process)
        stop.set()
        uploader.join(30)
    assert count >= BATCH, "at least one batch committed before the kill"
    assert len(sent) > count // BATCH, "a batch was in flight when the server died"

    store = next((data / "stores").glob("index-bulk-*.sqlite"))
    with sqlite3.connect(store) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        chunks = dict(
            conn.execute(
                "SELECT f.path, count(c.rid) FROM files f "
                "JOIN chunks c ON c.file_id = f.id GROUP BY f.id"
            )
        )
        declared = dict(conn.execute("SELECT path, chunk_count FROM files"))
    assert chunks == declared  # no document lost a chunk or kept a stale one

    with serve_process(data) as (url, _):
        admin = {"api-key": KEY}
        http = httpx.Client(base_url=url, headers=admin, params=VERSION, timeout=60)
        present = int(http.get("/indexes('bulk')/docs/$count").text)
        assert present == len(declared)
        assert present >= count  # nothing acknowledged was lost
        assert present < BATCHES * BATCH
        attempted = (max(sent) + 1) * BATCH
        found = []
        for n in range(attempted):
            response = http.get(f"/indexes('bulk')/docs('d{n}')")
            if response.status_code == 200:
                assert response.json() == document(n)
                found.append(n)
            else:
                assert response.status_code == 404
        assert len(found) == present
        last = found[-1]
        hits = http.post(
            "/indexes('bulk')/docs/search", json={"search": f"Doc{last}", "select": "id"}
        )
        assert hits.json()["value"][0]["id"] == f"d{last}"
        assert (
            http.put(
                "/indexes('bulk')", json=INDEX, headers={"Prefer": "return=representation"}
            ).status_code
            == 200
        )
