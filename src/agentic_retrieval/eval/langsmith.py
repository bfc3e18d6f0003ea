"""Evaluators for LangSmith: ``(run, example) -> {"key", "score"}``, the same numbers as here.

Use them with ``langsmith.evaluate(target, data=dataset, evaluators=[...])``, where the
target returns the retrieve response (``KnowledgeBase.retrieve(...).to_wire()`` or the
response object) or the retriever's ``Document`` list (as ``{"documents": [...]}`` or the
list itself), and each example's outputs hold ``relevant`` (document keys, or ``{key:
grade}``) and, for evidence recall, ``evidence`` (strings). ``run`` and ``example`` may be
LangSmith's ``Run`` / ``Example`` objects or plain dicts with ``outputs``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.documents import Document

from agentic_retrieval.eval.datasets import question_from_json
from agentic_retrieval.eval.folding import document_key
from agentic_retrieval.eval.metrics import IR_METRICS, evidence_found, ir_metrics
from agentic_retrieval.wire.models import RetrieveResponse

EVIDENCE_RECALL = "evidence_recall"
Evaluator = Callable[[Any, Any], dict[str, Any]]


def langsmith_evaluator(metric: str = "nDCG@10") -> Evaluator:
    """An evaluator computing ``metric`` for one run against its example.

    Args:
        metric: One of ``nDCG@10``, ``R@10``, ``R@50``, ``R@100``, ``MRR@10``, ``MAP``,
            ``evidence_recall``.

    Returns:
        A function ``(run, example) -> {"key": metric, "score": float | None}``; the score is
        ``None`` (with a ``comment``) when the example has nothing to score against.

    Raises:
        ValueError: An unknown metric.
    """
    if metric not in IR_METRICS and metric != EVIDENCE_RECALL:
        raise ValueError(
            f"unknown metric {metric!r}: use one of {', '.join([*IR_METRICS, EVIDENCE_RECALL])}"
        )

    def evaluator(run: Any, example: Any) -> dict[str, Any]:
        ranked = _ranked(_outputs(run))
        labels = question_from_json({"id": "example", "question": "-", **_outputs(example)})
        if metric == EVIDENCE_RECALL:
            if not labels.evidence:
                return {"key": metric, "score": None, "comment": "the example has no evidence"}
            found = evidence_found(labels.evidence, "\n".join(text for _, text in ranked))
            return {"key": metric, "score": sum(found) / len(found)}
        if not labels.judged:
            return {"key": metric, "score": None, "comment": "no relevant documents judged"}
        documents = list(dict.fromkeys(key for key, _ in ranked))
        values = ir_metrics({"q": dict(labels.relevant)}, {"q": documents})
        return {"key": metric, "score": values[metric]["q"]}

    evaluator.__name__ = f"agentic_retrieval_{metric.replace('@', '_at_').lower()}"
    return evaluator


def _outputs(item: Any) -> Any:
    outputs = item.get("outputs") if isinstance(item, Mapping) else getattr(item, "outputs", None)
    return outputs if outputs is not None else {}


def _ranked(outputs: Any) -> list[tuple[str, str]]:
    """``(document key, text)`` of each ranked chunk."""
    if isinstance(outputs, Mapping) and "documents" in outputs:
        outputs = outputs["documents"]
    elif isinstance(outputs, Mapping) and "output" in outputs and "references" not in outputs:
        outputs = outputs["output"]  # what langsmith.evaluate stores for non-dict results
    if isinstance(outputs, Sequence) and not isinstance(outputs, str):
        return [_from_document(d) for d in outputs]
    response = (
        outputs
        if isinstance(outputs, RetrieveResponse)
        else RetrieveResponse.model_validate(outputs)
    )
    return [
        (
            document_key(r.doc_key or "", r.source_data),
            str((r.source_data or {}).get("content", "")),
        )
        for r in response.references
    ]


def _from_document(item: Any) -> tuple[str, str]:
    if isinstance(item, Document):
        metadata, text = item.metadata, item.page_content
        key = str(metadata.get("doc_key") or item.id or "")
    elif isinstance(item, Mapping):  # a serialised Document
        metadata = item.get("metadata") or {}
        text = str(item.get("page_content", ""))
        key = str(metadata.get("doc_key") or item.get("id") or "")
    else:
        raise ValueError(f"cannot read a retrieved document from {type(item).__name__}")
    return document_key(key, metadata), text
