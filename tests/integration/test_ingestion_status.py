"""A knowledge source's status never shows a run in progress that nobody is running.

After a crash the status of a file source kept a phantom in-progress synchronization until
the next upload. A run is now in progress only while its process holds the run's lock; a
run whose process died is reported as the last run, interrupted, and the upload it was
doing is either stored whole or absent.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time

import httpx
import pytest
from tests.integration.service_process import KEY, kill_hard, serve_process

from agentic_retrieval.kb.service import INTERRUPTED

pytestmark = pytest.mark.integration
VERSION = {"api-version": "2026-10-01"}


def run_in_child(data, body: str, store: str | None) -> subprocess.Popen[str]:
    """A Python child process that opens ``data`` (state in ``store``: ``None`` the embedded
    one, else a PostgreSQL URL) and runs ``body`` after one finished run of "s"."""
    code = textwrap.dedent(
        f"""
        import os, sys, time
        from agentic_retrieval.kb.service_state import open_service
        service = open_service({str(data)!r}, {store!r})
        with service.ingestion_run("s") as run:
            run.processed += 1
        """
    ) + textwrap.dedent(body)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def test_a_run_is_in_progress_while_its_process_lives_and_interrupted_once_it_dies(
    tmp_path, service_store, open_service_state
):
    data = tmp_path / "data"
    open_service_state(data).close()
    # one finished run, then one that hangs until killed
    child = run_in_child(
        data,
        """
        with service.ingestion_run("s") as run:
            print("started", flush=True)
            time.sleep(60)
        """,
        service_store,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "started"
        service = open_service_state(data)
        live = service.ingestion("s")
        assert live.current is not None and live.runs == 1
        assert service.reconcile_ingestion() == []  # a live run is left alone
        assert service.ingestion("s").current is not None
    finally:
        child.kill()
        child.wait(10)
    dead = service.ingestion("s")
    assert dead.current is None, "a killed run is still shown in progress"
    assert dead.last is not None and dead.last.start_time == live.current.start_time
    assert dead.last.errors[-1] == {"errorMessage": INTERRUPTED}
    assert dead.runs == 1  # only runs that finished count in the statistics
    assert not list((data / "runs").glob("*.lock"))
    service.close()


def test_reconciling_at_start_settles_every_run_a_killed_process_left(
    tmp_path, service_store, open_service_state
):
    data = tmp_path / "data"
    open_service_state(data).close()
    child = run_in_child(
        data,
        """
        with service.ingestion_run("t") as run:
            os._exit(9)
        """,
        service_store,
    )
    assert child.wait(30) == 9
    service = open_service_state(data)
    assert service.reconcile_ingestion() == ["t"]
    assert service.ingestion("t").current is None
    assert service.ingestion("s").current is None and service.ingestion("s").runs == 1
    assert not list((data / "runs").glob("*.lock"))
    service.close()


def test_runs_at_once_on_one_store_each_finish_without_hiding_the_other(
    tmp_path, open_service_state
):
    service = open_service_state(tmp_path / "data")
    with service.ingestion_run("s"):
        with service.ingestion_run("s") as inner:
            inner.processed = 3
        # the first run is still going: it stays in progress
        assert service.ingestion("s").current is not None
    finished = service.ingestion("s")
    assert finished.current is None and finished.runs == 2
    service.close()


def big_markdown() -> bytes:
    words = " ".join(f"word{i % 5000} tram fare zone" for i in range(400_000))
    paragraphs = "\n\n".join(words[i : i + 2000] for i in range(0, len(words), 2000))
    return f"# Big\n\n{paragraphs}".encode()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_server_killed_mid_upload_restarts_without_a_phantom_run(tmp_path):
    data = tmp_path / "data"
    admin = {"api-key": KEY}
    files = {
        "metadata": (None, json.dumps({"fileName": "big.md"}), "application/json"),
        "content": ("big.md", big_markdown(), "application/octet-stream"),
    }
    with serve_process(data) as (url, process):
        http = httpx.Client(base_url=url, headers=admin, params=VERSION, timeout=120)
        assert http.put("/knowledgesources/docs", json={"kind": "file"}).status_code == 201

        def upload() -> None:
            try:
                http.post("/knowledgesources/docs/files", files=files)
            except httpx.TransportError:
                pass  # killed under us

        uploading = threading.Thread(target=upload)
        uploading.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            status = http.get("/knowledgesources/docs/status").json()
            if status["currentSynchronizationState"] is not None:
                break
            time.sleep(0.01)
        assert status["currentSynchronizationState"] is not None, "the upload never showed"
        kill_hard(process)
        uploading.join(30)
    with serve_process(data) as (url, _):
        http = httpx.Client(base_url=url, headers=admin, params=VERSION, timeout=60)
        status = http.get("/knowledgesources/docs/status").json()
        assert status["currentSynchronizationState"] is None
        assert status["lastSynchronizationState"]["errors"][-1]["errorMessage"] == INTERRUPTED
        listed = [f["fileName"] for f in http.get("/knowledgesources/docs/files").json()["value"]]
        assert listed in ([], ["big.md"])  # whole or absent
        assert status["documentCount"] == len(listed)
        # chunks of an absent file are not searchable either (the upload was one transaction)
        kb = {"knowledgeSources": [{"name": "docs"}]}
        assert http.put("/knowledgebases/kb", json=kb).status_code == 201
        body = {"intents": [{"type": "semantic", "search": "word42 tram fare"}]}
        found = http.post("/knowledgebases/kb/retrieve", json=body).json()["references"]
        assert bool(found) == bool(listed)
