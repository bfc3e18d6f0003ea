"""The server's side of identity: tokens in ``x-ms-query-source-authorization``, knowledge
bases that require one, and query keys scoped to knowledge bases.

Token abuse: 12 kinds of bad token (the list TOKEN_ABUSE), each answered 401 with Azure's
error body, on both the REST retrieve route and the documents route, with neither the token
nor any key in the logs.
"""

from __future__ import annotations

import base64
import json
import logging

import jwt
import pytest
from fastapi.testclient import TestClient
from tests.fakes import AUDIENCE, ISSUER, JWT_SECRET, TokenMint, tenant_source

from agentic_retrieval import KnowledgeBase
from agentic_retrieval.server import ServerSettings, create_app
from agentic_retrieval.server.tokens import HEADER, MAX_TOKEN_BYTES, TokenSettings

GA = "2026-04-01"
ADMIN, QUERY, SCOPED = "admin-key-0001", "query-key-0002", "scoped-key-0003"
MINT = TokenMint()
BODY = {"intents": [{"search": "vacation days"}], "retrievalReasoningEffort": {"kind": "minimal"}}


def settings(**overrides):
    options = {
        "api_keys": [ADMIN],
        "query_keys": [QUERY],
        "scoped_query_keys": [f"policies:{SCOPED}"],
        "read_env_keys": False,
        "tokens": TokenSettings(issuer=ISSUER, audience=AUDIENCE, secret=JWT_SECRET),
    }
    options.update(overrides)
    return ServerSettings(**options)


@pytest.fixture
def kbs(tmp_path):
    policies = tenant_source(tmp_path / "policies.sqlite")
    other = tenant_source(tmp_path / "other.sqlite", name="other")
    yield [KnowledgeBase([policies], name="policies"), KnowledgeBase([other], name="other")]
    policies.close()
    other.close()


def client(kbs, **overrides) -> TestClient:
    return TestClient(create_app(kbs, settings=settings(**overrides), mcp=False))


def retrieve(c, kb="policies", key=QUERY, token=None, header=None):
    headers = {"api-key": key}
    if token is not None:
        headers[HEADER] = f"Bearer {token}"
    if header is not None:
        headers[HEADER] = header
    return c.post(f"/knowledgebases/{kb}/retrieve?api-version={GA}", json=BODY, headers=headers)


def documents(response):
    assert response.status_code == 200, response.text
    return sorted(r["docKey"].partition("#")[0] for r in response.json()["references"])


def test_a_valid_token_retrieves_as_its_user_and_groups(kbs):
    with client(kbs) as c:
        assert documents(retrieve(c, token=MINT.hs256("alice", ["acme"]))) == [
            "acme-ceo",
            "acme-leave",
            "holidays",
        ]
        assert documents(retrieve(c, token=MINT.hs256("bob", ["globex"]))) == [
            "globex-leave",
            "holidays",
        ]
        assert documents(retrieve(c)) == ["holidays"]  # no token: public documents only


def test_tokens_signed_with_a_jwks_key_are_validated_by_kid(kbs, tmp_path):
    jwks = MINT.write_jwks(tmp_path / "jwks.json")
    tokens = TokenSettings(issuer=ISSUER, audience=AUDIENCE, jwks=str(jwks))
    with client(kbs, tokens=tokens) as c:
        assert documents(retrieve(c, token=MINT.rs256("bob", ["globex"]))) == [
            "globex-leave",
            "holidays",
        ]
        unknown_kid = retrieve(c, token=MINT.rs256("bob", ["globex"], kid="rotated"))
        assert unknown_kid.status_code == 401
        assert retrieve(c, token=MINT.hs256("bob")).status_code == 401  # HS256 not accepted


def _unsigned(claims: dict) -> str:
    def part(data: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}."


TOKEN_ABUSE = {
    "alg none": lambda: _unsigned(MINT.claims("alice", ["acme"])),
    "wrong key": lambda: MINT.hs256("alice", ["acme"], key="another-secret-of-at-least-32-bytes!!"),
    "expired": lambda: MINT.hs256("alice", exp=1_000_000, iat=999_000, nbf=999_000),
    "not yet valid": lambda: MINT.hs256("alice", nbf=4_000_000_000),
    "wrong audience": lambda: MINT.hs256("alice", aud="api://someone-else"),
    "wrong issuer": lambda: MINT.hs256("alice", iss="https://evil.example/"),
    "no expiry": lambda: MINT.hs256("alice", exp=None),
    "no user": lambda: MINT.hs256(None, ["acme"]),
    "groups not a list": lambda: jwt.encode(
        {**MINT.claims("alice"), "groups": "acme"}, JWT_SECRET, algorithm="HS256"
    ),
    "malformed": lambda: "not-a-jwt",
    "tampered payload": lambda: _tamper(MINT.hs256("bob", ["globex"])),
    "oversized": lambda: MINT.hs256("alice", pad="x" * MAX_TOKEN_BYTES),
}


def _tamper(token: str) -> str:
    head, _, rest = token.partition(".")
    _, _, signature = rest.partition(".")
    claims = MINT.claims("bob", ["acme", "globex"])
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{head}.{payload}.{signature}"


@pytest.mark.parametrize("kind", list(TOKEN_ABUSE))
def test_every_kind_of_bad_token_is_a_401_in_azures_shape_and_never_logged(kbs, kind, caplog):
    caplog.set_level(logging.DEBUG)
    bad = TOKEN_ABUSE[kind]()
    with client(kbs) as c:
        answers = [
            retrieve(c, token=bad),
            c.post(
                f"/knowledgebases/policies/retrieve?api-version={GA}",
                json=BODY,
                headers={"api-key": QUERY, HEADER: f"Bearer {bad}", "accept": "text/event-stream"},
            ),
        ]
    for response in answers:
        assert response.status_code == 401, (kind, response.text)
        error = response.json()["error"]
        assert error["code"] == "Unauthorized" and error["message"].startswith("Access denied")
        assert bad not in response.text and "references" not in response.json()
    signature = bad.rpartition(".")[2]
    assert bad not in caplog.text and (len(signature) < 16 or signature not in caplog.text)
    assert QUERY not in caplog.text and ADMIN not in caplog.text


def test_a_token_header_on_a_server_without_token_validation_is_refused(kbs):
    with client(kbs, tokens=None) as c:
        response = retrieve(c, token=MINT.hs256("alice", ["acme"]))
    assert response.status_code == 401
    assert "no token validation is configured" in response.json()["error"]["message"]


def test_a_knowledge_base_that_requires_identity_answers_401_without_a_token(kbs):
    with client(kbs, require_identity=["policies"]) as c:
        refused = retrieve(c)
        assert refused.status_code == 401
        assert "requires a caller identity" in refused.json()["error"]["message"]
        assert documents(retrieve(c, kb="other")) == ["holidays"]
        assert documents(retrieve(c, token=MINT.hs256("alice", ["acme"])))[0] == "acme-ceo"


def test_require_identity_without_token_validation_does_not_start():
    with pytest.raises(ValueError, match="require_identity needs token validation"):
        ServerSettings(require_identity=["*"], read_env_keys=False)


@pytest.mark.parametrize(
    "jwks", ["http://login.example/keys", "HTTP://127.0.0.1:9/keys", "ftp://x/keys"]
)
def test_a_jwks_url_that_is_not_https_does_not_start(jwks):
    with pytest.raises(ValueError, match=r"must be fetched over https://"):
        TokenSettings(issuer=ISSUER, audience=AUDIENCE, jwks=jwks)


def test_an_https_jwks_url_starts_and_fetches_keys_on_first_use():
    tokens = TokenSettings(issuer=ISSUER, audience=AUDIENCE, jwks="https://login.example/keys")
    assert settings(tokens=tokens).access_policy().tokens.remote  # nothing fetched yet


def test_a_scoped_query_key_retrieves_from_its_knowledge_base_only(kbs, caplog):
    caplog.set_level(logging.DEBUG)
    with client(kbs) as c:
        assert documents(retrieve(c, key=SCOPED)) == ["holidays"]
        elsewhere = retrieve(c, kb="other", key=SCOPED)
        missing = retrieve(c, kb="no-such-kb", key=SCOPED)
        listing = c.get(f"/knowledgebases?api-version={GA}", headers={"api-key": SCOPED})
        assert documents(retrieve(c, kb="other", key=QUERY)) == ["holidays"]
    for refused in (elsewhere, missing, listing):
        assert refused.status_code == 403, refused.text
        assert SCOPED not in refused.text
    assert elsewhere.json()["error"]["message"] == (
        "This query key is not valid for the knowledge base 'other'."
    )
    assert SCOPED not in caplog.text


def test_scoped_keys_come_from_the_environment_too(kbs, monkeypatch):
    monkeypatch.setenv("AGENTIC_RETRIEVAL_API_KEYS", "query@other|policies:env-scoped-key")
    with client(kbs, read_env_keys=True, scoped_query_keys=[]) as c:
        assert retrieve(c, kb="other", key="env-scoped-key").status_code == 200
        assert retrieve(c, kb="policies", key="env-scoped-key").status_code == 200
        assert retrieve(c, kb="policies", key="wrong").status_code == 401


def test_enforcement_follows_token_configuration_unless_set(kbs, tmp_path):
    from agentic_retrieval.sources.local import LocalKnowledgeSource

    legacy = LocalKnowledgeSource("legacy", tmp_path / "legacy.sqlite", create=True)
    legacy.add_documents([{"id": "old", "text": "old vacation days rules"}])
    kb = [KnowledgeBase([legacy], name="policies")]
    with client(kb) as c:  # tokens configured: enforced, the unmarked store is an error
        response = retrieve(c)
        assert response.status_code == 206
        assert response.json()["references"] == []
        assert response.json()["activity"][0]["error"]["code"] == "PermissionsNotEnforced"
    with client(kb, enforce_permissions=False) as c:
        assert documents(retrieve(c)) == ["old"]
    legacy.close()
