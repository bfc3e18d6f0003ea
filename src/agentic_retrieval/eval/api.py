"""``evaluate``: run configurations over a labelled question set and report quality and cost.

Targets: a BEIR directory (its corpus is indexed into a cached knowledge base), a
knowledge-base directory or a ``KnowledgeBase`` object with a questions file (or a list of
:class:`~agentic_retrieval.eval.datasets.Question`), or an already loaded
:class:`~agentic_retrieval.eval.datasets.EvalDataset`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import platform
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel

from agentic_retrieval.errors import DatasetError, EvalConfigurationError
from agentic_retrieval.eval.beir_cache import IndexingProgress, index_corpus
from agentic_retrieval.eval.configurations import Configuration, unique_names
from agentic_retrieval.eval.datasets import (
    EvalDataset,
    Question,
    load_beir,
    load_questions,
)
from agentic_retrieval.eval.graphs import STAND_IN, GraphSetup
from agentic_retrieval.eval.metrics import ir_metrics, require_eval_extra
from agentic_retrieval.eval.pricing import Price, load_prices
from agentic_retrieval.eval.report import ConfigurationResult, EvalReport, compare, summarize
from agentic_retrieval.eval.runner import QuestionDone, run_configuration
from agentic_retrieval.eval.standin import OntologyStandInModel
from agentic_retrieval.eval.targets import (
    DirectoryTarget,
    EvalTarget,
    KnowledgeBaseTarget,
    check_model,
    resolve_judgements,
)
from agentic_retrieval.graph.sync import run_sync
from agentic_retrieval.kb.directory import MANIFEST_NAME
from agentic_retrieval.knowledge_base import KnowledgeBase
from agentic_retrieval.llm.chat_models import model_identity

Target = str | Path | KnowledgeBase | EvalDataset
EmbeddingsOption = str | Embeddings | Literal[False] | None
"""A model name or object for hybrid retrieval, ``None`` for the default (the bundled model
for a BEIR corpus, each source's own for a knowledge base), ``False`` for lexical only."""
StartConfiguration = Callable[[Configuration, int], None]


@dataclass
class Progress:
    """Callbacks an interface uses to show progress (all optional)."""

    indexing: IndexingProgress | None = None
    """After each corpus record while a BEIR corpus is indexed."""
    configuration: StartConfiguration | None = None
    """When a configuration starts, with the number of questions."""
    question: QuestionDone | None = None
    """After each question."""


def evaluate(
    target: Target,
    configurations: Sequence[Configuration] | None = None,
    *,
    questions: str | Path | Sequence[Question] | None = None,
    split: str = "test",
    chat_model: BaseChatModel | str | None = None,
    embeddings: EmbeddingsOption = None,
    prices: str | Path | Mapping[str, Any] | None = None,
    output_dir: str | Path | None = None,
    cache_dir: str | Path | None = None,
    limit: int | None = None,
    concurrency: int = 1,
    seed: int = 0,
    progress: Progress | None = None,
    notes: Sequence[str] = (),
    warm_up: bool = True,
    graph: GraphSetup | str | Path | None = None,
) -> EvalReport:
    """Evaluate configurations on labelled questions; see :func:`aevaluate` for the arguments.

    Safe to call where an event loop is running (notebooks).
    """
    return run_sync(
        aevaluate(
            target,
            configurations,
            questions=questions,
            split=split,
            chat_model=chat_model,
            embeddings=embeddings,
            prices=prices,
            output_dir=output_dir,
            cache_dir=cache_dir,
            limit=limit,
            concurrency=concurrency,
            seed=seed,
            progress=progress,
            notes=notes,
            warm_up=warm_up,
            graph=graph,
        )
    )


async def aevaluate(
    target: Target,
    configurations: Sequence[Configuration] | None = None,
    *,
    questions: str | Path | Sequence[Question] | None = None,
    split: str = "test",
    chat_model: BaseChatModel | str | None = None,
    embeddings: EmbeddingsOption = None,
    prices: str | Path | Mapping[str, Any] | None = None,
    output_dir: str | Path | None = None,
    cache_dir: str | Path | None = None,
    limit: int | None = None,
    concurrency: int = 1,
    seed: int = 0,
    progress: Progress | None = None,
    notes: Sequence[str] = (),
    warm_up: bool = True,
    graph: GraphSetup | str | Path | None = None,
) -> EvalReport:
    """Evaluate configurations on labelled questions.

    Args:
        target: A BEIR directory, a knowledge-base directory, a ``KnowledgeBase`` or an
            :class:`EvalDataset`.
        configurations: What to compare, the baseline first (default: minimal effort).
        questions: A questions JSONL file or questions (required unless ``target`` is a
            BEIR dataset).
        split: The BEIR qrels split.
        chat_model: The chat model for low/medium effort and answer synthesis (object or
            ``provider:model``; default ``$AGENTIC_RETRIEVAL_CHAT_MODEL``); with ``graph``,
            also the graph's extraction model unless the setup names one, and
            ``"stand-in"`` for the ontology's rule-based stand-in (no LLM).
        embeddings: For hybrid retrieval: a model name (``local``, ``provider:model``) to
            index a BEIR corpus with, or an ``Embeddings`` object for a knowledge-base
            directory (default: the bundled model for a BEIR corpus, the model each source
            recorded for a knowledge base). ``False``: lexical only (no model is loaded);
            configurations that leave ``retrieval`` unset then run ``lexical``. A BEIR
            corpus is otherwise evaluated ``hybrid`` by default; the report's notes say which.
        prices: A price table (file or dict) to report cost per question.
        output_dir: When given, write ``report.json``, ``runs/<configuration>.run``,
            ``qrels.txt`` and ``quality-vs-cost.png`` there.
        cache_dir: Where indexed BEIR corpora are cached (default: ``<cache>/eval``).
        limit: Ask only the first ``limit`` questions (said in the report's notes).
        concurrency: Questions in flight at once per configuration (1: latencies without
            contention).
        seed: Seed of the significance resampling.
        progress: Progress callbacks.
        notes: Notes to record in the report (e.g. combinations left out of a grid).
        warm_up: Ask each configuration's first question once, untimed and model-free,
            before its timed run, so no configuration's latency carries start-up costs
            (the first one's would otherwise: opening stores, loading models, imports).
        graph: For configurations with ``graph``: a :class:`GraphSetup`, or the path of a
            JSON-LD ontology. Each local source's entity graph is extracted (into the
            cache, changed documents only) before the questions are asked.

    Raises:
        DatasetError: Missing or malformed dataset, questions or judgements.
        EvalConfigurationError: A configuration that cannot run (e.g. no chat model for it).
        MissingDependencyError: The ``eval`` extra is not installed.
    """
    require_eval_extra()
    chosen = list(configurations or [Configuration()])
    unique_names(chosen)
    progress = progress or Progress()
    table = load_prices(prices) if prices is not None else None
    setup = _graph_setup(graph)
    chat_model = _chat_model(chat_model, setup)
    dataset, eval_target, chosen = _open(
        target, chosen, questions, split, chat_model, embeddings, cache_dir, progress, setup
    )
    notes = [*notes, *dataset.notes]
    try:
        asked = _limited(dataset.questions, limit, notes)
        knowledge_bases = [eval_target.knowledge_base(c) for c in chosen]
        notes += await eval_target.prepare()
        for kb, configuration in zip(knowledge_bases, chosen, strict=True):
            check_model(kb, configuration)
        results = [
            await _run_one(kb, c, asked, table, concurrency, progress, warm_up)
            for kb, c in zip(knowledge_bases, chosen, strict=True)
        ]
    finally:
        eval_target.close()
    models = _models(knowledge_bases, chosen, eval_target)
    report = EvalReport(
        dataset=dataset.name,
        results=results,
        comparisons=compare(results, asked, seed),
        notes=notes + _cost_notes(results) + _model_notes(models),
        questions=asked,
        info={
            **_info(dataset, eval_target, chosen, seed, concurrency),
            "warm_up": warm_up,
            "models": models,
        },
    )
    if output_dir is not None:
        from agentic_retrieval.eval.outputs import write_outputs

        write_outputs(report, output_dir)
    return report


def _open(
    target: Target,
    configurations: list[Configuration],
    questions: str | Path | Sequence[Question] | None,
    split: str,
    chat_model: BaseChatModel | str | None,
    embeddings: EmbeddingsOption,
    cache_dir: str | Path | None,
    progress: Progress,
    graph: GraphSetup | None = None,
) -> tuple[EvalDataset, EvalTarget, list[Configuration]]:
    """The dataset, the target, and the configurations as they will run."""
    if isinstance(target, KnowledgeBase):
        dataset = EvalDataset(target.name, _questions(questions))
        eval_target: EvalTarget = KnowledgeBaseTarget(target)
    elif isinstance(target, EvalDataset) or _is_beir(target):
        dataset = target if isinstance(target, EvalDataset) else load_beir(target, split)
        if dataset.corpus is None:
            raise DatasetError("an EvalDataset without a corpus needs a knowledge base target")
        if questions is not None:
            dataset.questions = _questions(questions)
        # hybrid by default, as index is: a cached corpus may hold vectors from an earlier
        # run, so "as indexed" would vary; --no-embeddings (False) is lexical
        configurations = _with_retrieval(
            configurations, "lexical" if embeddings is False else "hybrid", embeddings
        )
        hybrid = any(c.retrieval == "hybrid" for c in configurations)
        model = (embeddings if isinstance(embeddings, str) else "local") if hybrid else None
        cached = index_corpus(
            dataset, cache_dir=cache_dir, embedding_model=model, progress=progress.indexing
        )
        dataset.notes.extend(cached.notes())
        vectors = embeddings if isinstance(embeddings, Embeddings) else None
        eval_target = DirectoryTarget(
            cached.path, chat_model=chat_model, embeddings=vectors, graph=graph, cache_dir=cache_dir
        )
        dataset.notes.append(_retrieval_note(configurations, model))
    else:
        path = Path(target)
        if not (path / MANIFEST_NAME).is_file():
            raise DatasetError(
                f"{path} is neither a BEIR dataset (corpus.jsonl) nor a knowledge base "
                f"({MANIFEST_NAME})"
            )
        if embeddings is False:  # lexical only: nothing runs "as indexed" with vectors
            configurations = _with_retrieval(configurations, "lexical", embeddings)
        vectors = embeddings if isinstance(embeddings, Embeddings) else None
        eval_target = DirectoryTarget(
            path, chat_model=chat_model, embeddings=vectors, graph=graph, cache_dir=cache_dir
        )
        dataset = EvalDataset(eval_target.name, _questions(questions))
    keys = dataset.document_keys if dataset.corpus is not None else eval_target.document_keys()
    dataset.questions = resolve_judgements(dataset.questions, keys)
    return dataset, eval_target, configurations


def _with_retrieval(
    configurations: list[Configuration], default: str, embeddings: EmbeddingsOption
) -> list[Configuration]:
    """``configurations``, those that leave retrieval unset given ``default``.

    Raises:
        EvalConfigurationError: ``hybrid`` asked for with embeddings turned off.
    """
    if embeddings is False and any(c.retrieval == "hybrid" for c in configurations):
        raise EvalConfigurationError(
            "hybrid retrieval needs embeddings: leave out --no-embeddings (embeddings=False) "
            "or --retrieval hybrid"
        )
    return [c if c.retrieval else dataclasses.replace(c, retrieval=default) for c in configurations]


def _retrieval_note(configurations: Sequence[Configuration], model: str | None) -> str:
    """Which retrieval each configuration used, in the report's words."""
    modes = sorted({c.retrieval or "indexed" for c in configurations})
    if model is None:
        return (
            f"retrieval: {', '.join(modes)} (BM25 only; without --no-embeddings a corpus is "
            "evaluated hybrid, with vectors of the bundled model)"
        )
    return (
        f"retrieval: {', '.join(modes)} (hybrid: BM25 fused with vectors of {model!r}, the "
        "default; --no-embeddings: lexical only, no model loaded)"
    )


def _graph_setup(graph: GraphSetup | str | Path | None) -> GraphSetup | None:
    if graph is None or isinstance(graph, GraphSetup):
        return graph
    return GraphSetup.from_file(graph)


def _chat_model(
    chat_model: BaseChatModel | str | None, graph: GraphSetup | None
) -> BaseChatModel | str | None:
    """``chat_model``, the ontology stand-in when it is ``"stand-in"``.

    Raises:
        EvalConfigurationError: The stand-in without an ontology to build it from.
    """
    if chat_model != STAND_IN:
        return chat_model
    if graph is None:
        raise EvalConfigurationError(
            "the stand-in chat model is built from an ontology: give one (--graph FILE)"
        )
    return OntologyStandInModel.from_ontology(graph.ontology, graph.ontology_name)


def _models(
    knowledge_bases: Sequence[KnowledgeBase],
    configurations: Sequence[Configuration],
    target: EvalTarget,
) -> dict[str, str | None]:
    """Which models produced the figures: planning (per configuration) and graph extraction."""
    models: dict[str, str | None] = {}
    for kb, configuration in zip(knowledge_bases, configurations, strict=True):
        context = configuration.context(kb.defaults)
        uses_model = configuration.needs_model or configuration.graph
        chosen = kb.bindings.models.choice("planning", context) if uses_model else None
        models[configuration.name] = _model_name(chosen)
    if isinstance(target, DirectoryTarget):
        models["graph extraction"] = target.graph_model_name
    return models


def _model_notes(models: Mapping[str, str | None]) -> list[str]:
    """Which model produced which figures, when any model did."""
    named = {k: v for k, v in models.items() if v is not None}
    if not named:
        return []
    return ["models: " + "; ".join(f"{k}: {v!r}" for k, v in named.items())]


def _model_name(model: BaseChatModel | str | None) -> str | None:
    if model is None or isinstance(model, str):
        return model
    return model_identity(model).model_name


def _is_beir(target: Target) -> bool:
    return isinstance(target, str | Path) and (Path(target) / "corpus.jsonl").is_file()


def _questions(questions: str | Path | Sequence[Question] | None) -> list[Question]:
    if questions is None:
        raise DatasetError("a knowledge base is evaluated on a questions file: pass questions=")
    if isinstance(questions, str | Path):
        return load_questions(questions)
    return list(questions)


def _limited(questions: list[Question], limit: int | None, notes: list[str]) -> list[Question]:
    if limit is None or limit >= len(questions):
        return questions
    if limit < 1:
        raise EvalConfigurationError(f"limit must be at least 1: {limit}")
    notes.append(f"only the first {limit} of {len(questions)} questions were asked (limit)")
    return questions[:limit]


async def _run_one(
    kb: KnowledgeBase,
    configuration: Configuration,
    questions: list[Question],
    prices: Mapping[str, Price] | None,
    concurrency: int,
    progress: Progress,
    warm_up: bool,
) -> ConfigurationResult:
    if progress.configuration is not None:
        progress.configuration(configuration, len(questions))
    queries = await run_configuration(
        kb,
        configuration,
        questions,
        prices=prices,
        concurrency=concurrency,
        on_done=progress.question,
        warm_up=warm_up,
    )
    qrels = {q.id: dict(q.relevant) for q in questions}
    metrics = ir_metrics(qrels, {r.question_id: r.documents for r in queries})
    return ConfigurationResult(configuration, queries, metrics, summarize(queries, metrics))


def _cost_notes(results: list[ConfigurationResult]) -> list[str]:
    unpriced = sorted({m for r in results for q in r.queries for m in q.unpriced})
    if not unpriced:
        return []
    return [f"no price for {', '.join(unpriced)} in the price table: cost not reported"]


def _info(
    dataset: EvalDataset,
    target: EvalTarget,
    configurations: Sequence[Configuration],
    seed: int,
    concurrency: int,
) -> dict[str, Any]:
    return {
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "split": dataset.split,
        "knowledge_base": str(target.path) if isinstance(target, DirectoryTarget) else None,
        "retrieval": {c.name: c.retrieval or "indexed" for c in configurations},
        "seed": seed,
        "concurrency": concurrency,
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}",
        "versions": {
            name: _version(name)
            for name in ("agentic-retrieval", "ir-measures", "pytrec-eval-terrier")
        },
    }


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
