"""Labelled question sets: a BEIR directory, or a questions file for an existing knowledge base.

BEIR layout (as distributed by the BEIR benchmark and ``ir_datasets`` exports)::

    DIR/corpus.jsonl        {"_id", "title", "text", ...} per line
    DIR/queries.jsonl       {"_id", "text"} per line
    DIR/qrels/<split>.tsv   query-id <TAB> corpus-id <TAB> score (a header line is allowed)

Only queries judged in the split are asked (BEIR's convention); how many were left out is
counted in the dataset, never dropped silently. A questions file is JSONL, one question a
line: ``id``; ``question`` (text) or ``messages`` (``[{"role", "content"}]``, the last user
turn is what minimal effort searches); optional ``relevant`` (a list of document keys, or an
object ``{key: grade}``), ``evidence`` (strings the retrieved text must contain) and
``answer`` (a reference answer).

Every malformed input is a :class:`DatasetError` naming the file and line.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# defined in errors.py; importable from here
from agentic_retrieval.errors import DatasetError as DatasetError

MAX_LISTED = 5


@dataclass(frozen=True)
class Question:
    """One labelled question."""

    id: str
    messages: tuple[tuple[str, str], ...]
    """``(role, text)`` turns, oldest first; the last is the user's question."""
    relevant: Mapping[str, int] = field(default_factory=dict)
    """Judged document keys and their grades (0 = judged not relevant)."""
    evidence: tuple[str, ...] = ()
    answer: str | None = None

    @property
    def text(self) -> str:
        """The question: the last user turn."""
        return next((t for r, t in reversed(self.messages) if r == "user"), self.messages[-1][1])

    @property
    def judged(self) -> bool:
        """Whether at least one document is judged relevant (grade > 0)."""
        return any(grade > 0 for grade in self.relevant.values())


@dataclass
class EvalDataset:
    """Questions with their judgements, and where the documents come from."""

    name: str
    questions: list[Question]
    corpus: Path | None = None
    """A BEIR ``corpus.jsonl`` to index (``None``: an existing knowledge base holds them)."""
    document_keys: set[str] | None = None
    """Every document key the judgements may name (``None``: not checked)."""
    split: str | None = None
    notes: list[str] = field(default_factory=list)
    """What was left out and why (shown in reports)."""


def load_beir(directory: str | Path, split: str = "test") -> EvalDataset:
    """Read a BEIR directory: corpus ids, the split's judged queries and their qrels.

    Raises:
        DatasetError: A missing file, a malformed line, duplicate ids, or judgements naming
            an unknown query or document.
    """
    root = Path(directory)
    if not root.is_dir():
        raise DatasetError(f"{root}: no such dataset directory")
    corpus, queries_path = root / "corpus.jsonl", root / "queries.jsonl"
    qrels_path = root / "qrels" / f"{split}.tsv"
    for required in (corpus, queries_path):
        if not required.is_file():
            raise DatasetError(f"{root} is not in BEIR layout: {required.name} is missing")
    if not qrels_path.is_file():
        splits = sorted(p.stem for p in (root / "qrels").glob("*.tsv"))
        raise DatasetError(
            f"{root}: no qrels for split {split!r} (qrels/{split}.tsv); splits: "
            f"{', '.join(splits) or 'none'}"
        )
    document_keys = _ids(corpus, "corpus")
    queries = {key: _text(row, where) for key, row, where in _rows(queries_path)}
    qrels = _read_qrels(qrels_path, set(queries), document_keys)
    questions = [
        Question(id=key, messages=(("user", queries[key]),), relevant=qrels[key])
        for key in queries
        if key in qrels
    ]
    dataset = EvalDataset(root.name, questions, corpus, document_keys, split)
    left_out = len(queries) - len(questions)
    if left_out:
        dataset.notes.append(
            f"{left_out} of {len(queries)} queries have no judgements in qrels/{split}.tsv "
            "and were not asked"
        )
    return dataset


def _rows(path: Path) -> Iterator[tuple[str, dict[str, Any], str]]:
    """``(id, row, "FILE:LINE")`` for every JSON line; ids unique, blank lines skipped."""
    seen: set[str] = set()
    with path.open(encoding="utf-8-sig") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path.name}:{number}"
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise DatasetError(f"{where}: invalid JSON ({exc})") from exc
            if not isinstance(row, dict) or row.get("_id") in (None, ""):
                raise DatasetError(f'{where}: expected an object with an "_id"')
            key = str(row["_id"])
            if key in seen:
                raise DatasetError(f"{where}: duplicate _id {key!r}")
            seen.add(key)
            yield key, row, where


def _ids(path: Path, what: str) -> set[str]:
    keys = {key for key, _, _ in _rows(path)}
    if not keys:
        raise DatasetError(f"{path}: the {what} is empty")
    return keys


def _text(row: Mapping[str, Any], where: str) -> str:
    text = row.get("text")
    if not isinstance(text, str) or not text.strip():
        raise DatasetError(f'{where}: query {row["_id"]!r} has no "text"')
    return text


def _read_qrels(path: Path, queries: set[str], documents: set[str]) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    unknown_queries: list[str] = []
    unknown_documents: list[str] = []
    with path.open(encoding="utf-8-sig", newline="") as handle:
        for number, row in enumerate(csv.reader(handle, delimiter="\t"), start=1):
            if not row or not "".join(row).strip():
                continue
            if number == 1 and row[0].strip().lower() in ("query-id", "query_id", "qid"):
                continue  # the header
            where = f"qrels/{path.name}:{number}"
            if len(row) != 3:
                raise DatasetError(f"{where}: expected query-id, corpus-id, score (3 columns)")
            query, document, raw = (cell.strip() for cell in row)
            try:
                grade = int(raw)
            except ValueError:
                raise DatasetError(f"{where}: score {raw!r} is not an integer") from None
            if query not in queries:
                unknown_queries.append(query)
            if document not in documents:
                unknown_documents.append(document)
            qrels.setdefault(query, {})[document] = grade
    _refuse_unknown(path, "queries.jsonl", "queries", unknown_queries)
    _refuse_unknown(path, "corpus.jsonl", "documents", unknown_documents)
    if not qrels:
        raise DatasetError(f"{path}: no judgements")
    return qrels


def _refuse_unknown(path: Path, source: str, what: str, keys: list[str]) -> None:
    if keys:
        distinct = list(dict.fromkeys(keys))
        listed = ", ".join(distinct[:MAX_LISTED]) + (" ..." if len(distinct) > MAX_LISTED else "")
        raise DatasetError(
            f"qrels/{path.name} names {len(distinct)} {what} not in {source}: {listed}"
        )


def load_questions(path: str | Path) -> list[Question]:
    """Read a questions JSONL file (see the module docstring for the fields).

    Raises:
        DatasetError: A missing file, a malformed line or a duplicate id.
    """
    source = Path(path)
    if not source.is_file():
        raise DatasetError(f"{source}: no such questions file")
    questions: list[Question] = []
    seen: set[str] = set()
    with source.open(encoding="utf-8-sig") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{source.name}:{number}"
            try:
                question = question_from_json(json.loads(line))
            except ValueError as exc:  # json.JSONDecodeError and our own checks
                raise DatasetError(f"{where}: {exc}") from None
            if question.id in seen:
                raise DatasetError(f"{where}: duplicate id {question.id!r}")
            seen.add(question.id)
            questions.append(question)
    if not questions:
        raise DatasetError(f"{source}: no questions")
    return questions


def question_from_json(data: Any) -> Question:
    """One question from its JSON object.

    Raises:
        ValueError: With the reason (missing id or text, malformed relevant/evidence).
    """
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    if data.get("id") in (None, ""):
        raise ValueError('expected an "id"')
    return Question(
        id=str(data["id"]),
        messages=_messages(data),
        relevant=_relevant(data.get("relevant")),
        evidence=_evidence(data.get("evidence")),
        answer=str(data["answer"]) if data.get("answer") is not None else None,
    )


def _messages(data: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    if isinstance(data.get("question"), str) and data["question"].strip():
        return (("user", data["question"].strip()),)
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError('expected "question" (text) or "messages" (a list)')
    turns: list[tuple[str, str]] = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ValueError('each message needs a "role" and "content"')
        turns.append((message["role"], _content_text(message.get("content"))))
    if not any(role == "user" and text.strip() for role, text in turns):
        raise ValueError("messages hold no user text")
    return tuple(turns)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # the wire shape: [{"type": "text", "text": ...}]
        parts = [p.get("text", "") for p in content if isinstance(p, dict)]
        return "\n".join(p for p in parts if isinstance(p, str))
    raise ValueError("message content must be text or a list of text parts")


def _relevant(value: Any) -> dict[str, int]:
    if value is None:
        return {}
    if isinstance(value, list) and all(isinstance(v, str | int) for v in value):
        return {str(v): 1 for v in value}
    if isinstance(value, dict):
        grades: dict[str, int] = {}
        for key, grade in value.items():
            if isinstance(grade, bool) or not isinstance(grade, int):
                raise ValueError(f'"relevant" grade of {key!r} must be an integer')
            grades[str(key)] = grade
        return grades
    raise ValueError('"relevant" must be a list of document keys or an object {key: grade}')


def _evidence(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValueError('"evidence" must be a list of non-empty strings')
    return tuple(value)
