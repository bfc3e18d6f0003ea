"""Writing a report to a directory: JSON, Markdown, TREC runs and qrels, the chart."""

from __future__ import annotations

from pathlib import Path

from agentic_retrieval.eval.chart import quality_cost_chart
from agentic_retrieval.eval.report import EvalReport
from agentic_retrieval.eval.trec import write_qrels, write_run

REPORT_JSON = "report.json"
REPORT_MARKDOWN = "report.md"
QRELS = "qrels.txt"
CHART = "quality-vs-cost.png"
RUNS = "runs"


def write_outputs(report: EvalReport, directory: str | Path) -> dict[str, Path]:
    """Write every output of ``report`` into ``directory`` (created if missing).

    Returns:
        The written files by kind (``json``, ``markdown``, ``qrels``, ``chart``, and
        ``run:<configuration>`` per configuration).
    """
    root = Path(directory)
    (root / RUNS).mkdir(parents=True, exist_ok=True)
    written = {
        "json": report.write_json(root / REPORT_JSON),
        "qrels": write_qrels(root / QRELS, {q.id: dict(q.relevant) for q in report.questions}),
    }
    (root / REPORT_MARKDOWN).write_text(report.markdown(), encoding="utf-8")
    written["markdown"] = root / REPORT_MARKDOWN
    for result in report.results:
        runs = {q.question_id: q.documents for q in result.queries}
        slug = result.configuration.slug
        written[f"run:{result.configuration.name}"] = write_run(
            root / RUNS / f"{slug}.run", runs, slug
        )
    written["chart"] = quality_cost_chart(report, root / CHART)
    return written
