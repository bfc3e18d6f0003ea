"""Rerankers: one score per candidate on Azure's 0-4 semantic scale (see ``base.py``)."""

from agentic_retrieval.errors import RerankError
from agentic_retrieval.rerankers.base import Reranker, calibration_of, clamp_score
from agentic_retrieval.rerankers.compressor import CompressorReranker
from agentic_retrieval.rerankers.embedding import EmbeddingReranker
from agentic_retrieval.rerankers.hybrid import HybridReranker
from agentic_retrieval.rerankers.lexical import LexicalReranker
from agentic_retrieval.rerankers.llm_grader import LLMGraderReranker
from agentic_retrieval.rerankers.passthrough import PassthroughReranker
from agentic_retrieval.rerankers.registry import RERANKER_NAMES, reranker_by_name

__all__ = [
    "RERANKER_NAMES",
    "CompressorReranker",
    "EmbeddingReranker",
    "HybridReranker",
    "LLMGraderReranker",
    "LexicalReranker",
    "PassthroughReranker",
    "RerankError",
    "Reranker",
    "calibration_of",
    "clamp_score",
    "reranker_by_name",
]
