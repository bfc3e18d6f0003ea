"""The runtime context: what one run may do (effort, output, models, limits, prompts).

Pass it as ``graph.invoke(input, context=Context(...))`` (or set it in LangGraph Studio's
configuration panel). Every field is serialisable; live objects (sources, chat models,
rerankers) are bound when the graph is built, see :func:`agentic_retrieval.build_graph`.

Each field's metadata holds its ``description`` and numeric bounds (``ge``/``le``), under the
names pydantic's ``Field`` uses, so the JSON schema LangGraph derives for Studio shows them
(``minimum``/``maximum``); two keys pydantic ignores serve the checks: ``expects`` names the
expected value in error messages, ``placeholders`` lists a prompt's ``str.format`` fields with
sample values. The annotation gives the type (integer, number, optional); ``__post_init__``
checks every field against both in one loop.
"""

from __future__ import annotations

import math
import os
import types
from collections.abc import Iterable, Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from pydantic import ValidationError

from agentic_retrieval.errors import ThresholdSettingError
from agentic_retrieval.graph.vocabulary import OutputMode, RequestedEffort
from agentic_retrieval.llm import prompts
from agentic_retrieval.permissions import Identity

MODEL_STRING = "a 'provider:model' string"
DEFAULT_RERANKER_THRESHOLD = 2.5
"""Azure's default ``rerankerThreshold``: what ``reranker_threshold="default"`` applies to
calibrated relevance scores (see :func:`applied_threshold`)."""
THRESHOLD_DEFAULT: Literal["default"] = "default"
"""``reranker_threshold`` left to the rule: 2.5 on calibrated scores, no cut-off otherwise."""
THRESHOLD_ENV_VAR = "AGENTIC_RETRIEVAL_RERANKER_THRESHOLD"
"""The service default of ``reranker_threshold``: a number 0-4, ``none`` or ``default``."""
Threshold = float | Literal["default"] | None
"""A ``reranker_threshold`` setting: a cut-off, no cut-off (``None``), or the default rule."""


@dataclass(kw_only=True)
class Context:
    """Configuration of one retrieval run."""

    reasoning_effort: RequestedEffort | None = field(
        default=None,
        metadata={
            "description": "minimal: no LLM, search the intents/last message on every source. "
            "low: one planning call, one retrieval round. medium: low plus evidence "
            "assessment and follow-up rounds. auto: start at minimal and escalate to low, "
            "then medium, only when the question or its results call for it (the auto_* "
            "thresholds). Unset: low when a chat model is configured, else minimal (the "
            "activity log says so); low or medium fail without a model, auto stays minimal."
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
            "$AGENTIC_RETRIEVAL_CHAT_MODEL.",
            "expects": MODEL_STRING,
        },
    )
    planning_model: str | None = field(
        default=None,
        metadata={
            "description": "provider:model for routing and planning.",
            "expects": MODEL_STRING,
        },
    )
    evidence_model: str | None = field(
        default=None,
        metadata={
            "description": "provider:model for evidence assessment.",
            "expects": MODEL_STRING,
        },
    )
    answer_model: str | None = field(
        default=None,
        metadata={"description": "provider:model for answer synthesis.", "expects": MODEL_STRING},
    )
    max_subqueries: int = field(
        default=3,
        metadata={"description": "Most subqueries the planner may emit.", "ge": 1, "le": 10},
    )
    max_iterations: int = field(
        default=1,
        metadata={
            "description": "Follow-up retrieval rounds allowed at medium effort.",
            "ge": 0,
            "le": 5,
        },
    )
    search_top: int = field(
        default=50,
        metadata={
            "description": "Hits requested from each source per subquery.",
            "ge": 1,
            "le": 1000,
        },
    )
    max_docs_for_reranker: int = field(
        default=200,
        metadata={
            "description": "Most unique candidates sent to the reranker.",
            "ge": 1,
            "le": 1000,
        },
    )
    top_n: int = field(
        default=10,
        metadata={"description": "Ranked chunks kept after reranking.", "ge": 1, "le": 200},
    )
    reranker_threshold: Threshold = field(
        default_factory=lambda: threshold_from_env(),
        metadata={
            "description": "Drop candidates scoring under this on the 0-4 scale (a source's "
            "rerankerThreshold overrides it; 0 or None keeps every candidate). 'default': "
            "2.5, as Azure's, where the scores are calibrated relevance (an LLM grader, "
            "Azure's semantic ranker, the default ranking of a hit that has a vector), no "
            "cut-off where they only order candidates (lexical scores alone), which keeps "
            f"every candidate up to top_n. Unset: ${THRESHOLD_ENV_VAR}, else 'default'.",
            "ge": 0.0,
            "le": 4.0,
            "expects": "a number, 'default' or None",
        },
    )
    max_output_size: int = field(
        default=100_000,
        metadata={
            "description": "Most characters in the grounding string (whole chunks).",
            "ge": 1,
            "le": 10_000_000,
        },
    )
    max_output_tokens: int | None = field(
        default=None,
        metadata={
            "description": "Token bound on the grounding string (characters / 4).",
            "ge": 1,
            "le": 2_500_000,
        },
    )
    max_output_documents: int | None = field(
        default=None,
        metadata={
            "description": "Most documents in the response, all sources together (the retrieve "
            "API's maxOutputDocuments; None: top_n). Documents cut by it are named in a "
            "warning on their search record.",
            "ge": 1,
            "le": 1000,
        },
    )
    max_runtime_seconds: float = field(
        default=60.0,
        metadata={"description": "Bound on the whole run, in seconds.", "ge": 0.001, "le": 300},
    )
    source_timeout_seconds: float = field(
        default=30.0,
        metadata={"description": "Bound on one source query, in seconds.", "ge": 0.001, "le": 300},
    )
    knowledge_sources: list[str] | None = field(
        default=None,
        metadata={
            "description": "Sources this run may use (None: every bound source).",
            "expects": "a list of source names",
        },
    )
    auto_max_asks: int = field(
        default=1,
        metadata={
            "description": "auto: a question holding more distinct asks than this (sentences, "
            "or a clause joined as a second question: '... and how long ...') is planned, "
            "one subquery per ask, instead of searched as asked.",
            "ge": 1,
            "le": 10,
        },
    )
    auto_follow_up_max_terms: int = field(
        default=3,
        metadata={
            "description": "auto: after earlier user turns, a question with at most this many "
            "content words, or one referring back (it, that, those...; 'and ...', 'what "
            "about ...'), is a follow-up the conversation must rewrite: it is planned.",
            "ge": 0,
            "le": 20,
        },
    )
    auto_top_k: int = field(
        default=3,
        metadata={
            "description": "auto: how many of the best passages the coverage, spread and "
            "agreement signals look at.",
            "ge": 1,
            "le": 50,
        },
    )
    auto_min_top_score: float = field(
        default=2.65,
        metadata={
            "description": "auto: results are weak when the best passage scores under this "
            "(0-4 reranker scale; midway between the median best score of questions a corpus "
            "cannot answer, 2.15, and that of answering passages, 3.13, as calibrated).",
            "ge": 0.0,
            "le": 4.0,
        },
    )
    auto_min_term_coverage: float = field(
        default=0.6,
        metadata={
            "description": "auto: results are weak when the top passages hold less than this "
            "share of the question's content words (0-1).",
            "ge": 0.0,
            "le": 1.0,
        },
    )
    auto_min_score_spread: float = field(
        default=0.0,
        metadata={
            "description": "auto: results are weak when the best passage stands less than "
            "this above the mean of the next top passages (0-4; 0 leaves it out).",
            "ge": 0.0,
            "le": 4.0,
        },
    )
    auto_min_source_agreement: float = field(
        default=0.0,
        metadata={
            "description": "auto: results are weak when less than this share of the searched "
            "sources has a passage among the top ones (0-1; 0 leaves it out: sources usually "
            "hold different topics).",
            "ge": 0.0,
            "le": 1.0,
        },
    )
    unreranked_sources: list[str] | None = field(
        default=None,
        metadata={
            "description": "Sources whose results keep their own order, unreranked and "
            "unfiltered by the threshold (a knowledge source's resultsProcessing 'none'; a "
            "request's knowledgeSourceParams override it).",
            "expects": "a list of source names",
        },
    )
    retrieval_instructions: str | None = field(
        default=None,
        metadata={
            "description": "The knowledge base's retrievalInstructions: guidance for source "
            "selection and planning, added to the planning prompt as data.",
        },
    )
    answer_instructions: str | None = field(
        default=None,
        metadata={
            "description": "The knowledge base's answerInstructions: guidance for answer "
            "synthesis, added to the answer prompt as data.",
        },
    )
    service_endpoint: str | None = field(
        default=None,
        metadata={
            "description": "Base URL of the service answering the request; references to its "
            "own indexes get a citationUrl under it (set by the REST server).",
        },
    )
    api_version: str | None = field(
        default=None,
        metadata={
            "description": "The request's api-version, used in citationUrl (set by the REST "
            "server; None: the newest GA version).",
        },
    )
    identity: Identity | None = field(
        default=None,
        metadata={
            "description": "Who is asking (user_id, groups): sources that trim by permission "
            "return only what this identity may see. Lives in the run's context only: never "
            "in the graph state, a checkpoint, a prompt or a filter, so the planner cannot "
            "read or change it. None: an anonymous caller.",
            "expects": "an Identity (user_id, groups)",
        },
    )
    enforce_permissions: bool = field(
        default=False,
        metadata={
            "description": "Fail closed: hide documents indexed without permissions, and "
            "record an error for any source that cannot trim by permission instead of "
            "searching it unfiltered. Documents with permissions are trimmed either way.",
        },
    )
    routing_prompt: str = field(
        default=prompts.ROUTING_AND_PLANNING_PROMPT,
        metadata={
            "description": "System prompt of the routing and planning call.",
            "placeholders": {"today": "", "max_subqueries": 3, "sources": ""},
        },
    )
    evidence_prompt: str = field(
        default=prompts.EVIDENCE_PROMPT,
        metadata={
            "description": "System prompt of the evidence assessment call.",
            "placeholders": {"today": "", "max_subqueries": 3, "previous_queries": ""},
        },
    )
    answer_prompt: str = field(
        default=prompts.ANSWER_PROMPT,
        metadata={
            "description": "System prompt of the answer synthesis call.",
            "placeholders": {"today": "", "missing": "", "passages": ""},
        },
    )

    def __post_init__(self) -> None:
        """Validate types, bounds and prompts so a bad value fails loudly, naming the field.

        An ``identity`` given as a dict (``{"user_id": ..., "groups": [...]}``, as JSON
        clients such as LangGraph Studio send it) becomes an :class:`Identity`.
        """
        if isinstance(self.identity, Mapping):
            try:
                self.identity = Identity.model_validate(self.identity)
            except ValidationError as exc:
                raise ValueError(f"identity: {exc.errors()[0]['msg']}") from None
        for spec in fields(self):
            _check_field(spec, getattr(self, spec.name))
        if "{passages}" not in self.answer_prompt:
            raise ValueError("answer_prompt must contain {passages}, or the model sees no evidence")
        if self.reasoning_effort == "minimal" and self.output_mode == "answerSynthesis":
            raise ValueError(
                "output_mode answerSynthesis needs an LLM: reasoning_effort minimal cannot "
                "be combined with it (use low or medium)"
            )

    @classmethod
    def from_mapping(cls, values: dict[str, Any] | None, *, strict: bool = False) -> Context:
        """Build a Context from a dict, ignoring keys that are not fields.

        Args:
            values: Field values by name.
            strict: Refuse keys that are not fields instead (a typo must not pass for unset).

        Raises:
            ValueError: ``strict`` and a key that is not a field, or a value out of bounds.
        """
        names = {f.name for f in fields(cls)}
        given = values or {}
        unknown = sorted(str(k) for k in given if k not in names) if strict else []
        if unknown:
            raise ValueError(f"unknown context field(s): {', '.join(unknown)}")
        return cls(**{k: v for k, v in given.items() if k in names})


def threshold_from_env(environ: Mapping[str, str] | None = None) -> Threshold:
    """``$AGENTIC_RETRIEVAL_RERANKER_THRESHOLD`` as a setting (unset: ``"default"``).

    Raises:
        ThresholdSettingError: Neither a number from 0 to 4, ``none`` nor ``default``.
    """
    raw = (os.environ if environ is None else environ).get(THRESHOLD_ENV_VAR, "")
    try:
        return parse_threshold(raw, f"${THRESHOLD_ENV_VAR}")
    except ValueError as exc:
        raise ThresholdSettingError(str(exc)) from None


def parse_threshold(text: str, what: str = "rerankerThreshold") -> Threshold:
    """A threshold as a person writes it: ``2.5``, ``none`` (no cut-off) or ``default``.

    Raises:
        ValueError: Naming ``what``, for anything else or a number outside 0-4.
    """
    word = text.strip().casefold()
    if word in ("", THRESHOLD_DEFAULT):
        return THRESHOLD_DEFAULT
    if word in ("none", "off"):
        return None
    try:
        value = float(word)
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= 4.0:  # NaN fails too
        raise ValueError(
            f"{what} must be a number from 0 to 4, 'none' or 'default', not {text.strip()!r}"
        )
    return value


def applied_threshold(
    source_threshold: float | None, setting: Threshold, calibrated: bool
) -> float | None:
    """The cut-off one candidate is held to; the one place this rule is decided.

    An explicit threshold is always honoured: a source's ``rerankerThreshold`` first, else the
    run's ``reranker_threshold`` (a number, or ``None`` for none). Left to the default rule,
    Azure's 2.5 applies to calibrated relevance scores only: a score that only orders
    candidates (term overlap) never decides alone that an answering passage is irrelevant.

    Args:
        source_threshold: The request's ``rerankerThreshold`` for the candidate's source.
        setting: The run's ``reranker_threshold``.
        calibrated: Whether the candidate's score is calibrated relevance.
    """
    if source_threshold is not None:
        return source_threshold
    if setting == THRESHOLD_DEFAULT:
        return DEFAULT_RERANKER_THRESHOLD if calibrated else None
    return setting


def threshold_rule(source_threshold: float | None, setting: Threshold, calibrated: bool) -> str:
    """Which rule of :func:`applied_threshold` held one candidate, in words (the activity log)."""
    threshold = applied_threshold(source_threshold, setting, calibrated)
    if source_threshold is not None or setting != THRESHOLD_DEFAULT:
        if threshold is None:
            return "no cut-off: rerankerThreshold is none"
        return f"rerankerThreshold {threshold:g}, as set"
    if threshold is not None:
        return f"default rerankerThreshold {threshold:g} on calibrated relevance"
    return (
        "no cut-off: the scores are not calibrated relevance (lexical scores only order "
        "candidates), so the default rerankerThreshold does not apply"
    )


def _check_field(spec: Field[Any], value: Any) -> None:
    """Check ``value`` against the field's annotation and its metadata (bounds, placeholders)."""
    name = spec.name
    kind, optional, words = _HINTS[name]
    if (value is None and optional) or (isinstance(value, str) and value in words):
        return
    if get_origin(kind) is Literal:
        choices = get_args(kind)
        if value not in choices:
            raise ValueError(f"{name} must be {_one_of(choices)}, not {value!r}")
        return
    if not _is_instance(value, kind):
        expected = spec.metadata.get("expects") or _EXPECTS.get(kind, f"a {kind.__name__}")
        raise ValueError(f"{name} must be {expected}, not {value!r}")
    if "ge" in spec.metadata or "le" in spec.metadata:
        low, high = spec.metadata.get("ge", -math.inf), spec.metadata.get("le", math.inf)
        if not low <= value <= high:
            raise ValueError(f"{name} must be between {low:g} and {high:g}, not {value!r}")
    if "placeholders" in spec.metadata:
        _check_placeholders(name, value, spec.metadata["placeholders"])


def _is_instance(value: Any, kind: Any) -> bool:
    if isinstance(value, bool):  # a bool is an int to Python, never a count or a bound here
        return kind is bool
    if kind is float:
        return isinstance(value, int | float)
    if get_origin(kind) is list:
        (item,) = get_args(kind)
        return (
            isinstance(value, Iterable)
            and not isinstance(value, str)
            and all(isinstance(v, item) for v in value)
        )
    return isinstance(value, kind)


def _one_of(choices: tuple[Any, ...]) -> str:
    """``minimal, low or medium``."""
    return f"{', '.join(map(str, choices[:-1]))} or {choices[-1]}"


def _type_and_optionality(hint: Any) -> tuple[Any, bool, tuple[Any, ...]]:
    """``int | None`` -> ``(int, True, ())``; ``int`` -> ``(int, False, ())``.

    A union of a type and literal words (``float | Literal["default"] | None``) gives the words
    as the third item: values the field takes besides the type's.
    """
    if get_origin(hint) in (Union, types.UnionType):
        args = get_args(hint)
        kinds = [a for a in args if a is not type(None)]
        typed = [a for a in kinds if get_origin(a) is not Literal]
        words = tuple(w for a in kinds if get_origin(a) is Literal for w in get_args(a))
        if len(kinds) == 1:
            return kinds[0], len(kinds) < len(args), ()
        if len(typed) == 1 and words:
            return typed[0], len(kinds) < len(args), words
    return hint, False, ()


_EXPECTS: dict[Any, str] = {int: "an integer", float: "a number", str: "a string"}
_HINTS = {name: _type_and_optionality(hint) for name, hint in get_type_hints(Context).items()}


def _check_placeholders(name: str, prompt: str, values: dict[str, Any]) -> None:
    """Prompts are filled with ``str.format``: check their placeholders now, not mid-run."""
    try:
        prompt.format(**values)
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(
            f"{name} has an unknown or malformed placeholder ({exc!s}); its placeholders "
            f"are {', '.join('{' + k + '}' for k in values)}, and literal braces must be "
            "doubled ({{ }})"
        ) from exc


DEFAULTS_KEY = "agentic_retrieval_defaults"
"""``config["configurable"]`` key of the settings a graph applies where a run's context is
silent: a knowledge-base directory's, for the graph Studio serves (see :func:`settings_of`)."""


def settings_of(context: Context) -> dict[str, Any]:
    """The fields of ``context`` that differ from :class:`Context`'s defaults, by name.

    What :data:`DEFAULTS_KEY` holds (``graph.with_config(configurable={DEFAULTS_KEY:
    settings_of(kb.defaults)})``): plain values, never the caller identity.
    """
    plain = Context()
    return {
        spec.name: getattr(context, spec.name)
        for spec in fields(Context)
        if spec.name != "identity" and getattr(context, spec.name) != getattr(plain, spec.name)
    }
