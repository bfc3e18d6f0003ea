"""``synthesize``: build the response from the ranked evidence.

``extractiveData``: the grounding string, a JSON array of ``{ref_id, title, content}``
bounded by ``max_output_size`` (whole lowest-ranked chunks dropped). ``answerSynthesis``: a
Markdown answer from the answer model whose ``[ref_id:N]`` citations are checked against the
references (unknown ids are stripped); with no evidence it says so without calling a model;
when the model output cannot be parsed twice, or time is up, it degrades to the grounding
string with an error record.
"""

from __future__ import annotations

from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from agentic_retrieval.context import Context
from agentic_retrieval.graph.bindings import Bindings
from agentic_retrieval.graph.events import Answering, begin, complete, emit
from agentic_retrieval.graph.records import AnswerActivity, ErrorInfo, RankedHit
from agentic_retrieval.llm import prompts
from agentic_retrieval.llm.chat_models import structured_call
from agentic_retrieval.llm.schemas import EvidenceAssessment, SynthesizedAnswer
from agentic_retrieval.nodes._output import format_passages, grounding_string
from agentic_retrieval.nodes._shared import remaining_seconds, today, with_instructions
from agentic_retrieval.state import RetrievalState, Update
from agentic_retrieval.text.citations import validate_citations


async def synthesize(
    state: RetrievalState, runtime: Runtime[Context], bindings: Bindings, config: RunnableConfig
) -> Update:
    """Produce the grounding string or the cited answer."""
    context = runtime.context
    ranked = state.ranked
    text, kept = grounding_string(ranked, context.max_output_size, context.max_output_tokens)
    extractive: Update = {"response": text, "grounded_ref_ids": [h.ref_id for h in kept]}
    if context.output_mode == "extractiveData":
        return extractive
    question = state.question
    if not ranked:
        topic = f": {question}" if question else ""
        return {"response": prompts.NO_EVIDENCE_ANSWER.format(topic=topic), "grounded_ref_ids": []}
    left = remaining_seconds(state.started_at, context)
    if left <= 0:
        return {**extractive, "timed_out": True}
    emit(runtime, Answering(passages=len(ranked)))
    return await _answer(state, runtime, bindings, config, left, extractive)


async def _answer(
    state: RetrievalState,
    runtime: Runtime[Context],
    bindings: Bindings,
    config: RunnableConfig,
    left: float,
    extractive: Update,
) -> Update:
    """Ask the answer model for a cited answer; ``extractive`` is the fallback update."""
    context = runtime.context
    model = bindings.models.resolve("answer", context)
    passages, shown_ids = format_passages(state.ranked, context.max_output_size)
    shown = [h for h in state.ranked if h.ref_id in shown_ids]
    prompt = context.answer_prompt.format(
        today=today(), missing=_known_gaps(state.evidence), passages=passages
    )
    prompt = with_instructions(
        prompt, prompts.ANSWER_INSTRUCTIONS_SECTION, context.answer_instructions
    )
    step = begin(runtime, "answer", AnswerActivity)
    result = await structured_call(
        model,
        SynthesizedAnswer,
        [SystemMessage(prompt), HumanMessage(state.question)],
        config=config,
        timeout=left,
    )
    record = AnswerActivity(
        key="answer",
        started=step.started,
        elapsed_ms=step.elapsed_ms(),
        usage=result.usage,
        model=result.model,
    )
    if result.value is None or not result.value.answer.strip():
        error = ErrorInfo.of(result.error_code, result.error or "the answer was empty")
        record = record.model_copy(update={"error": error})
        complete(runtime, record)
        return {**extractive, "activity_log": [record]}
    answer, removed = validate_citations(result.value.answer, _citable(shown, state))
    record = record.model_copy(update={"removed_citations": removed})
    complete(runtime, record)
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
