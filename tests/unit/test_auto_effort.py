"""The ``auto`` effort: starts model-free and escalates only as far as the question and its
results call for, on measured signals, with every decision recorded (issue 13)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from mcp import Client
from tests.fakes import RecordingSource, user
from tests.server_harness import transit_kb
from typer.testing import CliRunner

from agentic_retrieval import Context, KnowledgeBase
from agentic_retrieval.cli.app import app as cli_app
from agentic_retrieval.graph.effort import NO_MODEL_NOTE, count_asks, question_signals
from agentic_retrieval.server import ServerSettings, create_app
from agentic_retrieval.server.mcp import build_mcp_server
from agentic_retrieval.testing import ScriptedChatModel

AUTO = {"retrievalReasoningEffort": {"kind": "auto"}}
TWO_PART = "How much is a student Harbor Pass, and when does the last tram leave on Sunday?"


def run(source, messages, script, **kb_kwargs):
    model = ScriptedChatModel(script=script)
    kb = KnowledgeBase([source], chat_model=model, **kb_kwargs)
    response = kb.retrieve({"messages": messages, **AUTO})
    return response, model


def reasoning(response) -> dict:
    (record,) = [r.to_wire() for r in response.activity if r.type == "agenticReasoning"]
    return record


def moves(record: dict) -> list[tuple[str, str, str | None]]:
    return [(d["step"], d["tier"], d["escalateTo"]) for d in record["effortDecisions"]]


# --- the signals ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "asks"),
    [
        ("How much is a day pass?", 1),
        ("Which trams and buses run late?", 1),
        ("Where is the lost property office and how long are items kept?", 2),
        ("How much is a day pass? And the bike late fee?", 2),
        ("Which station is not step-free, and when will its lift open?", 2),
        ("Thanks! How much is a day pass?", 1),
    ],
)
def test_count_asks(question, asks):
    assert count_asks(question) == asks


def test_question_signals_of_a_follow_up():
    from langchain_core.messages import AIMessage, HumanMessage

    messages = [
        HumanMessage("How much is a day pass?"),
        AIMessage("6 euros."),
        HumanMessage("And for how long is it valid?"),
    ]
    signals = question_signals(messages, "And for how long is it valid?")
    assert (signals.prior_turns, signals.terms, signals.asks, signals.refers_back) == (
        1,
        2,
        1,
        True,
    )


# --- the tiers -----------------------------------------------------------------------------


def test_a_direct_factual_question_stops_at_the_model_free_tier(toy_source):
    response, model = run(toy_source, [user("How much does a day pass cost?")], script={})
    assert model.script.count() == 0
    assert response.references[0].doc_key == "fares"
    record = reasoning(response)
    assert record["retrievalReasoningEffort"] == {"kind": "minimal"}
    assert record["logicalReasoningEffort"] == {"kind": "auto"}
    assert (record["inputTokens"], record["outputTokens"]) == (0, 0)
    assert moves(record) == [("question", "minimal", None), ("results", "minimal", None)]
    question, results = record["effortDecisions"]
    assert question["reason"] == ("searched as asked: one ask of 4 content word(s), the first turn")
    assert question["signals"] == {"priorTurns": 0.0, "terms": 4.0, "asks": 1.0, "refersBack": 0.0}
    assert results["signals"]["topScore"] >= 2.65  # Context.auto_min_top_score
    assert results["signals"]["termCoverage"] == 1.0  # 'much' phrases the question
    assert results["reason"].startswith("results are strong: best passage ")
    assert [r.type for r in response.activity] == [
        "searchIndex",
        "semanticReranker",
        "agenticReasoning",
    ]


def test_a_two_part_question_escalates_to_planning_before_searching(toy_source):
    recording = RecordingSource(toy_source)
    plan = {
        "needs_retrieval": True,
        "queries": [{"query": "day pass price"}, {"query": "bike late fee"}],
    }
    response, model = run(
        recording,
        [user("How much is a day pass, and what is the late fee for a bike?")],
        script={"QueryPlan": [plan]},
    )
    assert model.script.count() == 1
    # the question was never searched as asked: only the planned subqueries were
    assert [q.text for q in recording.queries] == ["day pass price", "bike late fee"]
    assert {r.doc_key for r in response.references[:2]} == {"fares", "bike-fees"}
    record = reasoning(response)
    assert record["retrievalReasoningEffort"] == {"kind": "low"}
    assert record["logicalReasoningEffort"] == {"kind": "auto"}
    assert moves(record) == [("question", "minimal", "low"), ("results", "low", None)]
    assert record["effortDecisions"][0]["reason"] == (
        "2 distinct asks (auto_max_asks 1): planned as one subquery each"
    )
    assert record["inputTokens"] == 120 and record["outputTokens"] == 30
    types = [r.type for r in response.activity]
    assert types[0] == "modelQueryPlanning" and types.count("searchIndex") == 2


def test_a_context_dependent_follow_up_escalates_to_planning(toy_source):
    recording = RecordingSource(toy_source)
    conversation = [
        user("How much does a day pass cost?"),
        {"role": "assistant", "content": [{"type": "text", "text": "6 euros."}]},
        user("Until when is it valid?"),
    ]
    plan = {"needs_retrieval": True, "queries": [{"query": "day pass valid until"}]}
    response, model = run(recording, conversation, script={"QueryPlan": [plan]})
    assert model.script.count() == 1
    assert [q.text for q in recording.queries] == ["day pass valid until"]
    assert response.references[0].doc_key == "fares"
    record = reasoning(response)
    assert record["retrievalReasoningEffort"] == {"kind": "low"}
    assert record["effortDecisions"][0]["reason"] == (
        "a follow-up referring to the 1 earlier turn(s): the planner rewrites it with the "
        "conversation"
    )


def test_weak_results_escalate_to_planning_then_assessment_and_the_round_bound_holds(
    toy_source,
):
    recording = RecordingSource(toy_source)
    script = {
        "QueryPlan": [{"needs_retrieval": True, "queries": [{"query": "ferry timetable"}]}],
        "EvidenceAssessment": [
            {"is_sufficient": False, "confidence": 0.1, "followup_queries": ["harbour ferry"]},
            {"is_sufficient": False, "confidence": 0.1, "followup_queries": ["boat schedule"]},
        ],
    }
    response, model = run(
        recording, [user("When does the ferry to the island leave?")], script=script
    )
    # minimal round, planned round, one follow-up round (max_iterations 1): no more
    assert [q.text for q in recording.queries] == [
        "When does the ferry to the island leave?",
        "ferry timetable",
        "harbour ferry",
    ]
    assert model.script.count("QueryPlan") == 1
    assert model.script.count("EvidenceAssessment") == 2
    assert model.script.remaining() == {"QueryPlan": 0, "EvidenceAssessment": 0}
    record = reasoning(response)
    assert record["retrievalReasoningEffort"] == {"kind": "medium"}
    assert record["iterations"] == 1
    assert moves(record) == [
        ("question", "minimal", None),
        ("results", "minimal", "low"),
        ("results", "low", "medium"),
    ]
    assert record["effortDecisions"][1]["reason"] == "no passage was found"
    assert record["inputTokens"] == 3 * 120


def test_the_round_bound_is_max_iterations(toy_source):
    recording = RecordingSource(toy_source)
    script = {
        "QueryPlan": [{"needs_retrieval": True, "queries": [{"query": "ferry timetable"}]}],
        "EvidenceAssessment": [
            {"is_sufficient": False, "confidence": 0.1, "followup_queries": [f"ferry {i}"]}
            for i in range(5)
        ],
    }
    model = ScriptedChatModel(script=script)
    kb = KnowledgeBase([recording], chat_model=model, defaults=Context(max_iterations=2))
    response = kb.retrieve({"messages": [user("When does the ferry leave?")], **AUTO})
    assert [q.text for q in recording.queries][2:] == ["ferry 0", "ferry 1"]
    assert model.script.count("EvidenceAssessment") == 3
    assert reasoning(response)["iterations"] == 2


def test_a_greeting_goes_to_the_planner_which_may_answer_without_retrieving(toy_source):
    recording = RecordingSource(toy_source)
    plan = {"needs_retrieval": False, "assistant_message": "Hello! Ask me about trams."}
    response, _ = run(recording, [user("hello!")], script={"QueryPlan": [plan]})
    assert recording.queries == []
    assert response.text == "[]"
    record = reasoning(response)
    assert record["effortDecisions"][0]["reason"] == (
        "no searchable words: the planner decides whether retrieval is needed"
    )


def test_thresholds_are_context_fields(toy_source):
    """A stricter top score turns the direct question's strong results into weak ones."""
    script = {
        "QueryPlan": [{"needs_retrieval": True, "queries": [{"query": "day pass price"}]}],
        "EvidenceAssessment": [{"is_sufficient": True, "confidence": 0.9}],
    }
    response, model = run(
        toy_source,
        [user("How much does a day pass cost?")],
        script=script,
        defaults=Context(auto_min_top_score=4.0),
    )
    assert model.script.count() == 2
    record = reasoning(response)
    assert moves(record) == [
        ("question", "minimal", None),
        ("results", "minimal", "low"),
        ("results", "low", "medium"),
    ]
    assert record["effortDecisions"][1]["reason"].endswith("(auto_min_top_score 4)")


def test_auto_without_a_model_stays_model_free_and_says_so(toy_source, monkeypatch):
    monkeypatch.delenv("AGENTIC_RETRIEVAL_CHAT_MODEL", raising=False)
    kb = KnowledgeBase([toy_source])
    response = kb.retrieve(
        {"messages": [user("How much is a day pass, and the bike late fee?")], **AUTO}
    )
    assert response.status_code == 200
    record = reasoning(response)
    assert record["retrievalReasoningEffort"] == {"kind": "minimal"}
    assert record["logicalReasoningEffort"] == {"kind": "auto"}
    assert record["warning"] == NO_MODEL_NOTE
    assert "effortDecisions" not in record


def test_auto_with_intents_runs_the_callers_plan(toy_source):
    model = ScriptedChatModel(script={})
    kb = KnowledgeBase([toy_source], chat_model=model)
    response = kb.retrieve({"intents": [{"search": "nothing matches this"}], **AUTO})
    assert model.script.count() == 0
    record = reasoning(response)
    assert record["retrievalReasoningEffort"] == {"kind": "minimal"}
    assert "effortDecisions" not in record


def test_explicit_efforts_report_the_logical_effort(toy_source):
    plan = {"needs_retrieval": True, "queries": [{"query": "day pass"}]}
    model = ScriptedChatModel(script={"QueryPlan": [plan]})
    kb = KnowledgeBase([toy_source], chat_model=model)
    response = kb.retrieve(
        {"messages": [user("day pass?")], "retrievalReasoningEffort": {"kind": "low"}}
    )
    record = reasoning(response)
    assert record["retrievalReasoningEffort"] == record["logicalReasoningEffort"] == {"kind": "low"}


# --- every interface accepts auto ----------------------------------------------------------


def two_part_kb() -> tuple[KnowledgeBase, ScriptedChatModel]:
    plan = {
        "needs_retrieval": True,
        "queries": [{"query": "student Harbor Pass"}, {"query": "last tram Sunday"}],
    }
    model = ScriptedChatModel(script={"QueryPlan": [plan]})
    return transit_kb(chat_model=model), model


@pytest.mark.parametrize("effort", [{"kind": "auto"}, "auto"], ids=["object", "string"])
def test_rest_accepts_auto(effort):
    kb, model = two_part_kb()
    app = create_app(kb, settings=ServerSettings(read_env_keys=False), mcp=False)
    body = {
        "messages": [{"role": "user", "content": [{"type": "text", "text": TWO_PART}]}],
        "retrievalReasoningEffort": effort,
    }
    with TestClient(app) as client:
        r = client.post(
            "/knowledgebases/transit/retrieve?api-version=2026-08-01-preview", json=body
        )
    assert r.status_code == 200
    (record,) = [a for a in r.json()["activity"] if a["type"] == "agenticReasoning"]
    assert record["retrievalReasoningEffort"] == {"kind": "low"}
    assert record["logicalReasoningEffort"] == {"kind": "auto"}
    assert model.script.count() == 1


async def test_mcp_accepts_auto():
    kb, model = two_part_kb()
    async with Client(build_mcp_server(kb)) as client:
        result = await client.call_tool(
            "knowledge_base_retrieve", {"query": TWO_PART, "effort": "auto"}
        )
    assert not result.is_error
    assert {r["docKey"] for r in result.structured_content["references"][:2]} == {
        "fare-pass",
        "hours-sunday",
    }
    assert result.structured_content["note"] is None
    assert model.script.count() == 1


def test_cli_accepts_auto_and_without_a_model_says_it_stayed_model_free(tmp_path, monkeypatch):
    monkeypatch.delenv("AGENTIC_RETRIEVAL_CHAT_MODEL", raising=False)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "ferries.md").write_text(
        "# Ferries\n\nThe Gull Island ferry leaves every 40 minutes.\n"
    )
    runner = CliRunner()
    indexed = runner.invoke(
        cli_app, ["index", "--kb", str(tmp_path / "kb"), "--source", "g", str(docs)]
    )
    assert indexed.exit_code == 0, indexed.output
    result = runner.invoke(
        cli_app,
        ["retrieve", "--kb", str(tmp_path / "kb"), "--effort", "auto", "--json", "ferry"],
    )
    assert result.exit_code == 0, result.output
    assert result.stderr == f"note: {NO_MODEL_NOTE}\n"
    body = json.loads(result.stdout)
    (record,) = [a for a in body["activity"] if a["type"] == "agenticReasoning"]
    assert record["retrievalReasoningEffort"] == {"kind": "minimal"}
    assert record["logicalReasoningEffort"] == {"kind": "auto"}


def test_auto_with_an_unusable_model_is_a_request_error_before_the_run(toy_source, monkeypatch):
    from agentic_retrieval.errors import InvalidRequestError
    from agentic_retrieval.llm.chat_models import _init_model

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    _init_model.cache_clear()
    kb = KnowledgeBase([toy_source], chat_model="foo:bar")
    with pytest.raises(InvalidRequestError, match="cannot be created"):
        kb.retrieve({"messages": [user("day pass?")], **AUTO})


def test_auto_needs_an_evidence_model_it_may_escalate_to(toy_source, monkeypatch):
    from agentic_retrieval.errors import ModelRequiredError

    monkeypatch.delenv("AGENTIC_RETRIEVAL_CHAT_MODEL", raising=False)
    kb = KnowledgeBase([toy_source], planning_model=ScriptedChatModel(script={}))
    with pytest.raises(ModelRequiredError) as caught:
        kb.retrieve({"messages": [user("day pass?")], **AUTO})
    assert (caught.value.setting, caught.value.value, caught.value.role) == (
        "effort",
        "auto",
        "evidence",
    )


def test_on_a_thread_the_second_turn_is_a_follow_up_and_the_first_turns_decisions_are_gone(
    toy_source, caplog
):
    """The conversation a checkpointer keeps is what makes a turn a follow-up."""
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.memory import MemorySaver

    from agentic_retrieval import build_graph
    from agentic_retrieval.checkpointing import checkpoint_serializer

    plan = {"needs_retrieval": True, "queries": [{"query": "day pass valid until"}]}
    model = ScriptedChatModel(script={"QueryPlan": [plan]})
    graph = build_graph(
        [toy_source],
        chat_model=model,
        checkpointer=MemorySaver(serde=checkpoint_serializer()),
    )
    thread = {"configurable": {"thread_id": "auto-thread"}}
    auto = Context(reasoning_effort="auto")
    first = graph.invoke(
        {"messages": [HumanMessage("How much does a day pass cost?")]}, thread, context=auto
    )
    second = graph.invoke(
        {"messages": [HumanMessage("Until when is it valid?")]}, thread, context=auto
    )
    assert model.script.count() == 1  # only the follow-up was planned

    def decisions(output: dict) -> list[tuple[str, str, str | None]]:
        (record,) = [a for a in output["activity"] if a["type"] == "agenticReasoning"]
        return [(d["step"], d["tier"], d["escalateTo"]) for d in record["effortDecisions"]]

    assert decisions(first) == [("question", "minimal", None), ("results", "minimal", None)]
    assert decisions(second) == [("question", "minimal", "low"), ("results", "low", None)]
    assert second["references"][0]["docKey"] == "fares"
    assert "unregistered type" not in caplog.text and "Blocked" not in caplog.text


def test_evaluate_compares_auto_with_the_fixed_efforts(toy_source):
    from agentic_retrieval.eval import Configuration, Question, evaluate

    plan = {"needs_retrieval": True, "queries": [{"query": "day pass"}, {"query": "bike fee"}]}
    model = ScriptedChatModel(script={"QueryPlan": [plan]})
    kb = KnowledgeBase([toy_source], chat_model=model)
    questions = [
        Question(
            id="direct", messages=(("user", "How long are lost items kept?"),), relevant={"lost": 1}
        ),
        Question(
            id="two-part",
            messages=(("user", "How much is a day pass, and what is the late fee for a bike?"),),
            relevant={"fares": 1, "bike-fees": 1},
        ),
    ]
    report = evaluate(
        kb, [Configuration(effort="minimal"), Configuration(effort="auto")], questions=questions
    )
    auto = report.results[1]
    assert auto.configuration.name.startswith("auto/")
    assert [q.model_calls for q in auto.queries] == [0, 1]
    assert auto.summary["R@10"] == 1.0


def test_cli_readable_output_shows_the_decisions(tmp_path, monkeypatch):
    from agentic_retrieval.kb import loader

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "ferries.md").write_text(
        "# Ferries\n\nThe Gull Island ferry leaves every 40 minutes.\n"
    )
    (docs / "parking.md").write_text("# Parking\n\nPark and ride at Saltmarsh costs 4 dollars.\n")
    runner = CliRunner()
    indexed = runner.invoke(
        cli_app, ["index", "--kb", str(tmp_path / "kb"), "--source", "g", str(docs)]
    )
    assert indexed.exit_code == 0, indexed.output
    plan = {"needs_retrieval": True, "queries": [{"query": "ferry"}, {"query": "park and ride"}]}
    model = ScriptedChatModel(script={"QueryPlan": [plan]})
    opened = loader.open_knowledge_base
    monkeypatch.setattr(
        loader, "open_knowledge_base", lambda *a, **k: opened(*a, **k, chat_model=model)
    )
    question = "How often does the ferry leave, and what does park and ride cost?"
    result = runner.invoke(
        cli_app, ["retrieve", "--kb", str(tmp_path / "kb"), "--effort", "auto", question]
    )
    assert result.exit_code == 0, result.output
    assert (
        "Effort (auto): minimal → low: 2 distinct asks (auto_max_asks 1): planned as one "
        "subquery each"
    ) in result.stdout
    assert "Effort (auto): stays low: results are strong" in result.stdout
    assert model.script.count() == 1
