"""TREC run and qrels files, so ``trec_eval`` and other tools can re-score a run.

A run line is ``qid Q0 docno rank score tag``; scores decrease strictly with rank, so every
tool sorts documents back into our order. Ids containing whitespace (which the format cannot
hold) are written with each whitespace character percent-encoded, in runs and qrels alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

_WHITESPACE = re.compile(r"\s")


def trec_id(value: str) -> str:
    """``value`` with whitespace percent-encoded (``a b`` -> ``a%20b``)."""
    return _WHITESPACE.sub(lambda m: f"%{ord(m.group(0)):02X}", value)


def run_lines(runs: Mapping[str, Sequence[str]], tag: str) -> Iterable[str]:
    """The lines of a run file (questions in the given order)."""
    for question, documents in runs.items():
        for rank, document in enumerate(documents, start=1):
            score = len(documents) - rank + 1
            yield f"{trec_id(question)} Q0 {trec_id(document)} {rank} {score} {trec_id(tag)}\n"


def write_run(path: str | Path, runs: Mapping[str, Sequence[str]], tag: str) -> Path:
    """Write a TREC run file."""
    target = Path(path)
    target.write_text("".join(run_lines(runs, tag)), encoding="utf-8")
    return target


def write_qrels(path: str | Path, qrels: Mapping[str, Mapping[str, int]]) -> Path:
    """Write the judgements as a TREC qrels file (``qid 0 docno grade``)."""
    target = Path(path)
    lines = [
        f"{trec_id(question)} 0 {trec_id(document)} {grade}\n"
        for question, judged in qrels.items()
        for document, grade in judged.items()
    ]
    target.write_text("".join(lines), encoding="utf-8")
    return target
