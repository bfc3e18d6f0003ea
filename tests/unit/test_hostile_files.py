"""Hostile files are refused before they cost anything, with the limit they cross named.

Zip bombs (the XML, or a run of NUL bytes, expanding to a gigabyte), an XML entity bomb, a
deeply nested document, sheets claiming billions of cells, a CSV of millions of rows: each
is either refused with a :class:`ConversionLimitError` naming its limit, or converted to a
bounded result. The files are built by tests/office_files.py.
"""

from __future__ import annotations

import io
import json
from datetime import datetime
from pathlib import Path

import pytest
from tests.office_files import (
    big_csv,
    billion_cell_xlsx,
    entity_docx,
    nested_docx,
    nul_docx,
    repetitive_xlsx,
    wide_rows_xlsx,
    zip_bomb_docx,
)
from typer.testing import CliRunner

from agentic_retrieval.cli import app
from agentic_retrieval.errors import ConversionLimitError, LoaderError
from agentic_retrieval.sources.local.conversion_limits import ConversionLimits
from agentic_retrieval.sources.local.loaders import load_file


def refused(name: str, data: bytes, limits: ConversionLimits | None = None) -> str:
    """The name of the limit ``data`` crosses (fails when the file is accepted)."""
    with pytest.raises(ConversionLimitError) as caught:
        load_file(Path(name), data, limits)
    assert f"{caught.value.limit}=" in str(caught.value)  # the message names it too
    return caught.value.limit


def test_a_zip_bomb_is_refused_from_its_directory_alone():
    bomb = zip_bomb_docx(1024)  # 3.7 MB expanding to 1 GiB of paragraphs
    assert len(bomb) < 4 * 1024 * 1024
    assert refused("bomb.docx", bomb) == "zip_member_mb"
    roomy = ConversionLimits(zip_member_mb=2048, zip_total_mb=2048)
    assert refused("bomb.docx", bomb, roomy) == "zip_ratio"
    # below every size limit it still inflates ~290 times: the ratio alone refuses it
    assert refused("small-bomb.docx", zip_bomb_docx(64)) == "zip_ratio"


def test_a_nul_filled_member_is_refused():
    assert refused("nul.docx", nul_docx(1024)) == "zip_member_mb"
    assert refused("nul.docx", nul_docx(16)) == "zip_ratio"


def test_the_total_and_the_member_count_are_limits_too():
    limits = ConversionLimits(zip_total_mb=32, zip_ratio=10_000)
    assert refused("bomb.docx", zip_bomb_docx(48), limits) == "zip_total_mb"
    assert refused("bomb.docx", zip_bomb_docx(1), ConversionLimits(zip_members=2)) == "zip_members"


def test_an_xml_entity_bomb_is_refused_for_its_dtd():
    with pytest.raises(LoaderError, match=r"'word/document\.xml' declares a DTD"):
        load_file(Path("laughs.docx"), entity_docx())


def test_a_deeply_nested_document_is_refused_by_its_depth():
    assert refused("deep.docx", nested_docx(20_000)) == "xml_depth"
    # deeper than the converter's recursion but within the limit: unreadable, not a crash
    with pytest.raises(LoaderError, match=r"unreadable \.docx"):
        load_file(Path("deep.docx"), nested_docx(1_000), ConversionLimits(xml_depth=10_000))


def test_a_sheet_claiming_a_billion_cells_costs_only_the_cells_it_has():
    document = load_file(Path("claims.xlsx"), billion_cell_xlsx())
    (sheet,) = document.sections
    lines = sheet.text.splitlines()
    assert lines[:2] == ["## Data", "| x |"]
    assert len(lines) == 3 and lines[2].count("|") == 16_385  # the far corner, laid out once


def test_rows_reaching_the_last_column_are_refused_by_their_cells():
    assert refused("wide.xlsx", wide_rows_xlsx(1000)) == "cells"  # 16,384 cells a row


def test_a_small_repetitive_sheet_is_refused_by_its_ratio_then_its_cells():
    sheet = repetitive_xlsx(100_000, 10)  # 93 KB, the probe's 100k rows x 10 cells
    assert len(sheet) < 200_000
    assert refused("repetitive.xlsx", sheet) == "zip_ratio"
    roomy = ConversionLimits(zip_ratio=1000, cells=50_000)
    assert refused("repetitive.xlsx", repetitive_xlsx(10_000, 10), roomy) == "cells"
    assert (
        refused(
            "repetitive.xlsx",
            repetitive_xlsx(10_000, 10),
            ConversionLimits(zip_ratio=1000, rows=5_000),
        )
        == "rows"
    )


def test_a_csv_of_millions_of_rows_is_refused_at_the_row_limit():
    data = big_csv(3_000_000)  # the probe's 6 MB
    assert refused("rows.csv", data) == "rows"
    assert refused("wide.csv", b"a,b,c\n" + b"1,2,3\n" * 10, ConversionLimits(cells=20)) == "cells"
    within = load_file(Path("rows.csv"), big_csv(1000))
    assert len(within.sections) == 1000


def test_a_json_array_is_bounded_in_elements_and_any_file_in_text():
    assert refused("items.json", json.dumps([1] * 11).encode(), ConversionLimits(rows=10)) == (
        "rows"
    )
    assert refused("long.txt", b"word " * 100, ConversionLimits(text_chars=400)) == "text_chars"


def test_limits_parse_from_name_value_pairs():
    limits = ConversionLimits.parse(["seconds=5.5", "cells=10", " rows=3"])
    assert (limits.seconds, limits.cells, limits.rows) == (5.5, 10, 3)
    with pytest.raises(ValueError, match="unknown conversion limit 'cels'"):
        ConversionLimits.parse(["cels=1"])
    with pytest.raises(ValueError, match="'many' is not a number"):
        ConversionLimits.parse(["cells=many"])
    with pytest.raises(ValueError, match="must be positive"):
        ConversionLimits(rows=0)


def test_the_spreadsheet_reader_keeps_values_dates_and_sheets():
    from openpyxl import Workbook
    from openpyxl.cell.rich_text import CellRichText, TextBlock
    from openpyxl.cell.text import InlineFont

    workbook = Workbook()
    fares = workbook.active
    fares.title = "Fares"
    fares.append(["zone", "price", "from", "open"])
    fares.append(["A|B", 2.6, datetime(2024, 3, 1), True])
    fares.append([CellRichText(TextBlock(InlineFont(b=True), "Gull"), " Island"), 3, None, False])
    fares["B4"] = "=B2+B3"  # no cached value: an empty cell
    workbook.create_sheet("Empty")
    notes = workbook.create_sheet("Notes")
    notes["C2"] = "multi\nline"
    buffer = io.BytesIO()
    workbook.save(buffer)
    document = load_file(Path("fares.xlsx"), buffer.getvalue())
    assert document.title == "Fares"
    assert [s.text for s in document.sections] == [
        "## Fares\n| zone | price | from | open |\n| A\\|B | 2.6 | 2024-03-01 | TRUE |\n"
        "| Gull Island | 3 |  | FALSE |",
        "## Notes\n|  |  | multi line |",
    ]


def test_index_names_the_limit_a_hostile_file_crosses(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "bomb.docx").write_bytes(zip_bomb_docx(256))
    (folder / "laughs.docx").write_bytes(entity_docx())
    (folder / "fine.txt").write_text("The night tram runs every 30 minutes.")
    result = CliRunner().invoke(
        app, ["index", "--kb", str(tmp_path / "kb"), "--source", "docs", str(folder)]
    )
    assert "bomb.docx: the .docx member 'word/document.xml' expands to 256 MiB" in result.output
    assert "(limit zip_member_mb=128)" in result.output
    assert "laughs.docx: the .docx part 'word/document.xml' declares a DTD" in result.output
    indexed = next(line for line in result.output.splitlines() if "files indexed" in line)
    assert indexed.split("│")[2].strip() == "1"
