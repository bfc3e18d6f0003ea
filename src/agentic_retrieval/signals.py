"""Measurable facts the ``auto`` effort decides on: the question's shape, the results' strength.

No model is involved: each signal is computed from the conversation or from the ranked
passages, recorded with the decision it led to (:class:`~agentic_retrieval.state.TierDecision`)
and compared with a threshold in :class:`~agentic_retrieval.context.Context`, so a reader can
check every escalation against the numbers that caused it.

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

from agentic_retrieval.state import RankedHit
from agentic_retrieval.text import token_set, tokenize

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
