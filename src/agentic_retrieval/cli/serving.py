"""Option handling of ``agentic-retrieval serve``: identity tokens and permission rules.

Each option falls back to its environment variable, so a deployment can configure the
server without a command line (and the JWT secret is read from the environment only).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from agentic_retrieval.cli.app import UserError

ENFORCE_ENV = "AGENTIC_RETRIEVAL_ENFORCE_PERMISSIONS"
REQUIRE_IDENTITY_ENV = "AGENTIC_RETRIEVAL_REQUIRE_IDENTITY"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


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
