"""The knowledge service (``serve --data``): SDK upload throughput, time to retrievable, and
retrieve throughput with one worker process and with ``--workers 2``.

Every server is a real ``agentic-retrieval serve`` child process on 127.0.0.1:

1. upload: the unmodified SDK (``SearchClient.upload_documents``, batches of 1,000) pushes
   the Cranfield abstracts (``../shared/collections/cranfield``, else synthetic documents)
   into a lexical index; documents/s over the whole push;
2. time to retrievable: a single document is uploaded, then ``retrieve`` is called until the
   document is among the references (median of 20 rounds);
3. retrieve throughput: minimal effort, 20 concurrent clients, over the same knowledge base
   as ``bench_server_load.py`` (``../shared/data``, else the sample corpus), served with
   ``--workers 1`` and ``--workers 2``.

    .venv/bin/python benchmarks/bench_service.py [--documents 5000] [--requests 400]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from azure.core.credentials import AzureKeyCredential
from azure.search.documents import SearchClient
from azure.search.documents.indexes import SearchIndexClient
from azure.search.documents.indexes.models import (
    KnowledgeBase,
    KnowledgeSourceReference,
    SearchableField,
    SearchIndex,
    SearchIndexKnowledgeSource,
    SearchIndexKnowledgeSourceParameters,
    SimpleField,
)
from azure.search.documents.knowledgebases import KnowledgeBaseRetrievalClient
from azure.search.documents.knowledgebases.models import (
    KnowledgeBaseRetrievalRequest,
    KnowledgeRetrievalSemanticIntent,
)
from tests.integration.service_process import KEY, serve_process
from tests.server_harness import corpus_questions, load, real_docs_kb_dir

CRANFIELD = Path(__file__).resolve().parents[2] / "shared" / "collections" / "cranfield"


def documents(count: int) -> list[dict]:
    corpus = CRANFIELD / "corpus.jsonl"
    rows = []
    if corpus.is_file():
        with corpus.open(encoding="utf-8") as lines:
            rows = [json.loads(line) for line in lines]
    docs = []
    for n in range(count):
        row = rows[n % len(rows)] if rows else {}
        docs.append(
            {
                "id": f"d{n}",
                "title": row.get("title") or f"Synthetic note {n}",
                "content": row.get("text") or f"Harbour note {n}: the ferry leaves pier {n % 9}.",
                "year": 1960 + n % 40,
            }
        )
    return docs


def bench_upload(count: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, serve_process(Path(tmp) / "data") as (url, _):
        credential = AzureKeyCredential(KEY)
        SearchIndexClient(url, credential).create_index(
            SearchIndex(
                name="bench",
                fields=[
                    SimpleField(name="id", type="Edm.String", key=True),
                    SearchableField(name="title"),
                    SearchableField(name="content"),
                    SimpleField(name="year", type="Edm.Int32", filterable=True),
                ],
            )
        )
        client = SearchClient(url, "bench", credential)
        docs = documents(count)
        started = time.perf_counter()
        for start in range(0, count, 1000):
            results = client.upload_documents(docs[start : start + 1000])
            assert all(r.succeeded for r in results)
        elapsed = time.perf_counter() - started
        assert client.get_document_count() == count
        print(f"upload: {count} documents in {elapsed:.2f} s = {count / elapsed:.0f} docs/s")
        print(f"        (source: {'Cranfield abstracts' if CRANFIELD.is_dir() else 'synthetic'})")
        print(f"time to retrievable: median {time_to_retrievable(url, client):.1f} ms")


def time_to_retrievable(url: str, client: SearchClient, rounds: int = 20) -> float:
    indexes = SearchIndexClient(url, AzureKeyCredential(KEY))
    indexes.create_or_update_knowledge_source(
        SearchIndexKnowledgeSource(
            name="bench-ks",
            search_index_parameters=SearchIndexKnowledgeSourceParameters(search_index_name="bench"),
        )
    )
    indexes.create_or_update_knowledge_base(
        KnowledgeBase(
            name="bench-kb", knowledge_sources=[KnowledgeSourceReference(name="bench-ks")]
        )
    )
    retriever = KnowledgeBaseRetrievalClient(
        url, AzureKeyCredential(KEY), knowledge_base_name="bench-kb"
    )
    waits = []
    for n in range(rounds):
        word = f"zephyrquill{n}"
        client.upload_documents([{"id": f"fresh{n}", "title": word, "content": f"{word} arrived"}])
        uploaded = time.perf_counter()
        for _ in range(1000):
            request = KnowledgeBaseRetrievalRequest(
                intents=[KnowledgeRetrievalSemanticIntent(search=word)]
            )
            if any(r.doc_key == f"fresh{n}" for r in retriever.retrieve(request).references):
                break
        waits.append((time.perf_counter() - uploaded) * 1000)
    return statistics.median(waits)


def bench_retrieve(requests: int, clients: int) -> None:
    questions = corpus_questions()
    bodies = [
        {
            "intents": [{"search": questions[i % len(questions)]}],
            "retrievalReasoningEffort": {"kind": "minimal"},
        }
        for i in range(requests)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        kb_dir = real_docs_kb_dir(Path(tmp))
        name = json.loads((kb_dir / "knowledge-base.json").read_text())["name"]
        for workers in (1, 2):
            extra = ("--kb", str(kb_dir))
            with serve_process(Path(tmp) / f"data{workers}", workers=workers, extra=extra) as (
                base,
                _,
            ):
                url = f"{base}/knowledgebases/{name}/retrieve?api-version=2026-04-01"
                headers = {"api-key": KEY}
                asyncio.run(load(url, bodies[:40], clients=clients, headers=headers))  # warm-up
                started = time.perf_counter()
                results = asyncio.run(load(url, bodies, clients=clients, headers=headers))
                wall = time.perf_counter() - started
            latencies = sorted(seconds * 1000 for _, _, seconds in results)
            statuses = sorted({status for status, _, _ in results})
            print(
                f"retrieve, --workers {workers}: {len(results) / wall:.1f} req/s, "
                f"p50 {latencies[len(latencies) // 2]:.0f} ms, "
                f"p95 {latencies[int(len(latencies) * 0.95)]:.0f} ms, statuses {statuses}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--documents", type=int, default=5000)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--clients", type=int, default=20)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    bench_upload(args.documents)
    bench_retrieve(args.requests, args.clients)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
