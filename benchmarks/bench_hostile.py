"""Hostile clients against the REST server on 127.0.0.1: what legitimate clients still get.

Three measurements (figures recorded in benchmarks/README.md):

1. slow connections: N connections (N up to the in-flight cap) trickle a request at one byte
   a second, without a key (headers, or a body), or with one (a body), while a legitimate
   client sends requests; how many it gets answered, and how fast;
2. a maximal-size message: one user message filling the 1 MiB body limit with distinct
   words, at minimal effort (must stay under 1 s);
3. abandoned streams: 40 SSE requests with 50,000-character messages, disconnected after
   their first 300 bytes; how long until ordinary requests are back under 50 ms.

With ``--files`` (issue 19), against a real ``serve --data`` process instead:

4. hostile files: each of tests/office_files.py's hostile files uploaded to a file source;
   its answer, the time to it, and the server process's memory growth (VmHWM) over all;
5. queries during worst-case uploads: 100 queries (search and retrieve, alternating) idle,
   then for 20 s while 8 of the costliest files the server accepts (a 6.5 MB sheet of ~1M
   cells) are uploaded at once; p50/p95 of each.

With ``--fairness`` (issue 27), against a real ``serve --data`` process with query keys:

6. one key trickling: 70 connections from one query key send a retrieve body a byte every
   half second (more than the 64 request slots); meanwhile another query key and the admin
   key each send 20 retrieves: how many are served and how fast, what the slow connections
   got, and what ``/healthz`` says;
7. bodies refused: 60 connections with a query key announce 16 MiB to unknown routes, wrong
   methods and routes the key may not use, wait up to 2 s for an answer, then send the body
   at full speed; the statuses, the time to the answer and the server process's peak memory
   growth (VmHWM).

With ``--batches`` (issue 27), against a real ``serve --data`` process:

8. heavy batches: one ``docs/index`` batch of 450 documents x 3,000 collection values
   (15 MB), then the same documents in 5 batches; the answers, time, the server's peak memory
   (VmHWM) and the store's size on disk over the bodies'; then three clients sending such 5
   batches at once (retrying a 503 after its Retry-After) while ``/healthz`` (event-loop lag)
   and a retrieve on that index are timed.

    .venv/bin/python benchmarks/bench_hostile.py [--sample] [--files] [--fairness] [--batches]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from tests.server_harness import real_docs_kb_dir, running_server

from agentic_retrieval.kb.loader import build_sample_kb, open_knowledge_base
from agentic_retrieval.server import ServerSettings, create_app

KEY = "bench-key"
CAP = 4
QUESTION = {
    "intents": [{"search": "vacation days"}],
    "retrievalReasoningEffort": {"kind": "minimal"},
}


def retrieve_path(name: str) -> str:
    return f"/knowledgebases/{name}/retrieve?api-version=2026-04-01"


def distinct_words(count: int) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = []
    for n in range(count):
        word = ""
        for _ in range(5):
            n, digit = divmod(n, 26)
            word = letters[digit] + word
        words.append(word + "x")
    return words


def message_body(chars: int) -> dict:
    text = " ".join(distinct_words(chars // 7 + 1))[:chars]
    parts = [{"type": "text", "text": text[i : i + 200_000]} for i in range(0, len(text), 200_000)]
    return {
        "messages": [{"role": "user", "content": parts}],
        "retrievalReasoningEffort": {"kind": "minimal"},
    }


async def legit(base: str, name: str, count: int) -> tuple[int, list[float]]:
    async with httpx.AsyncClient(timeout=30, headers={"api-key": KEY}) as http:
        ok, times = 0, []
        for _ in range(count):
            started = time.perf_counter()
            response = await http.post(base + retrieve_path(name), json=QUESTION)
            times.append((time.perf_counter() - started) * 1000)
            ok += response.status_code == 200
        return ok, times


async def trickler(base: str, name: str, kind: str, stop: asyncio.Event) -> str:
    """One slow client; returns how its connection ended."""
    port = int(base.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps(QUESTION).encode()
    head = (
        f"POST {retrieve_path(name)} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        + (f"api-key: {KEY}\r\n" if kind == "keyed body" else "")
        + "\r\n"
    ).encode()
    slow = head if kind == "unkeyed headers" else body
    if kind != "unkeyed headers":
        writer.write(head)
    started = time.monotonic()
    try:
        for byte in slow:
            if stop.is_set():
                return "still open"
            writer.write(bytes([byte]))
            await writer.drain()
            try:
                line = await asyncio.wait_for(reader.readline(), 1.0)
                waited = time.monotonic() - started
                if line:
                    return f"answered {line.split()[1].decode()} after {waited:.1f} s"
                return f"closed after {waited:.1f} s"
            except TimeoutError:
                continue
        return "sent everything"
    except ConnectionError:
        return f"closed after {time.monotonic() - started:.1f} s"
    finally:
        writer.close()


async def slow_connections(base: str, name: str) -> None:
    print(
        f"\n1. slow connections (max in flight {CAP}); 20 legitimate requests while they are open"
    )
    print("   kind              N  served  p50 ms  max ms  what the slow clients got")
    for kind in ("unkeyed headers", "unkeyed body", "keyed body"):
        for n in (0, 1, 2, CAP):
            if n == 0 and kind != "unkeyed headers":
                continue
            stop = asyncio.Event()
            slow = [asyncio.create_task(trickler(base, name, kind, stop)) for _ in range(n)]
            await asyncio.sleep(1.5)  # they are well under way
            ok, times = await legit(base, name, 20)
            stop.set()
            ended = sorted({await task for task in slow})
            label = "(none)" if n == 0 else kind
            print(
                f"   {label:16} {n:2}  {ok:3}/20  {statistics.median(times):6.1f}  "
                f"{max(times):6.1f}  {'; '.join(ended) or '-'}"
            )


async def maximal_message(base: str, name: str, limit: int) -> None:
    body = message_body(limit - 600)  # the JSON around the text fits in the rest
    size = len(json.dumps(body).encode())
    async with httpx.AsyncClient(timeout=60, headers={"api-key": KEY}) as http:
        times = []
        for _ in range(5):
            started = time.perf_counter()
            response = await http.post(base + retrieve_path(name), json=body)
            times.append(time.perf_counter() - started)
            assert response.status_code == 200, response.text[:200]
    print(f"\n2. maximal message: {size} bytes of body ({size / 1024:.0f} KiB), minimal effort")
    print(f"   seconds per request: p50 {statistics.median(times):.3f}  max {max(times):.3f}")


async def abandoned_streams(base: str, name: str) -> None:
    port = int(base.rsplit(":", 1)[1])
    body = json.dumps(message_body(50_000)).encode()
    head = (
        f"POST {retrieve_path(name)} HTTP/1.1\r\nHost: 127.0.0.1\r\napi-key: {KEY}\r\n"
        f"Accept: text/event-stream\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()

    async def abandon() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head + body)
        await writer.drain()
        await reader.read(300)
        writer.close()

    _, baseline = await legit(base, name, 30)
    await asyncio.gather(*(abandon() for _ in range(40)))
    hung_up = time.perf_counter()
    samples = []
    async with httpx.AsyncClient(timeout=60, headers={"api-key": KEY}) as http:
        while time.perf_counter() - hung_up < 3.0:
            started = time.perf_counter()
            await http.post(base + retrieve_path(name), json=QUESTION)
            done = time.perf_counter()
            samples.append((started - hung_up, (done - started) * 1000))
            await asyncio.sleep(0.02)
    print("\n3. abandoned streams: 40 SSE requests of 50,000 characters, dropped after 300 bytes")
    print(
        f"   ordinary requests before: p50 {statistics.median(baseline):.1f} ms, "
        f"p90 {percentile(baseline, 0.9):.1f} ms, max {max(baseline):.1f} ms (30 requests)"
    )
    print("   after the hang-ups, by half-second window: p50 / max ms (requests)")
    for start in (0.0, 0.5, 1.0, 1.5, 2.0, 2.5):
        window = [ms for at, ms in samples if start <= at < start + 0.5]
        if window:
            print(
                f"   {start:.1f}-{start + 0.5:.1f} s: {statistics.median(window):6.1f} / "
                f"{max(window):6.1f}  ({len(window)})"
            )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def hostile_files() -> None:
    import httpx as sync_http
    from tests.integration.service_process import KEY as ADMIN
    from tests.integration.service_process import VERSION, serve_process
    from tests.office_files import (
        big_csv,
        billion_cell_xlsx,
        dense_xlsx,
        docx,
        entity_docx,
        nested_docx,
        nul_docx,
        repetitive_xlsx,
        wide_rows_xlsx,
        zip_bomb_docx,
    )

    files = {
        "zip bomb .docx (1 GiB of XML)": ("bomb.docx", zip_bomb_docx()),
        "NUL-filled .docx (1 GiB)": ("nul.docx", nul_docx()),
        "XML entity bomb .docx": ("laughs.docx", entity_docx()),
        "20,000-deep .docx": ("deep.docx", nested_docx()),
        "billion-cell claim .xlsx": ("claims.xlsx", billion_cell_xlsx()),
        "100k x 10 repetitive .xlsx": ("repetitive.xlsx", repetitive_xlsx()),
        "1,000 rows to column XFD .xlsx": ("wide.xlsx", wide_rows_xlsx()),
        "3M-row CSV": ("rows.csv", big_csv()),
        "~1M-cell dense .xlsx (accepted)": ("dense.xlsx", dense_xlsx()),
    }
    with tempfile.TemporaryDirectory() as tmp, serve_process(Path(tmp) / "data") as (url, proc):
        http = sync_http.Client(
            base_url=url, headers={"api-key": ADMIN}, params=VERSION, timeout=300
        )
        http.put("/knowledgesources('docs')", json={"name": "docs", "kind": "file"})
        _post_file(http, "warm.docx", docx("Warm", "Up."))
        baseline = _memory(proc.pid)
        print("\n4. hostile files uploaded to a file source of serve --data (one at a time)")
        print("   file                               size      status  seconds")
        for label, (name, data) in files.items():
            started = time.perf_counter()
            status = _post_file(http, name, data).status_code
            seconds = time.perf_counter() - started
            print(f"   {label:33} {len(data) / 1e6:6.2f} MB  {status}     {seconds:6.2f}")
        peak = _memory(proc.pid, "VmHWM")
        print(f"   server RSS before {baseline / 2**20:.0f} MiB, peak after {peak / 2**20:.0f} MiB")
        _create_queryable(http)
        idle, loaded = asyncio.run(_queries_during_uploads(url, ADMIN, VERSION, dense_xlsx()))
        print(
            "\n5. queries (search and retrieve alternating) idle and during 8 dense .xlsx uploads"
        )
        for label, times in (("idle", idle), ("during uploads", loaded)):
            # the client waits for each answer, so a stall also hides the queries it delays:
            # the slowest ones say what the percentiles cannot
            print(
                f"   {label:15} n={len(times):4}  p50 {statistics.median(times):6.1f} ms  "
                f"p95 {percentile(times, 0.95):6.1f} ms  p99 {percentile(times, 0.99):6.1f} ms  "
                f"max {max(times):6.1f} ms  over 100 ms: {sum(t > 100 for t in times)}"
            )
        http.close()


def _post_file(http, name: str, data: bytes):
    return http.post(
        "/knowledgesources('docs')/files",
        files={"content": (name, data)},
        data={"metadata": json.dumps({"fileName": name})},
    )


def _memory(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _create_queryable(http) -> None:
    fields = [
        {"name": "id", "type": "Edm.String", "key": True},
        {"name": "content", "type": "Edm.String", "searchable": True},
    ]
    http.put("/indexes('guides')", json={"name": "guides", "fields": fields})
    docs = [
        {"@search.action": "upload", "id": f"d{n}", "content": f"tram {n} runs at night {n}"}
        for n in range(300)
    ]
    http.post("/indexes('guides')/docs/index", json={"value": docs})
    source = {
        "name": "ks",
        "kind": "searchIndex",
        "searchIndexParameters": {"searchIndexName": "guides"},
    }
    http.put("/knowledgesources('ks')", json=source)
    http.put(
        "/knowledgebases('transit')", json={"name": "transit", "knowledgeSources": [{"name": "ks"}]}
    )


async def _queries(http, count: int, seconds: float = 0.0) -> list[float]:
    times, until, n = [], time.monotonic() + seconds, 0
    while n < count or time.monotonic() < until:
        n += 1
        started = time.perf_counter()
        if n % 2:
            body = {
                "intents": [{"type": "semantic", "search": "night tram"}],
                "retrievalReasoningEffort": {"kind": "minimal"},
            }
            response = await http.post("/knowledgebases('transit')/retrieve", json=body)
        else:
            response = await http.post("/indexes('guides')/docs/search", json={"search": "tram"})
        assert response.status_code == 200, response.text[:200]
        times.append((time.perf_counter() - started) * 1000)
    return times


async def _queries_during_uploads(url: str, key: str, version: dict, heavy: bytes):
    headers = {"api-key": key}
    async with httpx.AsyncClient(
        base_url=url, headers=headers, params=version, timeout=300
    ) as http:
        await _queries(http, 20)
        idle = await _queries(http, 100)

        async def upload(n: int) -> int:
            async with httpx.AsyncClient(
                base_url=url, headers=headers, params=version, timeout=300
            ) as uploader:
                return (await _post_file_async(uploader, f"heavy{n}.xlsx", heavy)).status_code

        uploads = [asyncio.ensure_future(upload(n)) for n in range(8)]
        await asyncio.sleep(1.0)
        loaded = await _queries(http, 100, seconds=20.0)
        for task in uploads:
            task.cancel()
        await asyncio.gather(*uploads, return_exceptions=True)
    return idle, loaded


async def _post_file_async(http, name: str, data: bytes):
    return await http.post(
        "/knowledgesources('docs')/files",
        files={"content": (name, data)},
        data={"metadata": json.dumps({"fileName": name})},
    )


FAIR_KEYS = ("hostile-query-key", "other-query-key")
REFUSED = [
    ("POST", "/nothing/docs/index"),
    ("POST", "/knowledgesources/x/files/retrieve"),
    ("PUT", "/knowledgesources/x/files/retrieve"),
    ("POST", "/indexes('guides')/docs/index"),
    ("POST", "/knowledgesources('docs')/files"),
    ("PUT", "/indexes('guides')"),
]


def fairness() -> None:
    import httpx as sync_http
    from tests.integration.service_process import KEY as ADMIN
    from tests.integration.service_process import VERSION, serve_process

    extra = tuple(arg for key in FAIR_KEYS for arg in ("--query-key", key))
    with (
        tempfile.TemporaryDirectory() as tmp,
        serve_process(Path(tmp) / "data", extra=extra) as (url, proc),
    ):
        with sync_http.Client(
            base_url=url, headers={"api-key": ADMIN}, params=VERSION, timeout=60
        ) as http:
            _create_queryable(http)
        port = int(url.rsplit(":", 1)[1])
        print("\n6. 70 connections from one query key trickling retrieve bodies (1 byte / 0.5 s)")
        print("   trickling  caller           served  p50 ms  max ms   /healthz")
        for n in (0, 70):
            asyncio.run(_one_key_trickling(url, port, n, ADMIN))
        before = _memory(proc.pid)
        print("\n7. 60 connections, query key, 16 MiB announced (sent after 2 s without an answer)")
        statuses, waits = asyncio.run(_bodies_refused(port))
        peak = _memory(proc.pid, "VmHWM")
        print(f"   answers: {', '.join(f'{k}: {v}' for k, v in sorted(statuses.items()))}")
        print(f"   seconds to the answer: p50 {statistics.median(waits):.2f}  max {max(waits):.2f}")
        print(f"   server RSS before {before / 2**20:.0f} MiB, peak after {peak / 2**20:.0f} MiB")


async def _one_key_trickling(url: str, port: int, count: int, admin: str) -> None:
    body = json.dumps(QUESTION).encode()
    path = "/knowledgebases('transit')/retrieve?api-version=2026-04-01"
    stop = asyncio.Event()
    got: list[str] = []

    async def trickle() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\napi-key: {FAIR_KEYS[0]}\r\n\r\n".encode()
        )
        try:
            for byte in body[:-1]:
                writer.write(bytes([byte]))
                await writer.drain()
                with contextlib.suppress(TimeoutError):
                    line = await asyncio.wait_for(reader.readline(), 0.5)
                    got.append(line.split()[1].decode() if line else "closed")
                    return
                if stop.is_set():
                    got.append("held")
                    return
        except ConnectionError:
            got.append("reset")
        finally:
            writer.close()

    tasks = [asyncio.ensure_future(trickle()) for _ in range(count)]
    await asyncio.sleep(2.0 if count else 0)
    for caller, key in (("other query key", FAIR_KEYS[1]), ("admin key", admin)):
        async with httpx.AsyncClient(base_url=url, headers={"api-key": key}, timeout=60) as http:
            ok, times = 0, []
            for _ in range(20):
                started = time.perf_counter()
                response = await http.post(path, json=QUESTION)
                times.append((time.perf_counter() - started) * 1000)
                ok += response.status_code == 200
        async with httpx.AsyncClient(timeout=5) as http:
            health = await http.get(f"{url}/healthz")
        figures = health.json().get("requests", {})
        shown = f"{health.status_code} {health.json()['status']}" + (
            f" receiving {figures['receivingBodies']}, at share {figures['callersAtShare']}, "
            f"refused {figures['refused']}"
            if figures
            else ""
        )
        print(
            f"   {count:9}  {caller:15} {ok:3}/20  {statistics.median(times):6.1f}  "
            f"{max(times):6.1f}   {shown}"
        )
    stop.set()
    await asyncio.gather(*tasks)
    if count:
        counts = {what: got.count(what) for what in sorted(set(got))}
        print(f"   the {count} trickling connections got: {counts}")


async def _bodies_refused(port: int) -> tuple[dict[str, int], list[float]]:
    chunk = b" " * (1024 * 1024)

    async def one(method: str, path: str) -> tuple[str, float]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        started = time.perf_counter()
        writer.write(
            f"{method} {path}?api-version=2026-04-01 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {16 * 1024 * 1024}\r\n"
            f"api-key: {FAIR_KEYS[0]}\r\n\r\n".encode()
        )
        answer = asyncio.ensure_future(reader.readline())
        answered: list[float] = []  # when the status line arrived, not when sending ended
        answer.add_done_callback(lambda _: answered.append(time.perf_counter() - started))
        try:
            await asyncio.wait({answer}, timeout=2.0)  # an answer from the headers comes now
            with contextlib.suppress(ConnectionError, TimeoutError):
                for _ in range(16):
                    if answer.done():
                        break
                    writer.write(chunk)
                    await asyncio.wait_for(writer.drain(), 30)
            line = await asyncio.wait_for(answer, 60)
            return (line.split()[1].decode() if line else "closed"), answered[0]
        except (ConnectionError, TimeoutError):
            return "reset", time.perf_counter() - started
        finally:
            answer.cancel()
            writer.close()

    results = await asyncio.gather(*(one(*REFUSED[n % len(REFUSED)]) for n in range(60)))
    statuses: dict[str, int] = {}
    for status, _ in results:
        statuses[status] = statuses.get(status, 0) + 1
    return statuses, [seconds for _, seconds in results]


HEAVY_INDEX = {
    "name": "heavy",
    "fields": [
        {"name": "id", "type": "Edm.String", "key": True},
        {"name": "content", "type": "Edm.String"},
        {"name": "tags", "type": "Collection(Edm.String)"},
    ],
}
HEAVY_DOCUMENTS = 450
PARTS = 5
"""The heavy batch's documents are also sent as 5 batches of 90 (270,000 values each)."""


def heavy_batch(batch: int, documents: range = range(HEAVY_DOCUMENTS), values: int = 3000) -> bytes:
    """A ``docs/index`` body of ``documents`` x ``values`` collection values (450: 15 MB)."""
    docs = [
        {
            "@search.action": "upload",
            "id": f"b{batch}d{n}",
            "content": f"night tram timetable {n}",
            "tags": [f"{n:03d}{v:04d}" for v in range(values)],
        }
        for n in documents
    ]
    return json.dumps({"value": docs}).encode()


def split_batches(batch: int) -> list[bytes]:
    size = HEAVY_DOCUMENTS // PARTS
    return [heavy_batch(batch, range(p * size, (p + 1) * size)) for p in range(PARTS)]


def _disk(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def heavy_batches() -> None:
    import httpx as sync_http
    from tests.integration.service_process import KEY as ADMIN
    from tests.integration.service_process import VERSION, serve_process

    with tempfile.TemporaryDirectory() as tmp, serve_process(Path(tmp) / "data") as (url, proc):
        data = Path(tmp) / "data"
        http = sync_http.Client(
            base_url=url, headers={"api-key": ADMIN}, params=VERSION, timeout=900
        )
        http.put("/indexes('heavy')", json=HEAVY_INDEX).raise_for_status()
        source = {"name": "hs", "kind": "searchIndex"}
        source["searchIndexParameters"] = {"searchIndexName": "heavy"}
        http.put("/knowledgesources('hs')", json=source).raise_for_status()
        kb = {"name": "hkb", "knowledgeSources": [{"name": "hs"}]}
        http.put("/knowledgebases('hkb')", json=kb).raise_for_status()
        small = {"value": [{"@search.action": "upload", "id": "w", "content": "night tram"}]}
        http.post("/indexes('heavy')/docs/index", json=small).raise_for_status()
        print("\n8. heavy batches: 450 documents x 3,000 collection values each")
        for label, bodies in (("one batch", [heavy_batch(0)]), ("5 batches", split_batches(9))):
            before, baseline = _disk(data), _memory(proc.pid)
            started = time.perf_counter()
            statuses = [
                http.post(
                    "/indexes('heavy')/docs/index",
                    content=body,
                    headers={"content-type": "application/json"},
                ).status_code
                for body in bodies
            ]
            seconds = time.perf_counter() - started
            stored = _disk(data) - before
            size = sum(len(b) for b in bodies)
            print(
                f"   {label}: {size / 1e6:.1f} MB -> {statuses} in {seconds:.1f} s; "
                f"RSS {baseline / 2**20:.0f} -> peak {_memory(proc.pid, 'VmHWM') / 2**20:.0f} "
                f"MiB; stored {stored / 1e6:.1f} MB ({stored / size:.1f}x the body)"
            )
        lags, retrieves, statuses, seconds = asyncio.run(_during_batches(url, ADMIN, VERSION))
        print(
            f"   three clients at once, 5 batches each: {seconds:.1f} s, answers "
            f"{dict(sorted(statuses.items()))} (503s retried after Retry-After)"
        )
        for label, times in (("/healthz (loop lag)", lags), ("retrieve", retrieves)):
            print(
                f"   {label:19} n={len(times):4}  p50 {statistics.median(times):7.1f} ms  "
                f"p95 {percentile(times, 0.95):7.1f} ms  max {max(times):7.1f} ms"
            )
        http.close()


async def _during_batches(url: str, key: str, version: dict):
    headers = {"api-key": key, "content-type": "application/json"}
    statuses: dict[int, int] = {}
    async with httpx.AsyncClient(
        base_url=url, headers=headers, params=version, timeout=900
    ) as http:

        async def client(batch: int) -> None:
            for body in split_batches(batch):
                while True:
                    response = await http.post("/indexes('heavy')/docs/index", content=body)
                    statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
                    if response.status_code != 503:
                        break
                    await asyncio.sleep(float(response.headers.get("retry-after", "1")))

        async def timed(path: str, body: dict | None) -> float:
            started = time.perf_counter()
            if body is None:
                response = await http.get(path)
            else:
                response = await http.post(path, json=body)
            # /healthz says 503 "starved" while the loop lags: its time is the measure
            assert response.status_code < 300 or body is None, response.text[:200]
            return (time.perf_counter() - started) * 1000

        question = {
            "intents": [{"type": "semantic", "search": "night tram"}],
            "retrievalReasoningEffort": {"kind": "minimal"},
        }
        started = time.perf_counter()
        clients = [asyncio.ensure_future(client(n)) for n in (1, 2, 3)]
        lags: list[float] = []
        retrieves: list[float] = []

        async def probe_loop() -> None:
            while not all(c.done() for c in clients):
                lags.append(await timed("/healthz", None))
                await asyncio.sleep(0.05)

        async def retrieve_loop() -> None:
            while not all(c.done() for c in clients):
                retrieves.append(await timed("/knowledgebases('hkb')/retrieve", question))

        await asyncio.gather(probe_loop(), retrieve_loop(), *clients)
    return lags, retrieves, statuses, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sample", action="store_true", help="the bundled sample corpus")
    parser.add_argument("--files", action="store_true", help="hostile files (serve --data)")
    parser.add_argument("--fairness", action="store_true", help="one key's share (serve --data)")
    parser.add_argument("--batches", action="store_true", help="heavy docs/index batches")
    args = parser.parse_args()
    print(
        f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
        f"on {os.cpu_count()} CPUs"
    )
    if args.batches:
        heavy_batches()
        print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return
    if args.fairness:
        fairness()
        print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return
    if args.files:
        hostile_files()
        print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = (
            build_sample_kb(Path(tmp) / "kb").path if args.sample else real_docs_kb_dir(Path(tmp))
        )
        kb = open_knowledge_base(path)
        settings = ServerSettings(api_keys=[KEY], read_env_keys=False, max_in_flight=CAP)
        app = create_app(kb, settings=settings)
        with running_server(app) as base:
            asyncio.run(legit(base, kb.name, 10))  # warm-up
            asyncio.run(slow_connections(base, kb.name))
            asyncio.run(maximal_message(base, kb.name, settings.max_body_bytes))
        # a server with the default cap (64) for the 40 streams
        app = create_app(kb, settings=ServerSettings(api_keys=[KEY], read_env_keys=False))
        with running_server(app) as base:
            asyncio.run(legit(base, kb.name, 10))
            asyncio.run(abandoned_streams(base, kb.name))
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
