"""The filter AST: immutable nodes and the comparison operators."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Literal as TypingLiteral
from typing import TypeAlias

ComparisonOp: TypeAlias = TypingLiteral["eq", "ne", "gt", "ge", "lt", "le"]
COMPARISON_OPS = ("eq", "ne", "gt", "ge", "lt", "le")
FLIPPED: dict[str, ComparisonOp] = {
    "eq": "eq",
    "ne": "ne",
    "gt": "lt",
    "ge": "le",
    "lt": "gt",
    "le": "ge",
}
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
FIELD_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:/[A-Za-z_][A-Za-z0-9_]*)*\Z")
DEFAULT_DELIMITERS = " ,"

MAX_FILTER_LENGTH = 65_536
"""Longest filter text parsed: twice the longest ``filterAddOn`` a request may carry, so a
caller's filter ANDed with a planner's still parses."""
MAX_NESTING = 32
"""Deepest nesting of parentheses, ``not`` and lambdas; real filters use a handful."""
MAX_CONDITIONS = 100
"""Most conditions joined by ``and``/``or`` in one filter; a long list of values is one
``search.in`` condition. Each condition is evaluated on every candidate chunk: on 20,000
chunks 100 conditions cost 2 s of SQLite time and 1,000 cost 20 s (Azure, for comparison,
warns from "hundreds of clauses")."""
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""Integer literals are ``Edm.Int64``, as in Azure (and SQLite's INTEGER)."""


@dataclass(frozen=True, slots=True)
class Literal:
    """A constant: ``str``, ``int``/``float``, ``bool``, ``None`` or an aware ``datetime``."""

    value: str | int | float | bool | datetime | None


@dataclass(frozen=True, slots=True)
class Field:
    """A field path such as ``category`` or ``address/city`` (``/``-separated)."""

    path: str


@dataclass(frozen=True, slots=True)
class Compare:
    """``field op literal``; a ``literal op field`` comparison is stored flipped."""

    op: ComparisonOp
    field: Field
    literal: Literal


@dataclass(frozen=True, slots=True)
class BoolField:
    """A bare boolean field used as a predicate (``isActive``), i.e. ``isActive eq true``."""

    field: Field


@dataclass(frozen=True, slots=True)
class And:
    """Both operands hold."""

    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class Or:
    """At least one operand holds."""

    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class Not:
    """The operand does not hold."""

    operand: Expr


@dataclass(frozen=True, slots=True)
class SearchIn:
    """``search.in(field, 'a,b')``: the field equals one of ``values``."""

    field: Field
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Any_:
    """``field/any(var: predicate)``; ``predicate is None`` means "the collection is non-empty"."""

    field: Field
    variable: str | None
    predicate: Expr | None


@dataclass(frozen=True, slots=True)
class All:
    """``field/all(var: predicate)``: every element satisfies ``predicate`` (true when empty)."""

    field: Field
    variable: str
    predicate: Expr


@dataclass(frozen=True, slots=True)
class Constant:
    """The literal ``true`` or ``false`` used as a whole predicate."""

    value: bool


Expr: TypeAlias = Constant | Compare | BoolField | And | Or | Not | SearchIn | Any_ | All
