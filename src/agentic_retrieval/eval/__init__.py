"""Measure retrieval: quality, cost and latency of configurations on labelled questions.

``evaluate(target, configurations)`` runs every configuration (effort, lexical/hybrid,
reranker, depth, output mode) over a BEIR dataset or a knowledge base plus a questions file
and returns an :class:`EvalReport` (IR metrics from ``ir-measures``, evidence recall,
citation validity, latency, model calls, tokens, source queries, cost, paired significance);
``langsmith_evaluator`` gives the same metrics to LangSmith. Needs the ``eval`` extra.
"""

from agentic_retrieval.errors import (
    DatasetError,
    EvalConfigurationError,
    EvaluationError,
    PriceTableError,
)
from agentic_retrieval.eval.api import Progress, aevaluate, evaluate
from agentic_retrieval.eval.configurations import Configuration, configuration_grid
from agentic_retrieval.eval.datasets import EvalDataset, Question, load_beir, load_questions
from agentic_retrieval.eval.langsmith import langsmith_evaluator
from agentic_retrieval.eval.report import ConfigurationResult, EvalReport
from agentic_retrieval.eval.runner import QueryResult

__all__ = [
    "Configuration",
    "ConfigurationResult",
    "DatasetError",
    "EvalConfigurationError",
    "EvalDataset",
    "EvalReport",
    "EvaluationError",
    "PriceTableError",
    "Progress",
    "QueryResult",
    "Question",
    "aevaluate",
    "configuration_grid",
    "evaluate",
    "langsmith_evaluator",
    "load_beir",
    "load_questions",
]
