"""What the command line prints: its two consoles, progress, and a retrieve response.

``out`` is the command's output (stdout); ``err`` carries progress, notes, warnings and errors
(stderr, one message a line), so piped output holds only the result.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.markdown import Markdown
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from agentic_retrieval.context import DEFAULT_RERANKER_THRESHOLD, THRESHOLD_DEFAULT, Threshold
from agentic_retrieval.graph.events import (
    Answering,
    Assessing,
    Escalating,
    FollowingUp,
    Planning,
    ProgressNote,
    Reranking,
    Searching,
)
from agentic_retrieval.sources.local import IndexProgress
from agentic_retrieval.wire.models import RetrieveResponse

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)  # one message, one line


PREVIEW_CHARS = 400
"""Characters of each grounding chunk shown by ``retrieve`` (whole words)."""


@contextmanager
def index_progress(
    label: str, embedding: bool = False
) -> Iterator[Callable[[IndexProgress], None]]:
    """A progress bar on stderr (none when it is not a terminal), fed by the yielded callback.

    It shows the time elapsed and an estimate of the time left; when the files are embedded
    (``embedding``) its label says how to skip that (``--no-embeddings``).
    """
    if embedding:
        label = f"{label}, with vectors (--no-embeddings: lexical only, faster)"
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
    )
    # on a pipe or in a log a bar is noise (and leaves a blank line before an error message)
    quiet = not err.is_terminal
    with Progress(*columns, console=err, transient=True, disable=quiet) as progress:
        task = progress.add_task(label, total=None)

        def report(event: IndexProgress) -> None:
            progress.update(task, total=event.total, completed=event.done)

        yield report


def status_updater(status: Any) -> Callable[[ProgressNote], None]:
    """A callback that shows each progress note of a run on ``status`` (a rich status line)."""

    def update(note: ProgressNote) -> None:
        match note:
            case Searching(searches=searches):
                status.update(f"searching {searches} (subquery × source)…")
            case Reranking(candidates=candidates):
                status.update(f"reranking {candidates} candidates…")
            case Planning() | Assessing() | Answering() | FollowingUp():
                status.update(f"{note.event}…")
            case Escalating(to=to):
                status.update(f"escalating to {to}…")

    return update


def render_response(
    response: RetrieveResponse,
    question: str,
    top: int | None = None,
    threshold: Threshold = THRESHOLD_DEFAULT,
) -> None:
    """Print a readable view: plan, searches, ranked references, the answer.

    Args:
        response: The retrieve response.
        question: The question asked.
        top: Show only this many references (the header says how many there are).
        threshold: The run's ``reranker_threshold``: what the relevance line says applied.
    """
    out.print(f"[bold]Question:[/bold] {question}")
    activity = [record.model_dump(by_alias=True) for record in response.activity or []]
    _render_plan(activity)
    _render_effort(activity)
    _render_searches(activity)
    _render_references(response, top)
    _render_relevance(activity, threshold)
    _render_text(response, activity, threshold)


def _render_plan(activity: list[dict[str, Any]]) -> None:
    for record in activity:
        if record["type"] == "modelQueryPlanning":
            out.print(
                f"[bold]Plan:[/bold] model query planning, {record.get('inputTokens', 0)} in / "
                f"{record.get('outputTokens', 0)} out tokens, {record.get('elapsedMs')} ms"
            )
            return
    out.print("[bold]Plan:[/bold] no LLM planning (the question is searched as is)")


def _render_effort(activity: list[dict[str, Any]]) -> None:
    """The ``auto`` effort's decisions: the tier each step ran at, and why it moved on."""
    for record in activity:
        for decision in record.get("effortDecisions") or []:
            to = decision.get("escalateTo")
            move = f"{decision.get('tier')} → {to}" if to else f"stays {decision.get('tier')}"
            out.print(f"[bold]Effort (auto):[/bold] {move}: {decision.get('reason')}")


def _render_searches(activity: list[dict[str, Any]]) -> None:
    table = Table(title="Searches", title_justify="left")
    for column in ("#", "subquery", "source", "hits", "ms", "error"):
        table.add_column(column)
    for record in activity:
        arguments = next((v for k, v in record.items() if k.endswith("Arguments")), None)
        if not isinstance(arguments, dict):
            continue
        error = (record.get("error") or {}).get("message", "")
        table.add_row(
            str(record["id"]),
            str(arguments.get("search", "")),
            str(record.get("knowledgeSourceName", "")),
            str(record.get("count", 0)),
            str(record.get("elapsedMs", "")),
            error,
        )
    out.print(table)


def _render_references(response: RetrieveResponse, top: int | None) -> None:
    """Each reference: ref_id, score and docKey on one line, then title and page.

    Not a table: a docKey is an id to copy, and a table squeezed into 80 columns (piped
    output) broke it mid-word.
    """
    grounded = {str(c.get("ref_id")): c for c in _grounding(response.text)}
    shown = response.references[:top] if top else response.references
    hidden = len(response.references) - len(shown)
    more = f", the top {len(shown)} shown (--top shows more)" if hidden else ""
    out.print(f"[bold]References (ranked):[/bold] {len(response.references)}{more}")
    for ref in shown:
        score = "" if ref.reranker_score is None else f"{ref.reranker_score:.2f}"
        data = ref.source_data or grounded.get(ref.id, {})
        page = data.get("page")
        out.print(f"  [{ref.id}] {score:>4}  {ref.doc_key or ''}", markup=False)
        where = str(data.get("title") or "") + ("" if page is None else f", page {page}")
        if where:
            out.print(f"            {where}", markup=False)


def _render_relevance(activity: list[dict[str, Any]], threshold: Threshold) -> None:
    """What was left out and why, and whether the ranking was judged or only ordered.

    The same facts as the JSON's search-record warnings and semanticReranker record, so an
    empty or short result is never a silent one.
    """
    for record in activity:
        if record.get("warning") and "knowledgeSourceName" in record:
            out.print(
                f"Left out ({record['knowledgeSourceName']}, search #{record['id']}): "
                f"{record['warning']}",
                markup=False,
            )
    reranks = [r for r in activity if r["type"] == "semanticReranker"]
    if not reranks:
        return
    last = reranks[-1]
    candidates, calibrated = last.get("candidateCount", 0), last.get("calibratedCount", 0)
    coverage = last.get("termCoverage")
    held = (
        ""
        if coverage is None
        else f"; the top passages hold {coverage:.0%} of the question's words"
    )
    if candidates and calibrated < candidates:
        if isinstance(threshold, int | float) and threshold:  # cuts every score, judged or not
            cut = (
                f"yet the threshold {threshold:g} applies to them all the same: "
                f"{last.get('keptCount', 0)} of {candidates} kept"
            )
        elif threshold == THRESHOLD_DEFAULT:
            cut = "so the default threshold does not cut them"
        else:
            cut = "and no threshold applies (it is none)"
        out.print(
            f"Relevance: {candidates - calibrated} of {candidates} candidates have no "
            f"calibrated relevance score ({last.get('reranker')}): they are ranked, not "
            f"judged, {cut}{held}.",
            markup=False,
        )
    elif candidates:
        out.print(
            f"Relevance: {candidates} candidates scored by {last.get('reranker')} "
            f"(calibrated relevance){held}.",
            markup=False,
        )
    else:
        out.print("Relevance: the searches found no candidate.", markup=False)


def _render_text(
    response: RetrieveResponse, activity: list[dict[str, Any]], threshold: Threshold
) -> None:
    text = response.text
    if text.lstrip().startswith("["):
        chunks = _grounding(text)
        if not chunks:
            out.print("[bold]Nothing found:[/bold] no passage is returned for this question.")
            out.print(f"  Why: {_why_nothing(activity, threshold)}", markup=False)
            return
        out.print(f"[bold]Grounding data:[/bold] {len(chunks)} chunks, {len(text)} characters")
        for chunk in chunks:
            snippet = " ".join(str(chunk.get("content", "")).split())
            if len(snippet) > PREVIEW_CHARS:
                snippet = snippet[:PREVIEW_CHARS].rsplit(" ", 1)[0] + " …"
            out.print(f"  [{chunk.get('ref_id')}] {snippet}", markup=False)
        if chunks:
            out.print("(--json prints the whole grounding text)")
    else:
        out.print("[bold]Answer:[/bold]")
        out.print(Markdown(text))


def _why_nothing(activity: list[dict[str, Any]], threshold: Threshold) -> str:
    """The likeliest reason an extractive response is empty, and what to try."""
    searches = [r for r in activity if "knowledgeSourceName" in r]
    if searches and all(r.get("error") for r in searches):
        return "every search failed (the errors are in the table above)."
    reranks = [r for r in activity if r["type"] == "semanticReranker"]
    candidates = reranks[-1].get("candidateCount", 0) if reranks else 0
    if not candidates:
        failed = any(r.get("error") for r in searches)
        return (
            "the searches matched no passage"
            + (", and a search failed (its error is in the table above)" if failed else "")
            + ". Try other words; a --filter narrows the search, and documents indexed "
            "with permissions are searched only for a --user or --group they allow."
        )
    found = f"the searches found {candidates} candidate(s)"
    if isinstance(threshold, int | float) and threshold:
        cut = f"all scored under the threshold {threshold:g}"
    elif threshold == THRESHOLD_DEFAULT:
        cut = f"all scored under the default threshold {DEFAULT_RERANKER_THRESHOLD:g}"
    else:
        return f"{found}, and the output limits left every one out (see 'Left out' above)."
    return (
        f"{found}, but they {cut} (see 'Left out' above): the knowledge base may not answer "
        "this. --threshold none shows them all the same."
    )


def _grounding(text: str) -> list[dict[str, Any]]:
    try:
        data = json.loads(text)
    except ValueError:
        return []
    return [item for item in data if isinstance(item, dict)] if isinstance(data, list) else []
