"""Filters against the fields a source knows: unknown fields and wrong kinds are errors.

Without the check, ``yaer ge 2024`` (a typo) and ``year eq '2024'`` (a string for a number
field) silently matched nothing. The embedded store knows its fields and their kinds; the
checks run in the Python API (InvalidRequestError), over REST (400), in the CLI (exit 2) and
in the source itself (planner filters: an error activity record).
"""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from tests.fakes import write
from typer.testing import CliRunner

from agentic_retrieval import KnowledgeBase
from agentic_retrieval.cli import app
from agentic_retrieval.errors import InvalidRequestError
from agentic_retrieval.kb.directory import KnowledgeBaseDirectory
from agentic_retrieval.odata import FilterFieldError, check_fields, parse_filter
from agentic_retrieval.server import ServerSettings, create_app
from agentic_retrieval.sources.base import SearchQuery, TypedFilterableKnowledgeSource
from agentic_retrieval.sources.local import LocalKnowledgeSource

SCHEMA = {
    "year": frozenset({"number"}),
    "category": frozenset({"string"}),
    "draft": frozenset({"boolean"}),
    "tags": frozenset({"collection"}),
    "address": frozenset({"object"}),
    "note": frozenset({"string", "null"}),
}
FIELDS = (
    "address (object), category (string), draft (boolean), note (string), tags (collection), "
    "year (number)"
)


def check(text: str) -> None:
    check_fields(parse_filter(text), SCHEMA)


@pytest.mark.parametrize(
    "text",
    [
        "year ge 2024 and category eq 'guide'",
        "2024 le year",
        "draft",
        "draft eq true and year eq 1",
        "note eq null and year ne null",
        "search.in(category, 'a,b')",
        "tags/any(t: t eq 'x') and tags/all(t: t ne 'y') and tags/any()",
        "address/city eq 'Oslo'",
        "category ge 2024-01-01T00:00:00Z",  # date-times are stored as ISO strings
        "not (year lt 2000) or category eq 'x'",
    ],
)
def test_filters_that_fit_the_schema_pass(text):
    check(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "yaer ge 2024",
            f"Invalid OData filter: unknown field 'yaer' (did you mean 'year'?); the fields are: "
            f"{FIELDS}",
        ),
        (
            "colour eq 'red'",
            f"Invalid OData filter: unknown field 'colour'; the fields are: {FIELDS}",
        ),
        (
            "year eq '2024'",
            "Invalid OData filter: field 'year' holds numbers: write year eq 2024, without quotes",
        ),
        (
            "year ge 'recent'",
            "Invalid OData filter: field 'year' holds numbers, not strings like 'recent'",
        ),
        (
            "category eq 5",
            "Invalid OData filter: field 'category' holds strings: quote the value "
            "(category eq '5')",
        ),
        (
            "tags eq 'x'",
            "Invalid OData filter: field 'tags' holds lists: compare its items with "
            "tags/any(x: x eq ...)",
        ),
        (
            "search.in(year, '1,2')",
            "Invalid OData filter: field 'year' holds numbers, so search.in(year, ...) cannot "
            "match it",
        ),
        (
            "category/any(c: c eq 'x')",
            "Invalid OData filter: field 'category' holds strings, so category/any or /all "
            "cannot match it",
        ),
        (
            "year ge 2000 and (draft or yeer eq 1)",
            f"Invalid OData filter: unknown field 'yeer' (did you mean 'year'?); the fields "
            f"are: {FIELDS}",
        ),
    ],
)
def test_unknown_fields_and_wrong_kinds_are_named(text, message):
    with pytest.raises(FilterFieldError) as info:
        check(text)
    assert str(info.value) == message


@pytest.fixture
def source(tmp_path):
    docs = tmp_path / "docs"
    write(docs / "leave.md", "# Leave\n\nStaff accrue two vacation days a month.\n")
    write(docs / "fleet.md", "# Fleet\n\nThe tram fleet has forty vehicles.\n")
    source = LocalKnowledgeSource("handbook", tmp_path / "h.sqlite", create=True)
    source.index([docs / "leave.md"], metadata={"year": 2025, "team": "hr"})
    source.index([docs / "fleet.md"], metadata={"year": 2024, "audited": True})
    yield source
    source.close()


def test_the_embedded_store_knows_its_fields_and_kinds(source):
    assert isinstance(source, TypedFilterableKnowledgeSource)
    assert source.filter_schema() == {
        "audited": frozenset({"boolean"}),
        "chunk": frozenset({"number"}),
        "file_name": frozenset({"string"}),
        "page": frozenset({"number", "null"}),
        "source_path": frozenset({"string"}),
        "team": frozenset({"string"}),
        "title": frozenset({"string"}),
        "year": frozenset({"number"}),
    }


def test_fields_are_recorded_as_written_and_recovered_for_older_indexes(source, tmp_path):
    import sqlite3

    source.close()
    with sqlite3.connect(tmp_path / "h.sqlite") as conn:  # an index from before the table
        conn.execute("DELETE FROM fields")
        conn.execute("DELETE FROM meta WHERE key = 'fields_recorded'")
    reopened = LocalKnowledgeSource("handbook", tmp_path / "h.sqlite")
    assert reopened.filter_schema()["audited"] == frozenset({"boolean"})
    reopened.close()


async def test_the_source_searches_a_field_it_lacks_as_null(source):
    # another source of the same knowledge base may hold the field: no error, no match
    assert await source.search(SearchQuery(text="vacation", filter="price lt 10")) == []
    hits = await source.search(SearchQuery(text="vacation", filter="year ge 2025"))
    assert [h.doc_key for h in hits] == ["leave-md-0"]


def test_the_python_api_rejects_a_filter_add_on_naming_the_parameter(source):
    kb = KnowledgeBase([source])
    request = {
        "intents": [{"search": "vacation"}],
        "knowledgeSourceParams": [
            {"knowledgeSourceName": "handbook", "filterAddOn": "year eq '2025'"}
        ],
    }
    with pytest.raises(InvalidRequestError) as info:
        kb.retrieve(request)
    assert str(info.value) == (
        "knowledgeSourceParams[handbook].filterAddOn: Invalid OData filter: field 'year' holds "
        "numbers: write year eq 2025, without quotes"
    )


def test_rest_answers_400_naming_the_valid_fields(source):
    kb = KnowledgeBase([source], name="hr")
    with TestClient(create_app(kb, settings=ServerSettings(read_env_keys=False), mcp=False)) as c:
        response = c.post(
            "/knowledgebases/hr/retrieve?api-version=2026-04-01",
            json={
                "intents": [{"search": "vacation"}],
                "knowledgeSourceParams": [
                    {"knowledgeSourceName": "handbook", "filterAddOn": "yaer ge 2024"}
                ],
            },
        )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "InvalidRequest"
    assert error["message"] == (
        "knowledgeSourceParams[handbook].filterAddOn: Invalid OData filter: unknown field "
        "'yaer' (did you mean 'year'?); the fields are: audited (boolean), chunk (number), "
        "file_name (string), page (number), source_path (string), team (string), "
        "title (string), year (number)"
    )


runner = CliRunner()


@pytest.fixture
def kb_dir(tmp_path):
    write(tmp_path / "hr" / "leave.md", "# Leave\n\nStaff accrue two vacation days a month.\n")
    write(tmp_path / "ops" / "fleet.md", "# Fleet\n\nThe tram fleet has forty vehicles.\n")
    directory = KnowledgeBaseDirectory(tmp_path / "kb").create(name="kb")
    directory.add_or_update_source("handbook")
    directory.add_or_update_source("fleet")
    directory.index("handbook", [tmp_path / "hr"], metadata={"year": 2025})
    directory.index("fleet", [tmp_path / "ops"])
    directory.close()
    return tmp_path / "kb"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--source", "handbook", "--filter", "yaer ge 2024"],
            "error: --filter: unknown field 'yaer' (did you mean "
            "'year'?); the fields are: chunk (number), file_name (string), page (number), "
            "source_path (string), title (string), year (number)\n",
        ),
        (
            ["--source", "handbook", "--filter", "year eq '2024'"],
            "error: --filter: field 'year' holds numbers: write year eq 2024, without quotes\n",
        ),
        (
            ["--filter", "yaer ge 2024"],  # both sources: the fields of either
            "error: --filter: unknown field 'yaer' (did you mean 'year'?); the fields are: "
            "chunk (number), file_name (string), page (number), source_path (string), "
            "title (string), year (number)\n",
        ),
    ],
)
def test_the_cli_names_the_fields_and_exits_2(kb_dir, args, message):
    result = runner.invoke(
        app, ["retrieve", "--kb", str(kb_dir), "--effort", "minimal", *args, "vacation"]
    )
    assert result.exit_code == 2
    assert result.stderr == message and result.stdout == ""


def test_the_cli_runs_a_filter_that_fits(kb_dir):
    result = runner.invoke(
        app,
        [
            "retrieve",
            "--kb",
            str(kb_dir),
            "--effort",
            "minimal",
            "--source",
            "handbook",
            "--json",
            "--filter",
            "year ge 2025",
            "vacation days",
        ],
    )
    assert result.exit_code == 0, result.output
    assert [r["docKey"] for r in json.loads(result.stdout)["references"]] == ["hr-leave-md-0"]


def test_a_field_one_source_has_filters_the_others_to_nothing(kb_dir):
    result = runner.invoke(
        app,
        [
            "retrieve",
            "--kb",
            str(kb_dir),
            "--effort",
            "minimal",
            "--json",
            "--filter",
            "year ge 2025",
            "vacation days",
        ],
    )
    assert result.exit_code == 0, result.output
    assert [r["docKey"] for r in json.loads(result.stdout)["references"]] == ["hr-leave-md-0"]
