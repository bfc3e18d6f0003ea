"""``agentic-retrieval index``: create or update a source from files, folders or records."""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from agentic_retrieval.cli.errors import EXIT_FAILED, UserError, one_line_logging, user_errors
from agentic_retrieval.cli.options import (
    AnswerInstructionsOption,
    KbOption,
    MaxOutputDocumentsOption,
    MaxOutputTokensOption,
    MaxRuntimeOption,
    RerankerThresholdOption,
    RetrievalInstructionsOption,
    update_kb_settings,
)
from agentic_retrieval.cli.render import err, index_progress, out
from agentic_retrieval.embeddings import LOCAL
from agentic_retrieval.errors import KnowledgeBaseDirectoryError
from agentic_retrieval.kb.directory import KnowledgeBaseDirectory
from agentic_retrieval.sources.local import IndexReport
from agentic_retrieval.sources.local.ingest import RESERVED_METADATA
from agentic_retrieval.sources.local.loaders import SUPPORTED_EXTENSIONS
from agentic_retrieval.sources.local.records import RecordFields

MAX_NAMED_IGNORED = 20


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
            help="Index vectors for hybrid search with this model: 'local' (the bundled "
            "all-MiniLM-L6-v2, the default for a new source; a source added later follows "
            "the knowledge base's model) or 'provider:model' (LangChain init_embeddings, "
            "e.g. openai:text-embedding-3-small).",
        ),
    ] = None,
    no_embeddings: Annotated[
        bool,
        typer.Option(
            "--no-embeddings", help="Index without vectors (lexical only; no model is loaded)."
        ),
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
    database: Annotated[
        str | None,
        typer.Option(
            "--database",
            help="Keep a new source's index in PostgreSQL (postgresql://user@host:port/db; "
            "the password from PGPASSWORD or ~/.pgpass) instead of a file in DIR. Needs the "
            "postgres extra.",
        ),
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
    directory = KnowledgeBaseDirectory(kb)
    exists = directory.manifest_path.exists()
    if exists:
        directory.load()
    new_source = not exists or source not in directory.source_names
    if model is None and new_source:
        # hybrid by default: a new source follows the model of the knowledge base's other
        # sources, else the bundled one (--no-embeddings opts out)
        model = directory.embedding_model() if exists else None
        model = model or LOCAL
    vectors = embeddings_for_indexing(model)  # built before anything is written
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
    if database is not None and not new_source:
        recorded = next(e.database for e in directory.sources if e.name == source)
        if recorded.partition("#")[0] != database:
            raise UserError(
                f"source {source!r} already keeps its index in {recorded.partition('#')[0]}; "
                "--database applies to a new source"
            )
    try:
        entry = directory.add_or_update_source(
            source, description=description, embeddings=model, database=database
        )
    except KnowledgeBaseDirectoryError:
        if not exists and not directory.source_names:  # nothing of this run is left behind
            _remove_empty_kb(directory, dir_created=created_dir)
        raise
    # the report below lists every failed file once: silence the per-file log lines
    reports: list[IndexReport] = []
    with _quiet("agentic_retrieval.sources.local", "pypdf"):
        if paths:
            with index_progress(f"indexing into {source}", entry.embeddings) as progress:
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
            with index_progress(f"indexing records into {source}", entry.embeddings) as progress:
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
        _remove_empty_kb(directory, dir_created=dir_created)


def _remove_empty_kb(directory: KnowledgeBaseDirectory, *, dir_created: bool) -> None:
    """Remove the manifest (and the directory) of a knowledge base this run created."""
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
