"""Shared fixtures: a toy corpus with exact expected keys, and misbehaving sources."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentic_retrieval.sources.base import Hit, SearchQuery
from agentic_retrieval.sources.memory import InMemoryKnowledgeSource

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

TOY_DOCS = [
    {
        "key": "fares",
        "title": "Fares and passes",
        "content": "A single tram ride costs 2 euros. A day pass costs 6 euros and is valid "
        "until 4 am the next morning.",
        "metadata": {"category": "fares", "year": 2024},
    },
    {
        "key": "bike-fees",
        "title": "Bike late fees",
        "content": "Bikes must be docked within 30 minutes; each extra 15 minutes adds a late "
        "fee of 1 euro.",
        "metadata": {"category": "bikes", "year": 2023},
    },
    {
        "key": "hours",
        "title": "Service hours",
        "content": "Trams run from 5 am until midnight on weekdays and until 2 am on Saturdays.",
        "metadata": {"category": "service", "year": 2024},
    },
    {
        "key": "lost",
        "title": "Lost and found",
        "content": "Items left on a tram are kept for 30 days at the Central Station office.",
        "metadata": {"category": "service", "year": 2022},
    },
]

FAQ_DOCS = [
    {
        "key": "faq-refund",
        "title": "Refunds",
        "content": "Unused day pass refunds are paid within 10 working days.",
        "metadata": {"category": "fares", "year": 2024},
    },
]


@pytest.fixture
def toy_source() -> InMemoryKnowledgeSource:
    return InMemoryKnowledgeSource("transit", TOY_DOCS, description="Tram and bike rules")


@pytest.fixture
def faq_source() -> InMemoryKnowledgeSource:
    return InMemoryKnowledgeSource("faq", FAQ_DOCS, description="Customer FAQ")


class RecordingSource:
    """Wraps a source and records every query it receives."""

    def __init__(self, inner, name: str | None = None) -> None:
        self.inner = inner
        self.name = name or inner.name
        self.description = inner.description
        self.kind = inner.kind
        self.queries: list[SearchQuery] = []

    async def search(self, query: SearchQuery) -> list[Hit]:
        self.queries.append(query)
        return await self.inner.search(query)


class FailingSource:
    """A source whose backend is down."""

    kind = "searchIndex"

    def __init__(self, name: str = "broken") -> None:
        self.name = name
        self.description = "always fails"
        self.calls = 0

    async def search(self, query: SearchQuery) -> list[Hit]:
        self.calls += 1
        raise ConnectionError("backend unreachable")


class SlowSource:
    """A source that answers after ``delay`` seconds (with one hit)."""

    kind = "searchIndex"

    def __init__(self, name: str = "slow", delay: float = 5.0) -> None:
        self.name = name
        self.description = "slow"
        self.delay = delay

    async def search(self, query: SearchQuery) -> list[Hit]:
        await asyncio.sleep(self.delay)
        return [Hit(doc_key="late", content=f"late answer about {query.text}")]


def write(path: Path, text: str) -> Path:
    """Write ``text`` to ``path``, creating folders (test documents)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def user(text: str) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is absent (fresh clone): skipping real-document tests")
    return SHARED_DATA
