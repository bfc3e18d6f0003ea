"""Quality against cost, one point per configuration (matplotlib, the ``eval`` extra).

Two panels share the quality axis: latency (p50 ms per question) and model tokens per
question; the second is left out when no configuration used a model. The image is a PNG,
written with matplotlib's non-interactive Agg backend (no display needed).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from agentic_retrieval.errors import MissingDependencyError

if TYPE_CHECKING:
    from agentic_retrieval.eval.report import EvalReport


def quality_cost_chart(
    report: EvalReport, path: str | Path, metric: str = "nDCG@10", dpi: int = 120
) -> Path:
    """Draw ``metric`` against latency and tokens per configuration into a PNG.

    Falls back to evidence recall when ``metric`` has no value (no judged documents).

    Raises:
        MissingDependencyError: matplotlib (the ``eval`` extra) is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        from matplotlib import pyplot as plt
    except ImportError as exc:
        raise MissingDependencyError(
            "the chart needs the [eval] extra: pip install 'agentic-retrieval[eval]'"
        ) from exc
    rows = report.summary_rows()
    if all(row.get(metric) is None for row in rows):
        metric = "evidence_recall"
    panels = [("latency_p50_ms", "latency p50 (ms per question)")]
    if any(row["tokens"] for row in rows):
        panels.append(("tokens", "model tokens per question (input + output)"))
    height = 4.0 + 0.25 * len(rows)
    figure, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), height), squeeze=False)
    for axis, (key, label) in zip(axes[0], panels, strict=True):
        for index, row in enumerate(rows):
            x, y = row.get(key), row.get(metric)
            if x is None or y is None:
                continue
            axis.scatter(
                [x],
                [y],
                s=70,
                color=f"C{index % 10}",
                marker="os^Dv<>p*h"[index % 10],
                zorder=3,
                label=row["configuration"],
            )
        axis.set_xlabel(label)
        axis.set_ylabel(metric)
        axis.margins(0.15)
        axis.grid(True, alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=min(2, max(1, len(labels))), fontsize=8)
    figure.suptitle(f"{report.dataset}: {metric} against cost, per configuration")
    figure.tight_layout(rect=(0, 0.06 + 0.045 * ((len(labels) + 1) // 2), 1, 1))
    target = Path(path)
    figure.savefig(target, dpi=dpi)
    plt.close(figure)
    return target
