"""``agentic-retrieval demo``: a sample knowledge base and sample questions, offline."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from agentic_retrieval.cli.errors import UserError, one_line_logging, user_errors
from agentic_retrieval.cli.render import err, index_progress, out, render_response
from agentic_retrieval.cli.retrieving import build_request, run_retrieve
from agentic_retrieval.errors import KnowledgeBaseDirectoryError
from agentic_retrieval.wire.models import RetrieveResponse


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

    from agentic_retrieval.embeddings import local_embeddings_available

    # hybrid, as index is by default (lexical where the bundled model is not installed)
    hybrid = local_embeddings_available()
    try:
        with index_progress("indexing the sample corpus", hybrid) as progress:
            directory = build_sample_kb(kb, progress=progress, embeddings=hybrid)
    except (OSError, KnowledgeBaseDirectoryError) as exc:
        cause = exc if isinstance(exc, OSError) else exc.__cause__
        if not isinstance(cause, OSError):
            raise
        raise UserError(
            f"cannot write the sample knowledge base ({cause.strerror or cause}: "
            f"{cause.filename or kb}); choose a writable place with --kb DIR or "
            "$AGENTIC_RETRIEVAL_CACHE"
        ) from None
    kind = "hybrid: lexical + all-MiniLM-L6-v2 vectors" if hybrid else "lexical"
    err.print(f"sample knowledge base ({kind}): {directory.path}")
    knowledge_base = open_knowledge_base(directory.path)
    found = 0
    chosen = sample_questions()[: max(questions, 0)]
    for item in chosen:
        out.rule(item["id"])
        request = build_request(knowledge_base, item["question"], "minimal", None, None)
        response = run_retrieve(knowledge_base, request, on_event=None)
        render_response(
            response,
            item["question"],
            top=top,
            threshold=knowledge_base.defaults.reranker_threshold,
        )
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
