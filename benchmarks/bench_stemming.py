"""English stemming in the lexical index, measured before deciding (not adopted; see README).

Each variant runs in a child process (the analyzer is module state of the lexical index):
``plain`` is the store as shipped, ``stem`` adds tantivy's English stemmer to the analyzer
the index and the query terms share. Per variant: Cranfield lexical retrieval at defaults
(nDCG@10 and R@100 over the queries at odd and at even positions, so a decision made on one
half can be checked on the other), then ``bench_relevance.py --modes lexical`` on the tune
and the held-out halves of the paraphrase set.

Run: ``.venv/bin/python benchmarks/bench_stemming.py`` (skips what ../shared lacks).
"""

from __future__ import annotations

import runpy
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CRANFIELD = HERE.parent / ".." / "shared" / "collections" / "cranfield"
VARIANTS = ("plain", "stem")


def use_variant(variant: str) -> None:
    import tantivy

    from agentic_retrieval.sources.local.store import lexical_index

    if variant == "stem":
        lexical_index._ANALYZER = (  # the experiment is this one line
            tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
            .filter(tantivy.Filter.remove_long(255))
            .filter(tantivy.Filter.lowercase())
            .filter(tantivy.Filter.ascii_fold())
            .filter(tantivy.Filter.stemmer("english"))
            .build()
        )


def cranfield(variant: str) -> None:
    from agentic_retrieval.eval import Configuration, evaluate

    if not (CRANFIELD / "corpus.jsonl").is_file():
        print(f"{CRANFIELD} is absent: no Cranfield figures")
        return
    use_variant(variant)
    configuration = Configuration(retrieval="lexical", top_n=100, reranker_threshold="default")
    with tempfile.TemporaryDirectory(prefix="bench-stemming-") as cache:
        result = evaluate(CRANFIELD, [configuration], cache_dir=cache).results[0]
    ids = sorted(result.metrics["nDCG@10"], key=lambda q: (len(q), q))
    for metric in ("nDCG@10", "R@100"):
        values = result.metrics[metric]
        halves = [[values[q] for q in ids[start::2]] for start in (0, 1)]
        print(
            f"{variant}: Cranfield {metric} odd {statistics.mean(halves[0]):.4f} "
            f"even {statistics.mean(halves[1]):.4f} all {statistics.mean(values.values()):.4f}"
        )


def relevance(variant: str, split: str) -> None:
    use_variant(variant)
    sys.path.insert(0, str(HERE))
    sys.argv = [str(HERE / "bench_relevance.py"), "--split", split, "--modes", "lexical"]
    print(f"{variant}: paraphrase set, {split} half")
    runpy.run_path(str(HERE / "bench_relevance.py"), run_name="__main__")


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        variant, task = sys.argv[2], sys.argv[3]
        if task == "cranfield":
            cranfield(variant)
        else:
            relevance(variant, task)
        return 0
    for variant in VARIANTS:
        for task in ("cranfield", "tune", "test"):
            child = [sys.executable, __file__, "--child", variant, task]
            subprocess.run(child, check=True, timeout=1800)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
