"""Issue 21: a hybrid retrieve at 1M chunks, end to end, with chunk vectors composed from real ones.

Embedding 1M chunks with the bundled model (all-MiniLM-L6-v2, bf16 on this CPU: ~43 ms CPU
per 256-word-piece chunk) takes ~12 core-hours. The wiki-like corpus
(``corpus_wiki_like.py``) is made of 31,641 distinct pool sentences, 200,000 names and a
lead sentence per record, so each chunk's vector can be *composed* from real model vectors
of those parts, embedded once each (~13 min CPU, cached in ``--cache``):
:class:`ComposedEmbeddings`. Queries are embedded by the real model at retrieve time, as the
product does. How near the composed vectors are to real ones is measured by the run itself
(step 2); benchmarks/README.md, "Hybrid retrieve at 1M chunks", says what that allows.

Usage (one size per run; scratch data outside the checkout; the ``bench`` extra)::

    W=/work/scratch/$USER
    .venv/bin/python benchmarks/bench_scale_hybrid.py --chunks 120000 \\
        --corpus /work/scratch/scale21/corpus --work $W/h120k --cache $W/cache
    .venv/bin/python benchmarks/bench_scale_hybrid.py --chunks 1000000 \\
        --corpus /work/scratch/scale21/corpus --work $W/h1m --cache $W/cache --skip-check

A 1M store with vectors takes ~6.5 GB (SQLite ~4.3 GB, graph ~1.8 GB); ``--work`` may be on
``/dev/shm`` where the disk is short. ``--skip-index`` re-runs the queries on ``WORK/store``
(the figures of the earlier phases are kept from ``WORK/result.json``). Do not nice the
harness: its CPU-heavy children run under ``nice -n 10`` by themselves and the queries run
at normal priority, one at a time. What one run measures:

1. **Parts** (child, once per cache): every pool sentence, name and lead template embedded
   for real, and their word pieces counted.
2. **Check** (child): ``--sample`` chunks (2,000) of the first records embedded for real and
   composed (with and without names, weighted by word pieces or not); for the 200 queries
   (real vectors), recall@10 of each composed ranking against the real ranking of the
   sample, and the cosine of each composed vector with its real one. The run uses
   ``--variant`` (default ``names``, the best on this check).
3. **Indexing** (child): ``index_records_file(store, FILE, embeddings=ComposedEmbeddings)``,
   the library's own record indexer writing chunks and vectors: wall, CPU, peak RSS, and the
   CPU spent composing vectors (~0.13 ms a chunk, where the real model spends ~46 ms).
4. **Graph** (child): ``LocalStore.refresh_vectors()``, what indexing through a source
   does after writing: loads the vectors and builds and saves the faiss HNSW graph.
5. **Queries** (this process): the store opened twice, as a hybrid source (real local
   embeddings) and as a lexical source (none); the 200 queries through
   ``KnowledgeBase.aretrieve`` (minimal effort, ``reranker_threshold=None``; the default
   reranker, which blends the hits' cosines when the source has vectors), hybrid and lexical
   alternately, query by query. Wall and process CPU per query, and inside the hybrid one
   the query embedding (``embed_query``), the vector search (``LocalStore._dense``) and the
   cosines of the hits (``LocalStore._similarities``). Serving RSS before and after the
   stores are opened and searched.
6. **ANN recall**: the same 200 query vectors through the store's graph (``VectorRows.
   search``, as ``_dense`` calls it) and through an exact product over the same rows: recall
   @10 and @50 (the dense list the fusion reads is 50 deep), and the graph alone at
   ``efSearch`` 256 to 4,096 (the store uses 512): what a higher recall would cost.

Results are printed as markdown and written to ``WORK/result.json``. On a shared machine
wall times follow the load; CPU per query is the steadier figure.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from langchain_core.embeddings import Embeddings

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scale_baseline import git_commit, percentile, run_measured
from corpus_wiki_like import CATEGORIES, FEATURES, ORGS, ROLES, SEED, WORKS, _names
from corpus_wiki_like import KINDS as LEAD_KINDS

from agentic_retrieval import Context, KnowledgeBase
from agentic_retrieval.sources.local import LocalKnowledgeSource
from agentic_retrieval.sources.local.chunking import body_without_title, chunk_text, split_sentences
from agentic_retrieval.sources.local.store import LocalStore

HERE = Path(__file__).resolve().parent
NAMES = 200_000
"""``corpus_wiki_like.Generator``'s name count: every title and mention is one of them."""
DIMENSION = 384
KINDS = ("all", "fragment", "entity", "technical", "common")
VARIANTS = {
    "sentences": {"names": False, "weighted": False},
    "weighted": {"names": False, "weighted": True},
    "names": {"names": True, "weighted": True},
}
TIME_LIMIT_S = 3600
MAX_CHUNKS = 5_000_000


def real_model(batch_size: int = 64) -> Any:
    """The local model on one torch thread (two spin against each other on a loaded machine:
    4x the CPU per sentence here). Only the query phase runs the product's default."""
    import torch

    from agentic_retrieval.embeddings import LocalEmbeddings

    torch.set_num_threads(1)
    return LocalEmbeddings(batch_size=batch_size)


def real_embed(texts: list[str], model: Any = None) -> np.ndarray:
    """The product's local model (bf16 where the CPU has it), as normalised float32 rows."""
    model = model or real_model()
    out = np.empty((len(texts), DIMENSION), dtype=np.float32)
    step = 4096
    for start in range(0, len(texts), step):
        out[start : start + step] = np.asarray(
            model.embed_documents(texts[start : start + step]), dtype=np.float32
        )
    return out


def skeleton(text: str) -> str:
    """``text`` without names, digits and punctuation, lower case (a lead's template)."""
    return " ".join(_NOT_WORDS.sub(" ", _NAMES_IN.sub(" ", text).lower()).split())


def lead_skeletons() -> list[str]:
    """The 67 templates of the generator's lead sentences, names and numbers taken out."""
    fills = {"role": ROLES, "feature": FEATURES, "org": ORGS, "work": WORKS, "field": CATEGORIES}
    out: dict[str, None] = {}
    for _, template in LEAD_KINDS:
        key = next(k for k in fills if "{" + k + "}" in template)
        for value in fills[key]:
            text = template.format(
                name="Qq",
                born=1900,
                died=1950,
                place="Qq",
                year=1900,
                **dict.fromkeys(fills, value),
            )
            out.setdefault(skeleton(text), None)
    return list(out)


def part_texts(corpus: Path) -> dict[str, list[str]]:
    """The texts whose real vectors make up every chunk's: pool sentences, names, leads."""
    return {
        "pool": (corpus / "sentences.txt").read_text(encoding="utf-8").splitlines(),
        "names": _names(random.Random(SEED + 1), NAMES),
        "leads": lead_skeletons(),
    }


def prepare(corpus: Path, cache: Path, only: str | None = None) -> dict[str, Any]:
    """Embed every part once, for real, and count its word pieces (cached in ``cache``)."""
    cache.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {}
    model = None
    for label, texts in part_texts(corpus).items():
        if only not in (None, label):
            continue
        target, tokens = cache / f"{label}.npy", cache / f"{label}_tokens.npy"
        digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
        key = cache / f"{label}.sha256"
        if not (target.is_file() and key.is_file() and key.read_text() == digest):
            started, cpu = time.perf_counter(), time.process_time()
            model = model or real_model()
            np.save(target, real_embed(texts, model))
            key.write_text(digest)
            figures[label] = {
                "texts": len(texts),
                "wall_s": time.perf_counter() - started,
                "cpu_s": time.process_time() - cpu,
            }
            tokens.unlink(missing_ok=True)
        if not tokens.is_file():
            model = model or real_model()
            counts = np.empty(len(texts), dtype=np.int32)
            for start in range(0, len(texts), 10_000):
                batch = texts[start : start + 10_000]
                ids = model.model.tokenizer(batch, add_special_tokens=False)["input_ids"]
                counts[start : start + 10_000] = [len(i) for i in ids]
            np.save(tokens, counts)
    return figures


# ---------------------------------------------------------------- composed vectors

_PARAGRAPHS = re.compile(r"\n\s*\n")
_NAME = r"[A-Z][a-z]+(?: [A-Z][a-z]+)?"
_ACCORDING = re.compile(rf"^According to ({_NAME}), (.+)$", re.S)
_SHOWED = re.compile(rf"^In \d{{4}}, ({_NAME})(?: \(\d+\))? showed that (.+)$", re.S)
_CITED = re.compile(rf"^(.+) \(({_NAME}), \d{{4}}\)\.$", re.S)
_NAMES_IN = re.compile(rf"\b{_NAME}\b")
_NOT_WORDS = re.compile(r"[^a-z ]+")
_JOIN_MAX = 4
"""Chunker sentences joined at most to find a pool sentence (the chunker also splits after
"e.g." and the like, which the pool's splitter does not)."""
MAX_TOKENS = 256
"""all-MiniLM-L6-v2 reads at most 256 word pieces: a chunk's vector only sees its first 256."""


class ComposedEmbeddings(Embeddings):
    """Chunk vectors made from real model vectors of their parts, by lookups alone.

    A chunk (``title\\ncontent``, as the indexer embeds it) is cut into the corpus's own
    parts: the title (a name); each sentence of the pool, found again under the generator's
    decorations ("According to NAME, ...", "In YEAR, TITLE showed that ...", "... (NAME,
    YEAR).") or as a piece of one (the chunker also splits after "e.g." and the like, which
    the pool's splitter does not); the names those decorations mention; and the record's
    lead sentence ("NAME is a river in NAME."): its names plus its template with names and
    digits taken out (one of 67). Every part's real vector is embedded once, beforehand
    (:func:`prepare`). A chunk's vector is the L2-normalised mean of its parts' vectors, each
    weighted by its word pieces, over the first :data:`MAX_TOKENS` word pieces (what the
    model itself reads). ``names=False`` leaves names and leads out; ``weighted=False``
    gives every sentence the same weight. Text that is none of these (rare: a piece of a
    sentence cut between words) is left out and counted.

    Queries are never embedded here: the benchmark embeds them with the real model.
    """

    def __init__(
        self, cache: Path, corpus: Path, *, names: bool = True, weighted: bool = True
    ) -> None:
        texts = part_texts(corpus)
        self.vectors = {label: np.load(cache / f"{label}.npy") for label in texts}
        self.tokens = {label: np.load(cache / f"{label}_tokens.npy") for label in texts}
        self.pool = {s: n for n, s in enumerate(texts["pool"])}
        self.pieces: dict[str, int] = {}
        for number, sentence in enumerate(texts["pool"]):
            pieces = split_sentences(sentence)
            for piece in pieces if len(pieces) > 1 else ():
                self.pieces.setdefault(piece, number)
        self.names = {s: n for n, s in enumerate(texts["names"])}
        self.leads = {s: n for n, s in enumerate(texts["leads"])}
        self.use_names, self.weighted = names, weighted
        self.counts: Counter[str] = Counter()

    def _pool_part(self, text: str, parts: list[tuple[str, int]]) -> bool:
        number = self.pool.get(text)
        if number is None:
            number = self.pieces.get(text)
            if number is None:
                return False
        if not parts or parts[-1] != ("pool", number):  # two pieces of one sentence: once
            parts.append(("pool", number))
        return True

    def _sentence(self, text: str, parts: list[tuple[str, int]]) -> bool:
        """Append ``text``'s parts if it is a (decorated) pool sentence or piece of one."""
        if self._pool_part(text, parts):
            return True
        for pattern in (_ACCORDING, _SHOWED):
            match = pattern.match(text)
            if match and match.group(1) in self.names:
                rest = match.group(2)
                mark = len(parts)
                if self._pool_part(rest[:1].upper() + rest[1:], parts):
                    parts.insert(mark, ("names", self.names[match.group(1)]))
                    return True
        match = _CITED.match(text)
        if match and match.group(2) in self.names:
            if self._pool_part(match.group(1) + ".", parts):
                parts.append(("names", self.names[match.group(2)]))
                return True
        return False

    def _other(self, text: str, parts: list[tuple[str, int]]) -> None:
        """A lead sentence: its names and its template; anything else: its names."""
        for match in _NAMES_IN.finditer(text):
            name = match.group(0)
            if name in self.names:
                parts.append(("names", self.names[name]))
            elif name.split(" ")[0] in self.names:
                parts.append(("names", self.names[name.split(" ")[0]]))
        lead = self.leads.get(skeleton(text))
        if lead is not None:
            parts.append(("leads", lead))
            self.counts["leads"] += 1
        else:
            self.counts["left_out"] += 1

    def parts(self, text: str) -> list[tuple[str, int]]:
        """The parts of one embedded text (``title\\ncontent``), in reading order."""
        title, _, content = text.partition("\n")
        parts: list[tuple[str, int]] = []
        base = title.split(" (")[0]
        if base in self.names:
            parts.append(("names", self.names[base]))
        else:
            self._other(title, parts)
        for paragraph in _PARAGRAPHS.split(content):
            pieces = split_sentences(paragraph)
            at = 0
            while at < len(pieces):
                for width in range(1, min(_JOIN_MAX, len(pieces) - at) + 1):
                    if self._sentence(" ".join(pieces[at : at + width]), parts):
                        self.counts["sentences"] += 1
                        at += width
                        break
                else:
                    self._other(pieces[at], parts)
                    at += 1
        return parts

    def vector(self, parts: list[tuple[str, int]]) -> np.ndarray:
        """The normalised, word-piece-weighted mean of the parts' vectors."""
        total = np.zeros(DIMENSION, dtype=np.float32)
        budget = MAX_TOKENS - 2  # [CLS] and [SEP]
        for label, key in parts:
            if label != "pool" and not self.use_names:
                continue
            vector = self.vectors[label][key]
            if not self.weighted:
                total += vector
                continue
            weight = min(int(self.tokens[label][key]), budget)
            total += weight * vector
            budget -= weight
            if budget <= 0:
                break
        norm = float(np.linalg.norm(total))
        return total / norm if norm else total

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Compose each text's vector."""
        return [self.vector(self.parts(text)).tolist() for text in texts]

    def embed_query(self, text: str) -> list[float]:
        raise NotImplementedError("queries are embedded by the real model")


# ---------------------------------------------------------------- the check on real vectors


def sample_chunks(records: Path, count: int, first: int = 30_000) -> list[str]:
    """``count`` chunks (``title\\ncontent``, as indexed) drawn from the first records."""
    rng = random.Random(SEED + 3)
    with records.open(encoding="utf-8") as handle:
        lines = [line for _, line in zip(range(first), handle, strict=False)]
    texts: list[str] = []
    for line in rng.sample(lines, min(len(lines), 2 * count)):
        record = json.loads(line)
        title, text = str(record["title"]), str(record["text"])
        texts += [f"{title}\n{c}" for c in chunk_text(body_without_title(title, text))]
    return rng.sample(texts, min(count, len(texts)))


def query_vectors(queries: list[dict[str, str]], model: Any) -> np.ndarray:
    """Each query embedded alone, as the source embeds it at retrieve time."""
    return np.asarray([model.embed_query(q["text"]) for q in queries], dtype=np.float32)


def top(matrix: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    scores = queries @ matrix.T
    best = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    return best


def overlap(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean share of each truth row found in the same row of ``found``."""
    shares = [len(set(f) & set(t)) / len(t) for f, t in zip(found, truth, strict=True)]
    return float(np.mean(shares))


def check(records: Path, corpus: Path, cache: Path, count: int) -> dict[str, Any]:
    """Composed vs real vectors of ``count`` sampled chunks: neighbourhoods and cosines."""
    queries = [json.loads(line) for line in (corpus / "queries.jsonl").read_text().splitlines()]
    texts = sample_chunks(records, count)
    model = real_model()
    real_file = cache / f"sample_{count}.npy"
    started, cpu = time.perf_counter(), time.process_time()
    real = np.load(real_file) if real_file.is_file() else real_embed(texts, model)
    np.save(real_file, real)
    query = query_vectors(queries, model)
    embed_s = (time.perf_counter() - started, time.process_time() - cpu)
    truth = top(real, query, 10)
    # how concentrated the vectors are (a mean of parts is smoother than a real vector): the
    # mean cosine of random pairs, and of each query with its 10th nearest chunk
    pairs = np.random.default_rng(SEED).integers(0, len(texts), size=(20_000, 2))

    def spread(matrix: np.ndarray) -> dict[str, float]:
        tenth = np.sort(query @ matrix.T, axis=1)[:, -10]
        cosines = np.sum(matrix[pairs[:, 0]] * matrix[pairs[:, 1]], axis=1)
        return {
            "pair_cosine_mean": float(cosines.mean()),
            "tenth_cosine_p50": float(np.median(tenth)),
        }

    out: dict[str, Any] = {
        "chunks": len(texts),
        "real_embed_wall_cpu_s": embed_s,
        "real": spread(real),
        "variants": {},
    }
    kinds = [q["kind"] for q in queries]
    for name, options in VARIANTS.items():
        composer = ComposedEmbeddings(cache, corpus, **options)
        started = time.process_time()
        composed = np.asarray(composer.embed_documents(texts), dtype=np.float32)
        per_chunk_ms = (time.process_time() - started) * 1000 / len(texts)
        found = top(composed, query, 10)
        cosines = np.sum(composed * real, axis=1)
        by_kind = {
            kind: overlap(found[[k == kind for k in kinds]], truth[[k == kind for k in kinds]])
            for kind in KINDS[1:]
        }
        out["variants"][name] = {
            "recall10": overlap(found, truth),
            "recall10_by_kind": by_kind,
            "cosine_p50": float(np.median(cosines)),
            "cosine_p5": float(np.percentile(cosines, 5)),
            "compose_ms_per_chunk": per_chunk_ms,
            **spread(composed),
            "counts": dict(composer.counts),
        }
    # a floor to read the figures against: a random ranking finds 10 of 2,000 by chance
    out["random_recall10"] = 10 / len(texts)
    return out


# ---------------------------------------------------------------- indexing and the graph


def index_child(
    records: Path, database: Path, corpus: Path, cache: Path, variant: str
) -> dict[str, Any]:
    from agentic_retrieval.sources.local.record_ingest import index_records_file

    composer = ComposedEmbeddings(cache, corpus, **VARIANTS[variant])
    spent = [0.0]
    original = composer.embed_documents

    def timed(texts: list[str]) -> list[list[float]]:
        cpu = time.thread_time()
        try:
            return original(texts)
        finally:
            spent[0] += time.thread_time() - cpu

    composer.embed_documents = timed  # type: ignore[method-assign]
    for stale in database.parent.glob(database.name + "*"):
        stale.unlink()
    database.parent.mkdir(parents=True, exist_ok=True)
    store = LocalStore(database, create=True)
    started, cpu = time.perf_counter(), time.process_time()
    report = index_records_file(store, records, embeddings=composer)
    figures = {
        "wall_s": time.perf_counter() - started,
        "cpu_s": time.process_time() - cpu,
        "compose_cpu_s": spent[0],
        "records": len(report.indexed),
        "failed": len(report.failed),
        "chunks": store.count_chunks(),
        "counts": dict(composer.counts),
    }
    store.close()
    return figures


def graph_child(database: Path) -> dict[str, Any]:
    store = LocalStore(database)
    started, cpu = time.perf_counter(), time.process_time()
    store.refresh_vectors()
    figures = {"wall_s": time.perf_counter() - started, "cpu_s": time.process_time() - cpu}
    store.close()
    return figures


def child(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run one phase in a niced child process: its figures, with wall, CPU and peak RSS."""
    out = args.work / f"child_{name}.json"
    command = ["nice", "-n", "10", sys.executable, __file__, "--child", name]
    command += ["--chunks", str(args.chunks), "--corpus", str(args.corpus)]
    command += ["--work", str(args.work), "--cache", str(args.cache)]
    command += ["--sample", str(args.sample), "--variant", args.variant]
    measured = run_measured(command)
    return {**json.loads(out.read_text()), "process": measured}


def run_child(args: argparse.Namespace) -> None:
    records = args.corpus / f"records_{args.chunks}.jsonl"
    database = args.work / "store" / "wiki.sqlite"
    if args.child == "prepare":
        figures = prepare(args.corpus, args.cache)
    elif args.child == "check":
        figures = check(records, args.corpus, args.cache, args.sample)
    elif args.child == "index":
        figures = index_child(records, database, args.corpus, args.cache, args.variant)
    else:
        figures = graph_child(database)
    (args.work / f"child_{args.child}.json").write_text(json.dumps(figures, indent=1))


# ---------------------------------------------------------------- queries


@contextmanager
def timed_calls(owner: Any, name: str) -> Iterator[tuple[list[float], list[float]]]:
    """Wrap ``owner.name``; yields its (wall ms, CPU ms) samples.

    CPU is the process's: torch embeds on two threads, and nothing else runs meanwhile (one
    query at a time, the graph already built).
    """
    wall: list[float] = []
    cpu: list[float] = []
    original = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        started, process = time.perf_counter(), time.process_time()
        try:
            return original(*args, **kwargs)
        finally:
            wall.append((time.perf_counter() - started) * 1000)
            cpu.append((time.process_time() - process) * 1000)

    setattr(owner, name, timed)
    try:
        yield wall, cpu
    finally:
        setattr(owner, name, original)


def rss_mb() -> float:
    return float(psutil.Process().memory_info().rss) / 1e6


async def run_queries(database: Path, queries: list[dict[str, str]]) -> dict[str, Any]:
    """Every query through the hybrid and the lexical retrieve, alternating."""
    from agentic_retrieval.embeddings import LocalEmbeddings, local_embeddings

    embeddings = local_embeddings()
    embeddings.embed_query("warm up")
    memory: dict[str, float] = {"model_loaded": rss_mb()}
    started = time.perf_counter()
    hybrid = LocalKnowledgeSource("wiki", database, embeddings=embeddings)
    lexical = LocalKnowledgeSource("wiki", database)
    defaults = Context(reasoning_effort="minimal", reranker_threshold=None)
    kbs = {"hybrid": KnowledgeBase([hybrid], defaults=defaults)}
    kbs["lexical"] = KnowledgeBase([lexical], defaults=defaults)
    await kbs["hybrid"].aretrieve({"intents": [{"search": queries[0]["text"]}]})
    opened = {"first_hybrid_query_s": time.perf_counter() - started, "state": None}
    opened["state"] = hybrid.store._vectors.state
    for query in queries[:10]:  # warm the page cache, the connections and the graph
        for kb in kbs.values():
            await kb.aretrieve({"intents": [{"search": query["text"]}]})
    memory["stores_warm"] = rss_mb()
    series: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    deadline = time.monotonic() + TIME_LIMIT_S
    with (
        timed_calls(LocalEmbeddings, "embed_query") as (embed_wall, embed_cpu),
        timed_calls(LocalStore, "_dense") as (dense_wall, dense_cpu),
        timed_calls(LocalStore, "_similarities") as (sim_wall, sim_cpu),
        timed_calls(LocalStore, "_lexical") as (lex_wall, lex_cpu),
    ):
        for number, query in enumerate(queries):
            if time.monotonic() > deadline:
                print("time limit reached: fewer queries measured", flush=True)
                break
            samples: dict[str, float] = {}
            for label in ("hybrid", "lexical") if number % 2 else ("lexical", "hybrid"):
                marks = [len(s) for s in (embed_wall, dense_wall, sim_wall, lex_wall)]
                started, cpu = time.perf_counter(), time.process_time()
                response = await kbs[label].aretrieve({"intents": [{"search": query["text"]}]})
                samples[label] = (time.perf_counter() - started) * 1000
                samples[f"{label}_cpu"] = (time.process_time() - cpu) * 1000
                samples[f"{label}_empty"] = float(not response.references)
                parts = (
                    ("embed", embed_wall, embed_cpu, marks[0]),
                    ("dense", dense_wall, dense_cpu, marks[1]),
                    ("similarities", sim_wall, sim_cpu, marks[2]),
                    ("lexical_engine", lex_wall, lex_cpu, marks[3]),
                )
                for part, wall, thread, mark in parts:
                    samples[f"{label}_{part}"] = sum(wall[mark:])
                    samples[f"{label}_{part}_cpu"] = sum(thread[mark:])
            for name, value in samples.items():
                series[name][query["kind"]].append(value)
                series[name]["all"].append(value)
    memory["after_queries"] = rss_mb()
    rows = hybrid.store._vectors._rows
    recall = ann_recall(rows, queries, embeddings)
    hybrid.close()
    lexical.close()
    return {
        "series": {name: dict(kinds) for name, kinds in series.items()},
        "memory_mb": memory,
        "opened": opened,
        "ann": recall,
    }


def exact_top(rows: Any, vectors: np.ndarray, depth: int) -> list[list[tuple[int, float]]]:
    """Each query's exact top ``depth`` over every live row: one product per 20 queries."""
    graphed = rows.graphed
    matrix = rows._graph_matrix() if graphed else rows._buffer[: rows.size]  # a view: no copy
    alive = rows.alive[:graphed] if graphed else rows.alive[: rows.size]
    out = []
    for start in range(0, len(vectors), 20):
        scores = vectors[start : start + 20] @ matrix.T
        if rows.fresh and graphed:
            tail = rows._buffer[: rows.fresh]
            scores = np.concatenate([scores, vectors[start : start + 20] @ tail.T], axis=1)
            alive = rows.alive
        scores[:, ~alive[: scores.shape[1]]] = -np.inf
        for row in scores:
            best = np.argpartition(-row, depth - 1)[:depth]
            best = best[np.argsort(-row[best], kind="stable")]
            out.append([(int(rows.labels[b]), float(row[b])) for b in best])
    return out


def ann_recall(rows: Any, queries: list[dict[str, str]], embeddings: Any) -> dict[str, Any]:
    """Recall of the store's graph search against an exact product over the same rows.

    The store's own search (``VectorRows.search``, as ``LocalStore._dense`` calls it) at depth
    10 and 50; then the graph alone at other ``efSearch`` breadths (the store uses
    ``ann.ef_search`` of its size), to show what a higher recall would cost. A miss is told
    from a near-tie by the cosine the search's k-th hit falls short of the exact k-th by.
    """
    from agentic_retrieval.sources.local.store import ann

    faiss = ann._faiss()
    vectors = query_vectors(queries, embeddings)
    started = time.process_time()
    truth = exact_top(rows, vectors, 50)
    figures: dict[str, Any] = {
        "live": int(rows.live),
        "graphed": int(rows.graphed),
        "exact_cpu_ms_per_query": (time.process_time() - started) * 1000 / len(vectors),
        "ef_search_default": ann.ef_search(int(rows.graphed)),
    }
    for depth in (10, 50):
        shares, graph_ms, shortfall = [], [], []
        for vector, exact in zip(vectors, truth, strict=True):
            exact = exact[:depth]
            started = time.thread_time()
            found = rows.search(vector, depth)
            graph_ms.append((time.thread_time() - started) * 1000)
            shares.append(len({r for r, _ in found} & {r for r, _ in exact}) / depth)
            shortfall.append(exact[-1][1] - found[-1][1])
        figures[f"recall{depth}"] = float(np.mean(shares))
        figures[f"recall{depth}_min"] = float(np.min(shares))
        figures[f"recall{depth}_queries_below_0.9"] = int(sum(s < 0.9 for s in shares))
        figures[f"graph_cpu_ms_p50_{depth}"] = percentile(graph_ms, 50)
        figures[f"kth_cosine_shortfall_mean_{depth}"] = float(np.mean(shortfall))
    if rows.graph is not None:
        sweep = {}
        for breadth in (256, 512, 1024, 2048, 4096):
            params = faiss.SearchParametersHNSW(efSearch=breadth)
            shares, graph_ms = [], []
            for vector, exact in zip(vectors, truth, strict=True):
                started = time.thread_time()
                _, found = rows.graph.search(vector.reshape(1, -1), 10, params=params)
                graph_ms.append((time.thread_time() - started) * 1000)
                rids = {int(rows.labels[r]) for r in found[0] if r >= 0}
                shares.append(len(rids & {r for r, _ in exact[:10]}) / 10)
            sweep[breadth] = {
                "recall10": float(np.mean(shares)),
                "cpu_ms_p50": percentile(graph_ms, 50),
            }
        figures["ef_sweep"] = sweep
    return figures


# ---------------------------------------------------------------- printing


def pair(values: list[float]) -> str:
    return f"{percentile(values, 50):.1f} / {percentile(values, 95):.1f}"


def print_check(figures: dict[str, Any]) -> None:
    print(
        f"\ncheck: {figures['chunks']:,} sampled chunks embedded for real vs composed; the 200 "
        f"queries' top 10 (random: {figures['random_recall10']:.3f}):"
    )
    print(
        "| variant | recall@10 | fragment | entity | technical | common | cosine to real p50 "
        "/ p5 | random pairs' mean cosine | query to 10th nearest p50 | compose µs per chunk "
        "|\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    r = figures["real"]
    print(
        f"| real (reference) | 1 | | | | | 1 | {r['pair_cosine_mean']:.3f} "
        f"| {r['tenth_cosine_p50']:.3f} | |"
    )
    for name, v in figures["variants"].items():
        kinds = " | ".join(f"{v['recall10_by_kind'][k]:.3f}" for k in KINDS[1:])
        print(
            f"| {name} | {v['recall10']:.3f} | {kinds} | {v['cosine_p50']:.3f} / "
            f"{v['cosine_p5']:.3f} | {v['pair_cosine_mean']:.3f} | {v['tenth_cosine_p50']:.3f} "
            f"| {v['compose_ms_per_chunk'] * 1000:.0f} |"
        )


def print_queries(result: dict[str, Any], load: float) -> None:
    series = result["series"]
    empty = {x: sum(series[f"{x}_empty"]["all"]) for x in ("hybrid", "lexical")}
    print(
        f"\nqueries (load average {load:.2f} at the end; no reference: {empty['hybrid']:.0f} "
        f"hybrid, {empty['lexical']:.0f} lexical), ms, p50 / p95:"
    )
    print(
        "| kind | n | hybrid wall | hybrid CPU | lexical wall | lexical CPU | query embedding "
        "CPU | vector search wall | vector search CPU | hit cosines CPU | dense share of "
        "hybrid wall |"
    )
    print("| --- " * 11 + "|")
    for kind in KINDS:
        h = series["hybrid"].get(kind, [])
        if not h:
            continue
        dense = [
            e + d + s
            for e, d, s in zip(
                series["hybrid_embed"][kind],
                series["hybrid_dense"][kind],
                series["hybrid_similarities"][kind],
                strict=True,
            )
        ]
        print(
            f"| {kind} | {len(h)} | {pair(h)} | {pair(series['hybrid_cpu'][kind])} "
            f"| {pair(series['lexical'][kind])} | {pair(series['lexical_cpu'][kind])} "
            f"| {pair(series['hybrid_embed_cpu'][kind])} | {pair(series['hybrid_dense'][kind])} "
            f"| {pair(series['hybrid_dense_cpu'][kind])} "
            f"| {pair(series['hybrid_similarities_cpu'][kind])} | {sum(dense) / sum(h):.0%} |"
        )


def disk_mb(database: Path) -> dict[str, float]:
    files = {p.name: p.stat().st_size / 1e6 for p in database.parent.glob(database.name + "*")}
    files.update(
        {
            p.name: sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) / 1e6
            for p in database.parent.iterdir()
            if p.is_dir()
        }
    )
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, required=True, help="corpus size in chunks")
    parser.add_argument("--corpus", type=Path, required=True, help="records and queries folder")
    parser.add_argument("--work", type=Path, required=True, help="scratch folder of this run")
    parser.add_argument("--cache", type=Path, help="real vectors of the parts (default WORK/cache)")
    parser.add_argument("--sample", type=int, default=2000, help="chunks embedded for the check")
    parser.add_argument("--variant", choices=sorted(VARIANTS), default="names")
    parser.add_argument("--skip-index", action="store_true", help="reuse WORK/store")
    parser.add_argument("--skip-check", action="store_true")
    parser.add_argument("--queries", type=int, default=200, help="at most this many queries")
    parser.add_argument("--child", choices=("prepare", "check", "index", "graph"))
    args = parser.parse_args()
    if not 1 <= args.chunks <= MAX_CHUNKS:
        parser.error(f"--chunks must be between 1 and {MAX_CHUNKS:,}")
    if not 10 <= args.sample <= 20_000:
        parser.error("--sample must be between 10 and 20,000")
    args.cache = args.cache or args.work / "cache"
    if args.child:
        run_child(args)
        return 0
    records = args.corpus / f"records_{args.chunks}.jsonl"
    queries_file = args.corpus / "queries.jsonl"
    if not (records.is_file() and queries_file.is_file()):
        command = [sys.executable, str(HERE / "corpus_wiki_like.py"), "--chunks", str(args.chunks)]
        subprocess.run([*command, "--out", str(args.corpus)], check=True)
    queries = [json.loads(line) for line in queries_file.read_text().splitlines() if line]
    queries = queries[: args.queries]
    args.work.mkdir(parents=True, exist_ok=True)
    database = args.work / "store" / "wiki.sqlite"
    result_file = args.work / "result.json"
    result: dict[str, Any] = json.loads(result_file.read_text()) if result_file.is_file() else {}
    result.update(
        {
            "commit": git_commit(),
            "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "records": str(records),
            "variant": args.variant,
        }
    )
    print(
        f"commit {result['commit']}; {result['started']}; load average "
        f"{os.getloadavg()[0]:.2f}; records {records.name}; variant {args.variant}",
        flush=True,
    )
    result["prepare"] = child("prepare", args)
    print(f"\nparts embedded for real: {json.dumps(result['prepare'])}", flush=True)
    if not args.skip_check:
        result["check"] = child("check", args)
        print_check(result["check"])
    if not args.skip_index:
        result["index"] = child("index", args)
        result["index"]["load_after"] = os.getloadavg()[0]
        result["index"]["disk_mb"] = disk_mb(database)
        i, p = result["index"], result["index"]["process"]
        print(
            f"\nindexing (load average {i['load_after']:.2f} at the end): {i['chunks']:,} chunks "
            f"of {i['records']:,} records ({i['failed']} failed) in {p['wall_s']:,.0f} s wall, "
            f"{p['cpu_s']:,.0f} s CPU ({i['compose_cpu_s']:,.0f} s of it composing vectors: "
            f"{i['chunks'] / max(p['cpu_s'] - i['compose_cpu_s'], 1e-9):,.0f} chunks per CPU-s "
            f"without it), peak RSS {p['peak_rss_mb']:,.0f} MB; on disk "
            f"{json.dumps(i['disk_mb'])}",
            flush=True,
        )
        result["graph"] = child("graph", args)
        g, p = result["graph"], result["graph"]["process"]
        g["disk_mb"] = disk_mb(database)
        g["load_after"] = os.getloadavg()[0]
        print(
            f"\ngraph (load average {g['load_after']:.2f} at the end): refresh_vectors "
            f"{g['wall_s']:,.0f} s wall, {g['cpu_s']:,.0f} s CPU; process peak RSS "
            f"{p['peak_rss_mb']:,.0f} MB; on disk {json.dumps(g['disk_mb'])}",
            flush=True,
        )
    result_file.write_text(json.dumps(result, indent=1))
    load_before = os.getloadavg()[0]
    measured = asyncio.run(run_queries(database, queries))
    load = os.getloadavg()[0]
    result["queries"] = {**measured, "load_before": load_before, "load_after": load}
    print_queries(measured, load)
    m, o, a = measured["memory_mb"], measured["opened"], measured["ann"]
    print(
        f"\nserving: RSS {m['model_loaded']:,.0f} MB with the model loaded, "
        f"{m['stores_warm']:,.0f} MB with the store open and warm (+"
        f"{m['stores_warm'] - m['model_loaded']:,.0f}), {m['after_queries']:,.0f} MB after "
        f"the queries; first hybrid query {o['first_hybrid_query_s']:.1f} s after opening "
        f"({json.dumps(o['state'])})"
    )
    print(
        f"ANN vs exact over the same {a['live']:,} vectors ({a['graphed']:,} in the graph), "
        f"{len(queries)} real query vectors, the store's search (efSearch "
        f"{a['ef_search_default']}): recall@10 {a['recall10']:.4f} (min {a['recall10_min']:.2f}, "
        f"{a['recall10_queries_below_0.9']} queries below 0.9; k-th hit's cosine short of the "
        f"exact k-th by {a['kth_cosine_shortfall_mean_10']:.4f} on average), recall@50 "
        f"{a['recall50']:.4f} (min {a['recall50_min']:.2f}); CPU per query p50 "
        f"{a['graph_cpu_ms_p50_10']:.2f} ms (exact product: {a['exact_cpu_ms_per_query']:.1f} ms)"
    )
    for breadth, v in a.get("ef_sweep", {}).items():
        print(
            f"  graph alone, efSearch {breadth}: recall@10 {v['recall10']:.4f}, "
            f"CPU p50 {v['cpu_ms_p50']:.2f} ms"
        )
    result_file.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
