"""``agentic-retrieval kb …`` and ``source …``: list, show and delete without the SDK.

Both work on a service data directory (``--data DIR``, what ``serve --data`` manages), on
the PostgreSQL database of ``serve --store URL`` (``--store URL`` or ``$AGENTIC_RETRIEVAL_STORE``,
opened as ``serve`` opens it), or on a knowledge-base directory (``--kb DIR``, what ``index``
builds). Deleting follows the same rules as the REST API: a source a knowledge base still uses
is refused.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from agentic_retrieval.cli.errors import UserError, user_errors
from agentic_retrieval.cli.options import (
    AnswerInstructionsOption,
    MaxOutputDocumentsOption,
    MaxOutputTokensOption,
    MaxRuntimeOption,
    RerankerThresholdOption,
    RetrievalInstructionsOption,
    update_kb_settings,
)
from agentic_retrieval.cli.render import out
from agentic_retrieval.cli.serving import STORE_ENV, open_service_state
from agentic_retrieval.errors import ResourceNotFoundError
from agentic_retrieval.kb.definitions import KnowledgeBaseDefinition, KnowledgeSourceDefinition
from agentic_retrieval.kb.directory import KnowledgeBaseDirectory
from agentic_retrieval.kb.management import delete_knowledge_base, delete_knowledge_source
from agentic_retrieval.kb.model_connections import without_headers
from agentic_retrieval.kb.service import DATABASE_NAME, ServiceDirectory, StoredDefinition
from agentic_retrieval.kb.service_state import ServiceState

kb_app = typer.Typer(
    help="List, show, update and delete knowledge bases.",
    no_args_is_help=True,
    rich_markup_mode=None,  # click's help: option names are never cut (see cli/app.py)
)
source_app = typer.Typer(
    help="List, show and delete knowledge sources.", no_args_is_help=True, rich_markup_mode=None
)

DataOption = Annotated[
    Path | None, typer.Option("--data", help="A service data directory (serve --data).")
]
KbDirOption = Annotated[
    Path | None, typer.Option("--kb", help="A knowledge-base directory (index --kb).")
]
StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        envvar=STORE_ENV,
        help="postgresql://user@host:port/db: the service state serve --store keeps there "
        "(postgres extra; $AGENTIC_RETRIEVAL_STORE; --data is then optional).",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON only.")]


# --- knowledge bases ------------------------------------------------------------------------


@kb_app.command("list")
@user_errors
def list_bases(
    data: DataOption = None,
    store: StoreOption = None,
    kb: KbDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """List the knowledge bases of a data directory (or the one in a KB directory)."""
    if kb is not None:
        rows = [_directory_base(_kb_directory(kb, store))]
    else:
        with _service(data, store) as (service, _):
            rows = [_body(d) for d in service.definitions("knowledgeBase")]
    if as_json:
        _print_json(rows)
        return
    table = Table("name", "knowledge sources", "description")
    for row in rows:
        sources = ", ".join(s["name"] for s in row.get("knowledgeSources", []))
        table.add_row(row["name"], sources, row.get("description") or "")
    out.print(table)


@kb_app.command("show")
@user_errors
def show_base(
    name: Annotated[
        str | None,
        typer.Argument(help="The knowledge base (optional when the directory holds one)."),
    ] = None,
    data: DataOption = None,
    store: StoreOption = None,
    kb: KbDirOption = None,
) -> None:
    """Print the definition of knowledge base NAME as JSON (model keys redacted)."""
    if kb is not None:
        body = _directory_base(_kb_directory(kb, store))
        if name is not None and body["name"] != name:
            raise UserError(f"{kb} holds the knowledge base {body['name']!r}, not {name!r}")
        _print_json(body)
        return
    with _service(data, store) as (service, where):
        if name is None:
            names = [d.name for d in service.definitions("knowledgeBase")]
            if len(names) != 1:
                held = f"{len(names)}: {', '.join(names)}" if names else "none"
                raise UserError(f"give the knowledge base's name: {where} holds {held}")
            name = names[0]
        stored = service.get("knowledgeBase", name)
    if stored is None:
        raise ResourceNotFoundError(f"no knowledge base named {name!r} in {where}")
    _print_json(_body(stored))


@kb_app.command("update")
@user_errors
def update_base(
    kb: KbDirOption = None,
    data: DataOption = None,
    store: StoreOption = None,
    retrieval_instructions: RetrievalInstructionsOption = None,
    answer_instructions: AnswerInstructionsOption = None,
    max_runtime: MaxRuntimeOption = None,
    max_output_documents: MaxOutputDocumentsOption = None,
    max_output_tokens: MaxOutputTokensOption = None,
    reranker_threshold: RerankerThresholdOption = None,
) -> None:
    """Change the retrieve settings of the knowledge base in a directory; print its definition.

    Over REST (serve --data) the same settings are fields of the knowledge base's definition:
    retrievalInstructions, answerInstructions and retrieveDefaults (rerankerThreshold there
    is this service's extension).
    """
    if kb is None:
        # a service's definition has an ETag and REST's validation; no second path to keep true
        served = "--store URL" if store is not None else "--data DIR"
        raise UserError(
            f"kb update changes a knowledge-base directory (--kb DIR); a knowledge base of "
            f"{served} changes over REST: PUT /knowledgebases('NAME') with its new fields"
        )
    directory = _kb_directory(kb, store)
    changed = update_kb_settings(
        directory,
        retrieval_instructions,
        answer_instructions,
        max_runtime,
        max_output_documents,
        max_output_tokens,
        reranker_threshold,
    )
    if not changed:
        raise UserError(
            "nothing to change: give --retrieval-instructions, --answer-instructions, "
            "--max-runtime, --max-output-documents, --max-output-tokens or "
            "--reranker-threshold"
        )
    _print_json(_directory_base(directory))


@kb_app.command("delete")
@user_errors
def delete_base(name: str, data: DataOption = None, store: StoreOption = None) -> None:
    """Delete knowledge base NAME from a data directory (its sources stay)."""
    with _service(data, store) as (service, where):
        deleted = delete_knowledge_base(service, name)
    if deleted is None:
        raise ResourceNotFoundError(f"no knowledge base named {name!r} in {where}")
    out.print(f"deleted knowledge base {name}")


# --- knowledge sources ----------------------------------------------------------------------


@source_app.command("list")
@user_errors
def list_sources(
    data: DataOption = None,
    store: StoreOption = None,
    kb: KbDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """List the knowledge sources of a data directory or a KB directory."""
    if kb is not None:
        directory = _kb_directory(kb, store)
        rows = [_directory_source(directory, entry.name) for entry in directory.sources]
    else:
        with _service(data, store) as (service, _):
            rows = [_source_row(service, d) for d in service.definitions("knowledgeSource")]
    if as_json:
        _print_json(rows)
        return
    table = Table("name", "kind", "documents", "description")
    for row in rows:
        table.add_row(row["name"], row["kind"], str(row["documents"]), row.get("description") or "")
    out.print(table)


@source_app.command("show")
@user_errors
def show_source(
    name: str, data: DataOption = None, store: StoreOption = None, kb: KbDirOption = None
) -> None:
    """Print knowledge source NAME (its definition and document count) as JSON."""
    if kb is not None:
        directory = _kb_directory(kb, store)
        directory.open_source(name, embeddings=False)  # raises, naming the known sources
        _print_json(_directory_source(directory, name))
        return
    with _service(data, store) as (service, where):
        stored = service.get("knowledgeSource", name)
        if stored is None:
            raise ResourceNotFoundError(f"no knowledge source named {name!r} in {where}")
        documents = _source_row(service, stored)["documents"]
    _print_json({**_body(stored), "documents": documents})


@source_app.command("delete")
@user_errors
def delete_source(
    name: str, data: DataOption = None, store: StoreOption = None, kb: KbDirOption = None
) -> None:
    """Delete knowledge source NAME (and what was indexed into it).

    In a data directory, a source a knowledge base still uses is refused.
    """
    if kb is not None:
        _kb_directory(kb, store).remove_source(name)
        out.print(f"deleted knowledge source {name}")
        return
    with _service(data, store) as (service, where):
        deleted = delete_knowledge_source(service, name)
    if deleted is None:
        raise ResourceNotFoundError(f"no knowledge source named {name!r} in {where}")
    out.print(f"deleted knowledge source {name}")


# --- helpers --------------------------------------------------------------------------------


@contextmanager
def _service(data: Path | None, store: str | None) -> Iterator[tuple[ServiceState, str]]:
    """The service state and how messages name it, closed when the command is done.

    With ``--store`` it is the database ``serve --store`` keeps (``--data`` optional: nothing
    these commands do needs a replica's caches, so a temporary directory stands in).
    """
    if store is None:
        if data is None:
            raise UserError("give --data DIR (a service data directory), --store URL or --kb DIR")
        if not (data / DATABASE_NAME).is_file():
            raise UserError(f"{data} is not a service data directory ({DATABASE_NAME} is missing)")
        service: ServiceState = ServiceDirectory(data)
        try:
            yield service, str(data)
        finally:
            service.close()
        return
    from agentic_retrieval.sources.postgres.connections import safe_url

    with tempfile.TemporaryDirectory(prefix="agentic-retrieval-") as scratch:
        state = open_service_state(data or Path(scratch), store)
        try:
            yield state, safe_url(store)
        finally:
            state.close()


def _kb_directory(path: Path, store: str | None = None) -> KnowledgeBaseDirectory:
    """The knowledge-base directory ``--kb`` names (refusing a ``--store`` given beside it).

    ``$AGENTIC_RETRIEVAL_STORE`` set for a deployment does not stop ``--kb`` from working.
    """
    if store is not None and store != os.environ.get(STORE_ENV):
        raise UserError(
            "--kb DIR is a knowledge-base directory; --store URL names a service's database: "
            "give one of them"
        )
    return KnowledgeBaseDirectory(path).load()


def _body(stored: StoredDefinition) -> dict[str, Any]:
    if stored.kind == "knowledgeBase":
        return KnowledgeBaseDefinition.model_validate(stored.body).redacted()
    return without_headers(stored.body)  # openAICompatible headers are never shown


def _source_row(service: ServiceState, stored: StoredDefinition) -> dict[str, Any]:
    from agentic_retrieval.kb.catalog import ServiceCatalog
    from agentic_retrieval.kb.source_kinds import SOURCE_KINDS

    catalog = ServiceCatalog(service)
    definition = KnowledgeSourceDefinition.model_validate(stored.body)
    held = SOURCE_KINDS[definition.kind].documents(catalog, definition)
    documents = held.count() if held is not None else 0
    return {
        "name": stored.name,
        "kind": stored.body.get("kind"),
        "description": stored.body.get("description"),
        "documents": documents,
    }


def _directory_base(directory: KnowledgeBaseDirectory) -> dict[str, Any]:
    return {
        "name": directory.name,
        "description": directory.description or None,
        "knowledgeSources": [{"name": entry.name} for entry in directory.sources],
        **directory.settings.model_dump(by_alias=True, exclude_none=True),
    }


def _directory_source(directory: KnowledgeBaseDirectory, name: str) -> dict[str, Any]:
    entry = next(e for e in directory.sources if e.name == name)
    store = directory.open_source(name, embeddings=False).store
    return {
        "name": entry.name,
        "kind": entry.kind,
        "description": entry.description or None,
        "documents": len(store.indexed_paths()),
        "chunks": store.count_chunks(),
    }


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
