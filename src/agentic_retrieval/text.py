"""Small text utilities shared by the in-memory source and the lexical reranker."""

from __future__ import annotations

import functools
import re
import unicodedata

_WORD = re.compile(r"\w+", re.UNICODE)
_COMBINING = re.compile(r"[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")
"""Combining diacritical marks (what NFKD splits accents into)."""

STOPWORDS = frozenset(
    """a an and are as at be but by can do does for from had has have how i if in into is it
    its me my of on or our so than that the their them then there these they this to was we
    were what when where which who why will with you your""".split()
)


def stem(word: str) -> str:
    """Porter's step 1a: fold English plurals (``passes``→``pass``, ``fees``→``fee``)."""
    if len(word) <= 3 or not word.endswith("s"):
        return word
    if word.endswith("sses"):
        return word[:-2]
    if word.endswith("ies"):
        return word[:-2]
    if word.endswith(("ss", "us", "is")):
        return word
    return word[:-1]


def tokenize(text: str, *, drop_stopwords: bool = True) -> list[str]:
    """Lower-case word tokens, accents folded, plurals folded, stopwords dropped.

    Args:
        text: Any text, including punctuation and query syntax.
        drop_stopwords: Drop common English function words.

    Returns:
        The tokens in order of appearance.
    """
    return list(_tokens(text, drop_stopwords))


@functools.lru_cache(maxsize=8192)
def token_set(text: str) -> frozenset[str]:
    """The distinct content-word tokens of ``text`` (cached)."""
    return frozenset(_tokens(text, True))


@functools.lru_cache(maxsize=8192)
def _tokens(text: str, drop_stopwords: bool) -> tuple[str, ...]:
    # Cached: the same chunks are tokenized for every subquery and by several steps.
    folded = text.casefold()
    if not folded.isascii():
        folded = _COMBINING.sub("", unicodedata.normalize("NFKD", folded))
    words = _WORD.findall(folded)
    if len(_STEMS) > 200_000:  # bound the memo on unbounded vocabularies
        _STEMS.clear()
    stems = _STEMS
    if drop_stopwords:
        words = [w for w in words if w not in STOPWORDS]
    return tuple(stems[w] if w in stems else _remember_stem(w) for w in words)


_STEMS: dict[str, str] = {}


def _remember_stem(word: str) -> str:
    _STEMS[word] = stemmed = stem(word)
    return stemmed


@functools.lru_cache(maxsize=4096)
def shingles(text: str, size: int = 5) -> frozenset[int]:
    """Hashed n-grams of the content words of ``text`` (for near-duplicate detection).

    Built from the same cached tokens the lexical reranker uses, so each chunk is tokenized
    once per run.
    """
    words = _tokens(text, True)
    if len(words) <= size:
        return frozenset({hash(words)})
    return frozenset(hash(words[i : i + size]) for i in range(len(words) - size + 1))


SKETCH_SIZE = 16


@functools.lru_cache(maxsize=4096)
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
