"""Settings of the HTTP server: keys, limits, and where it listens."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentic_retrieval.server.auth import ApiKeys

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
        read_env_keys: Also read keys from ``$AGENTIC_RETRIEVAL_API_KEYS``.
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
        max_in_flight: Most requests handled at once; further ones get a 429. A request
            takes a slot only once its key is checked and its whole body has arrived.
        retry_after_seconds: The ``Retry-After`` value sent with a 429.
        host: The interface the server listens on; on loopback the MCP endpoint also
            rejects requests whose ``Host``/``Origin`` is not local (DNS-rebinding guard).
    """

    api_keys: list[str] = field(default_factory=list)
    query_keys: list[str] = field(default_factory=list)
    read_env_keys: bool = True
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    body_timeout_seconds: float = 30.0
    header_timeout_seconds: float = 10.0
    max_header_bytes: int = 64 * 1024
    max_in_flight: int = 64
    retry_after_seconds: int = 1
    host: str = "127.0.0.1"

    def __post_init__(self) -> None:
        """Reject limits that would make the server unusable."""
        if self.max_body_bytes < 1:
            raise ValueError("max_body_bytes must be at least 1")
        if self.max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        if self.body_timeout_seconds <= 0 or self.header_timeout_seconds <= 0:
            raise ValueError("body_timeout_seconds and header_timeout_seconds must be positive")
        if self.max_header_bytes < 1024:
            raise ValueError("max_header_bytes must be at least 1024")

    def keys(self) -> ApiKeys:
        """The keys in force: the configured ones plus the environment's."""
        keys = ApiKeys.from_env() if self.read_env_keys else ApiKeys()
        return keys.merged(ApiKeys(admin=tuple(self.api_keys), query=tuple(self.query_keys)))
