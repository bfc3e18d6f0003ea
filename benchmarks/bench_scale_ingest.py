"""Issue 21: streaming ingestion and bounded writes, prototyped outside ``src``.

Today ``index_records_file`` reads the whole records file into a list before indexing
(``items = list(read_records(...))``: peak RSS grows with the file), and every record is
written in its own transaction (``replace_file``: ``BEGIN IMMEDIATE`` ... ``COMMIT``). In WAL
mode each commit appends every page it touched to the WAL - the chunks' b-tree leaves, a new
FTS5 level-0 segment (FTS5 flushes its pending terms at every commit, and then merges the
small segments again and again), the ``files``, ``fields`` and ``meta`` pages - and each
checkpoint copies them into the database once more: bytes written are many times the final
database.

Each variant runs in a child process (peak RSS and bytes written from ``wait4``) on the same
records file, into a new store, with the library's own indexer (``_Indexer``):

- ``today``: ``index_records_file`` as the CLI runs it;
- ``stream``: the records read lazily (``read_records`` is already a generator; only the
  ``list()`` goes), one transaction per record as today;
- ``stream + txn N``: also one transaction per N records (``LocalStore.transaction()``: each
  record still a savepoint, so a failing record is undone alone);
- ``... + cache``: also a 64 MB page cache (``PRAGMA cache_size``) so a batch's pages are
  written once;
- ``... + nofts``: without the FTS5 triggers - the SQLite part of a store whose lexical index
  is tantivy (whose own writes are measured by ``bench_scale_engines.py``).

    .venv/bin/python benchmarks/bench_scale_ingest.py --records records_120000.jsonl \\
        --work /work/scratch/scale21/ingest
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from agentic_retrieval.sources.local import record_ingest
    from agentic_retrieval.sources.local.records import RecordFields, read_records
    from agentic_retrieval.sources.local.store import LocalStore

    records, db, mode = sys.argv[1:4]
    batch, cache, nofts = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6] == "1"
    store = LocalStore(db, create=True)
    if nofts:  # the SQLite part of a store whose lexical index lives elsewhere (tantivy)
        for trigger in ("chunks_ai", "chunks_ad", "chunks_au"):
            store._connection().execute(f"DROP TRIGGER {trigger}")
    if cache:
        store._connection().execute(f"PRAGMA cache_size = -{cache * 1024}")
    if mode == "today":
        record_ingest.index_records_file(store, records)
    else:
        origin = str(Path(records).resolve())
        indexer = record_ingest._Indexer(store, None, None, None, 1200, 200, None)
        if batch > 1:
            record_ingest.EMBED_BATCH = batch
            write = indexer._write

            def batched(items, report):
                with store.transaction():  # one commit per batch; each record a savepoint
                    write(items, report)

            indexer._write = batched
        with store.exclusive_writer():
            # a generator, not a list: run() only needs len() for the progress callback
            report = indexer.run(read_records(origin, RecordFields()), None, origin=origin)
        assert not report.failed, report.failed[:3]
    print(store.count_chunks())
    """
)


def run_child(
    records: Path, db: Path, mode: str, batch: int, cache_mb: int, nofts: bool
) -> dict[str, float]:
    for suffix in ("", "-wal", "-shm", ".lock"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    command = [
        "nice",
        "-n",
        "10",
        sys.executable,
        "-c",
        CHILD,
        str(records),
        str(db),
        mode,
        str(batch),
        str(cache_mb),
        "1" if nofts else "0",
    ]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    out = process.stdout.read().decode() if process.stdout else ""
    err = process.stderr.read().decode() if process.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(err[-2000:])
    return {
        "chunks": int(out.split()[-1]),
        "wall_s": time.perf_counter() - started,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "rss_mb": usage.ru_maxrss / 1024,
        "written_mb": usage.ru_oublock * 512 / 1e6,
        "db_mb": db.stat().st_size / 1e6,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument(
        "--variants",
        default="today,stream,stream+txn64,stream+txn1024,stream+txn1024+cache",
    )
    args = parser.parse_args()
    if args.work.exists():
        shutil.rmtree(args.work)
    args.work.mkdir(parents=True)
    print(
        f"{args.records.name} ({args.records.stat().st_size / 1e6:,.0f} MB); "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(
        "| variant | chunks | CPU s | chunks per CPU-s | wall s | peak RSS MB | written MB "
        "| database MB | written / database |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for variant in args.variants.split(","):
        mode = "today" if variant == "today" else "stream"
        batch = int(variant.split("txn")[1].split("+")[0]) if "txn" in variant else 1
        cache = 64 if "+cache" in variant else 0
        nofts = "+nofts" in variant
        r = run_child(args.records, args.work / f"{variant}.sqlite", mode, batch, cache, nofts)
        print(
            f"| {variant} | {r['chunks']:,} | {r['cpu_s']:.0f} | {r['chunks'] / r['cpu_s']:,.0f} "
            f"| {r['wall_s']:.0f} | {r['rss_mb']:,.0f} | {r['written_mb']:,.0f} "
            f"| {r['db_mb']:,.0f} | {r['written_mb'] / r['db_mb']:.1f}x |",
            flush=True,
        )
        (args.work / f"{variant}.sqlite").unlink()
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
