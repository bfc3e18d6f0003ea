"""``agentic-retrieval retrieve``: one question over a knowledge-base directory."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from typing import Annotated

import typer

from agentic_retrieval.cli.errors import EXIT_FAILED, UserError, one_line_logging, user_errors
from agentic_retrieval.cli.options import KbOption, check_choice, cli_threshold
from agentic_retrieval.cli.render import err, render_response, status_updater
from agentic_retrieval.cli.retrieving import build_request, run_retrieve
from agentic_retrieval.context import THRESHOLD_ENV_VAR
from agentic_retrieval.errors import FilterFieldError, ODataError
from agentic_retrieval.graph.vocabulary import OUTPUT_MODES, REQUESTED_EFFORTS
from agentic_retrieval.knowledge_base import KnowledgeBase
from agentic_retrieval.odata import Expr, check_fields, parse_filter
from agentic_retrieval.permissions import Identity
from agentic_retrieval.sources.base import TypedFilterableKnowledgeSource
from agentic_retrieval.wire.models import RetrieveResponse
from agentic_retrieval.wire.retrieve import effort_warnings, known_fields


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
    check_choice("--effort", effort, REQUESTED_EFFORTS)
    check_choice("--output-mode", output_mode, OUTPUT_MODES)
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
                knowledge_base, request, on_event=status_updater(status), identity=identity
            )
        render_response(response, question, threshold=knowledge_base.defaults.reranker_threshold)
    for warning in effort_warnings(response):
        err.print(f"note: {warning}", markup=False, soft_wrap=True)
    _exit_unless_complete(response)


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
