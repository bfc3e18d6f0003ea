"""What the limits on indexes and knowledge sources protect: file handles and disk per store.

Each index and each file knowledge source of ``serve --data`` is a SQLite store file, and
every thread that searches or writes it opens its own connection (the database and its WAL,
plus the shared-memory file once per process). This starts a real ``agentic-retrieval serve``
child process, creates ``--stores`` indexes (the default limits allow 50 indexes and 50 file
sources: 100 stores), uploads ``--documents`` small documents to each, then searches every
index from ``--clients`` concurrent clients for ``--rounds`` rounds, and reports the server
process's open file descriptors, RSS and the stores' size on disk, before and after.

    .venv/bin/python benchmarks/bench_definition_limits.py [--stores 100] [--clients 16]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from tests.integration.service_process import KEY, VERSION, serve_process

ADMIN = {"api-key": KEY}


def fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def disk_mb(data: Path) -> float:
    return sum(p.stat().st_size for p in (data / "stores").glob("*")) / 1e6


def index_body(name: str) -> dict:
    fields = [
        {"name": "id", "type": "Edm.String", "key": True},
        {"name": "content", "type": "Edm.String"},
    ]
    return {"name": name, "fields": fields}


async def populate(url: str, stores: int, documents: int) -> None:
    async with httpx.AsyncClient(base_url=url, headers=ADMIN, params=VERSION, timeout=60) as c:
        for n in range(stores):
            created = await c.put(f"/indexes/i{n}", json=index_body(f"i{n}"))
            created.raise_for_status()
            batch = [
                {"@search.action": "upload", "id": f"d{d}", "content": f"harbour tram note {d}"}
                for d in range(documents)
            ]
            (await c.post(f"/indexes/i{n}/docs/index", json={"value": batch})).raise_for_status()


async def search_all(url: str, stores: int, clients: int, rounds: int) -> float:
    started = time.perf_counter()
    limit = asyncio.Semaphore(clients)
    async with httpx.AsyncClient(base_url=url, headers=ADMIN, params=VERSION, timeout=60) as c:

        async def one(n: int) -> None:
            async with limit:
                body = {"search": "harbour tram", "top": 5}
                (await c.post(f"/indexes/i{n}/docs/search", json=body)).raise_for_status()

        for _ in range(rounds):
            await asyncio.gather(*(one(n) for n in range(stores)))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", type=int, default=100)
    parser.add_argument("--documents", type=int, default=20)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        extra = ("--max-indexes", str(args.stores))
        with serve_process(data, extra=extra) as (url, process):
            idle = fds(process.pid), rss_mb(process.pid)
            asyncio.run(populate(url, args.stores, args.documents))
            written = fds(process.pid), rss_mb(process.pid), disk_mb(data)
            seconds = asyncio.run(search_all(url, args.stores, args.clients, args.rounds))
            searched = fds(process.pid), rss_mb(process.pid), disk_mb(data)
    per_store = (searched[0] - idle[0]) / args.stores
    print(f"open-file limit of this shell: soft {soft}, hard {hard}")
    print(f"{args.stores} stores x {args.documents} documents, {args.clients} clients")
    print("| state | open fds | RSS MB | stores on disk MB |")
    print("| --- | --- | --- | --- |")
    print(f"| started, no store | {idle[0]} | {idle[1]:.0f} | 0 |")
    print(f"| stores created and written | {written[0]} | {written[1]:.0f} | {written[2]:.1f} |")
    print(
        f"| every store searched ({args.rounds} rounds, {seconds:.1f} s) | {searched[0]} | "
        f"{searched[1]:.0f} | {searched[2]:.1f} |"
    )
    print(
        f"open fds per searched store: {per_store:.1f}; disk per store: "
        f"{searched[2] / args.stores * 1000:.0f} kB"
    )


if __name__ == "__main__":
    main()
