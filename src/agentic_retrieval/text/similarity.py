"""Near-duplicate detection: hashed shingles, MinHash sketches, Jaccard similarity."""

from __future__ import annotations

from agentic_retrieval.text.analysis import cached_tokens, short_text_cache


@short_text_cache(maxsize=4096)
def shingles(text: str, size: int = 5) -> frozenset[int]:
    """Hashed n-grams of the content words of ``text`` (for near-duplicate detection).

    Built from the same cached tokens the lexical reranker uses, so each chunk is tokenized
    once per run.
    """
    words = cached_tokens(text, True)
    if len(words) <= size:
        return frozenset({hash(words)})
    return frozenset(hash(words[i : i + size]) for i in range(len(words) - size + 1))


SKETCH_SIZE = 16


@short_text_cache(maxsize=4096)
def sketch(text: str) -> frozenset[int]:
    """A bottom-k MinHash sketch of :func:`shingles`: the ``SKETCH_SIZE`` smallest hashes.

    Two texts whose Jaccard similarity is high share most of their sketch, so comparing
    sketches (16 values) rules out dissimilar pairs without joining whole shingle sets.
    """
    return frozenset(sorted(shingles(text))[:SKETCH_SIZE])


def jaccard(a: frozenset[int], b: frozenset[int]) -> float:
    """Jaccard similarity of two shingle sets."""
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)
