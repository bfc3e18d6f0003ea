"""Text analysis shared by the in-memory source, the lexical reranker and deduplication."""

from agentic_retrieval.text.analysis import (
    MAX_CACHED_CHARS,
    MAX_QUERY_TERMS,
    query_terms,
    same_words_key,
    stem,
    token_counts,
    token_set,
    tokenize,
)
from agentic_retrieval.text.similarity import SKETCH_SIZE, jaccard, shingles, sketch

__all__ = [
    "MAX_CACHED_CHARS",
    "MAX_QUERY_TERMS",
    "SKETCH_SIZE",
    "jaccard",
    "query_terms",
    "same_words_key",
    "shingles",
    "sketch",
    "stem",
    "token_counts",
    "token_set",
    "tokenize",
]
