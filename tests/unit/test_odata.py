"""OData filter parser, Python evaluator and SQLite compiler."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime

import pytest
from tests.odata_cases import CASES, RECORDS

from agentic_retrieval.odata import (
    All,
    And,
    Any_,
    BoolField,
    Compare,
    Field,
    Literal,
    Not,
    ODataError,
    Or,
    SearchIn,
    and_filters,
    compile_predicate,
    evaluate_filter,
    parse_filter,
    to_sql,
)


def python_ids(text: str) -> list[str]:
    predicate = compile_predicate(text)
    return sorted(key for key, record in RECORDS.items() if predicate(record))


@pytest.fixture(scope="module")
def db() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE records (id TEXT, metadata TEXT)")
    conn.executemany(
        "INSERT INTO records VALUES (?, ?)", [(k, json.dumps(v)) for k, v in RECORDS.items()]
    )
    return conn


def column(path: str) -> str:
    return "json_extract(metadata, '$." + path.replace("/", ".") + "')"


def sql_ids(conn: sqlite3.Connection, text: str) -> list[str]:
    where, params = to_sql(parse_filter(text), column)
    rows = conn.execute(f"SELECT id FROM records WHERE {where} ORDER BY id", params)
    return [row[0] for row in rows]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_python_evaluator(text: str, expected: list[str]) -> None:
    assert python_ids(text) == expected


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_sql_matches_python(db: sqlite3.Connection, text: str, expected: list[str]) -> None:
    assert sql_ids(db, text) == expected


def test_precedence_and_binds_tighter_than_or() -> None:
    a, b, c = (Compare("eq", Field(n), Literal(v)) for n, v in (("a", 1), ("b", 2), ("c", 3)))
    assert parse_filter("a eq 1 or b eq 2 and c eq 3") == Or(a, And(b, c))
    assert parse_filter("(a eq 1 or b eq 2) and c eq 3") == And(Or(a, b), c)
    assert parse_filter("a eq 1 and b eq 2 or c eq 3") == Or(And(a, b), c)
    assert parse_filter("not (a eq 1) and b eq 2") == And(Not(a), b)


def test_literals_parse_to_python_values() -> None:
    assert parse_filter("x eq 'it''s'") == Compare("eq", Field("x"), Literal("it's"))
    assert parse_filter("x ge -1.5e2") == Compare("ge", Field("x"), Literal(-150.0))
    assert parse_filter("x eq 42") == Compare("eq", Field("x"), Literal(42))
    assert parse_filter("x eq null") == Compare("eq", Field("x"), Literal(None))
    assert parse_filter("x ne false") == Compare("ne", Field("x"), Literal(False))
    assert parse_filter("d lt 2024-01-01T00:00:00Z") == Compare(
        "lt", Field("d"), Literal(datetime(2024, 1, 1, tzinfo=UTC))
    )
    assert parse_filter("a/b/c eq 1").field.path == "a/b/c"  # type: ignore[union-attr]
    assert parse_filter("flag") == BoolField(Field("flag"))
    assert parse_filter("search.in(c, 'a, b')") == SearchIn(Field("c"), ("a", "b"))
    assert parse_filter("t/all(x: x gt 1)") == All(
        Field("t"), "x", Compare("gt", Field("x"), Literal(1))
    )
    assert parse_filter("t/any()") == Any_(Field("t"), None, None)


@pytest.mark.parametrize(
    ("text", "position", "expected"),
    [
        ("", 0, "expected a boolean expression"),
        ("a eq", 4, "expected a field, a literal"),
        ("a eq 1 and", 10, "expected a field, a literal"),
        ("(a eq 1", 7, "expected ')'"),
        ("a eq 1)", 6, "expected 'and', 'or' or the end"),
        ("a b", 2, "expected 'and', 'or' or the end"),
        ("x eq 'abc", 5, "unterminated string"),
        ("a eq b", 5, "one side of a comparison must be a constant"),
        ("1 eq 2", 5, "one side of a comparison must be a field"),
        ("not a eq 1", 0, "parentheses"),
        ("geo.distance(a) lt 3", 0, "unsupported function"),
        ("a eq 1 && b eq 2", 7, "unexpected character '&'"),
        ("tags/any(t t eq 1)", 11, "expected ':'"),
        ("search.in(c, 5)", 13, "expected a string of values"),
        ("a eq 2024-01-01", 9, "expected 'and', 'or' or the end"),
        ("x eq 1 or", 9, "expected a field"),
        ("'lonely'", 0, "expected a boolean expression"),
    ],
)
def test_malformed_filters_report_position(text: str, position: int, expected: str) -> None:
    with pytest.raises(ODataError) as info:
        parse_filter(text)
    assert info.value.position == position
    assert expected in str(info.value)
    assert f"position {position}" in str(info.value)


def test_odata_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_filter("x eq")


@pytest.mark.parametrize(
    "value",
    [
        "'; DROP TABLE records; --",
        "x' OR '1'='1",
        '" OR 1=1 --',
        "Ωμέγα ☃ 日本",
        "x'); DELETE FROM records; --",
    ],
)
def test_injection_attempts_are_literals(db: sqlite3.Connection, value: str) -> None:
    escaped = value.replace("'", "''")
    text = f"category eq '{escaped}' or search.in(category, '{escaped}', '|')"
    where, params = to_sql(parse_filter(text), column)
    assert value not in where  # the value only travels as a parameter
    assert params == [value, json.dumps([value])]  # search.in's values: one JSON array
    assert sql_ids(db, text) == []
    assert python_ids(text) == []
    assert db.execute("SELECT count(*) FROM records").fetchone() == (5,)


def test_to_sql_rejects_unsafe_field_paths() -> None:
    with pytest.raises(ODataError):
        to_sql(Compare("eq", Field("x') OR 1=1 --"), Literal(1)), column)


def test_compile_predicate_blank_is_always_true() -> None:
    assert compile_predicate(None)({}) is True
    assert compile_predicate("  ")({"a": 1}) is True


def test_evaluate_filter_accepts_datetime_objects_and_flat_paths() -> None:
    expr = parse_filter("when gt 2020-01-01T00:00:00Z and a/b eq 1")
    assert evaluate_filter(expr, {"when": datetime(2021, 1, 1), "a/b": 1})
    assert not evaluate_filter(expr, {"when": datetime(2019, 1, 1), "a": {"b": 1}})


def test_and_filters_parenthesises_each_part() -> None:
    assert and_filters(None, " ", None) is None
    assert and_filters("a eq 1") == "a eq 1"
    combined = and_filters("dept eq 'hr'", None, "x eq 1 or y eq 2")
    assert combined == "(dept eq 'hr') and (x eq 1 or y eq 2)"
    # the planner's "or" cannot widen the caller's security filter
    predicate = compile_predicate(combined)
    assert not predicate({"dept": "legal", "y": 2})
    assert predicate({"dept": "hr", "y": 2})


# --- hostile filters: bounded depth, length and numbers --------------------------------------

LIMIT_CASES = [
    ("parentheses", "(" * 300 + "year eq 2021" + ")" * 300, "levels deep"),
    ("nots", "not " * 1500 + "active", "levels deep"),
    (
        "lambdas",
        "".join(f"tags/any(t{i}: " for i in range(500)) + "t0 eq 'hr'" + ")" * 500,
        "levels deep",
    ),
    ("or-chain", " or ".join(f"year eq {i}" for i in range(1200)), "more than 100 conditions"),
    ("and-chain", " and ".join("active" for _ in range(101)), "more than 100 conditions"),
    ("huge-integer", "page eq 9999999999999999999999999999999", "out of range"),
    ("int64-plus-one", f"page eq {2**63}", "out of range"),
    ("five-thousand-digits", "page eq " + "9" * 5000, "out of range"),
    ("infinite-double", "rating lt 1e999", "out of range"),
    ("too-long", "category eq '" + "x" * 70_000 + "'", "the limit is 65536"),
]


@pytest.mark.parametrize(
    ("text", "message"), [c[1:] for c in LIMIT_CASES], ids=[c[0] for c in LIMIT_CASES]
)
def test_hostile_filters_are_filter_errors_not_crashes(text: str, message: str) -> None:
    with pytest.raises(ODataError, match=message):
        parse_filter(text)


def test_filters_at_the_limits_parse_evaluate_and_run_in_sqlite(db: sqlite3.Connection) -> None:
    # 31 parentheses around a 99-condition chain: the compiled SQL stays under SQLite's
    # expression depth and Python's recursion limit
    chain = " or ".join(f"year eq {i}" for i in range(1, 100)) + " or year eq 2021"
    nested = "(" * 31 + chain + ")" * 31
    assert python_ids(nested) == ["r2"]
    assert sql_ids(db, nested) == ["r2"]
    nots = "not " * 32 + "active"  # an even number of negations: active records
    assert python_ids(nots) == sql_ids(db, nots) == ["r1", "r3"]
    extremes = f"year ge {-(2**63)} and year le {2**63 - 1} and rating lt 1e308"
    assert python_ids(extremes) == sql_ids(db, extremes) == ["r1", "r2"]


def test_long_chains_keep_their_meaning_as_balanced_trees() -> None:
    a, b, c, d = (Compare("eq", Field(x), Literal(1)) for x in "abcd")
    assert parse_filter("a eq 1 or b eq 2".replace("2", "1")) == Or(a, b)
    assert parse_filter("a eq 1 or b eq 1 or c eq 1") == Or(Or(a, b), c)
    assert parse_filter("a eq 1 and b eq 1 and c eq 1 and d eq 1") == And(And(a, b), And(c, d))


def test_search_in_with_more_values_than_sqlite_has_parameters(db: sqlite3.Connection) -> None:
    values = "x," * 32_700 + "policy"  # SQLite binds at most 32,766 parameters
    text = f"search.in(category, '{values}')"
    assert sql_ids(db, text) == python_ids(text) == ["r2"]
