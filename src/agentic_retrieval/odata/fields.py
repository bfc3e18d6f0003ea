"""Filters checked against the fields a source knows, so a typo is an error, not zero results.

A source that knows its metadata (the embedded store) describes it as a :data:`FieldSchema`:
each field name with the kinds of value it holds. :func:`check_fields` then rejects a filter
that names a field the source does not have (``yaer ge 2024``) or compares a field with a
value of another kind (``year eq '2024'`` where ``year`` holds numbers), naming the valid
fields and their kinds. Without the check both filters silently match nothing.

Only the first segment of a path is checked (``address/city`` needs ``address``), and
variables bound by ``any``/``all`` are not fields. A field that holds several kinds (numbers
in some documents, strings in others) accepts any of them; ``null`` is accepted everywhere.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from datetime import datetime
from typing import Literal

from agentic_retrieval.errors import FilterFieldError as FilterFieldError
from agentic_retrieval.odata.ast import (
    All,
    And,
    Any_,
    BoolField,
    Compare,
    Constant,
    Expr,
    Field,
    Not,
    Or,
    SearchIn,
)

FieldKind = Literal["string", "number", "boolean", "collection", "object", "null"]
FieldSchema = Mapping[str, frozenset[FieldKind]]
"""Field name -> the kinds of value it holds."""

_PLURAL: dict[str, str] = {
    "string": "strings",
    "number": "numbers",
    "boolean": "booleans",
    "collection": "lists",
    "object": "objects",
    "null": "nulls",
}


def check_fields(expr: Expr, schema: FieldSchema) -> None:
    """Raise when ``expr`` names an unknown field or compares one with the wrong kind of value.

    Args:
        expr: A parsed filter.
        schema: The fields the source knows.

    Raises:
        FilterFieldError: Naming the field, what it holds, and the valid fields.
    """
    _Checker(schema).check(expr, frozenset())


def filter_field_names(expr: Expr) -> set[str]:
    """The top-level field names a filter reads (``address`` for ``address/city``)."""
    if isinstance(expr, Compare | BoolField | SearchIn | Any_ | All):
        return {expr.field.path.split("/")[0]}
    if isinstance(expr, And | Or):
        return filter_field_names(expr.left) | filter_field_names(expr.right)
    if isinstance(expr, Not):
        return filter_field_names(expr.operand)
    return set()


def merge_schemas(*schemas: FieldSchema) -> dict[str, frozenset[FieldKind]]:
    """One schema for a filter sent to several sources: every field of any, with every kind."""
    merged: dict[str, frozenset[FieldKind]] = {}
    for schema in schemas:
        for name, kinds in schema.items():
            merged[name] = merged.get(name, frozenset()) | kinds
    return merged


def describe_schema(schema: FieldSchema) -> str:
    """``chunk (number), title (string), year (number)``: the fields and their kinds."""
    parts = []
    for name in sorted(schema):
        kinds = sorted(schema[name] - {"null"}) or ["null"]
        parts.append(f"{name} ({' or '.join(kinds)})")
    return ", ".join(parts) or "none"


class _Checker:
    def __init__(self, schema: FieldSchema) -> None:
        self.schema = schema

    def check(self, expr: Expr, scope: frozenset[str]) -> None:
        match expr:
            case Constant():
                return
            case Compare(op, field, literal):
                self.compare(field, op, literal.value, scope)
            case BoolField(field):
                self.expect(field, scope, {"boolean", "number"}, f"'{field.path}' alone")
            case And(left, right) | Or(left, right):
                self.check(left, scope)
                self.check(right, scope)
            case Not(operand):
                self.check(operand, scope)
            case SearchIn(field, _):
                self.expect(field, scope, {"string"}, f"search.in({field.path}, ...)")
            case Any_(field, variable, predicate) | All(field, variable, predicate):
                self.expect(field, scope, {"collection"}, f"{field.path}/any or /all")
                if predicate is not None:
                    self.check(predicate, scope | ({variable} if variable else set()))

    def kinds(self, field: Field, scope: frozenset[str]) -> frozenset[FieldKind] | None:
        """The field's kinds; ``None`` when it is not checkable (a lambda variable, a sub-path)."""
        head, _, rest = field.path.partition("/")
        if head in scope:
            return None
        kinds = self.schema.get(head)
        if kinds is None:
            raise FilterFieldError(self.unknown(head))
        return None if rest else kinds

    def unknown(self, name: str) -> str:
        close = difflib.get_close_matches(name, list(self.schema), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return f"unknown field '{name}'{hint}; the fields are: {describe_schema(self.schema)}"

    def expect(
        self, field: Field, scope: frozenset[str], wanted: set[FieldKind], usage: str
    ) -> None:
        kinds = self.kinds(field, scope)
        if kinds is None or not (kinds - {"null"}) or kinds & wanted:
            return
        raise FilterFieldError(
            f"field '{field.path}' holds {_holds(kinds)}, so {usage} cannot match it"
            + (f"; use {field.path}/any(x: x eq ...)" if "collection" in kinds else "")
        )

    def compare(self, field: Field, op: str, value: object, scope: frozenset[str]) -> None:
        kinds = self.kinds(field, scope)
        if kinds is None or value is None or not (kinds - {"null"}):
            return
        given = _kind_of(value)
        accepted: set[FieldKind] = {given}
        if given in ("number", "boolean"):
            accepted = {"number", "boolean"}  # stored alike (true is 1), compared alike
        if kinds & accepted:
            return
        raise FilterFieldError(_mismatch(field.path, op, kinds, value))


def _kind_of(value: object) -> FieldKind:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "string"  # strings, and date-times (stored as ISO 8601 strings)


def _holds(kinds: frozenset[FieldKind]) -> str:
    return " or ".join(_PLURAL[k] for k in sorted(kinds - {"null"}))


def _mismatch(path: str, op: str, kinds: frozenset[FieldKind], value: object) -> str:
    holds = _holds(kinds)
    if "collection" in kinds:
        return f"field '{path}' holds {holds}: compare its items with {path}/any(x: x eq ...)"
    if isinstance(value, str) and "number" in kinds:
        try:
            float(value)
        except ValueError:
            return f"field '{path}' holds {holds}, not strings like '{value}'"
        return f"field '{path}' holds {holds}: write {path} {op} {value}, without quotes"
    if isinstance(value, datetime):
        return f"field '{path}' holds {holds}, not date-times"
    if "string" in kinds:
        return f"field '{path}' holds {holds}: quote the value ({path} {op} '{value}')"
    return f"field '{path}' holds {holds}, not {_PLURAL[_kind_of(value)]}"
