"""Bytes written to disk per indexed MB, and per byte of the final database (issue 19, 21).

Indexing 120k chunks wrote about 3.8 GB for a 224 MB database: every file or record was its
own transaction, and in WAL mode each commit appends every page it touched (FTS5 segments,
b-tree pages) to the WAL, later copied into the database again. Each case here runs in a
fresh child process and reports its own I/O counters from ``/proc/self/io``: ``wchar``
(bytes passed to ``write()``: everything SQLite wrote, WAL, checkpoints and temporary files
included) and ``disk``: ``write_bytes - cancelled_write_bytes``, the page cache the process
dirtied for the disk, less what belonged to temporary files deleted before it was written
back (SQLite's statement journals), measured from
before the store is created to after it is closed (the final checkpoint included), next to
the database's final size and the input's size.

    python benchmarks/bench_store_writes.py                    # folder, records, docs at 30k chunks
    python benchmarks/bench_store_writes.py --chunks 120000    # the issue's scale
    python benchmarks/bench_store_writes.py --corpus cranfield # the other text

Two corpora, built the same way as ``bench_local_store.py`` (files of ten ~1,200-character
chunks, sentences drawn at random): ``earth`` (../shared/data/earth-book, the set the batch
sizes were chosen on) and ``cranfield`` (../shared/collections/cranfield abstracts, not used
for choosing anything). Generated words stand in when ../shared is absent (set
``SHARED_DIR`` when it is elsewhere).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SHARED = Path(os.environ.get("SHARED_DIR") or Path(__file__).resolve().parents[1] / ".." / "shared")
"""``../shared`` beside the checkout (``SHARED_DIR`` overrides it, e.g. from a worktree)."""
CHUNKS_PER_FILE = 10
CASES = ("folder", "records", "docs")


def sentences(corpus: str) -> list[str]:
    """Sentences of 40-400 characters from the chosen corpus."""
    if corpus == "earth" and (SHARED / "data" / "earth-book" / "pages").is_dir():
        pages = sorted((SHARED / "data" / "earth-book" / "pages").glob("*.txt"))
        text = " ".join(p.read_text(encoding="utf-8") for p in pages)
    elif corpus == "cranfield" and (SHARED / "collections" / "cranfield").is_dir():
        lines = (SHARED / "collections" / "cranfield" / "corpus.jsonl").read_text().splitlines()
        text = " ".join(json.loads(line)["text"] for line in lines)
    else:
        rng = random.Random(7)
        text = " ".join(f"word{rng.randrange(5000)}" for _ in range(300_000)) + "."
    found = [s.strip() for s in re.split(r"(?<=[.!?])\s+", " ".join(text.split()))]
    return [s for s in found if 40 <= len(s) <= 400] or [text[:300]]


def documents(corpus: str, chunks: int, seed: int = 1) -> list[tuple[str, str]]:
    """(key, text) pairs of about ``CHUNKS_PER_FILE`` chunks each."""
    pool = sentences(corpus)
    rng = random.Random(seed)
    out = []
    for i in range(max(1, chunks // CHUNKS_PER_FILE)):
        paragraphs = [
            f"Doc{i} part{p}. " + " ".join(rng.choice(pool) for _ in range(4))
            for p in range(CHUNKS_PER_FILE * 2)
        ]
        out.append((f"doc{i:06d}", f"Document {i}\n\n" + "\n\n".join(paragraphs)))
    return out


def io_counters() -> dict[str, int]:
    counters = {}
    for line in Path("/proc/self/io").read_text().splitlines():
        name, _, value = line.partition(":")
        counters[name] = int(value)
    return counters


def child(case: str, corpus: str, chunks: int, work: Path) -> dict[str, Any]:
    """Index one corpus one way into a new store; report I/O, sizes and time."""
    from agentic_retrieval.kb.definitions import parse_index
    from agentic_retrieval.kb.index_documents import IndexDocuments
    from agentic_retrieval.sources.local import LocalStore
    from agentic_retrieval.sources.local.documents import DocumentStore
    from agentic_retrieval.sources.local.ingest import index_paths
    from agentic_retrieval.sources.local.record_ingest import index_records_file

    docs = documents(corpus, chunks)
    input_bytes = sum(len(text.encode()) for _, text in docs)
    source = work / "input"
    source.mkdir()
    if case == "folder":
        for key, text in docs:
            (source / f"{key}.txt").write_text(text, encoding="utf-8")
    elif case == "records":
        with open(source / "records.jsonl", "w", encoding="utf-8") as out:
            for key, text in docs:
                out.write(json.dumps({"id": key, "title": f"Document {key}", "text": text}) + "\n")
    path = work / "store.sqlite"
    before = io_counters()
    started = time.perf_counter()
    store = LocalStore(path, create=True)
    if case == "folder":
        total = index_paths(store, [source]).total_chunks
    elif case == "records":
        total = index_records_file(store, source / "records.jsonl").total_chunks
    else:  # docs/index batches of 1,000 documents, as the SDK sends them
        index = parse_index(
            {
                "name": "bench",
                "fields": [
                    {"name": "id", "type": "Edm.String", "key": True},
                    {"name": "content", "type": "Edm.String", "filterable": False},
                ],
            }
        )
        indexed = IndexDocuments(index, DocumentStore(store))
        for start in range(0, len(docs), 1000):
            batch = [{"id": key, "content": text} for key, text in docs[start : start + 1000]]
            indexed.apply(indexed.validate_batch(batch))
        total = store.count_chunks()
    store.close()
    seconds = time.perf_counter() - started
    after = io_counters()
    database = sum(p.stat().st_size for p in work.glob("store.sqlite*") if p.is_file())
    return {
        "case": case,
        "corpus": corpus,
        "chunks": total,
        "input_bytes": input_bytes,
        "database_bytes": database,
        "wchar": after["wchar"] - before["wchar"],
        "write_bytes": after["write_bytes"] - before["write_bytes"],
        "cancelled": after["cancelled_write_bytes"] - before["cancelled_write_bytes"],
        "seconds": seconds,
    }


def run(case: str, corpus: str, chunks: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-store-writes-"))
    try:
        argv = [sys.executable, __file__, "--child", case, corpus, str(chunks), str(work)]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-2000:])
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def show(r: dict[str, Any]) -> str:
    mb, db, given = 1e6, r["database_bytes"], r["input_bytes"]
    # pages of files deleted before they were written back never reach the disk
    disk, wchar = r["write_bytes"] - r["cancelled"], r["wchar"]
    return (
        f"{r['case']:<8} {r['corpus']:<9} {r['chunks']:>7} chunks"
        f"  input {given / mb:6.1f} MB  database {db / mb:6.1f} MB"
        f"  wchar {wchar / mb:7.1f} MB ({wchar / db:4.1f}x db, {wchar / given:4.1f}/MB)"
        f"  disk {disk / mb:7.1f} MB ({disk / db:4.1f}x db, {disk / given:4.1f}/MB)"
        f"  {r['seconds']:5.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=30_000)
    parser.add_argument("--corpus", choices=("earth", "cranfield"), default="earth")
    parser.add_argument("--cases", nargs="*", choices=CASES, default=list(CASES))
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        case, corpus, chunks, work = args.child
        print(json.dumps(child(case, corpus, int(chunks), Path(work))))
        return
    for case in args.cases:
        print(show(run(case, args.corpus, args.chunks)), flush=True)


if __name__ == "__main__":
    main()
