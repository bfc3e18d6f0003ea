"""Graph search end to end from Python: a KnowledgeBase over a local source with an entity
graph answers a two-hop question through ``graphSearch`` references and activity."""

from __future__ import annotations

import asyncio

import pytest
from tests.fakes import COMPANY_DOCS, COMPANY_ONTOLOGY, COMPANY_TRIPLES

from agentic_retrieval import KnowledgeBase
from agentic_retrieval.entitygraph import ExtractionLimits
from agentic_retrieval.errors import OntologyError
from agentic_retrieval.sources.graph import EntityGraphSource
from agentic_retrieval.sources.local.source import LocalKnowledgeSource
from agentic_retrieval.testing import ScriptedChatModel

QUESTION = "Where is the company that Acme Corp acquired located?"
GQL = (
    'MATCH (a:Organization {name: "Acme Corp"})-[:acquired]->(b:Organization)'
    "-[:locatedIn]->(c:City) RETURN b.name, c.name"
)
HYDRATE = {"includeQuery": True, "provenance": {"kind": "hydrate"}}


def graph_source(tmp_path, docs=COMPANY_DOCS, **fields) -> EntityGraphSource:
    local = LocalKnowledgeSource(
        "companies", tmp_path / "docs.sqlite", description="Company news", create=True
    )
    local.add_documents(docs, **fields)
    source = EntityGraphSource.open(local, COMPANY_ONTOLOGY, graph_name="companies-graph")
    script = {"ExtractedTriples": [{"triples": COMPANY_TRIPLES[d["id"]]} for d in docs]}
    reports = asyncio.run(
        source.extract(ScriptedChatModel(script=script), ExtractionLimits(chunks_per_minute=None))
    )
    assert sum(r.triples_written for r in reports) == 5
    return source


def ask(source, graph_params=HYDRATE, gql_replies=({"gql": GQL},), answer=None, **options):
    script = {
        "QueryPlan": [{"needs_retrieval": True, "queries": [{"query": QUESTION}]}],
        "GraphQueryPlan": list(gql_replies),
    }
    if answer is not None:
        script["SynthesizedAnswer"] = [{"answer": answer}]
    model = ScriptedChatModel(script=script)
    kb = KnowledgeBase([source], chat_model=model)
    params = {"knowledgeSourceName": "companies", "kind": "searchIndex"}
    if graph_params is not None:
        params["graphParameters"] = graph_params
    request = {
        "messages": [{"role": "user", "content": [{"type": "text", "text": QUESTION}]}],
        "retrievalReasoningEffort": {"kind": "low"},
        "includeActivity": True,
        "knowledgeSourceParams": [params],
    }
    if answer is not None:
        request["outputMode"] = "answerSynthesis"
    return kb.retrieve(request, **options).model_dump(by_alias=True, mode="json")


def graph_records(response) -> list[dict]:
    return [r for r in response["activity"] if r["type"] == "graphSearch"]


def test_a_two_hop_question_is_answered_through_graph_search_references(tmp_path):
    response = ask(graph_source(tmp_path))
    (record,) = graph_records(response)
    arguments = record["graphSearchArguments"]
    assert arguments["naturalLanguageQuery"] == QUESTION
    assert (arguments["gql"], arguments["attempts"], arguments["outcome"]) == (GQL, 1, "Success")
    assert arguments["modelName"] == "scripted" and arguments["inputTokens"] == 120
    assert arguments["graphIndexName"] == "companies-graph"
    graph_refs = [r for r in response["references"] if r["type"] == "graphSearch"]
    assert all(r["activitySource"] == record["id"] for r in graph_refs)
    rows = [r["sourceData"]["row"] for r in graph_refs if "row" in r["sourceData"]]
    assert rows == [{"b.name": "Beta Labs", "c.name": "Oslo"}]
    # the second hop's chunk: the lexical search for the question never finds it
    hydrated = {
        r["docKey"]: r["sourceData"]["content"] for r in graph_refs if "row" not in r["sourceData"]
    }
    assert any("Oslo" in text for text in hydrated.values())
    search_refs = [r for r in response["references"] if r["type"] == "searchIndex"]
    assert not any("Oslo" in str(r.get("sourceData", "")) for r in search_refs)
    assert "Oslo" in response["response"][0]["content"][0]["text"]


def test_without_graph_parameters_the_graph_is_not_searched(tmp_path):
    response = ask(graph_source(tmp_path), graph_params=None, gql_replies=())
    assert graph_records(response) == []
    assert "Oslo" not in response["response"][0]["content"][0]["text"]


def test_failed_queries_fall_back_to_entity_matching_and_the_retrieve_succeeds(tmp_path):
    bad = ({"gql": "MATCH (a:Company)-[:owns]->(b) RETURN a"}, "garbage", {"gql": "RETURN"})
    response = ask(graph_source(tmp_path), gql_replies=bad)
    (record,) = graph_records(response)
    arguments = record["graphSearchArguments"]
    assert (arguments["attempts"], arguments["outcome"]) == (3, "EntityMatchFallback")
    assert "gql" not in arguments and record.get("error") is None
    assert "Oslo" in response["response"][0]["content"][0]["text"]


def test_the_gql_is_recorded_only_when_asked(tmp_path):
    response = ask(graph_source(tmp_path), graph_params={"provenance": {"kind": "hydrate"}})
    (record,) = graph_records(response)
    assert "gql" not in record["graphSearchArguments"]


def test_hydrated_chunks_and_rows_are_trimmed_by_permission_like_searches(tmp_path):
    docs = [{**d, "groups": ["secret"] if d["id"] == "beta" else ["all"]} for d in COMPANY_DOCS]
    source = graph_source(tmp_path, docs, group_ids_field="groups")
    response = ask(source, identity={"user_id": "u1", "groups": ["all"]})
    text = response["response"][0]["content"][0]["text"]
    assert "Oslo" not in text and "Dana" not in text
    (record,) = graph_records(response)
    assert record["graphSearchArguments"]["outcome"] == "Success"


def test_an_ontology_that_is_not_json_ld_is_refused_when_attached(tmp_path):
    local = LocalKnowledgeSource("companies", tmp_path / "d.sqlite", create=True)
    with pytest.raises(OntologyError, match="declares no class"):
        EntityGraphSource.open(local, '{"@graph": []}', graph_name="g")


def test_extraction_is_incremental_a_deleted_document_loses_its_assertions(tmp_path):
    source = graph_source(tmp_path)
    store, name = source.graph.store, source.graph.graph_name
    model = ScriptedChatModel(script={"ExtractedTriples": []})
    assert asyncio.run(source.extract(model)) == []  # nothing changed: no model call
    source.inner.delete_documents(["acme"])
    assert asyncio.run(source.extract(model)) == []
    assert store.count(name, "acme") == 0 and store.count(name) == 4


def test_an_answer_may_cite_graph_search_references_by_ref_id(tmp_path):
    cited = "".join(f"[ref_id:{i}]" for i in range(8))
    response = ask(graph_source(tmp_path), answer=f"Beta Labs is in Oslo {cited}.")
    kinds = {r["id"]: r["type"] for r in response["references"]}
    answer = response["response"][0]["content"][0]["text"]
    kept = [i for i in range(8) if f"[ref_id:{i}]" in answer]
    assert "graphSearch" in {kinds[str(i)] for i in kept}
    assert all(str(i) in kinds for i in kept)  # a citation of no reference is removed


def test_a_medium_follow_up_round_searches_the_graph_too(tmp_path):
    followup = "Who founded Beta Labs?"
    model = ScriptedChatModel(
        script={
            "QueryPlan": [{"needs_retrieval": True, "queries": [{"query": QUESTION}]}],
            "GraphQueryPlan": [{"gql": GQL}, "garbage", "garbage", "garbage"],
            "EvidenceAssessment": [
                {"is_sufficient": False, "confidence": 0.3, "followup_queries": [followup]},
                {"is_sufficient": True, "confidence": 0.9},
            ],
        }
    )
    kb = KnowledgeBase([graph_source(tmp_path)], chat_model=model)
    response = kb.retrieve(
        {
            "messages": [{"role": "user", "content": [{"type": "text", "text": QUESTION}]}],
            "retrievalReasoningEffort": {"kind": "medium"},
            "includeActivity": True,
            "knowledgeSourceParams": [
                {
                    "knowledgeSourceName": "companies",
                    "kind": "searchIndex",
                    "graphParameters": HYDRATE,
                }
            ],
        }
    ).model_dump(by_alias=True, mode="json")
    records = graph_records(response)
    assert [r["graphSearchArguments"]["naturalLanguageQuery"] for r in records] == [
        QUESTION,
        followup,
    ]
    assert records[1]["graphSearchArguments"]["outcome"] == "EntityMatchFallback"
    followed = [r for r in response["references"] if r["activitySource"] == records[1]["id"]]
    assert any(r["sourceData"].get("row", {}).get("predicate") == "foundedBy" for r in followed)


def test_a_chunk_found_by_search_and_hydrated_by_the_graph_is_kept_as_graph_evidence() -> None:
    """Search ranks a multi-hop answer's chunk by its likeness to the question, and the
    calibrated threshold may cut it; the graph reached it through a matching row, so the
    candidate kept is the graph's (ordered, never cut by that threshold) with both queries."""
    from agentic_retrieval.graph.records import RetrievedHit
    from agentic_retrieval.nodes.rerank import unique_candidates

    def hit(key: str, activity: str, query: str, graph: str | None) -> RetrievedHit:
        return RetrievedHit(
            doc_key=key,
            content="Beta Labs has its offices in Oslo.",
            source="news",
            score=1.0,
            vector_similarity=None if graph else 0.31,
            subquery_id="q0",
            query=query,
            activity_key=activity,
            graph_index=graph,
        )

    for graph_key in ("beta.md#0", "chunk-7"):  # the same key, or a twin under another key
        searched = hit("beta.md#0", "search:q0:news", "where is it", None)
        hydrated = hit(graph_key, "graph:q0:news", "graph question", "news-graph")
        kept, queries = unique_candidates([searched, hydrated])
        assert [(h.doc_key, h.graph_index) for h in kept] == [(graph_key, "news-graph")]
        assert queries[("news", graph_key)] == {"where is it", "graph question"}


def test_a_chunk_both_searched_and_hydrated_in_one_run_comes_back_as_graph_evidence(tmp_path):
    """The state's reducer used to drop whichever of the two branches wrote the chunk second
    (the same source, key and subquery), so rerank never saw the graph's copy: a chunk the
    search also found was always reported as the search's, however the graph reached it."""
    source = graph_source(tmp_path)
    question = "Who founded Beta Labs, the lab Acme Corp acquired?"
    kb = KnowledgeBase([source])
    response = kb.retrieve(
        {
            "messages": [{"role": "user", "content": [{"type": "text", "text": question}]}],
            "retrievalReasoningEffort": {"kind": "minimal"},
            "knowledgeSourceParams": [
                {
                    "knowledgeSourceName": "companies",
                    "kind": "searchIndex",
                    "graphParameters": HYDRATE,
                }
            ],
        }
    ).model_dump(by_alias=True, mode="json")
    searched = next(r for r in response["activity"] if r["type"] == "searchIndex")
    assert searched["count"] >= 2  # the search finds both chunks by their words
    chunks = {
        r["docKey"]: r["type"]
        for r in response["references"]
        if "row" not in (r.get("sourceData") or {})
    }
    assert chunks == {"acme#0": "graphSearch", "beta#0": "graphSearch"}


def test_the_graphs_copy_of_a_searched_chunk_keeps_the_searchs_score() -> None:
    """A hydrated chunk has no score or similarity of its own: kept as the graph's without
    the search's, a chunk the search ranked first fell below every other candidate (measured
    on the Earth-book multi-hop questions: evidence recall 0.944 -> 0.444 at top 2 lexical,
    0.944 -> 0.444 at top 5 hybrid)."""
    from agentic_retrieval.graph.records import RetrievedHit
    from agentic_retrieval.nodes.rerank import unique_candidates

    def hit(key: str, score: float, graph: str | None) -> RetrievedHit:
        return RetrievedHit(
            doc_key=key,
            content=f"text of {key}",
            source="news",
            score=score,
            vector_similarity=None if graph else score / 10,
            subquery_id="q0",
            query="q",
            activity_key="graph:q0:news" if graph else "search:q0:news",
            graph_index=graph,
        )

    kept, _ = unique_candidates([hit("a", 7.5, None), hit("b", 3.0, None), hit("a", 0.0, "g")])
    assert [(h.doc_key, h.graph_index, h.score, h.vector_similarity) for h in kept] == [
        ("a", "g", 7.5, 0.75),
        ("b", None, 3.0, 0.3),
    ]
