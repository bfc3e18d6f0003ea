"""Settings of the HTTP server: keys, limits, and where it listens."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from agentic_retrieval.kb.management import DEFAULT_MAX_DEFINITIONS, DefinitionLimits
from agentic_retrieval.server.auth import AccessPolicy, ApiKeys
from agentic_retrieval.server.limits import DEFAULT_CALLER_SHARE
from agentic_retrieval.server.tokens import TokenSettings, TokenValidator
from agentic_retrieval.sources.local.conversion_limits import ConversionLimits

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
"""Largest request body accepted (1 MiB); bigger bodies get a 413 before any parsing."""
DEFAULT_MAX_UPLOAD_BYTES = 16 * 1024 * 1024
"""Largest document batch or uploaded file (16 MiB, Azure's batch limit)."""


@dataclass(kw_only=True)
class ServerSettings:
    """How the server authenticates and protects itself.

    Attributes:
        api_keys: Keys allowed to do everything. When neither this nor ``query_keys`` nor
            ``$AGENTIC_RETRIEVAL_API_KEYS`` holds a key, the server is open (no auth).
        query_keys: Keys that may only retrieve (REST ``retrieve`` and the MCP tool).
        scoped_query_keys: ``KNOWLEDGE_BASE:KEY`` pairs: query keys that may only retrieve
            from the knowledge bases they are paired with.
        read_env_keys: Also read keys from ``$AGENTIC_RETRIEVAL_API_KEYS``.
        tokens: How identity tokens (``x-ms-query-source-authorization``) are validated;
            ``None``: requests carrying one are refused (401).
        enforce_permissions: Fail closed on document permissions everywhere (hide documents
            without permissions; a source that cannot trim is an error record). ``None``:
            on exactly when ``tokens`` is configured.
        require_identity: Knowledge bases (``*``: every one) that answer 401 to a request
            without a valid token.
        max_body_bytes: Largest request body; bigger ones get a 413 (at once when their
            ``Content-Length`` says so).
        max_upload_bytes: Largest document batch (``docs/index``) or uploaded file of a file
            knowledge source.
        body_timeout_seconds: Longest time a request body may take to arrive; a slower one
            gets a 408 and the connection is closed.
        header_timeout_seconds: Longest time the request line and headers may take to
            arrive, from the connection's first byte (or its opening); a slower client gets
            a 408 and the connection is closed (applied by :mod:`~agentic_retrieval.server.
            serving`, which runs the app under uvicorn).
        max_header_bytes: Largest request line plus headers; a bigger one gets a 431.
        max_in_flight: Most requests processed at once (their bodies complete); further
            ones get a 429 with ``Retry-After``.
        max_receiving_bodies: Most request bodies being received at once, in a budget of
            their own (a slow body never holds a processing slot); further ones get a 429
            before their body is read.
        caller_share: The largest fraction of each of those two budgets one caller (a key;
            on a server without keys, a client address) may hold; beyond it that caller
            gets 429s while the others are still served.
        retry_after_seconds: The ``Retry-After`` value sent with a 429.
        host: The interface the server listens on; on loopback the MCP endpoint also
            rejects requests whose ``Host``/``Origin`` is not local (DNS-rebinding guard).
        public_url: The base URL clients reach this service at (``https://search.example.com``,
            a path prefix allowed), used in every URL a response gives (``citationUrl``,
            ``@odata.nextLink``). ``None``: the address the server is bound to, as the
            connection's socket reports it. Never the request's ``Host`` header, which any
            client can set.
        conversion_limits: What converting one uploaded file may cost (time, memory, rows,
            cells, ZIP expansion...); a file beyond is a 413 naming the limit.
        conversion_workers: Uploaded files converted at once, each in its own child process
            (default: half the CPUs, 1 to 4).
        conversion_queue: Uploads that may wait for a conversion worker; more get a 429.
        health_max_loop_lag_seconds: ``/healthz`` answers 503 when the event loop runs this
            late (every request would wait as long).
        health_max_query_wait_seconds: ``/healthz`` answers 503 when a search waits this long
            for a query thread.
        max_indexes: Most indexes the data directory holds; creating another is a 429
            naming the limit, as Azure answers past its tier's quota (default: S1's 50).
        max_knowledge_sources: Most knowledge sources it holds (default 50).
        max_knowledge_bases: Most knowledge bases it holds, those of ``--kb`` directories
            not counted (default 50).
        embeddings: File knowledge sources embed their chunks and queries with the bundled
            model (hybrid search); ``False`` (``serve --no-embeddings``): the model is not
            loaded and they rank lexically.
    """

    api_keys: list[str] = field(default_factory=list)
    query_keys: list[str] = field(default_factory=list)
    scoped_query_keys: list[str] = field(default_factory=list)
    read_env_keys: bool = True
    tokens: TokenSettings | None = None
    enforce_permissions: bool | None = None
    require_identity: list[str] = field(default_factory=list)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    body_timeout_seconds: float = 30.0
    header_timeout_seconds: float = 10.0
    max_header_bytes: int = 64 * 1024
    max_in_flight: int = 64
    max_receiving_bodies: int = 32
    caller_share: float = DEFAULT_CALLER_SHARE
    retry_after_seconds: int = 1
    host: str = "127.0.0.1"
    public_url: str | None = None
    conversion_limits: ConversionLimits = field(default_factory=ConversionLimits)
    conversion_workers: int | None = None
    conversion_queue: int = 16
    health_max_loop_lag_seconds: float = 1.0
    health_max_query_wait_seconds: float = 2.0
    max_indexes: int = DEFAULT_MAX_DEFINITIONS
    max_knowledge_sources: int = DEFAULT_MAX_DEFINITIONS
    max_knowledge_bases: int = DEFAULT_MAX_DEFINITIONS
    embeddings: bool = True

    def __post_init__(self) -> None:
        """Reject limits that would make the server unusable, and a malformed public URL."""
        if self.public_url is not None:
            self.public_url = normalized_public_url(self.public_url)
        if self.max_body_bytes < 1:
            raise ValueError("max_body_bytes must be at least 1")
        if self.max_in_flight < 1 or self.max_receiving_bodies < 1:
            raise ValueError("max_in_flight and max_receiving_bodies must be at least 1")
        if not 0 < self.caller_share <= 1:
            raise ValueError("caller_share must be over 0 and at most 1")
        if self.body_timeout_seconds <= 0 or self.header_timeout_seconds <= 0:
            raise ValueError("body_timeout_seconds and header_timeout_seconds must be positive")
        if self.max_header_bytes < 1024:
            raise ValueError("max_header_bytes must be at least 1024")
        if (self.conversion_workers is not None and self.conversion_workers < 1) or (
            self.conversion_queue < 0
        ):
            raise ValueError("conversion_workers must be at least 1, conversion_queue at least 0")
        self.definition_limits()  # a negative limit fails here
        ApiKeys.scoped_keys(self.scoped_query_keys)  # malformed pairs fail here
        if self.require_identity and self.tokens is None:
            raise ValueError(
                "require_identity needs token validation (tokens): without it no request "
                "could carry an identity"
            )

    def keys(self) -> ApiKeys:
        """The keys in force: the configured ones plus the environment's."""
        keys = ApiKeys.from_env() if self.read_env_keys else ApiKeys()
        keys = keys.merged(ApiKeys(admin=tuple(self.api_keys), query=tuple(self.query_keys)))
        return keys.merged(ApiKeys.scoped_keys(self.scoped_query_keys))

    def definition_limits(self) -> DefinitionLimits:
        """How many indexes, knowledge sources and knowledge bases may be created.

        Raises:
            ValueError: A negative limit.
        """
        return DefinitionLimits(
            self.max_indexes, self.max_knowledge_sources, self.max_knowledge_bases
        )

    def access_policy(self) -> AccessPolicy:
        """Token validation and the permission rules in force.

        Raises:
            ValueError: A JWKS file that cannot be read.
        """
        enforce = self.enforce_permissions
        return AccessPolicy(
            tokens=TokenValidator(self.tokens) if self.tokens is not None else None,
            enforce=(self.tokens is not None) if enforce is None else enforce,
            require_identity=frozenset(self.require_identity),
        )


def normalized_public_url(url: str) -> str:
    """``url`` without a trailing slash, once it is checked to be an http(s) base URL.

    Raises:
        ValueError: Not ``http://`` or ``https://``, no host, a malformed port, or a query,
            fragment or credentials (none of which a base URL can carry).
    """
    text = url.strip()
    if not _is_base_url(text):
        raise ValueError(
            f"public URL {url!r}: give the base URL clients use, e.g. "
            "https://search.example.com or https://example.com/search (http or https, a "
            "host, no query, fragment or credentials)"
        )
    return text.rstrip("/")


def _is_base_url(text: str) -> bool:
    try:
        parts = urlsplit(text)
        has_valid_port = parts.port is None or parts.port > 0  # a malformed port raises
    except ValueError:
        return False
    return (
        parts.scheme in ("http", "https")
        and bool(parts.hostname)
        and has_valid_port
        and not (parts.query or parts.fragment)
        and parts.username is None
    )
