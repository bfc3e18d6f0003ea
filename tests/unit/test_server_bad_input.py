"""Hostile and careless input: each case gets its documented 4xx in Azure's shape, never 500."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from tests.server_harness import intents_body, transit_kb

from agentic_retrieval.server import ServerSettings, create_app

URL = "/knowledgebases/transit/retrieve?api-version=2026-04-01"
LIMIT = 1024 * 1024


def text_message(text):
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def raw(obj) -> bytes:
    return json.dumps(obj).encode()


def _nested(depth):
    value = {}
    for _ in range(depth):
        value = {"a": value}
    return value


# (case id, body bytes, expected status, text the error message must contain)
CASES = [
    ("malformed-json", b'{"intents": [', 400, "malformed JSON"),
    ("invalid-utf8", b'\xff\xfe{"intents": 1}', 400, "malformed JSON"),
    ("empty-body", b"", 400, "empty"),
    ("json-array", raw([intents_body("x")]), 400, "JSON object"),
    ("json-null", b"null", 400, "JSON object"),
    ("json-string", b'"bike fares"', 400, "JSON object"),
    ("intents-wrong-type", raw({"intents": "bike fares"}), 400, "intents"),
    ("intent-search-wrong-type", raw({"intents": [{"search": 42}]}), 400, "intents.0.search"),
    (
        "effort-wrong-type",
        raw({**intents_body("x"), "retrievalReasoningEffort": 5}),
        400,
        "retrievalReasoningEffort",
    ),
    (
        "effort-unknown",
        raw({**intents_body("x"), "retrievalReasoningEffort": "maximal"}),
        400,
        "retrievalReasoningEffort",
    ),
    ("output-mode-unknown", raw({**intents_body("x"), "outputMode": "poem"}), 400, "outputMode"),
    (
        "minimal-with-answer",
        raw({**intents_body("x"), "outputMode": "answerSynthesis"}),
        400,
        "answerSynthesis",
    ),
    ("huge-search-string", raw(intents_body("fare " * 4000)), 400, "intents.0.search"),
    (
        "huge-filter",
        raw(
            intents_body(
                "x",
                knowledgeSourceParams=[
                    {"knowledgeSourceName": "fares", "filterAddOn": "a eq 1 or " * 4000}
                ],
            )
        ),
        400,
        "filterAddOn",
    ),
    ("body-over-limit", raw(intents_body("x" * (LIMIT + 10))), 413, "larger than the limit"),
    (
        "deeply-nested-json",
        b'{"intents": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
        400,
        "malformed JSON",
    ),
    ("nested-unknown-field", raw({**intents_body("x"), "extra": _nested(300)}), 400, "extra"),
    ("unknown-top-level-field", raw({**intents_body("x"), "bogus": 1}), 400, "bogus"),
    ("unknown-intent-field", raw({"intents": [{"search": "x", "boost": 2}]}), 400, "boost"),
    ("empty-messages", raw({"messages": []}), 400, "messages"),
    (
        "blank-message-text",
        raw({"messages": [text_message("   ")], "retrievalReasoningEffort": {"kind": "minimal"}}),
        400,
        "messages",
    ),
    ("message-without-content", raw({"messages": [{"role": "user"}]}), 400, "content"),
    ("no-question-at-all", raw({}), 400, "intents"),
    ("empty-intents", raw({"intents": []}), 400, "intents"),
    (
        "too-many-intents",
        raw({"intents": [{"search": f"q{i}"} for i in range(11)]}),
        400,
        "intents",
    ),
    (
        "negative-runtime",
        raw(intents_body("x", maxRuntimeInSeconds=-1)),
        400,
        "maxRuntimeInSeconds",
    ),
    (
        "oversized-runtime",
        raw(intents_body("x", maxRuntimeInSeconds=100_000)),
        400,
        "maxRuntimeInSeconds",
    ),
    ("zero-output-size", raw(intents_body("x", maxOutputSize=0)), 400, "maxOutputSize"),
    ("oversized-output-size", raw(intents_body("x", maxOutputSize=10**12)), 400, "maxOutputSize"),
    (
        "negative-token-size",
        raw(intents_body("x", maxOutputSizeInTokens=-5)),
        400,
        "maxOutputSizeInTokens",
    ),
    (
        "threshold-out-of-scale",
        raw(
            intents_body(
                "x",
                knowledgeSourceParams=[{"knowledgeSourceName": "fares", "rerankerThreshold": 9}],
            )
        ),
        400,
        "rerankerThreshold",
    ),
    (
        "duplicate-source-params",
        raw(
            intents_body(
                "x",
                knowledgeSourceParams=[
                    {"knowledgeSourceName": "fares"},
                    {"knowledgeSourceName": "fares"},
                ],
            )
        ),
        400,
        "twice",
    ),
    (
        "bad-filter-syntax",
        raw(
            intents_body(
                "x",
                knowledgeSourceParams=[
                    {"knowledgeSourceName": "fares", "filterAddOn": "title eq 'x"}
                ],
            )
        ),
        400,
        "filterAddOn",
    ),
    (
        "filter-injection",
        raw(
            intents_body(
                "x",
                knowledgeSourceParams=[
                    {"knowledgeSourceName": "fares", "filterAddOn": "'; DROP TABLE chunks; --"}
                ],
            )
        ),
        400,
        "filterAddOn",
    ),
    (
        "unknown-source",
        raw(intents_body("x", knowledgeSourceParams=[{"knowledgeSourceName": "ghost"}])),
        404,
        "ghost",
    ),
    (
        "include-activity-wrong-type",
        raw(intents_body("x", includeActivity="yes please")),
        400,
        "includeActivity",
    ),
]


@pytest.fixture(scope="module")
def client():
    app = create_app(transit_kb(), settings=ServerSettings(read_env_keys=False), mcp=False)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize(
    ("body", "status", "needle"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_gets_the_documented_4xx(client, body, status, needle):
    r = client.post(URL, content=body, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text[:300]
    error = r.json()["error"]
    assert set(error) == {"code", "message", "details"}
    assert needle in error["message"]
    assert len(r.content) < 10_000  # the body is never echoed back


def test_the_same_server_still_answers_after_all_that(client):
    r = client.post(URL, json=intents_body("bike unlock"))
    assert r.status_code == 200
    assert r.json()["references"][0]["docKey"] == "fare-bike"
