"""The shared tokenizer: accents, plurals, unsegmented CJK text, bounded caching."""

from __future__ import annotations

from agentic_retrieval import InMemoryKnowledgeSource, KnowledgeBase
from agentic_retrieval.text import MAX_CACHED_CHARS, token_set, tokenize


def test_accents_plurals_and_stopwords():
    assert tokenize("The Cafés' passes and fees") == ["cafe", "pass", "fee"]


def test_cjk_runs_become_bigrams_so_a_word_inside_a_sentence_matches():
    assert tokenize("带薪休假") == ["带薪", "薪休", "休假"]
    assert tokenize("東京2024年") == ["東京", "2024", "年"]
    kb = KnowledgeBase(
        [
            InMemoryKnowledgeSource(
                "hr",
                [
                    {"key": "leave", "content": "员工每个月累积两天带薪休假"},
                    {"key": "remote", "content": "员工可以远程工作"},
                ],
            )
        ]
    )
    response = kb.retrieve({"intents": [{"search": "带薪休假"}]})
    assert [r.doc_key for r in response.references] == ["leave"]


def test_huge_texts_are_not_cached():
    huge = "word " * (MAX_CACHED_CHARS // 5 + 100)
    before = token_set.__wrapped__  # the undecorated function exists
    assert callable(before)
    first = token_set(huge)
    second = token_set(huge)
    assert first == second
    assert first is not second  # computed twice, never stored
    small = "small text"
    assert token_set(small) is token_set(small)
