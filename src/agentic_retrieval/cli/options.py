"""Options more than one command takes: the knowledge-base directory and its retrieve settings."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from agentic_retrieval.cli.errors import UserError
from agentic_retrieval.context import Threshold, parse_threshold
from agentic_retrieval.kb.directory import KnowledgeBaseDirectory

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


def cli_threshold(text: str, option: str) -> Threshold:
    """A threshold option's value: a number 0-4, ``none`` or ``default``.

    Raises:
        UserError: Anything else, naming the option.
    """
    try:
        return parse_threshold(text, option)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def check_choice(option: str, value: str | None, choices: tuple[str, ...]) -> None:
    """Refuse a value of ``option`` outside ``choices`` (``None``: not given, fine).

    Raises:
        UserError: Naming the option and its choices.
    """
    if value is not None and value not in choices:
        raise UserError(f"{option} must be one of {', '.join(choices)}, not {value!r}")
