"""The SQL compiler: a parsed filter as a parameterised SQLite expression."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from agentic_retrieval.errors import ODataError
from agentic_retrieval.odata.ast import (
    FIELD_PATH,
    Expr,
    Field,
)
from agentic_retrieval.odata.compiler import FilterCompiler
from agentic_retrieval.odata.evaluate import as_utc

_SQL_OPS = {"eq": "=", "gt": ">", "ge": ">=", "lt": "<", "le": "<="}


def to_sql(expr: Expr, column: Callable[[str], str]) -> tuple[str, list[Any]]:
    r"""Compile ``expr`` to a parameterised SQLite boolean expression.

    Every value travels as a ``?`` parameter, never inside the SQL text; field paths are
    checked against ``[A-Za-z_]\\w*(/[A-Za-z_]\\w*)*`` before ``column`` maps them to SQL.
    Each fragment evaluates to 0 or 1, never NULL, so ``not`` behaves as in Python.

    Args:
        expr: A parsed filter.
        column: Maps a validated field path (``"a/b"``) to a SQL expression yielding the
            field's value, e.g. ``lambda p: f"json_extract(metadata, '$.{p.replace('/', '.')}')"``.
            Collections must come out as JSON array text (``json_extract`` does this).

    Returns:
        ``(sql, params)`` for use in a ``WHERE`` clause.

    Raises:
        ODataError: When a field path is not a plain identifier path.

    """
    compiler = _SqlCompiler(column)
    sql = compiler.compile(expr, {})
    return sql, compiler.params


class _SqlCompiler(FilterCompiler):
    TRUE = "1"
    FALSE = "0"

    def field(self, field: Field, scope: Mapping[str, str]) -> str:
        if not FIELD_PATH.match(field.path):
            raise ODataError(f"invalid field path {field.path!r}", 0)
        head, *rest = field.path.split("/")
        if head not in scope:
            return self.column(field.path)
        element = scope[head]
        if not rest:
            return f"{element}.value"
        json_path = "$." + ".".join(rest)
        return (
            f"(CASE WHEN {element}.type = 'object' "
            f"THEN json_extract({element}.value, '{json_path}') END)"
        )

    def compare(self, op: str, col: str, literal: Any) -> str:
        if op == "ne":
            return f"(NOT {self.compare('eq', col, literal)})"
        if literal is None:
            return f"({col} IS NULL)" if op == "eq" else "0"
        sql_op = _SQL_OPS[op]
        if isinstance(literal, datetime):
            self.params.append(as_utc(literal).strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
            return (
                f"IFNULL(typeof({col}) = 'text' AND {col} GLOB '[0-9][0-9][0-9][0-9]-*' "
                f"AND julianday({col}) {sql_op} julianday(?), 0)"
            )
        if isinstance(literal, str):
            self.params.append(literal)
            return f"IFNULL(typeof({col}) = 'text' AND {col} {sql_op} ?, 0)"
        self.params.append(int(literal) if isinstance(literal, bool) else literal)
        return f"IFNULL(typeof({col}) IN ('integer', 'real') AND {col} {sql_op} ?, 0)"

    def search_in(self, col: str, values: tuple[str, ...]) -> str:
        if not values:
            return "0"
        # one JSON parameter, not one per value: a long list stays under SQLite's limit on
        # bound parameters
        self.params.append(json.dumps(values))
        return f"IFNULL(typeof({col}) = 'text' AND {col} IN (SELECT value FROM json_each(?)), 0)"

    def lambda_(
        self,
        col: str,
        variable: str | None,
        predicate: Expr | None,
        kind: str,
        scope: Mapping[str, str],
    ) -> str:
        array = (
            f"(CASE WHEN json_valid({col}) AND json_type({col}) = 'array' THEN {col} ELSE '[]' END)"
        )
        if predicate is None or variable is None:
            return f"(json_array_length({array}) > 0)"
        self.aliases += 1
        alias = f"odata_e{self.aliases}"
        inner = self.compile(predicate, {**scope, variable: alias})
        if kind == "any":
            return f"EXISTS (SELECT 1 FROM json_each({array}) AS {alias} WHERE {inner})"
        return f"NOT EXISTS (SELECT 1 FROM json_each({array}) AS {alias} WHERE NOT {inner})"
