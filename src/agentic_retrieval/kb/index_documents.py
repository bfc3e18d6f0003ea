"""The documents of an index, as Azure's document APIs see them, over a :class:`DocumentStore`.

- :meth:`IndexDocuments.apply`: a ``docs/index`` batch (``upload``, ``merge``,
  ``mergeOrUpload``, ``delete``). The whole batch is validated first (shape, key present,
  known fields, value types, and Azure's bounds: a filterable string value of at most
  :data:`MAX_FILTERABLE_BYTES`, a collection of at most :data:`MAX_COLLECTION_ITEMS` values):
  a bad batch is a 400 naming the document and field, and changes nothing. Then each action is
  applied on its own, all-or-nothing per document, with a per-document status (201 created,
  200 updated or deleted, 404 merge of a missing document, 400 an invalid key).
- :meth:`IndexDocuments.lookup`, :meth:`count` and :meth:`search` (``search``, ``filter``,
  ``top``, ``skip``, ``select``, ``count``, a raw ``vector`` query).

A document's text is its searchable fields (the semantic configuration's title field as the
title, the other searchable fields as the content); its filterable fields are stored once
with the document (not with each chunk) and are what OData filters read. Every searchable
field is searched, a hidden one too (not retrievable, or a permission field: as in Azure);
what a caller reads back is its readable fields only
(:meth:`~agentic_retrieval.kb.definitions.IndexDefinition.readable_fields`): ``docs/search``
and lookups select among them, and a retrieve's passages, titles and ``sourceData`` are
built from them by :meth:`IndexDocuments.view`.

Permissions: the fields an index marks ``permissionFilter: userIds`` / ``groupIds`` hold the
ids allowed to see a document (``["all"]``: everyone; missing or empty: nobody, as in
Azure). They become the document's permissions in the store, not chunk metadata: reads take
the caller's :class:`~agentic_retrieval.permissions.Access`, a lookup of a document the caller
may not see is a 404, and only an elevated (admin) caller reads the permission fields back.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agentic_retrieval.errors import InvalidRequestError, TooLargeError
from agentic_retrieval.kb.definitions import MAX_KEY_CHARS, IndexDefinition, IndexField
from agentic_retrieval.kb.topic_profiles import topic_graph_default
from agentic_retrieval.odata import (
    Expr,
    ODataError,
    check_fields,
    filter_field_names,
    parse_filter,
)
from agentic_retrieval.permissions import Access, Permissions, permission_field_filter_message
from agentic_retrieval.sources.local.documents import DocumentStore
from agentic_retrieval.sources.local.loaders import Section
from agentic_retrieval.sources.local.passages import DocumentView, field_text
from agentic_retrieval.sources.topic_graph import TopicGraphSetting

MAX_BATCH_ACTIONS = 1000
"""Most actions in one ``docs/index`` request (Azure's limit)."""
MAX_FILTERABLE_BYTES = 32_766
"""Longest value (UTF-8 bytes) of a filterable string, or of one element of a filterable
string collection: Azure indexes such a value as one term and refuses longer ones (its
error: "the max length for UTF-8 encoded terms is 32766 bytes"). Long text belongs in a
searchable field that is not filterable, which has no such limit."""
MAX_COLLECTION_ITEMS = 3_000
"""Most values in one collection field of one document. Azure documents 3,000 as its bound on
the elements of a document's complex collections (``maxComplexObjectsInCollectionsPerDocument``)
and bounds simple collections only by the 16 MB request; here every collection is bounded
by the same 3,000, so a filter over a collection costs at most that per document."""
MAX_BATCH_VALUES = 300_000
"""Most collection values in one ``docs/index`` batch (all its documents' collections).

Azure bounds a batch by its 16 MB and 1,000 actions only; here, every value of a searchable
collection is also text, chunked, and every chunk of a document carries its filterable
values in the lexical index, so a batch's cost grows with values x chunks: 450 documents of
3,000 values (15 MB) took a minute of one core (issue 27). 300,000 values (100 such
documents) is a few seconds of work; a bigger batch is a 413 that says to split it."""
HEAVY_BATCH_VALUES = 30_000
"""A batch with at least this many collection values is heavy: one process applies one
heavy batch at a time (another meanwhile is a 503 with ``Retry-After``), so bulk loads take
turns instead of sharing the cores that queries need."""
DEFAULT_PAGE = 50
"""Results per page when a search does not set ``top`` (Azure's default)."""
MAX_TOP = 1000
MAX_SKIP = 100_000
"""Most search results ``skip`` may pass over (Azure's limit)."""
_SURELY_A_TERM = MAX_FILTERABLE_BYTES // 4
"""At most 4 UTF-8 bytes per character: a string this long is surely within the limit."""
ACTIONS = ("upload", "merge", "mergeOrUpload", "delete")
_KEY = re.compile(rf"[A-Za-z0-9_\-=]{{1,{MAX_KEY_CHARS}}}\Z")
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True, slots=True)
class IndexingResult:
    """The outcome of one action (``IndexingResult``)."""

    key: str
    status_code: int
    error_message: str | None = None

    @property
    def succeeded(self) -> bool:
        """Whether the action was applied."""
        return self.status_code < 300

    def to_wire(self) -> dict[str, Any]:
        """``{"key", "status", "errorMessage", "statusCode"}``."""
        return {
            "key": self.key,
            "status": self.succeeded,
            "errorMessage": self.error_message,
            "statusCode": self.status_code,
        }


@dataclass(frozen=True, slots=True)
class SearchParameters:
    """A document search (the subset of ``SearchRequest`` this service runs)."""

    search: str = "*"
    filter: str | None = None
    top: int | None = None
    skip: int = 0
    select: tuple[str, ...] | None = None
    count: bool = False
    vector: tuple[float, ...] | None = None
    topic_graph: TopicGraphSetting | None = None
    """The vector query's ``topicGraph`` (over the index's topic graph profile)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """The request's other (accepted, unused) parameters, echoed in the next page's."""


class IndexDocuments:
    """The documents of one index.

    Args:
        index: The index definition.
        documents: Its store.
    """

    def __init__(self, index: IndexDefinition, documents: DocumentStore) -> None:
        self.index = index
        self.documents = documents
        self.key_name = index.key_field.name
        self._fields = {f.name: f for f in index.fields}
        self._title = index.title_field()
        self._permission_fields = index.permission_fields
        self._hidden = {f.name for f in index.fields if f.permission_filter}
        """Permission fields: never chunk metadata, read back by elevated callers only."""

    # --- writes -----------------------------------------------------------------------------

    def validate_batch(self, actions: Any) -> list[tuple[str, dict[str, Any]]]:
        """Check a whole batch; return ``(action, document)`` pairs with typed values.

        Raises:
            TooLargeError: More than :data:`MAX_BATCH_ACTIONS` actions.
            InvalidRequestError: The batch or a document is malformed (naming which).
        """
        if not isinstance(actions, list) or not actions:
            raise InvalidRequestError("value: send a non-empty list of index actions")
        if len(actions) > MAX_BATCH_ACTIONS:
            raise TooLargeError(
                f"value: {len(actions)} actions in one batch; at most {MAX_BATCH_ACTIONS} are "
                "allowed (split the batch)"
            )
        batch = [self._validate_action(n, action) for n, action in enumerate(actions)]
        values = self.collection_values(batch)
        if values > MAX_BATCH_VALUES:
            raise TooLargeError(
                f"value: {values} collection values in one batch; at most {MAX_BATCH_VALUES} "
                "are allowed (split the batch into smaller ones)"
            )
        return batch

    def collection_values(self, batch: Sequence[tuple[str, dict[str, Any]]]) -> int:
        """How many collection values (vectors aside) a validated batch holds."""
        collections = [
            f.name
            for f in self.index.fields
            if f.type.startswith("Collection(") and not f.is_vector
        ]
        return sum(len(document.get(name) or ()) for _, document in batch for name in collections)

    def apply(self, batch: Sequence[tuple[str, dict[str, Any]]]) -> list[IndexingResult]:
        """Apply a validated batch in order, each document all-or-nothing, in one commit."""
        with self.documents.store.transaction():
            return [self._apply_one(action, document) for action, document in batch]

    def _validate_action(self, position: int, raw: Any) -> tuple[str, dict[str, Any]]:
        where = f"value[{position}]"
        if not isinstance(raw, dict):
            raise InvalidRequestError(f"{where}: an index action must be a JSON object")
        action = raw.get("@search.action", "upload")
        if action not in ACTIONS:
            raise InvalidRequestError(
                f"{where}.@search.action: {action!r} is not one of {', '.join(ACTIONS)}"
            )
        key = raw.get(self.key_name)
        if not isinstance(key, str) or not key:
            raise InvalidRequestError(
                f"{where}: the document has no key: its key field {self.key_name!r} is "
                "missing or empty"
            )
        document: dict[str, Any] = {}
        for name, value in raw.items():
            if name.startswith("@"):
                continue
            spec = self._fields.get(name)
            if spec is None:
                raise InvalidRequestError(
                    f"{where}.{name}: the index {self.index.name!r} has no field {name!r}"
                )
            if action != "delete":
                document[name] = _coerce(spec, value, f"{where}.{name}")
        document[self.key_name] = key
        return action, document

    def _apply_one(self, action: str, document: dict[str, Any]) -> IndexingResult:
        key = document[self.key_name]
        if not _KEY.match(key):
            return IndexingResult(
                key,
                400,
                f"Invalid document key: {key!r}. Keys can only contain letters, digits, "
                "underscore (_), dash (-), or equal sign (=).",
            )
        if action == "delete":
            self.documents.delete(key)
            return IndexingResult(key, 200)
        existing = self.documents.get(key)
        if action == "merge" and existing is None:
            return IndexingResult(key, 404, "Document not found.")
        if action in ("merge", "mergeOrUpload") and existing is not None:
            document = {**existing, **document}
        self._put(key, document)
        return IndexingResult(key, 201 if existing is None else 200)

    def _put(self, key: str, document: dict[str, Any]) -> None:
        title = document.get(self._title) if self._title else None
        texts = [
            field_text(document.get(spec.name))
            for spec in self.index.fields
            if spec.is_searchable and spec.name != self._title
        ]
        content = "\n\n".join(text for text in texts if text)
        vector_field = self.index.vector_field
        vector = document.get(vector_field.name) if vector_field else None
        self.documents.put(
            key,
            stored=document,
            title=title if isinstance(title, str) else "",
            sections=[Section(content)] if content else [],
            fields={
                spec.name: document.get(spec.name)
                for spec in self.index.fields
                if spec.is_filterable and spec.name not in self._hidden
            },
            vector=vector,
            permissions=self._permissions_of(document),
        )

    def _permissions_of(self, document: dict[str, Any]) -> Permissions | None:
        """The document's permissions from its permission fields (``None``: none apply)."""
        if not self._permission_fields:
            return None
        users = self._permission_fields.get("userIds")
        groups = self._permission_fields.get("groupIds")
        return Permissions.from_lists(
            document.get(users) or [] if users else [],
            document.get(groups) or [] if groups else [],
        )

    # --- reads ------------------------------------------------------------------------------

    def lookup(
        self, key: str, select: Sequence[str] | None = None, *, access: Access
    ) -> dict[str, Any] | None:
        """The document with ``key`` (its retrievable or selected fields), if any.

        A document ``access`` may not see is reported absent: its existence is not revealed.
        """
        names = self._selected(select, access)
        with self.documents.store.lease():  # a delete meanwhile waits for both reads
            document = self.documents.get(key, names)
            if document is None or not access.may_see(self.documents.permissions(key)):
                return None
        return _project(document, names)

    def count(self) -> int:
        """How many documents the index holds."""
        return self.documents.count()

    def count_visible(self, access: Access) -> int:
        """How many documents ``access`` may see."""
        if access.elevated:
            return self.documents.count()
        return self.documents.count_matches("*", access=access)

    def search(self, params: SearchParameters, *, access: Access) -> dict[str, Any]:
        """Run a search for the caller ``access``; return the response body.

        The store stays open until the body is built (a delete meanwhile waits for it).

        Raises:
            InvalidRequestError: A bad filter, an unknown or non-filterable field, an
                unknown or non-retrievable selected field, a vector of the wrong size.
            PermissionsNotEnforceableError: ``access`` enforces permissions and the index
                has none.
            StoreClosedError: The index was deleted before the search began.
        """
        with self.documents.store.lease():
            return self._search(params, access)

    def _search(self, params: SearchParameters, access: Access) -> dict[str, Any]:
        names = self._selected(params.select, access)
        expr = self._filter(params.filter)
        vector = self._query_vector(params.vector)
        page = params.top if params.top is not None else DEFAULT_PAGE
        if not 0 <= page <= MAX_TOP or not 0 <= params.skip <= MAX_SKIP:
            raise InvalidRequestError(f"top must be 0-{MAX_TOP} and skip 0-{MAX_SKIP}")
        hits = self.documents.search(
            params.search or "*",
            top=page + (1 if params.top is None else 0),
            skip=params.skip,
            filter_expr=expr,
            vector=vector,
            access=access,
            topic_graph=self._topic_graph(params) if vector is not None else None,
        )
        more = params.top is None and len(hits) > page
        body: dict[str, Any] = {}
        if params.count:
            body["@odata.count"] = self.documents.count_matches(
                params.search or "*", expr, access=access
            )
        browse = (params.search or "*").strip() in ("", "*") and vector is None
        body["value"] = [
            {
                "@search.score": 1.0 if browse else hit.score,
                # one read per document, of the selected fields only
                **_project(self.documents.get(hit.key, names) or {}, names),
            }
            for hit in hits[:page]
        ]
        if more:
            body["@search.nextPageParameters"] = {
                **params.extra,
                "search": params.search,
                "filter": params.filter,
                "select": ",".join(params.select) if params.select else None,
                "count": params.count or None,
                "skip": params.skip + page,
            }
        return body

    def view(self, source_data_fields: Sequence[str] | None = None) -> DocumentView:
        """What a retrieve returns of these documents: readable fields only, for any caller.

        Args:
            source_data_fields: The ``sourceData`` fields a knowledge source chose (those a
                caller may not read are left out); ``None``: every readable field but vectors.
        """
        readable = {f.name for f in self.index.readable_fields()}
        title = self._title if self._title in readable else None
        if source_data_fields is None:
            chosen = [f.name for f in self.index.readable_fields() if not f.is_vector]
        else:
            chosen = [name for name in source_data_fields if name in readable]
        searchable = [f.name for f in self.index.fields if f.is_searchable]
        return DocumentView(
            title_field=title,
            text_fields=tuple(n for n in searchable if n in readable and n != self._title),
            source_data_fields=tuple(chosen),
            chunks_may_hide=any(name not in readable for name in searchable),
            chunk_size=self.documents.chunk_size,
            overlap=self.documents.overlap,
        )

    def _selected(self, select: Sequence[str] | None, access: Access) -> list[str]:
        readable = [f.name for f in self.index.readable_fields(elevated=access.elevated)]
        if not select or list(select) == ["*"]:
            return readable
        for name in select:
            if name not in self._fields:
                raise InvalidRequestError(f"select: the index has no field {name!r}")
            if name not in readable:
                raise InvalidRequestError(f"select: field {name!r} is not retrievable")
        return list(select)

    def _filter(self, text: str | None) -> Expr | None:
        if not text or not text.strip():
            return None
        try:
            expr = parse_filter(text)
        except ODataError as exc:
            raise InvalidRequestError(f"filter: {exc}") from exc
        for name in sorted(filter_field_names(expr)):
            spec = self._fields.get(name)
            if spec is None:
                raise InvalidRequestError(f"filter: the index has no field {name!r}")
            if not spec.is_filterable:
                raise InvalidRequestError(f"filter: field {name!r} is not filterable")
            if name in self._hidden:
                raise InvalidRequestError(f"filter: {permission_field_filter_message(name)}")
        try:  # kinds of value, as a retrieve's filterAddOn is checked
            check_fields(expr, self.index.filter_schema())
        except ODataError as exc:
            raise InvalidRequestError(f"filter: {exc}") from exc
        return expr

    def _topic_graph(self, params: SearchParameters) -> TopicGraphSetting | None:
        """How a vector query samples topics: its own setting over the index's profile."""
        default = topic_graph_default(self.index.vector_search)
        return params.topic_graph.over(default) if params.topic_graph else default

    def _query_vector(self, vector: Sequence[float] | None) -> list[float] | None:
        if vector is None:
            return None
        spec = self.index.vector_field
        if spec is None:
            raise InvalidRequestError("vectorQueries: the index has no vector field")
        if len(vector) != spec.dimensions:
            raise InvalidRequestError(
                f"vectorQueries: the vector has {len(vector)} dimensions; field "
                f"{spec.name!r} has {spec.dimensions}"
            )
        return _vector_values(spec, vector, "vectorQueries[0].vector")


def _vector_values(spec: IndexField, values: Sequence[float], where: str) -> list[float]:
    """``values`` as floats, once each is finite and within what the field holds.

    A value beyond it would be stored (or compared) as infinity, and every response
    including it would then fail.
    """
    limit = spec.vector_value_limit
    if not all(abs(v) <= limit for v in values):  # also false for NaN
        raise InvalidRequestError(
            f"{where}: vector values must be finite numbers within ±{limit:g} ({spec.type})"
        )
    return [float(v) for v in values]


def _project(document: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    return {name: document.get(name) for name in names}


def _coerce(spec: IndexField, value: Any, where: str) -> Any:
    """``value`` checked against the field's type (``None`` is always allowed)."""
    if value is None:
        return None
    if spec.is_vector:
        if not isinstance(value, list) or not all(_is_number(v) for v in value):
            raise InvalidRequestError(f"{where}: a vector field takes a list of numbers")
        if len(value) != spec.dimensions:
            raise InvalidRequestError(
                f"{where}: the vector has {len(value)} dimensions; the field has {spec.dimensions}"
            )
        return _vector_values(spec, value, where)
    if spec.type.startswith("Collection("):
        if not isinstance(value, list):
            raise InvalidRequestError(f"{where}: {spec.type} takes a JSON array")
        if len(value) > MAX_COLLECTION_ITEMS:
            raise InvalidRequestError(
                f"{where}: {len(value)} values; a collection field holds at most "
                f"{MAX_COLLECTION_ITEMS} per document"
            )
        element = spec.type[len("Collection(") : -1]
        valid = _VALIDATORS[element]
        for n, item in enumerate(value):  # a message is built only for the value refused
            if item is not None and not valid(item):
                _coerce_simple(element, item, f"{where}[{n}]")
            if spec.is_filterable and isinstance(item, str) and len(item) > _SURELY_A_TERM:
                _check_term(item, f"{where}[{n}]")
        return list(value)
    coerced = _coerce_simple(spec.type, value, where)
    if spec.is_filterable:
        _check_term(coerced, where)
    return coerced


def _check_term(value: Any, where: str) -> None:
    """Refuse a filterable string longer than :data:`MAX_FILTERABLE_BYTES` (UTF-8)."""
    if not isinstance(value, str) or len(value) <= _SURELY_A_TERM:
        return  # at most 4 bytes per character: surely within the limit
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_FILTERABLE_BYTES:
        raise InvalidRequestError(
            f"{where}: {size} bytes in one value of a filterable field; at most "
            f"{MAX_FILTERABLE_BYTES} are allowed (Azure's limit for one filterable term). "
            'To index long text, make the field searchable and not filterable ("filterable": '
            "false), or shorten the value"
        )


def _coerce_simple(edm_type: str, value: Any, where: str) -> Any:
    if value is None or _VALIDATORS[edm_type](value):
        return value
    raise InvalidRequestError(f"{where}: {value!r} is not a valid {edm_type} value")


def _is_point(value: Any) -> bool:
    """GeoJSON ``{"type": "Point", "coordinates": [longitude, latitude]}`` on the globe."""
    if not isinstance(value, dict) or value.get("type") != "Point":
        return False
    coordinates = value.get("coordinates")
    if not isinstance(coordinates, list) or len(coordinates) != 2:
        return False
    longitude, latitude = coordinates
    return (
        _is_number(longitude)
        and _is_number(latitude)
        and abs(longitude) <= 180
        and abs(latitude) <= 90
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_int(value: Any, bounds: tuple[int, int]) -> bool:
    return (
        isinstance(value, int) and not isinstance(value, bool) and bounds[0] <= value <= bounds[1]
    )


def _is_datetime(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return parsed.tzinfo is not None


_VALIDATORS: dict[str, Callable[[Any], bool]] = {
    "Edm.String": lambda v: isinstance(v, str),
    "Edm.Int32": lambda v: _is_int(v, _INT32),
    "Edm.Int64": lambda v: _is_int(v, _INT64),
    # (an integer beyond a double's range is no Edm.Double)
    "Edm.Double": lambda v: (
        (_is_number(v) and abs(v) <= sys.float_info.max) or v in ("NaN", "INF", "-INF")
    ),
    "Edm.Boolean": lambda v: isinstance(v, bool),
    "Edm.DateTimeOffset": _is_datetime,
    "Edm.GeographyPoint": _is_point,
}
"""Whether a value is one of each simple type (built once: it is checked per value)."""
