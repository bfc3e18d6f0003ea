"""What the entity graph buys: evidence recall on multi-hop questions, without and with it.

Run: ``.venv/bin/python benchmarks/bench_multihop.py [--dataset earth-multihop-bridge]
[--split heldout] [--chat-model stand-in] [--effort minimal,low] [--top-n 10,50] [--hybrid]``.
Prints the eval report; the recorded figures live in benchmarks/README.md.

The questions (``benchmarks/datasets/earth-multihop/``, or the harder
``earth-multihop-bridge/`` whose second page only the bridging entity reaches) are asked
over the NASA Earth-book pages of ``../shared/data`` (skipped when absent): each answer joins
two pages through an entity (an organism, a cloud type, a satellite, a mountain range). The
pages are indexed into a knowledge base under ``--work`` (lexical unless ``--hybrid``), each
configuration runs without and then with ``graphParameters``, and the graph is extracted by
``--chat-model``:
``stand-in`` (the ontology's rule-based stand-in, no LLM) or ``provider:model`` (an
OpenAI-compatible server: ``openai:NAME`` with ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from agentic_retrieval.entitygraph import ResultRow
from agentic_retrieval.eval import Question, evaluate
from agentic_retrieval.eval.configurations import configuration_grid, parse_list
from agentic_retrieval.eval.graphs import STAND_IN, GraphSetup, with_graphs
from agentic_retrieval.eval.standin import OntologyStandInModel
from agentic_retrieval.kb.directory import KnowledgeBaseDirectory
from agentic_retrieval.sources.graph import EntityGraphSource
from agentic_retrieval.sources.local.ingest import slugify

ROOT = Path(__file__).resolve().parent
DATASETS = ROOT / "datasets"
DATASET = DATASETS / "earth-multihop"
PAGES = ROOT.parent.parent / "shared" / "data" / "earth-book" / "pages"


def knowledge_base(work: Path, hybrid: bool) -> Path:
    """The Earth-book pages indexed once under ``work`` (reused when already there)."""
    path = work / ("earth-hybrid" if hybrid else "earth-lexical")
    if (path / "knowledge-base.json").is_file():
        return path
    directory = KnowledgeBaseDirectory(path).create(name="earth-book")
    directory.add_or_update_source(
        "earth", description="NASA Earth-book pages", embeddings="local" if hybrid else False
    )
    directory.index("earth", [PAGES])
    directory.close()
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dataset", default="earth-multihop", choices=("earth-multihop", "earth-multihop-bridge")
    )
    parser.add_argument("--split", default="heldout", choices=("heldout", "calibration"))
    parser.add_argument("--chat-model", default="stand-in")
    parser.add_argument("--effort", default="minimal,low")
    parser.add_argument("--top-n", default="10")
    parser.add_argument("--hybrid", action="store_true")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "multihop")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    if not PAGES.is_dir():
        print(f"skipped: {PAGES} is absent (the multi-hop questions are asked over it)")
        return 0
    configurations, _ = configuration_grid(
        efforts=parse_list(args.effort, "--effort"),
        top_ns=[int(n) for n in parse_list(args.top_n, "--top-n")],
        graphs=(False, True),
    )
    kb = knowledge_base(args.work, args.hybrid)
    report = evaluate(
        kb,
        configurations,
        questions=DATASETS / args.dataset / f"{args.split}.jsonl",
        chat_model=args.chat_model,
        graph=DATASET / "ontology.jsonld",
        cache_dir=args.work / "cache",
        output_dir=args.output,
        embeddings=None if args.hybrid else False,
    )
    print(f"dataset: {args.dataset}; split: {args.split}; load average: {os.getloadavg()[0]:.1f}")
    print(report.markdown())
    if args.chat_model == STAND_IN:
        print(reach(kb, args.work / "cache", report.questions))
    return 0


def reach(kb: Path, cache: Path, questions: list[Question]) -> str:
    """How many labelled pages the graph search itself reaches, before any ranking.

    Entity matching (minimal effort) and the stand-in's two-hop query (low effort) are run
    on the graph the evaluation extracted; a page is reached when a row rests on it.
    """
    setup = GraphSetup((DATASET / "ontology.jsonld").read_text(), STAND_IN)
    model = setup.resolve_model(None)
    directory = KnowledgeBaseDirectory(kb).load()
    try:
        (source,) = with_graphs(directory.open_sources(False), setup, model, cache)
        assert isinstance(source, EntityGraphSource) and isinstance(model, OntologyStandInModel)
        graph = source.entity_graph
        folded = {k: slugify(k) for q in questions for k in q.relevant}
        lines = ["| question | pages | reached by entity matching | by the two-hop query |"]
        lines.append("|---|---|---|---|")
        totals = [0, 0, 0]
        for question in questions:
            wanted = [folded[k] for k in question.relevant]
            matched = _parents(graph.match_entities(question.text))
            gql = model.gazetteer.graph_query(question.text)
            queried = _parents(graph.query(gql).rows) if gql else set()
            hits = [sum(w in found for w in wanted) for found in (matched, queried)]
            totals = [totals[0] + len(wanted), totals[1] + hits[0], totals[2] + hits[1]]
            lines.append(f"| {question.id} | {len(wanted)} | {hits[0]} | {hits[1]} |")
        lines.append(f"| all | {totals[0]} | {totals[1]} | {totals[2]} |")
        return "\n".join(lines)
    finally:
        directory.close()


def _parents(rows: list[ResultRow]) -> set[str]:
    return {a.source_parent_id for row in rows for a in row.evidence}


if __name__ == "__main__":
    sys.exit(main())
