"""Errors a caller can act on. The HTTP layer maps them to status codes."""

from __future__ import annotations


class InvalidRequestError(ValueError):
    """The request is malformed or inconsistent (HTTP 400). The message names the field."""


class UnknownKnowledgeSourceError(InvalidRequestError, LookupError):
    """The request names a knowledge source the knowledge base does not have (HTTP 404)."""
