"""The default effort without a chat model: every interface runs the model-free tier and says
so once; an effort (or output mode) the caller chose that needs a model is an error in the
interface's own terms (issue 11, item 8)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from langchain_core.messages import HumanMessage
from mcp import Client
from tests.fakes import user
from tests.server_harness import transit_kb
from typer.testing import CliRunner

from agentic_retrieval import Context, KnowledgeBase, build_graph
from agentic_retrieval.cli import app as cli_app
from agentic_retrieval.errors import ModelRequiredError
from agentic_retrieval.graph.effort import INTENTS_AT_MEDIUM_NOTE, NO_MODEL_NOTE
from agentic_retrieval.server import ServerSettings, create_app
from agentic_retrieval.server.mcp import build_mcp_server
from agentic_retrieval.testing import ScriptedChatModel

GA = "2026-04-01"
NOTE = (
    "no chat model is configured, so the model-free tier ran (minimal effort: the question "
    "searched as asked, no query planning); set AGENTIC_RETRIEVAL_CHAT_MODEL (e.g. "
    "openai:gpt-4.1-mini) to plan at low or medium effort"
)
REASONING_WITHOUT_MODEL = {
    "type": "agenticReasoning",
    "retrievalReasoningEffort": {"kind": "minimal"},
    "reasoningTokens": 0,
    "inputTokens": 0,
    "outputTokens": 0,
    "iterations": 0,
    "warning": NOTE,
}


@pytest.fixture(autouse=True)
def no_model_in_env(monkeypatch):
    monkeypatch.delenv("AGENTIC_RETRIEVAL_CHAT_MODEL", raising=False)


def reasoning(records: list[dict]) -> list[dict]:
    """The agenticReasoning records, without their run-dependent id and time."""
    return [
        {k: v for k, v in r.items() if k not in ("id", "elapsedMs", "startedAt", "completedAt")}
        for r in records
        if r["type"] == "agenticReasoning"
    ]


def test_the_note_is_the_documented_text():
    assert NO_MODEL_NOTE == NOTE


# --- Python --------------------------------------------------------------------------------


def test_python_default_runs_model_free_and_says_so_once(toy_source):
    response = KnowledgeBase([toy_source]).retrieve({"messages": [user("lost items")]})
    assert response.status_code == 200
    assert response.references[0].doc_key == "lost"
    activity = [r.to_wire() for r in response.activity]
    assert [r["type"] for r in activity] == ["searchIndex", "semanticReranker", "agenticReasoning"]
    assert reasoning(activity) == [REASONING_WITHOUT_MODEL]


def test_python_default_with_a_model_plans_at_low_and_adds_no_note(toy_source):
    plan = {"needs_retrieval": True, "queries": [{"query": "lost property"}]}
    model = ScriptedChatModel(script={"QueryPlan": [plan]})
    response = KnowledgeBase([toy_source], chat_model=model).retrieve(
        {"messages": [user("I left my bag on a tram")]}
    )
    assert model.script.count() == 1
    (record,) = reasoning([r.to_wire() for r in response.activity])
    assert record["retrievalReasoningEffort"] == {"kind": "low"}
    assert "warning" not in record


def test_python_intents_need_no_model_and_no_note(toy_source):
    response = KnowledgeBase([toy_source]).retrieve({"intents": [{"search": "lost items"}]})
    assert [r.type for r in response.activity] == ["searchIndex", "semanticReranker"]


@pytest.mark.parametrize(
    ("request_extra", "defaults", "message"),
    [
        (
            {"retrievalReasoningEffort": {"kind": "low"}},
            None,
            "retrievalReasoningEffort 'low' needs a chat model for planning and none is "
            "configured: pass chat_model= to KnowledgeBase/build_graph or set "
            "AGENTIC_RETRIEVAL_CHAT_MODEL (e.g. openai:gpt-4.1-mini), or leave the effort "
            "unset (or minimal) to search without one",
        ),
        (
            {},
            Context(reasoning_effort="medium"),
            "reasoning_effort 'medium' needs a chat model for planning and none is "
            "configured: pass chat_model= to KnowledgeBase/build_graph or set "
            "AGENTIC_RETRIEVAL_CHAT_MODEL (e.g. openai:gpt-4.1-mini), or leave the effort "
            "unset (or minimal) to search without one",
        ),
        (
            {"outputMode": "answerSynthesis"},
            None,
            "outputMode 'answerSynthesis' needs a chat model for answer and none is "
            "configured: pass chat_model= to KnowledgeBase/build_graph or set "
            "AGENTIC_RETRIEVAL_CHAT_MODEL (e.g. openai:gpt-4.1-mini), or use extractiveData "
            "to get the ranked passages without one",
        ),
    ],
    ids=["request-low", "defaults-medium", "answer-synthesis"],
)
def test_python_chosen_effort_needing_a_model_names_the_argument(
    toy_source, request_extra, defaults, message
):
    kb = KnowledgeBase([toy_source], defaults=defaults)
    with pytest.raises(ModelRequiredError) as caught:
        kb.retrieve({"messages": [user("lost items")], **request_extra})
    assert str(caught.value) == message


def test_graph_default_without_a_model_runs_model_free(toy_source):
    """Studio and build_graph callers run the graph directly: the same decision applies."""
    graph = build_graph([toy_source])
    output = graph.invoke({"messages": [HumanMessage("lost items")]}, context=Context())
    assert output["references"][0]["docKey"] == "lost"
    assert reasoning(output["activity"]) == [REASONING_WITHOUT_MODEL]


# --- REST ----------------------------------------------------------------------------------


def rest(body: dict) -> tuple[int, dict]:
    app = create_app(transit_kb(), settings=ServerSettings(read_env_keys=False), mcp=False)
    with TestClient(app) as client:
        r = client.post(f"/knowledgebases/transit/retrieve?api-version={GA}", json=body)
    return r.status_code, r.json()


def message(text: str) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def test_rest_without_effort_is_200_with_the_note():
    status, body = rest({"messages": [message("When does the last tram leave on Sunday?")]})
    assert status == 200
    assert body["references"][0]["docKey"] == "hours-sunday"
    assert reasoning(body["activity"]) == [REASONING_WITHOUT_MODEL]


@pytest.mark.parametrize(
    ("extra", "text"),
    [
        (
            {"retrievalReasoningEffort": {"kind": "medium"}},
            """'retrievalReasoningEffort' {"kind": "medium"} needs a chat model for planning, """
            "and this service has none configured: omit 'retrievalReasoningEffort' (the "
            "model-free tier runs), or start the service with AGENTIC_RETRIEVAL_CHAT_MODEL set.",
        ),
        (
            {"outputMode": "answerSynthesis"},
            """'outputMode' "answerSynthesis" needs a chat model for answer, and this service """
            "has none configured: omit 'outputMode' (the ranked passages are returned), or "
            "start the service with AGENTIC_RETRIEVAL_CHAT_MODEL set.",
        ),
    ],
    ids=["effort", "output-mode"],
)
def test_rest_chosen_effort_without_a_model_is_400_naming_the_field(extra, text):
    status, body = rest({"messages": [message("fares?")], **extra})
    assert status == 400
    assert body["error"]["code"] == "InvalidRequest"
    assert body["error"]["message"] == text


@pytest.mark.parametrize("with_model", [False, True], ids=["no-model", "model"])
def test_rest_intents_at_medium_say_no_evidence_check_ran(with_model):
    """The caller planned: medium has nothing to assess, and the 200 says so, model or not."""
    model = ScriptedChatModel(script={}) if with_model else None
    app = create_app(
        transit_kb(chat_model=model), settings=ServerSettings(read_env_keys=False), mcp=False
    )
    body = {
        "intents": [{"type": "semantic", "search": "last tram Sunday"}],
        "retrievalReasoningEffort": {"kind": "medium"},
    }
    with TestClient(app) as client:
        r = client.post(f"/knowledgebases/transit/retrieve?api-version={GA}", json=body)
    assert r.status_code == 200
    assert r.json()["references"][0]["docKey"] == "hours-sunday"
    (record,) = reasoning(r.json()["activity"])
    assert record["warning"] == INTENTS_AT_MEDIUM_NOTE
    assert "no evidence check ran" in record["warning"]
    assert record["iterations"] == 0
    if model is not None:
        assert model.script.count() == 0


# --- command line --------------------------------------------------------------------------


@pytest.fixture
def kb_dir(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "ferries.md").write_text(
        "# Ferries\n\nThe harbour ferry to Gull Island leaves every 40 minutes from Pier 3.\n"
    )
    result = CliRunner().invoke(
        cli_app, ["index", "--kb", str(tmp_path / "kb"), "--source", "guides", str(docs)]
    )
    assert result.exit_code == 0, result.output
    return tmp_path / "kb"


@pytest.mark.parametrize("as_json", [False, True], ids=["readable", "json"])
def test_cli_default_runs_model_free_and_says_so_once_on_stderr(kb_dir, as_json):
    args = ["retrieve", "--kb", str(kb_dir), "how often does the Gull Island ferry leave?"]
    result = CliRunner().invoke(cli_app, args + (["--json"] if as_json else []))
    assert result.exit_code == 0, result.output
    assert result.stderr.count(NOTE) == 1
    assert f"note: {NOTE}" in result.stderr
    if as_json:
        body = json.loads(result.stdout)
        assert reasoning(body["activity"]) == [REASONING_WITHOUT_MODEL]
    else:
        assert NOTE not in result.stdout
        assert "Gull Island leaves every 40 minutes" in result.stdout


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (
            ["--effort", "low"],
            "error: --effort low needs a chat model (planning) and none is configured: set "
            "AGENTIC_RETRIEVAL_CHAT_MODEL (e.g. openai:gpt-4.1-mini), or leave --effort out "
            "to search without one",
        ),
        (
            ["--output-mode", "answerSynthesis"],
            "error: --output-mode answerSynthesis needs a chat model to write the answer and "
            "none is configured: set AGENTIC_RETRIEVAL_CHAT_MODEL (e.g. openai:gpt-4.1-mini), "
            "or leave --output-mode out to get the ranked passages",
        ),
    ],
    ids=["effort", "output-mode"],
)
def test_cli_chosen_effort_without_a_model_names_the_flag(kb_dir, args, text):
    result = CliRunner().invoke(cli_app, ["retrieve", "--kb", str(kb_dir), *args, "ferry"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == text + "\n"


# --- MCP -----------------------------------------------------------------------------------


async def call_tool(arguments: dict) -> tuple[bool, dict | None, str]:
    async with Client(build_mcp_server(transit_kb())) as client:
        result = await client.call_tool("knowledge_base_retrieve", arguments)
    text = result.content[0].text if result.content else ""
    return result.is_error, result.structured_content, text


async def test_mcp_default_runs_model_free_with_the_note():
    is_error, data, _ = await call_tool({"query": "When does the last tram leave on Sunday?"})
    assert not is_error
    assert data["references"][0]["docKey"] == "hours-sunday"
    assert data["note"] == NOTE


async def test_mcp_minimal_has_no_note():
    is_error, data, _ = await call_tool({"query": "last tram sunday", "effort": "minimal"})
    assert not is_error and data.get("note") is None


async def test_mcp_chosen_effort_without_a_model_names_the_argument():
    is_error, _, text = await call_tool({"query": "fares", "effort": "low"})
    assert is_error
    assert text == (
        "Error executing tool knowledge_base_retrieve: "
        "effort 'low' needs a chat model (planning) and the server has none configured: "
        "leave 'effort' out to search without one, or start the server with "
        "AGENTIC_RETRIEVAL_CHAT_MODEL set"
    )
