"""Compressor, embedding and LLM-grader rerankers, with deterministic fakes."""

from __future__ import annotations

import hashlib
import logging
import math
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

from agentic_retrieval.errors import RerankError
from agentic_retrieval.rerankers.base import Reranker
from agentic_retrieval.rerankers.compressor import INDEX_KEY, CompressorReranker
from agentic_retrieval.rerankers.embedding import EmbeddingReranker
from agentic_retrieval.rerankers.lexical import LexicalReranker
from agentic_retrieval.rerankers.llm_grader import LLMGraderReranker
from agentic_retrieval.sources.base import Hit


def hits_from(contents: dict[str, str]) -> list[Hit]:
    return [Hit(doc_key=key, content=text) for key, text in contents.items()]


def ranking(hits: Sequence[Hit], scores: Sequence[float]) -> list[str]:
    order = sorted(zip(scores, range(len(hits)), strict=True), key=lambda p: (-p[0], p[1]))
    return [hits[i].doc_key for _, i in order]


# ---------------------------------------------------------------- compressor


class TableCompressor(BaseDocumentCompressor):
    """Scores documents from a table keyed by content; keeps the best ``top_n``."""

    table: dict[str, float]
    top_n: int = 3
    with_scores: bool = True
    rebuild_metadata: bool = False

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        def native(doc: Document) -> float:
            return self.table[doc.page_content]

        kept = sorted(documents, key=native, reverse=True)[: self.top_n]
        out = []
        for doc in kept:
            meta = {} if self.rebuild_metadata else dict(doc.metadata)
            if self.with_scores:
                meta["relevance_score"] = native(doc)
            out.append(Document(page_content=doc.page_content, metadata=meta))
        return out


class SyncOnlyCompressor:
    """Not a BaseDocumentCompressor: only ``compress_documents``; records its thread."""

    def __init__(self, table: dict[str, float]) -> None:
        self.table = table
        self.thread: threading.Thread | None = None

    def compress_documents(self, documents: Sequence[Document], query: str) -> list[Document]:
        self.thread = threading.current_thread()
        return [
            Document(
                page_content=d.page_content,
                metadata={**d.metadata, "relevance_score": self.table[d.page_content]},
            )
            for d in documents
        ]


THREE = {"a": "alpha passage", "b": "beta passage", "c": "gamma passage"}


async def test_compressor_probabilities_times_four_and_dropped_docs_score_zero() -> None:
    table = {"alpha passage": 0.9, "beta passage": 0.25, "gamma passage": 0.5}
    reranker = CompressorReranker(TableCompressor(table=table, top_n=2))
    hits = hits_from(THREE)
    scores = await reranker.ascore("q", hits)
    assert scores == pytest.approx([3.6, 0.0, 2.0])
    assert ranking(hits, scores) == ["a", "c", "b"]
    assert isinstance(reranker, Reranker)
    assert reranker.name == "compressor:TableCompressor"


async def test_compressor_logits_go_through_sigmoid() -> None:
    table = {"alpha passage": 0.0, "beta passage": 2.0, "gamma passage": -50.0}
    reranker = CompressorReranker(TableCompressor(table=table), score_range="logit", name="ce")
    scores = await reranker.ascore("q", hits_from(THREE))
    assert scores == pytest.approx([2.0, 4 / (1 + math.exp(-2.0)), 0.0], abs=1e-9)
    assert reranker.name == "ce"


async def test_compressor_custom_range_is_linear_and_clamped() -> None:
    table = {"alpha passage": 5.0, "beta passage": -20.0, "gamma passage": 12.0}
    reranker = CompressorReranker(TableCompressor(table=table), score_range=(-10.0, 10.0))
    assert await reranker.ascore("q", hits_from(THREE)) == pytest.approx([3.0, 0.0, 4.0])
    with pytest.raises(ValueError):
        CompressorReranker(TableCompressor(table=table), score_range=(1.0, 1.0))


async def test_compressor_without_scores_is_scored_by_rank() -> None:
    table = {"alpha passage": 0.5, "beta passage": 0.1, "gamma passage": 0.9}
    compressor = TableCompressor(table=table, top_n=2, with_scores=False)
    scores = await CompressorReranker(compressor).ascore("q", hits_from(THREE))
    assert scores == pytest.approx([2.0, 0.0, 4.0])


async def test_compressor_that_rebuilds_metadata_is_matched_by_text() -> None:
    table = {"alpha passage": 0.2, "beta passage": 0.75, "gamma passage": 0.5}
    compressor = TableCompressor(table=table, rebuild_metadata=True)
    scores = await CompressorReranker(compressor).ascore("q", hits_from(THREE))
    assert scores == pytest.approx([0.8, 3.0, 2.0])


async def test_compressor_sees_title_and_index_and_sync_only_runs_in_thread() -> None:
    hits = [
        Hit(doc_key="x", title="Fares", content="zone A costs 2.40"),
        Hit(doc_key="y", content="bike docks"),
    ]
    table = {"Fares\nzone A costs 2.40": 0.5, "bike docks": 1.0}
    compressor = SyncOnlyCompressor(table)
    scores = await CompressorReranker(compressor).ascore("fares", hits)
    assert scores == pytest.approx([2.0, 4.0])
    assert compressor.thread is not None
    assert compressor.thread is not threading.main_thread()


async def test_compressor_with_no_hits_does_not_call_the_compressor() -> None:
    compressor = SyncOnlyCompressor({})
    assert await CompressorReranker(compressor).ascore("q", []) == []
    assert compressor.thread is None
    assert INDEX_KEY.startswith("_")


# ---------------------------------------------------------------- embeddings


class HashingEmbeddings(Embeddings):
    """Bag of words hashed into 4096 buckets: cosine = normalised word overlap."""

    def __init__(self) -> None:
        self.document_batches: list[int] = []

    @staticmethod
    def vector(text: str) -> list[float]:
        out = [0.0] * 4096
        for word in re.findall(r"\w+", text.lower()):
            out[int(hashlib.md5(word.encode()).hexdigest(), 16) % 4096] += 1.0
        return out

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.document_batches.append(len(texts))
        return [self.vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.vector(text)


async def test_embedding_cosines_and_calibration() -> None:
    hits = hits_from(
        {
            "night": "night tram service hours friday",
            "bikes": "bike docking rules",
            "fares": "tram fares and zones",
        }
    )
    reranker = EmbeddingReranker(HashingEmbeddings(), floor=0.15, ceil=0.65)
    cosines = await reranker.cosines("tram night service hours", hits)
    assert cosines == pytest.approx([4 / (2 * math.sqrt(5)), 0.0, 0.25])
    scores = await reranker.ascore("tram night service hours", hits)
    assert scores == pytest.approx([4.0, 0.0, 0.8])
    assert ranking(hits, scores) == ["night", "fares", "bikes"]
    assert isinstance(reranker, Reranker)


async def test_embedding_batches_keep_hit_order() -> None:
    contents = {f"d{i}": " ".join(["tram"] * i + ["bike"] * (5 - i)) for i in range(5)}
    hits = hits_from(contents)
    small = HashingEmbeddings()
    batched = await EmbeddingReranker(small, batch_size=2, floor=0.0, ceil=1.0).ascore("tram", hits)
    whole = await EmbeddingReranker(
        HashingEmbeddings(), batch_size=100, floor=0.0, ceil=1.0
    ).ascore("tram", hits)
    assert sorted(small.document_batches) == [1, 2, 2]
    assert batched == pytest.approx(whole)
    assert ranking(hits, batched) == ["d4", "d3", "d2", "d1", "d0"]


async def test_embedding_uses_title_and_handles_empty_and_zero_vectors() -> None:
    hits = [
        Hit(doc_key="t", title="Lost property", content="office hours"),
        Hit(doc_key="u", content="office hours"),
        Hit(doc_key="z", content="!!!"),
    ]
    reranker = EmbeddingReranker(HashingEmbeddings(), floor=0.0, ceil=1.0)
    scores = await reranker.ascore("lost property", hits)
    assert scores[0] == pytest.approx(4 * 2 / (2**0.5 * 4**0.5))
    assert scores[1:] == [0.0, 0.0]
    assert await reranker.ascore("x", []) == []
    with pytest.raises(ValueError):
        EmbeddingReranker(HashingEmbeddings(), floor=0.5, ceil=0.5)


# ---------------------------------------------------------------- LLM grader

Responder = Callable[[list[BaseMessage], int], AIMessage]


class GraderChatModel(BaseChatModel):
    """Scripted tool-calling chat model: ``responder(messages, call_number)`` answers."""

    responder: Responder
    calls: list[list[BaseMessage]]
    tools: list[Any] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "grader-fake"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> GraderChatModel:  # type: ignore[override]
        return self.model_copy(update={"tools": list(tools)})

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.calls.append(messages)
        message = self.responder(messages, len(self.calls))
        return ChatResult(generations=[ChatGeneration(message=message)])


USAGE = {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120}


def passages(messages: list[BaseMessage]) -> dict[str, str]:
    """Parse ``[p1] title\\ntext`` blocks out of the human message."""
    text = str(messages[-1].content)
    return dict(re.findall(r"\[(p\d+)\][^\n]*\n([^\n]*)", text))


def keyword_grade(text: str) -> float:
    return 4.0 if "night" in text else 2.0 if "tram" in text else 0.0


def listwise_answer(messages: list[BaseMessage], call: int) -> AIMessage:
    grades = [{"id": pid, "grade": keyword_grade(t)} for pid, t in passages(messages).items()]
    return tool_message("ListwiseGrades", {"grades": grades}, call)


def tool_message(name: str, args: dict[str, Any], call: int) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[{"name": name, "args": args, "id": f"c{call}"}],
        usage_metadata=USAGE,
    )


def grader(responder: Responder, **kwargs: Any) -> tuple[LLMGraderReranker, GraderChatModel]:
    model = GraderChatModel(responder=responder, calls=[])
    return LLMGraderReranker(model, **kwargs), model


GRADED = {
    "n1": "the night tram runs on fridays",
    "b1": "bike docking rules",
    "t1": "tram fares by zone",
    "n2": "night service on new year's eve",
    "x1": "lost property office",
}


async def test_listwise_grades_batches_concurrently_and_sums_usage() -> None:
    reranker, model = grader(listwise_answer, batch_size=2)
    hits = hits_from(GRADED)
    scores, usage = await reranker.ascore_with_usage("when does the night tram run", hits)
    assert scores == [4.0, 0.0, 2.0, 4.0, 0.0]
    assert ranking(hits, scores) == ["n1", "n2", "t1", "b1", "x1"]
    assert len(model.calls) == 3
    assert sorted(len(passages(m)) for m in model.calls) == [1, 2, 2]
    assert usage == {"inputTokens": 300, "outputTokens": 60}
    assert reranker.last_usage == usage
    assert "when does the night tram run" in str(model.calls[0][-1].content)
    assert reranker.name == "llm-grader-listwise"
    assert isinstance(reranker, Reranker)


async def test_pointwise_makes_one_call_per_passage() -> None:
    def answer(messages: list[BaseMessage], call: int) -> AIMessage:
        (text,) = passages(messages).values()
        return tool_message("PointwiseGrade", {"grade": keyword_grade(text)}, call)

    reranker, model = grader(answer, mode="pointwise", batch_size=10)
    hits = hits_from(GRADED)
    scores = await reranker.ascore("night tram", hits)
    assert scores == [4.0, 0.0, 2.0, 4.0, 0.0]
    assert len(model.calls) == 5
    assert reranker.last_usage == {"inputTokens": 500, "outputTokens": 100}


async def test_missing_ids_score_zero_with_a_warning_and_grades_are_clamped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def answer(messages: list[BaseMessage], call: int) -> AIMessage:
        grades = [{"id": "p1", "grade": 7}, {"id": "[p3]", "grade": -2}, {"id": "p9", "grade": 4}]
        return tool_message("ListwiseGrades", {"grades": grades}, call)

    reranker, _ = grader(answer)
    with caplog.at_level(logging.WARNING, logger="agentic_retrieval.rerankers.llm_grader"):
        scores = await reranker.ascore("q", hits_from(THREE))
    assert scores == [4.0, 0.0, 0.0]
    assert "no grade for ['p2']" in caplog.text
    assert "unknown ids ['p9']" in caplog.text


async def test_unparsable_output_is_retried_once() -> None:
    def answer(messages: list[BaseMessage], call: int) -> AIMessage:
        if call == 1:
            return AIMessage(content="p1: 4, p2: 0", usage_metadata=USAGE)
        return listwise_answer(messages, call)

    reranker, model = grader(answer)
    hits = hits_from(GRADED)
    assert await reranker.ascore("night tram", hits) == [4.0, 0.0, 2.0, 4.0, 0.0]
    assert len(model.calls) == 2
    assert reranker.last_usage == {"inputTokens": 200, "outputTokens": 40}


async def test_second_failure_uses_the_fallback_reranker() -> None:
    def answer(messages: list[BaseMessage], call: int) -> AIMessage:
        return tool_message("ListwiseGrades", {"grades": "all good"}, call)

    reranker, model = grader(answer, fallback=LexicalReranker())
    hits = hits_from(GRADED)
    scores = await reranker.ascore("night tram", hits)
    assert scores == pytest.approx(await LexicalReranker().ascore("night tram", hits))
    assert ranking(hits, scores)[:2] == ["n1", "t1"]
    assert len(model.calls) == 2


async def test_second_failure_without_fallback_raises_rerank_error() -> None:
    def answer(messages: list[BaseMessage], call: int) -> AIMessage:
        raise ConnectionError("provider unreachable")

    reranker, model = grader(answer)
    with pytest.raises(RerankError, match="provider unreachable"):
        await reranker.ascore("night tram", hits_from(GRADED))
    assert len(model.calls) == 2


async def test_grader_rejects_bad_configuration() -> None:
    with pytest.raises(ValueError):
        grader(listwise_answer, mode="setwise")
    with pytest.raises(ValueError):
        grader(listwise_answer, batch_size=0)


# ---------------------------------------------------------------- real local model


@pytest.mark.slow
async def test_local_minilm_ranks_the_answering_sample_document_first() -> None:
    import json
    from importlib.resources import files

    from agentic_retrieval.embeddings import local_embeddings, local_embeddings_available

    if not local_embeddings_available():
        pytest.skip("the [local] extra is not installed")
    root = files("agentic_retrieval.kb") / "sample_corpus"
    hits = [
        Hit(doc_key=f"{folder}/{path.name}", content=path.read_text(encoding="utf-8"))
        for folder in ("riders", "operations")
        for path in sorted((root / folder).iterdir(), key=lambda p: p.name)
    ]
    questions = {q["id"]: q for q in json.loads((root / "questions.json").read_text())}
    reranker = EmbeddingReranker(local_embeddings())
    for qid in ("q01", "q02", "q04", "q05", "q08", "q11", "q14"):
        scores = await reranker.ascore(questions[qid]["question"], hits)
        assert ranking(hits, scores)[0] == questions[qid]["files"][0], qid
        assert max(scores) >= 2.0, qid


async def test_lexical_reranker_prefers_text_matches_over_shared_document_titles():
    from agentic_retrieval.rerankers.lexical import LexicalReranker

    title = "PerksPlus Health and Wellness Reimbursement Program"
    hits = [
        Hit(doc_key="fragment", title=title, content="• Food and supplements"),
        Hit(doc_key="cover", title=title, content=f"{title} for Northwind employees"),
        Hit(
            doc_key="answer",
            title=title,
            content="PerksPlus will reimburse fitness expenses up to $1000 per year. "
            "To reimburse an expense, submit the receipt.",
        ),
    ]
    scores = await LexicalReranker().ascore("How much does PerksPlus reimburse?", hits)
    ranked = [h.doc_key for _, h in sorted(zip(scores, hits, strict=True), key=lambda p: -p[0])]
    assert ranked[0] == "answer"
    assert ranked[-1] == "fragment"
    assert len(set(scores)) == 3  # no ties between chunks of one document
    assert all(0.0 <= s <= 4.0 for s in scores)


async def test_lexical_reranker_blends_each_sources_own_ranking():
    from agentic_retrieval.rerankers.lexical import LexicalReranker

    hits = [
        Hit(doc_key="a2", source="a", score=1.0, content="night tram hours"),
        Hit(doc_key="a1", source="a", score=9.0, content="night tram hours"),
        Hit(doc_key="b1", source="b", score=0.01, content="night tram hours"),
    ]
    scores = await LexicalReranker().ascore("night tram hours", hits)
    # equal coverage: each source's own best hit wins, whatever the scale of its scores
    assert scores[1] == scores[2] > scores[0]
    flat = await LexicalReranker(rank_weight=0.0).ascore("night tram hours", hits)
    assert flat[0] == flat[1] == flat[2]
    with pytest.raises(ValueError, match="rank_weight"):
        LexicalReranker(rank_weight=1.5)


def test_lexical_calibration_puts_the_measured_knot_at_azures_threshold():
    from agentic_retrieval.rerankers.lexical import CALIBRATION_KNOT, calibrate

    assert calibrate(0.0) == 0.0 and calibrate(4.0) == 4.0
    assert calibrate(CALIBRATION_KNOT) == pytest.approx(2.5)
    assert calibrate(1.05) == pytest.approx(1.25)  # half the knot: half of 2.5
    assert calibrate(3.05) == pytest.approx(3.25)  # half way from the knot to 4
    values = [calibrate(i / 100) for i in range(401)]
    assert values == sorted(values)


async def test_lexical_scores_are_the_calibrated_blend_in_the_same_order():
    from agentic_retrieval.rerankers.lexical import LexicalReranker, calibrate

    hits = [
        Hit(doc_key="a", content="The night tram runs hourly after midnight.", source="s"),
        Hit(doc_key="b", content="Bikes dock at every station.", source="s", score=-1),
    ]
    reranker = LexicalReranker()
    blends = reranker.blend("night tram hours", hits)
    assert await reranker.ascore("night tram hours", hits) == [calibrate(b) for b in blends]
