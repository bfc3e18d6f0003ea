"""The effort policy: starting tiers, the ``auto`` effort's signals and thresholds, budgets.

This module holds the tier a turn starts at, the measured signals the ``auto`` effort decides
on, the thresholds it compares them with, and the follow-up budget.
The tier is decided once, when a turn begins (:func:`choose_effort`, :func:`planner_for`), and
recorded in the state; ``auto`` then moves up only on measured facts. No model is involved in
measuring: each signal is computed from the conversation or from the ranked passages, recorded
with the decision it led to (:class:`~agentic_retrieval.graph.records.TierDecision`) and compared
with a threshold of the :class:`~agentic_retrieval.context.Context`, so a reader can check
every escalation against the numbers that caused it.

Question signals (before anything is searched): ``prior_turns`` (earlier user messages),
``terms`` (content words as the lexical rankers count them, greetings and thanks left out),
``asks`` (distinct questions in the message) and ``refers_back`` (a word that only makes
sense with the earlier turns).

Result signals (after a round is reranked): ``top_score`` (the best passage on the 0-4
scale), ``score_spread`` (how far the best passage stands above the mean of the next ones),
``term_coverage`` (share of the question's content words found in the top passages) and
``source_agreement`` (share of the searched sources that put a passage in the top ones).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from langchain_core.messages import BaseMessage

from agentic_retrieval.context import Context
from agentic_retrieval.graph.records import RankedHit
from agentic_retrieval.graph.vocabulary import Effort, Planner, RequestedEffort
from agentic_retrieval.llm.chat_models import MODEL_ENV_VAR
from agentic_retrieval.text import token_set, tokenize

# --- the tier a turn starts at ----------------------------------------------------------------

NO_MODEL_NOTE = (
    "no chat model is configured, so the model-free tier ran (minimal effort: the question "
    f"searched as asked, no query planning); set {MODEL_ENV_VAR} (e.g. openai:gpt-4.1-mini) "
    "to plan at low or medium effort"
)
"""Said once, in the ``agenticReasoning`` record, when an unset effort ran without a model."""

INTENTS_AT_MEDIUM_NOTE = (
    "medium effort with intents: the intents were searched as given, and medium checks the "
    "evidence (with follow-up rounds) only for a question it plans itself, so no evidence "
    "check ran; send the conversation as messages to have it checked"
)
"""Said once when a caller chose medium and planned with ``intents``: it answers like low."""


@dataclass(frozen=True)
class EffortChoice:
    """The tier a turn starts at, what the caller asked for, and the note to show."""

    effort: Effort
    requested: RequestedEffort | None = None
    """The effort the caller chose (request, Context or configuration); ``None``: default."""
    note: str | None = None
    auto: bool = False
    """The ``auto`` effort may escalate: a planning model is configured and no caller plan."""


def choose_effort(
    requested: RequestedEffort | None, *, has_intents: bool, can_plan: bool
) -> EffortChoice:
    """Decide the tier a turn starts at; the one place this is decided (the result is in state).

    An effort the caller chose is kept, even when it needs a model there is not (that is the
    caller's error to hear, in its own interface). ``auto`` starts at the model-free tier and
    may escalate when a planning model is configured (and the caller did not plan with
    ``intents``). Left unset, the effort is ``low`` when a planning model is configured and
    otherwise the model-free tier (``minimal``). Whenever the model-free tier runs because
    there is no model, the note says so once in the activity log.

    Args:
        requested: The effort the caller set, or ``None`` for the default.
        has_intents: The caller passed ``intents`` (its own plan: no model would plan).
        can_plan: A planning model is configured.
    """
    # with intents nothing needed a model: the fallback changes nothing worth saying
    note = None if can_plan or has_intents else NO_MODEL_NOTE
    if requested == "auto":
        return EffortChoice("minimal", "auto", note, auto=can_plan and not has_intents)
    if requested == "medium" and has_intents:  # the caller planned: nothing to assess
        return EffortChoice("medium", "medium", INTENTS_AT_MEDIUM_NOTE)
    if requested is not None:
        return EffortChoice(requested, requested)
    if can_plan:
        return EffortChoice("low")
    return EffortChoice("minimal", note=note)


def planner_for(has_intents: bool, reasoning_effort: Effort) -> Planner:
    """Decide who plans a turn; the one place this is decided (the result is in state).

    Args:
        has_intents: The caller passed ``intents`` (its own plan: no model call).
        reasoning_effort: The run's effort; ``minimal`` never calls a model.
    """
    if has_intents:
        return "caller"
    return "question" if reasoning_effort == "minimal" else "model"


def within_budget(iteration: int, context: Context) -> bool:
    """Whether another follow-up round may run: the one check of ``max_iterations``.

    Args:
        iteration: Follow-up rounds run so far.
        context: The run's settings.
    """
    return iteration < context.max_iterations


NEXT_TIER: dict[Effort, Effort] = {"minimal": "low", "low": "medium"}
"""Where weak results escalate to, from the tier that produced them."""


# --- the signals --------------------------------------------------------------------------------

REFERRING_WORDS = frozenset(
    """it its it's that this those these they them their theirs he him his she her same
    another ones former latter""".split()
)
"""Words that point at something said earlier: after earlier turns, a question using one
cannot be searched as it is."""

SMALL_TALK = frozenset(
    """hello hi hey thanks thank thx cheers bye goodbye ok okay good morning afternoon evening
    great cool nice yes no please""".split()
)
"""Words of greetings and thanks: a message of only these has nothing to search."""

FOLLOW_UP_OPENINGS = ("and ", "what about", "how about", "also ", "then ", "but ", "or ")
"""Openings of a message that continues the previous one."""

_ASK_JOINER = re.compile(
    r"(?:[,;]\s*|\s)(?:and|also|plus)\s+(?=(?:how|what|when|where|who|whom|whose|which|why|"
    r"can|could|do|does|did|is|are|was|were|will|would|should|must|may)\b)",
    re.IGNORECASE,
)
"""``… and how …``, ``…; also when …``: a second question joined to the first."""
_SENTENCE_END = re.compile(r"[?;]+|\.\s+(?=[A-Z])")


@dataclass(frozen=True)
class QuestionSignals:
    """The shape of a turn's question.

    Attributes:
        prior_turns: User messages before this one (the conversation's length).
        terms: Content words of the question.
        asks: Distinct questions in the message.
        refers_back: The message uses a word pointing at earlier turns, or opens as a
            continuation (``and …``, ``what about …``).
    """

    prior_turns: int
    terms: int
    asks: int
    refers_back: bool

    def as_record(self) -> dict[str, float]:
        """The signals as numbers, for the activity log."""
        return {k: float(v) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class ResultSignals:
    """The strength of a round's ranked passages.

    Attributes:
        passages: Passages that passed the reranker threshold.
        top_score: The best passage's score (0-4; 0 when there is none).
        score_spread: The best score minus the mean of the next passages among the top
            ones (0 with fewer than two passages).
        term_coverage: Share (0-1) of the question's content words present in the top
            passages' titles or text.
        source_agreement: Share (0-1) of the searched sources with a passage among the top
            ones.
    """

    passages: int
    top_score: float
    score_spread: float
    term_coverage: float
    source_agreement: float

    def as_record(self) -> dict[str, float]:
        """The signals as numbers (rounded), for the activity log."""
        return {k: round(float(v), 3) for k, v in asdict(self).items()}


def question_signals(messages: Sequence[BaseMessage], question: str) -> QuestionSignals:
    """Measure the shape of ``question``, the last user message of ``messages``.

    Args:
        messages: The conversation, the question last.
        question: The question's text.
    """
    users = [m for m in messages if m.type == "human"]
    prior = max(len(users) - 1, 0)
    words = [w.casefold() for w in re.findall(r"[\w']+", question)]
    opening = " ".join(words[:2]) + " "
    refers = any(w in REFERRING_WORDS for w in words) or opening.startswith(FOLLOW_UP_OPENINGS)
    return QuestionSignals(
        prior_turns=prior,
        terms=len(set(tokenize(question)) - SMALL_TALK),
        asks=count_asks(question),
        refers_back=refers,
    )


def count_asks(question: str) -> int:
    """How many distinct questions ``question`` holds (at least one); see :func:`split_asks`."""
    return max(len(split_asks(question)), 1)


def split_asks(question: str) -> list[str]:
    """The distinct questions in ``question``: sentences, and clauses joined as a second one.

    ``Where is the office and how long is an umbrella kept?`` holds two; ``Which trams and
    buses run late?`` one. A part without content words (``Thanks!``) is not an ask.
    """
    parts = (
        part.strip(" ,;")
        for sentence in _SENTENCE_END.split(question)
        for part in _ASK_JOINER.split(sentence)
    )
    return [part for part in parts if set(tokenize(part)) - SMALL_TALK]


def question_terms(text: str) -> set[str]:
    """The content words a passage should hold: ``text``'s tokens but the word after ``how``.

    ``how much``, ``how long``, ``how often`` phrase the question; they do not name its topic.
    """
    words = re.findall(r"[\w']+", text.casefold())
    phrasing = {after for before, after in itertools.pairwise(words) if before == "how"}
    return set(tokenize(text)) - set(tokenize(" ".join(phrasing)))


def result_signals(
    ranked: Sequence[RankedHit], question: str, searched_sources: Sequence[str], top_k: int
) -> ResultSignals:
    """Measure how well the ranked passages answer ``question``.

    Args:
        ranked: The reranked passages, best first.
        question: What was searched: the question as asked, or the planned subqueries.
        searched_sources: The sources the round searched.
        top_k: How many of the best passages coverage, spread and agreement look at.
    """
    top = list(ranked[:top_k])
    if not top:
        return ResultSignals(0, 0.0, 0.0, 0.0, 0.0)
    # passages of a resultsProcessing 'none' source carry no score: only scored ones count
    scores = [h.final_score for h in top if h.final_score is not None]
    best = scores[0] if scores else 0.0
    rest = scores[1:]
    spread = best - sum(rest) / len(rest) if rest else 0.0
    terms = question_terms(question)
    found: set[str] = set()
    for hit in top:
        found |= token_set(hit.content) | token_set(hit.title or "")
    coverage = len(terms & found) / len(terms) if terms else 1.0
    sources = set(searched_sources)
    agreeing = {h.source for h in top if h.source in sources}
    agreement = len(agreeing) / len(sources) if sources else 0.0
    return ResultSignals(len(ranked), best, spread, coverage, agreement)


# --- the thresholds -----------------------------------------------------------------------------


def needs_planning(signals: QuestionSignals, context: Context) -> str | None:
    """Why the question cannot be searched as it is, or ``None`` when it can."""
    if signals.terms == 0:
        return "no searchable words: the planner decides whether retrieval is needed"
    if signals.asks > context.auto_max_asks:
        return (
            f"{signals.asks} distinct asks (auto_max_asks {context.auto_max_asks}): "
            "planned as one subquery each"
        )
    if signals.prior_turns and signals.refers_back:
        return (
            f"a follow-up referring to the {signals.prior_turns} earlier turn(s): the "
            "planner rewrites it with the conversation"
        )
    if signals.prior_turns and signals.terms <= context.auto_follow_up_max_terms:
        return (
            f"a follow-up of {signals.terms} content word(s) after {signals.prior_turns} "
            f"earlier turn(s) (auto_follow_up_max_terms {context.auto_follow_up_max_terms}): "
            "the planner rewrites it with the conversation"
        )
    return None


def searchable_reason(signals: QuestionSignals) -> str:
    """Why the question is searched as asked."""
    turns = "the first turn" if not signals.prior_turns else "it stands on its own"
    return f"searched as asked: one ask of {signals.terms} content word(s), {turns}"


def weaknesses(signals: ResultSignals, context: Context, *, cut: bool = True) -> list[str]:
    """What makes the results weak, one phrase per signal under its threshold.

    Args:
        signals: The round's measured results.
        context: The run's thresholds.
        cut: Whether the reranker threshold dropped candidates (else nothing was found).
    """
    if not signals.passages:
        return ["no passage passed the reranker threshold" if cut else "no passage was found"]
    found = []
    if signals.top_score < context.auto_min_top_score:
        found.append(
            f"best passage scores {signals.top_score:.2f} "
            f"(auto_min_top_score {context.auto_min_top_score:g})"
        )
    if signals.term_coverage < context.auto_min_term_coverage:
        found.append(
            f"top passages hold {signals.term_coverage:.0%} of the question's words "
            f"(auto_min_term_coverage {context.auto_min_term_coverage:g})"
        )
    if signals.passages > 1 and signals.score_spread < context.auto_min_score_spread:
        found.append(
            f"best passage stands {signals.score_spread:.2f} above the next "
            f"(auto_min_score_spread {context.auto_min_score_spread:g})"
        )
    if signals.source_agreement < context.auto_min_source_agreement:
        found.append(
            f"{signals.source_agreement:.0%} of the searched sources agree "
            f"(auto_min_source_agreement {context.auto_min_source_agreement:g})"
        )
    return found


def strong_reason(signals: ResultSignals) -> str:
    """Why the results are kept as they are."""
    return (
        f"results are strong: best passage {signals.top_score:.2f}, top passages hold "
        f"{signals.term_coverage:.0%} of the question's words"
    )
