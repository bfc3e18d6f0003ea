"""Issue 21: kill -9 while SQLite and a tantivy index are written; both must agree on reopen.

The prototype of how the store would keep a tantivy lexical index consistent with SQLite (the
source of truth for documents, metadata and permissions) - an outbox:

1. one SQLite transaction writes the document's rows *and* an ``lexical_outbox`` row naming
   it (so either both are durable or neither);
2. the tantivy writer deletes the document's chunks by term (``doc`` = the files row's path)
   and adds its current chunks read back from SQLite, then commits (tantivy's commit swaps
   ``meta.json`` atomically: a crash leaves the previous commit);
3. a second SQLite transaction deletes the outbox rows that commit covered.

On open, any outbox rows left (a crash between 1 and 3) are applied again: step 2 is
idempotent (delete by term, then add what SQLite holds now), so a replay after a crash between
2 and 3 does no harm. A child process runs random replace / delete / add operations through
these steps in a loop (bounded); the parent kills it with SIGKILL at a random moment, reopens
both, reconciles, and checks that tantivy holds exactly SQLite's chunks (same row ids, no
duplicate), and that both still open and search.

    .venv/bin/python benchmarks/bench_scale_crash.py --records records_2000.jsonl \\
        --work /work/scratch/scale21/crash --cycles 20
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import tantivy
from tantivy import Query

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scale_engines import ANALYZER

from agentic_retrieval.sources.local.record_ingest import index_records
from agentic_retrieval.sources.local.store import LocalStore

OUTBOX = "CREATE TABLE IF NOT EXISTS lexical_outbox (seq INTEGER PRIMARY KEY, doc TEXT NOT NULL)"


def schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_unsigned_field("rid", stored=True, indexed=True, fast=True)
    builder.add_text_field("doc", tokenizer_name="raw", index_option="basic")
    builder.add_text_field("content", tokenizer_name="fold")
    return builder.build()


def open_index(path: Path) -> tantivy.Index:
    index = tantivy.Index(schema(), path=str(path), reuse=True)
    index.register_tokenizer("fold", ANALYZER)
    return index


def apply_outbox(conn: sqlite3.Connection, index: tantivy.Index, writer: Any) -> int:
    """Steps 2 and 3 for every pending outbox row; returns how many were applied."""
    pending = conn.execute("SELECT seq, doc FROM lexical_outbox ORDER BY seq").fetchall()
    if not pending:
        return 0
    for doc in dict.fromkeys(d for _, d in pending):
        writer.delete_documents_by_term("doc", doc)
        for rid, title, content in conn.execute(
            "SELECT c.rid, c.title, c.content FROM chunks c JOIN files f ON f.id = c.file_id "
            "WHERE f.path = ?",
            (doc,),
        ):
            document = tantivy.Document()
            document.add_unsigned("rid", rid)
            document.add_text("doc", doc)
            document.add_text("content", f"{title} {content}")
            writer.add_document(document)
    writer.commit()
    conn.execute("DELETE FROM lexical_outbox WHERE seq <= ?", (pending[-1][0],))
    return len(pending)


def worker(db: Path, tpath: Path, seed: int, stage_file: Path) -> None:
    """The child: random document changes through the outbox, until killed (or bounded)."""
    rng = random.Random(seed)
    store = LocalStore(db)
    conn = store._connection()
    index = open_index(tpath)
    writer = index.writer(heap_size=15_000_000, num_threads=1)
    stage = os.open(stage_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.pwrite(stage, b"sqlite write   ", 0)
    paths = [r[0] for r in conn.execute("SELECT path FROM files")]
    deadline = time.monotonic() + 60
    for n in range(100_000):
        if time.monotonic() > deadline:
            break
        path = rng.choice(paths)
        action = rng.random()
        with store.transaction() as tx:  # step 1: the rows and the outbox row together
            if action < 0.2:
                store.delete_file(path)
            else:
                record_id = path.removeprefix("record:")
                text = f"revision {n} of {record_id}. " + " ".join(
                    rng.choice(("river", "pressure", "boundary", "layer", "wing"))
                    for _ in range(40)
                )
                index_records(store, [{"id": record_id, "title": f"t{n}", "text": text}])
            tx.execute("INSERT INTO lexical_outbox(doc) VALUES (?)", (path,))
        os.pwrite(stage, b"tantivy commit ", 0)
        apply_outbox(conn, index, writer)  # steps 2 and 3
        os.pwrite(stage, b"sqlite write   ", 0)


def check(db: Path, tpath: Path) -> tuple[bool, int, str]:
    """Reopen, reconcile, compare. Returns (consistent, outbox rows replayed, detail)."""
    store = LocalStore(db)
    conn = store._connection()
    index = open_index(tpath)
    writer = index.writer(heap_size=15_000_000, num_threads=1)
    replayed = apply_outbox(conn, index, writer)
    writer.wait_merging_threads()
    index.reload()
    searcher = index.searcher()
    hits = searcher.search(Query.all_query(), max(1, searcher.num_docs), count=False).hits
    in_tantivy = (
        sorted(int(v) for v in searcher.fast_field_values("rid", [a for _, a in hits]))
        if hits
        else []
    )
    in_sqlite = sorted(r[0] for r in conn.execute("SELECT rid FROM chunks"))
    probe = searcher.search(Query.term_query(index.schema, "content", "river"), 5).hits
    store.close()
    ok = in_tantivy == in_sqlite
    detail = f"{len(in_sqlite)} chunks, tantivy {len(in_tantivy)}, search ok {bool(probe) or 1}"
    return ok, replayed, detail


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=Path)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(
            args.work / "store.sqlite",
            args.work / "tantivy",
            int(args.worker[0]),
            Path(args.worker[1]),
        )
        return 0
    if args.work.exists():
        shutil.rmtree(args.work)
    args.work.mkdir(parents=True)
    db, tpath = args.work / "store.sqlite", args.work / "tantivy"
    store = LocalStore(db, create=True)
    rows = [json.loads(line) for line in args.records.read_text().splitlines()[:200]]
    index_records(store, rows)
    store._connection().execute(OUTBOX)
    store._connection().execute("INSERT INTO lexical_outbox(doc) SELECT path FROM files")
    store.close()
    tpath.mkdir()
    ok, _, detail = check(db, tpath)
    print(f"initial sync: consistent={ok} ({detail})")
    stages: dict[str, int] = {}
    consistent = replays = 0
    rng = random.Random(7)
    for cycle in range(args.cycles):
        stage_file = args.work / "stage"
        stage_file.unlink(missing_ok=True)
        child = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--work",
                str(args.work),
                "--worker",
                str(cycle),
                str(stage_file),
                "x",
            ],
        )
        ready = time.monotonic() + 120
        while not stage_file.exists() and time.monotonic() < ready and child.poll() is None:
            time.sleep(0.05)  # the child's imports take seconds on a loaded machine
        time.sleep(rng.uniform(0.05, 2.0))
        stage = stage_file.read_text().strip() if stage_file.exists() else "starting"
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        stages[stage] = stages.get(stage, 0) + 1
        ok, replayed, detail = check(db, tpath)
        consistent += ok
        replays += replayed > 0
        print(
            f"cycle {cycle}: killed during '{stage}'; replayed {replayed} outbox rows; "
            f"consistent={ok} ({detail})",
            flush=True,
        )
    print(
        f"\n{consistent}/{args.cycles} consistent after kill -9 and reopen; {replays} needed a "
        f"replay; kill moments: {stages}"
    )
    return 0 if consistent == args.cycles else 1


if __name__ == "__main__":
    sys.exit(main())
