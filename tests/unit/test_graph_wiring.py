"""The wiring is deliberate: a change to the drawn graph must update the snapshot."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from langgraph.channels import BinaryOperatorAggregate, LastValue, UntrackedValue

from agentic_retrieval import build_graph
from agentic_retrieval.state import InputState, OutputState

SNAPSHOT = Path(__file__).parent / "snapshots" / "graph.mmd"


def test_mermaid_drawing_matches_the_snapshot():
    # without styles: the wiring is the contract, LangGraph's colours and shapes are not
    drawn = build_graph([]).get_graph().draw_mermaid(with_styles=False)
    assert drawn == SNAPSHOT.read_text(), (
        "graph wiring changed; if intended, regenerate tests/unit/snapshots/graph.mmd"
    )


def test_graph_has_the_designed_nodes_and_edges():
    graph = build_graph([]).get_graph()
    assert set(graph.nodes) == {
        "__start__",
        "begin_turn",
        "judge_question",
        "plan_queries",
        "prepare_searches",
        "search",
        "graph_search",
        "rerank",
        "judge_results",
        "assess_evidence",
        "synthesize",
        "respond",
        "__end__",
    }
    edges = {(e.source, e.target, e.conditional) for e in graph.edges}
    assert edges == {
        ("__start__", "begin_turn", False),
        ("begin_turn", "judge_question", True),  # auto: judge the question first
        ("begin_turn", "plan_queries", True),  # low, medium: the model plans
        ("begin_turn", "prepare_searches", True),  # minimal or intents: searched as given
        ("judge_question", "plan_queries", True),
        ("judge_question", "prepare_searches", True),
        ("plan_queries", "prepare_searches", True),
        ("plan_queries", "respond", True),  # no retrieval needed
        ("prepare_searches", "rerank", True),  # nothing to search: straight to rerank
        ("prepare_searches", "search", True),
        ("prepare_searches", "graph_search", True),  # a source's entity graph, asked for
        ("search", "rerank", False),
        ("graph_search", "rerank", False),
        ("rerank", "assess_evidence", True),
        ("rerank", "judge_results", True),
        ("rerank", "respond", True),  # a failOnError source failed: the request fails
        ("rerank", "synthesize", True),
        ("judge_results", "assess_evidence", True),
        ("judge_results", "plan_queries", True),
        ("judge_results", "synthesize", True),
        ("assess_evidence", "search", True),
        ("assess_evidence", "graph_search", True),  # a follow-up round searches graphs too
        ("assess_evidence", "synthesize", True),
        ("synthesize", "respond", False),
        ("respond", "__end__", False),
    }


def test_graph_is_named():
    assert build_graph([]).name == "agentic_retrieval"


def test_studio_forms_show_each_input_and_output_field_with_its_description_and_default():
    # what `langgraph dev` serves at /assistants/{id}/schemas, and Studio's input form shows
    graph = build_graph([])
    for schema, state in (
        (graph.get_input_jsonschema(), InputState),
        (graph.get_output_jsonschema(), OutputState),
    ):
        properties = schema["properties"]
        assert list(properties) == [f.name for f in dataclasses.fields(state)]
        for spec in dataclasses.fields(state):
            assert properties[spec.name]["description"] == spec.metadata["description"]
    intents = graph.get_input_jsonschema()["properties"]["intents"]
    assert intents == {
        "default": [],
        "description": "Search strings to run as-is (no planning): the retrieve API's "
        "intents[].search.",
        "items": {"type": "string"},
        "title": "Intents",
        "type": "array",
    }
    assert graph.get_output_jsonschema()["properties"]["passage_count"]["default"] == 0


def test_described_schemas_keep_the_state_channels():
    channels = build_graph([]).builder.channels
    assert type(channels["messages"]) is BinaryOperatorAggregate
    assert type(channels["intents"]) is UntrackedValue
    assert type(channels["knowledge_source_params"]) is UntrackedValue
    assert type(channels["partial"]) is BinaryOperatorAggregate
    assert type(channels["response"]) is LastValue


def test_the_per_source_parameters_are_published_as_objects():
    # the input takes the retrieve API's models or wire-shaped dicts; Studio's form shows objects
    published = build_graph([]).get_input_jsonschema()["properties"]["knowledge_source_params"]
    assert published == {
        "default": [],
        "description": "Per-source overrides, wire shape (knowledgeSourceName, filterAddOn, "
        "includeReferences, includeReferenceSourceData, alwaysQuerySource, rerankerThreshold).",
        "items": {"additionalProperties": True, "type": "object"},
        "title": "Knowledge Source Params",
        "type": "array",
    }


def test_studio_shows_each_published_fields_description_word_for_word():
    # what `langgraph dev` serves for the input, output and context: the descriptions must
    # survive however the fields are documented in the source (snapshot of the schemas)
    import json

    graph = build_graph([])
    published = {
        name: {key: spec.get("description") for key, spec in schema["properties"].items()}
        for name, schema in (
            ("input", graph.get_input_jsonschema()),
            ("output", graph.get_output_jsonschema()),
            ("context", graph.get_context_jsonschema()),
        )
    }
    expected = json.loads((SNAPSHOT.parent / "published_descriptions.json").read_text())
    assert published == expected
