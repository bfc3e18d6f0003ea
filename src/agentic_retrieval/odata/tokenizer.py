"""Tokens of an OData filter: identifiers, strings, numbers, date-times, punctuation."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentic_retrieval.odata.ast import ODataError


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
        ODataError: At the first character that starts no token.
    """
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
            raw = m.group()
            is_int = re.fullmatch(r"-?\d+", raw) is not None
            tokens.append(Token("number", raw, i, int(raw) if is_int else float(raw)))
            i = m.end()
        elif m := _WORD.match(text, i):
            tokens.append(Token("ident", m.group(), i))
            i = m.end()
        else:
            raise ODataError(f"unexpected character {ch!r}", i, text)
    tokens.append(Token("end", "", n))
    return tokens


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
