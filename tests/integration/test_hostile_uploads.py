"""Hostile and worst-case uploads against a real ``serve --data`` process (issue 19).

- every hostile file (zip bombs, a NUL-filled package, an XML entity bomb, deep nesting,
  sheets claiming billions of cells, a CSV of 3 million rows) is refused or bounded, and the
  server process's memory grows by less than 300 MB over all of them;
- query traffic keeps its pace while eight of the costliest files the server accepts are
  uploaded at once (p95 within 3x of idle, both measured in this run);
- a client hanging up mid-conversion kills the conversion's child process.

Memory is the server process's own (``/proc/PID/status``): conversions run in children,
which is the point.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import signal
import statistics
import time
from pathlib import Path

import httpx
import pytest
from tests.integration.service_process import KEY, VERSION, memory_of, serve_process
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
    xlsx,
    zip_bomb_docx,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

HOSTILE = {
    "bomb.docx": (zip_bomb_docx, 413),
    "nul.docx": (nul_docx, 413),
    "laughs.docx": (entity_docx, 400),
    "deep.docx": (nested_docx, 413),
    "claims.xlsx": (billion_cell_xlsx, 201),  # bounded: the two cells it has
    "repetitive.xlsx": (repetitive_xlsx, 413),
    "wide.xlsx": (wide_rows_xlsx, 413),
    "rows.csv": (big_csv, 413),
}
RSS_GROWTH_LIMIT = 300 * 1024 * 1024


def children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def conversion_children(server_pid: int) -> list[int]:
    """Processes forked by the server's zygote (its conversions)."""
    return [child for zygote in children_of(server_pid) for child in children_of(zygote)]


def upload(http: httpx.Client, name: str, data: bytes) -> httpx.Response:
    return http.post(
        "/knowledgesources('docs')/files",
        files={"content": (name, data)},
        data={"metadata": json.dumps({"fileName": name})},
    )


def create_file_source(http: httpx.Client) -> None:
    response = http.put("/knowledgesources('docs')", json={"name": "docs", "kind": "file"})
    assert response.status_code in (200, 201), response.text


@pytest.fixture
def service(tmp_path):
    # lexical: these tests bound conversion. Uploads no longer wait for the model (their
    # chunks are embedded after the 201), and the four pass on the default server too, but
    # it loads the model at each start: 274 s against 173 s here (load 8-9), for nothing
    # these tests check
    with serve_process(tmp_path / "data", extra=("--no-embeddings",)) as (url, process):
        with httpx.Client(
            base_url=url, headers={"api-key": KEY}, params=VERSION, timeout=120
        ) as http:
            create_file_source(http)
            # the zygote starts, and the server has served an upload of each kind once
            assert upload(http, "warm.docx", docx("Warm", "Up.")).status_code == 201
            assert upload(http, "warm.xlsx", xlsx("Warm", [["a"], [1]])).status_code == 201
            yield url, process, http


def test_hostile_files_are_refused_or_bounded_and_the_server_stays_small(service):
    _, process, http = service
    baseline = memory_of(process.pid)["VmRSS"]
    outcomes = {}
    for name, (build, _) in HOSTILE.items():
        data = build()
        started = time.monotonic()
        response = upload(http, name, data)
        outcomes[name] = (response.status_code, time.monotonic() - started, response.text)
    assert {name: status for name, (status, _, _) in outcomes.items()} == {
        name: expected for name, (_, expected) in HOSTILE.items()
    }, outcomes
    assert all(seconds < 60 for _, seconds, _ in outcomes.values()), outcomes
    assert "limit zip_member_mb=128" in outcomes["bomb.docx"][2]
    assert "declares a DTD" in outcomes["laughs.docx"][2]
    assert "limit rows=100000" in outcomes["rows.csv"][2]
    peak = memory_of(process.pid)["VmHWM"]
    assert peak - baseline < RSS_GROWTH_LIMIT, (baseline, peak)
    assert http.get("/healthz").status_code == 200
    deadline = time.monotonic() + 10  # a child killed at a limit may still be exiting
    while conversion_children(process.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert conversion_children(process.pid) == []


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def query_times(url: str, count: int, seconds: float = 0.0) -> list[float]:
    """Seconds per query (``count`` of them, and for ``seconds`` at least): a search of the
    index, then a retrieve through the knowledge base."""
    times: list[float] = []
    until = time.monotonic() + seconds
    async with httpx.AsyncClient(
        base_url=url, headers={"api-key": KEY}, params=VERSION, timeout=60
    ) as http:
        n = 0
        while n < count or time.monotonic() < until:
            n += 1
            started = time.perf_counter()
            if n % 2:
                response = await http.post(
                    "/knowledgebases('transit')/retrieve",
                    json={
                        "intents": [{"type": "semantic", "search": "night tram"}],
                        "retrievalReasoningEffort": {"kind": "minimal"},
                    },
                )
            else:
                response = await http.post(
                    "/indexes('guides')/docs/search", json={"search": "tram", "top": 5}
                )
            assert response.status_code == 200, response.text
            times.append(time.perf_counter() - started)
    return times


def create_queryable(http: httpx.Client) -> None:
    fields = [
        {"name": "id", "type": "Edm.String", "key": True},
        {"name": "content", "type": "Edm.String", "searchable": True},
    ]
    assert http.put("/indexes('guides')", json={"name": "guides", "fields": fields}).is_success
    documents = [
        {"@search.action": "upload", "id": f"d{n}", "content": f"tram {n} runs at night {n}"}
        for n in range(300)
    ]
    assert http.post("/indexes('guides')/docs/index", json={"value": documents}).is_success
    source = {
        "name": "guides-ks",
        "kind": "searchIndex",
        "searchIndexParameters": {"searchIndexName": "guides"},
    }
    assert http.put("/knowledgesources('guides-ks')", json=source).is_success
    base = {"name": "transit", "knowledgeSources": [{"name": "guides-ks"}]}
    assert http.put("/knowledgebases('transit')", json=base).is_success


async def uploading(url: str, data: bytes, name: str) -> int:
    async with httpx.AsyncClient(
        base_url=url, headers={"api-key": KEY}, params=VERSION, timeout=120
    ) as http:
        response = await http.post(
            "/knowledgesources('docs')/files",
            files={"content": (name, data)},
            data={"metadata": json.dumps({"fileName": name})},
        )
        return response.status_code


def test_queries_keep_their_pace_during_eight_worst_case_uploads(service):
    url, process, http = service
    create_queryable(http)
    heavy = dense_xlsx(99_000, 10)  # accepted: ~1M cells, seconds to convert, 9 MB of text

    async def measure() -> tuple[list[float], list[float], list[int | BaseException]]:
        await query_times(url, 20)  # warm
        idle = await query_times(url, 80)
        uploads = [asyncio.ensure_future(uploading(url, heavy, f"heavy{n}.xlsx")) for n in range(8)]
        await asyncio.sleep(1.0)  # under way: converting, queued, then written
        # long enough for conversions and the store writes of the first uploads
        loaded = await query_times(url, 80, seconds=15.0)
        for task in uploads:
            task.cancel()  # the clients hang up: their conversions are killed
        outcomes = await asyncio.gather(*uploads, return_exceptions=True)
        after = await query_times(url, 80)  # idle again: the machine's own drift, measured
        return idle + after, loaded, outcomes

    idle, loaded, outcomes = asyncio.run(measure())
    # idle p95: the slower of the windows before and after the uploads (the shared machine's
    # load changes over the minute the test takes, the uploads' effect does not hide in it)
    idle_p95 = max(percentile(idle[:80], 0.95), percentile(idle[80:], 0.95))
    loaded_p95 = percentile(loaded, 0.95)
    summary = (
        f"idle p50 {statistics.median(idle) * 1000:.1f} ms p95 {idle_p95 * 1000:.1f} ms; "
        f"loaded p50 {statistics.median(loaded) * 1000:.1f} ms p95 {loaded_p95 * 1000:.1f} ms; "
        f"uploads {outcomes}"
    )
    print(summary)  # (pytest -s shows it)
    assert loaded_p95 <= 3 * idle_p95, summary
    deadline = time.monotonic() + 15
    while conversion_children(process.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert conversion_children(process.pid) == [], summary


def test_a_client_hanging_up_mid_conversion_kills_its_child(service):
    url, process, _ = service
    heavy = dense_xlsx(99_000, 10)

    async def hang_up() -> list[int]:
        task = asyncio.ensure_future(uploading(url, heavy, "abandoned.xlsx"))
        deadline = time.monotonic() + 30
        while not conversion_children(process.pid):
            assert time.monotonic() < deadline, "no conversion started"
            await asyncio.sleep(0.05)
        converting = conversion_children(process.pid)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return converting

    converting = asyncio.run(hang_up())
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in converting):
        assert time.monotonic() < deadline, f"conversion {converting} outlived its client"
        time.sleep(0.05)
    with httpx.Client(base_url=url, headers={"api-key": KEY}, params=VERSION) as http:
        listed = http.get("/knowledgesources('docs')/files").json()["value"]
    assert "abandoned.xlsx" not in [f["fileName"] for f in listed]


def test_a_conversion_killed_from_outside_is_a_503_to_retry_not_a_413(service):
    """The OOM killer (or an operator) killing a conversion says nothing against the file:
    503 with Retry-After, and the same upload then succeeds (issue 27). It answered 413, the
    answer of a file past a limit, which a client does not retry."""
    _, process, http = service
    data = dense_xlsx()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        answer = pool.submit(upload, http, "dense.xlsx", data)
        killed = None
        deadline = time.monotonic() + 60
        while killed is None and not answer.done() and time.monotonic() < deadline:
            for child in conversion_children(process.pid):
                # the process converting: the child's worker, or the child before it has one
                converting = children_of(child) or [child]
                with contextlib.suppress(ProcessLookupError):
                    os.kill(converting[0], signal.SIGKILL)
                    killed = converting[0]
                break
            time.sleep(0.02)
        response = answer.result()
    assert killed is not None, "the conversion ended before it could be killed"
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "5"
    message = response.json()["error"]["message"]
    assert "converting 'dense.xlsx' was interrupted" in message and "retry the upload" in message
    assert upload(http, "dense.xlsx", data).status_code == 201
