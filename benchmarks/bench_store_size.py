"""Memory, store size and time of one document as a function of its size (issue 19, items 2, 5).

Each case runs in a fresh child process, the way ``docs/index`` runs it: the JSON batch is
parsed, validated (:meth:`IndexDocuments.validate_batch`) and applied to an embedded store,
then the index is searched (``*`` and a word). The child reports its peak RSS above its
baseline, the store's size on disk (database + WAL, before any checkpoint), and the times.
A case the service refuses reports the refusal instead.

    python benchmarks/bench_store_size.py                      # the default cases
    python benchmarks/bench_store_size.py --text 512 1024      # text fields of these KiB
    python benchmarks/bench_store_size.py --values 3000 200000 # collections of these sizes

Text comes from ../shared/collections/cranfield (abstracts joined until the size is
reached) or generated words when it is absent (set ``SHARED_DIR`` when it is elsewhere).
Each child runs under a 6 GiB address-space limit so a quadratic case fails (reported as
``MemoryError``) instead of exhausting the VM.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SHARED = Path(os.environ.get("SHARED_DIR") or Path(__file__).resolve().parents[1] / ".." / "shared")
"""``../shared`` beside the checkout (``SHARED_DIR`` overrides it, e.g. from a worktree)."""
CRANFIELD = SHARED / "collections" / "cranfield"
ADDRESS_LIMIT = 6 * 1024**3
TEXT_KIB = (64, 256, 512, 1024, 4096, 15 * 1024)
VALUES = (1000, 3000, 20_000, 200_000)


def words(size: int) -> str:
    """About ``size`` bytes of real text (Cranfield abstracts) or generated words."""
    corpus = CRANFIELD / "corpus.jsonl"
    if corpus.is_file():
        lines = corpus.read_text(encoding="utf-8").splitlines()
        pool = " ".join(json.loads(line)["text"] for line in lines)
    else:
        pool = " ".join(f"word{n % 5000}" for n in range(200_000))
    repeats = size // len(pool) + 1
    return (pool + " ") * repeats if repeats > 1 else pool


def index_definition(case: str) -> dict[str, Any]:
    fields: list[dict[str, Any]] = [{"name": "id", "type": "Edm.String", "key": True}]
    if case == "filterable":  # Azure's defaults: searchable and filterable
        fields.append({"name": "content", "type": "Edm.String"})
    elif case == "searchable":
        fields.append({"name": "content", "type": "Edm.String", "filterable": False})
    else:
        fields.append({"name": "tags", "type": "Collection(Edm.String)"})
    return {"name": "bench", "fields": fields}


def child(case: str, amount: int) -> dict[str, Any]:
    """One case, in this (fresh) process, in a temporary folder removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="bench-store-size-"))
    try:
        return measure(case, amount, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def measure(case: str, amount: int, folder: Path) -> dict[str, Any]:
    """Upload one document of ``amount`` KiB (or collection values) into ``folder``."""
    from agentic_retrieval.errors import AgenticRetrievalError
    from agentic_retrieval.kb.definitions import IndexDefinition
    from agentic_retrieval.kb.index_documents import IndexDocuments, SearchParameters
    from agentic_retrieval.permissions import Access
    from agentic_retrieval.sources.local import LocalStore
    from agentic_retrieval.sources.local.documents import DocumentStore

    if case == "collection":
        document: dict[str, Any] = {"id": "d", "tags": [f"tag{n:07d}" for n in range(amount)]}
    else:
        document = {"id": "d", "content": words(amount * 1024)[: amount * 1024]}
    body = json.dumps({"value": [document]})
    del document
    store = LocalStore(folder / "bench.sqlite", create=True)
    index = IndexDocuments(
        IndexDefinition.model_validate(index_definition(case)), DocumentStore(store)
    )
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result: dict[str, Any] = {"case": case, "amount": amount, "json_bytes": len(body)}
    started = time.perf_counter()
    try:
        batch = index.validate_batch(json.loads(body)["value"])
        outcome = index.apply(batch)[0]
    except AgenticRetrievalError as exc:
        result["refused"] = f"{type(exc).__name__}: {str(exc)[:160]}"
        return result
    except MemoryError:
        result["refused"] = "MemoryError (address-space limit)"
        return result
    result["upload_s"] = time.perf_counter() - started
    result["status"] = outcome.status_code
    result["store_bytes"] = sum(
        os.path.getsize(p) for p in folder.iterdir() if p.name.startswith("bench.sqlite")
    )
    result["chunks"] = store.count_chunks()
    for name, text in (("browse_s", "*"), ("search_s", "tag0000007 boundary layer")):
        started = time.perf_counter()
        try:
            index.search(SearchParameters(search=text), access=Access(elevated=True))
        except MemoryError:
            result[name] = "MemoryError"
            continue
        result[name] = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result["rss_growth_mib"] = (peak - baseline) / 1024
    return result


def run(case: str, amount: int, timeout: float) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child", case, str(amount)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"case": case, "amount": amount, "refused": f"timed out after {timeout:g} s"}
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["?"])[-1]
        return {"case": case, "amount": amount, "refused": f"exit {done.returncode}: {tail}"}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def show(result: dict[str, Any]) -> str:
    unit = "values" if result["case"] == "collection" else "KiB"
    head = f"{result['case']:<11} {result['amount']:>7} {unit:<6}"
    if "refused" in result:
        return f"{head} refused: {result['refused']}"

    def seconds(key: str) -> str:
        value = result.get(key)
        return f"{value:.3f} s" if isinstance(value, float) else str(value)

    json_bytes, stored = result["json_bytes"], result["store_bytes"]
    return (
        f"{head} json {json_bytes / 2**20:6.2f} MiB  store {stored / 2**20:8.2f} MiB"
        f" ({stored / json_bytes:6.1f}x)  chunks {result['chunks']:>6}"
        f"  RSS +{result['rss_growth_mib']:7.1f} MiB  upload {seconds('upload_s')}"
        f"  search=* {seconds('browse_s')}  search {seconds('search_s')}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", type=int, nargs="*", default=list(TEXT_KIB), help="KiB")
    parser.add_argument("--values", type=int, nargs="*", default=list(VALUES))
    parser.add_argument("--cases", nargs="*", default=["filterable", "searchable"])
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--child", nargs=2, metavar=("CASE", "AMOUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_LIMIT, ADDRESS_LIMIT))
        print(json.dumps(child(args.child[0], int(args.child[1]))))
        return
    for case in args.cases:
        for kib in args.text:
            print(show(run(case, kib, args.timeout)), flush=True)
    for count in args.values:
        print(show(run("collection", count, args.timeout)), flush=True)


if __name__ == "__main__":
    main()
