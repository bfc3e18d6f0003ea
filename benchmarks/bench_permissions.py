"""Benchmark permission trimming: a minimal retrieve as a caller in 20 of 1,000 groups, against
the same query on the same corpus without permissions, at 100k+ chunks, in one run.

The corpus is the one of ``bench_local_store.py`` (NASA Earth-book sentences resampled per
document, generated text when ../shared/data is absent), ingested as 10,000 records of about
12 chunks each through ``add_documents``, twice: once with permissions (each document allowed
to 2 of 1,000 groups drawn at random, 2% public) and once without any. The caller's 20 groups
are drawn from the same 1,000, so they see about 6% of the documents. Both knowledge bases run
the same questions, alternately (so machine load falls on both alike); the trimmed runs
enforce permissions.

    python benchmarks/bench_permissions.py               # 10,000 documents (~122k chunks)
    python benchmarks/bench_permissions.py --documents 1000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_local_store import percentile, queries, source_sentences

from agentic_retrieval import Context, KnowledgeBase
from agentic_retrieval.permissions import Access, Identity
from agentic_retrieval.sources.local import LocalKnowledgeSource

GROUPS = 1000
GROUPS_PER_DOCUMENT = 2
CALLER_GROUPS = 20
PUBLIC_SHARE = 0.02
PARAGRAPHS = 20
QUERY_COUNT = 200
TARGET_RATIO = 1.3


def records(count: int, sentences: list[str], seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        paragraphs = [
            f"Doc{i} part{p}. " + " ".join(rng.choice(sentences) for _ in range(4))
            for p in range(PARAGRAPHS)
        ]
        groups = (
            ["all"]
            if rng.random() < PUBLIC_SHARE
            else rng.sample([f"group-{g:04d}" for g in range(GROUPS)], GROUPS_PER_DOCUMENT)
        )
        out.append(
            {"id": f"doc-{i:06d}", "title": f"Document {i}", "text": "\n\n".join(paragraphs),
             "groups": groups}
        )  # fmt: skip
    return out


def build(path: Path, docs: list[dict], *, permissions: bool) -> tuple[LocalKnowledgeSource, float]:
    source = LocalKnowledgeSource(path.stem, path, create=True)
    started = time.perf_counter()
    with source.store.transaction():  # one commit for the whole load
        if permissions:
            report = source.add_documents(docs, group_ids_field="groups")
        else:
            report = source.add_documents(
                [{k: v for k, v in d.items() if k != "groups"} for d in docs]
            )
    assert report.ok, report.failed[:3]
    return source, time.perf_counter() - started


async def measure(
    trimmed: LocalKnowledgeSource, open_: LocalKnowledgeSource, texts: list[str], caller: Identity
) -> dict[str, list[float]]:
    secure = KnowledgeBase([trimmed], defaults=Context(reasoning_effort="minimal"),
                           enforce_permissions=True)  # fmt: skip
    plain = KnowledgeBase([open_], defaults=Context(reasoning_effort="minimal"))
    times: dict[str, list[float]] = {"trimmed": [], "untrimmed": [], "visible": []}
    for text in texts[:5]:  # warm both: SQLite page cache, summaries, graph
        await secure.aretrieve({"intents": [{"search": text}]}, identity=caller)
        await plain.aretrieve({"intents": [{"search": text}]})
    for n, text in enumerate(texts):
        request = {"intents": [{"search": text}]}
        order = [("trimmed", secure, caller), ("untrimmed", plain, None)]
        for name, kb, identity in order if n % 2 == 0 else order[::-1]:
            t0 = time.perf_counter()
            response = await kb.aretrieve(request, identity=identity)
            times[name].append((time.perf_counter() - t0) * 1000)
            assert response.status_code == 200, response.activity
            if name == "trimmed":
                times["visible"].append(len(response.references))
    return times


def store_times(source: LocalKnowledgeSource, texts: list[str], access: Access) -> list[float]:
    out = []
    for text in texts:
        t0 = time.perf_counter()
        source.store.search(text, top=50, access=access)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=10_000)
    args = parser.parse_args()
    sentences = source_sentences()
    rng = random.Random(3)
    caller = Identity(
        user_id="bench-user",
        groups=tuple(rng.sample([f"group-{g:04d}" for g in range(GROUPS)], CALLER_GROUPS)),
    )
    print(
        f"# {platform.platform()}, Python {platform.python_version()}, SQLite "
        f"{sqlite3.sqlite_version}, load average {os.getloadavg()[0]:.1f} at start"
    )
    docs = records(args.documents, sentences)
    texts = queries(sentences, QUERY_COUNT)
    with tempfile.TemporaryDirectory(prefix="bench-permissions-") as tmp:
        trimmed, trimmed_s = build(Path(tmp) / "trimmed.sqlite", docs, permissions=True)
        open_, open_s = build(Path(tmp) / "open.sqlite", docs, permissions=False)
        chunks = trimmed.store.count_chunks()
        visible_docs = sum(
            1 for d in docs if d["groups"] == ["all"] or set(d["groups"]) & set(caller.groups)
        )
        times = asyncio.run(measure(trimmed, open_, texts, caller))
        store_trimmed = store_times(trimmed, texts, Access(caller, enforce=True))
        store_open = store_times(open_, texts, Access())
        trimmed.close()
        open_.close()
    p50 = {k: statistics.median(v) for k, v in times.items()}
    ratio = p50["trimmed"] / p50["untrimmed"]
    print(f"chunks: {chunks} per store; documents: {len(docs)}; groups: {GROUPS}, "
          f"{GROUPS_PER_DOCUMENT} per document, {PUBLIC_SHARE:.0%} public")  # fmt: skip
    print(f"caller: {CALLER_GROUPS} groups; may see {visible_docs} documents "
          f"({visible_docs / len(docs):.1%})")  # fmt: skip
    print(f"ingestion: {trimmed_s:.1f} s with permissions, {open_s:.1f} s without")
    print("| query | p50 ms | p95 ms |")
    print("|---|---|---|")
    for name in ("trimmed", "untrimmed"):
        print(f"| minimal retrieve, {name} | {p50[name]:.2f} | {percentile(times[name], 95):.2f} |")
    print(f"| store query (top 50), trimmed | {statistics.median(store_trimmed):.2f} | "
          f"{percentile(store_trimmed, 95):.2f} |")  # fmt: skip
    print(f"| store query (top 50), untrimmed | {statistics.median(store_open):.2f} | "
          f"{percentile(store_open, 95):.2f} |")  # fmt: skip
    print(f"references per trimmed answer: median {statistics.median(times['visible']):.0f}")
    verdict = "within" if ratio <= TARGET_RATIO else "OVER"
    print(f"trimmed / untrimmed p50: {ratio:.2f}x ({verdict} the {TARGET_RATIO}x target); "
          f"load average {os.getloadavg()[0]:.1f} at the end")  # fmt: skip


if __name__ == "__main__":
    main()
