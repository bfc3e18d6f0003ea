"""What one evaluation run compares: configurations of effort, retrieval, reranker and depth."""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

from agentic_retrieval.context import Context, Threshold
from agentic_retrieval.errors import EvalConfigurationError
from agentic_retrieval.graph.vocabulary import OUTPUT_MODES, OutputMode, RequestedEffort
from agentic_retrieval.graph.vocabulary import REQUESTED_EFFORTS as EFFORTS

AS_INDEXED = "indexed"
"""The retrieval mode that keeps a knowledge base as it was indexed (what ``None`` means)."""
RETRIEVALS = ("lexical", "hybrid", AS_INDEXED)
DEFAULT_TOP_N = 100
"""Ranked chunks kept per question: deep enough for Recall@100 on single-chunk documents."""
EVAL_MAX_OUTPUT_SIZE = 10_000_000
"""The grounding string must not drop ranked chunks while metrics read them."""


@dataclass(frozen=True)
class Configuration:
    """One way of retrieving, compared against the others on the same questions.

    Args:
        effort: ``minimal`` (no model), ``low``, ``medium`` or ``auto`` (escalates from
            minimal when the question or its results call for it).
        retrieval: ``lexical`` (BM25), ``hybrid`` (BM25 + vectors), or ``indexed`` (the
            same as ``None``, the default) for the knowledge base as it was indexed (hybrid
            where a source has vectors, lexical elsewhere). A BEIR corpus's cache may or may
            not hold vectors, so there it runs (and is named) ``lexical``.
        reranker: A reranker name (``default``, ``lexical``, ``embedding``) or ``None`` for
            the knowledge base's own.
        top_n: Ranked chunks kept (1-200); documents are folded from them.
        output_mode: ``extractiveData`` or ``answerSynthesis`` (needs a model).
        label: A name for tables and file names (default: built from the fields).
        reranker_threshold: Drop candidates scoring under this (0-4). ``None`` (the default
            here) keeps whole rankings, so rank metrics such as R@100 measure ranking, not the
            threshold; set a number to measure a threshold's cost, or ``"default"`` for a
            knowledge base's own rule (2.5 on calibrated relevance scores only).
        graph: Also search each source's entity graph (``graphParameters`` with hydrated
            evidence chunks); needs an evaluation given an ontology (``graph=`` of
            :func:`~agentic_retrieval.eval.api.evaluate`, ``--graph`` of the CLI).
    """

    effort: str = "minimal"
    retrieval: str | None = None
    reranker: str | None = None
    top_n: int = DEFAULT_TOP_N
    output_mode: str = "extractiveData"
    label: str | None = None
    reranker_threshold: Threshold = None
    graph: bool = False

    def __post_init__(self) -> None:
        """Reject unknown values with the allowed ones; ``indexed`` is stored as ``None``."""
        if self.effort not in EFFORTS:
            raise EvalConfigurationError(
                f"effort must be one of {', '.join(EFFORTS)}: {self.effort!r}"
            )
        if self.retrieval is not None and self.retrieval not in RETRIEVALS:
            raise EvalConfigurationError(
                f"retrieval must be one of {', '.join(RETRIEVALS)}: {self.retrieval!r}"
            )
        if self.retrieval == AS_INDEXED:  # one spelling for "as indexed" from here on
            object.__setattr__(self, "retrieval", None)
        if self.output_mode not in OUTPUT_MODES:
            raise EvalConfigurationError(
                f"output mode must be one of {', '.join(OUTPUT_MODES)}: {self.output_mode!r}"
            )
        if isinstance(self.top_n, bool) or not isinstance(self.top_n, int):
            raise EvalConfigurationError(f"top_n must be an integer: {self.top_n!r}")
        if not 1 <= self.top_n <= 200:
            raise EvalConfigurationError(f"top_n must be between 1 and 200: {self.top_n}")
        if self.effort == "minimal" and self.output_mode == "answerSynthesis":
            raise EvalConfigurationError(
                "answerSynthesis needs a model: it cannot run at minimal effort"
            )

    @property
    def name(self) -> str:
        """The label, or ``effort/retrieval/reranker/topN[/answer]``."""
        if self.label:
            return self.label
        parts = [self.effort, self.retrieval or AS_INDEXED, self.reranker or "default"]
        parts.append(f"top{self.top_n}")
        if self.output_mode == "answerSynthesis":
            parts.append("answer")
        if isinstance(self.reranker_threshold, str):
            parts.append(f"threshold-{self.reranker_threshold}")
        elif self.reranker_threshold is not None:
            parts.append(f"threshold{self.reranker_threshold:g}")
        if self.graph:
            parts.append("graph")
        return "/".join(parts)

    @property
    def slug(self) -> str:
        """The name as a file name."""
        return re.sub(r"[^A-Za-z0-9._-]+", "_", self.name).strip("_") or "configuration"

    @property
    def needs_model(self) -> bool:
        """Whether a chat model must be configured."""
        return self.effort != "minimal" or self.output_mode == "answerSynthesis"

    def context(self, base: Context | None = None) -> Context:
        """The run settings: ``base`` (or the defaults) with this configuration applied."""
        base = base or Context()
        return dataclasses.replace(
            base,
            reasoning_effort=cast(RequestedEffort, self.effort),
            output_mode=cast(OutputMode, self.output_mode),
            top_n=self.top_n,
            search_top=max(base.search_top, self.top_n),
            max_output_size=EVAL_MAX_OUTPUT_SIZE,
            max_output_tokens=None,
            reranker_threshold=self.reranker_threshold,
        )


def configuration_grid(
    efforts: Sequence[str] = ("minimal",),
    retrievals: Sequence[str | None] = (None,),
    rerankers: Sequence[str | None] = (None,),
    top_ns: Sequence[int] = (DEFAULT_TOP_N,),
    output_modes: Sequence[str] = ("extractiveData",),
    graphs: Sequence[bool] = (False,),
) -> tuple[list[Configuration], list[str]]:
    """Every combination of the given values, in the given order (the first is the baseline).

    With ``graphs=(False, True)`` each combination runs without and then with its graph
    search, side by side.

    Returns:
        The configurations, and a note for each combination that cannot run
        (``minimal`` with ``answerSynthesis``) and was left out.

    Raises:
        EvalConfigurationError: An unknown value, or no combination that can run.
    """
    configurations: list[Configuration] = []
    skipped: list[str] = []
    for mode, effort, retrieval, reranker, top_n, graph in itertools.product(
        output_modes, efforts, retrievals, rerankers, top_ns, graphs
    ):
        if effort == "minimal" and mode == "answerSynthesis":
            skipped.append("minimal effort with answerSynthesis cannot run (no model): left out")
            continue
        configurations.append(Configuration(effort, retrieval, reranker, top_n, mode, graph=graph))
    if not configurations:
        raise EvalConfigurationError(
            "no configuration can run: " + "; ".join(dict.fromkeys(skipped))
        )
    return configurations, list(dict.fromkeys(skipped))


def parse_list(text: str | None, option: str) -> list[str]:
    """``"a, b,c"`` -> ``["a", "b", "c"]``.

    Raises:
        EvalConfigurationError: An empty item (``a,,b``).
    """
    if text is None:
        return []
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise EvalConfigurationError(f"{option}: empty item in {text!r}")
    return list(dict.fromkeys(items))


def unique_names(configurations: Iterable[Configuration]) -> None:
    """Raise when two configurations would share a name (their files would collide).

    Raises:
        EvalConfigurationError: With the repeated name.
    """
    seen: set[str] = set()
    for configuration in configurations:
        if configuration.slug in seen:
            raise EvalConfigurationError(f"two configurations are named {configuration.name!r}")
        seen.add(configuration.slug)
