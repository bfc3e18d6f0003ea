"""The shipped sample corpus: shape, and questions whose answers are in the files they name."""

from __future__ import annotations

import json
import re
from importlib.resources import files

ROOT = files("agentic_retrieval.kb") / "sample_corpus"


def documents() -> dict[str, str]:
    return {
        f"{folder}/{path.name}": path.read_text(encoding="utf-8")
        for folder in ("riders", "operations")
        for path in sorted((ROOT / folder).iterdir(), key=lambda p: p.name)
        if path.name.endswith(".md")
    }


def test_two_sources_of_titled_markdown_documents_of_demo_size() -> None:
    docs = documents()
    assert len([k for k in docs if k.startswith("riders/")]) == 16
    assert len([k for k in docs if k.startswith("operations/")]) == 14
    for key, text in docs.items():
        assert re.match(r"# \S", text), key
        assert 150 <= len(text.split()) <= 400, (key, len(text.split()))
    sources = json.loads((ROOT / "sources.json").read_text(encoding="utf-8"))
    assert [s["name"] for s in sources] == ["riders", "operations"]
    assert all(len(s["description"]) > 100 for s in sources)


def test_every_question_names_existing_files_and_single_file_answers_are_verbatim() -> None:
    docs = documents()
    questions = json.loads((ROOT / "questions.json").read_text(encoding="utf-8"))
    assert len(questions) == 14
    assert len({q["id"] for q in questions}) == len(questions)
    for q in questions:
        assert q["question"].endswith("?")
        assert q["files"] and all(f in docs for f in q["files"]), q["id"]
        if len(q["files"]) == 1:
            text = docs[q["files"][0]].replace("*", "")
            for part in q["expected"].split(", "):
                assert part in text, (q["id"], part)


def test_multi_document_answers_follow_from_the_documents() -> None:
    docs = documents()
    # q12: Hillcrest College is Zone B, Central Exchange Zone A; two zones at 50% for students
    assert "| Hillcrest College | B |" in docs["riders/station-list.md"]
    assert "| Central Exchange | A |" in docs["riders/station-list.md"]
    two_zones = "| Any two neighbouring zones (A+B or B+C) | $3.10 |"
    assert two_zones in docs["riders/fares-and-zones.md"]
    assert "Students aged 16 to 25" in docs["riders/discounts.md"]
    # q13: the Annual Pass price is unchanged and seniors pay half
    assert (
        "| Annual Pass | $780.00 | $780.00 (unchanged) |"
        in docs["riders/notice-2025-07-fare-change.md"]
    )
    assert "reduced-fare Annual Pass costs $390.00" in docs["riders/discounts.md"]
