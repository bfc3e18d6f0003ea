"""Speed of ``evaluate``: a 5,000-document BEIR corpus, 300 queries, minimal effort.

Generates a BEIR-layout corpus deterministically (Zipf-distributed pseudo-words, one chunk per
document; each query takes rarer words of one target document, which is its relevant
document), then measures:

1. a cold ``evaluate()`` (indexing the corpus into a fresh cache included), target < 60 s;
2. the bare ``KnowledgeBase.aretrieve`` calls of the same requests over the indexed corpus;
3. a warm ``evaluate()`` (cached corpus) without and with writing the outputs.

The evaluation overhead is (warm evaluate - bare calls) / bare calls, target <= 10%. The load
average is printed: the machine is shared, so run it more than once.

Run: ``.venv/bin/python benchmarks/bench_eval_speed.py`` (``--documents``, ``--queries``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from agentic_retrieval.eval import Configuration, evaluate, load_beir
from agentic_retrieval.eval.beir_cache import cache_path
from agentic_retrieval.eval.runner import build_request
from agentic_retrieval.eval.targets import DirectoryTarget

SEED = 20261123
VOCABULARY = 20_000


def make_corpus(root: Path, documents: int, queries: int) -> None:
    rng = random.Random(SEED)
    words = [_word(rng, i) for i in range(VOCABULARY)]
    weights = [1 / (rank + 1) for rank in range(VOCABULARY)]  # Zipf
    corpus, bodies = [], []
    for index in range(documents):
        body = rng.choices(range(VOCABULARY), weights=weights, k=rng.randint(60, 120))
        bodies.append(body)
        text = " ".join(words[w] for w in body) + "."
        title = " ".join(words[w] for w in rng.sample(body, 3))
        corpus.append({"_id": f"doc{index}", "title": title, "text": text})
    (root / "qrels").mkdir(parents=True)
    with (root / "corpus.jsonl").open("w") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in corpus)
    rows, qrels = [], ["query-id\tcorpus-id\tscore\n"]
    for index, target in enumerate(rng.sample(range(documents), queries)):
        rare = sorted(set(bodies[target]), reverse=True)[:12]  # higher id = rarer word
        terms = rng.sample(rare, rng.randint(3, 6))
        rows.append({"_id": f"q{index}", "text": " ".join(words[w] for w in terms)})
        qrels.append(f"q{index}\tdoc{target}\t1\n")
    with (root / "queries.jsonl").open("w") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows)
    (root / "qrels" / "test.tsv").write_text("".join(qrels))


def _word(rng: random.Random, index: int) -> str:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return "".join(rng.choice(letters) for _ in range(4 + index % 6)) + str(index % 10)


async def bare_calls(path: Path, dataset_root: Path) -> float:
    dataset = load_beir(dataset_root)
    target = DirectoryTarget(path)
    configuration = Configuration(retrieval="lexical")
    kb = target.knowledge_base(configuration)
    context = configuration.context()
    requests = [build_request(kb, question) for question in dataset.questions]
    started = time.perf_counter()
    for request in requests:
        await kb.aretrieve(request, defaults=context)
    elapsed = time.perf_counter() - started
    target.close()
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--documents", type=int, default=5000)
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-eval-") as tmp:
        root, cache, out = Path(tmp) / "synthetic", Path(tmp) / "cache", Path(tmp) / "out"
        make_corpus(root, args.documents, args.queries)
        configuration = [Configuration(retrieval="lexical")]
        load = os.getloadavg()[0]
        started = time.perf_counter()
        cold = evaluate(root, configuration, cache_dir=cache)
        cold_s = time.perf_counter() - started
        dataset = load_beir(root)
        bare_s = asyncio.run(bare_calls(cache_path(dataset, cache), root))
        started = time.perf_counter()
        evaluate(root, configuration, cache_dir=cache)
        warm_s = time.perf_counter() - started
        started = time.perf_counter()
        evaluate(root, configuration, cache_dir=cache, output_dir=out)
        outputs_s = time.perf_counter() - started
        summary = cold.results[0].summary
    print(
        f"{args.documents} documents, {args.queries} queries, minimal effort, lexical, top 100 "
        f"(load average {load:.2f} at start, {os.getloadavg()[0]:.2f} at end)"
    )
    print(f"cold evaluate (indexing included): {cold_s:.1f} s (target < 60 s)")
    print(f"bare aretrieve calls: {bare_s:.1f} s ({bare_s / args.queries * 1000:.1f} ms/query)")
    overhead = (warm_s - bare_s) / bare_s
    print(
        f"warm evaluate: {warm_s:.1f} s; overhead over bare calls {overhead:+.1%} (target <= 10%)"
    )
    print(f"warm evaluate writing report.json, runs, chart: {outputs_s:.1f} s")
    print(
        f"quality on the synthetic queries: nDCG@10 {summary['nDCG@10']:.3f}, "
        f"R@100 {summary['R@100']:.3f}, p50 {summary['latency_p50_ms']:.0f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
