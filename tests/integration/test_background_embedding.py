"""An upload to a hybrid file source answers before its vectors exist; they follow after.

A real ``serve --data`` process: the upload's response comes once its chunks are stored and
found by their words; the status counts the chunks still waiting for their vectors and says
ranking is partly lexical meanwhile. The pending work is the store's, not the process's: a
server killed with chunks pending has them embedded by the next one, and a question sharing
no word with a file finds it once they are.

With ``serve --workers 2`` both workers may be told about (or find at start) the same store's
pending chunks; the lock ``DIR/embedding/<store>.lock`` lets one process embed a store at a
time. Two workers embedding the same chunks would leave the same store behind (a vector is
written only where none is), so what shows it is the model's work: each server process there
runs a ``sitecustomize`` that appends, per call of the bundled model's ``embed_documents``,
the process id and the number of texts to a file. Its sum is the chunks embedded, over both
workers; the store's chunks are the chunks there were to embed.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from tests.integration.service_process import KEY, VERSION, kill_hard, serve_process

from agentic_retrieval.sources.local.store import LocalStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

RULES = "# House rules\n\nDogs are not allowed on the premises."
PARAPHRASE = "Can I bring my pet?"
"""Shares no word (nor word form) with the rules file: only its vectors can find it."""
WORDS = ("amber", "basalt", "cobalt", "dune", "ember", "fjord", "granite", "harbor", "indigo")


def ledger(chunks: int) -> str:
    """A text of about ``chunks`` chunks about shipping, sharing no word with the rules."""
    lines = [
        f"Ledger line {n}: the {WORDS[n % 9]} warehouse shipped {n * 7} crates of "
        f"{WORDS[(n * 5) % 9]} tiles to the {WORDS[(n * 2) % 9]} depot on day {n % 365}."
        for n in range(chunks * 10)
    ]
    return "# Shipping ledger\n\n" + "\n\n".join(lines)


def retrieve(http: httpx.Client, question: str) -> list[str]:
    """The file names of the references."""
    body = {"intents": [{"type": "semantic", "search": question}]}
    response = http.post("/knowledgebases/kb/retrieve", json=body)
    assert response.status_code == 200, response.text
    return [r["docKey"].partition("#")[0] for r in response.json()["references"]]


def status(http: httpx.Client) -> dict:
    return http.get("/knowledgesources/docs/status").json()


def embedded(http: httpx.Client, timeout: float) -> dict:
    """The source's status once its background embedding has no chunk left to do."""
    deadline = time.monotonic() + timeout
    while True:
        current = status(http)
        if current["embeddingProgress"]["pendingChunks"] == 0 or time.monotonic() > deadline:
            return current
        time.sleep(0.5)


def upload(http: httpx.Client, name: str, text: str) -> httpx.Response:
    parts = {
        "metadata": (None, json.dumps({"fileName": name}), "application/json"),
        "content": (name, text.encode(), "application/octet-stream"),
    }
    return http.post("/knowledgesources/docs/files", files=parts)


def test_an_upload_answers_before_its_vectors_and_a_killed_server_finishes_them(tmp_path):
    data = tmp_path / "data"
    with serve_process(data) as (url, process):
        http = httpx.Client(base_url=url, headers={"api-key": KEY}, params=VERSION, timeout=120)
        assert http.put("/knowledgesources/docs", json={"kind": "file"}).status_code == 201
        body = {"knowledgeSources": [{"name": "docs"}]}
        assert http.put("/knowledgebases/kb", json=body).status_code == 201
        assert upload(http, "ledger.md", ledger(150)).status_code == 201
        assert upload(http, "rules.md", RULES).status_code == 201
        current = status(http)
        progress = current["embeddingProgress"]
        assert progress["pendingChunks"] > 0  # answered before its vectors were made
        assert current["retrievalMode"] == "hybrid"
        assert "partly lexical" in current["retrievalNote"]
        # the rules' chunk is behind the ledger's in the queue: found by its words meanwhile
        assert retrieve(http, "Are dogs allowed on the premises?")[:1] == ["rules.md"]
        total = progress["pendingChunks"] + progress["embeddedChunks"]
        kill_hard(process)  # mid-way: the chunks without vectors stay in the store
    with serve_process(data) as (url, _):
        http = httpx.Client(base_url=url, headers={"api-key": KEY}, params=VERSION, timeout=120)
        current = embedded(http, timeout=400)
        assert current["embeddingProgress"] == {"pendingChunks": 0, "embeddedChunks": total}
        assert "retrievalNote" not in current
        assert retrieve(http, PARAPHRASE)[:1] == ["rules.md"]  # by its vector


COUNTING = """
import os

from agentic_retrieval import embeddings

_embed_documents = embeddings.LocalEmbeddings.embed_documents


def _counted(self, texts):
    vectors = _embed_documents(self, texts)
    with open(os.environ["EMBED_CALLS_FILE"], "a") as calls:  # one short append per call
        calls.write(f"{os.getpid()} {len(texts)}\\n")
    return vectors


embeddings.LocalEmbeddings.embed_documents = _counted
"""


def counting(tmp_path: Path, calls: Path) -> dict[str, str]:
    """The server's environment: the bundled model counts what it embeds into ``calls``."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(COUNTING)
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "EMBED_CALLS_FILE": str(calls)}


def embedded_by_process(calls: Path) -> Counter[int]:
    """Texts the bundled model embedded, per server process."""
    per_process: Counter[int] = Counter()
    for line in calls.read_text().splitlines() if calls.exists() else []:
        pid, count = line.split()
        per_process[int(pid)] += int(count)
    return per_process


def fresh(url: str) -> httpx.Client:
    """A client whose every request opens a new connection (so either worker may answer)."""
    return httpx.Client(
        base_url=url,
        headers={"api-key": KEY, "Connection": "close"},
        params=VERSION,
        timeout=120,
        limits=httpx.Limits(max_keepalive_connections=0),
    )


def upload_anywhere(url: str, name: str, text: str) -> None:
    """Upload over a new connection, so either worker may take it (and be told to embed)."""
    with fresh(url) as http:
        response = upload(http, name, text)
        assert response.status_code == 201, response.text


@pytest.mark.slow
def test_two_workers_embed_every_pending_chunk_once(tmp_path):
    data = tmp_path / "data"
    calls = tmp_path / "calls-1.txt"
    with serve_process(data, workers=2, env=counting(tmp_path, calls)) as (url, server):
        with fresh(url) as http:
            assert http.put("/knowledgesources/docs", json={"kind": "file"}).status_code == 201
            body = {"knowledgeSources": [{"name": "docs"}]}
            assert http.put("/knowledgebases/kb", json=body).status_code == 201
        http = httpx.Client(base_url=url, headers={"api-key": KEY}, params=VERSION, timeout=120)
        upload_anywhere(url, "ledger.md", ledger(60))
        assert status(http)["embeddingProgress"]["pendingChunks"] > 0  # answered before them
        upload_anywhere(url, "rules.md", RULES)
        for n in range(5):  # each to whichever worker answers: both are told, most likely
            upload_anywhere(url, f"notes-{n}.md", ledger(2))
        done = embedded(http, timeout=300)["embeddingProgress"]
        assert done["pendingChunks"] == 0
        assert sum(embedded_by_process(calls).values()) == done["embeddedChunks"]  # once each
        response = http.post(
            "/knowledgebases/kb/retrieve",
            json={"intents": [{"type": "semantic", "search": PARAPHRASE}]},
        )
        assert response.status_code == 200
        assert response.json()["references"][0]["docKey"].startswith("rules.md")  # by meaning

        upload_anywhere(url, "ledger-2.md", ledger(60).replace("Ledger", "Manifest"))
        kill_hard(server)  # chunks left pending, for both workers of the next start to find
    [path] = (data / "stores").glob("knowledgeSource-docs-*.sqlite")
    store = LocalStore(path)
    try:
        pending, _ = store.vector_counts()
    finally:
        store.close()
    assert pending > 0
    calls = tmp_path / "calls-2.txt"
    with serve_process(data, workers=2, env=counting(tmp_path, calls)) as (url, _):
        http = httpx.Client(base_url=url, headers={"api-key": KEY}, params=VERSION, timeout=120)
        assert embedded(http, timeout=300)["embeddingProgress"]["pendingChunks"] == 0
        # both workers scanned the store at start; the one without the lock embedded nothing
        per_process = embedded_by_process(calls)
        assert sum(per_process.values()) == pending
        assert len(per_process) == 1
