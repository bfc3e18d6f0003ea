"""Quality against cost, one point per configuration (matplotlib, the ``eval`` extra).

Two panels share the quality axis: latency (p50 ms per question) and model tokens per
question; the second is left out when no configuration used a model. Each point carries the
95% bootstrap confidence interval of its mean quality over the questions, and both axes
start at 0, so two configurations a hair apart look a hair apart (an axis fitted to the
points, without intervals, made any difference look large). The image is a PNG, written with
matplotlib's non-interactive Agg backend (no display needed).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentic_retrieval.errors import MissingDependencyError, install_hint
from agentic_retrieval.eval.significance import mean_interval

if TYPE_CHECKING:
    from agentic_retrieval.eval.report import EvalReport

PANELS = (
    ("latency_p50_ms", "latency p50 (ms per question)"),
    ("tokens", "model tokens per question (input + output)"),
)


@dataclass(frozen=True)
class Point:
    """One configuration on the chart: its costs and its quality's mean and 95% interval."""

    label: str
    costs: dict[str, float | None]
    quality: float
    low: float
    high: float


def chart_points(report: EvalReport, metric: str = "nDCG@10") -> tuple[str, list[Point]]:
    """The metric charted (``evidence_recall`` when ``metric`` has no value) and its points.

    The interval is taken over the per-question values the summary averages.
    """
    rows = report.summary_rows()
    if all(row.get(metric) is None for row in rows):
        metric = "evidence_recall"
    points = []
    for result, row in zip(report.results, rows, strict=True):
        if metric == "evidence_recall":
            values = [q.evidence_recall for q in result.queries if q.evidence_recall is not None]
        else:
            values = list(result.metrics.get(metric, {}).values())
        interval = mean_interval(values, seed=report.info.get("seed", 0) or 0)
        if interval is None:
            continue
        costs = {key: row.get(key) for key, _ in PANELS}
        points.append(Point(row["configuration"], costs, *interval))
    return metric, points


def quality_cost_figure(report: EvalReport, metric: str = "nDCG@10") -> Any:
    """The chart as a matplotlib ``Figure`` (the caller saves or shows it).

    Raises:
        MissingDependencyError: matplotlib (the ``eval`` extra) is not installed.
    """
    plt = _pyplot()
    metric, points = chart_points(report, metric)
    panels = [PANELS[0]]
    if any(p.costs["tokens"] for p in points):
        panels.append(PANELS[1])
    height = 4.0 + 0.25 * len(points)
    figure, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), height), squeeze=False)
    for axis, (key, label) in zip(axes[0], panels, strict=True):
        for index, point in enumerate(points):
            x = point.costs[key]
            if x is None:
                continue
            axis.errorbar(
                [x],
                [point.quality],
                yerr=[[point.quality - point.low], [point.high - point.quality]],
                fmt="os^Dv<>p*h"[index % 10],
                markersize=8,
                capsize=4,
                color=f"C{index % 10}",
                zorder=3,
                label=point.label,
            )
        axis.set_xlabel(label)
        axis.set_ylabel(f"{metric} (bars: 95% CI over questions)")
        axis.set_ylim(0, 1.05)  # every charted metric lies in [0, 1]
        axis.set_xlim(left=0, right=max([p.costs[key] or 0 for p in points] + [1e-9]) * 1.15)
        axis.grid(True, alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=min(2, max(1, len(labels))), fontsize=8)
    figure.suptitle(f"{report.dataset}: {metric} against cost, per configuration")
    figure.tight_layout(rect=(0, 0.06 + 0.045 * ((len(labels) + 1) // 2), 1, 1))
    return figure


def quality_cost_chart(
    report: EvalReport, path: str | Path, metric: str = "nDCG@10", dpi: int = 120
) -> Path:
    """Draw ``metric`` against latency and tokens per configuration into a PNG.

    Falls back to evidence recall when ``metric`` has no value (no judged documents).

    Raises:
        MissingDependencyError: matplotlib (the ``eval`` extra) is not installed.
    """
    plt = _pyplot()
    figure = quality_cost_figure(report, metric)
    target = Path(path)
    figure.savefig(target, dpi=dpi)
    plt.close(figure)
    return target


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        from matplotlib import pyplot as plt
    except ImportError as exc:
        raise MissingDependencyError(
            f"the chart needs the [eval] extra: {install_hint('eval')}"
        ) from exc
    return plt
