"""The PostgreSQL compiler: a parsed filter as a parameterised condition over ``jsonb``.

The same semantics as :mod:`~agentic_retrieval.odata.sql` (SQLite) and the Python evaluator
(see the package docstring): values compare only within a type family, booleans count as the
numbers 1 and 0, a missing field or a JSON ``null`` is null, strings compare byte by byte
(``COLLATE "C"``, as SQLite does) and every fragment is true or false, never NULL. Date-times
are parsed by ``agentic_retrieval_timestamp`` (a function the PostgreSQL store's schema
creates), which gives NULL rather than an error for a string that is not one.
"""

from __future__ import annotations

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

_OPS = {"eq": "=", "gt": ">", "ge": ">=", "lt": "<", "le": "<="}
TIMESTAMP_FUNCTION = "agentic_retrieval_timestamp"
"""The SQL function (``text -> timestamptz``, NULL when unparseable) date-times compare with."""


def json_path(path: str) -> str:
    r"""A validated field path (``a/b``) as a ``#>`` path literal (``'{a,b}'``).

    Raises:
        ODataError: When ``path`` is not ``[A-Za-z_]\w*(/[A-Za-z_]\w*)*``.
    """
    if not FIELD_PATH.match(path):
        raise ODataError(f"invalid field path {path!r}", 0)
    return "'{" + ",".join(path.split("/")) + "}'"


def to_postgres(expr: Expr, column: Callable[[str], str]) -> tuple[str, list[Any]]:
    """Compile ``expr`` to a PostgreSQL boolean expression with ``%s`` parameters.

    Args:
        expr: A parsed filter.
        column: Maps a validated field path (``"a/b"``) to a ``jsonb`` SQL expression
            yielding the field's value (SQL NULL when missing), e.g.
            ``lambda p: f"(metadata #> {json_path(p)})"``.

    Returns:
        ``(sql, params)`` for a ``WHERE`` clause (psycopg placeholders).

    Raises:
        ODataError: When a field path is not a plain identifier path.
    """
    compiler = _Compiler(column)
    return compiler.compile(expr, {}), compiler.params


class _Compiler(FilterCompiler):
    TRUE = "TRUE"
    FALSE = "FALSE"

    def field(self, field: Field, scope: Mapping[str, str]) -> str:
        json_path(field.path)  # validates before anything reaches the SQL text
        head, *rest = field.path.split("/")
        if head not in scope:
            return self.column(field.path)
        element = f"{scope[head]}.value"
        if not rest:
            return element
        return (
            f"(CASE WHEN jsonb_typeof({element}) = 'object' "
            f"THEN {element} #> {json_path('/'.join(rest))} END)"
        )

    def compare(self, op: str, col: str, literal: Any) -> str:
        if op == "ne":
            return f"(NOT {self.compare('eq', col, literal)})"
        if literal is None:
            return f"({col} IS NULL OR jsonb_typeof({col}) = 'null')" if op == "eq" else "FALSE"
        sql_op = _OPS[op]
        if isinstance(literal, datetime):
            self.params.append(as_utc(literal))
            return (
                f"coalesce(jsonb_typeof({col}) = 'string' AND "
                f"{TIMESTAMP_FUNCTION}({col} #>> '{{}}') {sql_op} %s::timestamptz, FALSE)"
            )
        if isinstance(literal, str):
            self.params.append(literal)
            return (
                f"coalesce(jsonb_typeof({col}) = 'string' AND "
                f"({col} #>> '{{}}') COLLATE \"C\" {sql_op} %s::text, FALSE)"
            )
        self.params.append(int(literal) if isinstance(literal, bool) else literal)
        number = (
            f"(CASE jsonb_typeof({col}) WHEN 'number' THEN ({col})::numeric "
            f"WHEN 'boolean' THEN (CASE WHEN {col} = 'true'::jsonb THEN 1 ELSE 0 END) END)"
        )
        return f"coalesce({number} {sql_op} (%s)::numeric, FALSE)"

    def search_in(self, col: str, values: tuple[str, ...]) -> str:
        if not values:
            return "FALSE"
        self.params.append(list(values))  # one array parameter, however many values
        return (
            f"coalesce(jsonb_typeof({col}) = 'string' AND "
            f"({col} #>> '{{}}') = ANY(%s::text[]), FALSE)"
        )

    def lambda_(
        self,
        col: str,
        variable: str | None,
        predicate: Expr | None,
        kind: str,
        scope: Mapping[str, str],
    ) -> str:
        array = f"(CASE WHEN jsonb_typeof({col}) = 'array' THEN {col} ELSE '[]'::jsonb END)"
        if predicate is None or variable is None:
            return f"(jsonb_array_length({array}) > 0)"
        self.aliases += 1
        alias = f"odata_e{self.aliases}"
        inner = self.compile(predicate, {**scope, variable: alias})
        elements = f"jsonb_array_elements({array}) AS {alias}(value)"
        if kind == "any":
            return f"EXISTS (SELECT 1 FROM {elements} WHERE {inner})"
        return f"NOT EXISTS (SELECT 1 FROM {elements} WHERE NOT {inner})"
