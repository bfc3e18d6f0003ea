"""Query terms from user text, and text as the lexical index sees it.

No user text is ever parsed as query syntax: :func:`query_terms` reduces any text to words
(the tantivy query is built from them, see :mod:`.lexical_index`), and
:func:`fts_match_expression` quotes them for SQLite FTS5. Chinese and Japanese text is indexed
and queried as bigrams (:func:`fts_segment`), since it has no spaces to split words at.
"""

from __future__ import annotations

import re

from agentic_retrieval.text import MAX_QUERY_TERMS

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
_CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+")
# Dropped from queries only (the index keeps every word): a term that occurs in nearly every
# chunk costs a long posting list and adds almost nothing to BM25.
QUERY_STOPWORDS = frozenset(
    """a an and are as at be but by can do does for from had has have how i if in into is it
    its me my of on or our so than that the their them then there these they this to was we
    were what when where which who why will with you your""".split()
)


def fts_segment(text: str | None) -> str | None:
    """Text as the lexical index sees it: runs of CJK characters split into spaced bigrams.

    Chinese and Japanese are written without spaces, so a tokenizer splitting at
    non-letters would index a whole sentence as one token and no word inside it could be
    found. Other text is returned unchanged. Also registered as the SQL function
    ``fts_segment``, which the FTS5 triggers of stores before schema version 4 call.
    """
    if text is None or text.isascii():
        return text
    return _CJK_RUN.sub(lambda m: f" {_bigrams(m.group(0))} ", text)


def _bigrams(run: str) -> str:
    if len(run) == 1:
        return run
    return " ".join(run[i : i + 2] for i in range(len(run) - 1))


def fts_match_expression(text: str, *, segmented: bool = True) -> str | None:
    """Turn arbitrary user text into a safe FTS5 query: quoted terms joined by ``OR``.

    Operators (``AND``, ``NEAR``, ``-``, ``*``, ``:``, quotes, parentheses) in the user's text
    become plain words or separators; nothing the user types can change the query's syntax.
    The terms are :func:`query_terms`'s.

    Returns:
        The MATCH expression, or ``None`` when the text has no word at all.

    """
    terms = query_terms(text, segmented=segmented)
    if not terms:
        return None
    return " OR ".join(f'"{term}"' for term in terms)


def query_terms(text: str, *, segmented: bool = True) -> list[str]:
    """The index terms of arbitrary user text, in order of first appearance.

    Words are runs of letters and digits, case-folded; stopwords are dropped unless the text
    has nothing else. With ``segmented`` (the index holds :func:`fts_segment` text), a CJK
    run becomes the space-separated phrase of its bigrams, so a word inside an unspaced
    sentence matches.

    Only the first ``MAX_QUERY_TERMS`` distinct terms count; the scan stops there, so the
    cost is linear in the text read and bounded however long the text is.
    """
    # dicts as ordered sets: first appearance order, O(1) membership
    content: dict[str, None] = {}
    stopwords: dict[str, None] = {}
    for match in _TOKEN.finditer(text):
        for term in _query_terms(match.group().casefold(), segmented):
            if term not in QUERY_STOPWORDS:
                content[term] = None
            elif len(stopwords) < MAX_QUERY_TERMS:
                stopwords[term] = None
        if len(content) >= MAX_QUERY_TERMS:
            break
    return list(content or stopwords)[:MAX_QUERY_TERMS]


def _query_terms(token: str, segmented: bool) -> list[str]:
    """A query token as index terms: CJK runs become bigram phrases when segmented."""
    if not segmented or token.isascii() or not _CJK_RUN.search(token):
        return [token]
    terms = []
    position = 0
    for match in _CJK_RUN.finditer(token):
        if match.start() > position:
            terms.append(token[position : match.start()])
        terms.append(_bigrams(match.group(0)))
        position = match.end()
    if position < len(token):
        terms.append(token[position:])
    return terms
