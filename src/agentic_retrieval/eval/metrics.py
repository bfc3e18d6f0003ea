"""Metrics: IR measures through ``ir-measures`` (trec_eval), plus evidence, citations, latency.

The IR measures are computed by the ``ir-measures`` library (the ``eval`` extra), which runs
``pytrec_eval`` (trec_eval's C code) for nDCG, recall and AP and its own MS MARCO
implementation for RR@10. nDCG uses trec_eval's linear gains (the grade itself), as BEIR
does; recall counts documents graded 1 or more; AP is over the whole ranked list.

trec_eval leaves out queries for which the run has no document. Here every question judged
relevant to at least one document counts, and one whose run is empty scores 0 (``trec_eval
-c``), so a configuration that finds nothing is never averaged over fewer questions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from agentic_retrieval.errors import MissingDependencyError, install_hint
from agentic_retrieval.text.citations import cited_ids

IR_METRICS: dict[str, str] = {
    "nDCG@10": "nDCG@10",
    "R@10": "R@10",
    "R@50": "R@50",
    "R@100": "R@100",
    "MRR@10": "RR@10",
    "MAP": "AP",
}
"""Our metric names and the ``ir-measures`` measure behind each."""
_SPACES = re.compile(r"\s+")
_INSTALL_HINT = f"evaluation metrics need the [eval] extra: {install_hint('eval')}"


def require_eval_extra() -> None:
    """Fail early, with the install command, when the ``eval`` extra is missing.

    Raises:
        MissingDependencyError: ``ir_measures`` cannot be imported.
    """
    try:
        import ir_measures  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError(_INSTALL_HINT) from exc


def trec_scores(documents: Sequence[str]) -> dict[str, float]:
    """Scores that keep the ranked order under trec_eval's sort (strictly decreasing)."""
    return {doc: float(len(documents) - rank) for rank, doc in enumerate(documents)}


def ir_metrics(
    qrels: Mapping[str, Mapping[str, int]], runs: Mapping[str, Sequence[str]]
) -> dict[str, dict[str, float]]:
    """Per-question values of every metric in :data:`IR_METRICS`.

    Args:
        qrels: Judged documents and grades per question id.
        runs: Ranked document keys per question id.

    Returns:
        ``{metric: {question id: value}}`` for every question with a relevant document.
    """
    require_eval_extra()
    import ir_measures

    judged = {q: dict(d) for q, d in qrels.items() if any(g > 0 for g in d.values())}
    values: dict[str, dict[str, float]] = {name: dict.fromkeys(judged, 0.0) for name in IR_METRICS}
    run = {q: trec_scores(runs.get(q, ())) for q in judged if runs.get(q)}
    if not judged or not run:
        return values
    by_measure = {ir_measures.parse_measure(m): name for name, m in IR_METRICS.items()}
    for metric in ir_measures.iter_calc(list(by_measure), judged, run):
        values[by_measure[metric.measure]][metric.query_id] = float(metric.value)
    return values


def mean(values: Iterable[float | None]) -> float | None:
    """The mean of the values that are not ``None`` (``None`` when there are none)."""
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present else None


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (linear interpolation), ``None`` for no values."""
    return float(np.percentile(values, q)) if values else None


def normalize(text: str) -> str:
    """Case- and whitespace-insensitive form for evidence matching."""
    return _SPACES.sub(" ", text).strip().casefold()


def evidence_found(evidence: Sequence[str], retrieved_text: str) -> list[bool]:
    """For each evidence string, whether the retrieved text contains it (normalised)."""
    haystack = normalize(retrieved_text)
    return [normalize(item) in haystack for item in evidence]


def citation_check(answer: str, reference_ids: Iterable[str]) -> dict[str, Any]:
    """Which ref_ids an answer cites, and whether each is a returned reference.

    Returns:
        ``{"cited": [...], "invalid": [...], "validity": share valid or None if none cited}``.
    """
    known = {str(i) for i in reference_ids}
    cited = [str(i) for i in cited_ids(answer)]
    invalid = [i for i in cited if i not in known]
    validity = (len(cited) - len(invalid)) / len(cited) if cited else None
    return {"cited": cited, "invalid": invalid, "validity": validity}
