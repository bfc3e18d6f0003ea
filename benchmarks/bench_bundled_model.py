"""The bundled model without torch (issue 28): OpenVINO from the packaged weights vs torch.

Runtimes, all through the product's ``LocalEmbeddings``: ``torch fp32`` (sentence-transformers,
what hybrid knowledge bases were indexed with before), ``openvino fp32`` (the default on a CPU
without native bf16) and ``openvino int8``. For each:

- speed: chunks per CPU-second of the process (``time.process_time``) on the first
  ``--passages`` Cranfield abstracts, batch 32, best of ``--rounds``;
- agreement: cosine of each passage vector to torch fp32's;
- quality: dense retrieval (cosine ranking, no BM25) on Cranfield (1,400 abstracts, 225
  queries) and on the held-out ``test`` half of ``relevance_questions.jsonl`` over the chunks of
  ../shared/data, with the runtime's own passages and queries, and **mixed**: torch fp32
  passages (an existing knowledge base) searched with the runtime's queries.

Cold start (``--cold N``): ``agentic-retrieval retrieve`` in a fresh process, N times each on a
hybrid and a lexical knowledge base of the same documents (the sample corpus), wall and CPU
seconds of the child.

    nice -n 10 .venv/bin/python benchmarks/bench_bundled_model.py --cold 3
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_embedding_precision  # noqa: E402
from bench_embedding_precision import (  # noqa: E402
    cranfield_corpus,
    paraphrase_corpus,
    retrieval_scores,
)

from agentic_retrieval.embeddings import LocalEmbeddings  # noqa: E402

VARIANTS = {
    "torch fp32": {"runtime": "torch", "precision": "fp32"},
    "openvino fp32": {"runtime": "openvino", "precision": "fp32"},
    "openvino int8": {"runtime": "openvino", "precision": "int8"},
}


def embed(model: LocalEmbeddings, texts: list[str]) -> np.ndarray:
    return np.asarray(model.embed_documents(texts), dtype=np.float32)


def speed(models: dict[str, LocalEmbeddings], texts: list[str], rounds: int) -> dict[str, float]:
    best = dict.fromkeys(models, 0.0)
    for _ in range(rounds):
        for name, model in models.items():  # alternating, so load changes hit all alike
            started = time.process_time()
            embed(model, texts)
            best[name] = max(best[name], len(texts) / (time.process_time() - started))
    return best


def cold_start(runs: int) -> list[str]:
    """Seconds of a cold ``retrieve`` on a hybrid and a lexical sample knowledge base."""
    cli = [sys.executable, "-m", "agentic_retrieval.cli"]
    corpus = Path(__file__).resolve().parents[1] / "src/agentic_retrieval/kb/sample_corpus"
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-cold-") as tmp:
        for kind, flag in (("hybrid", []), ("lexical", ["--no-embeddings"])):
            kb = str(Path(tmp) / kind)
            subprocess.run(
                [*cli, "index", "--kb", kb, "--source", "s", *flag, str(corpus)],
                check=True,
                capture_output=True,
            )
        subprocess.run(
            [*cli, "retrieve", "--kb", str(Path(tmp) / "hybrid"), "warm the cache"],
            check=True,
            capture_output=True,
        )  # the compiled graph, once per machine
        times: dict[str, list[tuple[float, float]]] = {"hybrid": [], "lexical": []}
        for _ in range(runs):
            for kind in times:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                started = time.perf_counter()
                done = subprocess.run(
                    [
                        *cli,
                        "retrieve",
                        "--kb",
                        str(Path(tmp) / kind),
                        "--json",
                        "When can I bring my bike on the train?",
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                wall = time.perf_counter() - started
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                assert not done.stderr.strip() or "note:" in done.stderr, done.stderr
                times[kind].append((wall, cpu))
        for kind, pairs in times.items():
            walls, cpus = [w for w, _ in pairs], [c for _, c in pairs]
            rows.append(
                f"| {kind} | {statistics.median(walls):.2f} | {min(walls):.2f} "
                f"| {statistics.median(cpus):.2f} |"
            )
        ratio = statistics.median(w for w, _ in times["hybrid"]) / statistics.median(
            w for w, _ in times["lexical"]
        )
        cpu_ratio = statistics.median(c for _, c in times["hybrid"]) / statistics.median(
            c for _, c in times["lexical"]
        )
        rows.append(f"| hybrid / lexical | {ratio:.2f}x | | {cpu_ratio:.2f}x |")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sets", default="paraphrase,Cranfield")
    parser.add_argument("--cold", type=int, default=0, help="cold retrieve runs (0: none)")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    if args.cold:
        print("| knowledge base | wall s, median | wall s, best | CPU s, median |")
        print("| --- | --- | --- | --- |")
        for row in cold_start(args.cold):
            print(row, flush=True)
    models = {name: LocalEmbeddings(**kwargs) for name, kwargs in VARIANTS.items()}  # type: ignore[arg-type]
    cran = cranfield_corpus()
    rates = speed(models, cran[1][: args.passages], args.rounds)
    print("| runtime | chunks per CPU-s | vs torch fp32 |")
    print("| --- | --- | --- |")
    for name, rate in rates.items():
        print(f"| {name} | {rate:.1f} | {rate / rates['torch fp32']:.2f}x |", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-bundled-") as tmp:
        sets = {"paraphrase": paraphrase_corpus(Path(tmp)), "Cranfield": (*cran, None)}
    print(
        "| set | runtime | cosine to torch (mean, min) | nDCG@10 own | nDCG@10 torch "
        "passages + its queries | R@100 own | fact recall@10 own / mixed |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for label in args.sets.split(","):
        keys, texts, queries, qrels, judged = sets[label]
        docs = {name: embed(model, texts) for name, model in models.items()}
        asked = {name: embed(model, queries) for name, model in models.items()}
        for name in models:
            cosines = np.sum(docs[name] * docs["torch fp32"], axis=1)
            own = retrieval_scores(docs[name], asked[name], keys, qrels, judged)
            mixed = retrieval_scores(docs["torch fp32"], asked[name], keys, qrels, judged)
            print(
                f"| {label} | {name} | {cosines.mean():.5f}, {cosines.min():.5f} "
                f"| {own[0]:.4f} | {mixed[0]:.4f} | {own[1]:.4f} | {own[2]} / {mixed[2]} |",
                flush=True,
            )
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    # ../shared beside the checkout, or $SHARED_DIR (a worktree elsewhere)
    SHARED = Path(os.environ.get("SHARED_DIR", bench_embedding_precision.SHARED))
    bench_embedding_precision.SHARED = SHARED
    if not (SHARED / "collections" / "cranfield" / "corpus.jsonl").is_file():
        print("../shared/collections/cranfield is absent: nothing to measure")
        sys.exit(0)
    sys.exit(main())
