"""Relevance the caller can trust (issue 28): with vectors, the default ranking's score is
calibrated relevance, so the default threshold empties what the knowledge base cannot answer;
with words alone nothing is cut; the activity log and the agent tool say which happened."""

from __future__ import annotations

import math
import re

import pytest
from langchain_core.embeddings import Embeddings

from agentic_retrieval import InMemoryKnowledgeSource, KnowledgeBase, embeddings
from agentic_retrieval.context import THRESHOLD_ENV_VAR
from agentic_retrieval.rerankers import HybridReranker, PassthroughReranker, reranker_by_name
from agentic_retrieval.rerankers.hybrid import RELEVANCE_KNOT
from agentic_retrieval.rerankers.lexical import calibrate
from agentic_retrieval.sources.base import Hit
from agentic_retrieval.sources.local import LocalKnowledgeSource

ANSWERABLE = "what happens if I see a doctor outside the network"
UNANSWERABLE = "How many moons does Jupiter have?"
PLAN = [
    {
        "id": "out-of-network",
        "title": "Non-participating providers",
        "content": "Northwind Standard does not pay for care from providers that are not part "
        "of the Northwind Health network: members pay the full cost themselves.",
    },
    {
        "id": "dental",
        "title": "Dental cleanings",
        "content": "Two dental cleanings a year are covered. See a dentist in the network for "
        "the lowest price.",
    },
    {
        "id": "pharmacy",
        "title": "Prescriptions",
        "content": "Generic drugs cost 10 dollars at any pharmacy in the network.",
    },
]
CALIBRATED = "default rerankerThreshold 2.5 on calibrated relevance"
NOT_CALIBRATED = (
    "no cut-off: the scores are not calibrated relevance (lexical scores only order "
    "candidates), so the default rerankerThreshold does not apply"
)


class ConceptEmbeddings(Embeddings):
    """Deterministic fake: one dimension per concept, so paraphrases share a dimension, and a
    small constant one so that an unrelated text is nearly orthogonal, not undefined."""

    CONCEPTS = (
        frozenset({"doctor", "providers", "care", "physician"}),
        frozenset({"outside", "not", "non", "participating"}),
        frozenset({"dental", "dentist", "teeth"}),
        frozenset({"drugs", "pharmacy", "prescriptions"}),
    )

    def __init__(self) -> None:
        self.embedded: list[str] = []

    def _vector(self, text: str) -> list[float]:
        words = set(re.findall(r"\w+", text.lower()))
        vector = [float(len(words & concept)) for concept in self.CONCEPTS] + [0.2]
        norm = math.sqrt(sum(v * v for v in vector))
        return [v / norm for v in vector]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.embedded += texts
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


@pytest.fixture(autouse=True)
def default_threshold(monkeypatch):
    monkeypatch.delenv(THRESHOLD_ENV_VAR, raising=False)


def local_plan(path, embeddings: Embeddings | None = None) -> LocalKnowledgeSource:
    source = LocalKnowledgeSource("plan", path, embeddings=embeddings, create=True)
    source.add_documents(PLAN)
    return source


def ask(kb: KnowledgeBase, question: str):
    return kb.retrieve({"intents": [{"search": question}]})


def keys(response) -> list[str]:
    return [ref.doc_key for ref in response.references]


def rerank_record(response) -> dict:
    return next(r.model_extra for r in response.activity if r.type == "semanticReranker")


def test_a_hybrid_store_keeps_the_answer_and_empties_a_question_it_cannot_answer(tmp_path):
    kb = KnowledgeBase([local_plan(tmp_path / "plan.sqlite", ConceptEmbeddings())])
    answered = ask(kb, ANSWERABLE)
    assert keys(answered)[0].startswith("out-of-network")
    assert answered.references[0].reranker_score >= 2.5
    assert rerank_record(answered)["calibratedCount"] == 3
    unanswerable = ask(kb, UNANSWERABLE)
    assert keys(unanswerable) == [] and unanswerable.text == "[]"
    record = rerank_record(unanswerable)
    assert (record["candidateCount"], record["keptCount"], record["calibratedCount"]) == (3, 0, 3)
    search = next(r for r in unanswerable.activity if r.type == "searchIndex")
    assert search.model_extra["warning"] == (
        "3 documents found by this query were left out of the response: 3 scored under the "
        "rerankerThreshold (2.5)."
    )


def test_the_activity_record_names_the_rule_that_applied(tmp_path):
    hybrid = KnowledgeBase([local_plan(tmp_path / "hybrid.sqlite", ConceptEmbeddings())])
    assert rerank_record(ask(hybrid, UNANSWERABLE))["thresholdRule"] == CALIBRATED
    lexical = KnowledgeBase([local_plan(tmp_path / "lexical.sqlite")])
    assert rerank_record(ask(lexical, ANSWERABLE))["thresholdRule"] == NOT_CALIBRATED
    params = [{"knowledgeSourceName": "plan", "rerankerThreshold": 0}]
    explicit = hybrid.retrieve(
        {"intents": [{"search": UNANSWERABLE}], "knowledgeSourceParams": params}
    )
    assert len(keys(explicit)) == 3
    assert rerank_record(explicit)["thresholdRule"] == "rerankerThreshold 0, as set"


def test_a_mix_of_hybrid_and_lexical_sources_names_each_rule_with_its_count(tmp_path):
    hybrid = local_plan(tmp_path / "hybrid.sqlite", ConceptEmbeddings())
    notices = [
        {"id": "list", "content": "The list of the Northwind Health network is online."},
        {"id": "changes", "content": "The network may change every January."},
    ]
    words = InMemoryKnowledgeSource("words", notices, description="plan notices, lexical")
    response = ask(KnowledgeBase([hybrid, words]), "network moons of Jupiter")
    record = rerank_record(response)
    assert record["thresholdRule"] == f"3 candidates: {CALIBRATED}; 2 candidates: {NOT_CALIBRATED}"
    assert sorted(keys(response)) == ["changes", "list"]  # the lexical source's, uncut


def test_a_lexical_store_keeps_everything_and_says_why(tmp_path):
    kb = KnowledgeBase([local_plan(tmp_path / "lexical.sqlite")])
    response = ask(kb, "network Northwind dentist moons")
    assert len(keys(response)) == 3
    record = rerank_record(response)
    assert record["calibratedCount"] == 0 and record["thresholdRule"] == NOT_CALIBRATED


def test_the_hybrid_score_is_the_calibrated_blend_and_keeps_its_order():
    hits = [
        Hit(doc_key=str(i), content="doctor network", vector_similarity=cosine)
        for i, cosine in enumerate((0.9, 0.5, 0.3, 0.1))
    ]
    reranker = HybridReranker()
    blends = reranker.blend("doctor network", hits)
    scores = reranker.score("doctor network", hits)
    assert scores == [calibrate(b, RELEVANCE_KNOT) for b in blends if b is not None]
    assert scores == sorted(scores, reverse=True)
    assert [score >= 2.5 for score in scores] == [b >= RELEVANCE_KNOT for b in blends if b]
    assert [reranker.calibrated_for(h) for h in hits] == [True] * 4
    no_vector = Hit(doc_key="x", content="doctor network")
    assert reranker.calibrated_for(no_vector) is False
    assert HybridReranker(0.0).calibrated_for(hits[0]) is False  # words alone


def test_a_source_without_vectors_is_judged_by_embedding_its_candidates():
    plan = InMemoryKnowledgeSource("plan", PLAN, description="Health plan benefits")
    model = ConceptEmbeddings()
    reranker = PassthroughReranker(HybridReranker(embeddings=model))
    kb = KnowledgeBase([plan], reranker=reranker)
    assert keys(ask(kb, ANSWERABLE))[0].startswith("out-of-network")
    unanswerable = ask(kb, "network moons of Jupiter")
    assert keys(unanswerable) == []
    record = rerank_record(unanswerable)
    assert record["calibratedCount"] == record["candidateCount"] > 0
    assert record["thresholdRule"] == CALIBRATED
    assert any(text.startswith("Dental cleanings\n") for text in model.embedded)
    without = KnowledgeBase([plan])  # the default embeds nothing: lexical, no cut-off
    assert len(keys(ask(without, "network moons of Jupiter"))) == record["candidateCount"]


def test_the_agent_tool_says_plainly_that_nothing_relevant_was_found(tmp_path):
    kb = KnowledgeBase([local_plan(tmp_path / "plan.sqlite", ConceptEmbeddings())], name="benefits")
    message = kb.as_tool().invoke(
        {"type": "tool_call", "id": "1", "name": "search_benefits", "args": {"query": UNANSWERABLE}}
    )
    assert message.content == (
        "Nothing relevant in the knowledge base 'benefits': the search found 3 passages, but "
        "none is relevant enough to this question (all scored under the rerankerThreshold), so "
        "the knowledge base most likely does not answer it. Do not answer from these sources; "
        "say so, or search again in other words."
    )
    assert message.artifact.references == []
    answered = kb.as_tool().invoke(
        {"type": "tool_call", "id": "2", "name": "search_benefits", "args": {"query": ANSWERABLE}}
    )
    assert "Northwind Standard does not pay for care" in answered.content


def test_the_hybrid_reranker_by_name_embeds_what_comes_without_vectors(monkeypatch):
    model = ConceptEmbeddings()
    monkeypatch.setattr(embeddings, "local_embeddings", lambda: model)
    chosen = reranker_by_name("hybrid")
    plan = InMemoryKnowledgeSource("plan", PLAN, description="Health plan benefits")
    response = ask(KnowledgeBase([plan], reranker=chosen), "network moons of Jupiter")
    assert keys(response) == [] and model.embedded
    assert rerank_record(response)["reranker"] == "passthrough+lexical+vector"


class ScoredPassages:
    """A source whose hits carry the cosines it computed, as the embedded hybrid store's do."""

    name, description, kind = "plan", "Health plan benefits", "local"

    def __init__(self, cosines: dict[str, float]) -> None:
        self.cosines = cosines

    async def search(self, query):
        return [
            Hit(doc_key=key, content=f"{key} passage", vector_similarity=cosine, score=-rank)
            for rank, (key, cosine) in enumerate(self.cosines.items())
        ]


def cosine_blending_to(target: float, others: dict[str, float]) -> float:
    """The cosine at which a third passage (ranked last) blends to ``target``."""
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        hits = [
            Hit(doc_key=k, content=f"{k} passage", vector_similarity=c, source="plan", score=-i)
            for i, (k, c) in enumerate({**others, "weak": middle}.items())
        ]
        blend = HybridReranker().blend("which sunscreen is covered", hits)[-1]
        assert blend is not None
        low, high = (middle, high) if blend < target else (low, middle)
    return high


def test_a_passage_blending_like_the_weakest_held_in_answer_is_kept_by_default():
    # the knot fitted on the tuning half of the labelled set with today's store (Porter2 and
    # the OpenVINO model) is 0.85: 0.9 cut evidence of one question on each half
    # (benchmarks/README.md, "Relevance on today's defaults"); a passage blending 0.875 is
    # what such evidence looks like, and the default threshold keeps it
    others = {"strong": 0.75, "middle": 0.5}
    source = ScoredPassages({**others, "weak": cosine_blending_to(0.875, others)})
    response = ask(KnowledgeBase([source]), "which sunscreen is covered")
    assert keys(response) == ["strong", "middle", "weak"]
    assert response.references[-1].reranker_score >= 2.5
    # and one under the knot is still cut: the threshold empties what is far from any answer
    source = ScoredPassages({**others, "weak": cosine_blending_to(0.8, others)})
    assert keys(ask(KnowledgeBase([source]), "which sunscreen is covered")) == ["strong", "middle"]
