"""An upload to a hybrid file source answers before its vectors exist; they follow after.

A real ``serve --data`` process: the upload's response comes once its chunks are stored and
found by their words; the status counts the chunks still waiting for their vectors and says
ranking is partly lexical meanwhile. The pending work is the store's, not the process's: a
server killed with chunks pending has them embedded by the next one, and a question sharing
no word with a file finds it once they are.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest
from tests.integration.service_process import KEY, VERSION, kill_hard, serve_process

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
