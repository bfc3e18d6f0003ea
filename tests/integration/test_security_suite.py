"""The security suite: nobody sees what they may not, under load and under attack.

Against a real server on 127.0.0.1 (uvicorn, identity tokens validated with a shared secret,
permissions enforced), over one knowledge base whose one store holds three tenants' disjoint
documents, documents for single users, documents shared by two tenants, public documents and
documents indexed without permissions (hidden, since enforcement is on).

- Multi-tenant leakage under load: 520 interleaved requests (JSON and event-stream) from 20
  concurrent clients acting as 16 identities (3 tenants, a two-tenant member, users with
  personal documents, an outsider) and 4 anonymous callers. Every reference and every
  document marker in every answer is checked against the permissions *stored* for that
  document (``LocalStore.permissions_of``), not against a list written here. Leaks found: 0.
- Token abuse: the 12 bad tokens of ``test_server_identity.TOKEN_ABUSE``'s kinds, each sent to
  3 entry points (REST JSON, REST event-stream, MCP): 36 cases, every one a 401 in Azure's
  error shape, no references, neither token nor key in the logs.
- Filter abuse: 14 hostile filters sent as the caller's ``filterAddOn`` and as the planner's
  filter, for 3 identities each (84 cases): each is refused (400), fails as a source error
  (206, nothing returned) or returns only documents the identity may see; the permission
  predicate is built with bound parameters, so no identity or filter text ever appears in
  its SQL.
- Hidden fields (``serve --data``): an index's ``retrievable: false`` fields (one of them the
  semantic title, one hidden after its documents were written) and its permission fields
  (other users' ids, group names) never reach a caller who may read the document, through
  REST retrieve (JSON, event stream, answer synthesis, ``sourceData``, ``citationUrl``),
  ``/v1/chat/completions``, MCP, ``as_tool`` and the retriever, nor the answer model; a search
  by their words still finds the document.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import random
import re
from collections import Counter
from dataclasses import dataclass

import httpx
import pytest
from tests.fakes import AUDIENCE, ISSUER, JWT_SECRET, TokenMint
from tests.server_harness import running_server

from agentic_retrieval import KnowledgeBase
from agentic_retrieval.permissions import Access, Identity
from agentic_retrieval.server import ServerSettings, create_app
from agentic_retrieval.server.openai_chat import EXTENSION
from agentic_retrieval.server.tokens import HEADER, MAX_TOKEN_BYTES, TokenSettings
from agentic_retrieval.sources.local import LocalKnowledgeSource
from agentic_retrieval.testing import ScriptedChatModel

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

GA = "2026-04-01"
KEY = "suite-query-key"
TENANTS = ("acme", "globex", "initech")
TOPICS = ("vacation", "expenses", "badge", "parking", "laptop", "travel")
MARKER = re.compile(r"MARK-[a-z0-9-]+")
MINT = TokenMint()


def corpus() -> list[dict]:
    """Documents with a unique marker each, so any leak of their text is visible too."""
    docs: list[dict] = []
    for tenant in TENANTS:
        for n, topic in enumerate(TOPICS * 2):
            docs.append(
                {
                    "id": f"{tenant}-{topic}-{n}",
                    "text": f"{tenant} {topic} policy rules, number {n}: MARK-{tenant}-{n}.",
                    "topic": topic,
                    "groups": [tenant],
                }
            )
    for user in ("u-acme-1", "u-globex-1", "u-initech-1"):
        for topic in TOPICS[:3]:
            docs.append(
                {
                    "id": f"{user}-{topic}",
                    "text": f"Personal {topic} policy rules for {user}: MARK-{user}-{topic}.",
                    "topic": topic,
                    "users": [user],
                }
            )
    for topic in TOPICS:
        docs.append(
            {
                "id": f"joint-{topic}",
                "text": f"Joint venture {topic} policy rules: MARK-joint-{topic}.",
                "topic": topic,
                "groups": ["acme", "globex"],
            }
        )
        docs.append(
            {
                "id": f"public-{topic}",
                "text": f"Company-wide {topic} policy rules: MARK-public-{topic}.",
                "topic": topic,
                "groups": ["all"],
            }
        )
    return docs


LEGACY = [
    {"id": f"legacy-{t}", "text": f"Old {t} policy rules: MARK-legacy-{t}.", "topic": t}
    for t in TOPICS
]
"""Indexed without permissions: enforcement hides them from everyone."""


IDENTITIES: list[Identity | None] = [
    *(Identity(user_id=f"u-{t}-{n}", groups=(t,)) for t in TENANTS for n in (1, 2, 3)),
    Identity(user_id="u-both", groups=("acme", "globex")),
    Identity(user_id="u-both-2", groups=("globex", "acme", "contractors")),
    Identity(user_id="u-outsider", groups=("contractors",)),
    Identity(user_id="u-acme-1", groups=()),  # the personal documents, without the group
    Identity(user_id="u-initech-9", groups=("initech", "initech-admins")),
    Identity(user_id="u-globex-9", groups=("globex",)),
    Identity(user_id="u-acme-9", groups=("acme",)),
    None,
    None,
    None,
    None,
]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("suite")
    source = LocalKnowledgeSource("policies", folder / "policies.sqlite", create=True)
    report = source.add_documents(corpus(), user_ids_field="users", group_ids_field="groups")
    assert report.ok and source.add_documents(LEGACY).ok
    settings = ServerSettings(
        query_keys=[KEY],
        read_env_keys=False,
        max_in_flight=128,
        tokens=TokenSettings(issuer=ISSUER, audience=AUDIENCE, secret=JWT_SECRET),
    )
    kb = KnowledgeBase([source], name="policies")
    with running_server(create_app([kb], settings=settings)) as url:
        yield url, source
    source.close()


def headers(identity: Identity | None) -> dict[str, str]:
    if identity is None:
        return {"api-key": KEY}
    token = MINT.hs256(identity.user_id, identity.groups)
    return {"api-key": KEY, HEADER: f"Bearer {token}"}


@dataclass
class Audit:
    """What the suite checked, and what it found."""

    requests: int = 0
    references: int = 0
    leaks: int = 0
    seen_restricted: Counter[str] = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        self.seen_restricted = Counter()


def check(source: LocalKnowledgeSource, identity: Identity | None, wire: dict, audit: Audit):
    """Count every reference or marker of a document ``identity`` may not see as a leak."""
    access = Access(identity, enforce=True)
    seen = {r["docKey"].partition("#")[0] for r in wire["references"]}
    text = json.dumps(wire)
    seen |= {_doc_of(marker) for marker in MARKER.findall(text)}
    for doc in seen:
        path = f"record:{doc}"
        assert source.store.file_state(path) is not None, doc
        permissions = source.store.permissions_of(path)
        if not access.may_see(permissions):
            audit.leaks += 1
        elif permissions is not None and not permissions.public:
            audit.seen_restricted[identity.user_id if identity else "-"] += 1
    audit.references += len(wire["references"])


_MARKED = {m: d["id"] for d in corpus() + LEGACY for m in MARKER.findall(d["text"])}


def _doc_of(marker: str) -> str:
    return _MARKED.get(marker.rstrip("."), marker)


async def _client(url, source, identity, rounds, seed, audit):
    rng = random.Random(seed)
    async with httpx.AsyncClient(base_url=url, headers=headers(identity), timeout=120) as http:
        for n in range(rounds):
            topic = rng.choice(TOPICS)
            body = {
                "intents": [{"search": f"{topic} policy rules"}],
                "retrievalReasoningEffort": {"kind": "minimal"},
            }
            if n % 5 == 4:  # a narrowing filter now and then
                body["knowledgeSourceParams"] = [
                    {"knowledgeSourceName": "policies", "filterAddOn": f"topic eq '{topic}'"}
                ]
            stream = n % 3 == 2
            response = await http.post(
                f"/knowledgebases/policies/retrieve?api-version={GA}",
                json=body,
                headers={"accept": "text/event-stream"} if stream else {},
            )
            assert response.status_code == 200, response.text
            wire = _final(response.text) if stream else response.json()
            audit.requests += 1
            check(source, identity, wire, audit)


def _final(text: str) -> dict:
    for block in text.split("\n\n"):
        if block.startswith("event: response"):
            return json.loads(block.partition("data: ")[2])["response"]
    raise AssertionError(f"no response event in {text[-300:]}")


async def test_no_response_under_load_contains_a_document_its_caller_may_not_see(served):
    url, source = served
    audit = Audit()
    rounds = 26
    await asyncio.gather(
        *(
            _client(url, source, identity, rounds, seed, audit)
            for seed, identity in enumerate(IDENTITIES)
        )
    )
    assert (audit.requests, len(IDENTITIES)) == (520, 20)
    assert audit.leaks == 0
    # not trivially empty: every named identity saw restricted documents it may see
    named = {i.user_id for i in IDENTITIES if i is not None and i.user_id != "u-outsider"}
    assert set(audit.seen_restricted) == named
    assert min(audit.seen_restricted.values()) >= 10
    assert audit.references >= audit.requests  # public documents match every question


# --- token abuse ------------------------------------------------------------------------------


def _unsigned(claims: dict) -> str:
    def part(data: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}."


def bad_tokens() -> dict[str, str]:
    import jwt

    good = MINT.hs256("u-acme-1", ["acme"])
    head, _, signature = good.split(".")
    widened = base64.urlsafe_b64encode(
        json.dumps(MINT.claims("u-acme-1", TENANTS)).encode()
    ).rstrip(b"=")
    return {
        "alg none": _unsigned(MINT.claims("u-acme-1", ["acme"])),
        "wrong key": MINT.hs256("u-acme-1", ["acme"], key="x" * 40),
        "expired": MINT.hs256("u-acme-1", exp=1_000_000, iat=999_000, nbf=999_000),
        "not yet valid": MINT.hs256("u-acme-1", nbf=4_000_000_000),
        "wrong audience": MINT.hs256("u-acme-1", aud="api://other"),
        "wrong issuer": MINT.hs256("u-acme-1", iss="https://evil.example/"),
        "no expiry": MINT.hs256("u-acme-1", exp=None),
        "no user": MINT.hs256(None, ["acme"]),
        "groups not a list": jwt.encode(
            {**MINT.claims("u-acme-1"), "groups": "acme"}, JWT_SECRET, algorithm="HS256"
        ),
        "malformed": "definitely.not.a-token",
        "tampered payload": f"{head}.{widened.decode()}.{signature}",
        "oversized": MINT.hs256("u-acme-1", pad="x" * MAX_TOKEN_BYTES),
    }


async def test_every_bad_token_is_refused_at_every_entry_point(served, caplog):
    url, _ = served
    caplog.set_level(logging.DEBUG)
    tokens = bad_tokens()
    body = {"intents": [{"search": "vacation"}], "retrievalReasoningEffort": {"kind": "minimal"}}
    mcp_call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "knowledge_base_retrieve", "arguments": {"query": "vacation"}},
    }
    cases = 0
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        for token in tokens.values():
            sent = {"api-key": KEY, HEADER: f"Bearer {token}"}
            answers = [
                await http.post(
                    f"/knowledgebases/policies/retrieve?api-version={GA}", json=body, headers=sent
                ),
                await http.post(
                    f"/knowledgebases/policies/retrieve?api-version={GA}",
                    json=body,
                    headers=sent | {"accept": "text/event-stream"},
                ),
                await http.post(
                    "/knowledgebases/policies/mcp",
                    json=mcp_call,
                    headers=sent | {"accept": "application/json, text/event-stream"},
                ),
            ]
            for answer in answers:
                cases += 1
                assert answer.status_code == 401, answer.text
                error = answer.json()["error"]
                assert error["code"] == "Unauthorized" and error["message"].startswith("Access")
                assert "MARK-" not in answer.text and token not in answer.text
    assert cases == 36
    for token in tokens.values():
        signature = token.rpartition(".")[2]
        assert token not in caplog.text
        assert len(signature) < 16 or signature not in caplog.text
    assert KEY not in caplog.text


# --- filter abuse -----------------------------------------------------------------------------

HOSTILE_FILTERS = [
    "true",
    "true or true",
    "topic eq 'vacation' or true",
    "(true) or (true)",
    "topic eq 'x') or (true",
    "topic eq 'x' or not (topic eq 'x')",
    "not (record_id eq 'nothing')",
    "record_id ne 'x' or record_id eq 'x'",
    "topic eq 'x'' or 1=1 --'",
    "groups/any(g: g eq 'globex')",
    "access eq 'public' or file_id ge 0",
    "search.in(record_id, 'globex-vacation-0,initech-vacation-0')",
    " or ".join(["record_id ne 'x'"] * 400),
    "(" * 60 + "true" + ")" * 60,
]


def _visible(source: LocalKnowledgeSource, identity: Identity | None, wire: dict) -> bool:
    access = Access(identity, enforce=True)
    keys = {r["docKey"].partition("#")[0] for r in wire["references"]}
    return all(access.may_see(source.store.permissions_of(f"record:{k}")) for k in keys)


async def test_caller_filters_never_widen_the_permission_predicate(served):
    url, source = served
    cases = refused = 0
    who = [IDENTITIES[0], IDENTITIES[9], None]
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        for identity in who:
            for hostile in HOSTILE_FILTERS:
                body = {
                    "intents": [{"search": "vacation policy"}],
                    "retrievalReasoningEffort": {"kind": "minimal"},
                    "knowledgeSourceParams": [
                        {"knowledgeSourceName": "policies", "filterAddOn": hostile}
                    ],
                }
                answer = await http.post(
                    f"/knowledgebases/policies/retrieve?api-version={GA}",
                    json=body,
                    headers=headers(identity),
                )
                cases += 1
                if answer.status_code == 400:
                    refused += 1
                    continue
                # 206: the store could not run the filter (an error record, nothing returned)
                assert answer.status_code in (200, 206), (hostile, answer.text)
                assert _visible(source, identity, answer.json()), hostile
    assert cases == 42 and 0 < refused < cases


def test_planner_filters_never_widen_the_permission_predicate(served):
    _, source = served
    cases = 0
    for identity in (IDENTITIES[0], IDENTITIES[9], None):
        for hostile in HOSTILE_FILTERS:
            plan = {"needs_retrieval": True, "queries": [{"query": "vacation", "filter": hostile}]}
            model = ScriptedChatModel(script={"QueryPlan": [plan]})
            kb = KnowledgeBase([source], chat_model=model, enforce_permissions=True)
            response = kb.retrieve(
                {"messages": [{"role": "user", "content": [{"type": "text", "text": "vacation"}]}]},
                identity=identity,
            )
            cases += 1
            assert _visible(source, identity, response.to_wire()), hostile
    assert cases == 42


def test_the_permission_predicate_binds_every_id_as_a_parameter(served):
    _, source = served
    from agentic_retrieval.odata import parse_filter

    sly = Identity(user_id="x') OR 1=1 --", groups=("acme' OR 'a'='a",))
    sql, params = source.store._where(parse_filter("topic eq 'vacation'"), Access(sly, True))
    assert "OR 1=1" not in sql and "'a'='a" not in sql
    assert "u:x') OR 1=1 --" in params and "g:acme' OR 'a'='a" in params
    hits = source.store.search("vacation", top=100, access=Access(sly, enforce=True))
    assert {h.id.partition("#")[0] for h in hits} == {"public-vacation"}


# --- hidden fields ------------------------------------------------------------------------------
# A service index (``serve --data``) whose documents hold fields a caller may not read: a
# searchable ``retrievable: false`` field, a hidden semantic title field, a field made
# non-retrievable after the documents were written, and permission fields naming other
# users and groups. Whoever may read a document gets its readable fields, and nothing else,
# from every route; a search by a hidden field's words still finds the document.

ADMIN_KEY = "suite-admin-key"
FORBIDDEN = re.compile(r"MARK-[a-z0-9-]+|u-bob-private|layoffs-taskforce")
"""What no response may hold: the hidden fields' markers, other users' ids and group names."""
ALICE = Identity(user_id="alice", groups=("acme",))
LONG_BODY = " ".join(
    f"Section {n}: the vacation carry-over rules say that unused days move to the next year."
    for n in range(60)
)
MEMOS_INDEX = {
    "name": "memos",
    "fields": [
        {"name": "id", "type": "Edm.String", "key": True},
        {"name": "title", "type": "Edm.String"},
        {"name": "body", "type": "Edm.String"},
        {"name": "notes", "type": "Edm.String", "retrievable": False},
        {"name": "draft", "type": "Edm.String"},
        {"name": "readers", "type": "Collection(Edm.String)", "permissionFilter": "userIds"},
        {"name": "teams", "type": "Collection(Edm.String)", "permissionFilter": "groupIds"},
    ],
    "semantic": {
        "configurations": [
            {"name": "memos", "prioritizedFields": {"titleField": {"fieldName": "title"}}}
        ]
    },
}
PROJECTS_INDEX = {
    "name": "projects",
    "fields": [
        {"name": "id", "type": "Edm.String", "key": True},
        {"name": "codename", "type": "Edm.String", "retrievable": False},
        {"name": "summary", "type": "Edm.String"},
        {"name": "owners", "type": "Collection(Edm.String)", "permissionFilter": "userIds"},
    ],
    "semantic": {
        "configurations": [
            {"name": "projects", "prioritizedFields": {"titleField": {"fieldName": "codename"}}}
        ]
    },
}
MEMOS = [
    {
        "id": "memo-short",
        "title": "Vacation memo",
        "body": "Vacation policy: 30 days per year.",
        "notes": "Zebra review pending, MARK-notes-short.",
        "draft": "Draft wording MARK-draft-short.",
        "readers": ["alice", "u-bob-private"],
        "teams": ["layoffs-taskforce"],
    },
    {
        "id": "memo-long",
        "title": "Vacation carry-over",
        "body": LONG_BODY,
        "notes": "Quokka audit notes MARK-notes-long.",
        "readers": ["alice"],
        "teams": ["layoffs-taskforce", "acme"],
    },
]
PROJECTS = [
    {
        "id": "proj-1",
        "codename": "Operation nightjar MARK-codename-1",
        "summary": "Vacation planning for all staff in the spring.",
        "owners": ["alice", "u-bob-private"],
    }
]
ANSWER = "Staff get 31 days of vacation [ref_id:0]."


@pytest.fixture(scope="module")
def hidden(tmp_path_factory):
    """A real server over a data directory holding the two indexes, and its model stand-in."""
    from tests.integration.openai_standin import OpenAIStandIn

    from agentic_retrieval.kb.service import ServiceDirectory
    from agentic_retrieval.llm.chat_models import _init_model

    plan = {"needs_retrieval": True, "assistant_message": "", "queries": []}
    plan["queries"] = [{"query": "vacation", "goal": "", "knowledge_sources": [], "filter": ""}]
    script = {"QueryPlan": [plan] * 50, "SynthesizedAnswer": [{"answer": ANSWER}] * 50}
    service = ServiceDirectory(tmp_path_factory.mktemp("hidden") / "data")
    settings = ServerSettings(
        api_keys=[ADMIN_KEY],
        query_keys=[KEY],
        read_env_keys=False,
        tokens=TokenSettings(issuer=ISSUER, audience=AUDIENCE, secret=JWT_SECRET),
    )
    with OpenAIStandIn(script) as model, pytest.MonkeyPatch.context() as env:
        env.setenv("OPENAI_API_KEY", "sk-test")
        env.setenv("OPENAI_BASE_URL", model.base_url)
        env.setenv("AGENTIC_RETRIEVAL_CHAT_MODEL", "openai:gpt-4.1-mini")
        _init_model.cache_clear()
        with running_server(create_app(service=service, settings=settings)) as url:
            _fill(url)
            yield url, service, model
        _init_model.cache_clear()


def _fill(url: str) -> None:
    admin = httpx.Client(base_url=url, headers={"api-key": ADMIN_KEY}, params={"api-version": GA})
    for index, docs in ((MEMOS_INDEX, MEMOS), (PROJECTS_INDEX, PROJECTS)):
        name = index["name"]
        assert admin.put(f"/indexes('{name}')", json=index).status_code == 201
        batch = {"value": [{"@search.action": "upload", **doc} for doc in docs]}
        answer = admin.post(f"/indexes('{name}')/docs/search.index", json=batch)
        assert answer.status_code == 200, answer.text
    # a merge: the new hidden note and the new body are what the document holds now
    merge = {"@search.action": "merge", "id": "memo-short", "notes": "Zebra MARK-notes-merged."}
    merge["body"] = "Vacation policy: 31 days per year."
    answer = admin.post("/indexes('memos')/docs/search.index", json={"value": [merge]})
    assert answer.status_code == 200, answer.text
    # a field made non-retrievable after its documents were written (Azure allows it)
    fields = [
        {**f, "retrievable": False} if f["name"] == "draft" else f for f in MEMOS_INDEX["fields"]
    ]
    assert admin.put("/indexes('memos')", json={**MEMOS_INDEX, "fields": fields}).is_success
    chosen = ["title", "body", "notes", "draft", "readers"]  # asks for hidden fields too
    sources = [
        {
            "name": "memos-ks",
            "kind": "searchIndex",
            "searchIndexParameters": {
                "searchIndexName": "memos",
                "sourceDataFields": [{"name": n} for n in chosen],
            },
        },
        {
            "name": "projects-ks",
            "kind": "searchIndex",
            "searchIndexParameters": {"searchIndexName": "projects"},
        },
    ]
    for source in sources:
        assert admin.put(f"/knowledgesources('{source['name']}')", json=source).is_success
    base = {"name": "hr", "knowledgeSources": [{"name": "memos-ks"}, {"name": "projects-ks"}]}
    assert admin.put("/knowledgebases('hr')", json=base).is_success


def _with_source_data(body: dict) -> dict:
    params = [
        {"knowledgeSourceName": name, "kind": "searchIndex", "includeReferenceSourceData": True}
        for name in ("memos-ks", "projects-ks")
    ]
    return {**body, "knowledgeSourceParams": params}


def _minimal(search: str) -> dict:
    return _with_source_data(
        {"intents": [{"search": search}], "retrievalReasoningEffort": {"kind": "minimal"}}
    )


def _doc_keys(wire: dict) -> set[str]:
    return {r["docKey"] for r in wire["references"]}


ROUTE = f"/knowledgebases/hr/retrieve?api-version={GA}"


async def _post(url: str, path: str, body: dict, **extra) -> httpx.Response:
    async with httpx.AsyncClient(base_url=url, headers=headers(ALICE), timeout=120) as http:
        answer = await http.post(path, json=body, **extra)
    assert answer.status_code == 200, answer.text
    return answer


async def test_retrieve_returns_readable_fields_only_in_text_and_source_data(hidden):
    url, _, _ = hidden
    found = await _post(url, ROUTE, _minimal("vacation"))
    wire = found.json()
    assert _doc_keys(wire) == {"memo-short", "memo-long", "proj-1"}
    assert FORBIDDEN.findall(found.text) == []
    data = {r["docKey"]: r["sourceData"] for r in wire["references"]}
    # readable fields only (the chosen sourceDataFields less the hidden ones); the passage
    # is the merged document's
    assert set(data["memo-short"]) == {"title", "body", "docKey", "content"}
    assert data["memo-short"]["content"] == "memo-short\n\nVacation policy: 31 days per year."
    assert data["memo-short"]["title"] == "Vacation memo"
    assert data["proj-1"]["title"] is None  # its title field is not retrievable
    assert data["proj-1"]["content"] == "proj-1\n\nVacation planning for all staff in the spring."
    urls = [r["citationUrl"] for r in wire["references"] if r["docKey"].startswith("memo")]
    assert len(urls) == 2 and all("$select=title%2Cbody&" in u for u in urls)


@pytest.mark.parametrize(
    ("words", "key"),
    [
        ("zebra", "memo-short"),  # a searchable field that is not retrievable
        ("nightjar", "proj-1"),  # a semantic title field that is not retrievable
        ("quokka audit", "memo-long"),  # a long document's hidden note, past its first chunk
        ("draft wording", "memo-short"),  # a field made non-retrievable after the upload
    ],
)
async def test_hidden_words_find_their_document_without_returning_them(hidden, words, key):
    url, _, _ = hidden
    answer = await _post(url, ROUTE, _minimal(words))
    references = answer.json()["references"]
    assert key in {r["docKey"] for r in references}
    assert FORBIDDEN.findall(answer.text) == []
    (passage,) = [r["sourceData"]["content"] for r in references if r["docKey"] == key]
    assert passage.strip()  # the readable text stands in for a chunk that held hidden text
    if key == "memo-long":  # the window of the long body nearest the hidden note
        assert "Section 59:" in passage and "Section 0:" not in passage


async def test_the_event_stream_returns_no_hidden_field(hidden):
    url, _, _ = hidden
    streamed = await _post(
        url, ROUTE, _minimal("zebra vacation"), headers={"accept": "text/event-stream"}
    )
    assert "response.completed" in streamed.text and "memo-short" in streamed.text
    assert FORBIDDEN.findall(streamed.text) == []


@pytest.mark.parametrize("effort", ["minimal", "low"])
async def test_chat_completions_return_no_hidden_field(hidden, effort):
    url, _, _ = hidden
    chat = await _post(
        url,
        "/v1/chat/completions",
        {
            "model": "hr",
            "messages": [{"role": "user", "content": "zebra vacation"}],
            "reasoning_effort": effort,
            # the references' sourceData too, in the extension field
            EXTENSION: {"knowledgeSourceParams": _with_source_data({})["knowledgeSourceParams"]},
        },
    )
    message = chat.json()["choices"][0]["message"]["content"]
    assert ("31 days" in message) and (ANSWER == message) == (effort == "low")
    references = chat.json()[EXTENSION]["references"]
    assert "memo-short" in {r["docKey"] for r in references}
    assert all("sourceData" in r for r in references)
    assert FORBIDDEN.findall(chat.text) == []


async def test_the_answer_model_is_never_shown_a_hidden_field(hidden):
    url, _, model = hidden
    before = len(model.requests)
    body = {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "zebra"}]}],
        "retrievalReasoningEffort": {"kind": "low"},
        "outputMode": "answerSynthesis",
    }
    answered = await _post(url, ROUTE, _with_source_data(body))
    assert ANSWER in answered.text and FORBIDDEN.findall(answered.text) == []
    prompts = json.dumps(model.requests[before:])
    assert "Vacation policy: 31 days per year." in prompts  # the model read the passages
    assert FORBIDDEN.findall(prompts) == []


async def test_the_mcp_tool_returns_no_hidden_field(hidden):
    pytest.importorskip("mcp")
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    url, _, _ = hidden
    http = httpx2.AsyncClient(headers=headers(ALICE), timeout=httpx2.Timeout(30, read=60))
    async with Client(
        streamable_http_client(f"{url}/knowledgebases/hr/mcp", http_client=http)
    ) as c:
        result = await c.call_tool(
            "knowledge_base_retrieve", {"query": "zebra vacation", "effort": "minimal"}
        )
    assert not result.is_error, result.content
    text = json.dumps([block.model_dump() for block in result.content])
    text += json.dumps(result.structured_content)
    assert "memo-short" in text and "31 days" in text
    assert FORBIDDEN.findall(text) == []


def test_as_tool_and_the_retriever_return_no_hidden_field(hidden):
    from agentic_retrieval.kb.catalog import ServiceCatalog

    _, service, _ = hidden
    kb = ServiceCatalog(service).knowledge_base("hr")
    assert kb is not None
    tool = kb.as_tool(effort="minimal", identity=ALICE)
    message = tool.invoke(
        {"type": "tool_call", "id": "1", "name": tool.name, "args": {"query": "zebra vacation"}}
    )
    shown = message.content + message.artifact.model_dump_json()
    assert "31 days" in shown and FORBIDDEN.findall(shown) == []

    documents = kb.as_retriever(identity=ALICE, k=10).invoke("zebra vacation")
    assert {d.metadata["doc_key"] for d in documents} >= {"memo-short", "proj-1"}
    dumped = json.dumps([[d.page_content, d.metadata] for d in documents], default=str)
    assert FORBIDDEN.findall(dumped) == []
