"""The words a run is described in, each written once.

Every module that names an effort, an output mode, who planned a turn or why a document was
left out imports the word from here; the tuples beside each literal list its words for code
that needs them at run time (command-line choices, checks).
"""

from __future__ import annotations

from typing import Literal, get_args

Effort = Literal["minimal", "low", "medium"]
"""A tier a turn runs at: no model, planning, planning plus evidence assessment."""
RequestedEffort = Literal[Effort, "auto"]
"""An effort a caller may ask for: a tier, or ``auto`` (start at minimal, escalate)."""
OutputMode = Literal["extractiveData", "answerSynthesis"]
"""What a run returns: the ranked passages as a grounding string, or a cited answer."""
ResultsProcessing = Literal["rerank", "none"]
"""What happens to a source's hits: reranked and cut by the threshold, or kept in order."""
Planner = Literal["caller", "model", "question"]
"""Who planned a turn's retrieval: the caller (``intents``), the planning model, or nobody
(the model-free tier: the question as asked)."""
ModelRole = Literal["planning", "evidence", "answer"]
"""What a chat model is asked to do; each role has its own model setting."""
DropReason = Literal["threshold", "maxOutputDocuments", "outputSize"]
"""Why a retrieved document is not in the response: it scored under ``rerankerThreshold``, a
``maxOutputDocuments`` cap cut it, or it did not fit the output size budget."""
Judging = Literal["evidence", "signals"]
"""How a turn's reranked rounds are judged: the evidence model assesses them (``medium``), or
the ``auto`` effort measures their signals (``judge_results``)."""
JudgedStep = Literal["question", "results"]
"""What an ``auto`` decision judged: the question before searching, or a round's results."""

EFFORTS: tuple[Effort, ...] = get_args(Effort)
REQUESTED_EFFORTS: tuple[RequestedEffort, ...] = (*EFFORTS, "auto")
OUTPUT_MODES: tuple[OutputMode, ...] = get_args(OutputMode)
RESULTS_PROCESSING: tuple[ResultsProcessing, ...] = get_args(ResultsProcessing)

WIRE_SOURCE_KINDS = frozenset({"searchIndex", "azureBlob", "indexedOneLake", "web"})
"""Knowledge-source kinds the Azure SDK (12.0.0) has typed reference models for; any other
kind (``local``, ``langchain``, ``file``...) shows on the wire as ``searchIndex``."""


def wire_kind(kind: str) -> str:
    """The kind a source shows on the wire (its real kind stays in ``knowledgeSourceKind``).

    Our own kinds are search indexes to a client: mapping them to ``searchIndex`` lets the
    official SDK deserialize references as ``KnowledgeBaseSearchIndexReference`` (with
    ``doc_key``).
    """
    return kind if kind in WIRE_SOURCE_KINDS else "searchIndex"
