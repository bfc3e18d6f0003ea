"""The evaluation report: per-configuration summaries, per-question results, comparisons.

Summaries average over the judged questions (relevant documents known) for IR metrics, over
questions with evidence strings for evidence recall, over answers that cite for citation
validity, and over every question for latency, model calls, tokens, source queries and cost.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentic_retrieval.eval.configurations import Configuration
from agentic_retrieval.eval.datasets import Question
from agentic_retrieval.eval.metrics import IR_METRICS, mean, percentile
from agentic_retrieval.eval.runner import QueryResult
from agentic_retrieval.eval.significance import Comparison, paired_comparison

COMPARED_METRICS = (*IR_METRICS, "evidence_recall")
TABLE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    # (summary key, heading, format)
    ("nDCG@10", "nDCG@10", ".3f"),
    ("R@10", "R@10", ".3f"),
    ("R@50", "R@50", ".3f"),
    ("R@100", "R@100", ".3f"),
    ("MRR@10", "MRR@10", ".3f"),
    ("MAP", "MAP", ".3f"),
    ("evidence_recall", "evidence", ".3f"),
    ("citation_validity", "citations", ".3f"),
    ("latency_p50_ms", "p50 ms", ".0f"),
    ("latency_p95_ms", "p95 ms", ".0f"),
    ("model_calls", "calls/q", ".2f"),
    ("tokens", "tokens/q", ".0f"),
    ("source_queries", "searches/q", ".2f"),
    ("chunks", "chunks/q", ".1f"),
    ("graph_searches", "graph/q", ".2f"),
    ("graph_evidence_recall", "graph evidence", ".3f"),
    ("graph_query_rate", "gql ran", ".2f"),
    ("graph_fallback_rate", "fallback", ".2f"),
    ("graph_attempts", "gql calls", ".2f"),
    ("cost", "USD/q", ".5f"),
    ("errors", "errors", "d"),
)
MAX_FAILED_LISTED = 10
"""Failed questions ``report.md`` lists per configuration, the worst first (report.json has all)."""
_QUESTION_CHARS = 60
_ERROR_CHARS = 160


@dataclass
class ConfigurationResult:
    """One configuration's results."""

    configuration: Configuration
    queries: list[QueryResult]
    metrics: dict[str, dict[str, float]]
    """``{metric: {question id: value}}`` over the judged questions."""
    summary: dict[str, Any] = field(default_factory=dict)

    def to_dict(self, include_queries: bool = True) -> dict[str, Any]:
        """JSON-ready form."""
        data: dict[str, Any] = {
            "name": self.configuration.name,
            "configuration": {
                "effort": self.configuration.effort,
                "retrieval": self.configuration.retrieval,
                "reranker": self.configuration.reranker,
                "top_n": self.configuration.top_n,
                "output_mode": self.configuration.output_mode,
                "graph": self.configuration.graph,
            },
            "summary": self.summary,
        }
        if include_queries:
            data["queries"] = [
                {
                    **q.to_dict(),
                    "metrics": {
                        m: v[q.question_id] for m, v in self.metrics.items() if q.question_id in v
                    },
                }
                for q in self.queries
            ]
        return data


def summarize(
    queries: Sequence[QueryResult], metrics: Mapping[str, Mapping[str, float]]
) -> dict[str, Any]:
    """The summary row of one configuration (see the module docstring for the averages)."""
    count = len(queries) or 1
    latencies = [q.latency_ms for q in queries]
    citing = [q.citations["validity"] for q in queries if q.citations is not None]
    costs = [q.cost for q in queries if q.cost is not None]
    summary: dict[str, Any] = {name: mean(values.values()) for name, values in metrics.items()}
    summary.update(
        questions=len(queries),
        judged=len(next(iter(metrics.values()), {})),
        errors=sum(1 for q in queries if q.error),
        partial=sum(1 for q in queries if q.status in (206, 408)),
        evidence_recall=mean(q.evidence_recall for q in queries),
        citation_validity=mean(citing),
        answers_without_citations=sum(
            1 for q in queries if q.citations is not None and not q.citations["cited"]
        ),
        latency_p50_ms=percentile(latencies, 50),
        latency_p95_ms=percentile(latencies, 95),
        latency_mean_ms=mean(latencies),
        model_calls=sum(q.model_calls for q in queries) / count,
        input_tokens=sum(q.input_tokens for q in queries) / count,
        output_tokens=sum(q.output_tokens for q in queries) / count,
        reasoning_tokens=sum(q.reasoning_tokens for q in queries) / count,
        tokens=sum(q.input_tokens + q.output_tokens for q in queries) / count,
        source_queries=sum(q.source_queries for q in queries) / count,
        cost=sum(costs) / count if costs and len(costs) == len(queries) else None,
        chunks=sum(q.chunks for q in queries) / count,
    )
    summary.update(graph_activity(queries))
    return summary


def graph_activity(queries: Sequence[QueryResult]) -> dict[str, float | None]:
    """What the graph searches did, ``None`` each where none ran.

    ``graph_searches`` per question; the share of evidence strings the graph's own references
    hold (``graph_evidence_recall``, over questions with evidence); of the graph searches, the
    share a model-written query
    answered (``graph_query_rate``), the share entity matching answered
    (``graph_fallback_rate``, failures excluded) and model calls for a query per search
    (``graph_attempts``).
    """
    searches = sum(q.graph_searches for q in queries)
    if not searches:
        return dict.fromkeys(
            (
                "graph_searches",
                "graph_evidence_recall",
                "graph_query_rate",
                "graph_fallback_rate",
                "graph_attempts",
            )
        )
    answered = sum(q.graph_queries for q in queries)
    failed = sum(q.graph_errors for q in queries)
    return {
        "graph_searches": searches / (len(queries) or 1),
        "graph_evidence_recall": mean(q.graph_evidence_recall for q in queries),
        "graph_query_rate": answered / searches,
        "graph_fallback_rate": (searches - answered - failed) / searches,
        "graph_attempts": sum(q.graph_attempts for q in queries) / searches,
    }


def compare(
    results: Sequence[ConfigurationResult], questions: Sequence[Question], seed: int = 0
) -> list[Comparison]:
    """Every configuration against the first, per metric, on the questions both can score.

    A configuration with ``graph`` is compared with its twin without the graph (the same
    settings otherwise) when that ran too: what the graph search adds, nothing else.
    """
    if len(results) < 2:
        return []
    twins = {
        dataclasses.replace(r.configuration, graph=False): r
        for r in results
        if not r.configuration.graph
    }
    evidence_ids = [q.id for q in questions if q.evidence]
    comparisons = []
    for other in results[1:]:
        baseline = results[0]
        if other.configuration.graph:
            baseline = twins.get(dataclasses.replace(other.configuration, graph=False), baseline)
        for metric in COMPARED_METRICS:
            a, b = _paired(baseline, other, metric, evidence_ids)
            if a:
                names = (baseline.configuration.name, other.configuration.name, metric)
                comparisons.append(paired_comparison(a, b, names=names, seed=seed))
    return comparisons


def _paired(
    baseline: ConfigurationResult, other: ConfigurationResult, metric: str, evidence_ids: list[str]
) -> tuple[list[float], list[float]]:
    if metric == "evidence_recall":
        first = {q.question_id: q.evidence_recall for q in baseline.queries}
        second = {q.question_id: q.evidence_recall for q in other.queries}
        ids = [i for i in evidence_ids if first.get(i) is not None and second.get(i) is not None]
        return [first[i] or 0.0 for i in ids], [second[i] or 0.0 for i in ids]
    first_m, second_m = baseline.metrics[metric], other.metrics[metric]
    ids = [i for i in first_m if i in second_m]
    return [first_m[i] for i in ids], [second_m[i] for i in ids]


@dataclass
class EvalReport:
    """Everything one evaluation measured.

    Attributes:
        dataset: The dataset or knowledge base name.
        results: One entry per configuration, the baseline first.
        comparisons: Each configuration against the baseline, per metric.
        notes: What was left out or could not be indexed, and why.
        questions: The questions asked (with their judgements).
        info: Where and how it ran (versions, split, time).
    """

    dataset: str
    results: list[ConfigurationResult]
    comparisons: list[Comparison]
    notes: list[str]
    questions: list[Question]
    info: dict[str, Any] = field(default_factory=dict)

    def result(self, name: str) -> ConfigurationResult:
        """The result of the configuration called ``name``.

        Raises:
            KeyError: No configuration has that name.
        """
        for result in self.results:
            if result.configuration.name == name:
                return result
        raise KeyError(
            f"no configuration named {name!r}: {[r.configuration.name for r in self.results]}"
        )

    def summary_rows(self) -> list[dict[str, Any]]:
        """One row per configuration: its name and summary."""
        return [{"configuration": r.configuration.name, **r.summary} for r in self.results]

    def columns(self) -> list[tuple[str, str, str]]:
        """The table columns that have a value for some configuration.

        ``errors`` only when a question failed; ``chunks/q`` only beside graph searches.
        """
        graph = any(r.configuration.graph for r in self.results)
        return [
            column
            for column in TABLE_COLUMNS
            if any(r.summary.get(column[0]) is not None for r in self.results)
            and (column[0] != "errors" or any(r.summary["errors"] for r in self.results))
            and (column[0] != "chunks" or graph)  # beside the graph's columns: what it added
        ]

    def to_dict(self, include_queries: bool = True) -> dict[str, Any]:
        """JSON-ready form (per-question results unless ``include_queries`` is false)."""
        return {
            "dataset": self.dataset,
            "info": self.info,
            "notes": self.notes,
            "questions": [
                {
                    "id": q.id,
                    "question": q.text,
                    "relevant": dict(q.relevant),
                    "evidence": list(q.evidence),
                    "answer": q.answer,
                }
                for q in self.questions
            ],
            "configurations": [r.to_dict(include_queries) for r in self.results],
            "comparisons": [c.to_dict() for c in self.comparisons],
        }

    def write_json(self, path: str | Path) -> Path:
        """Write the full report as JSON."""
        target = Path(path)
        target.write_text(
            json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        return target

    def markdown(self, metrics: Sequence[str] = ("nDCG@10", "R@100", "evidence_recall")) -> str:
        """The summary table, the comparisons, the notes and the failed questions, as Markdown."""
        columns = self.columns()
        lines = [
            "| configuration | " + " | ".join(h for _, h, _ in columns) + " |",
            "|---" * (len(columns) + 1) + "|",
        ]
        for result in self.results:
            cells = [format_value(result.summary.get(k), f) for k, _, f in columns]
            lines.append(f"| {result.configuration.name} | " + " | ".join(cells) + " |")
        shown = [c for c in self.comparisons if c.metric in metrics]
        if shown:
            lines += ["", "| vs baseline | metric | Δ | 95% CI | p |", "|---|---|---|---|---|"]
            lines += [
                f"| {self._compared(c)} | {c.metric} | {c.delta:+.3f} | "
                f"[{c.ci_low:+.3f}, {c.ci_high:+.3f}] | {c.p_value:.3f}{c.marker} |"
                for c in shown
            ]
        if self.notes:
            lines += [""] + [f"- {note}" for note in self.notes]
        lines += self._failed_lines()
        return "\n".join(lines).rstrip() + "\n"

    def _compared(self, comparison: Comparison) -> str:
        """The configuration, and what it is compared with when not the baseline."""
        if comparison.baseline == self.results[0].configuration.name:
            return comparison.configuration
        return f"{comparison.configuration} (vs {comparison.baseline})"

    def _failed_lines(self) -> list[str]:
        """Per configuration, the questions that failed, the worst first (a bounded list)."""
        lines = [
            "",
            "## Questions that failed",
            "",
            "An error, no relevant document in the top 10 (nDCG@10 = 0), or none of the "
            f"evidence found; at most {MAX_FAILED_LISTED} per configuration, the worst first "
            "(report.json has every question).",
        ]
        texts = {q.id: q.text for q in self.questions}
        for result in self.results:
            failed = failed_questions(result)
            lines += [
                "",
                f"### {result.configuration.name}: {len(failed)} of {len(result.queries)} failed",
            ]
            if not failed:
                continue
            lines += ["", "| question | asked | nDCG@10 | evidence | why |", "|---" * 5 + "|"]
            ndcg = result.metrics.get("nDCG@10", {})
            for query, why in failed[:MAX_FAILED_LISTED]:
                cells = (
                    query.question_id,
                    _shorten(texts.get(query.question_id, ""), _QUESTION_CHARS),
                    format_value(ndcg.get(query.question_id), ".3f"),
                    format_value(query.evidence_recall, ".2f"),
                    _shorten(why, _ERROR_CHARS),
                )
                lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
            if len(failed) > MAX_FAILED_LISTED:
                lines += ["", f"... and {len(failed) - MAX_FAILED_LISTED} more (report.json)."]
        return lines

    def _repr_markdown_(self) -> str:
        return self.markdown()


def failed_questions(result: ConfigurationResult) -> list[tuple[QueryResult, str]]:
    """The questions ``result`` failed, each with why, the worst first.

    A question fails when it raised an error, when it is judged and no relevant document
    ranked in the top 10 (nDCG@10 = 0), or when it has evidence strings and none was found.
    Errors come first, then the lowest nDCG@10, then the lowest evidence recall.
    """
    ndcg = result.metrics.get("nDCG@10", {})
    failed: list[tuple[tuple[int, float, float], QueryResult, str]] = []
    for query in result.queries:
        score = ndcg.get(query.question_id)
        evidence = query.evidence_recall
        if query.error:
            why = f"error: {query.error}"
        elif score == 0.0:
            why = "no relevant document in the top 10" if query.documents else "nothing retrieved"
        elif evidence == 0.0:
            why = "none of the evidence found in the retrieved text"
        else:
            continue
        order = (0 if query.error else 1, 1.0 if score is None else score, evidence or 0.0)
        failed.append((order, query, why))
    failed.sort(key=lambda item: item[0])
    return [(query, why) for _, query, why in failed]


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _cell(text: str) -> str:
    """A Markdown table cell: a ``|`` in the text would start a new column."""
    return text.replace("|", "\\|")


def format_value(value: Any, spec: str) -> str:
    """A table cell: ``-`` for missing values."""
    if value is None:
        return "-"
    return format(value, spec)
