"""``agentic-retrieval serve --data`` as a real child process, for crash and worker tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from tests.server_harness import free_port

KEY = "admin-key"
VERSION = {"api-version": "2026-04-01"}


@contextmanager
def serve_process(
    data: Path,
    *,
    workers: int = 1,
    startup_timeout: float = 60.0,
    extra: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Start ``serve --data`` in a child process; yield (base URL, process); stop it after.

    ``env``: variables set for the server besides the test's own environment.
    """
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "agentic_retrieval.cli",
        "serve",
        "--data",
        str(data),
        "--port",
        str(port),
        "--api-key",
        KEY,
        "--workers",
        str(workers),
        *extra,
    ]
    environment = {**os.environ, "AGENTIC_RETRIEVAL_API_KEYS": "", **(env or {})}
    process = subprocess.Popen(
        argv,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url, process, startup_timeout)
        yield url, process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)


def wait_until_up(url: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    """Poll ``/healthz`` until it answers (or fail when the process exits or time runs out)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the server did not start in time")


def kill_hard(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the server and all its workers at once (no cleanup runs)."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(10)


def memory_of(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) of a process, in bytes."""
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) * 1024
    return fields
