"""The ``agentic-retrieval`` command: index, retrieve, serve, mcp, demo.

User mistakes (unknown knowledge-base directory or source, bad filter, bad effort, no chat
model for low/medium...) print one line on stderr and exit with code 2, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import re
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markdown import Markdown
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agentic_retrieval.context import THRESHOLD_ENV_VAR, Threshold, parse_threshold
from agentic_retrieval.errors import (
    AgenticRetrievalError,
    FilterFieldError,
    KnowledgeBaseDirectoryError,
    KnowledgeSourceFailedError,
    ModelRequiredError,
    ODataError,
)
from agentic_retrieval.graph.events import (
    Answering,
    Assessing,
    Escalating,
    FollowingUp,
    Planning,
    ProgressNote,
    Reranking,
    Searching,
    progress_note,
)
from agentic_retrieval.kb.directory import KnowledgeBaseDirectory
from agentic_retrieval.kb.management import DEFAULT_MAX_DEFINITIONS
from agentic_retrieval.knowledge_base import GRACE_SECONDS, KnowledgeBase
from agentic_retrieval.odata import Expr, check_fields, parse_filter
from agentic_retrieval.permissions import Identity
from agentic_retrieval.sources.base import TypedFilterableKnowledgeSource
from agentic_retrieval.sources.local import IndexProgress, IndexReport
from agentic_retrieval.sources.local.conversion_limits import ConversionLimits
from agentic_retrieval.sources.local.ingest import RESERVED_METADATA
from agentic_retrieval.sources.local.loaders import SUPPORTED_EXTENSIONS
from agentic_retrieval.sources.local.records import RecordFields
from agentic_retrieval.vocabulary import OUTPUT_MODES, REQUESTED_EFFORTS
from agentic_retrieval.wire.events import (
    ERROR,
    PROGRESS,
    RESPONSE_COMPLETED,
    completed_response,
)
from agentic_retrieval.wire.models import SUPPORTED_API_VERSIONS, RetrieveResponse
from agentic_retrieval.wire.retrieve import (
    conversation_request,
    effort_warnings,
    known_fields,
    prepare,
    timed_out_response,
)

EXIT_FAILED = 1
PREVIEW_CHARS = 400
"""Characters of each grounding chunk shown by ``retrieve`` (whole words)."""
EXIT_USAGE = 2
MAX_NAMED_IGNORED = 20
TRACEBACK_ENV_VAR = "AGENTIC_RETRIEVAL_TRACEBACK"

app = typer.Typer(
    name="agentic-retrieval",
    help="Agentic retrieval over your own knowledge bases: index, retrieve, serve.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # click's own help layout: rich's option table cuts long option names to fit 80 columns
    # ("--max-output-documen…"), and click wraps descriptions under whole names instead
    rich_markup_mode=None,
)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)  # one message, one line

F = TypeVar("F", bound=Callable[..., Any])

KbOption = Annotated[Path, typer.Option("--kb", help="The knowledge-base directory.")]
RetrievalInstructionsOption = Annotated[
    str | None,
    typer.Option(
        "--retrieval-instructions",
        help="Knowledge-base guidance for source selection and planning ('' clears it).",
    ),
]
AnswerInstructionsOption = Annotated[
    str | None,
    typer.Option(
        "--answer-instructions", help="Knowledge-base guidance for answers ('' clears it)."
    ),
]
MaxRuntimeOption = Annotated[
    int | None,
    typer.Option(
        "--max-runtime", help="Default maxRuntimeInSeconds of its requests.", min=1, max=300
    ),
]
MaxOutputDocumentsOption = Annotated[
    int | None,
    typer.Option(
        "--max-output-documents",
        help="Default maxOutputDocuments of its requests.",
        min=1,
        max=1000,
    ),
]
MaxOutputTokensOption = Annotated[
    int | None,
    typer.Option(
        "--max-output-tokens",
        help="Default maxOutputSizeInTokens of its requests.",
        min=1,
        max=2_500_000,
    ),
]
RerankerThresholdOption = Annotated[
    str | None,
    typer.Option(
        "--reranker-threshold",
        help="Default rerankerThreshold of its requests: 0-4 drops what scores under it "
        "(whatever the reranker), 'none' keeps every candidate, 'default' clears it.",
    ),
]


class UserError(Exception):
    """A mistake the user can fix; reported as one line and exit code 2.

    Not an :class:`~agentic_retrieval.errors.AgenticRetrievalError`: it is how the command
    line reports its own argument mistakes, raised and caught inside a command only.
    """


def user_errors(command: F) -> F:
    """Turn every failure into one stderr line: exit 2 for what the user can fix, else 1.

    The library's errors, missing extras, files and directories the system refuses (``OSError``)
    and unusable SQLite files are the user's to fix (exit 2). Anything else is a bug: one line
    naming it (exit 1), and the traceback only with ``$AGENTIC_RETRIEVAL_TRACEBACK=1``.
    """

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        # ImportError: a third-party package missing below a lazy import the library did not
        # wrap; its message names the package, which is enough to act on.
        except (AgenticRetrievalError, UserError, ImportError) as exc:
            _fail(f"error: {exc}", EXIT_USAGE)
        except OSError as exc:
            where = f": {exc.filename}" if exc.filename else ""
            _fail(f"error: {exc.strerror or exc}{where}", EXIT_USAGE)
        except sqlite3.Error as exc:
            _fail(f"error: an index file cannot be used ({exc}); index the source again", 2)
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:
            if os.environ.get(TRACEBACK_ENV_VAR):
                raise
            _fail(
                f"error: unexpected {type(exc).__name__}: {exc} (a bug: please report it; "
                f"{TRACEBACK_ENV_VAR}=1 shows the traceback)",
                EXIT_FAILED,
            )

    return wrapper  # type: ignore[return-value]


def _fail(message: str, code: int) -> None:
    err.print(message, markup=False, soft_wrap=True)
    raise typer.Exit(code) from None


def one_line_logging() -> None:
    """Show the library's warnings on stderr as one line each, never with a traceback.

    For the interactive commands (index, retrieve, demo): a failing source is already in the
    output; its traceback is for server logs, not for a terminal.
    """
    library = logging.getLogger("agentic_retrieval")
    if any(isinstance(h, _OneLineHandler) for h in library.handlers):
        return
    handler = _OneLineHandler()
    handler.setLevel(logging.WARNING)
    library.addHandler(handler)


class _OneLineHandler(logging.Handler):
    """``warning: <first line of the message>`` on the current ``sys.stderr``."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            lines = record.getMessage().splitlines() or [""]
            sys.stderr.write(f"warning: {lines[0]}\n")
        except Exception:  # logging must never raise into the command
            self.handleError(record)


# --- index --------------------------------------------------------------------------------


@app.command()
@user_errors
def index(
    kb: KbOption,
    source: Annotated[str, typer.Option("--source", help="The knowledge source to fill.")],
    paths: Annotated[list[Path] | None, typer.Argument(help="Files and folders to index.")] = None,
    records: Annotated[
        Path | None,
        typer.Option(
            "--records",
            help="A JSONL, JSON, CSV or TSV file of records (one document each; every field "
            "other than the id, title and text becomes filterable metadata).",
        ),
    ] = None,
    id_field: Annotated[
        str | None, typer.Option(help="Record id field (default: _id, else id).")
    ] = None,
    title_field: Annotated[
        str | None, typer.Option(help="Record title field (default: title).")
    ] = None,
    text_field: Annotated[
        str | None, typer.Option(help="Record text field (default: text, else content).")
    ] = None,
    description: Annotated[
        str | None, typer.Option(help="What the source holds (the planner reads it).")
    ] = None,
    name: Annotated[
        str | None, typer.Option(help="Knowledge base name when creating it (default: DIR name).")
    ] = None,
    embeddings: Annotated[
        str | None,
        typer.Option(
            "--embeddings",
            help="Index vectors for hybrid search with this model: 'local' (bundled "
            "all-MiniLM-L6-v2, needs the 'local' extra) or 'provider:model' (LangChain "
            "init_embeddings, e.g. openai:text-embedding-3-small).",
        ),
    ] = None,
    no_embeddings: Annotated[
        bool, typer.Option("--no-embeddings", help="Index without vectors (lexical only).")
    ] = False,
    meta: Annotated[
        list[str] | None,
        typer.Option(
            "--meta",
            help="KEY=VALUE metadata on every chunk of these files, filterable with OData "
            "(repeatable; numbers, true/false and null are typed; replaces the files' "
            "previous metadata, so repeat it when re-indexing).",
        ),
    ] = None,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Exit with code 1 when any file failed or had an unsupported type "
            "(without it: only when nothing could be indexed).",
        ),
    ] = False,
    retrieval_instructions: RetrievalInstructionsOption = None,
    answer_instructions: AnswerInstructionsOption = None,
    max_runtime: MaxRuntimeOption = None,
    max_output_documents: MaxOutputDocumentsOption = None,
    max_output_tokens: MaxOutputTokensOption = None,
    reranker_threshold: RerankerThresholdOption = None,
    allow_user: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-user",
            help="Only this user id (and the other allowed users and groups) may see these "
            "documents (repeatable). A file's NAME.permissions.json sidecar, or a record's "
            "--user-ids-field/--group-ids-field, overrides it.",
        ),
    ] = None,
    allow_group: Annotated[
        list[str] | None,
        typer.Option("--allow-group", help="Members of this group id may see them (repeatable)."),
    ] = None,
    public: Annotated[
        bool, typer.Option("--public", help="Everyone may see these documents.")
    ] = False,
    user_ids_field: Annotated[
        str | None,
        typer.Option(help="Record field listing the user ids allowed to see the record."),
    ] = None,
    group_ids_field: Annotated[
        str | None,
        typer.Option(help="Record field listing the group ids allowed to see the record."),
    ] = None,
) -> None:
    """Create or update source NAME of the knowledge base in DIR from files, folders or records.

    A path that no longer exists but was indexed before (a deleted file or folder) removes
    what was indexed from it; records indexed from a records file that it no longer holds are
    removed too. Files (or records) that fail and files of unsupported types are named on
    stderr. Exit code 1 when nothing could be indexed (a new, empty source is not left
    behind), or with --strict when any file failed or was skipped.
    Without --allow-user, --allow-group or --public (or a sidecar or permission field),
    documents keep the permissions they had; new ones have none.
    """
    from agentic_retrieval.cli.indexing import (
        check_records_file,
        embedding_choice,
        embeddings_for_indexing,
        permissions_choice,
    )

    one_line_logging()

    metadata = parse_metadata(meta or [])
    permissions = permissions_choice(allow_user or [], allow_group or [], public)
    if (user_ids_field or group_ids_field) and records is None:
        raise UserError("--user-ids-field and --group-ids-field apply to --records")
    paths = list(paths or [])
    model = embedding_choice(embeddings, no_embeddings, paths, warn=err)
    if not paths and records is None:
        raise UserError("give files or folders to index, or --records FILE")
    if records is not None:
        check_records_file(records)
    vectors = embeddings_for_indexing(model)  # built before anything is written
    directory = KnowledgeBaseDirectory(kb)
    exists = directory.manifest_path.exists()
    if exists:
        directory.load()
    new_source = not exists or source not in directory.source_names
    _check_paths(paths, None if new_source else directory, source)
    created_dir = not directory.path.exists()
    if not exists:
        directory.load_or_create(name=name or _kb_name_from(kb))
    update_kb_settings(
        directory,
        retrieval_instructions,
        answer_instructions,
        max_runtime,
        max_output_documents,
        max_output_tokens,
        reranker_threshold,
    )
    directory.add_or_update_source(source, description=description, embeddings=model)
    # the report below lists every failed file once: silence the per-file log lines
    reports: list[IndexReport] = []
    with _quiet("agentic_retrieval.sources.local", "pypdf"):
        if paths:
            with _index_progress(f"indexing into {source}") as progress:
                report = directory.index(
                    source,
                    paths,
                    metadata=metadata or None,
                    progress=progress,
                    embeddings=vectors,
                    permissions=permissions,
                )
            _print_report(source, report)
            _report_problems(report)
            reports.append(report)
        if records is not None:
            with _index_progress(f"indexing records into {source}") as progress:
                report = directory.index_records(
                    source,
                    records,
                    fields=RecordFields.of(
                        id_field,
                        title_field,
                        text_field,
                        user_ids_field=user_ids_field,
                        group_ids_field=group_ids_field,
                    ),
                    metadata=metadata or None,
                    progress=progress,
                    embeddings=vectors,
                    permissions=permissions,
                )
            _print_report(source, report, noun="records")
            _report_problems(report, noun="records")
            reports.append(report)
    directory.close()
    _finish_index(
        directory,
        source,
        reports,
        strict=strict,
        undo={"kb_created": not exists, "dir_created": created_dir} if new_source else None,
    )


def update_kb_settings(
    directory: KnowledgeBaseDirectory,
    retrieval_instructions: str | None,
    answer_instructions: str | None,
    max_runtime: int | None,
    max_output_documents: int | None,
    max_output_tokens: int | None,
    reranker_threshold: str | None = None,
) -> bool:
    """Apply the knowledge-base settings options that were given; whether any was."""
    limits = {
        "max_runtime_in_seconds": max_runtime,
        "max_output_documents": max_output_documents,
        "max_output_size_in_tokens": max_output_tokens,
    }
    given: dict[str, Any] = {k: v for k, v in limits.items() if v is not None}
    if reranker_threshold is not None:
        # stored as a number: 0 keeps everything ('none'); None clears it ('default')
        setting = cli_threshold(reranker_threshold, "--reranker-threshold")
        given["reranker_threshold"] = None if setting == "default" else (setting or 0.0)
    if retrieval_instructions is None and answer_instructions is None and not given:
        return False
    directory.update_settings(
        retrieval_instructions=retrieval_instructions,
        answer_instructions=answer_instructions,
        retrieve_defaults=given or None,
    )
    return True


def _check_paths(paths: list[Path], directory: KnowledgeBaseDirectory | None, source: str) -> None:
    """Reject missing paths, unless they were indexed before (then indexing removes them)."""
    missing = [p.expanduser().resolve() for p in paths if not p.exists()]
    if not missing:
        return
    indexed = directory.open_source(source).store.indexed_paths() if directory else []
    unknown = [
        str(p)
        for p in missing
        if not any(i == str(p) or i.startswith(str(p) + os.sep) for i in indexed)
    ]
    if unknown:
        raise UserError(f"no such file or folder: {', '.join(unknown)}")


def parse_metadata(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs to a dict; values become int, float, bool or null when they read so.

    Raises:
        UserError: A pair without ``=`` or with a key that is not a plain field name.
    """
    metadata: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key.strip()):
            raise UserError(f"--meta expects KEY=VALUE with a plain field name, not {pair!r}")
        if key.strip() in RESERVED_METADATA:
            raise UserError(
                f"--meta {key.strip()!r} is set by the store itself (reserved: "
                f"{', '.join(sorted(RESERVED_METADATA))})"
            )
        metadata[key.strip()] = _metadata_value(raw.strip())
    return metadata


def _metadata_value(raw: str) -> Any:
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "null":
        return None
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw


def _kb_name_from(path: Path) -> str:
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", path.resolve().name).strip("-_")
    return name or "knowledge-base"


@contextmanager
def _index_progress(label: str) -> Iterator[Callable[[IndexProgress], None]]:
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    # on a pipe or in a log a bar is noise (and leaves a blank line before an error message)
    quiet = not err.is_terminal
    with Progress(*columns, console=err, transient=True, disable=quiet) as progress:
        task = progress.add_task(label, total=None)

        def report(event: IndexProgress) -> None:
            progress.update(task, total=event.total, completed=event.done)

        yield report


@contextmanager
def _quiet(*names: str) -> Iterator[None]:
    """Raise the given loggers to ERROR for the duration (their news is in our report)."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _finish_index(
    directory: KnowledgeBaseDirectory,
    source: str,
    reports: list[IndexReport],
    *,
    strict: bool,
    undo: dict[str, bool] | None,
) -> None:
    """Exit 1 when nothing was indexed (undoing a new, empty source), or strictly on any skip."""
    if not any(r.indexed or r.unchanged or r.deleted for r in reports):
        if undo is not None and all(r.total_chunks == 0 for r in reports):
            _undo_creation(directory, source, **undo)
        raise typer.Exit(EXIT_FAILED)
    if strict and any(r.failed or r.ignored or r.skipped for r in reports):
        err.print("error: --strict: some files were not indexed (see above)")
        raise typer.Exit(EXIT_FAILED)


def _report_problems(report: IndexReport, noun: str = "files") -> None:
    """Name every failure and unsupported file on stderr, then say when nothing was indexed."""
    for failure in report.failed:
        err.print(f"failed: {failure.path}: {failure.reason}", markup=False, soft_wrap=True)
    if report.kept:
        err.print(
            f"kept {len(report.kept)} {noun} no longer in the file, as its unreadable lines may "
            "hold them: fix those lines and index again to remove them",
            markup=False,
            soft_wrap=True,
        )
    for path in report.ignored[:MAX_NAMED_IGNORED]:
        err.print(f"skipped (unsupported type): {path}", markup=False, soft_wrap=True)
    if len(report.ignored) > MAX_NAMED_IGNORED:
        err.print(f"skipped {len(report.ignored) - MAX_NAMED_IGNORED} more unsupported files")
    for skipped in report.skipped:
        err.print(f"skipped: {skipped.path}: {skipped.reason}", markup=False, soft_wrap=True)
    if report.indexed or report.unchanged or report.deleted:
        return
    if report.failed:
        why = f"every {noun.removesuffix('s')} failed ({len(report.failed)}, see above)"
    elif noun == "records":
        why = "the records file holds no record"
    else:
        why = f"no file of a supported type ({', '.join(sorted(SUPPORTED_EXTENSIONS))}) was found"
    err.print(f"error: nothing was indexed: {why}", markup=False, soft_wrap=True)


def _undo_creation(
    directory: KnowledgeBaseDirectory, source: str, *, kb_created: bool, dir_created: bool
) -> None:
    """Remove the empty source (and knowledge base) this run created, so none is left behind."""
    directory.remove_source(source)
    if kb_created:
        directory.manifest_path.unlink(missing_ok=True)
        Path(f"{directory.manifest_path}.lock").unlink(missing_ok=True)
    if dir_created:
        with contextlib.suppress(OSError):  # not empty: something else lives there now
            directory.path.rmdir()


def _print_report(source: str, report: IndexReport, noun: str = "files") -> None:
    table = Table(title=f"source {source}", show_header=False)
    rows = [
        (f"{noun} indexed", len(report.indexed)),
        (f"{noun} unchanged (skipped)", len(report.unchanged)),
        (f"{noun} deleted", len(report.deleted)),
        (f"{noun} failed", len(report.failed)),
    ]
    if noun == "files":
        rows.append(("files ignored (unsupported type)", len(report.ignored)))
        rows.append(("links and special files not read", len(report.skipped)))
    rows += [
        ("chunks written", report.chunks_written),
        ("chunks in the index", report.total_chunks),
    ]
    for label, value in rows:
        table.add_row(label, str(value))
    out.print(table)
    out.print(f"{report.elapsed_seconds:.2f} s")


# --- retrieve ------------------------------------------------------------------------------


@app.command()
@user_errors
def retrieve(
    question: Annotated[str, typer.Argument(help="The question.")],
    kb: KbOption,
    effort: Annotated[
        str | None,
        typer.Option(
            help="minimal, low, medium or auto (default: low with a chat model, else minimal, "
            "which needs none; auto escalates from minimal only when needed)."
        ),
    ] = None,
    output_mode: Annotated[
        str | None, typer.Option(help="extractiveData or answerSynthesis.")
    ] = None,
    filter_text: Annotated[
        str | None, typer.Option("--filter", help="OData filter ANDed onto every source.")
    ] = None,
    source: Annotated[
        list[str] | None, typer.Option("--source", help="Only this source (repeatable).")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print exactly the wire response, nothing else.")
    ] = False,
    max_output_documents: Annotated[
        int | None,
        typer.Option(
            "--max-output-documents",
            help="Most documents in the response (default: the knowledge base's, else 10).",
            min=1,
            max=1000,
        ),
    ] = None,
    user: Annotated[
        str | None,
        typer.Option("--user", help="Retrieve as this user id (only what it may see)."),
    ] = None,
    group: Annotated[
        list[str] | None,
        typer.Option("--group", help="A group id of that user (repeatable)."),
    ] = None,
    enforce_permissions: Annotated[
        bool,
        typer.Option(
            "--enforce-permissions",
            help="Fail closed: hide documents indexed without permissions.",
        ),
    ] = False,
    threshold: Annotated[
        str | None,
        typer.Option(
            "--threshold",
            help="Drop passages scoring under X (0-4) whatever the reranker; 'none' keeps "
            "every one; 'default': 2.5 on calibrated relevance scores only (default: the "
            f"knowledge base's, else ${THRESHOLD_ENV_VAR}, else 'default').",
        ),
    ] = None,
    top: Annotated[
        int | None,
        typer.Option("--top", help="Ranked passages kept (default 10).", min=1, max=200),
    ] = None,
) -> None:
    """Run agentic retrieval for QUESTION over the knowledge base in DIR.

    Without --user or --group, only documents without permissions or marked public are
    searched; documents with permissions need an identity that they allow.
    """
    from agentic_retrieval.kb.loader import open_knowledge_base

    identity = _identity(user, group or [])
    chosen = None if threshold is None else cli_threshold(threshold, "--threshold")
    _check_choice("--effort", effort, REQUESTED_EFFORTS)
    _check_choice("--output-mode", output_mode, OUTPUT_MODES)
    if not question.strip():
        raise UserError("QUESTION is empty: give the question to retrieve for")
    if effort == "minimal" and output_mode == "answerSynthesis":
        raise UserError(
            "--output-mode answerSynthesis writes an answer with a chat model: it cannot run "
            "with --effort minimal (use low or medium)"
        )
    expr = None
    if filter_text:
        try:
            expr = parse_filter(filter_text)
        except ODataError as exc:
            raise UserError(f"--filter: {exc}") from None
    one_line_logging()
    knowledge_base = open_knowledge_base(kb, sources=source)
    if expr is not None:
        check_filter_fields(knowledge_base, expr)
    knowledge_base = open_knowledge_base(
        kb, sources=source, enforce_permissions=enforce_permissions
    )
    if threshold is not None:
        knowledge_base.defaults = replace(knowledge_base.defaults, reranker_threshold=chosen)
    if top is not None:
        knowledge_base.defaults = replace(knowledge_base.defaults, top_n=top)
    request = build_request(
        knowledge_base,
        question,
        effort,
        output_mode,
        filter_text,
        source_data=not as_json,
        max_output_documents=max_output_documents,
    )
    if as_json:
        response = run_retrieve(knowledge_base, request, on_event=None, identity=identity)
        sys.stdout.write(json.dumps(response.to_wire(), ensure_ascii=False) + "\n")
    else:
        with err.status("retrieving…") as status:
            response = run_retrieve(
                knowledge_base, request, on_event=_status_updater(status), identity=identity
            )
        render_response(response, question)
    for warning in effort_warnings(response):
        err.print(f"note: {warning}", markup=False, soft_wrap=True)
    _exit_unless_complete(response)


def cli_threshold(text: str, option: str) -> Threshold:
    """A threshold option's value: a number 0-4, ``none`` or ``default``.

    Raises:
        UserError: Anything else, naming the option.
    """
    try:
        return parse_threshold(text, option)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _exit_unless_complete(response: RetrieveResponse) -> None:
    """Exit 1, naming each failure on stderr, when a source failed or time ran out.

    The response was printed all the same (a partial answer is still an answer), but a
    script must be able to tell it from a complete one.
    """
    if response.status_code == 200:
        return
    for record in response.activity or []:
        if record.error is not None:
            name = (record.model_extra or {}).get("knowledgeSourceName") or record.type
            err.print(f"warning: {name}: {record.error.message}", markup=False, soft_wrap=True)
    raise typer.Exit(EXIT_FAILED)


def check_filter_fields(kb: KnowledgeBase, expr: Expr) -> None:
    """Reject a ``--filter`` naming a field no searched source has, or a value of a wrong kind.

    Raises:
        UserError: Naming the fields the searched sources have and their kinds.
    """
    if not any(isinstance(s, TypedFilterableKnowledgeSource) for s in kb.sources.values()):
        return
    try:
        check_fields(expr, known_fields(kb.sources))
    except FilterFieldError as exc:
        raise UserError(f"--filter: {exc.detail}") from None


def _identity(user: str | None, groups: list[str]) -> Identity | None:
    if user is None and not groups:
        return None
    try:
        return Identity(user_id=user, groups=tuple(groups))
    except ValueError as exc:
        raise UserError(f"--user/--group: {exc}") from None


def _check_choice(option: str, value: str | None, choices: tuple[str, ...]) -> None:
    if value is not None and value not in choices:
        raise UserError(f"{option} must be one of {', '.join(choices)}, not {value!r}")


def build_request(
    kb: KnowledgeBase,
    question: str,
    effort: str | None,
    output_mode: str | None,
    filter_text: str | None,
    *,
    source_data: bool = False,
    max_output_documents: int | None = None,
) -> dict[str, Any]:
    """The wire request for one command-line question."""
    return conversation_request(
        [("user", question)],
        kb.sources,
        effort=effort,
        output_mode=output_mode,
        filter_add_on=filter_text,
        source_data=source_data,
        max_output_documents=max_output_documents,
    )


def run_retrieve(
    kb: KnowledgeBase,
    request: dict[str, Any],
    on_event: Callable[[ProgressNote], None] | None,
    identity: Identity | None = None,
) -> RetrieveResponse:
    """Run ``request``, reporting progress events to ``on_event``; bounded by its runtime.

    Raises:
        InvalidRequestError: Bad input (unknown source, bad filter...).
        UserError: The chosen --effort or --output-mode needs a chat model there is not.
    """
    try:
        parsed, context = prepare(request, kb.defaults, kb.bindings)
    except ModelRequiredError as exc:
        raise UserError(model_required_message(exc)) from None
    if on_event is None:
        return asyncio.run(kb.aretrieve(parsed, identity=identity))

    async def stream() -> RetrieveResponse:
        started = time.time()
        async for event in kb.astream(parsed, identity=identity, extensions={PROGRESS}):
            name, data = event["event"], event["data"]
            note = progress_note(data["step"], data) if name == PROGRESS else None
            if note is not None:
                on_event(note)
            elif name == RESPONSE_COMPLETED:
                return completed_response(data)
            elif name == ERROR:
                error = data["error"]
                if error["code"] == "KnowledgeSourceFailed":
                    cause = error["details"][0]
                    raise KnowledgeSourceFailedError(
                        error["target"], cause["code"], cause["message"]
                    )
                return timed_out_response(context, started)
        raise RuntimeError("the event stream ended without response.completed or error")

    async def bounded() -> RetrieveResponse:
        try:
            return await asyncio.wait_for(stream(), context.max_runtime_seconds + GRACE_SECONDS)
        except TimeoutError as exc:
            raise UserError(
                f"maxRuntimeInSeconds ({context.max_runtime_seconds:g} s) elapsed"
            ) from exc

    return asyncio.run(bounded())


def model_required_message(exc: ModelRequiredError) -> str:
    """A chosen effort or output mode needs a chat model, said in command-line terms."""
    if exc.setting == "effort":
        return (
            f"--effort {exc.value} needs a chat model ({exc.role}) and none is configured: "
            f"set {exc.env_var} (e.g. openai:gpt-4.1-mini), or leave --effort out to search "
            "without one"
        )
    return (
        f"--output-mode {exc.value} needs a chat model to write the answer and none is "
        f"configured: set {exc.env_var} (e.g. openai:gpt-4.1-mini), or leave --output-mode "
        "out to get the ranked passages"
    )


def _status_updater(status: Any) -> Callable[[ProgressNote], None]:
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


def render_response(response: RetrieveResponse, question: str, top: int | None = None) -> None:
    """Print a readable view: plan, searches, ranked references, the answer."""
    out.print(f"[bold]Question:[/bold] {question}")
    activity = [record.model_dump(by_alias=True) for record in response.activity or []]
    _render_plan(activity)
    _render_effort(activity)
    _render_searches(activity)
    _render_references(response, top)
    _render_relevance(activity)
    _render_text(response)


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
    out.print(f"[bold]References (ranked):[/bold] {len(response.references)}")
    for ref in shown:
        score = "" if ref.reranker_score is None else f"{ref.reranker_score:.2f}"
        data = ref.source_data or grounded.get(ref.id, {})
        page = data.get("page")
        out.print(f"  [{ref.id}] {score:>4}  {ref.doc_key or ''}", markup=False)
        where = str(data.get("title") or "") + ("" if page is None else f", page {page}")
        if where:
            out.print(f"            {where}", markup=False)


def _render_relevance(activity: list[dict[str, Any]]) -> None:
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
        out.print(
            f"Relevance: {candidates - calibrated} of {candidates} candidates have no "
            f"calibrated relevance score ({last.get('reranker')}): they are ranked, not "
            f"judged, so the default threshold does not cut them{held}.",
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


def _render_text(response: RetrieveResponse) -> None:
    text = response.text
    if text.lstrip().startswith("["):
        chunks = _grounding(text)
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


def _grounding(text: str) -> list[dict[str, Any]]:
    try:
        data = json.loads(text)
    except ValueError:
        return []
    return [item for item in data if isinstance(item, dict)] if isinstance(data, list) else []


# --- serve / mcp --------------------------------------------------------------------------


@app.command()
@user_errors
def serve(
    kb: Annotated[
        list[Path] | None,
        typer.Option("--kb", help="A knowledge-base directory, served read-only (repeatable)."),
    ] = None,
    data: Annotated[
        Path | None,
        typer.Option(
            "--data",
            help="A service data directory (created if missing): indexes, knowledge sources "
            "and knowledge bases managed over REST, kept across restarts.",
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.", min=0, max=65535)] = 8080,
    public_url: Annotated[
        str | None,
        typer.Option(
            "--public-url",
            envvar="AGENTIC_RETRIEVAL_PUBLIC_URL",
            help="The base URL clients reach this service at (e.g. https://search.example.com): "
            "citationUrl and nextLink links point there (default: the address it listens on, "
            "never a request's Host header; $AGENTIC_RETRIEVAL_PUBLIC_URL).",
        ),
    ] = None,
    workers: Annotated[
        int, typer.Option(help="Processes serving requests (sharing --data).", min=1, max=64)
    ] = 1,
    api_key: Annotated[
        list[str] | None, typer.Option("--api-key", help="Admin key (repeatable).")
    ] = None,
    query_key: Annotated[
        list[str] | None,
        typer.Option("--query-key", help="Retrieve/search-only key (repeatable)."),
    ] = None,
    max_in_flight: Annotated[int, typer.Option(help="Requests handled at once (per worker).")] = 64,
    max_body_bytes: Annotated[int, typer.Option(help="Largest request body.")] = 1024 * 1024,
    max_upload_bytes: Annotated[
        int, typer.Option(help="Largest document batch or uploaded file.")
    ] = 16 * 1024 * 1024,
    conversion_limit: Annotated[
        list[str] | None,
        typer.Option(
            "--conversion-limit",
            help="NAME=VALUE: what converting one uploaded file may cost (repeatable; names: "
            "seconds, memory_mb, text_chars, rows, cells, zip_members, zip_member_mb, "
            "zip_total_mb, zip_ratio, xml_depth; see README).",
        ),
    ] = None,
    conversion_workers: Annotated[
        int | None,
        typer.Option(help="Uploaded files converted at once (default: half the CPUs).", min=1),
    ] = None,
    conversion_queue: Annotated[
        int, typer.Option(help="Uploads waiting for a conversion before a 429.", min=0)
    ] = 16,
    max_indexes: Annotated[
        int,
        typer.Option(
            envvar="AGENTIC_RETRIEVAL_MAX_INDEXES",
            help="Most indexes --data holds; creating one more answers 429.",
            min=0,
        ),
    ] = DEFAULT_MAX_DEFINITIONS,
    max_knowledge_sources: Annotated[
        int,
        typer.Option(
            envvar="AGENTIC_RETRIEVAL_MAX_KNOWLEDGE_SOURCES",
            help="Most knowledge sources --data holds.",
            min=0,
        ),
    ] = DEFAULT_MAX_DEFINITIONS,
    max_knowledge_bases: Annotated[
        int,
        typer.Option(
            envvar="AGENTIC_RETRIEVAL_MAX_KNOWLEDGE_BASES",
            help="Most knowledge bases --data holds (--kb ones not counted).",
            min=0,
        ),
    ] = DEFAULT_MAX_DEFINITIONS,
    query_key_for: Annotated[
        list[str] | None,
        typer.Option(
            "--query-key-for",
            help="KB:KEY, a query key that may only retrieve from knowledge base KB "
            "(repeatable; repeat a key to allow it several knowledge bases).",
        ),
    ] = None,
    jwt_issuer: Annotated[
        str | None,
        typer.Option(help="Identity tokens: the required 'iss' ($AGENTIC_RETRIEVAL_JWT_ISSUER)."),
    ] = None,
    jwt_audience: Annotated[
        str | None,
        typer.Option(help="Identity tokens: a required 'aud' ($AGENTIC_RETRIEVAL_JWT_AUDIENCE)."),
    ] = None,
    jwt_jwks: Annotated[
        str | None,
        typer.Option(
            help="Identity tokens: a JWKS file or https URL with the signing keys "
            "($AGENTIC_RETRIEVAL_JWT_JWKS; or a shared secret in $AGENTIC_RETRIEVAL_JWT_SECRET)."
        ),
    ] = None,
    enforce_permissions: Annotated[
        bool | None,
        typer.Option(
            "--enforce-permissions/--no-enforce-permissions",
            help="Fail closed on document permissions (default: on when identity tokens are "
            "configured; $AGENTIC_RETRIEVAL_ENFORCE_PERMISSIONS).",
        ),
    ] = None,
    require_identity: Annotated[
        list[str] | None,
        typer.Option(
            "--require-identity",
            help="Knowledge base that answers 401 without an identity token (repeatable; "
            "'*' for all; $AGENTIC_RETRIEVAL_REQUIRE_IDENTITY, comma-separated).",
        ),
    ] = None,
) -> None:
    """Serve the retrieve REST API, the management API (--data) and MCP (--kb)."""
    server = _server_extra()
    _import_extra("uvicorn", "server")
    if not kb and data is None:
        raise UserError("give --data DIR (a service data directory) and/or --kb DIR")
    from agentic_retrieval.cli.serving import access_options, check_keys, check_open_files

    check_keys({"--api-key": api_key, "--query-key": query_key, "--query-key-for": query_key_for})
    names = _served_names(kb or [], data)
    access = access_options(
        jwt_issuer, jwt_audience, jwt_jwks, enforce_permissions, require_identity
    )
    try:
        settings = server.ServerSettings(
            api_keys=list(api_key or []),
            query_keys=list(query_key or []),
            scoped_query_keys=list(query_key_for or []),
            max_in_flight=max_in_flight,
            max_body_bytes=max_body_bytes,
            max_upload_bytes=max_upload_bytes,
            host=host,
            public_url=public_url,
            conversion_limits=ConversionLimits.parse(conversion_limit or []),
            conversion_workers=conversion_workers,
            conversion_queue=conversion_queue,
            max_indexes=max_indexes,
            max_knowledge_sources=max_knowledge_sources,
            max_knowledge_bases=max_knowledge_bases,
            **access,
        )
        settings.access_policy()  # a JWKS file that cannot be read fails here, in one line
    except ValueError as exc:
        raise UserError(str(exc)) from None
    build = functools.partial(build_server_app, list(kb or []), data, settings)
    files_warning = check_open_files(settings) if data is not None else None
    if files_warning is not None:
        err.print(f"warning: {files_warning}")
    if not settings.keys().enabled:
        err.print("warning: no API key configured; the server accepts every request")
    if settings.tokens is not None:
        from agentic_retrieval.server.tokens import describe

        err.print(f"identity tokens: {describe(settings.tokens)}")
    where = f"http://{host}:{port}"
    if not names:
        err.print(f"serving no knowledge base yet on {where}")
    for name in names:
        base = f"{where}/knowledgebases/{name}"
        err.print(
            f"serving {name}: POST {base}/retrieve?api-version={SUPPORTED_API_VERSIONS[0]}"
            f" (MCP: {base}/mcp)"
        )
    err.print(f"OpenAI-compatible: GET {where}/v1/models, POST {where}/v1/chat/completions")
    if data is not None:
        err.print(f"managing {data} at {where}/indexes, /knowledgesources, /knowledgebases")
    if workers == 1:
        from agentic_retrieval.server.serving import serve as run_server

        _check_port_free(host, port)
        run_server(build(), host=host, port=port, log_level="info")
        return
    from agentic_retrieval.server.workers import bind, run_workers

    try:
        sock = bind(host, port)
    except OSError as exc:
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    err.print(f"{workers} worker processes")
    run_workers(build, sock, workers=workers)


def build_server_app(kb: list[Path], data: Path | None, settings: Any) -> Any:
    """The app ``serve`` runs (built in each worker process)."""
    from agentic_retrieval.kb.loader import open_knowledge_base
    from agentic_retrieval.kb.service import ServiceDirectory
    from agentic_retrieval.server import create_app

    bases = [open_knowledge_base(path) for path in kb]
    service = ServiceDirectory(data) if data is not None else None
    return create_app(bases, settings=settings, service=service)


def _served_names(kb: list[Path], data: Path | None) -> list[str]:
    """Check the directories before serving; the knowledge bases' names."""
    from agentic_retrieval.kb.loader import open_knowledge_base
    from agentic_retrieval.kb.service import ServiceDirectory

    names = []
    for path in kb:
        opened = open_knowledge_base(path)  # fails here, in one line, on a broken directory
        names.append(opened.name)
        for source in opened.sources.values():
            getattr(source, "close", lambda: None)()  # workers open their own connections
    if len(set(names)) != len(names):
        raise UserError(f"two --kb directories hold knowledge bases with the same name: {names}")
    if data is not None:
        try:
            service = ServiceDirectory(data)
        except OSError as exc:
            raise UserError(f"--data {data}: {exc.strerror or exc}") from None
        service.remove_orphans()
        service.reconcile_ingestion()  # runs a killed server left "in progress"
        names += [d.name for d in service.definitions("knowledgeBase")]
        service.close()
    return names


@app.command()
@user_errors
def mcp(kb: KbOption) -> None:
    """Serve the knowledge base in DIR as an MCP server over stdio (for desktop clients)."""
    from agentic_retrieval.kb.loader import open_knowledge_base

    _server_extra()
    from agentic_retrieval.server.mcp import run_stdio

    run_stdio(open_knowledge_base(kb))


def _check_port_free(host: str, port: int) -> None:
    """Fail with one line now rather than with uvicorn's log lines after start-up."""
    import socket

    if port == 0:
        return
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def _server_extra() -> Any:
    _import_extra("fastapi", "server")
    _import_extra("mcp", "server")
    import agentic_retrieval.server as server

    return server


def _import_extra(module: str, extra: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise UserError(
            f"this command needs the [{extra}] extra: pip install 'agentic-retrieval[{extra}]' "
            f"(in a checkout: .venv/bin/pip install -e '.[{extra}]')"
        ) from exc


# --- demo ---------------------------------------------------------------------------------


@app.command()
@user_errors
def demo(
    kb: Annotated[
        Path | None,
        typer.Option("--kb", help="Where to build the sample knowledge base (default: cache)."),
    ] = None,
    questions: Annotated[int, typer.Option(help="How many sample questions to run.")] = 4,
    top: Annotated[int, typer.Option(help="Rank within which the expected file counts.")] = 5,
) -> None:
    """Build (once) a sample knowledge base and answer sample questions offline.

    The knowledge base is the bundled Harborline Transit corpus; questions run at minimal
    effort (no LLM), and each shows whether the file expected to answer it ranked in the top.
    """
    from agentic_retrieval.kb.loader import build_sample_kb, open_knowledge_base, sample_questions

    one_line_logging()

    try:
        with _index_progress("indexing the sample corpus") as progress:
            directory = build_sample_kb(kb, progress=progress)
    except (OSError, KnowledgeBaseDirectoryError) as exc:
        cause = exc if isinstance(exc, OSError) else exc.__cause__
        if not isinstance(cause, OSError):
            raise
        raise UserError(
            f"cannot write the sample knowledge base ({cause.strerror or cause}: "
            f"{cause.filename or kb}); choose a writable place with --kb DIR or "
            "$AGENTIC_RETRIEVAL_CACHE"
        ) from None
    err.print(f"sample knowledge base: {directory.path}")
    knowledge_base = open_knowledge_base(directory.path, embeddings=False)
    found = 0
    chosen = sample_questions()[: max(questions, 0)]
    for item in chosen:
        out.rule(item["id"])
        request = build_request(knowledge_base, item["question"], "minimal", None, None)
        response = run_retrieve(knowledge_base, request, on_event=None)
        render_response(response, item["question"], top=top)
        rank = expected_rank(response, item["files"])
        if rank is not None and rank <= top:
            found += 1
            out.print(f"[green]expected file ranked #{rank}[/green] ({', '.join(item['files'])})")
        else:
            where = f"ranked #{rank}" if rank else "not retrieved"
            out.print(f"[red]expected file {where}[/red] ({', '.join(item['files'])})")
    out.rule()
    out.print(f"expected file in the top {top} for {found} of {len(chosen)} questions")


def expected_rank(response: RetrieveResponse, files: list[str]) -> int | None:
    """The best rank (1-based) of a chunk from any of ``files``, or ``None``."""
    slugs = [re.sub(r"[^a-z0-9]+", "-", f.lower()).strip("-") + "-" for f in files]
    for rank, ref in enumerate(response.references, 1):
        if any((ref.doc_key or "").startswith(slug) for slug in slugs):
            return rank
    return None
