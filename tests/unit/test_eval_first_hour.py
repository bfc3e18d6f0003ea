"""What a newcomer's first ``eval`` runs showed: start-up time charged to the first
configuration, a chart without intervals or a zero, silence when output is not a terminal."""

from __future__ import annotations

import asyncio
import json

import pytest
from tests.fakes import write
from typer.testing import CliRunner

from agentic_retrieval import InMemoryKnowledgeSource, KnowledgeBase
from agentic_retrieval.cli import app
from agentic_retrieval.cli.commands import eval as eval_command
from agentic_retrieval.eval import Configuration, Question, evaluate
from agentic_retrieval.eval.chart import chart_points, quality_cost_figure
from agentic_retrieval.eval.significance import mean_interval
from agentic_retrieval.sources.base import SearchQuery
from agentic_retrieval.sources.local import IndexProgress
from agentic_retrieval.testing import ScriptedChatModel

pytest.importorskip("ir_measures")

DOCS = [
    {"key": "fares", "title": "Fares", "content": "A single tram ride costs two euros."},
    {"key": "ferry", "title": "Ferry", "content": "The harbour ferry sails every hour."},
    {"key": "lost", "title": "Lost property", "content": "The lost property office keeps items."},
]
QUESTIONS = [
    Question("q1", (("user", "tram ride price"),), relevant={"fares": 1}),
    Question("q2", (("user", "harbour ferry"),), relevant={"ferry": 1}),
    Question("q3", (("user", "lost umbrella"),), relevant={"lost": 1}),
]
START_UP_SECONDS = 1.0


class SlowToStart(InMemoryKnowledgeSource):
    """A source whose first search pays a one-time start-up cost (opening, loading)."""

    searches: list[str]

    async def search(self, query: SearchQuery):
        if not self.searches:
            await asyncio.sleep(START_UP_SECONDS)
        self.searches.append(query.text)
        return await super().search(query)


def slow_kb(chat_model=None) -> tuple[KnowledgeBase, SlowToStart]:
    source = SlowToStart("docs", DOCS, description="Transit guides")
    source.searches = []
    return KnowledgeBase([source], name="transit", chat_model=chat_model), source


@pytest.fixture(autouse=True)
def no_model(monkeypatch):
    monkeypatch.delenv("AGENTIC_RETRIEVAL_CHAT_MODEL", raising=False)


# --- warm-up --------------------------------------------------------------------------------


def test_without_a_warm_up_the_first_question_pays_the_start_up():
    kb, source = slow_kb()
    report = evaluate(kb, [Configuration(top_n=10)], questions=QUESTIONS, warm_up=False)
    assert report.results[0].queries[0].latency_ms >= START_UP_SECONDS * 1000
    assert len(source.searches) == 3
    assert report.info["warm_up"] is False


def test_the_warm_up_keeps_start_up_out_of_every_timed_question():
    kb, source = slow_kb()
    configurations = [Configuration(top_n=10), Configuration(top_n=1)]
    report = evaluate(kb, configurations, questions=QUESTIONS)
    assert report.info["warm_up"] is True
    # one untimed question before each configuration's timed ones
    assert source.searches == ["tram ride price", *[q.messages[0][1] for q in QUESTIONS]] * 2
    latencies = [q.latency_ms for r in report.results for q in r.queries]
    assert max(latencies) < START_UP_SECONDS * 1000 * 0.9, latencies
    assert [r.summary["questions"] for r in report.results] == [3, 3]


def test_the_warm_up_makes_no_model_call():
    plan = {"needs_retrieval": True, "queries": [{"query": "tram ride price"}]}
    model = ScriptedChatModel(script={"QueryPlan": [plan] * 3})
    kb, _ = slow_kb(chat_model=model)
    report = evaluate(kb, [Configuration(effort="low")], questions=QUESTIONS, chat_model=model)
    assert model.script.count() == 3  # the three timed questions' plans, none for the warm-up
    assert report.results[0].summary["model_calls"] == 1.0


# --- the chart ------------------------------------------------------------------------------


def test_the_interval_is_a_bootstrap_of_the_mean():
    assert mean_interval([]) is None
    assert mean_interval([0.5]) == (0.5, 0.5, 0.5)
    assert mean_interval([1.0, 1.0, 1.0]) == (1.0, 1.0, 1.0)
    mean, low, high = mean_interval([0.0, 1.0] * 10)
    assert mean == 0.5 and 0.25 < low < 0.5 < high < 0.75
    assert mean_interval([0.0, 1.0] * 10) == (mean, low, high)  # seeded: reproducible


def test_the_chart_shows_intervals_from_a_zero_baseline():
    kb, _ = slow_kb()
    report = evaluate(
        kb, [Configuration(top_n=10), Configuration(top_n=1)], questions=QUESTIONS, warm_up=False
    )
    metric, points = chart_points(report)
    assert metric == "nDCG@10" and [p.label for p in points] == [
        r.configuration.name for r in report.results
    ]
    for point, result in zip(points, report.results, strict=True):
        assert point.quality == pytest.approx(result.summary["nDCG@10"])
        assert point.low <= point.quality <= point.high
    figure = quality_cost_figure(report)
    (axis,) = figure.axes  # model-free: the latency panel only
    assert axis.get_ylim()[0] == 0 and axis.get_xlim()[0] == 0
    assert len(axis.containers) == 2  # one error-bar container per configuration
    assert "95% CI" in axis.get_ylabel()


# --- progress lines -------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def print(self, text: str, **_: object) -> None:
        self.lines.append(text)


class Named:
    name = "minimal/top10"


def test_progress_lines_are_quiet_at_first_then_every_tenth_or_half_minute():
    clock, console = Clock(), Recorder()
    lines = eval_command.ProgressLines(console, clock=clock)  # type: ignore[arg-type]
    lines.configuration(Named(), 40)
    lines.question(Named(), None)
    assert console.lines == []  # a short run says nothing
    clock.now = eval_command.QUIET_SECONDS
    for _ in range(7):  # questions 2-8: the 8th is the second tenth (4 per tenth)
        lines.question(Named(), None)
    assert console.lines == [
        "minimal/top10: 4/40 questions (5 s)",
        "minimal/top10: 8/40 questions (5 s)",
    ]
    clock.now += eval_command.LINE_SECONDS
    lines.question(Named(), None)  # not a tenth, but half a minute of silence
    assert console.lines[-1] == "minimal/top10: 9/40 questions (35 s)"
    for _ in range(31):
        lines.question(Named(), None)
    assert console.lines[-1] == "minimal/top10: 40/40 questions (35 s)"
    assert len(console.lines) == 2 + 1 + 8


def test_indexing_a_corpus_says_the_time_left_and_how_to_skip_the_vectors():
    clock, console = Clock(), Recorder()
    lines = eval_command.ProgressLines(console, clock=clock, embedding=True)  # type: ignore[arg-type]
    clock.now = eval_command.QUIET_SECONDS + 10
    lines.indexing(IndexProgress(1, 10, "d1", "indexed"))  # the clock starts at the first record
    clock.now += 20
    lines.indexing(IndexProgress(2, 10, "d2", "indexed"))
    assert console.lines[-1] == (
        "indexing the corpus, with vectors (--no-embeddings: lexical only, faster): "
        "2/10 records (20 s, about 80 s left)"
    )
    lexical = eval_command.ProgressLines(console, clock=clock)  # type: ignore[arg-type]
    clock.now += eval_command.QUIET_SECONDS
    lexical.indexing(IndexProgress(10, 10, "d1", "indexed"))
    assert console.lines[-1] == "indexing the corpus: 10/10 records (0 s)"


def test_eval_prints_progress_lines_when_stderr_is_not_a_terminal(tmp_path, monkeypatch):
    monkeypatch.setattr(eval_command, "QUIET_SECONDS", 0.0)
    write(tmp_path / "docs" / "fares.md", "# Fares\n\nA single tram ride costs two euros.\n")
    write(tmp_path / "docs" / "ferry.md", "# Ferry\n\nThe harbour ferry sails every hour.\n")
    questions = tmp_path / "questions.jsonl"
    questions.write_text(
        json.dumps({"id": "q1", "question": "tram ride price", "relevant": ["docs/fares.md"]})
        + "\n"
    )
    runner = CliRunner()
    kb = str(tmp_path / "kb")
    # lexical: the "(0 s)" below is about the progress lines, not the model's speed
    index = ["index", "--kb", kb, "--source", "docs", "--no-embeddings", str(tmp_path / "docs")]
    assert runner.invoke(app, index)
    result = runner.invoke(
        app, ["eval", "--kb", kb, "--questions", str(questions), "--top-n", "10,1"]
    )
    assert result.exit_code == 0, result.output
    progress = [line for line in result.stderr.splitlines() if "question" in line]
    assert progress == [
        "minimal/indexed/default/top10: 1 questions",
        "minimal/indexed/default/top10: 1/1 questions (0 s)",
        "minimal/indexed/default/top1: 1 questions",
        "minimal/indexed/default/top1: 1/1 questions (0 s)",
    ]
