"""Who is calling: API keys (what a caller may do) and identity tokens (whom they act for).

Keys: ``api-key: KEY`` or ``Authorization: Bearer KEY``. Admin keys may do everything; query
keys may retrieve, search and read documents (as in Azure AI Search, where a query key cannot
read service definitions); a *scoped* query key may only retrieve, and only from the
knowledge bases it names (403 anywhere else). Keys are compared in constant time and never
logged or echoed.

Identity: ``x-ms-query-source-authorization: Bearer <JWT>`` (see
:mod:`agentic_retrieval.server.tokens`) names the end user the request is for; sources then
return only what that user may see. A token that does not validate is a 401, never an
anonymous request; a knowledge base that requires an identity answers 401 without one.
"""

from __future__ import annotations

import dataclasses
import hmac
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from agentic_retrieval.context import Context
from agentic_retrieval.errors import InvalidTokenError
from agentic_retrieval.permissions import ELEVATED, Access, Identity
from agentic_retrieval.server.errors import ApiError
from agentic_retrieval.server.tokens import HEADER, TokenValidator, bearer_token

logger = logging.getLogger(__name__)

ENV_VAR = "AGENTIC_RETRIEVAL_API_KEYS"
"""Comma-separated keys: ``KEY`` or ``admin:KEY`` an admin key, ``query:KEY`` a query key,
``query@kb1|kb2:KEY`` a query key for those knowledge bases only."""
ANY_KNOWLEDGE_BASE = "*"

Role = Literal["admin", "query"]
T = TypeVar("T")


@dataclass(frozen=True)
class Grant:
    """What a request's key allows.

    Attributes:
        role: ``admin`` or ``query``.
        knowledge_bases: The only knowledge bases it may retrieve from (``None``: any).
        keyed: Whether a key was presented (``False`` on a server without keys).
    """

    role: Role
    knowledge_bases: frozenset[str] | None = None
    keyed: bool = True

    @property
    def elevated(self) -> bool:
        """Reads every document whatever its permissions: a presented admin key only."""
        return self.role == "admin" and self.keyed


@dataclass(frozen=True)
class ApiKeys:
    """The accepted keys, by role; ``scoped`` maps query keys to their knowledge bases."""

    admin: tuple[str, ...] = ()
    query: tuple[str, ...] = ()
    scoped: tuple[tuple[str, frozenset[str]], ...] = ()

    @classmethod
    def parse(cls, text: str) -> ApiKeys:
        """Parse ``KEY,admin:KEY,query:KEY,query@kb1|kb2:KEY`` (blank items ignored)."""
        admin: list[str] = []
        query: list[str] = []
        scoped: list[tuple[str, frozenset[str]]] = []
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            role, _, key = item.partition(":")
            if key and role in ("admin", "query"):
                (admin if role == "admin" else query).append(key)
            elif key and role.startswith("query@"):
                scoped.append((key, frozenset(role.removeprefix("query@").split("|"))))
            else:
                admin.append(item)
        return cls(admin=tuple(admin), query=tuple(query), scoped=tuple(scoped))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ApiKeys:
        """Keys from ``$AGENTIC_RETRIEVAL_API_KEYS`` (none when unset)."""
        return cls.parse((environ if environ is not None else os.environ).get(ENV_VAR, ""))

    @classmethod
    def scoped_keys(cls, pairs: Iterable[str]) -> ApiKeys:
        """Query keys from ``KB:KEY`` pairs (``serve --query-key-for``).

        A key paired with several knowledge bases may retrieve from each.

        Raises:
            ValueError: A pair without a knowledge base or a key.
        """
        scoped = []
        for pair in pairs:
            name, _, key = pair.partition(":")
            if not name.strip() or not key:
                raise ValueError(f"expected KNOWLEDGE_BASE:KEY, got {pair.split(':')[0]!r}:…")
            scoped.append((key, frozenset({name.strip()})))
        return cls(scoped=tuple(scoped))

    def merged(self, other: ApiKeys) -> ApiKeys:
        """These keys plus ``other``'s."""
        return ApiKeys(
            admin=self.admin + other.admin,
            query=self.query + other.query,
            scoped=self.scoped + other.scoped,
        )

    @property
    def enabled(self) -> bool:
        """Whether any key is configured (otherwise every request is allowed)."""
        return bool(self.admin or self.query or self.scoped)

    def grant_of(self, headers: Mapping[str, str]) -> Grant | None:
        """What the request's key allows, or ``None`` for a missing or wrong key.

        With no keys configured every request is an (unkeyed) ``admin``.
        """
        if not self.enabled:
            return Grant("admin", keyed=False)
        presented = presented_key(headers)
        if presented is None:
            return None
        # Compare against every key so timing does not reveal which list matched.
        is_admin = _matches_any(presented, self.admin)
        is_query = _matches_any(presented, self.query)
        bases: set[str] = set()
        for key, names in self.scoped:
            if _matches_any(presented, (key,)):
                bases |= names
        if is_admin:
            return Grant("admin")
        if is_query or ANY_KNOWLEDGE_BASE in bases:
            return Grant("query")
        return Grant("query", frozenset(bases)) if bases else None

    def role_of(self, headers: Mapping[str, str]) -> Role | None:
        """The role the request's key grants, or ``None`` for a missing or wrong key."""
        grant = self.grant_of(headers)
        return grant.role if grant is not None else None


UNAUTHORIZED_MESSAGE = (
    "Access denied: send a valid key in the 'api-key' header or as 'Authorization: Bearer <key>'."
)
"""The 401 of a missing or wrong key, wherever it is checked (route, MCP, server guard)."""


def require_role(
    keys: ApiKeys,
    headers: Mapping[str, str],
    needed: Role,
    knowledge_base: str | None = None,
) -> Grant:
    """What the caller may do, or 401 (missing or wrong key) or 403 (not allowed here).

    Args:
        keys: The accepted keys.
        headers: The request's headers.
        needed: ``admin`` to manage; ``query`` to retrieve or read.
        knowledge_base: The knowledge base a retrieve targets (scoped keys may only
            retrieve, and only from theirs).

    Raises:
        ApiError: 401 or 403; the message never contains a key.
    """
    grant = keys.grant_of(headers)
    if grant is None:
        raise ApiError(401, UNAUTHORIZED_MESSAGE)
    if needed == "admin" and grant.role != "admin":
        raise ApiError(
            403,
            "A query key may only retrieve and search; this operation needs an admin key.",
        )
    if grant.knowledge_bases is not None and knowledge_base not in grant.knowledge_bases:
        where = f"the knowledge base '{knowledge_base}'" if knowledge_base else "this operation"
        raise ApiError(403, f"This query key is not valid for {where}.")
    return grant


@dataclass(frozen=True)
class BodyAccess:
    """Who may send a body to a route, and how large it may be.

    The server's guard reads this from the route a request resolves to and refuses a key
    that may not send it (401/403) from the headers alone, before one byte of the body is
    read. The route checks the same again once it runs. A route that declares nothing takes
    bodies from admin keys only (:data:`ADMIN_BODY`): forgetting a declaration closes a
    route, never opens one.

    Attributes:
        role: ``admin``, or ``query`` (query keys may send it too).
        upload: Bodies up to the upload limit (document batches, files); otherwise up to
            the body limit.
        knowledge_base: The path parameter naming the knowledge base a scoped query key must
            hold (retrieve, MCP); ``None``: scoped query keys are refused.
        named_in_body: The knowledge base is named in the body (``/v1/chat/completions``):
            any valid key may send it, and the route checks the name it reads.
    """

    role: Role = "admin"
    upload: bool = False
    knowledge_base: str | None = None
    named_in_body: bool = False

    def check(self, keys: ApiKeys, headers: Mapping[str, str], params: Mapping[str, Any]) -> None:
        """401 or 403 for a key that may not send this body (from the headers alone).

        Raises:
            ApiError: As :func:`require_role` does.
        """
        if self.named_in_body:
            if keys.grant_of(headers) is None:
                raise ApiError(401, UNAUTHORIZED_MESSAGE)
            return
        knowledge_base = params.get(self.knowledge_base) if self.knowledge_base else None
        require_role(keys, headers, self.role, knowledge_base=knowledge_base)


ADMIN_BODY = BodyAccess()
"""Definitions and every undeclared route: admin keys only, up to the body limit."""
UPLOAD_BODY = BodyAccess(upload=True)
"""Document batches and file uploads: admin keys only, up to the upload limit."""
QUERY_BODY = BodyAccess("query")
"""Document searches: any query key but a scoped one."""
RETRIEVE_BODY = BodyAccess("query", knowledge_base="name")
"""Retrieve and MCP: query keys, scoped ones for their knowledge bases only."""
CHAT_BODY = BodyAccess("query", named_in_body=True)
"""``/v1/chat/completions``: every key; the model named in the body is checked by the route."""

_BODY_ACCESS = "__body_access__"


def accepts_body(access: BodyAccess) -> Callable[[T], T]:
    """Declare who may send a body to an endpoint (a route function or an ASGI app)."""

    def declare(endpoint: T) -> T:
        setattr(endpoint, _BODY_ACCESS, access)
        return endpoint

    return declare


def body_access_of(endpoint: object) -> BodyAccess:
    """What an endpoint declared with :func:`accepts_body` (default :data:`ADMIN_BODY`)."""
    access = getattr(endpoint, _BODY_ACCESS, None)
    return access if isinstance(access, BodyAccess) else ADMIN_BODY


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


@dataclass(frozen=True)
class AccessPolicy:
    """How the server treats permissions, per knowledge base.

    Attributes:
        tokens: Validates identity tokens (``None``: the header is refused with a 401).
        enforce: Fail closed on permissions for every knowledge base (on by default once
            tokens are configured).
        require_identity: Knowledge bases (``*``: all) that refuse requests without a token.
    """

    tokens: TokenValidator | None = None
    enforce: bool = False
    require_identity: frozenset[str] = field(default_factory=frozenset)

    def requires_identity(self, knowledge_base: str) -> bool:
        """Whether ``knowledge_base`` refuses requests without an identity."""
        return bool({knowledge_base, ANY_KNOWLEDGE_BASE} & self.require_identity)

    def enforces(self, knowledge_base: str) -> bool:
        """Whether retrieves from ``knowledge_base`` enforce permissions (fail closed)."""
        return self.enforce or self.requires_identity(knowledge_base)

    def run_defaults(self, knowledge_base: str, defaults: Context) -> Context:
        """``defaults`` of ``knowledge_base``, enforcing permissions where this server does."""
        if self.enforces(knowledge_base) and not defaults.enforce_permissions:
            return dataclasses.replace(defaults, enforce_permissions=True)
        return defaults

    async def identity(
        self, headers: Mapping[str, str], knowledge_base: str | None = None
    ) -> Identity | None:
        """The identity the request's token names, or ``None`` when it sends none.

        Raises:
            ApiError: 401 for a token that does not validate (or when no validation is
                configured), or for no token where ``knowledge_base`` requires one.
        """
        raw = headers.get(HEADER)
        if raw is None or not raw.strip():
            if knowledge_base is not None and self.requires_identity(knowledge_base):
                raise _unauthorized(
                    f"The knowledge base '{knowledge_base}' requires a caller identity: send "
                    f"'{HEADER}: Bearer <token>'."
                )
            return None
        if self.tokens is None:
            raise _unauthorized(
                f"This server does not accept '{HEADER}': no token validation is configured."
            )
        try:
            return await self.tokens.aidentity(bearer_token(raw))
        except InvalidTokenError as exc:
            logger.info("refused an identity token: %s", exc)
            raise _unauthorized(f"Access denied: {exc}.") from None

    def read_access(self, grant: Grant, identity: Identity | None) -> Access:
        """What a document read (search, lookup, count) may return to this caller."""
        if grant.elevated:
            return ELEVATED
        return Access(identity=identity, enforce=self.enforce)


def _unauthorized(message: str) -> ApiError:
    return ApiError(
        401,
        message,
        code="Unauthorized",
        headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
    )
