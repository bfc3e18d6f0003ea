"""``rerank``: merge every round's hits, dedupe, score on the 0-4 scale, keep the best.

Duplicates are the same document key from the same source (retrieved by several subqueries)
or near-identical text (5-word shingle Jaccard ≥ 0.9, e.g. one passage indexed twice). Each
candidate is scored against every subquery that retrieved it and keeps its best score, as
Azure's semantic ranker scores a document against the query that found it.

Which candidates a threshold drops is :func:`~agentic_retrieval.context.applied_threshold`'s
rule, decided per candidate: an explicit threshold always, the default one only where the
candidate's score is calibrated relevance. The ``semanticReranker`` record says how many
scores were calibrated and how much of the searched wording the top passages hold, so a
ranking nobody judged is never mistaken for a judged one.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from agentic_retrieval.context import Context, applied_threshold, threshold_rule
from agentic_retrieval.errors import ErrorCode
from agentic_retrieval.graph.bindings import Bindings
from agentic_retrieval.graph.effort import result_signals
from agentic_retrieval.graph.events import Reranking, begin, complete, emit
from agentic_retrieval.graph.records import (
    Drops,
    ErrorInfo,
    RankedHit,
    RerankActivity,
    RetrievedHit,
    SourceParams,
)
from agentic_retrieval.graph.vocabulary import DropReason, Judging
from agentic_retrieval.llm.chat_models import Usage
from agentic_retrieval.nodes._shared import (
    next_round,
    remaining_seconds,
    results_processing,
    searched_sources,
    searched_text,
)
from agentic_retrieval.rerankers.base import (
    ReportingReranker,
    Reranker,
    UsageReportingReranker,
    calibration_of,
    clamp_score,
)
from agentic_retrieval.rerankers.lexical import LexicalReranker
from agentic_retrieval.state import RetrievalState, Update
from agentic_retrieval.text import SKETCH_SIZE, jaccard, shingles, sketch

logger = logging.getLogger(__name__)
NEAR_DUPLICATE_JACCARD = 0.9
SKETCH_OVERLAP = SKETCH_SIZE // 2
"""Sketch values two texts must share before their exact Jaccard is computed; at Jaccard 0.9
the expected overlap is ~15 of 16, so 8 misses almost no true pair."""


Judge = Literal["assess_evidence", "judge_results", "synthesize"]
"""Who judges a reranked round: the evidence model, the ``auto`` effort's signals, or nobody."""


async def rerank(
    state: RetrievalState, runtime: Runtime[Context], bindings: Bindings
) -> Command[Literal[Judge, "respond"]]:
    """Rank all candidates retrieved so far; the run goes on to the round's judge."""
    if state.failure:  # a failOnError source failed: the request fails, nothing to rank
        return Command(goto="respond")
    context, reranker = runtime.context, bindings.reranker
    key = f"rerank:{next_round(state.subqueries) - 1}"
    step = begin(runtime, key, RerankActivity)
    unique, queries = unique_candidates(state.hits)
    params = state.source_params
    to_score = [h for h in unique if results_processing(h.source, params, context) == "rerank"]
    to_score = to_score[: context.max_docs_for_reranker]
    unranked = [h for h in unique if results_processing(h.source, params, context) == "none"]
    emit(runtime, Reranking(candidates=len(to_score)))
    left = remaining_seconds(state.started_at, context)
    timed_out = False
    try:
        scores, calibrated, error, usage = await asyncio.wait_for(
            _score(reranker, to_score, queries), max(left, 0.0)
        )
    except TimeoutError:
        # keep what the searches found: rank it lexically rather than lose it
        timed_out = True
        scores, calibrated, _, usage = await _score(LexicalReranker(), to_score, queries)
        error = ErrorInfo.of(
            ErrorCode.TIMEOUT,
            f"reranker {reranker.name} ran out of time; "
            "candidates were ranked by lexical coverage instead",
        )
    selection, drops, rules = select(to_score, scores, params, context, unranked, calibrated)
    signals = result_signals(
        selection, searched_text(state), searched_sources(state), context.auto_top_k
    )
    record = RerankActivity(
        key=key,
        started=step.started,
        elapsed_ms=step.elapsed_ms(),
        error=error,
        reranker=reranker.name,
        candidate_count=len(to_score),
        kept_count=len(selection),
        calibrated_count=sum(calibrated.values()),
        threshold_rule=describe_rules(rules),
        term_coverage=round(signals.term_coverage, 3) if selection else None,
        usage=usage,
    )
    complete(runtime, record)
    update = Update(ranked=selection, drops=drops, activity_log=[record])
    if timed_out:
        update["timed_out"] = True
    return Command(update=update, goto=JUDGES[state.judging])


JUDGES: dict[Judging | None, Judge] = {
    "evidence": "assess_evidence",
    "signals": "judge_results",
    None: "synthesize",
}
"""The node that judges a round, by how the turn's rounds are judged (``judging``)."""


def select(
    candidates: Sequence[RetrievedHit],
    scores: dict[tuple[str, str], float],
    params: SourceParams,
    context: Context,
    unranked: Sequence[RetrievedHit] = (),
    calibrated: dict[tuple[str, str], bool] | None = None,
) -> tuple[list[RankedHit], Drops, Counter[str]]:
    """Apply thresholds, merge unreranked sources, apply the document caps.

    Reranked candidates under their threshold are dropped (their source's
    ``rerankerThreshold``, else the context's; left to the default, 2.5 where the candidate's
    score is calibrated, per ``calibrated``, and none where it is not), the rest sorted by
    score (ties: the source's own score). Hits of sources with
    ``resultsProcessing: none`` keep their source order and are interleaved by position
    (reranked first at each position). Each source's ``maxOutputDocuments`` then applies,
    and the total is capped by ``context.max_output_documents`` (else ``top_n``).

    Returns:
        The selection with ref_ids in final order, what was dropped (for the warnings), and
        how many candidates each threshold rule held (:func:`threshold_rule`'s words).
    """
    drops: Drops = {}
    rules: Counter[str] = Counter()
    ranked: list[tuple[float, RetrievedHit]] = []
    for hit in candidates:
        key = (hit.source, hit.doc_key)
        score = scores.get(key, 0.0)
        given = params[hit.source].reranker_threshold if hit.source in params else None
        judged = True if calibrated is None else calibrated.get(key, False)
        threshold = applied_threshold(given, context.reranker_threshold, judged)
        rules[threshold_rule(given, context.reranker_threshold, judged)] += 1
        if threshold is None or score >= threshold:
            ranked.append((score, hit))
        else:
            _count(drops, hit, "threshold")
    ranked.sort(key=lambda pair: (-pair[0], -pair[1].score))
    merged = _interleave(ranked, [(None, hit) for hit in unranked])
    kept = _cap(merged, params, context, drops)
    return (
        [
            RankedHit(
                **hit.model_dump(),
                ref_id=i,
                final_score=None if score is None else round(score, 4),
            )
            for i, (score, hit) in enumerate(kept)
        ],
        drops,
        rules,
    )


def describe_rules(rules: Counter[str]) -> str | None:
    """The threshold rule that held the candidates; with several, each with its count."""
    if len(rules) <= 1:
        return next(iter(rules), None)
    return "; ".join(f"{count} candidates: {rule}" for rule, count in rules.most_common())


Scored = tuple[float | None, RetrievedHit]


def _interleave(ranked: Sequence[Scored], unranked: Sequence[Scored]) -> list[Scored]:
    """``ranked[0], unranked[0], ranked[1], unranked[1]...``: each list keeps its order."""
    merged: list[Scored] = []
    for position in range(max(len(ranked), len(unranked))):
        merged += ranked[position : position + 1]
        merged += unranked[position : position + 1]
    return merged


def _cap(
    merged: Sequence[Scored],
    params: SourceParams,
    context: Context,
    drops: Drops,
) -> list[Scored]:
    """Keep at most each source's ``maxOutputDocuments`` and the run's total."""
    limit = context.max_output_documents or context.top_n
    taken: dict[str, int] = defaultdict(int)
    kept: list[Scored] = []
    for score, hit in merged:
        cap = params[hit.source].max_output_documents if hit.source in params else None
        over_source = cap is not None and taken[hit.source] >= cap
        if over_source or len(kept) >= limit:
            # top_n is the reranker's keep, not a caller's cap: only explicit caps warn
            if over_source or context.max_output_documents is not None:
                _count(drops, hit, "maxOutputDocuments")
            continue
        taken[hit.source] += 1
        kept.append((score, hit))
    return kept


def _count(drops: Drops, hit: RetrievedHit, reason: DropReason) -> None:
    by_reason = drops.setdefault(hit.activity_key, {})
    by_reason[reason] = by_reason.get(reason, 0) + 1


def unique_candidates(
    hits: Sequence[RetrievedHit],
) -> tuple[list[RetrievedHit], dict[tuple[str, str], set[str]]]:
    """Deduplicate hits; return candidates (best source rank first) and their queries.

    A chunk found by a search and also hydrated by a graph search is kept as the graph's
    (a ``graphSearch`` reference, ordered but not cut by a threshold calibrated on its
    likeness to the question).

    Returns:
        The unique candidates and, per ``(source, doc_key)``, the query texts that found it.
    """
    rank: dict[tuple[str, str], int] = {}
    per_list: dict[str, int] = defaultdict(int)
    queries: dict[tuple[str, str], set[str]] = defaultdict(set)
    first: dict[tuple[str, str], RetrievedHit] = {}
    for hit in hits:
        position = per_list[hit.activity_key]
        per_list[hit.activity_key] += 1
        key = (hit.source, hit.doc_key)
        queries[key].add(hit.query)
        if key not in first:
            first[key] = hit
            rank[key] = position
        else:
            rank[key] = min(rank[key], position)
            if hit.graph_index is not None and first[key].graph_index is None:
                # the graph reached it: graph evidence, not a search hit to judge by its
                # likeness to the question (which a multi-hop answer's chunk need not have)
                first[key] = _as_graph_evidence(hit, first[key])
    ordered = sorted(first.values(), key=lambda h: (rank[(h.source, h.doc_key)], -h.score))
    kept: list[RetrievedHit] = []
    index = _TwinIndex()
    for hit in ordered:
        twin = index.find(hit.content)
        if twin is not None:
            original = kept[twin]
            if hit.graph_index is not None and original.graph_index is None:
                kept[twin] = _as_graph_evidence(hit, original)  # the graph's, as above
                queries[(hit.source, hit.doc_key)] |= queries[(original.source, original.doc_key)]
            else:
                queries[(original.source, original.doc_key)] |= queries[(hit.source, hit.doc_key)]
            continue
        index.add(hit.content, len(kept))
        kept.append(hit)
    return kept, queries


def _as_graph_evidence(hydrated: RetrievedHit, searched: RetrievedHit) -> RetrievedHit:
    """The graph's copy of a chunk the search found too, ranked as the search ranked it.

    A hydrated chunk carries no score of its own (0) and no vector similarity, so the graph's
    copy alone ranked below the very hit the search ranked first: it takes the search's score
    and similarity. The threshold calibrated on likeness to the question still does not cut
    it (:func:`_score` never counts a graph hit's score as calibrated).
    """
    similarity = searched.vector_similarity
    return hydrated.model_copy(
        update={
            "score": max(hydrated.score, searched.score),
            "vector_similarity": hydrated.vector_similarity if similarity is None else similarity,
        }
    )


class _TwinIndex:
    """Kept texts by exact content and by sketch value, so finding a twin is not a scan.

    Comparing each candidate with every kept one was quadratic (a request with 10 intents
    over a few sources gathers thousands of hits); looking up the candidate's 16 sketch
    values touches only the kept texts sharing one, in kept order as before.
    """

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.exact: dict[str, int] = {}
        self.postings: dict[int, list[int]] = defaultdict(list)

    def find(self, text: str) -> int | None:
        """The position of the first kept text ``text`` nearly duplicates, if any."""
        exact = self.exact.get(text)
        shared: dict[int, int] = defaultdict(int)
        for value in sketch(text):
            for position in self.postings.get(value, ()):
                shared[position] += 1
        candidates = sorted(p for p, count in shared.items() if count >= SKETCH_OVERLAP)
        if exact is not None:
            candidates = sorted({*candidates, exact})
        return next((p for p in candidates if _near_duplicate(text, self.texts[p])), None)

    def add(self, text: str, position: int) -> None:
        """Remember ``text`` as kept at ``position``."""
        self.texts.append(text)
        self.exact.setdefault(text, position)
        for value in sketch(text):
            self.postings[value].append(position)


def _near_duplicate(a: str, b: str) -> bool:
    if a == b:
        return True
    if len(sketch(a) & sketch(b)) < SKETCH_OVERLAP:
        return False
    sa, sb = shingles(a), shingles(b)
    return _similar_size(sa, sb) and jaccard(sa, sb) >= NEAR_DUPLICATE_JACCARD


def _similar_size(a: frozenset[int], b: frozenset[int]) -> bool:
    """Jaccard >= t needs min/max size >= t, so most pairs are ruled out without a join."""
    small, large = sorted((len(a), len(b)))
    return small >= NEAR_DUPLICATE_JACCARD * large


async def _score(
    reranker: Reranker,
    candidates: list[RetrievedHit],
    queries: dict[tuple[str, str], set[str]],
) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], bool], ErrorInfo | None, Usage]:
    """Score candidates per query (concurrently) and keep each one's best score.

    Returns:
        The best score per (source, doc key), whether that score is calibrated relevance
        (as the call that gave it reported, see :func:`_score_one`), the error if the
        reranker failed (its candidates are then scored by the lexical reranker), and the
        tokens used.
    """
    by_query: dict[str, list[RetrievedHit]] = defaultdict(list)
    for hit in candidates:
        for query in sorted(queries[(hit.source, hit.doc_key)]):
            by_query[query].append(hit)
    error = None
    try:
        results = await asyncio.gather(
            *(_score_one(reranker, q, group) for q, group in by_query.items())
        )
    except Exception as exc:  # a failing reranker degrades to lexical scores
        logger.warning("reranker %s failed, falling back to lexical: %s", reranker.name, exc)
        message = f"reranker {reranker.name} failed; candidates were ranked by lexical coverage"
        error = ErrorInfo.of(ErrorCode.RERANKER_ERROR, message)
        reranker = LexicalReranker()
        results = [await _score_one(reranker, q, g) for q, g in by_query.items()]
    best: dict[tuple[str, str], float] = {}
    calibrated: dict[tuple[str, str], bool] = {}
    usage = sum((used for _, _, _, used in results), Usage())
    for group, scores, flags, _ in results:
        for hit, score, flag in zip(group, scores, flags, strict=True):
            key = (hit.source, hit.doc_key)
            score = clamp_score(score)
            if key not in best or score > best[key]:
                # graph evidence is never cut as unlike the question: a multi-hop answer's
                # chunk need not resemble it (the graph reached it through a row)
                best[key], calibrated[key] = score, flag and hit.graph_index is None
    return best, calibrated, error, usage


async def _score_one(
    reranker: Reranker, query: str, group: list[RetrievedHit]
) -> tuple[list[RetrievedHit], list[float], list[bool], Usage]:
    """One scoring call: the scores, whether each is calibrated relevance, the tokens."""
    if isinstance(reranker, ReportingReranker):
        report = await reranker.ascore_reported(query, group)
        scores, usage, flags = report.scores, report.usage, report.calibrated
    elif isinstance(reranker, UsageReportingReranker):
        scores, usage = await reranker.ascore_with_usage(query, group)
        flags = calibration_of(reranker, group)
    else:
        scores, usage = await reranker.ascore(query, group), {}
        flags = calibration_of(reranker, group)
    if len(scores) != len(group) or len(flags) != len(group):
        raise ValueError(f"reranker returned {len(scores)} scores for {len(group)} hits")
    used = Usage(
        input_tokens=int(usage.get("input_tokens", usage.get("inputTokens", 0)) or 0),
        output_tokens=int(usage.get("output_tokens", usage.get("outputTokens", 0)) or 0),
    )
    return group, list(scores), list(flags), used
