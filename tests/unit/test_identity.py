"""The caller's identity at query time: it reaches the sources, never the planner or the state.

Expected ids follow from the visibility rule on TENANT_DOCS (tests/fakes.py).
"""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import MemorySaver
from tests.fakes import RecordingSource, tenant_source

from agentic_retrieval import Context, InMemoryKnowledgeSource, KnowledgeBase, build_graph
from agentic_retrieval.checkpointing import checkpoint_serializer
from agentic_retrieval.errors import IdentityRequiredError, InvalidRequestError
from agentic_retrieval.permissions import Identity
from agentic_retrieval.testing import ScriptedChatModel

ALICE = Identity(user_id="alice", groups=["acme"], token="eyJhbGciOi.alice-secret.sig")
MINIMAL = {"intents": [{"search": "vacation days"}], "retrievalReasoningEffort": "minimal"}


def documents(response):
    return sorted(ref.doc_key.partition("#")[0] for ref in response.references)


@pytest.fixture
def policies(tmp_path):
    source = tenant_source(tmp_path / "policies.sqlite")
    yield source
    source.close()


def test_retrieve_returns_what_the_identity_may_see(policies):
    kb = KnowledgeBase([policies])
    assert documents(kb.retrieve(MINIMAL, identity=ALICE)) == ["acme-ceo", "acme-leave", "holidays"]
    bob = {"user_id": "bob", "groups": ["globex"]}
    assert documents(kb.retrieve(MINIMAL, identity=bob)) == ["globex-leave", "holidays"]
    assert documents(kb.retrieve(MINIMAL)) == ["holidays"]


def test_a_bad_identity_dict_is_an_error_naming_the_argument(policies):
    with pytest.raises(InvalidRequestError, match="identity"):
        KnowledgeBase([policies]).retrieve(MINIMAL, identity={"groups": "acme"})


def test_the_retriever_adapter_and_the_stream_carry_the_identity(policies):
    kb = KnowledgeBase([policies])
    retriever = kb.as_retriever(k=5, identity=Identity(groups=["globex"]))
    assert sorted(d.metadata["doc_key"] for d in retriever.invoke("vacation days")) == [
        "globex-leave#0",
        "holidays#0",
    ]

    async def final():
        async for event in kb.astream(MINIMAL, identity=ALICE):
            if event["event"] == "response.completed":
                return event["data"]["response"]
        return None

    from agentic_retrieval.graph.sync import run_sync

    wire = run_sync(final())
    assert sorted(r["docKey"] for r in wire["references"]) == [
        "acme-ceo#0",
        "acme-leave#0",
        "holidays#0",
    ]


def test_enforced_permissions_turn_a_source_that_cannot_trim_into_an_error_record(
    policies, toy_source
):
    kb = KnowledgeBase([policies, toy_source], enforce_permissions=True)
    response = kb.retrieve(
        MINIMAL,
        identity=ALICE,
    )
    assert response.status_code == 206
    errors = {
        a.model_extra["knowledgeSourceName"]: a.error
        for a in response.activity or []
        if a.model_extra and "knowledgeSourceName" in a.model_extra
    }
    assert errors["policies"] is None
    assert errors["transit"] is not None and errors["transit"].code == "PermissionsNotEnforced"
    assert documents(response) == ["acme-ceo", "acme-leave", "holidays"]


def test_a_source_that_cannot_trim_is_never_even_called_while_enforced(toy_source):
    recording = RecordingSource(toy_source)
    graph = build_graph([recording])
    graph.invoke(
        {"intents": ["tram"]},
        context=Context(reasoning_effort="minimal", enforce_permissions=True, identity=ALICE),
    )
    assert recording.queries == []


def test_a_knowledge_base_that_requires_an_identity_refuses_a_request_without_one(policies):
    kb = KnowledgeBase([policies], require_identity=True)
    with pytest.raises(IdentityRequiredError, match="requires a caller identity"):
        kb.retrieve(MINIMAL)
    assert documents(kb.retrieve(MINIMAL, identity=ALICE)) == ["acme-ceo", "acme-leave", "holidays"]
    assert kb.defaults.enforce_permissions


def test_the_planner_never_sees_the_identity(policies):
    plan = {"needs_retrieval": True, "queries": [{"query": "vacation days"}]}
    model = ScriptedChatModel(script={"QueryPlan": [plan]})
    kb = KnowledgeBase([policies], chat_model=model)
    response = kb.retrieve(
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "vacation?"}]}]},
        identity=ALICE,
    )
    assert documents(response) == ["acme-ceo", "acme-leave", "holidays"]
    prompts = " ".join(str(m.content) for _, messages in model.script.calls for m in messages)
    assert model.script.count("QueryPlan") == 1
    for secret in ("alice", "acme", "alice-secret"):
        assert secret not in prompts.lower()


def test_the_identity_of_one_turn_never_reaches_the_next_turn_or_a_checkpoint(policies):
    saver = MemorySaver(serde=checkpoint_serializer())
    graph = build_graph([policies], checkpointer=saver)
    thread = {"configurable": {"thread_id": "t1"}}
    first = graph.invoke(
        {"messages": [HumanMessage("vacation days")]},
        thread,
        context=Context(reasoning_effort="minimal", identity=ALICE),
    )
    assert sorted(r["docKey"] for r in first["references"]) == [
        "acme-ceo#0",
        "acme-leave#0",
        "holidays#0",
    ]
    second = graph.invoke(
        {"messages": [HumanMessage("vacation days again")]},
        thread,
        context=Context(reasoning_effort="minimal"),
    )
    assert [r["docKey"] for r in second["references"]] == ["holidays#0"]
    stored = repr(list(saver.storage.values())) + repr(list(saver.writes.values()))
    assert "alice" not in stored and "alice-secret" not in stored
    assert "identity" not in graph.get_state(thread).values


def test_a_context_given_as_a_dict_takes_the_identity_as_a_dict():
    context = Context.from_mapping({"identity": {"user_id": "u1", "groups": ["g"]}})
    assert context.identity == Identity(user_id="u1", groups=["g"])
    with pytest.raises(ValueError, match="identity"):
        Context.from_mapping({"identity": {"groups": 3}})
    with pytest.raises(ValueError, match="identity must be an Identity"):
        Context(identity="alice")  # type: ignore[arg-type]


def test_sources_without_the_capability_still_answer_when_permissions_are_not_enforced():
    docs = [{"key": "k", "content": "vacation days"}]
    kb = KnowledgeBase([InMemoryKnowledgeSource("memory", docs)])
    assert [r.doc_key for r in kb.retrieve(MINIMAL, identity=ALICE).references] == ["k"]
