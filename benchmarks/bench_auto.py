"""``auto`` effort against fixed ``minimal``, ``low`` and ``medium``, through ``evaluate``.

Two labelled question sets:

- **tuning set**: the bundled sample corpus's 14 questions (``sample_corpus/questions.json``,
  several of them two-part) plus 4 labelled follow-ups written for this benchmark (a second
  turn that only makes sense with the first). The ``auto_*`` defaults of ``Context`` were
  chosen on this set.
- **held out**: Cranfield (225 queries, BEIR layout in ``../shared/collections/cranfield``;
  skipped when absent), never looked at while choosing the thresholds.

No real model is called. The chat model is a *rule-based script*: planning splits the last
question into its asks (:func:`agentic_retrieval.graph.effort.split_asks`) and, for
a follow-up, prefixes the previous question's content words; evidence assessment always
answers "sufficient". So model calls and tokens per question are exact for the pipeline's
call pattern (tokens are the script's fixed 120 in / 30 out per call), latency is the
pipeline's own, and the quality figures say what the *extra searches* of each tier find. What
only a real model can judge: how much better a model's rewrite is than the question as asked,
whether its evidence assessment would ask useful follow-ups, and so whether the escalations
``auto`` pays for buy quality.

Run: ``.venv/bin/python benchmarks/bench_auto.py`` (``--no-cranfield`` for the tuning set only;
``--decisions`` prints ``auto``'s decisions and signals for each tuning question).
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage

from agentic_retrieval.context import Threshold
from agentic_retrieval.eval import Configuration, Question, evaluate
from agentic_retrieval.eval.report import EvalReport
from agentic_retrieval.graph.effort import REFERRING_WORDS, split_asks
from agentic_retrieval.kb.loader import build_sample_kb, sample_questions
from agentic_retrieval.testing import Script, ScriptedChatModel
from agentic_retrieval.text import tokenize

CRANFIELD = Path(__file__).resolve().parents[1] / ".." / "shared" / "collections" / "cranfield"
EFFORTS = ("minimal", "low", "medium", "auto")
TIERS = {0: "minimal", 1: "low"}
"""auto's tier from its model calls: none, one planning call, or planning plus assessment."""

FOLLOW_UPS = [
    {
        "id": "f01",
        "messages": [
            ("user", "What time does the last Hillcrest Line tram leave on a Sunday?"),
            ("assistant", "The last Hillcrest Line tram leaves at 23:00 on Sundays."),
            ("user", "And on a Saturday?"),
        ],
        "files": ["riders/service-hours.md"],
    },
    {
        "id": "f02",
        "messages": [
            ("user", "How much does a Harbor Pass cost for a student?"),
            ("assistant", "A student Harbor Pass costs $39.00 a month."),
            ("user", "What proof do they need to show?"),
        ],
        "files": ["riders/discounts.md"],
    },
    {
        "id": "f03",
        "messages": [
            ("user", "How long is CCTV footage kept before it is overwritten?"),
            ("assistant", "CCTV footage is kept for 31 days."),
            ("user", "How do I request it?"),
        ],
        "files": ["riders/data-privacy.md", "operations/cctv-and-data-requests.md"],
    },
    {
        "id": "f04",
        "messages": [
            ("user", "When are e-bike batteries retired?"),
            ("assistant", "They are retired below 70% capacity."),
            ("user", "What happens to them after that?"),
        ],
        "files": ["operations/bike-fleet-maintenance.md"],
    },
]


class RuleScript(Script):
    """A planner and assessor by rule, standing in for a chat model (see the module doc)."""

    def pop(self, name: str, messages: list[BaseMessage]) -> Any:
        self.calls.append((name, messages))
        turns = _turns(str(messages[-1].content))
        if name == "QueryPlan":
            return {"needs_retrieval": True, "queries": [{"query": q} for q in _plan(turns)]}
        if name == "EvidenceAssessment":
            return {"is_sufficient": True, "confidence": 0.7}
        raise LookupError(f"no rule for {name}")


def _turns(transcript: str) -> list[str]:
    """The user turns of a ``role: text`` transcript (the planner's human message)."""
    users = []
    for line in transcript.splitlines():
        if line.startswith("human: "):
            users.append(line.removeprefix("human: "))
        elif line.startswith("Question: "):  # the assessor's message
            users.append(line.removeprefix("Question: "))
    return users or [transcript]


def _plan(users: Sequence[str]) -> list[str]:
    question = users[-1]
    asks = split_asks(question) or [question]
    words = {w.casefold() for w in re.findall(r"[\w']+", question)}
    if len(users) > 1 and (words & REFERRING_WORDS or len(tokenize(question)) <= 3):
        context = " ".join(tokenize(users[-2]))
        asks = [f"{context} {ask}" for ask in asks]
    return asks


def model() -> ScriptedChatModel:
    """A fresh rule-based chat model."""
    return ScriptedChatModel(script=RuleScript())


def sample_set() -> list[Question]:
    """The tuning set: the sample corpus questions and the follow-ups."""
    questions = [
        Question(id=q["id"], messages=(("user", q["question"]),), relevant=_files(q["files"]))
        for q in sample_questions()
    ]
    questions += [
        Question(id=f["id"], messages=tuple(f["messages"]), relevant=_files(f["files"]))
        for f in FOLLOW_UPS
    ]
    return questions


def _files(files: Sequence[str]) -> dict[str, int]:
    return dict.fromkeys(files, 1)  # paths like riders/fares.md resolve to file slugs


def report_table(report: EvalReport, title: str) -> None:
    """Print one row per effort: tiers, cost, latency, quality."""
    print(f"\n{title}")
    print(
        "| effort | minimal / low / medium | model calls | tokens | latency p50 ms | "
        "nDCG@10 | R@10 | R@100 |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for result in report.results:
        tiers = Counter(TIERS.get(q.model_calls, "medium") for q in result.queries)
        if result.configuration.effort != "auto":
            tiers = Counter({result.configuration.effort: len(result.queries)})
        total = len(result.queries) or 1
        shares = " / ".join(f"{tiers[t] / total:.0%}" for t in ("minimal", "low", "medium"))
        s = result.summary
        print(
            f"| {result.configuration.effort} | {shares} | {s['model_calls']:.2f} | "
            f"{s['tokens']:.0f} | {s['latency_p50_ms']:.1f} | {s.get('nDCG@10', 0):.3f} | "
            f"{s.get('R@10', 0):.3f} | {s.get('R@100', 0):.3f} |"
        )


def configurations(top_n: int, threshold: Threshold) -> list[Configuration]:
    """The four efforts, same depth and threshold."""
    return [
        Configuration(effort=e, top_n=top_n, reranker_threshold=threshold, label=e) for e in EFFORTS
    ]


def run_sample(threshold: Threshold) -> EvalReport:
    """The tuning set over the sample knowledge base, top 10.

    ``threshold`` 2.5 is how it was served when the ``auto_*`` thresholds were chosen;
    ``"default"`` is how it is served now (no cut-off on the lexical reranker's scores).
    """
    with tempfile.TemporaryDirectory(prefix="bench-auto-") as root:
        directory = build_sample_kb(Path(root) / "kb")
        return evaluate(
            directory.path,
            configurations(10, threshold),
            questions=sample_set(),
            chat_model=model(),
            embeddings=None,
        )


def print_decisions() -> None:
    """``auto``'s decisions and signals per tuning question (what the thresholds were set on)."""
    from agentic_retrieval.kb.loader import open_knowledge_base

    with tempfile.TemporaryDirectory(prefix="bench-auto-") as root:
        directory = build_sample_kb(Path(root) / "kb")
        kb = open_knowledge_base(directory.path, chat_model=model())
        for question in sample_set():
            request = {
                "messages": [
                    {"role": role, "content": [{"type": "text", "text": text}]}
                    for role, text in question.messages
                ],
                "retrievalReasoningEffort": {"kind": "auto"},
            }
            response = kb.retrieve(request)
            keys = [ref.doc_key or "" for ref in response.references]
            slugs = [re.sub(r"[^a-z0-9]+", "-", f.lower()) for f in question.relevant]
            rank = next(
                (i for i, k in enumerate(keys, 1) if any(k.startswith(s) for s in slugs)), None
            )
            print(f"{question.id} rank {rank}: {question.text}")
            for record in response.activity or []:
                for decision in (record.model_extra or {}).get("effortDecisions", []):
                    signals = ", ".join(f"{k} {v:g}" for k, v in decision["signals"].items())
                    print(
                        f"    {decision['step']} at {decision['tier']} -> "
                        f"{decision['escalateTo'] or 'stop'} ({signals})"
                    )


def run_cranfield() -> EvalReport | None:
    """The held-out set: Cranfield, lexical, top 100, no threshold (ranking metrics)."""
    if not (CRANFIELD / "corpus.jsonl").is_file():
        return None
    with tempfile.TemporaryDirectory(prefix="bench-auto-cranfield-") as cache:
        return evaluate(
            CRANFIELD,
            configurations(100, None),
            chat_model=model(),
            cache_dir=cache,
        )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-cranfield", action="store_true")
    parser.add_argument(
        "--decisions", action="store_true", help="auto's decisions per tuning question"
    )
    args = parser.parse_args()
    if args.decisions:
        print_decisions()
        return 0
    load = os.getloadavg()[0]
    started = time.perf_counter()
    for threshold in (2.5, "default"):
        report_table(
            run_sample(threshold),
            f"Tuning set: sample corpus, 14 questions + 4 follow-ups, threshold {threshold}",
        )
    if not args.no_cranfield:
        cranfield = run_cranfield()
        if cranfield is None:
            print(f"\n{CRANFIELD} is absent: held-out set skipped")
        else:
            report_table(cranfield, f"Held out: Cranfield, {len(cranfield.questions)} queries")
    print(f"\n(load average {load:.2f} at start; {time.perf_counter() - started:.0f} s in all)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
