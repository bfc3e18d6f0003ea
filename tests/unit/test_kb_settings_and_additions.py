"""Knowledge-base settings (instructions, retrieveDefaults) from Python, the knowledge-base
directory and the CLI; the response additions ``model`` and ``citationUrl``."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agentic_retrieval import Context, InMemoryKnowledgeSource, KnowledgeBase
from agentic_retrieval.cli import app
from agentic_retrieval.errors import KnowledgeBaseDirectoryError
from agentic_retrieval.kb.directory import KnowledgeBaseDirectory
from agentic_retrieval.kb.loader import open_knowledge_base
from agentic_retrieval.llm.chat_models import ModelIdentity, model_identity
from agentic_retrieval.sources.base import index_document_url
from agentic_retrieval.testing import Script, ScriptedChatModel

runner = CliRunner()
PLAN = {"needs_retrieval": True, "queries": [{"query": "day pass price"}]}
ANSWER = {"answer": "A day pass costs 6 euros [ref_id:0]."}
DOCS = [
    {
        "key": "fares",
        "title": "Fares",
        "content": "A day pass costs 6 euros.",
        "metadata": {"url": "https://example.org/fares"},
    },
    {"key": "hours", "title": "Hours", "content": "Trams run until midnight."},
]


def question(text: str = "How much is a day pass?", **fields) -> dict:
    return {"messages": [{"role": "user", "content": [{"type": "text", "text": text}]}], **fields}


def scripted(script: Script, **fields) -> ScriptedChatModel:
    return ScriptedChatModel(script=script, **fields)


# --- instructions ------------------------------------------------------------------------------


def test_instructions_reach_the_planning_and_answer_prompts_as_data():
    script = Script({"QueryPlan": [PLAN], "SynthesizedAnswer": [ANSWER]})
    kb = KnowledgeBase(
        [InMemoryKnowledgeSource("fares", DOCS)],
        chat_model=scripted(script),
        defaults=Context(
            retrieval_instructions="Prefer the fares source; {braces} are text.",
            answer_instructions="Answer in one sentence.",
        ),
    )
    kb.retrieve(question(outputMode="answerSynthesis"))
    (plan_name, plan_messages), (answer_name, answer_messages) = script.calls
    assert (plan_name, answer_name) == ("QueryPlan", "SynthesizedAnswer")
    planning = plan_messages[0].content
    assert planning.endswith(
        "<retrieval_instructions>\nPrefer the fares source; {braces} are text.\n"
        "</retrieval_instructions>"
    )
    assert "answer_instructions" not in planning
    answering = answer_messages[0].content
    assert answering.endswith(
        "<answer_instructions>\nAnswer in one sentence.\n</answer_instructions>"
    )
    assert answering.index("Passages:") < answering.index("<answer_instructions>")


def test_without_instructions_the_prompts_are_unchanged():
    script = Script({"QueryPlan": [PLAN]})
    kb = KnowledgeBase([InMemoryKnowledgeSource("fares", DOCS)], chat_model=scripted(script))
    kb.retrieve(question())
    assert "instructions>" not in script.calls[0][1][0].content


# --- knowledge-base directory and CLI -----------------------------------------------------------


def test_directory_settings_persist_and_apply_under_request_values(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("alpha", "beta", "gamma"):
        (docs / f"{name}.md").write_text(f"# {name}\n\nThe ferry timetable for {name} pier.\n")
    directory = KnowledgeBaseDirectory(tmp_path / "kb").create("piers")
    directory.add_or_update_source("piers")
    directory.index("piers", [docs])
    directory.update_settings(
        retrieval_instructions="Search the piers source.",
        retrieve_defaults={"max_output_documents": 1, "max_runtime_in_seconds": 20},
    )
    directory.update_settings(retrieve_defaults={"max_output_size_in_tokens": 500})
    directory.close()
    manifest = json.loads((tmp_path / "kb" / "knowledge-base.json").read_text())
    assert manifest["settings"] == {
        "retrievalInstructions": "Search the piers source.",
        "retrieveDefaults": {
            "maxRuntimeInSeconds": 20,
            "maxOutputDocuments": 1,
            "maxOutputSizeInTokens": 500,
        },
    }
    kb = open_knowledge_base(tmp_path / "kb")
    defaults = kb.defaults
    assert (defaults.max_output_documents, defaults.max_runtime_seconds) == (1, 20.0)
    assert (defaults.max_output_tokens, defaults.retrieval_instructions) == (
        500,
        "Search the piers source.",
    )
    body = {"intents": [{"type": "semantic", "search": "ferry timetable pier"}]}
    assert len(kb.retrieve(body).references) == 1
    assert len(kb.retrieve({**body, "maxOutputDocuments": 3}).references) == 3


def test_directory_settings_out_of_bounds_are_refused_naming_the_field(tmp_path):
    directory = KnowledgeBaseDirectory(tmp_path / "kb").create("piers")
    with pytest.raises(KnowledgeBaseDirectoryError) as info:
        directory.update_settings(retrieve_defaults={"max_runtime_in_seconds": 301})
    assert str(info.value) == (
        "retrieve_defaults.max_runtime_in_seconds: Input should be less than or equal to 300"
    )


def test_cli_index_and_kb_update_set_the_settings(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "ferry.md").write_text("# Ferry\n\nThe Gull Island ferry leaves hourly.\n")
    kb = str(tmp_path / "kb")
    indexed = runner.invoke(
        app,
        [
            *("index", "--kb", kb, "--source", "ferries", str(docs)),
            *("--answer-instructions", "Be brief.", "--max-output-documents", "4"),
        ],
    )
    assert indexed.exit_code == 0, indexed.output
    updated = runner.invoke(
        app, ["kb", "update", "--kb", kb, "--retrieval-instructions", "Ferries first."]
    )
    assert updated.exit_code == 0, updated.output
    shown = json.loads(runner.invoke(app, ["kb", "show", "kb", "--kb", kb]).output)
    assert shown == {
        "name": "kb",
        "description": None,
        "knowledgeSources": [{"name": "ferries"}],
        "retrievalInstructions": "Ferries first.",
        "answerInstructions": "Be brief.",
        "retrieveDefaults": {"maxOutputDocuments": 4},
    }
    cleared = runner.invoke(app, ["kb", "update", "--kb", kb, "--answer-instructions", ""])
    assert "answerInstructions" not in json.loads(cleared.output)
    nothing = runner.invoke(app, ["kb", "update", "--kb", kb])
    assert nothing.exit_code == 2
    assert "nothing to change: give --retrieval-instructions" in nothing.output
    bad = runner.invoke(app, ["kb", "update", "--kb", kb, "--max-runtime", "0"])
    assert bad.exit_code == 2


# --- model identity -----------------------------------------------------------------------------


def test_model_records_name_the_model():
    script = Script({"QueryPlan": [PLAN], "SynthesizedAnswer": [ANSWER]})
    kb = KnowledgeBase(
        [InMemoryKnowledgeSource("fares", DOCS)],
        chat_model=scripted(script, model_name="gpt-4o-mini"),
    )
    response = kb.retrieve(question(outputMode="answerSynthesis"))
    models = {r.type: r.model_extra.get("model") for r in response.activity}
    assert models["modelQueryPlanning"] == {"modelName": "gpt-4o-mini"}
    assert models["modelAnswerSynthesis"] == {"modelName": "gpt-4o-mini"}
    assert models["searchIndex"] is None


def test_model_identity_reads_openai_and_azure_deployments():
    openai = pytest.importorskip("langchain_openai")
    azure = openai.AzureChatOpenAI(
        azure_deployment="gpt-4o-deployment",
        model="gpt-4o",
        api_key="not-a-key",
        azure_endpoint="https://example.openai.azure.com",
        api_version="2024-10-21",
    )
    assert model_identity(azure) == ModelIdentity(
        model_name="gpt-4o", deployment_id="gpt-4o-deployment"
    )
    plain = openai.ChatOpenAI(model="gpt-4.1-mini", api_key="not-a-key")
    assert model_identity(plain) == ModelIdentity(model_name="gpt-4.1-mini")


# --- citationUrl --------------------------------------------------------------------------------


def test_citation_urls_for_web_documents_and_local_files(tmp_path):
    memory = KnowledgeBase([InMemoryKnowledgeSource("fares", DOCS)])
    references = memory.retrieve({"intents": [{"search": "day pass euros"}]}).references
    assert [(r.doc_key, r.model_extra.get("citationUrl")) for r in references] == [
        ("fares", "https://example.org/fares")
    ]
    docs = tmp_path / "docs"
    docs.mkdir()
    page = docs / "ferry.md"
    page.write_text("# Ferry\n\nThe Gull Island ferry leaves hourly.\n")
    directory = KnowledgeBaseDirectory(tmp_path / "kb").create("piers")
    directory.add_or_update_source("piers")
    directory.index("piers", [docs])
    directory.close()
    local = open_knowledge_base(tmp_path / "kb")
    found = local.retrieve({"intents": [{"search": "Gull Island ferry"}]}).references
    assert found[0].model_extra["citationUrl"] == page.resolve().as_uri()


def test_index_document_urls_have_the_reference_shape():
    url = index_document_url(
        "https://typespecpreviewexampleservice.search.windows.net/",
        "preview-test",
        "myDocKey1",
        "2026-08-01-preview",
        ["category", "description", "ownerId", "id"],
    )
    assert url == (
        "https://typespecpreviewexampleservice.search.windows.net/indexes/preview-test/docs/"
        "myDocKey1?$select=category%2Cdescription%2CownerId%2Cid&api-version=2026-08-01-preview"
    )


def test_cli_retrieve_takes_max_output_documents(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("alpha", "beta", "gamma"):
        (docs / f"{name}.md").write_text(f"# {name}\n\nThe ferry timetable for {name} pier.\n")
    kb = str(tmp_path / "kb")
    assert runner.invoke(app, ["index", "--kb", kb, "--source", "piers", str(docs)]).exit_code == 0
    ask = ["retrieve", "ferry timetable pier", "--kb", kb, "--effort", "minimal", "--json"]
    every = json.loads(runner.invoke(app, ask).output)
    capped = json.loads(runner.invoke(app, [*ask, "--max-output-documents", "1"]).output)
    assert len(every["references"]) == 3
    assert [r["docKey"] for r in capped["references"]] == [every["references"][0]["docKey"]]
    (search,) = [r for r in capped["activity"] if r["type"] == "searchIndex"]
    assert search["warning"] == (
        "2 documents found by this query were left out of the response: 2 exceeded "
        "maxOutputDocuments."
    )


def test_every_activity_record_says_when_it_started_and_completed():
    import datetime as dt
    import re
    import time

    script = Script({"QueryPlan": [PLAN], "SynthesizedAnswer": [ANSWER]})
    kb = KnowledgeBase([InMemoryKnowledgeSource("fares", DOCS)], chat_model=scripted(script))
    before = time.time()
    response = kb.retrieve(question(outputMode="answerSynthesis"))
    after = time.time()
    records = [r.to_wire() for r in response.activity]
    assert [r["type"] for r in records] == [
        "modelQueryPlanning",
        "searchIndex",
        "semanticReranker",
        "modelAnswerSynthesis",
        "agenticReasoning",
    ]
    stamp = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")

    def seconds(text: str) -> float:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()

    for record in records:
        assert stamp.match(record["startedAt"]) and stamp.match(record["completedAt"])
        started, completed = seconds(record["startedAt"]), seconds(record["completedAt"])
        assert before - 0.001 <= started <= completed <= after + 0.001
        if record.get("elapsedMs") is not None:  # the two stamps bracket the elapsed time
            assert abs((completed - started) * 1000 - record["elapsedMs"]) <= 1.0
    search = records[1]
    assert search["queryTime"] == search["startedAt"]
    # ids follow start order, as the stream's activity.started events will
    assert [r["startedAt"] for r in records] == sorted(r["startedAt"] for r in records)
