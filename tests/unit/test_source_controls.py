"""Per-source controls (neverQuerySource, resultsProcessing, failOnError, maxOutputDocuments)
and the warnings a response carries when documents were dropped, through the Python API."""

from __future__ import annotations

import pytest
from tests.fakes import unreachable_index

from agentic_retrieval import (
    Context,
    Hit,
    InvalidRequestError,
    KnowledgeBase,
    KnowledgeSourceFailedError,
    SearchQuery,
)
from agentic_retrieval.testing import Script, ScriptedChatModel


class ScoredSource:
    """Returns fixed hits, in order, each with a semantic score the passthrough reranker keeps."""

    kind = "searchIndex"

    def __init__(self, name: str, scores: list[float]) -> None:
        self.name = name
        self.description = f"the {name} documents"
        self.scores = scores
        self.queries: list[SearchQuery] = []

    async def search(self, query: SearchQuery) -> list[Hit]:
        self.queries.append(query)
        return [
            Hit(
                doc_key=f"{self.name}{i}",
                content=f"{self.name} passage {i}",
                score=10.0 - i,
                reranker_score=score,
            )
            for i, score in enumerate(self.scores, start=1)
        ]


def kb(*extra, chat_model=None, defaults=None) -> KnowledgeBase:
    sources = [ScoredSource("a", [3.9, 3.0, 1.0]), ScoredSource("b", [0.5, 3.9]), *extra]
    return KnowledgeBase(sources, chat_model=chat_model, defaults=defaults)


def request(*params, **fields) -> dict:
    return {
        "intents": [{"type": "semantic", "search": "passage"}],
        "includeActivity": True,
        "knowledgeSourceParams": [{"kind": "searchIndex", **p} for p in params],
        **fields,
    }


def searched(response) -> list[str]:
    return [
        r.model_extra["knowledgeSourceName"]
        for r in response.activity
        if r.type != "semanticReranker"
    ]


def warnings(response) -> dict[str, str]:
    return {
        r.model_extra["knowledgeSourceName"]: r.model_extra["warning"]
        for r in response.activity
        if "warning" in (r.model_extra or {})
    }


# --- neverQuerySource ---------------------------------------------------------------------------


def test_never_query_source_leaves_a_failing_source_out_of_the_request():
    base = kb(unreachable_index())
    assert base.retrieve(request()).status_code == 206
    response = base.retrieve(request({"knowledgeSourceName": "broken", "neverQuerySource": True}))
    assert response.status_code == 200
    assert sorted(searched(response)) == ["a", "b"]


def test_naming_only_the_excluded_source_keeps_the_others_and_naming_one_selects_it():
    base = kb()
    response = base.retrieve(request({"knowledgeSourceName": "b", "neverQuerySource": True}))
    assert searched(response) == ["a"]
    assert [r.doc_key for r in response.references] == ["a1", "a2"]


def test_the_planner_is_not_offered_an_excluded_source():
    script = Script({"QueryPlan": [{"needs_retrieval": True, "queries": [{"query": "passage"}]}]})
    base = kb(chat_model=ScriptedChatModel(script=script))
    body = {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "passage?"}]}],
        "knowledgeSourceParams": [
            {"knowledgeSourceName": "b", "kind": "searchIndex", "neverQuerySource": True}
        ],
    }
    base.retrieve(body)
    system_prompt = script.calls[0][1][0].content
    assert "- a: the a documents" in system_prompt
    assert "- b:" not in system_prompt


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            [{"knowledgeSourceName": "a", "neverQuerySource": True, "alwaysQuerySource": True}],
            "knowledgeSourceParams[a]: neverQuerySource cannot be combined with "
            "alwaysQuerySource on the same knowledge source",
        ),
        (
            [{"knowledgeSourceName": "b", "resultsProcessing": "none", "rerankerThreshold": 1}],
            "knowledgeSourceParams[b]: rerankerThreshold cannot be combined with "
            "resultsProcessing 'none' (the source's results are not reranked)",
        ),
        (
            [
                {"knowledgeSourceName": "a", "neverQuerySource": True},
                {"knowledgeSourceName": "b", "neverQuerySource": True},
            ],
            "knowledgeSourceParams: neverQuerySource excludes every knowledge source this "
            "request may query (a, b); leave at least one to query",
        ),
    ],
)
def test_contradictory_source_params_are_rejected_naming_the_source(params, message):
    with pytest.raises(InvalidRequestError) as info:
        kb().retrieve(request(*params))
    assert str(info.value).endswith(message)


def test_a_threshold_for_a_source_stored_as_unreranked_is_rejected():
    base = kb(defaults=Context(unreranked_sources=["b"]))
    with pytest.raises(InvalidRequestError) as info:
        base.retrieve(request({"knowledgeSourceName": "b", "rerankerThreshold": 1}))
    assert str(info.value) == (
        "knowledgeSourceParams[b]: rerankerThreshold cannot be combined with "
        "resultsProcessing 'none' (the source's results are not reranked)"
    )
    # the request may switch reranking back on, and then a threshold is fine
    response = base.retrieve(
        request({"knowledgeSourceName": "b", "rerankerThreshold": 1, "resultsProcessing": "rerank"})
    )
    assert [r.doc_key for r in response.references] == ["b2"]


# --- resultsProcessing ---------------------------------------------------------------------------


def test_results_processing_none_keeps_the_source_order_without_scores_or_threshold():
    response = kb().retrieve(
        request(
            {"knowledgeSourceName": "a"}, {"knowledgeSourceName": "b", "resultsProcessing": "none"}
        )
    )
    # a is reranked (a3 is under the 2.5 threshold); b keeps its order, b1 despite its 0.5
    assert [(r.doc_key, r.reranker_score) for r in response.references] == [
        ("a1", 3.9),
        ("b1", None),
        ("a2", 3.0),
        ("b2", None),
    ]
    assert "rerankerScore" not in response.to_wire()["references"][1]
    reranker = next(r for r in response.activity if r.type == "semanticReranker")
    assert reranker.model_extra["candidateCount"] == 3  # b's hits never reach the reranker


def test_a_stored_resultsprocessing_none_applies_unless_the_request_overrides_it():
    base = kb(defaults=Context(unreranked_sources=["b"]))
    assert [r.doc_key for r in base.retrieve(request()).references] == ["a1", "b1", "a2", "b2"]
    overridden = base.retrieve(
        request(
            {"knowledgeSourceName": "a"},
            {"knowledgeSourceName": "b", "resultsProcessing": "rerank"},
        )
    )
    assert [r.doc_key for r in overridden.references] == ["a1", "b2", "a2"]


# --- failOnError ------------------------------------------------------------------------------


def test_fail_on_error_fails_the_whole_request_with_the_sources_error():
    script = Script({"QueryPlan": [{"needs_retrieval": True, "queries": [{"query": "passage"}]}]})
    base = kb(unreachable_index(), chat_model=ScriptedChatModel(script=script))
    body = {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "passage?"}]}],
        "outputMode": "answerSynthesis",
        "knowledgeSourceParams": [
            {"knowledgeSourceName": name, "kind": "searchIndex"} for name in ("a", "b")
        ]
        + [{"knowledgeSourceName": "broken", "kind": "searchIndex", "failOnError": True}],
    }
    with pytest.raises(KnowledgeSourceFailedError) as info:
        base.retrieve(body)
    assert (info.value.source, info.value.code) == ("broken", "ServiceUnavailable")
    assert str(info.value) == (
        "knowledge source 'broken' failed and its failOnError is set, so the request "
        "failed: the index is unreachable"
    )
    assert script.count("SynthesizedAnswer") == 0  # no answer is paid for


def test_without_fail_on_error_the_same_failure_is_a_partial_response():
    response = kb(unreachable_index()).retrieve(request())
    assert response.status_code == 206
    assert [r.doc_key for r in response.references] == ["a1", "b2", "a2"]


# --- maxOutputDocuments and warnings -----------------------------------------------------------


def test_max_output_documents_per_source_and_per_request_with_warnings():
    response = kb().retrieve(
        request(
            {"knowledgeSourceName": "a", "maxOutputDocuments": 1},
            {"knowledgeSourceName": "b"},
        )
    )
    assert [r.doc_key for r in response.references] == ["a1", "b2"]
    assert warnings(response) == {
        "a": "2 documents found by this query were left out of the response: 1 scored under "
        "the rerankerThreshold (2.5); 1 exceeded maxOutputDocuments.",
        "b": "1 document found by this query was left out of the response: 1 scored under "
        "the rerankerThreshold (2.5).",
    }
    capped = kb().retrieve(request(maxOutputDocuments=2))
    assert [r.doc_key for r in capped.references] == ["a1", "b2"]
    assert warnings(capped)["a"] == (
        "2 documents found by this query were left out of the response: 1 scored under the "
        "rerankerThreshold (2.5); 1 exceeded maxOutputDocuments."
    )


def test_documents_over_the_output_size_are_named_in_a_warning():
    response = kb().retrieve(request(maxOutputSize=60))
    assert [r.doc_key for r in response.references] == ["a1"]
    assert warnings(response)["b"] == (
        "2 documents found by this query were left out of the response: 1 scored under the "
        "rerankerThreshold (2.5); 1 did not fit the output size limit (maxOutputSize / "
        "maxOutputSizeInTokens)."
    )


def test_request_values_win_over_knowledge_base_defaults():
    base = kb(defaults=Context(max_output_documents=1))
    assert [r.doc_key for r in base.retrieve(request()).references] == ["a1"]
    widened = base.retrieve(request(maxOutputDocuments=3))
    assert [r.doc_key for r in widened.references] == ["a1", "b2", "a2"]


def test_excluding_every_source_the_run_may_query_is_a_400_not_an_empty_run():
    """Context.knowledge_sources restricts the run to 'a': excluding 'a' leaves nothing,
    although 'b' is still bound (the check used to count bound sources)."""
    restricted = kb(defaults=Context(knowledge_sources=["a"]))
    excluding_a = request({"knowledgeSourceName": "a", "neverQuerySource": True})
    with pytest.raises(InvalidRequestError, match=r"excludes every knowledge source this"):
        restricted.retrieve(excluding_a)
    # unrestricted, 'b' is left to query
    assert searched(kb().retrieve(excluding_a)) == ["b"]


def test_the_server_answers_the_same_exclusion_400():
    from fastapi.testclient import TestClient

    from agentic_retrieval.server import ServerSettings, create_app

    restricted = kb(defaults=Context(knowledge_sources=["a"]))
    app = create_app(restricted, settings=ServerSettings(read_env_keys=False), mcp=False)
    with TestClient(app) as client:
        answer = client.post(
            f"/knowledgebases/{restricted.name}/retrieve?api-version=2026-10-01",
            json=request({"knowledgeSourceName": "a", "neverQuerySource": True}),
        )
    assert answer.status_code == 400
    assert "neverQuerySource excludes every knowledge source" in answer.json()["error"]["message"]


@pytest.mark.parametrize(
    ("allowed", "params", "message"),
    [
        (
            ["a"],
            [{"knowledgeSourceName": "b"}],
            "the request names b, but this run may query only a",
        ),
        (["zzz"], [], "this run may query none of this knowledge base's sources"),
    ],
)
def test_a_request_left_with_no_source_to_query_is_a_400_not_an_empty_200(allowed, params, message):
    """Naming only sources the run may not query (Context.knowledge_sources) would search
    nothing and answer 200 with no references."""
    with pytest.raises(InvalidRequestError, match="no knowledge source left to query") as info:
        kb(defaults=Context(knowledge_sources=allowed)).retrieve(request(*params))
    assert message in str(info.value)
