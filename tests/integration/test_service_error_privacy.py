"""Every error a caller of ``serve --data`` can reach speaks the request's terms, never ours.

The README promises no internal text in bodies. A hostile probe found store file names (with
their random tokens) and ``index``'s command-line flags in what query keys were told. This
sweep drives every route, in both path forms, as an admin key, a query key and a query key
with an identity token, with malformed, mistyped and hostile requests, plus the paths known
to fail deep inside (enforced permissions over indexes and file sources without any, file
conversion, the MCP tool, a bug), and checks every body, errors and activity records alike:
no file path, store file name or token, command-line flag, exception class name or
traceback; a 500 carries a request id only.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.fakes import AUDIENCE, ISSUER, JWT_SECRET, TokenMint
from tests.server_harness import intents_body

import agentic_retrieval.errors as library_errors
from agentic_retrieval.kb.directory import KnowledgeBaseDirectory
from agentic_retrieval.kb.loader import open_knowledge_base
from agentic_retrieval.kb.service import ServiceDirectory
from agentic_retrieval.server import ServerSettings, create_app
from agentic_retrieval.server.tokens import HEADER, TokenSettings

pytestmark = pytest.mark.integration
VERSION = "api-version=2026-04-01"
ADMIN, QUERY = {"api-key": "admin-key"}, {"api-key": "query-key"}
ALICE = {HEADER: f"Bearer {TokenMint().hs256('alice', ['staff'])}"}
CALLERS = {"admin": ADMIN, "query": QUERY, "query+token": {**QUERY, **ALICE}}
MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-06-18",
}
SECRET = "db-password=hunter2 /srv/private/stores/index-x-deadbeef.sqlite"

FIELDS = [
    {"name": "id", "type": "Edm.String", "key": True},
    {"name": "content", "type": "Edm.String"},
    {"name": "year", "type": "Edm.Int32"},
]
GUIDES = {
    "name": "guides",
    "fields": [
        *FIELDS,
        {"name": "teams", "type": "Collection(Edm.String)", "permissionFilter": "groupIds"},
    ],
}
PLAIN = {"name": "plain", "fields": FIELDS}
RETRIEVE = intents_body("vacation days")

BUILTIN_ERRORS = (
    "Traceback",
    'File "',
    "Exception",
    "ValueError",
    "TypeError",
    "KeyError",
    "RuntimeError",
    "AttributeError",
    "AssertionError",
    "UnicodeDecodeError",
    "OperationalError",
    "IntegrityError",
    "DatabaseError",
    "ValidationError",
    "validation error for",
    "sqlite3",
    "pydantic",
    "agentic_retrieval.",
    # the MCP SDK's message models and the validation library's report of them
    "JSONRPC",
    "union[",
    "retrieveArguments",
    "ChatMessage",
    "input_value",
    "input_type",
    "[type=",
)
CLI_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]+")

# the bodies a route is sent: malformed, mistyped, hostile and plausible
BODIES: list[bytes | dict | None] = [
    None,
    b"",
    b"{",
    b"\xff\xfe{}",
    b"[1]",
    b"null",
    {},
    {"name": 5, "fields": "x", "kind": ["x"], "knowledgeSources": {}},
    {"value": "x"},
    {"value": [{"@search.action": "upload"}]},
    {"value": [{"@search.action": "explode", "id": "a"}]},
    {"value": [{"@search.action": "upload", "id": "a", "year": "nineteen", "nope": 1}]},
    {"search": "*", "filter": "((", "top": -1},
    {"search": "*", "filter": "teams/any(t: t eq 'staff')"},
    {"search": "*", "filter": "nosuch eq 1", "select": "nosuch"},
    {"search": "*", "orderby": "year", "vectorQueries": [{"kind": "text", "text": "x"}]},
    {"intents": "x"},
    {**RETRIEVE, "maxRuntimeInSeconds": 100_000, "retrievalReasoningEffort": {"kind": "x"}},
    {**RETRIEVE, "retrievalReasoningEffort": {"kind": "medium"}},
    {**RETRIEVE, "outputMode": "answerSynthesis"},
    {
        **RETRIEVE,
        "knowledgeSourceParams": [
            {"knowledgeSourceName": "plain-ks", "kind": "searchIndex", "filterAddOn": "(("}
        ],
    },
    {
        **RETRIEVE,
        "knowledgeSourceParams": [{"knowledgeSourceName": "nosuch", "kind": "searchIndex"}],
    },
    {**RETRIEVE, "knowledgeSourceParams": [{"knowledgeSourceName": "files", "kind": "web"}]},
    RETRIEVE,
    {"name": "Bad Name!", "fields": [{"name": "9x", "type": "Edm.Complex"}]},
    {"name": "x", "kind": "web"},
    {"name": "x", "kind": "searchIndex", "searchIndexParameters": {"searchIndexName": "nosuch"}},
    {"name": "x", "knowledgeSources": [{"name": "nosuch"}]},
]
TOOL = "knowledge_base_retrieve"
# what the MCP endpoint is sent besides: JSON-RPC messages malformed at every level, and
# tool calls whose arguments have the wrong types
MCP_BODIES: list[bytes | dict | None] = [
    b"[]",
    b'"tools/list"',
    [{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}],
    {"jsonrpc": "2.0"},
    {"jsonrpc": "1.0", "id": 1, "method": "tools/list"},
    {"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"},
    {"jsonrpc": "2.0", "id": True, "method": "tools/list"},
    {"jsonrpc": "2.0", "id": 1, "method": 5},
    {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": [1]},
    {"jsonrpc": "2.0", "id": 1, "result": 5},
    {"jsonrpc": "2.0", "id": 1, "error": {"code": "x"}},
    {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": 5}},
    {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": TOOL, "arguments": 5}},
    {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 5}},
    *[
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": TOOL, "arguments": arguments},
        }
        for arguments in (
            {"query": 5},
            {"query": "x" * 10_001},
            {"messages": "hello"},
            {"messages": [5, {"role": "robot"}, {"content": ""}]},
            {"query": "vacation", "effort": "max", "output_mode": 3, "filter": ["x"]},
            {"query": "vacation", "max_output_documents": 0, "exclude_sources": "plain-ks"},
        )
    ],
]


@pytest.fixture
def served(tmp_path) -> Iterator[tuple[TestClient, ServiceDirectory, Path]]:
    data = tmp_path / "data"
    service = ServiceDirectory(data)
    settings = ServerSettings(
        api_keys=["admin-key"],
        query_keys=["query-key"],
        read_env_keys=False,
        tokens=TokenSettings(issuer=ISSUER, audience=AUDIENCE, secret=JWT_SECRET),
        max_upload_bytes=64 * 1024,
    )
    app = create_app(service=service, settings=settings)
    with TestClient(app, base_url="http://127.0.0.1:8080", raise_server_exceptions=False) as c:
        _populate(c)
        yield c, service, data
    service.close()


def _populate(c: TestClient) -> None:
    for index in (GUIDES, PLAIN):
        name = index["name"]
        assert c.put(f"/indexes/{name}?{VERSION}", json=index, headers=ADMIN).status_code == 201
        doc = {"@search.action": "upload", "id": "a", "content": "vacation days", "year": 2024}
        if name == "guides":
            doc["teams"] = ["staff"]
        batch = {"value": [doc]}
        assert c.post(f"/indexes/{name}/docs/index?{VERSION}", json=batch, headers=ADMIN).is_success
        source = {"kind": "searchIndex", "searchIndexParameters": {"searchIndexName": name}}
        put = c.put(f"/knowledgesources/{name}-ks?{VERSION}", json=source, headers=ADMIN)
        assert put.status_code == 201
    assert c.put(f"/knowledgesources/files?{VERSION}", json={"kind": "file"}, headers=ADMIN)
    uploaded = upload(c, "notes/leave.md", b"# Leave\n\nStaff get 25 vacation days.")
    assert uploaded.status_code == 201, uploaded.text
    kb = {"knowledgeSources": [{"name": n} for n in ("guides-ks", "plain-ks", "files")]}
    assert c.put(f"/knowledgebases/kb?{VERSION}", json=kb, headers=ADMIN).status_code == 201


def upload(c: TestClient, name: str, content: bytes, metadata: bytes | None = None):
    meta = metadata if metadata is not None else json.dumps({"fileName": name}).encode()
    files = {
        "metadata": (None, meta, "application/json"),
        "content": (name.rsplit("/", 1)[-1], content, "application/octet-stream"),
    }
    return c.post(f"/knowledgesources/files/files?{VERSION}", files=files, headers=ADMIN)


def forbidden_texts(service: ServiceDirectory, data: Path) -> list[str]:
    """What no body may contain: paths, store files and tokens, class names."""
    stores = [
        d.store
        for d in [*service.definitions("index"), *service.definitions("knowledgeSource")]
        if d.store
    ]
    tokens = [store.rsplit("-", 1)[-1].removesuffix(".sqlite") for store in stores]
    classes = [
        name
        for name, value in vars(library_errors).items()
        if inspect.isclass(value) and issubclass(value, BaseException)
    ]
    return [str(data), str(data.parent), "stores/", ".sqlite", *stores, *tokens, *classes]


def leaks(body: str, forbidden: list[str]) -> list[str]:
    """The forbidden texts ``body`` holds (MCP's JSON-RPC answers included)."""
    found = [text for text in [*forbidden, *BUILTIN_ERRORS] if text in body]
    return found + CLI_FLAG.findall(body)


def route_requests(
    c: TestClient, kb: str = "kb"
) -> Iterator[tuple[str, str, dict[str, str], object]]:
    """(method, path, headers, body) for every route, path form, name, caller and body.

    The parenthesized path form (``/indexes('x')``) gets the same names and callers with
    two bodies: it reaches the same handler.
    """
    deletes = []
    for route in c.app.routes:
        path = getattr(route, "path", "")
        for method in sorted(getattr(route, "methods", None) or {"POST"}):
            if method == "HEAD" or path == "/healthz":
                continue
            bodies = BODIES if method in ("POST", "PUT") else [None]
            if path.endswith("/mcp"):
                bodies = [*BODIES, *MCP_BODIES]
            if "('" in path:
                bodies = bodies[:1] + bodies[-1:]
            for concrete in _concrete(path, kb):
                for caller in CALLERS.values():
                    for body in bodies:
                        item = (method, concrete, caller, body)
                        if method == "DELETE":
                            deletes.append(item)
                        else:
                            yield item
    yield from deletes  # last: they remove what the other requests need


def _concrete(path: str, kb: str) -> list[str]:
    """``path`` with each parameter replaced by names that exist (of each kind) and not."""
    collection = path.strip("/").split("/")[0].split("(")[0]
    names = {
        "name": {
            "indexes": ["guides", "plain", "nosuch"],
            "knowledgesources": ["plain-ks", "files", "nosuch"],
        }.get(collection, [kb, "nosuch"]),
        "key": ["a", "nosuch", "bad key!"],
        "file_id": ["nosuch"],
    }
    paths = [path]
    for parameter, values in names.items():
        token = "{" + parameter + "}"
        paths = [p.replace(token, v) for p in paths for v in (values if token in p else [""])]
    return paths


def send(c: TestClient, method: str, path: str, headers: dict[str, str], body: object):
    url = f"{path}{'&' if '?' in path else '?'}{VERSION}"
    if "/mcp" in path:
        headers = {**headers, **MCP_HEADERS}
    if isinstance(body, bytes):
        return c.request(
            method, url, content=body, headers={**headers, "content-type": "application/json"}
        )
    return c.request(method, url, json=body, headers=headers)


def sweep(c: TestClient, forbidden: list[str], kb: str = "kb") -> int:
    """Send every route request; fail on a 500 or a leak; return how many were sent."""
    found: dict[str, str] = {}
    sent = 0
    for method, path, headers, body in route_requests(c, kb):
        response = send(c, method, path, headers, body)
        sent += 1
        assert response.status_code != 500, (method, path, body, response.text)
        for leak in leaks(response.text, forbidden):
            found.setdefault(leak, f"{method} {path} {body!r:.80} -> {response.text[:300]}")
    assert not found, "\n".join(f"{leak!r}: {where}" for leak, where in found.items())
    return sent


def test_no_body_of_any_route_names_our_files_flags_or_classes(served):
    c, service, data = served
    assert sweep(c, forbidden_texts(service, data)) > 2000


def test_a_server_of_knowledge_base_directories_keeps_its_files_to_itself(tmp_path):
    directory = KnowledgeBaseDirectory(tmp_path / "kb").create(name="handbook")
    directory.add_or_update_source("leave", description="Leave rules.")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "leave.md").write_text("# Leave\n\nStaff get 25 vacation days.")
    directory.index("leave", [tmp_path / "docs"])  # no permissions
    directory.close()
    settings = ServerSettings(
        api_keys=["admin-key"],
        query_keys=["query-key"],
        read_env_keys=False,
        tokens=TokenSettings(issuer=ISSUER, audience=AUDIENCE, secret=JWT_SECRET),
    )
    app = create_app(open_knowledge_base(tmp_path / "kb"), settings=settings)
    forbidden = [str(tmp_path), ".sqlite", *BUILTIN_ERRORS[:1]]
    with TestClient(app, base_url="http://127.0.0.1:8080", raise_server_exceptions=False) as c:
        assert sweep(c, forbidden, kb="handbook") > 500
        enforced = c.post(f"/knowledgebases/handbook/retrieve?{VERSION}", json=RETRIEVE,
                          headers={**QUERY, **ALICE})  # fmt: skip
    assert enforced.status_code == 206, enforced.text
    [record] = [r for r in enforced.json()["activity"] if r.get("error")]
    assert record["error"]["message"] == (
        "knowledge source 'leave' holds no permission metadata (it was indexed without "
        "permissions), so it cannot be searched while permissions are enforced; index it "
        "again with permissions"
    )


def test_enforced_permissions_without_metadata_are_told_in_the_services_terms(served):
    c, service, data = served
    forbidden = forbidden_texts(service, data)
    searched = c.post(f"/indexes/plain/docs/search?{VERSION}", json={"search": "*"},
                      headers={**QUERY, **ALICE})  # fmt: skip
    counted = c.get(f"/indexes/plain/docs/$count?{VERSION}", headers=QUERY)
    for refused in (searched, counted):
        assert refused.status_code == 403, refused.text
        message = refused.json()["error"]["message"]
        assert message.startswith("index 'plain' holds no permission metadata"), message
        assert not leaks(refused.text, forbidden)
    retrieved = c.post(f"/knowledgebases/kb/retrieve?{VERSION}", json=RETRIEVE,
                       headers={**QUERY, **ALICE})  # fmt: skip
    assert retrieved.status_code == 206, retrieved.text
    errors = {
        record["knowledgeSourceName"]: record["error"]["message"]
        for record in retrieved.json()["activity"]
        if record.get("error")
    }
    assert errors == {
        "plain-ks": "knowledge source 'plain-ks' holds no permission metadata, so it cannot "
        "be searched while permissions are enforced: give its index 'plain' "
        "permissionFilter fields (userIds, groupIds)",
        "files": "knowledge source 'files' holds no permission metadata, so it cannot be "
        "searched while permissions are enforced: list userIds or groupIds in its "
        "ingestionPermissionOptions and upload again",
    }
    assert [r["docKey"] for r in retrieved.json()["references"]] == ["a"]  # guides, trimmed
    assert not leaks(retrieved.text, forbidden)


@pytest.mark.parametrize(
    ("name", "content", "metadata"),
    [
        ("a.exe", b"MZ", None),
        ("b.pdf", b"%PDF-1.4 truncated", None),
        ("c.docx", b"PK\x03\x04 not a zip", None),
        ("d.md", b"", None),
        ("e.txt", b"\x00\x01\x02 binary", None),
        ("f.json", b"{" * 5000, None),
        ("g.csv", b'"unterminated\n', None),
        ("h.md", b"x" * (65 * 1024), None),
        ("notes/leave.md", b"# again", None),
        ("../escape.md", b"x", None),
        ("i.md", b"x", b"{not json"),
        ("j.md", b"x", b"\xff\xfe"),
        ("k.md", b"x", json.dumps({"fileName": "k.md", "userIds": ["u"]}).encode()),
    ],
)
def test_upload_errors_name_the_file_not_the_server(served, name, content, metadata):
    c, service, data = served
    response = upload(c, name, content, metadata)
    assert 400 <= response.status_code < 500, response.text
    assert not leaks(response.text, forbidden_texts(service, data)), response.text
    status = c.get(f"/knowledgesources/files/status?{VERSION}", headers=ADMIN)
    assert not leaks(status.text, forbidden_texts(service, data)), status.text


def test_mcp_tool_errors_name_the_request_not_the_server(served):
    c, service, data = served
    forbidden = forbidden_texts(service, data)
    for arguments in (
        {"query": "vacation", "filter": "(("},
        {"query": "vacation", "exclude_sources": ["nosuch"]},
        {"query": "vacation", "effort": "medium"},
        {"query": "vacation"},  # enforced: plain-ks and files answer with an error record
    ):
        call = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "knowledge_base_retrieve", "arguments": arguments},
        }
        reply = c.post(f"/knowledgebases/kb/mcp?{VERSION}", json=call,
                       headers={**QUERY, **ALICE, **MCP_HEADERS})  # fmt: skip
        assert reply.status_code == 200, reply.text
        assert not leaks(reply.text, forbidden), (arguments, reply.text)


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        (b"{", -32700, "Parse error: the body is not valid JSON."),
        (
            b'[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]',
            -32600,
            "Invalid Request: batches are not supported; send one JSON-RPC message, a JSON object.",
        ),
        (
            b'{"jsonrpc":"1.0","id":1,"method":"x"}',
            -32600,
            "Invalid Request: 'jsonrpc' must be \"2.0\".",
        ),
        (
            b'{"jsonrpc":"2.0","id":1,"method":5}',
            -32600,
            "Invalid Request: 'method' must be a string.",
        ),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"x","params":[]}',
            -32600,
            "Invalid Request: 'params' must be an object.",
        ),
    ],
)
def test_a_malformed_mcp_message_is_told_what_is_wrong_in_json_rpc_terms(
    served, body, code, message
):
    c, _, _ = served
    headers = {**QUERY, **MCP_HEADERS, "content-type": "application/json"}
    reply = c.post(f"/knowledgebases/kb/mcp?{VERSION}", content=body, headers=headers)
    assert reply.status_code == 400
    assert reply.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": code, "message": message},
    }


def test_mistyped_tool_arguments_are_named_with_what_they_should_be(served):
    c, _, _ = served
    arguments = {"query": 5, "messages": [{"role": "robot"}], "max_output_documents": 0}
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": TOOL, "arguments": arguments}}  # fmt: skip
    reply = c.post(f"/knowledgebases/kb/mcp?{VERSION}", json=call, headers={**QUERY, **MCP_HEADERS})
    assert reply.status_code == 200, reply.text
    result = json.loads(reply.text.split("data: ", 1)[1])["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"] == (
        "invalid arguments: query: input should be a valid string; messages.0.role: input "
        "should be 'user', 'assistant' or 'system'; messages.0.content: field required; "
        "max_output_documents: input should be greater than or equal to 1"
    )


def test_a_bug_answers_a_request_id_and_nothing_of_itself(served, monkeypatch):
    c, service, _ = served

    def broken(*args, **kwargs):
        raise RuntimeError(SECRET)

    monkeypatch.setattr(service, "definitions", broken)
    monkeypatch.setattr(service, "get", broken)
    for method, path in (("GET", "/indexes"), ("GET", "/knowledgesources/files/status")):
        response = c.request(method, f"{path}?{VERSION}", headers=ADMIN)
        assert response.status_code == 500
        assert "quote request id" in response.json()["error"]["message"]
        assert "hunter2" not in response.text and "RuntimeError" not in response.text
