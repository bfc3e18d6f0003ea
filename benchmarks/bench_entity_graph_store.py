"""Entity graph store: the SQLite edge list against an embedded graph database (LadybugDB).

Generates a graph of ~100k assertions (20k entities of 3 classes, 4 properties, 10 assertions
per document) and measures, for each store: writing it document by document (the incremental
path: one transaction per document), deleting 100 documents, and 1-, 2- and 3-hop queries
from a named entity (the GQL subset through ``EntityGraph.query`` for SQLite; the same
pattern in Cypher for LadybugDB). LadybugDB (the Kùzu successor, ``ladybug`` on PyPI) is not
a dependency: install it beside the library to include it (``pip install ladybug`` or
``--target DIR`` and ``PYTHONPATH=DIR``); without it only SQLite is measured.

    PYTHONPATH=src python benchmarks/bench_entity_graph_store.py [--edges 100000]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from agentic_retrieval.entitygraph import (
    Assertion,
    CostBound,
    EdgeStore,
    EntityGraph,
    parse_ontology,
)
from agentic_retrieval.errors import GraphQueryCostError

UNBOUNDED = CostBound(max_rows=10**9, max_seconds=600)

CLASSES = ("Organization", "Person", "City")
PROPERTIES = ("partnerOf", "employs", "locatedIn", "suppliedBy")
ONTOLOGY = (
    '{"@context": {"owl": "http://www.w3.org/2002/07/owl#", "ex": "http://e.org/#"}, "@graph": ['
    + ", ".join(f'{{"@id": "ex:{c}", "@type": "owl:Class"}}' for c in CLASSES)
    + ", "
    + ", ".join(f'{{"@id": "ex:{p}", "@type": "owl:ObjectProperty"}}' for p in PROPERTIES)
    + "]}"
)
GRAPH = "bench"
PER_DOCUMENT = 10


def generate(edges: int, entities: int, seed: int = 7) -> dict[str, list[Assertion]]:
    """Assertions by document: random entities, a third of subjects skewed (graphs have hubs)."""
    rng = random.Random(seed)
    names = [(f"Entity {i}", CLASSES[i % len(CLASSES)]) for i in range(entities)]
    documents: dict[str, list[Assertion]] = {}
    for n in range(edges):
        parent = f"doc{n // PER_DOCUMENT}"
        subject = names[
            min(int(rng.paretovariate(1.2)) - 1, entities - 1)
            if n % 3 == 0
            else rng.randrange(entities)
        ]
        obj = names[rng.randrange(entities)]
        documents.setdefault(parent, []).append(
            Assertion.create(
                GRAPH,
                subject,
                rng.choice(PROPERTIES),
                obj,
                chunk_id=f"{parent}_{n % PER_DOCUMENT // 5}",
                parent_id=parent,
                confidence=rng.random(),
            )
        )
    return documents


def timed(fn, *args):
    started = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - started


def percentiles(samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    p95 = ms[min(len(ms) - 1, int(len(ms) * 0.95))]
    return f"p50 {statistics.median(ms):7.2f} ms  p95 {p95:7.2f} ms"


def queries(starts: list[tuple[str, str]]) -> dict[int, list[str]]:
    """GQL per hop count from each start entity."""
    out: dict[int, list[str]] = {1: [], 2: [], 3: []}
    for name, cls in starts:
        head = f'MATCH (a:{cls} {{name: "{name}"}})'
        out[1].append(f"{head}-[:partnerOf]->(b) RETURN b.name LIMIT 100")
        out[2].append(f"{head}-[:partnerOf]->(b)-[]->(c) RETURN b.name, c.name LIMIT 100")
        out[3].append(
            f"{head}-[:partnerOf]->(b)-[]->(c)-[:locatedIn]->(d) RETURN c.name, d.name LIMIT 100"
        )
    return out


def bench_sqlite(documents, starts, folder: Path) -> None:
    store = EdgeStore(folder / "edges.sqlite")
    graph = EntityGraph(parse_ontology(ONTOLOGY), store, GRAPH)
    _, write = timed(lambda: [store.replace_document(GRAPH, p, a) for p, a in documents.items()])
    total = store.count(GRAPH)
    print(
        f"sqlite   write {total} assertions, {len(documents)} documents: {write:6.1f} s "
        f"({total / write:,.0f}/s)"
    )
    for hops, texts in queries(starts).items():
        samples, rows, over = [], 0, 0
        for text in texts:
            result, seconds = timed(graph.query, text, UNBOUNDED)
            samples.append(seconds)
            rows += len(result.rows)
            try:
                graph.query(text)
            except GraphQueryCostError:
                over += 1
        print(
            f"sqlite   {hops}-hop: {percentiles(samples)}  ({rows / len(texts):.1f} rows; "
            f"{over} of {len(texts)} over the default cost bound)"
        )
    parents = list(documents)[:100]
    _, delete = timed(lambda: [store.delete_document(GRAPH, p) for p in parents])
    print(f"sqlite   delete 100 documents: {delete * 1000:.0f} ms")
    print(f"sqlite   file size: {(folder / 'edges.sqlite').stat().st_size / 2**20:.1f} MiB")


def bulk_load(conn, documents, folder: Path) -> None:
    """LadybugDB's fast path: every node and edge from CSV files with COPY (no per-document
    transaction, so not the incremental path; measured to compare query times on one graph)."""
    import csv

    entities: dict[str, tuple[str, str]] = {}
    with open(folder / "rels.csv", "w", newline="") as handle:
        out = csv.writer(handle)
        for parent, assertions in documents.items():
            for a in assertions:
                entities[a.subject_id] = (a.subject_name, a.subject_type)
                entities[a.object_id] = (a.object_name, a.object_type)
                out.writerow(
                    [
                        a.subject_id,
                        a.object_id,
                        a.assertion_id,
                        a.fact_id,
                        a.predicate,
                        a.confidence,
                        a.source_chunk_id,
                        parent,
                    ]
                )
    with open(folder / "nodes.csv", "w", newline="") as handle:
        csv.writer(handle).writerows([k, *v] for k, v in entities.items())
    conn.execute(f"COPY Entity FROM '{folder / 'nodes.csv'}'")
    conn.execute(f"COPY Asserts FROM '{folder / 'rels.csv'}'")


def bench_ladybug(documents, starts, folder: Path, bulk: bool = False) -> None:
    try:
        import ladybug  # type: ignore[import-not-found]
    except ImportError:
        print("ladybug  not installed: skipped")
        return
    db = ladybug.Database(str(folder / "graph.lbug"))
    conn = ladybug.Connection(db)
    conn.execute("CREATE NODE TABLE Entity(id STRING, name STRING, type STRING, PRIMARY KEY(id))")
    conn.execute(
        "CREATE REL TABLE Asserts(FROM Entity TO Entity, assertion_id STRING, fact_id STRING, "
        "predicate STRING, confidence DOUBLE, chunk_id STRING, parent_id STRING)"
    )

    def write_document(parent: str, assertions: list[Assertion]) -> None:
        """One transaction per document, its assertions in one UNWIND (the fast form)."""
        rows = [
            {
                "sid": a.subject_id,
                "sn": a.subject_name,
                "st": a.subject_type,
                "oid": a.object_id,
                "oname": a.object_name,
                "otype": a.object_type,
                "aid": a.assertion_id,
                "fid": a.fact_id,
                "p": a.predicate,
                "c": a.confidence,
                "ch": a.source_chunk_id,
            }
            for a in assertions
        ]
        conn.execute("BEGIN TRANSACTION")
        conn.execute("MATCH ()-[r:Asserts {parent_id: $p}]->() DELETE r", {"p": parent})
        conn.execute(
            "UNWIND $rows AS x "
            "MERGE (s:Entity {id: x.sid}) ON CREATE SET s.name = x.sn, s.type = x.st "
            "MERGE (o:Entity {id: x.oid}) ON CREATE SET o.name = x.oname, o.type = x.otype "
            "CREATE (s)-[:Asserts {assertion_id: x.aid, fact_id: x.fid, predicate: x.p, "
            "confidence: x.c, chunk_id: x.ch, parent_id: $par}]->(o)",
            {"rows": rows, "par": parent},
        )
        conn.execute("COMMIT")

    if bulk:
        _, write = timed(bulk_load, conn, documents, folder)
        how = "bulk COPY"
    else:
        _, write = timed(lambda: [write_document(p, a) for p, a in documents.items()])
        how = "per document"
    total = conn.execute("MATCH ()-[r:Asserts]->() RETURN count(r)").get_next()[0]
    print(
        f"ladybug  write {total} assertions, {len(documents)} documents ({how}): "
        f"{write:6.1f} s ({total / write:,.0f}/s)"
    )
    cypher = {
        1: "MATCH (a:Entity {id: $id})-[:Asserts {predicate: 'partnerOf'}]->(b) "
        "RETURN b.id LIMIT 100",
        2: "MATCH (a:Entity {id: $id})-[:Asserts {predicate: 'partnerOf'}]->(b)-[:Asserts]->(c) "
        "RETURN b.id, c.id LIMIT 100",
        3: "MATCH (a:Entity {id: $id})-[:Asserts {predicate: 'partnerOf'}]->(b)-[:Asserts]->(c)"
        "-[:Asserts {predicate: 'locatedIn'}]->(d) RETURN c.id, d.id LIMIT 100",
    }
    for hops, text in cypher.items():
        samples, rows = [], 0
        for name, cls in starts:
            ident = f"{cls}:{name.lower()}"
            started = time.perf_counter()
            result = conn.execute(text, {"id": ident})
            got = 0
            while result.has_next():
                result.get_next()
                got += 1
            samples.append(time.perf_counter() - started)
            rows += got
        print(f"ladybug  {hops}-hop: {percentiles(samples)}  ({rows / len(starts):.1f} rows)")
    parents = list(documents)[:100]
    _, delete = timed(
        lambda: [
            conn.execute("MATCH ()-[r:Asserts {parent_id: $p}]->() DELETE r", {"p": p})
            for p in parents
        ]
    )
    print(f"ladybug  delete 100 documents: {delete * 1000:.0f} ms")
    size = sum(f.stat().st_size for f in folder.glob("graph.lbug*") if f.is_file())
    print(f"ladybug  files size: {size / 2**20:.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", type=int, default=100_000)
    parser.add_argument("--entities", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--only", choices=("sqlite", "ladybug"), default=None)
    parser.add_argument(
        "--ladybug-bulk", action="store_true", help="load LadybugDB with COPY, not per document"
    )
    args = parser.parse_args()
    documents = generate(args.edges, args.entities)
    rng = random.Random(11)
    heads = [
        a for assertions in documents.values() for a in assertions if a.predicate == "partnerOf"
    ]
    starts = [(a.subject_name, a.subject_type) for a in rng.sample(heads, args.queries)]
    print(
        f"load average {os.getloadavg()[0]:.1f}; {args.edges} assertions, {args.entities} entities"
    )
    with tempfile.TemporaryDirectory() as folder:
        if args.only != "ladybug":
            bench_sqlite(documents, starts, Path(folder))
        if args.only != "sqlite":
            bench_ladybug(documents, starts, Path(folder), args.ladybug_bulk)


if __name__ == "__main__":
    main()
