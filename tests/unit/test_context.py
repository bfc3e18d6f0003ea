"""Context: bounds live in each field's metadata, are enforced by one loop, and reach Studio."""

from __future__ import annotations

from dataclasses import fields

import pytest
from tests.fakes import TOY_DOCS

from agentic_retrieval import Context, InMemoryKnowledgeSource, build_graph

BOUNDS = {
    "max_subqueries": (1, 10),
    "max_iterations": (0, 5),
    "search_top": (1, 1000),
    "max_docs_for_reranker": (1, 1000),
    "top_n": (1, 200),
    "reranker_threshold": (0.0, 4.0),
    "max_output_size": (1, 10_000_000),
    "max_output_tokens": (1, 2_500_000),
    "max_output_documents": (1, 1000),
    "max_runtime_seconds": (0.001, 300),
    "source_timeout_seconds": (0.001, 300),
    "auto_max_asks": (1, 10),
    "auto_follow_up_max_terms": (0, 20),
    "auto_top_k": (1, 50),
    "auto_min_top_score": (0.0, 4.0),
    "auto_min_term_coverage": (0.0, 1.0),
    "auto_min_score_spread": (0.0, 4.0),
    "auto_min_source_agreement": (0.0, 1.0),
}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_subqueries": 11}, "max_subqueries must be between 1 and 10, not 11"),
        ({"max_subqueries": "3"}, "max_subqueries must be an integer, not '3'"),
        ({"max_subqueries": True}, "max_subqueries must be an integer, not True"),
        ({"top_n": 2.5}, "top_n must be an integer, not 2.5"),
        ({"max_iterations": -1}, "max_iterations must be between 0 and 5, not -1"),
        (
            {"max_output_size": 10_000_001},
            "max_output_size must be between 1 and 1e+07, not 10000001",
        ),
        ({"max_output_tokens": "5"}, "max_output_tokens must be an integer, not '5'"),
        ({"max_output_tokens": 0}, "max_output_tokens must be between 1 and 2.5e+06, not 0"),
        (
            {"max_runtime_seconds": 0},
            "max_runtime_seconds must be between 0.001 and 300, not 0",
        ),
        ({"max_runtime_seconds": False}, "max_runtime_seconds must be a number, not False"),
        ({"reranker_threshold": 4.5}, "reranker_threshold must be between 0 and 4, not 4.5"),
        (
            {"reranker_threshold": "2"},
            "reranker_threshold must be a number, 'default' or None, not '2'",
        ),
        (
            {"reasoning_effort": "high"},
            "reasoning_effort must be minimal, low, medium or auto, not 'high'",
        ),
        (
            {"output_mode": "poem"},
            "output_mode must be extractiveData or answerSynthesis, not 'poem'",
        ),
        ({"chat_model": 3}, "chat_model must be a 'provider:model' string, not 3"),
        (
            {"knowledge_sources": "policies"},
            "knowledge_sources must be a list of source names, not 'policies'",
        ),
        ({"knowledge_sources": 3}, "knowledge_sources must be a list of source names, not 3"),
        ({"routing_prompt": 3}, "routing_prompt must be a string, not 3"),
        (
            {"evidence_prompt": "{unknown}"},
            "evidence_prompt has an unknown or malformed placeholder ('unknown'); its "
            "placeholders are {today}, {max_subqueries}, {previous_queries}, and literal "
            "braces must be doubled ({{ }})",
        ),
        (
            {"answer_prompt": "Answer. {today}"},
            "answer_prompt must contain {passages}, or the model sees no evidence",
        ),
    ],
)
def test_bad_values_fail_with_a_message_naming_the_field(kwargs, message):
    with pytest.raises(ValueError) as info:
        Context(**kwargs)
    assert str(info.value) == message


def test_bounds_are_declared_in_metadata_and_enforced_at_both_ends():
    declared = {
        f.name: (f.metadata["ge"], f.metadata["le"]) for f in fields(Context) if "ge" in f.metadata
    }
    assert declared == BOUNDS
    for name, (low, high) in BOUNDS.items():
        step = 1 if isinstance(low, int) and isinstance(high, int) else 0.0001
        Context(**{name: low})
        Context(**{name: high})
        for outside in (low - step, high + step):
            with pytest.raises(ValueError, match=f"^{name} must be between"):
                Context(**{name: outside})


def test_optional_fields_accept_none_and_sequences_of_names():
    context = Context(max_output_tokens=None, reranker_threshold=None, knowledge_sources=("a",))
    assert context.knowledge_sources == ("a",)


def test_studio_schema_shows_every_bound():
    graph = build_graph([InMemoryKnowledgeSource("transit", TOY_DOCS)])
    properties = graph.get_context_jsonschema()["properties"]
    for name, (low, high) in BOUNDS.items():
        prop = properties[name]
        # optional fields: the bounds sit on the number branch of anyOf
        branch = next(b for b in prop.get("anyOf", [prop]) if b["type"] != "null")
        assert (branch["minimum"], branch["maximum"]) == (low, high), name
        assert branch["type"] == ("integer" if isinstance(low, int) else "number"), name
    assert properties["max_subqueries"]["description"] == "Most subqueries the planner may emit."
    effort = properties["reasoning_effort"]
    assert effort["default"] is None
    assert [b.get("enum") for b in effort["anyOf"]] == [["minimal", "low", "medium", "auto"], None]
    # the keys only the checks use stay out of the schema
    assert "expects" not in str(properties) and "placeholders" not in str(properties)


def test_a_graphs_own_defaults_fill_in_what_a_dict_context_leaves_unset():
    """Studio sends its configuration panel as a dict: the knowledge base's settings (here
    top_n 1) apply where it is silent, and what it sets wins."""
    from agentic_retrieval import InMemoryKnowledgeSource, KnowledgeBase
    from agentic_retrieval.context import DEFAULTS_KEY, settings_of

    docs = [
        {"key": "a", "content": "tram fares and passes"},
        {"key": "b", "content": "tram passes for students"},
    ]
    kb = KnowledgeBase(
        [InMemoryKnowledgeSource("docs", docs)],
        defaults=Context(top_n=1, reranker_threshold=None),
    )
    assert settings_of(kb.defaults) == {"top_n": 1, "reranker_threshold": None}
    graph = kb.graph.with_config(configurable={DEFAULTS_KEY: settings_of(kb.defaults)})
    state = {"intents": ["tram passes"]}
    silent = graph.invoke(state, context={"reasoning_effort": "minimal"})
    assert len(silent["references"]) == 1
    assert len(graph.invoke(state)["references"]) == 1  # no context at all: the same
    wider = graph.invoke(state, context={"reasoning_effort": "minimal", "top_n": 5})
    assert len(wider["references"]) == 2
    # a graph without defaults is unchanged: Context's own
    assert len(kb.graph.invoke(state, context={"reranker_threshold": None})["references"]) == 2


def test_a_dict_context_with_an_unknown_field_is_an_error_not_ignored():
    from agentic_retrieval import InMemoryKnowledgeSource, KnowledgeBase

    docs = [{"key": "a", "content": "tram fares"}, {"key": "b", "content": "tram passes"}]
    graph = KnowledgeBase([InMemoryKnowledgeSource("docs", docs)]).graph
    with pytest.raises(ValueError, match="unknown context field"):
        graph.invoke({"intents": ["tram"]}, context={"reasoning_efort": "minimal"})
    # configurable carries LangGraph's own keys too: only known fields are read from it
    loose = {"thread_id": "t", "reranker_threshold": None}
    out = graph.invoke({"intents": ["tram"]}, {"configurable": loose})
    assert len(out["references"]) == 2
    out = graph.invoke({"intents": ["tram"]}, {"configurable": {**loose, "top_n": 1}})
    assert len(out["references"]) == 1
