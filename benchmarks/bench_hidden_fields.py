"""What building passages from readable fields costs a retrieve (issue 27 item 1).

An index with a ``retrievable: false`` field and a permission field (so every passage is
checked at read time), 300 documents of ``--chars`` characters each, one minimal retrieve
returning 50 references, timed 15 times after a warm-up; then the per-hit cost of
:meth:`DocumentView.passage` for a readable chunk and for a chunk that held hidden text.
Run it on two checkouts (``PYTHONPATH=<checkout>/src``) to compare: the per-hit part only
exists where the fix is.

    PYTHONPATH=src python benchmarks/bench_hidden_fields.py --chars 1000 20000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from agentic_retrieval.kb.catalog import ServiceCatalog
from agentic_retrieval.kb.management import put_index, put_knowledge_base, put_knowledge_source
from agentic_retrieval.kb.service import ServiceDirectory
from agentic_retrieval.permissions import Identity
from agentic_retrieval.sources.local.chunking import chunk_text

SENTENCE = "The vacation carry-over rules say unused days move to the next year. "
INDEX = {
    "name": "memos",
    "fields": [
        {"name": "id", "type": "Edm.String", "key": True},
        {"name": "body", "type": "Edm.String"},
        {"name": "notes", "type": "Edm.String", "retrievable": False},
        {"name": "readers", "type": "Collection(Edm.String)", "permissionFilter": "userIds"},
    ],
}


def body(chars: int) -> str:
    return (SENTENCE * (chars // len(SENTENCE) + 1))[:chars]


def retrieve_ms(chars: int) -> tuple[float, float, int]:
    service = ServiceDirectory(Path(tempfile.mkdtemp()) / "data")
    put_index(service, INDEX)
    documents = ServiceCatalog(service).index_documents("memos")
    assert documents is not None
    batch = [
        {"id": f"d{n}", "body": f"{n} {body(chars)}", "notes": f"note {n}", "readers": ["alice"]}
        for n in range(300)
    ]
    documents.apply(documents.validate_batch(batch))
    source = {"name": "ks", "kind": "searchIndex"}
    source["searchIndexParameters"] = {"searchIndexName": "memos"}
    put_knowledge_source(service, source)
    base = {"name": "hr", "knowledgeSources": [{"name": "ks"}]}
    base["retrieveDefaults"] = {"maxOutputDocuments": 50}
    put_knowledge_base(service, base)
    kb = ServiceCatalog(service).knowledge_base("hr")
    assert kb is not None
    request = {
        "intents": [{"search": "vacation rules"}],
        "retrievalReasoningEffort": {"kind": "minimal"},
    }
    alice = Identity(user_id="alice")
    kb.retrieve(request, identity=alice)
    times = []
    for _ in range(15):
        start = time.perf_counter()
        response = kb.retrieve(request, identity=alice)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3, min(times) * 1e3, len(response.references)


def passage_ms(chars: int) -> dict[str, float]:
    try:
        from agentic_retrieval.sources.local.passages import DocumentView
    except ImportError:
        return {}
    document = {"id": "d1", "body": body(chars), "notes": "note", "readers": ["alice", "u1"]}
    chunks = chunk_text("\n\n".join(["d1", document["body"], "note", "alice\nu1"]), 1200, 200)
    view = DocumentView(None, ("id", "body"), (), True)
    costs = {}
    for name, chunk in (("readable chunk", chunks[0]), ("chunk with hidden text", chunks[-1])):
        runs = 50
        start = time.perf_counter()
        for _ in range(runs):
            view.passage(document, chunk)
        costs[name] = (time.perf_counter() - start) / runs * 1e3
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chars", type=int, nargs="+", default=[1000, 20000])
    args = parser.parse_args()
    for chars in args.chars:
        p50, best, count = retrieve_ms(chars)
        line = (
            f"{chars:>7} chars: retrieve of {count} references p50 {p50:.0f} ms, min {best:.0f} ms"
        )
        for name, cost in passage_ms(chars).items():
            line += f"; passage, {name}: {cost:.2f} ms/hit"
        print(line)


if __name__ == "__main__":
    main()
