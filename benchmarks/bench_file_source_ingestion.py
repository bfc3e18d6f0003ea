"""File knowledge sources of ``serve --data``: upload throughput lexical against hybrid.

A real ``agentic-retrieval serve --data`` child process on 127.0.0.1, started once with
``--no-embeddings`` (lexical) and once by default (hybrid: every chunk embedded with the
bundled model). The same markdown files (Cranfield abstracts, ``../shared/collections/
cranfield``, else synthetic text, several abstracts per file) are uploaded one after another
over REST; each upload is converted, chunked, embedded (hybrid) and stored before its 201.
Printed per mode: files, chunks, wall seconds, chunks/s, and the server process's CPU seconds
(the conversions' child processes not included).

    .venv/bin/python benchmarks/bench_file_source_ingestion.py [--files 60] [--per-file 8]

``--during-upload N`` measures instead what embedding costs queries: N hybrid retrieves on an
idle server, then N while one file of ``--per-file`` abstracts is being embedded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from tests.integration.service_process import KEY, VERSION, serve_process

from agentic_retrieval.sources.local.store import LocalStore

CRANFIELD = Path(__file__).resolve().parents[2] / "shared" / "collections" / "cranfield"


def abstracts() -> list[str]:
    corpus = CRANFIELD / "corpus.jsonl"
    if not corpus.is_file():
        return [
            f"Harbour note {n}: the ferry leaves pier {n % 9} at dawn." * 20 for n in range(400)
        ]
    with corpus.open(encoding="utf-8") as lines:
        return [json.loads(line).get("text") or "" for line in lines]


def files(count: int, per_file: int) -> list[tuple[str, bytes]]:
    texts = abstracts()
    made = []
    for n in range(count):
        chosen = [texts[(n * per_file + k) % len(texts)] for k in range(per_file)]
        body = "\n\n".join(f"## Abstract {k}\n\n{text}" for k, text in enumerate(chosen))
        made.append((f"file-{n:04d}.md", f"# File {n}\n\n{body}".encode()))
    return made


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(mode: str, uploads: list[tuple[str, bytes]]) -> None:
    extra = ("--no-embeddings",) if mode == "lexical" else ()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        with serve_process(data, extra=extra) as (url, process):
            http = httpx.Client(base_url=url, headers={"api-key": KEY}, params=VERSION, timeout=600)
            assert http.put("/knowledgesources/docs", json={"kind": "file"}).status_code == 201
            cpu = cpu_seconds(process.pid)
            started = time.perf_counter()
            for name, content in uploads:
                parts = {
                    "metadata": (None, json.dumps({"fileName": name}), "application/json"),
                    "content": (name, content, "application/octet-stream"),
                }
                response = http.post("/knowledgesources/docs/files", files=parts)
                assert response.status_code == 201, response.text
            wall = time.perf_counter() - started
            cpu = cpu_seconds(process.pid) - cpu
            state = http.get("/knowledgesources/docs/status").json()["retrievalMode"]
        (store,) = (data / "stores").glob("*.sqlite")
        opened = LocalStore(store)
        chunks, vectors = opened.count_chunks(), opened.dimension() is not None
        opened.close()
    print(
        f"{mode:8s} ({state}, vectors: {vectors}): {len(uploads)} files, {chunks} chunks, "
        f"{wall:.1f} s wall, {chunks / wall:.0f} chunks/s, server CPU {cpu:.1f} s "
        f"({chunks / max(cpu, 1e-9):.0f} chunks per CPU-second)"
    )


def retrieve_ms(http: httpx.Client, question: str) -> float:
    body = {"intents": [{"type": "semantic", "search": question}]}
    started = time.perf_counter()
    assert http.post("/knowledgebases/kb/retrieve", json=body).status_code == 200
    return (time.perf_counter() - started) * 1000


def during_upload(per_file: int, queries: int) -> None:
    """Retrieve latency (hybrid) idle, then while one large file is being embedded."""
    small, big = files(4, 2), files(1, per_file)[0]
    with tempfile.TemporaryDirectory() as tmp, serve_process(Path(tmp) / "data") as (url, _):
        http = httpx.Client(base_url=url, headers={"api-key": KEY}, params=VERSION, timeout=600)
        assert http.put("/knowledgesources/docs", json={"kind": "file"}).status_code == 201
        for name, content in [*small, ("big.md", big[1])]:
            if name == "big.md":
                break
            parts = {
                "metadata": (None, json.dumps({"fileName": name}), "application/json"),
                "content": (name, content, "application/octet-stream"),
            }
            assert http.post("/knowledgesources/docs/files", files=parts).status_code == 201
        body = {"knowledgeSources": [{"name": "docs"}]}
        assert http.put("/knowledgebases/kb", json=body).status_code == 201
        idle = [retrieve_ms(http, f"pressure on wing {n}") for n in range(queries)]
        parts = {
            "metadata": (None, json.dumps({"fileName": "big.md"}), "application/json"),
            "content": ("big.md", big[1], "application/octet-stream"),
        }
        uploader = threading.Thread(
            target=lambda: http.post("/knowledgesources/docs/files", files=parts)
        )
        uploader.start()
        time.sleep(2.0)  # past the conversion: embedding
        busy = []
        while uploader.is_alive() and len(busy) < queries:
            busy.append(retrieve_ms(http, f"pressure on wing {len(busy)}"))
        uploader.join()
    for label, times in (("idle", idle), ("during a large upload", busy)):
        times = sorted(times)
        print(
            f"retrieve {label}: {len(times)} queries, median {statistics.median(times):.0f} ms, "
            f"max {times[-1]:.0f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=60)
    parser.add_argument("--per-file", type=int, default=8)
    parser.add_argument(
        "--during-upload", type=int, metavar="QUERIES", help="measure query latency instead"
    )
    args = parser.parse_args()
    if args.during_upload:
        print(f"load average before: {os.getloadavg()}")
        during_upload(args.per_file, args.during_upload)
        print(f"load average after: {os.getloadavg()}")
        return
    uploads = files(args.files, args.per_file)
    print(f"load average before: {os.getloadavg()}")
    for mode in ("lexical", "hybrid"):
        run(mode, uploads)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
