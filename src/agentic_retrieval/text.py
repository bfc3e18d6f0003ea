"""Small text utilities shared by the in-memory source and the lexical reranker."""

from __future__ import annotations

import functools
import re
import unicodedata

_WORD = re.compile(r"\w+", re.UNICODE)

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
def _tokens(text: str, drop_stopwords: bool) -> tuple[str, ...]:
    # Cached: the same chunks are tokenized for every subquery and by several steps.
    folded = text.casefold()
    if not folded.isascii():
        folded = unicodedata.normalize("NFKD", folded)
        folded = "".join(ch for ch in folded if not unicodedata.combining(ch))
    words = _WORD.findall(folded)
    if drop_stopwords:
        return tuple(stem(w) for w in words if w not in STOPWORDS)
    return tuple(stem(w) for w in words)


@functools.lru_cache(maxsize=4096)
def shingles(text: str, size: int = 5) -> frozenset[int]:
    """Hashed word n-grams of ``text`` (for near-duplicate detection)."""
    words = _tokens(text, False)
    if len(words) <= size:
        return frozenset({hash(words)})
    return frozenset(hash(words[i : i + size]) for i in range(len(words) - size + 1))


def jaccard(a: frozenset[int], b: frozenset[int]) -> float:
    """Jaccard similarity of two shingle sets."""
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)
