"""The runtime context: what one run may do (effort, output, models, limits, prompts).

Pass it as ``graph.invoke(input, context=Context(...))`` (or set it in LangGraph Studio's
configuration panel). Every field is serialisable; live objects (sources, chat models,
rerankers) are bound when the graph is built, see :func:`agentic_retrieval.build_graph`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from langgraph.config import get_config
from langgraph.runtime import Runtime

from agentic_retrieval import prompts

ReasoningEffortKind = Literal["minimal", "low", "medium"]
OutputMode = Literal["extractiveData", "answerSynthesis"]


@dataclass(kw_only=True)
class Context:
    """Configuration of one retrieval run."""

    reasoning_effort: ReasoningEffortKind = field(
        default="low",
        metadata={
            "description": "minimal: no LLM, search the intents/last message on every source. "
            "low: one planning call, one retrieval round. medium: low plus evidence "
            "assessment and follow-up rounds."
        },
    )
    output_mode: OutputMode = field(
        default="extractiveData",
        metadata={
            "description": "extractiveData: a JSON grounding string of ranked chunks. "
            "answerSynthesis: a Markdown answer citing [ref_id:N]."
        },
    )
    chat_model: str | None = field(
        default=None,
        metadata={
            "description": "provider:model for every role unless overridden (e.g. "
            "openai:gpt-4.1-mini). Falls back to the model bound at build time, then to "
            "$AGENTIC_RETRIEVAL_CHAT_MODEL."
        },
    )
    planning_model: str | None = field(
        default=None, metadata={"description": "provider:model for routing and planning."}
    )
    evidence_model: str | None = field(
        default=None, metadata={"description": "provider:model for evidence assessment."}
    )
    answer_model: str | None = field(
        default=None, metadata={"description": "provider:model for answer synthesis."}
    )
    max_subqueries: int = field(
        default=3, metadata={"description": "Most subqueries the planner may emit (1-10)."}
    )
    max_iterations: int = field(
        default=1,
        metadata={"description": "Follow-up retrieval rounds allowed at medium effort (0-5)."},
    )
    search_top: int = field(
        default=50, metadata={"description": "Hits requested from each source per subquery."}
    )
    max_docs_for_reranker: int = field(
        default=200, metadata={"description": "Most unique candidates sent to the reranker."}
    )
    top_n: int = field(
        default=10, metadata={"description": "Ranked chunks kept after reranking (1-200)."}
    )
    reranker_threshold: float | None = field(
        default=None,
        metadata={
            "description": "Drop candidates scoring under this on the 0-4 scale "
            "(a source's rerankerThreshold overrides it)."
        },
    )
    max_output_size: int = field(
        default=100_000,
        metadata={"description": "Most characters in the grounding string (whole chunks)."},
    )
    max_output_tokens: int | None = field(
        default=None,
        metadata={"description": "Token bound on the grounding string (characters / 4)."},
    )
    max_runtime_seconds: float = field(
        default=60.0, metadata={"description": "Bound on the whole run (1-300 s)."}
    )
    source_timeout_seconds: float = field(
        default=30.0, metadata={"description": "Bound on one source query."}
    )
    knowledge_sources: list[str] | None = field(
        default=None,
        metadata={"description": "Sources this run may use (None: every bound source)."},
    )
    routing_prompt: str = field(
        default=prompts.ROUTING_AND_PLANNING_PROMPT,
        metadata={"description": "System prompt of the routing and planning call."},
    )
    evidence_prompt: str = field(
        default=prompts.EVIDENCE_PROMPT,
        metadata={"description": "System prompt of the evidence assessment call."},
    )
    answer_prompt: str = field(
        default=prompts.ANSWER_PROMPT,
        metadata={"description": "System prompt of the answer synthesis call."},
    )

    def __post_init__(self) -> None:
        """Validate types, ranges and prompts so a bad value fails loudly, naming the field."""
        _check_types(self)
        _check_prompts(self)
        _check_range("max_subqueries", self.max_subqueries, 1, 10)
        _check_range("max_iterations", self.max_iterations, 0, 5)
        _check_range("search_top", self.search_top, 1, 1000)
        _check_range("max_docs_for_reranker", self.max_docs_for_reranker, 1, 1000)
        _check_range("top_n", self.top_n, 1, 200)
        _check_range("max_output_size", self.max_output_size, 1, 10_000_000)
        if self.max_output_tokens is not None:
            _check_range("max_output_tokens", self.max_output_tokens, 1, 2_500_000)
        _check_range("max_runtime_seconds", self.max_runtime_seconds, 0.001, 300)
        _check_range("source_timeout_seconds", self.source_timeout_seconds, 0.001, 300)
        if self.reranker_threshold is not None:
            _check_range("reranker_threshold", self.reranker_threshold, 0.0, 4.0)
        if self.reasoning_effort not in ("minimal", "low", "medium"):
            raise ValueError(
                f"reasoning_effort must be minimal, low or medium, not {self.reasoning_effort!r}"
            )
        if self.output_mode not in ("extractiveData", "answerSynthesis"):
            raise ValueError(
                f"output_mode must be extractiveData or answerSynthesis, not {self.output_mode!r}"
            )
        if self.reasoning_effort == "minimal" and self.output_mode == "answerSynthesis":
            raise ValueError(
                "output_mode answerSynthesis needs an LLM: reasoning_effort minimal cannot "
                "be combined with it (use low or medium)"
            )

    @classmethod
    def from_mapping(cls, values: dict[str, Any] | None) -> Context:
        """Build a Context from a dict, ignoring keys that are not fields."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (values or {}).items() if k in names})


_INTEGER_FIELDS = (
    "max_subqueries",
    "max_iterations",
    "search_top",
    "max_docs_for_reranker",
    "top_n",
    "max_output_size",
)
_NUMBER_FIELDS = ("max_runtime_seconds", "source_timeout_seconds")
_OPTIONAL_TEXT_FIELDS = ("chat_model", "planning_model", "evidence_model", "answer_model")
_PROMPT_PLACEHOLDERS: dict[str, dict[str, Any]] = {
    "routing_prompt": {"today": "", "max_subqueries": 3, "sources": ""},
    "evidence_prompt": {"today": "", "max_subqueries": 3, "previous_queries": ""},
    "answer_prompt": {"today": "", "missing": "", "passages": ""},
}


def _check_types(context: Context) -> None:
    for name in _INTEGER_FIELDS:
        value = getattr(context, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be an integer, not {value!r}")
    for name in _NUMBER_FIELDS:
        value = getattr(context, name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{name} must be a number, not {value!r}")
    for name in _OPTIONAL_TEXT_FIELDS:
        value = getattr(context, name)
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{name} must be a 'provider:model' string, not {value!r}")
    sources = context.knowledge_sources
    if sources is not None and (
        isinstance(sources, str) or not all(isinstance(s, str) for s in sources)
    ):
        raise ValueError(f"knowledge_sources must be a list of source names, not {sources!r}")
    tokens = context.max_output_tokens
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int)):
        raise ValueError(f"max_output_tokens must be an integer, not {tokens!r}")


def _check_prompts(context: Context) -> None:
    """Prompts are filled with ``str.format``: check their placeholders now, not mid-run."""
    for name, values in _PROMPT_PLACEHOLDERS.items():
        prompt = getattr(context, name)
        if not isinstance(prompt, str):
            raise ValueError(f"{name} must be a string")
        try:
            prompt.format(**values)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"{name} has an unknown or malformed placeholder ({exc!s}); its placeholders "
                f"are {', '.join('{' + k + '}' for k in values)}, and literal braces must be "
                "doubled ({{ }})"
            ) from exc
    if "{passages}" not in context.answer_prompt:
        raise ValueError("answer_prompt must contain {passages}, or the model sees no evidence")


def _check_range(name: str, value: float, low: float, high: float) -> None:
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low:g} and {high:g}, not {value!r}")


def current_context(runtime: Runtime[Context] | None) -> Context:
    """The run's Context: ``context=`` when given, else ``config["configurable"]``.

    Both ways of configuring a LangGraph run work: ``graph.invoke(x, context=Context(...))``
    and ``graph.invoke(x, {"configurable": {"reasoning_effort": "minimal"}})`` (what older
    clients and some Studio set-ups send).
    """
    context = runtime.context if runtime is not None else None
    if isinstance(context, Context):
        return context
    if isinstance(context, Mapping):
        return Context.from_mapping(dict(context))
    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:  # called outside a run
        configurable = {}
    return Context.from_mapping(dict(configurable))
