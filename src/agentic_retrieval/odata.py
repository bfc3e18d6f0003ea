"""OData ``$filter`` expressions as Azure AI Search understands them: parse, evaluate, to SQL.

Supported subset:

- comparisons ``eq ne gt ge lt le`` between a field path and a literal (either side);
- ``and``, ``or``, ``not`` and parentheses, with Azure's precedence
  (``not`` > comparison > ``and`` > ``or``); as in Azure, ``not`` applies to the operand right
  after it, so a negated comparison needs parentheses: ``not (rating gt 3)``;
- literals: ``'strings'`` (``''`` escapes a quote), numbers, ``true``/``false``, ``null`` and
  ISO 8601 date-times with an offset (``2024-01-01T00:00:00Z``);
- ``search.in(field, 'a,b,c')`` with an optional third argument listing delimiter characters
  (default: space and comma);
- collection lambdas ``tags/any(t: t eq 'x')``, ``tags/all(t: ...)`` and ``tags/any()``
  (non-empty);
- bare boolean fields (``isActive``) and field paths with ``/`` (``address/city``).

Semantics shared by the Python evaluator and the SQL compiler (the local store uses SQL, the
in-memory sources use Python; both give the same answer on the same record):

- a missing field is ``null``; ``x eq null`` is true only for null, ``ne`` is the negation of
  ``eq`` (so ``x ne 'a'`` is true when ``x`` is null), and ordering operators are false when
  either side is null;
- values compare only within a type family: strings with strings, numbers with numbers, date-times
  with date-times (record strings holding ISO 8601 date-times are parsed); booleans count as the
  numbers 1 and 0 because SQLite's JSON functions store them that way;
- ``any``/``all`` apply to lists; anything else is an empty collection.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeAlias
from typing import Literal as TypingLiteral

__all__ = [
    "All",
    "And",
    "Any_",
    "BoolField",
    "Compare",
    "Constant",
    "Expr",
    "Field",
    "Literal",
    "Not",
    "ODataError",
    "Or",
    "SearchIn",
    "and_filters",
    "compile_predicate",
    "evaluate_filter",
    "parse_filter",
    "to_sql",
]

ComparisonOp: TypeAlias = TypingLiteral["eq", "ne", "gt", "ge", "lt", "le"]
_COMPARISON_OPS = ("eq", "ne", "gt", "ge", "lt", "le")
_FLIPPED: dict[str, ComparisonOp] = {
    "eq": "eq", "ne": "ne", "gt": "lt", "ge": "le", "lt": "gt", "le": "ge"
}
_SQL_OPS = {"eq": "=", "gt": ">", "ge": ">=", "lt": "<", "le": "<="}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FIELD_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:/[A-Za-z_][A-Za-z0-9_]*)*\Z")
_DEFAULT_DELIMITERS = " ,"


class ODataError(ValueError):
    """A filter that does not parse, or uses something this implementation does not support.

    Attributes:
        position: 0-based character offset in the filter text where the problem was found.
        detail: The message without the position prefix.

    """

    def __init__(self, detail: str, position: int, text: str = "") -> None:
        self.position = position
        self.detail = detail
        self.text = text
        super().__init__(f"Invalid OData filter at position {position}: {detail}")


# --------------------------------------------------------------------------- AST


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


# --------------------------------------------------------------------------- tokenizer


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "ident", "string", "number", "datetime", "punct", "end"
    text: str
    position: int
    value: Any = None


_DATETIME = re.compile(
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,7})?)?(?:Z|[+-]\d{2}:\d{2})"
)
_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "()/,:":
            tokens.append(_Token("punct", ch, i))
            i += 1
        elif ch == "'":
            i = _read_string(text, i, tokens)
        elif m := _DATETIME.match(text, i):
            tokens.append(_Token("datetime", m.group(), i, _parse_datetime_literal(m.group(), i)))
            i = m.end()
        elif m := _NUMBER.match(text, i):
            raw = m.group()
            is_int = re.fullmatch(r"-?\d+", raw) is not None
            tokens.append(_Token("number", raw, i, int(raw) if is_int else float(raw)))
            i = m.end()
        elif m := _WORD.match(text, i):
            tokens.append(_Token("ident", m.group(), i))
            i = m.end()
        else:
            raise ODataError(f"unexpected character {ch!r}", i, text)
    tokens.append(_Token("end", "", n))
    return tokens


def _read_string(text: str, start: int, tokens: list[_Token]) -> int:
    chars: list[str] = []
    i = start + 1
    while i < len(text):
        if text[i] == "'":
            if text.startswith("''", i):
                chars.append("'")
                i += 2
                continue
            tokens.append(_Token("string", text[start : i + 1], start, "".join(chars)))
            return i + 1
        chars.append(text[i])
        i += 1
    raise ODataError("unterminated string literal, expected a closing quote", start, text)


def _parse_datetime_literal(raw: str, position: int) -> datetime:
    try:
        return datetime.fromisoformat(raw)
    except ValueError as exc:
        raise ODataError(f"invalid date-time literal {raw!r}", position) from exc


# --------------------------------------------------------------------------- parser


class _Parser:
    """Recursive descent over the token list; one method per precedence level."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.index = 0
        self.variables: list[str] = []

    @property
    def current(self) -> _Token:
        return self.tokens[self.index]

    def advance(self) -> _Token:
        token = self.tokens[self.index]
        self.index += 1
        return token

    def error(self, detail: str, token: _Token | None = None) -> ODataError:
        token = token or self.current
        found = "end of filter" if token.kind == "end" else repr(token.text)
        return ODataError(f"{detail}, found {found}", token.position, self.text)

    def is_keyword(self, word: str) -> bool:
        return self.current.kind == "ident" and self.current.text.lower() == word

    def expect_punct(self, ch: str) -> _Token:
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
        left = self.parse_and()
        while self.is_keyword("or"):
            self.advance()
            left = Or(left, self.parse_and())
        return left

    def parse_and(self) -> Expr:
        left = self.parse_comparison()
        while self.is_keyword("and"):
            self.advance()
            left = And(left, self.parse_comparison())
        return left

    def parse_comparison(self) -> Expr:
        start = self.current
        left = self.parse_unary()
        if not (self.current.kind == "ident" and self.current.text.lower() in _COMPARISON_OPS):
            if isinstance(left, (Field, Literal)):
                return self.as_predicate(left, start)
            return left
        op_token = self.advance()
        op: ComparisonOp = op_token.text.lower()  # type: ignore[assignment]
        right_token = self.current
        right = self.parse_unary()
        return self.make_comparison(op, left, right, start, right_token)

    def as_predicate(self, operand: Field | Literal, token: _Token) -> Expr:
        if isinstance(operand, Field):
            return BoolField(operand)
        if isinstance(operand.value, bool):
            return Constant(operand.value)
        raise self.error("expected a boolean expression", token)

    def make_comparison(
        self, op: ComparisonOp, left: object, right: object, start: _Token, right_token: _Token
    ) -> Compare:
        if isinstance(left, Field) and isinstance(right, Literal):
            return Compare(op, left, right)
        if isinstance(left, Literal) and isinstance(right, Field):
            return Compare(_FLIPPED[op], right, left)
        if isinstance(left, Field) and isinstance(right, Field):
            raise self.error("expected a literal (one side of a comparison must be a constant)",
                             right_token)
        if isinstance(left, Literal) and isinstance(right, Literal):
            raise self.error("expected a field path (one side of a comparison must be a field)",
                             right_token)
        raise self.error(
            "expected a field or literal operand; put a negated or grouped comparison in "
            "parentheses", start if not isinstance(left, (Field, Literal)) else right_token
        )

    def parse_unary(self) -> Expr | Field | Literal:
        if self.is_keyword("not"):
            self.advance()
            operand_token = self.current
            operand = self.parse_unary()
            if isinstance(operand, Literal):
                operand = self.as_predicate(operand, operand_token)
            elif isinstance(operand, Field):
                operand = BoolField(operand)
            return Not(operand)
        return self.parse_primary()

    def parse_primary(self) -> Expr | Field | Literal:
        token = self.current
        if token.kind == "punct" and token.text == "(":
            self.advance()
            expr = self.parse_or()
            self.expect_punct(")")
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
            raise ODataError(f"unsupported function or invalid field name {word!r}",
                             token.position, self.text)
        if lowered in ("and", "or", "not", *_COMPARISON_OPS):
            raise self.error("expected a field, a literal or '('", token)
        path = [word]
        while self.current.kind == "punct" and self.current.text == "/":
            self.advance()
            segment = self.current
            if segment.kind != "ident" or not _IDENTIFIER.fullmatch(segment.text):
                raise self.error("expected a field name after '/'")
            self.advance()
            if segment.text in ("any", "all") and self.current.text == "(" \
                    and self.current.kind == "punct":
                return self.parse_lambda(Field("/".join(path)), segment.text, token)
            path.append(segment.text)
        return Field("/".join(path))

    def parse_search_in(self) -> SearchIn:
        self.expect_punct("(")
        field_token = self.current
        field = self.parse_primary()
        if not isinstance(field, Field):
            raise self.error("expected a field path as the first argument of search.in",
                             field_token)
        self.expect_punct(",")
        values_token = self.expect_string("a string of values")
        delimiters = _DEFAULT_DELIMITERS
        if self.current.kind == "punct" and self.current.text == ",":
            self.advance()
            delim_token = self.expect_string("a string of delimiter characters")
            delimiters = delim_token.value
            if not delimiters:
                raise ODataError("search.in delimiters must not be empty",
                                 delim_token.position, self.text)
        self.expect_punct(")")
        pattern = "[" + re.escape(delimiters) + "]"
        values = tuple(v for v in re.split(pattern, values_token.value) if v != "")
        return SearchIn(field, values)

    def expect_string(self, what: str) -> _Token:
        if self.current.kind != "string":
            raise self.error(f"expected {what} in single quotes")
        return self.advance()

    def parse_lambda(self, field: Field, kind: str, start: _Token) -> Any_ | All:
        self.expect_punct("(")
        if self.current.kind == "punct" and self.current.text == ")":
            if kind == "all":
                raise self.error("expected a lambda 'var: predicate' for all()")
            self.advance()
            return Any_(field, None, None)
        var_token = self.current
        if var_token.kind != "ident" or not _IDENTIFIER.fullmatch(var_token.text):
            raise self.error("expected a range variable name")
        self.advance()
        self.expect_punct(":")
        self.variables.append(var_token.text)
        try:
            predicate = self.parse_or()
        finally:
            self.variables.pop()
        self.expect_punct(")")
        if kind == "any":
            return Any_(field, var_token.text, predicate)
        return All(field, var_token.text, predicate)


def parse_filter(text: str) -> Expr:
    """Parse an OData filter into an immutable AST.

    Args:
        text: The filter, e.g. ``"category eq 'guide' and year ge 2020"``.

    Returns:
        The root expression.

    Raises:
        ODataError: With the 0-based ``position`` of the first problem.

    """
    return _Parser(text).parse()


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


def and_filters(*filters: str | None) -> str | None:
    """AND the non-empty filters together, each in parentheses.

    This is how a caller's ``filterAddOn`` or a source's own filter is combined with a
    planner's filter: the result can only narrow what each part allows, never widen it (an
    ``or`` inside one part cannot escape its parentheses). A single filter is returned as
    is, so combining in two places never stacks parentheses.

    Returns:
        ``"(a) and (b)"``, ``"a"`` for one filter, or ``None`` when every filter is ``None``
        or blank.

    """
    parts = [f.strip() for f in filters if f is not None and f.strip()]
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    return " and ".join(f"({part})" for part in parts)


# --------------------------------------------------------------------------- Python evaluator

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
        left, right = _as_datetime(value), _as_utc(literal)
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


def _as_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _as_datetime(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return _as_utc(value)
    if isinstance(value, str) and _ISO_DATE_PREFIX.match(value):
        try:
            return _as_utc(datetime.fromisoformat(value))
        except ValueError:
            return None
    return None


# --------------------------------------------------------------------------- SQL compiler


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


class _SqlCompiler:
    def __init__(self, column: Callable[[str], str]) -> None:
        self.column = column
        self.params: list[Any] = []
        self.aliases = 0

    def compile(self, expr: Expr, scope: Mapping[str, str]) -> str:
        match expr:
            case Constant(value):
                return "1" if value else "0"
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

    def field(self, field: Field, scope: Mapping[str, str]) -> str:
        if not _FIELD_PATH.match(field.path):
            raise ODataError(f"invalid field path {field.path!r}", 0)
        head, *rest = field.path.split("/")
        if head not in scope:
            return self.column(field.path)
        element = scope[head]
        if not rest:
            return f"{element}.value"
        json_path = "$." + ".".join(rest)
        return (f"(CASE WHEN {element}.type = 'object' "
                f"THEN json_extract({element}.value, '{json_path}') END)")

    def compare(self, op: str, col: str, literal: Any) -> str:
        if op == "ne":
            return f"(NOT {self.compare('eq', col, literal)})"
        if literal is None:
            return f"({col} IS NULL)" if op == "eq" else "0"
        sql_op = _SQL_OPS[op]
        if isinstance(literal, datetime):
            self.params.append(_as_utc(literal).strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
            return (f"IFNULL(typeof({col}) = 'text' AND {col} GLOB '[0-9][0-9][0-9][0-9]-*' "
                    f"AND julianday({col}) {sql_op} julianday(?), 0)")
        if isinstance(literal, str):
            self.params.append(literal)
            return f"IFNULL(typeof({col}) = 'text' AND {col} {sql_op} ?, 0)"
        self.params.append(int(literal) if isinstance(literal, bool) else literal)
        return f"IFNULL(typeof({col}) IN ('integer', 'real') AND {col} {sql_op} ?, 0)"

    def search_in(self, col: str, values: tuple[str, ...]) -> str:
        if not values:
            return "0"
        self.params.extend(values)
        marks = ", ".join("?" for _ in values)
        return f"IFNULL(typeof({col}) = 'text' AND {col} IN ({marks}), 0)"

    def lambda_(
        self,
        col: str,
        variable: str | None,
        predicate: Expr | None,
        kind: str,
        scope: Mapping[str, str],
    ) -> str:
        array = (f"(CASE WHEN json_valid({col}) AND json_type({col}) = 'array' "
                 f"THEN {col} ELSE '[]' END)")
        if predicate is None or variable is None:
            return f"(json_array_length({array}) > 0)"
        self.aliases += 1
        alias = f"odata_e{self.aliases}"
        inner = self.compile(predicate, {**scope, variable: alias})
        if kind == "any":
            return f"EXISTS (SELECT 1 FROM json_each({array}) AS {alias} WHERE {inner})"
        return f"NOT EXISTS (SELECT 1 FROM json_each({array}) AS {alias} WHERE NOT {inner})"
