"""Azure AI Search index as a knowledge source (``kind: "searchIndex"``).

This is the scale-out path: the index lives in an Azure AI Search service, so the corpus can be
far larger than one machine. One query becomes one request
(``POST /indexes('{name}')/docs/search.post.search``) that combines, as configured:

- full-text search on the query text;
- a vector query (``VectorizableTextQuery``) on the configured vector fields, vectorized by the
  index's own vectorizer, which makes the request hybrid;
- the semantic ranker (``queryType: semantic`` with a semantic configuration), whose
  ``@search.rerankerScore`` (already on the 0-4 scale) is passed through as
  :attr:`Hit.reranker_score`, with extractive captions kept in the hit's metadata;
- the OData filter: the source's own ``source_filter`` ANDed with the query's filter.

Field names are configurable (key, title, content, metadata fields), so any existing index
works without re-indexing.

Document permissions (the query's identity), either or both of:

- ``pass_identity_token=True``: the caller's token (the one this service validated) is sent
  as ``x-ms-query-source-authorization: Bearer <token>``, and Azure trims results by the
  index's own permission fields (``permissionFilter``); the token must be one Azure accepts
  (audience ``https://search.azure.com``, e.g. from an on-behalf-of exchange);
- ``user_ids_field`` / ``group_ids_field``: a permission filter on those fields (collections
  of ids; ``all`` for public), built from the identity's ids with every quote escaped and
  ANDed, in its own parentheses, with the query's filter, which must parse on its own.

While permissions are enforced, a search that could apply neither (no such fields, and no
token to pass) fails with ``PermissionsNotEnforced`` instead of answering unfiltered.

Requires the ``[azure]`` extra (``pip install 'agentic-retrieval[azure]'``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentic_retrieval.errors import (
    AzureSourceConfigurationError,
    ErrorCode,
    FilterNotSupportedError,
    MissingDependencyError,
    PermissionsNotEnforceableError,
    SourceError,
    install_hint,
)
from agentic_retrieval.odata import ODataError, and_filters, parse_filter
from agentic_retrieval.permissions import ALL, Access
from agentic_retrieval.sources.base import Hit, SearchQuery, index_document_url

if TYPE_CHECKING:
    from azure.core.exceptions import HttpResponseError
    from azure.search.documents import SearchClient

logger = logging.getLogger(__name__)

_AZURE_EXTRA_HINT = f"the Azure AI Search source needs the [azure] extra: {install_hint('azure')}"

QUERY_SOURCE_AUTHORIZATION = "x-ms-query-source-authorization"
"""The header Azure reads the end user's token from, to trim results by permission."""

# HTTP status -> SourceError code. 429 and 503 reach this table only once the SDK's retry
# policy has given up.
_STATUS_CODES = {
    400: ErrorCode.INVALID_REQUEST,
    401: ErrorCode.UNAUTHORIZED,
    403: ErrorCode.FORBIDDEN,
    404: ErrorCode.INDEX_NOT_FOUND,
    408: ErrorCode.TIMEOUT,
    429: ErrorCode.THROTTLED,
    503: ErrorCode.THROTTLED,
}


def _import_search_client() -> type[SearchClient]:
    try:
        from azure.search.documents import SearchClient
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise MissingDependencyError(_AZURE_EXTRA_HINT) from exc
    return SearchClient


def resolve_credential(credential: Any) -> Any:
    """Turn the ``credential`` argument into an azure-core credential.

    Args:
        credential: An ``AzureKeyCredential``, any azure-core token credential (an object with
            ``get_token``), an admin/query key as a plain string, or ``None`` for
            ``DefaultAzureCredential`` (needs the ``azure-identity`` package).

    Returns:
        A credential the ``SearchClient`` accepts.

    Raises:
        MissingDependencyError: ``credential`` is ``None`` and azure-identity is not
            installed (an ``ImportError``).

    """
    if isinstance(credential, str):
        from azure.core.credentials import AzureKeyCredential

        return AzureKeyCredential(credential)
    if credential is not None:
        return credential
    try:
        from azure.identity import DefaultAzureCredential
    except ImportError as exc:
        raise MissingDependencyError(
            "no credential given and azure-identity is not installed: pass an "
            "AzureKeyCredential or install azure-identity for DefaultAzureCredential"
        ) from exc
    return DefaultAzureCredential()


def map_http_error(exc: HttpResponseError, *, index_name: str) -> SourceError:
    """Map an SDK HTTP error to a :class:`SourceError` that names no secret.

    The message is rebuilt from the status code and the service's own error message; request
    headers (where the api-key travels) are never part of it.

    Args:
        exc: The error the SDK raised.
        index_name: The index, named in the message.

    Returns:
        The error to raise from :meth:`AzureSearchKnowledgeSource.search`.

    """
    status = exc.status_code or 0
    code = _STATUS_CODES.get(status, ErrorCode.SERVICE_ERROR)
    service_message = ""
    odata_error = getattr(exc, "error", None)
    if odata_error is not None and getattr(odata_error, "message", None):
        service_message = f": {odata_error.message}"
    if status == 404:
        return SourceError(code, f"index '{index_name}' was not found (HTTP 404){service_message}")
    if code == ErrorCode.THROTTLED:
        return SourceError(
            code, f"index '{index_name}' is throttled (HTTP {status}), retries exhausted"
        )
    return SourceError(
        code, f"search on index '{index_name}' failed (HTTP {status}){service_message}"
    )


class AzureSearchKnowledgeSource:
    """Searches one Azure AI Search index.

    Event loops: the graph's synchronous ``invoke`` runs every node coroutine in a fresh event
    loop on a worker thread, so an ``aio`` client (whose connection pool belongs to the loop that
    created it) cannot be cached across calls. This source therefore holds one synchronous
    ``SearchClient`` (its ``requests`` transport is safe to share between threads) and runs each
    request through :func:`asyncio.to_thread`, so concurrent searches from any loop run in
    parallel and no loop-bound state outlives a call. A cancelled search (per-source timeout)
    stops waiting at once; the thread finishes its HTTP request within ``read_timeout``.

    Args:
        name: Source name (``knowledgeSourceName`` on the wire).
        endpoint: Service URL, e.g. ``https://<service>.search.windows.net``.
        index_name: The index to query.
        credential: ``AzureKeyCredential``, a token credential, a key string, or ``None`` for
            ``DefaultAzureCredential`` (azure-identity).
        description: What the index holds, for the planner's source selection.
        semantic_configuration: Name of the index's semantic configuration; when set, queries
            use the semantic ranker and hits carry ``reranker_score`` and captions.
        vector_fields: Vector fields searched with a ``VectorizableTextQuery`` (the index must
            define a vectorizer for them); empty for text-only search.
        key_field: The index's key field, used as :attr:`Hit.doc_key`.
        title_field: Field used as the hit title, or ``None`` when the index has none.
        content_field: Field used as the hit content.
        metadata_fields: Extra fields retrieved into :attr:`Hit.metadata` (``sourceData``).
        source_filter: An OData filter always ANDed with the query's filter.
        top: Upper bound on hits per query (the query's own ``top`` may be lower).
        captions: Ask for extractive captions when the semantic ranker runs.
        retry_total: Retries for 408/429/5xx responses (the SDK's ``RetryPolicy``, which honours
            ``Retry-After``).
        retry_backoff_factor: Exponential backoff factor in seconds between retries.
        retry_backoff_max: Cap on one backoff sleep, in seconds.
        connection_timeout: Seconds to wait for a connection.
        read_timeout: Seconds to wait for a response.
        validate: Fetch the index definition now and raise
            :class:`AzureSourceConfigurationError` if it is missing or lacks a configured field.
        client_kwargs: Further keyword arguments for ``SearchClient`` (``api_version``,
            ``audience``, ``connection_verify``, a custom ``transport``...).
        pass_identity_token: Send the caller's token as ``x-ms-query-source-authorization``
            so Azure trims results by the index's permission fields.
        user_ids_field: A ``Collection(Edm.String)`` field of allowed user ids: filter on it.
        group_ids_field: A ``Collection(Edm.String)`` field of allowed group ids: filter on it.

    """

    kind = "searchIndex"

    def __init__(
        self,
        name: str,
        *,
        endpoint: str,
        index_name: str,
        credential: Any,
        description: str = "",
        semantic_configuration: str | None = None,
        vector_fields: Sequence[str] = (),
        key_field: str = "id",
        title_field: str | None = "title",
        content_field: str = "content",
        metadata_fields: Sequence[str] = (),
        source_filter: str | None = None,
        top: int = 50,
        captions: bool = True,
        retry_total: int = 3,
        retry_backoff_factor: float = 0.8,
        retry_backoff_max: float = 60.0,
        connection_timeout: float = 10.0,
        read_timeout: float = 60.0,
        validate: bool = True,
        client_kwargs: Mapping[str, Any] | None = None,
        pass_identity_token: bool = False,
        user_ids_field: str | None = None,
        group_ids_field: str | None = None,
    ) -> None:
        self.name = name
        self.pass_identity_token = pass_identity_token
        self.permission_fields = {
            "user": user_ids_field,
            "group": group_ids_field,
        }
        self.description = description
        self.endpoint = endpoint
        self.index_name = index_name
        self.semantic_configuration = semantic_configuration
        self.vector_fields = tuple(vector_fields)
        self.key_field = key_field
        self.title_field = title_field
        self.content_field = content_field
        self.metadata_fields = tuple(metadata_fields)
        self.source_filter = source_filter
        self.top = top
        self.captions = captions
        self._credential = resolve_credential(credential)
        self._client_kwargs: dict[str, Any] = {
            "retry_total": retry_total,
            "retry_backoff_factor": retry_backoff_factor,
            "retry_backoff_max": retry_backoff_max,
            "connection_timeout": connection_timeout,
            "read_timeout": read_timeout,
            **dict(client_kwargs or {}),
        }
        search_client_cls = _import_search_client()
        self._client = search_client_cls(
            endpoint, index_name, self._credential, **self._client_kwargs
        )
        if validate:
            self.validate()

    @property
    def select(self) -> list[str]:
        """The fields requested from the index (key, title, content, metadata), in order."""
        fields = [self.key_field, self.title_field, self.content_field, *self.metadata_fields]
        return list(dict.fromkeys(f for f in fields if f))

    def validate(self) -> None:
        """Check that the index exists and defines every configured field.

        Raises:
            AzureSourceConfigurationError: The index is missing, or lacks a configured field
                or the semantic configuration.
            SourceError: Any other service error (authentication, throttling...).

        """
        from azure.core.exceptions import HttpResponseError
        from azure.search.documents.indexes import SearchIndexClient

        client = SearchIndexClient(self.endpoint, self._credential, **self._client_kwargs)
        try:
            index = client.get_index(self.index_name)
        except HttpResponseError as exc:
            error = map_http_error(exc, index_name=self.index_name)
            if exc.status_code == 404:
                raise AzureSourceConfigurationError(error.code, error.message) from exc
            raise error from exc
        finally:
            client.close()
        self._check_index_definition(index)

    @property
    def trims_by_permission(self) -> bool:
        """Whether searches are trimmed by permission (a token passed, or permission fields)."""
        return self.pass_identity_token or any(self.permission_fields.values())

    def _check_index_definition(self, index: Any) -> None:
        defined = {field.name for field in index.fields or []}
        wanted = (*self.select, *self.vector_fields, *filter(None, self.permission_fields.values()))
        missing = [f for f in wanted if f not in defined]
        if missing:
            raise AzureSourceConfigurationError(
                ErrorCode.FIELD_NOT_FOUND,
                f"index '{self.index_name}' has no field(s) {', '.join(missing)}",
            )
        if self.semantic_configuration:
            semantic = index.semantic_search
            names = {c.name for c in (semantic.configurations or [])} if semantic else set()
            if self.semantic_configuration not in names:
                raise AzureSourceConfigurationError(
                    ErrorCode.SEMANTIC_CONFIGURATION_NOT_FOUND,
                    f"index '{self.index_name}' has no semantic configuration "
                    f"'{self.semantic_configuration}'",
                )

    def citation_url(self, hit: Hit, *, endpoint: str | None, api_version: str) -> str | None:
        """The document's URL in the Azure index (``endpoint`` is this source's own)."""
        return index_document_url(
            self.endpoint, self.index_name, hit.doc_key, api_version, self.select
        )

    async def search(self, query: SearchQuery) -> list[Hit]:
        """Run ``query`` against the index; see the class docstring for the request shape.

        Raises:
            SourceError: ``Unauthorized``/``Forbidden`` (401/403), ``IndexNotFound`` (404),
                ``Throttled`` (429/503 after retries), ``InvalidRequest`` (400, e.g. a filter
                on a field that is not filterable), ``ServiceUnavailable`` (no connection).

        """
        return await asyncio.to_thread(self._search_sync, query)

    def search_arguments(self, query: SearchQuery) -> dict[str, Any]:
        """Return the keyword arguments passed to ``SearchClient.search`` for ``query``.

        Raises:
            PermissionsNotEnforceableError: Enforced permissions this search cannot apply.
            FilterNotSupportedError: A query filter that does not parse on its own while a
                permission filter is ANDed with it.
        """
        top = min(query.top, self.top)
        permission = self.permission_filter(query.access)
        token = self._token(query)
        if query.enforce_permissions and permission is None and token is None:
            raise PermissionsNotEnforceableError(
                f"knowledge source '{self.name}' has no permission fields and no token to "
                "pass to Azure for this caller"
            )
        if permission is not None and query.filter:
            try:
                parse_filter(query.filter)  # ANDed as text: it must stand on its own
            except ODataError as exc:
                raise FilterNotSupportedError(f"{self.name}: {exc}") from exc
        kwargs: dict[str, Any] = {
            "search_text": query.text,
            "filter": and_filters(permission, self.source_filter, query.filter),
            "select": self.select,
            "top": top,
        }
        if token is not None:
            kwargs["headers"] = {QUERY_SOURCE_AUTHORIZATION: f"Bearer {token}"}
        if self.vector_fields:
            from azure.search.documents.models import VectorizableTextQuery

            kwargs["vector_queries"] = [
                VectorizableTextQuery(
                    text=query.text,
                    k_nearest_neighbors=top,
                    fields=",".join(self.vector_fields),
                )
            ]
        if self.semantic_configuration:
            kwargs["query_type"] = "semantic"
            kwargs["semantic_configuration_name"] = self.semantic_configuration
            if self.captions:
                kwargs["query_caption"] = "extractive"
        return kwargs

    def permission_filter(self, access: Access) -> str | None:
        """The OData filter on the permission fields for ``access`` (``None``: no fields).

        Public documents (``all``) and documents naming one of the identity's ids; unless
        enforced, also documents without any permission value. Ids are quoted with every
        ``'`` doubled, so no id can end the string it is in.
        """
        identity = access.identity
        own = {
            "user": [identity.user_id] if identity and identity.user_id else [],
            "group": list(identity.groups) if identity else [],
        }
        matches, empty = [], []
        for kind, field in self.permission_fields.items():
            if field is None:
                continue
            ids = " or ".join(f"p eq {_quoted(i)}" for i in (ALL, *own[kind]))
            matches.append(f"{field}/any(p: {ids})")
            empty.append(f"not {field}/any()")
        if not matches:
            return None
        visible = " or ".join(matches)
        return visible if access.enforce else f"{visible} or ({' and '.join(empty)})"

    def _token(self, query: SearchQuery) -> str | None:
        if not self.pass_identity_token or query.identity is None:
            return None
        token = query.identity.token
        return token.get_secret_value() if token is not None else None

    def _search_sync(self, query: SearchQuery) -> list[Hit]:
        from azure.core.exceptions import (
            HttpResponseError,
            ServiceRequestError,
            ServiceResponseError,
        )

        kwargs = self.search_arguments(query)
        logger.debug("searching index %s with filter %r", self.index_name, query.filter)
        try:
            results = self._client.search(**kwargs)
            # The service pages after 1000 results; never fetch more than asked for.
            documents = list(itertools.islice(results, kwargs["top"]))
        except HttpResponseError as exc:
            raise map_http_error(exc, index_name=self.index_name) from exc
        except ServiceRequestError as exc:
            raise SourceError(
                ErrorCode.SERVICE_UNAVAILABLE,
                f"could not reach the search service for '{self.index_name}'",
            ) from exc
        except ServiceResponseError as exc:
            raise SourceError(
                ErrorCode.TIMEOUT,
                f"no complete response from the search service for '{self.index_name}'",
            ) from exc
        return [self._to_hit(document) for document in documents]

    def _to_hit(self, document: Mapping[str, Any]) -> Hit:
        metadata = {f: document[f] for f in self.metadata_fields if f in document}
        captions = _caption_texts(document.get("@search.captions"))
        if captions:
            metadata["captions"] = captions
        reranker_score = document.get("@search.reranker_score")
        if reranker_score is None:
            reranker_score = document.get("@search.rerankerScore")
        title = document.get(self.title_field) if self.title_field else None
        return Hit(
            doc_key=str(document[self.key_field]),
            content=_as_text(document.get(self.content_field)),
            title=None if title is None else str(title),
            source=self.name,
            score=float(document.get("@search.score") or 0.0),
            reranker_score=None if reranker_score is None else float(reranker_score),
            metadata=metadata,
        )

    def close(self) -> None:
        """Close the underlying HTTP session."""
        self._client.close()


def _quoted(value: str) -> str:
    """An OData string literal: ``'`` doubled inside, so the value cannot end it."""
    return "'" + value.replace("'", "''") + "'"


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, Iterable):
        return "\n".join(str(v) for v in value)
    return str(value)


def _caption_texts(captions: Any) -> list[str]:
    texts: list[str] = []
    for caption in captions or []:
        text = caption.get("text") if isinstance(caption, Mapping) else None
        if text is None:
            text = getattr(caption, "text", None)
        if text:
            texts.append(str(text))
    return texts
