"""The OpenAI-compatible endpoint in-process: request mapping, bounds, every error in OpenAI's
shape (including the server guard's), partial results, failures mid-stream.

The official client's view of the same endpoint is in tests/integration/test_openai_api.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.fakes import SlowSource, unreachable_index
from tests.server_harness import transit_kb

from agentic_retrieval.server import ServerSettings, create_app
from agentic_retrieval.testing import ScriptedChatModel

KEY = "admin-secret-key"
BEARER = {"Authorization": f"Bearer {KEY}"}
ASK = [{"role": "user", "content": "student harbor pass price"}]


def client(*extra: Any, chat_model: Any = None, **settings: Any) -> TestClient:
    kb = transit_kb(*extra, chat_model=chat_model)
    options = {"api_keys": [KEY], "read_env_keys": False, **settings}
    return TestClient(create_app(kb, settings=ServerSettings(**options), mcp=False))


def chat(c: TestClient, **body: Any) -> Any:
    return c.post(
        "/v1/chat/completions", json={"model": "transit", "messages": ASK, **body}, headers=BEARER
    )


def frames(text: str) -> list[Any]:
    """The data of each SSE frame (``[DONE]`` as the string)."""
    data = [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]
    return [d if d == "[DONE]" else json.loads(d) for d in data]


def assert_openai_error(body: dict[str, Any], code: str | None, param: str | None = None) -> None:
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == code
    assert body["error"]["param"] == param


# --- the guard's and the framework's errors, rewritten for /v1 -------------------------------


def test_no_key_is_a_401_in_openais_shape_while_azure_routes_keep_theirs():
    with client() as c:
        missing = c.post("/v1/chat/completions", json={"model": "transit", "messages": ASK})
        azure = c.post("/knowledgebases/transit/retrieve?api-version=2026-04-01", json={})
    assert missing.status_code == 401
    assert_openai_error(missing.json(), "invalid_api_key")
    assert missing.json()["error"]["type"] == "invalid_request_error"
    assert int(missing.headers["content-length"]) == len(missing.content)
    assert azure.status_code == 401
    assert set(azure.json()["error"]) == {"code", "message", "details"}


def test_an_oversized_body_is_a_413_in_openais_shape():
    with client(max_body_bytes=2048) as c:
        r = c.post(
            "/v1/chat/completions",
            json={"model": "transit", "messages": [{"role": "user", "content": "x" * 4000}]},
            headers=BEARER,
        )
    assert r.status_code == 413
    assert_openai_error(r.json(), "request_entity_too_large")


def test_unknown_paths_and_methods_answer_in_openais_shape():
    with client() as c:
        embeddings = c.post("/v1/embeddings", json={}, headers=BEARER)
        get = c.get("/v1/chat/completions", headers=BEARER)
    assert embeddings.status_code == 404
    assert_openai_error(embeddings.json(), "not_found")
    assert get.status_code == 405
    assert_openai_error(get.json(), "method_not_allowed")


# --- bad requests name the field --------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        ({"messages": ASK}, "model", "Field required"),
        ({"model": "transit", "messages": []}, "messages", "at least 1 item"),
        (
            {"model": "transit", "messages": [{"role": "robot", "content": "x"}]},
            "messages.0.role",
            "'system'",
        ),
        ({"model": "transit", "messages": ASK, "n": 2}, "n", "only one choice"),
        (
            {"model": "transit", "messages": ASK, "response_format": {"type": "j" * 5000}},
            "response_format",
            "only the type 'text' is supported",
        ),
        (
            {"model": "transit", "messages": ASK, "tool_choice": "required"},
            "tool_choice",
            "never calls tools",
        ),
        (
            {"model": "transit", "messages": ASK, "reasoning_effort": "high"},
            "reasoning_effort",
            "minimal, low, medium, auto",
        ),
        (
            {"model": "transit", "messages": [{"role": "system", "content": "Be brief."}]},
            "messages",
            "needs a user message",
        ),
        (
            {"model": "transit", "messages": ASK, "x_agentic_retrieval": {"intents": []}},
            "x_agentic_retrieval.intents",
            "set by the chat request",
        ),
        (
            {"model": "transit", "messages": ASK, "reasoning_effort": "x" * 5000},
            "reasoning_effort",
            "at most 32 characters",
        ),
        (
            {"model": "transit", "messages": [{"role": "user", "content": "x" * 200_001}]},
            "messages.0.content",
            "at most 200000",
        ),
    ],
)
def test_bad_requests_are_400s_naming_the_field(body, param, says):
    with client(max_body_bytes=1024 * 1024) as c:
        r = c.post("/v1/chat/completions", json=body, headers=BEARER)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param
    assert says in error["message"]
    assert error["type"] == "invalid_request_error"
    assert len(r.content) < 1000  # what was sent is named, never echoed back


def test_malformed_json_is_a_400():
    with client() as c:
        r = c.post("/v1/chat/completions", content=b"{not json", headers=BEARER)
    assert r.status_code == 400
    assert_openai_error(r.json(), "malformed_json")


def test_a_bad_retrieve_field_in_the_extension_is_a_400_naming_the_extension():
    with client() as c:
        r = chat(c, x_agentic_retrieval={"maxOutputSize": 0})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "x_agentic_retrieval"
    assert "maxOutputSize" in r.json()["error"]["message"]


# --- the request mapping ----------------------------------------------------------------------


def test_roles_map_to_the_conversation_and_tool_turns_are_left_out():
    model = ScriptedChatModel(
        script={
            "QueryPlan": [{"needs_retrieval": True, "queries": [{"query": "harbor pass"}]}],
            "SynthesizedAnswer": [{"answer": "78 dollars [ref_id:0]."}],
        }
    )
    messages = [
        {"role": "developer", "content": "Answer briefly."},
        {"role": "user", "content": [{"type": "text", "text": "Harbor Pass price?"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "t", "type": "function"}]},
        {"role": "tool", "tool_call_id": "t", "content": "irrelevant tool output"},
        {"role": "user", "content": "And for students?"},
    ]
    with client(chat_model=model) as c:
        r = c.post(
            "/v1/chat/completions",
            json={"model": "transit", "messages": messages, "temperature": 0.2, "user": "u1"},
            headers=BEARER,
        )
    assert r.status_code == 200, r.text
    planned = model.script.calls[0][1]  # what the planner was shown
    shown = "\n".join(str(m.content) for m in planned)
    assert "Harbor Pass price?" in shown and "And for students?" in shown
    assert "irrelevant tool output" not in shown
    assert r.json()["choices"][0]["message"]["content"] == "78 dollars [ref_id:0]."


def test_extractive_data_can_be_asked_for_with_a_model_configured():
    with client(chat_model=ScriptedChatModel(script={})) as c:
        r = chat(
            c, x_agentic_retrieval={"outputMode": "extractiveData"}, reasoning_effort="minimal"
        )
    assert r.status_code == 200, r.text
    content = r.json()["choices"][0]["message"]["content"]
    assert content.startswith(
        "The passages the knowledge base 'transit' found (extractive data, not a written answer):"
    )
    assert r.json()["x_agentic_retrieval"]["outputMode"] == "extractiveData"


def test_per_source_settings_ride_in_the_extension():
    with client() as c:
        r = chat(
            c,
            x_agentic_retrieval={
                "knowledgeSourceParams": [
                    {"knowledgeSourceName": "fares", "neverQuerySource": True}
                ]
            },
        )
    searched = {
        a.get("knowledgeSourceName")
        for a in r.json()["x_agentic_retrieval"]["activity"]
        if "count" in a
    }
    assert searched == {"hours"}


def test_nothing_found_is_said_plainly():
    with client() as c:
        r = c.post(
            "/v1/chat/completions",
            json={"model": "transit", "messages": [{"role": "user", "content": "zeppelins"}]},
            headers=BEARER,
        )
    assert r.json()["choices"][0]["message"]["content"] == (
        "The knowledge base 'transit' found nothing for this question."
    )


# --- partial results and failures -------------------------------------------------------------


def test_a_failing_source_gives_a_200_whose_content_and_extension_say_which():
    with client(unreachable_index("timetables")) as c:
        r = chat(c)
    assert r.status_code == 200
    body = r.json()
    assert body["x_agentic_retrieval"]["statusCode"] == 206
    assert body["choices"][0]["message"]["content"].endswith(
        "(Note: the source 'timetables' failed (the index is unreachable), so this comes "
        "from the others only.)"
    )


FAIL_ON_ERROR = {
    "knowledgeSourceParams": [
        {"knowledgeSourceName": "timetables", "failOnError": True},
    ]
}


def test_a_fail_on_error_source_is_a_424_and_a_stream_error_frame():
    with client(unreachable_index("timetables")) as c:
        plain = chat(c, x_agentic_retrieval=FAIL_ON_ERROR)
        streamed = chat(c, x_agentic_retrieval=FAIL_ON_ERROR, stream=True)
    assert plain.status_code == 424
    assert_openai_error(plain.json(), "knowledge_source_failed", "x_agentic_retrieval")
    assert plain.json()["error"]["type"] == "upstream_error"
    assert "timetables" in plain.json()["error"]["message"]
    assert streamed.status_code == 200
    sent = frames(streamed.text)
    assert sent[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert sent[-1]["error"]["code"] == "knowledge_source_failed"
    assert "[DONE]" not in sent  # the client raises on the error frame


def test_a_run_out_of_time_with_nothing_ready_is_a_408_not_to_be_retried():
    with client(SlowSource(delay=5.0)) as c:
        r = chat(
            c,
            x_agentic_retrieval={
                "maxRuntimeInSeconds": 1,
                "knowledgeSourceParams": [
                    {"knowledgeSourceName": "fares", "neverQuerySource": True},
                    {"knowledgeSourceName": "hours", "neverQuerySource": True},
                ],
            },
        )
    assert r.status_code == 408
    assert r.headers["x-should-retry"] == "false"
    assert r.json()["error"]["type"] == "timeout_error"


def test_a_bug_is_a_500_with_a_request_id_and_nothing_else(monkeypatch, caplog):
    from agentic_retrieval.knowledge_base import KnowledgeBase

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(KnowledgeBase, "aretrieve", broken)
    with client() as c:
        r = chat(c)
    assert r.status_code == 500
    assert r.headers["x-should-retry"] == "false"
    assert "secret internals" not in r.text
    assert "request id" in r.json()["error"]["message"]
    assert "secret internals" in caplog.text


# --- streaming shape --------------------------------------------------------------------------


def test_a_stream_is_chunks_then_done():
    with client() as c:
        r = chat(c, stream=True, stream_options={"include_usage": True})
        whole = chat(c)  # the same answer as a whole completion
    assert r.headers["content-type"].startswith("text/event-stream")
    sent = frames(r.text)
    assert sent[-1] == "[DONE]"
    chunks = sent[:-1]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    stop = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"] == "stop"]
    assert len(stop) == 1 and stop[0]["x_agentic_retrieval"]["references"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 0
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == whole.json()["choices"][0]["message"]["content"]


def test_a_busy_server_is_a_429_in_openais_shape_keeping_retry_after():
    """The guard's 429 (max_in_flight) comes out of the rewriter as OpenAI clients expect."""
    from starlette.applications import Starlette

    from agentic_retrieval.server.errors import ApiError
    from agentic_retrieval.server.openai_errors import OpenAIErrorShape

    busy = ApiError(429, "More than 64 requests are in flight.", headers={"Retry-After": "1"})

    async def refuse(scope, receive, send):
        await busy.response()(scope, receive, send)

    app = Starlette()
    app.mount("/", refuse)
    with TestClient(OpenAIErrorShape(app)) as c:
        openai_path = c.post("/v1/chat/completions", json={})
        azure_path = c.post("/knowledgebases/x/retrieve", json={})
    assert openai_path.status_code == 429
    assert openai_path.headers["retry-after"] == "1"
    assert openai_path.json() == {
        "error": {
            "message": "More than 64 requests are in flight.",
            "type": "requests",
            "param": None,
            "code": "rate_limit_exceeded",
        }
    }
    assert azure_path.json()["error"]["code"] == "TooManyRequests"
