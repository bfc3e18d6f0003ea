"""Word forms in the lexical index: which analyzer, against a stock Lucene-style BM25.

Each analyzer variant runs in a child process (the analyzer is module state of the lexical
index) over copies of the same SQLite stores whose tantivy index is rebuilt with it, index and
query terms alike:

- ``plain``: the store before issue 28 (letters and digits, lower case, diacritics folded);
- ``porter2``: ``plain`` and tantivy's English (Porter2/Snowball) stemmer;
- ``porter2-stop``: ``porter2`` with Lucene's English stop words left out of the index too;
- ``s``: ``plain`` and an S-stemmer (Lucene's ``EnglishMinimalStemFilter``: plurals folded,
  "hoses" -> "hose", "policies" -> "policy"), applied in Python before tantivy sees the text;
- ``s-stop``: ``s`` with Lucene's English stop words left out of the index too.

The reference, in the same run: BM25 as Lucene's ``EnglishAnalyzer`` and ``BM25Similarity``
compute it, through bm25s (``method="lucene"``, k1 1.2, b 0.75) with a Lucene-like analysis:
words as the standard tokenizer splits them (approximated by a regex), possessive ``'s``
removed, lower case, Lucene's 33 English stop words, PyStemmer's English stemmer.

Data: Cranfield (../shared/collections/cranfield), its queries split in halves by id order
(odd positions: the calibration half the analyzer is chosen on; even positions: held out),
scored as the store ranks it (``raw``: its BM25 order, chunks folded into documents) and as
``retrieve`` returns it at defaults (default reranker and threshold, through ``evaluate``);
and the paraphrase set (relevance_questions.jsonl), ``tune`` half for choosing, ``test`` half
held out, lexical knowledge base at defaults and without a cut-off, beside the references
over the same chunks (bm25s Lucene-style, and rank_bm25 as bench_relevance.py prints it).

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_stemming.py [--cache DIR]`` (``--cache``
keeps the indexed stores there for the next run; needs the ``bench``
and ``eval`` extras; skips what ../shared lacks). About 20 minutes on 2 cores at load 12-22.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent / ".." / "shared"
VARIANTS = ("plain", "porter2", "porter2-stop", "s", "s-stop")
LUCENE_STOP_WORDS = (
    "a an and are as at be but by for if in into is it no not of on or such that the their "
    "then there these they this to was will with"
).split()
"""Lucene's ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET``."""
_WORD = re.compile(r"\w+(?:['\u2019.]\w+)*")
_WORDS = re.compile(r"[^\W_]+")


def s_stem(word: str) -> str:
    """Lucene's EnglishMinimalStemmer (an S-stemmer): plural endings folded, nothing else."""
    if len(word) < 3 or word[-1] != "s" or word[-2] in "us":
        return word
    if word[-2] == "e":
        if len(word) > 3 and word[-3] == "i" and word[-4] not in "ae":
            return word[:-3] + "y"
        if word[-3] in "iaoe":
            return word
    return word[:-1]


def s_stem_text(text: str) -> str:
    return _WORDS.sub(lambda m: s_stem(m.group().casefold()), text)


def use_variant(variant: str) -> None:
    """Make the lexical index analyse text the variant's way (index and queries alike)."""
    import tantivy

    from agentic_retrieval.sources.local.store import lexical_index

    builder = (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(255))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
    )
    if variant.endswith("-stop"):
        builder = builder.filter(tantivy.Filter.custom_stopword(LUCENE_STOP_WORDS))
    if variant.startswith("porter2"):
        builder = builder.filter(tantivy.Filter.stemmer("english"))
    lexical_index._ANALYZER = builder.build()
    if variant.startswith("s"):
        segment = lexical_index.fts_segment
        terms = lexical_index.query_terms

        def segment_stemmed(text: str | None) -> str | None:
            segmented = segment(text)
            return None if segmented is None else s_stem_text(segmented)

        def terms_stemmed(text: str, **kwargs: Any) -> list[str]:
            return list(dict.fromkeys(s_stem_text(t) for t in terms(text, **kwargs)))

        lexical_index.fts_segment = segment_stemmed  # type: ignore[assignment]
        lexical_index.query_terms = terms_stemmed  # type: ignore[assignment]


def lucene_tokens(text: str) -> list[str]:
    """Lucene EnglishAnalyzer-like terms: words, possessive off, lower case, stop, stem."""
    import Stemmer

    stemmer = _STEMMER.setdefault("english", Stemmer.Stemmer("english"))
    words = []
    for match in _WORD.finditer(text):
        word = match.group()
        if word[-2:].lower() in ("'s", "\u2019s"):
            word = word[:-2]
        word = word.lower()
        if word and word not in _STOP:
            words.append(word)
    return list(stemmer.stemWords(words))


_STEMMER: dict[str, Any] = {}
_STOP = frozenset(LUCENE_STOP_WORDS)


def lucene_bm25(documents: Sequence[str]) -> Callable[[str, int], list[tuple[int, float]]]:
    """A search over ``documents`` by the Lucene-style reference: (index, score) best first."""
    import bm25s

    model = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    model.index([lucene_tokens(d) for d in documents], show_progress=False)

    def search(text: str, k: int) -> list[tuple[int, float]]:
        words = [w for w in lucene_tokens(text) if w in model.vocab_dict]
        if not words:
            return []
        scores = model.get_scores(words)
        best = sorted(range(len(scores)), key=lambda i: -scores[i])[:k]
        return [(i, float(scores[i])) for i in best if scores[i] > 0]

    return search


# ---------------------------------------------------------------------------- Cranfield


def cranfield_child(variant: str, cranfield: Path, cache: Path) -> dict[str, Any]:
    from agentic_retrieval.eval import Configuration, evaluate
    from agentic_retrieval.eval.datasets import load_beir
    from agentic_retrieval.eval.metrics import ir_metrics
    from agentic_retrieval.sources.local.store.local_store import LocalStore

    dataset = load_beir(cranfield)
    qrels = {q.id: dict(q.relevant) for q in dataset.questions}
    texts = {q.id: q.messages[-1][1] for q in dataset.questions}
    figures: dict[str, Any] = {}
    if variant == "reference":
        documents, keys = [], []
        for line in (cranfield / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            keys.append(str(row["_id"]))
            documents.append(f"{row.get('title', '')}\n{row.get('text', '')}")
        search = lucene_bm25(documents)
        runs = {q: [keys[i] for i, _ in search(text, 100)] for q, text in texts.items()}
        figures["raw"] = ir_metrics(qrels, runs)
        return figures
    use_variant(variant)
    work = Path(tempfile.mkdtemp(prefix=f"bench-stemming-{variant}-"))
    try:
        shutil.copytree(cache, work, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.lexical"))
        configuration = Configuration(retrieval="lexical", top_n=100, reranker_threshold="default")
        result = evaluate(cranfield, [configuration], cache_dir=work).results[0]
        figures["defaults"] = result.metrics
        store = LocalStore(next(work.rglob("*.sqlite")))  # its index, built by this variant
        runs = {}
        for q, text in texts.items():
            ranked: dict[str, None] = {}
            for hit in store.search(text, top=200):
                ranked[str(hit.metadata["record_id"])] = None
            runs[q] = list(ranked)[:100]
        store.close()
        figures["raw"] = ir_metrics(qrels, runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return figures


def build_cranfield_cache(cranfield: Path, cache: Path) -> None:
    """Index Cranfield once (SQLite is the same for every analyzer; the index is rebuilt)."""
    from agentic_retrieval.eval import Configuration, evaluate

    if not any(cache.rglob("*.sqlite")):
        evaluate(cranfield, [Configuration(retrieval="lexical", top_n=10)], cache_dir=cache)


# ---------------------------------------------------------------------- paraphrase set


def relevance_child(variant: str, split: str, data: Path, cache: Path) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    import bench_relevance as rel

    questions = [q for q in rel.load_questions() if q.split == split]
    work = Path(tempfile.mkdtemp(prefix=f"bench-stemming-{variant}-"))
    figures: dict[str, Any] = {}
    try:
        for store in cache.glob("lexical-*.sqlite"):
            shutil.copy(store, work / store.name)
        if variant != "reference":
            use_variant(variant)
        sources = rel.build_sources(data, work, "lexical")
        if variant == "reference":
            figures["Lucene-style BM25"] = summary(measure_reference(sources, questions, rel))
            bm25 = rel.Bm25Baseline(sources)
            figures["rank_bm25"] = summary(rel.measure_bm25(bm25, questions))
        else:
            for label, threshold in (
                ("defaults", {}),
                ("no cut-off", {"reranker_threshold": None}),
            ):
                kb = rel.knowledge_base(sources, None, **threshold)
                tally, _ = asyncio.run(rel.measure_kb(kb, questions))
                figures[label] = summary(tally)
            figures["raw, one index"] = summary(measure_joint(sources, questions, rel, work))
        for source in sources:
            source.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return figures


def measure_reference(sources: Sequence[Any], questions: Sequence[Any], rel: Any) -> Any:
    """The Lucene-style reference over the chunks bench_relevance's rank_bm25 row reads."""
    baseline = rel.Bm25Baseline(sources)  # its passages, in the same order as its documents
    documents = []
    import sqlite3

    for source in sources:
        with sqlite3.connect(source.path) as conn:
            rows = conn.execute("SELECT title, content FROM chunks ORDER BY rid")
            documents.extend(f"{title}\n{content}" for title, content in rows)
    search = lucene_bm25(documents)
    tally = rel.Tally()
    for question in questions:
        passages = [baseline.passages[i] for i, _ in search(question.text, rel.TOP)]
        tally.add(question, passages, 0.0)
    return tally


def measure_joint(sources: Sequence[Any], questions: Sequence[Any], rel: Any, work: Path) -> Any:
    """The store's own BM25 order over every chunk of both sources in one index, top 10.

    What the reference ranks (one index over the same chunks), as the store ranks it: no
    reranker, no merging of two sources' lists.
    """
    import sqlite3

    from agentic_retrieval.sources.local.store import ChunkRecord, FileState, LocalStore

    joint = LocalStore(work / "joint.sqlite", create=True)
    with joint.transaction():
        for source in sources:
            with sqlite3.connect(source.path) as conn:
                files = conn.execute("SELECT id, path, fields FROM files ORDER BY id").fetchall()
                for file_id, path, fields in files:
                    rows = conn.execute(
                        "SELECT id, ordinal, title, content, metadata FROM chunks "
                        "WHERE file_id = ? ORDER BY ordinal",
                        (file_id,),
                    ).fetchall()
                    key = f"{source.name}:{path}"
                    chunks = [
                        ChunkRecord(
                            f"{source.name}:{i}",
                            o,
                            t,
                            c,
                            None,
                            {"source_path": {**json.loads(fields), **json.loads(m)}["source_path"]},
                        )
                        for i, o, t, c, m in rows
                    ]
                    joint.replace_file(FileState(key, key, key, key, 0.0, 0, 0), {}, chunks)
    tally = rel.Tally()
    for question in questions:
        hits = joint.search(question.text, top=rel.TOP)
        tally.add(question, [(h.metadata["source_path"], h.content) for h in hits], 0.0)
    joint.close()
    return tally


def summary(tally: Any) -> dict[str, float]:
    n = len(tally.recall)
    return {
        "recall": sum(tally.recall) / n if n else 0.0,
        "mrr": sum(tally.reciprocal_ranks) / n if n else 0.0,
    }


# ------------------------------------------------------------------------------- parent


def halves(values: dict[str, float]) -> tuple[float, float]:
    ids = sorted(values, key=lambda q: (len(q), q))
    return (
        statistics.mean(values[q] for q in ids[0::2]),
        statistics.mean(values[q] for q in ids[1::2]),
    )


def child(variant: str, task: str, cache: Path) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", variant, task, str(cache)]
    done = subprocess.run(command, check=True, timeout=1800, capture_output=True, text=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        variant, (task, where), cache = sys.argv[2], sys.argv[3].split("=", 1), Path(sys.argv[4])
        if task == "cranfield":
            figures = cranfield_child(variant, Path(where), cache)
        else:
            figures = relevance_child(variant, task, Path(where), cache)
        print(json.dumps(figures))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, help="keep the indexed stores here")
    parser.add_argument("--shared", type=Path, default=SHARED, help="../shared elsewhere")
    args = parser.parse_args()
    keep, cranfield, data = (
        args.cache,
        args.shared / "collections" / "cranfield",
        args.shared / "data",
    )
    root = keep or Path(tempfile.mkdtemp(prefix="bench-stemming-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        if (cranfield / "corpus.jsonl").is_file():
            build_cranfield_cache(cranfield, root / "cranfield")
            print("Cranfield, queries at odd positions (calibration) / even (held out):\n")
            print("| analyzer | raw nDCG@10 | raw R@100 | defaults nDCG@10 | defaults R@100 |")
            print("| --- | --- | --- | --- | --- |")
            for variant in ("reference", *VARIANTS):
                figures = child(variant, f"cranfield={cranfield}", root / "cranfield")
                cells = []
                for kind in ("raw", "defaults"):
                    for metric in ("nDCG@10", "R@100"):
                        if kind in figures:
                            a, b = halves(figures[kind][metric])
                            cells.append(f"{a:.3f} / {b:.3f}")
                        else:
                            cells.append("")
                print(f"| {variant} | " + " | ".join(cells) + " |", flush=True)
        if data.is_dir():
            paraphrase = root / "paraphrase"
            sys.path.insert(0, str(HERE))
            import bench_relevance as rel

            paraphrase.mkdir(exist_ok=True)
            for source in rel.build_sources(data, paraphrase, "lexical"):
                source.close()
            print("\nParaphrase set, evidence recall / MRR at top 10, tune half / test half:\n")
            print("| analyzer | configuration | tune | test (held out) |")
            print("| --- | --- | --- | --- |")
            for variant in ("reference", *VARIANTS):
                by_split = {s: child(variant, f"{s}={data}", paraphrase) for s in ("tune", "test")}
                for label in by_split["tune"]:
                    cells = [
                        f"{by_split[s][label]['recall']:.3f} / {by_split[s][label]['mrr']:.3f}"
                        for s in ("tune", "test")
                    ]
                    print(f"| {variant} | {label} | " + " | ".join(cells) + " |", flush=True)
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
