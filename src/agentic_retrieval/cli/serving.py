"""Option handling of ``agentic-retrieval serve``: identity tokens, permission rules, the extra.

Each option falls back to its environment variable, so a deployment can configure the
server without a command line (and the JWT secret is read from the environment only).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentic_retrieval.cli.errors import UserError
from agentic_retrieval.errors import install_hint

if TYPE_CHECKING:
    from agentic_retrieval.kb.service_state import ServiceState

STORE_ENV = "AGENTIC_RETRIEVAL_STORE"
"""Where ``--store`` falls back to (``serve`` and the ``kb``/``source`` commands alike)."""
ENFORCE_ENV = "AGENTIC_RETRIEVAL_ENFORCE_PERMISSIONS"
REQUIRE_IDENTITY_ENV = "AGENTIC_RETRIEVAL_REQUIRE_IDENTITY"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def check_open_files(settings: Any) -> str | None:
    """A warning when the process cannot open a file for every store the limits allow.

    The soft open-file limit is raised first where the hard one allows (see
    :mod:`agentic_retrieval.server.open_files`).
    """
    from agentic_retrieval.server.open_files import ensure_open_files, handles_needed

    stores = settings.max_indexes + settings.max_knowledge_sources
    needed = handles_needed(stores, settings.max_in_flight + settings.max_receiving_bodies)
    allowed = ensure_open_files(needed)
    if allowed >= needed:
        return None
    return (
        f"this process may open {allowed} files, but {settings.max_indexes} indexes and "
        f"{settings.max_knowledge_sources} knowledge sources may need {needed} (each store is "
        "opened by every search thread): lower --max-indexes / --max-knowledge-sources, or "
        "raise the limit (ulimit -n)"
    )


def check_keys(options: Mapping[str, list[str] | None]) -> None:
    """Refuse a key no request could present, before the server starts.

    ``--api-key "$KEY"`` with ``KEY`` unset passes an empty key: the server would turn keys on
    and then refuse every request, saying nothing at start-up.

    Args:
        options: The key options as given, by option name (``--api-key``...).

    Raises:
        UserError: An empty key, or one with spaces around it (no header carries those).
    """
    for option, keys in options.items():
        for key in keys or []:
            if option == "--query-key-for" and ":" not in key:
                continue  # not KB:KEY at all: ServerSettings says what the form is
            value = key.partition(":")[2] if option == "--query-key-for" else key
            if not value.strip():
                raise UserError(
                    f"{option} is empty (is the variable you passed set?): the server would "
                    f"refuse every request; give a key, or leave {option} out"
                )
            if value != value.strip():
                raise UserError(
                    f"{option} has spaces around the key, which no request header can carry: "
                    "the server would refuse every request with it"
                )


def access_options(
    issuer: str | None,
    audience: str | None,
    jwks: str | None,
    enforce: bool | None,
    require_identity: list[str] | None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ``ServerSettings`` fields for tokens and permissions, options over environment.

    Raises:
        UserError: A partial token configuration, or a malformed environment value.
    """
    from agentic_retrieval.server.tokens import TokenSettings

    env = os.environ if environ is None else environ
    try:
        tokens = TokenSettings.resolve(issuer=issuer, audience=audience, jwks=jwks, environ=env)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if enforce is None and env.get(ENFORCE_ENV, "").strip():
        value = env[ENFORCE_ENV].strip().lower()
        if value not in _TRUE + _FALSE:
            raise UserError(f"${ENFORCE_ENV} must be true or false, not {env[ENFORCE_ENV]!r}")
        enforce = value in _TRUE
    names = list(require_identity or [])
    if not names:
        names = [n.strip() for n in env.get(REQUIRE_IDENTITY_ENV, "").split(",") if n.strip()]
    return {"tokens": tokens, "enforce_permissions": enforce, "require_identity": names}


def server_extra() -> Any:
    """The server package, once its extra's dependencies are known to be installed.

    Raises:
        UserError: The ``server`` extra is missing, naming how to install it.
    """
    import_extra("fastapi", "server")
    import_extra("mcp", "server")
    import agentic_retrieval.server as server

    return server


def import_extra(module: str, extra: str) -> Any:
    """Import ``module``, which the optional ``extra`` installs.

    Raises:
        UserError: It is missing, naming the extra to install.
    """
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise UserError(f"this command needs the [{extra}] extra: {install_hint(extra)}") from exc


def open_service_state(data: Path, store: str | None) -> ServiceState:
    """The service state of ``--data DIR [--store URL]``, or one line saying why not.

    ``serve`` and the ``kb``/``source`` commands open it here, so a URL that is wrong or a
    database that cannot be reached reads the same from each.

    Raises:
        UserError: The ``postgres`` extra is missing, DIR cannot be created, or the URL is
            invalid or its database unreachable (naming it without its password).
    """
    from agentic_retrieval.errors import StoreError
    from agentic_retrieval.kb.service_state import open_service

    if store is not None:
        import_extra("psycopg", "postgres")
    try:
        return open_service(data, store)
    except OSError as exc:
        raise UserError(f"--data {data}: {exc.strerror or exc}") from None
    except StoreError as exc:  # one line: which database, why; never the password
        raise UserError(f"--store: {exc}") from None
