"""The Python evaluator: does one record match a parsed filter."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from agentic_retrieval.odata.ast import (
    All,
    And,
    Any_,
    BoolField,
    Compare,
    Constant,
    Expr,
    Not,
    Or,
    SearchIn,
)
from agentic_retrieval.odata.parser import parse_filter


def compile_predicate(text: str | None) -> Callable[[Mapping[str, Any]], bool]:
    """Parse ``text`` once and return a predicate over records.

    Args:
        text: An OData filter; ``None`` or blank means "no restriction".

    Returns:
        ``predicate(record) -> bool``; always true for an empty filter.

    Raises:
        ODataError: When ``text`` does not parse.

    """
    if text is None or not text.strip():
        return lambda record: True
    expr = parse_filter(text)
    return lambda record: evaluate_filter(expr, record)


_ISO_DATE_PREFIX = re.compile(r"\d{4}-\d{2}-\d{2}")


def evaluate_filter(expr: Expr, record: Mapping[str, Any]) -> bool:
    """Evaluate ``expr`` against one record.

    Args:
        expr: A parsed filter (see :func:`parse_filter`).
        record: Field values; nested objects are dicts (or keys containing ``/``), collections
            are lists, a missing field is null.

    Returns:
        Whether the record matches.

    """
    return _evaluate(expr, record, {})


def _evaluate(expr: Expr, record: Mapping[str, Any], scope: Mapping[str, Any]) -> bool:
    match expr:
        case Constant(value):
            return value
        case Compare(op, field, literal):
            return _compare(op, _resolve(field.path, record, scope), literal.value)
        case BoolField(field):
            return _compare("eq", _resolve(field.path, record, scope), True)
        case And(left, right):
            return _evaluate(left, record, scope) and _evaluate(right, record, scope)
        case Or(left, right):
            return _evaluate(left, record, scope) or _evaluate(right, record, scope)
        case Not(operand):
            return not _evaluate(operand, record, scope)
        case SearchIn(field, values):
            value = _resolve(field.path, record, scope)
            return isinstance(value, str) and value in values
        case Any_(field, variable, predicate):
            items = _as_collection(_resolve(field.path, record, scope))
            if predicate is None or variable is None:
                return len(items) > 0
            return any(_evaluate(predicate, record, {**scope, variable: i}) for i in items)
        case All(field, variable, predicate):
            items = _as_collection(_resolve(field.path, record, scope))
            return all(_evaluate(predicate, record, {**scope, variable: i}) for i in items)
    raise TypeError(f"not an OData expression: {expr!r}")


def _resolve(path: str, record: Mapping[str, Any], scope: Mapping[str, Any]) -> Any:
    parts = path.split("/")
    if parts[0] in scope:
        value: Any = scope[parts[0]]
    elif path in record:
        return record[path]
    else:
        value = record.get(parts[0])
    for part in parts[1:]:
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def _as_collection(value: Any) -> Sequence[Any]:
    return value if isinstance(value, (list, tuple)) else ()


def _compare(op: str, value: Any, literal: Any) -> bool:
    if op == "ne":
        return not _compare("eq", value, literal)
    if literal is None or value is None:
        return op == "eq" and literal is None and value is None
    if isinstance(literal, datetime):
        left, right = _as_datetime(value), as_utc(literal)
        if left is None:
            return False
        return _ORDER[op](left, right)
    if isinstance(literal, str):
        return isinstance(value, str) and _ORDER[op](value, literal)
    # Numbers and booleans form one family (booleans are 1/0, as in SQLite's JSON functions).
    return isinstance(value, (int, float)) and _ORDER[op](value, literal)


_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "eq": lambda a, b: a == b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
}


def as_utc(value: datetime) -> datetime:
    """``value`` in UTC; a naive value is taken to be UTC already."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _as_datetime(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return as_utc(value)
    if isinstance(value, str) and _ISO_DATE_PREFIX.match(value):
        try:
            return as_utc(datetime.fromisoformat(value))
        except ValueError:
            return None
    return None
