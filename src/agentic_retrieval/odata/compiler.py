"""What every SQL compiler of filters shares: the walk over the parsed expression.

:mod:`~agentic_retrieval.odata.sql` (SQLite) and :mod:`~agentic_retrieval.odata.postgres`
differ in how a field is read, a value compared, a list searched and a collection ranged
over; the connectives, the constants and the order of the walk are one piece of code.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any

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


class FilterCompiler(ABC):
    """A parsed filter as one dialect's boolean SQL, with its values as parameters.

    Args:
        column: Maps a validated field path (``"a/b"``) to the SQL that reads the field.
    """

    TRUE: str
    FALSE: str

    def __init__(self, column: Callable[[str], str]) -> None:
        self.column = column
        self.params: list[Any] = []
        self.aliases = 0
        """Collection ranges opened so far (each ``any``/``all`` gets its own alias)."""

    def compile(self, expr: Expr, scope: Mapping[str, str]) -> str:
        """``expr`` as SQL; ``scope`` maps lambda variables to their range's alias."""
        match expr:
            case Constant(value):
                return self.TRUE if value else self.FALSE
            case Compare(op, field, literal):
                return self.compare(op, self.field(field, scope), literal.value)
            case BoolField(field):
                return self.compare("eq", self.field(field, scope), True)
            case And(left, right):
                return f"({self.compile(left, scope)} AND {self.compile(right, scope)})"
            case Or(left, right):
                return f"({self.compile(left, scope)} OR {self.compile(right, scope)})"
            case Not(operand):
                return f"(NOT {self.compile(operand, scope)})"
            case SearchIn(field, values):
                return self.search_in(self.field(field, scope), values)
            case Any_(field, variable, predicate):
                return self.lambda_(self.field(field, scope), variable, predicate, "any", scope)
            case All(field, variable, predicate):
                return self.lambda_(self.field(field, scope), variable, predicate, "all", scope)
        raise TypeError(f"not an OData expression: {expr!r}")

    @abstractmethod
    def field(self, field: Field, scope: Mapping[str, str]) -> str:
        """The SQL reading ``field`` (a column, or a path inside a lambda's element)."""

    @abstractmethod
    def compare(self, op: str, col: str, literal: Any) -> str:
        """``col op literal`` within the literal's type family; never NULL."""

    @abstractmethod
    def search_in(self, col: str, values: tuple[str, ...]) -> str:
        """``search.in``: ``col`` is one of ``values``; never NULL."""

    @abstractmethod
    def lambda_(
        self,
        col: str,
        variable: str | None,
        predicate: Expr | None,
        kind: str,
        scope: Mapping[str, str],
    ) -> str:
        """``any``/``all`` over the collection in ``col``."""
