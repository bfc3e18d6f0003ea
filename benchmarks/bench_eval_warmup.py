"""Does the first configuration of an ``eval`` run pay start-up costs the others do not?

Each trial is a fresh process (start-up costs are per process) that evaluates the bundled
sample corpus's 14 questions at minimal effort with two configurations that do the same work
(``top_n`` 10 and 100: the same search, the same reranking, a different cut), in both
orders, with ``warm_up`` on and off. Without a warm-up the configuration that runs first
should show a slower first question (and with few questions a higher p50) whichever it is;
with it, the two should match. Printed:
per setting and order, the median over trials of each configuration's first-question
latency (what a one-question run reports as its p50) and its p50. Trials alternate between
settings, so machine load hits both alike.

Run: ``.venv/bin/python benchmarks/bench_eval_warmup.py`` (``--trials``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TRIAL = """
import json, sys
from agentic_retrieval.eval import Configuration, Question, evaluate
from agentic_retrieval.kb.loader import sample_questions
kb, order, warm = sys.argv[1], [int(n) for n in sys.argv[2].split(",")], sys.argv[3] == "1"
questions = [Question(q["id"], (("user", q["question"]),), relevant={f: 1 for f in q["files"]})
             for q in sample_questions()]
report = evaluate(kb, [Configuration(effort="minimal", top_n=n) for n in order],
                  questions=questions, warm_up=warm)
print(json.dumps([[r.queries[0].latency_ms, r.summary["latency_p50_ms"]] for r in report.results]))
"""


def trial(kb: Path, order: str, warm: bool) -> list[list[float]]:
    done = subprocess.run(
        [sys.executable, "-c", TRIAL, str(kb), order, "1" if warm else "0"],
        capture_output=True, text=True, check=True, timeout=600,
    )  # fmt: skip
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=7)
    args = parser.parse_args()
    from agentic_retrieval.kb.loader import build_sample_kb

    kb = build_sample_kb(Path(tempfile.mkdtemp()) / "sample").path
    settings = [(order, warm) for warm in (False, True) for order in ("10,100", "100,10")]
    results: dict[tuple[str, bool], list[list[float]]] = {s: [] for s in settings}
    for _ in range(args.trials):
        for order, warm in settings:
            results[(order, warm)].append(trial(kb, order, warm))
    print(f"load average {os.getloadavg()[0]:.1f}, {args.trials} trials, 14 questions each")
    print("medians over trials; 'q1' is the first question's latency, 'p50' the median's")
    for (order, warm), runs in results.items():
        (q1_first, p50_first), (q1_second, p50_second) = (
            [statistics.median(run[i][j] for run in runs) for j in (0, 1)] for i in (0, 1)
        )
        label = "warm-up" if warm else "no warm-up"
        print(
            f"{label:10s} top_n {order:7s} first config q1 {q1_first:6.1f} ms, p50 "
            f"{p50_first:5.1f} ms | second config q1 {q1_second:6.1f} ms, p50 {p50_second:5.1f} ms"
        )


if __name__ == "__main__":
    main()
