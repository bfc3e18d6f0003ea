"""API-key authentication: ``api-key: KEY`` or ``Authorization: Bearer KEY``.

Admin keys may do everything; query keys may only retrieve (as in Azure AI Search, where a
query key cannot read service definitions). Keys are compared in constant time and never
logged.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from agentic_retrieval.server.errors import ApiError

ENV_VAR = "AGENTIC_RETRIEVAL_API_KEYS"
"""Comma-separated keys; ``query:KEY`` marks a query key, ``KEY`` or ``admin:KEY`` an admin key."""

Role = Literal["admin", "query"]


@dataclass(frozen=True)
class ApiKeys:
    """The accepted keys, by role."""

    admin: tuple[str, ...] = ()
    query: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> ApiKeys:
        """Parse ``KEY,admin:KEY,query:KEY`` (whitespace and empty items ignored)."""
        admin: list[str] = []
        query: list[str] = []
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            role, _, key = item.partition(":")
            if key and role in ("admin", "query"):
                (admin if role == "admin" else query).append(key)
            else:
                admin.append(item)
        return cls(admin=tuple(admin), query=tuple(query))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ApiKeys:
        """Keys from ``$AGENTIC_RETRIEVAL_API_KEYS`` (none when unset)."""
        return cls.parse((environ if environ is not None else os.environ).get(ENV_VAR, ""))

    def merged(self, other: ApiKeys) -> ApiKeys:
        """These keys plus ``other``'s."""
        return ApiKeys(admin=self.admin + other.admin, query=self.query + other.query)

    @property
    def enabled(self) -> bool:
        """Whether any key is configured (otherwise every request is allowed)."""
        return bool(self.admin or self.query)

    def role_of(self, headers: Mapping[str, str]) -> Role | None:
        """The role the request's key grants, or ``None`` for a missing or wrong key.

        With no keys configured every request is ``admin``.
        """
        if not self.enabled:
            return "admin"
        presented = presented_key(headers)
        if presented is None:
            return None
        # Compare against every key so timing does not reveal which list matched.
        is_admin = _matches_any(presented, self.admin)
        is_query = _matches_any(presented, self.query)
        if is_admin:
            return "admin"
        return "query" if is_query else None


def require_role(keys: ApiKeys, headers: Mapping[str, str], needed: Role) -> Role:
    """The caller's role, or 401 (missing or wrong key) or 403 (a query key, admin needed).

    Raises:
        ApiError: 401 or 403.
    """
    role = keys.role_of(headers)
    if role is None:
        raise ApiError(
            401,
            "Access denied: send a valid key in the 'api-key' header or as "
            "'Authorization: Bearer <key>'.",
        )
    if needed == "admin" and role != "admin":
        raise ApiError(
            403,
            "A query key may only retrieve and search; this operation needs an admin key.",
        )
    return role


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key a request presents in ``api-key`` or ``Authorization: Bearer``."""
    key = headers.get("api-key")
    if key:
        return key.strip()
    scheme, _, token = (headers.get("authorization") or "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return None


def _matches_any(presented: str, keys: tuple[str, ...]) -> bool:
    candidate = presented.encode()
    found = False
    for key in keys:
        found |= hmac.compare_digest(candidate, key.encode())
    return found
