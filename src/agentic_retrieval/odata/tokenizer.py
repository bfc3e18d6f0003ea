"""Tokens of an OData filter: identifiers, strings, numbers, date-times, punctuation."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentic_retrieval.errors import ODataError
from agentic_retrieval.odata.ast import INT64_MAX, INT64_MIN, MAX_FILTER_LENGTH


@dataclass(frozen=True, slots=True)
class Token:
    """One lexical token and its 0-based position in the filter text."""

    kind: str  # "ident", "string", "number", "datetime", "punct", "end"
    text: str
    position: int
    value: Any = None


_DATETIME = re.compile(
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,7})?)?(?:Z|[+-]\d{2}:\d{2})"
)
_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens, ending with an ``end`` token.

    Raises:
        ODataError: At the first character that starts no token, for a number out of range,
            or for a text longer than ``MAX_FILTER_LENGTH``.
    """
    if len(text) > MAX_FILTER_LENGTH:
        raise ODataError(
            f"the filter is {len(text)} characters long; the limit is {MAX_FILTER_LENGTH}",
            MAX_FILTER_LENGTH,
            text[:80],
        )
    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "()/,:":
            tokens.append(Token("punct", ch, i))
            i += 1
        elif ch == "'":
            i = _read_string(text, i, tokens)
        elif m := _DATETIME.match(text, i):
            tokens.append(Token("datetime", m.group(), i, _parse_datetime_literal(m.group(), i)))
            i = m.end()
        elif m := _NUMBER.match(text, i):
            tokens.append(Token("number", m.group(), i, _number(m.group(), i)))
            i = m.end()
        elif m := _WORD.match(text, i):
            tokens.append(Token("ident", m.group(), i))
            i = m.end()
        else:
            raise ODataError(f"unexpected character {ch!r}", i, text)
    tokens.append(Token("end", "", n))
    return tokens


def _number(raw: str, position: int) -> int | float:
    """An ``Edm.Int64`` or ``Edm.Double`` literal; anything out of range is a filter error."""
    if re.fullmatch(r"-?\d+", raw):
        # compare digit counts first: int() of a 5,000-digit text is slow or refused
        if len(raw.lstrip("-").lstrip("0")) <= 19:
            value = int(raw)
            if INT64_MIN <= value <= INT64_MAX:
                return value
        raise ODataError(
            f"integer {_abbreviated(raw)} is out of range (from {INT64_MIN} to {INT64_MAX})",
            position,
        )
    number = float(raw)
    if not math.isfinite(number):
        raise ODataError(f"number {_abbreviated(raw)} is out of range", position)
    return number


def _abbreviated(raw: str) -> str:
    return raw if len(raw) <= 40 else f"{raw[:20]}... ({len(raw)} characters)"


def _read_string(text: str, start: int, tokens: list[Token]) -> int:
    chars: list[str] = []
    i = start + 1
    while i < len(text):
        if text[i] == "'":
            if text.startswith("''", i):
                chars.append("'")
                i += 2
                continue
            tokens.append(Token("string", text[start : i + 1], start, "".join(chars)))
            return i + 1
        chars.append(text[i])
        i += 1
    raise ODataError("unterminated string literal, expected a closing quote", start, text)


def _parse_datetime_literal(raw: str, position: int) -> datetime:
    try:
        return datetime.fromisoformat(raw)
    except ValueError as exc:
        raise ODataError(f"invalid date-time literal {raw!r}", position) from exc
