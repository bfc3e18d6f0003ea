"""``agentic-retrieval eval``: compare configurations on a labelled question set.

Mistakes (missing or malformed dataset, questions or judgements, an unknown option value, a
configuration needing a chat model without one, a missing extra) print one line on stderr
and exit with code 2.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from agentic_retrieval.cli.errors import user_errors
from agentic_retrieval.cli.render import err, out
from agentic_retrieval.embeddings import check_embeddings_name
from agentic_retrieval.errors import EvalConfigurationError
from agentic_retrieval.eval.configurations import configuration_grid, parse_list
from agentic_retrieval.eval.report import EvalReport, format_value
from agentic_retrieval.sources.local import IndexProgress

TABLE_COMPARISONS = ("nDCG@10", "R@100", "evidence_recall")
PIPED_WIDTH = 240
LINE_SECONDS = 30.0
"""Longest silence of the progress lines while questions complete."""
QUIET_SECONDS = 5.0
"""No progress line before a run has lasted this long."""
SHOWN_FAILURES = 3
EMBEDDING_HINT = "with vectors (--no-embeddings: lexical only, faster)"


@user_errors
def eval_command(
    dataset: Annotated[
        Path | None,
        typer.Option(help="A BEIR directory (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv)."),
    ] = None,
    kb: Annotated[
        Path | None, typer.Option("--kb", help="A knowledge-base directory (with --questions).")
    ] = None,
    questions: Annotated[
        Path | None,
        typer.Option(help="Questions JSONL: id, question|messages, relevant, evidence, answer."),
    ] = None,
    split: Annotated[str, typer.Option(help="BEIR qrels split.")] = "test",
    effort: Annotated[
        str, typer.Option(help="Comma list: minimal, low, medium, auto.")
    ] = "minimal",
    retrieval: Annotated[
        str | None,
        typer.Option(
            help="Comma list: lexical, hybrid, indexed (each source as it was indexed: "
            "hybrid where it has vectors). Default: indexed for --kb, hybrid for --dataset "
            "(lexical with --no-embeddings)."
        ),
    ] = None,
    reranker: Annotated[
        str | None, typer.Option(help="Comma list of reranker names (default: default).")
    ] = None,
    top_n: Annotated[str, typer.Option(help="Comma list of ranked chunks kept (1-200).")] = "100",
    output_mode: Annotated[
        str, typer.Option(help="Comma list: extractiveData, answerSynthesis.")
    ] = "extractiveData",
    embeddings: Annotated[
        str | None,
        typer.Option(
            help="Embedding model to index a --dataset corpus for hybrid (default: local)."
        ),
    ] = None,
    no_embeddings: Annotated[
        bool,
        typer.Option(
            "--no-embeddings",
            help="Lexical only: index a --dataset corpus without vectors, load no model.",
        ),
    ] = False,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", help="Write report.json/.md, runs/*.run, qrels.txt and the chart here."
        ),
    ] = None,
    prices: Annotated[
        Path | None,
        typer.Option(help='Price table JSON: {"model": {"input": USD/1M, "output": USD/1M}}.'),
    ] = None,
    limit: Annotated[int | None, typer.Option(help="Ask only the first N questions.")] = None,
    concurrency: Annotated[int, typer.Option(help="Questions in flight at once.", min=1)] = 1,
    cache: Annotated[
        Path | None, typer.Option(help="Where indexed --dataset corpora are cached.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the significance resampling.")] = 0,
    graph: Annotated[
        Path | None,
        typer.Option(
            help="A JSON-LD ontology: extract each source's entity graph with the chat model "
            "and run every configuration without and with graphParameters, side by side."
        ),
    ] = None,
    chat_model: Annotated[
        str | None,
        typer.Option(
            help="The chat model (provider:model; an OpenAI-compatible server through "
            "OPENAI_BASE_URL with openai:NAME), or 'stand-in' (rule-based, from the --graph "
            "ontology; no LLM). Default: $AGENTIC_RETRIEVAL_CHAT_MODEL."
        ),
    ] = None,
) -> None:
    """Compare retrieval configurations on a labelled question set: quality, cost, latency.

    Every combination of the comma lists runs over the same questions; the first one is the
    baseline the others are tested against (paired randomization test, bootstrap CI). With
    --graph, each runs without and then with a graph search of every source's entity graph.
    """
    from agentic_retrieval.eval.api import Progress as Callbacks
    from agentic_retrieval.eval.api import evaluate

    target = _target(dataset, kb, questions)
    configurations, skipped = configuration_grid(
        efforts=parse_list(effort, "--effort"),
        retrievals=parse_list(retrieval, "--retrieval") or [None],
        rerankers=parse_list(reranker, "--reranker") or [None],
        top_ns=[_integer(v, "--top-n") for v in parse_list(top_n, "--top-n")],
        output_modes=parse_list(output_mode, "--output-mode"),
        graphs=(False, True) if graph is not None else (False,),
    )
    if embeddings and no_embeddings:
        raise EvalConfigurationError("--embeddings and --no-embeddings contradict each other")
    model: str | Literal[False] | None = (
        False if no_embeddings else check_embeddings_name(embeddings) if embeddings else None
    )
    with _quiet("agentic_retrieval"), _progress(embedding=not no_embeddings) as callbacks:
        report = evaluate(
            target,
            configurations,
            questions=questions,
            split=split,
            embeddings=model,
            prices=prices,
            output_dir=output,
            cache_dir=cache,
            limit=limit,
            concurrency=concurrency,
            seed=seed,
            progress=Callbacks(**callbacks),
            notes=skipped,
            chat_model=chat_model,
            graph=graph,
        )
    render_report(report)
    if output is not None:
        err.print(f"wrote {output}/report.json, report.md, qrels.txt, runs/, quality-vs-cost.png")


def _target(dataset: Path | None, kb: Path | None, questions: Path | None) -> Path:
    if (dataset is None) == (kb is None):
        raise EvalConfigurationError(
            "give either --dataset DIR (BEIR) or --kb DIR with --questions"
        )
    if kb is not None and questions is None:
        raise EvalConfigurationError("--kb needs --questions FILE (JSONL with id and question)")
    return dataset if dataset is not None else kb  # type: ignore[return-value]


def _integer(value: str, option: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise EvalConfigurationError(f"{option}: {value!r} is not an integer") from None


@contextmanager
def _quiet(name: str) -> Iterator[None]:
    """The report lists what was skipped; per-item log lines would interleave the bars."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def indexing_label(embedding: bool) -> str:
    """What indexing a corpus is called; with vectors, how to skip them."""
    if embedding:
        return f"indexing the corpus, {EMBEDDING_HINT}"
    return "indexing the corpus"


@contextmanager
def _progress(embedding: bool = True) -> Iterator[dict[str, Any]]:
    """Progress bars on a terminal; elsewhere (a pipe, a file, CI) progress lines.

    Indexing a corpus shows the time left, and with vectors (``embedding``) how to skip them.
    """
    if not err.is_terminal:
        yield ProgressLines(err, embedding=embedding).callbacks()
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=err, transient=True) as bars:
        tasks: dict[str, Any] = {}

        def indexing(event: IndexProgress) -> None:
            if "index" not in tasks:
                tasks["index"] = bars.add_task(indexing_label(embedding), total=event.total)
            bars.update(tasks["index"], completed=event.done)

        def configuration(config: Any, total: int) -> None:
            tasks[config.name] = bars.add_task(config.name, total=total)

        def question(config: Any, result: Any) -> None:
            bars.advance(tasks[config.name])

        yield {"indexing": indexing, "configuration": configuration, "question": question}


class ProgressLines:
    """Progress as plain lines, for a stderr that is not a terminal (no live bars there).

    One line when a configuration starts, and one each time another tenth of its questions
    is done or :data:`LINE_SECONDS` have passed since the last line, so a long run shows it
    is alive without flooding a log; indexing a corpus likewise. Nothing during the first
    :data:`QUIET_SECONDS`: a short run (or a mistake found at the start, which is one line
    on stderr) reads as it does on a terminal, where the bars vanish when done.
    """

    def __init__(self, console: Console, clock: Any = None, *, embedding: bool = False) -> None:
        import time

        self.indexing_label = indexing_label(embedding)
        self.console = console
        self.clock = clock or time.monotonic
        self.started: dict[str, float] = {}
        self.totals: dict[str, int] = {}
        self.done: dict[str, int] = {}
        self.begun = self.last_line = self.clock()

    def callbacks(self) -> dict[str, Any]:
        """The ``evaluate`` progress callbacks."""
        return {
            "indexing": self.indexing,
            "configuration": self.configuration,
            "question": self.question,
        }

    def indexing(self, event: IndexProgress) -> None:
        """After each corpus record indexed."""
        self._step(self.indexing_label, event.done, event.total or 0, "records", time_left=True)

    def configuration(self, config: Any, total: int) -> None:
        """When a configuration starts."""
        self.started[config.name] = self.clock()
        self.totals[config.name], self.done[config.name] = total, 0
        self._line(f"{config.name}: {total} questions")

    def question(self, config: Any, result: Any) -> None:
        """After each question of a configuration."""
        self.done[config.name] += 1
        self._step(config.name, self.done[config.name], self.totals[config.name], "questions")

    def _step(self, name: str, done: int, total: int, unit: str, time_left: bool = False) -> None:
        started = self.started.setdefault(name, self.clock())
        tenth = total > 0 and (done * 10 // total) > ((done - 1) * 10 // total)
        if done == total or tenth or self.clock() - self.last_line >= LINE_SECONDS:
            elapsed = self.clock() - started
            left = (
                f", about {elapsed / done * (total - done):.0f} s left"
                if time_left and 0 < done < total
                else ""
            )
            self._line(f"{name}: {done}/{total} {unit} ({elapsed:.0f} s{left})")

    def _line(self, text: str) -> None:
        if self.clock() - self.begun < QUIET_SECONDS:
            return
        self.last_line = self.clock()
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)


def _tables() -> Console:
    """Standard output at the terminal's width; wide enough for whole tables in a file or pipe."""
    return out if out.is_terminal else Console(highlight=False, width=PIPED_WIDTH)


def render_report(report: EvalReport) -> None:
    """Print the summary table, the comparisons with the baseline, failures and notes."""
    tables = _tables()
    tables.print(summary_table(report))
    versus = comparison_table(report)
    if versus is not None:
        tables.print(versus)
    for result in report.results:
        failed = [q for q in result.queries if q.error]
        for query in failed[:SHOWN_FAILURES]:
            line = (
                f"{result.configuration.name}: question {query.question_id} failed: {query.error}"
            )
            out.print(line, markup=False)
        if len(failed) > SHOWN_FAILURES:
            more = len(failed) - SHOWN_FAILURES
            out.print(f"{result.configuration.name}: {more} more failed questions in report.json")
    for note in report.notes:
        out.print(f"note: {note}", markup=False)


def summary_table(report: EvalReport) -> Table:
    """One row per configuration, the columns that have values."""
    columns = report.columns()
    judged = report.results[0].summary["judged"] if report.results else 0
    table = Table(
        title=f"{report.dataset}: {len(report.questions)} questions "
        f"({judged} with judged documents)",
        title_justify="left",
    )
    table.add_column("configuration")
    for _, heading, _ in columns:
        table.add_column(heading, justify="right")
    for result in report.results:
        cells = [format_value(result.summary.get(key), spec) for key, _, spec in columns]
        table.add_row(result.configuration.name, *cells)
    return table


def comparison_table(report: EvalReport) -> Table | None:
    """The main metrics of each configuration against the baseline (``None``: nothing to show)."""
    shown = [c for c in report.comparisons if c.metric in TABLE_COMPARISONS]
    if not shown:
        return None
    table = Table(
        title=f"against the baseline {report.results[0].configuration.name}, a graph search "
        "against its twin without (paired randomization test; * p < 0.05)"
        if any(r.configuration.graph for r in report.results)
        else f"against the baseline {report.results[0].configuration.name} "
        "(paired randomization test; * p < 0.05)",
        title_justify="left",
    )
    for heading in ("configuration", "metric", "baseline", "value", "Δ", "95% CI", "p"):
        table.add_column(heading, justify="left" if heading == "configuration" else "right")
    first = report.results[0].configuration.name
    for c in shown:
        table.add_row(
            c.configuration if c.baseline == first else f"{c.configuration} (vs {c.baseline})",
            c.metric,
            f"{c.baseline_mean:.3f}",
            f"{c.mean:.3f}",
            f"{c.delta:+.3f}",
            f"[{c.ci_low:+.3f}, {c.ci_high:+.3f}]",
            f"{c.p_value:.3f}{c.marker}",
        )
    return table
