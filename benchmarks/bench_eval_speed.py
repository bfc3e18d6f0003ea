"""Speed of ``evaluate``: a 5,000-document BEIR corpus, 300 queries, minimal effort.

Generates a BEIR-layout corpus deterministically (Zipf-distributed pseudo-words, one chunk per
document; each query takes two or three rare and two or three frequent words of one target
document, which is its relevant document), then measures:

1. a cold ``evaluate()`` (indexing the corpus into a fresh cache included), target < 60 s;
2. the bare ``KnowledgeBase.aretrieve`` calls of the same requests over the indexed corpus,
   and a warm ``evaluate()`` (cached corpus), interleaved ``--repeat`` times (best of each);
3. a warm ``evaluate()`` that also writes the outputs (JSON, TREC runs, chart).

The evaluation overhead is (warm evaluate - bare calls) / bare calls, target <= 10%, in
process CPU time (all threads: what the evaluation itself adds, whatever else the shared
machine runs) and in wall time. The load average is printed.

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
        distinct = sorted(set(bodies[target]))  # lower id = more frequent word
        rare, common = distinct[-12:], distinct[5:40]
        # a few distinctive words plus frequent ones: full candidate lists, imperfect ranking
        terms = rng.sample(rare, rng.randint(2, 3)) + rng.sample(common, rng.randint(2, 3))
        rows.append({"_id": f"q{index}", "text": " ".join(words[w] for w in terms)})
        qrels.append(f"q{index}\tdoc{target}\t1\n")
    with (root / "queries.jsonl").open("w") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows)
    (root / "qrels" / "test.tsv").write_text("".join(qrels))


def _word(rng: random.Random, index: int) -> str:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return "".join(rng.choice(letters) for _ in range(4 + index % 6)) + str(index % 10)


class Clock:
    """Wall time and process CPU time (every thread) of a block."""

    def __enter__(self) -> Clock:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


async def bare_calls(path: Path, dataset_root: Path) -> Clock:
    dataset = load_beir(dataset_root)
    target = DirectoryTarget(path)
    configuration = Configuration(retrieval="lexical")
    kb = target.knowledge_base(configuration)
    context = configuration.context()
    requests = [build_request(kb, question) for question in dataset.questions]
    with Clock() as clock:
        for request in requests:
            await kb.aretrieve(request, defaults=context)
    target.close()
    return clock


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--documents", type=int, default=5000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-eval-") as tmp:
        root, cache, out = Path(tmp) / "synthetic", Path(tmp) / "cache", Path(tmp) / "out"
        make_corpus(root, args.documents, args.queries)
        configuration = [Configuration(retrieval="lexical")]
        load = os.getloadavg()[0]
        with Clock() as cold_clock:
            cold = evaluate(root, configuration, cache_dir=cache)
        dataset = load_beir(root)
        bare, warm = [], []
        for _ in range(args.repeat):  # interleaved, best of each: the machine is shared
            bare.append(asyncio.run(bare_calls(cache_path(dataset, cache), root)))
            with Clock() as clock:
                evaluate(root, configuration, cache_dir=cache)
            warm.append(clock)
        with Clock() as outputs:
            evaluate(root, configuration, cache_dir=cache, output_dir=out)
        summary = cold.results[0].summary
    bare_wall, bare_cpu = min(c.wall for c in bare), min(c.cpu for c in bare)
    warm_wall, warm_cpu = min(c.wall for c in warm), min(c.cpu for c in warm)
    print(
        f"{args.documents} documents, {args.queries} queries, minimal effort, lexical, top 100 "
        f"(load average {load:.2f} at start, {os.getloadavg()[0]:.2f} at end)"
    )
    print(f"cold evaluate (indexing included): {cold_clock.wall:.1f} s wall (target < 60 s)")
    print(
        f"bare aretrieve calls: {bare_wall:.1f} s wall "
        f"({bare_wall / args.queries * 1000:.1f} ms/query), {bare_cpu:.1f} s CPU"
    )
    print(f"warm evaluate: {warm_wall:.1f} s wall, {warm_cpu:.1f} s CPU (best of {args.repeat})")
    print(
        f"evaluation overhead over the bare calls: {(warm_cpu - bare_cpu) / bare_cpu:+.1%} CPU, "
        f"{(warm_wall - bare_wall) / bare_wall:+.1%} wall (target <= 10%)"
    )
    print(f"warm evaluate writing report.json, runs, chart: {outputs.wall:.1f} s wall")
    print(
        f"quality on the synthetic queries: nDCG@10 {summary['nDCG@10']:.3f}, "
        f"R@100 {summary['R@100']:.3f}, p50 {summary['latency_p50_ms']:.0f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
