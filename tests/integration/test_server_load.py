"""Bounded load on a real uvicorn server: 200 requests from 20 concurrent clients.

Correctness only (zero 5xx, every body a valid wire response, nothing hangs); the timed
figures live in ``benchmarks/bench_server_load.py``.
"""

from __future__ import annotations

import asyncio

import pytest
from tests.server_harness import (
    corpus_questions,
    load,
    real_docs_kb_dir,
    running_server,
)

from agentic_retrieval import Context, KnowledgeBase
from agentic_retrieval.kb.loader import open_knowledge_base
from agentic_retrieval.server import ServerSettings, create_app
from agentic_retrieval.wire.models import RetrieveResponse

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]
GA = "2026-04-01"
KEY = "load-key"
QUESTIONS = corpus_questions()


def body(i: int) -> dict:
    return {
        "intents": [{"search": QUESTIONS[i % len(QUESTIONS)]}],
        "retrievalReasoningEffort": {"kind": "minimal"},
    }


@pytest.fixture(scope="module")
def kb_dir(tmp_path_factory):
    return real_docs_kb_dir(tmp_path_factory.mktemp("load"))


def test_200_requests_from_20_clients_all_valid(kb_dir):
    kb = open_knowledge_base(kb_dir)
    settings = ServerSettings(api_keys=[KEY], read_env_keys=False)
    with running_server(create_app(kb, settings=settings)) as base:
        url = f"{base}/knowledgebases/{kb.name}/retrieve?api-version={GA}"
        results = asyncio.run(
            load(url, [body(i) for i in range(200)], clients=20, headers={"api-key": KEY})
        )
    assert len(results) == 200
    assert sorted({status for status, _, _ in results}) == [200]
    for _, payload, _ in results:
        response = RetrieveResponse.model_validate(payload)
        assert response.references and response.activity


class FlakySource:
    """Delegates to a real source until ``broken`` is set, then fails or hangs."""

    def __init__(self, inner, mode: str) -> None:
        self.inner, self.mode = inner, mode
        self.name, self.kind, self.description = inner.name, inner.kind, inner.description
        self.broken = False

    async def search(self, query):
        if not self.broken:
            return await self.inner.search(query)
        if self.mode == "hang":
            await asyncio.sleep(3600)
        raise ConnectionError("the index went away")


@pytest.mark.parametrize("mode", ["error", "hang"])
def test_a_source_failing_mid_load_gives_206_with_the_other_sources_results(kb_dir, mode):
    opened = open_knowledge_base(kb_dir)
    names = list(opened.sources)
    flaky = FlakySource(opened.sources[names[0]], mode)
    healthy = opened.sources[names[1]]
    kb = KnowledgeBase([flaky, healthy], name="flaky", defaults=Context(source_timeout_seconds=3.0))
    with running_server(create_app(kb, settings=ServerSettings(read_env_keys=False))) as base:
        url = f"{base}/knowledgebases/flaky/retrieve?api-version={GA}"

        async def scenario():
            before = await load(url, [body(i) for i in range(40)], clients=20)
            flaky.broken = True
            after = await load(url, [body(i) for i in range(100)], clients=20, timeout=20)
            return before, after

        before, after = asyncio.run(asyncio.wait_for(scenario(), 120))
    assert {status for status, _, _ in before} == {200}
    assert len(after) == 100
    assert {status for status, _, _ in after} == {206}
    healthy_keys, answerable = _healthy_results(healthy)
    answered = 0
    for _, payload, _ in after:
        response = RetrieveResponse.model_validate(payload)
        assert {ref.doc_key for ref in response.references} <= healthy_keys
        answered += bool(response.references)
        failed = [a for a in response.activity if a.error is not None]
        expected_code = "Timeout" if mode == "hang" else "KnowledgeSourceError"
        assert [(a.model_extra["knowledgeSourceName"], a.error.code) for a in failed] == [
            (flaky.name, expected_code)
        ]
    # every request the healthy source can answer on its own got its results
    assert answered == sum(answerable[i % len(QUESTIONS)] for i in range(100)) > 0


def _healthy_results(source) -> tuple[set[str], list[bool]]:
    """The doc keys the source returns for the questions, and which questions it answers
    on its own (with references above the reranker threshold)."""
    from agentic_retrieval import SearchQuery

    alone = KnowledgeBase([source])

    async def collect() -> tuple[set[str], list[bool]]:
        keys: set[str] = set()
        answerable = []
        for i, question in enumerate(QUESTIONS):
            hits = await source.search(SearchQuery(text=question))
            keys |= {hit.doc_key for hit in hits}
            answerable.append(bool((await alone.aretrieve(body(i))).references))
        return keys, answerable

    return asyncio.run(collect())
