"""A local REST stand-in for the Azure AI Search documents and index APIs.

Azure AI Search has no emulator, so the tests point the real ``azure-search-documents`` SDK at
this server on 127.0.0.1 and check what the SDK actually sends. It implements the documented
subset the knowledge source and the indexing helper use:

- ``POST /indexes('{name}')/docs/search.post.search`` (what SDK 12.0.0 sends) and the older
  ``POST /indexes/{name}/docs/search``: ``search`` (any-term matching, ``*`` for all),
  ``filter`` (evaluated with :mod:`agentic_retrieval.odata`), ``select``, ``top``,
  ``queryType: semantic`` + ``semanticConfiguration`` (a deterministic
  ``@search.rerankerScore`` = 4 x the fraction of distinct query terms found in the document,
  plus an extractive caption), ``vectorQueries`` (kind ``text``: fields checked and recorded);
- ``GET /indexes('{name}')``, ``POST /indexes``, ``PUT /indexes('{name}')``;
- ``POST /indexes('{name}')/docs/search.index`` (upload / mergeOrUpload / delete);
- ``api-key`` header or ``Authorization: Bearer`` authentication (401 otherwise);
- document-level permissions as Azure applies them: an index whose fields declare
  ``permissionFilter: userIds`` / ``groupIds`` returns only the documents the token in
  ``x-ms-query-source-authorization`` may see (its ``oid``/``sub`` and ``groups``, read from
  the token without verifying it: a stand-in), ``["all"]`` documents to everyone, and
  without the header only ``["all"]`` documents;
- failure injection (:meth:`AzureSearchStandIn.fail_next`) for 401, 403, 404, 429 and 503,
  with ``Retry-After`` headers.

Every request is recorded (method, path, query, body, the end-user token header; never the
key) in ``requests``.
HTTP only by default: the SDK's api-key policy does not insist on https. Pass an
``ssl_context`` to serve https (the bearer-token policy refuses plain http).
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from agentic_retrieval.odata import ODataError, evaluate_filter, parse_filter

_WORD = re.compile(r"\w+", re.UNICODE)
_INDEX_PATH = re.compile(r"^/indexes(?:\('(?P<quoted>[^']+)'\)|/(?P<plain>[^/]+))?(?P<rest>/.*)?$")


@dataclass
class RecordedRequest:
    """One request the stand-in received."""

    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    auth: str
    """``api-key``, ``bearer`` or ``none``; the secret itself is not kept."""
    query_source_authorization: str | None = None
    """The ``x-ms-query-source-authorization`` header as received (the end user's token)."""


@dataclass
class _Failure:
    status: int
    headers: dict[str, str]
    code: str
    message: str


@dataclass
class StandInIndex:
    """An index held by the stand-in: its definition (REST JSON) and its documents."""

    definition: dict[str, Any]
    documents: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def key_field(self) -> str:
        return next(f["name"] for f in self.definition["fields"] if f.get("key"))

    @property
    def field_names(self) -> set[str]:
        return {f["name"] for f in self.definition["fields"]}

    @property
    def searchable_fields(self) -> list[str]:
        return [
            f["name"]
            for f in self.definition["fields"]
            if f.get("searchable", f.get("type") == "Edm.String") and f.get("type") == "Edm.String"
        ]

    def permission_field(self, kind: str) -> str | None:
        """The field declared ``permissionFilter: kind`` (``userIds``/``groupIds``)."""
        if self.definition.get("permissionFilterOption") == "disabled":
            return None
        return next(
            (f["name"] for f in self.definition["fields"] if f.get("permissionFilter") == kind),
            None,
        )

    @property
    def semantic_configurations(self) -> set[str]:
        semantic = self.definition.get("semantic") or {}
        return {c["name"] for c in semantic.get("configurations") or []}


def index_definition(
    name: str,
    *,
    key: str = "id",
    text_fields: Iterable[str] = ("title", "content"),
    filterable: Mapping[str, str] | None = None,
    vector_fields: Iterable[str] = (),
    semantic_configuration: str | None = None,
) -> dict[str, Any]:
    """Build a REST index definition for the stand-in.

    Args:
        name: Index name.
        key: Key field (``Edm.String``).
        text_fields: Searchable string fields.
        filterable: Extra filterable fields, name -> EDM type.
        vector_fields: ``Collection(Edm.Single)`` fields.
        semantic_configuration: Name of a semantic configuration to declare.
    """
    fields: list[dict[str, Any]] = [
        {"name": key, "type": "Edm.String", "key": True, "filterable": True, "searchable": False}
    ]
    fields += [{"name": f, "type": "Edm.String", "searchable": True} for f in text_fields]
    fields += [
        {"name": f, "type": t, "filterable": True, "searchable": False}
        for f, t in (filterable or {}).items()
    ]
    fields += [
        {"name": f, "type": "Collection(Edm.Single)", "dimensions": 3, "searchable": True}
        for f in vector_fields
    ]
    definition: dict[str, Any] = {"name": name, "fields": fields}
    if semantic_configuration:
        definition["semantic"] = {
            "configurations": [
                {
                    "name": semantic_configuration,
                    "prioritizedFields": {"prioritizedContentFields": [{"fieldName": "content"}]},
                }
            ]
        }
    return definition


def _terms(text: str) -> list[str]:
    return [t.lower() for t in _WORD.findall(text)]


def _claims(header: str | None) -> dict[str, Any] | None:
    """The claims of the token in the header (not verified: Azure's side of the check)."""
    if not header:
        return None
    token = header.removeprefix("Bearer ").strip()
    try:
        payload = token.split(".")[1]
        return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        return {}


def _permitted(index: StandInIndex, document: Mapping[str, Any], claims: Any) -> bool:
    users, groups = index.permission_field("userIds"), index.permission_field("groupIds")
    if users is None and groups is None:
        return True
    allowed_users = set(document.get(users) or []) if users else set()
    allowed_groups = set(document.get(groups) or []) if groups else set()
    if "all" in allowed_users | allowed_groups:
        return True
    if not claims:
        return False
    user = claims.get("oid") or claims.get("sub")
    return user in allowed_users or bool(allowed_groups & set(claims.get("groups") or []))


class AzureSearchStandIn:
    """The stand-in server; use as a context manager or call :meth:`start`/:meth:`stop`.

    Args:
        api_key: The key clients must send in the ``api-key`` header.
        bearer_token: A token accepted in ``Authorization: Bearer``.
        ssl_context: Serve https with this context.
    """

    def __init__(
        self,
        api_key: str = "standin-admin-key",
        *,
        bearer_token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.api_key = api_key
        self.bearer_token = bearer_token
        self.indexes: dict[str, StandInIndex] = {}
        self.requests: list[RecordedRequest] = []
        self._failures: deque[_Failure] = deque()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        scheme = "http"
        if ssl_context is not None:
            self._server.socket = ssl_context.wrap_socket(self._server.socket, server_side=True)
            scheme = "https"
        host, port = self._server.server_address[:2]
        self.endpoint = f"{scheme}://{host}:{port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> AzureSearchStandIn:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> AzureSearchStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---------------------------------------------------------------- test controls

    def add_index(
        self, definition: dict[str, Any], documents: Iterable[Mapping[str, Any]] = ()
    ) -> StandInIndex:
        index = StandInIndex(definition=definition)
        for document in documents:
            index.documents[str(document[index.key_field])] = dict(document)
        self.indexes[definition["name"]] = index
        return index

    def fail_next(
        self,
        status: int,
        *,
        count: int = 1,
        headers: Mapping[str, str] | None = None,
        code: str = "",
        message: str = "",
    ) -> None:
        """Answer the next ``count`` requests with ``status`` (after recording them)."""
        for _ in range(count):
            self._failures.append(
                _Failure(status, dict(headers or {}), code or f"Http{status}", message)
            )

    def search_requests(self) -> list[RecordedRequest]:
        """The recorded search requests (either URL form), oldest first."""
        return [r for r in self.requests if r.path.endswith(("search.post.search", "/search"))]

    # ---------------------------------------------------------------- request handling

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                standin._dispatch(self, "GET")

            def do_POST(self) -> None:
                standin._dispatch(self, "POST")

            def do_PUT(self) -> None:
                standin._dispatch(self, "PUT")

        return Handler

    def _dispatch(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        url = urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        auth = self._auth_kind(handler)
        path = unquote(url.path)
        user_token = handler.headers.get("x-ms-query-source-authorization")
        recorded = RecordedRequest(method, path, parse_qs(url.query), body, auth, user_token)
        with self._lock:
            self.requests.append(recorded)
            failure = self._failures.popleft() if self._failures else None
        if failure is not None:
            self._send_error(
                handler,
                failure.status,
                failure.code,
                failure.message or "injected failure",
                failure.headers,
            )
            return
        if auth == "none":
            self._send_error(handler, 401, "Unauthorized", "Access denied due to invalid key.")
            return
        status, payload = self._route(method, path, body, user_token)
        if status >= 400:
            self._send_error(handler, status, payload["code"], payload["message"])
        else:
            self._send_json(handler, status, payload)

    def _auth_kind(self, handler: BaseHTTPRequestHandler) -> str:
        if handler.headers.get("api-key") == self.api_key:
            return "api-key"
        authorization = handler.headers.get("Authorization") or ""
        if self.bearer_token and authorization == f"Bearer {self.bearer_token}":
            return "bearer"
        return "none"

    def _route(
        self, method: str, path: str, body: Any, user_token: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        match = _INDEX_PATH.match(path)
        if match is None:
            return 404, {"code": "NotFound", "message": f"no route for {path}"}
        name = match.group("quoted") or match.group("plain")
        rest = match.group("rest") or ""
        if name is None:
            if method == "POST":
                return self._create_index(body, created_status=201)
            return 404, {"code": "NotFound", "message": "listing indexes is not implemented"}
        if rest == "" and method == "PUT":
            return self._create_index(body, created_status=201)
        index = self.indexes.get(name)
        if index is None:
            return 404, {"code": "ResourceNotFound", "message": f"No index with the name '{name}'"}
        if rest == "" and method == "GET":
            return 200, index.definition
        if method == "POST" and rest in ("/docs/search.post.search", "/docs/search"):
            return self._search(index, body or {}, _claims(user_token))
        if method == "POST" and rest == "/docs/search.index":
            return self._index_documents(index, body or {})
        return 404, {"code": "NotFound", "message": f"no route for {method} {path}"}

    def _create_index(self, body: Any, *, created_status: int) -> tuple[int, dict[str, Any]]:
        existing = self.indexes.get(body["name"])
        if existing is not None:
            existing.definition = body
            return 200, body
        self.add_index(body)
        return created_status, body

    def _index_documents(self, index: StandInIndex, body: dict[str, Any]) -> tuple[int, Any]:
        results = []
        for action in body.get("value", []):
            document = {k: v for k, v in action.items() if k != "@search.action"}
            key = str(document[index.key_field])
            kind = action.get("@search.action", "upload")
            if kind == "delete":
                index.documents.pop(key, None)
            elif kind in ("merge", "mergeOrUpload"):
                index.documents.setdefault(key, {}).update(document)
            else:
                index.documents[key] = document
            results.append({"key": key, "status": True, "statusCode": 201})
        return 200, {"value": results}

    def _search(
        self, index: StandInIndex, body: dict[str, Any], claims: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        select = body.get("select")
        selected = select.split(",") if select else sorted(index.field_names)
        unknown = [f for f in selected if f not in index.field_names]
        if unknown:
            return 400, {
                "code": "InvalidRequestParameter",
                "message": f"Invalid expression: Could not find a property named '{unknown[0]}'",
            }
        for vector_query in body.get("vectorQueries") or []:
            if vector_query.get("kind") != "text":
                return 400, {
                    "code": "InvalidRequestParameter",
                    "message": "only text vector queries are supported",
                }
            for name in (vector_query.get("fields") or "").split(","):
                if name not in index.field_names:
                    return 400, {
                        "code": "InvalidRequestParameter",
                        "message": f"Unknown vector field '{name}'",
                    }
        semantic = body.get("queryType") == "semantic"
        if semantic and body.get("semanticConfiguration") not in index.semantic_configurations:
            return 400, {
                "code": "InvalidRequestParameter",
                "message": "Unknown semantic configuration",
            }
        try:
            predicate = parse_filter(body["filter"]) if body.get("filter") else None
        except ODataError as exc:
            return 400, {"code": "InvalidRequestParameter", "message": str(exc)}
        scored = self._score(index, body.get("search") or "*", semantic)
        if predicate is not None:
            scored = [s for s in scored if evaluate_filter(predicate, s[2])]
        scored = [s for s in scored if _permitted(index, s[2], claims)]
        top = int(body.get("top") or 50)
        values = []
        for score, reranker, document, caption in scored[:top]:
            value = {f: document.get(f) for f in selected}
            value["@search.score"] = score
            if semantic:
                value["@search.rerankerScore"] = reranker
                if body.get("captions", "").startswith("extractive") and caption:
                    value["@search.captions"] = [{"text": caption, "highlights": ""}]
            values.append(value)
        return 200, {"value": values}

    def _score(
        self, index: StandInIndex, search: str, semantic: bool
    ) -> list[tuple[float, float, dict[str, Any], str | None]]:
        query_terms = set(_terms(search)) if search.strip() != "*" else set()
        scored = []
        for key in sorted(index.documents):
            document = index.documents[key]
            text = " ".join(str(document.get(f) or "") for f in index.searchable_fields)
            doc_terms = _terms(text)
            if query_terms:
                score = float(sum(1 for t in doc_terms if t in query_terms))
                if score == 0:
                    continue
                matched = query_terms & set(doc_terms)
                reranker = round(4.0 * len(matched) / len(query_terms), 4)
            else:
                score, reranker = 1.0, 0.0
            caption = self._caption(text, query_terms)
            scored.append((score, reranker, document, caption))
        key_of = index.key_field
        if semantic:
            scored.sort(key=lambda s: (-s[1], -s[0], str(s[2][key_of])))
        else:
            scored.sort(key=lambda s: (-s[0], str(s[2][key_of])))
        return scored

    @staticmethod
    def _caption(text: str, query_terms: set[str]) -> str | None:
        for sentence in re.split(r"(?<=[.!?])\s+", text):
            if query_terms & set(_terms(sentence)):
                return sentence.strip()
        return None

    # ---------------------------------------------------------------- responses

    @staticmethod
    def _send_json(
        handler: BaseHTTPRequestHandler,
        status: int,
        payload: Any,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        data = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json; charset=utf-8")
        handler.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(data)

    def _send_error(
        self,
        handler: BaseHTTPRequestHandler,
        status: int,
        code: str,
        message: str,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self._send_json(handler, status, {"error": {"code": code, "message": message}}, headers)
