"""Conversion in a child process: bounded in time and memory, killed on cancel, pooled.

The slow file is a real one: a sheet of a million cells, converted with the row, cell and
ratio limits raised out of its way, so only the time, memory or a cancellation stops it.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.office_files import docx, repetitive_xlsx, zip_bomb_docx

from agentic_retrieval.errors import ConversionLimitError, LoaderError
from agentic_retrieval.kb.service import ServiceDirectory
from agentic_retrieval.server import ServerSettings, create_app
from agentic_retrieval.server.conversions import ConversionPool
from agentic_retrieval.server.errors import ApiError
from agentic_retrieval.sources.local import chunking
from agentic_retrieval.sources.local.chunking import DEFAULT_CHUNK_SIZE, DEFAULT_OVERLAP
from agentic_retrieval.sources.local.conversion import ChildConversion, convert_in_child
from agentic_retrieval.sources.local.conversion_limits import ConversionLimits
from agentic_retrieval.sources.local.loaders import load_file

pytestmark = pytest.mark.timeout(120)

ROOMY = ConversionLimits(zip_ratio=10_000, rows=10**7, cells=10**8, text_chars=10**9)


@pytest.fixture(scope="module")
def slow_sheet() -> bytes:
    return repetitive_xlsx(300_000, 10)  # 3 million cells: seconds of work in any child


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_until(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_a_child_converts_as_the_caller_would():
    data = docx("Parking rules", "Park and ride costs 4 dollars.")
    assert convert_in_child("guide.docx", data, ConversionLimits()) == load_file(
        Path("guide.docx"), data
    )
    with pytest.raises(ConversionLimitError) as caught:
        convert_in_child("bomb.docx", zip_bomb_docx(256), ConversionLimits())
    assert caught.value.limit == "zip_member_mb"
    with pytest.raises(LoaderError, match="unreadable PDF"):
        convert_in_child("broken.pdf", b"%PDF-1.4 not really", ConversionLimits())


def upload_to_a_new_file_source(http: TestClient, name: str, data: bytes) -> Any:
    """Create the file knowledge source ``docs`` and upload ``name`` to it: the response."""
    version = {"api-version": "2026-10-01"}
    assert http.put(
        "/knowledgesources('docs')", params=version, json={"name": "docs", "kind": "file"}
    ).status_code in (200, 201)
    return http.post(
        "/knowledgesources('docs')/files",
        params=version,
        files={"content": (name, data)},
        data={"metadata": json.dumps({"fileName": name})},
    )


LONG_TEXT = "\n\n".join(
    " ".join(f"Ferry {p}-{s} leaves Pelican Quay at {s} past the hour." for s in range(12))
    for p in range(40)
)  # ~24,000 characters: some twenty chunks


def test_a_child_asked_to_splits_the_text_as_the_store_would():
    document = convert_in_child(
        "times.txt", LONG_TEXT.encode(), ConversionLimits(), chunking=(300, 60)
    )
    (section,) = document.sections
    assert section.split is not None
    assert (section.split.size, section.split.overlap) == (300, 60)
    assert list(section.split.chunks) == chunking.chunk_text(section.text, 300, 60)
    assert len(section.split.chunks) > 50
    unsplit = convert_in_child("times.txt", LONG_TEXT.encode(), ConversionLimits())
    assert unsplit.sections[0].split is None
    assert unsplit.sections[0].text == section.text


def test_the_server_stores_an_upload_it_did_not_split_itself(tmp_path, monkeypatch):
    """Splitting a large file is most of the CPU time storing it takes: the conversion child
    does it, so the server's own threads (answering queries meanwhile) do not."""
    split_here = chunking.chunk_text

    def refuse(*args, **kwargs):
        raise AssertionError("the server process split a converted upload itself")

    monkeypatch.setattr(chunking, "chunk_text", refuse)  # this process only, not the child
    service = ServiceDirectory(tmp_path / "data")
    app = create_app(settings=ServerSettings(read_env_keys=False), service=service, mcp=False)
    with TestClient(app) as http:
        response = upload_to_a_new_file_source(http, "times.txt", LONG_TEXT.encode())
        assert response.status_code == 201, response.text
        definition = service.get("knowledgeSource", "docs")
        assert definition is not None
        stored = service.store(definition).search("*", top=1000)
    expected = split_here(
        load_file(Path("times.txt"), LONG_TEXT.encode()).sections[0].text,
        DEFAULT_CHUNK_SIZE,
        DEFAULT_OVERLAP,
    )
    assert len(expected) > 10
    assert sorted(hit.content for hit in stored) == sorted(expected)


def test_a_child_past_its_time_is_killed(slow_sheet):
    job = ChildConversion("slow.xlsx", slow_sheet, replace(ROOMY, seconds=1.0))
    started = time.monotonic()
    with pytest.raises(ConversionLimitError, match=r"longer than 1 s \(limit seconds=1\)"):
        job.run()
    assert time.monotonic() - started < 10
    assert job.pid is not None and wait_until(lambda: not alive(job.pid))


def test_a_child_past_its_memory_is_stopped():
    # 10 million cells: ~100 MB of rows, far past 16 MiB plus whatever free heap the child
    # inherits from the zygote (the limit bounds growth beyond the zygote's address space)
    huge = repetitive_xlsx(1_000_000, 10)
    with pytest.raises(ConversionLimitError) as caught:
        convert_in_child(
            "huge.xlsx", huge, replace(ROOMY, memory_mb=16, zip_member_mb=1024, zip_total_mb=1024)
        )
    assert caught.value.limit == "memory_mb"
    assert "limit memory_mb=16" in str(caught.value)


def test_cancelling_kills_the_child(slow_sheet):
    job = ChildConversion("slow.xlsx", slow_sheet, ROOMY)
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            job.run()
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    assert wait_until(lambda: job.pid is not None and alive(job.pid))
    pid = job.pid
    job.cancel()
    thread.join(10)
    assert not thread.is_alive()
    assert [str(e) for e in outcome] == ["the conversion was cancelled"]
    assert wait_until(lambda: not alive(pid))


async def test_a_full_pool_refuses_at_once_and_cancelled_jobs_free_their_place(slow_sheet):
    pool = ConversionPool(ROOMY, workers=1, queue=1, retry_after_seconds=7)
    first = asyncio.ensure_future(pool.convert("a.xlsx", slow_sheet))
    second = asyncio.ensure_future(pool.convert("b.xlsx", slow_sheet))
    await asyncio.sleep(0.2)
    assert pool.stats() == {"running": 1, "queued": 1}
    with pytest.raises(ApiError) as caught:
        await pool.convert("c.txt", b"text")
    assert caught.value.status == 429 and caught.value.headers == {"Retry-After": "7"}
    for task in (first, second):
        task.cancel()
    await asyncio.gather(first, second, return_exceptions=True)
    assert await asyncio.to_thread(wait_until, lambda: pool.stats() == {"running": 0, "queued": 0})
    document = await pool.convert("c.txt", b"room again")
    assert document.sections[0].text == "room again"
    pool.close()


def test_an_upload_past_a_limit_is_a_413_naming_it(tmp_path):
    settings = ServerSettings(
        read_env_keys=False, conversion_limits=ConversionLimits(zip_member_mb=64)
    )
    app = create_app(settings=settings, service=ServiceDirectory(tmp_path / "data"), mcp=False)
    with TestClient(app) as http:
        response = upload_to_a_new_file_source(http, "bomb.docx", zip_bomb_docx(128))
    assert response.status_code == 413
    message = response.json()["error"]["message"]
    assert "expands to 128 MiB (limit zip_member_mb=64)" in message
    assert message.endswith("this service's operator can raise its conversion limit zip_member_mb")
    assert "--" not in message  # no command line in a body (the README names the flag)
