"""``agentic-retrieval serve``: the retrieve REST API, the management API and MCP over HTTP."""

from __future__ import annotations

import functools
import logging
import sys
from pathlib import Path
from typing import Annotated, Any, Literal, TextIO

import typer

from agentic_retrieval.cli.errors import UserError, user_errors
from agentic_retrieval.cli.render import err
from agentic_retrieval.cli.serving import (
    STORE_ENV,
    import_extra,
    open_service_state,
    server_extra,
)
from agentic_retrieval.embeddings import NO_EMBEDDINGS_ENV_VAR
from agentic_retrieval.kb.management import DEFAULT_MAX_DEFINITIONS
from agentic_retrieval.sources.local.conversion_limits import ConversionLimits
from agentic_retrieval.wire.models import SUPPORTED_API_VERSIONS


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
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            envvar=STORE_ENV,
            help="postgresql://user@host:port/db: keep the whole service state (definitions, "
            "documents, vectors, status) in PostgreSQL, shared by every replica; --data then "
            "holds this replica's caches and locks only (postgres extra; "
            "$AGENTIC_RETRIEVAL_STORE).",
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
    max_receiving_bodies: Annotated[
        int, typer.Option(help="Request bodies being received at once (per worker).")
    ] = 32,
    caller_share: Annotated[
        float,
        typer.Option(
            help="Largest fraction of either budget one key (without keys: one client "
            "address) may hold; beyond it that caller gets 429s, the others are still served."
        ),
    ] = 0.75,
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
    no_embeddings: Annotated[
        bool,
        typer.Option(
            "--no-embeddings",
            envvar=NO_EMBEDDINGS_ENV_VAR,
            help="Do not load the embedding model: file knowledge sources rank lexically, "
            "--kb ones too (default: hybrid, with the bundled model; "
            f"${NO_EMBEDDINGS_ENV_VAR}=1).",
        ),
    ] = False,
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
    server = server_extra()
    import_extra("uvicorn", "server")
    if not kb and data is None:
        raise UserError("give --data DIR (a service data directory) and/or --kb DIR")
    if store is not None and data is None:
        raise UserError("--store needs --data DIR (this replica's caches and locks)")
    from agentic_retrieval.cli.serving import access_options, check_keys, check_open_files

    check_keys({"--api-key": api_key, "--query-key": query_key, "--query-key-for": query_key_for})
    names = _served_names(kb or [], data, store)
    access = access_options(
        jwt_issuer, jwt_audience, jwt_jwks, enforce_permissions, require_identity
    )
    try:
        settings = server.ServerSettings(
            api_keys=list(api_key or []),
            query_keys=list(query_key or []),
            scoped_query_keys=list(query_key_for or []),
            max_in_flight=max_in_flight,
            max_receiving_bodies=max_receiving_bodies,
            caller_share=caller_share,
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
            embeddings=not no_embeddings,
            **access,
        )
        settings.access_policy()  # a JWKS file that cannot be read fails here, in one line
    except ValueError as exc:
        raise UserError(str(exc)) from None
    build = functools.partial(build_server_app, list(kb or []), data, settings, store)
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
        kept = data if store is None else _safe_label(store)
        err.print(f"managing {kept} at {where}/indexes, /knowledgesources, /knowledgebases")
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


def build_server_app(
    kb: list[Path], data: Path | None, settings: Any, store: str | None = None
) -> Any:
    """The app ``serve`` runs (built in each worker process)."""
    from agentic_retrieval.embeddings import wait_for_local_models
    from agentic_retrieval.kb.loader import open_knowledge_base
    from agentic_retrieval.kb.service_state import open_service
    from agentic_retrieval.server import create_app

    _log_ingestion_progress()
    # --no-embeddings: no model is loaded, hybrid --kb sources are searched lexically
    choice: Literal[False] | None = None if settings.embeddings else False
    bases = [open_knowledge_base(path, embeddings=choice) for path in kb]
    service = open_service(data, store) if data is not None else None
    app = create_app(bases, settings=settings, service=service)
    # the bundled model loads before the server says it is ready: no first request waits
    wait_for_local_models()
    return app


def _log_ingestion_progress() -> None:
    """Show how far a large upload's embedding has gone in the server's log (stderr).

    Uvicorn configures its own loggers only: the library's INFO lines would go nowhere. Only
    the file sources' background embedding logger is shown at INFO (its progress lines name the time
    left and the opt-out); the rest of the library keeps to warnings.
    """
    progress = logging.getLogger("agentic_retrieval.kb.background_embedding")
    if any(isinstance(h, _ProgressHandler) for h in progress.handlers):
        return  # a second app in this process (tests), or a forked worker's parent set it
    handler = _ProgressHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
    progress.addHandler(handler)
    progress.setLevel(logging.INFO)


class _ProgressHandler(logging.StreamHandler[TextIO]):
    """The server's handler of ingestion progress lines (added once per process).

    Writes to whatever ``sys.stderr`` is when a line is logged, not the stream of the moment
    it was added: a process that replaces its stderr later (a test's capture, a daemon's
    redirection) would otherwise get "Logging error" tracebacks instead of progress.
    """

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass  # StreamHandler.__init__ sets it; stderr is looked up at each line instead


def _served_names(kb: list[Path], data: Path | None, store: str | None = None) -> list[str]:
    """Check the directories (and the database) before serving; the knowledge bases' names."""
    from agentic_retrieval.kb.loader import open_knowledge_base

    names = []
    for path in kb:
        # fails here, in one line, on a broken directory; no model: the workers load their own
        opened = open_knowledge_base(path, embeddings=False)
        names.append(opened.name)
        for source in opened.sources.values():
            getattr(source, "close", lambda: None)()  # workers open their own connections
    if len(set(names)) != len(names):
        raise UserError(f"two --kb directories hold knowledge bases with the same name: {names}")
    if data is not None:
        service = open_service_state(data, store)
        service.remove_orphans()
        service.reconcile_ingestion()  # runs a killed server left "in progress"
        names += [d.name for d in service.definitions("knowledgeBase")]
        service.close()
    return names


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


def _safe_label(url: str) -> str:
    from agentic_retrieval.sources.postgres.connections import safe_url

    return safe_url(url)
