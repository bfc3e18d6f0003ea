"""``serve --data DIR --workers 2``: each pending chunk of a file source is embedded once.

Every worker runs a background embedder, and both may be told about (or find at start) the
same store's pending chunks; the lock ``DIR/embedding/<store>.lock`` lets one process embed a
store at a time. Two workers embedding the same chunks would leave the same store behind
(a vector is written only where none is), so what shows it is the model's work: each server
process here runs a ``sitecustomize`` that appends, per call of the bundled model's
``embed_documents``, the process id and the number of texts to a file. Its sum is the chunks
embedded, over both workers; the store's chunks are the chunks there were to embed.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import httpx
import pytest
from tests.integration.service_process import KEY, VERSION, kill_hard, serve_process
from tests.integration.test_background_embedding import PARAPHRASE, RULES, embedded, ledger
from tests.integration.test_service_workers import fresh

from agentic_retrieval.sources.local.store import LocalStore

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

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


def upload(url: str, name: str, text: str) -> None:
    """Upload over a new connection, so either worker may take it (and be told to embed)."""
    parts = {
        "metadata": (None, f'{{"fileName": "{name}"}}', "application/json"),
        "content": (name, text.encode(), "application/octet-stream"),
    }
    with fresh(url) as http:
        response = http.post("/knowledgesources/docs/files", files=parts)
        assert response.status_code == 201, response.text


def test_two_workers_embed_every_pending_chunk_once(tmp_path):
    data = tmp_path / "data"
    calls = tmp_path / "calls-1.txt"
    with serve_process(data, workers=2, env=counting(tmp_path, calls)) as (url, server):
        with fresh(url) as http:
            assert http.put("/knowledgesources/docs", json={"kind": "file"}).status_code == 201
            body = {"knowledgeSources": [{"name": "docs"}]}
            assert http.put("/knowledgebases/kb", json=body).status_code == 201
        upload(url, "ledger.md", ledger(60))
        for n in range(6):  # each to whichever worker answers: both are told, most likely
            upload(url, f"rules-{n}.md" if n else "rules.md", RULES if n == 0 else ledger(2))
        http = httpx.Client(base_url=url, headers={"api-key": KEY}, params=VERSION, timeout=120)
        first = http.get("/knowledgesources/docs/status").json()["embeddingProgress"]
        assert first["pendingChunks"] > 0  # the uploads answered before their vectors
        total = first["pendingChunks"] + first["embeddedChunks"]
        done = embedded(http, timeout=300)["embeddingProgress"]
        assert done == {"pendingChunks": 0, "embeddedChunks": total}
        assert sum(embedded_by_process(calls).values()) == total  # not one chunk twice
        response = http.post(
            "/knowledgebases/kb/retrieve",
            json={"intents": [{"type": "semantic", "search": PARAPHRASE}]},
        )
        assert response.status_code == 200
        assert response.json()["references"][0]["docKey"].startswith("rules.md")  # by meaning

        upload(url, "ledger-2.md", ledger(60).replace("Ledger", "Manifest"))
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
