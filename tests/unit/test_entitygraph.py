"""Entity graphs from Python: ontology, extraction with provenance, edge list, GQL, fallback."""

from __future__ import annotations

import asyncio
import json

import pytest
from tests.fakes import COMPANY_DOCS, COMPANY_ONTOLOGY, COMPANY_TRIPLES, triple

from agentic_retrieval.entitygraph import (
    Assertion,
    Chunk,
    CostBound,
    EdgeStore,
    EntityGraph,
    ExtractionLimits,
    GraphExtractor,
    parse_ontology,
    parse_query,
    search_graph,
    sync_document,
    validate_query,
)
from agentic_retrieval.errors import GraphQueryCostError, GraphQueryError, OntologyError
from agentic_retrieval.testing import ScriptedChatModel

GRAPH = "companies"
NO_PACING = ExtractionLimits(chunks_per_minute=None)


def chunks_of(doc: dict) -> list[Chunk]:
    return [Chunk(f"{doc['id']}_0", doc["id"], doc["text"])]


def extract_all(store: EdgeStore, script: dict) -> list:
    model = ScriptedChatModel(script=script)
    extractor = GraphExtractor(parse_ontology(COMPANY_ONTOLOGY), model, GRAPH, NO_PACING)

    async def run() -> list:
        return [await sync_document(store, extractor, d["id"], chunks_of(d)) for d in COMPANY_DOCS]

    return asyncio.run(run())


@pytest.fixture
def store(tmp_path):
    return EdgeStore(tmp_path / "graph.sqlite")


@pytest.fixture
def graph(store):
    extract_all(
        store, {"ExtractedTriples": [{"triples": COMPANY_TRIPLES[d["id"]]} for d in COMPANY_DOCS]}
    )
    return EntityGraph(parse_ontology(COMPANY_ONTOLOGY), store, GRAPH)


# --- ontology ----------------------------------------------------------------------------------


def test_an_ontology_reads_classes_and_properties_with_domain_and_range():
    onto = parse_ontology(COMPANY_ONTOLOGY, "org")
    assert list(onto.classes) == ["Organization", "Person", "City"]
    assert [p.name for p in onto.object_properties] == ["acquired", "locatedIn", "foundedBy"]
    located = onto.properties["locatedIn"]
    assert (located.domain, located.range) == (("Organization",), ("City",))
    assert onto.properties["foundedYear"].literal == "double"


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("{not json", "is not JSON"),
        ('{"@context": "https://schema.org/", "@graph": []}', "remote @context"),
        ('{"@graph": [{"@type": "owl:Class"}]}', "node 0 has no @id"),
        ('{"@graph": [{"@id": "ex:p", "@type": "owl:ObjectProperty"}]}', "declares no class"),
        (
            '{"@graph": [{"@id": "ex:A", "@type": "owl:Class"}, {"@id": "ex:p", '
            '"@type": "owl:ObjectProperty", "rdfs:range": {"@id": "ex:B"}}]}',
            "property 'p' names class 'B'",
        ),
    ],
)
def test_an_ontology_that_is_not_the_supported_json_ld_says_what_is_wrong(text, names):
    with pytest.raises(OntologyError, match=names):
        parse_ontology(text)


# --- extraction and the edge list --------------------------------------------------------------


def test_extraction_writes_triples_with_their_provenance(graph, store):
    (acquired,) = store.assertions(GRAPH, "acme")
    assert (acquired.subject_name, acquired.predicate, acquired.object_name) == (
        "Acme Corp",
        "acquired",
        "Beta Labs",
    )
    assert (acquired.subject_type, acquired.object_type) == ("Organization", "Organization")
    assert (acquired.source_chunk_id, acquired.source_parent_id) == ("acme_0", "acme")
    assert acquired.confidence == 0.9 and acquired.graph_name == GRAPH
    founded = {a.predicate: a for a in store.assertions(GRAPH, "beta")}["foundedYear"]
    assert founded.object_literal == 2015.0 and founded.object_id is None


def test_unknown_properties_and_classes_are_dropped_and_counted(store):
    bad = [
        triple("Acme Corp", "Organization", "acquired", "Beta Labs", "Organization"),
        triple("Acme Corp", "Organization", "sued", "Beta Labs", "Organization"),
        triple("Acme Corp", "Planet", "locatedIn", "Mars", "City"),
        triple("Acme Corp", "Organization", "locatedIn", "Dana Smith", "Person"),
    ]
    reports = extract_all(
        store, {"ExtractedTriples": [{"triples": bad}, {"triples": []}, {"triples": []}]}
    )
    assert reports[0].triples_written == 1
    assert dict(reports[0].dropped) == {
        "unknownProperty": 1,
        "unknownClass": 1,
        "rangeMismatch": 1,
    }
    assert [a.predicate for a in store.assertions(GRAPH)] == ["acquired"]


def test_garbage_is_retried_then_recorded_and_the_document_keeps_its_old_assertions(store):
    good = [{"triples": COMPANY_TRIPLES[d["id"]]} for d in COMPANY_DOCS]
    extract_all(store, {"ExtractedTriples": good})
    before = store.assertions(GRAPH, "beta")
    # acme: garbage once then a good reply; beta: garbage on every attempt
    replies = ["not json at all", good[0], "nope", "still nope", "no", good[2]]
    reports = extract_all(store, {"ExtractedTriples": replies})
    assert [r.written for r in reports] == [True, False, True]
    (failure,) = reports[1].failures
    assert (failure.chunk_id, failure.code) == ("beta_0", "ModelOutputInvalid")
    assert store.assertions(GRAPH, "beta") == before


def test_the_token_budget_fails_the_chunks_past_it_without_a_call(store):
    model = ScriptedChatModel(script={"ExtractedTriples": [{"triples": []}]})
    limits = ExtractionLimits(chunks_per_minute=None, max_tokens=100)
    extractor = GraphExtractor(parse_ontology(COMPANY_ONTOLOGY), model, GRAPH, limits)
    chunks = [Chunk("d_0", "d", "one"), Chunk("d_1", "d", "two")]
    report = asyncio.run(sync_document(store, extractor, "d", chunks))
    assert [(f.chunk_id, f.code) for f in report.failures] == [("d_1", "TokenBudgetExhausted")]
    assert model.script.count() == 1 and store.count(GRAPH) == 0


def test_re_extracting_a_document_replaces_only_its_assertions_and_deleting_removes_them(
    graph, store
):
    model = ScriptedChatModel(
        script={
            "ExtractedTriples": [
                {"triples": [triple("Beta Labs", "Organization", "locatedIn", "Bergen", "City")]}
            ]
        }
    )
    extractor = GraphExtractor(graph.ontology, model, GRAPH, NO_PACING)
    asyncio.run(sync_document(store, extractor, "beta", chunks_of(COMPANY_DOCS[1])))
    assert [a.object_name for a in store.assertions(GRAPH, "beta")] == ["Bergen"]
    assert store.count(GRAPH, "acme") == 1 and store.count(GRAPH, "gamma") == 1
    assert store.delete_document(GRAPH, "acme") == 1
    assert store.count(GRAPH) == 2


# --- GQL -----------------------------------------------------------------------------------


def test_a_two_hop_query_finds_the_city_of_the_acquired_company_with_its_evidence(graph):
    result = graph.query(
        'MATCH (a:Organization {name: "Acme Corp"})-[:acquired]->(b:Organization)'
        "-[:locatedIn]->(c:City) RETURN b.name, c.name AS city LIMIT 5"
    )
    (row,) = result.rows
    assert row.values == {"b.name": "Beta Labs", "city": "Oslo"}
    assert [a.source_chunk_id for a in row.evidence] == ["acme_0", "beta_0"]


def test_filters_incoming_edges_and_literals(graph):
    rows = graph.query(
        'MATCH (c:City)<-[:locatedIn]-(o) WHERE c.name CONTAINS "osl" RETURN o.name'
    ).rows
    assert [r.values for r in rows] == [{"o.name": "Beta Labs"}]
    rows = graph.query('MATCH (o {name: "beta labs"})-[:foundedYear]->(y) RETURN y.name').rows
    assert [r.values for r in rows] == [{"y.name": "2015.0"}]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("MATCH (a)-[:acquired]->(b)", "expected RETURN"),
        ("MATCH (a:Organization) RETURN a", "expected an edge pattern"),
        ("MATCH (a)-[:acquired]->(b)-[]->(c)-[]->(d)-[]->(e) RETURN a", "at most 3 edges"),
        (
            'MATCH (a)-[:acquired]->(b) WHERE a.name STARTS WITH "x" RETURN a',
            "expected '=', '<>' or",
        ),
        ("MATCH (a:Company)-[:acquired]->(b) RETURN a", "unknown class 'Company'"),
        ("MATCH (a)-[:sued]->(b) RETURN a", "unknown property 'sued'"),
        ("MATCH (a:City)-[:acquired]->(b) RETURN a", "not from 'City'"),
        ("MATCH (a)-[:locatedIn]->(b:Person) RETURN a", "not to 'Person'"),
        ('MATCH (a)-[:acquired]->(b) WHERE a.size = "1" RETURN a', "filters may use"),
        ("MATCH (a)-[:acquired]->(b) RETURN z", "unbound variable 'z'"),
    ],
)
def test_queries_outside_the_subset_or_the_ontology_are_refused_naming_why(text, message):
    onto = parse_ontology(COMPANY_ONTOLOGY)
    with pytest.raises(GraphQueryError, match=message):
        validate_query(parse_query(text), onto)


def test_a_query_over_its_cost_bound_stops_with_a_clear_error(graph):
    with pytest.raises(GraphQueryCostError, match="more than 2 rows"):
        graph.query("MATCH (a)-[:locatedIn]->(c) RETURN a", CostBound(max_rows=2))
    assert (
        len(graph.query("MATCH (a)-[:locatedIn]->(c) RETURN a", CostBound(max_rows=50)).rows) == 2
    )


# --- graph search: the model's query, retried, then entity matching ----------------------------

GOOD_GQL = (
    'MATCH (a:Organization {name: "Acme Corp"})-[:acquired]->(b)-[:locatedIn]->(c) '
    "RETURN b.name, c.name"
)


def test_an_invalid_query_is_retried_with_its_error_then_the_next_one_runs(graph):
    model = ScriptedChatModel(
        script={
            "GraphQueryPlan": [{"gql": "MATCH (a:Company)-[:x]->(b) RETURN a"}, {"gql": GOOD_GQL}]
        }
    )
    outcome = asyncio.run(search_graph("Where is what Acme bought?", graph, model))
    assert (outcome.outcome, outcome.attempts, outcome.gql) == ("Success", 2, GOOD_GQL)
    assert [r.values["c.name"] for r in outcome.rows] == ["Oslo"]
    retry_prompt = model.script.calls[1][1][-1].content
    assert "unknown class 'Company'" in retry_prompt
    assert outcome.usage.input_tokens == 240


def test_after_its_attempts_the_search_falls_back_to_the_entities_the_question_names(graph):
    model = ScriptedChatModel(script={"GraphQueryPlan": ["garbage", {"gql": "MATCH"}]})
    outcome = asyncio.run(
        search_graph("Where is the company ACME corp acquired?", graph, model, attempts=2)
    )
    assert (outcome.outcome, outcome.attempts, outcome.gql) == ("EntityMatchFallback", 2, None)
    assert len(outcome.errors) == 2
    facts = [(r.values["subject"], r.values["predicate"], r.values["object"]) for r in outcome.rows]
    # Acme's own fact first, then its neighbour Beta Labs' facts (the second hop)
    assert facts[0] == ("Acme Corp", "acquired", "Beta Labs")
    assert ("Beta Labs", "locatedIn", "Oslo") in facts
    assert ("Gamma Works", "locatedIn", "Lyon") not in facts


def test_without_a_model_the_search_matches_entities_at_once(graph):
    outcome = asyncio.run(search_graph("Who founded Beta Labs?", graph, None))
    assert outcome.attempts == 0 and outcome.outcome == "EntityMatchFallback"
    assert {r.values["predicate"] for r in outcome.rows} >= {"foundedBy", "acquired"}


def test_the_edge_list_keeps_assertions_as_json_literals(graph, store):
    raw = (
        store._connect()
        .execute("SELECT object_literal FROM graph_assertions WHERE predicate = 'foundedYear'")
        .fetchone()[0]
    )
    assert json.loads(raw) == 2015.0


def test_a_hub_query_stops_once_its_limit_is_found_instead_of_expanding_every_neighbour(store):
    hub = [
        Assertion.create(
            GRAPH,
            ("Hub Inc", "Organization"),
            "acquired",
            (f"Sub {i}", "Organization"),
            chunk_id=f"hub_{i}",
            parent_id="hub",
        )
        for i in range(600)
    ]
    cities = [
        Assertion.create(
            GRAPH,
            (f"Sub {i}", "Organization"),
            "locatedIn",
            (f"City {i}", "City"),
            chunk_id=f"sub_{i}",
            parent_id=f"sub{i}",
        )
        for i in range(600)
    ]
    store.replace_document(GRAPH, "hub", hub + cities)
    graph = EntityGraph(parse_ontology(COMPANY_ONTOLOGY), store, GRAPH)
    text = 'MATCH (a {name: "Hub Inc"})-[:acquired]->(b)-[:locatedIn]->(c) RETURN c.name LIMIT 5'
    result = graph.query(text, CostBound(max_rows=1000))
    assert len(result.rows) == 5 and result.visited < 1000
