"""Query processing is linear and bounded: a pasted megabyte costs milliseconds, not minutes.

Each test pins the behaviour (which terms count, which candidates fold) with exact values, and
checks the cost with a count of the expensive step or a generous time bound (the quadratic
code these replace took minutes on the same input).
"""

from __future__ import annotations

import time

import pytest
from tests.server_harness import FARES, transit_kb

from agentic_retrieval.graph.records import RetrievedHit
from agentic_retrieval.nodes import rerank as rerank_module
from agentic_retrieval.nodes.rerank import unique_candidates
from agentic_retrieval.rerankers.lexical import LexicalReranker
from agentic_retrieval.sources.base import Hit
from agentic_retrieval.sources.local.store import fts_match_expression
from agentic_retrieval.text import MAX_QUERY_TERMS, query_terms


def distinct_words(count: int) -> list[str]:
    """``count`` different lower-case words (base-26 numerals: ``baaa``, ``baab``...)."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = []
    for n in range(count):
        word = ""
        for _ in range(4):
            n, digit = divmod(n, 26)
            word = letters[digit] + word
        words.append("b" + word + "x")  # no trailing s: plural folding would merge words
    return words


MEGABYTE_WORDS = distinct_words(200_000)  # 7 characters each: 1.6 MB of text
MEGABYTE = " ".join(MEGABYTE_WORDS)


def test_fts_query_is_the_first_64_distinct_terms_of_any_text() -> None:
    started = time.perf_counter()
    match = fts_match_expression("The " + MEGABYTE)
    assert time.perf_counter() - started < 2.0  # was minutes: a list lookup per term
    assert match == " OR ".join(f'"{w}"' for w in MEGABYTE_WORDS[:MAX_QUERY_TERMS])
    assert fts_match_expression("the of " * 100_000) == '"the" OR "of"'  # stopwords only


def test_query_terms_keep_the_first_distinct_terms_with_their_counts() -> None:
    assert query_terms("Fares, fares and the bike fare") == {"fare": 3, "bike": 1}
    terms = query_terms(MEGABYTE + " " + MEGABYTE_WORDS[0])
    assert list(terms) == MEGABYTE_WORDS[:MAX_QUERY_TERMS]
    assert terms[MEGABYTE_WORDS[0]] == 2


def test_lexical_reranker_scores_a_pasted_megabyte_like_its_first_terms() -> None:
    hits = [
        Hit(doc_key=f"d{i}", content=" ".join(MEGABYTE_WORDS[i * 10 : i * 10 + 30]), source="s")
        for i in range(50)
    ]
    reranker = LexicalReranker()
    started = time.perf_counter()
    scores = reranker.score(MEGABYTE, hits)
    assert time.perf_counter() - started < 2.0
    prefix = " ".join(MEGABYTE_WORDS[:MAX_QUERY_TERMS])
    assert scores == reranker.score(prefix, hits)
    assert scores[0] > scores[10] > 0  # d0..d6 share query terms, d10 none


def test_near_duplicates_are_found_without_comparing_every_pair(monkeypatch) -> None:
    calls = 0
    near_duplicate = rerank_module._near_duplicate

    def counting(a: str, b: str) -> bool:
        nonlocal calls
        calls += 1
        return near_duplicate(a, b)

    monkeypatch.setattr(rerank_module, "_near_duplicate", counting)
    texts = [" ".join(MEGABYTE_WORDS[i * 40 : i * 40 + 40]) for i in range(3000)]
    texts[7] = texts[3] + " again"  # one near-duplicate (a word appended)
    texts[9] = texts[5]  # one exact duplicate
    hits = [
        RetrievedHit(
            doc_key=f"d{i}",
            content=text,
            source="s",
            score=1.0,
            subquery_id="q0",
            query=f"query {i % 3}",
            activity_key="search:q0:s",
        )
        for i, text in enumerate(texts)
    ]
    kept, queries = unique_candidates(hits)
    assert [h.doc_key for h in kept] == [f"d{i}" for i in range(3000) if i not in (7, 9)]
    assert queries[("s", "d3")] == {"query 0", "query 1"}  # d7's query folded into d3
    assert queries[("s", "d5")] == {"query 2", "query 0"}
    assert calls < 10  # pairwise: ~4.5 million comparisons


@pytest.mark.parametrize("megabytes", [1])
def test_a_maximal_message_at_minimal_effort_is_answered_quickly(megabytes: int) -> None:
    text = "bike fares " + MEGABYTE[: megabytes * 1_000_000]
    parts = [{"type": "text", "text": text[i : i + 200_000]} for i in range(0, len(text), 200_000)]
    kb = transit_kb()
    started = time.perf_counter()
    response = kb.retrieve(
        {
            "messages": [{"role": "user", "content": parts}],
            "retrievalReasoningEffort": {"kind": "minimal"},
            # a megabyte of noise covers no passage well: keep whatever ranks, to see it
            "knowledgeSourceParams": [
                {"knowledgeSourceName": name, "rerankerThreshold": 0} for name in kb.sources
            ],
        }
    )
    assert time.perf_counter() - started < 5.0  # measured: ~0.2 s (benchmarks/README.md)
    assert response.status_code == 200
    assert response.references[0].doc_key == "fare-bike"
    assert {r.doc_key for r in response.references} <= {f["key"] for f in FARES}
