"""OData filters and permission trimming as tantivy queries, applied before top-k.

The lexical engine answers ``top`` hits from tantivy, so a filter or a permission check
applied afterwards could return fewer than ``top`` while more match. Here both become
tantivy query clauses that restrict the candidates the engine ranks, with exactly the
semantics of the SQL path (:func:`~agentic_retrieval.odata.to_sql` over SQLite's
``json_extract``, a field read with ``coalesce(chunk value, file value)`` where both levels
hold it; see :mod:`agentic_retrieval.odata` for the rules).

Tantivy's own JSON typing differs from SQLite's (it turns RFC 3339 strings into dates, keeps
booleans apart from numbers, flattens arrays into their paths, and ranges need a fast field),
so each chunk's filterable fields are indexed in an encoding made for those rules
(:func:`add_filter_values`), as flat keys (the OData path, ``a/b``) in a few namespaces:

- ``filter_terms`` (indexed JSON, raw tokens): ``p`` the paths holding a non-null value
  (``eq null``), ``c`` the paths holding a non-empty collection (``any()``), ``s`` string
  values and ``es``/``os`` strings of collection elements (scalars, and leaves of object
  elements under ``path/leaf``); strings carry a ``=`` prefix so tantivy never reads one as
  a date;
- ``filter_numbers`` (fast JSON): ``n`` numbers (booleans are 1 and 0, as SQLite's JSON
  functions give them; every number a float, so ``1`` and ``1.0`` are one value), ``d`` the
  Julian day SQLite's ``julianday()`` gives a date-like string (the SQL path compares
  date-times that way), and ``en``/``ed``/``on``/``od`` the same for collection elements.

The lexical engine (issue 21) calls :func:`add_filter_fields` when it builds its schema,
:func:`add_filter_values` and :func:`principal_terms` for each chunk's document, and
:func:`constraint_clauses` plus :func:`restrict` for each search.

Filter shapes without an exact equivalent raise
:class:`~agentic_retrieval.errors.UnsupportedFilterError`; the store then restricts by the SQL
path instead (:func:`rid_set_query`, :func:`split_filter`). No query
text is built from a caller's string: values travel as tantivy term objects, and the one
parsed query (a numeric range, which tantivy-py only builds from query text on a JSON path)
is made of a validated identifier path and a number formatted here.
"""

from __future__ import annotations

import functools
import json
import math
import re
import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from types import MappingProxyType
from typing import Any

import tantivy
from tantivy import Occur, Query

from agentic_retrieval.errors import PermissionsNotEnforceableError, UnsupportedFilterError
from agentic_retrieval.odata import (
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
from agentic_retrieval.odata.evaluate import as_utc
from agentic_retrieval.permissions import Access
from agentic_retrieval.sources.local.store.permissions import PUBLIC, AccessSummary
from agentic_retrieval.sources.local.store.rows import json_default

FILTER_TERMS_FIELD = "filter_terms"
"""JSON field (indexed, raw tokens): presence, non-empty collections and strings."""
FILTER_NUMBERS_FIELD = "filter_numbers"
"""JSON fast field: numbers and dates (Julian days), so ranges can be answered."""
PRINCIPALS_FIELD = "principals"
"""Raw text field: ``public``, ``unmarked``, or the ``u:<id>``/``g:<id>`` of a restricted file."""
RID_FIELD = "rid"
"""The chunk's row id (an unsigned fast field the engine defines)."""

PUBLIC_TERM = PUBLIC
UNMARKED_TERM = "unmarked"
STRING_PREFIX = "="
"""Before every indexed string: ``=2024-01-01T00:00:00Z`` is text to tantivy, not a date."""
MAX_TERM_BYTES = 16_384
"""Longest path + value indexed as one term. Tantivy drops terms past ~65 KB without a word;
longer strings are left out here instead, and a literal this long is an
``UnsupportedFilterError`` (the SQL path answers it), so no comparison silently misses a
stored value."""
MAX_EXACT_FLOAT = 2.0**53
"""Numbers are indexed as floats: a literal at least this large could equal a different
stored integer once both are rounded, so it goes to the SQL path."""
MAX_DEPTH = 32
"""Deepest object nesting indexed; a filter path deeper than this goes to the SQL path."""

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_DATE_LIKE = re.compile(r"[0-9]{4}-")  # SQL: col GLOB '[0-9][0-9][0-9][0-9]-*'
_JSON_WHITESPACE = " \t\n\r"
_RANGE_OPS = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}


# ---------------------------------------------------------------- schema and documents


def add_filter_fields(builder: tantivy.SchemaBuilder) -> None:
    """Add the fields filters and permissions are answered from to a schema being built."""
    builder.add_json_field(
        FILTER_TERMS_FIELD, stored=False, fast=False, tokenizer_name="raw", index_option="basic"
    )
    builder.add_json_field(
        FILTER_NUMBERS_FIELD, stored=False, fast=True, tokenizer_name="raw", index_option="basic"
    )
    builder.add_text_field(
        PRINCIPALS_FIELD, stored=False, tokenizer_name="raw", index_option="basic"
    )


def principal_terms(access: str | None, principals: Iterable[str] = ()) -> list[str]:
    """The ``principals`` values of a file's chunks.

    Args:
        access: ``files.access``: ``public``, ``restricted`` or ``None`` (unmarked).
        principals: The file's ``file_principals`` (``u:<id>``, ``g:<id>``); read only when
            restricted. None at all: nobody may see it.
    """
    if access is None:
        return [UNMARKED_TERM]
    if access == PUBLIC_TERM:
        return [PUBLIC_TERM]
    return [p for p in principals if p not in (PUBLIC_TERM, UNMARKED_TERM)]


def add_filter_values(
    document: tantivy.Document,
    chunk_metadata: str | Mapping[str, Any],
    file_fields: str | Mapping[str, Any] = "{}",
) -> None:
    """Add a chunk's filterable fields to its tantivy document.

    Args:
        document: The chunk's document being built.
        chunk_metadata: The chunk's own fields: the JSON text stored in ``chunks.metadata``
            (a mapping is serialised as the store serialises it).
        file_fields: The fields its file's chunks share (``files.fields``), read where the
            chunk has no value (SQL's ``coalesce``).
    """
    if isinstance(chunk_metadata, str) and isinstance(file_fields, str):
        terms, numbers = _encoded(chunk_metadata, file_fields)
    else:
        terms, numbers = filter_values(chunk_metadata, file_fields)
    if terms:
        document.add_json(FILTER_TERMS_FIELD, terms)
    if numbers:
        document.add_json(FILTER_NUMBERS_FIELD, numbers)


@functools.lru_cache(maxsize=8)
def _encoded(chunk_metadata: str, file_fields: str) -> tuple[dict[str, Any], dict[str, Any]]:
    # cached: a file's chunks are written one after another with the same shared fields (and
    # mostly the same own fields, ``{}``), so a document of 3,000 collection values and 30
    # chunks is encoded once, not 30 times (issue 27: that was most of a heavy batch's time).
    # tantivy copies the objects into each document; nothing here changes them.
    return filter_values(chunk_metadata, file_fields)


def filter_values(
    chunk_metadata: str | Mapping[str, Any], file_fields: str | Mapping[str, Any] = "{}"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``filter_terms`` and ``filter_numbers`` objects of one chunk (see the module doc)."""
    chunk, shared = _paths(chunk_metadata), _paths(file_fields)
    encoder = _Encoder()
    for path in chunk.keys() | shared.keys():
        value = chunk.get(path)
        encoder.add(path, value if value is not None else shared.get(path))
    return encoder.finish()


def _paths(value: str | Mapping[str, Any]) -> Mapping[str, Any]:
    """The identifier paths of stored JSON text (or a mapping) and their values."""
    return _paths_of_text(value) if isinstance(value, str) else _flatten(_as_json(value))


@functools.lru_cache(maxsize=64)
def _paths_of_text(text: str) -> Mapping[str, Any]:
    # cached: a file's chunks are written one after another with the same shared fields
    return MappingProxyType(_flatten(json.loads(text)))


def _as_json(value: str | Mapping[str, Any]) -> Any:
    if isinstance(value, str):
        return json.loads(value)
    return json.loads(json.dumps(dict(value), default=json_default))


def _flatten(value: Any) -> dict[str, Any]:
    """Every identifier path of a JSON object (``a``, ``a/b``), as ``json_extract`` reads it."""
    out: dict[str, Any] = {}

    def walk(obj: Mapping[str, Any], prefix: str, depth: int) -> None:
        for key, item in obj.items():
            if not _IDENTIFIER.match(key):
                continue  # no OData path can name it
            path = prefix + key
            out.setdefault(path, item)
            if isinstance(item, dict) and depth < MAX_DEPTH:
                walk(item, path + "/", depth + 1)

    if isinstance(value, dict):
        walk(value, "", 1)
    return out


class _Encoder:
    def __init__(self) -> None:
        self.terms: dict[str, Any] = {}
        self.numbers: dict[str, Any] = {}
        self.dates: list[tuple[str, str, str, bool]] = []  # (namespace, key, text, many)

    def add(self, path: str, value: Any) -> None:
        if value is None:
            return
        self.terms.setdefault("p", []).append(path)
        if isinstance(value, list):
            self.collection(path, value)
        elif isinstance(value, str):
            self.scalar("", path, value, many=False)
            items = _json_array(value)  # SQL's any() reads a string holding a JSON array
            if items is not None:
                self.collection(path, items)
        elif not isinstance(value, dict):
            self.scalar("", path, value, many=False)

    def collection(self, path: str, items: Sequence[Any]) -> None:
        if items:
            self.terms.setdefault("c", []).append(path)
        for item in items:
            if isinstance(item, dict):
                for leaf, value in _flatten(item).items():
                    if not isinstance(value, dict | list):
                        self.scalar("o", f"{path}/{leaf}", value, many=True)
            elif not isinstance(item, list):
                self.scalar("e", path, item, many=True)

    def scalar(self, kind: str, key: str, value: Any, *, many: bool) -> None:
        if value is None:
            return
        if isinstance(value, str):
            if _term_bytes(key, value) <= MAX_TERM_BYTES:  # None: not UTF-8 (a lone surrogate)
                _put(self.terms, kind + "s", key, STRING_PREFIX + value, many)
            if _DATE_LIKE.match(value):
                self.dates.append((kind + "d", key, value, many))
            return
        number = _number(value)
        if number is not None:
            _put(self.numbers, kind + "n", key, number, many)

    def finish(self) -> tuple[dict[str, Any], dict[str, Any]]:
        days = julian_days([text for _, _, text, _ in self.dates])
        for (namespace, key, _, many), day in zip(self.dates, days, strict=True):
            if day is not None:
                _put(self.numbers, namespace, key, day, many)
        return self.terms, self.numbers


def _put(target: dict[str, Any], namespace: str, key: str, value: Any, many: bool) -> None:
    space = target.setdefault(namespace, {})
    if many:
        space.setdefault(key, []).append(value)
    else:
        space[key] = value


def _number(value: Any) -> float | None:
    """A JSON number (or boolean, SQLite's 1/0) as the float indexed; ``None`` if not finite."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer past float's range: SQLite reads it as infinite
        return None
    return number + 0.0 if math.isfinite(number) else None  # -0.0 and 0.0 are one value


def _json_array(text: str) -> list[Any] | None:
    """The items of a string holding a JSON array (``json_valid`` and ``json_type='array'``)."""
    if not text.lstrip(_JSON_WHITESPACE).startswith("["):
        return None
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except ValueError:
        return None
    return value if isinstance(value, list) else None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _term_bytes(key: str, value: str) -> float:
    """The size of a term; infinite when ``value`` cannot be UTF-8 (tantivy cannot hold it).

    A text longer than :data:`MAX_TERM_BYTES` characters is over the limit whatever its
    encoding (a character is at least a byte): it is never encoded, since encoding a document's
    15 MiB field once per chunk made the outbox grow the server's memory by 338 MB.
    """
    if len(key) + len(value) + 8 > MAX_TERM_BYTES:
        return math.inf
    try:
        return len(key.encode()) + len(value.encode()) + 8
    except UnicodeEncodeError:  # a lone surrogate, which JSON's \ud800 escape can carry
        return math.inf


_local = threading.local()


def julian_days(texts: Sequence[str]) -> list[float | None]:
    """SQLite's ``julianday()`` of each text (``None`` where it gives NULL).

    The SQL path compares date-times as ``julianday(value) op julianday(literal)``; the same
    function computes both sides here, so the comparison is the same one.
    """
    if not texts:
        return []
    conn = getattr(_local, "conn", None)
    if conn is None:
        conn = _local.conn = sqlite3.connect(":memory:")
    rows = conn.execute(
        "SELECT julianday(value) FROM json_each(?) ORDER BY key", (json.dumps(list(texts)),)
    )
    return [None if day is None else float(day) + 0.0 for (day,) in rows]


def _julian_day(value: datetime) -> float | None:
    """``julianday(?)`` of a date-time literal, formatted as the SQL path binds it."""
    (day,) = julian_days([as_utc(value).strftime("%Y-%m-%dT%H:%M:%S.%fZ")])
    return day


# ---------------------------------------------------------------- queries


def permission_query(
    schema: tantivy.Schema, access: Access, summary: AccessSummary
) -> Query | None:
    """The permission clause for ``access`` (``None``: every chunk is visible).

    The same rule as the store's SQL: elevated sees everything; otherwise public documents,
    those naming one of the caller's principals, and unmarked ones unless enforced.

    Raises:
        PermissionsNotEnforceableError: Enforced, and no document carries permissions.
    """
    if access.elevated:
        return None
    if access.enforce and not summary.has_permissions and summary.unmarked:
        raise PermissionsNotEnforceableError(
            "the store holds no permission metadata (it was indexed without permissions), "
            "so it cannot be searched while permissions are enforced"
        )
    if not summary.restricted and not (access.enforce and summary.unmarked):
        return None
    terms = [PUBLIC_TERM, *access.principals()]
    if not access.enforce:
        terms.append(UNMARKED_TERM)
    return Query.term_set_query(schema, PRINCIPALS_FIELD, terms)


def restrict(query: Query, clauses: Iterable[Query | None]) -> Query:
    """``query`` limited to chunks every clause matches, scored by ``query`` alone."""
    musts = [(Occur.Must, Query.const_score_query(c, 0.0)) for c in clauses if c is not None]
    if not musts:
        return query
    return Query.boolean_query([(Occur.Must, query), *musts])


def rid_set_query(schema: tantivy.Schema, rids: Iterable[int]) -> Query:
    """The chunks whose row id is one of ``rids`` (the SQL path's allow-list)."""
    return Query.term_set_query(schema, RID_FIELD, [int(r) for r in rids])


def compile_filter(schema: tantivy.Schema, expr: Expr) -> Query:
    """A parsed OData filter as a tantivy query over the fields :func:`add_filter_values` fills.

    Raises:
        UnsupportedFilterError: The filter (or a part of it) has no exact equivalent here.
    """
    return _Compiler(schema).walk(expr)


def constraint_clauses(
    schema: tantivy.Schema,
    filter_expr: Expr | None,
    access: Access,
    summary: AccessSummary,
) -> tuple[list[Query], Expr | None]:
    """Everything a search must restrict its candidates by, for :func:`restrict`.

    Returns:
        ``(clauses, residual)``: the permission clause and the filter's conjuncts tantivy
        answers exactly, and the rest of the filter (``None`` when there is none), which the
        store answers from SQL (an allow-list of row ids: :func:`rid_set_query`).

    Raises:
        PermissionsNotEnforceableError: Enforced, and no document carries permissions.
    """
    clauses: list[Query] = []
    permission = permission_query(schema, access, summary)
    if permission is not None:
        clauses.append(permission)
    if filter_expr is None:
        return clauses, None
    compiled, residual = split_filter(schema, filter_expr)
    if compiled is not None:
        clauses.append(compiled)
    return clauses, residual


def split_filter(schema: tantivy.Schema, expr: Expr) -> tuple[Query | None, Expr | None]:
    """The filter's top-level ``and`` conjuncts that compile, and the rest for SQL.

    Returns:
        ``(query, residual)``: the compiled conjuncts (``None`` if none compiles) and the
        conjuncts that do not, joined by ``and`` (``None`` when all compiled).
    """
    compiler = _Compiler(schema)
    compiled: list[Query] = []
    residual: Expr | None = None
    for conjunct in _conjuncts(expr):
        try:
            compiled.append(compiler.walk(conjunct))
        except UnsupportedFilterError:
            residual = conjunct if residual is None else And(residual, conjunct)
    if not compiled:
        return None, residual
    query = compiled[0] if len(compiled) == 1 else _all_of(compiled)
    return query, residual


def _conjuncts(expr: Expr) -> list[Expr]:
    if isinstance(expr, And):
        return _conjuncts(expr.left) + _conjuncts(expr.right)
    return [expr]


def _all_of(queries: Sequence[Query]) -> Query:
    return Query.boolean_query([(Occur.Must, q) for q in queries])


def _any_of(queries: Sequence[Query]) -> Query:
    return Query.boolean_query([(Occur.Should, q) for q in queries])


def _negate(query: Query) -> Query:
    return Query.boolean_query([(Occur.Must, Query.all_query()), (Occur.MustNot, query)])


def _format_number(value: float) -> str:
    """Exact decimal text of a float that tantivy's query grammar reads as a float.

    Not ``repr``: the grammar rejects ``-1e-301``. Always with a point: ``2`` would be read
    as an integer, and a range with an integer and a float bound panics in tantivy 0.27.
    """
    text = format(Decimal(value), "f")
    return text if "." in text else text + ".0"


_parsers: dict[int, tuple[tantivy.Schema, tantivy.Index]] = {}
_parsers_lock = threading.Lock()


def _parser(schema: tantivy.Schema) -> tantivy.Index:
    """An empty in-memory index of ``schema``, to parse range queries with.

    A parsed query names fields by their number in the schema, so it runs on any index of the
    same schema: the engine's live index need not be at hand (nor its tokenizers: a numeric
    range tokenizes nothing).
    """
    with _parsers_lock:
        entry = _parsers.get(id(schema))
        if entry is None or entry[0] is not schema:
            if len(_parsers) >= 16:  # schemas are module constants: a few at most
                _parsers.clear()
            entry = _parsers[id(schema)] = (schema, tantivy.Index(schema))
        return entry[1]


class _Compiler:
    def __init__(self, schema: tantivy.Schema) -> None:
        self.schema = schema
        self.index = _parser(schema)

    # -- paths and terms

    def terms_path(self, namespace: str, key: str) -> str:
        return f"{FILTER_TERMS_FIELD}.{namespace}.{key}"

    def numbers_path(self, namespace: str, key: str) -> str:
        return f"{FILTER_NUMBERS_FIELD}.{namespace}.{key}"

    def listed(self, namespace: str, path: str) -> Query:
        """Chunks whose ``namespace`` list (``p`` or ``c``) holds ``path``."""
        return Query.term_query(self.schema, f"{FILTER_TERMS_FIELD}.{namespace}", path)

    @staticmethod
    def key(field: Field, prefix: str = "") -> str:
        path = field.path[len(prefix) :] if prefix else field.path
        parts = path.split("/")
        if len(parts) > MAX_DEPTH or not all(_IDENTIFIER.match(p) for p in parts):
            raise UnsupportedFilterError(f"field path {field.path!r}")
        if _term_bytes(path, "") > MAX_TERM_BYTES:
            raise UnsupportedFilterError("a very long field path")
        return path

    # -- the walk

    def walk(self, node: Expr) -> Query:
        match node:
            case Constant(value):
                return Query.all_query() if value else Query.empty_query()
            case Compare(op, field, literal):
                return self.compare(op, "", self.key(field), literal.value)
            case BoolField(field):
                return self.compare("eq", "", self.key(field), True)
            case And(left, right):
                return _all_of([self.walk(left), self.walk(right)])
            case Or(left, right):
                return _any_of([self.walk(left), self.walk(right)])
            case Not(operand):
                return _negate(self.walk(operand))
            case SearchIn(field, values):
                return self.search_in("", self.key(field), values)
            case Any_(field, variable, predicate):
                key = self.key(field)
                if predicate is None or variable is None:
                    return self.listed("c", key)
                return self.element(predicate, variable, key)
            case All():
                raise UnsupportedFilterError("all()")
        raise UnsupportedFilterError(f"not an OData expression: {node!r}")

    def compare(self, op: str, kind: str, key: str, value: Any) -> Query:
        """``key op value`` on a field (``kind`` empty) or on collection elements (``e``, ``o``)."""
        if op == "ne":
            if kind:
                raise UnsupportedFilterError("ne inside a lambda")
            return _negate(self.compare("eq", kind, key, value))
        if value is None:
            if kind:
                raise UnsupportedFilterError("null inside a lambda")
            # SQL: ``col IS NULL`` for eq; ordering against null is false
            return _negate(self.listed("p", key)) if op == "eq" else Query.empty_query()
        if isinstance(value, datetime):
            day = _julian_day(value)
            if day is None:  # SQL compares with NULL: never true
                return Query.empty_query()
            return self.numeric(op, kind + "d", key, day)
        if isinstance(value, str):
            if op != "eq":
                raise UnsupportedFilterError("a string range")
            return Query.term_query(
                self.schema, self.terms_path(kind + "s", key), self.string_term(key, value)
            )
        number = _number(value)
        if number is None or abs(number) >= MAX_EXACT_FLOAT:
            raise UnsupportedFilterError("a number beyond 2**53")
        return self.numeric(op, kind + "n", key, number)

    def string_term(self, key: str, value: str) -> str:
        # SQLite compares an array's or object's JSON text as a string: such a literal could
        # match one, and that text is not indexed
        if value.startswith(("[", "{")):
            raise UnsupportedFilterError("a string literal that looks like JSON")
        if _term_bytes(key, value) > MAX_TERM_BYTES:
            raise UnsupportedFilterError("a very long string literal, or one that is not UTF-8")
        return STRING_PREFIX + value

    def numeric(self, op: str, namespace: str, key: str, number: float) -> Query:
        if op == "eq":
            return Query.term_query(self.schema, self.numbers_path(namespace, key), number)
        return self.parsed_range(namespace, key, f"{_RANGE_OPS[op]}{_format_number(number)}")

    def parsed_range(self, namespace: str, key: str, bounds: str) -> Query:
        # tantivy-py's range_query does not take a JSON path: the query text is a validated
        # identifier path and numbers formatted here, nothing a caller wrote; the parsed
        # query is checked to be one range on that path
        query = self.index.parse_query(f"{self.numbers_path(namespace, key)}:{bounds}")
        shown = repr(query)
        if not shown.startswith("Query(RangeQuery") or f"path={namespace}.{key}," not in shown:
            raise UnsupportedFilterError(f"a range on {key!r} did not parse as one")
        return query

    def search_in(self, kind: str, key: str, values: Sequence[str]) -> Query:
        if not values:
            return Query.empty_query()
        terms = [self.string_term(key, v) for v in values]
        return Query.term_set_query(self.schema, self.terms_path(kind + "s", key), terms)

    # -- lambdas

    def element(self, predicate: Expr, variable: str, key: str) -> Query:
        """``key/any(variable: predicate)``: some element satisfies ``predicate``.

        Exact when each condition reads one element: an ``or`` of conditions is an ``or`` of
        "some element satisfies it", and a range's bounds on one value are one range query.
        """
        match predicate:
            case Constant(value):
                return self.listed("c", key) if value else Query.empty_query()
            case Compare(op, field, literal):
                kind, target = self.element_key(field, variable, key)
                return self.compare(op, kind, target, literal.value)
            case BoolField(field):
                kind, target = self.element_key(field, variable, key)
                return self.compare("eq", kind, target, True)
            case SearchIn(field, values):
                kind, target = self.element_key(field, variable, key)
                return self.search_in(kind, target, values)
            case Or(left, right):
                return _any_of(
                    [self.element(left, variable, key), self.element(right, variable, key)]
                )
            case And():
                return self.element_range(predicate, variable, key)
        raise UnsupportedFilterError("an any() predicate this engine cannot tie to one element")

    def element_key(self, field: Field, variable: str, key: str) -> tuple[str, str]:
        """The namespace kind and key of an element field: ``e`` (the element) or ``o``."""
        if field.path == variable:
            return "e", key
        if field.path.startswith(variable + "/"):
            return "o", f"{key}/{self.key(field, variable + '/')}"
        raise UnsupportedFilterError("a field outside the lambda variable inside any()")

    def element_range(self, predicate: Expr, variable: str, key: str) -> Query:
        """``any(t: t ge a and t lt b)``: one range on one element's value."""
        bounds: dict[str, tuple[str, float]] = {}
        target: tuple[str, str] | None = None
        for part in _conjuncts(predicate):
            if not isinstance(part, Compare) or part.op not in _RANGE_OPS:
                raise UnsupportedFilterError("an and inside any() other than one range")
            kind, element = self.element_key(part.field, variable, key)
            value = part.literal.value
            if isinstance(value, datetime):
                day = _julian_day(value)
                if day is None:  # SQL compares with NULL: never true
                    return Query.empty_query()
                here, number = (kind + "d", element), day
            else:
                found = _number(value) if not isinstance(value, str) else None
                if found is None or abs(found) >= MAX_EXACT_FLOAT:
                    raise UnsupportedFilterError("a range inside any() that is not numeric")
                here, number = (kind + "n", element), found
            if target is not None and target != here:
                raise UnsupportedFilterError("an and inside any() over two values")
            target = here
            side = "lower" if part.op in ("gt", "ge") else "upper"
            bounds[side] = _tighter(side, bounds.get(side), (part.op, number))
        assert target is not None  # an And has two conjuncts
        lower, upper = bounds.get("lower"), bounds.get("upper")
        if lower is None or upper is None:
            op, number = lower or upper or ("ge", 0.0)
            return self.numeric(op, target[0], target[1], number)
        if lower[1] > upper[1] or (lower[1] == upper[1] and (lower[0], upper[0]) != ("ge", "le")):
            return Query.empty_query()
        if lower[1].is_integer() != upper[1].is_integer():
            # tantivy reads a whole bound as an integer and panics on a range with an integer
            # and a float bound: the whole one becomes the neighbouring float, same range
            if lower[1].is_integer():
                lower = _fractional_bound(*lower)
            else:
                upper = _fractional_bound(*upper)
        opening = "[" if lower[0] == "ge" else "{"
        closing = "]" if upper[0] == "le" else "}"
        return self.parsed_range(
            *target,
            f"{opening}{_format_number(lower[1])} TO {_format_number(upper[1])}{closing}",
        )


def _fractional_bound(op: str, number: float) -> tuple[str, float]:
    """The same bound on a whole ``number`` (below 2**53) through its fractional neighbour."""
    flipped = {"ge": "gt", "gt": "ge", "le": "lt", "lt": "le"}[op]
    toward = -math.inf if op in ("ge", "lt") else math.inf
    return flipped, math.nextafter(number, toward)


def _tighter(side: str, old: tuple[str, float] | None, new: tuple[str, float]) -> tuple[str, float]:
    """The stricter of two bounds on one side (``gt 3`` over ``ge 3``; ``lt 2`` over ``lt 5``)."""
    if old is None:
        return new
    if old[1] != new[1]:
        keep_new = new[1] > old[1] if side == "lower" else new[1] < old[1]
        return new if keep_new else old
    return new if new[0] in ("gt", "lt") else old
