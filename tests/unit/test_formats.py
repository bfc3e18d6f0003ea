"""CSV, JSON and Office files: converted to sections, and indexed by ``agentic-retrieval index``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tests.office_files import docx, pptx, xlsx
from typer.testing import CliRunner

from agentic_retrieval.cli import app
from agentic_retrieval.errors import LoaderError, MissingConverterError
from agentic_retrieval.sources.local.loaders import load_file


def test_csv_gives_one_section_per_row_with_its_headers():
    document = load_file(Path("stops.csv"), b"stop;line\nPelican Quay;Harbour\nHeron Park;Hill\n")
    assert [s.text for s in document.sections] == [
        "stop: Pelican Quay\nline: Harbour",
        "stop: Heron Park\nline: Hill",
    ]
    assert document.title == "stops"


def test_json_gives_key_paths_and_one_section_per_top_level_item():
    data = json.dumps([{"name": "Harbour", "stops": ["Quay", "Pier"]}, {"name": "Hill"}])
    document = load_file(Path("lines.json"), data.encode())
    assert [s.text for s in document.sections] == ["name: Harbour\nstops: Quay, Pier", "name: Hill"]
    titled = load_file(Path("x.json"), b'{"title": "Lines", "meta": {"year": 2024, "ok": true}}')
    assert titled.title == "Lines"
    assert titled.sections[0].text == "title: Lines\nmeta.year: 2024\nmeta.ok: true"
    with pytest.raises(LoaderError, match="invalid JSON"):
        load_file(Path("bad.json"), b"{nope")


def test_office_documents_keep_headings_slides_and_sheets():
    word = load_file(Path("guide.docx"), docx("Parking rules", "Park and ride costs 4 dollars."))
    assert word.title == "Parking rules"
    assert "Park and ride costs 4 dollars." in word.sections[0].text
    deck = load_file(
        Path("deck.pptx"), pptx(("Timetable", "Hourly ferry."), ("Gulls", "A sanctuary."))
    )
    assert [(s.page, s.text) for s in deck.sections] == [
        (1, "# Timetable\nHourly ferry."),
        (2, "# Gulls\nA sanctuary."),
    ]
    sheet = load_file(Path("fares.xlsx"), xlsx("Fares", [["zone", "price"], ["A", 2.6]]))
    assert sheet.sections[0].text.startswith("## Fares")
    assert "| A | 2.6 |" in sheet.sections[0].text
    with pytest.raises(LoaderError, match=r"not a valid \.pptx"):
        load_file(Path("broken.pptx"), b"plain text pretending")


def test_office_documents_without_the_extra_name_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "markitdown.converters", None)
    with pytest.raises(MissingConverterError, match=r"\[office\] extra"):
        load_file(Path("guide.docx"), docx("A", "b"))


def test_index_accepts_the_same_formats_as_file_sources(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "guide.docx").write_bytes(docx("Parking", "Saltmarsh park and ride."))
    (folder / "deck.pptx").write_bytes(pptx(("Gulls", "Gull Island sanctuary.")))
    (folder / "fares.xlsx").write_bytes(xlsx("Fares", [["zone", "price"], ["Osprey", 3.1]]))
    (folder / "stops.csv").write_text("stop,line\nHeron Park,Hill\n")
    (folder / "lines.json").write_text('{"name": "Harbour", "colour": "teal"}')
    result = CliRunner().invoke(
        app, ["index", "--kb", str(tmp_path / "kb"), "--source", "mixed", str(folder)]
    )
    assert result.exit_code == 0, result.output
    indexed = next(line for line in result.output.splitlines() if "files indexed" in line)
    assert indexed.split("│")[2].strip() == "5"
    assert "failed:" not in result.output
