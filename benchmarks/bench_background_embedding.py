"""A large upload to a hybrid file source: when it answers, when it is embedded, queries meanwhile.

A real ``agentic-retrieval serve --data`` child process on 127.0.0.1 (whatever
``agentic_retrieval`` is first on ``PYTHONPATH``: run it once on main's source and once on
this branch's). One text file of about ``--mb`` megabytes (Cranfield abstracts, else synthetic
text) is uploaded to a file source of the default (hybrid) kind. Printed: the upload's response
time; the time until every chunk has its vector (from the status's ``embeddingProgress``; a
server without it had embedded them before answering); and the latency of retrieves
(minimal effort, one every ``--every`` seconds) while the backlog drains, with how many found
the uploaded file.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_background_embedding.py [--mb 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from tests.integration.service_process import KEY, VERSION, serve_process

CRANFIELD = Path(__file__).resolve().parents[2] / "shared" / "collections" / "cranfield"
QUESTIONS = ("pressure on a wing", "boundary layer transition", "heat transfer at hypersonic speed")


def text_of(megabytes: float) -> str:
    corpus = CRANFIELD / "corpus.jsonl"
    if corpus.is_file():
        with corpus.open(encoding="utf-8") as lines:
            texts = [json.loads(line).get("text") or "" for line in lines]
    else:
        texts = [
            f"Harbour note {n}: the ferry leaves pier {n % 9} at dawn." * 20 for n in range(400)
        ]
    parts, size, n = ["# Abstracts"], 0, 0
    while size < megabytes * 1_000_000:
        part = f"## Abstract {n}\n\n{texts[n % len(texts)]}"
        parts.append(part)
        size += len(part) + 2
        n += 1
    return "\n\n".join(parts)


def retrieve(http: httpx.Client, question: str) -> tuple[float, bool]:
    """Milliseconds, and whether the uploaded file was among the references."""
    body = {
        "intents": [{"type": "semantic", "search": question}],
        "retrievalReasoningEffort": {"kind": "minimal"},
    }
    started = time.perf_counter()
    response = http.post("/knowledgebases/kb/retrieve", json=body)
    elapsed = (time.perf_counter() - started) * 1000
    assert response.status_code in (200, 206), response.text
    return elapsed, bool(response.json()["references"])


def pending(http: httpx.Client) -> int | None:
    """Chunks still waiting for their vectors (``None``: the server does not say)."""
    progress = http.get("/knowledgesources/docs/status").json().get("embeddingProgress")
    return None if progress is None else int(progress["pendingChunks"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=2.0)
    parser.add_argument("--every", type=float, default=2.0)
    parser.add_argument("--timeout", type=float, default=3600.0)
    args = parser.parse_args()
    text = text_of(args.mb).encode()
    with tempfile.TemporaryDirectory() as tmp, serve_process(Path(tmp) / "data") as (url, _):
        http = httpx.Client(base_url=url, headers={"api-key": KEY}, params=VERSION, timeout=None)
        assert http.put("/knowledgesources/docs", json={"kind": "file"}).status_code == 201
        body = {"knowledgeSources": [{"name": "docs"}]}
        assert http.put("/knowledgebases/kb", json=body).status_code == 201
        idle = [retrieve(http, q)[0] for q in QUESTIONS * 2]
        parts = {
            "metadata": (None, json.dumps({"fileName": "big.md"}), "application/json"),
            "content": ("big.md", text, "application/octet-stream"),
        }
        started = time.perf_counter()
        response = http.post("/knowledgesources/docs/files", files=parts)
        answered = time.perf_counter() - started
        assert response.status_code == 201, response.text
        status = http.get("/knowledgesources/docs/status").json()
        progress = status.get("embeddingProgress") or {}
        print(
            f"upload of {len(text) / 1e6:.2f} MB: answered in {answered:.2f} s; "
            f"{progress.get('pendingChunks', 0)} chunks pending, "
            f"{progress.get('embeddedChunks', '?')} embedded then"
        )
        during: list[float] = []
        found = 0
        stop = threading.Event()
        while (left := pending(http)) and time.perf_counter() - started < args.timeout:
            elapsed, hit = retrieve(http, QUESTIONS[len(during) % len(QUESTIONS)])
            during.append(elapsed)
            found += hit
            stop.wait(args.every)
        done = time.perf_counter() - started
        if left is None:
            print("fully embedded when it answered (the server embeds before answering)")
        else:
            print(f"fully embedded {done:.1f} s after the upload started ({left} left)")
        print(f"retrieve idle: median {statistics.median(idle):.0f} ms, max {max(idle):.0f} ms")
        if during:
            print(
                f"retrieve while the backlog drains: {len(during)} queries, median "
                f"{statistics.median(during):.0f} ms, max {max(during):.0f} ms, "
                f"{found} with references"
            )


if __name__ == "__main__":
    main()
