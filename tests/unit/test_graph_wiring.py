"""The wiring is deliberate: a change to the drawn graph must update the snapshot."""

from __future__ import annotations

from pathlib import Path

from agentic_retrieval import build_graph

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
        "route_and_plan",
        "judge_question",
        "plan_queries",
        "prepare_searches",
        "search",
        "rerank",
        "judge_results",
        "assess_evidence",
        "synthesize",
        "respond",
        "__end__",
    }
    edges = {(e.source, e.target) for e in graph.edges}
    assert {
        ("__start__", "route_and_plan"),
        ("route_and_plan", "prepare_searches"),
        ("route_and_plan", "respond"),
        ("route_and_plan", "judge_question"),
        ("judge_question", "prepare_searches"),
        ("judge_question", "plan_queries"),
        ("plan_queries", "prepare_searches"),
        ("plan_queries", "respond"),
        ("prepare_searches", "search"),
        ("search", "rerank"),
        ("rerank", "assess_evidence"),
        ("rerank", "synthesize"),
        ("rerank", "judge_results"),
        ("judge_results", "synthesize"),
        ("judge_results", "plan_queries"),
        ("judge_results", "assess_evidence"),
        ("assess_evidence", "search"),
        ("assess_evidence", "synthesize"),
        ("synthesize", "respond"),
        ("respond", "__end__"),
    } <= edges


def test_graph_is_named():
    assert build_graph([]).name == "agentic_retrieval"
