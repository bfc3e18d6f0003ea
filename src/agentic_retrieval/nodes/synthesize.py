"""``synthesize``: build the response from the ranked evidence.

``extractiveData``: the grounding string, a JSON array of ``{ref_id, title, content}``
bounded by ``max_output_size`` (whole lowest-ranked chunks dropped). ``answerSynthesis``: a
Markdown answer from the answer model whose ``[ref_id:N]`` citations are checked against the
references (unknown ids are stripped); with no evidence it says so without calling a model;
when the model output cannot be parsed twice, or time is up, it degrades to the grounding
string with an error record.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.types import StreamWriter

from agentic_retrieval import prompts
from agentic_retrieval.context import Context, current_context
from agentic_retrieval.graph.bindings import Bindings
from agentic_retrieval.llm.chat_models import structured_call
from agentic_retrieval.llm.schemas import EvidenceAssessment, SynthesizedAnswer
from agentic_retrieval.nodes._shared import (
    NodeFn,
    elapsed_ms,
    remaining_seconds,
    step_completed,
    step_started,
    today,
    with_instructions,
)
from agentic_retrieval.state import AnswerActivity, ErrorInfo, RankedHit, RetrievalState
from agentic_retrieval.wire.citations import validate_citations
from agentic_retrieval.wire.grounding import format_passages, grounding_string


def make_synthesize(bindings: Bindings) -> NodeFn:
    """Build the node bound to ``bindings``."""

    async def synthesize(
        state: RetrievalState, runtime: Runtime[Context], config: RunnableConfig
    ) -> dict[str, Any]:
        """Produce the grounding string or the cited answer."""
        context = current_context(runtime)
        ranked = state.ranked
        text, kept = grounding_string(ranked, context.max_output_size, context.max_output_tokens)
        extractive = {"response": text, "grounded_ref_ids": [h.ref_id for h in kept]}
        if context.output_mode == "extractiveData":
            return extractive
        question = state.question
        if not ranked:
            topic = f": {question}" if question else ""
            return {
                "response": prompts.NO_EVIDENCE_ANSWER.format(topic=topic),
                "grounded_ref_ids": [],
            }
        left = remaining_seconds(state.started_at, context)
        if left <= 0:
            return {**extractive, "timed_out": True}
        runtime.stream_writer({"event": "answering", "passages": len(ranked)})
        return await _answer(
            bindings, state, context, config, left, extractive, runtime.stream_writer
        )

    return synthesize


async def _answer(
    bindings: Bindings,
    state: RetrievalState,
    context: Context,
    config: RunnableConfig,
    left: float,
    extractive: dict[str, Any],
    writer: StreamWriter,
) -> dict[str, Any]:
    """Ask the answer model for a cited answer; ``extractive`` is the fallback update."""
    model = bindings.models.resolve("answer", context)
    passages, shown_ids = format_passages(state.ranked, context.max_output_size)
    shown = [h for h in state.ranked if h.ref_id in shown_ids]
    prompt = context.answer_prompt.format(
        today=today(), missing=_known_gaps(state.evidence), passages=passages
    )
    prompt = with_instructions(
        prompt, prompts.ANSWER_INSTRUCTIONS_SECTION, context.answer_instructions
    )
    wall, clock = step_started(writer, "answer", "answer")
    result = await structured_call(
        model,
        SynthesizedAnswer,
        [SystemMessage(prompt), HumanMessage(state.question)],
        config=config,
        timeout=left,
    )
    record = AnswerActivity(
        key="answer",
        started=wall,
        elapsed_ms=elapsed_ms(clock),
        usage=result.usage,
        model=result.model,
    )
    if result.value is None or not result.value.answer.strip():
        error = ErrorInfo.of(result.error_code, result.error or "the answer was empty")
        record = record.model_copy(update={"error": error})
        step_completed(writer, record)
        return {**extractive, "activity_log": [record]}
    answer, removed = validate_citations(result.value.answer, _citable(shown, state))
    record = record.model_copy(update={"removed_citations": removed})
    step_completed(writer, record)
    return {
        "response": answer,
        "grounded_ref_ids": [h.ref_id for h in shown],
        "activity_log": [record],
    }


def _citable(shown: list[RankedHit], state: RetrievalState) -> set[int]:
    """ref_ids the answer may cite: only passages that will be in the references."""
    params = state.source_params
    return {
        h.ref_id
        for h in shown
        if h.source not in params or params[h.source].include_references is not False
    }


def _known_gaps(evidence: EvidenceAssessment | None) -> str:
    """The prompt's ``{missing}``: what the evidence assessment found missing, if anything."""
    if evidence is None or evidence.is_sufficient or not evidence.missing_information:
        return ""
    return "\nKnown gaps in the passages: " + "; ".join(evidence.missing_information)
