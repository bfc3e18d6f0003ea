"""Azure's retrieve event stream (2026-10-01 GA / 2026-08-01-preview) over REST and Python.

The event names, order and data shapes are those of the reference's stream example
(``KnowledgeBaseRetrieveStream.json``): they are written out here so the contract is tested on
a fresh clone too, and compared with the example itself when ``../shared`` is present.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from langchain_core.messages import AIMessageChunk
from langchain_core.outputs import ChatGenerationChunk
from tests.fakes import FailingSource
from tests.server_harness import parse_sse

from agentic_retrieval import InMemoryKnowledgeSource, KnowledgeBase
from agentic_retrieval.server import ServerSettings, create_app
from agentic_retrieval.testing import ScriptedChatModel
from agentic_retrieval.wire.events import EXTENSIONS

GA = "2026-10-01"
URL = f"/knowledgebases/base-preview-test/retrieve?api-version={GA}"
STREAM = {"accept": "text/event-stream"}
REFERENCE = (
    Path(__file__).resolve().parents[2].parent
    / "shared/reference/azure-2026-08-01-preview/examples/KnowledgeBaseRetrieveStream.json"
)
# the reference example's request (messages, answerSynthesis, one searchIndex source)
REQUEST = {
    "messages": [{"role": "user", "content": [{"text": "hello world", "type": "text"}]}],
    "includeActivity": True,
    "outputMode": "answerSynthesis",
    "knowledgeSourceParams": [
        {
            "knowledgeSourceName": "ks-preview-test",
            "includeReferences": True,
            "includeReferenceSourceData": True,
            "kind": "searchIndex",
        }
    ],
}
# the data keys of each event in the reference example
RETRIEVAL_STARTED_KEYS = {"requestId", "knowledgeBaseName", "outputMode", "reasoningEffort"}
SEARCH_STARTED_KEYS = {"id", "type", "startedAt", "knowledgeSourceName"}
STEP_STARTED_KEYS = {"id", "type", "startedAt"}
SEARCH_COMPLETED_KEYS = {
    "type",
    "id",
    "knowledgeSourceName",
    "queryTime",
    "count",
    "startedAt",
    "completedAt",
    "elapsedMs",
    "searchIndexArguments",
}
ANSWER_COMPLETED_KEYS = {"messageIndex", "message"}
RESPONSE_COMPLETED_KEYS = {"statusCode", "response"}
REFERENCE_KEYS = {"type", "id", "activitySource", "sourceData", "rerankerScore", "docKey"}

PLAN = {"needs_retrieval": True, "queries": [{"query": "hello world"}, {"query": "greeting"}]}
ANSWER = "Hello! The documents greet the world [ref_id:0]."


def documents() -> list[dict[str, Any]]:
    return [
        {"key": "myDocKey1", "title": "high_doc", "content": "hello world, and a greeting"},
        {"key": "myDocKey2", "title": "other", "content": "a greeting to the whole world"},
    ]


class StreamingScriptedModel(ScriptedChatModel):
    """A scripted model that streams its tool call's arguments a few characters at a time."""

    piece: int = 7

    async def _astream(self, messages, stop=None, run_manager=None, **kwargs) -> AsyncIterator:
        for chunk in self._pieces(messages):
            yield chunk

    def _pieces(self, messages) -> Iterator[ChatGenerationChunk]:
        name = self.tool_name or "text"
        planned = dict(self.script.pop(name, messages))
        broken = planned.pop("_connection_drops", False)
        args = json.dumps(planned)
        for start in range(0, len(args), self.piece):
            call = {"name": name if start == 0 else None, "args": args[start : start + self.piece]}
            call |= {"id": "call_1" if start == 0 else None, "index": 0}
            yield ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=[call]))
            if broken and start > len(args) // 2:
                raise ConnectionError("the provider dropped the connection")


def knowledge_base(*, model: ScriptedChatModel | None = None, extra=()) -> KnowledgeBase:
    chat = model or ScriptedChatModel(
        script={"QueryPlan": [PLAN] * 4, "SynthesizedAnswer": [{"answer": ANSWER}] * 4},
        model_name="gpt-4o",
    )
    return KnowledgeBase(
        [InMemoryKnowledgeSource("ks-preview-test", documents()), *extra],
        name="base-preview-test",
        chat_model=chat,
    )


def stream(kb: KnowledgeBase, body: dict, headers: dict | None = None):
    app = create_app(kb, settings=ServerSettings(read_env_keys=False), mcp=False)
    with TestClient(app) as c:
        return c.post(URL, json=body, headers=STREAM | (headers or {}))


def collapse(names: list[str]) -> list[str]:
    """Event names with each run of activity events folded into one ``activity.*``."""
    out: list[str] = []
    for name in names:
        name = "activity.*" if name.startswith("activity.") else name
        if not out or out[-1] != name:
            out.append(name)
    return out


def test_the_stream_has_the_reference_events_in_order_with_their_shapes():
    r = stream(knowledge_base(), REQUEST)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(r.text)
    names = [n for n, _ in events]
    assert collapse(names) == [
        "retrieval.started",
        "activity.*",
        "answer.completed",
        "references.completed",
        "response.completed",
    ]
    data = {n: d for n, d in events}
    started = data["retrieval.started"]
    assert set(started) == RETRIEVAL_STARTED_KEYS
    assert started["requestId"] == r.headers["x-ms-request-id"]
    assert started["knowledgeBaseName"] == "base-preview-test"
    assert started["outputMode"] == "answerSynthesis"
    assert started["reasoningEffort"] == {"kind": "low"}  # the default with a chat model

    steps = [(n, d) for n, d in events if n.startswith("activity.")]
    for name, record in steps:
        if name == "activity.started":
            expected = SEARCH_STARTED_KEYS if "knowledgeSourceName" in record else STEP_STARTED_KEYS
            assert set(record) == expected
        elif record["type"] == "searchIndex":
            assert SEARCH_COMPLETED_KEYS <= set(record)
    types = [d["type"] for n, d in steps if n == "activity.completed"]
    assert types == [
        "modelQueryPlanning",
        "searchIndex",
        "searchIndex",
        "semanticReranker",
        "modelAnswerSynthesis",
        "agenticReasoning",
    ]
    answer_records = [d for n, d in steps if n == "activity.completed" and "model" in d]
    assert [d["model"] for d in answer_records] == [{"modelName": "gpt-4o"}] * 2

    answer = data["answer.completed"]
    assert set(answer) == ANSWER_COMPLETED_KEYS and answer["messageIndex"] == 0
    assert answer["message"]["content"] == [{"type": "text", "text": ANSWER}]
    references = data["references.completed"]
    assert isinstance(references, list) and references
    assert all(REFERENCE_KEYS <= set(ref) for ref in references)
    final = data["response.completed"]
    assert set(final) == RESPONSE_COMPLETED_KEYS and final["statusCode"] == 200
    assert final["response"]["references"] == references
    assert final["response"]["response"][0] == answer["message"]


def test_activity_ids_pair_up_follow_start_order_and_are_the_responses_ids():
    kb = knowledge_base()
    events = parse_sse(stream(kb, REQUEST).text)
    started = [d for n, d in events if n == "activity.started"]
    completed = [d for n, d in events if n == "activity.completed"]
    assert [d["id"] for d in started] == list(range(len(started)))  # numbered as they start
    by_id = {d["id"]: d for d in completed}
    assert sorted(by_id) == [d["id"] for d in started]  # each started step completes once
    for step in started:
        done = by_id[step["id"]]
        assert (done["type"], done["startedAt"]) == (step["type"], step["startedAt"])
        assert done.get("knowledgeSourceName") == step.get("knowledgeSourceName")
    # a completed event comes after its started event
    position = {(n, d["id"]): i for i, (n, d) in enumerate(events) if n.startswith("activity.")}
    assert all(
        position[("activity.started", i)] < position[("activity.completed", i)] for i in by_id
    )
    final = dict(events)["response.completed"]["response"]
    assert [(r["id"], r["type"], r["startedAt"]) for r in final["activity"]] == [
        (d["id"], d["type"], d["startedAt"]) for d in sorted(completed, key=lambda d: d["id"])
    ]
    searches = {d["id"] for d in completed if d["type"] == "searchIndex"}
    assert {ref["activitySource"] for ref in final["references"]} <= searches


async def test_parallel_searches_keep_stream_and_response_ids_the_same():
    """Eight sources × two subqueries start within microseconds of each other."""
    sources = [InMemoryKnowledgeSource(f"s{i}", documents()) for i in range(8)]
    plan = {"needs_retrieval": True, "queries": [{"query": "hello"}, {"query": "greeting"}]}
    kb = KnowledgeBase(sources, chat_model=ScriptedChatModel(script={"QueryPlan": [plan] * 5}))
    for _ in range(5):
        events = [e async for e in kb.astream({"messages": REQUEST["messages"]})]
        started = [e["data"] for e in events if e["event"] == "activity.started"]
        final = events[-1]["data"]["response"]["activity"]
        assert len(started) == len(final) == 1 + 16 + 1 + 1  # plan, searches, rerank, summary
        assert [(s["id"], s["type"], s.get("knowledgeSourceName")) for s in started] == [
            (r["id"], r["type"], r.get("knowledgeSourceName")) for r in final
        ]


def test_a_failing_source_is_a_206_response_completed():
    kb = knowledge_base(extra=[FailingSource(name="broken")])
    events = parse_sse(stream(kb, {"intents": [{"search": "hello world"}]}).text)
    assert collapse([n for n, _ in events])[-2:] == ["references.completed", "response.completed"]
    assert "answer.completed" not in dict(events)  # extractiveData: no answer event
    final = dict(events)["response.completed"]
    assert final["statusCode"] == 206
    failed = [d for n, d in events if n == "activity.completed" and "error" in d]
    assert [d["knowledgeSourceName"] for d in failed] == ["broken"]


def test_fail_on_error_ends_the_stream_with_an_error_event_and_the_activity_so_far():
    kb = knowledge_base(extra=[FailingSource(name="broken")])
    body = {
        "intents": [{"search": "hello world"}],
        "knowledgeSourceParams": [
            {"knowledgeSourceName": "broken", "kind": "searchIndex", "failOnError": True}
        ],
    }
    events = parse_sse(stream(kb, body).text)
    names = [n for n, _ in events]
    assert names[0] == "retrieval.started" and names[-1] == "error"
    assert "response.completed" not in names and "references.completed" not in names
    error = events[-1][1]
    assert set(error) == {"error", "activity"}
    assert error["error"]["code"] == "KnowledgeSourceFailed"
    assert error["error"]["target"] == "broken"
    completed = [d for n, d in events if n == "activity.completed"]
    assert error["activity"] == completed and completed


def test_preflight_errors_stay_plain_json():
    for body, headers in (
        ({"intents": []}, {}),
        (REQUEST, {"x-agentic-retrieval-events": "answer.delta, telepathy"}),
    ):
        r = stream(knowledge_base(), body, headers)
        assert r.status_code == 400 and r.headers["content-type"].startswith("application/json")
    assert "telepathy" in r.json()["error"]["message"]
    assert all(name in r.json()["error"]["message"] for name in EXTENSIONS)


def test_include_activity_false_streams_no_activity_events():
    events = parse_sse(stream(knowledge_base(), REQUEST | {"includeActivity": False}).text)
    names = [n for n, _ in events]
    assert not [n for n in names if n.startswith("activity.")]
    assert names[-1] == "response.completed"
    assert "activity" not in events[-1][1]["response"]


def test_answer_deltas_are_opt_in_and_add_up_to_the_unchecked_answer():
    answer = "Hello [ref_id:0], and an invented [ref_id:9]."
    script = {"QueryPlan": [PLAN] * 2, "SynthesizedAnswer": [{"answer": answer}] * 2}
    model = StreamingScriptedModel(script=script)
    kb = knowledge_base(model=model)
    plain = parse_sse(stream(kb, REQUEST).text)
    assert "answer.delta" not in [n for n, _ in plain]
    events = parse_sse(stream(kb, REQUEST, {"x-agentic-retrieval-events": "answer.delta"}).text)
    names = [n for n, _ in events]
    deltas = [d for n, d in events if n == "answer.delta"]
    assert len(deltas) > 3  # streamed in pieces, not in one block
    assert "".join(d["delta"] for d in deltas) == answer
    assert all(d["messageIndex"] == 0 and "restart" not in d for d in deltas)
    assert names.index("answer.delta") > names.index("retrieval.started")
    assert max(i for i, n in enumerate(names) if n == "answer.delta") < names.index(
        "answer.completed"
    )
    # the deltas are the model's text; answer.completed has the checked citations
    final = dict(events)["answer.completed"]["message"]["content"][0]["text"]
    assert "[ref_id:9]" not in final and "[ref_id:0]" in final


async def test_answer_deltas_restart_when_the_model_is_asked_again():
    """The first answer breaks off half-way: the retry's text replaces what was streamed."""
    first = {"answer": "A first draft that never finishes", "_connection_drops": True}
    script = {"QueryPlan": [PLAN], "SynthesizedAnswer": [first, {"answer": "Again [ref_id:0]."}]}
    kb = knowledge_base(model=StreamingScriptedModel(script=script, piece=5))
    events = [e async for e in kb.astream(REQUEST, extensions=["answer.delta"])]
    deltas = [e["data"] for e in events if e["event"] == "answer.delta"]
    assert [i for i, d in enumerate(deltas) if d.get("restart")] == [
        next(i for i, d in enumerate(deltas) if d["delta"].startswith("Ag"))
    ]
    text = ""
    for d in deltas:
        text = d["delta"] if d.get("restart") else text + d["delta"]
    assert text == "Again [ref_id:0]."
    assert events[-1]["data"]["response"]["response"][0]["content"][0]["text"] == text


async def test_progress_events_are_an_extension_in_python_too():
    kb = knowledge_base()
    events = [e async for e in kb.astream(REQUEST, extensions={"progress"})]
    steps = [e["data"]["step"] for e in events if e["event"] == "progress"]
    assert steps[0] == "planning" and "reranking" in steps and steps[-1] == "done"
    with pytest.raises(ValueError, match="unknown stream extension"):
        [e async for e in kb.astream(REQUEST, extensions={"nope"})]


def test_our_stream_matches_the_reference_example_event_by_event():
    if not REFERENCE.is_file():
        pytest.skip("../shared/reference is absent (fresh clone)")
    example = json.loads(REFERENCE.read_text())
    theirs = parse_sse(example["responses"]["200"]["body"])
    assert example["parameters"]["retrievalRequest"] == REQUEST
    ours = parse_sse(stream(knowledge_base(), REQUEST).text)
    assert collapse([n for n, _ in ours]) == collapse([n for n, _ in theirs])
    mine = {n: d for n, d in ours}
    for name, data in theirs:
        if name in ("retrieval.started", "answer.completed", "response.completed"):
            assert set(mine[name]) == set(data), name
        if name == "references.completed":
            assert set(data[0]) - {"citationUrl"} <= set(mine[name][0])
    for name, data in [(n, d) for n, d in theirs if n.startswith("activity.")]:
        same = [d for n, d in ours if n == name and d["type"] == data["type"]]
        assert same, (name, data["type"])
        keys = set(data) - {"reasoningTokens", "retrievalReasoningEffort", "logicalReasoningEffort"}
        # the reference's search record names its semantic configuration and field lists,
        # which our sources do not have; every other field is there
        keys -= {"searchIndexArguments"} if name == "activity.completed" else set()
        assert keys <= set(same[0]), (name, keys - set(same[0]))
