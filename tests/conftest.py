"""Fixtures over the shared fakes (``tests/fakes.py``): tests import fakes from there."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentic_retrieval.sources.memory import InMemoryKnowledgeSource
from tests.fakes import FAQ_DOCS, SHARED_DATA, TOY_DOCS


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
