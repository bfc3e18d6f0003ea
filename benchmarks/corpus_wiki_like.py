"""A deterministic Wikipedia-like corpus and 200 varied queries, scalable by chunk count.

Records are ``{"id", "title", "text", "category", "year", "tags", "groups"}``: an entity's
name as the title, a lead sentence ("X is a river in Y."), then paragraphs of real English
sentences, some of which mention other entities. Entity names are made from syllables and
mentioned with Zipf-distributed frequency (a few names everywhere, most rarely), as names
are in an encyclopedia. ``category``, ``year`` and ``tags`` are filterable metadata;
``groups`` lists the groups allowed to see the record (``["all"]`` for public records) for the
permission benchmarks (``index --records --group-ids-field groups``; without that option it
is one more metadata list).

The sentences come from text on this machine, in a fixed order: the Earth-book pages and the
Northwind PDFs (``../shared/data``), the Cranfield abstracts (``../shared/collections``), the
docstrings of the running Python's standard library and of torch (pinned by the Makefile),
and Python's ``pydoc_data`` topics (a fixed text per Python and torch version: the figures in
benchmarks/README.md used 3.11.7 and torch 2.13.0). A sentence
is kept when it reads as prose (40-300 characters, a capital first, a full stop last, almost
only words). The pool's SHA-256 is printed so two runs can be checked to use the same text.

Records are generated as one stream from a fixed seed and ``--chunks N`` stops it once the
records hold N chunks (counted with the store's own chunker at its default size), so the
corpus of 120k chunks is the first part of the corpus of 1M chunks, and both share the same
queries (drawn from the first records). Queries (``queries.jsonl``, ``{"id", "kind",
"text"}``): 50 sentence fragments, 50 entity questions, 50 long technical Cranfield queries,
50 common one- or two-word queries.

    .venv/bin/python benchmarks/corpus_wiki_like.py --chunks 120000 --out /work/scratch/x
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import random
import re
import sys
import sysconfig
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from agentic_retrieval.sources.local.chunking import chunk_text

ROOT = Path(__file__).resolve().parents[1]
# ../shared beside the checkout (a worktree of /work/main may sit one level deeper)
SHARED = next(
    (p for p in (ROOT / ".." / "shared", ROOT / ".." / ".." / "shared") if p.is_dir()),
    ROOT / ".." / "shared",
)
SEED = 21
QUERY_SOURCE_RECORDS = 8_000
"""Queries are drawn from the first records, present in every corpus size from 20k chunks up."""

_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_WORD = re.compile(r"[A-Za-z][a-z]+(?:-[a-z]+)?[,;:]?")
_BAD = re.compile(r">>>|==|[{}`|\\<>\[\]_#@*=]|::|\(\)|https?:|www\.|\.py\b|\.\.")
_TOKEN = re.compile(r"[a-z]+")
_CONSONANTS = "b c d f g h k l m n p r s t v w z br ch dr gr kr pl st tr th".split()
_VOWELS = "a e i o u a e i o ai ea ou".split()
_ENDINGS = "n r s l th nd rt sk m ck ll x".split() + [""] * 6
CATEGORIES = (
    "geography physics history biology chemistry engineering aviation literature music "
    "politics economics astronomy geology medicine mathematics computing sport art "
    "architecture religion philosophy law transport military agriculture language film "
    "climate oceanography botany zoology education business energy"
).split()
TAGS = (
    "featured stub disputed cited illustrated translated archived reviewed historical "
    "technical regional biography timeline glossary list overview survey report map data "
    "primary secondary draft stable protected"
).split()
KINDS = [
    ("person", "{name} ({born}-{died}) was a {role} from {place}."),
    ("place", "{name} is a {feature} in {place}."),
    ("organisation", "{name} is a {org} founded in {year} in {place}."),
    ("work", "{name} is a {work} first published in {year}."),
    ("concept", "{name} is a concept in {field} first described in {year}."),
]
ROLES = "physicist engineer geologist painter composer historian botanist aviator poet".split()
FEATURES = "river lake mountain valley town island plateau bay desert glacier".split()
ORGS = "research institute company university society observatory laboratory".split()
WORKS = "book report treatise novel survey atlas handbook".split()


# ---------------------------------------------------------------- the sentence pool


def _prose(sentence: str) -> bool:
    if not 40 <= len(sentence) <= 300 or not sentence[0].isupper() or sentence[-1] != ".":
        return False
    if _BAD.search(sentence):
        return False
    words = sentence[:-1].split()
    if len(words) < 6:
        return False
    wordy = sum(1 for w in words if _WORD.fullmatch(w) or (w[:1].isupper() and w[1:].isalpha()))
    return wordy >= 0.85 * len(words)


def _sentences(text: str) -> Iterator[str]:
    for paragraph in re.split(r"\n\s*\n", text):
        flat = " ".join(paragraph.split())
        for sentence in _SENTENCE_SPLIT.split(flat):
            sentence = sentence.strip()
            if _prose(sentence):
                yield sentence


def _shared_texts() -> Iterator[tuple[str, str]]:
    pages = SHARED / "data" / "earth-book" / "pages"
    for page in sorted(pages.glob("*.txt")) if pages.is_dir() else []:
        yield f"earth-book/{page.name}", page.read_text(encoding="utf-8", errors="replace")
    pdfs = SHARED / "data" / "northwind"
    for pdf in sorted(pdfs.glob("*.pdf")) if pdfs.is_dir() else []:
        from pypdf import PdfReader

        text = "\n\n".join(page.extract_text() or "" for page in PdfReader(pdf).pages)
        yield f"northwind/{pdf.name}", text
    cranfield = SHARED / "collections" / "cranfield" / "corpus.jsonl"
    if cranfield.is_file():
        with cranfield.open(encoding="utf-8") as handle:
            for line in handle:
                row = json.loads(line)
                # Cranfield is lower case: capitalise each sentence so it passes as prose
                text = ". ".join(s.strip().capitalize() for s in row["text"].split(" . "))
                yield f"cranfield/{row['_id']}", text


def _python_texts() -> Iterator[tuple[str, str]]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = [
        (f"stdlib/{p.relative_to(stdlib).as_posix()}", p)
        for p in sorted(stdlib.rglob("*.py"))
        if not p.relative_to(stdlib).as_posix().startswith(("site-packages", "test/", "idle"))
    ]
    # torch (pinned by the Makefile: 2.13.0) has the largest body of English docstrings
    torch = Path(sysconfig.get_paths()["purelib"]) / "torch"
    files += [(f"torch/{p.relative_to(torch).as_posix()}", p) for p in sorted(torch.rglob("*.py"))]
    for relative, path in files:
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError):
            continue
        docs = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                if doc:
                    docs.append(doc)
        yield relative, "\n\n".join(docs)
    try:
        from pydoc_data.topics import topics  # type: ignore[import-not-found]
    except ImportError:
        return
    for name in sorted(topics):
        yield f"pydoc/{name}", topics[name]


def sentence_pool() -> list[str]:
    """Every distinct prose sentence, in source order (sources sorted by name)."""
    seen: dict[str, None] = {}
    for _, text in (*_shared_texts(), *_python_texts()):
        for sentence in _sentences(text):
            seen.setdefault(sentence, None)
    return list(seen)


# ---------------------------------------------------------------- names (Zipf)


def _names(rng: random.Random, count: int) -> list[str]:
    def word() -> str:
        syllables = rng.choice((2, 2, 2, 3, 3))
        parts = [rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(syllables)]
        return ("".join(parts) + rng.choice(_ENDINGS)).capitalize()

    out: dict[str, None] = {}
    while len(out) < count:
        shape = rng.random()
        name = word() if shape < 0.3 else f"{word()} {word()}"
        out.setdefault(name, None)
    return list(out)


class Zipf:
    """Draws ranks 0..n-1 with probability proportional to 1 / (rank + 1) ** s."""

    def __init__(self, n: int, s: float, rng: np.random.Generator) -> None:
        weights = 1.0 / np.arange(1, n + 1) ** s
        self.cumulative = np.cumsum(weights / weights.sum())
        self.rng = rng
        self.buffer: list[int] = []

    def draw(self) -> int:
        if not self.buffer:
            picks = np.searchsorted(self.cumulative, self.rng.random(4096), side="right")
            self.buffer = [min(int(p), len(self.cumulative) - 1) for p in picks]
        return self.buffer.pop()


# ---------------------------------------------------------------- records


class Generator:
    """The record stream: the same records in the same order for one pool and seed."""

    def __init__(self, pool: list[str], seed: int = SEED, names: int = 200_000) -> None:
        self.pool = pool
        self.rng = random.Random(seed)
        self.nprng = np.random.default_rng(seed)
        self.names = _names(random.Random(seed + 1), names)
        self.mentions = Zipf(len(self.names), 1.05, self.nprng)
        self.categories = Zipf(len(CATEGORIES), 1.0, self.nprng)
        self.tags = Zipf(len(TAGS), 1.1, self.nprng)
        self.groups = Zipf(1000, 0.9, self.nprng)
        self.titles: Counter[str] = Counter()

    def _lead(self, title: str) -> str:
        rng = self.rng
        _kind, template = KINDS[rng.randrange(len(KINDS))]
        born = rng.randint(1700, 1960)
        return template.format(
            name=title,
            born=born,
            died=born + rng.randint(30, 95),
            role=rng.choice(ROLES),
            place=self.names[self.mentions.draw()],
            feature=rng.choice(FEATURES),
            org=rng.choice(ORGS),
            work=rng.choice(WORKS),
            field=rng.choice(CATEGORIES),
            year=rng.randint(1800, 2020),
        )

    def _sentence(self, window: int, title: str) -> str:
        rng = self.rng
        sentence = self.pool[(window + rng.randrange(400)) % len(self.pool)]
        roll = rng.random()
        lowered = sentence[0].lower() + sentence[1:]
        if roll < 0.15:
            return f"According to {self.names[self.mentions.draw()]}, {lowered}"
        if roll < 0.25:
            return f"In {rng.randint(1800, 2020)}, {title} showed that {lowered}"
        if roll < 0.35:
            return (
                f"{sentence[:-1]} ({self.names[self.mentions.draw()]}, {rng.randint(1800, 2020)})."
            )
        return sentence

    def record(self, number: int) -> dict[str, object]:
        rng = self.rng
        # titles cycle through the names in rank order; a repeated name gets a disambiguator
        base = self.names[number % len(self.names)]
        self.titles[base] += 1
        title = base if self.titles[base] == 1 else f"{base} ({self.titles[base]})"
        window = rng.randrange(len(self.pool))
        # Wikipedia-like lengths: many short articles, a long tail of long ones
        sentences = max(3, min(160, int(rng.lognormvariate(2.9, 0.8))))
        paragraphs, current = [], [self._lead(title)]
        for _ in range(sentences):
            current.append(self._sentence(window, title))
            if len(current) >= rng.randint(3, 7):
                paragraphs.append(" ".join(current))
                current = []
        if current:
            paragraphs.append(" ".join(current))
        public = rng.random() < 0.03
        groups = ["all"] if public else sorted({f"g{self.groups.draw():04d}" for _ in range(2)})
        return {
            "id": f"w{number:07d}",
            "title": title,
            "text": "\n\n".join(paragraphs),
            "category": CATEGORIES[self.categories.draw()],
            "year": rng.randint(1850, 2025),
            "tags": sorted({TAGS[self.tags.draw()] for _ in range(rng.randint(1, 3))}),
            "groups": groups,
        }


def records(pool: list[str], chunks: int) -> Iterator[tuple[dict[str, object], int]]:
    """Records (with their chunk counts) until they hold ``chunks`` chunks."""
    generator = Generator(pool)
    total = number = 0
    while total < chunks:
        record = generator.record(number)
        count = len(chunk_text(str(record["text"]))) or 1
        total += count
        number += 1
        yield record, count


# ---------------------------------------------------------------- queries


def queries(pool: list[str], first: list[dict[str, object]]) -> list[dict[str, str]]:
    """200 queries from the first records (so every corpus size shares them)."""
    rng = random.Random(SEED + 2)
    out: list[dict[str, str]] = []
    texts = [str(r["text"]) for r in first]
    # sentence fragments: 4-9 consecutive words of a sentence the corpus holds
    while len(out) < 50:
        sentence = rng.choice(rng.choice(texts).split("\n\n")).split(". ")
        words = rng.choice(sentence).split()
        if len(words) < 6:
            continue
        length = rng.randint(4, min(9, len(words)))
        start = rng.randrange(len(words) - length + 1)
        fragment = " ".join(words[start : start + length]).strip(".,;:()")
        out.append({"kind": "fragment", "text": fragment})
    # entity questions about titles of the first records (head and tail of the Zipf names)
    forms = (
        "Who was {}?",
        "Where is {}?",
        "What is {} known for?",
        "When was {} founded?",
        "{} history",
        "Tell me about {}",
    )
    for record in rng.sample(first, 50):
        title = str(record["title"]).split(" (")[0]
        out.append({"kind": "entity", "text": rng.choice(forms).format(title)})
    # long technical queries: Cranfield's own
    cranfield = SHARED / "collections" / "cranfield" / "queries.jsonl"
    technical: list[str] = []
    if cranfield.is_file():
        with cranfield.open(encoding="utf-8") as handle:
            technical = [json.loads(line)["text"] for line in handle]
    technical = [t for t in technical if len(t.split()) >= 10] or [
        s for s in pool if len(s.split()) >= 14
    ]
    for text in rng.sample(technical, 50):
        out.append({"kind": "technical", "text": text})
    # common one- or two-word queries: frequent non-stopword words of the first records
    # sorted: a set's order changes with the process's hash seed
    counts = Counter(
        word
        for text in texts[:2000]
        for word in sorted(set(_TOKEN.findall(text.lower())))
        if len(word) > 4
    )
    template_words = {w for _, t in KINDS for w in _TOKEN.findall(t)} | {
        "according",
        "showed",
        "first",
    }
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:400]
    common = [w for w, _ in ranked if w not in template_words][:300]
    for n in range(50):
        words = rng.sample(common, 1 if n % 2 else 2)
        out.append({"kind": "common", "text": " ".join(words)})
    return [{"id": f"q{n:03d}", **q} for n, q in enumerate(out)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--chunks",
        type=int,
        action="append",
        help="chunks to generate (repeatable: each size is written as the prefix of the next)",
    )
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    args = parser.parse_args()
    sizes = sorted(set(args.chunks or [120_000]))
    if sizes[0] <= 0 or sizes[-1] > 5_000_000:
        parser.error("--chunks must be between 1 and 5,000,000")
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    pool_file = args.out / "sentences.txt"
    pool = sentence_pool()
    pool_file.write_text("\n".join(pool) + "\n", encoding="utf-8")
    digest = hashlib.sha256(pool_file.read_bytes()).hexdigest()[:16]
    vocabulary = {w for s in pool for w in _TOKEN.findall(s.lower())}
    print(
        f"sentence pool: {len(pool):,} distinct sentences, {len(vocabulary):,} distinct words "
        f"(sha256 {digest}; python {sys.version.split()[0]})"
    )
    first: list[dict[str, object]] = []
    total = count = size = 0
    pending = list(sizes)
    handles = {n: (args.out / f"records_{n}.jsonl").open("w", encoding="utf-8") for n in sizes}
    for record, chunks in records(pool, sizes[-1]):
        line = json.dumps(record, ensure_ascii=False) + "\n"
        for n in pending:
            handles[n].write(line)
        size += len(line.encode())
        total += chunks
        count += 1
        if len(first) < QUERY_SOURCE_RECORDS:
            first.append(record)
        while pending and total >= pending[0]:
            handles[pending[0]].close()
            print(
                f"records_{pending[0]}.jsonl: {count:,} records, {total:,} chunks, "
                f"{size / 1e6:,.0f} MB",
                flush=True,
            )
            pending.pop(0)
    query_list = queries(pool, first)
    with (args.out / "queries.jsonl").open("w", encoding="utf-8") as handle:
        for query in query_list:
            handle.write(json.dumps(query, ensure_ascii=False) + "\n")
    words = {w for r in first[:2000] for w in _TOKEN.findall(str(r["text"]).lower())}
    print(
        f"{len(query_list)} queries; {len(words):,} distinct words in the first 2,000 records; "
        f"{time.perf_counter() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
