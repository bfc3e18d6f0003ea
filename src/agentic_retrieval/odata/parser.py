"""Recursive-descent parser with Azure's precedence (``not`` > comparison > ``and`` > ``or``).

Bounded: at most ``MAX_NESTING`` levels of parentheses, ``not`` and lambdas, at most
``MAX_CONDITIONS`` conditions joined by ``and``/``or``, and chains of one operator become
balanced trees, so the parser, the evaluator, the SQL compiler and SQLite itself never
recurse deeper than a few hundred frames, whatever the input.
"""

from __future__ import annotations

import functools
import re

from agentic_retrieval.errors import ODataError
from agentic_retrieval.odata.ast import (
    COMPARISON_OPS,
    DEFAULT_DELIMITERS,
    FLIPPED,
    IDENTIFIER,
    MAX_CONDITIONS,
    MAX_NESTING,
    All,
    And,
    Any_,
    BoolField,
    Compare,
    ComparisonOp,
    Constant,
    Expr,
    Field,
    Literal,
    Not,
    Or,
    SearchIn,
)
from agentic_retrieval.odata.tokenizer import Token, tokenize


class _Parser:
    """Recursive descent over the token list; one method per precedence level."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.index = 0
        self.variables: list[str] = []
        self.depth = 0
        self.conditions = 1

    def enter(self, token: Token) -> None:
        """One level deeper (a parenthesis, ``not`` or a lambda), within ``MAX_NESTING``."""
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise ODataError(
                f"the filter nests parentheses, 'not' and lambdas more than {MAX_NESTING} "
                "levels deep",
                token.position,
                self.text,
            )

    def leave(self) -> None:
        self.depth -= 1

    def count_condition(self, token: Token) -> None:
        """One more condition joined by ``and``/``or``, within ``MAX_CONDITIONS``."""
        self.conditions += 1
        if self.conditions > MAX_CONDITIONS:
            raise ODataError(
                f"the filter joins more than {MAX_CONDITIONS} conditions with 'and'/'or'; "
                "for a long list of values use search.in(field, 'a,b,c')",
                token.position,
                self.text,
            )

    @property
    def current(self) -> Token:
        return self.tokens[self.index]

    def advance(self) -> Token:
        token = self.tokens[self.index]
        self.index += 1
        return token

    def error(self, detail: str, token: Token | None = None) -> ODataError:
        token = token or self.current
        found = "end of filter" if token.kind == "end" else repr(token.text)
        return ODataError(f"{detail}, found {found}", token.position, self.text)

    def is_keyword(self, word: str) -> bool:
        return self.current.kind == "ident" and self.current.text.lower() == word

    def expect_punct(self, ch: str) -> Token:
        if self.current.kind == "punct" and self.current.text == ch:
            return self.advance()
        raise self.error(f"expected {ch!r}")

    def parse(self) -> Expr:
        if self.current.kind == "end":
            raise self.error("expected a boolean expression")
        expr = self.parse_or()
        if self.current.kind != "end":
            raise self.error("expected 'and', 'or' or the end of the filter")
        return expr

    def parse_or(self) -> Expr:
        operands = [self.parse_and()]
        while self.is_keyword("or"):
            self.count_condition(self.advance())
            operands.append(self.parse_and())
        return _balanced(Or, operands)

    def parse_and(self) -> Expr:
        operands = [self.parse_comparison()]
        while self.is_keyword("and"):
            self.count_condition(self.advance())
            operands.append(self.parse_comparison())
        return _balanced(And, operands)

    def parse_comparison(self) -> Expr:
        start = self.current
        left = self.parse_unary()
        if not (self.current.kind == "ident" and self.current.text.lower() in COMPARISON_OPS):
            if isinstance(left, (Field, Literal)):
                return self.as_predicate(left, start)
            return left
        op_token = self.advance()
        op: ComparisonOp = op_token.text.lower()  # type: ignore[assignment]
        right_token = self.current
        right = self.parse_unary()
        return self.make_comparison(op, left, right, start, right_token)

    def as_predicate(self, operand: Field | Literal, token: Token) -> Expr:
        if isinstance(operand, Field):
            return BoolField(operand)
        if isinstance(operand.value, bool):
            return Constant(operand.value)
        raise self.error("expected a boolean expression", token)

    def make_comparison(
        self, op: ComparisonOp, left: object, right: object, start: Token, right_token: Token
    ) -> Compare:
        if isinstance(left, Field) and isinstance(right, Literal):
            return Compare(op, left, right)
        if isinstance(left, Literal) and isinstance(right, Field):
            return Compare(FLIPPED[op], right, left)
        if isinstance(left, Field) and isinstance(right, Field):
            raise self.error(
                "expected a literal (one side of a comparison must be a constant)", right_token
            )
        if isinstance(left, Literal) and isinstance(right, Literal):
            raise self.error(
                "expected a field path (one side of a comparison must be a field)", right_token
            )
        raise self.error(
            "expected a field or literal operand; put a negated or grouped comparison in "
            "parentheses",
            start if not isinstance(left, (Field, Literal)) else right_token,
        )

    def parse_unary(self) -> Expr | Field | Literal:
        if self.is_keyword("not"):
            self.enter(self.advance())
            operand_token = self.current
            operand = self.parse_unary()
            self.leave()
            if isinstance(operand, Literal):
                operand = self.as_predicate(operand, operand_token)
            elif isinstance(operand, Field):
                operand = BoolField(operand)
            return Not(operand)
        return self.parse_primary()

    def parse_primary(self) -> Expr | Field | Literal:
        token = self.current
        if token.kind == "punct" and token.text == "(":
            self.enter(self.advance())
            expr = self.parse_or()
            self.expect_punct(")")
            self.leave()
            return expr
        if token.kind in ("string", "number", "datetime"):
            self.advance()
            return Literal(token.value)
        if token.kind == "ident":
            return self.parse_identifier()
        raise self.error("expected a field, a literal, 'not', 'search.in' or '('")

    def parse_identifier(self) -> Expr | Field | Literal:
        token = self.advance()
        word = token.text
        lowered = word.lower()
        if lowered in ("true", "false", "null"):
            return Literal({"true": True, "false": False, "null": None}[lowered])
        if lowered == "search.in":
            return self.parse_search_in()
        if "." in word:
            raise ODataError(
                f"unsupported function or invalid field name {word!r}", token.position, self.text
            )
        if lowered in ("and", "or", "not", *COMPARISON_OPS):
            raise self.error("expected a field, a literal or '('", token)
        path = [word]
        while self.current.kind == "punct" and self.current.text == "/":
            self.advance()
            segment = self.current
            if segment.kind != "ident" or not IDENTIFIER.fullmatch(segment.text):
                raise self.error("expected a field name after '/'")
            self.advance()
            if (
                segment.text in ("any", "all")
                and self.current.text == "("
                and self.current.kind == "punct"
            ):
                return self.parse_lambda(Field("/".join(path)), segment.text, token)
            path.append(segment.text)
        return Field("/".join(path))

    def parse_search_in(self) -> SearchIn:
        self.expect_punct("(")
        field_token = self.current
        field = self.parse_primary()
        if not isinstance(field, Field):
            raise self.error(
                "expected a field path as the first argument of search.in", field_token
            )
        self.expect_punct(",")
        values_token = self.expect_string("a string of values")
        delimiters = DEFAULT_DELIMITERS
        if self.current.kind == "punct" and self.current.text == ",":
            self.advance()
            delim_token = self.expect_string("a string of delimiter characters")
            delimiters = delim_token.value
            if not delimiters:
                raise ODataError(
                    "search.in delimiters must not be empty", delim_token.position, self.text
                )
        self.expect_punct(")")
        pattern = "[" + re.escape(delimiters) + "]"
        values = tuple(v for v in re.split(pattern, values_token.value) if v != "")
        return SearchIn(field, values)

    def expect_string(self, what: str) -> Token:
        if self.current.kind != "string":
            raise self.error(f"expected {what} in single quotes")
        return self.advance()

    def parse_lambda(self, field: Field, kind: str, start: Token) -> Any_ | All:
        self.expect_punct("(")
        if self.current.kind == "punct" and self.current.text == ")":
            if kind == "all":
                raise self.error("expected a lambda 'var: predicate' for all()")
            self.advance()
            return Any_(field, None, None)
        var_token = self.current
        if var_token.kind != "ident" or not IDENTIFIER.fullmatch(var_token.text):
            raise self.error("expected a range variable name")
        self.advance()
        self.expect_punct(":")
        self.enter(var_token)
        self.variables.append(var_token.text)
        try:
            predicate = self.parse_or()
        finally:
            self.variables.pop()
        self.expect_punct(")")
        self.leave()
        if kind == "any":
            return Any_(field, var_token.text, predicate)
        return All(field, var_token.text, predicate)


def _balanced(kind: type[And] | type[Or], operands: list[Expr]) -> Expr:
    """``a op b op c ...`` as a balanced tree (left-heavy, so three operands nest as before).

    The operator is associative, so the meaning and the left-to-right order are unchanged;
    the depth is logarithmic instead of one level per operand.
    """
    if len(operands) == 1:
        return operands[0]
    middle = (len(operands) + 1) // 2
    return kind(_balanced(kind, operands[:middle]), _balanced(kind, operands[middle:]))


def parse_filter(text: str) -> Expr:
    """Parse an OData filter into an immutable AST.

    Args:
        text: The filter, e.g. ``"category eq 'guide' and year ge 2020"``.

    Returns:
        The root expression.

    Raises:
        ODataError: With the 0-based ``position`` of the first problem; also for a filter
            longer than ``MAX_FILTER_LENGTH`` characters, nested deeper than ``MAX_NESTING``
            or joining more than ``MAX_CONDITIONS`` conditions, and for numbers out of range.

    """
    return _parse_cached(text)


@functools.lru_cache(maxsize=256)
def _parse_cached(text: str) -> Expr:
    # a request's filter is parsed when it is checked and again by every search it reaches
    # (subqueries x sources): parse it once; the AST is immutable, so sharing it is safe
    return _Parser(text).parse()
