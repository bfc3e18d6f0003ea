"""Fixtures over the shared fakes (``tests/fakes.py``): tests import fakes from there."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from agentic_retrieval.sources.memory import InMemoryKnowledgeSource
from tests.fakes import FAQ_DOCS, SHARED_DATA, TOY_DOCS

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
