"""Words of a text as the lexical rankers see them: normalised, stemmed, CJK segmented."""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable
from typing import Any, TypeVar

R = TypeVar("R")

_WORD = re.compile(r"\w+", re.UNICODE)
_COMBINING = re.compile(r"[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")
"""Combining diacritical marks (what NFKD splits accents into)."""
_CJK_RUN = re.compile(r"([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+)")
"""Runs of Chinese, Japanese or Korean characters, written without spaces between words."""

MAX_CACHED_CHARS = 20_000
"""Longer texts are tokenized without caching, so a few huge inputs cannot fill memory."""
MAX_QUERY_TERMS = 64
"""Distinct terms of a query that count for lexical scoring (the local store's FTS cap too):
beyond a few dozen words a query says nothing more, and per-candidate work stays bounded."""


def same_words_key(text: str) -> str:
    """``text`` case-folded with its whitespace collapsed: texts equal under it say the same.

    How a query is recognised as already asked (``Tram  fares`` is ``tram fares``).
    """
    return " ".join(text.casefold().split())


def short_text_cache(maxsize: int) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """``lru_cache`` for texts up to ``MAX_CACHED_CHARS`` (the first argument)."""

    def decorate(function: Callable[..., R]) -> Callable[..., R]:
        cached = functools.lru_cache(maxsize=maxsize)(function)

        @functools.wraps(function)
        def wrapper(text: str, *args: Any) -> R:
            if len(text) > MAX_CACHED_CHARS:
                return function(text, *args)
            return cached(text, *args)

        return wrapper

    return decorate


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
    return list(cached_tokens(text, drop_stopwords))


def query_terms(text: str, limit: int = MAX_QUERY_TERMS) -> dict[str, int]:
    """The first ``limit`` distinct content terms of a query, with their counts in it.

    Linear in the text, and what callers loop over per candidate is at most ``limit`` terms,
    however long the query (a whole pasted document is a query too).
    """
    counts: dict[str, int] = {}
    for token in cached_tokens(text, True):
        if token in counts:
            counts[token] += 1
        elif len(counts) < limit:
            counts[token] = 1
    return counts


@short_text_cache(maxsize=8192)
def token_counts(text: str) -> dict[str, int]:
    """Content-word token frequencies of ``text`` (cached)."""
    counts: dict[str, int] = {}
    for token in cached_tokens(text, True):
        counts[token] = counts.get(token, 0) + 1
    return counts


@short_text_cache(maxsize=8192)
def token_set(text: str) -> frozenset[str]:
    """The distinct content-word tokens of ``text`` (cached)."""
    return frozenset(cached_tokens(text, True))


@short_text_cache(maxsize=8192)
def cached_tokens(text: str, drop_stopwords: bool) -> tuple[str, ...]:
    """The token tuple behind :func:`tokenize` (cached).

    Cached because the same chunks are tokenized for every subquery and by several steps.
    """
    folded = text.casefold()
    ascii_only = folded.isascii()
    if not ascii_only:
        folded = _COMBINING.sub("", unicodedata.normalize("NFKD", folded))
    words = _WORD.findall(folded)
    if not ascii_only:
        words = _segment_cjk(words)
    if len(_STEMS) > 200_000:  # bound the memo on unbounded vocabularies
        _STEMS.clear()
    stems = _STEMS
    if drop_stopwords:
        words = [w for w in words if w not in STOPWORDS]
    return tuple(stems[w] if w in stems else _remember_stem(w) for w in words)


_STEMS: dict[str, str] = {}


def _segment_cjk(words: list[str]) -> list[str]:
    """Split CJK runs into overlapping character bigrams (the usual unsegmented-text index)."""
    out: list[str] = []
    for word in words:
        if not _CJK_RUN.search(word):
            out.append(word)
            continue
        for piece in _CJK_RUN.split(word):
            if not piece:
                continue
            if _CJK_RUN.fullmatch(piece) and len(piece) > 1:
                out.extend(piece[i : i + 2] for i in range(len(piece) - 1))
            else:
                out.append(piece)
    return out


def _remember_stem(word: str) -> str:
    _STEMS[word] = stemmed = stem(word)
    return stemmed
